//! Why a file medium could not be created or opened.
//!
//! Each variant names the path and, where the OS said why, carries its error; `Display`
//! gives one line that says what went wrong and what to do.

use std::fmt;
use std::io;
use std::path::PathBuf;

use super::NativeFlush;

/// Why a medium could not be created or opened.
#[derive(Debug)]
#[non_exhaustive]
pub enum MediumError {
    /// `create` on a path that already exists (pools are never overwritten).
    Exists {
        /// The pool file.
        path: PathBuf,
        /// What the OS said (`EEXIST`).
        source: io::Error,
    },
    /// `open` on a path that does not exist, or `create` in a directory that does not.
    NotFound {
        /// The pool file.
        path: PathBuf,
        /// What the OS said (`ENOENT`).
        source: io::Error,
    },
    /// The file (or its directory) may not be read and written by this process.
    PermissionDenied {
        /// The pool file.
        path: PathBuf,
        /// What the OS said (`EACCES` or `EPERM`).
        source: io::Error,
    },
    /// `create` with length 0, or `open` of an empty file.
    ZeroSize {
        /// The pool file.
        path: PathBuf,
    },
    /// A length this process cannot map or the file system cannot hold.
    TooLarge {
        /// The pool file.
        path: PathBuf,
        /// The length asked for (or the file's length).
        len: u64,
    },
    /// No space left on the file system for a pool of `len` bytes.
    NoSpace {
        /// The pool file.
        path: PathBuf,
        /// The length asked for.
        len: u64,
    },
    /// Another open file description holds the pool's `flock`.
    Locked {
        /// The pool file.
        path: PathBuf,
    },
    /// `mmap` (or `pmem_map_file`) refused the file.
    MapFailed {
        /// The pool file.
        path: PathBuf,
        /// What the OS (or libpmem) said.
        source: io::Error,
    },
    /// Any other failing system call on the file.
    Io {
        /// The pool file.
        path: PathBuf,
        /// The call that failed.
        op: &'static str,
        /// What the OS said.
        source: io::Error,
    },
    /// `libpmem.so.1` could not be loaded (or lacks a symbol this crate needs).
    LibpmemMissing {
        /// What `dlopen`/`dlsym` said.
        detail: String,
    },
    /// A native flush method this CPU or target does not have was asked for.
    FlushUnsupported {
        /// The method asked for.
        flush: NativeFlush,
    },
}

impl MediumError {
    /// Classifies an OS error from opening or creating `path`.
    pub(crate) fn from_open(path: PathBuf, source: io::Error) -> Self {
        match source.kind() {
            io::ErrorKind::AlreadyExists => Self::Exists { path, source },
            io::ErrorKind::NotFound => Self::NotFound { path, source },
            io::ErrorKind::PermissionDenied => Self::PermissionDenied { path, source },
            _ => Self::Io {
                path,
                op: "open",
                source,
            },
        }
    }

    /// The pool file this error is about, if it is about one.
    pub fn path(&self) -> Option<&std::path::Path> {
        match self {
            Self::Exists { path, .. }
            | Self::NotFound { path, .. }
            | Self::PermissionDenied { path, .. }
            | Self::ZeroSize { path }
            | Self::TooLarge { path, .. }
            | Self::NoSpace { path, .. }
            | Self::Locked { path }
            | Self::MapFailed { path, .. }
            | Self::Io { path, .. } => Some(path),
            Self::LibpmemMissing { .. } | Self::FlushUnsupported { .. } => None,
        }
    }
}

impl fmt::Display for MediumError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Exists { path, source } => write!(
                f,
                "{}: file exists ({source}); a pool is never overwritten: open it, or remove it first",
                path.display()
            ),
            Self::NotFound { path, source } => {
                write!(f, "{}: no such pool file ({source})", path.display())
            }
            Self::PermissionDenied { path, source } => write!(
                f,
                "{}: permission denied ({source}); a pool needs read and write access",
                path.display()
            ),
            Self::ZeroSize { path } => write!(f, "{}: pool size is zero", path.display()),
            Self::TooLarge { path, len } => write!(
                f,
                "{}: pool size {len} bytes is too large to map or to hold on this file system",
                path.display()
            ),
            Self::NoSpace { path, len } => write!(
                f,
                "{}: no space left for a pool of {len} bytes",
                path.display()
            ),
            Self::Locked { path } => write!(
                f,
                "{}: pool already open by another process (or by another handle in this one)",
                path.display()
            ),
            Self::MapFailed { path, source } => {
                write!(f, "{}: mapping the pool failed ({source})", path.display())
            }
            Self::Io { path, op, source } => {
                write!(f, "{}: {op} failed ({source})", path.display())
            }
            Self::LibpmemMissing { detail } => write!(
                f,
                "libpmem.so.1 not found: install libpmem-dev / libpmem1 ({detail})"
            ),
            Self::FlushUnsupported { flush } => write!(
                f,
                "flush method {flush:?} is not available on this CPU or target"
            ),
        }
    }
}

impl std::error::Error for MediumError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Self::Exists { source, .. }
            | Self::NotFound { source, .. }
            | Self::PermissionDenied { source, .. }
            | Self::MapFailed { source, .. }
            | Self::Io { source, .. } => Some(source),
            _ => None,
        }
    }
}
