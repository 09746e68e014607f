//! Compacting an archive in an S3 bucket where it lies: the new version of the object is
//! composed from the live entries only (runs of 5 MiB and more copied by the store, shorter
//! ones read and uploaded), then a new tags.txt, summary and central directory, committed
//! only if the object is still the version read. See docs/REMOTE.md, "Remote compaction".

use super::append::{
    MAX_OBJECT, MAX_PART, MAX_PARTS, Part, Piece, RemoteAppender, S3_MIN_PART, UPLOAD_PART,
    changed, split_parts, staging, uploads, version_of, writable,
};
use super::{Client, RemoteOptions, remote_err};
use crate::archive::{WriteOptions, compaction_session, finish_detached, written_by_commit};
use crate::error::{Error, ErrorKind, Result};
use object_store::{GetOptions, GetRange};
use std::collections::BTreeMap;
use std::ops::Range;

/// Alignment of a stored tensor's data ([`crate::archive`]'s `DATA_ALIGN`): every run of
/// live entries moves by a multiple of it, so each tensor stays as aligned as it was.
const ALIGN: u64 = 64;

/// The fewest bytes a dead region can hold: an end-of-central-directory record (22
/// bytes) is the smallest thing a writer leaves behind. A shorter gap after an entry is
/// its own local extra field or data descriptor (or a foreign writer's slack), kept with
/// it without reading its local header.
const MIN_DEAD: u64 = 22;

/// Local headers read at once.
const HEADER_READS: usize = 16;

/// Compacts the archive at an `s3://` URL: composes a new version of the object from
/// its live entries only, moved verbatim (each run of adjacent entries by a multiple of
/// 64 bytes, so stored tensors stay aligned), and a new tags.txt, summary and central
/// directory; the dead bytes (old central directories and tables, removed tags' entries)
/// are neither copied nor read, but for under 64 bytes per gap kept as padding. Runs of
/// 5 MiB (S3's part minimum) and more are copied by the store (`UploadPartCopy`, 5 GiB per
/// part); shorter ones are read by ranged GETs of just their bytes and uploaded, merged
/// into parts of at least 5 MiB (topped up from the next long run when needed).
/// Committed only if the object is still the version read
/// ([`ErrorKind::RemoteConflict`] otherwise: nothing written); the multipart upload is
/// aborted on every error. The report is a local compaction's (the object's sizes) with
/// [`CompactReport::remote`](crate::CompactReport::remote), the commit, whose
/// [`padding`](super::RemoteWrite::padding) and
/// [`headers_read`](super::RemoteWrite::headers_read) say what the moved runs
/// left between them and what was read to find their ends. When the new version would be
/// no smaller (no dead bytes), nothing is written (`remote` is `None`).
pub fn compact(
    url: &str,
    remote: &RemoteOptions,
    write: &WriteOptions,
) -> Result<crate::CompactReport> {
    let (client, s3) = writable(url, remote)?;
    let base = remote.open(url)?;
    let e_tag = version_of(&base, url)?;
    let before = base.len_bytes();
    let dir = base.listing();
    let mut live: Vec<Live> = dir
        .entries
        .iter()
        .filter(|e| !written_by_commit(&e.name))
        .map(|e| Live {
            name: e.name.to_string(),
            header: e.header_offset,
            // The data's end with no local extra field (a lower bound of its end: the
            // central directory does not give the local header's length).
            lower_end: e.data_end().saturating_add(u64::from(e.descriptor_len)),
            compressed_size: e.compressed_size,
            descriptor: e.flags & DESCRIPTOR != 0,
        })
        .collect();
    live.sort_by_key(|e| e.header);
    let ends = entry_ends(&client, &e_tag, &live, dir.cd_offset)?;
    let headers_read = ends.iter().filter(|(_, read)| *read).count() as u64;
    let runs = runs(
        live.iter()
            .map(|e| e.header)
            .zip(ends.iter().map(|(end, _)| *end)),
    );
    let moved = layout(&runs);
    let padding = moved.iter().map(|m| m.pad).sum();
    let live_end = moved.last().map_or(0, Moved::new_end);
    // Each entry moves with its run: the run that starts at or before its header.
    let by: BTreeMap<u64, u64> = moved.iter().map(|m| (m.old.start, m.moved_by())).collect();
    let (staged, sink) = staging()?;
    let session = compaction_session(sink, &base, live_end, write, |e| {
        by.range(..=e.header_offset)
            .next_back()
            .map_or(0, |(_, b)| *b)
    })?;
    let end = finish_detached(session, Some(base)).map_err(|e| e.in_file(url))?;
    let staged_len = end - live_end;
    if end >= before {
        return Ok(crate::CompactReport {
            before,
            after: before,
            remote: None,
        });
    }
    let parts = parts(&moved, staged_len).map_err(|why| {
        Error::new(ErrorKind::InvalidInput(format!(
            "{why}; nothing was written"
        )))
        .in_file(url)
    })?;
    let mut done =
        RemoteAppender::for_version(client, s3, staged, e_tag).commit_parts(staged_len, parts)?;
    done.headers_read = headers_read;
    done.padding = padding;
    Ok(crate::CompactReport {
        before,
        after: end,
        remote: Some(done),
    })
}

