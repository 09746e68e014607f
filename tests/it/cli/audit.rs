//! Regressions found by a hostile-user audit of the CLI: each test is one defect that
//! was found by using the binary the way the docs say, and fixed.

use super::harness::{expect_error, fixture, json_of, modelzip};
use std::path::{Path, PathBuf};

fn persistables() -> PathBuf {
    fixture("paddle/3.3.1/mlp_persistables")
}

/// The names in `dir`, sorted.
fn listing(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    names
}

/// The parameter names of `tag`, in order.
fn param_names(archive: &Path, tag: &str) -> Vec<String> {
    json_of(
        modelzip()
            .arg("show")
            .arg(archive)
            .args(["--tag", tag, "--json"]),
    )["params"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["name"].as_str().unwrap().to_string())
        .collect()
}

/// `pack` used to skip symlinks silently: a directory of links packed into a tag
/// missing those parameters (or was "empty"). Links to files and to directories are
/// followed, as `import-paddle --dir` does; a link looping back is an error.
#[cfg(unix)]
#[test]
fn pack_follows_symlinks_to_files_and_directories() {
    use std::os::unix::fs::symlink;
    let d = tempfile::tempdir().unwrap();
    let src = persistables();
    let dir = d.path().join("linked");
    std::fs::create_dir(&dir).unwrap();
    symlink(src.join("fc_0.w_0"), dir.join("fc_0.w_0")).unwrap();
    std::fs::copy(src.join("fc_0.b_0"), dir.join("fc_0.b_0")).unwrap();
    symlink(&src, dir.join("sub")).unwrap();
    let a = d.path().join("m.zip");
    modelzip()
        .arg("pack")
        .arg(&a)
        .arg(&dir)
        .args(["--tag", "t", "-q"])
        .assert()
        .success();
    assert_eq!(
        param_names(&a, "t"),
        [
            "fc_0.b_0",
            "fc_0.w_0",
            "sub/fc_0.b_0",
            "sub/fc_0.w_0",
            "sub/fc_1.b_0",
            "sub/fc_1.w_0"
        ]
    );
    // The linked file's data, not the link, was stored.
    let raw = modelzip()
        .arg("cat")
        .arg(&a)
        .args(["fc_0.w_0", "--raw"])
        .output()
        .unwrap();
    let file = std::fs::read(src.join("fc_0.w_0")).unwrap();
    assert!(raw.status.success() && file.ends_with(&raw.stdout) && raw.stdout.len() == 512);

    // A link to an ancestor is a loop: one error line naming it, nothing written.
    let looped = d.path().join("looped");
    std::fs::create_dir_all(looped.join("x")).unwrap();
    std::fs::copy(src.join("fc_0.b_0"), looped.join("fc_0.b_0")).unwrap();
    symlink("..", looped.join("x/up")).unwrap();
    let b = d.path().join("loop.zip");
    let line = expect_error(
        modelzip()
            .arg("pack")
            .arg(&b)
            .arg(&looped)
            .args(["--tag", "t"]),
    );
    assert!(line.contains("up") && line.contains("loop"), "{line}");
    assert!(!b.exists());
}

/// An archive inside the directory being packed: the second `pack` used to fail with
/// "cannot decode DIR/m.zip: unsupported LoDTensor version 67324752" (the archive read
/// as a tensor file). Refused up front, naming both, before the lock file exists; the
/// same for --updater.
#[test]
fn pack_refuses_an_archive_inside_the_directory_it_packs() {
    let d = tempfile::tempdir().unwrap();
    let dir = d.path().join("params");
    std::fs::create_dir(&dir).unwrap();
    for f in ["fc_0.b_0", "fc_0.w_0"] {
        std::fs::copy(persistables().join(f), dir.join(f)).unwrap();
    }
    for archive in [dir.join("m.zip"), dir.join("sub/deeper.zip")] {
        if let Some(p) = archive.parent() {
            std::fs::create_dir_all(p).unwrap();
        }
        let line = expect_error(
            modelzip()
                .arg("pack")
                .arg(&archive)
                .arg(&dir)
                .args(["--tag", "t"]),
        );
        assert!(
            line.contains("is inside it") && line.contains("params"),
            "{line}"
        );
    }
    std::fs::remove_dir(dir.join("sub")).unwrap();
    assert_eq!(listing(&dir), ["fc_0.b_0", "fc_0.w_0"]);
    // Relative paths: `pack m.zip --tag t .` from inside the directory.
    let line = expect_error(
        modelzip()
            .current_dir(&dir)
            .args(["pack", "m.zip", ".", "--tag", "t"]),
    );
    assert!(line.contains("is inside it"), "{line}");
    assert_eq!(listing(&dir), ["fc_0.b_0", "fc_0.w_0"]);
    // --updater holding the archive.
    let outside = d.path().join("m.zip");
    let line = expect_error(
        modelzip()
            .arg("pack")
            .arg(&outside)
            .arg(persistables())
            .args(["--tag", "t", "--updater"])
            .arg(d.path()),
    );
    assert!(line.contains("updater state"), "{line}");
    assert_eq!(listing(d.path()), ["params"]);
    // Beside the directory is fine.
    modelzip()
        .arg("pack")
        .arg(&outside)
        .arg(&dir)
        .args(["--tag", "t", "-q"])
        .assert()
        .success();
    assert_eq!(param_names(&outside, "t"), ["fc_0.b_0", "fc_0.w_0"]);
    // The archive named through a symlink inside the directory: the link would be read.
    #[cfg(unix)]
    {
        std::os::unix::fs::symlink(&outside, dir.join("link.zip")).unwrap();
        let line = expect_error(
            modelzip()
                .arg("pack")
                .arg(dir.join("link.zip"))
                .arg(&dir)
                .args(["--tag", "u"]),
        );
        assert!(line.contains("is inside it"), "{line}");
    }
}

