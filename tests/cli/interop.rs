//! `modelzip import` / `modelzip export`: format detection, --format, and the Paddle
//! format through the generic surface (the TensorFlow format has tests/tf_interop.rs).

use super::harness::{expect_error, fixture, json_of, modelzip};
use std::path::PathBuf;

fn paddle(file: &str) -> PathBuf {
    fixture(&format!("paddle/2.6.2/{file}"))
}

#[test]
fn paddle_files_are_detected_imported_and_exported_byte_for_byte() {
    let dir = tempfile::tempdir().unwrap();
    let zip = dir.path().join("m.zip");
    let r = json_of(
        modelzip()
            .arg("import")
            .arg(&zip)
            .args(["--tag", "fp32"])
            .arg(paddle("mlp.pdmodel"))
            .arg(paddle("mlp.pdiparams"))
            .arg("--json"),
    );
    assert_eq!(r["format"], "paddle");
    assert_eq!(r["graph"], "graph.pdmodel");
    assert_eq!(r["created"], true);
    // A persistables directory with its model: the same tensors, all shared.
    let r = json_of(
        modelzip()
            .arg("import")
            .arg(&zip)
            .args(["--tag", "dir"])
            .arg(paddle("mlp_persistables"))
            .arg(paddle("mlp.pdmodel"))
            .arg("--json"),
    );
    assert_eq!(r["format"], "paddle");
    let params = r["params"].as_array().unwrap();
    assert!(!params.is_empty());
    assert!(params.iter().all(|p| p["shared_from"] == "fp32"), "{r}");
    // Export without --format: the tag's own format.
    let prefix = dir.path().join("out");
    let e = json_of(
        modelzip()
            .arg("export")
            .arg(&zip)
            .args(["--tag", "fp32", "--out"])
            .arg(&prefix)
            .arg("--json"),
    );
    assert_eq!(e["format"], "paddle");
    assert_eq!(e["files"].as_array().unwrap().len(), 2);
    for ext in ["pdmodel", "pdiparams"] {
        let got = std::fs::read(dir.path().join(format!("out.{ext}"))).unwrap();
        let want = std::fs::read(paddle(&format!("mlp.{ext}"))).unwrap();
        assert!(got == want, "out.{ext} differs from the original");
    }
    // --out NAME.pdmodel is the prefix NAME; an existing file is refused without --force.
    let again = dir.path().join("out.pdmodel");
    let msg = expect_error(
        modelzip()
            .arg("export")
            .arg(&zip)
            .args(["--tag", "fp32", "--format", "paddle", "--out"])
            .arg(&again),
    );
    assert!(msg.contains("already exists"), "{msg}");
}

#[test]
fn paddle_content_is_detected_without_the_extension() {
    let dir = tempfile::tempdir().unwrap();
    let model = dir.path().join("model.bin");
    std::fs::copy(paddle("mlp.pdmodel"), &model).unwrap();
    let zip = dir.path().join("m.zip");
    let r = json_of(
        modelzip()
            .arg("import")
            .arg(&zip)
            .args(["--tag", "t"])
            .arg(&model)
            .arg(paddle("mlp.pdiparams"))
            .arg("--json"),
    );
    assert_eq!(r["format"], "paddle");
}

#[test]
fn a_file_of_no_known_format_is_refused_saying_what_was_tried() {
    let dir = tempfile::tempdir().unwrap();
    let junk = dir.path().join("notes.txt");
    std::fs::write(&junk, "hello, not a model\n").unwrap();
    let zip = dir.path().join("m.zip");
    let msg = expect_error(
        modelzip()
            .arg("import")
            .arg(&zip)
            .args(["--tag", "t"])
            .arg(&junk),
    );
    assert!(
        msg.contains("not a model file of any known format"),
        "{msg}"
    );
    assert!(msg.contains("paddle ("), "{msg}");
    assert!(msg.contains("notes.txt"), "{msg}");
    assert!(!zip.exists(), "nothing is created for a refused import");
    let msg = expect_error(
        modelzip()
            .arg("import")
            .arg(&zip)
            .args(["--tag", "t", "--format", "onnx"])
            .arg(&junk),
    );
    assert!(msg.contains("unknown format \"onnx\""), "{msg}");
}
