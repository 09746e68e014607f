//! Durable file replacement: a temp file beside the target, fsync, rename, fsync the directory.

use super::writeback::EarlyWriteback;
use crate::error::{Error, Result};
use std::fs::File;
use std::io::BufWriter;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// The directory holding `path` (`.` for a bare file name).
pub(crate) fn parent_dir(path: &Path) -> PathBuf {
    match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
        _ => PathBuf::from("."),
    }
}

/// Flushes the directory entry changes (create, rename, unlink) of `path`'s directory.
pub(crate) fn fsync_dir(path: &Path) -> Result<()> {
    #[cfg(unix)]
    {
        let dir = parent_dir(path);
        File::open(&dir)
            .and_then(|d| d.sync_all())
            .map_err(|e| Error::from(e).in_file(&dir))?;
    }
    #[cfg(not(unix))]
    let _ = path;
    Ok(())
}

/// Random characters tempfile puts between our prefix and suffix.
const TEMP_RAND_LEN: usize = 6;

fn temp_prefix(target: &Path) -> String {
    let stem = target
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    format!(".{stem}.")
}

/// True when `name` is a temp file name [`new_temp_beside`] makes for a target whose
/// temp names start with `prefix` (`.<name>.XXXXXX.tmp`).
fn is_temp_name(name: &str, prefix: &str) -> bool {
    name.strip_prefix(prefix)
        .and_then(|r| r.strip_suffix(".tmp"))
        .is_some_and(|mid| {
            mid.len() == TEMP_RAND_LEN && mid.bytes().all(|b| b.is_ascii_alphanumeric())
        })
}

/// The temp files of `target` in its directory.
fn temps_of(target: &Path) -> Vec<PathBuf> {
    let prefix = temp_prefix(target);
    let Ok(rd) = std::fs::read_dir(parent_dir(target)) else {
        return Vec::new();
    };
    rd.flatten()
        .filter(|e| {
            e.file_name()
                .to_str()
                .is_some_and(|n| is_temp_name(n, &prefix))
        })
        .map(|e| e.path())
        .collect()
}

/// Deletes temp files a killed writer of `target` left behind. Only call with the write
/// lock held: then no other writer of this archive is writing one. A temp file another
/// process holds locked ([`new_temp_beside`]) is kept: an export whose output is named
/// like the archive is writing it.
pub(crate) fn remove_stale_temps(target: &Path) {
    for path in temps_of(target) {
        if let Some(dead) = DeadTemp::claim(&path, Duration::ZERO) {
            dead.remove();
        }
    }
}

/// How long a temp file must have gone unmodified before a writer without the archive's
/// lock (an export, a download) may take it for dead: far longer than the two system
/// calls between its creation and its lock, and than any pause of a live writer of a
/// version that did not lock its temp files.
const UNLOCKED_TEMP_GRACE: Duration = Duration::from_secs(15 * 60);

/// Deletes the temp files of `target` that a killed writer left behind, without the
/// archive's write lock (exports and downloads take none): a temp file is dead when no
/// process holds its lock (every live writer holds the lock of its own temp file until
/// the file is renamed or deleted; a lock dies with its process, SIGKILL included) and it
/// has not been modified for [`UNLOCKED_TEMP_GRACE`] (a writer takes its lock just after
/// creating the file). Best effort: a temp file that cannot be checked is kept.
pub(crate) fn remove_dead_temps(target: &Path) {
    for path in temps_of(target) {
        if let Some(dead) = DeadTemp::claim(&path, UNLOCKED_TEMP_GRACE) {
            dead.remove();
        }
    }
}

/// A temp file found dead, held locked until it is removed (so two cleaners never both
/// act on it, and a live writer never loses it).
struct DeadTemp {
    path: PathBuf,
    _file: Option<File>,
}

