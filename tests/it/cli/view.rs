//! `pack --step/--metric/--metadata` (the metadata a shell-driven training job stores, as
//! the library's Checkpointer stores it) and `modelzip view --html` through the real binary.

use super::harness::{expect_error, fixture, modelzip};
use modelzip::Archive;
use modelzip::checkpoint::{CheckpointOptions, Checkpointer};
use std::path::Path;

fn pack(archive: &Path, tag: &str, extra: &[&str]) {
    modelzip()
        .arg("pack")
        .arg(archive)
        .arg(fixture("paddle/3.3.1/mlp_persistables"))
        .args(["--tag", tag, "-q"])
        .args(extra)
        .assert()
        .success();
}

fn metadata(archive: &Path, tag: &str) -> serde_json::Value {
    let a = Archive::open(archive).unwrap();
    let t = a.tag(tag).unwrap();
    serde_json::from_slice(&t.metadata().unwrap().expect("metadata.json")).unwrap()
}

#[test]
fn pack_step_and_metrics_make_a_checkpoint_the_library_resumes() {
    let dir = tempfile::tempdir().unwrap();
    let a = dir.path().join("ck.zip");
    pack(
        &a,
        "step-000000100",
        &["--step", "100", "--metric", "loss=0.5"],
    );
    pack(
        &a,
        "step-000000200",
        &[
            "--step",
            "200",
            "--metric",
            "loss=0.25",
            "--metric",
            "lr=1e-4",
        ],
    );
    let m = metadata(&a, "step-000000200");
    assert_eq!(m["step"], 200);
    assert_eq!(m["metrics"], serde_json::json!({"loss": 0.25, "lr": 1e-4}));
    assert!(m["created"].as_str().unwrap().ends_with('Z'));
    let ck = Checkpointer::open(&a, CheckpointOptions::default()).unwrap();
    assert_eq!(
        ck.checkpoints().unwrap(),
        ["step-000000100", "step-000000200"]
    );
    let latest = ck.latest().unwrap().expect("a checkpoint");
    assert_eq!(latest.step, 200);
    assert_eq!(latest.metrics.get("loss"), Some(&0.25));
    assert_eq!(latest.metrics.get("lr"), Some(&1e-4));
}

