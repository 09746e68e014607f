//! The one-writer-at-a-time lock: an exclusive advisory lock on `<archive>.lock`.
//!
//! A sidecar file rather than the archive itself, because rewriting renames a new file
//! over the archive and a lock held on the old inode would no longer exclude anyone.
//! The lock file is never deleted: deleting it would let two writers lock two inodes.

use super::archive_path::{ArchivePath, regular_file, sidecar};
use crate::error::{Error, ErrorKind, Result};
use std::collections::HashSet;
use std::fs::{File, OpenOptions, TryLockError};
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// Lock files held by this process: a reader that would wait for one of them would wait
/// for itself (flock excludes other descriptors of the same process too).
static HELD: Mutex<Option<HashSet<PathBuf>>> = Mutex::new(None);

fn held_set<R>(f: impl FnOnce(&mut HashSet<PathBuf>) -> R) -> R {
    let mut g = HELD.lock().unwrap_or_else(|p| p.into_inner());
    f(g.get_or_insert_with(HashSet::new))
}

fn lock_key(path: &Path) -> PathBuf {
    let lock_path = sidecar(path, ".lock");
    std::fs::canonicalize(&lock_path).unwrap_or(lock_path)
}

/// How long a non-waiting writer retries before reporting [`ErrorKind::Locked`].
const BRIEF_HOLD: Duration = Duration::from_millis(250);

/// A held write lock; released when dropped.
#[derive(Debug)]
pub struct WriteLock {
    _file: File,
    key: PathBuf,
}

impl Drop for WriteLock {
    fn drop(&mut self) {
        // Unlock explicitly rather than by closing: a child process forked by another
        // thread may hold a copy of this descriptor until it execs, and a flock lives as
        // long as any copy is open. LOCK_UN releases it for every copy at once.
        let _ = self._file.unlock();
        held_set(|s| s.remove(&self.key));
    }
}

impl WriteLock {
    /// Takes the write lock of the archive at `path`, waiting for it when `wait`,
    /// otherwise failing with [`ErrorKind::Locked`]. A symlinked `path` takes the lock of
    /// the file it points at (the lock every writer of that file takes).
    pub fn acquire(path: &Path, wait: bool) -> Result<WriteLock> {
        let ap = ArchivePath::resolve(path)?;
        WriteLock::acquire_resolved(&ap.real, wait).map_err(|e| ap.located(e))
    }

    /// [`WriteLock::acquire`] of an archive path already resolved through symlinks.
    pub(crate) fn acquire_resolved(path: &Path, wait: bool) -> Result<WriteLock> {
        let lock_path = sidecar(path, ".lock");
        regular_file(&lock_path, "lock file")?;
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
            // A lock seen held only briefly may be a copy of a descriptor that a child
            // process of a multi-threaded program holds between fork and exec: retry a little
            // before reporting another writer.
            let start = Instant::now();
            loop {
                match file.try_lock() {
                    Ok(()) => break,
                    Err(TryLockError::WouldBlock) if start.elapsed() < BRIEF_HOLD => {
                        std::thread::sleep(Duration::from_millis(2));
                    }
                    Err(TryLockError::WouldBlock) => {
                        return Err(Error::new(ErrorKind::Locked).in_file(path));
                    }
                    Err(TryLockError::Error(e)) => {
                        return Err(Error::from(e).in_file(&lock_path));
                    }
                }
            }
        }
        let key = lock_key(path);
        held_set(|s| s.insert(key.clone()));
        Ok(WriteLock { _file: file, key })
    }

    /// Takes the lock for a reader that must roll back a journal (`path` resolved): fails
    /// at once if this process holds it, and waits at most `timeout` for another process.
    pub(crate) fn acquire_for_recovery(path: &Path, timeout: Duration) -> Result<WriteLock> {
        if held_set(|s| s.contains(&lock_key(path))) {
            return Err(Error::new(ErrorKind::Locked).in_file(path));
        }
        let start = Instant::now();
        loop {
            match WriteLock::acquire_resolved(path, false) {
                Err(e) if matches!(e.kind(), ErrorKind::Locked) && start.elapsed() < timeout => {
                    std::thread::sleep(Duration::from_millis(5));
                }
                other => return other,
            }
        }
    }
}

/// True when a process other than this one holds the write lock of the archive at
/// `path` (probed without creating the lock file; false when it cannot be probed).
pub(crate) fn held_by_another_process(path: &Path) -> bool {
    if held_set(|s| s.contains(&lock_key(path))) {
        return false;
    }
    let lock_path = sidecar(path, ".lock");
    if regular_file(&lock_path, "lock file").is_err() {
        return false;
    }
    let Ok(file) = File::open(lock_path) else {
        return false;
    };
    match file.try_lock() {
        Ok(()) => false,
        Err(TryLockError::WouldBlock) => true,
        Err(TryLockError::Error(_)) => false,
    }
}
