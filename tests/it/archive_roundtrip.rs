//! Writing and reading archives: round trips, zero-copy, alignment, dedup, validation of
//! hostile input, interop with other zip tools, Zip64.

use crate::support;

use modelzip::{
    AppendMode, Archive, ArchiveWriter, ErrorKind, GraphFormat, OpenOptions, TagBuilder, Tensor,
    TensorData, TensorKind, WriteOptions,
};
use std::io::Write;
use std::path::{Path, PathBuf};
use support::*;

fn write(path: &Path, tags: Vec<TagBuilder>) {
    let mut w = ArchiveWriter::create(path).unwrap();
    for t in tags {
        w.add_tag(t).unwrap();
    }
    w.finish().unwrap();
}

fn tmp() -> (tempfile::TempDir, PathBuf) {
    let d = tempfile::tempdir().unwrap();
    let p = d.path().join("model.zip");
    (d, p)
}

#[test]
fn round_trip_reads_back_every_part_zero_copy() {
    let (dir, path) = tmp();
    let built = sample_tag("fp32", 1);
    write(&path, vec![built.clone(), sample_tag("INT8", 2)]);
    let a = Archive::open(&path).unwrap();
    assert_eq!(a.tags(), &["fp32", "INT8"]);
    assert_eq!(a.default_tag(), Some("INT8"));
    assert_eq!(a.latest().unwrap().name(), "INT8");
    let t = a.tag("FP32").unwrap();
    assert_eq!(t.name(), "fp32");
    let names: Vec<&str> = t.params().iter().map(|p| p.name.as_str()).collect();
    assert_eq!(names, ["fc.w", "fc.b", "my param%/emb", "step", "half"]);
    let w = t.param("fc.w").unwrap();
    assert!(matches!(w, TensorData::Mapped(_)));
    let v = w.view();
    assert_eq!(v.dims(), &[16, 8]);
    assert_eq!(v.as_slice::<f32>().unwrap(), values(1, 128).as_slice());
    let emb = t.param("my param%/emb").unwrap();
    assert_eq!(emb.view().lod(), &vec![vec![0, 2, 5]]);
    assert_eq!(
        t.param("step").unwrap().view().to_vec::<f64>().unwrap(),
        vec![1.0]
    );
    let (enc, g) = t.graph().unwrap().unwrap();
    assert_eq!(enc, GraphFormat::ProgramDesc);
    assert_eq!(&*g, sample_graph().as_slice());
    assert_eq!(
        t.training_config().unwrap().as_deref(),
        Some(sample_training_config().as_slice())
    );
    let meta: serde_json::Value = serde_json::from_slice(&t.metadata().unwrap().unwrap()).unwrap();
    let created = meta["created"].as_str().unwrap();
    assert!(created.ends_with('Z') && created.len() == 20, "{created}");
    assert_eq!(t.updater().len(), 1);
    assert_eq!(t.updater()[0].arrays.len(), 2);
    assert_eq!(t.updater()[0].arrays[0].kind, TensorKind::Updater);
    assert!(t.own_entries().contains(&"fp32/notes/readme.md"));
    assert!(t.param("nope").is_err());
    assert!(matches!(
        a.tag("nope").unwrap_err().kind(),
        ErrorKind::TagNotFound { .. }
    ));
    // The second tag shares the bias and embedding with the first.
    let i8 = a.tag("int8").unwrap();
    let b = i8.params().iter().find(|p| p.name == "fc.b").unwrap();
    assert!(b.location.shared);
    assert_eq!(b.location.tag(), "fp32");
    let report = a.verify();
    assert!(report.is_ok(), "{:?}", report.problems);
    assert_eq!(dump(&i8).len(), 7);
    external_tools_accept(&path);
    assert!(assert_tensor_data_aligned(&path) >= 10);
    assert!(stray_files(dir.path(), &path).is_empty());
    // from_reader gives the same content.
    let b = Archive::from_reader(std::fs::File::open(&path).unwrap()).unwrap();
    assert_eq!(dump(&b.tag("fp32").unwrap()), dump(&t));
}

