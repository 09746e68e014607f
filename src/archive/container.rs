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
//!   [`EntrySpec::align_after`] pads so that the byte `h` into the data is aligned, and
//!   the exact local-header bytes are known before they are written.
//! - **A crash-safe in-place append.** `zip` 9.4.1's `ZipWriter::new_append` writes the
//!   new entries and a new central directory over the existing archive's end in place,
//!   with no journal or other rollback: a crash in between leaves a file without a valid
//!   end record. modelzip saves the bytes it overwrites to a fsynced journal first
//!   (`journal.rs`) and re-emits the old central directory from what this parser read.
//! - **Checks on every open.** `zip` 9.4.1's reader checks that entries do not overlap
//!   only when asked (`ZipArchive::has_overlapping_entries`,
//!   `validate_header_consistency`); [`parse`] always checks each local header against
//!   its central record and that no two entries (local header, data, data descriptor)
//!   share a byte, before a tensor is viewed in place.
//!
//! `rawzip` (0.4.4, 0.5.1: pre-1.0) fits the reading side (zero-copy, no allocation per
//! entry), but its `ZipArchiveWriterBuilder` only starts a new archive (`with_offset`
//! places one after prelude bytes); it cannot continue an existing archive's entries,
//! which an append needs. The writer here is also one forward-only `Write`, so a failing
//! sink can be injected in the crash tests.

use super::entry_name::check_entry_name;
use crate::error::{Error, ErrorKind, Result};
use std::hash::BuildHasher;
use std::io::Write;

const SIG_LOCAL: u32 = 0x0403_4b50;
const SIG_CENTRAL: u32 = 0x0201_4b50;
const SIG_EOCD: u32 = 0x0605_4b50;
const SIG_EOCD64: u32 = 0x0606_4b50;
const SIG_LOCATOR64: u32 = 0x0706_4b50;
const SIG_DESCRIPTOR: u32 = 0x0807_4b50;
const ZIP64_EXTRA: u16 = 0x0001;
/// The extra-field id of Android's zipalign padding (data: u16 alignment, then zeros).
/// Readers that do not know it skip it, as the zip spec requires.
pub const ALIGN_EXTRA: u16 = 0xd935;
/// Alignment of tensor raw data in the file.
pub const DATA_ALIGN: u64 = 64;
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
    pub name: String,
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
    pub descriptor_len: u64,
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
    /// Central-directory extra fields other than Zip64.
    pub cd_extra: Vec<u8>,
    /// Entry comment.
    pub comment: Vec<u8>,
}

impl ZipEntry {
    /// One past the last data byte.
    pub fn data_end(&self) -> u64 {
        self.data_offset.saturating_add(self.compressed_size)
    }

    /// Bytes of the file this entry occupies (local header, data, descriptor).
    pub fn footprint(&self) -> u64 {
        (self.data_end() - self.header_offset).saturating_add(self.descriptor_len)
    }
}

/// The parsed central directory.
#[derive(Debug, Clone)]
pub struct Directory {
    /// Entries in central-directory order.
    pub entries: Vec<ZipEntry>,
    /// Name -> position in `entries`.
    pub index: NameIndex,
    /// Offset of the central directory; everything from here to EOF is end records.
    pub cd_offset: u64,
    /// Archive comment.
    pub comment: Vec<u8>,
}

/// Entry name -> position in the entry list, holding positions only: the names stay in
/// the entries (one allocation per entry instead of two, docs/BENCHMARKS.md P5).
#[derive(Debug, Clone, Default)]
pub struct NameIndex {
    table: hashbrown::HashTable<usize>,
}

impl NameIndex {
    fn with_capacity(n: usize) -> NameIndex {
        NameIndex {
            table: hashbrown::HashTable::with_capacity(n),
        }
    }

    /// The position of `name` in `entries`, if present.
    pub fn get(&self, entries: &[ZipEntry], name: &str) -> Option<usize> {
        let h = rustc_hash::FxBuildHasher.hash_one(name);
        self.table
            .find(h, |&i| entries.get(i).is_some_and(|e| e.name == name))
            .copied()
    }

