//! An archive reached through a symlink: writers lock, journal and rename the file the
//! link points at, so the link stays a link and the real archive changes.

use super::harness::{expect_error, fixture, json_of, modelzip};
use modelzip::WriteLock;
use std::path::{Path, PathBuf};

fn tag_names(archive: &Path) -> Vec<String> {
    json_of(modelzip().arg("tags").arg(archive).arg("--json"))["tags"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["name"].as_str().unwrap().to_string())
        .collect()
}

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

/// `dir/real/s.zip` with tag `a` (with a graph), `dir/link.zip -> real/s.zip`.
fn linked() -> (tempfile::TempDir, PathBuf, PathBuf) {
    let d = tempfile::tempdir().unwrap();
    std::fs::create_dir(d.path().join("real")).unwrap();
    let real = d.path().join("real/s.zip");
    let model = fixture("paddle/3.3.1/mlp.pdmodel");
    pack(&real, "a", &["--graph", model.to_str().unwrap()]);
    let link = d.path().join("link.zip");
    std::os::unix::fs::symlink("real/s.zip", &link).unwrap();
    (d, real, link)
}

/// The link still points at real/s.zip, nothing else lies beside it, the real archive
/// holds `tags` and verifies.
fn intact(d: &Path, real: &Path, link: &Path, tags: &[&str]) {
    let m = std::fs::symlink_metadata(link).unwrap();
    assert!(m.file_type().is_symlink(), "the link became a regular file");
    assert_eq!(std::fs::read_link(link).unwrap(), Path::new("real/s.zip"));
    let mut beside: Vec<String> = std::fs::read_dir(d)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    beside.sort();
    assert_eq!(beside, ["link.zip", "real"]);
    assert_eq!(tag_names(real), tags);
    modelzip().arg("verify").arg(real).assert().success();
}

#[test]
fn commands_through_a_symlink_rewrite_the_real_archive() {
    let (d, real, link) = linked();
    let root = d.path();
    pack(&link, "b", &["--rewrite"]);
    intact(root, &real, &link, &["a", "b"]);
    pack(&link, "c", &[]);
    intact(root, &real, &link, &["a", "b", "c"]);
    modelzip()
        .args(["rm", "-q"])
        .arg(&link)
        .arg("b")
        .assert()
        .success();
    intact(root, &real, &link, &["a", "c"]);
    modelzip()
        .args(["convert", "-q"])
        .arg(&link)
        .args(["--tag", "a", "--to", "flatbuffers"])
        .assert()
        .success();
    intact(root, &real, &link, &["a", "c"]);
    let tags = json_of(modelzip().arg("tags").arg(&real).arg("--json"));
    assert_eq!(tags["tags"][0]["graph"], "flatbuffers");
    modelzip()
        .args(["compact", "-q"])
        .arg(&link)
        .assert()
        .success();
    intact(root, &real, &link, &["a", "c"]);
    modelzip()
        .args(["prune", "-q", "--keep", "1"])
        .arg(&link)
        .assert()
        .success();
    intact(root, &real, &link, &["c"]);
    pack(&link, "d", &[]);
    modelzip()
        .args(["rm", "-q", "--in-place"])
        .arg(&link)
        .arg("c")
        .assert()
        .success();
    intact(root, &real, &link, &["d"]);
}

#[test]
fn a_writer_through_a_symlink_and_one_through_the_real_path_exclude_each_other() {
    let (_d, real, link) = linked();
    for (held, other) in [(&real, &link), (&link, &real)] {
        let lock = WriteLock::acquire(held, false).unwrap();
        let line = expect_error(
            modelzip()
                .arg("pack")
                .arg(other)
                .arg(fixture("paddle/3.3.1/mlp_persistables"))
                .args(["--tag", "x", "-q"]),
        );
        assert!(line.contains("locked by another process"), "{line}");
        for cmd in [&["rm", "a"][..], &["compact"], &["pack", "--rewrite"]] {
            let mut c = modelzip();
            c.arg(cmd[0]).arg(other);
            if cmd[0] == "pack" {
                c.arg(fixture("paddle/3.3.1/mlp_persistables"))
                    .args(["--tag", "x"]);
            }
            let line = expect_error(c.args(&cmd[1..]));
            assert!(line.contains("locked"), "{cmd:?}: {line}");
        }
        drop(lock);
    }
    assert_eq!(tag_names(&real), ["a"]);
}
