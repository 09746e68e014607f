//! Opening an archive: [`OpenOptions`] and [`Archive::open`], with the rollback of an
//! unfinished in-place append and the retries while a writer changes the file.

use super::archive_path::{ArchivePath, sidecar};
use super::journal;
use super::reader::{Archive, Backing, OpenOptions};
use super::source::{RangeSource, Ranged, RangedLimits};
use crate::error::{Error, ErrorKind, Result};
use std::io::{Read, Seek, SeekFrom};
use std::path::{Path, PathBuf};
use std::time::Duration;

impl OpenOptions {
    /// Opens the archive at `path` with these limits (see [`Archive::open`]).
    pub fn open(&self, path: impl AsRef<Path>) -> Result<Archive> {
        // The journal and lock are the real file's, also when `path` is a symlink.
        let ap = ArchivePath::for_reading(path.as_ref());
        self.open_resolved(&ap).map_err(|e| ap.located(e))
    }

    fn open_resolved(&self, ap: &ArchivePath) -> Result<Archive> {
        let path = ap.real.as_path();
        let jpath = sidecar(path, ".journal");
        let undo = super::sharded::undo_path(path);
        let mut settled = false;
        let mut attempt = 0;
        loop {
            let wait = self.writer_wait;
            if jpath.exists() {
                recover_for_reader(path, wait)?;
            }
            let before = FileStamp::of(path);
            let opened = Archive::open_unrecovered(path, &ap.shown, self.clone());
            attempt += 1;
            // A writer may have started an in-place append after the check above. Parsed
            // while its journal exists, the bytes may be torn (any parse error) or be the
            // new end of an append not yet durable (which a rollback would truncate under
            // the map): wait for the writer and read again. A parse error while the file
            // changed, or while another writer holds the write lock, is retried too; a
            // file that is not changing is answered as it is.
            match opened {
                Ok(a) if !jpath.exists() || attempt >= 4 * MAX_OPEN_ATTEMPTS => return Ok(a),
                Err(e) if attempt >= MAX_OPEN_ATTEMPTS => return Err(e),
                Ok(_) => {}
                Err(e) if jpath.exists() => {
                    recover_for_reader(path, wait).map_err(|_| e)?;
                }
                Err(e) => {
                    if FileStamp::of(path) == before {
                        if !super::lock::held_by_another_writer(path) {
                            // A sharded save's rank 0 killed while it staged leaves the
                            // file unreadable and its undo record: roll that back (once).
                            if !settled && undo.exists() {
                                settled = true;
                                recover_staging_for_reader(path, wait).map_err(|_| e)?;
                                continue;
                            }
                            return Err(e);
                        }
                        wait_for_writer(path, &before, wait)?;
                    }
                }
            }
        }
    }

    /// Reads a whole archive from `r` into memory (see [`Archive::from_reader`]).
    pub fn from_reader<R: Read + Seek>(&self, mut r: R) -> Result<Archive> {
        let len = r.seek(SeekFrom::End(0))?;
        r.seek(SeekFrom::Start(0))?;
        let len = usize::try_from(len).map_err(|_| {
            Error::new(ErrorKind::LimitExceeded {
                what: "archive size",
                size: len,
                limit: usize::MAX as u64,
            })
        })?;
        // u64 words so that tensor data keeps up to 8-byte alignment in memory.
        let mut words = vec![0u64; len.div_ceil(8)];
        let buf: &mut [u8] = bytemuck::cast_slice_mut(&mut words);
        r.read_exact(&mut buf[..len])?;
        Archive::from_backing(Backing::Owned(words, len), None, self.clone())
    }
}

/// How often [`OpenOptions::open`] reads an archive that changes while it is read.
const MAX_OPEN_ATTEMPTS: u32 = 5;

/// What identifies a version of a file: length, modification time, inode.
#[derive(PartialEq, Eq)]
struct FileStamp(Option<(u64, Option<std::time::SystemTime>, u64)>);

impl FileStamp {
    fn of(path: &Path) -> FileStamp {
        FileStamp(std::fs::metadata(path).ok().map(|m| {
            #[cfg(unix)]
            let ino = std::os::unix::fs::MetadataExt::ino(&m);
            #[cfg(not(unix))]
            let ino = 0;
            (m.len(), m.modified().ok(), ino)
        }))
    }
}

/// Waits (at most `wait`) for another process's or thread's writer to release the lock,
/// or to change the file from `before` (a sharded save holds the lock while its ranks
/// write, after the short staging a reader waits for here). With no wait, a writer
/// holding the lock is a `Locked` error; after a wait, the caller reads again whatever
/// the writer did.
fn wait_for_writer(path: &Path, before: &FileStamp, wait: Duration) -> Result<()> {
    let waited = super::lock::WriteLock::acquire_for_recovery_or(path, wait, || {
        FileStamp::of(path) != *before
    });
    match waited {
        Err(e) if wait.is_zero() && matches!(e.kind(), ErrorKind::Locked) => Err(e),
        _ => Ok(()),
    }
}

