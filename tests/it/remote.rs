//! Remote archives over HTTP byte ranges, against a real server on 127.0.0.1 (started and
//! stopped by each test) that counts requests: request counts, the same results and errors
//! as the local reader, a server that ignores Range, an object replaced mid-read, and the
//! hostile archives of tests/hostile/ served remotely.
#![cfg(feature = "remote")]

use crate::support;
use crate::support::http_server;

use http_server::{Mode, Server};
use modelzip::remote::RemoteOptions;
use modelzip::{Archive, ArchiveWriter, ErrorKind, Tag, TagBuilder, Tensor, WriteOptions};
use std::path::Path;

/// Retries off: a misbehaving server is answered at once.
fn opts() -> RemoteOptions {
    RemoteOptions {
        max_retries: 0,
        ..RemoteOptions::default()
    }
}

fn open(url: &str) -> modelzip::Result<Archive> {
    opts().open(url)
}

/// A few sample tags (graph, params of several dtypes, LoD, updater, shared tensors).
fn sample_archive(dir: &Path, deflate_text: bool) -> Vec<u8> {
    let path = dir.join("sample.zip");
    let wopts = WriteOptions {
        deflate_text,
        ..WriteOptions::default()
    };
    let mut w = ArchiveWriter::create_with(&path, &wopts).unwrap();
    w.add_tag(support::sample_tag("fp32", 1)).unwrap();
    w.add_tag(support::sample_tag("step-2", 2)).unwrap();
    w.finish().unwrap();
    std::fs::read(&path).unwrap()
}

/// The sample tags, then a tag of one 1.6 MB tensor: the first tags' entries lie far
/// before the tail the first request reads.
fn spread_archive(dir: &Path, seed: u64) -> Vec<u8> {
    let path = dir.join(format!("spread-{seed}.zip"));
    let mut w = ArchiveWriter::create(&path).unwrap();
    w.add_tag(support::sample_tag("fp32", seed)).unwrap();
    w.add_tag(support::sample_tag("step-2", seed + 1)).unwrap();
    let big = Tensor::from_slice(vec![400_000], &support::values(seed, 400_000)).unwrap();
    w.add_tag(TagBuilder::new("big").param("x", big)).unwrap();
    w.finish().unwrap();
    std::fs::read(&path).unwrap()
}

/// Everything a reader can see of an archive, as comparable values.
fn everything(a: &Archive) -> Vec<String> {
    let mut out = vec![format!("tags {:?}", a.tags())];
    for t in a.tags() {
        let tag = a.tag(t).unwrap();
        out.push(format!("{t} graph {:?}", tag.graph().unwrap()));
        out.push(format!("{t} metadata {:?}", tag.metadata().unwrap()));
        out.push(format!("{t} training {:?}", tag.training_config().unwrap()));
        out.push(format!("{t} own {:?}", tag.own_entries()));
        for d in support::dump(&tag) {
            out.push(format!("{t} {d:?}"));
        }
        for p in tag.params() {
            let data = tag.tensor(&p.location).unwrap();
            let v = data.view();
            out.push(format!(
                "{t} {} {:?} {:?} {:?} {:?}",
                p.name,
                v.dtype(),
                v.dims(),
                v.lod(),
                v.data()
            ));
        }
    }
    out.push(format!("verify {:?}", a.verify()));
    out
}

#[test]
fn remote_reads_are_identical_to_local_reads() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start();
    for deflate in [false, true] {
        let bytes = sample_archive(dir.path(), deflate);
        let local = Archive::from_reader(std::io::Cursor::new(bytes.clone())).unwrap();
        server.put("m.zip", bytes);
        let remote = open(&server.url("m.zip")).unwrap();
        assert!(remote.is_remote());
        assert_eq!(
            everything(&local),
            everything(&remote),
            "deflate_text {deflate}"
        );
        assert_eq!(local.len_bytes(), remote.len_bytes());
        assert!(remote.verify().is_ok());
    }
}

#[test]
fn open_is_one_request_a_tag_one_more_and_a_tensor_one() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start();
    server.put("m.zip", spread_archive(dir.path(), 1));
    let a = open(&server.url("m.zip")).unwrap();
    // The first (suffix) request holds the end records, the central directory and
    // tags.txt.
    assert_eq!(server.count(), 1, "{:#?}", server.requests());
    assert_eq!(a.tags(), &["fp32", "step-2", "big"]);
    let tag = a.tag("fp32").unwrap();
    let after_tag = server.count();
    assert!(after_tag <= 2, "{:#?}", server.requests());
    let before = server.count();
    let w = tag.param("fc.w").unwrap();
    assert!(!w.is_mapped(), "remote tensors are owned buffers");
    assert_eq!(server.count(), before + 1, "{:#?}", server.requests());
    assert_eq!(
        w.view().as_slice::<f32>().unwrap(),
        &support::values(1, 128)[..]
    );
    // Every request after the first is conditional on the first one's ETag.
    let reqs = server.requests();
    assert!(reqs[0].if_match.is_none());
    assert!(
        reqs[0]
            .range
            .as_deref()
            .is_some_and(|r| r.starts_with("bytes=-"))
    );
    for r in &reqs[1..] {
        assert_eq!(r.if_match.as_deref(), a.remote_version(), "{r:?}");
        assert!(r.range.is_some(), "{r:?}");
    }
    // Ranged GETs only: no HEAD, no listing.
    assert!(reqs.iter().all(|r| r.method == "GET"), "{reqs:#?}");
}

/// A slow store (every answer delayed, as remote_bench measures) reads the same values.
#[test]
fn a_slow_store_reads_the_same_values() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start();
    server.put("m.zip", spread_archive(dir.path(), 1));
    server.set_latency(std::time::Duration::from_millis(20));
    let a = open(&server.url("m.zip")).unwrap();
    let w = a.tag("fp32").unwrap().param("fc.w").unwrap();
    assert_eq!(
        w.view().as_slice::<f32>().unwrap(),
        &support::values(1, 128)[..]
    );
}

