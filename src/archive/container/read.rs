//! Reading the container: end records, the central directory, local headers (each
//! checked against its central record, with its data descriptor measured) and the check
//! that no two entries share a byte.

use super::*;

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
pub(crate) fn parse_entries(
    cd: &[u8],
    end: &EndRecords,
) -> Result<(Vec<ZipEntry>, NameIndex, DirRuns)> {
    let (count, cd_size, cd_offset) = (end.count, end.cd_size, end.cd_offset);
    if count > cd_size / 46 {
        return Err(zip_err(
            format!("{count} entries cannot fit in a central directory of {cd_size} bytes"),
            cd_offset,
        ));
    }
    let parsed = parse_records_split(cd, cd_offset, count as usize);
    let entries = parsed.entries;
    // Names are indexed in directory order once the records are parsed; the first
    // problem in directory order is reported, as a one-pass parse would: a name that
    // repeats one before it, or the record that does not parse.
    let mut index = NameIndex::with_capacity(entries.len());
    for i in 0..entries.len() {
        if !index.insert(&entries, i) {
            let name = entries[i].name.clone();
            let abs = cd_offset + record_offset(cd, i) as u64;
            return Err(zip_err(format!("entry name {name:?} appears twice"), abs).in_entry(name));
        }
    }
    let dirs = dir_runs(&entries);
    if let Some(e) = parsed.error {
        return Err(e);
    }
    if parsed.end as u64 != cd_size {
        return Err(zip_err(
            format!(
                "{} unexpected bytes after the last central directory record",
                cd_size - parsed.end as u64
            ),
            cd_offset + parsed.end as u64,
        ));
    }
    Ok((entries, index, dirs))
}

/// Directories of at least this many records are parsed on two threads (each record's
/// name checked and copied, its fields read): the second half's first record is found by
/// a walk over the first half's lengths. Below, one thread (a thread costs more than it
/// saves).
const PARALLEL_MIN_RECORDS: usize = 16_384;

/// Whether work over `count` records is worth a second thread.
fn two_threads(count: usize) -> bool {
    count >= PARALLEL_MIN_RECORDS && std::thread::available_parallelism().is_ok_and(|n| n.get() > 1)
}

/// What [`parse_records`] parsed: the records up to the first that does not parse, that
/// one's error, and where the parse stopped.
struct Parsed {
    entries: Vec<ZipEntry>,
    error: Option<Error>,
    end: usize,
}

/// Parses `count` records from the start of `cd`, on two threads when there are many.
fn parse_records_split(cd: &[u8], cd_offset: u64, count: usize) -> Parsed {
    let two = two_threads(count);
    let mid = count / 2;
    let second_start = if two { walk_records(cd, mid) } else { None };
    let Some(start) = second_start else {
        return parse_records(cd, cd_offset, 0, count, count);
    };
    // Both halves are parsed into one list's room, each thread into its own part: no
    // second list to zero and copy in (~1 ms of 100,000 entries, BENCHMARKS.md P5).
    let mut entries: Vec<ZipEntry> = Vec::with_capacity(count);
    let halves = std::thread::scope(|s| {
        let (a, b) = entries.spare_capacity_mut()[..count].split_at_mut(mid);
        let second = std::thread::Builder::new()
            .name("modelzip-cd".into())
            .spawn_scoped(s, || parse_records_into(cd, cd_offset, start, b));
        let Ok(second) = second else {
            return None;
        };
        let first = parse_records_into(cd, cd_offset, 0, a);
        // (A panic in the parse is a bug, and this thread's parse would have made it too.)
        let second = second
            .join()
            .unwrap_or_else(|p| std::panic::resume_unwind(p));
        Some((first, second))
    });
    let Some((first, second)) = halves else {
        return parse_records(cd, cd_offset, 0, count, count);
    };
    if first.filled == mid && first.error.is_none() {
        // Safety: `parse_records_into` initialised the first `filled` slots of its part
        // (each written once before it is counted): 0..mid by the first half, and
        // mid..mid + second.filled by the second, which starts at `mid`.
        unsafe { entries.set_len(mid + second.filled) };
        return Parsed {
            entries,
            error: second.error,
            end: second.end,
        };
    }
    // The first half stopped at an error: its records are kept, the second's dropped.
    // Safety: as above, slots 0..first.filled are initialised.
    unsafe { entries.set_len(first.filled) };
    let rest = mid - first.filled;
    for slot in &mut entries.spare_capacity_mut()[rest..rest + second.filled] {
        // Safety: these are slots mid..mid + second.filled, each initialised once by the
        // second half and not part of the list's length, so dropped here only.
        unsafe { slot.assume_init_drop() };
    }
    Parsed {
        entries,
        error: first.error,
        end: first.end,
    }
}

