//! Staging, committing and rolling back a sharded save (the protocol of docs/SHARDED.md).
//!
//! Staged state: `[old archive, untouched][pad to 4 KiB][extension: the planned entries,
//! written by the ranks][tags.txt, summary, central directory listing the old entries]`.
//! The archive reads as before throughout; readers may map the staged file, so nothing
//! past the old end is ever cut once the staging is complete: the commit is journaled as
//! an append to the staged archive, and a rollback frees the extension's blocks (see
//! [`settle_staged`]). The undo record (the journal format, under another name so that
//! readers do not replay it) restores the old bytes only of a staging cut short.

use super::super::append::{finish_in_place, finish_session};
use super::super::archive_path::ArchivePath;
use super::super::fault::Budgeted;
use super::super::hashing::hex_digest;
use super::super::journal;
use super::super::lock::WriteLock;
use super::super::reader::{Archive, OpenOptions};
use super::super::session::Session;
use super::super::summary::written_by_commit;
use super::super::text::{ShardLine, parse_shards, render_shards};
use super::group::{self, Group, Marker};
use super::plan::{Plan, Planned};
use super::{Extras, ShardedOptions, invalid, past};
use crate::error::{Error, ErrorKind, Result};
use crate::tensor::slice::SliceLayout;
use sha2::Digest;
use std::collections::HashMap;
use std::fs::File;
use std::io::{BufWriter, Seek, SeekFrom};
use std::path::Path;
use std::time::Duration;

/// The extension starts at a multiple of this (a page: ranks' writes start page-aligned
/// where the rows allow).
const EXT_ALIGN: u64 = 4096;

/// Rank 0: takes the write lock (held for the group), rolls back what a dead group or
/// append left, creates the archive if there is none, and stages the extension.
pub(super) fn stage(
    ap: &ArchivePath,
    plan: &Plan,
    opts: &ShardedOptions,
) -> Result<(WriteLock, Group)> {
    let real = ap.real.as_path();
    if !real.exists() {
        let w = super::super::writer::ArchiveWriter::create_with(real, &opts.write)?;
        // Checked again under the writer's lock: another writer may have created the
        // archive meanwhile, and finishing would replace it.
        if !real.exists() {
            w.finish()?;
        }
    }
    let lock = WriteLock::acquire_resolved(real, opts.write.wait_for_lock)?;
    super::super::durable::remove_stale_temps(real);
    journal::recover(real)?;
    recover_staged(real, opts.timeout)?;
    let base = Archive::open_unrecovered(real, &ap.shown, OpenOptions::default())?;
    if let Some(t) = base.canonical_tag(&plan.tag) {
        return Err(ErrorKind::TagExists(t.to_string()).into());
    }
    let lease = group::lease(real, true, opts.timeout)?;
    group::remove_group_files(real, &plan.tag)?;
    let original_len = base.len_bytes();
    let cd_offset = base.listing().cd_offset;
    let saved = base.bytes().get(cd_offset as usize..).unwrap_or_default();
    let undo = group::undo_path(real);
    if let Err(e) = journal::write_as(real, &undo, original_len, cd_offset, saved) {
        // Nothing is staged yet: a record cut short is only litter.
        let _ = journal::remove_file(&undo);
        return Err(e);
    }
    let ext_start = original_len.div_ceil(EXT_ALIGN) * EXT_ALIGN;
    let group = Group {
        tag: plan.tag.clone(),
        plan: plan.digest.clone(),
        world_size: plan.world_size,
        nonce: group::new_nonce(),
        ext_start,
        ext_len: plan.ext_len,
    };
    let staged = (|| -> Result<()> {
        let tail = ext_start + plan.ext_len;
        let file = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .open(real)?;
        file.set_len(tail)?;
        let mut w = file.try_clone()?;
        w.seek(SeekFrom::Start(tail))?;
        let sink = BufWriter::with_capacity(1 << 20, Budgeted(w));
        let session = Session::in_place_at(Box::new(sink), tail, &base, opts.write.clone(), |e| {
            !written_by_commit(&e.name)
        })?;
        let end = finish_session(session, Some(base))?;
        file.set_len(end)?;
        if opts.write.fsync {
            file.sync_all()?;
        }
        group::write_group(real, &group)
    })();
    if let Err(e) = staged {
        let _ = group::remove_group_files(real, &plan.tag);
        let _ = settle_staged(real);
        return Err(e.in_file(real));
    }
    drop(lease);
    Ok((lock, group))
}

/// A rank other than 0: waits for rank 0 to stage the save, and checks that it staged
/// the same plan.
pub(super) fn wait_for_group(
    ap: &ArchivePath,
    plan: &Plan,
    opts: &ShardedOptions,
) -> Result<Group> {
    let deadline = crate::archive::sharded::deadline(opts.timeout);
    loop {
        if let Some(g) = group::read_group(&ap.real, &plan.tag)? {
            if g.plan != plan.digest || g.world_size != plan.world_size {
                return Err(plan_differs(opts.rank, g.world_size, &g.plan, plan));
            }
            return Ok(g);
        }
        if past(deadline) {
            return Err(invalid(format!(
                "rank {}: rank 0 did not start the sharded save of tag {:?} within {:.0} s (it failed, or was not run; see its error)",
                opts.rank,
                plan.tag,
                opts.timeout.as_secs_f64()
            )));
        }
        std::thread::sleep(group::POLL);
    }
}

