//! The archive summary (`_summary.txt`, FORMAT.md format 1.2): every commit leaves it
//! current and saying what the tables say; an absent or stale one (older writers, other
//! tools) and a malformed or implausible one are ignored for the tables, with a reason,
//! and `verify` reports a malformed one and one that disagrees with the tables.

use crate::support;

use modelzip::{
    AppendMode, Archive, ArchiveWriter, DType, GraphFormat, Removal, TagBuilder, Tensor,
    WriteOptions,
};
use modelzip::{SUMMARY_TXT, SummaryStatus, TagSummary};
use sha2::Digest;
use std::io::{Cursor, Read, Write};
use std::path::Path;

fn from_tables(a: &Archive) -> Vec<TagSummary> {
    a.tags()
        .iter()
        .map(|t| modelzip::internals::summary_from_tables(a, t).unwrap())
        .collect()
}

/// The summary is current, says what the tables say, and verify agrees.
fn assert_current(path: &Path, step: &str) -> Vec<TagSummary> {
    let a = Archive::open(path).unwrap();
    let s = a
        .summary()
        .unwrap_or_else(|st| panic!("{step}: summary {st}"));
    assert_eq!(s, from_tables(&a), "{step}");
    assert_eq!(a.tag_summaries().unwrap(), s, "{step}");
    let report = a.verify();
    assert!(report.is_ok(), "{step}: {report:?}");
    s
}

/// A sample archive: two sample tags, then one sharing fp32's tensors in another dtype mix.
fn sample(path: &Path) {
    let mut w = ArchiveWriter::create(path).unwrap();
    w.add_tag(support::sample_tag("fp32", 1)).unwrap();
    w.add_tag(support::sample_tag("step-2", 2)).unwrap();
    w.finish().unwrap();
}

