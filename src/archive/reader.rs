//! Reading archives: [`Archive`] over a memory map, a buffer or byte ranges, and reading
//! its entries and tensors. Opening (with journal recovery and retries) is in open.rs, one
//! [`Tag`](super::Tag) and its tables in tag.rs, [`Archive::verify`] in verify.rs.

use super::container::{self, Directory, METHOD_DEFLATED, METHOD_STORED, ZipEntry};
use super::shared_str::SharedStr;
use super::source::Ranged;
use super::tag::FileRef;
use super::text;
use crate::error::{Error, ErrorKind, Result};
use crate::tensor::codec::{DtypeMemo, RecordHead, decode_head, decode_head_recent};
use crate::tensor::{DType, Tensor, TensorView, decode_tensor};
use std::borrow::Cow;
use std::collections::HashMap;
use std::io::{Read, Write};
use std::ops::Range;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};

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
    /// to more than 16 MiB (default 100, as Apache POI's zip-bomb
    /// guard; `u64::MAX` turns the check off). Deflate reaches about 1032:1 on zeros, so
    /// without it a 4 MiB entry could make a reader allocate 4 GiB.
    pub max_inflate_ratio: u64,
    /// How long an open waits for another writer: one appending in place, whose
    /// journal lies beside the archive (default one minute, then an error of kind
    /// [`Locked`](ErrorKind::Locked)), or one whose file is changing under the parse
    /// (each of the open's few re-reads waits up to this long, and an archive still
    /// changing after them is the parse's error).
    /// `Duration::ZERO` never waits: such an archive is a `Locked` error at once (the
    /// Python package opens so first, on the calling thread, and waits only when told
    /// to, on a thread Ctrl-C can interrupt).
    pub writer_wait: std::time::Duration,
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
            writer_wait: std::time::Duration::from_secs(60),
        }
    }
}

impl OpenOptions {
    /// Whether a deflated entry of these sizes is within the size and ratio limits
    /// (what [`Archive::read_entry`] checks before inflating).
    pub(crate) fn admits_deflated(&self, uncompressed_size: u64, compressed_size: u64) -> bool {
        uncompressed_size <= self.max_inflated_size
            && uncompressed_size
                <= compressed_size
                    .saturating_mul(self.max_inflate_ratio)
                    .max(INFLATE_RATIO_FREE)
    }
}

/// Bytes of a tensor record read to decode its header without the map: a header with
/// LoD or many dims longer than this is decoded in the map.
#[cfg_attr(not(unix), allow(dead_code))]
const HEAD_PREAD: usize = 256;

pub(super) enum Backing {
    /// The map and the file it maps (read with `pread` by
    /// [`Tag::tensor_owned`](super::Tag::tensor_owned)).
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
    pub(super) backing: Backing,
    pub(super) dir: Directory,
    pub(super) tags: Vec<String>,
    /// Lowercased tag name -> position in `tags` (lookups ignore ASCII case).
    tag_index: HashMap<String, usize>,
    /// Top-level directory -> its entries' positions in the central directory, as runs
    /// of consecutive positions (a writer writes a directory's entries together: one run
    /// a tag, not one position an entry), so that per-tag work does not scan every entry
    /// once per tag.
    by_dir: HashMap<String, Vec<Range<usize>>>,
    /// Each tag's tables (by position in `tags`), parsed and checked by the first
    /// [`Archive::tag`](super::Archive::tag) that asks for them and shared by every
    /// [`Tag`](super::Tag) after it.
    pub(super) tables: Box<[OnceLock<Arc<TagTables>>]>,
    /// Decoded record headers of tensor entries, by position in the central directory:
    /// one decode per entry however many names, tags or listings ask for it (a deflated
    /// entry shared by thousands of tags is inflated once, and only as far as its header).
    /// One cell per central-directory entry, made at the first header asked for (24
    /// bytes an entry; a map of cells cost a hash, a lock and an allocation per entry).
    /// A listing keeps only each entry's dtype ([`Archive::file_dtypes`]).
    heads: OnceLock<Box<[HeadCell]>>,
    /// Where the data of each entry whose local header the open left unread
    /// ([`ZipEntry::unchecked_until`]) starts, by position in the central directory, once
    /// a read has checked the header (0 until then: no entry's data starts at byte 0).
    /// Made at the first such read, 8 bytes an entry.
    data_starts: OnceLock<Box<[AtomicU64]>>,
    /// The central directory with every local header checked ([`Archive::directory`]),
    /// read again from the file the first time a writer asks, when the open left headers
    /// unread.
    checked: OnceLock<Directory>,
    /// What reading this archive cost, counted so that tests can check it follows the
    /// distinct entries rather than the names that refer to them.
    pub(crate) work: WorkCounters,
    path: Option<PathBuf>,
    opts: OpenOptions,
}

/// One entry's decoded record header, filled by the first reader that asks; readers on
/// other threads asking meanwhile wait for it rather than decoding it again.
type HeadCell = Mutex<HeadSlot>;

/// What a [`HeadCell`] holds: the whole header once a reader needed it, its dtype alone
/// once a listing did (the rest of the header decoded, checked and dropped: describing
/// 100,000 tensors keeps 100,000 bytes, not 100,000 headers).
#[derive(Default)]
struct HeadSlot {
    head: Option<Arc<RecordHead>>,
    dtype: Option<DType>,
}

/// Work done reading one archive (relaxed atomic counters; tests read them through
/// `modelzip::internals::work_counts`).
#[derive(Debug, Default)]
pub(crate) struct WorkCounters {
    /// Deflated entries inflated whole (read, checked or hashed).
    pub(crate) inflated: AtomicU64,
    /// Deflated tensor entries inflated only as far as their record header.
    pub(crate) head_inflated: AtomicU64,
    /// Tensor record headers decoded for the header cache.
    pub(crate) heads_decoded: AtomicU64,
    /// Entries whose SHA-256 was computed (verify's manifest check).
    pub(crate) hashed: AtomicU64,
    /// Graphs decoded (verify).
    pub(crate) graphs_decoded: AtomicU64,
    /// Checks of a graph's references against a tag's parameters (verify: a TensorFlow,
    /// ONNX or PIR graph).
    pub(crate) graph_checks: AtomicU64,
}

