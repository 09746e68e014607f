//! A graph (and trainingConfig.fb) identical to an earlier tag's is stored once and
//! referenced through the later tag's shared.txt; removals, prunes, compaction and
//! graph conversion keep every tag's graph whole.

use crate::support::write_opts as opts;
use modelzip::{
    AppendMode, Archive, ArchiveWriter, Removal, TagBuilder, Tensor, WriteOptions, append_tag,
    compact, remove_tags,
};
use modelzip::{GraphFormat, convert_graph};
use std::path::{Path, PathBuf};

fn model() -> Vec<u8> {
    std::fs::read(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/paddle/3.3.1/mlp.pdmodel"),
    )
    .unwrap()
}

fn tag(name: &str, graph: &[u8]) -> TagBuilder {
    let mut t = TagBuilder::new(name)
        .graph(GraphFormat::ProgramDesc, graph.to_vec())
        .training_config(modelzip::TrainingConfig::sgd(0.1).encode().unwrap());
    for i in 0..22 {
        let v: Vec<f32> = (0..64).map(|j| (i * 64 + j) as f32).collect();
        t = t.param(format!("w{i}"), Tensor::from_slice(vec![64], &v).unwrap());
    }
    t
}

/// Archive with tags s1, s2, s3 (identical, graph included), appended in place.
fn three(dir: &Path) -> (PathBuf, Vec<u8>) {
    let path = dir.join("m.zip");
    let g = model();
    let mut w = ArchiveWriter::create_with(&path, &opts()).unwrap();
    w.add_tag(tag("s1", &g)).unwrap();
    w.finish().unwrap();
    for n in ["s2", "s3"] {
        append_tag(&path, tag(n, &g), AppendMode::InPlace, &opts()).unwrap();
    }
    (path, g)
}

fn graph_of(a: &Archive, t: &str) -> Vec<u8> {
    let (enc, g) = a.tag(t).unwrap().graph().unwrap().unwrap();
    assert_eq!(enc, GraphFormat::ProgramDesc);
    g.into_owned()
}

fn check_whole(path: &Path, tags: &[&str], g: &[u8]) {
    let a = Archive::open(path).unwrap();
    let r = a.verify();
    assert!(r.is_ok(), "{:?}", r.problems);
    assert_eq!(a.tags(), tags);
    let cfg = modelzip::TrainingConfig::sgd(0.1).encode().unwrap();
    for t in tags {
        assert_eq!(graph_of(&a, t), g, "graph of {t}");
        let tc = a.tag(t).unwrap().training_config().unwrap().unwrap();
        assert_eq!(&*tc, cfg.as_slice(), "training config of {t}");
    }
}

#[test]
fn an_identical_tag_with_a_graph_costs_under_one_kib() {
    let d = tempfile::tempdir().unwrap();
    let path = d.path().join("m.zip");
    let g = model();
    assert!(g.len() > 5_000);
    let mut w = ArchiveWriter::create_with(&path, &opts()).unwrap();
    w.add_tag(tag("s1", &g)).unwrap();
    w.finish().unwrap();
    let one = std::fs::metadata(&path).unwrap().len();
    append_tag(&path, tag("s2", &g), AppendMode::InPlace, &opts()).unwrap();
    let two = std::fs::metadata(&path).unwrap().len();
    assert!(
        two - one < 1024,
        "an identical tag with a {} B graph added {} bytes",
        g.len(),
        two - one
    );
    let a = Archive::open(&path).unwrap();
    assert!(a.entry_stored_size("s2/graph.pdmodel").is_none());
    assert!(a.entry_stored_size("s2/trainingConfig.fb").is_none());
    assert_eq!(
        a.entry_bytes("s2/shared.txt").unwrap().as_ref(),
        b"graph.pdmodel s1\ntrainingConfig.fb s1\n"
    );
    assert_eq!(
        a.tag("s2").unwrap().shared_files(),
        &[("graph.pdmodel", "s1"), ("trainingConfig.fb", "s1")]
    );
    check_whole(&path, &["s1", "s2"], &g);
    // A different graph is stored, not shared.
    let other = modelzip::Graph::decode(modelzip::GraphFormat::ProgramDesc, &g)
        .unwrap()
        .encode(GraphFormat::FlatBuffers)
        .unwrap();
    let t = TagBuilder::new("s3").graph(GraphFormat::FlatBuffers, other);
    append_tag(&path, t, AppendMode::Rewrite, &opts()).unwrap();
    let a = Archive::open(&path).unwrap();
    assert!(a.entry_stored_size("s3/graph.fb").is_some());
    assert!(a.verify().is_ok());
}

