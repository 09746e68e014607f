//! Reading archives: [`Archive`] over a memory map or a buffer, and one [`Tag`] of it.

use super::archive_path::ArchivePath;
use super::container::{self, Directory, METHOD_DEFLATED, METHOD_STORED, ZipEntry};
use super::journal;
use super::lock::sidecar;
use super::shared_str::SharedStr;
use super::source::{RangeSource, Ranged, RangedLimits};
use super::text::{self, ParamRef};
use crate::error::{Error, ErrorKind, Result};
use crate::tensor::codec::{RecordHead, decode_head};
use crate::tensor::{Tensor, TensorView, decode_tensor};
use std::borrow::Cow;
use std::collections::HashMap;
use std::io::{Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};

/// Bytes of a remote tensor's data fetched to read its header ([`Archive::tensor_heads`]).
const HEAD_PROBE: u64 = 512;

/// Name of the tag list entry.
pub const TAGS_TXT: &str = "tags.txt";

/// Limits applied while reading an archive.
#[derive(Debug, Clone)]
pub struct OpenOptions {
    /// Largest size a deflated entry may inflate to (default 4 GiB).
    pub max_inflated_size: u64,
    /// Largest tags.txt accepted (default 16 MiB).
    pub max_tags_txt_size: u64,
    /// Largest ratio of inflated to compressed size accepted for an entry that inflates
    /// to more than [`INFLATE_RATIO_FREE`] bytes (default 100, as Apache POI's zip-bomb
    /// guard; `u64::MAX` turns the check off). Deflate reaches about 1032:1 on zeros, so
    /// without it a 4 MiB entry could make a reader allocate 4 GiB.
    pub max_inflate_ratio: u64,
}

/// Entries that inflate to at most this many bytes (16 MiB) are not held to
/// [`OpenOptions::max_inflate_ratio`].
pub const INFLATE_RATIO_FREE: u64 = 16 << 20;

impl Default for OpenOptions {
    fn default() -> Self {
        OpenOptions {
            max_inflated_size: 4 << 30,
            max_tags_txt_size: 16 << 20,
            max_inflate_ratio: 100,
        }
    }
}

impl OpenOptions {
    /// The default limits.
    pub fn new() -> Self {
        Self::default()
    }

    /// Sets the largest size a deflated entry may inflate to.
    pub fn max_inflated_size(mut self, limit: u64) -> Self {
        self.max_inflated_size = limit;
        self
    }

    /// Sets the largest inflated-to-compressed size ratio (see the field).
    pub fn max_inflate_ratio(mut self, ratio: u64) -> Self {
        self.max_inflate_ratio = ratio;
        self
    }

    /// Opens the archive at `path` with these limits (see [`Archive::open`]).
    pub fn open(&self, path: impl AsRef<Path>) -> Result<Archive> {
        // The journal and lock are the real file's, also when `path` is a symlink.
        let ap = ArchivePath::for_reading(path.as_ref());
        self.open_resolved(&ap).map_err(|e| ap.located(e))
    }

    fn open_resolved(&self, ap: &ArchivePath) -> Result<Archive> {
        let path = ap.real.as_path();
        let jpath = sidecar(path, ".journal");
        let mut attempt = 0;
        loop {
            if jpath.exists() {
                recover_for_reader(path)?;
            }
            let before = FileStamp::of(path);
            let opened = Archive::open_unrecovered(path, &ap.shown, self.clone());
            attempt += 1;
            // A writer may have started an in-place append after the check above. Parsed
            // while its journal exists, the bytes may be torn (any parse error) or be the
            // new end of an append not yet durable (which a rollback would truncate under
            // the map): wait for the writer and read again. A parse error while the file
            // changed, or while another process holds the write lock, is retried too; a
            // file that is not changing is answered as it is.
            match opened {
                Ok(a) if !jpath.exists() || attempt >= 4 * MAX_OPEN_ATTEMPTS => return Ok(a),
                Err(e) if attempt >= MAX_OPEN_ATTEMPTS => return Err(e),
                Ok(_) => {}
                Err(e) if jpath.exists() => {
                    recover_for_reader(path).map_err(|_| e)?;
                }
                Err(e) => {
                    if FileStamp::of(path) == before {
                        if !super::lock::held_by_another_process(path) {
                            return Err(e);
                        }
                        wait_for_writer(path);
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

/// Waits (at most [`RECOVERY_WAIT`]) for another process's writer to release the lock.
fn wait_for_writer(path: &Path) {
    let _ = super::lock::WriteLock::acquire_for_recovery(path, RECOVERY_WAIT);
}

/// How long a reader waits for a running in-place append before giving up.
const RECOVERY_WAIT: std::time::Duration = std::time::Duration::from_secs(60);

/// Takes the write lock (waiting for a running append to finish) and rolls back an
/// unfinished in-place append.
fn recover_for_reader(path: &Path) -> Result<()> {
    let unfinished = |why: &str| {
        Error::new(ErrorKind::UnfinishedAppend {
            why: why.to_string(),
        })
        .in_file(path)
    };
    let _lock = match super::lock::WriteLock::acquire_for_recovery(path, RECOVERY_WAIT) {
        Ok(l) => l,
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

enum Backing {
    /// The map and the file it maps (read with `pread` by [`Tag::tensor_owned`]).
    Map(memmap2::Mmap, std::fs::File),
    Owned(Vec<u64>, usize),
    /// Read by byte ranges (a remote object): entries are fetched as they are read.
    #[cfg_attr(not(feature = "remote"), allow(dead_code))]
    Ranged(Box<Ranged>),
}

impl Backing {
    /// The whole file, for a local archive; empty for a ranged one (whose entries are
    /// read through [`Archive::raw_data`]).
    fn bytes(&self) -> &[u8] {
        match self {
            Backing::Map(m, _) => m,
            Backing::Owned(w, len) => &bytemuck::cast_slice(w)[..*len],
            Backing::Ranged(_) => &[],
        }
    }

    fn len(&self) -> u64 {
        match self {
            Backing::Ranged(r) => r.len(),
            b => b.bytes().len() as u64,
        }
    }
}

/// An open archive: its central directory and tag list, with tensors read on demand.
pub struct Archive {
    backing: Backing,
    dir: Directory,
    tags: Vec<String>,
    /// Lowercased tag name -> position in `tags` (lookups ignore ASCII case).
    tag_index: HashMap<String, usize>,
    /// Top-level directory -> its entries' positions in the central directory, so that
    /// per-tag work does not scan every entry once per tag.
    by_dir: HashMap<String, Vec<usize>>,
    path: Option<PathBuf>,
    opts: OpenOptions,
}

impl std::fmt::Debug for Archive {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Archive")
            .field("path", &self.path)
            .field("tags", &self.tags)
            .field("entries", &self.dir.entries.len())
            .finish()
    }
}

/// Which graph encoding a tag holds (re-exported from [`crate::graph`]).
pub use crate::graph::GraphFormat;

/// Whether a tensor file is a parameter or updater state.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum TensorKind {
    /// `<tag>/params/N.lodtensor`.
    Params,
    /// `<tag>/updater/N.lodtensor`.
    Updater,
}

impl TensorKind {
    /// The directory name inside a tag.
    pub fn dir(self) -> &'static str {
        match self {
            TensorKind::Params => "params",
            TensorKind::Updater => "updater",
        }
    }
}

/// Where a tensor lives.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct TensorLocation {
    /// The owning tag, spelled as in tags.txt.
    pub tag: SharedStr,
    /// Params or updater.
    pub kind: TensorKind,
    /// The file number.
    pub index: u64,
    /// The full zip entry name.
    pub entry: SharedStr,
    /// True when the file is owned by a tag other than the one that lists it.
    pub shared: bool,
    /// Position of `entry` in the central directory it was resolved against: a hint that
    /// saves a name lookup per tensor, checked against `entry` before use.
    pub(crate) entry_hint: usize,
}

/// One line of params.txt.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ParamEntry {
    /// Parameter name (decoded).
    pub name: String,
    /// Its tensor file.
    pub location: TensorLocation,
}

/// One line of updater.txt.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UpdaterEntry {
    /// Parameter name (decoded).
    pub name: String,
    /// Its state arrays, in order.
    pub arrays: Vec<TensorLocation>,
}

/// A tensor read from an archive: borrowed from the map when stored, else owned.
#[derive(Debug, Clone, PartialEq)]
pub enum TensorData<'a> {
    /// Zero-copy view into the archive's bytes.
    Mapped(TensorView<'a>),
    /// Decompressed copy.
    Owned(Tensor),
}

impl TensorData<'_> {
    /// A view of the tensor.
    pub fn view(&self) -> TensorView<'_> {
        match self {
            TensorData::Mapped(v) => v.clone(),
            TensorData::Owned(t) => t.view(),
        }
    }