    /// Adds entry `i` of `entries`; false (and nothing added) when its name is present.
    fn insert(&mut self, entries: &[ZipEntry], i: usize) -> bool {
        let name = entries[i].name.as_str();
        let hasher = rustc_hash::FxBuildHasher;
        let h = hasher.hash_one(name);
        match self.table.entry(
            h,
            |&j| entries[j].name == name,
            |&j| hasher.hash_one(entries[j].name.as_str()),
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

    fn slice(&self, offset: u64, len: u64, what: &str) -> Result<&'a [u8]> {
        let end = offset.checked_add(len);
        match end {
            Some(end) if end <= self.file_len && self.covers(offset, len) => {
                Ok(&self.bytes[(offset - self.base) as usize..(end - self.base) as usize])
            }
            Some(end) if end <= self.file_len => Err(zip_err(
                format!(
                    "{what} at byte {offset} ({len} bytes) lies outside the {} bytes read from byte {} (it overlaps a neighbouring entry)",
                    self.bytes.len(),
                    self.base
                ),
                offset,
            )),
            _ => Err(zip_err(
                format!(
                    "{what} at byte {offset} ({len} bytes) runs past the end of the file ({} bytes)",
                    self.file_len
                ),
                offset,
            )),
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

/// Finds the end-of-central-directory record in `tail`, the last bytes of a file of
/// `file_len` bytes: the last signature whose comment length reaches exactly to the end of
/// the file. Returns its position in `tail`.
fn find_eocd(tail: &[u8], file_len: u64) -> Result<usize> {
    let len = tail.len();
    if file_len < 22 || len < 22 {
        return Err(zip_err(
            format!("file of {file_len} bytes is too short to be a zip archive"),
            0,
        ));
    }
    let lowest = len.saturating_sub(22 + 0xffff);
    let mut pos = len - 22;
    loop {
        if u32_at(tail, pos) == SIG_EOCD && pos + 22 + usize::from(u16_at(tail, pos + 20)) == len {
            return Ok(pos);
        }
        if pos == lowest {
            break;
        }
        pos -= 1;
    }
    Err(zip_err(
        "no end-of-central-directory record (not a zip archive, or truncated)",
        file_len,
    ))
}

/// Bytes at the end of a file that always hold the end records (the end record with the
/// longest comment, and the zip64 locator before it).
#[cfg_attr(not(feature = "remote"), allow(dead_code))]
pub(crate) const END_RECORDS_MAX: u64 = 22 + 0xffff + 20;

/// What the end records say about the central directory.
#[derive(Debug, Clone)]
pub(crate) struct EndRecords {
    /// Number of entries.
    pub count: u64,
    /// Size of the central directory.
    pub cd_size: u64,
    /// Offset of the central directory.
    pub cd_offset: u64,
    /// Archive comment.
    pub comment: Vec<u8>,
}

/// Parses the end records from `at`, a window that reaches the end of the file and holds
/// at least its last [`END_RECORDS_MAX`] bytes (or all of it). A zip64 end record outside
/// the window is read with `fetch(offset, len)`.
pub(crate) fn parse_end(
    at: &At<'_>,
    fetch: &mut dyn FnMut(u64, u64) -> Result<Vec<u8>>,
) -> Result<EndRecords> {
    let bytes = at.bytes;
    let eocd = find_eocd(bytes, at.file_len)?;
    let abs = |i: usize| at.base + i as u64;
    let e = &bytes[eocd..eocd + 22];
    let disk = u16_at(e, 4);
    let disk_cd = u16_at(e, 6);
    let mut count = u64::from(u16_at(e, 10));
    let mut cd_size = u64::from(u32_at(e, 12));
    let mut cd_offset = u64::from(u32_at(e, 16));
    let comment = bytes[eocd + 22..].to_vec();
    let mut cd_end = abs(eocd);
    if disk != 0 || disk_cd != 0 {
        return Err(zip_err("multi-disk archives are not supported", abs(eocd)));
    }
    if eocd >= 20 && u32_at(bytes, eocd - 20) == SIG_LOCATOR64 {
        let loc = &bytes[eocd - 20..eocd];
        let z64_offset = u64_at(loc, 8);
        if u32_at(loc, 4) != 0 || u32_at(loc, 16) > 1 {
            return Err(zip_err(
                "multi-disk archives are not supported",
                abs(eocd) - 20,
            ));
        }
        let fetched;
        let rec = if at.covers(z64_offset, 56)
            || z64_offset.checked_add(56).is_none_or(|e| e > at.file_len)
        {
            at.slice(z64_offset, 56, "zip64 end record")?
        } else {
            fetched = fetch(z64_offset, 56)?;
            fetched.as_slice()
        };
        if rec.len() < 56 || u32_at(rec, 0) != SIG_EOCD64 {
            return Err(zip_err("bad zip64 end record signature", z64_offset));
        }
        if z64_offset
            .checked_add(56)
            .is_none_or(|e| e > abs(eocd) - 20)
        {
            return Err(zip_err("zip64 end record overlaps the locator", z64_offset));
        }
        if u32_at(rec, 16) != 0 || u32_at(rec, 20) != 0 {
            return Err(zip_err("multi-disk archives are not supported", z64_offset));
        }
        count = u64_at(rec, 32);
        cd_size = u64_at(rec, 40);
        cd_offset = u64_at(rec, 48);
        cd_end = z64_offset;
    }
    if cd_offset.checked_add(cd_size) != Some(cd_end) {
        return Err(zip_err(
            format!(
                "central directory at byte {cd_offset} of {cd_size} bytes does not end where the end record starts (byte {cd_end})"
            ),
            cd_offset,
        ));
    }
    Ok(EndRecords {
        count,
        cd_size,
        cd_offset,
        comment,
    })
}

/// Parses the central directory `cd` (the bytes the end records point at): every record,
/// its name, no name twice, nothing after the last record. Local headers are not read.
pub(crate) fn parse_entries(cd: &[u8], end: &EndRecords) -> Result<(Vec<ZipEntry>, NameIndex)> {
    let (count, cd_size, cd_offset) = (end.count, end.cd_size, end.cd_offset);
    if count > cd_size / 46 {
        return Err(zip_err(
            format!("{count} entries cannot fit in a central directory of {cd_size} bytes"),
            cd_offset,
        ));
    }
    let mut entries: Vec<ZipEntry> = Vec::with_capacity(count as usize);
    let mut index = NameIndex::with_capacity(count as usize);
    let mut pos = 0usize;
    for _ in 0..count {
        let abs = cd_offset + pos as u64;
        // Offsets inside the record are relative to it.
        let entry = parse_central(cd, &mut pos).map_err(|e| {
            if e.location().offset.is_some() {
                e.shift_offset(abs)
            } else {
                e.at_offset(abs)
            }
        })?;
        entries.push(entry);
        if !index.insert(&entries, entries.len() - 1) {
            let name = entries.pop().map(|e| e.name).unwrap_or_default();
            return Err(zip_err(format!("entry name {name:?} appears twice"), abs).in_entry(name));
        }
    }
    if pos as u64 != cd_size {
        return Err(zip_err(
            format!(
                "{} unexpected bytes after the last central directory record",
                cd_size - pos as u64
            ),
            cd_offset + pos as u64,
        ));
    }
    Ok((entries, index))
}

/// Parses the end records and the central directory, checks every entry's name, its
/// local header and that no two entries overlap each other or the central directory.
pub fn parse(bytes: &[u8]) -> Result<Directory> {
    let at = At::whole(bytes);
    // The whole file is in the window: nothing is ever fetched.
    let end = parse_end(&at, &mut |offset, len| {
        at.slice(offset, len, "zip64 end record")
            .map(<[u8]>::to_vec)
    })?;
    let cd = at.slice(end.cd_offset, end.cd_size, "central directory")?;
    let (mut entries, index) = parse_entries(cd, &end)?;
    let cd_offset = end.cd_offset;
    for entry in &mut entries {
        check_local(&at, entry, cd_offset).map_err(|e| e.in_entry(entry.name.clone()))?;
    }
    check_overlaps(&entries)?;
    Ok(Directory {
        entries,
        index,
        cd_offset,
        comment: end.comment,
    })
}

/// The directory of a file whose local headers are read later, entry by entry
/// ([`check_local_in`]): each entry's `data_offset` is a lower bound (its header with no
/// extra field) until then, and the overlap check uses those bounds.
#[cfg_attr(not(feature = "remote"), allow(dead_code))]
pub(crate) fn directory_unchecked(
    mut entries: Vec<ZipEntry>,
    index: NameIndex,
    end: EndRecords,
) -> Result<Directory> {
    for e in &mut entries {
        e.data_offset = e
            .header_offset
            .saturating_add(30)
            .saturating_add(e.name.len() as u64);
        if e.data_end() > end.cd_offset {
            return Err(zip_err(
                format!(
                    "data of {} bytes at byte {} runs into the central directory (byte {})",
                    e.compressed_size, e.data_offset, end.cd_offset
                ),
                e.header_offset,
            )
            .in_entry(e.name.clone()));
        }
    }
    check_overlaps(&entries)?;
    Ok(Directory {
        entries,
        index,
        cd_offset: end.cd_offset,
        comment: end.comment,
    })
}

/// Checks entry `e`'s local header in `window` (the first bytes of the entry, as fetched)
/// and returns the part of its stored data the window holds.
#[cfg_attr(not(feature = "remote"), allow(dead_code))]
pub(crate) fn check_local_prefix<'w>(
    window: &'w [u8],
    file_len: u64,
    e: &ZipEntry,
    cd_offset: u64,
) -> Result<&'w [u8]> {
    let at = At::window(window, e.header_offset, file_len);
    let mut checked = e.clone();
    check_local(&at, &mut checked, cd_offset)?;
    let have = (e.header_offset + window.len() as u64).saturating_sub(checked.data_offset);
    at.slice(
        checked.data_offset,
        have.min(checked.compressed_size),
        "entry data",
    )
}

/// Checks entry `e`'s local header in `window` (bytes from the entry's header on, as
/// fetched) as [`parse`] checks it in a whole file, and returns the entry's stored data.
#[cfg_attr(not(feature = "remote"), allow(dead_code))]
pub(crate) fn check_local_in<'w>(
    window: &'w [u8],
    file_len: u64,
    e: &ZipEntry,
    cd_offset: u64,
) -> Result<&'w [u8]> {
    let at = At::window(window, e.header_offset, file_len);
    let mut checked = e.clone();
    check_local(&at, &mut checked, cd_offset)?;
    at.slice(checked.data_offset, checked.compressed_size, "entry data")
}