/// Writes `data` at `at` and returns its CRC-32 and SHA-256 (hex), hashing on another
/// thread while the bytes are written.
pub(super) fn write_hashed(
    file: &File,
    direct: Option<&File>,
    at: u64,
    data: &[u8],
) -> std::io::Result<(u32, String)> {
    let digest = |d: &[u8]| {
        let mut crc = crc32fast::Hasher::new();
        crc.update(d);
        (crc.finalize(), hex_digest(&sha2::Sha256::digest(d).into()))
    };
    if data.len() < (1 << 20) {
        write_at(file, at, data)?;
        return Ok(digest(data));
    }
    std::thread::scope(|s| {
        let h = s.spawn(|| digest(data));
        let w = match direct {
            Some(d) => write_direct(file, d, at, data).and_then(|done| match done {
                true => Ok(()),
                false => write_mapped(file, at, data),
            }),
            None => write_mapped(file, at, data),
        };
        let d = h.join().unwrap_or_else(|p| std::panic::resume_unwind(p));
        w.map(|()| d)
    })
}

/// Opens the archive for direct writes (`O_DIRECT`: around the page cache), or `None`
/// where the filesystem does not take them (tmpfs) or the system has none.
pub(super) fn open_direct(path: &Path) -> Option<File> {
    #[cfg(target_os = "linux")]
    {
        use std::os::unix::fs::OpenOptionsExt;
        std::fs::OpenOptions::new()
            .write(true)
            .custom_flags(libc::O_DIRECT)
            .open(path)
            .ok()
    }
    #[cfg(not(target_os = "linux"))]
    {
        let _ = path;
        None
    }
}

/// Writes `data` at `at`: the whole 4 KiB blocks it spans through `direct` (the file
/// opened with `O_DIRECT`, from a page-aligned buffer 4 MiB at a time), the partial
/// blocks at either end (shared with the neighbouring rows, or with the record header)
/// through the page cache. Eight ranks writing 4 GiB into one file took 2.1-2.5 s so,
/// against 4.6-6.3 s through shared maps (whose page faults zero each page before the
/// copy) and 6.8-8.2 s with buffered `pwrite`s (which serialize on the inode lock), on
/// ext4 (docs/BENCHMARKS.md). `Ok(false)` when the blocks cannot be allocated ahead or
/// the filesystem refuses the first direct write: nothing of the middle was written
/// then, and the caller writes it another way.
fn write_direct(file: &File, direct: &File, at: u64, data: &[u8]) -> std::io::Result<bool> {
    const BLOCK: u64 = 4096;
    const CHUNK: u64 = 4 << 20;
    let end = at + data.len() as u64;
    let (mid_start, mid_end) = (at.div_ceil(BLOCK) * BLOCK, end / BLOCK * BLOCK);
    if mid_end <= mid_start || !allocate(file, at, data.len() as u64)? {
        return Ok(false);
    }
    let mut buf = memmap2::MmapMut::map_anon(CHUNK.min(mid_end - mid_start) as usize)?;
    let mut off = mid_start;
    while off < mid_end {
        let n = CHUNK.min(mid_end - off) as usize;
        let from = (off - at) as usize;
        if super::super::fault::take(n) < n {
            return Err(super::super::fault::full());
        }
        buf[..n].copy_from_slice(&data[from..from + n]);
        match pwrite(direct, off, &buf[..n]) {
            Ok(()) => {}
            Err(e) if off == mid_start && e.kind() == std::io::ErrorKind::InvalidInput => {
                return Ok(false);
            }
            Err(e) => return Err(e),
        }
        off += n as u64;
    }
    write_at(file, at, &data[..(mid_start - at) as usize])?;
    write_at(file, mid_end, &data[(mid_end - at) as usize..])?;
    Ok(true)
}

/// Writes the box of `layout` (its bytes `data`, in the box's row-major order) into the
/// tensor data that starts at `data_at` (`total` bytes), a run per row of the box, and
/// returns its positioned CRC-32 (boxes.rs) and its SHA-256, hashed on another thread
/// while the bytes are written. A box of 1 MiB or more is copied through a shared map
/// of the range its runs span (the other ranks' runs in between are not touched).
pub(super) fn write_box_hashed(
    file: &File,
    data_at: u64,
    layout: &SliceLayout,
    data: &[u8],
    total: u64,
) -> std::io::Result<(u32, String)> {
    let digest = || {
        (
            super::boxes::positioned_crc(layout, data, total),
            hex_digest(&sha2::Sha256::digest(data).into()),
        )
    };
    let write = || -> std::io::Result<()> {
        let span = layout.covering();
        if data.len() < (1 << 20) || !allocate(file, data_at + span.start, span.end - span.start)? {
            let mut res = Ok(());
            super::boxes::for_each_run(layout, data, |at, run| {
                if res.is_ok() {
                    res = write_at(file, data_at + at, run);
                }
            });
            return res;
        }
        const PAGE: u64 = 4096;
        let from = data_at + span.start;
        let start = from / PAGE * PAGE;
        let pad = from - start;
        // Safety: as in `write_mapped`: the range lies inside the staged extension, its
        // blocks are allocated (above), nothing truncates the file while this rank holds
        // the shared lease, and other ranks write only other bytes of it (their runs
        // between this box's), which no reference made here covers.
        let mut m = unsafe {
            memmap2::MmapOptions::new()
                .offset(start)
                .len((pad + span.end - span.start) as usize)
                .map_mut(file)?
        };
        let mut res = Ok(());
        super::boxes::for_each_run(layout, data, |at, run| {
            let o = (pad + at - span.start) as usize;
            if res.is_ok() {
                res = copy_in(&mut m[o..o + run.len()], run);
            }
        });
        res
    };
    if data.len() < (1 << 20) {
        write()?;
        return Ok(digest());
    }
    std::thread::scope(|s| {
        let h = s.spawn(digest);
        let w = write();
        let d = h.join().unwrap_or_else(|p| std::panic::resume_unwind(p));
        w.map(|()| d)
    })
}

