//! `modelzip::extract` called as a library (the CLI's `extract` suites in cli/ and
//! alias_amplification.rs run the same code through the binary): the report, the typed
//! limit errors, the refusal of an existing file, and nothing left behind on failure.

use modelzip::extract::{BYTES_LIMIT, ExtractOptions, FILES_LIMIT, extract};
use modelzip::{Archive, ArchiveWriter, ErrorKind, TagBuilder, Tensor};
use std::path::Path;

fn archive(path: &Path) {
    let w = Tensor::from_slice(vec![4], &[1.0f32, 2.0, 3.0, 4.0]).unwrap();
    let mut writer = ArchiveWriter::create(path).unwrap();
    writer
        .add_tag(
            TagBuilder::new("t")
                .param("a", w.clone())
                .param("b", w.clone())
                .param("d/c", w),
        )
        .unwrap();
    writer.finish().unwrap();
}

#[test]
fn a_tag_extracts_with_a_report_of_what_was_written() {
    let dir = tempfile::tempdir().unwrap();
    let zip = dir.path().join("m.zip");
    archive(&zip);
    let a = Archive::open(&zip).unwrap();
    let tag = a.tag("T").unwrap();
    let out = dir.path().join("new/out");
    let r = extract(&tag, &out, &ExtractOptions::default()).unwrap();
    assert_eq!(r.tag, "t");
    assert_eq!(r.graph_file, None);
    assert_eq!(r.paths, ["a", "b", "d/c"]);
    assert_eq!((r.files, r.links), (3, 0));
    let on_disk: u64 = r
        .paths
        .iter()
        .map(|p| std::fs::metadata(out.join(p)).unwrap().len())
        .sum();
    assert_eq!(r.bytes, on_disk);
    // Again: the files exist (an io AlreadyExists error, nothing changed); with
    // force and link, the two further names of the one tensor file are links.
    let e = extract(&tag, &out, &ExtractOptions::default()).unwrap_err();
    assert!(
        matches!(e.kind(), ErrorKind::Io(io) if io.kind() == std::io::ErrorKind::AlreadyExists),
        "{e}"
    );
    let opts = ExtractOptions {
        force: true,
        link: true,
        ..ExtractOptions::default()
    };
    let r = extract(&tag, &out, &opts).unwrap();
    assert_eq!(r.links, 2);
}

#[test]
fn limits_are_typed_errors_and_nothing_is_created() {
    let dir = tempfile::tempdir().unwrap();
    let zip = dir.path().join("m.zip");
    archive(&zip);
    let a = Archive::open(&zip).unwrap();
    let tag = a.latest().unwrap();
    let out = dir.path().join("x/y");
    let few = ExtractOptions {
        max_files: 2,
        ..ExtractOptions::default()
    };
    let e = extract(&tag, &out, &few).unwrap_err();
    assert!(
        matches!(e.kind(), ErrorKind::LimitExceeded { what, size: 3, limit: 2 } if *what == FILES_LIMIT),
        "{e}"
    );
    let small = ExtractOptions {
        max_output: Some(10),
        ..ExtractOptions::default()
    };
    let e = extract(&tag, &out, &small).unwrap_err();
    assert!(
        matches!(e.kind(), ErrorKind::LimitExceeded { what, limit: 10, .. } if *what == BYTES_LIMIT),
        "{e}"
    );
    assert!(!dir.path().join("x").exists());
}

#[test]
fn a_failed_extract_removes_the_files_and_directories_it_made() {
    let dir = tempfile::tempdir().unwrap();
    let zip = dir.path().join("m.zip");
    archive(&zip);
    let a = Archive::open(&zip).unwrap();
    let tag = a.latest().unwrap();
    let out = dir.path().join("out");
    std::fs::create_dir(&out).unwrap();
    // "b" is in the way: a and the new directory... are removed again, b is kept.
    std::fs::write(out.join("b"), b"mine").unwrap();
    let e = extract(&tag, &out, &ExtractOptions::default()).unwrap_err();
    assert!(e.to_string().contains("the file exists"), "{e}");
    let left: Vec<_> = std::fs::read_dir(&out)
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert_eq!(left, ["b"]);
    assert_eq!(std::fs::read(out.join("b")).unwrap(), b"mine");
}

/// Every name is written under a temporary name and renamed into place only once all
/// are written: a failed `force` extract leaves the files it would have replaced as they
/// were (here `w1`, before `w2` is found to be a directory), and no temporary.
#[test]
fn a_failed_force_extract_keeps_the_files_it_would_have_replaced() {
    let dir = tempfile::tempdir().unwrap();
    let zip = dir.path().join("m.zip");
    let w = Tensor::from_slice(vec![2], &[1.0f32, 2.0]).unwrap();
    let mut writer = ArchiveWriter::create(&zip).unwrap();
    writer
        .add_tag(TagBuilder::new("t").param("w1", w.clone()).param("w2", w))
        .unwrap();
    writer.finish().unwrap();
    let a = Archive::open(&zip).unwrap();
    let tag = a.tag("t").unwrap();
    let out = dir.path().join("out");
    std::fs::create_dir(&out).unwrap();
    std::fs::write(out.join("w1"), b"OLD").unwrap();
    std::fs::create_dir(out.join("w2")).unwrap();
    let names = || {
        let mut v: Vec<_> = std::fs::read_dir(&out)
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .collect();
        v.sort();
        v
    };
    for link in [false, true] {
        let opts = ExtractOptions {
            force: true,
            link,
            ..ExtractOptions::default()
        };
        let e = extract(&tag, &out, &opts).unwrap_err();
        assert!(e.to_string().contains("a directory is in the way"), "{e}");
        assert_eq!(
            std::fs::read(out.join("w1")).unwrap(),
            b"OLD",
            "link: {link}"
        );
        assert_eq!(names(), ["w1", "w2"], "link: {link}");
    }
    // Without the directory in the way, w1 is replaced by the complete new file.
    std::fs::remove_dir(out.join("w2")).unwrap();
    let opts = ExtractOptions {
        force: true,
        ..ExtractOptions::default()
    };
    extract(&tag, &out, &opts).unwrap();
    assert_eq!(names(), ["w1", "w2"]);
    let bytes = std::fs::read(out.join("w1")).unwrap();
    let got = modelzip::tensor::decode_tensor(&bytes).unwrap();
    assert_eq!(got.to_f32_vec().unwrap(), [1.0, 2.0]);
}