#[test]
fn streaming_tag_writer_and_metadata_merge() {
    let (_d, path) = tmp();
    let mut w = ArchiveWriter::create(&path).unwrap();
    let mut t = w.begin_tag("a").unwrap();
    let x = Tensor::from_slice(vec![4], &[1.0f32, 2.0, 3.0, 4.0]).unwrap();
    t.param("x", &x.view()).unwrap();
    t.param("x_again", &x.view()).unwrap();
    assert!(t.param("x", &x.view()).is_err());
    assert!(t.param("", &x.view()).is_err());
    t.metadata(br#"{"description": "d"}"#).unwrap();
    // A graph must decode: bytes that do not are refused, and the tag can still take one.
    let e = t.graph(GraphFormat::FlatBuffers, b"g").unwrap_err();
    assert!(matches!(e.kind(), ErrorKind::Graph(_)), "{e}");
    assert!(e.to_string().contains("graph.fb"), "{e}");
    let fb = modelzip::Graph::decode(modelzip::GraphFormat::ProgramDesc, &sample_graph())
        .unwrap()
        .encode(GraphFormat::FlatBuffers)
        .unwrap();
    assert!(t.graph(GraphFormat::FlatBuffers, &fb).is_ok());
    assert!(t.graph(GraphFormat::ProgramDesc, &sample_graph()).is_err());
    assert!(t.extra_entry("params.txt", b"x").is_err());
    assert!(t.extra_entry("../x", b"x").is_err());
    // A line break would split the file's sha256sums.txt line.
    let e = t.extra_entry("notes\nb.txt", b"x").unwrap_err();
    assert!(e.to_string().contains("control character"), "{e}");
    t.finish().unwrap();
    // A dropped, unfinished tag leaves nothing visible.
    let mut t = w.begin_tag("dropped").unwrap();
    t.param("y", &x.view()).unwrap();
    drop(t);
    assert!(w.begin_tag("A").is_err());
    assert!(w.begin_tag("bad name").is_err());
    w.finish().unwrap();
    let a = Archive::open(&path).unwrap();
    assert_eq!(a.tags(), &["a"]);
    assert!(!a.entry_names().any(|n| n.starts_with("dropped/")));
    let t = a.tag("a").unwrap();
    // The same tensor twice in one tag: one file, both names point at it.
    assert_eq!(
        t.params()[0].location.entry(),
        t.params()[1].location.entry()
    );
    let meta = t.metadata().unwrap().unwrap();
    let v: serde_json::Value = serde_json::from_slice(&meta).unwrap();
    assert_eq!(v["description"], "d");
    assert!(v["created"].is_string());
    let text = String::from_utf8(a.entry_bytes("a/params.txt").unwrap().into_owned()).unwrap();
    assert_eq!(text, "x 0\nx_again 0\n");
    assert!(a.verify().is_ok(), "{:?}", a.verify().problems);
}

#[test]
fn second_identical_tag_costs_under_one_percent() {
    let (_d, path) = tmp();
    let big = |name: &str| {
        let mut t = TagBuilder::new(name);
        for i in 0..20 {
            t = t.param(
                format!("w{i}"),
                Tensor::from_slice(vec![64, 64], &values(i, 4096)).unwrap(),
            );
        }
        t
    };
    write(&path, vec![big("one")]);
    let one = std::fs::metadata(&path).unwrap().len();
    write(&path, vec![big("one"), big("two")]);
    let two = std::fs::metadata(&path).unwrap().len();
    assert!(
        (two - one) * 100 < one,
        "second tag added {} of {one} bytes",
        two - one
    );
    let a = Archive::open(&path).unwrap();
    assert!(
        a.tag("two")
            .unwrap()
            .params()
            .iter()
            .all(|p| p.location.shared)
    );
}

#[test]
fn deflated_and_unaligned_entries_from_other_tools_are_read() {
    let (_d, path) = tmp();
    let t = Tensor::from_slice(vec![3], &[1.0f32, 2.0, 3.0]).unwrap();
    let mut rec = Vec::new();
    modelzip::tensor::encode_tensor(&t.view(), &mut rec).unwrap();
    let script = r#"
import sys, zipfile
rec = bytes.fromhex(sys.argv[2])
with zipfile.ZipFile(sys.argv[1], "w") as z:
    z.writestr("tags.txt", "py\n", compress_type=zipfile.ZIP_DEFLATED)
    z.writestr("py/params.txt", "w 0\nv 1\n", compress_type=zipfile.ZIP_DEFLATED)
    z.writestr("py/params/0.lodtensor", rec, compress_type=zipfile.ZIP_DEFLATED)
    z.writestr("py/params/1.lodtensor", rec, compress_type=zipfile.ZIP_STORED)
"#;
    let hex: String = rec.iter().map(|b| format!("{b:02x}")).collect();
    let st = std::process::Command::new("python3")
        .args(["-c", script])
        .arg(&path)
        .arg(hex)
        .status()
        .unwrap();
    assert!(st.success());
    let a = Archive::open(&path).unwrap();
    let tag = a.tag("py").unwrap();
    let w = tag.param("w").unwrap();
    assert!(matches!(w, TensorData::Owned(_)));
    assert_eq!(w.view().to_vec::<f32>().unwrap(), vec![1.0, 2.0, 3.0]);
    let v = tag.param("v").unwrap();
    assert!(v.is_mapped());
    assert_eq!(v.view().to_vec::<f32>().unwrap(), vec![1.0, 2.0, 3.0]);
    // A tiny inflate limit is enforced.
    let limit = |max_inflated_size| OpenOptions {
        max_inflated_size,
        ..OpenOptions::default()
    };
    let small = limit(2).open(&path);
    assert!(matches!(
        small.unwrap_err().kind(),
        ErrorKind::LimitExceeded { .. }
    ));
    let a = limit(20).open(&path).unwrap();
    let e = a.tag("py").unwrap().param("w").unwrap_err();
    assert!(matches!(e.kind(), ErrorKind::LimitExceeded { .. }), "{e}");
}

#[test]
fn archives_with_data_descriptors_from_python_and_info_zip_have_no_dead_bytes() {
    // Written by tests/fixtures/foreign/make.sh: streamed writes, whose entries are
    // followed by 16- or 24-byte data descriptors.
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/foreign");
    for file in [
        "python-streamed.zip",
        "infozip-fd.zip",
        "infozip-pipe.zip",
        "infozip-stdin.zip",
    ] {
        let (_d, path) = tmp();
        std::fs::copy(dir.join(file), &path).unwrap();
        let a = Archive::open(&path).unwrap_or_else(|e| panic!("{file}: {e}"));
        assert_eq!(a.dead_bytes(), 0, "{file}");
        assert!(a.verify().is_ok(), "{file}: {:?}", a.verify());
        let w = a.tag("t").unwrap().param("w").unwrap();
        assert_eq!(
            w.view().to_vec::<f32>().unwrap(),
            [1.0, 2.0, 3.0, 4.0],
            "{file}"
        );
        drop(a);
        // An in-place append keeps the foreign entries (and their descriptors) where they
        // are and overwrites the old central directory; tags.txt, the first entry, is
        // written anew, so its header, data and descriptor (up to the second local
        // header) are the only dead bytes.
        let bytes = std::fs::read(&path).unwrap();
        let tags_txt = 1 + bytes[1..]
            .windows(4)
            .position(|w| w == b"PK\x03\x04")
            .unwrap() as u64;
        let t = Tensor::from_slice(vec![2], &[5.0f32, 6.0]).unwrap();
        modelzip::append_tag(
            &path,
            TagBuilder::new("more").param("v", t),
            AppendMode::InPlace,
            &WriteOptions::default(),
        )
        .unwrap();
        let a = Archive::open(&path).unwrap();
        assert_eq!(a.dead_bytes(), tags_txt, "{file} after an append");
        assert!(
            a.verify().is_ok(),
            "{file} after an append: {:?}",
            a.verify()
        );
    }
}

/// Builds a zip with the zip crate from (name, bytes) pairs.
fn zip_of(path: &Path, files: &[(&str, &[u8])]) {
    let mut z = zip::ZipWriter::new(std::fs::File::create(path).unwrap());
    let o =
        zip::write::SimpleFileOptions::default().compression_method(zip::CompressionMethod::Stored);
    for (n, b) in files {
        z.start_file(*n, o).unwrap();
        z.write_all(b).unwrap();
    }
    z.finish().unwrap();
}

fn open_err(path: &Path, files: &[(&str, &[u8])]) -> modelzip::Error {
    zip_of(path, files);
    match Archive::open(path) {
        Ok(a) => a.tag(a.default_tag().unwrap()).unwrap_err(),
        Err(e) => e,
    }
}

#[test]
fn hostile_and_malformed_archives_are_refused_with_location() {
    let (_d, p) = tmp();
    let rec = {
        let mut r = Vec::new();
        let t = Tensor::from_slice(vec![1], &[1.0f32]).unwrap();
        modelzip::tensor::encode_tensor(&t.view(), &mut r).unwrap();
        r
    };
    let e = open_err(&p, &[("a/params.txt", b"w 0\n")]);
    assert!(
        matches!(e.kind(), ErrorKind::MissingEntry(n) if n == "tags.txt"),
        "{e}"
    );
    let e = open_err(&p, &[("tags.txt", b"a\nA\n")]);
    assert_eq!(e.location().line, Some(2), "{e}");
    let e = open_err(&p, &[("tags.txt", b"ok\nCOM3.txt\n")]);
    assert!(matches!(e.kind(), ErrorKind::InvalidTagName { .. }), "{e}");
    let e = open_err(
        &p,
        &[("tags.txt", b"a\n"), ("a/params.txt", b"w 0\nbroken\n")],
    );
    assert_eq!(e.location().entry.as_deref(), Some("a/params.txt"));
    assert_eq!(e.location().line, Some(2));
    assert!(e.to_string().contains("line 2"), "{e}");
    let e = open_err(&p, &[("tags.txt", b"a\n"), ("a/params.txt", b"w%2 0\n")]);
    assert_eq!(e.location().line, Some(1), "{e}");
    let e = open_err(&p, &[("tags.txt", b"a\n"), ("a/params.txt", b"w 0\nw 0\n")]);
    assert!(e.to_string().contains("twice"), "{e}");
    let e = open_err(
        &p,
        &[("tags.txt", b"a\n"), ("a/params.txt", b"w other/0\n")],
    );
    assert!(e.to_string().contains("does not list"), "{e}");
    let e = open_err(&p, &[("tags.txt", b"a\n"), ("a/params.txt", b"w 3\n")]);
    assert!(
        matches!(e.kind(), ErrorKind::MissingEntry(n) if n == "a/params/3.lodtensor"),
        "{e}"
    );
    let e = open_err(&p, &[("tags.txt", b"a\n"), ("../evil", b"x")]);
    assert!(matches!(e.kind(), ErrorKind::UnsafeName { .. }), "{e}");
    let e = open_err(&p, &[("tags.txt", b"a\n"), ("/abs", b"x")]);
    assert!(matches!(e.kind(), ErrorKind::UnsafeName { .. }), "{e}");
    let e = open_err(&p, &[("tags.txt", b"a\n"), ("a\\b", b"x")]);
    assert!(matches!(e.kind(), ErrorKind::UnsafeName { .. }), "{e}");
    // A tensor with trailing bytes names the entry and offset.
    let mut bad = rec.clone();
    bad.push(0);
    zip_of(
        &p,
        &[
            ("tags.txt", b"a\n"),
            ("a/params.txt", b"w 0\n"),
            ("a/params/0.lodtensor", &bad),
        ],
    );
    let a = Archive::open(&p).unwrap();
    let e = a.tag("a").unwrap().param("w").unwrap_err();
    assert_eq!(e.location().entry.as_deref(), Some("a/params/0.lodtensor"));
    assert_eq!(e.location().offset, Some(rec.len() as u64));
    assert!(!a.verify().is_ok());
    // Unlisted tag dirs and listed tags without files: reported by verify, not fatal.
    zip_of(
        &p,
        &[
            ("tags.txt", b"a\nghost\n"),
            ("a/params.txt", b""),
            ("stray/x", b"1"),
        ],
    );
    let a = Archive::open(&p).unwrap();
    let msgs: Vec<String> = a
        .verify()
        .problems
        .iter()
        .map(|p| p.message.clone())
        .collect();
    assert!(
        msgs.iter()
            .any(|m| m.contains("ghost") && m.contains("no files")),
        "{msgs:?}"
    );
    assert!(msgs.iter().any(|m| m.contains("stray/")), "{msgs:?}");
}

#[test]
fn symlinks_and_corrupt_headers_are_refused() {
    let (_d, p) = tmp();
    let mut z = zip::ZipWriter::new(std::fs::File::create(&p).unwrap());
    let o = zip::write::SimpleFileOptions::default();
    z.start_file("tags.txt", o).unwrap();
    z.write_all(b"a\n").unwrap();
    z.add_symlink("a/link", "/etc/passwd", o).unwrap();
    z.finish().unwrap();
    let e = Archive::open(&p).unwrap_err();
    assert!(e.to_string().contains("symbolic link"), "{e}");

    // Every single-byte corruption and every truncation of a real archive: an error or a
    // successful open, never a panic.
    write(&p, vec![sample_tag("t", 3)]);
    let good = std::fs::read(&p).unwrap();
    let step = (good.len() / 300).max(1);
    for i in (0..good.len()).step_by(step) {
        let mut b = good.clone();
        b[i] ^= 0x5a;
        if let Ok(a) = Archive::from_reader(std::io::Cursor::new(&b)) {
            let _ = a.verify();
            if let Ok(t) = a.latest() {
                for p in t.params() {
                    let _ = t.tensor(&p.location);
                }
            }
        }
        let _ = Archive::from_reader(std::io::Cursor::new(&good[..i]));
    }
    // A local header whose name disagrees with the central directory. The open reads
    // no tensor's local header: the read of that entry refuses it, with where; so do
    // verify and every writer (which check every local header before they write).
    let local_name = |pos: usize| {
        let n = u16::from_le_bytes([good[pos + 26], good[pos + 27]]) as usize;
        String::from_utf8_lossy(&good[pos + 30..pos + 30 + n]).into_owned()
    };
    let pos = (0..good.len() - 4)
        .find(|&i| &good[i..i + 4] == b"PK\x03\x04" && local_name(i).ends_with(".lodtensor"))
        .unwrap();
    let name = local_name(pos);
    let mut b = good.clone();
    b[pos + 30] ^= 1;
    let a = Archive::from_reader(std::io::Cursor::new(&b)).unwrap();
    let t = a.latest().unwrap();
    let loc = t
        .params()
        .iter()
        .find(|p| p.location.entry() == name)
        .unwrap()
        .location
        .clone();
    for e in [
        a.tensor(&loc).unwrap_err(),
        t.tensor_owned(&loc).unwrap_err(),
        a.entry_bytes(&name).unwrap_err(),
    ] {
        assert!(e.to_string().contains("local header name"), "{e}");
        assert_eq!(e.location().offset, Some(pos as u64));
        assert_eq!(e.location().entry.as_deref(), Some(name.as_str()));
    }
    let others = t.params().iter().filter(|p| p.location.entry() != name);
    for p in others {
        t.tensor(&p.location).unwrap();
    }
    let r = a.verify();
    assert!(
        r.problems
            .iter()
            .any(|f| f.entry.as_deref() == Some(name.as_str())
                && f.message.contains("local header name")),
        "{:?}",
        r.problems
    );
    drop(t);
    drop(a);
    std::fs::write(&p, &b).unwrap();
    let e = modelzip::compact(&p, &modelzip::WriteOptions::default()).unwrap_err();
    assert!(e.to_string().contains("local header name"), "{e}");
    assert_eq!(e.location().offset, Some(pos as u64));
    let e = modelzip::append_tag(
        &p,
        sample_tag("u", 1),
        modelzip::AppendMode::InPlace,
        &modelzip::WriteOptions::default(),
    )
    .unwrap_err();
    assert!(e.to_string().contains("local header name"), "{e}");
    assert_eq!(
        std::fs::read(&p).unwrap(),
        b,
        "a refused write changed the file"
    );
    let beside: Vec<_> = std::fs::read_dir(p.parent().unwrap())
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| !n.ends_with(".lock"))
        .collect();
    assert_eq!(beside.len(), 1, "{beside:?}");
}

