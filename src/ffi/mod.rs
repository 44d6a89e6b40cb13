//! The C ABI (`include/t2p.h`).
