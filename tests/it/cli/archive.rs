//! The archive commands through the real binary: pack, tags, show, cat, verify,
//! rm, prune, compact, extract.

use super::harness::{expect_error, fixture, json_of, modelzip};
use modelzip::GraphFormat;
use modelzip::Tensor;
use modelzip::{ArchiveWriter, TagBuilder, WriteLock};
use serde_json::Value;
use std::path::{Path, PathBuf};

fn persistables(version: &str) -> PathBuf {
    fixture(&format!("paddle/{version}/mlp_persistables"))
}

fn manifest_sha(version: &str, file: &str) -> String {
    let m: Value = serde_json::from_slice(
        &std::fs::read(fixture(&format!("paddle/{version}/manifest.json"))).unwrap(),
    )
    .unwrap();
    m["files"]
        .as_array()
        .unwrap()
        .iter()
        .find(|f| f["path"] == format!("mlp_persistables/{file}"))
        .map(|f| f["records"][0]["data_sha256"].as_str().unwrap().to_string())
        .unwrap_or_else(|| panic!("{file} not in manifest"))
}

fn pack(archive: &Path, tag: &str, dir: &Path, extra: &[&str]) {
    modelzip()
        .arg("pack")
        .arg(archive)
        .arg(dir)
        .args(["--tag", tag])
        .args(extra)
        .assert()
        .success();
}

fn tags_json(archive: &Path) -> Value {
    json_of(modelzip().arg("tags").arg(archive).arg("--json"))
}

fn tag_names(archive: &Path) -> Vec<String> {
    tags_json(archive)["tags"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["name"].as_str().unwrap().to_string())
        .collect()
}

#[test]
fn pack_append_rewrite_and_list() {
    let dir = tempfile::tempdir().unwrap();
    let a = dir.path().join("m.zip");
    let model = fixture("paddle/3.3.1/mlp.pdmodel");
    pack(
        &a,
        "fp32",
        &persistables("3.3.1"),
        &["--graph", model.to_str().unwrap()],
    );
    pack(&a, "Again", &persistables("3.3.1"), &[]);
    pack(&a, "v26", &persistables("2.6.2"), &["--rewrite"]);
    let doc = tags_json(&a);
    assert_eq!(doc["archive"], a.display().to_string());
    assert_eq!(doc["default"], "v26");
    let tags = doc["tags"].as_array().unwrap();
    assert_eq!(tag_names(&a), ["fp32", "Again", "v26"]);
    for (i, t) in tags.iter().enumerate() {
        assert_eq!(t["position"], i);
        assert_eq!(t["params"], 4);
        assert_eq!(t["updater_arrays"], 0);
        assert_eq!(t["dtypes"], serde_json::json!(["FP32"]));
        assert!(t["created"].as_str().unwrap().ends_with('Z'));
    }
    assert_eq!(tags[0]["graph"], "programdesc");
    assert_eq!(tags[1]["graph"], Value::Null);
    assert_eq!(tags[0]["shared_bytes"], 0);
    // The second tag stores the same tensors: it owns only its text files.
    let first = tags[0]["own_bytes"].as_u64().unwrap();
    let second = tags[1]["own_bytes"].as_u64().unwrap();
    assert!(tags[1]["shared_bytes"].as_u64().unwrap() >= 948 - 4 * 30);
    assert!(second < first / 4, "{second} vs {first}");
    // Tags are not case sensitive on lookup.
    let show = json_of(
        modelzip()
            .arg("show")
            .arg(&a)
            .args(["--tag", "AGAIN", "--json"]),
    );
    assert_eq!(show["tag"], "Again");
    crate::support::external_tools_accept(&a);
}

#[test]
fn show_json_names_entries_sharing_and_hashes() {
    let dir = tempfile::tempdir().unwrap();
    let a = dir.path().join("m.zip");
    pack(&a, "a", &persistables("3.3.1"), &[]);
    pack(&a, "b", &persistables("3.3.1"), &[]);
    let doc = json_of(modelzip().arg("show").arg(&a).arg("--json"));
    assert_eq!(doc["tag"], "b");
    assert_eq!(doc["updater"], serde_json::json!([]));
    let params = doc["params"].as_array().unwrap();
    let names: Vec<&str> = params.iter().map(|p| p["name"].as_str().unwrap()).collect();
    assert_eq!(names, ["fc_0.b_0", "fc_0.w_0", "fc_1.b_0", "fc_1.w_0"]);
    for p in params {
        let name = p["name"].as_str().unwrap();
        assert_eq!(p["dtype"], "FP32");
        assert_eq!(p["dtype_code"], 5);
        assert_eq!(p["lod"], serde_json::json!([]));
        assert_eq!(p["shared_from"], "a");
        assert!(p["entry"].as_str().unwrap().starts_with("a/params/"));
        assert_eq!(p["data_sha256"], manifest_sha("3.3.1", name));
    }
    let own = json_of(
        modelzip()
            .arg("show")
            .arg(&a)
            .args(["--tag", "a", "--json"]),
    );
    assert_eq!(own["params"][1]["dims"], serde_json::json!([8, 16]));
    assert_eq!(own["params"][1]["shared_from"], Value::Null);
}

