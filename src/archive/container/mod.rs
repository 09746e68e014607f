//! The zip container, just the subset modelzip needs: parsing end records, the central
//! directory and local headers with every size checked, and writing entries sequentially.
//!
//! # Why our own, not a zip crate
//!
//! Three things the archive format needs that the crates looked at (November 2026) do not
//! give:
//!
//! - **Alignment of a point inside an entry.** A stored tensor must have its first
//!   element, which follows a variable-length LoDTensor header (LoD table, TensorDesc),
//!   at a multiple of [`DATA_ALIGN`], so that a memory map can be viewed as `&[f32]`.
//!   `zip` 9.4.1's `SimpleFileOptions::with_alignment` aligns only the start of an
//!   entry's data, and when the padding would not fit the extra field it skips the
//!   alignment silently (`write.rs`, "Skip alignment.") rather than fail. Here
//!   [`EntrySpec::align_after`](write::EntrySpec::align_after) pads so that the byte `h`
//!   into the data is aligned, and the exact local-header bytes are known before they
//!   are written.
//! - **A crash-safe in-place append.** `zip` 9.4.1's `ZipWriter::new_append` writes the
//!   new entries and a new central directory over the existing archive's end in place,
//!   with no journal or other rollback: a crash in between leaves a file without a valid
//!   end record. modelzip saves the bytes it overwrites to a fsynced journal first
//!   (`journal.rs`) and re-emits the old central directory from what this parser read.
//! - **Checks on every open.** `zip` 9.4.1's reader checks that entries do not overlap
//!   only when asked (`ZipArchive::has_overlapping_entries`,
//!   `validate_header_consistency`); [`parse`](read::parse) always checks each local header against
//!   its central record and that no two entries (local header, data, data descriptor)
//!   share a byte, before a tensor is viewed in place.
//!
//! `rawzip` (0.4.4, 0.5.1: pre-1.0) fits the reading side (zero-copy, no allocation per
//! entry), but its `ZipArchiveWriterBuilder` only starts a new archive (`with_offset`
//! places one after prelude bytes); it cannot continue an existing archive's entries,
//! which an append needs. The writer here is also one forward-only `Write`, so a failing
//! sink can be injected in the crash tests.

use super::entry_name::{check_entry_name, plainly_safe};
use crate::error::{Error, ErrorKind, Result};
use std::hash::BuildHasher;

pub(super) mod read;
#[cfg(test)]
mod tests;
pub(super) mod write;

const SIG_LOCAL: u32 = 0x0403_4b50;
const SIG_CENTRAL: u32 = 0x0201_4b50;
const SIG_EOCD: u32 = 0x0605_4b50;
const SIG_EOCD64: u32 = 0x0606_4b50;
const SIG_LOCATOR64: u32 = 0x0706_4b50;
const SIG_DESCRIPTOR: u32 = 0x0807_4b50;
const ZIP64_EXTRA: u16 = 0x0001;
/// The extra-field id of Android's zipalign padding (data: u16 alignment, then zeros).
/// Readers that do not know it skip it, as the zip spec requires.
pub(crate) const ALIGN_EXTRA: u16 = 0xd935;
/// Alignment of tensor raw data in the file.
pub(crate) const DATA_ALIGN: u64 = 64;
const FLAG_ENCRYPTED: u16 = 0x0001;
const FLAG_DESCRIPTOR: u16 = 0x0008;
const FLAG_UTF8: u16 = 0x0800;
const U32_MAX: u64 = 0xffff_ffff;

/// Compression method: stored.
pub const METHOD_STORED: u16 = 0;
/// Compression method: deflate.
pub const METHOD_DEFLATED: u16 = 8;

