//! Link settings for the C library.

fn main() {
    println!("cargo:rerun-if-changed=src/ffi/hidden-exports.map");
    // The `grammar` feature links llguidance, whose own C API (`llg_*`) rustc would export from
    // libt2p.so beside `t2p_*`; on ELF targets a second version script makes those names local.
    let os = std::env::var("CARGO_CFG_TARGET_OS").unwrap_or_default();
    let unix =
        std::env::var("CARGO_CFG_TARGET_FAMILY").is_ok_and(|f| f.split(',').any(|f| f == "unix"));
    let apple = matches!(
        os.as_str(),
        "macos" | "ios" | "tvos" | "watchos" | "visionos"
    );
    let elf = unix && !apple;
    if elf && std::env::var_os("CARGO_FEATURE_GRAMMAR").is_some() {
        let dir = std::env::var("CARGO_MANIFEST_DIR").expect("cargo sets CARGO_MANIFEST_DIR");
        println!(
            "cargo:rustc-cdylib-link-arg=-Wl,--version-script={dir}/src/ffi/hidden-exports.map"
        );
    }
}