/// Packs the MLP persistables into `archive` as tag `fp32`, with its graph.
fn mlp_archive(archive: &Path) {
    modelzip()
        .arg("pack")
        .arg(archive)
        .arg(persistables())
        .args(["--tag", "fp32", "-q", "--graph"])
        .arg(fixture("paddle/3.3.1/mlp.pdmodel"))
        .assert()
        .success();
}

/// `extract --force` into the archive's own directory, with a parameter named like the
/// archive, used to delete the archive and write the tensor in its place.
#[test]
fn extract_force_refuses_to_replace_the_archive_it_reads() {
    let d = tempfile::tempdir().unwrap();
    let src = d.path().join("src");
    std::fs::create_dir(&src).unwrap();
    std::fs::copy(persistables().join("fc_0.b_0"), src.join("h.zip")).unwrap();
    let out = d.path().join("out");
    std::fs::create_dir(&out).unwrap();
    let a = out.join("h.zip");
    modelzip()
        .arg("pack")
        .arg(&a)
        .arg(&src)
        .args(["--tag", "t", "-q"])
        .assert()
        .success();
    let before = std::fs::read(&a).unwrap();
    let line = expect_error(
        modelzip()
            .current_dir(&out)
            .args(["extract", "h.zip", "--out", ".", "--force"]),
    );
    assert!(line.contains("the archive being read"), "{line}");
    assert_eq!(std::fs::read(&a).unwrap(), before);
    assert_eq!(listing(&out), ["h.zip", "h.zip.lock"]);
    // Elsewhere it extracts.
    modelzip()
        .arg("extract")
        .arg(&a)
        .arg("--out")
        .arg(d.path().join("x"))
        .arg("-q")
        .assert()
        .success();
    assert_eq!(listing(&d.path().join("x")), ["h.zip"]);
}

/// Junk in a numeric option is a usage error naming the value and what is wrong with it:
/// a negative number used to be "unexpected argument '-5' found" (clap took it for a
/// flag) and `1.5G` "unknown unit". Nothing is written.
#[test]
fn numeric_options_with_junk_say_what_is_wrong() {
    let d = tempfile::tempdir().unwrap();
    let a = d.path().join("m.zip");
    mlp_archive(&a);
    let out = d.path().join("out");
    let cases: [(&[&str], &str); 7] = [
        (
            &["extract", "--max-output", "-5"],
            "a size cannot be negative",
        ),
        (
            &["extract", "--max-output", "1.5G"],
            "a size is a whole number",
        ),
        (&["extract", "--max-output", "12QB"], "unknown unit"),
        (
            &["extract", "--max-files", "-1"],
            "invalid value '-1' for '--max-files",
        ),
        (
            &["export", "--max-output", "-1"],
            "a size cannot be negative",
        ),
        (
            &["export-paddle", "--max-output", "2,5G"],
            "a size is a whole number",
        ),
        (&["prune", "--keep", "-1"], "invalid value '-1' for '--keep"),
    ];
    for (args, why) in cases {
        let mut cmd = modelzip();
        cmd.arg(args[0]).arg(&a).args(&args[1..]);
        if args[0] != "prune" {
            cmd.arg("--out").arg(&out);
        }
        let line = expect_error(&mut cmd);
        assert!(
            line.starts_with("modelzip: usage: invalid value") && line.contains(why),
            "{args:?}: {line}"
        );
    }
    assert_eq!(listing(d.path()), ["m.zip", "m.zip.lock"]);
}

/// `cp URL LOCAL` of an object that is not a zip named the temp file the bytes went
/// to (`file /dir/./.down.zip.XXXXXX.tmp`), which the failure had already deleted: the
/// error names the URL, and nothing is left beside LOCAL but its lock file.
#[test]
fn a_download_that_is_not_an_archive_names_the_url() {
    let d = tempfile::tempdir().unwrap();
    let store = d.path().join("store");
    std::fs::create_dir(&store).unwrap();
    std::fs::write(store.join("junk.zip"), b"not a zip at all").unwrap();
    let url = format!("file://{}/junk.zip", store.display());
    let local = d.path().join("local");
    std::fs::create_dir(&local).unwrap();
    let line = expect_error(
        modelzip()
            .current_dir(&local)
            .args(["cp", url.as_str(), "down.zip"]),
    );
    assert!(
        line.contains("cannot download") && line.contains(&format!("(file {url}, byte")),
        "{line}"
    );
    assert!(!line.contains(".down.zip."), "{line}");
    // Only the download's lock file (a writer's, never deleted).
    assert_eq!(listing(&local), ["down.zip.lock"]);
}