/// `e`, from the record at byte `abs` of the file: an offset inside the record (relative
/// to it) made absolute, else the record's own.
fn at_record(e: Error, abs: u64) -> Error {
    if e.location().offset.is_some() {
        e.shift_offset(abs)
    } else {
        e.at_offset(abs)
    }
}

/// What [`parse_records_into`] parsed into its slots: how many (the first `filled`
/// slots, each written once), the error that stopped it, where it stopped.
struct ParsedInto {
    filled: usize,
    error: Option<Error>,
    end: usize,
}

/// Parses `slots.len()` records of `cd` from byte `pos` into `slots`, in order.
fn parse_records_into(
    cd: &[u8],
    cd_offset: u64,
    mut pos: usize,
    slots: &mut [std::mem::MaybeUninit<ZipEntry>],
) -> ParsedInto {
    for (filled, slot) in slots.iter_mut().enumerate() {
        let abs = cd_offset + pos as u64;
        match parse_central(cd, &mut pos) {
            Ok(entry) => {
                slot.write(entry);
            }
            Err(e) => {
                let e = at_record(e, abs);
                return ParsedInto {
                    filled,
                    error: Some(e),
                    end: pos,
                };
            }
        }
    }
    ParsedInto {
        filled: slots.len(),
        error: None,
        end: pos,
    }
}

/// Where record `n` starts, walking the lengths of the records before it; `None` when one
/// of them is not a whole record (the parse finds and reports it).
fn walk_records(cd: &[u8], n: usize) -> Option<usize> {
    let mut pos = 0usize;
    for _ in 0..n {
        let r = cd.get(pos..pos.checked_add(46)?)?;
        if u32_at(r, 0) != SIG_CENTRAL {
            return None;
        }
        let len = 46
            + usize::from(u16_at(r, 28))
            + usize::from(u16_at(r, 30))
            + usize::from(u16_at(r, 32));
        pos = pos.checked_add(len).filter(|&p| p <= cd.len())?;
    }
    Some(pos)
}

/// Where record `i` starts (the records before it parsed: for an error's offset).
fn record_offset(cd: &[u8], i: usize) -> usize {
    walk_records(cd, i).unwrap_or(0)
}

/// Parses `count` records of `cd` from byte `pos` into a list with room for `room`.
fn parse_records(cd: &[u8], cd_offset: u64, mut pos: usize, count: usize, room: usize) -> Parsed {
    let mut entries: Vec<ZipEntry> = Vec::with_capacity(room.max(count));
    for _ in 0..count {
        let abs = cd_offset + pos as u64;
        // Offsets inside the record are relative to it.
        match parse_central(cd, &mut pos) {
            Ok(entry) => entries.push(entry),
            Err(e) => {
                let e = at_record(e, abs);
                return Parsed {
                    entries,
                    error: Some(e),
                    end: pos,
                };
            }
        }
    }
    Parsed {
        entries,
        error: None,
        end: pos,
    }
}

/// Parses the end records and the central directory, checks every entry's name, its
/// local header and that no two entries overlap each other or the central directory.
pub fn parse(bytes: &[u8]) -> Result<Directory> {
    parse_with(bytes, None)
}

