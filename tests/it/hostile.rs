//! Hostile inputs: every file in tests/hostile/ (made by tests/hostile/make_hostile.py,
//! named after its attack) through the library and through the `modelzip` binary, with
//! the outcome expected.json gives for it; the memory a bomb can make the CLI use; and
//! `extract` never writing outside its target.

use crate::support::rss;
use modelzip::{Archive, Error, ErrorKind, Tag};
use rss::peak_rss_kib;
use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

fn hostile_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/hostile")
}

/// (file, expectation) rows of expected.json, sorted by file name.
fn manifest() -> Vec<(String, Value)> {
    let text = std::fs::read_to_string(hostile_dir().join("expected.json")).unwrap();
    let v: Value = serde_json::from_str(&text).unwrap();
    let mut rows: Vec<(String, Value)> = v
        .as_object()
        .unwrap()
        .iter()
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    rows.sort_by(|a, b| a.0.cmp(&b.0));
    rows
}

/// Copies the file (and its sidecars, e.g. a journal) into a fresh directory: opening may
/// roll back, and nothing may be written next to the committed files.
fn stage(file: &str, row: &Value) -> (tempfile::TempDir, PathBuf) {
    let d = tempfile::tempdir().unwrap();
    let to = d.path().join(file);
    std::fs::copy(hostile_dir().join(file), &to).unwrap();
    for suffix in row["extra_files"].as_array().into_iter().flatten() {
        let suffix = suffix.as_str().unwrap();
        std::fs::copy(
            hostile_dir().join(format!("{file}{suffix}")),
            d.path().join(format!("{file}{suffix}")),
        )
        .unwrap();
    }
    (d, to)
}

/// Reads everything the command reads: each tag's tables, graph, metadata and tensors.
/// (Each tensor file once: a million names may alias one.)
fn read_tag(tag: &Tag<'_>) -> Result<(), Error> {
    tag.graph()?;
    tag.metadata()?;
    let mut seen = std::collections::HashSet::new();
    let locations = tag.locations();
    for loc in locations {
        if seen.insert(loc.entry()) {
            tag.tensor(loc)?;
        }
    }
    Ok(())
}

/// What the library says about the file, read the way `command` reads it.
fn library_outcome(path: &Path, command: &str) -> Result<Vec<String>, Error> {
    let a = Archive::open(path)?;
    match command.split_whitespace().next().unwrap() {
        "verify" => Ok(a.verify().problems.into_iter().map(|p| p.message).collect()),
        "tags" => {
            for t in a.tags() {
                read_tag(&a.tag(t)?)?;
            }
            Ok(Vec::new())
        }
        _ => {
            read_tag(&a.latest()?)?;
            Ok(Vec::new())
        }
    }
}

/// The `ErrorKind` variant's name, e.g. `LimitExceeded`.
fn kind_name(e: &Error) -> String {
    format!("{:?}", e.kind())
        .chars()
        .take_while(|c| c.is_alphanumeric())
        .collect()
}

#[test]
fn at_least_sixty_hostile_files_each_with_an_expectation() {
    let rows = manifest();
    assert!(rows.len() >= 60, "only {} hostile files", rows.len());
    for (file, row) in &rows {
        assert!(hostile_dir().join(file).is_file(), "{file} is missing");
        let exit = row["exit"].as_i64().unwrap();
        assert!([0, 1, 2].contains(&exit), "{file}");
        assert!(
            row.get("error_contains").is_some() || row.get("stdout_contains").is_some(),
            "{file}: nothing to check"
        );
    }
}