#[test]
fn zip64_entry_count() {
    let (_d, path) = tmp();
    let n = 70_000u32;
    let opts = modelzip::WriteOptions {
        fsync: false,
        ..Default::default()
    };
    let mut w = ArchiveWriter::create_with(&path, &opts).unwrap();
    let mut t = w.begin_tag("many").unwrap();
    for i in 0..n {
        let x = Tensor::from_slice(vec![1], &[i as i32]).unwrap();
        t.param(&format!("p{i}"), &x.view()).unwrap();
    }
    t.finish().unwrap();
    w.finish().unwrap();
    let a = Archive::open(&path).unwrap();
    assert!(a.entry_names().count() > 65_535);
    let t = a.tag("many").unwrap();
    assert_eq!(t.params().len(), n as usize);
    assert_eq!(
        t.param("p69999").unwrap().view().to_vec::<i32>().unwrap(),
        vec![69_999]
    );
    external_tools_accept(&path);
}

#[test]
#[ignore = "writes a 4.3 GB file"]
fn zip64_large_file() {
    let (_d, path) = tmp();
    let opts = modelzip::WriteOptions {
        fsync: false,
        ..Default::default()
    };
    let mut w = ArchiveWriter::create_with(&path, &opts).unwrap();
    let mut t = w.begin_tag("big").unwrap();
    let n = (4u64 << 30) / 4 + 1024;
    let x =
        Tensor::from_bytes(modelzip::DType::Fp32, vec![n], vec![0u8; (n * 4) as usize]).unwrap();
    t.param("huge", &x.view()).unwrap();
    drop(x);
    let y = Tensor::from_slice(vec![2], &[1.0f32, 2.0]).unwrap();
    t.param("after", &y.view()).unwrap();
    t.finish().unwrap();
    w.finish().unwrap();
    let a = Archive::open(&path).unwrap();
    let t = a.tag("big").unwrap();
    assert_eq!(t.param("huge").unwrap().view().dims(), &[n]);
    assert_eq!(
        t.param("after").unwrap().view().to_vec::<f32>().unwrap(),
        vec![1.0, 2.0]
    );
    external_tools_accept(&path);
}