/// Writes `data` at `at` through a shared map of that part of the file. Buffered
/// `pwrite`s into one file hold its inode lock while they copy (ext4, XFS): eight ranks
/// then copy one at a time; page faults on a map do not take it, so ranks copy in
/// parallel (bench/sharded_bench.py, docs/BENCHMARKS.md). The range's blocks are
/// allocated first: a full disk is then an error here, never a fault (SIGBUS) of a page
/// of the map. Where they cannot be allocated ahead (not Linux, or a filesystem without
/// `fallocate`), the bytes are written with `pwrite`.
fn write_mapped(file: &File, at: u64, data: &[u8]) -> std::io::Result<()> {
    const PAGE: u64 = 4096;
    if !allocate(file, at, data.len() as u64)? {
        return write_at(file, at, data);
    }
    let start = at / PAGE * PAGE;
    let pad = (at - start) as usize;
    // Safety: the mapped range lies inside the staged extension (the caller checked the
    // file holds it) and its blocks are allocated (above); nothing truncates the file
    // while this rank holds the shared lease (a rollback or commit takes it exclusively
    // first); other processes write only other bytes of it, so the map's contents change
    // under no reference made here.
    let mut m = unsafe {
        memmap2::MmapOptions::new()
            .offset(start)
            .len(pad + data.len())
            .map_mut(file)?
    };
    copy_in(&mut m[pad..], data)
}

/// Allocates the blocks of `at..at + len` (the file's size unchanged): `Ok(false)` where
/// that is not supported, an error (a full disk) where it failed.
fn allocate(file: &File, at: u64, len: u64) -> std::io::Result<bool> {
    #[cfg(target_os = "linux")]
    {
        use rustix::fs::{FallocateFlags, fallocate};
        match fallocate(file, FallocateFlags::KEEP_SIZE, at, len) {
            Ok(()) => Ok(true),
            Err(e) if e == rustix::io::Errno::OPNOTSUPP || e == rustix::io::Errno::NOSYS => {
                Ok(false)
            }
            Err(e) => Err(e.into()),
        }
    }
    #[cfg(not(target_os = "linux"))]
    {
        let _ = (file, at, len);
        Ok(false)
    }
}

/// Writes `data` at `at` (charged against the fault-injection budget of the crate's
/// tests, like every archive write).
fn write_at(file: &File, at: u64, data: &[u8]) -> std::io::Result<()> {
    let n = super::super::fault::take(data.len());
    pwrite(file, at, &data[..n])?;
    if n < data.len() {
        return Err(super::super::fault::full());
    }
    Ok(())
}

/// Copies `data` into `to` (a map of the archive), charged as [`write_at`] is.
fn copy_in(to: &mut [u8], data: &[u8]) -> std::io::Result<()> {
    let n = super::super::fault::take(data.len());
    to[..n].copy_from_slice(&data[..n]);
    if n < data.len() {
        return Err(super::super::fault::full());
    }
    Ok(())
}

#[cfg(unix)]
fn pwrite(file: &File, at: u64, data: &[u8]) -> std::io::Result<()> {
    std::os::unix::fs::FileExt::write_all_at(file, data, at)
}

#[cfg(windows)]
fn pwrite(file: &File, mut at: u64, mut data: &[u8]) -> std::io::Result<()> {
    while !data.is_empty() {
        let n = std::os::windows::fs::FileExt::seek_write(file, data, at)?;
        data = &data[n..];
        at += n as u64;
    }
    Ok(())
}

/// Rank 0: waits for every marker, checks them, and commits; on a timeout or a bad
/// marker, rolls the archive back to what it was and says why. Returns how many tensors
/// were stored by reference.
pub(super) fn commit(
    ap: &ArchivePath,
    plan: &Plan,
    g: &Group,
    opts: &ShardedOptions,
    extras: Extras,
    lock: WriteLock,
) -> Result<usize> {
    let real = ap.real.as_path();
    let result = (|| -> Result<usize> {
        let markers = wait_for_markers(real, plan, g, opts)?;
        let tensors = check_coverage(plan, &markers)?;
        let lease = group::lease(real, true, opts.timeout)?;
        let n = write_tag(ap, plan, g, opts, extras, &tensors)?;
        let _ = group::remove_group_files(real, &plan.tag);
        drop(lease);
        Ok(n)
    })();
    if result.is_err() {
        // The group file still there: nothing of the commit reached the archive, or the
        // commit's journal rolled it back already. Either way, undo the staging.
        let _ = abort(real, &plan.tag, opts.timeout);
    }
    drop(lock);
    result
}

/// Reads every rank's finished marker of this attempt, waiting at most the timeout.
fn wait_for_markers(
    real: &Path,
    plan: &Plan,
    g: &Group,
    opts: &ShardedOptions,
) -> Result<Vec<Marker>> {
    let deadline = crate::archive::sharded::deadline(opts.timeout);
    let mut got: Vec<Option<Marker>> = vec![None; plan.world_size as usize];
    loop {
        for (r, slot) in got.iter_mut().enumerate() {
            if slot.is_none()
                && let Some(m) = group::read_marker(real, &plan.tag, r as u32)?
                && m.nonce == g.nonce
            {
                if m.plan != plan.digest {
                    return Err(invalid(format!(
                        "rank {r} wrote with another save plan ({}) than rank 0 ({}): the ranks were given different tensor descriptions; nothing was committed",
                        short_plan(&m.plan),
                        &plan.digest[..12]
                    )));
                }
                *slot = Some(m);
            }
        }
        let missing: Vec<String> = got
            .iter()
            .enumerate()
            .filter(|(_, m)| m.is_none())
            .map(|(r, _)| r.to_string())
            .collect();
        if missing.is_empty() {
            return Ok(got.into_iter().flatten().collect());
        }
        if past(deadline) {
            return Err(timed_out(plan, opts, &missing));
        }
        std::thread::sleep(group::POLL);
    }
}