/// Reads `buf.len()` bytes of the file from the given offset.
pub(crate) type ReadAt<'r> = &'r dyn Fn(&mut [u8], u64) -> std::io::Result<()>;

/// The local headers of a 64 KiB block of the file that holds fewer than this many are
/// read with `pread` by [`parse_mapped`]: faulting a page into the map costs ~2 µs, and
/// tearing the mapping down later ~1 µs more (the kernel maps the 16 pages around a
/// fault, 64 KiB, so headers closer together share one fault), against ~0.4 µs a `pread`
/// (measured, docs/BENCHMARKS-history.md P2).
const SPARSE_MAX_HEADERS: usize = 4;
/// The kernel's fault-around window (`fault_around_bytes`, 64 KiB by default).
const SPARSE_BLOCK_SHIFT: u32 = 16;
/// Bytes read for a local header beyond its fixed part and name (its extra field, which
/// modelzip's writer uses for alignment padding, fits); a longer one is read from the map.
const LOCAL_EXTRA_WINDOW: u64 = 256;
/// Bytes of a stored entry's data kept from that read ([`ZipEntry::read_head`]).
const HEAD_PREFIX: usize = 64;
/// The page size the reads of a lazily checked local header keep within ([`check_local_lazy`]).
pub(crate) const PAGE: u64 = 4096;

/// [`parse`] of a file mapped as `bytes` that `read_at` also reads, as a mapped archive
/// does it (tests: it must answer as [`parse`] does): [`parse_lazy`], then
/// [`check_lazy`]: the local headers of entries that lie far apart (tensor files of
/// ≥ 16 KiB) are read with `read_at` instead of through the map, so an archive of large
/// tensors has none of their pages touched ([`ZipEntry::read_head`] says which were).
/// The checks and errors are [`parse`]'s: an entry whose header the read window does
/// not settle is checked in the map.
#[cfg(test)]
pub(crate) fn parse_mapped(bytes: &[u8], read_at: ReadAt<'_>) -> Result<Directory> {
    check_lazy(bytes, read_at, &parse_lazy(bytes)?)
}

/// [`parse_mapped`] reading every local header with `read_at` (tests: the two paths
/// must agree on every input).
#[cfg(test)]
pub(crate) fn parse_all_read(bytes: &[u8], read_at: ReadAt<'_>) -> Result<Directory> {
    parse_with(bytes, Some((read_at, usize::MAX)))
}