impl DeadTemp {
    /// Locks the temp file at `path` if no process holds it and it has not been modified
    /// for `grace`; None otherwise. When that cannot be told (the file does not open, the
    /// file system has no advisory locks), it is dead only for `grace` zero: the archive
    /// writer under the archive's lock, which deleted every temp file before locks were
    /// taken.
    #[cfg(unix)]
    fn claim(path: &Path, grace: Duration) -> Option<DeadTemp> {
        // Not followed if a symlink: only a regular file is ours.
        let meta = std::fs::symlink_metadata(path).ok()?;
        if !meta.is_file() {
            return None;
        }
        let idle = meta.modified().ok()?.elapsed().unwrap_or(Duration::ZERO);
        if idle < grace {
            return None;
        }
        let unknown = || {
            grace.is_zero().then(|| DeadTemp {
                path: path.to_path_buf(),
                _file: None,
            })
        };
        // Opened for writing where it can be: over NFS an exclusive lock needs it.
        let Ok(file) = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .open(path)
            .or_else(|_| File::open(path))
        else {
            return unknown();
        };
        match file.try_lock() {
            Ok(()) => Some(DeadTemp {
                path: path.to_path_buf(),
                _file: Some(file),
            }),
            Err(std::fs::TryLockError::WouldBlock) => None,
            Err(std::fs::TryLockError::Error(_)) => unknown(),
        }
    }

    /// Without advisory locks that die with their process, only the archive writer (under
    /// the archive's lock, `grace` zero) removes temp files, as before.
    #[cfg(not(unix))]
    fn claim(path: &Path, grace: Duration) -> Option<DeadTemp> {
        let meta = std::fs::symlink_metadata(path).ok()?;
        (grace.is_zero() && meta.is_file()).then(|| DeadTemp {
            path: path.to_path_buf(),
            _file: None,
        })
    }

    fn remove(self) {
        let _ = std::fs::remove_file(&self.path);
    }
}

/// Creates `.<name>.XXXXXX.tmp` in `target`'s directory (so a rename over `target` is
/// atomic). A replaced file keeps its mode; a new one gets 0666 less the umask, like any
/// file a program creates (tempfile's default 0600 would hide it from other users).
///
/// The new file is held locked (an advisory lock, on unix) for as long as it is open, so
/// that [`remove_dead_temps`], run here first, tells it from one a killed writer left.
pub(crate) fn new_temp_beside(target: &Path) -> Result<tempfile::NamedTempFile> {
    remove_dead_temps(target);
    create_temp_beside(target)
}

/// [`new_temp_beside`] without its sweep, for a writer that holds the archive's lock and
/// has swept with [`remove_stale_temps`] already.
fn create_temp_beside(target: &Path) -> Result<tempfile::NamedTempFile> {
    let dir = parent_dir(target);
    let prefix = temp_prefix(target);
    let mut builder = tempfile::Builder::new();
    builder
        .prefix(&prefix)
        .rand_bytes(TEMP_RAND_LEN)
        .suffix(".tmp");
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(target)
            .map(|m| m.permissions().mode() & 0o7777)
            .unwrap_or(0o666);
        builder.permissions(std::fs::Permissions::from_mode(mode));
    }
    let temp = builder
        .tempfile_in(&dir)
        .map_err(|e| Error::from(e).in_file(&dir))?;
    // A file system without advisory locks leaves it unlocked: found dead only after the
    // grace period of no writes, as before locks were taken.
    #[cfg(unix)]
    let _ = temp.as_file().try_lock();
    Ok(temp)
}

/// A new file being written beside `target`; removed on drop unless committed.
pub(crate) struct TempTarget {
    target: PathBuf,
    temp: tempfile::NamedTempFile,
}

impl TempTarget {
    /// Creates the temp file in the target's directory (so the rename is atomic). Only
    /// with the archive's write lock held, after [`remove_stale_temps`] (every caller
    /// takes the lock through `WriteLock` and sweeps right after): the directory is not
    /// swept a second time.
    pub fn create(target: &Path) -> Result<TempTarget> {
        let temp = create_temp_beside(target)?;
        Ok(TempTarget {
            target: target.to_path_buf(),
            temp,
        })
    }

    /// A buffered, budget-charged writer on the temp file; when the file will be
    /// fsynced, it starts writeback as it goes ([`EarlyWriteback`]).
    pub fn writer(&self, fsync: bool) -> Result<BufWriter<EarlyWriteback>> {
        let f = self.temp.as_file().try_clone()?;
        Ok(BufWriter::with_capacity(
            1 << 20,
            EarlyWriteback::new(f, 0, fsync),
        ))
    }

    /// fsyncs the temp file, renames it over the target and fsyncs the directory.
    pub fn commit(self, fsync: bool) -> Result<()> {
        if fsync {
            self.temp
                .as_file()
                .sync_all()
                .map_err(|e| Error::from(e).in_file(self.temp.path()))?;
        }
        let target = self.target;
        self.temp
            .persist(&target)
            .map_err(|e| Error::from(e.error).in_file(&target))?;
        if fsync {
            fsync_dir(&target)?;
        }
        Ok(())
    }
}