/// 100 tags × 1,000 params: a central directory far larger than the first request.
#[test]
fn listing_a_large_archive_reads_only_its_tail() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("big.zip");
    let mut w = ArchiveWriter::create(&path).unwrap();
    for t in 0..100u32 {
        let mut b = TagBuilder::new(format!("t{t}"));
        for p in 0..1000u32 {
            let x = Tensor::from_slice(vec![1], &[(t * 1000 + p) as f32]).unwrap();
            b = b.param(format!("p{p}"), x);
        }
        w.add_tag(b).unwrap();
    }
    w.finish().unwrap();
    let bytes = std::fs::read(&path).unwrap();
    let local = Archive::open(&path).unwrap();
    let len = bytes.len() as u64;
    let server = Server::start();
    server.put("big.zip", bytes);
    let a = open(&server.url("big.zip")).unwrap();
    assert!(server.count() <= 2, "{:#?}", server.requests());
    assert_eq!(a.tags(), local.tags());
    assert_eq!(a.tags().len(), 100);
    // What was read: the tail (end records, central directory, tags.txt), not the tensors.
    let tensor_bytes: u64 = (0..100)
        .map(|t| local.stored_bytes_under(&format!("t{t}")))
        .sum();
    let sent = server.bytes_sent();
    assert!(
        sent < len - tensor_bytes / 2,
        "read {sent} of {len} bytes ({tensor_bytes} in tags)"
    );
    // One tag's tables: one more request; one tensor of it: one more.
    let before = server.count();
    let tag = a.tag("t42").unwrap();
    assert_eq!(
        server.count(),
        before + 1,
        "{:#?}",
        &server.requests()[before..]
    );
    assert_eq!(tag.params().len(), 1000);
    let v = tag.param("p7").unwrap();
    assert_eq!(v.view().as_slice::<f32>().unwrap(), &[42007.0]);
    assert_eq!(server.count(), before + 2);
    // What `modelzip tags` lists comes from the summary read with the tail: no request
    // after the open's (at most 2), and the same as the local file's tables.
    let b = open(&server.url("big.zip")).unwrap();
    let before = server.count();
    let listed = b.summary().unwrap();
    assert_eq!(
        server.count(),
        before,
        "{:#?}",
        &server.requests()[before..]
    );
    assert_eq!(listed, local.tag_summaries().unwrap());
    assert_eq!(listed[42].params, 1000);
}

/// 10 tags x 10 tensors of 64 KiB each, every tensor its own: an archive far larger than
/// the first request.
fn ten_by_ten(dir: &Path) -> std::path::PathBuf {
    let path = dir.join("ten.zip");
    let mut w = ArchiveWriter::create(&path).unwrap();
    for t in 0..10u64 {
        let mut b = TagBuilder::new(format!("tag-{t}"));
        for p in 0..10u64 {
            let x = Tensor::from_slice(vec![16_384], &support::values(t * 10 + p, 16_384)).unwrap();
            b = b.param(format!("p{p}"), x);
        }
        w.add_tag(b).unwrap();
    }
    w.finish().unwrap();
    path
}

#[test]
fn listing_tags_costs_only_the_open_and_falls_back_without_a_current_summary() {
    let dir = tempfile::tempdir().unwrap();
    let path = ten_by_ten(dir.path());
    let bytes = std::fs::read(&path).unwrap();
    assert!(bytes.len() > 20 * (256 << 10));
    let local = Archive::open(&path).unwrap();
    let expected: Vec<_> = local
        .tags()
        .iter()
        .map(|t| modelzip::internals::summary_from_tables(&local, t).unwrap())
        .collect();
    let server = Server::start();
    server.put("ten.zip", bytes.clone());
    let a = open(&server.url("ten.zip")).unwrap();
    assert_eq!(a.tag_summaries().unwrap(), expected);
    // One request: the tail holds the directory, tags.txt and the summary.
    assert_eq!(server.count(), 1, "{:#?}", server.requests());
    assert!(server.bytes_sent() <= 256 << 10);
    // Without a summary (an archive an older modelzip wrote) the same listing, from the
    // tables and tensor headers: two requests per tag.
    let cut = Archive::open(&path).unwrap();
    let summary_at = cut
        .entry_names()
        .position(|n| n == modelzip::SUMMARY_TXT)
        .unwrap();
    assert_eq!(
        summary_at + 1,
        cut.entry_names().count(),
        "the summary is last"
    );
    let old = without_summary(&bytes);
    server.put("old.zip", old);
    let before = server.count();
    let b = open(&server.url("old.zip")).unwrap();
    assert_eq!(b.summary().unwrap_err(), modelzip::SummaryStatus::Absent);
    let listed = b.tag_summaries().unwrap();
    assert_eq!(listed.len(), 10);
    for (l, e) in listed.iter().zip(&expected) {
        // The copy's entries are the same bytes: all but own bytes (no summary) agree.
        assert_eq!(
            (l.params, &l.dtypes, l.shared_bytes),
            (e.params, &e.dtypes, e.shared_bytes)
        );
    }
    assert!(server.count() - before > 2, "{}", server.count() - before);
}