/// The first 12 characters of a plan digest read from another rank's file (any text
/// there: cut by characters, never inside one).
pub(crate) fn short_plan(digest: &str) -> String {
    digest.chars().take(12).collect()
}

/// The error of a rank whose plan is not rank 0's (`world_size` ranks, `digest`).
pub(crate) fn plan_differs(rank: u32, world_size: u32, digest: &str, plan: &Plan) -> Error {
    invalid(format!(
        "rank {rank}: the save plan differs from rank 0's ({world_size} ranks, plan {}; this rank: {} ranks, plan {}): the ranks were given different tensor descriptions, or the save under way is another group's (their group ids differ)",
        short_plan(digest),
        plan.world_size,
        &plan.digest[..12]
    ))
}

/// The error of rank 0 after waiting `opts.timeout` for the markers of ranks `missing`.
pub(crate) fn timed_out(plan: &Plan, opts: &ShardedOptions, missing: &[String]) -> Error {
    invalid(format!(
        "the sharded save of tag {:?} timed out after {:.0} s waiting for rank{} {} of {}; nothing was committed and the archive is as it was",
        plan.tag,
        opts.timeout.as_secs_f64(),
        if missing.len() > 1 { "s" } else { "" },
        missing.join(", "),
        plan.world_size
    ))
}

/// Each tensor's shard lines (record header first, then the rows in order) and its
/// CRC-32, after checking that the ranks' rows tile every tensor exactly.
pub(crate) fn check_coverage(
    plan: &Plan,
    markers: &[Marker],
) -> Result<Vec<(Vec<ShardLine>, u32)>> {
    let mut per: Vec<Vec<(&group::ShardDone, u32)>> = vec![Vec::new(); plan.tensors.len()];
    for m in markers {
        for s in &m.shards {
            let Some(t) = per.get_mut(s.tensor) else {
                return Err(invalid(format!(
                    "rank {} reports a shard of tensor {}, which the plan does not have",
                    m.rank, s.tensor
                )));
            };
            t.push((s, m.rank));
        }
    }
    let mut out = Vec::with_capacity(plan.tensors.len());
    for (p, shards) in plan.tensors.iter().zip(per.iter_mut()) {
        if shards.iter().any(|(s, _)| s.boxed.is_some()) {
            out.push(check_boxes(p, shards)?);
            continue;
        }
        shards.sort_by_key(|(s, _)| s.first_row);
        let label = p.spec.label();
        let mut crc = crc32fast::Hasher::new();
        crc.update(&p.record_header);
        let mut lines = vec![header_line(p)];
        let mut next = 0u64;
        let mut prev_rank = None;
        for (s, rank) in shards.iter() {
            if s.first_row < next {
                return Err(invalid(format!(
                    "ranks {} and {rank} both wrote row {} of {label}: the shards overlap; nothing was committed",
                    prev_rank.unwrap_or(*rank),
                    s.first_row
                )));
            }
            if s.first_row > next {
                return Err(invalid(format!(
                    "no rank wrote rows {next}..{} of {label}: the shards leave a gap; nothing was committed",
                    s.first_row
                )));
            }
            let (Some(end), Some(len)) = (
                s.first_row.checked_add(s.rows),
                s.rows.checked_mul(p.row_bytes),
            ) else {
                return Err(invalid(format!(
                    "rank {rank} reports {} rows from row {} of {label}, past what a file can hold; nothing was committed",
                    s.rows, s.first_row
                )));
            };
            if s.rows > 0 {
                crc.combine(&crc32fast::Hasher::new_with_initial_len(s.crc32, len));
                lines.push(ShardLine {
                    path: rel_of(p),
                    offset: p.row_offset(s.first_row),
                    len,
                    sha256: s.sha256.clone(),
                    writer: Some(*rank),
                    boxed: None,
                    line: 0,
                });
            }
            next = end;
            prev_rank = Some(*rank);
        }
        if next != p.spec.rows() {
            return Err(invalid(format!(
                "no rank wrote rows {next}..{} of {label}: the shards leave a gap; nothing was committed",
                p.spec.rows()
            )));
        }
        out.push((lines, crc.finalize()));
    }
    Ok(out)
}

/// The shards.txt line of a tensor's record header (written by the committing rank).
fn header_line(p: &Planned) -> ShardLine {
    ShardLine {
        path: rel_of(p),
        offset: 0,
        len: p.record_header.len() as u64,
        sha256: hex_digest(&sha2::Sha256::digest(&p.record_header).into()),
        writer: None,
        boxed: None,
        line: 0,
    }
}