impl WorkCounters {
    pub(crate) fn add(counter: &AtomicU64) {
        counter.fetch_add(1, Ordering::Relaxed);
    }
}

/// The same counts over every archive of the process (`test-internals`: the CLI reports
/// them for its tests, which cannot reach its archive).
#[cfg(feature = "test-internals")]
static PROCESS_WORK: std::sync::LazyLock<Mutex<std::collections::BTreeMap<usize, u64>>> =
    std::sync::LazyLock::new(Mutex::default);

/// A snapshot of the work one archive's reads did (`test-internals`).
#[cfg(feature = "test-internals")]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct WorkCounts {
    /// Deflated entries inflated whole.
    pub inflated: u64,
    /// Deflated tensor entries inflated only as far as their record header.
    pub head_inflated: u64,
    /// Tensor record headers decoded.
    pub heads_decoded: u64,
    /// Entries hashed with SHA-256.
    pub hashed: u64,
    /// Graphs decoded.
    pub graphs_decoded: u64,
    /// Checks of a graph's references against a tag's parameters.
    pub graph_checks: u64,
}

/// The work `archive`'s reads have done so far (`test-internals`).
#[cfg(feature = "test-internals")]
pub fn work_counts(archive: &Archive) -> WorkCounts {
    archive.work.snapshot()
}

/// The work every archive that this process dropped did (`test-internals`; the CLI
/// reports it, its archive being dropped by then).
#[cfg(feature = "test-internals")]
pub fn dropped_work_counts() -> WorkCounts {
    let all = PROCESS_WORK.lock().unwrap_or_else(|p| p.into_inner());
    let get = |k: usize| all.get(&k).copied().unwrap_or(0);
    WorkCounts {
        inflated: get(0),
        head_inflated: get(1),
        heads_decoded: get(2),
        hashed: get(3),
        graphs_decoded: get(4),
        graph_checks: get(5),
    }
}

#[cfg(feature = "test-internals")]
impl WorkCounters {
    fn snapshot(&self) -> WorkCounts {
        let get = |c: &AtomicU64| c.load(Ordering::Relaxed);
        WorkCounts {
            inflated: get(&self.inflated),
            head_inflated: get(&self.head_inflated),
            heads_decoded: get(&self.heads_decoded),
            hashed: get(&self.hashed),
            graphs_decoded: get(&self.graphs_decoded),
            graph_checks: get(&self.graph_checks),
        }
    }
}

#[cfg(feature = "test-internals")]
impl Drop for WorkCounters {
    fn drop(&mut self) {
        let w = self.snapshot();
        let mut all = PROCESS_WORK.lock().unwrap_or_else(|p| p.into_inner());
        for (k, v) in [
            w.inflated,
            w.head_inflated,
            w.heads_decoded,
            w.hashed,
            w.graphs_decoded,
            w.graph_checks,
        ]
        .into_iter()
        .enumerate()
        {
            *all.entry(k).or_default() += v;
        }
    }
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

/// One tag's params.txt, updater.txt and shared.txt, resolved and checked.
#[derive(Debug)]
pub(super) struct TagTables {
    pub(super) params: Vec<ParamEntry>,
    /// Each parameter's slot in `heads` (one per distinct tensor file: aliases share).
    pub(super) param_slot: Box<[u32]>,
    /// Slots in `heads`.
    pub(super) header_slots: usize,
    /// The decoded record headers of the parameters' stored entries, filled as
    /// [`Tag::param`](super::Tag::param) reads them; allocated on the first call.
    pub(super) heads: OnceLock<Box<[OnceLock<CachedHead>]>>,
    pub(super) updater: Vec<UpdaterEntry>,
    /// Built on the first lookup by name: listing a tag's params should not pay for it.
    pub(super) by_name: OnceLock<crate::keyed::KeyedMap<String, usize>>,
    /// The files shared.txt says the tag uses from other tags: (file, owning tag's
    /// position in tags.txt).
    pub(super) shared: Vec<(&'static str, usize)>,
}

/// A stored tensor entry's record header as decoding checked it: the data is the
/// entry's bytes from `header_len` on.
#[derive(Debug)]
pub(super) struct CachedHead {
    pub(super) dtype: crate::tensor::DType,
    pub(super) dims: Vec<u64>,
    pub(super) lod: crate::tensor::Lod,
    pub(super) header_len: usize,
}

/// Which graph encoding a tag holds (re-exported from [`crate::graph`]).
pub(crate) use crate::graph::GraphFormat;

/// Whether a tensor file is a parameter or updater state.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum TensorKind {
    /// `<tag>/params/N.lodtensor`.
    Params,
    /// `<tag>/updater/N.lodtensor`.
    Updater,
}

impl TensorLocation {
    /// The tag that owns the tensor file, spelled as in tags.txt: another tag than the
    /// one that lists it when [`TensorLocation::shared`].
    pub fn tag(&self) -> &str {
        &self.tag
    }

    /// The full zip entry name (`<tag>/params/<n>.lodtensor`).
    pub fn entry(&self) -> &str {
        &self.entry
    }
}

impl TensorKind {
    /// The directory name inside a tag.
    pub(crate) fn dir(self) -> &'static str {
        match self {
            TensorKind::Params => "params",
            TensorKind::Updater => "updater",
        }
    }
}

/// Where a tensor lives: the owning tag ([`TensorLocation::tag`]), the zip entry
/// ([`TensorLocation::entry`]), its kind and file number.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct TensorLocation {
    /// The owning tag, spelled as in tags.txt (shared by every location of the tag).
    pub(crate) tag: SharedStr,
    /// Params or updater.
    pub kind: TensorKind,
    /// The file number.
    pub index: u64,
    /// The full zip entry name.
    pub(crate) entry: SharedStr,
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

/// A tensor read from an archive ([`Tag::param`](super::Tag::param),
/// [`Tag::tensor`](super::Tag::tensor), [`Archive::tensor`]): [`TensorData::Mapped`], a
/// zero-copy [`TensorView`] of the archive's bytes, when the entry is stored (every
/// tensor modelzip writes is) and the archive is local (memory-mapped or read into
/// memory); [`TensorData::Owned`], a [`Tensor`], when the entry is deflated (a foreign
/// archive) or read by byte ranges from a remote one. [`TensorData::view`] borrows
/// either; [`Tag::tensor_owned`](super::Tag::tensor_owned) gives a `Tensor` without
/// copying out of the map.
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