/// General-purpose flag bit 3: a data descriptor follows the data.
const DESCRIPTOR: u16 = 0x0008;

/// What the plan needs of a live entry.
struct Live {
    name: String,
    header: u64,
    lower_end: u64,
    compressed_size: u64,
    descriptor: bool,
}

/// Where each live entry's bytes end (and whether its local header was read for it):
/// at the next live entry's header (or the central directory) when the gap after its
/// lower bound is too short to hold a dead region, else where its local header says.
fn entry_ends(
    client: &Client,
    e_tag: &str,
    live: &[Live],
    cd_offset: u64,
) -> Result<Vec<(u64, bool)>> {
    let limits: Vec<u64> = live
        .iter()
        .skip(1)
        .map(|e| e.header)
        .chain([cd_offset])
        .collect();
    let mut ends: Vec<(u64, bool)> = Vec::with_capacity(live.len());
    let mut wanted = Vec::new();
    for (i, (e, &limit)) in live.iter().zip(&limits).enumerate() {
        if e.lower_end > limit {
            return Err(Error::new(ErrorKind::Zip(format!(
                "entry {} (local header at byte {}) runs past the next entry or the central directory (byte {limit})",
                e.name, e.header
            )))
            .in_file(&client.url)
            .at_offset(e.header));
        }
        if limit - e.lower_end < MIN_DEAD {
            ends.push((limit, false));
        } else {
            ends.push((0, true));
            wanted.push(i);
        }
    }
    let heads = read_headers(client, e_tag, live, &wanted)?;
    for (i, head) in wanted.into_iter().zip(heads) {
        let e = &live[i];
        ends[i].0 = local_end(e, &head, limits[i]).map_err(|why| {
            Error::new(ErrorKind::Zip(format!(
                "local header of {} at byte {}: {why}; nothing was written",
                e.name, e.header
            )))
            .in_file(&client.url)
            .at_offset(e.header)
        })?;
    }
    Ok(ends)
}

/// The end of entry `e`'s bytes from its local header `head` (its first 30 bytes and
/// name): data end, plus a data descriptor of at most 24 bytes (not parsed: the bytes up
/// to `limit`, 24 at most, are kept with it).
fn local_end(e: &Live, head: &[u8], limit: u64) -> std::result::Result<u64, String> {
    let u16_at = |at: usize| u64::from(u16::from_le_bytes([head[at], head[at + 1]]));
    if head.len() < 30 || head[..4] != [0x50, 0x4b, 0x03, 0x04] {
        return Err("no local header signature".into());
    }
    let n = u16_at(26);
    if head.get(30..).map(<[u8]>::len) != Some(n as usize) || head[30..] != *e.name.as_bytes() {
        return Err("the name differs from the central directory's".into());
    }
    let flags = u16_at(6) as u16;
    let end = e.header + 30 + n + u16_at(28) + e.compressed_size;
    if end > limit {
        return Err(format!(
            "its extra field runs the data past the next entry or the central directory (byte {limit})"
        ));
    }
    Ok(if e.descriptor || flags & DESCRIPTOR != 0 {
        (end + 24).min(limit)
    } else {
        end
    })
}