#[test]
fn removing_the_owner_keeps_every_other_tag_whole() {
    let d = tempfile::tempdir().unwrap();
    // By rewrite.
    let (path, g) = three(d.path());
    remove_tags(&path, Removal::tags(["s1"]), &WriteOptions::default()).unwrap();
    check_whole(&path, &["s2", "s3"], &g);
    let a = Archive::open(&path).unwrap();
    assert!(
        a.entry_stored_size("s2/graph.pdmodel").is_some(),
        "re-homed into the oldest user"
    );
    assert!(
        a.entry_stored_size("s2/shared.txt").is_none(),
        "its every line was re-homed"
    );
    assert_eq!(
        a.tag("s3").unwrap().shared_files(),
        &[("graph.pdmodel", "s2"), ("trainingConfig.fb", "s2")]
    );
    drop(a);
    compact(&path, &WriteOptions::default()).unwrap();
    check_whole(&path, &["s2", "s3"], &g);
    remove_tags(&path, Removal::tags(["s2"]), &WriteOptions::default()).unwrap();
    check_whole(&path, &["s3"], &g);

    // In place.
    let d = tempfile::tempdir().unwrap();
    let (path, g) = three(d.path());
    remove_tags(&path, Removal::tags(["s1"]).in_place(true), &opts()).unwrap();
    check_whole(&path, &["s2", "s3"], &g);
    // Pruning the two oldest at once.
    let d = tempfile::tempdir().unwrap();
    let (path, g) = three(d.path());
    remove_tags(&path, Removal::keep_newest(1), &opts()).unwrap();
    check_whole(&path, &["s3"], &g);
    let a = Archive::open(&path).unwrap();
    assert!(
        a.entry_stored_size("s3/graph.pdmodel").is_some()
            && a.entry_stored_size("s3/shared.txt").is_none()
    );
}

#[test]
fn converting_a_shared_graph_changes_only_that_tag() {
    let d = tempfile::tempdir().unwrap();
    // The owner's graph: the users keep the old one.
    let (path, g) = three(d.path());
    convert_graph(&path, "s1", GraphFormat::FlatBuffers, &opts()).unwrap();
    let a = Archive::open(&path).unwrap();
    assert!(a.verify().is_ok(), "{:?}", a.verify().problems);
    assert_eq!(
        a.tag("s1").unwrap().graph().unwrap().unwrap().0,
        GraphFormat::FlatBuffers
    );
    assert_eq!(graph_of(&a, "s2"), g);
    assert_eq!(graph_of(&a, "s3"), g);
    assert!(a.entry_stored_size("s2/graph.pdmodel").is_some());
    drop(a);
    // A user's graph: it gets its own.
    let d = tempfile::tempdir().unwrap();
    let (path, g) = three(d.path());
    convert_graph(&path, "s3", GraphFormat::FlatBuffers, &opts()).unwrap();
    let a = Archive::open(&path).unwrap();
    assert!(a.verify().is_ok(), "{:?}", a.verify().problems);
    assert!(a.entry_stored_size("s3/graph.fb").is_some());
    assert_eq!(
        a.tag("s3").unwrap().shared_files(),
        &[("trainingConfig.fb", "s1")]
    );
    assert_eq!(graph_of(&a, "s1"), g);
    assert_eq!(graph_of(&a, "s2"), g);
}

#[test]
fn bad_shared_txt_is_refused_with_its_line() {
    use std::io::Write;
    let d = tempfile::tempdir().unwrap();
    let p = d.path().join("bad.zip");
    let write = |shared: &[u8], extra: bool| {
        let f = std::fs::File::create(&p).unwrap();
        let mut z = zip::ZipWriter::new(f);
        let o = zip::write::SimpleFileOptions::default()
            .compression_method(zip::CompressionMethod::Stored);
        z.start_file("tags.txt", o).unwrap();
        z.write_all(b"a\nb\n").unwrap();
        for t in ["a", "b"] {
            z.start_file(format!("{t}/params.txt"), o).unwrap();
        }
        if extra {
            z.start_file("a/graph.pdmodel", o).unwrap();
            z.write_all(b"x").unwrap();
        }
        z.start_file("b/shared.txt", o).unwrap();
        z.write_all(shared).unwrap();
        z.finish().unwrap();
    };
    for (shared, extra, want) in [
        (&b"graph.pdmodel c\n"[..], true, "does not list"),
        (b"graph.pdmodel b\n", true, "the tag itself"),
        (b"graph.pdmodel a\n", false, "a/graph.pdmodel"),
        (b"metadata.json a\n", true, "cannot be shared"),
        (b"graph.pdmodel a\ngraph.pdmodel a\n", true, "listed twice"),
    ] {
        write(shared, extra);
        let a = Archive::open(&p).unwrap();
        let e = a.tag("b").unwrap_err();
        assert!(e.to_string().contains(want), "{e}");
        assert_eq!(e.location().entry.as_deref(), Some("b/shared.txt"), "{e}");
        assert!(e.location().line.is_some(), "{e}");
        assert!(!a.verify().is_ok());
    }
}