#[test]
fn every_commit_leaves_a_current_summary() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("m.zip");
    sample(&path);
    let s = assert_current(&path, "create");
    assert_eq!(s[0].params, 5);
    assert_eq!(s[0].updater_arrays, 2);
    assert_eq!(s[0].graph, Some(GraphFormat::ProgramDesc));
    assert_eq!(
        s[0].dtypes,
        [DType::Int64, DType::Fp16, DType::Fp32, DType::Fp64]
    );
    assert!(s[0].created.is_some());
    // step-2 shares fc.b (the same values in both) and the graph and training config.
    assert!(s[1].shared_bytes > 0, "{s:?}");
    let opts = WriteOptions::default();
    // A tag of fp32's tensors (all shared) and an INT8 one, in place.
    let same = support::sample_tag("again", 1);
    modelzip::append_tag(&path, same, AppendMode::InPlace, &opts).unwrap();
    let q = Tensor::from_slice(vec![4], &[1i8, -2, 3, -4]).unwrap();
    let int8 = TagBuilder::new("int8")
        .param("q", q)
        .metadata(br#"{"created":"-","note":"x"}"#.to_vec());
    modelzip::append_tag(&path, int8, AppendMode::InPlace, &opts).unwrap();
    // Created times the summary must escape, or that are not strings.
    for (name, meta) in [
        ("odd-1", r#"{"created":"a b%c\n\u0001"}"#),
        ("odd-2", r#"{"created":""}"#),
        ("odd-3", r#"{"created":17}"#),
    ] {
        let t = TagBuilder::new(name).metadata(meta.as_bytes().to_vec());
        modelzip::append_tag(&path, t, AppendMode::InPlace, &opts).unwrap();
    }
    let s = assert_current(&path, "append in place");
    assert_eq!(s[3].created.as_deref(), Some("-"));
    assert_eq!(s[4].created.as_deref(), Some("a b%c\n\u{1}"));
    assert_eq!(s[5].created.as_deref(), Some(""));
    assert_eq!(s[6].created, None);
    assert!(s[4].dtypes.is_empty() && s[4].params == 0);
    let odd = Removal::tags(["odd-1", "odd-2", "odd-3"]).in_place(true);
    modelzip::remove_tags(&path, odd, &opts).unwrap();
    assert_eq!(s[3].dtypes, [DType::Int8]);
    // The old summaries are dead bytes until a compaction.
    assert!(Archive::open(&path).unwrap().dead_bytes() > 0);
    let t = Tensor::from_slice(vec![2], &[5.0f32, 6.0]).unwrap();
    let rw = TagBuilder::new("rewritten").param("w", t);
    modelzip::append_tag(&path, rw, AppendMode::Rewrite, &opts).unwrap();
    assert_current(&path, "append by rewrite");
    // Removing fp32 re-homes what step-2 used of it (fc.b, graph, training config) into
    // step-2, which then uses nothing from other tags; `again` now uses step-2's copies.
    let before = assert_current(&path, "before remove");
    modelzip::remove_tags(&path, Removal::tags(["fp32"]), &opts).unwrap();
    let s = assert_current(&path, "remove (rewrite)");
    assert!(before[1].shared_bytes > 0);
    assert_eq!(s[0].name, "step-2");
    assert_eq!(s[0].shared_bytes, 0, "{s:?}");
    assert!(s[1].shared_bytes > 0, "{s:?}");
    modelzip::remove_tags(&path, Removal::tags(["step-2"]).in_place(true), &opts).unwrap();
    assert_current(&path, "remove in place");
    modelzip::convert_graph(&path, "again", GraphFormat::FlatBuffers, &opts).unwrap();
    let s = assert_current(&path, "convert graph");
    assert_eq!(s[0].graph, Some(GraphFormat::FlatBuffers));
    modelzip::remove_tags(&path, Removal::keep_newest(2), &opts).unwrap();
    assert_current(&path, "prune");
    modelzip::compact(&path, &opts).unwrap();
    assert_current(&path, "compact");
    assert_eq!(Archive::open(&path).unwrap().dead_bytes(), 0);
}

/// Makes a summary's bytes from its head line (current for the archive it goes in).
type MakeSummary<'a> = dyn Fn(&str) -> Vec<u8> + 'a;

/// (what, the summary, what the reason says).
type Case<'a> = (&'a str, Box<MakeSummary<'a>>, &'a str);

/// How an entry is carried into a copy made by another zip tool.
enum Edit {
    Keep,
    Drop,
    Replace(Vec<u8>),
}

/// `src` rewritten by the `zip` crate (another tool): entries copied raw, or dropped or
/// replaced (stored) as `edit` says; then, if `summary` is given, a `_summary.txt` with
/// its text after the head line `summary` makes current for that copy (its
/// fingerprint computed here from the spec, not by modelzip), of summary version 2.
fn rezip(src: &[u8], edit: impl Fn(&str) -> Edit, summary: Option<&MakeSummary<'_>>) -> Vec<u8> {
    rezip_as(src, edit, summary, 2)
}

/// [`rezip`] with a head of summary `version` (1: SHA-256, as older modelzips wrote).
fn rezip_as(
    src: &[u8],
    edit: impl Fn(&str) -> Edit,
    summary: Option<&MakeSummary<'_>>,
    version: u32,
) -> Vec<u8> {
    use zip::write::SimpleFileOptions;
    let stored = SimpleFileOptions::default().compression_method(zip::CompressionMethod::Stored);
    let copy = |with: Option<Vec<u8>>| -> Vec<u8> {
        let mut r = zip::ZipArchive::new(Cursor::new(src)).unwrap();
        let mut w = zip::ZipWriter::new(Cursor::new(Vec::new()));
        for i in 0..r.len() {
            let f = r.by_index_raw(i).unwrap();
            let name = f.name().unwrap().to_string();
            if name == SUMMARY_TXT && summary.is_some() {
                continue;
            }
            match edit(&name) {
                Edit::Keep => w.raw_copy_file(f).unwrap(),
                Edit::Drop => {}
                Edit::Replace(b) => {
                    drop(f);
                    w.start_file(name, stored).unwrap();
                    w.write_all(&b).unwrap();
                }
            }
        }
        if let Some(b) = with {
            w.start_file(SUMMARY_TXT, stored).unwrap();
            w.write_all(&b).unwrap();
        }
        w.finish().unwrap().into_inner()
    };
    let first = copy(None);
    let Some(summary) = summary else {
        return first;
    };
    let mut r = zip::ZipArchive::new(Cursor::new(&first)).unwrap();
    let mut h = Vec::new();
    for i in 0..r.len() {
        let f = r.by_index_raw(i).unwrap();
        let method: u16 = match f.compression() {
            zip::CompressionMethod::Stored => 0,
            _ => 8,
        };
        let name = f.name().unwrap().to_string();
        h.extend_from_slice(&(name.len() as u64).to_le_bytes());
        h.extend_from_slice(name.as_bytes());
        h.extend_from_slice(&method.to_le_bytes());
        h.extend_from_slice(&f.crc32().to_le_bytes());
        h.extend_from_slice(&f.compressed_size().to_le_bytes());
        h.extend_from_slice(&f.size().to_le_bytes());
    }
    let hex: String = if version == 1 {
        sha2::Sha256::digest(&h)
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect()
    } else {
        // XXH3-128 in its canonical form (high half first, big-endian).
        format!("{:032x}", xxhash_rust::xxh3::xxh3_128(&h))
    };
    let head = format!("modelzip-summary {version} {} {hex}", r.len());
    copy(Some(summary(&head)))
}

fn summary_text(a: &Archive) -> Vec<u8> {
    let mut s = Vec::new();
    zip::ZipArchive::new(Cursor::new(std::fs::read(a.path().unwrap()).unwrap()))
        .unwrap()
        .by_name(SUMMARY_TXT)
        .unwrap()
        .read_to_end(&mut s)
        .unwrap();
    s
}

#[test]
fn an_archive_without_a_summary_is_listed_from_its_tables_and_gets_one_on_the_next_commit() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("m.zip");
    sample(&path);
    let expected = assert_current(&path, "create");
    let old = rezip(
        &std::fs::read(&path).unwrap(),
        |n| {
            if n == SUMMARY_TXT {
                Edit::Drop
            } else {
                Edit::Keep
            }
        },
        None,
    );
    let older = dir.path().join("older.zip");
    std::fs::write(&older, &old).unwrap();
    let a = Archive::open(&older).unwrap();
    assert_eq!(a.summary().unwrap_err(), SummaryStatus::Absent);
    // Own bytes differ only by what the zip crate's headers cost (none: raw copies).
    assert_eq!(a.tag_summaries().unwrap(), expected);
    assert!(a.verify().is_ok());
    drop(a);
    let t = Tensor::from_slice(vec![1], &[1.0f32]).unwrap();
    let next = TagBuilder::new("next").param("t", t);
    modelzip::append_tag(&older, next, AppendMode::InPlace, &WriteOptions::default()).unwrap();
    assert_current(&older, "first commit of an archive without a summary");
}

#[test]
fn a_summary_another_tool_left_stale_is_ignored() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("m.zip");
    sample(&path);
    // Another tool replaces fp32's FP16 tensor by an INT8 one; every params.txt is as it
    // was (per-tag checksums of the tables would not notice).
    let a = Archive::open(&path).unwrap();
    let loc = a.tag("fp32").unwrap().params()[4].location.clone();
    assert_eq!(a.tag("fp32").unwrap().params()[4].name, "half");
    let int8 = Tensor::from_slice(vec![3], &[1i8, 2, 3]).unwrap();
    let mut rec = Vec::new();
    modelzip::tensor::encode_tensor(&int8.view(), &mut rec).unwrap();
    let bytes = std::fs::read(&path).unwrap();
    let edited = rezip(
        &bytes,
        |n| {
            if n == loc.entry() {
                Edit::Replace(rec.clone())
            } else {
                Edit::Keep
            }
        },
        None,
    );
    let stale = dir.path().join("stale.zip");
    std::fs::write(&stale, &edited).unwrap();
    let b = Archive::open(&stale).unwrap();
    match b.summary() {
        Err(SummaryStatus::Stale(why)) => assert!(why.contains("fingerprint"), "{why}"),
        other => panic!("{other:?}"),
    }
    let listed = b.tag_summaries().unwrap();
    assert_eq!(listed, from_tables(&b));
    assert!(listed[0].dtypes.contains(&DType::Int8), "{listed:?}");
    // Stale is not a problem of the archive (sha256sums.txt now is).
    assert!(
        b.verify()
            .problems
            .iter()
            .all(|p| p.entry.as_deref() != Some(SUMMARY_TXT)),
        "{:?}",
        b.verify()
    );
}