#[test]
fn cat_raw_is_exactly_the_data_bytes() {
    use sha2::Digest;
    let dir = tempfile::tempdir().unwrap();
    let a = dir.path().join("m.zip");
    pack(&a, "t", &persistables("2.6.2"), &[]);
    let out = modelzip()
        .arg("cat")
        .arg(&a)
        .args(["fc_0.w_0", "--raw"])
        .output()
        .unwrap();
    assert!(out.status.success());
    assert_eq!(out.stdout.len(), 8 * 16 * 4);
    let hex: String = sha2::Sha256::digest(&out.stdout)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    assert_eq!(hex, manifest_sha("2.6.2", "fc_0.w_0"));
    let doc = json_of(modelzip().arg("cat").arg(&a).args(["fc_1.b_0", "--json"]));
    assert_eq!(doc["values"].as_array().unwrap().len(), 4);
    assert_eq!(doc["dims"], serde_json::json!([4]));
    let line = expect_error(modelzip().arg("cat").arg(&a).arg("no_such_param"));
    assert!(line.contains("no_such_param"), "{line}");
}

/// `cat --slice`: the raw bytes of rows (and of a box) are exactly those rows' (box's)
/// bytes of the full tensor; the summary and `--json` name the ranges; bad specs and
/// ranges past a dimension exit 2 naming it.
#[test]
fn cat_slice_prints_only_that_part() {
    let dir = tempfile::tempdir().unwrap();
    let a = dir.path().join("m.zip");
    let values: Vec<f32> = (0..48).map(|i| i as f32).collect();
    let mut w = ArchiveWriter::create(&a).unwrap();
    w.add_tag(TagBuilder::new("t").param("w", Tensor::from_slice(vec![8, 6], &values).unwrap()))
        .unwrap();
    w.finish().unwrap();
    let raw = |spec: &str| {
        let out = modelzip()
            .arg("cat")
            .arg(&a)
            .args(["w", "--raw", "--slice", spec])
            .output()
            .unwrap();
        assert!(out.status.success(), "{spec}: {out:?}");
        out.stdout
    };
    let floats = |v: &[f32]| v.iter().flat_map(|x| x.to_le_bytes()).collect::<Vec<u8>>();
    assert_eq!(raw("2:4"), floats(&values[12..24]));
    assert_eq!(raw("6:"), floats(&values[36..48]));
    assert_eq!(raw("5"), floats(&values[30..36]));
    let column: Vec<f32> = (0..8).map(|r| values[r * 6 + 1]).collect();
    assert_eq!(raw(":,1:2"), floats(&column));
    let text = modelzip()
        .arg("cat")
        .arg(&a)
        .args(["w", "--slice", "1:3,4:6"])
        .output()
        .unwrap();
    let text = String::from_utf8(text.stdout).unwrap();
    assert!(
        text.starts_with("w[1:3, 4:6] (tag t): FP32 [2, 2], 4 elements"),
        "{text}"
    );
    let doc = json_of(
        modelzip()
            .arg("cat")
            .arg(&a)
            .args(["w", "--json", "--slice", "7:8"]),
    );
    assert_eq!(doc["dims"], serde_json::json!([1, 6]));
    assert_eq!(doc["slice"], serde_json::json!([[7, 8]]));
    assert_eq!(
        doc["values"],
        serde_json::json!([42.0, 43.0, 44.0, 45.0, 46.0, 47.0])
    );
    let full = json_of(modelzip().arg("cat").arg(&a).args(["w", "--json"]));
    assert!(full.get("slice").is_none());
    for (spec, words) in [
        ("7:9", &["dimension 0", "7..9", "has 8"][..]),
        ("0:1,0:1,0:1", &["3 ranges", "2 dimensions"]),
        ("x", &["\"x\"", "not a range"]),
        ("1:2,a:", &["\"a:\""]),
    ] {
        let line = expect_error(modelzip().arg("cat").arg(&a).args(["w", "--slice", spec]));
        for w in words {
            assert!(line.contains(w), "{spec}: {w} not in {line}");
        }
    }
}

#[test]
fn verify_is_clean_then_finds_a_flipped_byte() {
    let dir = tempfile::tempdir().unwrap();
    let a = dir.path().join("m.zip");
    pack(&a, "t", &persistables("3.3.1"), &[]);
    let doc = json_of(modelzip().arg("verify").arg(&a).arg("--json"));
    assert_eq!(doc["ok"], true);
    assert_eq!(doc["problems"], serde_json::json!([]));
    // Flip one byte in the middle of fc_0.w_0's data (the largest tensor).
    let mut bytes = std::fs::read(&a).unwrap();
    let at = bytes
        .windows(4)
        .position(|w| w == [0x08, 0x05, 0x10, 0x08])
        .expect("the [8,16] desc")
        + 100;
    bytes[at] ^= 0xff;
    std::fs::write(&a, &bytes).unwrap();
    let out = modelzip()
        .arg("verify")
        .arg(&a)
        .arg("--json")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let doc: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(doc["ok"], false);
    let problems = doc["problems"].as_array().unwrap();
    assert!(!problems.is_empty());
    assert!(
        problems
            .iter()
            .any(|p| p["entry"] == "t/params/1.lodtensor"),
        "{problems:?}"
    );
}

