//! The one error type of the library. Every variant maps to a stable C status code
//! ([`crate::ffi::T2pStatus`]), so Rust and C callers see the same failure classes.

use std::fmt;

/// Why an operation was refused. Nothing is written to outputs when an error is returned.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Error {
    /// A dimension is not a multiple of what the layout needs, or a range is out of bounds.
    Shape(String),
    /// A buffer is shorter than the shape requires.
    BufferTooSmall {
        /// Which buffer.
        what: &'static str,
        /// Bytes (or elements, as named) the shape needs.
        needed: usize,
        /// Bytes (or elements) provided.
        got: usize,
    },
    /// The requested ISA path cannot run on this CPU (or was not compiled for this target).
    UnsupportedIsa(String),
    /// A name or number that does not denote a known value (ISA name, type id, ...).
    InvalidArgument(String),
}

/// Shorthand for results carrying [`Error`].
pub type Result<T> = std::result::Result<T, Error>;

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::Shape(msg) => write!(f, "invalid shape: {msg}"),
            Error::BufferTooSmall { what, needed, got } => {
                write!(f, "buffer too small: {what} needs {needed}, got {got}")
            }
            Error::UnsupportedIsa(msg) => write!(f, "unsupported ISA: {msg}"),
            Error::InvalidArgument(msg) => write!(f, "invalid argument: {msg}"),
        }
    }
}

impl std::error::Error for Error {}

/// Returns `Err(BufferTooSmall)` unless `got >= needed`.
pub(crate) fn check_len(what: &'static str, needed: usize, got: usize) -> Result<()> {
    if got < needed {
        Err(Error::BufferTooSmall { what, needed, got })
    } else {
        Ok(())
    }
}