/// [`check_coverage`] of a tensor some of whose shards are boxes: the boxes (rows
/// counted as boxes of every column) tile it, its CRC-32 is the XOR of the shards'
/// positioned CRCs (boxes.rs), and every shard is a box line of shards.txt.
fn check_boxes(
    p: &Planned,
    shards: &mut [(&group::ShardDone, u32)],
) -> Result<(Vec<ShardLine>, u32)> {
    let label = p.spec.label();
    let dims = &p.spec.dims;
    let header_len = p.record_header.len() as u64;
    let total = p.record_len - header_len;
    let mut boxes: Vec<Vec<std::ops::Range<u64>>> = Vec::with_capacity(shards.len());
    for (s, rank) in shards.iter() {
        let b = super::shard_box(s, dims);
        if b.len() != dims.len() || b.iter().zip(dims).any(|(r, &d)| r.end > d) {
            return Err(invalid(format!(
                "rank {rank} reports a shard {} of {label}, outside its shape {dims:?}",
                super::boxes::render(&b)
            )));
        }
        boxes.push(b);
    }
    let mut order: Vec<usize> = (0..shards.len()).collect();
    order.sort_by(|&a, &b| {
        boxes[a]
            .iter()
            .map(|r| r.start)
            .cmp(boxes[b].iter().map(|r| r.start))
    });
    let sorted: Vec<Vec<std::ops::Range<u64>>> = order.iter().map(|&i| boxes[i].clone()).collect();
    match super::boxes::check_tiling(dims, &sorted) {
        Ok(()) => {}
        Err(super::boxes::Tiling::Overlap { a, b, at }) => {
            let (ra, rb) = (shards[order[a]].1, shards[order[b]].1);
            return Err(invalid(format!(
                "ranks {ra} and {rb} both wrote element {at:?} of {label} (boxes {} and {}): the shards overlap; nothing was committed",
                super::boxes::render(&sorted[a]),
                super::boxes::render(&sorted[b])
            )));
        }
        Err(super::boxes::Tiling::Gap { covered, total }) => {
            return Err(invalid(format!(
                "the ranks' shards of {label} cover {covered} of its {total} elements: the shards leave a gap; nothing was committed"
            )));
        }
        Err(super::boxes::Tiling::TooMany { boxes: n }) => {
            return Err(invalid(format!(
                "the ranks' {n} shards of {label} share rows too much to check that they tile it (more than {} pairs to compare): nothing was committed",
                super::boxes::MAX_TILING_PAIRS
            )));
        }
    }
    let mut lines = vec![header_line(p)];
    let mut parts = Vec::with_capacity(order.len());
    for (&i, b) in order.iter().zip(&sorted) {
        let (s, rank) = &shards[i];
        if b.iter().any(|r| r.start == r.end) {
            continue;
        }
        parts.push(match &s.boxed {
            Some(_) => s.crc32,
            None => super::boxes::positioned_run_crc(
                s.crc32,
                s.first_row * p.row_bytes,
                s.rows * p.row_bytes,
                total,
            ),
        });
        lines.push(ShardLine {
            path: rel_of(p),
            offset: header_len,
            len: total,
            sha256: s.sha256.clone(),
            writer: Some(*rank),
            boxed: Some(b.clone()),
            line: 0,
        });
    }
    let mut crc = crc32fast::Hasher::new();
    crc.update(&p.record_header);
    crc.combine(&crc32fast::Hasher::new_with_initial_len(
        super::boxes::xor_parts(parts, total),
        total,
    ));
    Ok((lines, crc.finalize()))
}

fn rel_of(p: &Planned) -> String {
    format!("{}/{}.lodtensor", p.kind.dir(), p.index)
}

/// Writes the committed tag: headers into the extension, then (journaled by the undo
/// record, renamed) the tag's tables and the new central directory. Returns how many
/// tensors were stored by reference.
fn write_tag(
    ap: &ArchivePath,
    plan: &Plan,
    g: &Group,
    opts: &ShardedOptions,
    extras: Extras,
    tensors: &[(Vec<ShardLine>, u32)],
) -> Result<usize> {
    let real = ap.real.as_path();
    let base = Archive::open_unrecovered(real, &ap.shown, OpenOptions::default())?;
    let reused = find_duplicates(&base, plan, tensors, &mut |e, p| same_bytes(&base, e, p, g))?;
    // From here the archive changes: first the group ends (no rank may join or write),
    // then the commit is journaled as an append to the staged archive (readers may hold
    // the staged archive: a rollback must not cut what they read). The undo record stays
    // until the commit is done: a crash before rolls the commit back, then the staging.
    // The markers go with the group file (before it: none is left without it).
    group::remove_group_files(real, &plan.tag)?;
    let staged_cd = base.listing().cd_offset;
    journal::write(
        real,
        base.len_bytes(),
        staged_cd,
        base.bytes().get(staged_cd as usize..).unwrap_or_default(),
    )?;
    let file = match std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(real)
    {
        Ok(f) => f,
        Err(e) => {
            drop(base);
            let _ = journal::recover(real);
            return Err(Error::from(e).in_file(real));
        }
    };
    let written = (|| -> Result<Session> {
        let (dos_date, dos_time) = super::super::time::dos_now();
        let mut placed = Vec::with_capacity(plan.tensors.len());
        for (i, (p, (_, crc))) in plan.tensors.iter().zip(tensors).enumerate() {
            if reused[i].is_some() {
                punch_hole(
                    &file,
                    g.ext_start + p.header_offset,
                    p.end() - p.header_offset,
                );
                placed.push(None);
                continue;
            }
            let (h, entry) =
                p.entry_header(*crc, g.ext_start + p.header_offset, (dos_time, dos_date))?;
            write_at(&file, g.ext_start + p.header_offset, &h)?;
            write_at(&file, g.ext_start + p.record_offset, &p.record_header)?;
            placed.push(Some(entry));
        }
        if opts.write.fsync {
            file.sync_data()?;
        }
        let mut w = file.try_clone()?;
        let cd_offset = base.listing().cd_offset;
        w.seek(SeekFrom::Start(cd_offset))?;
        let sink = BufWriter::with_capacity(1 << 20, Budgeted(w));
        let mut s = Session::in_place(Box::new(sink), &base, opts.write.clone(), |e| {
            !written_by_commit(&e.name)
        })?;
        s.adopt_base(base);
        record_tag(&mut s, plan, &g.nonce, &extras, tensors, placed, &reused)?;
        Ok(s)
    })();
    let session = match written {
        Ok(s) => s,
        Err(e) => {
            super::super::append::abandon_in_place(real, file);
            return Err(e.in_file(real));
        }
    };
    finish_in_place(real, session, file, None)?;
    // Committed: the undo record is spent. One left behind (a failed delete, a crash
    // here) is harmless: settle_staged finds the tag's entries past the old end and only
    // deletes it.
    let _ = journal::remove_file(&group::undo_path(real));
    Ok(reused.iter().filter(|r| r.is_some()).count())
}