/// One entry, as parsed from the central directory (and checked against its local header).
#[derive(Debug, Clone)]
pub struct ZipEntry {
    /// Entry name (UTF-8, checked safe).
    pub name: Box<str>,
    /// Compression method.
    pub method: u16,
    /// General-purpose flags.
    pub flags: u16,
    /// CRC-32 of the uncompressed data.
    pub crc32: u32,
    /// Size of the stored bytes.
    pub compressed_size: u64,
    /// Size after decompression.
    pub uncompressed_size: u64,
    /// Offset of the local header.
    pub header_offset: u64,
    /// Offset of the first data byte (after the local header).
    pub data_offset: u64,
    /// Length of the data descriptor after the data: 0 when general-purpose flag bit 3
    /// is clear, else 12, 16, 20 or 24 (with or without its signature, 32- or 64-bit
    /// sizes), as found by the parser.
    pub descriptor_len: u8,
    /// DOS modification time.
    pub dos_time: u16,
    /// DOS modification date.
    pub dos_date: u16,
    /// Version made by (high byte: host system).
    pub version_made_by: u16,
    /// External attributes (Unix mode in the high 16 bits).
    pub external_attrs: u32,
    /// Internal attributes.
    pub internal_attrs: u16,
    /// The central-directory extra fields other than Zip64 and the entry comment, when
    /// either is not empty (rare: kept apart, so that every entry is 32 bytes smaller).
    pub rare: Option<Box<RareFields>>,
    /// `Some` when [`parse_mapped`](read::parse_mapped) checked the local header in bytes
    /// read with `pread` rather than through the file's map (an entry with few others in
    /// its 64 KiB of the file, whose page is then not mapped): the first bytes of the
    /// entry's data read with it, up to 64 for a stored entry (a tensor record's header
    /// without LoD fits, so decoding it needs no second read), none for a deflated one.
    /// `None` when the header was checked through the map, or not read (remote, written).
    /// (A thin box of a fixed buffer and its length: one pointer in every entry.)
    pub read_head: Option<Box<read::HeadPrefix>>,
    /// `Some(limit)` when the open left the local header unread ([`read::parse_lazy`]):
    /// `data_offset` is then only its lower bound (a header without an extra field) and
    /// the entry's local header, data and data descriptor must end at or before `limit`
    /// (the next entry's local header, or the central directory). The reader checks the
    /// header the first time the entry's data is read ([`read::check_local_lazy`]).
    /// `None` when the header was checked, or the entry was written here.
    pub unchecked_until: Option<std::num::NonZeroU64>,
}

/// What few entries have: see [`ZipEntry::rare`].
#[derive(Debug, Clone, Default)]
pub struct RareFields {
    /// Central-directory extra fields other than Zip64.
    pub cd_extra: Box<[u8]>,
    /// Entry comment.
    pub comment: Box<[u8]>,
}

impl ZipEntry {
    /// One past the last data byte.
    pub fn data_end(&self) -> u64 {
        self.data_offset.saturating_add(self.compressed_size)
    }

    /// Bytes of the file this entry occupies (local header, data, descriptor).
    pub fn footprint(&self) -> u64 {
        (self.data_end() - self.header_offset).saturating_add(u64::from(self.descriptor_len))
    }

    /// The central-directory extra fields other than Zip64.
    pub fn cd_extra(&self) -> &[u8] {
        self.rare.as_ref().map_or(&[], |r| &r.cd_extra)
    }

    /// The entry comment.
    pub fn comment(&self) -> &[u8] {
        self.rare.as_ref().map_or(&[], |r| &r.comment)
    }
}

/// The parsed central directory.
#[derive(Debug, Clone)]
pub struct Directory {
    /// Entries in central-directory order.
    pub entries: Vec<ZipEntry>,
    /// Name -> position in `entries`.
    pub index: NameIndex,
    /// The entries under each top-level directory, as runs of positions in `entries`.
    pub dirs: DirRuns,
    /// Offset of the central directory; everything from here to EOF is end records.
    pub cd_offset: u64,
    /// Archive comment.
    pub comment: Vec<u8>,
}

/// The entries under each top-level directory (a tag's files), as runs of consecutive
/// positions in the entry list: every writer writes a tag's files in one go, so a tag is
/// one run, not a position a file.
pub type DirRuns = std::collections::HashMap<String, Vec<std::ops::Range<usize>>>;

/// [`DirRuns`] of `entries`: a run of entries of one directory is added to the map at
/// once, so a name is hashed and allocated per run, not per entry (callgrind of opening
/// 100,301 entries: 58 M instructions as one `entry(top.to_string())` per entry;
/// BENCHMARKS.md, P5). Entries outside any directory are in none.
pub(crate) fn dir_runs(entries: &[ZipEntry]) -> DirRuns {
    let mut dirs = DirRuns::new();
    // The current run: its directory's name and positions.
    let mut run: Option<(&str, std::ops::Range<usize>)> = None;
    for (i, e) in entries.iter().enumerate() {
        let name = e.name.as_bytes();
        // Most entries continue the run before them: checked without looking for the '/'.
        if let Some((t, r)) = &mut run
            && r.end == i
            && name.get(t.len()) == Some(&b'/')
            && name.starts_with(t.as_bytes())
        {
            r.end = i + 1;
            continue;
        }
        let Some(slash) = memchr::memchr(b'/', name) else {
            continue;
        };
        if let Some((t, r)) = run.replace((&e.name[..slash], i..i + 1)) {
            dirs.entry(t.to_string()).or_default().push(r);
        }
    }
    if let Some((t, r)) = run {
        dirs.entry(t.to_string()).or_default().push(r);
    }
    dirs
}

