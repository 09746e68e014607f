//! The committed tag of a sharded save into an object store, laid out for composing: the
//! new version of the archive object is the old one up to its central directory, then
//! each tensor's entry (local header and record header written here, the data a run of
//! byte ranges of the ranks' staging objects), then the tag's tables, tags.txt, summary
//! and central directory written here. The store puts it together (src/remote/sharded.rs);
//! this module decides what goes where, with the same checks as a local commit
//! (coverage, CRC-32 combined, deduplication by shards.txt).

use super::super::append::finish_session;
use super::super::container::ZipEntry;
use super::super::hashing::hex_digest;
use super::super::reader::Archive;
use super::super::session::{Session, WriteOptions};
use super::super::summary::written_by_commit;
use super::super::text::parse_sums;
use super::commit::{check_coverage, find_duplicates, record_tag};
use super::group::Marker;
use super::plan::Plan;
use super::plan::Planned;
use super::{Extras, boxes, invalid};
use crate::error::Result;
use sha2::Digest;
use std::collections::HashMap;
use std::fs::File;
use std::io::{BufWriter, Write};

/// A byte range of the new version, in order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Seg {
    /// The next `n` bytes of the staged file (headers, tables, directory).
    Staged(u64),
    /// Bytes `at..at + len` of the staging object of the marker at `marker`.
    Shard { marker: usize, at: u64, len: u64 },
}

/// Reads bytes `range` of the staging object of the marker at the index given.
pub(crate) type ReadStaged<'r> = dyn Fn(usize, std::ops::Range<u64>) -> Result<Vec<u8>> + 'r;

