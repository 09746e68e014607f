//! Cost follows files, not names (issue 30): archives valid by docs/FORMAT.md in which
//! many manifest lines, tags or names point at few files. Each command's work — entries
//! inflated, headers decoded, entries hashed, graphs decoded — must be what the distinct
//! files need, never a multiple of the references. Asserted as counts (the library's
//! work counters, `modelzip::internals`, and the CLI's report of them under
//! `MODELZIP_TEST_WORK`), not as times.
//!
//! The first archive is committed (tests/hostile); the other two (15 MB and 2.5 MB) are
//! written at run time by the same generator, `tests/hostile/make_hostile.py --shape`.

use modelzip::Archive;
use modelzip::internals::{WorkCounts, work_counts};
use std::path::{Path, PathBuf};
use std::process::Command;

fn hostile(file: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/hostile")
        .join(file)
}

/// Writes the generator's archive `name` into `dir`.
fn generated(dir: &Path, name: &str) -> PathBuf {
    let out = dir.join(name);
    let status = Command::new("python3")
        .arg(hostile("make_hostile.py"))
        .args(["--shape", name])
        .arg(&out)
        .status()
        .expect("python3 runs tests/hostile/make_hostile.py");
    assert!(status.success(), "make_hostile.py --shape {name}");
    out
}

/// Runs `modelzip ARGS ARCHIVE [extra]`; returns its exit code and the work it reports.
fn cli_work(args: &[&str], archive: &Path, extra: &[&Path]) -> (i32, WorkCounts, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_modelzip"))
        .args(args)
        .arg(archive)
        .args(extra)
        .env("MODELZIP_TEST_WORK", "1")
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    let line = stderr
        .lines()
        .find_map(|l| l.strip_prefix("modelzip-test-work "))
        .unwrap_or_else(|| panic!("{args:?}: no work line in {stderr:?}"));
    let mut w = WorkCounts::default();
    for field in line.split(' ') {
        let (k, v) = field.split_once('=').unwrap();
        let v: u64 = v.parse().unwrap();
        match k {
            "inflated" => w.inflated = v,
            "head_inflated" => w.head_inflated = v,
            "heads_decoded" => w.heads_decoded = v,
            "hashed" => w.hashed = v,
            "graphs_decoded" => w.graphs_decoded = v,
            "graph_checks" => w.graph_checks = v,
            _ => panic!("unknown field {k}"),
        }
    }
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    (out.status.code().unwrap_or(-1), w, stdout)
}

fn counts(inflated: u64, head_inflated: u64, heads: u64, hashed: u64, graphs: u64) -> WorkCounts {
    WorkCounts {
        inflated,
        head_inflated,
        heads_decoded: heads,
        hashed,
        graphs_decoded: graphs,
        graph_checks: 0,
    }
}

/// Work of each of `tags`, `show`, `verify` and `extract` on `archive`.
fn assert_commands(archive: &Path, want: [(&str, i32, WorkCounts); 4]) {
    let d = tempfile::tempdir().unwrap();
    let out = d.path().join("out");
    for (command, code, expected) in want {
        let (got_code, got, stdout) = match command {
            "extract" => cli_work(&["extract"], archive, &[Path::new("--out"), &out]),
            c => cli_work(&[c], archive, &[]),
        };
        assert_eq!(got_code, code, "{command}: {stdout}");
        assert_eq!(got, expected, "{command}");
    }
}

#[test]
fn a_manifest_listing_one_entry_30000_times_hashes_it_once_and_says_so() {
    // tags.txt and params.txt stored, the 16 MiB tensor and sha256sums.txt deflated.
    let path = hostile("sha256sums-lists-one-16mib-entry-30000-times.zip");
    let a = Archive::open(&path).unwrap();
    let report = a.verify();
    let dup: Vec<_> = report
        .problems
        .iter()
        .filter(|p| p.message.contains("30000 times"))
        .collect();
    assert_eq!(dup.len(), 1, "{:?}", report.problems);
    assert_eq!(dup[0].entry.as_deref(), Some("t/sha256sums.txt"));
    assert_eq!(report.problems.len(), 1, "{:?}", report.problems);
    // The manifest and the tensor inflated once each; params.txt and the tensor hashed
    // once each.
    assert_eq!(work_counts(&a), counts(2, 0, 0, 2, 0));
    assert_commands(
        &path,
        [
            // The open reads nothing deflated; the tensor's header is inflated alone.
            ("tags", 0, counts(0, 1, 1, 0, 0)),
            ("show", 0, counts(1, 0, 0, 0, 0)),
            ("verify", 1, counts(2, 0, 0, 2, 0)),
            // The header for the size check, the whole tensor to write it.
            ("extract", 0, counts(1, 1, 1, 0, 0)),
        ],
    );
}