    /// True when the data is borrowed from the archive without copying.
    pub fn is_mapped(&self) -> bool {
        matches!(self, TensorData::Mapped(_))
    }
}

/// One integrity problem found by [`Archive::verify`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VerifyFinding {
    /// The entry concerned, if any.
    pub entry: Option<String>,
    /// What is wrong.
    pub message: String,
}

/// Result of [`Archive::verify`].
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct VerifyReport {
    /// Every problem found; empty when the archive is sound.
    pub problems: Vec<VerifyFinding>,
}

impl VerifyReport {
    /// True when no problem was found.
    pub fn is_ok(&self) -> bool {
        self.problems.is_empty()
    }

    fn push(&mut self, entry: Option<&str>, message: impl Into<String>) {
        self.problems.push(VerifyFinding {
            entry: entry.map(str::to_string),
            message: message.into(),
        });
    }
}

impl Archive {
    /// Opens the archive at `path` by memory-mapping it, parsing only the central
    /// directory, the local headers and tags.txt. If a rollback journal of an unfinished
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
        let len = file
            .metadata()
            .map_err(|e| Error::from(e).in_file(shown))?
            .len();
        let backing = if len == 0 {
            Backing::Owned(Vec::new(), 0)
        } else {
            // Safety: the map is read-only and private to this value. modelzip writers never
            // change bytes of live entries in place: they write new files and rename them over
            // the archive, or (in-place append) write past the old central directory, whose
            // bytes are parsed into owned structures here and never read from the map again.
            // Another program truncating or rewriting the file while it is mapped is outside
            // what this library can guard against (reads could then fault).
            let map =
                unsafe { memmap2::Mmap::map(&file) }.map_err(|e| Error::from(e).in_file(shown))?;
            Backing::Map(map, file)
        };
        Archive::from_backing(backing, Some(shown.to_path_buf()), opts)
    }

    fn from_backing(backing: Backing, path: Option<PathBuf>, opts: OpenOptions) -> Result<Archive> {
        let dir = container::parse(backing.bytes()).map_err(|e| match &path {
            Some(p) => e.in_file(p),
            None => e,
        })?;
        Archive::from_directory(backing, dir, path, opts)
    }

    /// Opens an archive read by byte ranges from `source`, whose last bytes `tail` the
    /// caller read first (with the object's length and version); errors name `shown`.
    #[cfg_attr(not(feature = "remote"), allow(dead_code))]
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

    /// The version (ETag) of a remote archive as it was read; `None` for a local one.
    pub fn remote_version(&self) -> Option<&str> {
        match &self.backing {
            Backing::Ranged(r) => r.version(),
            _ => None,
        }
    }

    /// True when the archive is read by byte ranges from an object store.
    pub fn is_remote(&self) -> bool {
        matches!(self.backing, Backing::Ranged(_))
    }

    /// Fetches the named entries (those present) ahead of reading them: for a remote
    /// archive in one batched request (near ranges merged, fetched in parallel), kept until
    /// each is read once; nothing for a local one. Memory: the entries' stored bytes.
    pub fn prefetch(&self, names: &[&str]) -> Result<()> {
        if let Backing::Ranged(r) = &self.backing {
            let entries: Vec<&ZipEntry> = names.iter().filter_map(|n| self.entry(n)).collect();
            r.prefetch(&entries).map_err(|e| self.located(e))?;
        }
        Ok(())
    }

    fn from_directory(
        backing: Backing,
        dir: Directory,
        path: Option<PathBuf>,
        opts: OpenOptions,
    ) -> Result<Archive> {
        let with_path = |e: Error| match &path {
            Some(p) => e.in_file(p),
            None => e,
        };
        let mut by_dir: HashMap<String, Vec<usize>> = HashMap::new();
        for (i, e) in dir.entries.iter().enumerate() {
            if let Some((top, _)) = e.name.split_once('/') {
                by_dir.entry(top.to_string()).or_default().push(i);
            }
        }
        let mut a = Archive {
            backing,
            dir,
            tags: Vec::new(),
            tag_index: HashMap::new(),
            by_dir,
            path: path.clone(),
            opts,
        };
        let tags_entry = a.entry(TAGS_TXT).ok_or_else(|| {
            with_path(Error::new(ErrorKind::MissingEntry(TAGS_TXT.into())).in_entry(TAGS_TXT))
        })?;
        if tags_entry.uncompressed_size > a.opts.max_tags_txt_size {
            return Err(with_path(
                Error::new(ErrorKind::LimitExceeded {
                    what: "tags.txt size",
                    size: tags_entry.uncompressed_size,
                    limit: a.opts.max_tags_txt_size,
                })
                .in_entry(TAGS_TXT),
            ));
        }
        let tags = {
            let bytes = a.entry_bytes(TAGS_TXT).map_err(with_path)?;
            text::parse_tags_txt(&bytes).map_err(with_path)?
        };
        a.tag_index = tags
            .iter()
            .enumerate()
            .map(|(i, t)| (t.to_ascii_lowercase(), i))
            .collect();
        a.tags = tags;
        Ok(a)
    }

    /// The path the archive was opened from, if any.
    pub fn path(&self) -> Option<&Path> {
        self.path.as_deref()
    }

    /// Tag names, oldest first, spelled as in tags.txt.
    pub fn tags(&self) -> &[String] {
        &self.tags
    }

    /// The tag loaded when none is named: the last line of tags.txt.
    pub fn default_tag(&self) -> Option<&str> {
        self.tags.last().map(String::as_str)
    }

    /// The tags.txt spelling of `name`, compared ignoring ASCII case.
    pub fn canonical_tag(&self, name: &str) -> Option<&str> {
        self.tag_index
            .get(&name.to_ascii_lowercase())
            .and_then(|&i| self.tags.get(i))
            .map(String::as_str)
    }

    /// The entries under the top-level directory `dir`, in central-directory order.
    fn entries_under<'s>(&'s self, dir: &str) -> impl Iterator<Item = &'s ZipEntry> + 's {
        self.by_dir
            .get(dir)
            .into_iter()
            .flatten()
            .filter_map(|&i| self.dir.entries.get(i))
    }

    /// The tag named `name` (ASCII case ignored), with its params.txt and updater.txt parsed.
    pub fn tag(&self, name: &str) -> Result<Tag<'_>> {
        let canon = self
            .canonical_tag(name)
            .ok_or_else(|| self.located(ErrorKind::tag_not_found(name, &self.tags).into()))?;
        Tag::load(self, canon).map_err(|e| self.located(e))
    }

    /// The default (newest) tag.
    pub fn latest(&self) -> Result<Tag<'_>> {
        match self.default_tag() {
            Some(t) => self.tag(t),
            None => Err(self.located(Error::new(ErrorKind::InvalidInput(
                "the archive has no tags".into(),
            )))),
        }
    }

    /// Every entry name, in central-directory order.
    pub fn entry_names(&self) -> impl Iterator<Item = &str> {
        self.dir.entries.iter().map(|e| e.name.as_str())
    }

    /// True when the archive has an entry of exactly this name.
    pub fn has_entry(&self, name: &str) -> bool {
        self.dir.index.get(&self.dir.entries, name).is_some()
    }

    /// Bytes an entry's data takes in the file as stored (its compressed size).
    pub fn entry_stored_size(&self, name: &str) -> Option<u64> {
        self.entry(name).map(|e| e.compressed_size)
    }

    pub(crate) fn entry(&self, name: &str) -> Option<&ZipEntry> {
        self.dir
            .index
            .get(&self.dir.entries, name)
            .and_then(|i| self.dir.entries.get(i))
    }

    /// The entry a location names: by its position hint when that still matches, else by name.
    pub(crate) fn location_entry(&self, loc: &TensorLocation) -> Option<&ZipEntry> {
        match self.dir.entries.get(loc.entry_hint) {
            Some(e) if e.name == loc.entry => Some(e),
            _ => self.entry(&loc.entry),
        }
    }

    /// Stored bytes of every entry under the top-level directory `dir` (a tag's own bytes).
    pub fn stored_bytes_under(&self, dir: &str) -> u64 {
        self.entries_under(dir).map(|e| e.compressed_size).sum()
    }

    pub(crate) fn directory(&self) -> &Directory {
        &self.dir
    }

    pub(crate) fn bytes(&self) -> &[u8] {
        self.backing.bytes()
    }

    /// The raw (possibly compressed) bytes of an entry, as stored: borrowed from a local
    /// file, fetched (local header checked, a stored entry's CRC-32 too) from a remote one.
    pub(crate) fn raw_data(&self, e: &ZipEntry) -> Result<Cow<'_, [u8]>> {
        if let Backing::Ranged(r) = &self.backing {
            return r.entry_data(e, self.dir.cd_offset).map(Cow::Owned);
        }
        // parse() checked data_offset..data_end lies inside the file.
        Ok(Cow::Borrowed(
            self.bytes()
                .get(e.data_offset as usize..e.data_end() as usize)
                .unwrap_or_default(),
        ))
    }

    fn located(&self, e: Error) -> Error {
        match &self.path {
            Some(p) => e.in_file(p),
            None => e,
        }
    }

    /// An entry's content: borrowed from the map when stored, inflated (within the
    /// configured size limit, CRC checked) when deflated.
    pub fn entry_bytes(&self, name: &str) -> Result<Cow<'_, [u8]>> {
        let e = self.entry(name).ok_or_else(|| {
            self.located(Error::new(ErrorKind::MissingEntry(name.to_string())).in_entry(name))
        })?;
        self.read_entry(e)
            .map_err(|err| self.located(err.in_entry(name)))
    }

    pub(crate) fn read_entry(&self, e: &ZipEntry) -> Result<Cow<'_, [u8]>> {
        match e.method {
            METHOD_STORED => self.raw_data(e),
            METHOD_DEFLATED => {
                let cap = e.uncompressed_size.min(1 << 20) as usize;
                let mut out = Vec::with_capacity(cap);
                self.inflate_into(e, &self.raw_data(e)?, &mut out)?;
                Ok(Cow::Owned(out))
            }
            m => Err(Error::new(ErrorKind::Zip(format!(
                "unsupported compression method {m}"
            )))
            .at_offset(e.header_offset)),
        }
    }

    /// Inflates deflated entry `e` (its bytes `raw`) into `out`, within the size and
    /// ratio limits, checking its length and CRC-32.
    fn inflate_into(&self, e: &ZipEntry, raw: &[u8], out: &mut impl Write) -> Result<()> {
        let limit = self.opts.max_inflated_size;
        if e.uncompressed_size > limit {
            return Err(Error::new(ErrorKind::LimitExceeded {
                what: "inflated entry size",
                size: e.uncompressed_size,
                limit,
            }));
        }
        let ratio_cap = e
            .compressed_size
            .saturating_mul(self.opts.max_inflate_ratio)
            .max(INFLATE_RATIO_FREE);
        if e.uncompressed_size > ratio_cap {
            return Err(Error::new(ErrorKind::LimitExceeded {
                what: "inflated entry size (compression ratio)",
                size: e.uncompressed_size,
                limit: ratio_cap,
            }));
        }
        let mut sink = CrcWriter {
            out,
            crc: crc32fast::Hasher::new(),
            len: 0,
        };
        std::io::copy(
            &mut flate2::read::DeflateDecoder::new(raw).take(e.uncompressed_size.saturating_add(1)),
            &mut sink,
        )
        .map_err(|err| {
            Error::new(ErrorKind::Zip(format!("deflate stream is corrupt: {err}")))
                .at_offset(e.data_offset)
        })?;
        if sink.len != e.uncompressed_size {
            return Err(Error::new(ErrorKind::Zip(format!(
                "entry inflates to {}{} bytes, the directory says {}",
                sink.len,
                if sink.len > e.uncompressed_size {
                    "+"
                } else {
                    ""
                },
                e.uncompressed_size
            )))
            .at_offset(e.data_offset));
        }
        let crc = sink.crc.finalize();
        if crc != e.crc32 {
            return Err(Error::new(ErrorKind::Checksum(format!(
                "CRC-32 {crc:08x}, the directory says {:08x}",
                e.crc32
            )))
            .at_offset(e.data_offset));
        }
        Ok(())
    }

    /// Checks entry `e` as [`Self::read_entry`] would read it, without keeping its bytes
    /// (a deflated entry is inflated in chunks: constant memory).
    fn check_entry(&self, e: &ZipEntry) -> Result<()> {
        match e.method {
            METHOD_DEFLATED => self.inflate_into(e, &self.raw_data(e)?, &mut std::io::sink()),
            _ => self.read_entry(e).map(drop),
        }
    }

    /// Reads the tensor at `loc` (a location from [`Tag::params`] or [`Tag::updater`] of
    /// this archive): zero-copy when the entry is stored, decoded with the same strict
    /// LoDTensor checks as every other read. Unlike [`Tag::tensor`] it needs no parsed
    /// [`Tag`], so bindings that keep the locations can read without re-parsing.
    pub fn tensor(&self, loc: &TensorLocation) -> Result<TensorData<'_>> {
        let archive = self;
        let bytes = match archive.location_entry(loc) {
            Some(e) => archive
                .read_entry(e)
                .map_err(|err| archive.located(err.in_entry(loc.entry.clone())))?,
            None => archive.entry_bytes(&loc.entry)?,
        };
        let located = |e: Error| archive.located(e.in_entry(loc.entry.clone()));
        match bytes {
            Cow::Borrowed(b) => decode_tensor(b).map(TensorData::Mapped).map_err(located),
            Cow::Owned(v) => decode_tensor(&v)
                .map(|t| TensorData::Owned(t.to_owned()))
                .map_err(located),
        }
    }

    /// What each tensor's header says (dtype, dims, LoD), checked as a full read checks
    /// it, including that header and data fill the entry exactly. From a remote archive
    /// only the first bytes of each stored tensor are fetched (one batched request), so
    /// the data and its CRC-32 are not read: what listings need without downloading
    /// the tensors. A header that the first bytes do not hold is read whole.
    pub fn tensor_heads(&self, locs: &[&TensorLocation]) -> Result<Vec<RecordHead>> {
        let entries: Vec<Option<&ZipEntry>> = locs.iter().map(|l| self.location_entry(l)).collect();
        let mut probes: Vec<Option<Vec<u8>>> = vec![None; locs.len()];
        if let Backing::Ranged(r) = &self.backing {
            let stored: Vec<(usize, &ZipEntry)> = entries
                .iter()
                .enumerate()
                .filter_map(|(i, e)| e.filter(|e| e.method == METHOD_STORED).map(|e| (i, e)))
                .collect();
            let es: Vec<&ZipEntry> = stored.iter().map(|(_, e)| *e).collect();
            let got = r.probe(&es, HEAD_PROBE).map_err(|e| self.located(e))?;
            for ((i, _), w) in stored.into_iter().zip(got) {
                probes[i] = Some(w);
            }
        }
        let mut out = Vec::with_capacity(locs.len());
        for ((loc, e), probe) in locs.iter().zip(&entries).zip(probes) {
            let from_probe = match (e, probe) {
                (Some(e), Some(w)) => {
                    container::check_local_prefix(&w, self.len_bytes(), e, self.dir.cd_offset)
                        .ok()
                        .and_then(|prefix| decode_head(prefix, e.compressed_size).ok().flatten())
                }
                _ => None,
            };
            let head = match from_probe {
                Some(h) => h,
                None => {
                    let t = self.tensor(loc)?;
                    let v = t.view();
                    let data_len = v.data().len() as u64;
                    let entry_len = self
                        .location_entry(loc)
                        .map_or(data_len, |e| e.uncompressed_size);
                    RecordHead {
                        dtype: v.dtype(),
                        dims: v.dims().to_vec(),
                        lod: v.lod().clone(),
                        header_len: entry_len.saturating_sub(data_len),
                        data_len,
                    }
                }
            };
            out.push(head);
        }
        Ok(out)
    }

    /// Size of the archive file in bytes.
    pub fn len_bytes(&self) -> u64 {
        self.backing.len()
    }

    /// Bytes no live entry or the central directory uses (left by in-place appends);
    /// a compaction would drop them.
    pub fn dead_bytes(&self) -> u64 {
        let live: u64 = self.dir.entries.iter().map(ZipEntry::footprint).sum();
        let end = self.len_bytes().saturating_sub(self.dir.cd_offset);
        self.len_bytes().saturating_sub(live.saturating_add(end))
    }

    /// Checks everything: CRCs, every listed tag's tables and refs, that every tensor
    /// decodes with dtype × dims bytes, that each graph decodes (ProgramDesc with its
    /// required fields, graph.fb through the FlatBuffers verifier; a TensorFlow graph's
    /// constants refer to parameters of the tag with their dtype and dims), metadata.json,
    /// sha256sums.txt manifests, files under unlisted tag directories and listed tags with
    /// no files.
    pub fn verify(&self) -> VerifyReport {
        self.verify_inner(None)
    }

    /// [`Archive::verify`], reporting progress: a unit is one entry's CRC-32 check, then
    /// one tag's checks (tables, tensors, manifest).
    pub fn verify_with_progress(&self, progress: &dyn Fn(u64, u64)) -> VerifyReport {
        self.verify_inner(Some(progress))
    }

    fn verify_inner(&self, progress: Option<&dyn Fn(u64, u64)>) -> VerifyReport {
        let total = (self.dir.entries.len() + self.tags.len()) as u64;
        let mut ticker = crate::progress::Ticker::new(progress, total);
        let mut r = VerifyReport::default();
        for e in &self.dir.entries {
            if e.method == METHOD_STORED {
                let crc = match self.raw_data(e) {
                    Ok(raw) => crc32fast::hash(&raw),
                    Err(err) => {
                        r.push(Some(&e.name), err.to_string());
                        ticker.tick();
                        continue;
                    }
                };
                if crc != e.crc32 {
                    r.push(
                        Some(&e.name),
                        format!("CRC-32 is {crc:08x}, the directory says {:08x}", e.crc32),
                    );
                }
            } else if let Err(err) = self.check_entry(e) {
                r.push(Some(&e.name), err.to_string());
            }
            ticker.tick();
        }
        let mut dirs_seen: HashMap<&str, bool> = HashMap::new();
        for e in &self.dir.entries {
            if let Some((top, _)) = e.name.split_once('/') {
                dirs_seen.entry(top).or_insert(false);
            }
        }
        for t in &self.tags {
            if let Some(seen) = dirs_seen.get_mut(t.as_str()) {
                *seen = true;
            } else {
                r.push(
                    None,
                    format!("tag {t:?} is listed in tags.txt but has no files"),
                );
            }
        }
        let mut unlisted: Vec<&str> = dirs_seen
            .iter()
            .filter(|(_, listed)| !**listed)
            .map(|(d, _)| *d)
            .collect();
        unlisted.sort();
        for d in unlisted {
            r.push(
                Some(d),
                format!("files under {d}/, which is not a tag listed in tags.txt"),
            );
        }
        for t in &self.tags {
            self.verify_tag(t, &mut r);
            ticker.tick();
        }
        r
    }

    fn verify_tag(&self, t: &str, r: &mut VerifyReport) {
        let prefix = format!("{t}/");
        if self.entry(&format!("{t}/params.txt")).is_none()
            && self.entries_under(t).next().is_some()
        {
            r.push(None, format!("tag {t:?} has no params.txt"));
        }
        match self.tag(t) {
            Ok(tag) => {
                match tag.graph() {
                    Err(e) => r.push(None, e.to_string()),
                    // Decoded as every reader does (ProgramDesc with its required fields,
                    // graph.fb through the FlatBuffers verifier), not just read.
                    Ok(Some((enc, bytes))) => match crate::graph::Graph::decode(enc, &bytes) {
                        Err(e) => r.push(
                            Some(&format!("{t}/{}", enc.file_name())),
                            format!(
                                "the graph does not decode: {}",
                                super::writer::graph_error_why(&e)
                            ),
                        ),
                        // A TensorFlow graph's constants must be the tag's parameters.
                        Ok(g) => {
                            if let Some(tf) = &g.tf
                                && let Err(e) = crate::interop::tf::check_refs(&tag, tf)
                            {
                                r.push(Some(&format!("{t}/{}", enc.file_name())), e.to_string());
                            }
                            // So must an ONNX model's initializers.
                            if let Some(onnx) = &g.onnx
                                && let Err(e) = crate::interop::onnx::check_refs(&tag, onnx)
                            {
                                r.push(Some(&format!("{t}/{}", enc.file_name())), e.to_string());
                            }
                        }
                    },
                    Ok(None) => {}
                }
                match tag.training_config() {
                    Ok(Some(_)) if is_shared(&tag, "trainingConfig.fb") => {}
                    Ok(Some(b)) => {
                        if let Err(e) = crate::graph::training_config::TrainingConfig::decode(&b) {
                            r.push(
                                Some(&format!("{t}/trainingConfig.fb")),
                                format!("the training config does not decode: {}", e.kind()),
                            );
                        }
                    }
                    Err(e) => r.push(e.location().entry.as_deref(), e.to_string()),
                    Ok(None) => {}
                }
                match tag.metadata() {
                    // Checked without building the document (constant memory).
                    Ok(Some(m)) if serde_json::from_slice::<serde::de::IgnoredAny>(&m).is_err() => {
                        r.push(Some(&format!("{t}/metadata.json")), "not valid JSON");
                    }
                    Err(e) => r.push(e.location().entry.as_deref(), e.to_string()),
                    _ => {}
                }
            }
            Err(e) => r.push(e.location().entry.as_deref(), e.to_string()),
        }
        let own: Vec<&ZipEntry> = self.entries_under(t).collect();
        for e in &own {
            let rel = &e.name[prefix.len()..];
            let is_tensor = (rel.starts_with("params/") || rel.starts_with("updater/"))
                && rel.ends_with(".lodtensor");
            if is_tensor {
                match self.read_entry(e) {
                    Ok(b) => {
                        if let Err(err) = decode_tensor(&b) {
                            r.push(Some(&e.name), err.to_string());
                        }
                    }
                    Err(err) => r.push(Some(&e.name), err.to_string()),
                }
            }
        }
        let sums_name = format!("{t}/sha256sums.txt");
        let Some(sums_entry) = self.entry(&sums_name) else {
            return;
        };
        let sums = match self
            .read_entry(sums_entry)
            .and_then(|b| text::parse_sums(&b, &sums_name))
        {
            Ok(s) => s,
            Err(e) => {
                r.push(Some(&sums_name), e.to_string());
                return;
            }
        };
        let mut listed = std::collections::HashSet::new();
        for (hex, rel) in &sums {
            let name = format!("{prefix}{rel}");
            listed.insert(name.clone());
            match self.entry(&name) {
                None => r.push(Some(&sums_name), format!("lists {rel:?}, which is missing")),
                Some(e) => match self.read_entry(e) {
                    Ok(b) => {
                        let got = sha256_hex(&b);
                        if &got != hex {
                            r.push(
                                Some(&name),
                                format!("SHA-256 is {got}, sha256sums.txt says {hex}"),
                            );
                        }
                    }
                    Err(err) => r.push(Some(&name), err.to_string()),
                },
            }
        }
        for e in own {
            if e.name != sums_name && !e.name.ends_with('/') && !listed.contains(&e.name) {
                r.push(Some(&e.name), "not listed in the tag's sha256sums.txt");
            }
        }
    }

    /// Resolves one ref of the table `table_entry` (line `line`) of tag `own`.
    fn resolve(
        &self,
        own: &str,
        r: &ParamRef,
        kind: TensorKind,
        table_entry: &str,
        line: usize,
    ) -> Result<TensorLocation> {
        let tag = match &r.tag {
            None => own,
            Some(t) => self.canonical_tag(t).ok_or_else(|| {
                Error::new(ErrorKind::Syntax(format!(
                    "reference {r} names tag {t:?}, which tags.txt does not list"
                )))
                .in_entry(table_entry)
                .at_line(line)
            })?,
        };
        // Built by hand: this runs once per params.txt line, and format! costs 3x more.
        let index = r.index.to_string();
        let mut entry = String::with_capacity(tag.len() + kind.dir().len() + index.len() + 12);
        for part in [tag, "/", kind.dir(), "/", &index, ".lodtensor"] {
            entry.push_str(part);
        }
        let Some(entry_hint) = self.dir.index.get(&self.dir.entries, &entry) else {
            return Err(Error::new(ErrorKind::MissingEntry(entry))
                .in_entry(table_entry)
                .at_line(line));
        };
        Ok(TensorLocation {
            tag: SharedStr::from(tag),
            kind,
            index: r.index,
            entry: SharedStr::from(entry),
            shared: tag != own,
            entry_hint,
        })
    }
}