/// The new tag laid out after the first `keep` bytes of the archive `base` (`None`: a new
/// archive, `keep` 0): the segments after `keep`, in order, with the bytes written here
/// appended to `staged`; and how many tensors are stored by reference to identical
/// earlier ones: by shards.txt (no tensor byte read), or, for a candidate no shards.txt
/// lists (written by one process, or re-homed when its tag was removed), by the SHA-256
/// its tag's sha256sums.txt records against that of the tensor's bytes in the staging
/// objects, read with `read` (only for candidates whose length and CRC-32 match).
#[allow(clippy::too_many_arguments)]
pub(crate) fn lay_out(
    base: Option<Archive>,
    plan: &Plan,
    nonce: &str,
    extras: &Extras,
    markers: &[Marker],
    opts: &WriteOptions,
    staged: &File,
    read: &ReadStaged<'_>,
) -> Result<(Vec<Seg>, usize)> {
    let tensors = check_coverage(plan, markers)?;
    let keep = base.as_ref().map_or(0, |b| b.listing().cd_offset);
    // Each tensor's data runs, from the markers: (offset in the data, marker, offset in
    // its staging object, length).
    let mut runs: Vec<Vec<(u64, usize, u64, u64)>> = vec![Vec::new(); plan.tensors.len()];
    for (mi, m) in markers.iter().enumerate() {
        let staged_len = m.staged.as_ref().map_or(0, |o| o.len);
        for s in &m.shards {
            let Some(p) = plan.tensors.get(s.tensor) else {
                continue; // check_coverage refused it already
            };
            let at = s.staged_at.unwrap_or(u64::MAX);
            let mut add = |dest: u64, from: u64, len: u64| -> Result<()> {
                if len == 0 {
                    return Ok(());
                }
                if from.checked_add(len).is_none_or(|e| e > staged_len) {
                    return Err(invalid(format!(
                        "rank {} reports a shard of {} at bytes {from}..+{len} of its staging object, past its {staged_len} bytes; nothing was committed",
                        m.rank,
                        p.spec.label()
                    )));
                }
                runs[s.tensor].push((dest, mi, from, len));
                Ok(())
            };
            match &s.boxed {
                None => add(s.first_row * p.row_bytes, at, s.rows * p.row_bytes)?,
                Some(b) => {
                    if b.iter().any(|r| r.start == r.end) {
                        continue;
                    }
                    let layout = boxes::layout(p.spec.dtype, &p.spec.dims, b, &p.spec.label())?;
                    let run = layout.run_len;
                    let mut k = 0u64;
                    let mut res = Ok(());
                    layout.for_each_run(|dest| {
                        if res.is_ok() {
                            res = add(dest, at.saturating_add(k * run), run);
                        }
                        k += 1;
                    });
                    res?;
                }
            }
        }
    }
    for t in &mut runs {
        t.sort_unstable_by_key(|r| r.0);
    }
    let reused = match &base {
        Some(b) => {
            let mut sums: HashMap<String, HashMap<String, String>> = HashMap::new();
            let mut same = |e: &ZipEntry, p: &Planned| -> Result<bool> {
                let Some((tag, rel)) = e.name.split_once('/') else {
                    return Ok(false);
                };
                if !sums.contains_key(tag) {
                    let name = format!("{tag}/sha256sums.txt");
                    let mut m = HashMap::new();
                    if b.entry(&name).is_some() {
                        for (hex, path) in parse_sums(&b.entry_bytes(&name)?, &name)? {
                            m.insert(path, hex.to_ascii_lowercase());
                        }
                    }
                    sums.insert(tag.to_string(), m);
                }
                let Some(want) = sums.get(tag).and_then(|m| m.get(rel)) else {
                    return Ok(false);
                };
                let Some(i) = plan.position(&p.spec.name, p.spec.updater_slot) else {
                    return Ok(false);
                };
                let mut h = sha2::Sha256::new();
                h.update(&p.record_header);
                for &(_, marker, from, len) in &runs[i] {
                    let mut at = from;
                    while at < from + len {
                        let n = (from + len - at).min(16 << 20);
                        h.update(read(marker, at..at + n)?);
                        at += n;
                    }
                }
                Ok(hex_digest(&h.finalize().into()) == *want)
            };
            find_duplicates(b, plan, &tensors, &mut same)?
        }
        None => vec![None; plan.tensors.len()],
    };
    let (dos_date, dos_time) = super::super::time::dos_now();
    let mut out = BufWriter::with_capacity(1 << 20, staged.try_clone()?);
    let mut segs = Vec::new();
    let mut placed = Vec::with_capacity(plan.tensors.len());
    let mut at = keep;
    for (i, (p, (_, crc))) in plan.tensors.iter().zip(&tensors).enumerate() {
        if reused[i].is_some() {
            placed.push(None);
            continue;
        }
        let (h, entry) = p.entry_header(*crc, at, (dos_time, dos_date))?;
        out.write_all(&h)?;
        out.write_all(&p.record_header)?;
        segs.push(Seg::Staged((h.len() + p.record_header.len()) as u64));
        let data_len = p.record_len - p.record_header.len() as u64;
        let t = &runs[i];
        let mut next = 0u64;
        for &(dest, marker, from, len) in t.iter() {
            if dest != next {
                return Err(invalid(format!(
                    "the shards of {} do not cover its bytes {next}..{dest}; nothing was committed",
                    p.spec.label()
                )));
            }
            match segs.last_mut() {
                Some(Seg::Shard {
                    marker: m,
                    at,
                    len: l,
                }) if *m == marker && *at + *l == from => *l += len,
                _ => segs.push(Seg::Shard {
                    marker,
                    at: from,
                    len,
                }),
            }
            next = dest + len;
        }
        if next != data_len {
            return Err(invalid(format!(
                "the shards of {} cover {next} of its {data_len} bytes; nothing was committed",
                p.spec.label()
            )));
        }
        at += h.len() as u64 + p.record_len;
        placed.push(Some(entry));
    }
    out.flush()?;
    drop(out);
    let sink = BufWriter::with_capacity(1 << 20, staged.try_clone()?);
    let mut s = match base {
        Some(base) => {
            let mut s = Session::in_place_at(Box::new(sink), at, &base, opts.clone(), |e| {
                !written_by_commit(&e.name)
            })?;
            s.adopt_remote_base(base)?;
            s
        }
        None => Session::new(Box::new(sink), at, opts.clone()),
    };
    record_tag(&mut s, plan, nonce, extras, &tensors, placed, &reused)?;
    let end = finish_session(s, None)?;
    segs.push(Seg::Staged(end - at));
    let deduplicated = reused.iter().filter(|r| r.is_some()).count();
    Ok((segs, deduplicated))
}

/// The bytes staged for `segs` (to check the staged file's length against).
pub(crate) fn staged_len(segs: &[Seg]) -> u64 {
    segs.iter()
        .map(|s| match s {
            Seg::Staged(n) => *n,
            Seg::Shard { .. } => 0,
        })
        .sum()
}