/// Where the data of `entry` starts in the zip `bytes` (after its local header).
fn data_offset(bytes: &[u8], entry: &str) -> usize {
    let u16_at = |i: usize| u16::from_le_bytes([bytes[i], bytes[i + 1]]) as usize;
    let u32_at = |i: usize| u32::from_le_bytes(bytes[i..i + 4].try_into().unwrap()) as usize;
    // The central directory record naming it gives the local header's offset.
    let start = (0..bytes.len() - 46)
        .filter(|&i| bytes[i..i + 4] == *b"PK\x01\x02")
        .find(|&i| &bytes[i + 46..i + 46 + u16_at(i + 28)] == entry.as_bytes())
        .map(|i| u32_at(i + 42))
        .expect("entry in the central directory");
    let n = u16::from_le_bytes([bytes[start + 26], bytes[start + 27]]) as usize;
    let e = u16::from_le_bytes([bytes[start + 28], bytes[start + 29]]) as usize;
    start + 30 + n + e
}

/// A byte flipped in a deflated entry (params.txt, graph.fb) used to be reported three
/// times by `verify` — by the CRC pass, by the tag's tables and by the manifest check —
/// once with `(file m.zip, entry ...)` inside the message and, for the graph, with
/// `"entry": null` (and a corrupt _summary.txt twice, the second time as "ignored: ...").
/// Each problem is reported once, with its entry, and the message says the rest of
/// where (the byte offset).
#[test]
fn verify_reports_a_corrupt_entry_once_with_its_entry() {
    let d = tempfile::tempdir().unwrap();
    let a = d.path().join("m.zip");
    mlp_archive(&a);
    modelzip()
        .args(["convert", "--tag", "fp32", "--to", "flatbuffers", "-q"])
        .arg(&a)
        .assert()
        .success();
    let good = std::fs::read(&a).unwrap();
    for entry in ["fp32/params.txt", "fp32/graph.fb", "_summary.txt"] {
        let mut bytes = good.clone();
        bytes[data_offset(&good, entry) + 5] ^= 0x01;
        std::fs::write(&a, &bytes).unwrap();
        let out = modelzip()
            .arg("verify")
            .arg(&a)
            .arg("--json")
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(1));
        let doc: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        let problems = doc["problems"].as_array().unwrap();
        assert_eq!(problems.len(), 1, "{entry}: {problems:#?}");
        assert_eq!(problems[0]["entry"], entry);
        let message = problems[0]["message"].as_str().unwrap();
        assert!(
            !message.contains("file ") && !message.contains("entry ") && message.contains("(byte "),
            "{message}"
        );
    }
}

/// `cat`'s summary line computed min/max/mean through f32: an INT64 of 2^63 - 1 printed
/// as 9223372000000000000, a UINT32 of 2^32 - 1 as 4294967300, an FP64 of f64::MAX as
/// `inf`; one NaN (or an infinity, printed as a string) dropped the line altogether.
/// Integers are exact, 64-bit floats keep their precision, NaN is left out and counted.
#[test]
fn cat_summary_is_exact_for_integers_and_wide_floats() {
    let d = tempfile::tempdir().unwrap();
    let src = d.path().join("src");
    std::fs::create_dir(&src).unwrap();
    let dense = fixture("paddle/3.3.1/save_dense_tensor");
    for f in [
        "dtype_int64",
        "dtype_uint32",
        "dtype_fp64",
        "dtype_bf16",
        "dtype_fp16",
    ] {
        std::fs::copy(dense.join(format!("{f}.bin")), src.join(f)).unwrap();
    }
    let a = d.path().join("m.zip");
    modelzip()
        .arg("pack")
        .arg(&a)
        .arg(&src)
        .args(["--tag", "t", "-q"])
        .assert()
        .success();
    let summary = |name: &str| {
        let out = modelzip().arg("cat").arg(&a).arg(name).output().unwrap();
        assert!(out.status.success());
        String::from_utf8(out.stdout)
            .unwrap()
            .lines()
            .nth(1)
            .unwrap()
            .to_string()
    };
    // The fixtures' values: tests/paddle/make_fixtures.py.
    assert_eq!(
        summary("dtype_int64"),
        "min -9223372036854775808  max 9223372036854775807  mean 205761315020.5"
    );
    assert_eq!(
        summary("dtype_uint32"),
        "min 0  max 4294967295  mean 1438726500"
    );
    assert_eq!(
        summary("dtype_fp64"),
        "min -2.5  max 1.7976931348623157e308  mean 2.9961552247705263e307"
    );
    // [1, -2, inf, 0, -0, NaN]
    assert_eq!(
        summary("dtype_bf16"),
        "min -2  max inf  mean inf  (1 NaN left out)"
    );
    // [0, 1, -2.5, 65504, 6.1e-5, inf]
    assert_eq!(summary("dtype_fp16"), "min -2.5  max inf  mean inf");
}