/// The local headers (30 bytes and the name) of the entries `wanted` indexes, read
/// conditionally on the version, several at once.
fn read_headers(
    client: &Client,
    e_tag: &str,
    live: &[Live],
    wanted: &[usize],
) -> Result<Vec<Vec<u8>>> {
    use futures_util::{StreamExt, TryStreamExt};
    let read = |i: usize| {
        let e = &live[i];
        let range = e.header..e.header + 30 + e.name.len() as u64;
        async move {
            let opts = GetOptions {
                range: Some(GetRange::Bounded(range)),
                if_match: Some(e_tag.to_string()),
                ..Default::default()
            };
            let got = client.store.get_opts(&client.path, opts).await?;
            if got.meta.e_tag.as_deref() != Some(e_tag) {
                return Err(object_store::Error::Precondition {
                    path: client.path.to_string(),
                    source: "another version".into(),
                });
            }
            super::exact_body(got).await
        }
    };
    let got = client.block_on(
        futures_util::stream::iter(wanted.iter().copied())
            .map(read)
            .buffered(HEADER_READS)
            .try_collect::<Vec<_>>(),
    );
    got.map_err(|e| match e {
        object_store::Error::Precondition { .. } | object_store::Error::NotFound { .. } => {
            changed(client, Some(e_tag))
        }
        e => remote_err(&client.url, e),
    })
}

/// Runs of adjacent entries: (header, end) in offset order merged where one ends at the
/// next one's header.
fn runs(entries: impl Iterator<Item = (u64, u64)>) -> Vec<Range<u64>> {
    let mut runs: Vec<Range<u64>> = Vec::new();
    for (start, end) in entries {
        match runs.last_mut() {
            Some(r) if r.end == start => r.end = end,
            _ => runs.push(start..end),
        }
    }
    runs
}

/// A run of live entries in the new version: its old bytes, and the padding before it
/// (`pad` bytes: the old bytes just before the run when copied, zeros when uploaded).
#[derive(Debug, Clone, PartialEq, Eq)]
struct Moved {
    old: Range<u64>,
    pad: u64,
    /// Where the padding starts in the new version.
    new_start: u64,
}

impl Moved {
    /// Bytes the run moves towards the start (a multiple of [`ALIGN`]).
    fn moved_by(&self) -> u64 {
        self.old.start - (self.new_start + self.pad)
    }

    fn new_end(&self) -> u64 {
        self.new_start + self.pad + (self.old.end - self.old.start)
    }

    /// The old range with the padding's bytes before it.
    fn padded(&self) -> Range<u64> {
        self.old.start - self.pad..self.old.end
    }
}

/// The runs laid out one after another, each padded to keep its offset modulo 64. The
/// padding (under 64) is at most the gap before the run in the old object: every run
/// before moved by a multiple of 64, so the padding is that gap modulo 64.
fn layout(runs: &[Range<u64>]) -> Vec<Moved> {
    let mut at = 0;
    runs.iter()
        .map(|r| {
            let pad = (r.start - at) % ALIGN;
            let m = Moved {
                old: r.clone(),
                pad,
                new_start: at,
            };
            at = m.new_end();
            m
        })
        .collect()
}

/// The pieces that upload the bytes `range` of padded run `m` (the padding as zeros:
/// dead bytes are not read).
fn upload_pieces(m: &Moved, range: Range<u64>, into: &mut Vec<Piece>) {
    if range.start < m.old.start {
        into.push(Piece::Zeros(range.end.min(m.old.start) - range.start));
    }
    if range.end > m.old.start {
        into.push(Piece::Old(range.start.max(m.old.start)..range.end));
    }
}

/// Copy parts of `range` (5 MiB or more): one per 5 GiB.
fn copies(range: Range<u64>, parts: &mut Vec<Part>) {
    let len = range.end - range.start;
    let n = len.div_ceil(MAX_PART);
    let each = len.div_ceil(n);
    parts.extend((0..n).map(|i| {
        Part::Copy(range.start + i * each..(range.start + (i + 1) * each).min(range.end))
    }));
}