#[test]
fn failed_writer_leaves_no_temp_file_and_old_archive_intact() {
    let (dir, path) = tmp();
    write(&path, vec![sample_tag("old", 1)]);
    let before = std::fs::read(&path).unwrap();
    let mut w = ArchiveWriter::create(&path).unwrap();
    w.add_tag(sample_tag("new", 2)).unwrap();
    drop(w);
    assert_eq!(std::fs::read(&path).unwrap(), before);
    assert!(stray_files(dir.path(), &path).is_empty());
}

/// Bytes that are not a graph in the encoding their name claims: PIR JSON (what Paddle 3
/// writes by default) as graph.pdmodel, random bytes as graph.fb, and a graph.fb with the
/// right identifier and garbage after it.
fn bad_graphs() -> [(&'static str, GraphFormat, Vec<u8>); 3] {
    let pir = br#"{"program": {"regions": []}, "base_code": {"magic": "pir"}}"#.to_vec();
    let mut x = 0x2545_f491_4f6c_dd1du64;
    let random: Vec<u8> = (0..300)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            (x >> 24) as u8
        })
        .collect();
    let mut with_id = random.clone();
    with_id[4..8].copy_from_slice(b"MZGF");
    [
        ("pir", GraphFormat::ProgramDesc, pir),
        ("rand", GraphFormat::FlatBuffers, random),
        ("fbid", GraphFormat::FlatBuffers, with_id),
    ]
}