#[test]
fn rm_prune_compact_keep_everything_kept_tags_use() {
    let dir = tempfile::tempdir().unwrap();
    let a = dir.path().join("m.zip");
    pack(&a, "one", &persistables("3.3.1"), &[]);
    pack(&a, "two", &persistables("3.3.1"), &[]);
    pack(&a, "three", &persistables("3.3.1"), &[]);
    modelzip().arg("rm").arg(&a).arg("ONE").assert().success();
    assert_eq!(tag_names(&a), ["two", "three"]);
    modelzip()
        .arg("prune")
        .arg(&a)
        .args(["--keep", "1"])
        .assert()
        .success();
    assert_eq!(tag_names(&a), ["three"]);
    modelzip().arg("compact").arg(&a).assert().success();
    let doc = json_of(modelzip().arg("show").arg(&a).arg("--json"));
    for p in doc["params"].as_array().unwrap() {
        assert_eq!(p["shared_from"], Value::Null);
        assert_eq!(
            p["data_sha256"],
            manifest_sha("3.3.1", p["name"].as_str().unwrap())
        );
    }
    modelzip().arg("verify").arg(&a).assert().success();
    let line = expect_error(modelzip().arg("rm").arg(&a).arg("one"));
    assert!(line.contains("one"), "{line}");
    crate::support::external_tools_accept(&a);
}

#[test]
fn a_second_writer_fails_fast_or_waits() {
    let dir = tempfile::tempdir().unwrap();
    let a = dir.path().join("m.zip");
    pack(&a, "one", &persistables("3.3.1"), &[]);
    let lock = WriteLock::acquire(&a, false).unwrap();
    let line = expect_error(
        modelzip()
            .arg("pack")
            .arg(&a)
            .arg(persistables("3.3.1"))
            .args(["--tag", "two"]),
    );
    assert!(line.contains("locked by another process"), "{line}");
    let release = std::thread::spawn(move || {
        std::thread::sleep(std::time::Duration::from_millis(500));
        drop(lock);
    });
    pack(&a, "two", &persistables("3.3.1"), &["--wait"]);
    release.join().unwrap();
    assert_eq!(tag_names(&a), ["one", "two"]);
}

#[test]
fn extract_writes_a_persistables_dir_and_refuses_to_overwrite() {
    let dir = tempfile::tempdir().unwrap();
    let a = dir.path().join("m.zip");
    let model = fixture("paddle/3.3.1/mlp.pdmodel");
    pack(
        &a,
        "t",
        &persistables("3.3.1"),
        &["--graph", model.to_str().unwrap()],
    );
    let out = dir.path().join("out");
    modelzip()
        .arg("extract")
        .arg(&a)
        .arg("--out")
        .arg(&out)
        .assert()
        .success();
    for f in ["fc_0.b_0", "fc_0.w_0", "fc_1.b_0", "fc_1.w_0"] {
        assert_eq!(
            std::fs::read(out.join(f)).unwrap(),
            std::fs::read(persistables("3.3.1").join(f)).unwrap(),
            "{f}"
        );
    }
    assert_eq!(
        std::fs::read(out.join("__model__")).unwrap(),
        std::fs::read(&model).unwrap()
    );
    let line = expect_error(modelzip().arg("extract").arg(&a).arg("--out").arg(&out));
    assert!(line.contains("--force"), "{line}");
    modelzip()
        .arg("extract")
        .arg(&a)
        .arg("--out")
        .arg(&out)
        .arg("--force")
        .assert()
        .success();
}

#[cfg(unix)]
#[test]
fn extract_never_follows_symlinks_or_leaves_the_target() {
    let dir = tempfile::tempdir().unwrap();
    let a = dir.path().join("m.zip");
    let t = Tensor::from_slice(vec![2], &[1.0f32, 2.0]).unwrap();
    let mut w = ArchiveWriter::create(&a).unwrap();
    w.add_tag(TagBuilder::new("t").param("sub/w", t.clone()))
        .unwrap();
    w.add_tag(TagBuilder::new("evil").param("../escape", t.clone()))
        .unwrap();
    w.add_tag(TagBuilder::new("abs").param("/etc/x", t))
        .unwrap();
    w.finish().unwrap();
    let out = dir.path().join("out");
    std::fs::create_dir(&out).unwrap();
    let victim = dir.path().join("victim");
    std::fs::create_dir(&victim).unwrap();
    std::os::unix::fs::symlink(&victim, out.join("sub")).unwrap();
    let line = expect_error(
        modelzip()
            .arg("extract")
            .arg(&a)
            .args(["--tag", "t", "--out"])
            .arg(&out),
    );
    assert!(line.contains("symlink"), "{line}");
    assert_eq!(std::fs::read_dir(&victim).unwrap().count(), 0);
    for tag in ["evil", "abs"] {
        let line = expect_error(
            modelzip()
                .arg("extract")
                .arg(&a)
                .args(["--tag", tag, "--out"])
                .arg(&out),
        );
        assert!(line.contains("refusing"), "{line}");
    }
    assert!(!dir.path().join("escape").exists());
}