/// docs/CLI.md says verify's progress bar never shows "with -q or --json", but `verify`
/// refused `-q` as an unexpected argument. `-q` prints nothing; the exit status is the
/// answer (0 clean, 1 problems); an error that stops it is still one line.
#[test]
fn verify_quiet_answers_with_the_exit_status_only() {
    let d = tempfile::tempdir().unwrap();
    let a = d.path().join("m.zip");
    mlp_archive(&a);
    let out = modelzip().args(["verify", "-q"]).arg(&a).output().unwrap();
    assert_eq!(out.status.code(), Some(0));
    assert!(out.stdout.is_empty() && out.stderr.is_empty());
    let mut bytes = std::fs::read(&a).unwrap();
    let at = data_offset(&bytes, "fp32/params/1.lodtensor") + 100;
    bytes[at] ^= 0xff;
    std::fs::write(&a, &bytes).unwrap();
    let out = modelzip()
        .args(["verify", "--quiet"])
        .arg(&a)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    assert!(out.stdout.is_empty() && out.stderr.is_empty());
    let line = expect_error(modelzip().args(["verify", "-q", "--json"]).arg(&a));
    assert!(line.contains("usage"), "{line}");
    let line = expect_error(
        modelzip()
            .args(["verify", "-q"])
            .arg(d.path().join("missing.zip")),
    );
    assert!(line.contains("missing.zip"), "{line}");
}

/// `modelzip tensor model.zip` (an archive given where a tensor file goes) said only
/// "unsupported LoDTensor version 67324752": it now says it is a zip archive and what
/// reads one, keeping the where.
#[test]
fn tensor_on_an_archive_says_it_is_one() {
    let d = tempfile::tempdir().unwrap();
    let a = d.path().join("m.zip");
    mlp_archive(&a);
    let line = expect_error(modelzip().arg("tensor").arg(&a));
    assert!(
        line.contains("it is a zip archive, not a tensor file")
            && line.contains("modelzip show")
            && line.ends_with("(record 0, byte 0)"),
        "{line}"
    );
}

/// `import` / `import-paddle --dir` of a persistables directory without a model reads
/// every file in it: with the archive in that directory, the first import worked and
/// the next failed with "unsupported LoDTensor version 67324752" (the archive read as a
/// tensor). Refused up front; with a model only its variables are read, so that works.
#[test]
fn import_of_a_directory_holding_the_archive_is_refused_without_a_model() {
    let d = tempfile::tempdir().unwrap();
    let dir = d.path().join("params");
    std::fs::create_dir(&dir).unwrap();
    for f in ["fc_0.b_0", "fc_0.w_0", "fc_1.b_0", "fc_1.w_0"] {
        std::fs::copy(persistables().join(f), dir.join(f)).unwrap();
    }
    let files = listing(&dir);
    for args in [
        &["import", "m.zip", ".", "--tag", "t"][..],
        &["import", "m.zip", ".", "--tag", "t", "--format", "paddle"],
        &["import-paddle", "m.zip", "--tag", "t", "--dir", "."],
    ] {
        let line = expect_error(modelzip().current_dir(&dir).args(args));
        assert!(
            line.contains("read as a parameter") && line.contains("outside the directory"),
            "{args:?}: {line}"
        );
        assert_eq!(listing(&dir), files);
    }
    modelzip()
        .current_dir(&dir)
        .args([
            "import-paddle",
            "m.zip",
            "--tag",
            "t",
            "--dir",
            ".",
            "--model",
        ])
        .arg(fixture("paddle/3.3.1/mlp.pdmodel"))
        .arg("-q")
        .assert()
        .success();
    assert_eq!(param_names(&dir.join("m.zip"), "t").len(), 4);
}

/// `quantize` and `cast` on a directory said "No such device (os error 19)", and on a
/// URL "No such file or directory"; `cp DIR URL` said "No such device" too, and
/// `cp URL DIR` asked for --force, which could not help. Each now says what the path is.
#[test]
fn quantize_cast_and_cp_name_a_directory_or_a_url_as_one() {
    let d = tempfile::tempdir().unwrap();
    let dir = d.path().join("dirarch");
    std::fs::create_dir(&dir).unwrap();
    let a = d.path().join("m.zip");
    mlp_archive(&a);
    let url = format!("file://{}", a.display());
    let dir_s = dir.to_str().unwrap();
    let store = format!("file://{}/up.zip", d.path().display());
    let cases: [(&[&str], &str); 6] = [
        (
            &["quantize", dir_s, "--from", "fp32", "--tag", "q"],
            "is a directory",
        ),
        (
            &[
                "cast", dir_s, "--from", "fp32", "--tag", "h", "--dtype", "fp16",
            ],
            "is a directory",
        ),
        (
            &["quantize", &url, "--from", "fp32", "--tag", "q"],
            "is not supported (",
        ),
        (
            &[
                "cast", &url, "--from", "fp32", "--tag", "h", "--dtype", "bf16",
            ],
            "is not supported (",
        ),
        (&["cp", dir_s, &store], "is a directory"),
        (&["cp", &url, dir_s], "is a directory"),
    ];
    for (args, why) in cases {
        let line = expect_error(modelzip().args(args));
        assert!(
            line.contains(why) && !line.contains("os error"),
            "{args:?}: {line}"
        );
    }
    let line = expect_error(modelzip().args(["cp", &url, dir_s, "--force"]));
    assert!(line.contains("is a directory"), "{line}");
    assert_eq!(listing(d.path()), ["dirarch", "m.zip", "m.zip.lock"]);
    assert!(listing(&dir).is_empty());
}

