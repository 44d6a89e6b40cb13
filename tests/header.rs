//! `include/t2p.h` must be exactly what cbindgen generates from `src/ffi` now.
//! Regenerate with `T2P_BLESS=1 cargo test --test header`.
//!
//! cbindgen parses `src/ffi/mod.rs` and the modules it declares, nothing else of the crate: the
//! header holds the C ABI and no Rust internals, with no exclusion list to keep up to date.

use std::path::Path;

#[test]
fn committed_header_matches_cbindgen() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let config = cbindgen::Config::from_file(root.join("cbindgen.toml")).expect("cbindgen.toml");
    let mut generated = Vec::new();
    cbindgen::Builder::new()
        .with_src(root.join("src/ffi/mod.rs"))
        .with_config(config)
        .generate()
        .expect("cbindgen generates the header")
        .write(&mut generated);
    let generated = String::from_utf8(generated).expect("utf-8 header");
    let path = root.join("include/t2p.h");
    if std::env::var_os("T2P_BLESS").is_some() {
        std::fs::write(&path, &generated).expect("write include/t2p.h");
    }
    let committed = std::fs::read_to_string(&path).unwrap_or_default();
    assert!(
        committed == generated,
        "include/t2p.h differs from what cbindgen generates; run `T2P_BLESS=1 cargo test --test header` and commit it"
    );
}