#[test]
fn bad_archives_are_one_line_errors() {
    let dir = tempfile::tempdir().unwrap();
    let line = expect_error(modelzip().arg("tags").arg(dir.path().join("missing.zip")));
    assert!(line.contains("missing.zip"), "{line}");
    let junk = dir.path().join("junk.zip");
    std::fs::write(&junk, b"this is not a zip file at all").unwrap();
    for cmd in ["tags", "show", "verify"] {
        let line = expect_error(modelzip().arg(cmd).arg(&junk));
        assert!(line.contains("junk.zip"), "{cmd}: {line}");
    }
    let a = dir.path().join("m.zip");
    pack(&a, "t", &persistables("3.3.1"), &[]);
    let line = expect_error(modelzip().arg("show").arg(&a).args(["--tag", "nope"]));
    assert!(line.contains("nope"), "{line}");
    let line = expect_error(
        modelzip()
            .arg("pack")
            .arg(&a)
            .arg(persistables("3.3.1"))
            .args(["--tag", "bad/name"]),
    );
    assert!(line.contains("bad/name"), "{line}");
}

#[cfg(unix)]
#[test]
fn rewrites_keep_the_archive_file_mode() {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir().unwrap();
    let a = dir.path().join("m.zip");
    pack(&a, "one", &persistables("3.3.1"), &[]);
    std::fs::set_permissions(&a, std::fs::Permissions::from_mode(0o640)).unwrap();
    pack(&a, "two", &persistables("3.3.1"), &["--rewrite"]);
    modelzip().arg("compact").arg(&a).assert().success();
    let mode = std::fs::metadata(&a).unwrap().permissions().mode() & 0o7777;
    assert_eq!(mode, 0o640);
}

/// Every `extract-*` file of tests/hostile (parameter names with `..`, absolute paths,
/// backslashes, NUL, drive letters, `.`, empty components, a collision with the graph),
/// with and without --force, into a target holding a symlink out of it: refused with one
/// line, and nothing inside or outside the target changes.
#[cfg(unix)]
#[test]
fn extract_refuses_every_hostile_name_and_writes_nothing() {
    let hostile = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/hostile");
    let mut files: Vec<PathBuf> = std::fs::read_dir(&hostile)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| {
            p.file_name()
                .unwrap()
                .to_string_lossy()
                .starts_with("extract-")
        })
        .collect();
    files.sort();
    assert!(files.len() >= 8, "{files:?}");
    for file in &files {
        let dir = tempfile::tempdir().unwrap();
        let a = dir.path().join("m.zip");
        std::fs::copy(file, &a).unwrap();
        let out = dir.path().join("out");
        std::fs::create_dir(&out).unwrap();
        let victim = dir.path().join("victim");
        std::fs::write(&victim, b"keep").unwrap();
        // Every hostile archive also has a parameter "ok": a symlink in its place.
        std::os::unix::fs::symlink(&victim, out.join("ok")).unwrap();
        let listing = |d: &Path| {
            let mut v: Vec<String> = std::fs::read_dir(d)
                .unwrap()
                .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
                .collect();
            v.sort();
            v
        };
        let before = (listing(dir.path()), listing(&out));
        for force in [false, true] {
            let mut cmd = modelzip();
            cmd.arg("extract").arg(&a).arg("--out").arg(&out);
            if force {
                cmd.arg("--force");
            }
            let line = expect_error(&mut cmd);
            assert!(
                line.contains("refusing to extract") || line.contains("collides"),
                "{}: {line}",
                file.display()
            );
            assert_eq!(
                (listing(dir.path()), listing(&out)),
                before,
                "{}",
                file.display()
            );
            assert_eq!(std::fs::read(&victim).unwrap(), b"keep");
            assert!(
                std::fs::symlink_metadata(out.join("ok"))
                    .unwrap()
                    .is_symlink()
            );
        }
        assert!(!Path::new("/tmp/modelzip-evil").exists());
    }
}

/// With --force, a symlink where a file goes is replaced by the file; its target is
/// left alone.
#[cfg(unix)]
#[test]
fn extract_force_replaces_a_symlink_without_writing_through_it() {
    let dir = tempfile::tempdir().unwrap();
    let a = dir.path().join("m.zip");
    let t = Tensor::from_slice(vec![2], &[1.0f32, 2.0]).unwrap();
    let mut w = ArchiveWriter::create(&a).unwrap();
    w.add_tag(TagBuilder::new("t").param("w", t)).unwrap();
    w.finish().unwrap();
    let out = dir.path().join("out");
    std::fs::create_dir(&out).unwrap();
    let victim = dir.path().join("victim");
    std::fs::write(&victim, b"keep").unwrap();
    std::os::unix::fs::symlink(&victim, out.join("w")).unwrap();
    let line = expect_error(modelzip().arg("extract").arg(&a).arg("--out").arg(&out));
    assert!(line.contains("--force"), "{line}");
    modelzip()
        .arg("extract")
        .arg(&a)
        .arg("--out")
        .arg(&out)
        .arg("--force")
        .assert()
        .success();
    assert_eq!(std::fs::read(&victim).unwrap(), b"keep");
    let m = std::fs::symlink_metadata(out.join("w")).unwrap();
    assert!(m.is_file(), "the symlink was not replaced");
}

