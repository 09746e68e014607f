//! A params.txt that maps many names to one tensor file (legal: that is what sharing
//! is) must stay cheap to read and bounded to expand: the peak memory of `show --json`
//! on 200,000 aliases, and the output limits of `extract` and `export-paddle`.

use crate::support::rss;
use modelzip::{ArchiveWriter, TagBuilder, Tensor};
use rss::peak_rss_kib;
use std::path::{Path, PathBuf};
use std::process::Command;

/// An archive with one tag whose `n` parameters all refer to one tensor file of
/// `elems` f32 values.
fn alias_archive(dir: &Path, n: usize, elems: usize) -> PathBuf {
    let path = dir.join("alias.zip");
    let t = Tensor::from_slice(vec![elems as u64], &vec![0.5f32; elems]).unwrap();
    let mut tag = TagBuilder::new("a");
    for i in 0..n {
        tag = tag.param(format!("layer{i:06}.some_weight_name"), t.clone());
    }
    let mut w = ArchiveWriter::create(&path).unwrap();
    w.add_tag(tag).unwrap();
    w.finish().unwrap();
    path
}

fn modelzip() -> Command {
    Command::new(env!("CARGO_BIN_EXE_modelzip"))
}

#[test]
fn show_json_of_200k_aliases_stays_under_128_mib() {
    let d = tempfile::tempdir().unwrap();
    let path = alias_archive(d.path(), 200_000, 1024);
    // The archive is small: 200,000 names, one 4 KiB tensor file.
    assert!(std::fs::metadata(&path).unwrap().len() < 8 << 20);
    for args in [
        vec!["show", "--json"],
        vec!["show"],
        vec!["tags", "--json"],
        vec!["verify"],
    ] {
        let mut a: Vec<&std::ffi::OsStr> = args.iter().map(|s| s.as_ref()).collect();
        a.push(path.as_os_str());
        let (code, kib) = peak_rss_kib(&a);
        let ok = code == Some(0);
        assert!(ok, "{args:?} failed");
        assert!(
            kib < 128 * 1024,
            "{args:?} on 200,000 aliases peaked at {kib} KiB (limit 128 MiB)"
        );
    }
}

#[test]
fn show_json_describes_every_alias() {
    let d = tempfile::tempdir().unwrap();
    let path = alias_archive(d.path(), 300, 4);
    let out = modelzip()
        .args(["show", "--json"])
        .arg(&path)
        .output()
        .unwrap();
    assert!(out.status.success());
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let params = v["params"].as_array().unwrap();
    assert_eq!(params.len(), 300);
    assert_eq!(params[299]["name"], "layer000299.some_weight_name");
    assert_eq!(params[299]["entry"], params[0]["entry"]);
    assert_eq!(params[299]["dims"], serde_json::json!([4]));
    assert_eq!(params[299]["data_sha256"], params[0]["data_sha256"]);
}

#[test]
fn extract_refuses_above_its_limits_before_writing_and_obeys_raised_ones() {
    let d = tempfile::tempdir().unwrap();
    let path = alias_archive(d.path(), 1_000, 256);
    // Each file: a 1,024-byte payload behind a small record header.
    let out_dir = d.path().join("out");
    let run = |extra: &[&str]| {
        modelzip()
            .arg("extract")
            .arg(&path)
            .arg("--out")
            .arg(&out_dir)
            .args(extra)
            .output()
            .unwrap()
    };
    let refused = run(&["--max-files", "999"]);
    assert_eq!(refused.status.code(), Some(2));
    let msg = String::from_utf8_lossy(&refused.stderr);
    assert!(
        msg.contains("would write 1000 files") && msg.contains("--max-files"),
        "{msg}"
    );
    assert!(!out_dir.exists(), "nothing may be written before the check");

    let refused = run(&["--max-output", "1000K"]);
    assert_eq!(refused.status.code(), Some(2));
    let msg = String::from_utf8_lossy(&refused.stderr);
    assert!(
        msg.contains("would write") && msg.contains("limit of 1024000 bytes"),
        "{msg}"
    );
    assert!(!out_dir.exists(), "nothing may be written before the check");

    let ok = run(&["--max-files", "1000", "--max-output", "2M", "--json"]);
    assert!(
        ok.status.success(),
        "{}",
        String::from_utf8_lossy(&ok.stderr)
    );
    let v: serde_json::Value = serde_json::from_slice(&ok.stdout).unwrap();
    assert_eq!(v["files"].as_array().unwrap().len(), 1000);
    // Every alias is a whole, independent copy of the record.
    let first = std::fs::read(out_dir.join("layer000000.some_weight_name")).unwrap();
    let last = std::fs::read(out_dir.join("layer000999.some_weight_name")).unwrap();
    assert!(first.len() > 1024);
    assert_eq!(first, last);
    let t = modelzip::tensor::decode_tensor(&last).unwrap();
    assert_eq!(t.to_f32_vec().unwrap()[255], 0.5);
}