/// `bytes` copied by another tool (the zip crate, entries raw) without the summary, as an
/// older modelzip would have written it.
fn without_summary(bytes: &[u8]) -> Vec<u8> {
    let a = Archive::from_reader(std::io::Cursor::new(bytes.to_vec())).unwrap();
    let names: Vec<String> = a
        .entry_names()
        .filter(|n| *n != modelzip::SUMMARY_TXT)
        .map(str::to_string)
        .collect();
    drop(a);
    let mut r = zip::ZipArchive::new(std::io::Cursor::new(bytes)).unwrap();
    let mut w = zip::ZipWriter::new(std::io::Cursor::new(Vec::new()));
    for n in &names {
        w.raw_copy_file(r.by_name_raw(n.as_bytes()).unwrap())
            .unwrap();
    }
    w.finish().unwrap().into_inner()
}

#[test]
fn a_server_that_ignores_range_is_a_clear_error() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start();
    server.put("m.zip", sample_archive(dir.path(), false));
    server.set_mode(Mode::IgnoreRange);
    let err = open(&server.url("m.zip")).unwrap_err();
    assert!(
        matches!(err.kind(), ErrorKind::RangeNotSupported),
        "{err:?}"
    );
    assert!(err.to_string().contains("Range"), "{err}");
}

#[test]
fn an_object_replaced_between_requests_is_an_error_not_a_mix() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start();
    server.put("m.zip", spread_archive(dir.path(), 1));
    let a = open(&server.url("m.zip")).unwrap();
    // Someone uploads a new version (same size, other bytes) after the open.
    server.put("m.zip", spread_archive(dir.path(), 9));
    let err = a
        .tag("fp32")
        .and_then(|t| t.param("fc.w").map(drop))
        .unwrap_err();
    assert!(
        matches!(err.kind(), ErrorKind::RemoteChanged { .. }),
        "{err:?}"
    );
    assert!(err.to_string().contains("changed"), "{err}");
    // Opened again, the new version reads whole.
    let b = open(&server.url("m.zip")).unwrap();
    let w = b.tag("fp32").unwrap().param("fc.w").unwrap();
    assert_eq!(
        w.view().as_slice::<f32>().unwrap(),
        &support::values(9, 128)[..]
    );
}

#[test]
fn truncated_responses_and_missing_objects_are_errors() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start();
    server.put("m.zip", spread_archive(dir.path(), 1));
    let err = open(&server.url("nothing.zip")).unwrap_err();
    assert!(matches!(err.kind(), ErrorKind::Remote(_)), "{err:?}");
    server.set_mode(Mode::Truncate);
    let err = open(&server.url("m.zip")).unwrap_err();
    assert!(matches!(err.kind(), ErrorKind::Remote(_)), "{err:?}");
    server.set_mode(Mode::Normal);
    let a = open(&server.url("m.zip")).unwrap();
    let tag = a.tag("fp32").unwrap();
    server.set_mode(Mode::Truncate);
    let err = tag.param("fc.w").unwrap_err();
    assert!(matches!(err.kind(), ErrorKind::Remote(_)), "{err:?}");
    server.put("empty.zip", Vec::new());
    server.set_mode(Mode::Normal);
    let err = open(&server.url("empty.zip")).unwrap_err();
    assert!(matches!(err.kind(), ErrorKind::Zip(_)), "{err:?}");
}

/// Reads what `modelzip tags` reads of every tag: tables, graph, metadata, tensors.
fn read_everything(a: &Archive) -> modelzip::Result<Vec<String>> {
    fn read_tag(tag: &Tag<'_>) -> modelzip::Result<()> {
        tag.graph()?;
        tag.metadata()?;
        let locations = tag.locations();
        let mut seen = std::collections::HashSet::new();
        for loc in locations {
            if seen.insert(loc.entry()) {
                tag.tensor(loc)?;
            }
        }
        Ok(())
    }
    for t in a.tags() {
        read_tag(&a.tag(t)?)?;
    }
    Ok(a.verify().problems.into_iter().map(|p| p.message).collect())
}

/// Every hostile archive, served remotely, fails with the kind of error it fails with
/// locally (or reads the same), and never panics. Remote reads check local headers as
/// entries are read, so the error may come later than at open, never not at all.
#[test]
fn hostile_archives_served_remotely_fail_as_they_do_locally() {
    let hostile = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/hostile");
    let expected: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(hostile.join("expected.json")).unwrap())
            .unwrap();
    let server = Server::start();
    let mut checked = 0;
    for (file, row) in expected.as_object().unwrap() {
        // Journals and locks are local-file matters: a remote object has neither.
        if row.get("extra_files").is_some() {
            continue;
        }
        let bytes = std::fs::read(hostile.join(file)).unwrap();
        let local = Archive::from_reader(std::io::Cursor::new(bytes.clone()))
            .and_then(|a| read_everything(&a));
        server.put(file, bytes);
        let remote = open(&server.url(file)).and_then(|a| read_everything(&a));
        match (&local, &remote) {
            (Ok(l), Ok(r)) => {
                assert_eq!(l.is_empty(), r.is_empty(), "{file}: {l:?} vs {r:?}")
            }
            (Err(l), Err(r)) => assert_eq!(
                std::mem::discriminant(l.kind()),
                std::mem::discriminant(r.kind()),
                "{file}: local {l} / remote {r}"
            ),
            (Ok(l), Err(r)) => {
                // A stored entry's CRC-32 is checked as it is fetched: the local reader
                // finds the same problem only in verify.
                assert!(
                    matches!(r.kind(), ErrorKind::Checksum(_)) && !l.is_empty(),
                    "{file}: local {l:?} / remote {r}"
                )
            }
            (Err(l), Ok(r)) => panic!("{file}: local {l} / remote read {r:?}"),
        }
        checked += 1;
    }
    assert!(checked > 50, "{checked}");
}