#[test]
fn sixty_thousand_tags_sharing_one_graph_decode_it_once() {
    let d = tempfile::tempdir().unwrap();
    let path = generated(d.path(), "tags-60000-share-one-graph.zip");
    let a = Archive::open(&path).unwrap();
    assert_eq!(a.tags().len(), 60_000);
    // tags.txt (deflated) is inflated by the open: 1 before anything else.
    assert_eq!(work_counts(&a), counts(1, 0, 0, 0, 0));
    let report = a.verify();
    assert!(
        report.is_ok(),
        "{:?}",
        &report.problems[..3.min(report.problems.len())]
    );
    // The graph: checked once in the pass over the entries, decoded once.
    assert_eq!(work_counts(&a), counts(3, 0, 0, 0, 1));
    assert_commands(
        &path,
        [
            // The graph is not read: its entry's name says its encoding.
            ("tags", 0, counts(1, 0, 1, 0, 0)),
            ("show", 0, counts(1, 0, 0, 0, 0)),
            ("verify", 0, counts(3, 0, 0, 0, 1)),
            // The graph, written as __model__.
            ("extract", 0, counts(2, 0, 1, 0, 0)),
        ],
    );
}

#[test]
fn six_thousand_tags_sharing_32_deflated_tensors_inflate_each_header_once() {
    let d = tempfile::tempdir().unwrap();
    let path = generated(d.path(), "tags-6000-share-32-deflated-tensors.zip");
    let a = Archive::open(&path).unwrap();
    let summaries = a.tag_summaries().unwrap();
    assert_eq!(summaries.len(), 6_000);
    assert_eq!(summaries[5_999].params, 32);
    assert_eq!(summaries[5_999].shared_bytes, summaries[1].shared_bytes);
    // tags.txt by the open; each tensor's header, inflated as far as the header, once.
    assert_eq!(work_counts(&a), counts(1, 32, 32, 0, 0));
    assert_commands(
        &path,
        [
            ("tags", 0, counts(1, 32, 32, 0, 0)),
            // The newest tag's 32 tensors, read whole once each.
            ("show", 0, counts(33, 0, 0, 0, 0)),
            ("verify", 0, counts(33, 0, 0, 0, 0)),
            ("extract", 0, counts(33, 32, 32, 0, 0)),
        ],
    );
}

#[test]
fn tags_sharing_a_tensorflow_graph_and_its_parameters_check_its_references_once() {
    // Six imports of one GraphDef: the later tags reference the first's graph
    // (shared.txt) and its tensor files (params.txt), so their tables are the same.
    let d = tempfile::tempdir().unwrap();
    let zip = d.path().join("tf.zip");
    let pb = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/tf/cnn.pb");
    for i in 0..6 {
        let tag = format!("t{i}");
        modelzip::interop::tf::import_graphdef_file(
            &zip,
            &tag,
            &pb,
            &crate::support::import_opts(),
        )
        .unwrap();
    }
    let a = Archive::open(&zip).unwrap();
    assert_eq!(a.tag("t5").unwrap().shared_files().len(), 1);
    let report = a.verify();
    assert!(report.is_ok(), "{:?}", report.problems);
    let w = work_counts(&a);
    assert_eq!((w.graphs_decoded, w.graph_checks), (1, 1), "{w:?}");
}

/// `src` rewritten by the `zip` crate: every entry deflated, and each tag's params.txt
/// replaced by `params(tag)` when it gives one.
pub(crate) fn deflated_copy(src: &Path, params: impl Fn(&str) -> Option<String>) -> Vec<u8> {
    use std::io::{Read, Write};
    let mut r = zip::ZipArchive::new(std::fs::File::open(src).unwrap()).unwrap();
    let mut w = zip::ZipWriter::new(std::io::Cursor::new(Vec::new()));
    let deflated = zip::write::SimpleFileOptions::default()
        .compression_method(zip::CompressionMethod::Deflated);
    for i in 0..r.len() {
        let mut f = r.by_index(i).unwrap();
        let name = f.name().unwrap().to_string();
        let mut bytes = Vec::new();
        f.read_to_end(&mut bytes).unwrap();
        if let Some(text) = name.strip_suffix("/params.txt").and_then(&params) {
            bytes = text.into_bytes();
        }
        w.start_file(name, deflated).unwrap();
        w.write_all(&bytes).unwrap();
    }
    w.finish().unwrap().into_inner()
}

