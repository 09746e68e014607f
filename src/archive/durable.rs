//! Durable file replacement: a temp file beside the target, fsync, rename, fsync the directory.

use super::writeback::EarlyWriteback;
use crate::error::{Error, Result};
use std::fs::File;
use std::io::BufWriter;
use std::path::{Path, PathBuf};

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

/// Deletes temp files a killed writer of `target` left behind. Only call with the write
/// lock held: then no other writer of this archive is writing one.
pub(crate) fn remove_stale_temps(target: &Path) {
    let prefix = temp_prefix(target);
    let Ok(rd) = std::fs::read_dir(parent_dir(target)) else {
        return;
    };
    for entry in rd.flatten() {
        let name = entry.file_name();
        let Some(name) = name.to_str() else { continue };
        let stale = name
            .strip_prefix(&prefix)
            .and_then(|r| r.strip_suffix(".tmp"))
            .is_some_and(|mid| {
                mid.len() == TEMP_RAND_LEN && mid.bytes().all(|b| b.is_ascii_alphanumeric())
            });
        if stale {
            let _ = std::fs::remove_file(entry.path());
        }
    }
}

/// Creates `.<name>.XXXXXX.tmp` in `target`'s directory (so a rename over `target` is
/// atomic). A replaced file keeps its mode; a new one gets 0666 less the umask, like any
/// file a program creates (tempfile's default 0600 would hide it from other users).
pub(crate) fn new_temp_beside(target: &Path) -> Result<tempfile::NamedTempFile> {
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
    builder
        .tempfile_in(&dir)
        .map_err(|e| Error::from(e).in_file(&dir))
}

/// A new file being written beside `target`; removed on drop unless committed.
pub(crate) struct TempTarget {
    target: PathBuf,
    temp: tempfile::NamedTempFile,
}

impl TempTarget {
    /// Creates the temp file in the target's directory (so the rename is atomic).
    pub fn create(target: &Path) -> Result<TempTarget> {
        let temp = new_temp_beside(target)?;
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