impl Archive {
    pub(super) fn from_backing(
        backing: Backing,
        path: Option<PathBuf>,
        opts: OpenOptions,
    ) -> Result<Archive> {
        // The local headers are read as entries are read (or all at once for a writer,
        // `Archive::directory`).
        let dir = container::read::parse_lazy(backing.bytes());
        let dir = dir.map_err(|e| match &path {
            Some(p) => e.in_file(p),
            None => e,
        })?;
        Archive::from_directory(backing, dir, path, opts)
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

    pub(super) fn from_directory(
        backing: Backing,
        dir: Directory,
        path: Option<PathBuf>,
        opts: OpenOptions,
    ) -> Result<Archive> {
        let with_path = |e: Error| match &path {
            Some(p) => e.in_file(p),
            None => e,
        };
        let mut dir = dir;
        let by_dir = std::mem::take(&mut dir.dirs);
        let mut a = Archive {
            backing,
            dir,
            tags: Vec::new(),
            tag_index: HashMap::new(),
            by_dir,
            tables: Box::default(),
            heads: OnceLock::new(),
            data_starts: OnceLock::new(),
            checked: OnceLock::new(),
            work: WorkCounters::default(),
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
        a.tables = tags.iter().map(|_| OnceLock::new()).collect();
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
        self.tag_position(name)
            .and_then(|i| self.tags.get(i))
            .map(String::as_str)
    }

    /// The position in tags.txt of tag `name`, compared ignoring ASCII case.
    pub(super) fn tag_position(&self, name: &str) -> Option<usize> {
        self.tag_index.get(&name.to_ascii_lowercase()).copied()
    }

    /// The entries under the top-level directory `dir`, in central-directory order.
    pub(super) fn entries_under<'s>(
        &'s self,
        dir: &str,
    ) -> impl Iterator<Item = &'s ZipEntry> + 's {
        self.by_dir
            .get(dir)
            .into_iter()
            .flatten()
            .flat_map(|r| self.dir.entries.get(r.clone()).unwrap_or_default())
    }

    /// Every entry name, in central-directory order.
    pub fn entry_names(&self) -> impl Iterator<Item = &str> {
        self.dir.entries.iter().map(|e| &*e.name)
    }

    /// True when the archive has an entry of exactly this name.
    pub(crate) fn has_entry(&self, name: &str) -> bool {
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
            Some(e) if *e.name == *loc.entry => Some(e),
            _ => self.entry(&loc.entry),
        }
    }

    /// The bytes of the stored entry `loc` names, in a local archive's map or buffer;
    /// `None` for a deflated entry, a remote archive or a missing entry.
    pub(super) fn mapped_stored(&self, loc: &TensorLocation) -> Option<&[u8]> {
        if matches!(self.backing, Backing::Ranged(_)) {
            return None;
        }
        let e = self.location_entry(loc)?;
        if e.method != METHOD_STORED {
            return None;
        }
        let start = self.data_start(e).ok()?;
        let end = start.checked_add(e.compressed_size)?;
        self.bytes()
            .get(usize::try_from(start).ok()?..usize::try_from(end).ok()?)
    }

    /// Stored bytes of every entry under the top-level directory `dir` (a tag's own bytes).
    pub fn stored_bytes_under(&self, dir: &str) -> u64 {
        self.entries_under(dir).map(|e| e.compressed_size).sum()
    }

    /// The central directory as listed: names, sizes, CRCs, local header offsets, the
    /// directory's offset and the comment. An entry whose [`ZipEntry::unchecked_until`]
    /// is `Some` has not had its local header read: its `data_offset` is a lower bound
    /// (read its data through [`Archive::raw_data`], or use [`Archive::directory`]).
    pub(crate) fn listing(&self) -> &Directory {
        &self.dir
    }

    /// The central directory with every entry's local header checked, so each entry's
    /// exact extent (data offset, descriptor): what writers copy, move or keep. The open
    /// of a mapped archive leaves the local headers unread ([`container::read::parse_lazy`]);
    /// they are read here, all of them, the first time this is asked, as the eager open
    /// reads them, with its errors.
    pub(crate) fn directory(&self) -> Result<&Directory> {
        if !self.dir.entries.iter().any(|e| e.unchecked_until.is_some()) {
            return Ok(&self.dir);
        }
        if let Some(d) = self.checked.get() {
            return Ok(d);
        }
        let parsed = match &self.backing {
            #[cfg(unix)]
            // The directory parsed at the open, its local headers checked: the map is
            // not read at the old directory's place (a file shrunk since faults there).
            Backing::Map(map, file) => {
                use std::os::unix::fs::FileExt;
                container::read::check_lazy(map, &|buf, at| file.read_exact_at(buf, at), &self.dir)
            }
            b => container::read::parse(b.bytes()),
        };
        let parsed = parsed.map_err(|e| self.located(e))?;
        Ok(self.checked.get_or_init(|| parsed))
    }

    /// Where entry `e`'s data starts in the file. An entry whose local header the open
    /// left unread has it checked first, once ([`Archive::check_pending`]).
    pub(crate) fn data_start(&self, e: &ZipEntry) -> Result<u64> {
        self.check_pending(e).map(|c| c.start)
    }