/// The largest metadata.json a reader accepts (created time, description, quantization
/// records, user keys: kilobytes in practice). Its parsed form costs several times its
/// size, so the bound keeps a hostile one from costing gigabytes.
pub const MAX_METADATA_BYTES: u64 = 4 << 20;

/// Lowercase hex SHA-256 of `bytes`.
pub(crate) fn sha256_hex(bytes: &[u8]) -> String {
    use sha2::Digest;
    hex_digest(&sha2::Sha256::digest(bytes).into())
}

/// Lowercase hex of a SHA-256 digest.
pub(crate) fn hex_digest(d: &[u8; 32]) -> String {
    use std::fmt::Write;
    let mut s = String::with_capacity(64);
    for b in d {
        let _ = write!(s, "{b:02x}");
    }
    s
}

/// Reads `<tag>/shared.txt` (FORMAT.md): `FILE TAG` lines, FILE one of
/// [`SHAREABLE_FILES`] at most once, TAG another listed tag that holds `TAG/FILE` itself,
/// and the tag not holding FILE too.
fn load_shared<'a>(archive: &'a Archive, tag: &str) -> Result<Vec<(&'static str, &'a str)>> {
    let entry = format!("{tag}/{SHARED_TXT}");
    if !archive.has_entry(&entry) {
        return Ok(Vec::new());
    }
    let e = archive
        .entry(&entry)
        .map(|e| e.uncompressed_size)
        .unwrap_or(0);
    if e > MAX_SHARED_TXT {
        return Err(Error::new(ErrorKind::LimitExceeded {
            what: "shared.txt size",
            size: e,
            limit: MAX_SHARED_TXT,
        })
        .in_entry(entry));
    }
    let bytes = archive.entry_bytes(&entry)?;
    let mut out: Vec<(&'static str, &'a str)> = Vec::new();
    for (file, owner, line) in text::parse_shared(&bytes, &entry)? {
        let bad = |why: String| {
            Error::new(ErrorKind::Syntax(why))
                .in_entry(entry.clone())
                .at_line(line)
        };
        let owner = archive.canonical_tag(&owner).ok_or_else(|| {
            bad(format!(
                "{file} is shared from tag {owner:?}, which tags.txt does not list"
            ))
        })?;
        if owner == tag {
            return Err(bad(format!("{file} is shared from the tag itself")));
        }
        let held = format!("{owner}/{file}");
        if !archive.has_entry(&held) {
            return Err(Error::new(ErrorKind::MissingEntry(held))
                .in_entry(entry.clone())
                .at_line(line));
        }
        if archive.has_entry(&format!("{tag}/{file}")) {
            return Err(bad(format!(
                "the tag has its own {file} and shares one from tag {owner:?}"
            )));
        }
        if out.iter().any(|(f, _)| *f == file) {
            return Err(bad(format!("{file} is listed twice")));
        }
        out.push((file, owner));
    }
    Ok(out)
}

