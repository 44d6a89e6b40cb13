//! Status codes and the panic boundary.

use std::panic::{AssertUnwindSafe, catch_unwind};

use crate::error::Error;

/// Result of a C ABI call. The numbers are stable.
#[repr(u32)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum T2pStatus {
    /// Success.
    Ok = 0,
    /// A required pointer was NULL.
    NullPointer = 1,
    /// A dimension or row range does not fit the layout (see the function's docs).
    InvalidShape = 2,
    /// A buffer is shorter than the shape requires.
    BufferTooSmall = 3,
    /// A block buffer is not aligned like its blocks.
    Misaligned = 4,
    /// The requested ISA path cannot run on this CPU.
    UnsupportedIsa = 5,
    /// An argument is out of range (unknown ISA, overlapping buffers, ...).
    InvalidArgument = 6,
    /// The library panicked; this is a bug in t2p. The outputs may be partly written.
    Panic = 7,
}

impl From<Error> for T2pStatus {
    fn from(e: Error) -> Self {
        match e {
            Error::Shape(_) => T2pStatus::InvalidShape,
            Error::BufferTooSmall { .. } => T2pStatus::BufferTooSmall,
            Error::UnsupportedIsa(_) => T2pStatus::UnsupportedIsa,
            Error::InvalidArgument(_) => T2pStatus::InvalidArgument,
        }
    }
}

impl T2pStatus {
    /// A static, NUL-terminated description.
    pub(crate) fn message(code: u32) -> &'static [u8] {
        match code {
            0 => b"ok\0",
            1 => b"a required pointer was NULL\0",
            2 => b"invalid shape or row range\0",
            3 => b"buffer too small for the shape\0",
            4 => b"block buffer misaligned\0",
            5 => b"ISA path not supported on this CPU\0",
            6 => b"invalid argument\0",
            7 => b"internal panic (a bug in t2p)\0",
            _ => b"unknown status\0",
        }
    }
}

/// Runs `f`, turning errors into statuses and panics into [`T2pStatus::Panic`].
pub(crate) fn guard(f: impl FnOnce() -> Result<(), T2pStatus>) -> T2pStatus {
    match catch_unwind(AssertUnwindSafe(f)) {
        Ok(Ok(())) => T2pStatus::Ok,
        Ok(Err(status)) => status,
        Err(_) => T2pStatus::Panic,
    }
}