/// [`parse`], reading with `read_at` the local headers of 64 KiB blocks of the file that
/// hold fewer headers than the number paired with it.
fn parse_with(bytes: &[u8], read_at: Option<(ReadAt<'_>, usize)>) -> Result<Directory> {
    let at = At::whole(bytes);
    let (end, mut entries, index, dirs) = central_directory(&at)?;
    check_headers(bytes, read_at, &mut entries, end.cd_offset)?;
    Ok(Directory {
        entries,
        index,
        dirs,
        cd_offset: end.cd_offset,
        comment: end.comment,
    })
}

/// The directory `lazy` ([`parse_lazy`] of the file mapped as `bytes`) with every local
/// header checked as [`parse_mapped`] checks them, the central directory not read again:
/// a map of a file that an in-place writer shrank since (a removal writes a shorter
/// directory where the old one was) faults past the new end, where the old directory
/// and end records lay; the local headers lie before the old directory, which no
/// writer cuts.
#[cfg_attr(not(unix), allow(dead_code))]
pub(crate) fn check_lazy(bytes: &[u8], read_at: ReadAt<'_>, lazy: &Directory) -> Result<Directory> {
    let mut entries = lazy.entries.clone();
    check_headers(
        bytes,
        Some((read_at, SPARSE_MAX_HEADERS)),
        &mut entries,
        lazy.cd_offset,
    )?;
    Ok(Directory {
        entries,
        index: lazy.index.clone(),
        dirs: lazy.dirs.clone(),
        cd_offset: lazy.cd_offset,
        comment: lazy.comment.clone(),
    })
}

/// Checks the local header of each of `entries` (of the file `bytes`, its directory at
/// `cd_offset`) against its central record, setting its exact extent, reading with
/// `read_at` those of 64 KiB blocks that hold fewer headers than the number paired with
/// it; then that no two entries overlap.
fn check_headers(
    bytes: &[u8],
    read_at: Option<(ReadAt<'_>, usize)>,
    entries: &mut [ZipEntry],
    cd_offset: u64,
) -> Result<()> {
    let at = At::whole(bytes);
    let mut window = Vec::new();
    for i in 0..entries.len() {
        if let Some((read_at, max)) = read_at
            && sparse(entries, i, max)
            && check_local_read(
                read_at,
                &mut window,
                bytes.len() as u64,
                &mut entries[i],
                cd_offset,
            )
        {
            continue;
        }
        let entry = &mut entries[i];
        check_local(&at, entry, cd_offset).map_err(|e| e.in_entry(entry.name.clone()))?;
    }
    check_overlaps(entries)
}

/// The end records and the central directory's entries of the whole file `at`.
fn central_directory(at: &At<'_>) -> Result<(EndRecords, Vec<ZipEntry>, NameIndex, DirRuns)> {
    // The whole file is in the window: nothing is ever fetched.
    let end = parse_end(at, &mut |offset, len| {
        at.slice(offset, len, "zip64 end record")
            .map(<[u8]>::to_vec)
    })?;
    let cd = at.slice(end.cd_offset, end.cd_size, "central directory")?;
    let (entries, index, dirs) = parse_entries(cd, &end)?;
    Ok((end, entries, index, dirs))
}

/// Sets `e.data_offset` to its lower bound before its local header is read (a header
/// without an extra field) and refuses an entry whose data then runs into the central
/// directory at `cd_offset`.
fn lower_bound(e: &mut ZipEntry, cd_offset: u64) -> Result<()> {
    e.data_offset = e
        .header_offset
        .saturating_add(30)
        .saturating_add(e.name.len() as u64);
    if e.data_end() > cd_offset {
        return Err(zip_err(
            format!(
                "data of {} bytes at byte {} runs into the central directory (byte {cd_offset})",
                e.compressed_size, e.data_offset
            ),
            e.header_offset,
        )
        .in_entry(e.name.clone()));
    }
    Ok(())
}

/// Whether entry `i`'s local header lies with fewer than `max` headers (itself included)
/// in its 64 KiB block of the file, counted among its neighbours in the central directory
/// (writers lay entries out in file order, so the neighbours are the block's other
/// entries; in any other order a header may be read with `pread` where the map would
/// have been cheaper, with the same result). Entries with a data descriptor are not:
/// checking one reads past its data. One pass over cache-hot neighbours, no allocation
/// (a separate pass over 100,000 entries cost ~1 ms of cache misses).
fn sparse(entries: &[ZipEntry], i: usize, max: usize) -> bool {
    let block = |e: &ZipEntry| e.header_offset >> SPARSE_BLOCK_SHIFT;
    let b = block(&entries[i]);
    let reach = max.saturating_sub(1).min(entries.len());
    let left = entries[..i]
        .iter()
        .rev()
        .take(reach)
        .take_while(|e| block(e) == b)
        .count();
    let right = entries[i + 1..]
        .iter()
        .take(reach)
        .take_while(|e| block(e) == b)
        .count();
    1 + left + right < max && entries[i].flags & FLAG_DESCRIPTOR == 0
}

/// Checks `e`'s local header in bytes read with `read_at` into `window`; false when the
/// read fails or the check does not pass, for the caller to check it in the map, which
/// gives the authoritative answer and error.
fn check_local_read(
    read_at: ReadAt<'_>,
    window: &mut Vec<u8>,
    file_len: u64,
    e: &mut ZipEntry,
    cd_offset: u64,
) -> bool {
    let Some(len) = window_len(e, file_len, false) else {
        return false;
    };
    window.resize(len, 0);
    match extent_read(read_at, window, file_len, e, cd_offset) {
        Some((data_offset, descriptor_len, head)) => {
            e.data_offset = data_offset;
            e.descriptor_len = descriptor_len;
            e.unchecked_until = None;
            let mut prefix = [0u8; HEAD_PREFIX];
            prefix[..head.len()].copy_from_slice(&window[head.clone()]);
            e.read_head = Some(Box::new((prefix, head.len())));
            true
        }
        None => false,
    }
}

/// How many bytes [`extent_read`] reads of `e`'s local header (its fixed part, name and
/// up to [`LOCAL_EXTRA_WINDOW`] bytes more, within the file). With `in_page`, the read
/// ends at the end of the page where the header's name ends (or at the name's end when
/// that is a page boundary): a read of an entry's header then brings into the page cache
/// no page of its data that holds no header byte (a process loading some rows of a
/// tensor reads no other rows' pages). `None` for none (a header at the file's end).
fn window_len(e: &ZipEntry, file_len: u64, in_page: bool) -> Option<usize> {
    let start = e.header_offset;
    let fixed = 30 + e.name.len() as u64;
    let mut want = fixed + LOCAL_EXTRA_WINDOW;
    if in_page {
        let name_end = start.checked_add(fixed)?;
        want = want.min(name_end.next_multiple_of(PAGE) - start);
    }
    // ≤ 30 + 65,535 + 256: the name's length is a u16 of the central directory.
    let len = want.min(file_len.saturating_sub(start));
    (len > 0).then_some(len as usize)
}

/// [`local_extent`] of `e` in its header read with `read_at` into `window` (of
/// [`window_len`] bytes), plus where in `window` the first bytes of a stored entry's data
/// read with it lie (up to [`HEAD_PREFIX`]; [`ZipEntry::read_head`]); `None` when the
/// read fails or the check does not pass there (the map gives the authoritative answer
/// and error).
fn extent_read(
    read_at: ReadAt<'_>,
    window: &mut [u8],
    file_len: u64,
    e: &ZipEntry,
    cd_offset: u64,
) -> Option<(u64, u8, std::ops::Range<usize>)> {
    let start = e.header_offset;
    read_at(window, start).ok()?;
    let (data_offset, descriptor_len) =
        local_extent(&At::window(window, start, file_len), e, cd_offset).ok()?;
    let from = (data_offset - start) as usize;
    let n = match e.method {
        METHOD_STORED => (window.len() - from)
            .min(HEAD_PREFIX)
            .min(e.compressed_size as usize),
        _ => 0,
    };
    Some((data_offset, descriptor_len, from..from + n))
}

/// The first bytes of a stored entry's data read with its local header (up to
/// [`HEAD_PREFIX`]; [`check_local_lazy`]).
pub(crate) type HeadPrefix = ([u8; HEAD_PREFIX], usize);

/// [`parse`] of a file mapped as `bytes`, leaving the local headers unread: what opening
/// an archive to read it needs. Each entry's `data_offset` is then its lower bound (a
/// header without an extra field) and its [`ZipEntry::unchecked_until`] the byte its
/// header, data and descriptor must end by; [`check_local_lazy`] checks the header when
/// the entry's data is first read. Entries with a data descriptor are checked here (only
/// their header and the bytes after their data say how long they are). The central
/// directory, the names and the overlap check (on the lower bounds) are [`parse`]'s;
/// what only a local header can get wrong (its signature, name, method, sizes or CRC
/// differing from the central record, an extra field pushing the data into the next
/// entry) is an error of the read that meets it, and of `verify`, which reads every entry.
/// The local headers of 100,000 entries cost an open ~30 % of its time (a cache miss
/// each; docs/BENCHMARKS.md, P5), for entries a listing never reads.
pub(crate) fn parse_lazy(bytes: &[u8]) -> Result<Directory> {
    let at = At::whole(bytes);
    let (end, mut entries, index, dirs) = central_directory(&at)?;
    let cd_offset = end.cd_offset;
    for e in &mut entries {
        if e.flags & FLAG_DESCRIPTOR != 0 {
            check_local(&at, e, cd_offset).map_err(|err| err.in_entry(e.name.clone()))?;
            continue;
        }
        // (`None` only for a directory at byte 0, where no entry fits: refused below.)
        e.unchecked_until = std::num::NonZeroU64::new(cd_offset);
        if let Err(past) = lower_bound(e, cd_offset) {
            // The local header says why, as the eager parse says it (a header past the
            // directory, sizes that differ from it, ...); it cannot pass.
            check_local(&at, e, cd_offset).map_err(|err| err.in_entry(e.name.clone()))?;
            return Err(past);
        }
    }
    check_overlaps(&mut entries)?;
    Ok(Directory {
        entries,
        index,
        dirs,
        cd_offset,
        comment: end.comment,
    })
}

/// Checks the local header of `entries[i]`, which [`parse_lazy`] left unread, as [`parse`]
/// checks it, and that the entry ends by its [`ZipEntry::unchecked_until`]. The header is
/// read with `read_at` when few headers share its 64 KiB block of the file (as
/// [`parse_mapped`] reads them), else in the map `bytes`. Returns where the entry's data
/// starts and, when read with `read_at`, the first bytes of a stored entry's data read with
/// the header. Errors name no entry or file: the caller adds them.
pub(crate) fn check_local_lazy(
    bytes: &[u8],
    read_at: Option<ReadAt<'_>>,
    entries: &[ZipEntry],
    i: usize,
    cd_offset: u64,
) -> Result<(u64, Option<HeadPrefix>)> {
    let e = &entries[i];
    let file_len = bytes.len() as u64;
    let read = read_at
        .filter(|_| sparse(entries, i, SPARSE_MAX_HEADERS))
        .and_then(|read_at| {
            // Most headers fit a buffer on the stack (one `pread`, no allocation per
            // entry); zeroed only when read into (1 KiB an entry was 2 % of a listing).
            let mut stack = [0u8; 1024];
            let mut heap = Vec::new();
            let len = window_len(e, file_len, true)?;
            let window = match stack.get_mut(..len) {
                Some(w) => w,
                None => {
                    heap.resize(len, 0);
                    &mut heap[..]
                }
            };
            let (d, l, head) = extent_read(read_at, window, file_len, e, cd_offset)?;
            let mut prefix = [0u8; HEAD_PREFIX];
            prefix[..head.len()].copy_from_slice(&window[head.clone()]);
            Some((d, l, (prefix, head.len())))
        });
    let (data_offset, descriptor_len, head) = match read {
        Some((d, l, head)) => (d, l, Some(head)),
        None => {
            let (d, l) = local_extent(&At::whole(bytes), e, cd_offset)?;
            (d, l, None)
        }
    };
    let limit = e.unchecked_until.map_or(cd_offset, |l| l.get());
    // local_extent kept data and descriptor before the central directory: no overflow.
    let end = data_offset + e.compressed_size + u64::from(descriptor_len);
    if end > limit {
        return Err(zip_err(
            format!(
                "the entry (bytes {}..{end}, its local header's extra field included) overlaps the next entry, at byte {limit}",
                e.header_offset
            ),
            e.header_offset,
        ));
    }
    Ok((data_offset, head))
}

/// The directory of a file whose local headers are read later, entry by entry
/// ([`check_local_in`]): each entry's `data_offset` is a lower bound (its header with no
/// extra field) until then, and the overlap check uses those bounds.
#[cfg_attr(not(feature = "remote"), allow(dead_code))]
pub(crate) fn directory_unchecked(
    mut entries: Vec<ZipEntry>,
    index: NameIndex,
    dirs: DirRuns,
    end: EndRecords,
) -> Result<Directory> {
    for e in &mut entries {
        lower_bound(e, end.cd_offset)?;
    }
    check_overlaps(&mut entries)?;
    Ok(Directory {
        entries,
        index,
        dirs,
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
    let name = if plainly_safe(name_raw) {
        // Safety: `plainly_safe` passes only ASCII bytes, which are UTF-8. (The UTF-8
        // check was a tenth of opening 100,000 entries: callgrind, BENCHMARKS.md P5.)
        unsafe { std::str::from_utf8_unchecked(name_raw) }.to_string()
    } else {
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
        name
    };
    let flags = u16_at(r, 8);
    let version_made_by = u16_at(r, 4);
    let external_attrs = u32_at(r, 38);
    if flags & FLAG_ENCRYPTED != 0 {
        return Err(zip_err("encrypted entries are not supported", 0).in_entry(name));
    }
    if version_made_by >> 8 == 3 && (external_attrs >> 16) & 0o170000 == 0o120000 {
        return Err(
            Error::new(ErrorKind::unsafe_name(&name, "symbolic link entry")).in_entry(name),
        );
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
        name: name.into_boxed_str(),
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
        rare: match cd_extra.is_empty() && comment.is_empty() {
            true => None,
            false => Some(Box::new(RareFields {
                cd_extra: cd_extra.into(),
                comment: comment.into(),
            })),
        },
        read_head: None,
        unchecked_until: None,
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
    let (data_offset, descriptor_len) = local_extent(at, e, cd_offset)?;
    e.data_offset = data_offset;
    e.descriptor_len = descriptor_len;
    e.unchecked_until = None;
    Ok(())
}

/// Checks entry `e`'s local header in `at` against its central record and returns where
/// its data starts and the length of its data descriptor (0 when it has none).
fn local_extent(at: &At<'_>, e: &ZipEntry, cd_offset: u64) -> Result<(u64, u8)> {
    let (data_offset, data_end, descriptor) = local_header(at, e, cd_offset)?;
    let desc = match descriptor {
        Some(zip64) => descriptor_len(at, e, data_end, cd_offset, zip64)?,
        None => 0,
    };
    Ok((data_offset, desc))
}

/// [`local_extent`] up to the data descriptor: where the data starts and ends, and
/// whether a descriptor follows it (`Some`: whether its header has a Zip64 extra field).
fn local_header(at: &At<'_>, e: &ZipEntry, cd_offset: u64) -> Result<(u64, u64, Option<bool>)> {
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
    let data_offset = off + 30 + n + m;
    let data_end = match data_offset.checked_add(e.compressed_size) {
        Some(end) if end <= cd_offset => end,
        _ => {
            return Err(zip_err(
                format!(
                    "data of {} bytes at byte {data_offset} runs into the central directory (byte {cd_offset})",
                    e.compressed_size
                ),
                data_offset,
            ));
        }
    };
    let descriptor = ((flags | e.flags) & FLAG_DESCRIPTOR != 0).then(|| {
        extra_fields(extra)
            .map(|f| f.iter().any(|(id, _)| *id == ZIP64_EXTRA))
            .unwrap_or(false)
    });
    Ok((data_offset, data_end, descriptor))
}

/// The entries of the central directory in `tail`: the last bytes of a file of
/// `file_len` bytes, from byte `offset` on (its directory and end records, as a journal
/// saves them), parsed as an open parses them; and the directory's offset.
pub(crate) fn directory_in_tail(
    tail: &[u8],
    offset: u64,
    file_len: u64,
) -> Result<(u64, Vec<ZipEntry>)> {
    let at = At::window(tail, offset, file_len);
    let end = parse_end(&at, &mut |o, len| {
        at.slice(o, len, "zip64 end record").map(<[u8]>::to_vec)
    })?;
    let cd = at.slice(end.cd_offset, end.cd_size, "central directory")?;
    let (entries, _, _) = parse_entries(cd, &end)?;
    Ok((end.cd_offset, entries))
}

/// Whether entry `e`'s local header (and data descriptor), read with `read_at` from a
/// file of `file_len` bytes whose central directory starts at `cd_offset`, agree with
/// its central record as [`parse`] checks them. Errors are the reads'.
pub(crate) fn local_header_agrees(
    read_at: ReadAt<'_>,
    file_len: u64,
    e: &ZipEntry,
    cd_offset: u64,
) -> std::io::Result<bool> {
    let start = e.header_offset;
    let Some(short) = window_len(e, file_len, false) else {
        return Ok(false);
    };
    // The fixed part, the name and the usual extra field; then, if that does not settle
    // it, the longest an extra field can be.
    let long = (30 + e.name.len() as u64 + 0xffff).min(file_len.saturating_sub(start)) as usize;
    for len in [short, long.max(short)] {
        let mut window = vec![0u8; len];
        read_at(&mut window, start)?;
        let at = At::window(&window, start, file_len);
        match local_header(&at, e, cd_offset) {
            Ok((_, _, None)) => return Ok(true),
            Ok((_, data_end, Some(zip64))) => {
                let mut d = vec![0u8; (cd_offset - data_end).min(24) as usize];
                read_at(&mut d, data_end)?;
                let at = At::window(&d, data_end, file_len);
                return Ok(descriptor_len(&at, e, data_end, cd_offset, zip64).is_ok());
            }
            Err(_) if len < long => {}
            Err(_) => return Ok(false),
        }
    }
    Ok(false)
}

/// The length of the data descriptor that follows an entry's data (general-purpose flag
/// bit 3), one of four forms: an optional signature, the CRC, then both sizes in 4 bytes
/// each or in 8 (12, 16, 20 or 24 bytes; Python's zipfile and Info-ZIP write the signed
/// ones). APPNOTE 4.3.9 ties 8-byte sizes to a local header with a Zip64 extra field;
/// FORMAT.md also accepts them after one without (a streaming writer learns the width
/// only after its local header is written). The form is the one whose CRC and sizes are
/// the central directory's, tried in the order the local header suggests; a descriptor
/// that matches none is refused, as its length, and so what the entry occupies, would be
/// a guess.
fn descriptor_len(
    at: &At<'_>,
    e: &ZipEntry,
    data_end: u64,
    cd_offset: u64,
    zip64: bool,
) -> Result<u8> {
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
                return Ok(len as u8); // 12, 16, 20 or 24
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
/// Sets each entry's [`ZipEntry::unchecked_until`] that is `Some` to the next entry's
/// local header, in file order (the last keeps the central directory's offset).
pub(super) fn check_overlaps(entries: &mut [ZipEntry]) -> Result<()> {
    // Writers lay entries out in file order: the directory's order is then the file's
    // (the stable sort below would not move them), and no list of positions is made and
    // sorted (800 KB of fresh memory and a sort of 100,000 entries; BENCHMARKS.md, P5).
    if entries
        .windows(2)
        .all(|w| w[0].header_offset <= w[1].header_offset)
    {
        for i in 1..entries.len() {
            check_neighbours(entries, i - 1, i)?;
        }
        return Ok(());
    }
    let mut order: Vec<usize> = (0..entries.len()).collect();
    order.sort_by_key(|&i| entries[i].header_offset);
    for w in order.windows(2) {
        check_neighbours(entries, w[0], w[1])?;
    }
    Ok(())
}

/// [`check_overlaps`] of entry `a` and entry `b`, the next in file order.
fn check_neighbours(entries: &mut [ZipEntry], a: usize, b: usize) -> Result<()> {
    let next = entries[b].header_offset;
    // (A next header at byte 0 shares it with this one: refused just below.)
    if let (Some(limit), Some(next)) = (
        &mut entries[a].unchecked_until,
        std::num::NonZeroU64::new(next),
    ) {
        *limit = next;
    }
    let (a, b) = (&entries[a], &entries[b]);
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
    Ok(())
}
