//! `--json` of the writing commands (pack, rm, prune, compact, extract), their human
//! lines, and that progress bars never reach a stderr that is not a terminal.

use super::harness::{expect_error, fixture, json_of, modelzip};
use serde_json::{Value, json};
use std::path::{Path, PathBuf};

fn persistables() -> PathBuf {
    fixture("paddle/3.3.1/mlp_persistables")
}

fn mlp_model() -> PathBuf {
    fixture("paddle/3.3.1/mlp.pdmodel")
}

const PARAMS: [&str; 4] = ["fc_0.b_0", "fc_0.w_0", "fc_1.b_0", "fc_1.w_0"];

fn pack_json(archive: &Path, tag: &str, extra: &[&str]) -> Value {
    json_of(
        modelzip()
            .arg("pack")
            .arg(archive)
            .arg(persistables())
            .args(["--tag", tag, "--json"])
            .args(extra),
    )
}

fn tag_names(archive: &Path) -> Vec<String> {
    json_of(modelzip().arg("tags").arg(archive).arg("--json"))["tags"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["name"].as_str().unwrap().to_string())
        .collect()
}

fn file_size(p: &Path) -> u64 {
    std::fs::metadata(p).unwrap().len()
}

/// An archive with tags one, two, three, each the same four params (two and three
/// reference one's files).
fn three_tags(dir: &Path) -> PathBuf {
    let a = dir.join("m.zip");
    for t in ["one", "two", "three"] {
        modelzip()
            .arg("pack")
            .arg(&a)
            .arg(persistables())
            .args(["--tag", t, "-q"])
            .assert()
            .success();
    }
    a
}

#[test]
fn pack_json_reports_mode_counts_sharing_and_graph() {
    let dir = tempfile::tempdir().unwrap();
    let a = dir.path().join("m.zip");
    let model = mlp_model();
    let doc = pack_json(&a, "fp32", &["--graph", model.to_str().unwrap()]);
    assert_eq!(
        doc,
        json!({"archive": a.display().to_string(), "tag": "fp32", "created": true,
               "mode": "new", "params": 4, "updater_arrays": 0, "shared": 0,
               "graph": "programdesc"})
    );
    let doc = pack_json(&a, "Step-2", &[]);
    assert_eq!(doc["tag"], "Step-2");
    assert_eq!(doc["created"], false);
    assert_eq!(doc["mode"], "in_place");
    assert_eq!(doc["params"], 4);
    assert_eq!(doc["shared"], 4);
    assert_eq!(doc["graph"], Value::Null);
    let doc = pack_json(&a, "step-3", &["--rewrite"]);
    assert_eq!(doc["mode"], "rewrite");
    assert_eq!(doc["created"], false);
    assert_eq!(doc["shared"], 4);
    assert_eq!(tag_names(&a), ["fp32", "Step-2", "step-3"]);
}

#[test]
fn pack_json_counts_updater_arrays_and_their_sharing() {
    let dir = tempfile::tempdir().unwrap();
    let src = persistables();
    let upd = dir.path().join("adam");
    for p in ["fc_0.w_0", "fc_1.w_0"] {
        std::fs::create_dir_all(upd.join(p)).unwrap();
        std::fs::copy(src.join(p), upd.join(p).join("0_m")).unwrap();
        std::fs::copy(src.join("fc_1.b_0"), upd.join(p).join("1_v")).unwrap();
    }
    let a = dir.path().join("m.zip");
    let upd = upd.to_str().unwrap();
    let doc = pack_json(&a, "step-1", &["--updater", upd]);
    assert_eq!(doc["params"], 4);
    assert_eq!(doc["updater_arrays"], 4);
    // Arrays equal to params of the same tag are not shared with older tags.
    assert_eq!(doc["shared"], 0);
    let doc = pack_json(&a, "step-2", &["--updater", upd]);
    assert_eq!(doc["updater_arrays"], 4);
    assert_eq!(doc["shared"], 8);
}