#[test]
fn pack_metadata_file_is_stored_with_the_step_added() {
    let dir = tempfile::tempdir().unwrap();
    let a = dir.path().join("m.zip");
    let file = dir.path().join("meta.json");
    std::fs::write(&file, r#"{"run": "exp-7", "seed": 3}"#).unwrap();
    let f = file.to_str().unwrap();
    pack(
        &a,
        "s1",
        &["--metadata", f, "--step", "1", "--metric", "acc=0.9"],
    );
    let m = metadata(&a, "s1");
    assert_eq!(m["run"], "exp-7");
    assert_eq!(m["seed"], 3);
    assert_eq!(m["step"], 1);
    assert_eq!(m["metrics"]["acc"], 0.9);
    // Refused before anything is written: a bad metric, a metric without a step, a file
    // that is not a JSON object, a step given twice.
    let bad = dir.path().join("bad.json");
    std::fs::write(&bad, "[1]").unwrap();
    let twice = dir.path().join("twice.json");
    std::fs::write(&twice, r#"{"step": 5}"#).unwrap();
    let b = dir.path().join("b.zip");
    let p = fixture("paddle/3.3.1/mlp_persistables");
    for extra in [
        vec!["--step", "1", "--metric", "loss"],
        vec!["--step", "1", "--metric", "loss=nan"],
        vec!["--metadata", bad.to_str().unwrap()],
        vec!["--metadata", twice.to_str().unwrap(), "--step", "2"],
    ] {
        let line = expect_error(
            modelzip()
                .arg("pack")
                .arg(&b)
                .arg(&p)
                .args(["--tag", "t"])
                .args(&extra),
        );
        assert!(
            line.contains("--metric") || line.contains("--metadata") || line.contains("--step"),
            "{line}"
        );
        assert!(!b.exists(), "{extra:?} wrote {}", b.display());
    }
    let out = modelzip()
        .arg("pack")
        .arg(&b)
        .arg(&p)
        .args(["--tag", "t", "--metric", "loss=1"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
}

#[test]
fn view_help_has_an_example() {
    let out = modelzip().args(["view", "--help"]).output().unwrap();
    assert!(out.status.success());
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(
        text.contains("Example:") && text.contains("modelzip view "),
        "{text}"
    );
    assert!(text.contains("127.0.0.1"), "{text}");
}

#[test]
fn view_html_embeds_the_page_and_its_data() {
    let dir = tempfile::tempdir().unwrap();
    let a = dir.path().join("ck.zip");
    pack(&a, "step-000000001", &["--step", "1", "--metric", "loss=2"]);
    pack(&a, "step-000000002", &["--step", "2", "--metric", "loss=1"]);
    let html = dir.path().join("report.html");
    modelzip()
        .arg("view")
        .arg(&a)
        .arg("--html")
        .arg(&html)
        .assert()
        .success();
    let text = std::fs::read_to_string(&html).unwrap();
    // One file: no script or style fetched, the API's answers embedded.
    assert!(!text.contains("<script src="), "a script is fetched");
    assert!(!text.contains("href=\"app.css\""), "a style is fetched");
    for key in [
        "\"api/archive\"",
        "\"api/tag?name=step-000000002\"",
        "\"api/diff?a=step-000000001&b=step-000000002\"",
        "\"api/graph?tag=step-000000001\"",
    ] {
        assert!(text.contains(key), "{key} missing");
    }
    // A hostile archive: one error line, exit 2, no file.
    let bad = dir.path().join("bad.html");
    let line = expect_error(
        modelzip()
            .arg("view")
            .arg(fixture("../hostile/empty-file.zip"))
            .arg("--html")
            .arg(&bad),
    );
    assert!(line.contains("cannot open"), "{line}");
    assert!(!bad.exists());
}

/// `--html FILE` refuses an existing FILE without --force (it stays as it was), always
/// refuses the archive being read (even through a symlink, even with --force), and with
/// --force replaces FILE; no temp file is left either way.
#[test]
fn view_html_refuses_an_existing_file_and_the_archive() {
    let dir = tempfile::tempdir().unwrap();
    let a = dir.path().join("ck.zip");
    pack(&a, "step-000000001", &["--step", "1"]);
    let archive_bytes = std::fs::read(&a).unwrap();
    let html = dir.path().join("report.html");
    std::fs::write(&html, b"mine").unwrap();
    let view = |file: &Path, extra: &[&str]| {
        let mut c = modelzip();
        c.arg("view").arg(&a).arg("--html").arg(file).args(extra);
        c
    };
    let line = expect_error(&mut view(&html, &[]));
    assert!(
        line.contains("exists") && line.contains("--force"),
        "{line}"
    );
    assert_eq!(std::fs::read(&html).unwrap(), b"mine");
    let mut refusals = vec![a.clone()];
    #[cfg(unix)]
    {
        let link = dir.path().join("link.html");
        std::os::unix::fs::symlink(&a, &link).unwrap();
        refusals.push(link);
    }
    for target in &refusals {
        for extra in [&[][..], &["--force"][..]] {
            let line = expect_error(&mut view(target, extra));
            assert!(line.contains("the archive being read"), "{line}");
            assert_eq!(std::fs::read(&a).unwrap(), archive_bytes, "{extra:?}");
        }
    }
    Archive::open(&a).unwrap();
    view(&html, &["--force"]).assert().success();
    let text = std::fs::read_to_string(&html).unwrap();
    assert!(text.contains("\"api/archive\""), "not replaced");
    let temps: Vec<_> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .filter(|n| n.ends_with(".tmp"))
        .collect();
    assert!(temps.is_empty(), "temp files left: {temps:?}");
}

#[test]
fn import_step_and_metrics_make_a_checkpoint_and_keep_safetensors_metadata() {
    let dir = tempfile::tempdir().unwrap();
    let a = dir.path().join("ck.zip");
    modelzip()
        .arg("import")
        .arg(&a)
        .arg(fixture("onnx/mlp.onnx"))
        .args([
            "--tag",
            "step-000000500",
            "--step",
            "500",
            "--metric",
            "loss=0.42",
            "-q",
        ])
        .assert()
        .success();
    let ck = Checkpointer::open(&a, CheckpointOptions::default()).unwrap();
    let latest = ck.latest().unwrap().expect("a checkpoint");
    assert_eq!(latest.step, 500);
    assert_eq!(latest.metrics.get("loss"), Some(&0.42));
    // safetensors stores metadata of its own: its key is added to the given object.
    let st = fixture("safetensors/all_dtypes.safetensors");
    modelzip()
        .arg("import")
        .arg(&a)
        .arg(&st)
        .args(["--tag", "st", "--step", "600", "--metric", "acc=0.5", "-q"])
        .assert()
        .success();
    let m = metadata(&a, "st");
    assert_eq!(m["step"], 600);
    assert_eq!(m["metrics"]["acc"], 0.5);
    assert!(m.get("safetensors").is_some(), "{m}");
    // import-paddle takes them too.
    modelzip()
        .arg("import-paddle")
        .arg(&a)
        .args(["--tag", "p", "--step", "700"])
        .arg(fixture("paddle/3.3.1/mlp.pdmodel"))
        .arg(fixture("paddle/3.3.1/mlp.pdiparams"))
        .arg("-q")
        .assert()
        .success();
    assert_eq!(metadata(&a, "p")["step"], 700);
}

/// `--html` of three imports of one GraphDef (the later tags share the first's graph and
/// tensor files): the graph's document is embedded once, the other tags point at it
/// (`same_as`; the page resolves it, tests/view's static-page test draws a graph so).
#[test]
fn view_html_embeds_a_shared_graph_once() {
    let dir = tempfile::tempdir().unwrap();
    let zip = dir.path().join("tf.zip");
    let pb = fixture("tf/cnn.pb");
    for t in ["t0", "t1", "t2"] {
        modelzip()
            .args(["import"])
            .arg(&zip)
            .arg(&pb)
            .args(["--tag", t, "-q"])
            .assert()
            .success();
    }
    let html = dir.path().join("page.html");
    let out = modelzip()
        .arg("view")
        .arg(&zip)
        .arg("--html")
        .arg(&html)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = std::fs::read_to_string(&html).unwrap();
    let start = text.find("window.MODELZIP_DATA = ").unwrap() + "window.MODELZIP_DATA = ".len();
    let end = start + text[start..].find(";</script>").unwrap();
    let data: serde_json::Value = serde_json::from_str(&text[start..end]).unwrap();
    let first = &data["api/graph?tag=t0"];
    assert!(
        first["nodes"].as_array().is_some_and(|n| !n.is_empty()),
        "{first}"
    );
    assert_eq!(first["entry"], "t0/graph.fb");
    for t in ["t1", "t2"] {
        assert_eq!(
            data[format!("api/graph?tag={t}")],
            serde_json::json!({"same_as": "api/graph?tag=t0", "tag": t})
        );
    }
    // The three tags' parameters are the same files: described alike.
    let params = |t: &str| data[format!("api/tag?name={t}")]["params"].clone();
    assert_eq!(
        params("t0").as_array().unwrap().len(),
        params("t2").as_array().unwrap().len()
    );
    assert_eq!(
        params("t0")[0]["data_sha256"],
        params("t2")[0]["data_sha256"]
    );
}