#[test]
fn pack_with_updater_state_shows_arrays_in_order() {
    let dir = tempfile::tempdir().unwrap();
    let src = persistables("3.3.1");
    let upd = dir.path().join("adam");
    for p in ["fc_0.w_0", "fc_1.w_0"] {
        std::fs::create_dir_all(upd.join(p)).unwrap();
        // Two state arrays per parameter, named so sorted order is m then v.
        std::fs::copy(src.join(p), upd.join(p).join("0_m")).unwrap();
        std::fs::copy(src.join("fc_1.b_0"), upd.join(p).join("1_v")).unwrap();
    }
    let a = dir.path().join("m.zip");
    pack(&a, "step-1", &src, &["--updater", upd.to_str().unwrap()]);
    let doc = json_of(modelzip().arg("show").arg(&a).arg("--json"));
    let updater = doc["updater"].as_array().unwrap();
    assert_eq!(updater.len(), 2);
    assert_eq!(updater[0]["name"], "fc_0.w_0");
    let arrays = updater[0]["arrays"].as_array().unwrap();
    assert_eq!(arrays.len(), 2);
    assert_eq!(arrays[0]["dims"], serde_json::json!([8, 16]));
    assert_eq!(arrays[1]["dims"], serde_json::json!([4]));
    // Identical to params: stored once, as params of this same tag.
    assert_eq!(arrays[0]["data_sha256"], manifest_sha("3.3.1", "fc_0.w_0"));
    let tags = tags_json(&a);
    assert_eq!(tags["tags"][0]["updater_arrays"], 4);
    let bad = dir.path().join("flat");
    std::fs::create_dir_all(&bad).unwrap();
    std::fs::copy(src.join("fc_0.w_0"), bad.join("loose")).unwrap();
    let line = expect_error(
        modelzip()
            .arg("pack")
            .arg(&a)
            .arg(&src)
            .args(["--tag", "step-2", "--updater"])
            .arg(&bad),
    );
    assert!(line.contains("<param>/"), "{line}");
    assert_eq!(tag_names(&a), ["step-1"]);
}

/// Asserts the documented error form `modelzip: <what failed>: <why>` with a non-empty
/// what-failed part that starts with "cannot" (or is a usage error), and returns the line.
fn expect_error_form(cmd: &mut assert_cmd::Command) -> String {
    let line = expect_error(cmd);
    let rest = line.strip_prefix("modelzip: ").unwrap();
    let (what, why) = rest.split_once(": ").unwrap_or(("", ""));
    assert!(
        (what.starts_with("cannot ") || what == "usage") && !why.is_empty(),
        "{line}"
    );
    line
}

/// An archive path that is a directory is said to be one (the OS's answer, from mapping
/// it, is "No such device"), for every command that takes an archive, and nothing is
/// created beside it.
#[test]
fn an_archive_path_that_is_a_directory_is_named_as_one() {
    let dir = tempfile::tempdir().unwrap();
    let src = persistables("3.3.1");
    // The archive path is a directory: said so, for every command that takes one.
    let d = dir.path().join("dirarch");
    std::fs::create_dir(&d).unwrap();
    let model = fixture("paddle/3.3.1/mlp.pdmodel");
    let params = fixture("paddle/3.3.1/mlp.pdiparams");
    let commands: Vec<Vec<std::ffi::OsString>> = vec![
        vec![
            "pack".into(),
            d.clone().into(),
            src.clone().into(),
            "--tag".into(),
            "t".into(),
        ],
        vec![
            "import-paddle".into(),
            d.clone().into(),
            "--tag".into(),
            "t".into(),
            model.into(),
            params.into(),
        ],
        vec!["rm".into(), d.clone().into(), "t".into()],
        vec![
            "prune".into(),
            d.clone().into(),
            "--keep".into(),
            "1".into(),
        ],
        vec!["compact".into(), d.clone().into()],
        vec![
            "convert".into(),
            d.clone().into(),
            "--tag".into(),
            "t".into(),
            "--to".into(),
            "flatbuffers".into(),
        ],
        vec!["tags".into(), d.clone().into()],
        vec!["show".into(), d.clone().into()],
        vec!["verify".into(), d.clone().into()],
        vec![
            "extract".into(),
            d.clone().into(),
            "--out".into(),
            dir.path().join("o").into(),
        ],
    ];
    for args in commands {
        let line = expect_error_form(modelzip().args(&args));
        assert!(
            line.contains("dirarch") && line.contains("is a directory"),
            "{line}"
        );
        assert!(!line.contains("os error"), "{line}");
    }
    assert!(!dir.path().join("dirarch.lock").exists());
    assert!(!dir.path().join("o").exists());
}

/// A lock file is created when a writer starts; a pack refused while checking its
/// inputs never gets that far.
fn lock_of(archive: &Path) -> PathBuf {
    PathBuf::from(format!("{}.lock", archive.display()))
}