#[test]
fn extract_default_limit_refuses_200k_files() {
    let d = tempfile::tempdir().unwrap();
    let path = alias_archive(d.path(), 100_001, 1);
    let out_dir = d.path().join("out");
    let out = modelzip()
        .arg("extract")
        .arg(&path)
        .arg("--out")
        .arg(&out_dir)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let msg = String::from_utf8_lossy(&out.stderr);
    assert!(
        msg.contains("would write 100001 files") && msg.contains("limit of 100000 files"),
        "{msg}"
    );
    assert!(!out_dir.exists());
}

#[test]
fn size_arguments_parse_with_units() {
    let d = tempfile::tempdir().unwrap();
    let path = alias_archive(d.path(), 1, 1);
    let out = modelzip()
        .arg("extract")
        .arg(&path)
        .arg("--out")
        .arg(d.path().join("o"))
        .args(["--max-output", "12Q"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("unknown unit"));
}

/// An archive with tags `a` and `b` whose `n` parameters (the same names) all refer to
/// one tensor file each, with different values: every name is a changed pair.
fn alias_pair_archive(dir: &Path, n: usize) -> PathBuf {
    let path = dir.join(format!("pair{n}.zip"));
    let mut w = ArchiveWriter::create(&path).unwrap();
    for (tag_name, v) in [("a", 0.5f32), ("b", 0.75f32)] {
        let t = Tensor::from_slice(vec![64], &[v; 64]).unwrap();
        let mut tag = TagBuilder::new(tag_name);
        for i in 0..n {
            tag = tag.param(format!("layer{i:06}.some_weight_name"), t.clone());
        }
        w.add_tag(tag).unwrap();
    }
    w.finish().unwrap();
    path
}

#[test]
fn diff_costs_at_most_300_bytes_a_pair_beyond_the_names() {
    let d = tempfile::tempdir().unwrap();
    let name_len = "layer000000.some_weight_name".len() as u64;
    let (small, large) = (20_000u64, 120_000u64);
    let a_small = alias_pair_archive(d.path(), small as usize);
    let a_large = alias_pair_archive(d.path(), large as usize);
    for json in [true, false] {
        let peak = |path: &Path| {
            let mut a: Vec<&std::ffi::OsStr> = vec!["diff".as_ref()];
            if json {
                a.push("--json".as_ref());
            }
            a.extend([path.as_os_str(), "a".as_ref(), "b".as_ref()]);
            let (code, kib) = peak_rss_kib(&a);
            assert_eq!(code, Some(0), "diff (json {json}) failed");
            kib * 1024
        };
        let (lo, hi) = (peak(&a_small), peak(&a_large));
        // The growth between the two sizes, per name pair: memory that scales with the
        // names, not the process's fixed cost. Each name is held by both tags' tables.
        let per_pair = hi.saturating_sub(lo) / (large - small);
        eprintln!("diff json={json}: {lo} B at {small}, {hi} B at {large}: {per_pair} B a pair");
        assert!(
            per_pair <= 300 + 2 * name_len,
            "diff (json {json}) costs {per_pair} bytes a name pair (limit 300 + 2 × {name_len} for the names)"
        );
    }
}