/// The parts of the new version: the moved runs (those of 5 MiB and more copied, the
/// others read and uploaded in parts of at least 5 MiB, topped up from the start of the
/// next long run when they are fewer), then `staged` bytes (tags.txt, summary, central
/// directory) after what is left to upload.
fn parts(moved: &[Moved], staged: u64) -> std::result::Result<Vec<Part>, String> {
    let total = moved
        .last()
        .map_or(0, Moved::new_end)
        .saturating_add(staged);
    if total > MAX_OBJECT {
        return Err(format!(
            "the new version would be {total} bytes, over S3's largest object ({MAX_OBJECT} bytes)"
        ));
    }
    let mut parts = Vec::new();
    let mut pending: Vec<Piece> = Vec::new();
    let mut pending_len = 0u64;
    for m in moved {
        let padded = m.padded();
        let len = padded.end - padded.start;
        if len < S3_MIN_PART {
            upload_pieces(m, padded, &mut pending);
            pending_len += len;
            continue;
        }
        let mut copy_from = padded.start;
        if pending_len > 0 && pending_len < S3_MIN_PART {
            let top_up = S3_MIN_PART - pending_len;
            if len - top_up < S3_MIN_PART {
                // Too short to give the top-up and stay a part: uploaded whole.
                upload_pieces(m, padded, &mut pending);
                pending_len += len;
                continue;
            }
            upload_pieces(m, padded.start..padded.start + top_up, &mut pending);
            pending_len += top_up;
            copy_from += top_up;
        }
        if pending_len > 0 {
            // At least 5 MiB: parts of about UPLOAD_PART, each at least that (or all).
            let k = (pending_len / UPLOAD_PART).max(1);
            let each = pending_len / k;
            let sizes = std::iter::repeat_n(each, (k - 1) as usize);
            parts.extend(split_parts(std::mem::take(&mut pending), sizes));
            pending_len = 0;
        }
        copies(copy_from..padded.end, &mut parts);
    }
    pending.push(Piece::Staged(staged));
    let tail = pending_len + staged;
    let room = MAX_PARTS.saturating_sub(parts.len() as u64).max(1);
    let part = UPLOAD_PART.max(tail.div_ceil(room));
    if part > MAX_PART {
        return Err(format!(
            "{tail} uploaded bytes need parts over S3's largest ({MAX_PART} bytes)"
        ));
    }
    parts.extend(uploads(pending, part));
    if parts.len() as u64 > MAX_PARTS {
        return Err(format!(
            "the new version needs {} parts, over S3's {MAX_PARTS}",
            parts.len()
        ));
    }
    Ok(parts)
}

#[cfg(test)]
mod tests {
    use super::*;

    const MIB: u64 = 1 << 20;