/// `export` reads a URL as `export-paddle` does (the docs listed only the latter): the
/// files equal those exported from the local path.
#[test]
fn export_reads_an_archive_by_url() {
    let d = tempfile::tempdir().unwrap();
    let a = d.path().join("m.zip");
    mlp_archive(&a);
    let url = format!("file://{}", a.display());
    for (src, out) in [(url.as_str(), "remote"), (a.to_str().unwrap(), "local")] {
        modelzip()
            .args(["export", src, "--tag", "fp32", "--out"])
            .arg(d.path().join(out))
            .arg("-q")
            .assert()
            .success();
    }
    for ext in ["pdmodel", "pdiparams"] {
        let r = std::fs::read(d.path().join(format!("remote.{ext}"))).unwrap();
        let l = std::fs::read(d.path().join(format!("local.{ext}"))).unwrap();
        assert!(!r.is_empty() && r == l, "{ext}");
    }
}

/// `show`'s table left out the LoD its help and README promise ("dtype, dims, LoD,
/// entry, ..."): a column now says `-` or the levels (summarized past 16 offsets, as
/// `tensor` does).
#[test]
fn show_table_has_the_lod() {
    let d = tempfile::tempdir().unwrap();
    let src = d.path().join("src");
    std::fs::create_dir(&src).unwrap();
    let dense = fixture("paddle/3.3.1/save_dense_tensor");
    for f in ["lod1_fp32", "lod2_int64", "shape_1d_fp32"] {
        std::fs::copy(dense.join(format!("{f}.bin")), src.join(f)).unwrap();
    }
    let a = d.path().join("m.zip");
    modelzip()
        .arg("pack")
        .arg(&a)
        .arg(&src)
        .args(["--tag", "t", "-q"])
        .assert()
        .success();
    let out = modelzip().arg("show").arg(&a).output().unwrap();
    assert!(out.status.success());
    let text = String::from_utf8(out.stdout).unwrap();
    let lines: Vec<&str> = text.lines().collect();
    assert!(lines[1].split_whitespace().any(|w| w == "lod"), "{text}");
    let row = |name: &str| *lines.iter().find(|l| l.starts_with(name)).unwrap();
    assert!(row("lod1_fp32").contains(" [[0, 2, 5]] "), "{text}");
    assert!(
        row("lod2_int64").contains(" [[0, 1, 3], [0, 2, 3, 5]] "),
        "{text}"
    );
    assert!(row("shape_1d_fp32").contains(" - "), "{text}");
}

/// docs/CLI.md: "`-q` and `--json` exclude each other". `import`, `import-paddle`,
/// `export`, `export-paddle` and `convert` accepted both (and ran, printing JSON). Every
/// command that has both refuses the pair as a usage error, before doing anything.
#[test]
fn quiet_and_json_exclude_each_other_everywhere() {
    let d = tempfile::tempdir().unwrap();
    let a = d.path().join("m.zip");
    mlp_archive(&a);
    let a_s = a.to_str().unwrap();
    let model = fixture("paddle/3.3.1/mlp.pdmodel");
    let params = fixture("paddle/3.3.1/mlp.pdiparams");
    let (model, params) = (model.to_str().unwrap(), params.to_str().unwrap());
    let src = persistables();
    let src = src.to_str().unwrap();
    let before = std::fs::read(&a).unwrap();
    let commands: [&[&str]; 14] = [
        &["pack", a_s, src, "--tag", "n"],
        &["import", a_s, model, params, "--tag", "n"],
        &["import-paddle", a_s, model, params, "--tag", "n"],
        &["rm", a_s, "fp32"],
        &["prune", a_s, "--keep", "1"],
        &["compact", a_s],
        &["extract", a_s, "--out", "x"],
        &["export", a_s, "--out", "e"],
        &["export-paddle", a_s, "--out", "e"],
        &["convert", a_s, "--tag", "fp32", "--to", "flatbuffers"],
        &["quantize", a_s, "--from", "fp32", "--tag", "n"],
        &[
            "cast", a_s, "--from", "fp32", "--tag", "n", "--dtype", "fp16",
        ],
        &["cp", a_s, "file:///nonexistent/m.zip"],
        &["verify", a_s],
    ];
    for args in commands {
        let line = expect_error(
            modelzip()
                .current_dir(d.path())
                .args(args)
                .args(["--json", "-q"]),
        );
        assert!(
            line.contains("usage") && line.contains("--json"),
            "{args:?}: {line}"
        );
    }
    assert_eq!(std::fs::read(&a).unwrap(), before);
    assert_eq!(listing(d.path()), ["m.zip", "m.zip.lock"]);
}