/// What `modelzip tags` reads of each tensor: the header (dtype, dims, LoD), one batched
/// request per tag, not the data.
#[test]
fn tensor_heads_read_the_headers_not_the_data() {
    let dir = tempfile::tempdir().unwrap();
    let bytes = spread_archive(dir.path(), 3);
    let local = Archive::from_reader(std::io::Cursor::new(bytes.clone())).unwrap();
    let server = Server::start();
    server.put("m.zip", bytes);
    let remote = open(&server.url("m.zip")).unwrap();
    for t in ["fp32", "step-2", "big"] {
        let (lt, rt) = (local.tag(t).unwrap(), remote.tag(t).unwrap());
        let locs = |tag: &Tag<'_>| -> Vec<modelzip::TensorLocation> {
            tag.params()
                .iter()
                .map(|p| p.location.clone())
                .chain(tag.updater().iter().flat_map(|u| u.arrays.iter().cloned()))
                .collect()
        };
        let (ll, rl) = (locs(&lt), locs(&rt));
        let (count, sent) = (server.count(), server.bytes_sent());
        let heads = remote.tensor_heads(&rl.iter().collect::<Vec<_>>()).unwrap();
        assert!(
            server.count() <= count + 1,
            "{t}: {:#?}",
            &server.requests()[count..]
        );
        assert!(server.bytes_sent() - sent < 64 << 10, "{t}");
        assert_eq!(
            heads,
            local.tensor_heads(&ll.iter().collect::<Vec<_>>()).unwrap(),
            "{t}"
        );
        for (loc, h) in ll.iter().zip(&heads) {
            let full = lt.tensor(loc).unwrap();
            assert_eq!(h.dtype, full.view().dtype());
            assert_eq!(h.dims, full.view().dims());
        }
    }
}

/// Uploads through object_store's local-file store (`file://`): one conditional PUT for a
/// small archive, parts for a large one; create-only refuses an existing object; downloads
/// are byte-identical.
#[test]
fn uploads_are_create_only_unless_told_and_large_ones_go_in_parts() {
    use modelzip::remote::{self, UploadMode};
    let dir = tempfile::tempdir().unwrap();
    let store = dir.path().join("store");
    std::fs::create_dir(&store).unwrap();
    let small = dir.path().join("small.zip");
    std::fs::write(&small, spread_archive(dir.path(), 1)).unwrap();
    let large = dir.path().join("large.zip");
    let mut w = ArchiveWriter::create(&large).unwrap();
    let n = (remote::MULTIPART_THRESHOLD / 4 + 1024) as usize;
    let t = Tensor::from_slice(vec![n as u64], &support::values(5, n)).unwrap();
    w.add_tag(TagBuilder::new("large").param("x", t)).unwrap();
    w.finish().unwrap();
    assert!(std::fs::metadata(&large).unwrap().len() > remote::MULTIPART_THRESHOLD);
    let calls = std::sync::atomic::AtomicU64::new(0);
    let progress = |_: u64, _: u64| {
        calls.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
    };
    for (i, file) in [&small, &large].into_iter().enumerate() {
        let url = format!("file://{}/m{i}.zip", store.display());
        remote::upload(file, &url, UploadMode::Create, &opts(), &progress).unwrap();
        let err = remote::upload(&small, &url, UploadMode::Create, &opts(), &progress).unwrap_err();
        assert!(
            matches!(err.kind(), ErrorKind::RemoteConflict(_)),
            "{i}: {err:?}"
        );
        assert!(err.to_string().contains("already exists"), "{err}");
        let down = dir.path().join(format!("down{i}.zip"));
        remote::download(&url, &down, true, &opts(), &progress).unwrap();
        assert_eq!(std::fs::read(&down).unwrap(), std::fs::read(file).unwrap());
        // Replace regardless: the other file is there afterwards.
        let other = if i == 0 { &large } else { &small };
        remote::upload(other, &url, UploadMode::Replace, &opts(), &progress).unwrap();
        remote::download(&url, &down, true, &opts(), &progress).unwrap();
        assert_eq!(std::fs::read(&down).unwrap(), std::fs::read(other).unwrap());
    }
    assert!(calls.load(std::sync::atomic::Ordering::SeqCst) > 4);
    // Nothing but the two objects is left in the store (no staging keys).
    let mut names: Vec<String> = std::fs::read_dir(&store)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().to_string())
        .collect();
    names.sort();
    assert_eq!(names, ["m0.zip", "m1.zip"]);
    // A large file cannot replace one version conditionally: refused, nothing changed.
    let url = format!("file://{}/m0.zip", store.display());
    let before = std::fs::read(store.join("m0.zip")).unwrap();
    let err = remote::upload(
        &large,
        &url,
        UploadMode::ReplaceVersion("\"x\"".into()),
        &opts(),
        &progress,
    )
    .unwrap_err();
    assert!(
        matches!(err.kind(), ErrorKind::RemoteConflict(_)),
        "{err:?}"
    );
    assert_eq!(std::fs::read(store.join("m0.zip")).unwrap(), before);
}

/// The hostile archives that come with sidecar files (a rollback journal beside them):
/// an object in a store has no sidecars, so a remote archive is read as the object's
/// bytes are, exactly as `Archive::from_reader` reads them (no journal is looked for or
/// replayed; docs/REMOTE.md), while the local file with its journal is rolled back or
/// refused as tests/hostile/expected.json says.
#[test]
fn hostile_archives_with_sidecars_read_remotely_as_their_bytes_alone() {
    let hostile = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/hostile");
    let expected: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(hostile.join("expected.json")).unwrap())
            .unwrap();
    let server = Server::start();
    let mut checked = 0;
    for (file, row) in expected.as_object().unwrap() {
        if row.get("extra_files").is_none() {
            continue;
        }
        let bytes = std::fs::read(hostile.join(file)).unwrap();
        let in_memory = Archive::from_reader(std::io::Cursor::new(bytes.clone()))
            .and_then(|a| read_everything(&a).map(|v| (a.tags().to_vec(), v)));
        server.put(file, bytes);
        let remote = open(&server.url(file))
            .and_then(|a| read_everything(&a).map(|v| (a.tags().to_vec(), v)));
        match (&in_memory, &remote) {
            (Ok(m), Ok(r)) => assert_eq!(m, r, "{file}"),
            (Err(m), Err(r)) => assert_eq!(
                std::mem::discriminant(m.kind()),
                std::mem::discriminant(r.kind()),
                "{file}: in memory {m} / remote {r}"
            ),
            _ => panic!("{file}: in memory {in_memory:?} / remote {remote:?}"),
        }
        // Never the journal's verdict: a journal of another archive is not an error
        // remotely, since no journal is read.
        if let Err(r) = &remote {
            assert!(
                !matches!(r.kind(), ErrorKind::ForeignJournal { .. }),
                "{file}: {r}"
            );
        }
        checked += 1;
    }
    assert_eq!(checked, 3);
}