fn parse_central(cd: &[u8], pos: &mut usize) -> Result<ZipEntry> {
    let rest = cd.len() - *pos;
    if rest < 46 {
        return Err(zip_err("truncated central directory record", 0));
    }
    let r = &cd[*pos..*pos + 46];
    if u32_at(r, 0) != SIG_CENTRAL {
        return Err(zip_err("bad central directory record signature", 0));
    }
    let n = usize::from(u16_at(r, 28));
    let m = usize::from(u16_at(r, 30));
    let k = usize::from(u16_at(r, 32));
    if 46 + n + m + k > rest {
        return Err(zip_err(
            "central directory record runs past the directory",
            0,
        ));
    }
    let name_raw = &cd[*pos + 46..*pos + 46 + n];
    let extra = &cd[*pos + 46 + n..*pos + 46 + n + m];
    let comment = cd[*pos + 46 + n + m..*pos + 46 + n + m + k].to_vec();
    *pos += 46 + n + m + k;
    let name = std::str::from_utf8(name_raw)
        .map_err(|_| {
            zip_err(
                format!(
                    "entry name {:?} is not UTF-8",
                    name_raw.escape_ascii().to_string()
                ),
                0,
            )
        })?
        .to_string();
    check_entry_name(&name).map_err(|e| e.in_entry(name.clone()))?;
    let flags = u16_at(r, 8);
    let version_made_by = u16_at(r, 4);
    let external_attrs = u32_at(r, 38);
    if flags & FLAG_ENCRYPTED != 0 {
        return Err(zip_err("encrypted entries are not supported", 0).in_entry(name));
    }
    if version_made_by >> 8 == 3 && (external_attrs >> 16) & 0o170000 == 0o120000 {
        return Err(Error::new(ErrorKind::UnsafeName {
            name: name.clone(),
            why: "symbolic link entry",
        })
        .in_entry(name));
    }
    let mut compressed_size = u64::from(u32_at(r, 20));
    let mut uncompressed_size = u64::from(u32_at(r, 24));
    let mut header_offset = u64::from(u32_at(r, 42));
    let mut cd_extra = Vec::new();
    for (id, data) in extra_fields(extra).map_err(|e| e.in_entry(name.clone()))? {
        if id == ZIP64_EXTRA {
            let mut p = 0;
            let mut next = |v: &mut u64| -> Result<()> {
                if *v == U32_MAX {
                    let b = data.get(p..p + 8).ok_or_else(|| {
                        zip_err("zip64 extra field is too short", 0).in_entry(name.clone())
                    })?;
                    *v = u64_at(b, 0);
                    p += 8;
                }
                Ok(())
            };
            next(&mut uncompressed_size)?;
            next(&mut compressed_size)?;
            next(&mut header_offset)?;
        } else {
            cd_extra.extend_from_slice(&id.to_le_bytes());
            cd_extra.extend_from_slice(&(data.len() as u16).to_le_bytes());
            cd_extra.extend_from_slice(data);
        }
    }
    Ok(ZipEntry {
        name,
        method: u16_at(r, 10),
        flags,
        crc32: u32_at(r, 16),
        compressed_size,
        uncompressed_size,
        header_offset,
        data_offset: 0,
        descriptor_len: 0,
        dos_time: u16_at(r, 12),
        dos_date: u16_at(r, 14),
        version_made_by,
        external_attrs,
        internal_attrs: u16_at(r, 36),
        cd_extra,
        comment,
    })
}