/// `verify` decodes each tag's graph as the readers do and names the entry that does not
/// decode; a graph that decodes is not reported.
#[test]
fn verify_reports_graphs_that_do_not_decode() {
    let (_d, p) = tmp();
    let bad = bad_graphs();
    let names: Vec<String> = bad
        .iter()
        .map(|(t, enc, _)| format!("{t}/{}", enc.file_name()))
        .collect();
    let good = sample_graph();
    let mut files: Vec<(&str, &[u8])> = vec![("tags.txt", b"pir\nrand\nfbid\ngood\n")];
    let tables: Vec<String> = bad
        .iter()
        .map(|(t, ..)| format!("{t}/params.txt"))
        .collect();
    for ((_, _, bytes), (name, table)) in bad.iter().zip(names.iter().zip(&tables)) {
        files.push((name, bytes));
        files.push((table, b""));
    }
    files.push(("good/graph.pdmodel", &good));
    files.push(("good/params.txt", b""));
    zip_of(&p, &files);
    let a = Archive::open(&p).unwrap();
    let r = a.verify();
    assert_eq!(r.problems.len(), 3, "{:?}", r.problems);
    for (name, problem) in names.iter().zip(&r.problems) {
        assert_eq!(problem.entry.as_deref(), Some(name.as_str()), "{problem:?}");
        assert!(
            problem.message.contains("the graph does not decode"),
            "{problem:?}"
        );
    }
    assert!(
        r.problems[0].message.contains("ProgramDesc"),
        "{:?}",
        r.problems[0]
    );
    assert!(
        r.problems[1].message.contains("identifier"),
        "{:?}",
        r.problems[1]
    );
    assert!(
        r.problems[2].message.contains("verification failed"),
        "{:?}",
        r.problems[2]
    );
}