/// Answers of another length than asked (well framed but short, longer, a Content-Length
/// of 2^62 with an endless body), a Content-Range of another start or total, and 416:
/// each an error naming the URL and what was wrong, at the open and at a later read;
/// never a panic, and never bytes at the wrong offsets. (A short body read after the open
/// panicked in object_store's range coalescing; at the open it read as a truncated zip.)
#[test]
fn range_answers_of_the_wrong_length_or_range_are_clear_errors() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start();
    server.put("m.zip", spread_archive(dir.path(), 1));
    let url = server.url("m.zip");
    let cases = [
        (Mode::ShortBody, "bytes for byte range"),
        (Mode::LongBody, "more than the"),
        (Mode::HugeLength, "more than the"),
        (Mode::WrongStart, "Requested"),
        (Mode::WrongTotal, ""),
        (Mode::Unsatisfiable, "416"),
    ];
    for (mode, says) in cases {
        server.set_mode(mode);
        let err = open(&url).unwrap_err();
        assert_eq!(err.location().file.as_deref(), Some(Path::new(&url)));
        assert!(err.to_string().contains(says), "{mode:?}: {err}");
        assert!(
            matches!(
                err.kind(),
                ErrorKind::Remote(_) | ErrorKind::RemoteChanged { .. }
            ),
            "{mode:?}: {err:?}"
        );
        server.set_mode(Mode::Normal);
        let a = open(&url).unwrap();
        let tag = a.tag("big").unwrap();
        server.set_mode(mode);
        let err = tag.param("x").unwrap_err();
        assert!(err.to_string().contains(says), "{mode:?}: {err}");
        assert_eq!(
            err.location().entry.as_deref(),
            Some("big/params/0.lodtensor")
        );
        if matches!(mode, Mode::ShortBody | Mode::LongBody | Mode::HugeLength) {
            // The range asked for is named.
            assert!(err.to_string().contains("byte range "), "{err}");
        }
        // The tag tables of another tag: several ranges in one batch.
        let err = a.tag("fp32").map(drop).unwrap_err();
        assert!(err.to_string().contains(says), "{mode:?}: {err}");
    }
}

/// `RemoteOptions::timeout` bounds a stall, not a whole transfer: a server that stops
/// sending mid-body, or never answers, fails the read (and a download leaves nothing behind), one that sends
/// slowly but steadily for longer than the timeout is read whole. (The timeout was
/// reqwest's whole-request limit: a download longer than 60 s failed however fast the
/// bytes kept coming.)
#[test]
fn a_stalled_server_times_out_and_a_slow_steady_one_does_not() {
    use modelzip::remote;
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start();
    let bytes = spread_archive(dir.path(), 1);
    server.put("m.zip", bytes.clone());
    let url = server.url("m.zip");
    let o = RemoteOptions {
        timeout: std::time::Duration::from_millis(1000),
        ..opts()
    };
    let out = dir.path().join("out");
    std::fs::create_dir(&out).unwrap();
    let dst = out.join("d.zip");
    server.set_mode(Mode::Stall);
    let err = o.open(&url).unwrap_err();
    assert!(err.to_string().contains("timed out"), "{err}");
    let err = remote::download(&url, &dst, true, &o, &|_, _| {}).unwrap_err();
    assert!(err.to_string().contains("timed out"), "{err}");
    assert_eq!(support::left_but_the_lock(&out), 0);
    // No answer at all.
    server.set_mode(Mode::Mute);
    let err = o.open(&url).unwrap_err();
    assert!(err.to_string().contains("timed out"), "{err}");
    // 20 pieces 100 ms apart: 2 s in all, never 1 s without bytes.
    server.set_mode(Mode::Trickle);
    remote::download(&url, &dst, true, &o, &|_, _| {}).unwrap();
    assert_eq!(std::fs::read(&dst).unwrap(), bytes);
    server.set_mode(Mode::Normal);
    let a = o.open(&url).unwrap();
    let tag = a.tag("big").unwrap();
    server.set_mode(Mode::Trickle);
    let x = tag.param("x").unwrap();
    assert_eq!(x.view().dims(), [400_000]);
}

/// A server without ETags: the Last-Modified of the first answer is the version, and a
/// replaced object of the same size is detected rather than mixed in. (Only the size was
/// checked: a same-size replacement read as the new version's bytes.)
#[test]
fn without_etags_a_replaced_object_is_told_by_its_last_modified() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start();
    server.set_mode(Mode::NoEtag);
    let first = spread_archive(dir.path(), 1);
    server.put("m.zip", first.clone());
    let a = open(&server.url("m.zip")).unwrap();
    assert_eq!(a.remote_version(), None);
    // Another version of the same size (the size is checked too): one byte of the big
    // tensor's data changed. (Searching seeds for an archive of equal length failed
    // when none had one.)
    let mut b = first.clone();
    let mid = b.len() / 2;
    b[mid] ^= 0xff;
    server.put("m.zip", b);
    let err = a
        .tag("fp32")
        .and_then(|t| t.param("fc.w").map(drop))
        .unwrap_err();
    assert!(
        matches!(err.kind(), ErrorKind::RemoteChanged { .. }),
        "{err:?}"
    );
    assert!(err.to_string().contains("last modified"), "{err}");
}