/// Writes the tables of the committed tag into session `s`: its tensors (placed at
/// `placed`, or stored by reference to `reused`), params.txt and updater.txt, rank 0's
/// graph, training config and metadata (with `"sharded"` and the attempt's `nonce`), and
/// shards.txt.
pub(crate) fn record_tag(
    s: &mut Session,
    plan: &Plan,
    nonce: &str,
    extras: &Extras,
    tensors: &[(Vec<ShardLine>, u32)],
    placed: Vec<Option<super::super::container::ZipEntry>>,
    reused: &[Option<(String, u64)>],
) -> Result<()> {
    let mut t = s.begin_tag(&plan.tag)?;
    let mut refs = Vec::with_capacity(plan.tensors.len());
    for ((p, entry), reuse) in plan.tensors.iter().zip(placed).zip(reused) {
        let r = match (entry, reuse) {
            (_, Some((tag, index))) => t.reuse_tensor(tag, *index, p.spec.dtype),
            (Some(e), None) => t.place_tensor(p.kind, p.index, e, p.spec.dtype)?,
            (None, None) => {
                return Err(invalid(format!(
                    "tensor {} was neither written nor found stored",
                    p.spec.label()
                )));
            }
        };
        refs.push(r);
    }
    let mut updater: Vec<(String, Vec<super::super::text::ParamRef>)> = Vec::new();
    for (p, r) in plan.tensors.iter().zip(refs) {
        match p.spec.updater_slot {
            None => t.param_ref(&p.spec.name, r)?,
            Some(_) => match updater.last_mut() {
                Some((n, v)) if *n == p.spec.name => v.push(r),
                _ => updater.push((p.spec.name.clone(), vec![r])),
            },
        }
    }
    for (n, v) in updater {
        t.updater_refs(&n, v)?;
    }
    if let Some((enc, bytes)) = &extras.graph {
        t.graph(*enc, bytes)?;
    }
    if let Some(c) = &extras.training_config {
        t.training_config(c)?;
    }
    t.metadata(&metadata_with_group(
        extras.metadata.as_deref(),
        plan,
        nonce,
    )?)?;
    let lines: Vec<ShardLine> = tensors
        .iter()
        .zip(reused)
        .filter(|(_, r)| r.is_none())
        .flat_map(|((l, _), _)| l.iter().cloned())
        .collect();
    if !lines.is_empty() {
        t.own_file("shards.txt", render_shards(&lines).as_bytes())?;
    }
    t.finish()
}

/// metadata.json of the committed tag: rank 0's (or `{}`) with `"sharded"`.
fn metadata_with_group(given: Option<&[u8]>, plan: &Plan, nonce: &str) -> Result<Vec<u8>> {
    let mut v: serde_json::Value = match given {
        Some(b) => {
            serde_json::from_slice(b).map_err(|e| invalid(format!("metadata is not JSON: {e}")))?
        }
        None => serde_json::json!({}),
    };
    let Some(obj) = v.as_object_mut() else {
        return Err(invalid("metadata must be a JSON object".to_string()));
    };
    obj.insert(
        "sharded".to_string(),
        serde_json::json!({"world_size": plan.world_size, "plan": plan.digest, "group": nonce}),
    );
    serde_json::to_vec(&v).map_err(|e| invalid(e.to_string()))
}

/// For each planned tensor, the earlier tensor with the same bytes, if any: same kind,
/// length and CRC-32 in the directory, then the same shard ranges and SHA-256 digests in
/// its tag's shards.txt (no tensor byte read), or, for a file shards.txt does not list
/// (written by one process, or re-homed when its tag was removed), the same bytes
/// (both read: only for a file whose length and CRC-32 already match).
pub(crate) fn find_duplicates(
    base: &Archive,
    plan: &Plan,
    tensors: &[(Vec<ShardLine>, u32)],
    same_bytes: &mut dyn FnMut(&super::super::container::ZipEntry, &Planned) -> Result<bool>,
) -> Result<Vec<Option<(String, u64)>>> {
    let mut want: HashMap<(&str, u64, u32), Vec<usize>> = HashMap::new();
    for (i, (p, (_, crc))) in plan.tensors.iter().zip(tensors).enumerate() {
        want.entry((p.kind.dir(), p.record_len, *crc))
            .or_default()
            .push(i);
    }
    let mut out = vec![None; plan.tensors.len()];
    let mut manifests: HashMap<String, Option<HashMap<String, Vec<ShardLine>>>> = HashMap::new();
    for e in &base.listing().entries {
        let Some((top, rel)) = e.name.split_once('/') else {
            continue;
        };
        let Some(tag) = base.canonical_tag(top).filter(|t| *t == top) else {
            continue;
        };
        let Some((dir, file)) = rel.split_once('/') else {
            continue;
        };
        let Some(index) = file
            .strip_suffix(".lodtensor")
            .and_then(|n| super::super::text::parse_index(n).ok())
        else {
            continue;
        };
        let Some(cands) = want.get(&(dir, e.uncompressed_size, e.crc32)) else {
            continue;
        };
        if !manifests.contains_key(tag) {
            let name = format!("{tag}/shards.txt");
            let m = match base.entry(&name) {
                None => None,
                Some(_) => {
                    let bytes = base.entry_bytes(&name)?;
                    let mut by: HashMap<String, Vec<ShardLine>> = HashMap::new();
                    for l in parse_shards(&bytes, &name)? {
                        by.entry(l.path.clone()).or_default().push(l);
                    }
                    Some(by)
                }
            };
            manifests.insert(tag.to_string(), m);
        }
        let theirs = match manifests.get(tag) {
            Some(Some(m)) => m.get(rel),
            _ => None,
        };
        let Some(theirs) = theirs else {
            for &i in cands {
                if out[i].is_none() && same_bytes(e, &plan.tensors[i])? {
                    out[i] = Some((tag.to_string(), index));
                }
            }
            continue;
        };
        for &i in cands {
            let ours = &tensors[i].0;
            let same = ours.len() == theirs.len()
                && ours.iter().zip(theirs).all(|(a, b)| {
                    a.offset == b.offset
                        && a.len == b.len
                        && a.boxed == b.boxed
                        && a.sha256 == b.sha256
                });
            if same && out[i].is_none() {
                out[i] = Some((tag.to_string(), index));
            }
        }
    }
    Ok(out)
}

