//! Where the shared test data lives, for the runner tests.
//!
//! `T2P_TESTDATA` names the directory; by default it is `<crate>/../shared/testdata`. A missing
//! directory fails the test with a clear message, unless `T2P_TESTDATA_OPTIONAL=1`, in which
//! case the test prints a loud SKIPPED line and passes.

#![allow(dead_code)]

use std::path::{Path, PathBuf};

use t2p::runner::{GgufError, GgufFile, LoadOptions, TensorStore};

/// The test data directory, or `None` (after printing SKIPPED) when it is missing and
/// `T2P_TESTDATA_OPTIONAL=1`. Panics with instructions when it is missing otherwise.
pub fn testdata() -> Option<PathBuf> {
    let dir = std::env::var_os("T2P_TESTDATA")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../shared/testdata"));
    if dir.join("README.md").is_file() {
        return Some(dir);
    }
    if std::env::var("T2P_TESTDATA_OPTIONAL").as_deref() == Ok("1") {
        eprintln!(
            "\n==================== SKIPPED: testdata not found at {} ====================\n",
            dir.display()
        );
        println!("SKIPPED: testdata not found at {}", dir.display());
        return None;
    }
    panic!(
        "test data not found at {} (set T2P_TESTDATA to the shared/testdata directory, or \
         T2P_TESTDATA_OPTIONAL=1 to skip these tests)",
        dir.display()
    );
}

/// `open` applied to `<testdata>/<folder>/<file>`, with the folder: `None` when [`testdata`]
/// skips.
pub fn open_in_testdata<T>(
    folder: &str,
    file: &str,
    open: impl FnOnce(&Path) -> T,
) -> Option<(PathBuf, T)> {
    let dir = testdata()?.join(folder);
    let opened = open(&dir.join(file));
    Some((dir, opened))
}

/// What a test of a synthetic model starts from: the test data, the vocabulary the model
/// copies its tokenizer from, and a temporary directory for the files it writes.
pub struct SynthSetup {
    /// The test data directory.
    pub data: PathBuf,
    /// The GGUF whose `tokenizer.*` metadata the synthetic model takes.
    pub vocab: GgufFile,
    /// Where the test writes its files (removed when dropped).
    pub tmp: tempfile::TempDir,
}

/// The [`SynthSetup`] with `vocab` (a path inside the test data), or `None` when [`testdata`]
/// skips.
pub fn synth_setup(vocab: &str) -> Option<SynthSetup> {
    let data = testdata()?;
    let vocab = GgufFile::open(data.join(vocab)).unwrap();
    let tmp = tempfile::tempdir().unwrap();
    Some(SynthSetup { data, vocab, tmp })
}

impl SynthSetup {
    /// Writes `file` in the temporary directory with `write(path, vocab)` and returns its path.
    pub fn write(
        &self,
        file: &str,
        write: impl FnOnce(&Path, &GgufFile) -> Result<(), GgufError>,
    ) -> PathBuf {
        let path = self.tmp.path().join(file);
        write(&path, &self.vocab).unwrap_or_else(|e| panic!("{file}: {e}"));
        path
    }
}

/// A synthetic model written by [`synth_model`].
pub struct SynthModel {
    /// The test data, the vocabulary and the temporary directory holding the file.
    pub setup: SynthSetup,
    /// The name of the shape written.
    pub shape: &'static str,
    /// The seed of its weights.
    pub seed: u64,
    /// The file, `<shape>.gguf` in the temporary directory.
    pub path: PathBuf,
}

/// The synthetic model of the shape called `shape` (see [`t2p::testkit::write_named`]) with
/// weights from `seed` and the tokenizer of `tokenizer/ggml-vocab-<vocab>.gguf`, written and
/// loaded with the default options; `None` when [`testdata`] skips.
pub fn synth_model(
    vocab: &str,
    shape: &'static str,
    seed: u64,
) -> Option<(SynthModel, GgufFile, TensorStore)> {
    let setup = synth_setup(&format!("tokenizer/ggml-vocab-{vocab}.gguf"))?;
    let path = setup.write(&format!("{shape}.gguf"), |p, v| {
        t2p::testkit::write_named(p, shape, v, seed)
    });
    let (gguf, store) = TensorStore::load_file(&path, &LoadOptions::default()).unwrap();
    let model = SynthModel {
        setup,
        shape,
        seed,
        path,
    };
    Some((model, gguf, store))
}

impl SynthModel {
    /// Writes the same shape and seed again, as `file` in the temporary directory.
    pub fn write_again(&self, file: &str) -> PathBuf {
        self.setup.write(file, |p, v| {
            t2p::testkit::write_named(p, self.shape, v, self.seed)
        })
    }
}

/// Every GGUF file of the shared test data, sorted.
pub fn all_ggufs(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).unwrap() {
            let p = e.unwrap().path();
            if p.is_dir() {
                stack.push(p);
            } else if p.extension().is_some_and(|x| x == "gguf") {
                out.push(p);
            }
        }
    }
    out.sort();
    out
}

/// Parses a hex string.
pub fn unhex(s: &str) -> Vec<u8> {
    (0..s.len() / 2)
        .map(|i| u8::from_str_radix(&s[2 * i..2 * i + 2], 16).unwrap())
        .collect()
}

/// Whether the tests run under an emulator: `T2P_EMULATED=1`, which `tests/aarch64-runs.sh`
/// sets for its qemu runs (qemu runs this code 20-35x slower than native). The few tests that
/// are too long for CI's time under emulation size themselves down or skip with
/// [`skip_when_emulated`]; a plain `cargo test --target aarch64-unknown-linux-gnu` runs them all.
pub fn emulated() -> bool {
    std::env::var("T2P_EMULATED").as_deref() == Ok("1")
}

/// `true` (after printing a SKIPPED line with `why`) when [`emulated`]: the caller returns.
pub fn skip_when_emulated(what: &str, why: &str) -> bool {
    if emulated() {
        eprintln!("SKIPPED under emulation (T2P_EMULATED=1): {what}: {why}");
        println!("SKIPPED under emulation: {what}");
    }
    emulated()
}