/// The writers refuse graph bytes that do not decode, saying which encoding was expected,
/// and write nothing of the tag; `replace_graph` too.
#[test]
fn writers_refuse_graphs_that_do_not_decode() {
    let (_d, p) = tmp();
    write(&p, vec![sample_tag("a", 1)]);
    let before = std::fs::read(&p).unwrap();
    for (_, enc, bytes) in bad_graphs() {
        let mut w = ArchiveWriter::create(&p).unwrap();
        let e = w
            .add_tag(TagBuilder::new("t").graph(enc, bytes.clone()))
            .unwrap_err();
        assert!(matches!(e.kind(), ErrorKind::Graph(_)), "{e}");
        assert!(e.to_string().contains(enc.file_name()), "{e}");
        drop(w);
        let e = modelzip::append_tag(
            &p,
            TagBuilder::new("t").graph(enc, bytes.clone()),
            modelzip::AppendMode::InPlace,
            &modelzip::WriteOptions::default(),
        )
        .unwrap_err();
        assert!(matches!(e.kind(), ErrorKind::Graph(_)), "{e}");
        let e = modelzip::replace_graph(&p, "a", enc, &bytes, &modelzip::WriteOptions::default())
            .unwrap_err();
        assert!(matches!(e.kind(), ErrorKind::Graph(_)), "{e}");
        assert_eq!(std::fs::read(&p).unwrap(), before, "the archive changed");
    }
}