/// Whether entry `e` of `base` holds the bytes staged for `p` (its record header, then
/// the rows the ranks wrote into the extension, which `base`'s map covers).
fn same_bytes(
    base: &Archive,
    e: &super::super::container::ZipEntry,
    p: &Planned,
    g: &Group,
) -> Result<bool> {
    if e.method != super::super::container::METHOD_STORED {
        return Ok(false);
    }
    let theirs = base.raw_data(e)?;
    let h = p.record_header.len();
    let start = g.ext_start + p.record_offset + h as u64;
    let end = start + (p.record_len - h as u64);
    let ours = usize::try_from(start)
        .ok()
        .zip(usize::try_from(end).ok())
        .and_then(|(a, b)| base.bytes().get(a..b));
    Ok(match ours {
        Some(data) => {
            theirs.len() == h + data.len()
                && theirs[..h] == p.record_header[..]
                && theirs[h..] == *data
        }
        None => false,
    })
}

/// Frees the disk blocks of a staged entry that is stored by reference instead (best
/// effort: where the filesystem cannot, the bytes stay as dead bytes until `compact`).
fn punch_hole(file: &File, at: u64, len: u64) {
    #[cfg(target_os = "linux")]
    {
        use rustix::fs::{FallocateFlags, fallocate};
        let _ = fallocate(
            file,
            FallocateFlags::PUNCH_HOLE | FallocateFlags::KEEP_SIZE,
            at,
            len,
        );
    }
    #[cfg(not(target_os = "linux"))]
    let _ = (file, at, len);
}

/// A rank other than 0, after its marker: waits for the group to end and checks that
/// the tag was committed by this attempt.
pub(super) fn wait_for_commit(
    ap: &ArchivePath,
    plan: &Plan,
    g: &Group,
    opts: &ShardedOptions,
) -> Result<()> {
    let deadline = crate::archive::sharded::deadline(opts.timeout);
    let late = || {
        invalid(format!(
            "rank {}: the sharded save of tag {:?} was not committed within {:.0} s (rank 0 is late, failed or died; see its error)",
            opts.rank,
            plan.tag,
            opts.timeout.as_secs_f64()
        ))
    };
    while group::read_group(&ap.real, &plan.tag)?.as_ref() == Some(g) {
        if past(deadline) {
            return Err(late());
        }
        std::thread::sleep(group::POLL);
    }
    // The group file is gone: rank 0 is committing (it renames the undo record to the
    // journal next), has committed (rank 0 may have staged its next save already: that
    // archive holds this tag too), or rolled back (it replays the undo record). This rank
    // never waits for the write lock here (as `Archive::open` does while a journal
    // exists): rank 0 takes it again for its next save, which waits for this rank.
    // So the archive is read only while no journal lies beside it (the bytes are then
    // whole), by pread rather than a map (rank 0 rolling its staging back truncates the
    // file, which would fault a map), and the undo record is checked before the read, so
    // that a read before the rename is never taken for the outcome.
    let jpath = journal::journal_path(&ap.real);
    loop {
        let staging = group::undo_path(&ap.real).exists();
        if !jpath.exists() {
            let read = Archive::open_by_pread(&ap.real, &ap.shown)
                .and_then(|a| committed_by(&a, &plan.tag, &g.nonce));
            // A journal that appeared during the read: the bytes may have been torn.
            if !jpath.exists() {
                match read {
                    Ok(true) => return Ok(()),
                    Ok(false) if !staging => {
                        return Err(invalid(format!(
                            "rank {}: the sharded save of tag {:?} was not committed (rank 0 rolled it back; see its error)",
                            opts.rank, plan.tag
                        )));
                    }
                    // Not committed yet, or a read racing a writer: read again.
                    Ok(false) | Err(_) => {}
                }
            }
        }
        if past(deadline) {
            return Err(late());
        }
        std::thread::sleep(group::POLL);
    }
}

/// Whether `archive` holds `tag` as committed by the sharded save `nonce`.
pub(crate) fn committed_by(archive: &Archive, tag: &str, nonce: &str) -> Result<bool> {
    let Some(t) = archive.canonical_tag(tag) else {
        return Ok(false);
    };
    Ok(archive
        .metadata_of(t)?
        .and_then(|b| serde_json::from_slice::<serde_json::Value>(&b).ok())
        .and_then(|v| {
            v.pointer("/sharded/group")
                .and_then(|n| n.as_str())
                .map(str::to_string)
        })
        .is_some_and(|n| n == nonce))
}