/// The commands that change an existing archive took its write lock before finding
/// that it does not exist: a mistyped path left `ARCHIVE.lock` behind. They say so
/// first, naming the path once, and leave nothing.
#[test]
fn writers_of_a_missing_archive_leave_no_lock_file() {
    let d = tempfile::tempdir().unwrap();
    let commands: [&[&str]; 7] = [
        &["rm", "n.zip", "a"],
        &["rm", "n.zip", "a", "--in-place"],
        &["prune", "n.zip", "--keep", "1"],
        &["compact", "n.zip"],
        &["convert", "n.zip", "--tag", "a", "--to", "flatbuffers"],
        &["quantize", "n.zip", "--from", "a", "--tag", "b"],
        &[
            "cast", "n.zip", "--from", "a", "--tag", "b", "--dtype", "bf16",
        ],
    ];
    for args in commands {
        let line = expect_error(modelzip().current_dir(d.path()).args(args));
        assert!(
            line.contains("No such file") && line.matches("n.zip").count() == 1,
            "{args:?}: {line}"
        );
        assert!(listing(d.path()).is_empty(), "{args:?}");
    }
    // An import whose input does not exist: named, and no lock for the new archive.
    let model = fixture("paddle/3.3.1/mlp.pdmodel");
    let model = model.to_str().unwrap();
    let imports: [&[&str]; 4] = [
        &["import", "n.zip", "--tag", "a", "nope.pdmodel"],
        &["import", "n.zip", "--tag", "a", model, "nope.pdiparams"],
        &["import-paddle", "n.zip", "--tag", "a", "--dir", "nodir"],
        &[
            "import-paddle",
            "n.zip",
            "--tag",
            "a",
            model,
            "nope.pdiparams",
        ],
    ];
    for args in imports {
        let line = expect_error(modelzip().current_dir(d.path()).args(args));
        assert!(
            line.contains("No such file") && line.contains("(file no"),
            "{args:?}: {line}"
        );
        assert!(listing(d.path()).is_empty(), "{args:?}");
    }
}

/// An `--out` ending in `/` that does not exist: a tf/onnx export, and a safetensors
/// export (which shards into an existing directory), answered "Not a directory (os error
/// 20)". Each says what --out must name, nothing written; a safetensors export into the
/// directory once it exists writes its shards there. (A Paddle prefix naming a directory,
/// and an --out that is an existing directory, are refused by the exports themselves.)
#[test]
fn export_to_a_missing_directory_path_says_what_out_must_be() {
    let d = tempfile::tempdir().unwrap();
    let a = d.path().join("m.zip");
    mlp_archive(&a);
    modelzip()
        .arg("import")
        .arg(&a)
        .arg(fixture("onnx/cnn.onnx"))
        .args(["--tag", "o", "-q"])
        .assert()
        .success();
    let cases: [(&[&str], &str); 3] = [
        (
            &["export", "m.zip", "--tag", "o", "--out", "new/", "--force"],
            "names a directory, which does not exist; the export writes a file here",
        ),
        (
            &[
                "export",
                "m.zip",
                "--tag",
                "fp32",
                "--format",
                "safetensors",
            ],
            "is not an existing directory: create it to write shards",
        ),
        (
            &["export-paddle", "m.zip", "--tag", "fp32"],
            "names a directory, not a file prefix",
        ),
    ];
    for (args, why) in cases {
        let mut cmd = modelzip();
        cmd.current_dir(d.path()).args(args);
        if !args.contains(&"--out") {
            cmd.args(["--out", "new/"]);
        }
        let line = expect_error(&mut cmd);
        assert!(
            line.contains(why) && !line.contains("os error"),
            "{args:?}: {line}"
        );
    }
    assert_eq!(listing(d.path()), ["m.zip", "m.zip.lock"]);
    std::fs::create_dir(d.path().join("new")).unwrap();
    modelzip()
        .current_dir(d.path())
        .args([
            "export",
            "m.zip",
            "--tag",
            "fp32",
            "--format",
            "safetensors",
        ])
        .args(["--out", "new/", "-q"])
        .assert()
        .success();
    assert_eq!(
        listing(&d.path().join("new")),
        [
            "model-00001-of-00001.safetensors",
            "model.safetensors.index.json"
        ]
    );
}

/// `import-paddle ARCHIVE --tag T DIR` (a persistables directory given where the
/// .pdmodel goes) said "Is a directory (os error 21)": it says to use --dir.
#[test]
fn import_paddle_of_a_directory_without_dir_points_to_dir() {
    let d = tempfile::tempdir().unwrap();
    let line = expect_error(
        modelzip()
            .current_dir(d.path())
            .args(["import-paddle", "m.zip", "--tag", "t"])
            .arg(persistables()),
    );
    assert!(
        line.contains("is a directory, not a .pdmodel") && line.contains("--dir"),
        "{line}"
    );
    assert!(listing(d.path()).is_empty());
}

/// An error line that cannot be written (stderr on a full device) made `eprintln!`
/// panic: exit 101 instead of 2. The line is lost, the exit code is not.
#[cfg(target_os = "linux")]
#[test]
fn an_unwritable_stderr_keeps_the_exit_code() {
    let d = tempfile::tempdir().unwrap();
    for args in [
        &["tags", "missing.zip"][..],
        &["tags"],
        &["tags", "--bogus"],
    ] {
        let full = std::fs::OpenOptions::new()
            .write(true)
            .open("/dev/full")
            .unwrap();
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_modelzip"))
            .current_dir(d.path())
            .args(args)
            .stderr(full)
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(2), "{args:?}");
    }
}

/// `--help` and `--version` on a stdout that cannot be written exited 0 having printed
/// nothing; they exit 2 with one line, as every other output failure does. A closed
/// pipe (`--help | head -1`) still ends quietly.
#[cfg(target_os = "linux")]
#[test]
fn help_on_an_unwritable_stdout_is_an_error() {
    for args in [&["--help"][..], &["tags", "--help"], &["-V"]] {
        let full = std::fs::OpenOptions::new()
            .write(true)
            .open("/dev/full")
            .unwrap();
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_modelzip"))
            .args(args)
            .stdout(full)
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(2), "{args:?}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(
            err.starts_with("modelzip: cannot write to stdout:"),
            "{err}"
        );
        assert_eq!(err.trim_end().lines().count(), 1, "{err}");
    }
}