/// Splits an extra-field block into (id, data) pairs.
fn extra_fields(mut b: &[u8]) -> Result<Vec<(u16, &[u8])>> {
    let mut out = Vec::new();
    while !b.is_empty() {
        if b.len() < 4 {
            return Err(zip_err("truncated extra field", 0));
        }
        let id = u16_at(b, 0);
        let len = usize::from(u16_at(b, 2));
        let data = b
            .get(4..4 + len)
            .ok_or_else(|| zip_err("extra field runs past its block", 0))?;
        out.push((id, data));
        b = &b[4 + len..];
    }
    Ok(out)
}

fn check_local(at: &At<'_>, e: &mut ZipEntry, cd_offset: u64) -> Result<()> {
    let off = e.header_offset;
    if off.checked_add(30).is_none_or(|end| end > cd_offset) {
        return Err(zip_err(
            format!(
                "local header at byte {off} lies past the central directory (byte {cd_offset})"
            ),
            off,
        ));
    }
    let h = at.slice(off, 30, "local header")?;
    if u32_at(h, 0) != SIG_LOCAL {
        return Err(zip_err(
            format!("no local header signature at byte {off}"),
            off,
        ));
    }
    let n = u64::from(u16_at(h, 26));
    let m = u64::from(u16_at(h, 28));
    let name = at.slice(off + 30, n, "local header name")?;
    if name != e.name.as_bytes() {
        return Err(zip_err(
            format!(
                "local header name {:?} differs from the central directory",
                name.escape_ascii().to_string()
            ),
            off,
        ));
    }
    let method = u16_at(h, 8);
    if method != e.method {
        return Err(zip_err(
            format!(
                "local header method {method} differs from the central directory's {}",
                e.method
            ),
            off,
        ));
    }
    let extra = at.slice(off + 30 + n, m, "local extra field")?;
    let flags = u16_at(h, 6);
    if flags & FLAG_DESCRIPTOR == 0 && e.flags & FLAG_DESCRIPTOR == 0 {
        let crc = u32_at(h, 14);
        let mut csize = u64::from(u32_at(h, 18));
        let mut usize_ = u64::from(u32_at(h, 22));
        let zip64 = if csize == U32_MAX || usize_ == U32_MAX {
            extra_fields(extra)?
                .into_iter()
                .find(|(id, d)| *id == ZIP64_EXTRA && d.len() >= 16)
        } else {
            None
        };
        if let Some((_, d)) = zip64 {
            usize_ = u64_at(d, 0);
            csize = u64_at(d, 8);
        }
        if crc != e.crc32 || csize != e.compressed_size || usize_ != e.uncompressed_size {
            return Err(zip_err(
                format!(
                    "local header (crc {crc:08x}, sizes {csize}/{usize_}) differs from the central directory (crc {:08x}, sizes {}/{})",
                    e.crc32, e.compressed_size, e.uncompressed_size
                ),
                off,
            ));
        }
    }
    if e.method == METHOD_STORED && e.compressed_size != e.uncompressed_size {
        return Err(zip_err(
            format!(
                "stored entry has compressed size {} but uncompressed size {}",
                e.compressed_size, e.uncompressed_size
            ),
            off,
        ));
    }
    e.data_offset = off + 30 + n + m;
    let data_end = match e.data_offset.checked_add(e.compressed_size) {
        Some(end) if end <= cd_offset => end,
        _ => {
            return Err(zip_err(
                format!(
                    "data of {} bytes at byte {} runs into the central directory (byte {cd_offset})",
                    e.compressed_size, e.data_offset
                ),
                e.data_offset,
            ));
        }
    };
    if (flags | e.flags) & FLAG_DESCRIPTOR != 0 {
        let zip64 = extra_fields(extra)
            .map(|f| f.iter().any(|(id, _)| *id == ZIP64_EXTRA))
            .unwrap_or(false);
        e.descriptor_len = descriptor_len(at, e, data_end, cd_offset, zip64)?;
    }
    Ok(())
}