/// Methods of the entries of `path` by name (0 stored, 8 deflated).
fn methods(path: &Path) -> std::collections::BTreeMap<String, u16> {
    let mut z = zip::ZipArchive::new(std::fs::File::open(path).unwrap()).unwrap();
    (0..z.len())
        .map(|i| {
            let f = z.by_index_raw(i).unwrap();
            let m = match f.compression() {
                zip::CompressionMethod::Stored => 0,
                zip::CompressionMethod::Deflated => 8,
                other => panic!("{other:?}"),
            };
            (f.name().unwrap().to_string(), m)
        })
        .collect()
}

/// The graph (either encoding) and trainingConfig.fb are deflated like the text files, so an
/// identical second tag with a real Paddle graph costs under 1% of a 330 kB first tag;
/// appends, rewrites, conversion and compaction keep every entry's method; tensors stay
/// stored; `deflate_text: false` stores everything.
#[test]
fn graphs_are_deflated_so_an_identical_tag_with_a_graph_costs_under_one_percent() {
    use modelzip::convert_graph;
    use modelzip::{AppendMode, WriteOptions, append_tag};
    use modelzip::{Removal, compact, remove_tags};
    let (_d, path) = tmp();
    let model = std::fs::read(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/paddle/3.3.1/mlp.pdmodel"),
    )
    .unwrap();
    let tag = |name: &str| {
        let mut t = TagBuilder::new(name)
            .graph(GraphFormat::ProgramDesc, model.clone())
            .training_config(modelzip::TrainingConfig::sgd(0.1).encode().unwrap());
        for i in 0..20 {
            t = t.param(
                format!("w{i}"),
                Tensor::from_slice(vec![64, 64], &values(i, 4096)).unwrap(),
            );
        }
        t
    };
    write(&path, vec![tag("one")]);
    let one = std::fs::metadata(&path).unwrap().len();
    let opts = WriteOptions::default();
    append_tag(&path, tag("two"), AppendMode::InPlace, &opts).unwrap();
    let two = std::fs::metadata(&path).unwrap().len();
    assert!(
        (two - one) * 100 < one,
        "an identical tag with a {} B graph added {} of {one} bytes",
        model.len(),
        two - one
    );
    let deflated_ok = |m: &std::collections::BTreeMap<String, u16>| {
        for (name, method) in m {
            // metadata.json, tags.txt and a tiny trainingConfig.fb may not shrink when
            // deflated; they are stored then.
            let want = if name.ends_with(".lodtensor") {
                0
            } else if name.ends_with("/graph.pdmodel")
                || name.ends_with("/graph.fb")
                || name.ends_with("/params.txt")
                || name.ends_with("/sha256sums.txt")
            {
                8
            } else {
                continue;
            };
            assert_eq!(*method, want, "{name}: {m:?}");
        }
    };
    deflated_ok(&methods(&path));
    append_tag(&path, tag("three"), AppendMode::Rewrite, &opts).unwrap();
    deflated_ok(&methods(&path));
    let r = convert_graph(&path, "two", GraphFormat::FlatBuffers, &opts).unwrap();
    assert!(r.changed);
    let m = methods(&path);
    assert_eq!(m["two/graph.fb"], 8);
    deflated_ok(&m);
    remove_tags(&path, Removal::tags(["one"]), &WriteOptions::default()).unwrap();
    compact(&path, &WriteOptions::default()).unwrap();
    deflated_ok(&methods(&path));
    let a = Archive::open(&path).unwrap();
    assert_eq!(a.tags(), ["two", "three"]);
    assert_eq!(
        &*a.tag("three").unwrap().graph().unwrap().unwrap().1,
        &model[..]
    );
    assert!(a.verify().is_ok(), "{:?}", a.verify().problems);
    drop(a);
    // Deflating off: every entry stored.
    let stored = WriteOptions {
        deflate_text: false,
        ..WriteOptions::default()
    };
    let mut w = ArchiveWriter::create_with(&path, &stored).unwrap();
    w.add_tag(tag("one")).unwrap();
    w.finish().unwrap();
    assert!(
        methods(&path).values().all(|m| *m == 0),
        "{:?}",
        methods(&path)
    );
}

