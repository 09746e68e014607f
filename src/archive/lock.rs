//! The one-writer-at-a-time lock: an exclusive advisory lock on `<archive>.lock`.
//!
//! A sidecar file rather than the archive itself, because rewriting renames a new file
//! over the archive and a lock held on the old inode would no longer exclude anyone.
//! The lock file is never deleted: deleting it would let two writers lock two inodes.

use super::archive_path::{ArchivePath, regular_file, sidecar};
use crate::error::{Error, ErrorKind, Result};
use std::collections::HashMap;
use std::fs::{File, OpenOptions, TryLockError};
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::thread::ThreadId;
use std::time::{Duration, Instant};

/// Lock files held by this process, with the thread that took each: a reader in that
/// thread that would wait for the lock would wait for itself. A reader in another thread
/// (flock excludes other descriptors of the same process too) waits for the writer as a
/// reader in another process does: the writer is running, e.g. an asynchronous
/// checkpoint save while the training thread lists the checkpoints.
static HELD: Mutex<Option<HashMap<PathBuf, ThreadId>>> = Mutex::new(None);

fn held_set<R>(f: impl FnOnce(&mut HashMap<PathBuf, ThreadId>) -> R) -> R {
    let mut g = HELD.lock().unwrap_or_else(|p| p.into_inner());
    f(g.get_or_insert_with(HashMap::new))
}

/// True when the calling thread holds the write lock of `key` (a [`lock_key`]).
fn held_by_this_thread(key: &Path) -> bool {
    let me = std::thread::current().id();
    held_set(|s| s.get(key) == Some(&me))
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
        // Forgotten before it is released: once released, another thread may take it and
        // record itself, which a later removal would erase.
        held_set(|s| s.remove(&self.key));
        // Unlock explicitly rather than by closing: a child process forked by another
        // thread may hold a copy of this descriptor until it execs, and a flock lives as
        // long as any copy is open. LOCK_UN releases it for every copy at once.
        let _ = self._file.unlock();
    }
}

impl WriteLock {
    /// Takes the write lock of the archive at `path`, waiting for it when `wait`,
    /// otherwise failing with [`ErrorKind::Locked`]. A symlinked `path` takes the lock of
    /// the file it points at (the lock every writer of that file takes).
    #[cfg_attr(not(feature = "test-internals"), allow(dead_code))] // The tests' lock.
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
        held_set(|s| s.insert(key.clone(), std::thread::current().id()));
        Ok(WriteLock { _file: file, key })
    }

    /// Takes the lock for a reader that must roll back a journal (`path` resolved): fails
    /// at once if the calling thread holds it, and waits at most `timeout` for a writer in
    /// another process or another thread, giving up (`None`) as soon as `done` says what
    /// the caller waits for happened without the lock (a journal gone, a file changed). A
    /// reader waits for that, not for the lock itself: a writer that releases the lock and
    /// takes it again at once (a training loop's next save) could otherwise keep it from
    /// the reader for as long as it writes.
    pub(crate) fn acquire_for_recovery_or(
        path: &Path,
        timeout: Duration,
        done: impl Fn() -> bool,
    ) -> Result<Option<WriteLock>> {
        if held_by_this_thread(&lock_key(path)) {
            return Err(Error::new(ErrorKind::Locked).in_file(path));
        }
        let start = Instant::now();
        loop {
            if done() {
                return Ok(None);
            }
            match WriteLock::acquire_resolved(path, false) {
                Err(e) if matches!(e.kind(), ErrorKind::Locked) && start.elapsed() < timeout => {
                    std::thread::sleep(Duration::from_millis(5));
                }
                other => return other.map(Some),
            }
        }
    }
}

/// True when a writer other than the calling thread (another process, or another thread
/// of this one) holds the write lock of the archive at `path` (probed without creating
/// the lock file; false when it cannot be probed).
pub(crate) fn held_by_another_writer(path: &Path) -> bool {
    if held_by_this_thread(&lock_key(path)) {
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