/// The length of the data descriptor that follows an entry's data (general-purpose flag
/// bit 3), one of the four forms APPNOTE 4.3.9 allows: an optional signature, the CRC,
/// then both sizes in 4 bytes each, or in 8 when the local header has a Zip64 extra field
/// (12, 16, 20 or 24 bytes; Python's zipfile and Info-ZIP write the signed ones). The form
/// is the one whose CRC and sizes are the central directory's, tried in the order the
/// local header suggests; a descriptor that matches none is refused, as its length, and
/// so what the entry occupies, would be a guess.
fn descriptor_len(
    at: &At<'_>,
    e: &ZipEntry,
    data_end: u64,
    cd_offset: u64,
    zip64: bool,
) -> Result<u64> {
    let room = cd_offset - data_end;
    let window = at.slice(data_end, room.min(24), "data descriptor")?;
    for signed in [true, false] {
        for wide in [zip64, !zip64] {
            let start = if signed { 4 } else { 0 };
            let len = start + if wide { 20 } else { 12 };
            let Some(d) = window.get(..len) else {
                continue;
            };
            if signed && u32_at(d, 0) != SIG_DESCRIPTOR {
                continue;
            }
            let (csize, usize_) = if wide {
                (u64_at(d, start + 4), u64_at(d, start + 12))
            } else {
                (
                    u64::from(u32_at(d, start + 4)),
                    u64::from(u32_at(d, start + 8)),
                )
            };
            if u32_at(d, start) == e.crc32
                && csize == e.compressed_size
                && usize_ == e.uncompressed_size
            {
                return Ok(len as u64);
            }
        }
    }
    Err(zip_err(
        format!(
            "no data descriptor with the central directory's crc {:08x} and sizes {}/{} after the entry's data (bit 3 of its flags says one follows)",
            e.crc32, e.compressed_size, e.uncompressed_size
        ),
        data_end,
    ))
}

/// Refuses two entries that share bytes: each occupies its local header, data and data
/// descriptor ([`ZipEntry::footprint`]); `check_local` has already kept each of them
/// before the central directory.
fn check_overlaps(entries: &[ZipEntry]) -> Result<()> {
    let mut order: Vec<&ZipEntry> = entries.iter().collect();
    order.sort_by_key(|e| e.header_offset);
    for w in order.windows(2) {
        let (a, b) = (w[0], w[1]);
        let a_end = a.header_offset.saturating_add(a.footprint());
        if a_end > b.header_offset {
            return Err(zip_err(
                format!(
                    "entries {:?} (bytes {}..{}) and {:?} (from byte {}) overlap",
                    a.name, a.header_offset, a_end, b.name, b.header_offset
                ),
                b.header_offset,
            )
            .in_entry(b.name.clone()));
        }
    }
    Ok(())
}

/// One entry for [`ZipOut::write_entry`]: its name, its bytes as stored, and what the
/// headers say about them.
#[derive(Debug, Clone, Copy)]
pub struct EntrySpec<'a> {
    /// Entry name (checked by the caller).
    pub name: &'a str,
    /// [`METHOD_STORED`] or [`METHOD_DEFLATED`].
    pub method: u16,
    /// CRC-32 of the uncompressed bytes.
    pub crc32: u32,
    /// Size after decompression (the stored size is the sum of `data`).
    pub uncompressed_size: u64,
    /// The stored bytes (already compressed when `method` is deflate), in parts.
    pub data: &'a [&'a [u8]],
    /// With `Some(h)`, the local extra field is padded so that the byte `h` bytes into
    /// the data (a tensor's first element, after its variable-length LoDTensor header)
    /// lies at a multiple of [`DATA_ALIGN`].
    pub align_after: Option<u64>,
    /// A copied entry whose metadata (time, attributes, extra fields, comment) to keep.
    pub template: Option<&'a ZipEntry>,
}

impl<'a> EntrySpec<'a> {
    /// A stored entry of `data` with CRC `crc32`, unaligned, with fresh metadata.
    pub fn stored(name: &'a str, crc32: u32, data: &'a [&'a [u8]]) -> Self {
        EntrySpec {
            name,
            method: METHOD_STORED,
            crc32,
            uncompressed_size: data.iter().map(|d| d.len() as u64).sum(),
            data,
            align_after: None,
            template: None,
        }
    }
}

/// Writes a zip archive front to back: local headers and data as entries are added,
/// then the central directory and end records. Positions are relative to the file start
/// (`start` is where the writer begins, non-zero for an in-place append).
pub struct ZipOut<W: Write> {
    w: W,
    pos: u64,
    /// Entries that go into the central directory, in order.
    pub entries: Vec<ZipEntry>,
    dos_time: u16,
    dos_date: u16,
}

impl<W: Write> ZipOut<W> {
    /// A writer whose first byte lands at file offset `start`.
    pub fn new(w: W, start: u64) -> Self {
        let (dos_date, dos_time) = super::time::dos_now();
        ZipOut {
            w,
            pos: start,
            entries: Vec::new(),
            dos_time,
            dos_date,
        }
    }

    fn put(&mut self, b: &[u8]) -> Result<()> {
        self.w.write_all(b)?;
        self.pos += b.len() as u64;
        Ok(())
    }

