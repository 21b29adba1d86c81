//! Allocation errors: the layout that could not be served and the reason.

use core::alloc::Layout;
use core::fmt;

/// Why an allocation failed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum AllocErrorKind {
    /// The allocator (or the OS or medium behind it) has no memory left for this request.
    OutOfMemory,
    /// The layout has size zero and this allocator does not serve zero-size blocks.
    ZeroSize,
    /// The size is larger than this allocator can ever serve (or overflows when rounded).
    SizeUnsupported,
    /// The alignment is larger than this allocator can honour.
    AlignmentUnsupported,
    /// Something else, described in a few words.
    Other(&'static str),
}

/// An allocation that failed: the layout asked for and why it could not be served.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AllocError {
    /// The layout that was asked for.
    pub layout: Layout,
    /// Why it was refused.
    pub kind: AllocErrorKind,
}

impl AllocError {
    /// An error for `layout` with reason `kind`.
    pub const fn new(layout: Layout, kind: AllocErrorKind) -> Self {
        Self { layout, kind }
    }
}

impl fmt::Display for AllocErrorKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::OutOfMemory => f.write_str("out of memory"),
            Self::ZeroSize => f.write_str("zero-size blocks are not supported"),
            Self::SizeUnsupported => f.write_str("size not supported"),
            Self::AlignmentUnsupported => f.write_str("alignment not supported"),
            Self::Other(what) => f.write_str(what),
        }
    }
}

impl fmt::Display for AllocError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "cannot allocate {} bytes aligned to {}: {}",
            self.layout.size(),
            self.layout.align(),
            self.kind
        )
    }
}

impl core::error::Error for AllocError {}
