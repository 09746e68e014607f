//! Read commands on URLs (an HTTP server on 127.0.0.1 and `file://`) give what they give
//! for the local file; `cp` uploads create-only or conditionally and downloads atomically.

use super::harness::{expect_error, json_of, modelzip};
use crate::support;
use crate::support::http_server::Server;
use modelzip::{ArchiveWriter, TagBuilder, Tensor};
use serde_json::Value;
use std::path::{Path, PathBuf};

/// Two sample tags and an INT8-sized third, written to `dir/name`.
fn archive(dir: &Path, name: &str, seed: u64) -> PathBuf {
    let path = dir.join(name);
    let mut w = ArchiveWriter::create(&path).unwrap();
    w.add_tag(support::sample_tag("fp32", seed)).unwrap();
    w.add_tag(support::sample_tag("step-2", seed + 1)).unwrap();
    let big = Tensor::from_slice(vec![300_000], &support::values(seed, 300_000)).unwrap();
    w.add_tag(TagBuilder::new("big").param("x", big)).unwrap();
    w.finish().unwrap();
    path
}

/// The JSON output of `args` on `target`, with the "archive" field (the argument
/// itself) removed.
fn json_on(args: &[&str], target: &str) -> Value {
    let mut cmd = modelzip();
    cmd.arg(args[0]).arg(target).args(&args[1..]);
    let mut v = json_of(&mut cmd);
    if let Some(m) = v.as_object_mut() {
        m.remove("archive");
    }
    v
}

#[test]
fn read_commands_on_a_url_print_what_they_print_for_the_file() {
    let dir = tempfile::tempdir().unwrap();
    let path = archive(dir.path(), "m.zip", 1);
    let server = Server::start();
    server.put("m.zip", std::fs::read(&path).unwrap());
    let url = server.url("m.zip");
    let local = path.to_str().unwrap();
    let commands: [&[&str]; 7] = [
        &["tags", "--json"],
        &["show", "--json", "--tag", "fp32"],
        &["cat", "fc.w", "--json", "--tag", "step-2"],
        &["graph", "--format", "json", "--tag", "fp32"],
        &["diff", "fp32", "step-2", "--json"],
        &["verify", "--json"],
        &["show", "--json"],
    ];
    for args in commands {
        assert_eq!(json_on(args, local), json_on(args, &url), "{args:?}");
    }
    // extract and export-paddle write the same files.
    for (cmd, flags) in [
        ("extract", vec!["--tag", "fp32"]),
        ("export-paddle", vec!["--tag", "fp32"]),
    ] {
        let a = dir.path().join(format!("{cmd}-local"));
        let b = dir.path().join(format!("{cmd}-remote"));
        for (src, out) in [(local, &a), (url.as_str(), &b)] {
            modelzip()
                .arg(cmd)
                .arg(src)
                .arg("--out")
                .arg(out)
                .args(&flags)
                .assert()
                .success();
        }
        assert_eq!(tree(&a), tree(&b), "{cmd}");
        assert!(!tree(&a).is_empty(), "{cmd}");
    }
    // A command that writes refuses a URL with a pointer to cp.
    let line = expect_error(modelzip().args(["rm", &url, "fp32"]));
    assert!(line.contains("modelzip cp"), "{line}");
}

/// Relative path -> bytes of every file under `root` (or the files `root.*` for a prefix).
fn tree(root: &Path) -> Vec<(String, Vec<u8>)> {
    let mut out = Vec::new();
    let (dir, prefix) = if root.is_dir() {
        (root.to_path_buf(), None)
    } else {
        (
            root.parent().unwrap().to_path_buf(),
            Some(root.file_name().unwrap().to_string_lossy().to_string()),
        )
    };
    let mut stack = vec![dir.clone()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).unwrap() {
            let p = e.unwrap().path();
            if p.is_dir() {
                if prefix.is_none() {
                    stack.push(p);
                }
                continue;
            }
            let name = p.file_name().unwrap().to_string_lossy().to_string();
            if let Some(pre) = &prefix
                && !name.starts_with(&format!("{pre}."))
            {
                continue;
            }
            let rel = p.strip_prefix(&dir).unwrap().to_string_lossy().to_string();
            let rel = match &prefix {
                Some(pre) => rel.replacen(pre.as_str(), "P", 1),
                None => rel,
            };
            out.push((rel, std::fs::read(&p).unwrap()));
        }
    }
    out.sort();
    out
}