/// Whether `tag` takes `file` from another tag.
fn is_shared(tag: &Tag<'_>, file: &str) -> bool {
    tag.shared_files().iter().any(|(f, _)| *f == file)
}

/// Name of a tag's shared-files table (FORMAT.md): files it uses from another tag.
pub const SHARED_TXT: &str = "shared.txt";

/// The files a tag may take from another tag through shared.txt.
pub const SHAREABLE_FILES: [&str; 3] = ["graph.fb", "graph.pdmodel", "trainingConfig.fb"];

/// Largest shared.txt read (three short lines in practice).
const MAX_SHARED_TXT: u64 = 64 << 10;

/// Parses one table of a tag (params.txt, or updater.txt when `updater`) line by line:
/// `resolve` turns a line's refs into locations, `build` makes the row. Sized once from
/// the line count (growing by doubling would hold the old and the new buffer at once).
/// Errors come in the order of the checks, not of the lines: syntax anywhere, then
/// duplicate names, then refs (a ref that does not resolve is kept until the rest of the
/// file has been read for the other two).
fn load_table<T, R>(
    bytes: &[u8],
    entry: &str,
    updater: bool,
    name_of: impl Fn(&T) -> &str,
    mut resolve: impl FnMut(&[ParamRef], usize) -> Result<R>,
    build: impl Fn(String, R) -> T,
) -> Result<Vec<T>> {
    let n = line_count(bytes);
    let mut rows = Vec::new();
    rows.reserve_exact(n);
    let mut lines = Vec::with_capacity(n);
    let mut unresolved: Option<Error> = None;
    let mut rest: Vec<(String, usize)> = Vec::new();
    text::for_each_table_line(bytes, entry, updater, |name, refs, line| {
        if unresolved.is_none() {
            match resolve(refs, line) {
                Ok(r) => {
                    rows.push(build(name, r));
                    lines.push(line);
                    return Ok(());
                }
                Err(e) => unresolved = Some(e),
            }
        }
        rest.push((name, line));
        Ok(())
    })?;
    text::check_unique_names(
        rows.iter()
            .zip(&lines)
            .map(|(row, &l)| (name_of(row), l))
            .chain(rest.iter().map(|(n, l)| (n.as_str(), *l))),
        entry,
    )?;
    match unresolved {
        Some(e) => Err(e),
        None => Ok(rows),
    }
}