/// 5xx answers are retried (object_store's backoff, `max_retries`), and reported naming
/// the status once the retries are spent; redirects are followed.
#[test]
fn server_errors_are_retried_and_redirects_followed() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start();
    server.put("m.zip", sample_archive(dir.path(), false));
    server.fail_next(2);
    let a = RemoteOptions {
        max_retries: 2,
        ..RemoteOptions::default()
    }
    .open(&server.url("m.zip"))
    .unwrap();
    assert_eq!(a.tags(), ["fp32", "step-2"]);
    server.fail_next(1);
    let err = open(&server.url("m.zip")).unwrap_err();
    assert!(err.to_string().contains("503"), "{err}");
    server.redirect("old.zip", "m.zip");
    let a = open(&server.url("old.zip")).unwrap();
    assert_eq!(read_everything(&a).unwrap(), Vec::<String>::new());
}

/// Options for the test server as an S3 endpoint (path style, unsigned requests).
fn s3_opts(server: &Server) -> RemoteOptions {
    let endpoint = server.url("");
    let mut o = opts();
    o.config = [
        ("aws_endpoint", endpoint.trim_end_matches('/')),
        ("aws_allow_http", "true"),
        ("aws_skip_signature", "true"),
        ("aws_region", "us-east-1"),
    ]
    .map(|(k, v)| (k.to_string(), v.to_string()))
    .to_vec();
    o
}

/// A multipart upload whose parts the store refuses is aborted (the store drops the parts;
/// an S3 upload left open is billed and never cleaned), and nothing appears at the key.
/// (The upload was dropped without an abort when a part failed before `finish`.) A stale
/// `ReplaceVersion` ETag is refused and changes nothing.
#[test]
fn a_failed_multipart_upload_is_aborted_and_a_stale_etag_refused() {
    use modelzip::remote::{self, UploadMode};
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start();
    let o = s3_opts(&server);
    let large = dir.path().join("large.zip");
    let mut w = ArchiveWriter::create(&large).unwrap();
    let n = (remote::MULTIPART_THRESHOLD / 4 + 1024) as usize;
    let t = Tensor::from_slice(vec![n as u64], &vec![0.5f32; n]).unwrap();
    w.add_tag(TagBuilder::new("large").param("x", t)).unwrap();
    w.finish().unwrap();
    server.fail_parts(true);
    let url = "s3://bucket/large.zip";
    let err = remote::upload(&large, url, UploadMode::Replace, &o, &|_, _| {}).unwrap_err();
    assert!(matches!(err.kind(), ErrorKind::Remote(_)), "{err:?}");
    assert!(err.to_string().contains("500"), "{err}");
    assert_eq!(err.location().file.as_deref(), Some(Path::new(url)));
    let seen = server.requests();
    assert!(
        seen.iter()
            .any(|r| r.method == "DELETE" && r.path == "/bucket/large.zip?uploadId=u1"),
        "no abort: {seen:#?}"
    );
    assert!(server.get("bucket/large.zip").is_none());
    drop(std::fs::remove_file(&large));

    // A conditional replace with a stale ETag: refused, the object unchanged.
    let small = dir.path().join("small.zip");
    std::fs::write(&small, sample_archive(dir.path(), false)).unwrap();
    let url = "s3://bucket/small.zip";
    let v1 = remote::upload(&small, url, UploadMode::Create, &o, &|_, _| {})
        .unwrap()
        .unwrap();
    let before = server.get("bucket/small.zip").unwrap();
    let err = remote::upload(
        &small,
        url,
        UploadMode::ReplaceVersion("\"stale\"".into()),
        &o,
        &|_, _| {},
    )
    .unwrap_err();
    assert!(
        matches!(err.kind(), ErrorKind::RemoteConflict(_)),
        "{err:?}"
    );
    assert!(err.to_string().contains("nothing was replaced"), "{err}");
    assert_eq!(server.get("bucket/small.zip").unwrap(), before);
    let v2 = remote::upload(
        &small,
        url,
        UploadMode::ReplaceVersion(v1.clone()),
        &o,
        &|_, _| {},
    )
    .unwrap()
    .unwrap();
    assert_ne!(v1, v2);
}

/// A download whose connection drops mid-body resumes where it stopped (object_store's
/// retry, a range request) when the object is the same version, and fails, leaving
/// nothing, when it was replaced in between: never half of each (said as
/// `RemoteChanged`, not as the lost connection). An object larger than the free space
/// is refused before it is written.
#[test]
fn a_download_resumes_after_a_drop_only_on_the_same_version() {
    use modelzip::remote;
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start();
    let first = spread_archive(dir.path(), 1);
    server.put("m.zip", first.clone());
    let url = server.url("m.zip");
    let out = dir.path().join("out");
    std::fs::create_dir(&out).unwrap();
    let dst = out.join("d.zip");
    let o = RemoteOptions {
        max_retries: 2,
        ..RemoteOptions::default()
    };
    server.cut_next(1);
    remote::download(&url, &dst, true, &o, &|_, _| {}).unwrap();
    assert_eq!(std::fs::read(&dst).unwrap(), first);
    let seen = server.requests();
    assert!(seen.last().unwrap().range.is_some(), "{seen:#?}");
    std::fs::remove_file(&dst).unwrap();
    // Replaced right after the cut answer: the resumed request sees another ETag.
    server.cut_next(1);
    server.replace_after(1, "m.zip", spread_archive(dir.path(), 9));
    let err = remote::download(&url, &dst, true, &o, &|_, _| {}).unwrap_err();
    assert!(
        matches!(err.kind(), ErrorKind::RemoteChanged { .. }),
        "{err:?}"
    );
    assert_eq!(support::left_but_the_lock(&out), 0);
    // A Content-Length of 2^62: refused before a byte is written, not written until the
    // disk is full.
    server.set_mode(Mode::HugeLength);
    let err = remote::download(&url, &dst, true, &o, &|_, _| {}).unwrap_err();
    assert!(err.to_string().contains("are free"), "{err}");
    assert_eq!(support::left_but_the_lock(&out), 0);
}