/// metadata.json is a JSON object (FORMAT.md): valid JSON of another kind is a finding.
#[test]
fn verify_reports_a_metadata_json_that_is_not_an_object() {
    let (_d, p) = tmp();
    for (bytes, finding) in [
        (&b"[1, 2]"[..], Some("not a JSON object")),
        (b" \"text\"", Some("not a JSON object")),
        (b"{", Some("not valid JSON")),
        (b"\n {\"created\": \"2026-11-26T00:00:00Z\"}", None),
    ] {
        zip_of(
            &p,
            &[
                ("tags.txt", b"t\n"),
                ("t/params.txt", b""),
                ("t/metadata.json", bytes),
            ],
        );
        let r = Archive::open(&p).unwrap().verify();
        match finding {
            None => assert!(r.is_ok(), "{:?}", r.problems),
            Some(message) => {
                assert_eq!(r.problems.len(), 1, "{:?}", r.problems);
                assert_eq!(r.problems[0].entry.as_deref(), Some("t/metadata.json"));
                assert!(
                    r.problems[0].message.contains(message),
                    "{:?}",
                    r.problems[0]
                );
            }
        }
    }
}

/// `verify` decodes trainingConfig.fb too; a garbage one is named.
#[test]
fn verify_reports_a_training_config_that_does_not_decode() {
    let (_d, p) = tmp();
    zip_of(
        &p,
        &[
            ("tags.txt", b"t\n"),
            ("t/params.txt", b""),
            (
                "t/trainingConfig.fb",
                b"\x10\x00\x00\x00garbage-not-a-flatbuffer",
            ),
        ],
    );
    let a = Archive::open(&p).unwrap();
    let r = a.verify();
    assert_eq!(r.problems.len(), 1, "{:?}", r.problems);
    assert_eq!(r.problems[0].entry.as_deref(), Some("t/trainingConfig.fb"));
    assert!(
        r.problems[0]
            .message
            .contains("the training config does not decode"),
        "{:?}",
        r.problems[0]
    );
}

/// A directory given as the archive says so with the OS's "is a directory" kind (Python
/// raises IsADirectoryError); mapping it failed with "No such device (os error 19)".
#[test]
fn a_directory_opened_as_an_archive_is_an_is_a_directory_error() {
    let dir = tempfile::tempdir().unwrap();
    let e = Archive::open(dir.path()).unwrap_err();
    let ErrorKind::Io(io) = e.kind() else {
        panic!("not an I/O error: {e}");
    };
    assert_eq!(io.kind(), std::io::ErrorKind::IsADirectory, "{e}");
    assert!(
        e.to_string().contains("is a directory, not an archive"),
        "{e}"
    );
    assert_eq!(e.location().file.as_deref(), Some(dir.path()));
}

/// The journal of an in-place append cut short is recognised as the file's (and
/// replayed) when its entries have data descriptors or Zip64 local headers, as other
/// writers make them: the check reads the saved directory and the local headers with
/// the parser every open uses. Replayed onto another archive, it is refused.
#[test]
fn a_journal_is_checked_against_foreign_entries_by_the_open_parser() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/foreign");
    let files = [
        "python-streamed.zip",
        "infozip-fd.zip",
        "infozip-pipe.zip",
        "infozip-stdin.zip",
    ];
    for (i, file) in files.iter().enumerate() {
        let (d, path) = tmp();
        std::fs::copy(dir.join(file), &path).unwrap();
        let before = std::fs::read(&path).unwrap();
        let journal = d.path().join("model.zip.journal");
        let mut ap = modelzip::Appender::open(&path, AppendMode::InPlace).unwrap();
        let saved = std::fs::read(&journal).unwrap();
        let t = Tensor::from_slice(vec![2], &[5.0f32, 6.0]).unwrap();
        ap.add_tag(TagBuilder::new("more").param("v", t)).unwrap();
        ap.finish().unwrap();
        // A crash after the append's bytes, before the journal's deletion.
        std::fs::write(&journal, &saved).unwrap();
        let a = Archive::open(&path).unwrap_or_else(|e| panic!("{file}: {e}"));
        assert_eq!(a.tags(), ["t"], "{file}");
        drop(a);
        assert_eq!(std::fs::read(&path).unwrap(), before, "{file}: rolled back");
        assert!(!journal.exists(), "{file}");
        // The same journal beside another writer's archive of the same tags.
        let other = dir.join(files[(i + 1) % files.len()]);
        std::fs::copy(&other, &path).unwrap();
        std::fs::write(&journal, &saved).unwrap();
        let e = Archive::open(&path).unwrap_err();
        assert!(
            matches!(e.kind(), ErrorKind::ForeignJournal { .. }),
            "{file}: {e}"
        );
    }
}
