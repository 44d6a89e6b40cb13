//! Reads include/t2p.h with clang (bindgen) into Rust declarations. bindgen's layout tests
//! assert clang's sizes, alignments and offsets of every struct; the tests in src/lib.rs then
//! compare those declarations with the library's own.

fn main() {
    let header = concat!(env!("CARGO_MANIFEST_DIR"), "/../../include/t2p.h");
    println!("cargo:rerun-if-changed={header}");
    let out_dir = std::path::PathBuf::from(std::env::var("OUT_DIR").unwrap());
    // Everything as declared, for constants, enumerators and the width of the status typedef.
    bindgen::Builder::default()
        .header(header)
        .allowlist_type("t2p_.*|T2p.*")
        .allowlist_var("T2P_.*")
        .prepend_enum_name(false)
        .generate()
        .expect("bindgen reads include/t2p.h")
        .write_to_file(out_dir.join("t2p_c_raw.rs"))
        .expect("write bindings");
    let bindings = bindgen::Builder::default()
        .header(header)
        .allowlist_function("t2p_.*")
        .allowlist_type("t2p_.*")
        .allowlist_var("T2P_.*")
        // The status and plan types are the library's own, so signatures can be compared by
        // type; the C typedef of the status is checked to be 32 bits wide, and clang's layout of
        // the plan (in t2p_c_raw.rs) to be Rust's, by tests.
        .blocklist_type("T2pStatus|T2pPlan")
        .raw_line("pub use t2p::ffi::{T2pPlan, T2pStatus};")
        .layout_tests(true)
        .generate()
        .expect("bindgen reads include/t2p.h");
    bindings
        .write_to_file(out_dir.join("t2p_c.rs"))
        .expect("write bindings");
}