/// An upload sends the bytes it checked: a file renamed over the path right after the
/// check (same size, not an archive) is refused and nothing is uploaded; a file rewritten
/// in place during the check is checked again (and refused if it keeps changing); a file
/// changed in place while its parts are read is refused, the upload aborted. (The check
/// opened the path and the upload opened it again: the swapped file went up unchecked.)
#[test]
fn an_upload_sends_the_file_it_checked_or_nothing() {
    use modelzip::remote::{self, UploadMode, fault};
    use std::time::{Duration, SystemTime};
    let dir = tempfile::tempdir().unwrap();
    let store = dir.path().join("store");
    std::fs::create_dir(&store).unwrap();
    let a = spread_archive(dir.path(), 1);
    let b = spread_archive(dir.path(), 7);
    let local = dir.path().join("m.zip");
    // Rewrites `local` in place (same inode) with `bytes`, with a modification time of its
    // own (not left to the file system clock's granularity).
    let rewrite = |bytes: &[u8], secs: u64| {
        let f = std::fs::OpenOptions::new()
            .write(true)
            .truncate(true)
            .open(&local)
            .unwrap();
        std::io::Write::write_all(&mut &f, bytes).unwrap();
        f.set_modified(SystemTime::UNIX_EPOCH + Duration::from_secs(secs))
            .unwrap();
    };
    let url = |name: &str| format!("file://{}/{name}", store.display());

    // Renamed over the path after the check: refused, naming the local file.
    std::fs::write(&local, &a).unwrap();
    let junk = dir.path().join("junk");
    std::fs::write(&junk, vec![0x5a; a.len()]).unwrap();
    let (from, to) = (junk.clone(), local.clone());
    fault::set_after_upload_check(Some(Box::new(move || {
        if from.exists() {
            std::fs::rename(&from, &to).unwrap();
        }
    })));
    let err = remote::upload(
        &local,
        &url("swapped.zip"),
        UploadMode::Create,
        &opts(),
        &|_, _| {},
    )
    .unwrap_err();
    fault::set_after_upload_check(None);
    assert!(matches!(err.kind(), ErrorKind::InvalidInput(_)), "{err:?}");
    assert!(
        err.to_string().contains("changed while it was checked"),
        "{err}"
    );
    assert_eq!(err.location().file.as_deref(), Some(local.as_path()));
    assert!(!store.join("swapped.zip").exists());

    // Rewritten in place once during the check: checked again, and what goes up is the
    // new content, the one checked second.
    std::fs::write(&local, &a).unwrap();
    let once = std::cell::Cell::new(true);
    let b2 = b.clone();
    let l2 = local.clone();
    fault::set_after_upload_check(Some(Box::new(move || {
        if once.replace(false) {
            let f = std::fs::OpenOptions::new()
                .write(true)
                .truncate(true)
                .open(&l2)
                .unwrap();
            std::io::Write::write_all(&mut &f, &b2).unwrap();
            f.set_modified(SystemTime::UNIX_EPOCH + Duration::from_secs(1000))
                .unwrap();
        }
    })));
    remote::upload(
        &local,
        &url("again.zip"),
        UploadMode::Create,
        &opts(),
        &|_, _| {},
    )
    .unwrap();
    fault::set_after_upload_check(None);
    assert_eq!(std::fs::read(store.join("again.zip")).unwrap(), b);

    // Rewritten in place at every check: refused.
    let flip = std::cell::Cell::new(0u64);
    let (a2, b2, l2) = (a.clone(), b.clone(), local.clone());
    fault::set_after_upload_check(Some(Box::new(move || {
        let n = flip.get() + 1;
        flip.set(n);
        let f = std::fs::OpenOptions::new()
            .write(true)
            .truncate(true)
            .open(&l2)
            .unwrap();
        std::io::Write::write_all(&mut &f, if n % 2 == 1 { &b2 } else { &a2 }).unwrap();
        f.set_modified(SystemTime::UNIX_EPOCH + Duration::from_secs(2000 + n))
            .unwrap();
    })));
    let err = remote::upload(
        &local,
        &url("flip.zip"),
        UploadMode::Create,
        &opts(),
        &|_, _| {},
    )
    .unwrap_err();
    fault::set_after_upload_check(None);
    assert!(
        err.to_string().contains("changed while it was checked"),
        "{err}"
    );
    assert!(!store.join("flip.zip").exists());

    // Changed in place (same size, another modification time) while its parts are read:
    // refused, the multipart upload aborted, nothing at the URL.
    let mut w = ArchiveWriter::create(&local).unwrap();
    let n = (remote::MULTIPART_THRESHOLD / 4 + 1024) as usize;
    let t = Tensor::from_slice(vec![n as u64], &vec![0.25f32; n]).unwrap();
    w.add_tag(TagBuilder::new("large").param("x", t)).unwrap();
    w.finish().unwrap();
    let large = std::fs::read(&local).unwrap();
    let touched = std::sync::atomic::AtomicBool::new(false);
    let progress = |_: u64, _: u64| {
        if !touched.swap(true, std::sync::atomic::Ordering::SeqCst) {
            rewrite(&large, 3000);
        }
    };
    let err = remote::upload(
        &local,
        &url("large.zip"),
        UploadMode::Replace,
        &opts(),
        &progress,
    )
    .unwrap_err();
    assert!(touched.load(std::sync::atomic::Ordering::SeqCst));
    assert!(
        err.to_string().contains("changed while it was uploaded"),
        "{err}"
    );
    assert_eq!(err.location().file.as_deref(), Some(local.as_path()));
    assert!(!err.to_string().contains("Generic"), "{err}");
    assert_eq!(
        std::fs::read_dir(&store).unwrap().count(),
        1,
        "only again.zip"
    );
}