/// Diffing two tags whose 3,000 names point at one pair of deflated tensor files
/// inflates each file once: the pair is compared once, and `changed()` reads nothing
/// again. The same when one side is INT8 and every name's `@scale` sibling points at one
/// scale file (the comparison depends on the scale, so it is keyed on it too).
#[test]
fn a_diff_of_3000_names_on_one_pair_of_files_reads_each_file_once() {
    use modelzip::{ArchiveWriter, TagBuilder, Tensor};
    let d = tempfile::tempdir().unwrap();
    let plain = d.path().join("plain.zip");
    let mut w = ArchiveWriter::create(&plain).unwrap();
    let x = Tensor::from_slice(vec![4], &[1.0f32, 2.0, 3.0, 4.0]).unwrap();
    let y = Tensor::from_slice(vec![4], &[1.0f32, 2.0, 3.0, 5.0]).unwrap();
    let q = Tensor::from_slice(vec![4], &[10i8, 20, 30, 40]).unwrap();
    let s = Tensor::from_slice(vec![1], &[0.1f32]).unwrap();
    w.add_tag(TagBuilder::new("a").param("p0", x)).unwrap();
    w.add_tag(TagBuilder::new("b").param("p0", y)).unwrap();
    w.add_tag(TagBuilder::new("q").param("p0", q).param("p0@scale", s))
        .unwrap();
    w.finish().unwrap();
    let n = 3000;
    let lines = |f: &dyn Fn(usize) -> String| (0..n).map(f).collect::<String>();
    let bytes = deflated_copy(&plain, |tag| match tag {
        "a" | "b" => Some(lines(&|i| format!("p{i} 0\n"))),
        "q" => Some(lines(&|i| format!("p{i} 0\np{i}@scale 1\n"))),
        _ => None,
    });
    let path = d.path().join("names.zip");
    std::fs::write(&path, bytes).unwrap();
    let a = Archive::open(&path).unwrap();
    // The tables, read before the diff.
    for t in ["a", "b", "q"] {
        assert_eq!(
            a.tag(t).unwrap().params().len(),
            if t == "q" { 2 * n } else { n }
        );
    }
    let before = work_counts(&a).inflated;
    let diff = modelzip::variants::compare_tags(&a, "a", "b").unwrap();
    let changed: Vec<_> = diff.changed().collect();
    assert_eq!(changed.len(), n);
    assert_eq!(changed[n - 1].max_abs_diff, Some(1.0));
    assert_eq!(changed[n - 1].dims_b, [4]);
    // Each side's tensor, once.
    assert_eq!(work_counts(&a).inflated - before, 2);

    let before = work_counts(&a).inflated;
    let diff = modelzip::variants::compare_tags(&a, "a", "q").unwrap();
    let changed: Vec<_> = diff.changed().collect();
    assert_eq!(changed.len(), n);
    assert!(changed.iter().all(|c| c.dequantized));
    assert_eq!(changed[0].max_abs_diff, Some(0.0));
    // The FP32 tensor, the INT8 one and its scale, once each, and each tag's
    // metadata.json (its per-channel axes) once.
    assert_eq!(work_counts(&a).inflated - before, 5);
}

/// A safetensors export of a tag whose 2,000 names list one deflated tensor file
/// inflates that file once (it was inflated, and the copy kept, once per name): the
/// same work as a tag listing it under one name.
#[test]
fn a_safetensors_export_of_2000_names_on_one_deflated_file_inflates_it_once() {
    use modelzip::{ArchiveWriter, TagBuilder, Tensor};
    let d = tempfile::tempdir().unwrap();
    let plain = d.path().join("plain.zip");
    let mut w = ArchiveWriter::create(&plain).unwrap();
    let x = Tensor::from_slice(vec![64], &[1.5f32; 64]).unwrap();
    let y = Tensor::from_slice(vec![64], &[2.5f32; 64]).unwrap();
    w.add_tag(TagBuilder::new("one").param("p0", x)).unwrap();
    w.add_tag(TagBuilder::new("many").param("p0", y)).unwrap();
    w.finish().unwrap();
    let n = 2000;
    let bytes = deflated_copy(&plain, |tag| {
        (tag == "many").then(|| (0..n).map(|i| format!("p{i} 0\n")).collect())
    });
    let path = d.path().join("names.zip");
    std::fs::write(&path, bytes).unwrap();
    let a = Archive::open(&path).unwrap();
    let mut inflated = Vec::new();
    for t in ["one", "many"] {
        let tag = a.tag(t).unwrap();
        let before = work_counts(&a).inflated;
        let out = modelzip::interop::safetensors::export_safetensors_bytes(&tag).unwrap();
        inflated.push(work_counts(&a).inflated - before);
        let names = if t == "one" { 1 } else { n };
        assert!(out.len() > names * 256, "{t}: {} bytes", out.len());
    }
    assert_eq!(inflated[0], inflated[1], "{inflated:?}");
}