    /// [`Archive::data_start`], with the first bytes of a stored entry's data when its
    /// header was checked by this call with a `pread` (as [`ZipEntry::read_head`]), and
    /// whether it was read so (by this call or an earlier one): then no page of the map
    /// holding it has been touched.
    fn check_pending(&self, e: &ZipEntry) -> Result<Checked> {
        if e.unchecked_until.is_none() {
            return Ok(Checked {
                start: e.data_offset,
                fresh: None,
                read_unmapped: e.read_head.is_some(),
            });
        }
        let found = self.position_of(e);
        let (entries, i) = match found {
            Some(i) => (&self.dir.entries[..], i),
            // Not one of this archive's entries (not reached): checked, not remembered.
            None => (std::slice::from_ref(e), 0),
        };
        let cell = found.map(|i| {
            &self.data_starts.get_or_init(|| {
                (0..self.dir.entries.len())
                    .map(|_| AtomicU64::new(0))
                    .collect()
            })[i]
        });
        if let Some(start) = cell.map(|c| c.load(Ordering::Relaxed)).filter(|&s| s != 0) {
            return Ok(Checked {
                start: start & !READ_UNMAPPED,
                fresh: None,
                read_unmapped: start & READ_UNMAPPED != 0,
            });
        }
        let (start, fresh) = match &self.backing {
            #[cfg(unix)]
            Backing::Map(map, file) => {
                use std::os::unix::fs::FileExt;
                container::read::check_local_lazy(
                    map,
                    Some(&|buf, at| {
                        #[cfg(test)]
                        HEADER_PREADS.with(|c| c.set(c.get() + 1));
                        file.read_exact_at(buf, at)
                    }),
                    entries,
                    i,
                    self.dir.cd_offset,
                )
            }
            b => container::read::check_local_lazy(b.bytes(), None, entries, i, self.dir.cd_offset),
        }
        .map_err(|err| self.located(err.in_entry(e.name.clone())))?;
        let read_unmapped = fresh.is_some();
        if let Some(c) = cell {
            // (Offsets inside a file are below 2^63: the top bit is free.)
            c.store(
                start | if read_unmapped { READ_UNMAPPED } else { 0 },
                Ordering::Relaxed,
            );
        }
        Ok(Checked {
            start,
            fresh,
            read_unmapped,
        })
    }

    /// The position of `e` in the central directory: found by its address when it is one
    /// of this archive's entries (what readers pass: no hashing per read), else by name.
    fn position_of(&self, e: &ZipEntry) -> Option<usize> {
        let size = std::mem::size_of::<ZipEntry>();
        let by_address = (e as *const ZipEntry as usize)
            .checked_sub(self.dir.entries.as_ptr() as usize)
            .filter(|at| at % size == 0)
            .map(|at| at / size)
            .filter(|&i| self.dir.entries.get(i).is_some_and(|x| std::ptr::eq(x, e)));
        by_address.or_else(|| {
            self.dir
                .index
                .get(&self.dir.entries, &e.name)
                .filter(|&i| self.dir.entries[i].header_offset == e.header_offset)
        })
    }

    /// Entry `e`'s data offset for an error message: checked if it was, else its lower
    /// bound.
    fn shown_data_offset(&self, e: &ZipEntry) -> u64 {
        self.data_start(e).unwrap_or(e.data_offset)
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
        // The parse, or check_pending, checked start..start + size lies inside the file.
        let start = self.data_start(e)?;
        let end = start.saturating_add(e.compressed_size);
        Ok(Cow::Borrowed(
            self.bytes()
                .get(start as usize..end as usize)
                .unwrap_or_default(),
        ))
    }

