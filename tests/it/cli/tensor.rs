//! `modelzip tensor`.

use super::harness::{expect_error, fixture, json_of, modelzip};
use serde_json::Value;

#[test]
fn json_matches_the_paddle_manifest_for_every_fixture() {
    for version in ["2.6.2", "3.3.1"] {
        let dir = fixture(&format!("paddle/{version}"));
        let manifest: Value =
            serde_json::from_slice(&std::fs::read(dir.join("manifest.json")).unwrap()).unwrap();
        for file in manifest["files"].as_array().unwrap() {
            let Some(want) = file["records"].as_array() else {
                continue;
            };
            let path = dir.join(file["path"].as_str().unwrap());
            let got = json_of(modelzip().arg("tensor").arg(&path).arg("--json"));
            assert_eq!(got["file"], path.display().to_string());
            let recs = got["records"].as_array().unwrap();
            assert_eq!(recs.len(), want.len(), "{}", path.display());
            let size = std::fs::metadata(&path).unwrap().len();
            let mut offset = 0;
            for (i, (r, w)) in recs.iter().zip(want).enumerate() {
                assert_eq!(r["index"], i);
                assert_eq!(r["offset"], offset);
                offset += r["length"].as_u64().unwrap();
                for key in ["dtype", "dtype_code", "dims", "lod", "data_sha256"] {
                    assert_eq!(r[key], w[key], "{} record {i} {key}", path.display());
                }
            }
            assert_eq!(offset, size, "{}", path.display());
        }
    }
}

#[test]
fn table_output_names_dtype_and_number() {
    let out = modelzip()
        .arg("tensor")
        .arg(fixture("paddle/3.3.1/mlp.pdiparams"))
        .output()
        .unwrap();
    assert!(out.status.success());
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(text.contains("FP32 (5)"), "{text}");
    assert!(text.contains("4 record(s)"), "{text}");
}

#[test]
fn malformed_file_is_one_line_exit_2_with_record_and_offset() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("bad.bin");
    let mut bytes = std::fs::read(fixture("paddle/3.3.1/mlp.pdiparams")).unwrap();
    bytes.truncate(bytes.len() - 3);
    std::fs::write(&path, &bytes).unwrap();
    let line = expect_error(modelzip().arg("tensor").arg(&path).arg("--json"));
    assert!(line.contains("bad.bin"), "{line}");
    assert!(line.contains("record 3"), "{line}");
    assert!(line.contains("truncated tensor data"), "{line}");
    assert!(line.contains("byte "), "{line}");
}

#[test]
fn missing_file_is_an_error() {
    let line = expect_error(modelzip().args(["tensor", "/nonexistent/file.bin"]));
    assert!(line.contains("/nonexistent/file.bin"), "{line}");
}

/// An empty file printed "0 record(s), 0 bytes" and exited 0, as if it were a tensor
/// file: it is refused, naming the file and why, with or without --json.
#[test]
fn an_empty_file_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("empty.pdiparams");
    std::fs::write(&path, b"").unwrap();
    for json in [false, true] {
        let mut cmd = modelzip();
        cmd.arg("tensor").arg(&path);
        if json {
            cmd.arg("--json");
        }
        let out = cmd.output().unwrap();
        assert!(out.stdout.is_empty());
        let line = expect_error(&mut cmd);
        assert!(
            line.contains("empty.pdiparams") && line.contains("the file is empty (0 bytes)"),
            "{line}"
        );
    }
}

#[test]
fn a_directory_is_named_as_one() {
    let dir = tempfile::tempdir().unwrap();
    let line = expect_error(modelzip().arg("tensor").arg(dir.path()));
    assert!(line.contains("is a directory"), "{line}");
}

#[test]
fn bytes_after_a_single_record_are_trailing_bytes() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("lod.bin");
    let mut bytes = std::fs::read(fixture("paddle/3.3.1/save_op/lod2_int64")).unwrap();
    let end = bytes.len();
    bytes.extend_from_slice(&[0, 0, 0, 0]);
    std::fs::write(&path, &bytes).unwrap();
    let line = expect_error(modelzip().arg("tensor").arg(&path));
    assert!(
        line.contains("4 unexpected bytes after the record"),
        "{line}"
    );
    assert!(line.contains(&format!("record 0, byte {end}")), "{line}");
}

#[test]
fn a_long_lod_is_summarized_in_the_table_and_complete_in_json() {
    // 40 sequences of one row each: 41 offsets.
    let offsets: Vec<u64> = (0..=40).collect();
    let t = modelzip::Tensor::from_slice(vec![40], &[1.0f32; 40])
        .unwrap()
        .with_lod(vec![offsets.clone()])
        .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("seq.bin");
    let mut bytes = Vec::new();
    modelzip::tensor::encode_tensor(&t.view(), &mut bytes).unwrap();
    std::fs::write(&path, &bytes).unwrap();
    let out = modelzip().arg("tensor").arg(&path).output().unwrap();
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(text.contains("1 level(s), 41 offsets"), "{text}");
    let got = json_of(modelzip().arg("tensor").arg(&path).arg("--json"));
    assert_eq!(got["records"][0]["lod"], serde_json::json!([offsets]));
}

/// The table had fixed column widths (dims 16, lod 12): a longer dims or LoD pushed the
/// rest of its row out of line. Every column now fits its widest cell.
#[test]
fn long_dims_and_lods_keep_the_table_columns_aligned() {
    let long = modelzip::Tensor::from_slice(vec![16, 1, 1, 1, 1, 1, 1, 1, 1, 1], &[1.0f32; 16])
        .unwrap()
        .with_lod(vec![vec![0, 10], vec![0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 16]])
        .unwrap();
    let short = modelzip::Tensor::from_slice(vec![2], &[1.0f32; 2]).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("combined.bin");
    let mut bytes = Vec::new();
    for t in [&short, &long, &short] {
        modelzip::tensor::encode_tensor(&t.view(), &mut bytes).unwrap();
    }
    std::fs::write(&path, &bytes).unwrap();
    let out = modelzip().arg("tensor").arg(&path).output().unwrap();
    assert!(out.status.success());
    let text = String::from_utf8(out.stdout).unwrap();
    let lines: Vec<&str> = text.lines().skip(1).collect();
    assert_eq!(lines.len(), 4, "{text}");
    let header = lines[0];
    let dims_at = header.find("dims").unwrap();
    let lod_at = header.find("lod").unwrap();
    let hash_at = header.find("data sha256").unwrap();
    assert!(text.contains("[16, 1, 1, 1, 1, 1, 1, 1, 1, 1]"), "{text}");
    for row in &lines[1..] {
        // Every row's cells start where their header does; the hash ends the row.
        assert_eq!(row.len(), hash_at + 64, "{text}");
        assert_eq!(&row[dims_at..dims_at + 1], "[", "{text}");
        assert_eq!(&row[lod_at..lod_at + 1], "[", "{text}");
        assert_eq!(&row[dims_at - 1..dims_at], " ", "{text}");
    }
    assert!(
        lines[2].contains("[[0, 10], [0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 16]]"),
        "{text}"
    );
}