/// Where the extension of the save staged in the archive at `real` starts, from its undo
/// record (None: nothing is staged).
pub(super) fn staged_ext_start(real: &Path) -> Result<Option<u64>> {
    Ok(journal::original_len_of(real, &group::undo_path(real))?
        .map(|n| n.div_ceil(EXT_ALIGN) * EXT_ALIGN))
}

/// Rolls back the staged save of `tag` (the caller holds the write lock): ends the
/// group, then replays the undo record.
pub(super) fn abort(real: &Path, tag: &str, timeout: Duration) -> Result<()> {
    let _lease = group::lease(real, true, timeout)?;
    group::remove_group_files(real, tag)?;
    journal::recover(real)?;
    settle_staged(real)
}

/// Ends a staging whose save did not commit, from its undo record (the caller holds the
/// write lock and the exclusive lease, and rolled back any journal first):
/// - the staging was cut short (the file does not read as an archive past the old end):
///   the undo record restores the old bytes and length; no reader can have read the
///   staged bytes;
/// - the staging was complete: readers may hold the staged archive (the old entries, the
///   staged tags.txt, summary and directory past the extension), so nothing is cut: the
///   extension's blocks are freed (a hole; compaction reclaims the rest);
/// - the save committed (the undo record outlived its commit by a crash): its entries lie
///   past the old end, and the record is only deleted.
fn settle_staged(real: &Path) -> Result<()> {
    let undo = group::undo_path(real);
    let Some(original_len) = journal::original_len_of(real, &undo)? else {
        // Absent, or cut short while being written: the archive was not touched.
        return journal::remove_file(&undo);
    };
    let ext_start = original_len.div_ceil(EXT_ALIGN) * EXT_ALIGN;
    // Read by pread: a file cut short by a crash must not fault a map.
    let staged = Archive::open_by_pread(real, real)
        .ok()
        .filter(|a| a.len_bytes() > ext_start);
    let Some(a) = staged else {
        journal::recover_from(real, &undo)?;
        return Ok(());
    };
    let dir = a.listing();
    let past: Vec<&super::super::container::ZipEntry> = dir
        .entries
        .iter()
        .filter(|e| e.header_offset >= ext_start)
        .collect();
    if past.iter().all(|e| written_by_commit(&e.name)) {
        let tail = past
            .iter()
            .map(|e| e.header_offset)
            .min()
            .unwrap_or(dir.cd_offset);
        let file = std::fs::OpenOptions::new()
            .write(true)
            .open(real)
            .map_err(|e| Error::from(e).in_file(real))?;
        punch_hole(&file, ext_start, tail.saturating_sub(ext_start));
        file.sync_all().map_err(|e| Error::from(e).in_file(real))?;
    }
    drop(a);
    journal::remove_file(&undo)
}

/// Rolls back a staged save whose group died (rank 0 killed before its commit), if its
/// undo record is there; every writer calls this under the write lock before it reads
/// the archive. Waits (at most `timeout`) for ranks still writing into it.
pub(crate) fn recover_staged(real: &Path, timeout: Duration) -> Result<()> {
    let undo = group::undo_path(real);
    if !undo.exists() {
        return Ok(());
    }
    let _lease = group::lease(real, true, timeout)?;
    for t in group::staged_tags(real) {
        group::remove_group_files(real, &t)?;
    }
    group::remove_sidecar_temps(real);
    settle_staged(real)
}

/// Forgets a staged save of the archive at `real`, which is being replaced by a new
/// file (its undo record belongs to the old one).
pub(crate) fn discard_staged(real: &Path) -> Result<()> {
    let undo = group::undo_path(real);
    if !undo.exists() {
        return Ok(());
    }
    for t in group::staged_tags(real) {
        group::remove_group_files(real, &t)?;
    }
    journal::remove_file(&undo)
}

#[cfg(test)]
mod tests {
    use super::super::{TensorSpec, plan_of};
    use super::*;
    use crate::{ArchiveWriter, DType, TagBuilder, Tensor};

    /// A rank 0 killed inside its group file's write (the undo record written, the group
    /// file's temp not yet renamed): the next writer rolls the staging back and deletes
    /// the temp, which no group file names.
    #[test]
    fn a_rank_0_killed_writing_its_group_file_leaves_no_temp_behind() {
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("run.zip");
        let mut w = ArchiveWriter::create(&p).unwrap();
        w.add_tag(
            TagBuilder::new("init").param("x", Tensor::from_slice(vec![2], &[1f32, 2.0]).unwrap()),
        )
        .unwrap();
        w.finish().unwrap();
        let ap = ArchivePath::resolve(&p).unwrap();
        let specs = vec![TensorSpec::param("w", DType::Fp32, vec![4, 3])];
        let opts = ShardedOptions::new(0, 2);
        let plan = plan_of("s", &specs, &opts).unwrap();
        let (lock, _group) = stage(&ap, &plan, &opts).unwrap();
        std::fs::remove_file(group::group_path(&p, "s")).unwrap();
        std::fs::write(d.path().join(".run.zip.sharded-tmpAbC123"), b"{\"form").unwrap();
        drop(lock); // the process dies: its lock with it
        let lock = WriteLock::acquire_resolved(&p, false).unwrap();
        recover_staged(&p, Duration::from_secs(5)).unwrap();
        drop(lock);
        let mut left: Vec<String> = std::fs::read_dir(d.path())
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        left.sort();
        assert_eq!(left, ["run.zip", "run.zip.lock", "run.zip.sharded-lease"]);
        let a = Archive::open(&p).unwrap();
        assert_eq!(a.tags(), ["init"]);
        assert!(a.verify().is_ok());
    }
}