/// `pack --graph` decodes the graph first: a malformed Paddle 3 PIR `.json` program,
/// random bytes named `.fb`, and a `.pdmodel` that is no ProgramDesc are refused with the
/// file named, before the archive (or its lock) is touched.
#[test]
fn pack_refuses_a_graph_that_does_not_decode() {
    let dir = tempfile::tempdir().unwrap();
    let a = dir.path().join("m.zip");
    let pir = dir.path().join("inference.json");
    std::fs::write(
        &pir,
        br#"{"base_code":{"magic":"pir","trainable":false,"version":1},"program":{"regions":{}}}"#,
    )
    .unwrap();
    let junk = dir.path().join("junk.fb");
    std::fs::write(
        &junk,
        (0..300u32)
            .map(|i| (i * 7919 % 251) as u8)
            .collect::<Vec<_>>(),
    )
    .unwrap();
    let bad_pd = dir.path().join("bad.pdmodel");
    std::fs::write(&bad_pd, b"\x0a\xff\xff\xff\xff\x0fnot a program").unwrap();
    let run = |graph: &Path| {
        expect_error(
            modelzip()
                .arg("pack")
                .arg(&a)
                .arg(persistables("3.3.1"))
                .args(["--tag", "t", "--graph"])
                .arg(graph),
        )
    };
    let line = run(&pir);
    assert!(line.starts_with("modelzip: cannot use graph "), "{line}");
    assert!(line.contains("inference.json"), "{line}");
    assert!(line.contains("PIR program"), "{line}");
    assert!(line.contains("expected a JSON array of regions"), "{line}");
    let line = run(&junk);
    assert!(
        line.contains("junk.fb") && line.contains("graph.fb"),
        "{line}"
    );
    assert!(line.contains("MZGF"), "{line}");
    let line = run(&bad_pd);
    assert!(
        line.contains("bad.pdmodel") && line.contains("ProgramDesc"),
        "{line}"
    );
    assert!(!a.exists());
    assert!(!lock_of(&a).exists());
    // Into an existing archive: nothing changes.
    pack(&a, "one", &persistables("3.3.1"), &[]);
    let before = std::fs::read(&a).unwrap();
    for g in [&pir, &junk, &bad_pd] {
        run(g);
    }
    assert_eq!(std::fs::read(&a).unwrap(), before);
    // A real ProgramDesc and a real graph.fb still go in.
    let model = fixture("paddle/3.3.1/mlp.pdmodel");
    pack(
        &a,
        "pd",
        &persistables("3.3.1"),
        &["--graph", model.to_str().unwrap()],
    );
    let fb = dir.path().join("mlp.fb");
    let g = modelzip::Graph::decode(
        modelzip::GraphFormat::ProgramDesc,
        &std::fs::read(&model).unwrap(),
    )
    .unwrap();
    std::fs::write(&fb, g.encode(GraphFormat::FlatBuffers).unwrap()).unwrap();
    pack(
        &a,
        "fb",
        &persistables("3.3.1"),
        &["--graph", fb.to_str().unwrap()],
    );
    let tags = tags_json(&a);
    assert_eq!(tags["tags"][1]["graph"], "programdesc");
    assert_eq!(tags["tags"][2]["graph"], "flatbuffers");
}

/// The updater layout groups files by parameter name, nested names included (`a/b/0_m`
/// is an array of `a/b`); state for `a`, a directory of parameters and no parameter
/// itself, is refused rather than stored.
#[test]
fn pack_updater_groups_by_parameter_and_refuses_a_directory_prefix() {
    let dir = tempfile::tempdir().unwrap();
    let src = persistables("3.3.1");
    let params = dir.path().join("params");
    std::fs::create_dir_all(params.join("a")).unwrap();
    std::fs::copy(src.join("fc_0.b_0"), params.join("a/c")).unwrap();
    std::fs::copy(src.join("fc_0.w_0"), params.join("a/b")).unwrap();
    let upd = dir.path().join("adam");
    std::fs::create_dir_all(upd.join("a/b")).unwrap();
    std::fs::create_dir_all(upd.join("a/c")).unwrap();
    std::fs::copy(src.join("fc_0.b_0"), upd.join("a/c/0_m")).unwrap();
    std::fs::copy(src.join("fc_0.w_0"), upd.join("a/b/0_m")).unwrap();
    std::fs::copy(src.join("fc_1.w_0"), upd.join("a/b/1_v")).unwrap();
    std::fs::copy(src.join("fc_1.b_0"), upd.join("a/c/1_v")).unwrap();
    let a = dir.path().join("m.zip");
    pack(&a, "t", &params, &["--updater", upd.to_str().unwrap()]);
    let doc = json_of(modelzip().arg("show").arg(&a).arg("--json"));
    let updater = doc["updater"].as_array().unwrap();
    let summary: Vec<(String, Vec<Value>)> = updater
        .iter()
        .map(|u| {
            let dims = u["arrays"]
                .as_array()
                .unwrap()
                .iter()
                .map(|x| x["dims"].clone())
                .collect();
            (u["name"].as_str().unwrap().to_string(), dims)
        })
        .collect();
    assert_eq!(
        summary,
        [
            (
                "a/b".to_string(),
                vec![serde_json::json!([8, 16]), serde_json::json!([16, 4])]
            ),
            (
                "a/c".to_string(),
                vec![serde_json::json!([16]), serde_json::json!([4])]
            ),
        ]
    );
    assert_eq!(
        updater[0]["arrays"][0]["data_sha256"],
        manifest_sha("3.3.1", "fc_0.w_0")
    );
    // `a/0_m` would be state of `a`, which is a directory of parameters.
    std::fs::copy(src.join("fc_0.b_0"), upd.join("a/0_m")).unwrap();
    let before = std::fs::read(&a).unwrap();
    let line = expect_error_form(
        modelzip()
            .arg("pack")
            .arg(&a)
            .arg(&params)
            .args(["--tag", "t2", "--updater"])
            .arg(&upd),
    );
    assert!(line.contains("\"a\" is not a parameter in"), "{line}");
    assert_eq!(std::fs::read(&a).unwrap(), before);
}