#[test]
fn hostile_summaries_are_ignored_with_a_reason_and_reported_by_verify() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("m.zip");
    sample(&path);
    let a = Archive::open(&path).unwrap();
    let good = String::from_utf8(summary_text(&a)).unwrap();
    let records: Vec<&str> = good.lines().skip(1).collect();
    let src = std::fs::read(&path).unwrap();
    let with = |f: &MakeSummary<'_>| rezip(&src, |_| Edit::Keep, Some(f));
    // The untouched records under a head made current for the copy: used.
    let plain = with(&|head| format!("{head}\n{}\n", records.join("\n")).into_bytes());
    let b = Archive::from_reader(Cursor::new(plain)).unwrap();
    let expected = b.summary().unwrap();
    assert_eq!(expected, from_tables(&b));
    let field = |i: usize, v: &str| -> String {
        let mut f: Vec<&str> = records[0].split(' ').collect();
        f[i] = v;
        format!("{}\n{}\n", f.join(" "), records[1])
    };
    let big = "x".repeat(17 << 20);
    let cases: Vec<Case> = vec![
        (
            "huge params count",
            Box::new(|h| format!("{h}\n{}", field(1, "18446744073709551615")).into_bytes()),
            "more than fp32/params.txt",
        ),
        (
            "count beyond u64",
            Box::new(|h| format!("{h}\n{}", field(3, "99999999999999999999999")).into_bytes()),
            "shared byte count",
        ),
        (
            "shared bytes beyond the archive",
            Box::new(|h| format!("{h}\n{}", field(3, "1000000000000")).into_bytes()),
            "more than the archive",
        ),
        (
            "bad UTF-8",
            Box::new(|h| {
                let mut b = format!("{h}\n{}", field(0, "fp32")).into_bytes();
                b.extend_from_slice(&[0xff, 0xfe, b'\n']);
                b
            }),
            "not UTF-8",
        ),
        (
            "unknown dtype",
            Box::new(|h| format!("{h}\n{}", field(5, "FP32,FP99")).into_bytes()),
            "unknown dtype",
        ),
        (
            "records out of order",
            Box::new(|h| format!("{h}\n{}\n{}\n", records[1], records[0]).into_bytes()),
            "where tags.txt has",
        ),
        (
            "a record missing",
            Box::new(|h| format!("{h}\n{}\n", records[0]).into_bytes()),
            "1 records for 2 tags",
        ),
        (
            "a sharded world size that is no number",
            Box::new(|h| format!("{h}\n{}", field(7, "two")).into_bytes()),
            "sharded world size",
        ),
        (
            "a version-1 record under a version-2 head",
            Box::new(|h| {
                let f: Vec<&str> = records[0].split(' ').collect();
                format!("{h}\n{}\n{}\n", f[..7].join(" "), records[1]).into_bytes()
            }),
            "expected 8 fields, found 7",
        ),
        (
            // Split into at most 9 fields (not 10 million).
            "ten million spaces",
            Box::new(|h| {
                format!(
                    "{h}\n{}{}\n{}\n",
                    records[0],
                    " ".repeat(10_000_000),
                    records[1]
                )
                .into_bytes()
            }),
            "expected 8 fields, found more than 8",
        ),
        (
            "bad escape in created",
            Box::new(|h| format!("{h}\n{}", field(6, "%zz")).into_bytes()),
            "created",
        ),
        (
            "over 16 MiB",
            Box::new(|h| format!("{h}\n{}{big}", field(0, "fp32")).into_bytes()),
            "limit",
        ),
        (
            "bad head",
            Box::new(|h| {
                format!(
                    "{}\n{}",
                    h.replace("modelzip-summary 2", "modelzip-summary x"),
                    field(0, "fp32")
                )
                .into_bytes()
            }),
            "version",
        ),
    ];
    for (what, make, reason) in &cases {
        let b = Archive::from_reader(Cursor::new(with(make.as_ref()))).unwrap();
        match b.summary() {
            Err(SummaryStatus::Invalid(why)) => assert!(why.contains(reason), "{what}: {why}"),
            other => panic!("{what}: {other:?}"),
        }
        assert_eq!(b.tag_summaries().unwrap(), expected, "{what}");
        let report = b.verify();
        assert!(
            report
                .problems
                .iter()
                .any(|p| p.entry.as_deref() == Some(SUMMARY_TXT) && p.message.contains(reason)),
            "{what}: {report:?}"
        );
    }
    // Ignored quietly: a wrong fingerprint (written for another directory) and a newer
    // summary version.
    let quiet: Vec<Case> = vec![
        (
            "wrong fingerprint",
            Box::new(|h| {
                let mut h = h.to_string();
                let last = h.pop().unwrap();
                h.push(if last == '0' { '1' } else { '0' });
                format!("{h}\n{}\n", records.join("\n")).into_bytes()
            }),
            "fingerprint",
        ),
        (
            "wrong entry count",
            Box::new(|h| {
                let f: Vec<&str> = h.split(' ').collect();
                format!("{} {} 1 {}\n{}\n", f[0], f[1], f[3], records.join("\n")).into_bytes()
            }),
            "entries",
        ),
        (
            "newer version",
            Box::new(|h| format!("{}\n", h.replace("summary 2", "summary 3")).into_bytes()),
            "version 3",
        ),
    ];
    for (what, make, reason) in &quiet {
        let b = Archive::from_reader(Cursor::new(with(make.as_ref()))).unwrap();
        match b.summary() {
            Err(SummaryStatus::Stale(why)) => assert!(why.contains(reason), "{what}: {why}"),
            other => panic!("{what}: {other:?}"),
        }
        assert_eq!(b.tag_summaries().unwrap(), expected, "{what}");
        assert!(b.verify().is_ok(), "{what}: {:?}", b.verify());
    }
    // A sharded world size that metadata.json is too short to hold (`{}`).
    let short = rezip(
        &src,
        |n| {
            if n == "step-2/metadata.json" {
                Edit::Replace(b"{}".to_vec())
            } else {
                Edit::Keep
            }
        },
        Some(&|h| {
            let mut f: Vec<&str> = records[1].split(' ').collect();
            f[6] = "-";
            f[7] = "4";
            format!("{h}\n{}\n{}\n", records[0], f.join(" ")).into_bytes()
        }),
    );
    let b = Archive::from_reader(Cursor::new(short)).unwrap();
    match b.summary() {
        Err(SummaryStatus::Invalid(why)) => assert!(
            why.contains("world size of 4, more than step-2/metadata.json (2 bytes)"),
            "{why}"
        ),
        other => panic!("{other:?}"),
    }
    // Current and plausible but wrong: listed as it says (it is the archive's own claim),
    // and verify reports the difference.
    let lying = with(&|h| format!("{h}\n{}", field(1, "4")).into_bytes());
    let b = Archive::from_reader(Cursor::new(lying)).unwrap();
    assert_eq!(b.summary().unwrap()[0].params, 4);
    let report = b.verify();
    assert!(
        report
            .problems
            .iter()
            .any(|p| p.entry.as_deref() == Some(SUMMARY_TXT)
                && p.message.contains("4 params")
                && p.message.contains("5 params")),
        "{report:?}"
    );
}