    /// What the parts compose, checked: every part but the last between S3's limits,
    /// every run's bytes at its new place (old offset minus a multiple of 64), no dead
    /// byte read (padding uploaded as zeros), the staged bytes last.
    fn check(runs: &[Range<u64>], staged: u64) -> (Vec<Part>, Vec<Moved>) {
        let moved = layout(runs);
        let parts = parts(&moved, staged).unwrap();
        for (i, p) in parts.iter().enumerate() {
            let len = match p {
                Part::Copy(r) | Part::CopyFrom(_, r) => r.end - r.start,
                Part::Upload(ps) => ps.iter().map(Piece::len).sum(),
            };
            assert!(len <= MAX_PART, "{i}: {len}");
            if i + 1 < parts.len() {
                assert!(
                    len >= S3_MIN_PART,
                    "part {i} of {}: {len} bytes",
                    parts.len()
                );
            }
        }
        // Flatten: (new offset, old offset or None for zeros/staged, len).
        let mut at = 0u64;
        let mut segs: Vec<(u64, Option<u64>, u64, bool)> = Vec::new();
        for p in &parts {
            let pieces = match p {
                Part::Copy(r) => vec![(Some(r.start), r.end - r.start, false)],
                Part::CopyFrom(..) => panic!("a compaction copies from the archive only"),
                Part::Upload(ps) => ps
                    .iter()
                    .map(|x| match x {
                        Piece::Old(r) => (Some(r.start), r.end - r.start, true),
                        Piece::Zeros(n) => (None, *n, false),
                        Piece::Staged(n) => (None, *n, false),
                        Piece::From(..) => panic!("a compaction reads the archive only"),
                    })
                    .collect(),
            };
            for (old, len, read) in pieces {
                segs.push((at, old, len, read));
                at += len;
            }
        }
        let live_end = moved.last().map_or(0, Moved::new_end);
        assert_eq!(at, live_end + staged);
        for m in &moved {
            assert_eq!(m.moved_by() % ALIGN, 0, "{m:?}");
            let (a, b) = (m.new_start + m.pad, m.new_end());
            for &(s, old, len, _) in &segs {
                let (lo, hi) = (s.max(a), (s + len).min(b));
                if lo < hi {
                    let old = old.unwrap_or_else(|| panic!("run {m:?} not from old bytes"));
                    assert_eq!(old + (lo - s), lo + m.moved_by(), "{m:?}");
                }
            }
        }
        // Reads only of live bytes.
        for &(_, old, len, read) in &segs {
            if let (true, Some(o)) = (read, old) {
                assert!(
                    runs.iter().any(|r| r.start <= o && o + len <= r.end),
                    "read {o}+{len}"
                );
            }
        }
        (parts, moved)
    }

    #[test]
    fn runs_merge_where_one_ends_at_the_next() {
        let got = runs([(0, 10), (10, 20), (30, 40), (40, 41)].into_iter());
        assert_eq!(got, vec![0..20, 30..41]);
    }

    #[test]
    fn runs_move_by_multiples_of_64_with_padding_under_64() {
        let runs = [100..300, 1000..1001, 1100..2000];
        let moved = layout(&runs);
        assert_eq!(moved[0].pad, 100 % 64);
        for (m, r) in moved.iter().zip(&runs) {
            assert_eq!(m.moved_by() % 64, 0);
            assert!(m.pad < 64);
            assert!(m.pad <= r.start);
        }
        check(&runs, 1000);
    }

    #[test]
    fn long_runs_are_copied_and_short_ones_uploaded_in_parts_of_5_mib() {
        // Long, short, long: the short run is topped up from the second long run.
        let runs = [0..8 * MIB, 9 * MIB..9 * MIB + 100, 10 * MIB..30 * MIB];
        let (parts, _) = check(&runs, 4096);
        let copied: u64 = parts
            .iter()
            .map(|p| match p {
                Part::Copy(r) => r.end - r.start,
                _ => 0,
            })
            .sum();
        assert!(copied >= 20 * MIB, "{parts:?}");
        // Short runs only: one upload.
        let (parts, _) = check(&[10..1000, 5000..9000], 100);
        assert!(parts.iter().all(|p| matches!(p, Part::Upload(_))));
        // Short, then a long run too short to give the top-up: uploaded whole.
        check(&[0..MIB, 2 * MIB..8 * MIB, 9 * MIB..20 * MIB], 10);
        // Many short runs adding up to more than a part, then a long one.
        let many: Vec<Range<u64>> = (0..40).map(|i| i * MIB..i * MIB + MIB / 2).collect();
        let mut with_long = many.clone();
        with_long.push(41 * MIB..60 * MIB);
        check(&with_long, 10);
        check(&many, 10);
        // Nothing live.
        let (parts, _) = check(&[], 200);
        assert_eq!(parts, vec![Part::Upload(vec![Piece::Staged(200)])]);
    }

    #[test]
    fn huge_runs_take_one_copy_per_5_gib() {
        let gib = 1u64 << 30;
        let (parts, _) = check(&[0..12 * gib, 12 * gib + 64..12 * gib + 10 * MIB], 10);
        let n = parts.iter().filter(|p| matches!(p, Part::Copy(_))).count();
        assert_eq!(n, 3 + 1);
    }
}
