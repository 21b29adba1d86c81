//! The rules both file media share: how a pool file is created, opened and locked.
//!
//! A [`PoolFile`] is an open, read-write descriptor of a regular file of non-zero length,
//! under an exclusive `flock` taken without blocking. `flock` locks belong to the open file
//! description, so the lock is held as long as the `PoolFile` lives, a second open of the
//! same file (from any process, this one included) fails with [`MediumError::Locked`], and
//! other descriptors of the file (libpmem opens its own to map it) neither take nor release
//! it. The kernel drops the lock when the process dies, so a killed process leaves no stale
//! lock behind.

use std::fs::{File, OpenOptions};
use std::io;
use std::os::fd::AsRawFd;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

use crate::sync::{AtomicI32, AtomicU64, Ordering};

use super::MediumError;

/// A locked pool file and its length.
#[derive(Debug)]
pub(crate) struct PoolFile {
    file: File,
    path: PathBuf,
    len: usize,
}

impl PoolFile {
    /// Creates `path` (never an existing file: `O_EXCL`), locks it, and gives it `len`
    /// allocated bytes (zeros). On failure after the file was created, the file is removed.
    pub(crate) fn create(path: &Path, len: usize) -> Result<Self, MediumError> {
        let path_buf = path.to_path_buf();
        if len == 0 {
            return Err(MediumError::ZeroSize { path: path_buf });
        }
        if len > isize::MAX as usize {
            return Err(MediumError::TooLarge {
                path: path_buf,
                len: len as u64,
            });
        }
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(path)
            .map_err(|e| MediumError::from_open(path_buf.clone(), e))?;
        let pool = Self {
            file,
            path: path_buf,
            len,
        };
        // If someone opened the new file between our create and our lock, it is theirs now
        // as much as ours: leave it.
        pool.lock()?;
        if let Err(e) = pool.allocate() {
            pool.discard();
            return Err(e);
        }
        Ok(pool)
    }

    /// Opens the existing file `path` for reading and writing, locks it, and takes its
    /// length.
    pub(crate) fn open(path: &Path) -> Result<Self, MediumError> {
        let path_buf = path.to_path_buf();
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .open(path)
            .map_err(|e| MediumError::from_open(path_buf.clone(), e))?;
        let mut pool = Self {
            file,
            path: path_buf,
            len: 0,
        };
        pool.lock()?;
        let metadata = pool.file.metadata().map_err(|source| MediumError::Io {
            path: pool.path.clone(),
            op: "fstat",
            source,
        })?;
        if !metadata.is_file() {
            return Err(MediumError::Io {
                path: pool.path.clone(),
                op: "open",
                source: io::Error::new(io::ErrorKind::InvalidInput, "not a regular file"),
            });
        }
        let len = metadata.len();
        if len == 0 {
            return Err(MediumError::ZeroSize { path: pool.path });
        }
        pool.len = match usize::try_from(len) {
            Ok(len) if len <= isize::MAX as usize => len,
            _ => {
                return Err(MediumError::TooLarge {
                    path: pool.path,
                    len,
                });
            }
        };
        Ok(pool)
    }

    /// Takes the exclusive lock without waiting.
    fn lock(&self) -> Result<(), MediumError> {
        // SAFETY: `flock` on a descriptor this `File` owns and keeps open.
        let rc = unsafe { libc::flock(self.file.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) };
        if rc == 0 {
            return Ok(());
        }
        let source = io::Error::last_os_error();
        if source.kind() == io::ErrorKind::WouldBlock {
            Err(MediumError::Locked {
                path: self.path.clone(),
            })
        } else {
            Err(MediumError::Io {
                path: self.path.clone(),
                op: "flock",
                source,
            })
        }
    }

    /// Gives the file `len` bytes backed by storage, so that running out of space is an error
    /// now rather than a `SIGBUS` at a later store. File systems without `fallocate` get a
    /// sparse `ftruncate` instead.
    fn allocate(&self) -> Result<(), MediumError> {
        let too_large = || MediumError::TooLarge {
            path: self.path.clone(),
            len: self.len as u64,
        };
        let Ok(len) = libc::off_t::try_from(self.len) else {
            return Err(too_large());
        };
        // SAFETY: `posix_fallocate` on a descriptor this `File` owns; it returns the error
        // number instead of setting `errno`.
        let rc = unsafe { libc::posix_fallocate(self.file.as_raw_fd(), 0, len) };
        match rc {
            0 => Ok(()),
            libc::ENOSPC => Err(MediumError::NoSpace {
                path: self.path.clone(),
                len: self.len as u64,
            }),
            libc::EFBIG => Err(too_large()),
            libc::EOPNOTSUPP | libc::EINVAL => {
                self.file.set_len(self.len as u64).map_err(|source| {
                    if source.raw_os_error() == Some(libc::EFBIG) {
                        too_large()
                    } else {
                        MediumError::Io {
                            path: self.path.clone(),
                            op: "ftruncate",
                            source,
                        }
                    }
                })
            }
            errno => Err(MediumError::Io {
                path: self.path.clone(),
                op: "posix_fallocate",
                source: io::Error::from_raw_os_error(errno),
            }),
        }
    }

    /// Removes a file this process just created and could not finish, then drops it.
    pub(crate) fn discard(self) {
        // Best effort: the error being reported matters more than a failed removal.
        let _ = std::fs::remove_file(&self.path);
    }

    /// The open descriptor (locked).
    pub(crate) fn file(&self) -> &File {
        &self.file
    }

    /// The path it was opened by.
    pub(crate) fn path(&self) -> &Path {
        &self.path
    }

    /// Its length in bytes (non-zero).
    pub(crate) fn len(&self) -> usize {
        self.len
    }
}

/// The `msync` failures of a file medium: `flush` cannot return an error, so a failed
/// write-back is counted and its error kept for the caller to ask about.
#[derive(Debug)]
pub(crate) struct SyncFailures {
    count: AtomicU64,
    last_errno: AtomicI32,
}

impl SyncFailures {
    /// No failure yet.
    pub(crate) fn new() -> Self {
        Self {
            count: AtomicU64::new(0),
            last_errno: AtomicI32::new(0),
        }
    }

    /// Records the failure `errno` of the last system call (`EIO` if it set none).
    pub(crate) fn record_last_os_error(&self) {
        let errno = io::Error::last_os_error()
            .raw_os_error()
            .unwrap_or(libc::EIO);
        self.count.fetch_add(1, Ordering::Relaxed);
        self.last_errno.store(errno, Ordering::Relaxed);
    }

    /// How many write-backs failed.
    pub(crate) fn count(&self) -> u64 {
        self.count.load(Ordering::Relaxed)
    }

    /// The latest failure's error, if any failed.
    pub(crate) fn last_error(&self) -> Option<io::Error> {
        match self.last_errno.load(Ordering::Relaxed) {
            0 => None,
            errno => Some(io::Error::from_raw_os_error(errno)),
        }
    }
}