/// Takes the write lock (waiting at most `wait` for a writer to finish or to delete the
/// undo record) and rolls back the staging of a sharded save whose rank 0 died (waiting
/// for ranks still writing into it, as long).
fn recover_staging_for_reader(path: &Path, wait: Duration) -> Result<()> {
    let undo = super::sharded::undo_path(path);
    let lock = super::lock::WriteLock::acquire_for_recovery_or(path, wait, || !undo.exists())?;
    if lock.is_some() {
        super::sharded::recover_staged(path, wait)?;
    }
    Ok(())
}

/// Takes the write lock (waiting for a running append to finish) and rolls back an
/// unfinished in-place append.
fn recover_for_reader(path: &Path, wait: Duration) -> Result<()> {
    let unfinished =
        |why: &str| Error::new(ErrorKind::UnfinishedAppend(why.to_string())).in_file(path);
    // Waiting for the journal to go, not only for the lock: a writer that ends its append
    // and takes the lock again at once would keep the lock from this reader.
    let jpath = sidecar(path, ".journal");
    let _lock =
        match super::lock::WriteLock::acquire_for_recovery_or(path, wait, || !jpath.exists()) {
            Ok(Some(l)) => l,
            Ok(None) => return Ok(()),
            Err(e) if matches!(e.kind(), ErrorKind::Locked) => {
                return Err(Error::new(ErrorKind::Locked).in_file(path));
            }
            Err(e) => return Err(unfinished(&e.to_string())),
        };
    journal::recover(path).map_err(|e| match e.kind() {
        // A journal that is not one, or not the archive's, says so itself.
        ErrorKind::ForeignJournal { .. } | ErrorKind::NotARegularFile { .. } => e,
        _ => unfinished(&e.to_string()),
    })?;
    Ok(())
}

impl Archive {
    /// Opens the archive at `path` by memory-mapping it, parsing only the central
    /// directory and tags.txt (each entry's local header is checked when the entry is
    /// first read). If a rollback journal of an unfinished
    /// in-place append lies beside it (beside the file a symlinked `path` points at), the
    /// append is rolled back first (this needs write access to the archive and its
    /// directory).
    ///
    /// # Examples
    ///
    /// ```
    /// # let dir = tempfile::tempdir()?;
    /// # let path = dir.path().join("model.zip");
    /// # let w = modelzip::Tensor::from_slice(vec![2], &[1.0f32, 2.0])?;
    /// # let mut writer = modelzip::ArchiveWriter::create(&path)?;
    /// # writer.add_tag(modelzip::TagBuilder::new("fp32").param("fc.w", w))?;
    /// # writer.finish()?;
    /// use modelzip::Archive;
    ///
    /// let archive = Archive::open(&path)?;
    /// assert_eq!(archive.tags(), &["fp32"]);
    /// assert_eq!(archive.default_tag(), Some("fp32"));
    /// let tag = archive.tag("FP32")?; // tag names ignore ASCII case
    /// assert_eq!(tag.params().len(), 1);
    /// # Ok::<(), modelzip::Error>(())
    /// ```
    pub fn open(path: impl AsRef<Path>) -> Result<Archive> {
        OpenOptions::default().open(path)
    }

    /// Reads a whole archive from `r` into memory.
    pub fn from_reader<R: Read + Seek>(r: R) -> Result<Archive> {
        OpenOptions::default().from_reader(r)
    }

    /// Opens `path` without looking for a journal (the caller holds the lock and
    /// recovered); errors and [`Archive::path`] name `shown`.
    pub(crate) fn open_unrecovered(
        path: &Path,
        shown: &Path,
        opts: OpenOptions,
    ) -> Result<Archive> {
        let file = std::fs::File::open(path).map_err(|e| Error::from(e).in_file(shown))?;
        let meta = file.metadata().map_err(|e| Error::from(e).in_file(shown))?;
        if meta.is_dir() {
            // Mapping it would fail with "No such device" (ENODEV).
            return Err(Error::from(std::io::Error::new(
                std::io::ErrorKind::IsADirectory,
                "is a directory, not an archive",
            ))
            .in_file(shown));
        }
        let len = meta.len();
        let backing = if len == 0 {
            Backing::Owned(Vec::new(), 0)
        } else {
            // Safety: the map is read-only and private to this value. modelzip writers never
            // change bytes of live entries in place: they write new files and rename them over
            // the archive, or (in-place append or removal) write from the old central
            // directory on and may cut the file after it, never before it; the directory's
            // bytes are parsed into owned structures here and never read from the map again
            // (`Archive::directory` checks the local headers of those structures).
            // Another program truncating or rewriting the file while it is mapped is outside
            // what this library can guard against (reads could then fault).
            let map =
                unsafe { memmap2::Mmap::map(&file) }.map_err(|e| Error::from(e).in_file(shown))?;
            Backing::Map(map, file)
        };
        Archive::from_backing(backing, Some(shown.to_path_buf()), opts)
    }