/// The params of a tag, in order: name, dtype, dims, lod, data_sha256.
fn contents(archive: &Path, tag: &str) -> Vec<Value> {
    let doc = json_of(
        modelzip()
            .arg("show")
            .arg(archive)
            .args(["--tag", tag, "--json"]),
    );
    let keep = |v: &Value| {
        serde_json::json!({"name": v["name"], "dtype": v["dtype"], "dims": v["dims"],
                           "lod": v["lod"], "data_sha256": v["data_sha256"]})
    };
    doc["params"].as_array().unwrap().iter().map(keep).collect()
}

fn graph_bytes(archive: &Path, tag: &str) -> Option<(modelzip::GraphFormat, Vec<u8>)> {
    let a = modelzip::Archive::open(archive).unwrap();
    let t = a.tag(tag).unwrap();
    t.graph().unwrap().map(|(e, b)| (e, b.into_owned()))
}

/// What `extract` writes, `pack` reads back: the root `__model__` (or `graph.fb`) is the
/// tag's graph, the other files its parameters; the new tag equals the original (params,
/// data hashes, graph bytes) and shares every tensor with it. `--graph` wins over the
/// directory's own graph.
#[test]
fn extract_then_pack_gives_the_same_tag() {
    let dir = tempfile::tempdir().unwrap();
    let a = dir.path().join("m.zip");
    let model = fixture("paddle/3.3.1/mlp.pdmodel");
    // A nested name too: extract makes a subdirectory, pack walks into it.
    let src = dir.path().join("src");
    std::fs::create_dir_all(src.join("enc/layer_0")).unwrap();
    for f in ["fc_0.b_0", "fc_0.w_0", "fc_1.b_0"] {
        std::fs::copy(persistables("3.3.1").join(f), src.join(f)).unwrap();
    }
    std::fs::copy(
        persistables("3.3.1").join("fc_1.w_0"),
        src.join("enc/layer_0/fc.w_0"),
    )
    .unwrap();
    for (tag, encoding) in [("pd", "programdesc"), ("fb", "flatbuffers")] {
        pack(&a, tag, &src, &["--graph", model.to_str().unwrap()]);
        if encoding == "flatbuffers" {
            modelzip()
                .arg("convert")
                .arg(&a)
                .args(["--tag", tag, "--to", "flatbuffers"])
                .assert()
                .success();
        }
        let out = dir.path().join(format!("ex-{tag}"));
        modelzip()
            .arg("extract")
            .arg(&a)
            .args(["--tag", tag, "--out"])
            .arg(&out)
            .arg("-q")
            .assert()
            .success();
        let back = format!("{tag}-back");
        let doc = json_of(
            modelzip()
                .arg("pack")
                .arg(&a)
                .arg(&out)
                .args(["--tag", &back, "--json"]),
        );
        assert_eq!(doc["graph"], encoding);
        assert_eq!(doc["params"], 4);
        assert_eq!(doc["shared"], 4, "every tensor equals one of the original");
        assert_eq!(contents(&a, &back), contents(&a, tag));
        let (e1, g1) = graph_bytes(&a, tag).unwrap();
        let (e2, g2) = graph_bytes(&a, &back).unwrap();
        assert_eq!(e1, e2);
        assert!(g1 == g2, "graph bytes differ");
        // Into a new archive too.
        let fresh = dir.path().join(format!("{tag}-fresh.zip"));
        pack(&fresh, "t", &out, &["-q"]);
        assert_eq!(contents(&fresh, "t"), contents(&a, tag));
        assert!(graph_bytes(&fresh, "t").unwrap().1 == g1);
    }
    // --graph wins over the directory's __model__ (which is then not a parameter).
    let out = dir.path().join("ex-pd");
    let conv = fixture("paddle/3.3.1/conv.pdmodel");
    pack(
        &a,
        "other-graph",
        &out,
        &["--graph", conv.to_str().unwrap()],
    );
    assert!(graph_bytes(&a, "other-graph").unwrap().1 == std::fs::read(&conv).unwrap());
    assert_eq!(contents(&a, "other-graph"), contents(&a, "pd"));
    // Both graph files at the root: which one is meant is not guessed.
    std::fs::copy(dir.path().join("ex-fb/graph.fb"), out.join("graph.fb")).unwrap();
    let line = expect_error(
        modelzip()
            .arg("pack")
            .arg(&a)
            .arg(&out)
            .args(["--tag", "both"]),
    );
    assert!(
        line.contains("__model__") && line.contains("graph.fb"),
        "{line}"
    );
    assert!(line.contains("--graph"), "{line}");
    // A __model__ that is no program is an error naming it, not a bad tensor.
    std::fs::remove_file(out.join("graph.fb")).unwrap();
    std::fs::write(out.join("__model__"), b"{\"program\": {}}").unwrap();
    let line = expect_error(
        modelzip()
            .arg("pack")
            .arg(&a)
            .arg(&out)
            .args(["--tag", "bad"]),
    );
    assert!(line.contains("__model__") && line.contains("PIR"), "{line}");
}

