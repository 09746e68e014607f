//! metadata.json: what the archive does with a caller's JSON. The writer accepts only
//! a JSON object and adds `"created"` (textually, keeping the caller's bytes) when it
//! is absent; the stored entry must then be that object plus `"created"`, verify()
//! must pass, and a checkpointer must read step and metrics from it as documented, or
//! refuse it as not a checkpoint (no `step`, or a variant record).
#![no_main]
use libfuzzer_sys::fuzz_target;
use modelzip::checkpoint::{CheckpointOptions, Checkpointer};
use modelzip::{Archive, ArchiveWriter, ErrorKind, TagBuilder, WriteOptions};
use serde_json::Value;
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::OnceLock;

fn path() -> &'static PathBuf {
    static DIR: OnceLock<tempfile::TempDir> = OnceLock::new();
    let dir = DIR.get_or_init(|| {
        let shm = std::path::Path::new("/dev/shm");
        let base = if shm.is_dir() { shm.to_path_buf() } else { std::env::temp_dir() };
        tempfile::tempdir_in(base).unwrap()
    });
    static PATH: OnceLock<PathBuf> = OnceLock::new();
    PATH.get_or_init(|| dir.path().join("m.zip"))
}

fuzz_target!(|data: &[u8]| {
    let opts = WriteOptions { fsync: false, ..WriteOptions::default() };
    let mut w = ArchiveWriter::create_with(path(), &opts).unwrap();
    let added = w.add_tag(TagBuilder::new("t").metadata(data));
    let input: Option<serde_json::Map<String, Value>> = serde_json::from_slice::<Value>(data)
        .ok()
        .and_then(|v| v.as_object().cloned());
    let Some(input) = input else {
        assert!(added.is_err(), "metadata that is not a JSON object was accepted");
        return;
    };
    added.expect("a JSON object was refused as metadata");
    w.finish().unwrap();
    let a = Archive::open(path()).unwrap();
    let stored = a.tag("t").unwrap().metadata().unwrap().expect("metadata.json is missing");
    if input.contains_key("created") {
        assert_eq!(&*stored, data, "metadata with \"created\" was changed");
    }
    let v: Value = serde_json::from_slice(&stored).expect("stored metadata is not JSON");
    let obj = v.as_object().expect("stored metadata is not an object");
    assert!(obj.get("created").is_some());
    let keys = |m: &serde_json::Map<String, Value>| -> Vec<String> {
        m.keys().filter(|k| *k != "created").cloned().collect()
    };
    assert_eq!(keys(obj), keys(&input), "keys or their order changed");
    for (k, x) in &input {
        if k != "created" {
            assert_eq!(obj.get(k), Some(x), "value of {k:?} changed");
        }
    }
    assert!(a.verify().is_ok(), "{:?}", a.verify());
    drop(a);
    // A checkpointer reads step and metrics from the tag's metadata, or refuses a tag
    // that is not a checkpoint: no non-negative integer step, or a variant record.
    let c = Checkpointer::open(path(), CheckpointOptions::default()).unwrap();
    let restored = c.restore("t");
    let variant = obj.contains_key("quantization") || obj.contains_key("cast");
    match obj.get("step").and_then(Value::as_u64).filter(|_| !variant) {
        None => {
            let e = restored.expect_err("a tag that is not a checkpoint was restored");
            assert!(matches!(e.kind(), ErrorKind::NotACheckpoint { .. }), "{e}");
            assert!(c.latest().unwrap().is_none(), "latest() is not a checkpoint");
        }
        Some(s) => {
            let m = obj.get("metrics").and_then(Value::as_object);
            let m = m.into_iter().flatten();
            let metrics: BTreeMap<String, f64> =
                m.filter_map(|(k, x)| Some((k.clone(), x.as_f64()?))).collect();
            let ck = restored.unwrap();
            assert_eq!((ck.step, ck.metrics), (s, metrics));
            assert_eq!(c.latest().unwrap().map(|l| l.step), Some(s));
        }
    }
});