#[test]
fn cp_uploads_create_only_and_downloads_verified() {
    let dir = tempfile::tempdir().unwrap();
    let store = dir.path().join("store");
    std::fs::create_dir(&store).unwrap();
    let a = archive(dir.path(), "a.zip", 1);
    let b = archive(dir.path(), "b.zip", 5);
    let url = format!("file://{}/model.zip", store.display());
    let up = json_of(modelzip().arg("cp").arg(&a).arg(&url).arg("--json"));
    assert_eq!(up["direction"], "upload");
    // Create-only: a second upload to the same URL is refused and changes nothing.
    let line = expect_error(modelzip().arg("cp").arg(&b).arg(&url));
    assert!(line.contains("already exists"), "{line}");
    assert!(line.contains("--force"), "{line}");
    assert_eq!(
        std::fs::read(store.join("model.zip")).unwrap(),
        std::fs::read(&a).unwrap()
    );
    // Read commands through the URL.
    let tags = json_of(modelzip().args(["tags", &url, "--json"]));
    assert_eq!(tags["tags"].as_array().unwrap().len(), 3);
    // Down: byte-identical; an existing file is replaced only with --force.
    let down = dir.path().join("down.zip");
    modelzip().arg("cp").arg(&url).arg(&down).assert().success();
    assert_eq!(std::fs::read(&down).unwrap(), std::fs::read(&a).unwrap());
    let line = expect_error(modelzip().arg("cp").arg(&url).arg(&down));
    assert!(line.contains("--force"), "{line}");
    // --if-match is for uploads: a download refuses it rather than ignore it.
    let line = expect_error(
        modelzip()
            .arg("cp")
            .arg(&url)
            .arg(dir.path().join("other.zip"))
            .args(["--if-match", "\"x\""]),
    );
    assert!(line.contains("--if-match applies to uploads"), "{line}");
    // --force replaces.
    modelzip()
        .arg("cp")
        .arg(&b)
        .arg(&url)
        .arg("--force")
        .assert()
        .success();
    modelzip()
        .arg("cp")
        .arg(&url)
        .arg(&down)
        .arg("--force")
        .assert()
        .success();
    assert_eq!(std::fs::read(&down).unwrap(), std::fs::read(&b).unwrap());
    // Not an archive: nothing is uploaded.
    let junk = dir.path().join("junk.zip");
    std::fs::write(&junk, b"not a zip").unwrap();
    let other = format!("file://{}/junk.zip", store.display());
    expect_error(modelzip().arg("cp").arg(&junk).arg(&other));
    assert!(!store.join("junk.zip").exists());
    // Both local, or both URLs: refused.
    expect_error(modelzip().arg("cp").arg(&a).arg(dir.path().join("c.zip")));
    expect_error(modelzip().arg("cp").arg(&url).arg(&other));
}

#[test]
fn a_download_that_does_not_verify_leaves_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let a = archive(dir.path(), "a.zip", 1);
    let mut bytes = std::fs::read(&a).unwrap();
    // Flip a byte of the big tensor's data: its CRC-32 no longer matches.
    let pos = bytes.len() / 4;
    bytes[pos] ^= 0xff;
    let server = Server::start();
    server.put("bad.zip", bytes);
    let down = dir.path().join("down.zip");
    let line = expect_error(modelzip().arg("cp").arg(server.url("bad.zip")).arg(&down));
    assert!(line.contains("cannot download"), "{line}");
    assert!(!down.exists());
    let leftovers: Vec<_> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().to_string())
        .filter(|n| n.ends_with(".tmp"))
        .collect();
    assert!(leftovers.is_empty(), "{leftovers:?}");
}

/// An object replaced right after the open (someone uploads a new version while `cat`
/// or `show` reads): the next request fails on the old ETag, the command sees the new
/// version and runs once more on it, printing only the new version's output.
#[test]
fn a_read_command_runs_once_more_when_the_object_is_replaced_mid_read() {
    let dir = tempfile::tempdir().unwrap();
    let v1 = archive(dir.path(), "v1.zip", 1);
    let v2 = archive(dir.path(), "v2.zip", 5);
    let server = Server::start();
    let url = server.url("m.zip");
    let commands: [&[&str]; 2] = [
        &["cat", "fc.w", "--json", "--tag", "fp32"],
        &["show", "--json", "--tag", "step-2"],
    ];
    for args in commands {
        server.put("m.zip", std::fs::read(&v1).unwrap());
        server.replace_after(1, "m.zip", std::fs::read(&v2).unwrap());
        let before = server.count();
        let got = json_on(args, &url);
        let new = json_on(args, v2.to_str().unwrap());
        assert_eq!(got, new, "{args:?}");
        assert_ne!(got, json_on(args, v1.to_str().unwrap()), "{args:?}");
        let seen = &server.requests()[before..];
        // The open, the request refused with 412, a HEAD for the version, then the
        // whole command again.
        assert!(seen[1].if_match.is_some(), "{seen:#?}");
        assert!(seen.iter().any(|r| r.method == "HEAD"), "{seen:#?}");
        assert_eq!(
            seen.iter()
                .filter(|r| r.if_match.is_none() && r.method == "GET")
                .count(),
            2,
            "two opens: {seen:#?}"
        );
    }
}

