//! Link settings for the C library.

fn main() {
    println!("cargo:rerun-if-changed=src/ffi/hidden-exports.map");
    // The `grammar` feature links llguidance, whose own C API (`llg_*`) rustc would export from
    // libt2p.so beside `t2p_*`; a second version script makes those names local. Only where
    // rustc links with its own LLD by default (x86_64 Linux since Rust 1.90), which merges
    // version scripts: GNU ld refuses a second anonymous one ("anonymous version tag cannot be
    // combined"), so with it (other Linux targets, or LLD turned off) the names stay exported.
    let target = std::env::var("TARGET").unwrap_or_default();
    let flags = std::env::var("CARGO_ENCODED_RUSTFLAGS").unwrap_or_default();
    let lld_off = flags.contains("-lld") || flags.contains("link-self-contained=-linker");
    if target == "x86_64-unknown-linux-gnu"
        && !lld_off
        && std::env::var_os("CARGO_FEATURE_GRAMMAR").is_some()
    {
        let dir = std::env::var("CARGO_MANIFEST_DIR").expect("cargo sets CARGO_MANIFEST_DIR");
        println!(
            "cargo:rustc-cdylib-link-arg=-Wl,--version-script={dir}/src/ffi/hidden-exports.map"
        );
    }
}
