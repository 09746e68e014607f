//! The one-writer-at-a-time lock: an exclusive advisory lock on `<archive>.lock`.
//!
//! A sidecar file rather than the archive itself, because rewriting renames a new file
//! over the archive and a lock held on the old inode would no longer exclude anyone.
//! The lock file is never deleted: deleting it would let two writers lock two inodes.

use crate::error::{Error, ErrorKind, Result};
use std::fs::{File, OpenOptions, TryLockError};
use std::path::{Path, PathBuf};

/// Path of an archive's sidecar file with `suffix` appended (`.lock`, `.journal`).
pub(crate) fn sidecar(path: &Path, suffix: &str) -> PathBuf {
    let mut s = path.as_os_str().to_owned();
    s.push(suffix);
    PathBuf::from(s)
}

/// A held write lock; released when dropped.
#[derive(Debug)]
pub struct WriteLock {
    _file: File,
}

impl WriteLock {
    /// Takes the write lock of the archive at `path`, waiting for it when `wait`,
    /// otherwise failing with [`ErrorKind::Locked`].
    pub fn acquire(path: &Path, wait: bool) -> Result<WriteLock> {
        let lock_path = sidecar(path, ".lock");
        let file = OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(&lock_path)
            .map_err(|e| Error::from(e).in_file(&lock_path))?;
        if wait {
            file.lock()
                .map_err(|e| Error::from(e).in_file(&lock_path))?;
        } else {
            match file.try_lock() {
                Ok(()) => {}
                Err(TryLockError::WouldBlock) => {
                    return Err(Error::new(ErrorKind::Locked).in_file(path));
                }
                Err(TryLockError::Error(e)) => return Err(Error::from(e).in_file(&lock_path)),
            }
        }
        Ok(WriteLock { _file: file })
    }
}