    /// Writes a local header and the entry's data (see [`EntrySpec`]).
    pub fn write_entry(&mut self, spec: EntrySpec<'_>) -> Result<ZipEntry> {
        let EntrySpec {
            name,
            method,
            crc32,
            uncompressed_size,
            data,
            align_after,
            template,
        } = spec;
        let compressed_size: u64 = data.iter().map(|d| d.len() as u64).sum();
        let zip64 = compressed_size >= U32_MAX || uncompressed_size >= U32_MAX;
        let header_offset = self.pos;
        let mut extra = Vec::new();
        if zip64 {
            extra.extend_from_slice(&ZIP64_EXTRA.to_le_bytes());
            extra.extend_from_slice(&16u16.to_le_bytes());
            extra.extend_from_slice(&uncompressed_size.to_le_bytes());
            extra.extend_from_slice(&compressed_size.to_le_bytes());
        }
        if let Some(h) = align_after {
            let base = header_offset + 30 + name.len() as u64 + extra.len() as u64 + 6 + h;
            let pad = (DATA_ALIGN - base % DATA_ALIGN) % DATA_ALIGN;
            extra.extend_from_slice(&ALIGN_EXTRA.to_le_bytes());
            extra.extend_from_slice(&(2 + pad as u16).to_le_bytes());
            extra.extend_from_slice(&(DATA_ALIGN as u16).to_le_bytes());
            extra.resize(extra.len() + pad as usize, 0);
        }
        if 30 + name.len() + extra.len() > usize::from(u16::MAX) {
            return Err(ErrorKind::InvalidInput(format!("entry name {name:?} is too long")).into());
        }
        let mut h = Vec::with_capacity(30 + name.len() + extra.len());
        h.extend_from_slice(&SIG_LOCAL.to_le_bytes());
        h.extend_from_slice(&(if zip64 { 45u16 } else { 20u16 }).to_le_bytes());
        h.extend_from_slice(&FLAG_UTF8.to_le_bytes());
        h.extend_from_slice(&method.to_le_bytes());
        let (t, d) = template.map_or((self.dos_time, self.dos_date), |e| (e.dos_time, e.dos_date));
        h.extend_from_slice(&t.to_le_bytes());
        h.extend_from_slice(&d.to_le_bytes());
        h.extend_from_slice(&crc32.to_le_bytes());
        let (c32, u32_) = if zip64 {
            (U32_MAX as u32, U32_MAX as u32)
        } else {
            (compressed_size as u32, uncompressed_size as u32)
        };
        h.extend_from_slice(&c32.to_le_bytes());
        h.extend_from_slice(&u32_.to_le_bytes());
        h.extend_from_slice(&(name.len() as u16).to_le_bytes());
        h.extend_from_slice(&(extra.len() as u16).to_le_bytes());
        h.extend_from_slice(name.as_bytes());
        h.extend_from_slice(&extra);
        self.put(&h)?;
        let data_offset = self.pos;
        for part in data {
            self.put(part)?;
        }
        let entry = ZipEntry {
            name: name.to_string(),
            method,
            flags: FLAG_UTF8,
            crc32,
            compressed_size,
            uncompressed_size,
            header_offset,
            data_offset,
            descriptor_len: 0,
            dos_time: t,
            dos_date: d,
            version_made_by: template.map_or(0x031e, |e| e.version_made_by),
            external_attrs: template.map_or(0o100644 << 16, |e| e.external_attrs),
            internal_attrs: template.map_or(0, |e| e.internal_attrs),
            cd_extra: template.map_or_else(Vec::new, |e| e.cd_extra.clone()),
            comment: template.map_or_else(Vec::new, |e| e.comment.clone()),
        };
        self.entries.push(entry.clone());
        Ok(entry)
    }

    /// Writes an entry from uncompressed bytes: deflated when `deflate` and that makes it
    /// smaller (a few bytes, like tags.txt, grow when deflated), else stored.
    pub fn write_bytes(&mut self, name: &str, bytes: &[u8], deflate: bool) -> Result<ZipEntry> {
        let crc = crc32fast::hash(bytes);
        let z = if deflate {
            let mut enc =
                flate2::write::DeflateEncoder::new(Vec::new(), flate2::Compression::default());
            enc.write_all(bytes)?;
            Some(enc.finish()?).filter(|z| z.len() < bytes.len())
        } else {
            None
        };
        match z {
            Some(z) => self.write_entry(EntrySpec {
                method: METHOD_DEFLATED,
                uncompressed_size: bytes.len() as u64,
                ..EntrySpec::stored(name, crc, &[&z])
            }),
            None => self.write_entry(EntrySpec::stored(name, crc, &[bytes])),
        }
    }