/// Entry name -> position in the entry list, holding positions only: the names stay in
/// the entries (one allocation per entry instead of two, docs/BENCHMARKS-history.md P5).
/// Hashed with a random seed per index ([`crate::keyed`]): a file cannot choose names
/// that all hash alike.
#[derive(Debug, Clone, Default)]
pub struct NameIndex {
    table: hashbrown::HashTable<usize>,
    hasher: crate::keyed::KeyedState,
}

impl NameIndex {
    fn with_capacity(n: usize) -> NameIndex {
        NameIndex {
            table: hashbrown::HashTable::with_capacity(n),
            hasher: crate::keyed::KeyedState::default(),
        }
    }

    /// The position of `name` in `entries`, if present.
    pub fn get(&self, entries: &[ZipEntry], name: &str) -> Option<usize> {
        let h = self.hasher.hash_one(name);
        self.table
            .find(h, |&i| entries.get(i).is_some_and(|e| *e.name == *name))
            .copied()
    }

    /// Adds entry `i` of `entries`; false (and nothing added) when its name is present.
    fn insert(&mut self, entries: &[ZipEntry], i: usize) -> bool {
        let name = &*entries[i].name;
        let hasher = &self.hasher;
        let h = hasher.hash_one(name);
        match self.table.entry(
            h,
            |&j| *entries[j].name == *name,
            |&j| hasher.hash_one(&*entries[j].name),
        ) {
            hashbrown::hash_table::Entry::Occupied(_) => false,
            hashbrown::hash_table::Entry::Vacant(v) => {
                v.insert(i);
                true
            }
        }
    }
}

fn zip_err(msg: impl Into<String>, offset: u64) -> Error {
    Error::new(ErrorKind::Zip(msg.into())).at_offset(offset)
}

/// Bounds-checked reads from a window of the file: the whole file for a local archive,
/// the fetched bytes (`base..base + bytes.len()`) for a remote one.
pub(crate) struct At<'a> {
    bytes: &'a [u8],
    base: u64,
    file_len: u64,
}

impl<'a> At<'a> {
    /// The whole file.
    pub(crate) fn whole(bytes: &'a [u8]) -> At<'a> {
        At {
            bytes,
            base: 0,
            file_len: bytes.len() as u64,
        }
    }

    /// Bytes `base..base + bytes.len()` of a file of `file_len` bytes.
    #[cfg_attr(not(feature = "remote"), allow(dead_code))]
    pub(crate) fn window(bytes: &'a [u8], base: u64, file_len: u64) -> At<'a> {
        At {
            bytes,
            base,
            file_len,
        }
    }

    /// True when `offset..offset + len` lies in the window.
    pub(crate) fn covers(&self, offset: u64, len: u64) -> bool {
        offset >= self.base
            && offset
                .checked_add(len)
                .is_some_and(|end| end <= self.base + self.bytes.len() as u64)
    }

    // Inlined, its errors built out of line: a listing slices three times per entry.
    #[inline]
    fn slice(&self, offset: u64, len: u64, what: &str) -> Result<&'a [u8]> {
        match offset.checked_add(len) {
            Some(end) if end <= self.file_len && self.covers(offset, len) => {
                Ok(&self.bytes[(offset - self.base) as usize..(end - self.base) as usize])
            }
            _ => Err(self.slice_error(offset, len, what)),
        }
    }

    #[cold]
    fn slice_error(&self, offset: u64, len: u64, what: &str) -> Error {
        match offset.checked_add(len) {
            Some(end) if end <= self.file_len => zip_err(
                format!(
                    "{what} at byte {offset} ({len} bytes) lies outside the {} bytes read from byte {} (it overlaps a neighbouring entry)",
                    self.bytes.len(),
                    self.base
                ),
                offset,
            ),
            _ => zip_err(
                format!(
                    "{what} at byte {offset} ({len} bytes) runs past the end of the file ({} bytes)",
                    self.file_len
                ),
                offset,
            ),
        }
    }
}

fn u16_at(b: &[u8], i: usize) -> u16 {
    u16::from_le_bytes([b[i], b[i + 1]])
}
fn u32_at(b: &[u8], i: usize) -> u32 {
    u32::from_le_bytes([b[i], b[i + 1], b[i + 2], b[i + 3]])
}
fn u64_at(b: &[u8], i: usize) -> u64 {
    let mut a = [0u8; 8];
    a.copy_from_slice(&b[i..i + 8]);
    u64::from_le_bytes(a)
}