#[test]
fn pack_prints_one_summary_line_or_nothing_with_q() {
    let dir = tempfile::tempdir().unwrap();
    let a = dir.path().join("m.zip");
    let run = |tag: &str, extra: &[&str]| {
        let out = modelzip()
            .arg("pack")
            .arg(&a)
            .arg(persistables())
            .args(["--tag", tag])
            .args(extra)
            .output()
            .unwrap();
        assert!(out.status.success());
        assert!(
            out.stderr.is_empty(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8(out.stdout).unwrap()
    };
    assert_eq!(
        run("a", &[]),
        format!(
            "created archive with tag a in {}: 4 param(s), 0 shared with older tags\n",
            a.display()
        )
    );
    assert_eq!(
        run("b", &[]),
        format!(
            "added tag b in {}: 4 param(s), 4 shared with older tags\n",
            a.display()
        )
    );
    assert_eq!(run("c", &["-q"]), "");
    // --json and -q do not go together.
    modelzip()
        .arg("pack")
        .arg(&a)
        .arg(persistables())
        .args(["--tag", "d", "--json", "-q"])
        .assert()
        .code(2);
}

#[test]
fn prune_json_lists_removed_and_kept_tags() {
    let dir = tempfile::tempdir().unwrap();
    let a = three_tags(dir.path());
    let before = file_size(&a);
    let doc = json_of(
        modelzip()
            .arg("prune")
            .arg(&a)
            .args(["--keep", "1", "--json"]),
    );
    assert_eq!(doc["archive"], a.display().to_string());
    assert_eq!(doc["removed"], json!(["one", "two"]));
    assert_eq!(doc["kept"], json!(["three"]));
    // three referenced one's four files: they moved into three.
    assert_eq!(doc["rehomed"], 4);
    assert_eq!(doc["before_bytes"], before);
    assert_eq!(doc["after_bytes"], file_size(&a));
    assert_eq!(tag_names(&a), ["three"]);
    let doc = json_of(
        modelzip()
            .arg("prune")
            .arg(&a)
            .args(["--keep", "1", "--json"]),
    );
    assert_eq!(doc["removed"], json!([]));
    assert_eq!(doc["kept"], json!(["three"]));
    assert_eq!(doc["rehomed"], 0);
    modelzip().arg("verify").arg(&a).assert().success();
}

#[test]
fn rm_json_names_the_tag_as_stored_and_what_moved() {
    let dir = tempfile::tempdir().unwrap();
    let a = three_tags(dir.path());
    let doc = json_of(modelzip().arg("rm").arg(&a).args(["TWO", "--json"]));
    assert_eq!(doc["removed"], json!(["two"]));
    assert_eq!(doc["kept"], json!(["one", "three"]));
    // two owns no tensor files (it references one's): nothing to move.
    assert_eq!(doc["rehomed"], 0);
    assert_eq!(doc["after_bytes"], file_size(&a));
    let doc = json_of(modelzip().arg("rm").arg(&a).args(["one", "--json"]));
    assert_eq!(doc["removed"], json!(["one"]));
    assert_eq!(doc["kept"], json!(["three"]));
    assert_eq!(doc["rehomed"], 4);
    assert_eq!(tag_names(&a), ["three"]);
    let out = modelzip().arg("rm").arg(&a).arg("THREE").output().unwrap();
    assert!(out.status.success());
    assert_eq!(
        String::from_utf8(out.stdout).unwrap(),
        "removed tag three\n"
    );
}

#[test]
fn compact_json_after_bytes_is_the_new_file_size() {
    let dir = tempfile::tempdir().unwrap();
    let a = three_tags(dir.path());
    let before = file_size(&a);
    let doc = json_of(modelzip().arg("compact").arg(&a).arg("--json"));
    assert_eq!(
        doc,
        json!({"archive": a.display().to_string(), "before_bytes": before,
               "after_bytes": file_size(&a)})
    );
    // In-place appends left dead bytes (old central directories, tags.txt files).
    assert!(file_size(&a) < before, "{doc}");
    let again = json_of(modelzip().arg("compact").arg(&a).arg("--json"));
    assert_eq!(again["before_bytes"], again["after_bytes"]);
    modelzip().arg("verify").arg(&a).assert().success();
}

#[test]
fn extract_json_lists_the_files_written() {
    let dir = tempfile::tempdir().unwrap();
    let a = dir.path().join("m.zip");
    let model = mlp_model();
    pack_json(&a, "fp32", &["--graph", model.to_str().unwrap()]);
    pack_json(&a, "bare", &[]);
    let out = dir.path().join("out");
    let doc = json_of(
        modelzip()
            .arg("extract")
            .arg(&a)
            .args(["--tag", "FP32", "--json", "--out"])
            .arg(&out),
    );
    assert_eq!(doc["archive"], a.display().to_string());
    assert_eq!(doc["tag"], "fp32");
    assert_eq!(doc["out"], out.display().to_string());
    let mut expected = vec!["__model__"];
    expected.extend(PARAMS);
    assert_eq!(doc["files"], json!(expected));
    for f in doc["files"].as_array().unwrap() {
        assert!(out.join(f.as_str().unwrap()).is_file(), "{f}");
    }
    assert_eq!(
        std::fs::read(out.join("fc_0.w_0")).unwrap(),
        std::fs::read(persistables().join("fc_0.w_0")).unwrap()
    );
    // The default tag, no graph.
    let out2 = dir.path().join("out2");
    let doc = json_of(
        modelzip()
            .arg("extract")
            .arg(&a)
            .args(["--json", "--out"])
            .arg(&out2),
    );
    assert_eq!(doc["tag"], "bare");
    assert_eq!(doc["files"], json!(PARAMS));
    assert_eq!(std::fs::read_dir(&out2).unwrap().count(), 4);
}

/// Runs `args`, expects success and an empty stderr, returns stdout.
fn quiet_stderr(args: &[&std::ffi::OsStr]) -> String {
    let out = modelzip().args(args).output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{args:?}: {stderr}");
    assert!(stderr.is_empty(), "{args:?} wrote to stderr: {stderr:?}");
    String::from_utf8(out.stdout).unwrap()
}

#[test]
fn no_progress_output_when_stderr_is_not_a_terminal() {
    let dir = tempfile::tempdir().unwrap();
    let a = dir.path().join("m.zip");
    let a = a.as_os_str();
    let p = persistables();
    let p = p.as_os_str();
    let m = mlp_model();
    let m = m.as_os_str();
    let params = fixture("paddle/3.3.1/mlp.pdiparams");
    let params = params.as_os_str();
    let out = dir.path().join("out");
    let out = out.as_os_str();
    let s = |x: &'static str| std::ffi::OsStr::new(x);
    // Each command with its human output and with --json (stderr is a pipe here).
    let commands: Vec<Vec<&std::ffi::OsStr>> = vec![
        vec![s("pack"), a, p, s("--tag"), s("fp32"), s("--graph"), m],
        vec![s("pack"), a, p, s("--tag"), s("p2"), s("--json")],
        vec![s("import-paddle"), a, s("--tag"), s("imp"), m, params],
        vec![
            s("import-paddle"),
            a,
            s("--tag"),
            s("imp2"),
            m,
            params,
            s("--json"),
        ],
        vec![
            s("quantize"),
            a,
            s("--from"),
            s("fp32"),
            s("--tag"),
            s("i8"),
        ],
        vec![
            s("quantize"),
            a,
            s("--from"),
            s("fp32"),
            s("--tag"),
            s("i8b"),
            s("--json"),
        ],
        vec![
            s("cast"),
            a,
            s("--from"),
            s("fp32"),
            s("--tag"),
            s("h"),
            s("--dtype"),
            s("fp16"),
        ],
        vec![
            s("cast"),
            a,
            s("--from"),
            s("fp32"),
            s("--tag"),
            s("h2"),
            s("--dtype"),
            s("bf16"),
            s("--json"),
        ],
        vec![s("verify"), a],
        vec![s("verify"), a, s("--json")],
        vec![s("compact"), a],
        vec![s("compact"), a, s("--json")],
        vec![s("rm"), a, s("h2")],
        vec![s("rm"), a, s("h"), s("--json")],
        vec![s("prune"), a, s("--keep"), s("4")],
        vec![s("prune"), a, s("--keep"), s("3"), s("--json")],
        vec![s("extract"), a, s("--out"), out],
        vec![s("extract"), a, s("--out"), out, s("--force"), s("--json")],
    ];
    for args in &commands {
        let stdout = quiet_stderr(args);
        if args.contains(&s("--json")) {
            let v: Result<Value, _> = serde_json::from_str(&stdout);
            assert!(
                v.is_ok(),
                "{args:?}: stdout is not one JSON document: {stdout}"
            );
        } else {
            assert!(!stdout.is_empty(), "{args:?}");
        }
    }
    assert_eq!(tag_names(Path::new(a)), ["imp2", "i8", "i8b"]);
}

/// Runs `modelzip ARGS` under `script` (util-linux) so stdout and stderr are a
/// terminal; returns what the terminal showed, or `None` when `script` is missing.
#[cfg(target_os = "linux")]
fn on_a_terminal(args: &[&str]) -> Option<String> {
    let bin = assert_cmd::cargo::cargo_bin("modelzip");
    let cmd = std::iter::once(bin.to_str().unwrap())
        .chain(args.iter().copied())
        .map(|a| format!("'{a}'"))
        .collect::<Vec<_>>()
        .join(" ");
    let out = std::process::Command::new("script")
        .args(["-qec", &cmd, "/dev/null"])
        .output()
        .ok()?;
    assert!(out.status.success(), "{cmd}: {out:?}");
    Some(String::from_utf8_lossy(&out.stdout).replace('\r', ""))
}

#[test]
#[cfg(target_os = "linux")]
fn on_a_terminal_json_and_q_still_hide_the_bar() {
    let dir = tempfile::tempdir().unwrap();
    let a = three_tags(dir.path());
    let a = a.to_str().unwrap();
    // The control: without --json or -q, the bar is drawn on the terminal.
    let Some(shown) = on_a_terminal(&["verify", a]) else {
        eprintln!("skipped: no `script` command to run on a terminal");
        return;
    };
    assert!(shown.contains("verifying ["), "{shown:?}");
    assert!(shown.ends_with(&format!("{a}: ok (3 tags)\n")), "{shown:?}");
    let shown = on_a_terminal(&["verify", a, "--json"]).unwrap();
    assert!(!shown.contains("verifying"), "{shown:?}");
    let doc: Value = serde_json::from_str(&shown).expect("only the JSON document");
    assert_eq!(doc["ok"], true);
    let shown = on_a_terminal(&["compact", a, "--json"]).unwrap();
    let doc: Value = serde_json::from_str(&shown).expect("only the JSON document");
    assert_eq!(doc["after_bytes"], file_size(Path::new(a)));
    assert_eq!(on_a_terminal(&["compact", a, "-q"]).unwrap(), "");
    let shown = on_a_terminal(&["prune", a, "--keep", "2", "--json"]).unwrap();
    let doc: Value = serde_json::from_str(&shown).expect("only the JSON document");
    assert_eq!(doc["removed"], json!(["one"]));
}

#[test]
fn rm_and_prune_in_place_leave_dead_bytes_that_compact_reclaims() {
    let dir = tempfile::tempdir().unwrap();
    let a = three_tags(dir.path());
    let before = file_size(&a);
    let doc = json_of(
        modelzip()
            .arg("rm")
            .arg(&a)
            .args(["ONE", "--in-place", "--json"]),
    );
    assert_eq!(doc["removed"], json!(["one"]));
    assert_eq!(doc["kept"], json!(["two", "three"]));
    // two and three referenced one's four files: they move into two.
    assert_eq!(doc["rehomed"], json!(4));
    assert_eq!(doc["before_bytes"], json!(before));
    assert_eq!(doc["after_bytes"], json!(file_size(&a)));
    assert_eq!(tag_names(&a), ["two", "three"]);
    modelzip().arg("verify").arg(&a).assert().success();
    // Nothing to prune writes nothing.
    let doc =
        json_of(
            modelzip()
                .arg("prune")
                .arg(&a)
                .args(["--keep", "2", "--in-place", "--json"]),
        );
    assert_eq!(doc["removed"], json!([]));
    assert_eq!(doc["after_bytes"], doc["before_bytes"]);
    let doc =
        json_of(
            modelzip()
                .arg("prune")
                .arg(&a)
                .args(["--keep", "1", "--in-place", "--json"]),
        );
    assert_eq!(doc["removed"], json!(["two"]));
    assert_eq!(tag_names(&a), ["three"]);
    modelzip().arg("verify").arg(&a).assert().success();
    // The removed tags' bytes were left behind: compaction drops them.
    let in_place = file_size(&a);
    let doc = json_of(modelzip().arg("compact").arg(&a).arg("--json"));
    assert_eq!(doc["before_bytes"], json!(in_place));
    assert!(doc["after_bytes"].as_u64().unwrap() < in_place);
    assert_eq!(tag_names(&a), ["three"]);
    let shown = json_of(modelzip().arg("show").arg(&a).arg("--json"));
    let names: Vec<&str> = shown["params"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, PARAMS);
    modelzip().arg("verify").arg(&a).assert().success();
}

#[test]
fn usage_errors_are_one_line_naming_the_command() {
    let line = expect_error(modelzip().args([
        "cast", "a.zip", "--from", "x", "--tag", "y", "--dtype", "fp64",
    ]));
    assert!(line.contains("invalid value 'fp64'"), "{line}");
    assert!(line.contains("possible values: fp16, bf16"), "{line}");
    assert!(line.contains("'modelzip cast --help'"), "{line}");
    let line = expect_error(modelzip().arg("tags"));
    assert!(line.contains("<ARCHIVE>"), "{line}");
    let line = expect_error(modelzip().arg("no-such-command"));
    assert!(line.contains("unrecognized subcommand"), "{line}");
    // Value names are not case sensitive.
    let line = expect_error(modelzip().args([
        "cast",
        "/nonexistent/a.zip",
        "--from",
        "x",
        "--tag",
        "y",
        "--dtype",
        "BF16",
    ]));
    assert!(!line.contains("usage:"), "{line}");
}

/// `tags` prints the same from the summary as from the tables: an archive against its
/// copy without `_summary.txt` (written by another tool, the zip crate, entries raw), in
/// both output forms.
#[test]
fn tags_prints_the_same_from_the_summary_as_from_the_tables() {
    use std::io::Cursor;
    let dir = tempfile::tempdir().unwrap();
    let with = dir.path().join("with.zip");
    let mut w = modelzip::ArchiveWriter::create(&with).unwrap();
    w.add_tag(crate::support::sample_tag("fp32", 1)).unwrap();
    w.add_tag(crate::support::sample_tag("step-2", 2)).unwrap();
    w.finish().unwrap();
    pack_json(&with, "mlp", &["--graph", mlp_model().to_str().unwrap()]);
    let bytes = std::fs::read(&with).unwrap();
    let mut r = zip::ZipArchive::new(Cursor::new(&bytes)).unwrap();
    let mut out = zip::ZipWriter::new(Cursor::new(Vec::new()));
    for i in 0..r.len() {
        let f = r.by_index_raw(i).unwrap();
        if f.name().unwrap() != "_summary.txt" {
            out.raw_copy_file(f).unwrap();
        }
    }
    let without = dir.path().join("without.zip");
    std::fs::write(&without, out.finish().unwrap().into_inner()).unwrap();
    assert!(modelzip::Archive::open(&with).unwrap().summary().is_ok());
    assert_eq!(
        modelzip::Archive::open(&without)
            .unwrap()
            .summary()
            .unwrap_err(),
        modelzip::SummaryStatus::Absent
    );
    let text = |p: &Path| {
        let out = modelzip().arg("tags").arg(p).output().unwrap();
        assert!(out.status.success());
        String::from_utf8(out.stdout).unwrap()
    };
    assert_eq!(text(&with), text(&without));
    assert!(text(&with).contains("programdesc"), "{}", text(&with));
    let json = |p: &Path| {
        let mut v = json_of(modelzip().arg("tags").arg(p).arg("--json"));
        v.as_object_mut().unwrap().remove("archive");
        v
    };
    assert_eq!(json(&with), json(&without));
}
