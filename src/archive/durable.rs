//! Durable file replacement: a temp file beside the target, fsync, rename, fsync the directory.

use super::fault::Budgeted;
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

/// A new file being written beside `target`; removed on drop unless committed.
pub(crate) struct TempTarget {
    target: PathBuf,
    temp: tempfile::NamedTempFile,
}

impl TempTarget {
    /// Creates the temp file in the target's directory (so the rename is atomic).
    pub fn create(target: &Path) -> Result<TempTarget> {
        let dir = parent_dir(target);
        let stem = target
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        let temp = tempfile::Builder::new()
            .prefix(&format!(".{stem}."))
            .suffix(".tmp")
            .tempfile_in(&dir)
            .map_err(|e| Error::from(e).in_file(&dir))?;
        Ok(TempTarget {
            target: target.to_path_buf(),
            temp,
        })
    }

    /// A buffered, budget-charged writer on the temp file.
    pub fn writer(&self) -> Result<BufWriter<Budgeted<File>>> {
        let f = self.temp.as_file().try_clone()?;
        Ok(BufWriter::with_capacity(1 << 20, Budgeted(f)))
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