/// A download replaces a local archive as `ArchiveWriter::create` does: under its write
/// lock, and after rolling back the journal a killed append left. Restoring an archive
/// from its backup over the file of such an append (`cp URL LOCAL --force`) keeps the
/// downloaded tags: the downloaded file starts with the old file's bytes, so the stale
/// journal would otherwise pass its check on the next open, be replayed and cut the
/// downloaded tags off.
#[test]
fn a_download_settles_the_journal_of_the_file_it_replaces() {
    use modelzip::{AppendMode, Appender, WriteLock, remote};
    let dir = tempfile::tempdir().unwrap();
    let store = dir.path().join("store");
    std::fs::create_dir(&store).unwrap();
    let local = dir.path().join("run.zip");
    let t = |v: f32| Tensor::from_slice(vec![2], &[v, v]).unwrap();
    let mut w = ArchiveWriter::create(&local).unwrap();
    w.add_tag(TagBuilder::new("a").param("x", t(1.0))).unwrap();
    w.finish().unwrap();
    let journal = {
        let mut s = local.as_os_str().to_owned();
        s.push(".journal");
        std::path::PathBuf::from(s)
    };
    // The journal of an in-place append of "b" (kept: as a kill before its deletion
    // leaves it), and the finished archive backed up to the store.
    let mut ap = Appender::open(&local, AppendMode::InPlace).unwrap();
    let saved = std::fs::read(&journal).unwrap();
    ap.add_tag(TagBuilder::new("b").param("x", t(2.0))).unwrap();
    ap.finish().unwrap();
    std::fs::copy(&local, store.join("run.zip")).unwrap();
    std::fs::write(&journal, &saved).unwrap();
    let url = format!("file://{}/run.zip", store.display());
    // Another writer holds the lock: refused, nothing changed.
    let held = WriteLock::acquire(&local, false).unwrap();
    let e = remote::download(&url, &local, true, &opts(), &|_, _| {}).unwrap_err();
    assert!(matches!(e.kind(), ErrorKind::Locked), "{e:?}");
    assert_eq!(std::fs::read(&journal).unwrap(), saved);
    drop(held);
    remote::download(&url, &local, true, &opts(), &|_, _| {}).unwrap();
    assert!(!journal.exists(), "the stale journal is left");
    assert_eq!(Archive::open(&local).unwrap().tags(), &["a", "b"]);
    assert_eq!(
        std::fs::read(&local).unwrap(),
        std::fs::read(store.join("run.zip")).unwrap()
    );
}

/// A download without `overwrite` refuses an existing file before a byte is fetched,
/// and a file that appears at its path while it downloads is kept: the downloaded
/// archive is put in place only where nothing is (no-clobber), and no temporary file is
/// left.
#[test]
fn a_download_without_overwrite_never_replaces_a_file() {
    use modelzip::remote;
    let dir = tempfile::tempdir().unwrap();
    let store = dir.path().join("store");
    std::fs::create_dir(&store).unwrap();
    let mut w = ArchiveWriter::create(store.join("run.zip")).unwrap();
    w.add_tag(TagBuilder::new("a").param("x", Tensor::from_slice(vec![2], &[1f32, 2.0]).unwrap()))
        .unwrap();
    w.finish().unwrap();
    let url = format!("file://{}/run.zip", store.display());
    let local = dir.path().join("copy.zip");
    std::fs::write(&local, b"mine").unwrap();
    let fetched = std::sync::atomic::AtomicU64::new(0);
    let count = |d: u64, _| fetched.store(d, std::sync::atomic::Ordering::Relaxed);
    let e = remote::download(&url, &local, false, &opts(), &count).unwrap_err();
    assert!(
        matches!(e.kind(), ErrorKind::Io(io) if io.kind() == std::io::ErrorKind::AlreadyExists),
        "{e:?}"
    );
    assert!(e.to_string().contains("copy.zip"), "{e}");
    assert_eq!(
        fetched.into_inner(),
        0,
        "bytes were fetched for a refused download"
    );
    assert_eq!(std::fs::read(&local).unwrap(), b"mine");
    // Another process writes the file while the download runs.
    std::fs::remove_file(&local).unwrap();
    let appear = |_, _| {
        if !local.exists() {
            std::fs::write(&local, b"theirs").unwrap();
        }
    };
    let e = remote::download(&url, &local, false, &opts(), &appear).unwrap_err();
    assert!(
        matches!(e.kind(), ErrorKind::Io(io) if io.kind() == std::io::ErrorKind::AlreadyExists),
        "{e:?}"
    );
    assert_eq!(std::fs::read(&local).unwrap(), b"theirs");
    std::fs::remove_file(&local).unwrap();
    remote::download(&url, &local, false, &opts(), &|_, _| {}).unwrap();
    assert_eq!(Archive::open(&local).unwrap().tags(), &["a"]);
    let mut left: Vec<String> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    left.sort();
    assert_eq!(left, ["copy.zip", "copy.zip.lock", "store"]);
}