/// Lines in a table (an upper bound on its rows: blank lines are skipped).
fn line_count(bytes: &[u8]) -> usize {
    bytes.iter().filter(|&&b| b == b'\n').count() + 1
}

/// One tag of an open archive, with its tables parsed.
#[derive(Debug)]
pub struct Tag<'a> {
    archive: &'a Archive,
    name: &'a str,
    params: Vec<ParamEntry>,
    updater: Vec<UpdaterEntry>,
    /// Built on the first lookup by name: listing a tag's params should not pay for it.
    by_name: std::sync::OnceLock<rustc_hash::FxHashMap<String, usize>>,
    /// The files shared.txt says the tag uses from other tags: (file, owning tag).
    shared: Vec<(&'static str, &'a str)>,
}

impl<'a> Tag<'a> {
    fn load(archive: &'a Archive, name: &'a str) -> Result<Tag<'a>> {
        // Many names may refer to one file (that is what sharing is): each distinct ref
        // is resolved once, and every name that uses it shares its location's strings.
        let mut resolved: rustc_hash::FxHashMap<(TensorKind, ParamRef), TensorLocation> =
            rustc_hash::FxHashMap::default();
        let mut resolve = |r: &ParamRef, kind: TensorKind, table: &str, line: usize| {
            if let Some(loc) = resolved.get(&(kind, r.clone())) {
                return Ok(loc.clone());
            }
            let loc = archive.resolve(name, r, kind, table, line)?;
            resolved.insert((kind, r.clone()), loc.clone());
            Ok::<_, Error>(loc)
        };
        let mut params = Vec::new();
        let pname = format!("{name}/params.txt");
        let uname = format!("{name}/updater.txt");
        let mname = format!("{name}/metadata.json");
        // A remote archive fetches the tag's tables in one batched request; metadata.json
        // only within the limit `metadata` holds it to.
        let meta_ok = archive.entry(&mname).is_some_and(|e| {
            e.uncompressed_size <= MAX_METADATA_BYTES && e.compressed_size <= MAX_METADATA_BYTES
        });
        let mut ahead = vec![pname.as_str(), uname.as_str()];
        if meta_ok {
            ahead.push(&mname);
        }
        archive.prefetch(&ahead)?;
        if archive.has_entry(&pname) {
            let bytes = archive.entry_bytes(&pname)?;
            params = load_table(
                &bytes,
                &pname,
                false,
                |p: &ParamEntry| p.name.as_str(),
                |refs, line| resolve(&refs[0], TensorKind::Params, &pname, line),
                |name, location| ParamEntry { name, location },
            )?;
        }
        let mut updater = Vec::new();
        if archive.has_entry(&uname) {
            let bytes = archive.entry_bytes(&uname)?;
            updater = load_table(
                &bytes,
                &uname,
                true,
                |u: &UpdaterEntry| u.name.as_str(),
                |refs, line| {
                    refs.iter()
                        .map(|r| resolve(r, TensorKind::Updater, &uname, line))
                        .collect::<Result<Vec<_>>>()
                },
                |name, arrays| UpdaterEntry { name, arrays },
            )?;
        }
        params.shrink_to_fit();
        updater.shrink_to_fit();
        let by_name = std::sync::OnceLock::new();
        let shared = load_shared(archive, name)?;
        Ok(Tag {
            archive,
            name,
            params,
            updater,
            by_name,
            shared,
        })
    }

    /// The files of this tag stored once in another tag (shared.txt): (file, owning tag),
    /// e.g. `("graph.pdmodel", "step-1")`.
    pub fn shared_files(&self) -> &[(&'static str, &'a str)] {
        &self.shared
    }

    /// The entry holding the tag's file `file` (`graph.fb`, `graph.pdmodel`,
    /// `trainingConfig.fb`): its own, or the owner's that shared.txt names; `None` when
    /// the tag has neither.
    pub fn file_entry(&self, file: &str) -> Option<String> {
        let own = format!("{}/{file}", self.name);
        if self.archive.has_entry(&own) {
            return Some(own);
        }
        self.shared
            .iter()
            .find(|(f, _)| *f == file)
            .map(|(f, owner)| format!("{owner}/{f}"))
    }

    /// The tag's name, spelled as in tags.txt.
    pub fn name(&self) -> &str {
        self.name
    }

    /// The archive this tag belongs to.
    pub fn archive(&self) -> &'a Archive {
        self.archive
    }

    fn optional(&self, file: &str) -> Result<Option<Cow<'a, [u8]>>> {
        let name = format!("{}/{file}", self.name);
        if self.archive.has_entry(&name) {
            self.archive.entry_bytes(&name).map(Some)
        } else {
            Ok(None)
        }
    }

    /// The graph and its encoding, if the tag has one (its own, or the one shared.txt
    /// points at); both encodings present is an error.
    pub fn graph(&self) -> Result<Option<(GraphFormat, Cow<'a, [u8]>)>> {
        let fb = self.file_entry("graph.fb");
        let pd = self.file_entry("graph.pdmodel");
        match (fb, pd) {
            (Some(_), Some(pd)) => Err(self.archive.located(
                Error::new(ErrorKind::InvalidInput(format!(
                    "tag {:?} has both graph.fb and graph.pdmodel; at most one is allowed",
                    self.name
                )))
                .in_entry(pd),
            )),
            (Some(fb), None) => Ok(Some((
                GraphFormat::FlatBuffers,
                self.archive.entry_bytes(&fb)?,
            ))),
            (None, Some(pd)) => Ok(Some((
                GraphFormat::ProgramDesc,
                self.archive.entry_bytes(&pd)?,
            ))),
            (None, None) => Ok(None),
        }
    }

    /// The parameters, in params.txt order.
    pub fn params(&self) -> &[ParamEntry] {
        &self.params
    }

    /// The parameter `name`'s tensor.
    ///
    /// # Examples
    ///
    /// ```
    /// # let dir = tempfile::tempdir()?;
    /// # let path = dir.path().join("model.zip");
    /// # let w = modelzip::Tensor::from_slice(vec![2, 2], &[1.0f32, 2.0, 3.0, 4.0])?;
    /// # let mut writer = modelzip::ArchiveWriter::create(&path)?;
    /// # writer.add_tag(modelzip::TagBuilder::new("fp32").param("fc.w", w))?;
    /// # writer.finish()?;
    /// let archive = modelzip::Archive::open(&path)?;
    /// let tag = archive.latest()?;
    /// let data = tag.param("fc.w")?;
    /// assert!(data.is_mapped()); // stored entries are views of the memory map
    /// let view = data.view();
    /// assert_eq!(view.dims(), &[2, 2]);
    /// assert_eq!(view.as_slice::<f32>()?, &[1.0, 2.0, 3.0, 4.0]);
    /// assert!(tag.param("missing").is_err());
    /// # Ok::<(), modelzip::Error>(())
    /// ```
    pub fn param(&self, name: &str) -> Result<TensorData<'a>> {
        let by_name = self.by_name.get_or_init(|| {
            self.params
                .iter()
                .enumerate()
                .map(|(i, p)| (p.name.clone(), i))
                .collect()
        });
        let i = by_name.get(name).ok_or_else(|| {
            self.archive.located(Error::new(ErrorKind::ParamNotFound(
                name.to_string(),
                self.name.to_string(),
            )))
        })?;
        self.tensor(&self.params[*i].location)
    }

    /// The updater state, in updater.txt order.
    pub fn updater(&self) -> &[UpdaterEntry] {
        &self.updater
    }

    /// Reads the tensor at `loc`: zero-copy when the entry is stored.
    pub fn tensor(&self, loc: &TensorLocation) -> Result<TensorData<'a>> {
        self.archive.tensor(loc)
    }

    /// Reads the tensor at `loc` into owned memory. From a memory-mapped archive the data
    /// is read from the file (`pread`) rather than copied out of the map, so loading a whole
    /// tag costs its tensor bytes once in resident memory, not twice (copy + mapped pages).
    pub fn tensor_owned(&self, loc: &TensorLocation) -> Result<Tensor> {
        let archive = self.archive;
        let view = match self.tensor(loc)? {
            TensorData::Owned(t) => return Ok(t),
            TensorData::Mapped(v) => v,
        };
        #[cfg(unix)]
        if let Backing::Map(map, file) = &archive.backing {
            use std::os::unix::fs::FileExt;
            // Decoding touched only the record header; the data's file offset is its
            // distance from the start of the map.
            let offset = (view.data().as_ptr() as usize - map.as_ptr() as usize) as u64;
            let mut data = vec![0u8; view.data().len()];
            file.read_exact_at(&mut data, offset).map_err(|e| {
                archive.located(Error::from(e).in_entry(loc.entry.clone()).at_offset(offset))
            })?;
            let t = Tensor::from_bytes(view.dtype(), view.dims().to_vec(), data)?;
            return if view.lod().is_empty() {
                Ok(t)
            } else {
                t.with_lod(view.lod().clone())
            };
        }
        Ok(view.to_owned())
    }

    /// `<tag>/trainingConfig.fb` (or the owner's, when shared.txt points at it), raw.
    pub fn training_config(&self) -> Result<Option<Cow<'a, [u8]>>> {
        match self.file_entry("trainingConfig.fb") {
            Some(e) => self.archive.entry_bytes(&e).map(Some),
            None => Ok(None),
        }
    }

    /// `<tag>/metadata.json`, raw; at most [`MAX_METADATA_BYTES`] (checked before it is
    /// read or inflated).
    pub fn metadata(&self) -> Result<Option<Cow<'a, [u8]>>> {
        let name = format!("{}/metadata.json", self.name);
        if let Some(e) = self.archive.entry(&name)
            && e.uncompressed_size > MAX_METADATA_BYTES
        {
            return Err(self.archive.located(
                Error::new(ErrorKind::LimitExceeded {
                    what: "metadata.json size",
                    size: e.uncompressed_size,
                    limit: MAX_METADATA_BYTES,
                })
                .in_entry(name),
            ));
        }
        self.optional("metadata.json")
    }

    /// Bytes the file at `loc` takes in the archive as stored (0 if it has none).
    pub fn stored_size(&self, loc: &TensorLocation) -> u64 {
        self.archive
            .location_entry(loc)
            .map_or(0, |e| e.compressed_size)
    }

    /// Every zip entry under `<tag>/`.
    pub fn own_entries(&self) -> Vec<&'a str> {
        self.archive
            .entries_under(self.name)
            .map(|e| e.name.as_str())
            .collect()
    }
}

/// Counts and CRCs what is written through it.
struct CrcWriter<'w, W> {
    out: &'w mut W,
    crc: crc32fast::Hasher,
    len: u64,
}

impl<W: Write> Write for CrcWriter<'_, W> {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        let n = self.out.write(buf)?;
        self.crc.update(&buf[..n]);
        self.len += n as u64;
        Ok(n)
    }

    fn flush(&mut self) -> std::io::Result<()> {
        self.out.flush()
    }
}