    /// Opens an archive read by byte ranges from `source`, whose last bytes `tail` the
    /// caller read first (with the object's length and version); errors name `shown`.
    pub(crate) fn from_source(
        source: Box<dyn RangeSource>,
        tail: Vec<u8>,
        limits: &RangedLimits,
        shown: &str,
        opts: OpenOptions,
    ) -> Result<Archive> {
        let (ranged, dir) = Ranged::open(source, tail, limits).map_err(|e| e.in_file(shown))?;
        Archive::from_directory(
            Backing::Ranged(Box::new(ranged)),
            dir,
            Some(PathBuf::from(shown)),
            opts,
        )
    }

    /// Opens the local archive at `path` read by `pread` rather than mapped (see
    /// [`FileSource`](super::source::FileSource)): for a reader that must not fault if
    /// another process truncates the file under it. Errors name `shown`.
    pub(crate) fn open_by_pread(path: &Path, shown: &Path) -> Result<Archive> {
        let (source, tail) = super::source::FileSource::open(path).map_err(|e| e.in_file(shown))?;
        let limits = RangedLimits {
            max_directory_size: 1 << 30,
            directory_slack: 256 << 10,
        };
        Archive::from_source(
            Box::new(source),
            tail,
            &limits,
            &shown.to_string_lossy(),
            OpenOptions::default(),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::mpsc;
    use std::time::Duration;

    /// A reader waiting for a journal to go returns once it is gone, while the writer
    /// still holds (or has taken again) the lock: a training loop's next save takes the
    /// lock at once, and a rank of a sharded save that waited for the lock itself would
    /// wait for a save that waits for it.
    #[test]
    fn a_reader_waits_for_the_journal_not_for_the_lock() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("a.zip");
        std::fs::write(&path, b"").unwrap();
        let jpath = sidecar(&path, ".journal");
        std::fs::write(&jpath, b"an append's journal").unwrap();
        let (locked_tx, locked_rx) = mpsc::channel();
        let (done_tx, done_rx) = mpsc::channel::<()>();
        let p = path.clone();
        let writer = std::thread::spawn(move || {
            let _lock = super::super::lock::WriteLock::acquire_resolved(&p, false).unwrap();
            locked_tx.send(()).unwrap();
            // Holds the lock until the reader is done (or long past its wait).
            done_rx.recv_timeout(Duration::from_secs(120)).is_ok()
        });
        locked_rx.recv().unwrap();
        let p = path.clone();
        let reader = std::thread::spawn(move || {
            let r = recover_for_reader(&p, Duration::from_secs(60));
            done_tx.send(()).unwrap();
            r
        });
        std::thread::sleep(Duration::from_millis(100));
        std::fs::remove_file(&jpath).unwrap();
        reader.join().unwrap().unwrap();
        assert!(
            writer.join().unwrap(),
            "the reader returned only once the writer let the lock go"
        );
    }

    /// An open told not to wait for writers answers at once, `Locked`, where a writer
    /// holds the lock with its journal beside the archive, or changes the file under a
    /// parse; the default open waits for that writer and reads what it left.
    #[test]
    fn an_open_with_no_writer_wait_is_locked_at_once_where_one_would_wait() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("a.zip");
        let mut w = crate::ArchiveWriter::create(&path).unwrap();
        let t = crate::Tensor::from_slice(vec![2], &[1f32, 2.]).unwrap();
        w.add_tag(crate::TagBuilder::new("t").param("w", t))
            .unwrap();
        w.finish().unwrap();
        let no_wait = OpenOptions {
            writer_wait: Duration::ZERO,
            ..OpenOptions::default()
        };
        assert!(no_wait.open(&path).is_ok(), "no writer: opened");
        let jpath = sidecar(&path, ".journal");
        let (locked_tx, locked_rx) = mpsc::channel();
        let (done_tx, done_rx) = mpsc::channel::<()>();
        let p = path.clone();
        let writer = std::thread::spawn(move || {
            let _lock = super::super::lock::WriteLock::acquire_resolved(&p, false).unwrap();
            std::fs::write(sidecar(&p, ".journal"), b"an append's journal").unwrap();
            locked_tx.send(()).unwrap();
            let _ = done_rx.recv_timeout(Duration::from_secs(120));
            std::fs::remove_file(sidecar(&p, ".journal")).unwrap();
        });
        locked_rx.recv().unwrap();
        let start = std::time::Instant::now();
        let err = no_wait.open(&path).expect_err("a writer holds the lock");
        assert!(matches!(err.kind(), ErrorKind::Locked), "{err}");
        assert!(
            start.elapsed() < Duration::from_secs(5),
            "{:?}",
            start.elapsed()
        );
        // The default open waits for the writer, which ends its append.
        let p = path.clone();
        let reader = std::thread::spawn(move || Archive::open(&p).map(|a| a.tags().to_vec()));
        std::thread::sleep(Duration::from_millis(200));
        assert!(!reader.is_finished(), "the default open waits");
        done_tx.send(()).unwrap();
        writer.join().unwrap();
        assert_eq!(reader.join().unwrap().unwrap(), ["t"]);
        assert!(!jpath.exists());
    }
}
