//! The rollback journal of an in-place append, `<archive>.journal`.
//!
//! An in-place append writes over the archive's old end (central directory and end
//! records) before it writes the new ones, so the bytes it overwrites are saved first:
//!
//! ```text
//! magic         8 bytes  "MZJRNL01"
//! original_len  u64 LE   archive length before the append
//! offset        u64 LE   where the saved bytes go back (the old central directory offset)
//! saved_len     u64 LE   = original_len - offset
//! saved         saved_len bytes: the archive's bytes offset..original_len
//! checksum      32 bytes SHA-256 of everything above
//! ```
//!
//! The journal is written and fsynced (and its directory fsynced) before the archive is
//! touched, and deleted after the finished archive is fsynced. Whoever finds a journal,
//! holding the write lock, rolls back: a valid one is replayed (saved bytes written back,
//! file truncated to `original_len`, fsynced) and deleted; one with a bad checksum was cut
//! short while being written, before the archive was touched, and is just deleted.

use super::archive_path::{regular_file, sidecar};
use super::container;
use super::durable::fsync_dir;
use super::fault::Budgeted;
use crate::error::{Error, ErrorKind, Result};
use sha2::Digest;
use std::fs::{File, OpenOptions};
use std::io::{BufWriter, Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};

const MAGIC: &[u8; 8] = b"MZJRNL01";
const HEADER: usize = 8 + 24;
/// Largest journal read back (the saved region is one central directory).
const MAX_JOURNAL: u64 = 4 << 30;

/// Path of the journal of the archive at `path`.
pub(crate) fn journal_path(path: &Path) -> PathBuf {
    sidecar(path, ".journal")
}

/// Writes and fsyncs the journal saving `saved` (the archive's bytes from `offset` to
/// `original_len`). Must complete before the archive is modified.
pub(crate) fn write(path: &Path, original_len: u64, offset: u64, saved: &[u8]) -> Result<()> {
    write_as(path, &journal_path(path), original_len, offset, saved)
}

/// [`write`] under another name `jp` (a sharded save's undo record, which only writers
/// replay: see src/sharded/).
pub(crate) fn write_as(
    path: &Path,
    jp: &Path,
    original_len: u64,
    offset: u64,
    saved: &[u8],
) -> Result<()> {
    refuse_hard_links(path)?;
    let jp = jp.to_path_buf();
    let mut head = Vec::with_capacity(HEADER);
    head.extend_from_slice(MAGIC);
    head.extend_from_slice(&original_len.to_le_bytes());
    head.extend_from_slice(&offset.to_le_bytes());
    head.extend_from_slice(&(saved.len() as u64).to_le_bytes());
    let mut h = sha2::Sha256::new();
    h.update(&head);
    h.update(saved);
    let sum = h.finalize();
    let file = File::create(&jp).map_err(|e| Error::from(e).in_file(&jp))?;
    let mut w = BufWriter::new(Budgeted(file));
    let res = (|| -> std::io::Result<File> {
        w.write_all(&head)?;
        w.write_all(saved)?;
        w.write_all(&sum)?;
        let f = w.into_inner().map_err(|e| e.into_error())?.0;
        f.sync_all()?;
        Ok(f)
    })();
    res.map_err(|e| Error::from(e).in_file(&jp))?;
    fsync_dir(&jp)
}

/// Refuses an in-place write to an archive with more than one name (hard links): the lock
/// and the journal are named after one path, so a writer or a reader through another name
/// would neither wait for this write nor roll it back. A rewrite (a new file renamed over
/// one name) is safe, and leaves the other names with the old archive.
fn refuse_hard_links(path: &Path) -> Result<()> {
    #[cfg(unix)]
    {
        use std::os::unix::fs::MetadataExt;
        let links = std::fs::metadata(path)
            .map_err(|e| Error::from(e).in_file(path))?
            .nlink();
        if links > 1 {
            return Err(Error::new(ErrorKind::HardLinked(links)).in_file(path));
        }
    }
    Ok(())
}

/// Deletes the journal after a finished append and fsyncs the directory. Something else
/// under the journal's name (a FIFO, a directory) is refused, not removed.
pub(crate) fn remove(path: &Path) -> Result<()> {
    remove_file(&journal_path(path))
}

/// Deletes the journal-format file `jp` and fsyncs its directory (see [`remove`]).
pub(crate) fn remove_file(jp: &Path) -> Result<()> {
    let jp = jp.to_path_buf();
    regular_file(&jp, "journal")?;
    match std::fs::remove_file(&jp) {
        Ok(()) => fsync_dir(&jp),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(Error::from(e).in_file(&jp)),
    }
}

/// A decoded, checksum-verified journal.
struct Journal {
    original_len: u64,
    offset: u64,
    saved: Vec<u8>,
}

