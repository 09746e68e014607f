//! Files written by real Paddle (tests/fixtures/paddle/<version>/, made by
//! tests/paddle/make_fixtures.py) decode to exactly their manifest and re-encode
//! byte for byte.

use modelzip::tensor;
use serde_json::Value;
use sha2::Digest;
use std::path::{Path, PathBuf};

fn fixture_dirs() -> Vec<PathBuf> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/paddle");
    let mut dirs: Vec<PathBuf> = std::fs::read_dir(&root)
        .expect("tests/fixtures/paddle exists")
        .map(|e| e.unwrap().path())
        .filter(|p| p.join("manifest.json").is_file())
        .collect();
    dirs.sort();
    assert!(!dirs.is_empty(), "no Paddle fixture versions found");
    dirs
}

fn hex(bytes: &[u8]) -> String {
    sha2::Sha256::digest(bytes)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

fn check_record(path: &str, i: usize, got: &modelzip::TensorView<'_>, want: &Value) {
    let ctx = format!("{path} record {i}");
    assert_eq!(got.dtype().name(), want["dtype"].as_str().unwrap(), "{ctx}");
    assert_eq!(
        i64::from(got.dtype().code()),
        want["dtype_code"].as_i64().unwrap(),
        "{ctx}"
    );
    let dims: Vec<u64> = serde_json::from_value(want["dims"].clone()).unwrap();
    assert_eq!(got.dims(), dims.as_slice(), "{ctx}");
    let lod: Vec<Vec<u64>> = serde_json::from_value(want["lod"].clone()).unwrap();
    assert_eq!(got.lod(), &lod, "{ctx}");
    assert_eq!(
        hex(got.data()),
        want["data_sha256"].as_str().unwrap(),
        "{ctx}: data bytes differ"
    );
}

#[test]
fn every_fixture_decodes_to_its_manifest_and_reencodes_byte_for_byte() {
    let mut checked_files = 0;
    let mut checked_records = 0;
    for dir in fixture_dirs() {
        let manifest: Value =
            serde_json::from_slice(&std::fs::read(dir.join("manifest.json")).unwrap()).unwrap();
        for file in manifest["files"].as_array().unwrap() {
            let rel = file["path"].as_str().unwrap();
            let Some(want) = file["records"].as_array() else {
                continue;
            };
            let path = dir.join(rel);
            let shown = path.display().to_string();
            let bytes = std::fs::read(&path).unwrap();
            let recs = if file["kind"] == "single" {
                let t = tensor::decode_tensor(&bytes).unwrap_or_else(|e| panic!("{shown}: {e}"));
                vec![t]
            } else {
                tensor::decode_combined(&bytes)
                    .unwrap_or_else(|e| panic!("{shown}: {e}"))
                    .into_iter()
                    .map(|r| r.tensor)
                    .collect()
            };
            assert_eq!(recs.len(), want.len(), "{shown}: record count");
            for (i, (got, w)) in recs.iter().zip(want).enumerate() {
                check_record(&shown, i, got, w);
            }
            let mut again = Vec::new();
            tensor::encode_combined(recs.iter(), &mut again).unwrap();
            assert!(
                again == bytes,
                "{shown}: re-encoding differs from Paddle's bytes"
            );
            checked_files += 1;
            checked_records += recs.len();
        }
    }
    assert!(
        checked_files >= 40,
        "only {checked_files} fixture files checked"
    );
    assert!(checked_records >= checked_files);
}

/// Paddle silently writes a data-less record with dtype 17 (RAW) for element types
/// it cannot map (tests/paddle/README.md): a strict decoder must refuse them.
#[test]
fn paddle_raw_dtype_records_are_refused() {
    let mut seen = 0;
    for dir in fixture_dirs() {
        let Ok(entries) = std::fs::read_dir(dir.join("quirks")) else {
            continue;
        };
        for e in entries {
            let path = e.unwrap().path();
            let bytes = std::fs::read(&path).unwrap();
            let err = tensor::decode_tensor(&bytes).unwrap_err();
            assert!(
                matches!(err.kind(), modelzip::ErrorKind::UnknownDType(17)),
                "{}: {err}",
                path.display()
            );
            seen += 1;
        }
    }
    assert!(seen >= 1, "no quirk fixtures found");
}