    /// Writes the central directory and end records; returns the sink and the end offset.
    pub fn finish(mut self, comment: &[u8]) -> Result<(W, u64)> {
        let cd_offset = self.pos;
        let entries = std::mem::take(&mut self.entries);
        let mut buf = Vec::with_capacity(64 * 1024);
        for e in &entries {
            write_central(&mut buf, e);
            if buf.len() >= 64 * 1024 {
                self.put(&buf)?;
                buf.clear();
            }
        }
        self.put(&buf)?;
        let cd_size = self.pos - cd_offset;
        let count = entries.len() as u64;
        let mut end = Vec::new();
        let zip64 = count >= 0xffff || cd_size >= U32_MAX || cd_offset >= U32_MAX;
        if zip64 {
            let z64_offset = self.pos;
            end.extend_from_slice(&SIG_EOCD64.to_le_bytes());
            end.extend_from_slice(&44u64.to_le_bytes());
            end.extend_from_slice(&45u16.to_le_bytes());
            end.extend_from_slice(&45u16.to_le_bytes());
            end.extend_from_slice(&0u32.to_le_bytes());
            end.extend_from_slice(&0u32.to_le_bytes());
            end.extend_from_slice(&count.to_le_bytes());
            end.extend_from_slice(&count.to_le_bytes());
            end.extend_from_slice(&cd_size.to_le_bytes());
            end.extend_from_slice(&cd_offset.to_le_bytes());
            end.extend_from_slice(&SIG_LOCATOR64.to_le_bytes());
            end.extend_from_slice(&0u32.to_le_bytes());
            end.extend_from_slice(&z64_offset.to_le_bytes());
            end.extend_from_slice(&1u32.to_le_bytes());
        }
        let comment = &comment[..comment.len().min(0xffff)];
        end.extend_from_slice(&SIG_EOCD.to_le_bytes());
        end.extend_from_slice(&0u16.to_le_bytes());
        end.extend_from_slice(&0u16.to_le_bytes());
        let c16 = count.min(0xffff) as u16;
        end.extend_from_slice(&c16.to_le_bytes());
        end.extend_from_slice(&c16.to_le_bytes());
        end.extend_from_slice(&(cd_size.min(U32_MAX) as u32).to_le_bytes());
        end.extend_from_slice(&(cd_offset.min(U32_MAX) as u32).to_le_bytes());
        end.extend_from_slice(&(comment.len() as u16).to_le_bytes());
        end.extend_from_slice(comment);
        self.put(&end)?;
        self.w.flush()?;
        Ok((self.w, self.pos))
    }
}

fn write_central(buf: &mut Vec<u8>, e: &ZipEntry) {
    let mut z64 = Vec::new();
    let usize_ = if e.uncompressed_size >= U32_MAX {
        z64.extend_from_slice(&e.uncompressed_size.to_le_bytes());
        U32_MAX as u32
    } else {
        e.uncompressed_size as u32
    };
    let csize = if e.compressed_size >= U32_MAX {
        z64.extend_from_slice(&e.compressed_size.to_le_bytes());
        U32_MAX as u32
    } else {
        e.compressed_size as u32
    };
    let offset = if e.header_offset >= U32_MAX {
        z64.extend_from_slice(&e.header_offset.to_le_bytes());
        U32_MAX as u32
    } else {
        e.header_offset as u32
    };
    let mut extra = Vec::new();
    if !z64.is_empty() {
        extra.extend_from_slice(&ZIP64_EXTRA.to_le_bytes());
        extra.extend_from_slice(&(z64.len() as u16).to_le_bytes());
        extra.extend_from_slice(&z64);
    }
    let room = 0xffff - extra.len();
    if e.cd_extra.len() <= room {
        extra.extend_from_slice(&e.cd_extra);
    }
    let needed: u16 = if z64.is_empty() { 20 } else { 45 };
    buf.extend_from_slice(&SIG_CENTRAL.to_le_bytes());
    buf.extend_from_slice(
        &(e.version_made_by & 0xff00 | (e.version_made_by & 0xff).max(needed)).to_le_bytes(),
    );
    buf.extend_from_slice(&needed.to_le_bytes());
    buf.extend_from_slice(&e.flags.to_le_bytes());
    buf.extend_from_slice(&e.method.to_le_bytes());
    buf.extend_from_slice(&e.dos_time.to_le_bytes());
    buf.extend_from_slice(&e.dos_date.to_le_bytes());
    buf.extend_from_slice(&e.crc32.to_le_bytes());
    buf.extend_from_slice(&csize.to_le_bytes());
    buf.extend_from_slice(&usize_.to_le_bytes());
    buf.extend_from_slice(&(e.name.len() as u16).to_le_bytes());
    buf.extend_from_slice(&(extra.len() as u16).to_le_bytes());
    buf.extend_from_slice(&(e.comment.len().min(0xffff) as u16).to_le_bytes());
    buf.extend_from_slice(&0u16.to_le_bytes());
    buf.extend_from_slice(&e.internal_attrs.to_le_bytes());
    buf.extend_from_slice(&e.external_attrs.to_le_bytes());
    buf.extend_from_slice(&offset.to_le_bytes());
    buf.extend_from_slice(e.name.as_bytes());
    buf.extend_from_slice(&extra);
    buf.extend_from_slice(&e.comment[..e.comment.len().min(0xffff)]);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip_and_alignment() {
        let mut out = ZipOut::new(Vec::new(), 0);
        out.write_bytes("a.txt", b"hello hello hello", true)
            .unwrap();
        let e = out
            .write_entry(EntrySpec {
                align_after: Some(2),
                ..EntrySpec::stored(
                    "t/params/0.lodtensor",
                    crc32fast::hash(b"xyzw"),
                    &[b"xy", b"zw"],
                )
            })
            .unwrap();
        assert_eq!((e.data_offset + 2) % 64, 0);
        let (bytes, end) = out.finish(b"").unwrap();
        assert_eq!(end, bytes.len() as u64);
        let dir = parse(&bytes).unwrap();
        assert_eq!(dir.entries.len(), 2);
        let e = &dir.entries[dir.index.get(&dir.entries, "t/params/0.lodtensor").unwrap()];
        assert_eq!(
            &bytes[e.data_offset as usize..e.data_end() as usize],
            b"xyzw"
        );
    }

    #[test]
    fn hostile_headers_are_refused() {
        let mut out = ZipOut::new(Vec::new(), 0);
        out.write_bytes("a", b"abc", false).unwrap();
        let (good, _) = out.finish(b"").unwrap();
        // Truncation anywhere must error, never panic.
        for cut in 0..good.len() {
            let _ = parse(&good[..cut]);
        }
        // Any single-byte corruption must error or parse, never panic.
        for i in 0..good.len() {
            let mut b = good.clone();
            b[i] ^= 0xff;
            let _ = parse(&b);
        }
        // Local name differing from the central directory.
        let mut b = good.clone();
        b[30] = b'b';
        assert!(
            parse(&b)
                .unwrap_err()
                .to_string()
                .contains("local header name")
        );
    }

    /// (file, descriptor length of each entry in central-directory order).
    const FOREIGN: [(&str, &[u8], &[u64]); 4] = [
        (
            "python-streamed.zip",
            include_bytes!("../../tests/fixtures/foreign/python-streamed.zip"),
            &[16, 16, 24],
        ),
        (
            "infozip-fd.zip",
            include_bytes!("../../tests/fixtures/foreign/infozip-fd.zip"),
            &[16, 16, 16],
        ),
        (
            "infozip-pipe.zip",
            include_bytes!("../../tests/fixtures/foreign/infozip-pipe.zip"),
            &[16, 16, 16],
        ),
        (
            "infozip-stdin.zip",
            include_bytes!("../../tests/fixtures/foreign/infozip-stdin.zip"),
            &[16, 16, 16, 24],
        ),
    ];

    #[test]
    fn foreign_descriptors_are_measured_exactly() {
        for (file, bytes, lens) in FOREIGN {
            let dir = parse(bytes).unwrap_or_else(|e| panic!("{file}: {e}"));
            let found: Vec<u64> = dir.entries.iter().map(|e| e.descriptor_len).collect();
            assert_eq!(found, lens, "{file}");
            // The entries tile the file up to the central directory: each one's footprint
            // ends where the next local header (or the directory) starts.
            let mut pos = 0;
            for e in &dir.entries {
                assert_eq!(e.header_offset, pos, "{file}: {}", e.name);
                pos += e.footprint();
            }
            assert_eq!(pos, dir.cd_offset, "{file}");
        }
    }

    #[test]
    fn an_overlap_with_a_zip64_descriptor_is_refused() {
        let (_, bytes, _) = FOREIGN[0];
        let dir = parse(bytes).unwrap();
        let mut entries = dir.entries.clone();
        // Move the entry before the Zip64 descriptor's entry to 8 bytes before that
        // descriptor's end (a count of 16 bytes missed them; of 12, by 12 bytes).
        assert_eq!(entries[2].descriptor_len, 24);
        let end = entries[2].header_offset + entries[2].footprint();
        entries[1].header_offset = end - 8;
        let e = check_overlaps(&entries).unwrap_err().to_string();
        assert!(e.contains("overlap"), "{e}");
        entries[1].header_offset = end;
        check_overlaps(&entries).unwrap();
    }

    /// A one-entry archive ("a", stored "abc") whose entry has flag bit 3 set and
    /// `descriptor` after its data.
    fn with_descriptor(descriptor: &[u8]) -> Vec<u8> {
        let mut out = ZipOut::new(Vec::new(), 0);
        out.write_bytes("a", b"abc", false).unwrap();
        let (plain, _) = out.finish(b"").unwrap();
        let data_end = 30 + 1 + 3;
        let mut b = plain[..data_end].to_vec();
        b.extend_from_slice(descriptor);
        b.extend_from_slice(&plain[data_end..]);
        let cd = data_end + descriptor.len();
        b[6] |= FLAG_DESCRIPTOR as u8;
        b[cd + 8] |= FLAG_DESCRIPTOR as u8;
        let eocd = b.len() - 22;
        b[eocd + 16..eocd + 20].copy_from_slice(&(cd as u32).to_le_bytes());
        b
    }

    #[test]
    fn all_four_descriptor_forms_are_measured() {
        let crc = crc32fast::hash(b"abc").to_le_bytes();
        let sig = SIG_DESCRIPTOR.to_le_bytes();
        let (s32, s64) = (3u32.to_le_bytes(), 3u64.to_le_bytes());
        let forms: [Vec<u8>; 4] = [
            [&crc[..], &s32, &s32].concat(),
            [&sig[..], &crc, &s32, &s32].concat(),
            [&crc[..], &s64, &s64].concat(),
            [&sig[..], &crc, &s64, &s64].concat(),
        ];
        for d in forms {
            let bytes = with_descriptor(&d);
            let dir = parse(&bytes).unwrap_or_else(|e| panic!("{} bytes: {e}", d.len()));
            assert_eq!(dir.entries[0].descriptor_len, d.len() as u64);
            assert_eq!(dir.entries[0].footprint(), dir.cd_offset);
        }
        // A descriptor that does not repeat the central directory's CRC and sizes.
        let wrong = [&sig[..], &crc, &s32, &2u32.to_le_bytes()].concat();
        let e = parse(&with_descriptor(&wrong)).unwrap_err();
        assert!(e.to_string().contains("no data descriptor"), "{e}");
        assert_eq!(e.location().offset, Some(34));
        assert_eq!(e.location().entry.as_deref(), Some("a"));
    }
}