/// A writer that finds the archive locked said "retry later or wait for it" without
/// saying how to wait: the command line names `--wait`.
#[test]
fn a_locked_archive_names_wait() {
    let d = tempfile::tempdir().unwrap();
    let a = d.path().join("m.zip");
    mlp_archive(&a);
    let _lock = modelzip::WriteLock::acquire(&a, false).unwrap();
    for args in [
        &["rm", "fp32"][..],
        &["compact"],
        &["quantize", "--from", "fp32", "--tag", "q"],
    ] {
        let line = expect_error(modelzip().arg(args[0]).arg(&a).args(&args[1..]));
        assert!(
            line.contains("archive is locked by another process")
                && line.contains("pass --wait to wait for it"),
            "{args:?}: {line}"
        );
    }
}

/// A writer given an existing file that is not a zip archive refused it, but only
/// under the write lock: `ARCHIVE.lock` was left beside the file. The file is refused
/// first, with the error the write gives, and nothing is left (the file unchanged).
#[test]
fn writers_of_a_file_that_is_no_archive_leave_no_lock_file() {
    let d = tempfile::tempdir().unwrap();
    let persistables = persistables();
    let persistables = persistables.to_str().unwrap();
    let model = fixture("paddle/3.3.1/mlp.pdmodel");
    let params = fixture("paddle/3.3.1/mlp.pdiparams");
    let (model, params) = (model.to_str().unwrap(), params.to_str().unwrap());
    let commands: [&[&str]; 9] = [
        &["pack", "n.zip", persistables, "--tag", "a"],
        &["import", "n.zip", "--tag", "a", model, params],
        &[
            "import-paddle",
            "n.zip",
            "--tag",
            "a",
            "--dir",
            persistables,
        ],
        &["rm", "n.zip", "a"],
        &["prune", "n.zip", "--keep", "1"],
        &["compact", "n.zip"],
        &["convert", "n.zip", "--tag", "a", "--to", "flatbuffers"],
        &["quantize", "n.zip", "--from", "a", "--tag", "b"],
        &[
            "cast", "n.zip", "--from", "a", "--tag", "b", "--dtype", "bf16",
        ],
    ];
    let text = b"not an archive, but long enough to be one\n".repeat(100);
    for (content, why) in [
        (&text[..], "no end-of-central-directory record"),
        (&b""[..], "file of 0 bytes is too short"),
    ] {
        let n = d.path().join("n.zip");
        std::fs::write(&n, content).unwrap();
        for args in commands {
            let line = expect_error(modelzip().current_dir(d.path()).args(args));
            assert!(
                line.contains("bad zip") && line.contains(why),
                "{args:?}: {line}"
            );
            assert_eq!(listing(d.path()), ["n.zip"], "{args:?}");
            assert_eq!(std::fs::read(&n).unwrap(), content, "{args:?}");
        }
    }
}

/// The start (in characters) of every cell of a table line, given the header's words:
/// the column of each header word in `line`, checked to hold a cell that starts there.
fn column_starts(header: &str, words: &[&str]) -> Vec<usize> {
    words
        .iter()
        .map(|w| {
            let at = header.find(w).unwrap();
            header[..at].chars().count()
        })
        .collect()
}

/// True when `line` has a cell starting at character `at` (a space before it, none at it).
fn cell_starts_at(line: &str, at: usize) -> bool {
    let chars: Vec<char> = line.chars().collect();
    at < chars.len() && chars[at] != ' ' && (at == 0 || chars[at - 1] == ' ')
}