#[test]
fn library_refuses_each_hostile_file_with_the_expected_kind() {
    let mut failures = Vec::new();
    for (file, row) in manifest() {
        let (_d, path) = stage(&file, &row);
        let command = row["command"].as_str().unwrap();
        let exit = row["exit"].as_i64().unwrap();
        let outcome = library_outcome(&path, command);
        let want = row["error_contains"].as_str();
        let problem = match (exit, row.get("kind").and_then(Value::as_str), outcome) {
            (2, Some(kind), Err(e)) => {
                let msg = e.to_string();
                if kind_name(&e) != kind {
                    Some(format!("kind {} (want {kind}): {msg}", kind_name(&e)))
                } else if !msg.contains(want.unwrap()) {
                    Some(format!("message {msg:?} lacks {:?}", want.unwrap()))
                } else {
                    None
                }
            }
            (2, Some(kind), Ok(_)) => Some(format!("accepted, want {kind}")),
            (1, _, Ok(problems)) => (!problems.iter().any(|p| p.contains(want.unwrap())))
                .then(|| format!("problems {problems:?} lack {:?}", want.unwrap())),
            // No kind: the library accepts the file (exit 0 rows, and names only the
            // extract command refuses).
            (_, None, Ok(_)) if exit != 1 => None,
            (_, _, Err(e)) => Some(format!("unexpected error: {e}")),
            (_, _, Ok(_)) => Some("unexpected success".into()),
        };
        if let Some(p) = problem {
            failures.push(format!("{file}: {p}"));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

fn modelzip() -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_modelzip"));
    // A panic would print a backtrace; the check below would see it.
    c.env("RUST_BACKTRACE", "1").stdin(Stdio::null());
    c
}

/// `modelzip <sub> ARCHIVE <rest>` with `OUT` replaced by `out`.
fn cli_command(command: &str, archive: &Path, out: &Path) -> Command {
    let mut words = command.split_whitespace();
    let mut c = modelzip();
    c.arg(words.next().unwrap()).arg(archive);
    for w in words {
        if w == "OUT" {
            c.arg(out);
        } else {
            c.arg(w);
        }
    }
    c
}

/// Checks exit code 2 and one `modelzip: ` line on stderr with no panic or backtrace.
fn one_line_error(out: &Output) -> Result<String, String> {
    let stderr = String::from_utf8_lossy(&out.stderr).to_string();
    if out.status.code() != Some(2) {
        return Err(format!("exit {:?}, stderr {stderr:?}", out.status.code()));
    }
    let ok = stderr.starts_with("modelzip: ")
        && stderr.trim_end().lines().count() == 1
        && !stderr.contains("panicked")
        && !stderr.contains("backtrace");
    if ok {
        Ok(stderr.trim_end().to_string())
    } else {
        Err(format!("stderr is not one error line: {stderr:?}"))
    }
}

/// Every file and directory under `root`, relative.
fn tree(root: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut stack = vec![root.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).unwrap().flatten() {
            let p = e.path();
            out.push(p.strip_prefix(root).unwrap().to_path_buf());
            if e.file_type().unwrap().is_dir() {
                stack.push(p);
            }
        }
    }
    out.sort();
    out
}

#[test]
fn cli_answers_each_hostile_file_with_one_line_and_the_expected_exit() {
    let mut failures = Vec::new();
    for (file, row) in manifest() {
        let (d, path) = stage(&file, &row);
        let command = row["command"].as_str().unwrap();
        let exit = row["exit"].as_i64().unwrap();
        let target = d.path().join("out");
        let before = tree(d.path());
        let out = cli_command(command, &path, &target).output().unwrap();
        let stdout = String::from_utf8_lossy(&out.stdout);
        let stderr = String::from_utf8_lossy(&out.stderr);
        let problem = match exit {
            2 => match one_line_error(&out) {
                Ok(line) => {
                    let want = row["error_contains"].as_str().unwrap();
                    (!line.contains(want)).then(|| format!("{line:?} lacks {want:?}"))
                }
                Err(e) => Some(e),
            },
            code => {
                let want = row["stdout_contains"]
                    .as_str()
                    .or(row["error_contains"].as_str())
                    .unwrap();
                if out.status.code() != Some(code as i32) {
                    Some(format!("exit {:?}, stderr {stderr:?}", out.status.code()))
                } else if !stdout.contains(want) {
                    Some(format!("stdout lacks {want:?}"))
                } else if stderr.contains("panicked") {
                    Some(format!("stderr {stderr:?}"))
                } else {
                    None
                }
            }
        };
        if let Some(p) = problem {
            failures.push(format!("{file} ({command}): {p}"));
        }
        if command.starts_with("extract") {
            // Nothing was written: not into the target, not beside it, not anywhere else
            // (an empty target directory may be left).
            let after: Vec<PathBuf> = tree(d.path())
                .into_iter()
                .filter(|p| p.as_os_str() != "out")
                .collect();
            if after != before {
                failures.push(format!("{file}: extract left {after:?}"));
            }
            assert!(!Path::new("/tmp/modelzip-evil").exists(), "{file}");
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

#[test]
fn bombs_and_huge_dims_keep_the_cli_within_64_mib_over_the_input_size() {
    let mut measured = Vec::new();
    for (file, row) in manifest() {
        let attack = file.starts_with("deflate-bomb")
            || file.starts_with("tensor-dims")
            || file.contains("overflow")
            || file.contains("2pow");
        if !attack {
            continue;
        }
        let (_d, path) = stage(&file, &row);
        let input_kib = std::fs::metadata(&path).unwrap().len() / 1024;
        for sub in ["tags", "show", "verify"] {
            let (code, kib) = peak_rss_kib(&[sub.as_ref(), path.as_os_str()]);
            // 0 where the command never reads the bomb (`show` and metadata.json).
            assert!(
                matches!(code, Some(0) | Some(1) | Some(2)),
                "{file} {sub}: exit {code:?}"
            );
            assert!(
                kib < input_kib + 64 * 1024,
                "{file} {sub}: peak RSS {kib} KiB for an input of {input_kib} KiB"
            );
            measured.push((file.clone(), sub, kib));
        }
    }
    assert!(measured.len() >= 24, "{measured:?}");
    let worst = measured.iter().max_by_key(|m| m.2).unwrap();
    eprintln!(
        "{} runs; largest peak RSS {} KiB ({} {})",
        measured.len(),
        worst.2,
        worst.0,
        worst.1
    );
}

#[test]
fn central_directory_errors_name_the_record_offset() {
    // Regression: errors found inside a central-directory record said "byte 0".
    let (_d, path) = stage("encrypted-flag.zip", &Value::Null);
    let e = Archive::open(&path).unwrap_err();
    let bytes = std::fs::read(&path).unwrap();
    let eocd = bytes.len() - 22;
    let cd_offset = u32::from_le_bytes(bytes[eocd + 16..eocd + 20].try_into().unwrap()) as u64;
    // The third record (the tensor) starts after two records of 46 bytes + name.
    let third = cd_offset + 46 + "tags.txt".len() as u64 + 46 + "t/params.txt".len() as u64;
    assert_eq!(e.location().offset, Some(third), "{e}");
}

#[test]
fn a_journal_left_by_a_killed_writer_is_rolled_back_on_open() {
    let file = "journal-left-by-killed-writer.zip";
    let rows = manifest();
    let row = &rows.iter().find(|(f, _)| f == file).unwrap().1;
    let (d, path) = stage(file, row);
    let journal = d.path().join(format!("{file}.journal"));
    assert!(journal.exists());
    // The CLI (a reader) rolls back: the old tag is there, the half-written one is not.
    let out = modelzip()
        .arg("tags")
        .arg(&path)
        .arg("--json")
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    let names: Vec<&str> = v["tags"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["a"]);
    assert!(!journal.exists(), "the journal was not removed");
    let out = modelzip().arg("verify").arg(&path).output().unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
    let a = Archive::open(&path).unwrap();
    assert_eq!(a.tags(), ["a"]);
    assert_eq!(
        a.dead_bytes(),
        0,
        "the file was truncated back to its old length"
    );
}

#[test]
fn a_journal_of_another_archive_is_never_replayed() {
    // Regression: the journal was replayed onto whatever file had the archive's name.
    let file = "journal-of-another-archive.zip";
    let rows = manifest();
    let row = &rows.iter().find(|(f, _)| f == file).unwrap().1;
    let (d, path) = stage(file, row);
    let journal = d.path().join(format!("{file}.journal"));
    let original = std::fs::read(&path).unwrap();
    let e = Archive::open(&path).unwrap_err();
    assert!(matches!(e.kind(), ErrorKind::ForeignJournal { .. }), "{e}");
    assert!(e.to_string().contains("move the journal away"), "{e}");
    // Writers that add to it refuse too; nothing was changed.
    let out = modelzip()
        .args(["rm"])
        .arg(&path)
        .arg("x")
        .output()
        .unwrap();
    assert!(one_line_error(&out).unwrap().contains("does not belong"));
    assert_eq!(std::fs::read(&path).unwrap(), original);
    assert!(journal.exists());
    // Moved away, the archive opens as it is.
    std::fs::rename(&journal, d.path().join("saved.journal")).unwrap();
    assert_eq!(Archive::open(&path).unwrap().tags(), ["x"]);
    // A writer replacing the file drops a journal that is not its own.
    std::fs::rename(d.path().join("saved.journal"), &journal).unwrap();
    let mut w = modelzip::ArchiveWriter::create(&path).unwrap();
    w.add_tag(modelzip::TagBuilder::new("y")).unwrap();
    w.finish().unwrap();
    assert!(!journal.exists());
    assert_eq!(Archive::open(&path).unwrap().tags(), ["y"]);
}

/// `{"x":[0,0,...]}`: 3 MiB of text (under metadata.json's 4 MiB limit) that would parse
/// to 1.5 million 80-byte JSON values.
fn costly_metadata() -> Vec<u8> {
    format!("{{\"x\":[{}0]}}", "0,".repeat(3 << 19)).into_bytes()
}

#[test]
fn metadata_json_that_would_parse_to_far_more_than_its_size_is_not_parsed() {
    let dir = tempfile::tempdir().unwrap();
    // Writers refuse it.
    let path = dir.path().join("w.zip");
    let mut w = modelzip::ArchiveWriter::create(&path).unwrap();
    let e = w
        .add_tag(modelzip::TagBuilder::new("t").metadata(costly_metadata()))
        .unwrap_err();
    assert!(
        matches!(e.kind(), ErrorKind::LimitExceeded { what, .. } if what.contains("parsing the metadata")),
        "{e}"
    );
    drop(w);
    // Readers that parse it say why instead (another tool wrote this one).
    let fake = dir.path().join("fake.zip");
    let mut z = zip::ZipWriter::new(std::fs::File::create(&fake).unwrap());
    let o = zip::write::SimpleFileOptions::default();
    for (name, bytes) in [
        ("tags.txt", b"b\n".to_vec()),
        ("b/params.txt", Vec::new()),
        ("b/metadata.json", costly_metadata()),
    ] {
        z.start_file(name, o).unwrap();
        std::io::Write::write_all(&mut z, &bytes).unwrap();
    }
    z.finish().unwrap();
    let ckpt = modelzip::checkpoint::Checkpointer::open(&fake, Default::default()).unwrap();
    let e = ckpt.restore("b").unwrap_err().to_string();
    assert!(
        e.contains("estimated memory of parsing metadata.json"),
        "{e}"
    );
    let out = Command::new(env!("CARGO_BIN_EXE_modelzip"))
        .args(["export", "--format", "safetensors", "--tag", "b"])
        .arg(&fake)
        .arg("--out")
        .arg(dir.path().join("b.safetensors"))
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(
        err.contains("estimated memory of parsing metadata.json"),
        "{err}"
    );
}