/// `extract` of a URL fetches each tensor once: what it would write is added up from the
/// tensors' headers (one batched request), not from the tensors, which are fetched when
/// written.
#[test]
fn extract_from_a_url_fetches_each_tensor_once() {
    let dir = tempfile::tempdir().unwrap();
    let path = archive(dir.path(), "m.zip", 1);
    let server = Server::start();
    server.put("m.zip", std::fs::read(&path).unwrap());
    let before = server.bytes_sent();
    let out = dir.path().join("big");
    modelzip()
        .args([
            "extract",
            &server.url("m.zip"),
            "--tag",
            "big",
            "-q",
            "--out",
        ])
        .arg(&out)
        .assert()
        .success();
    let sent = server.bytes_sent() - before;
    let tensor = std::fs::metadata(out.join("x")).unwrap().len();
    assert!(tensor > 1_200_000, "{tensor}");
    assert!(
        sent >= tensor && sent < tensor + tensor / 4,
        "{sent} for {tensor}"
    );
}

/// `modelzip` on an S3 URL whose endpoint is the test server (or nothing), with no AWS
/// settings from the environment of the test.
fn on_s3(endpoint: &str) -> assert_cmd::Command {
    let mut cmd = modelzip();
    for k in [
        "AWS_ACCESS_KEY_ID",
        "AWS_SECRET_ACCESS_KEY",
        "AWS_SESSION_TOKEN",
        "AWS_PROFILE",
        "AWS_SKIP_SIGNATURE",
        "AWS_CONTAINER_CREDENTIALS_RELATIVE_URI",
        "AWS_CONTAINER_CREDENTIALS_FULL_URI",
        "AWS_WEB_IDENTITY_TOKEN_FILE",
    ] {
        cmd.env_remove(k);
    }
    cmd.env("AWS_ENDPOINT_URL", endpoint)
        .env("AWS_ALLOW_HTTP", "true")
        .env("AWS_REGION", "us-east-1")
        // No instance metadata service: a closed port on 127.0.0.1.
        .env("AWS_METADATA_ENDPOINT", "http://127.0.0.1:1");
    cmd
}

/// A missing bucket, a missing key, an endpoint that refuses connections and missing
/// credentials: each one line naming the URL and what is wrong.
#[test]
fn s3_setup_errors_are_one_line_naming_the_url() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start();
    server.put(
        "bucket/m.zip",
        std::fs::read(archive(dir.path(), "a.zip", 1)).unwrap(),
    );
    let endpoint = server.url("");
    let endpoint = endpoint.trim_end_matches('/');
    let signed = |cmd: &mut assert_cmd::Command| {
        cmd.env("AWS_ACCESS_KEY_ID", "test")
            .env("AWS_SECRET_ACCESS_KEY", "test");
    };
    let mut cmd = on_s3(endpoint);
    signed(&mut cmd);
    let doc = json_of(cmd.args(["tags", "s3://bucket/m.zip", "--json"]));
    assert_eq!(doc["tags"].as_array().unwrap().len(), 3);
    for (url, says) in [
        ("s3://nobucket/m.zip", "the bucket does not exist"),
        ("s3://bucket/none.zip", "no object at s3://bucket/none.zip"),
    ] {
        let mut cmd = on_s3(endpoint);
        signed(&mut cmd);
        let line = expect_error(cmd.args(["tags", url]));
        assert!(line.contains(url) && line.contains(says), "{line}");
    }
    let mut cmd = on_s3("http://127.0.0.1:1");
    signed(&mut cmd);
    let line = expect_error(cmd.args(["tags", "s3://bucket/m.zip"]));
    assert!(line.contains("s3://bucket/m.zip"), "{line}");
    assert!(line.contains("Connection refused"), "{line}");
    let line = expect_error(on_s3(endpoint).args(["tags", "s3://bucket/m.zip"]));
    assert!(
        line.contains("no credentials for s3://bucket/m.zip"),
        "{line}"
    );
}