/// Reads the journal at `jp` of an archive of `archive_len` bytes; `None` when it is torn
/// or cannot be one of that archive's (longer than the archive plus its framing: the saved
/// region lies inside the archive), so it is discarded without being read whole.
fn read_journal(jp: &Path, archive_len: u64) -> Result<Option<Journal>> {
    regular_file(jp, "journal")?;
    let mut f = File::open(jp).map_err(|e| Error::from(e).in_file(jp))?;
    let len = f.metadata()?.len();
    if len > archive_len.saturating_add((HEADER + 32) as u64) {
        return Ok(None);
    }
    if len > MAX_JOURNAL {
        return Err(Error::new(ErrorKind::LimitExceeded {
            what: "journal size",
            size: len,
            limit: MAX_JOURNAL,
        })
        .in_file(jp));
    }
    let mut b = Vec::with_capacity(len as usize);
    f.read_to_end(&mut b)?;
    if b.len() < HEADER + 32 || &b[..8] != MAGIC {
        return Ok(None);
    }
    let (body, sum) = b.split_at(b.len() - 32);
    if sha2::Sha256::digest(body).as_slice() != sum {
        return Ok(None);
    }
    let word = |i: usize| {
        let mut a = [0u8; 8];
        a.copy_from_slice(&body[i..i + 8]);
        u64::from_le_bytes(a)
    };
    let (original_len, offset, saved_len) = (word(8), word(16), word(24));
    if saved_len != (body.len() - HEADER) as u64
        || offset.checked_add(saved_len) != Some(original_len)
    {
        return Ok(None);
    }
    Ok(Some(Journal {
        original_len,
        offset,
        saved: body[HEADER..].to_vec(),
    }))
}

/// Whether the journal was written for this file: an interrupted append leaves the bytes
/// before `offset` untouched, so the entries the saved central directory lists (the first
/// 1024 are checked) must have their local headers there, with the same name, CRC and
/// sizes, and the saved end record must place the directory at `offset`. Replaying a
/// journal onto a different file (say, one restored from a backup after the crash) would
/// corrupt it.
fn belongs_to(file: &File, j: &Journal) -> std::io::Result<bool> {
    let file_len = file.metadata()?.len();
    if file_len < j.offset {
        return Ok(false);
    }
    // The saved bytes are the old file's from `offset` to its end: its directory and end
    // records, read by the parser every open uses.
    let Ok((cd_offset, entries)) =
        container::read::directory_in_tail(&j.saved, j.offset, j.original_len)
    else {
        return Ok(false);
    };
    if cd_offset != j.offset {
        return Ok(false);
    }
    let read_at = |buf: &mut [u8], at: u64| {
        let mut f = file;
        f.seek(SeekFrom::Start(at))?;
        f.read_exact(buf)
    };
    for e in entries.iter().take(1024) {
        if !container::read::local_header_agrees(&read_at, file_len, e, j.offset)? {
            return Ok(false);
        }
    }
    Ok(true)
}

/// Rolls back an unfinished in-place append of the archive at `path`, if its journal is
/// there; the caller holds the write lock. Returns true when bytes were restored.
pub(crate) fn recover(path: &Path) -> Result<bool> {
    recover_from(path, &journal_path(path))
}

/// The length the archive at `path` had when the journal-format file `jp` was written
/// (`None` when `jp` is absent or was cut short while being written).
pub(crate) fn original_len_of(path: &Path, jp: &Path) -> Result<Option<u64>> {
    if !jp.exists() {
        return Ok(None);
    }
    let archive_len = std::fs::metadata(path)
        .map_err(|e| Error::from(e).in_file(path))?
        .len();
    Ok(read_journal(jp, archive_len)?.map(|j| j.original_len))
}

/// [`recover`] from the journal-format file `jp` (a sharded save's undo record); the
/// file is deleted after the replay.
pub(crate) fn recover_from(path: &Path, jp: &Path) -> Result<bool> {
    let jp = jp.to_path_buf();
    if !jp.exists() {
        return Ok(false);
    }
    let archive_len = std::fs::metadata(path)
        .map_err(|e| Error::from(e).in_file(path))?
        .len();
    let Some(j) = read_journal(&jp, archive_len)? else {
        // Cut short while being written: the archive was not touched yet.
        remove_file(&jp)?;
        return Ok(false);
    };
    let file = OpenOptions::new()
        .read(true)
        .write(true)
        .open(path)
        .map_err(|e| Error::from(e).in_file(path))?;
    if !belongs_to(&file, &j).map_err(|e| Error::from(e).in_file(path))? {
        return Err(Error::new(ErrorKind::ForeignJournal(jp)).in_file(path));
    }
    let res = (|| -> std::io::Result<()> {
        let mut w = Budgeted(&file);
        w.seek(SeekFrom::Start(j.offset))?;
        w.write_all(&j.saved)?;
        file.set_len(j.original_len)?;
        file.sync_all()
    })();
    res.map_err(|e| Error::from(e).in_file(path))?;
    remove_file(&jp)?;
    Ok(true)
}