    pub(super) fn located(&self, e: Error) -> Error {
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
    pub(super) fn inflate_into(
        &self,
        e: &ZipEntry,
        raw: &[u8],
        out: &mut impl Write,
    ) -> Result<()> {
        self.check_inflate_limits(e)?;
        WorkCounters::add(&self.work.inflated);
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
                .at_offset(self.shown_data_offset(e))
        })?;
        self.check_inflated(e, sink.len, sink.crc.finalize())
    }

    /// Refuses to inflate deflated entry `e` past the size and ratio limits.
    fn check_inflate_limits(&self, e: &ZipEntry) -> Result<()> {
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
        Ok(())
    }

    /// Checks what inflating entry `e` gave: `len` bytes with CRC-32 `crc`.
    fn check_inflated(&self, e: &ZipEntry, len: u64, crc: u32) -> Result<()> {
        if len != e.uncompressed_size {
            return Err(Error::new(ErrorKind::Zip(format!(
                "entry inflates to {}{} bytes, the directory says {}",
                len,
                if len > e.uncompressed_size { "+" } else { "" },
                e.uncompressed_size
            )))
            .at_offset(self.shown_data_offset(e)));
        }
        if crc != e.crc32 {
            return Err(Error::new(ErrorKind::Checksum(format!(
                "CRC-32 {crc:08x}, the directory says {:08x}",
                e.crc32
            )))
            .at_offset(self.shown_data_offset(e)));
        }
        Ok(())
    }

    /// Checks entry `e` as [`Self::read_entry`] would read it, without keeping its bytes
    /// (a deflated entry is inflated in chunks: constant memory).
    pub(super) fn check_entry(&self, e: &ZipEntry) -> Result<()> {
        match e.method {
            METHOD_DEFLATED => self.inflate_into(e, &self.raw_data(e)?, &mut std::io::sink()),
            _ => self.read_entry(e).map(drop),
        }
    }

    /// Reads the tensor at `loc` (a location from [`Tag::params`](super::Tag::params) or
    /// [`Tag::updater`](super::Tag::updater) of this archive): zero-copy when the entry is
    /// stored in a local archive (a remote archive's bytes are fetched, so owned), decoded with the same strict LoDTensor checks as every other read. Unlike
    /// [`Tag::tensor`](super::Tag::tensor) it needs no parsed [`Tag`](super::Tag), so
    /// bindings that keep the locations can read without re-parsing.
    pub fn tensor(&self, loc: &TensorLocation) -> Result<TensorData<'_>> {
        let archive = self;
        let entry = archive.location_entry(loc);
        if let Some(view) = entry.and_then(|e| archive.view_unmapped(e)) {
            return Ok(TensorData::Mapped(view));
        }
        let bytes = match entry {
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

    /// The box of the tensor at `loc` that `ranges` selects, as
    /// [`TensorView::slice`](crate::TensorView::slice) selects it (one range per leading
    /// dimension, the rest whole; `&[a..b]` is rows `a..b`), reading only what it needs:
    ///
    /// - a stored entry of a local archive: a view of the map when the box is one run
    ///   (rows; no page of other rows is touched but the pages the box starts and ends
    ///   in), else the runs gathered into an owned tensor;
    /// - a stored entry of a remote archive: the record header (one batched request,
    ///   shared with [`Archive::tensor_heads`]; none when it was read before), then the
    ///   box's bytes: one range for rows, and for a box of several runs one range per run
    ///   (the store merges runs less than 1 MiB apart into one request), or the one range
    ///   that covers them when there are more than 4096;
    /// - a deflated entry: inflated whole and checked, then sliced.
    ///
    /// Bytes read by range are not checked against the entry's CRC-32, which covers the
    /// whole entry (as with a mapped view; `verify` checks it). Bad ranges are an
    /// [`ErrorKind::InvalidInput`] naming the dimension and the entry.
    pub fn tensor_slice(
        &self,
        loc: &TensorLocation,
        ranges: &[Range<u64>],
    ) -> Result<TensorData<'_>> {
        self.slice_at(loc, ranges, &format!("tensor {}", loc.entry))
    }

    /// The view of stored tensor entry `e` of a mapped archive whose local header was read
    /// without the map, decoding its record header from the first bytes kept from that
    /// read ([`ZipEntry::read_head`]) or else a `pread` of them, so that the view touches
    /// none of the map's pages (the data is mapped, not read). `None` when that does not
    /// apply or does not settle it (a long header, any error): the caller decodes the
    /// record in the map, with every check and the error it gives.
    fn view_unmapped(&self, e: &ZipEntry) -> Option<TensorView<'_>> {
        let Backing::Map(map, _) = &self.backing else {
            return None;
        };
        if let Some(view) = self.view_cached(map, e) {
            return Some(view);
        }
        let (data_offset, head) = self.head_unmapped(e)?;
        // decode_head checked header + data = the entry's size, and the parser that
        // the entry lies inside the file.
        let start = usize::try_from(data_offset + head.header_len).ok()?;
        let data = map.get(start..start.checked_add(usize::try_from(head.data_len).ok()?)?)?;
        TensorView::new(head.dtype, head.dims, head.lod, data).ok()
    }

    /// A view of stored tensor entry `e` of a mapped archive from the header cache
    /// ([`Archive::tensor_heads`] filled it, on this thread or another): no read at all.
    /// `None` when the cache does not hold the entry's header (or was never made).
    fn view_cached<'m>(&self, map: &'m [u8], e: &ZipEntry) -> Option<TensorView<'m>> {
        let cells = self.heads.get()?;
        if e.method != METHOD_STORED {
            return None;
        }
        let i = self.position_of(e)?;
        // Not waited for: a cell held is being filled, by another thread (which reads
        // the header itself; so does this one) or by this one, whose header decode can
        // come here for its view ([`Archive::decode_head_uncached`]).
        let head = match cells[i].try_lock() {
            Ok(slot) => slot.head.clone()?,
            Err(std::sync::TryLockError::Poisoned(p)) => p.into_inner().head.clone()?,
            Err(std::sync::TryLockError::WouldBlock) => return None,
        };
        // Cached by a read that checked the local header: its data start is remembered.
        let data_offset = self.check_pending(e).ok()?.start;
        let start = usize::try_from(data_offset + head.header_len).ok()?;
        let data = map.get(start..start.checked_add(usize::try_from(head.data_len).ok()?)?)?;
        TensorView::new(head.dtype, head.dims.clone(), head.lod.clone(), data).ok()
    }

    /// The record header of stored tensor entry `e` of a mapped archive and where the
    /// entry's data starts, read as [`Archive::view_unmapped`] reads it (no page of the
    /// map touched). `None` when that does not apply or does not settle it.
    fn head_unmapped(&self, e: &ZipEntry) -> Option<(u64, RecordHead)> {
        self.unmapped_with(e, decode_head_recent)
    }

    /// [`Archive::head_unmapped`] with `decode` for the header's decode (all of it, or
    /// the dtype alone).
    fn unmapped_with<T>(
        &self,
        e: &ZipEntry,
        mut decode: impl FnMut(&[u8], u64) -> Result<Option<T>>,
    ) -> Option<(u64, T)> {
        #[cfg(unix)]
        if let Backing::Map(_, file) = &self.backing
            && e.method == METHOD_STORED
        {
            use std::os::unix::fs::FileExt;
            // A header this call checks with a `pread` comes with the data's first bytes.
            let Checked {
                start: data_offset,
                fresh,
                read_unmapped,
            } = self.check_pending(e).ok()?;
            let kept = match (&fresh, e.read_head.as_deref()) {
                (Some((bytes, n)), _) => Some(&bytes[..*n]),
                (None, Some((bytes, n))) => Some(&bytes[..*n]),
                // Checked through the map, whose page holding the header is then in: the
                // entry's bytes there (the decode reads only its header), not the whole
                // read of a view (`tensor`: the record, its dims and LoD copied, 12 % of
                // a listing without a summary; docs/BENCHMARKS.md, P5).
                (None, None) if !read_unmapped => {
                    #[cfg(test)]
                    MAP_HEADER_READS.with(|c| c.set(c.get() + 1));
                    let at = usize::try_from(data_offset).ok()?;
                    let len = usize::try_from(e.compressed_size).ok()?;
                    Some(self.backing.bytes().get(at..at.checked_add(len)?)?)
                }
                // Checked with a `pread` by an earlier call, which used the bytes it read:
                // read them again rather than fault the page into the map (~0.4 µs
                // against ~1-2 µs, docs/BENCHMARKS.md, Py1).
                (None, None) => None,
            };
            let kept = kept.and_then(|k| decode(k, e.compressed_size).ok().flatten());
            let head = match kept {
                Some(h) => h,
                None => {
                    let mut prefix = [0u8; HEAD_PREAD];
                    // Not past the page the data starts in (whose record header is there):
                    // no page of rows only is read for a header.
                    let page_left = container::read::PAGE - data_offset % container::read::PAGE;
                    let n = (e.compressed_size as usize)
                        .min(HEAD_PREAD)
                        .min(page_left as usize);
                    #[cfg(test)]
                    HEADER_PREADS.with(|c| c.set(c.get() + 1));
                    file.read_exact_at(&mut prefix[..n], data_offset).ok()?;
                    decode(&prefix[..n], e.compressed_size).ok()??
                }
            };
            return Some((data_offset, head));
        }
        let _ = (e, decode);
        None
    }

    /// What each tensor's header says (dtype, dims, LoD), checked as a full read checks
    /// a header, including that header and data fill the entry exactly. Each entry's
    /// header is decoded once per archive, however many names, tags or calls ask for it.
    /// The data and its CRC-32 are not read: from a remote archive only the first bytes
    /// of each stored tensor are fetched (one batched request), and a deflated tensor is
    /// inflated only as far as its header. What listings need without reading the
    /// tensors. A header that the first bytes do not hold is read whole.
    pub fn tensor_heads(&self, locs: &[&TensorLocation]) -> Result<Vec<RecordHead>> {
        Ok(self
            .shared_heads(locs)?
            .into_iter()
            .map(|h| RecordHead::clone(&h))
            .collect())
    }

    /// [`Archive::tensor_heads`] without copying the cached headers (their LoD).
    pub(crate) fn shared_heads(&self, locs: &[&TensorLocation]) -> Result<Vec<Arc<RecordHead>>> {
        let entries: Vec<Option<(usize, &ZipEntry)>> =
            locs.iter().map(|l| self.location_index(l)).collect();
        let mut out: Vec<Option<Arc<RecordHead>>> = entries
            .iter()
            .map(|e| {
                let cell = self.head_cell(e.as_ref()?.0);
                cell.lock().unwrap_or_else(|p| p.into_inner()).head.clone()
            })
            .collect();
        let mut probes: Vec<Option<Vec<u8>>> = vec![None; locs.len()];
        if let Backing::Ranged(r) = &self.backing {
            let mut asked = std::collections::HashSet::new();
            let stored: Vec<(usize, &ZipEntry)> = entries
                .iter()
                .zip(&out)
                .enumerate()
                .filter_map(|(k, (e, cached))| match (e, cached) {
                    (Some((i, e)), None) if e.method == METHOD_STORED && asked.insert(*i) => {
                        Some((k, *e))
                    }
                    _ => None,
                })
                .collect();
            let es: Vec<&ZipEntry> = stored.iter().map(|(_, e)| *e).collect();
            let got = r.probe(&es, HEAD_PROBE).map_err(|e| self.located(e))?;
            for ((k, _), w) in stored.into_iter().zip(got) {
                probes[k] = Some(w);
            }
        }
        for (k, loc) in locs.iter().enumerate() {
            if out[k].is_some() {
                continue;
            }
            let Some((i, e)) = entries[k] else {
                // No such entry: the full read says so, in its words.
                out[k] = Some(Arc::new(self.decode_head_uncached(loc, None, None)?));
                continue;
            };
            // Held while decoding: another thread asking for this entry waits for the
            // header instead of decoding it again (an entry asked for twice in this
            // call was decoded for its first ask).
            let cell = self.head_cell(i);
            let mut slot = cell.lock().unwrap_or_else(|p| p.into_inner());
            let head = match &slot.head {
                Some(h) => Arc::clone(h),
                None => {
                    let h = Arc::new(self.decode_head_uncached(loc, Some(e), probes[k].take())?);
                    WorkCounters::add(&self.work.heads_decoded);
                    slot.head = Some(Arc::clone(&h));
                    slot.dtype = Some(h.dtype);
                    h
                }
            };
            out[k] = Some(head);
        }
        Ok(out.into_iter().flatten().collect())
    }

    /// The dtype of each tensor file of `files` (entries by position), from its record
    /// header checked as [`Archive::shared_heads`] checks it, but keeping only the dtype
    /// of each entry (what a listing needs). A remote archive's headers are fetched and
    /// kept whole (one batched request: [`Archive::shared_heads`]).
    pub(super) fn file_dtypes(&self, files: &[FileRef<'_>]) -> Result<Vec<DType>> {
        if matches!(self.backing, Backing::Ranged(_)) {
            let locs: Vec<TensorLocation> = files.iter().map(|f| f.location(self)).collect();
            let locs: Vec<&TensorLocation> = locs.iter().collect();
            return Ok(self.shared_heads(&locs)?.iter().map(|h| h.dtype).collect());
        }
        thread_local! {
            /// Each place's last header in the tags this thread described: the same
            /// place in the next tag (of many checkpoints of one model) has the same
            /// header, whose dtype is then known without a decode.
            static MEMO: std::cell::Cell<DtypeMemo> = std::cell::Cell::new(DtypeMemo::default());
        }
        let mut memo = MEMO.take();
        let found = self.file_dtypes_with(files, &mut memo);
        MEMO.set(memo);
        found
    }

    fn file_dtypes_with(&self, files: &[FileRef<'_>], memo: &mut DtypeMemo) -> Result<Vec<DType>> {
        let bytes = self.backing.bytes();
        files
            .iter()
            .enumerate()
            .map(|(k, f)| {
                // The local header (and the record header after it) of a tensor a few
                // ahead: each lies on a page of its own that the decode below would
                // otherwise wait for (docs/BENCHMARKS.md, P5).
                if let Some(e) = files
                    .get(k + PREFETCH_AHEAD)
                    .and_then(|ahead| self.dir.entries.get(ahead.entry))
                {
                    prefetch(bytes, e.header_offset);
                    prefetch(bytes, e.header_offset.saturating_add(64));
                }
                let e = &self.dir.entries[f.entry];
                // Held while decoding, as in shared_heads.
                let mut slot = self
                    .head_cell(f.entry)
                    .lock()
                    .unwrap_or_else(|p| p.into_inner());
                if let Some(d) = slot.dtype {
                    return Ok(d);
                }
                // A local stored entry's header where it lies; any other read as
                // `tensor_heads` reads it.
                let d = match self.unmapped_with(e, |b, len| memo.dtype(k, b, len)) {
                    Some((_, d)) => d,
                    None => {
                        self.decode_head_uncached(&f.location(self), Some(e), None)?
                            .dtype
                    }
                };
                WorkCounters::add(&self.work.heads_decoded);
                slot.dtype = Some(d);
                Ok(d)
            })
            .collect()
    }

    /// The header cache's cell of entry `i` (`i` is a position in the central directory).
    fn head_cell(&self, i: usize) -> &HeadCell {
        let cells = self.heads.get_or_init(|| {
            (0..self.dir.entries.len())
                .map(|_| HeadCell::default())
                .collect()
        });
        &cells[i]
    }

    /// The position in the central directory and the entry `loc` names.
    fn location_index(&self, loc: &TensorLocation) -> Option<(usize, &ZipEntry)> {
        match self.dir.entries.get(loc.entry_hint) {
            Some(e) if *e.name == *loc.entry => Some((loc.entry_hint, e)),
            _ => {
                let i = self.dir.index.get(&self.dir.entries, &loc.entry)?;
                Some((i, self.dir.entries.get(i)?))
            }
        }
    }

    /// Decodes the record header of the tensor at `loc` (entry `e`): from `probe`, the
    /// first bytes of a remote stored entry; from the first inflated bytes of a local
    /// deflated entry; else from a full read.
    fn decode_head_uncached(
        &self,
        loc: &TensorLocation,
        e: Option<&ZipEntry>,
        probe: Option<Vec<u8>>,
    ) -> Result<RecordHead> {
        if let (Some(e), Some(w)) = (e, probe)
            && let Ok(prefix) =
                container::read::check_local_prefix(&w, self.len_bytes(), e, self.dir.cd_offset)
        {
            // The local header is checked: a slice read of this entry needs no other.
            if let Backing::Ranged(r) = &self.backing {
                let at = prefix.as_ptr() as usize - w.as_ptr() as usize;
                r.note_data_start(e, e.header_offset + at as u64);
            }
            if let Ok(Some(h)) = decode_head(prefix, e.compressed_size) {
                return Ok(h);
            }
        }
        // A local stored entry: its header alone, as a view would decode it (not the
        // view, whose dims and LoD the head would copy).
        if let Some((_, h)) = e.and_then(|e| self.head_unmapped(e)) {
            return Ok(h);
        }
        if let Some(e) = e
            && e.method == METHOD_DEFLATED
            && !matches!(self.backing, Backing::Ranged(_))
        {
            return self
                .inflate_head(e)
                .map_err(|err| self.located(err.in_entry(loc.entry.clone())));
        }
        let t = self.tensor(loc)?;
        let v = t.view();
        let data_len = v.data().len() as u64;
        let entry_len = e.map_or(data_len, |e| e.uncompressed_size);
        Ok(RecordHead {
            dtype: v.dtype(),
            dims: v.dims().to_vec(),
            lod: v.lod().clone(),
            header_len: entry_len.saturating_sub(data_len),
            data_len,
        })
    }

    /// The record header of deflated tensor entry `e`, inflating only as many bytes as
    /// the header takes (the first 256, doubled until the header decodes), within the
    /// entry's size and ratio limits. The rest of the entry, its length and its CRC-32
    /// are not checked here (a full read or `verify` checks them).
    fn inflate_head(&self, e: &ZipEntry) -> Result<RecordHead> {
        self.check_inflate_limits(e)?;
        WorkCounters::add(&self.work.head_inflated);
        let raw = self.raw_data(e)?;
        let mut decoder = flate2::read::DeflateDecoder::new(&raw[..]).take(e.uncompressed_size);
        let mut prefix: Vec<u8> = Vec::new();
        loop {
            let want = (prefix.len() as u64 * 2).max(256).min(e.uncompressed_size);
            let before = prefix.len() as u64;
            (&mut decoder)
                .take(want - before)
                .read_to_end(&mut prefix)
                .map_err(|err| {
                    Error::new(ErrorKind::Zip(format!("deflate stream is corrupt: {err}")))
                        .at_offset(self.shown_data_offset(e))
                })?;
            let have = prefix.len() as u64;
            if have < want {
                return Err(Error::new(ErrorKind::Zip(format!(
                    "entry inflates to {have} bytes, the directory says {}",
                    e.uncompressed_size
                )))
                .at_offset(self.shown_data_offset(e)));
            }
            match decode_head(&prefix, e.uncompressed_size) {
                Ok(Some(h)) => return Ok(h),
                Ok(None) => {}
                // A header that does not decode: the error a full read gives (a stream
                // longer or shorter than declared, a bad CRC-32 come first), as every
                // other read reports it.
                Err(err) => {
                    let full = self.read_entry(e)?;
                    decode_tensor(&full)?;
                    return Err(err);
                }
            }
            if have >= e.uncompressed_size {
                // decode_head decides a prefix as long as the entry; not reached.
                return decode_tensor(&prefix).map(|v| RecordHead {
                    dtype: v.dtype(),
                    dims: v.dims().to_vec(),
                    lod: v.lod().clone(),
                    header_len: have - v.data().len() as u64,
                    data_len: v.data().len() as u64,
                });
            }
        }
    }

    /// Size of the archive file in bytes.
    pub fn len_bytes(&self) -> u64 {
        self.backing.len()
    }

    /// Bytes no live entry or the central directory uses (left by in-place appends);
    /// a compaction would drop them. Reads every local header the open left unread (an
    /// entry's extra field is part of what it uses); if one does not check, the bytes
    /// counted are the central directory's lower bounds.
    pub fn dead_bytes(&self) -> u64 {
        let dir = self.directory().unwrap_or(&self.dir);
        let live: u64 = dir.entries.iter().map(ZipEntry::footprint).sum();
        let end = self.len_bytes().saturating_sub(self.dir.cd_offset);
        self.len_bytes().saturating_sub(live.saturating_add(end))
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

/// How many tensors ahead [`Archive::file_dtypes`] asks the CPU to fetch a local header.
const PREFETCH_AHEAD: usize = 16;

/// Asks the CPU to bring the cache line at `bytes[at]` in (nothing when `at` is outside).
#[inline]
fn prefetch(bytes: &[u8], at: u64) {
    #[cfg(target_arch = "x86_64")]
    if let Some(b) = usize::try_from(at).ok().and_then(|a| bytes.get(a)) {
        // Safety: `_mm_prefetch` needs SSE, which every x86_64 CPU has (the target's
        // baseline); a prefetch changes nothing the program sees and cannot fault, and
        // `b` is a byte of the map anyway. (Measured: CPU of `tags` on 100,000 listed
        // tensors -10 %, docs/BENCHMARKS.md.)
        unsafe {
            core::arch::x86_64::_mm_prefetch::<{ core::arch::x86_64::_MM_HINT_T0 }>(
                (b as *const u8).cast(),
            )
        };
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = (bytes, at);
}

/// The top bit of a remembered data start ([`Archive::check_pending`]): the entry's local
/// header was read with a `pread`, not through the map.
const READ_UNMAPPED: u64 = 1 << 63;

/// What [`Archive::check_pending`] found.
struct Checked {
    /// Where the entry's data starts in the file.
    start: u64,
    /// The data's first bytes, when this call read the header with a `pread`.
    fresh: Option<container::read::HeadPrefix>,
    /// The header was read with a `pread` (by this call or an earlier one).
    read_unmapped: bool,
}

#[cfg(test)]
thread_local! {
    /// How many record headers this thread's views decoded from the map itself.
    static MAP_HEADER_READS: std::cell::Cell<usize> = const { std::cell::Cell::new(0) };
    /// How many `pread`s of a local or record header this thread made.
    static HEADER_PREADS: std::cell::Cell<usize> = const { std::cell::Cell::new(0) };
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{ArchiveWriter, TagBuilder};

    /// An archive of one tag of `count` distinct tensors of `len` floats.
    fn far_archive(dir: &std::path::Path, len: usize, count: usize) -> std::path::PathBuf {
        let path = dir.join("m.zip");
        let mut tag = TagBuilder::new("t");
        for i in 0..count {
            // Distinct values: one file each (equal tensors would share one).
            let vals: Vec<f32> = (0..len).map(|j| (i * len + j) as f32).collect();
            let t = Tensor::from_slice(vec![len as u64], &vals).unwrap();
            tag = tag.param(format!("w{i}"), t);
        }
        let mut w = ArchiveWriter::create(&path).unwrap();
        w.add_tag(tag).unwrap();
        w.finish().unwrap();
        path
    }

    /// Views of each of `count` tensors of `len` floats, each viewed `times` times: how
    /// many of their record headers were decoded from the map.
    fn map_header_reads(len: usize, count: usize, times: usize) -> usize {
        let d = tempfile::tempdir().unwrap();
        let a = Archive::open(far_archive(d.path(), len, count)).unwrap();
        let t = a.latest().unwrap();
        let before = MAP_HEADER_READS.with(|c| c.get());
        for _ in 0..times {
            for p in t.params() {
                let got = t.tensor(&p.location).unwrap();
                assert!(matches!(&got, TensorData::Mapped(v) if v.dims() == [len as u64]));
            }
        }
        MAP_HEADER_READS.with(|c| c.get()) - before
    }

    /// Each tensor's view: dtype, dims and data address.
    fn views(a: &Archive) -> Vec<(DType, Vec<u64>, usize, usize)> {
        let t = a.latest().unwrap();
        t.params()
            .iter()
            .map(|p| match t.tensor(&p.location).unwrap() {
                TensorData::Mapped(v) => (
                    v.dtype(),
                    v.dims().to_vec(),
                    v.data().as_ptr() as usize,
                    v.data().len(),
                ),
                TensorData::Owned(_) => panic!("{}: not a view", p.name),
            })
            .collect()
    }

    #[test]
    fn headers_read_ahead_on_another_thread_serve_views_without_a_read() {
        let d = tempfile::tempdir().unwrap();
        let path = far_archive(d.path(), 1 << 14, 24); // 64 KiB apart: read with `pread`
        let a = Archive::open(&path).unwrap();
        let fresh = Archive::open(&path).unwrap();
        let base = |x: &Archive| x.bytes().as_ptr() as usize;
        let t = a.latest().unwrap();
        let locs: Vec<&TensorLocation> = t.params().iter().map(|p| &p.location).collect();
        // The second half's headers, read on another thread into the cache.
        std::thread::scope(|s| {
            s.spawn(|| a.tensor_heads(&locs[12..]).unwrap());
        });
        let before = HEADER_PREADS.with(|c| c.get());
        let got = views(&a);
        // The first half read theirs; the second half none.
        assert_eq!(HEADER_PREADS.with(|c| c.get()) - before, 12);
        let want = views(&fresh);
        assert_eq!(got.len(), 24);
        for (g, w) in got.iter().zip(&want) {
            assert_eq!(
                (&g.0, &g.1, g.2 - base(&a), g.3),
                (&w.0, &w.1, w.2 - base(&fresh), w.3)
            );
        }
    }

    #[test]
    fn a_bad_header_asked_for_by_tensor_heads_is_an_error_not_a_wait() {
        let d = tempfile::tempdir().unwrap();
        let path = far_archive(d.path(), 1 << 14, 4);
        let (name, at) = {
            let a = Archive::open(&path).unwrap();
            let t = a.latest().unwrap();
            let loc = t.params()[3].location.clone();
            let e = a.location_entry(&loc).unwrap().clone();
            (loc, a.data_start(&e).unwrap())
        };
        let mut bytes = std::fs::read(&path).unwrap();
        bytes[at as usize] = 9; // the record's version
        std::fs::write(&path, &bytes).unwrap();
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let a = Archive::open(&path).unwrap();
            let t = a.latest().unwrap();
            // The cache exists (the first tensor's header is in it) when the bad one's
            // decode falls back to a full read, which asks the cache for a view.
            a.tensor_heads(&[&t.params()[0].location]).unwrap();
            let heads = a.tensor_heads(&[&name]).map(|_| ());
            let view = t.tensor(&name).map(|_| ());
            let _ = tx.send((heads, view));
        });
        let (heads, view) = rx
            .recv_timeout(std::time::Duration::from_secs(60))
            .expect("tensor_heads of a bad header waited for itself");
        let (heads, view) = (heads.unwrap_err(), view.unwrap_err());
        assert!(heads.to_string().contains("version"), "{heads}");
        assert_eq!(heads.to_string(), view.to_string());
    }

    #[test]
    fn a_header_read_with_pread_is_read_so_again_not_through_the_map() {
        // 256 KiB apart: each header is read with `pread`, the first time and after.
        assert_eq!(map_header_reads(1 << 16, 16, 3), 0);
        // 64 small tensors share their 64 KiB blocks: checked in the map, whose page is
        // then in, and read there every time (the count is live).
        assert_eq!(map_header_reads(16, 64, 3), 3 * 64);
    }
}