/// `tags` and `show` printed fixed-width columns: a tag name over 24 characters or a
/// parameter name over 32 pushed the rest of its row out of line. The columns fit the
/// widest cell, and `show` writes dims as every other command does (`[8, 16]`, was
/// `[8,16]`).
#[test]
fn tags_and_show_tables_fit_long_names() {
    let d = tempfile::tempdir().unwrap();
    let a = d.path().join("m.zip");
    mlp_archive(&a);
    let src = d.path().join("src");
    std::fs::create_dir(&src).unwrap();
    let long = "a_parameter_name_well_over_thirty_two_characters";
    for f in ["fc_0.b_0", "fc_0.w_0"] {
        std::fs::copy(persistables().join(f), src.join(f)).unwrap();
    }
    std::fs::copy(persistables().join("fc_1.w_0"), src.join(long)).unwrap();
    let long_tag = "a-tag-name-longer-than-twenty-four-characters";
    modelzip()
        .arg("pack")
        .arg(&a)
        .arg(&src)
        .args(["--tag", long_tag, "-q"])
        .assert()
        .success();

    let stdout = |args: &[&str]| {
        let out = modelzip().args(args).output().unwrap();
        assert!(out.status.success());
        String::from_utf8(out.stdout).unwrap()
    };
    let a_s = a.to_str().unwrap();
    let tags = stdout(&["tags", a_s]);
    let lines: Vec<&str> = tags.lines().collect();
    assert_eq!(lines.len(), 4, "{tags}"); // header, two tags, the footnote
    let starts = column_starts(lines[0], &["graph", "dtypes", "created"]);
    // Right-aligned counts end where their header does.
    let params_end = lines[0].find("params").unwrap() + "params".len();
    for row in &lines[1..3] {
        for &at in &starts {
            assert!(cell_starts_at(row, at), "{at}: {tags}");
        }
        let b = row.as_bytes();
        assert!(
            b[params_end - 1].is_ascii_digit() && b[params_end] == b' ',
            "{tags}"
        );
    }
    assert!(lines[2].starts_with(&format!("* {long_tag} ")), "{tags}");

    let show = stdout(&["show", a_s, "--tag", long_tag]);
    let lines: Vec<&str> = show.lines().collect();
    assert_eq!(lines.len(), 5, "{show}"); // the tag line, header, three params
    let words = [
        "dtype",
        "dims",
        "lod",
        "entry",
        "shared from",
        "data sha256",
    ];
    let starts = column_starts(lines[1], &words);
    for row in &lines[2..] {
        for &at in &starts {
            assert!(cell_starts_at(row, at), "{at}: {show}");
        }
    }
    assert!(
        lines[2].starts_with(long) && lines[2].contains(" [16, 4] "),
        "{show}"
    );
    assert!(lines[4].contains(" [8, 16] "), "{show}");
    // No trailing spaces after the last column.
    assert!(show.lines().chain(tags.lines()).all(|l| !l.ends_with(' ')));
}

/// A deflate-bomb `_summary.txt` was two findings worded differently: the entry pass's
/// "inflated entry size (compression ratio) of N exceeds the limit of M" and the
/// summary's "ignored: N bytes, over the M-byte limit". One problem, one finding.
#[test]
fn verify_reports_a_deflate_bomb_summary_once() {
    let bomb = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/hostile/summary-deflate-bomb.zip");
    let out = modelzip()
        .arg("verify")
        .arg(&bomb)
        .arg("--json")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let doc: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let problems = doc["problems"].as_array().unwrap();
    assert_eq!(problems.len(), 1, "{doc}");
    assert_eq!(problems[0]["entry"], "_summary.txt");
    assert!(
        problems[0]["message"]
            .as_str()
            .unwrap()
            .contains("exceeds the limit"),
        "{doc}"
    );
}

/// A killed `export` left its temp file (`.OUT.XXXXXX.tmp` beside the output) for good.
/// The next export to that output deletes the temp files no process holds locked that
/// have gone unmodified for 15 minutes; a fresh one, or one a live writer holds locked
/// (here: this test), is kept, as are files merely named alike.
#[cfg(unix)]
#[test]
fn export_removes_the_temp_files_a_killed_export_left() {
    let d = tempfile::tempdir().unwrap();
    let a = d.path().join("m.zip");
    mlp_archive(&a);
    let old = std::time::SystemTime::now() - std::time::Duration::from_secs(3600);
    let make = |name: &str, age: Option<std::time::SystemTime>| {
        let p = d.path().join(name);
        let f = std::fs::File::create(&p).unwrap();
        if let Some(t) = age {
            f.set_modified(t).unwrap();
        }
        f
    };
    drop(make(".out.safetensors.AbC123.tmp", Some(old))); // dead
    drop(make(".out.safetensors.fresh1.tmp", None)); // just made: maybe live
    let held = make(".out.safetensors.held12.tmp", Some(old));
    held.lock().unwrap(); // a live writer's
    drop(make(".out.safetensors.toolong1.tmp", Some(old))); // not a temp name
    drop(make(".other.safetensors.XyZ789.tmp", Some(old))); // another output's
    modelzip()
        .arg("export")
        .arg(&a)
        .args(["--format", "safetensors", "--out"])
        .arg(d.path().join("out.safetensors"))
        .arg("-q")
        .assert()
        .success();
    assert_eq!(
        listing(d.path()),
        [
            ".other.safetensors.XyZ789.tmp",
            ".out.safetensors.fresh1.tmp",
            ".out.safetensors.held12.tmp",
            ".out.safetensors.toolong1.tmp",
            "m.zip",
            "m.zip.lock",
            "out.safetensors",
        ]
    );
    drop(held);
}

/// An archive writer deletes the temp files of its archive under the archive's lock,
/// now only those no process holds locked: an export whose --out names the archive's
/// path is writing one (its temp file is named alike).
#[cfg(unix)]
#[test]
fn an_archive_writer_keeps_a_temp_file_a_live_writer_holds() {
    let d = tempfile::tempdir().unwrap();
    let a = d.path().join("m.zip");
    mlp_archive(&a);
    let dead = d.path().join(".m.zip.AbC123.tmp");
    std::fs::write(&dead, b"").unwrap();
    let held_path = d.path().join(".m.zip.held12.tmp");
    let held = std::fs::File::create(&held_path).unwrap();
    held.lock().unwrap();
    modelzip()
        .arg("pack")
        .arg(&a)
        .arg(persistables())
        .args(["--tag", "again", "--rewrite", "-q"])
        .assert()
        .success();
    assert_eq!(
        listing(d.path()),
        [".m.zip.held12.tmp", "m.zip", "m.zip.lock"]
    );
    drop(held);
}
