//! `libt2p`: the command-line face of t2p.
fn main() {}