/// `cp URL LOCAL` whose server drops the connection mid-body (every time, retries
/// spent): no DST, no temporary file.
#[test]
fn a_download_cut_off_mid_body_leaves_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let a = archive(dir.path(), "a.zip", 1);
    let server = Server::start();
    server.put("m.zip", std::fs::read(&a).unwrap());
    server.set_mode(crate::support::http_server::Mode::Truncate);
    let out = dir.path().join("out");
    std::fs::create_dir(&out).unwrap();
    let down = out.join("down.zip");
    let line = expect_error(modelzip().arg("cp").arg(server.url("m.zip")).arg(&down));
    assert!(line.contains("cannot download"), "{line}");
    assert!(line.contains(&server.url("m.zip")), "{line}");
    assert_eq!(crate::support::left_but_the_lock(&out), 0);
}

/// No library or object_store internals in `cp`'s errors: no Rust enum names
/// ("UploadMode::"), no "Generic S3 error" / "Generic HTTP error" / "Generic local file
/// error", no retry settings ("max_retries: 3, retry_timeout: 2592000s"); a refused
/// upload names the flag that would do it.
#[test]
fn cp_errors_say_it_in_the_cli_users_words() {
    let clean = |line: &str| {
        for internal in ["Generic", "UploadMode::", "object_store", "retry_timeout"] {
            assert!(!line.contains(internal), "{internal} in: {line}");
        }
    };
    let dir = tempfile::tempdir().unwrap();
    let a = archive(dir.path(), "a.zip", 1);
    let server = Server::start();
    let endpoint = server.url("");
    let endpoint = endpoint.trim_end_matches('/').to_string();
    let s3 = || {
        let mut cmd = on_s3(&endpoint);
        cmd.env("AWS_ACCESS_KEY_ID", "test")
            .env("AWS_SECRET_ACCESS_KEY", "test");
        cmd
    };
    let url = "s3://bucket/m.zip";
    s3().arg("cp").arg(&a).arg(url).assert().success();
    // Create-only: the object exists.
    let line = expect_error(s3().arg("cp").arg(&a).arg(url));
    assert!(
        line.contains("an object already exists at s3://bucket/m.zip"),
        "{line}"
    );
    assert!(line.ends_with("; pass --force to replace it"), "{line}");
    clean(&line);
    // A stale --if-match.
    let line = expect_error(
        s3().arg("cp")
            .arg(&a)
            .arg(url)
            .args(["--if-match", "\"stale\""]),
    );
    assert!(line.contains("nothing was replaced"), "{line}");
    assert!(
        line.ends_with("; pass --force instead of --if-match to replace whatever is there"),
        "{line}"
    );
    clean(&line);
    // Every part of a multipart upload refused (500): the status, not object_store's words.
    let large = dir.path().join("large.zip");
    let mut w = ArchiveWriter::create(&large).unwrap();
    let n = (modelzip::remote::MULTIPART_THRESHOLD / 4 + 1024) as usize;
    let t = Tensor::from_slice(vec![n as u64], &vec![0.5f32; n]).unwrap();
    w.add_tag(TagBuilder::new("large").param("x", t)).unwrap();
    w.finish().unwrap();
    server.fail_parts(true);
    let line = expect_error(
        s3().arg("cp")
            .arg(&large)
            .arg("s3://bucket/large.zip")
            .arg("--force"),
    );
    assert!(
        line.contains("cannot upload") && line.contains("500"),
        "{line}"
    );
    clean(&line);
    server.fail_parts(false);
    std::fs::remove_file(&large).unwrap();
    // A read answered 503 until the retries are spent.
    server.put("h.zip", std::fs::read(&a).unwrap());
    server.fail_next(1000);
    let line = expect_error(modelzip().args(["tags", &server.url("h.zip")]));
    assert!(line.contains("503"), "{line}");
    clean(&line);
    server.fail_next(0);
    // A download larger than the free space: said as the local side's problem.
    server.set_mode(crate::support::http_server::Mode::HugeLength);
    let down = dir.path().join("down.zip");
    let line = expect_error(modelzip().arg("cp").arg(server.url("h.zip")).arg(&down));
    assert!(line.contains("are free"), "{line}");
    clean(&line);
    assert!(!down.exists());
}