/// pack's bad input paths say what failed and why, in one line, naming the path once,
/// before the archive or its lock file is created.
#[test]
fn pack_refuses_bad_input_paths_before_taking_the_lock() {
    let dir = tempfile::tempdir().unwrap();
    let a = dir.path().join("m.zip");
    let src = persistables("3.3.1");
    // DIR is a file.
    let line = expect_error_form(
        modelzip()
            .arg("pack")
            .arg(&a)
            .arg(src.join("fc_0.w_0"))
            .args(["--tag", "t"]),
    );
    assert!(
        line.contains("fc_0.w_0") && line.contains("not a directory"),
        "{line}"
    );
    // DIR does not exist: its path once, with the OS's reason.
    let missing = dir.path().join("nonexistent");
    let line = expect_error_form(
        modelzip()
            .arg("pack")
            .arg(&a)
            .arg(&missing)
            .args(["--tag", "t"]),
    );
    assert_eq!(line.matches("nonexistent").count(), 1, "{line}");
    assert!(line.contains("No such file"), "{line}");
    // An empty DIR would make a tag of nothing: refused.
    let empty = dir.path().join("empty");
    std::fs::create_dir(&empty).unwrap();
    let line = expect_error_form(
        modelzip()
            .arg("pack")
            .arg(&a)
            .arg(&empty)
            .args(["--tag", "t"]),
    );
    assert!(line.contains("no parameter files"), "{line}");
    assert!(!a.exists() && !lock_of(&a).exists());
    // An updater file outside a <param>/ directory names the file.
    let upd = dir.path().join("upd");
    std::fs::create_dir(&upd).unwrap();
    std::fs::copy(src.join("fc_0.b_0"), upd.join("loose")).unwrap();
    let pack_updater = || {
        expect_error_form(
            modelzip()
                .arg("pack")
                .arg(&a)
                .arg(&src)
                .args(["--tag", "t", "--updater"])
                .arg(&upd),
        )
    };
    let line = pack_updater();
    assert!(
        line.contains("loose") && line.contains("<param>/"),
        "{line}"
    );
    assert!(!a.exists() && !lock_of(&a).exists());
    // State of a parameter DIR does not have (a typo) is named, not stored.
    std::fs::remove_file(upd.join("loose")).unwrap();
    std::fs::create_dir(upd.join("fc_0.b_9")).unwrap();
    std::fs::copy(src.join("fc_0.b_0"), upd.join("fc_0.b_9/0_m")).unwrap();
    let line = pack_updater();
    assert!(
        line.contains("\"fc_0.b_9\" is not a parameter in"),
        "{line}"
    );
    assert!(!a.exists() && !lock_of(&a).exists());
}

/// An extract that fails after creating `--out` removes what it created, the new output
/// directory (and its new parents) included; a parameter that needs another's file as a
/// directory is refused before anything is written.
#[test]
fn failed_extract_removes_the_output_directory_it_created() {
    let dir = tempfile::tempdir().unwrap();
    let a = dir.path().join("m.zip");
    let t = Tensor::from_slice(vec![2], &[1.0f32, 2.0]).unwrap();
    let mut w = ArchiveWriter::create(&a).unwrap();
    // A file name longer than any file system allows fails when it is created, after
    // "first" is written.
    let long = "n".repeat(300);
    w.add_tag(
        TagBuilder::new("long")
            .param("first", t.clone())
            .param(format!("sub/{long}"), t.clone()),
    )
    .unwrap();
    w.add_tag(
        TagBuilder::new("prefix")
            .param("a", t.clone())
            .param("a/b", t),
    )
    .unwrap();
    w.finish().unwrap();
    let out = dir.path().join("new/deeper/out");
    let line = expect_error_form(
        modelzip()
            .arg("extract")
            .arg(&a)
            .args(["--tag", "long", "--out"])
            .arg(&out),
    );
    assert!(line.contains("cannot create"), "{line}");
    assert!(!dir.path().join("new").exists(), "{line}");
    // Into an existing directory: it stays, emptied of what extract wrote.
    let existing = dir.path().join("existing");
    std::fs::create_dir(&existing).unwrap();
    std::fs::write(existing.join("keep"), b"k").unwrap();
    expect_error_form(
        modelzip()
            .arg("extract")
            .arg(&a)
            .args(["--tag", "long", "--out"])
            .arg(&existing),
    );
    let left: Vec<_> = std::fs::read_dir(&existing)
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert_eq!(left, ["keep"]);
    // "a" and "a/b": refused up front.
    let out = dir.path().join("out2");
    let line = expect_error_form(
        modelzip()
            .arg("extract")
            .arg(&a)
            .args(["--tag", "prefix", "--out"])
            .arg(&out),
    );
    assert!(line.contains("collides") && line.contains("\"a"), "{line}");
    assert!(!out.exists());
}

/// extract's errors say what failed: an existing file without --force.
#[test]
fn extract_errors_say_what_failed() {
    let dir = tempfile::tempdir().unwrap();
    let a = dir.path().join("m.zip");
    let src = persistables("3.3.1");
    // extract: an existing file, and a name it refuses, say what failed.
    pack(&a, "t", &src, &[]);
    let out = dir.path().join("out");
    modelzip()
        .arg("extract")
        .arg(&a)
        .arg("--out")
        .arg(&out)
        .assert()
        .success();
    let line = expect_error_form(modelzip().arg("extract").arg(&a).arg("--out").arg(&out));
    assert!(
        line.contains("fc_0.b_0") && line.contains("--force"),
        "{line}"
    );
}