#[test]
fn a_version_1_summary_is_read_with_the_sharded_world_size_from_metadata_json() {
    // As modelzip wrote it before version 2: a SHA-256 fingerprint, seven fields a record.
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("m.zip");
    sample(&path);
    let good = String::from_utf8(summary_text(&Archive::open(&path).unwrap())).unwrap();
    let v1: Vec<String> = good
        .lines()
        .skip(1)
        .map(|r| {
            let mut f: Vec<&str> = r.split(' ').collect();
            if f[0] == "step-2" {
                f[6] = "x";
            }
            f[..7].join(" ")
        })
        .collect();
    let meta = br#"{"created":"x","sharded":{"world_size":3,"plan":"p"}}"#.to_vec();
    let old = rezip_as(
        &std::fs::read(&path).unwrap(),
        |n| {
            if n == "step-2/metadata.json" {
                Edit::Replace(meta.clone())
            } else {
                Edit::Keep
            }
        },
        Some(&|h| format!("{h}\n{}\n", v1.join("\n")).into_bytes()),
        1,
    );
    assert!(String::from_utf8_lossy(&old).contains("modelzip-summary 1 "));
    let a = Archive::from_reader(Cursor::new(old)).unwrap();
    let s = a.summary().unwrap();
    assert_eq!(s[1].sharded, Some(3));
    assert_eq!(s[1].created.as_deref(), Some("x"));
    assert_eq!(s[0].sharded, None);
    assert_eq!(s, from_tables(&a));
    // (sha256sums.txt sees the replaced metadata.json; the summary is no finding.)
    let report = a.verify();
    assert!(
        report
            .problems
            .iter()
            .all(|p| p.entry.as_deref() == Some("step-2/metadata.json")),
        "{report:?}"
    );
}
