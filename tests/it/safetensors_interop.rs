//! safetensors interop: the files written by the real safetensors package
//! (tests/fixtures/safetensors/, made by tests/safetensors/make_fixtures.py) import to
//! what its manifest says and export byte for byte; metadata, shards, dedup across
//! fine-tunes, and the refusals (dtypes, LoD, hostile headers) with clear errors.
//!
//! Set MODELZIP_ST_EXPORT_DIR to keep the exports for tests/safetensors/check_export.py.

use crate::support;
use crate::support::{export_opts, import_opts as opts};

use modelzip::fault::set_write_budget;
use modelzip::interop::paddle;
use modelzip::interop::safetensors::{
    METADATA_KEY, export_safetensors, export_safetensors_bytes, import_safetensors,
};
use modelzip::interop::{self, ExportOptions, Exported};
use modelzip::{Archive, ArchiveWriter, DType, ErrorKind, TagBuilder, Tensor, WriteOptions};
use serde_json::{Map, Value};
use sha2::Digest;
use std::path::{Path, PathBuf};

fn fixtures() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/safetensors")
}

fn manifest() -> Value {
    serde_json::from_slice(&std::fs::read(fixtures().join("manifest.json")).unwrap()).unwrap()
}

fn hex(bytes: &[u8]) -> String {
    sha2::Sha256::digest(bytes)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

fn numpy_dtype(name: &str) -> DType {
    match name {
        "bool" => DType::Bool,
        "uint8" => DType::Uint8,
        "int8" => DType::Int8,
        "int16" => DType::Int16,
        "uint16" => DType::Uint16,
        "int32" => DType::Int32,
        "uint32" => DType::Uint32,
        "int64" => DType::Int64,
        "uint64" => DType::Uint64,
        "float16" => DType::Fp16,
        "float32" => DType::Fp32,
        "float64" => DType::Fp64,
        "bfloat16" => DType::Bf16,
        "float8_e4m3fn" => DType::Fp8E4m3fn,
        "float8_e5m2" => DType::Fp8E5m2,
        "complex64" => DType::Complex64,
        other => panic!("manifest dtype {other} has no mapping"),
    }
}

/// A sharded export of `tag` into the directory `dir` through the `Format` trait, cut to
/// `max_shard_bytes` when given.
fn export_sharded(
    tag: &modelzip::Tag<'_>,
    dir: &Path,
    max_shard_bytes: Option<u64>,
) -> modelzip::Result<Exported> {
    let opts = ExportOptions {
        max_shard_bytes,
        ..export_opts()
    };
    interop::format("safetensors")?.export(tag, dir, &opts)
}

/// The shards a sharded export wrote (path, size), after checking that its files are
/// the shards then `DIR/model.safetensors.index.json`, each of the size it says.
fn shards_of(r: &Exported, dir: &Path) -> Vec<(PathBuf, u64)> {
    let (index, shards) = r.files.split_last().expect("a sharded export writes files");
    assert_eq!(index.0, dir.join("model.safetensors.index.json"));
    for (path, bytes) in &r.files {
        assert_eq!(
            std::fs::metadata(path).unwrap().len(),
            *bytes,
            "{}",
            path.display()
        );
    }
    shards.to_vec()
}

/// Whether a sharded export says it wrote the shards the tag was imported from.
fn as_imported(r: &Exported) -> bool {
    r.notes
        .iter()
        .any(|n| n == "the shards as they were imported")
}

/// The header's `__metadata__` as the file spells it (key order kept).
fn header_metadata(file: &[u8]) -> Option<Map<String, Value>> {
    let n = u64::from_le_bytes(file[..8].try_into().unwrap()) as usize;
    let root: Map<String, Value> = serde_json::from_slice(&file[8..8 + n]).unwrap();
    root.get("__metadata__")
        .map(|m| m.as_object().unwrap().clone())
}

fn kept_metadata(archive: &Archive, tag: &str) -> Map<String, Value> {
    let bytes = archive.tag(tag).unwrap().metadata().unwrap().unwrap();
    let root: Value = serde_json::from_slice(&bytes).unwrap();
    root[METADATA_KEY].as_object().unwrap().clone()
}

/// The single files of the manifest that modelzip accepts.
fn accepted_files(m: &Value) -> Vec<&Value> {
    m["files"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|f| !f["path"].as_str().unwrap().starts_with("refused/"))
        .collect()
}

#[test]
fn every_fixture_imports_to_its_manifest_and_exports_byte_for_byte() {
    let m = manifest();
    let dir = tempfile::tempdir().unwrap();
    let keep = std::env::var_os("MODELZIP_ST_EXPORT_DIR").map(PathBuf::from);
    let files = accepted_files(&m);
    assert!(files.len() >= 8, "manifest lists {} files", files.len());
    for (i, f) in files.iter().enumerate() {
        let rel = f["path"].as_str().unwrap();
        let path = fixtures().join(rel);
        let original = std::fs::read(&path).unwrap();
        let archive = dir.path().join(format!("a{i}.zip"));
        let r = import_safetensors(&archive, "t", std::slice::from_ref(&path), &opts()).unwrap();
        assert!(r.created, "{rel}");
        assert!(
            r.exact_export,
            "{rel}: the header is not laid out as the library lays it out"
        );
        // What was imported is what the producer was handed.
        let want = f["tensors"].as_array().unwrap();
        assert_eq!(r.params.len(), want.len(), "{rel}");
        let a = Archive::open(&archive).unwrap();
        let tag = a.tag("t").unwrap();
        for w in want {
            let name = w["name"].as_str().unwrap();
            let t = tag.param(name).unwrap();
            let v = t.view();
            assert!(t.is_mapped(), "{rel} {name}");
            assert_eq!(
                v.dtype(),
                numpy_dtype(w["numpy_dtype"].as_str().unwrap()),
                "{rel} {name}"
            );
            let dims: Vec<u64> = serde_json::from_value(w["shape"].clone()).unwrap();
            assert_eq!(v.dims(), dims.as_slice(), "{rel} {name}");
            assert_eq!(
                hex(v.data()),
                w["data_sha256"].as_str().unwrap(),
                "{rel} {name}"
            );
        }
        assert!(a.verify().is_ok(), "{rel}");
        // Out again: the same bytes, in memory and as a file.
        let bytes = export_safetensors_bytes(&tag).unwrap();
        assert!(bytes == original, "{rel}: export differs from the original");
        let out = dir.path().join(format!("out{i}.safetensors"));
        let rep = export_safetensors(&tag, &out, &export_opts()).unwrap();
        assert_eq!(rep.bytes, original.len() as u64, "{rel}");
        assert_eq!(rep.metadata_written, f["metadata"].is_object(), "{rel}");
        assert!(std::fs::read(&out).unwrap() == original, "{rel}");
        if let Some(k) = &keep {
            let target = k.join(rel);
            std::fs::create_dir_all(target.parent().unwrap()).unwrap();
            std::fs::copy(&out, target).unwrap();
        }
    }
}

#[test]
fn metadata_is_kept_in_metadata_json_in_file_order() {
    let dir = tempfile::tempdir().unwrap();
    let archive = dir.path().join("a.zip");
    for (tag, file) in [
        ("all", "all_dtypes.safetensors"),
        ("none", "no_metadata.safetensors"),
        ("empty", "empty_metadata.safetensors"),
    ] {
        import_safetensors(&archive, tag, &[fixtures().join(file)], &opts()).unwrap();
    }
    let a = Archive::open(&archive).unwrap();
    let original = std::fs::read(fixtures().join("all_dtypes.safetensors")).unwrap();
    let want = header_metadata(&original).unwrap();
    let kept = kept_metadata(&a, "all");
    let got = kept["__metadata__"].as_object().unwrap();
    assert_eq!(got, &want);
    let order = |m: &Map<String, Value>| m.keys().cloned().collect::<Vec<_>>();
    assert_eq!(order(got), order(&want), "key order");
    assert_eq!(got["note"], "quotes \" and backslash \\ and ünïcode");
    assert_eq!(kept["order"], "file");
    // metadata.json is still modelzip's: a created time beside the record.
    let root: Value =
        serde_json::from_slice(&a.tag("all").unwrap().metadata().unwrap().unwrap()).unwrap();
    assert!(root["created"].is_string());

    assert!(kept_metadata(&a, "none").get("__metadata__").is_none());
    let none = export_safetensors_bytes(&a.tag("none").unwrap()).unwrap();
    assert_eq!(header_metadata(&none), None);
    assert_eq!(
        kept_metadata(&a, "empty")["__metadata__"],
        serde_json::json!({})
    );
    let empty = export_safetensors_bytes(&a.tag("empty").unwrap()).unwrap();
    assert_eq!(header_metadata(&empty), Some(Map::new()));
}

fn shard_tensors(m: &Value) -> Vec<(String, String)> {
    let mut out = Vec::new();
    for f in m["files"].as_array().unwrap() {
        if f["path"].as_str().unwrap().starts_with("sharded/") {
            for t in f["tensors"].as_array().unwrap() {
                out.push((
                    t["name"].as_str().unwrap().to_string(),
                    t["data_sha256"].as_str().unwrap().to_string(),
                ));
            }
        }
    }
    out.sort();
    out
}

#[test]
fn sharded_checkpoint_imports_through_its_index_and_exports_as_one_file() {
    let m = manifest();
    let want = shard_tensors(&m);
    assert!(want.len() > 10);
    let dir = tempfile::tempdir().unwrap();
    let archive = dir.path().join("a.zip");
    let shard_dir = fixtures().join("sharded");
    let r = import_safetensors(
        &archive,
        "index",
        &[shard_dir.join("model.safetensors.index.json")],
        &opts(),
    )
    .unwrap();
    assert_eq!(r.files.len(), 2);
    assert!(
        r.exact_export,
        "shards and index as the libraries write them"
    );
    // The same tag from the directory, and from the two shards named directly.
    import_safetensors(&archive, "dir", std::slice::from_ref(&shard_dir), &opts()).unwrap();
    let shards = [
        shard_dir.join("model-00001-of-00002.safetensors"),
        shard_dir.join("model-00002-of-00002.safetensors"),
    ];
    import_safetensors(&archive, "files", &shards, &opts()).unwrap();

    let a = Archive::open(&archive).unwrap();
    for name in ["index", "dir", "files"] {
        let tag = a.tag(name).unwrap();
        let mut got: Vec<(String, String)> = tag
            .params()
            .iter()
            .map(|p| {
                (
                    p.name.clone(),
                    hex(tag.param(&p.name).unwrap().view().data()),
                )
            })
            .collect();
        got.sort();
        assert_eq!(got, want, "tag {name}");
    }
    // The second and third imports stored nothing new.
    assert!(
        a.stored_bytes_under("dir") < 4096,
        "{}",
        a.stored_bytes_under("dir")
    );
    let kept = kept_metadata(&a, "index");
    assert_eq!(kept["__metadata__"], serde_json::json!({"format": "pt"}));
    assert_eq!(kept["order"], "aligned");
    assert_eq!(kept["index"], "model.safetensors.index.json");
    assert!(kept["index_metadata"]["total_size"].as_u64().unwrap() > 0);
    assert_eq!(
        kept["shards"],
        serde_json::json!([
            {"file": "model-00001-of-00002.safetensors", "tensors": 9},
            {"file": "model-00002-of-00002.safetensors", "tensors": 10}
        ])
    );

    // One file out, in the library's order: each tensor aligned for its dtype.
    let bytes = export_safetensors_bytes(&a.tag("index").unwrap()).unwrap();
    if let Some(k) = std::env::var_os("MODELZIP_ST_EXPORT_DIR") {
        std::fs::create_dir_all(&k).unwrap();
        std::fs::write(Path::new(&k).join("sharded.safetensors"), &bytes).unwrap();
    }
    let st = safetensors::SafeTensors::deserialize(&bytes).unwrap();
    let n = u64::from_le_bytes(bytes[..8].try_into().unwrap()) as usize;
    let mut got = Vec::new();
    for (name, v) in st.tensors() {
        let at = v.data().as_ptr() as usize - bytes.as_ptr() as usize - 8 - n;
        assert_eq!(at % (v.dtype().bitsize() / 8), 0, "{name} at {at}");
        got.push((name, hex(v.data())));
    }
    got.sort();
    assert_eq!(got, want);
}

#[test]
fn a_sharded_tag_exports_as_its_shards_byte_for_byte_or_cut_to_a_size() {
    let dir = tempfile::tempdir().unwrap();
    let archive = dir.path().join("a.zip");
    let shard_dir = fixtures().join("sharded");
    import_safetensors(&archive, "t", std::slice::from_ref(&shard_dir), &opts()).unwrap();
    let a = Archive::open(&archive).unwrap();
    let tag = a.tag("t").unwrap();

    // As imported: the same three files, byte for byte.
    let out = dir.path().join("same");
    std::fs::create_dir(&out).unwrap();
    let r = export_sharded(&tag, &out, None).unwrap();
    assert!(as_imported(&r), "{:?}", r.notes);
    assert_eq!(shards_of(&r, &out).len(), 2);
    assert_eq!(r.params.len(), tag.params().len());
    for f in [
        "model-00001-of-00002.safetensors",
        "model-00002-of-00002.safetensors",
        "model.safetensors.index.json",
    ] {
        assert!(
            std::fs::read(out.join(f)).unwrap() == std::fs::read(shard_dir.join(f)).unwrap(),
            "{f}"
        );
    }
    // Again without overwrite: refused, nothing changed.
    let e = export_sharded(&tag, &out, None).unwrap_err();
    assert!(e.to_string().contains("refusing to overwrite"), "{e}");

    // Cut to 12 KiB of data a shard: more shards, each within the bound unless one tensor
    // alone is larger; they import back to the same tensors.
    let cut = dir.path().join("cut");
    std::fs::create_dir(&cut).unwrap();
    let r = export_sharded(&tag, &cut, Some(12 << 10)).unwrap();
    assert!(!as_imported(&r), "{:?}", r.notes);
    let shards = shards_of(&r, &cut);
    assert!(shards.len() > 3, "{}", shards.len());
    let n = shards.len();
    let mut in_shards = 0;
    for (i, (path, _)) in shards.iter().enumerate() {
        assert_eq!(
            path.file_name().unwrap().to_string_lossy(),
            format!("model-{:05}-of-{n:05}.safetensors", i + 1)
        );
        let bytes = std::fs::read(path).unwrap();
        let st = safetensors::SafeTensors::deserialize(&bytes).unwrap();
        let data: usize = st.tensors().iter().map(|(_, v)| v.data().len()).sum();
        assert!(
            data <= 12 << 10 || st.len() == 1,
            "{} holds {data}",
            path.display()
        );
        in_shards += st.len();
    }
    assert_eq!(in_shards, r.params.len());
    assert_eq!(r.params.len(), tag.params().len());
    let index: Value =
        serde_json::from_slice(&std::fs::read(cut.join("model.safetensors.index.json")).unwrap())
            .unwrap();
    assert_eq!(
        index["weight_map"].as_object().unwrap().len(),
        tag.params().len()
    );
    let back = dir.path().join("b.zip");
    import_safetensors(&back, "back", std::slice::from_ref(&cut), &opts()).unwrap();
    let b = Archive::open(&back).unwrap();
    let bt = b.tag("back").unwrap();
    for p in tag.params() {
        assert_eq!(
            bt.param(&p.name).unwrap().view(),
            tag.param(&p.name).unwrap().view(),
            "{}",
            p.name
        );
    }
    assert_eq!(
        kept_metadata(&b, "back")["index_metadata"],
        kept_metadata(&a, "t")["index_metadata"],
        "total_size is the same data"
    );

    if let Some(k) = std::env::var_os("MODELZIP_ST_EXPORT_DIR") {
        for (from, to) in [(&out, "sharded_same"), (&cut, "sharded_cut")] {
            let to = Path::new(&k).join(to);
            std::fs::create_dir_all(&to).unwrap();
            for e in std::fs::read_dir(from).unwrap() {
                let e = e.unwrap();
                std::fs::copy(e.path(), to.join(e.file_name())).unwrap();
            }
        }
    }

    // A full disk at any point leaves none of the files (and no temp file).
    let full = dir.path().join("full");
    std::fs::create_dir(&full).unwrap();
    for budget in [0, 100, 20_000, 40_000, 51_000] {
        set_write_budget(Some(budget));
        let r = export_sharded(&tag, &full, None);
        set_write_budget(None);
        assert!(r.is_err(), "budget {budget}");
        assert_eq!(
            std::fs::read_dir(&full).unwrap().count(),
            0,
            "budget {budget}"
        );
    }

    // A tag from one file, sharded with the default size: one shard and an index.
    let single = dir.path().join("single");
    std::fs::create_dir(&single).unwrap();
    let c = dir.path().join("c.zip");
    import_safetensors(
        &c,
        "t",
        &[fixtures().join("all_dtypes.safetensors")],
        &opts(),
    )
    .unwrap();
    let c = Archive::open(&c).unwrap();
    let r = export_sharded(&c.tag("t").unwrap(), &single, None).unwrap();
    assert_eq!(
        shards_of(&r, &single),
        [(
            single.join("model-00001-of-00001.safetensors"),
            std::fs::metadata(single.join("model-00001-of-00001.safetensors"))
                .unwrap()
                .len()
        )]
    );
    assert!(!as_imported(&r), "{:?}", r.notes);
}

#[test]
fn a_shard_size_is_refused_by_the_other_formats_and_without_a_directory() {
    let dir = tempfile::tempdir().unwrap();
    let archive = dir.path().join("a.zip");
    let shard_dir = fixtures().join("sharded");
    import_safetensors(&archive, "t", std::slice::from_ref(&shard_dir), &opts()).unwrap();
    let a = Archive::open(&archive).unwrap();
    let tag = a.tag("t").unwrap();
    let sized = ExportOptions {
        max_shard_bytes: Some(1 << 20),
        ..export_opts()
    };
    // Every other format: InvalidInput naming the option, before anything is written.
    let out = dir.path().join("out");
    std::fs::create_dir(&out).unwrap();
    for f in interop::FORMATS
        .iter()
        .filter(|f| f.name() != "safetensors")
    {
        let e = f.export(&tag, &out.join("m"), &sized).unwrap_err();
        assert!(
            matches!(e.kind(), ErrorKind::InvalidInput(m)
                if m.contains("max_shard_bytes") && m.contains("is for safetensors exports")),
            "{}: {e}",
            f.name()
        );
    }
    assert_eq!(std::fs::read_dir(&out).unwrap().count(), 0);
    // safetensors to a file path: the shards need a directory.
    let file = dir.path().join("one.safetensors");
    let e = export_sharded(&tag, &file, Some(1 << 20)).unwrap_err();
    assert!(
        matches!(e.kind(), ErrorKind::InvalidInput(m) if m.contains("no existing directory")),
        "{e}"
    );
    assert!(!file.exists());
}

#[test]
fn a_second_fine_tune_costs_at_most_40_percent_of_the_first() {
    let dir = tempfile::tempdir().unwrap();
    let archive = dir.path().join("a.zip");
    let ft = fixtures().join("finetune");
    import_safetensors(&archive, "base", &[ft.join("base.safetensors")], &opts()).unwrap();
    let r =
        import_safetensors(&archive, "tuned", &[ft.join("tuned.safetensors")], &opts()).unwrap();
    let shared = r.params.iter().filter(|p| p.shared_from.is_some()).count();
    assert_eq!(
        shared,
        r.params.len() - 3,
        "all but the three changed tensors are shared"
    );
    let a = Archive::open(&archive).unwrap();
    let (base, tuned) = (a.stored_bytes_under("base"), a.stored_bytes_under("tuned"));
    assert!(
        tuned * 100 <= base * 40,
        "the second tag costs {tuned} bytes, the first {base}"
    );
    // Both still come back byte for byte.
    for (tag, file) in [("base", "base.safetensors"), ("tuned", "tuned.safetensors")] {
        let bytes = export_safetensors_bytes(&a.tag(tag).unwrap()).unwrap();
        assert!(bytes == std::fs::read(ft.join(file)).unwrap(), "{tag}");
    }
}

#[test]
fn dtypes_modelzip_cannot_hold_are_refused_naming_the_tensor() {
    let dir = tempfile::tempdir().unwrap();
    let archive = dir.path().join("a.zip");
    for (file, tensor, dtype) in [
        ("f8_e8m0.safetensors", "weight_scale_e8m0", "F8_E8M0"),
        ("f8_e4m3fnuz.safetensors", "x", "F8_E4M3FNUZ"),
    ] {
        let path = fixtures().join("refused").join(file);
        let e =
            import_safetensors(&archive, "t", std::slice::from_ref(&path), &opts()).unwrap_err();
        let msg = e.to_string();
        assert!(
            msg.contains(&format!("tensor {tensor:?} has dtype {dtype}")),
            "{msg}"
        );
        assert_eq!(e.location().file.as_deref(), Some(path.as_path()), "{msg}");
        assert!(!archive.exists(), "nothing is written");
    }
}

fn write_tag(archive: &Path, tag: TagBuilder) {
    let mut w = ArchiveWriter::create_with(
        archive,
        &WriteOptions {
            fsync: false,
            ..WriteOptions::default()
        },
    )
    .unwrap();
    w.add_tag(tag).unwrap();
    w.finish().unwrap();
}

#[test]
fn export_refuses_lod_size_t_and_complex128_by_name_and_leaves_no_file() {
    let dir = tempfile::tempdir().unwrap();
    let ok = Tensor::from_slice(vec![2], &[1.0f32, 2.0]).unwrap();
    let cases = [
        (
            "lod",
            Tensor::from_slice(vec![3, 1], &[1.0f32, 2.0, 3.0])
                .unwrap()
                .with_lod(vec![vec![0, 1, 3]])
                .unwrap(),
            "has a LoD",
        ),
        (
            "sizes",
            Tensor::from_bytes(DType::SizeT, vec![2], vec![0; 16]).unwrap(),
            "has dtype SIZE_T",
        ),
        (
            "z",
            Tensor::from_bytes(DType::Complex128, vec![1], vec![0; 16]).unwrap(),
            "has dtype COMPLEX128",
        ),
        (
            "__metadata__",
            Tensor::from_slice(vec![1], &[1u8]).unwrap(),
            "is named __metadata__",
        ),
    ];
    for (i, (name, t, why)) in cases.into_iter().enumerate() {
        let archive = dir.path().join(format!("a{i}.zip"));
        write_tag(
            &archive,
            TagBuilder::new("t")
                .param("fine", ok.clone())
                .param(name, t),
        );
        let a = Archive::open(&archive).unwrap();
        let out = dir.path().join(format!("out{i}.safetensors"));
        let e = export_safetensors(&a.tag("t").unwrap(), &out, &export_opts()).unwrap_err();
        let msg = e.to_string();
        assert!(
            msg.contains(&format!("parameter {name:?} of tag \"t\" {why}")),
            "{msg}"
        );
        assert!(msg.contains("safetensors cannot express it"), "{msg}");
        assert!(!out.exists());
    }
    let left: Vec<_> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| !n.ends_with(".zip") && !n.ends_with(".lock"))
        .collect();
    assert!(left.is_empty(), "{left:?}");
}

#[test]
fn parameters_sharing_storage_are_each_written() {
    let dir = tempfile::tempdir().unwrap();
    let archive = dir.path().join("a.zip");
    let w = Tensor::from_slice(vec![2, 2], &[1.0f32, 2.0, 3.0, 4.0]).unwrap();
    write_tag(
        &archive,
        TagBuilder::new("tied")
            .param("embed.weight", w.clone())
            .param("lm_head.weight", w.clone()),
    );
    let a = Archive::open(&archive).unwrap();
    let tag = a.tag("tied").unwrap();
    assert_eq!(
        tag.params()[0].location,
        tag.params()[1].location,
        "one file"
    );
    let bytes = export_safetensors_bytes(&tag).unwrap();
    let st = safetensors::SafeTensors::deserialize(&bytes).unwrap();
    assert_eq!(st.len(), 2);
    for n in ["embed.weight", "lm_head.weight"] {
        assert_eq!(st.tensor(n).unwrap().data(), w.data(), "{n}");
        assert_eq!(st.tensor(n).unwrap().shape(), [2, 2]);
    }
}

#[test]
fn a_paddle_tag_exports_to_a_file_the_safetensors_library_reads_back_equal() {
    let fx = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/paddle/3.3.1");
    let dir = tempfile::tempdir().unwrap();
    let archive = dir.path().join("a.zip");
    paddle::import_inference_model_files(
        &archive,
        "fp32",
        &fx.join("mlp.pdmodel"),
        &fx.join("mlp.pdiparams"),
        &modelzip::interop::ImportOptions {
            write: WriteOptions {
                fsync: false,
                ..WriteOptions::default()
            },
            ..modelzip::interop::ImportOptions::default()
        },
    )
    .unwrap();
    let a = Archive::open(&archive).unwrap();
    let tag = a.tag("fp32").unwrap();
    let out = dir.path().join("mlp.safetensors");
    let r = export_safetensors(&tag, &out, &export_opts()).unwrap();
    assert!(!r.metadata_written);
    assert_eq!(r.tensors.len(), tag.params().len());
    let bytes = std::fs::read(&out).unwrap();
    assert_eq!(bytes.len() as u64, r.bytes);
    if let Some(k) = std::env::var_os("MODELZIP_ST_EXPORT_DIR") {
        // For check_export.py --cat: the archive and the export of its tag.
        let k = Path::new(&k).join("paddle");
        std::fs::create_dir_all(&k).unwrap();
        std::fs::copy(&archive, k.join("mlp.zip")).unwrap();
        std::fs::copy(&out, k.join("mlp.safetensors")).unwrap();
    }
    let st = safetensors::SafeTensors::deserialize(&bytes).unwrap();
    for p in tag.params() {
        let t = tag.param(&p.name).unwrap();
        let v = st.tensor(&p.name).unwrap();
        let dims: Vec<u64> = v.shape().iter().map(|&d| d as u64).collect();
        assert_eq!(dims, t.view().dims(), "{}", p.name);
        assert_eq!(v.data(), t.view().data(), "{}", p.name);
    }
    // Back in: the same tensors, stored once.
    let again = dir.path().join("b.zip");
    import_safetensors(&again, "back", std::slice::from_ref(&out), &opts()).unwrap();
    let b = Archive::open(&again).unwrap();
    let back = b.tag("back").unwrap();
    for p in tag.params() {
        assert_eq!(
            back.param(&p.name).unwrap().view(),
            tag.param(&p.name).unwrap().view(),
            "{}",
            p.name
        );
    }
}

#[test]
fn existing_output_is_refused_unless_overwrite_and_a_full_disk_leaves_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let archive = dir.path().join("a.zip");
    let src = fixtures().join("all_dtypes.safetensors");
    import_safetensors(&archive, "t", std::slice::from_ref(&src), &opts()).unwrap();
    let a = Archive::open(&archive).unwrap();
    let tag = a.tag("t").unwrap();
    let out = dir.path().join("out.safetensors");
    std::fs::write(&out, b"old").unwrap();
    let e = export_safetensors(&tag, &out, &export_opts()).unwrap_err();
    assert!(e.to_string().contains("refusing to overwrite"), "{e}");
    assert_eq!(std::fs::read(&out).unwrap(), b"old");
    let size = std::fs::metadata(&src).unwrap().len();
    for budget in [0, 1, 8, 100, size / 2, size - 1] {
        set_write_budget(Some(budget));
        let r = export_safetensors(
            &tag,
            &out,
            &ExportOptions {
                overwrite: true,
                fsync: false,
                ..ExportOptions::default()
            },
        );
        set_write_budget(None);
        assert!(r.is_err(), "budget {budget}");
        assert_eq!(std::fs::read(&out).unwrap(), b"old", "budget {budget}");
        assert_eq!(
            support::stray_files(dir.path(), &archive),
            ["out.safetensors"]
        );
    }
    let over = ExportOptions {
        overwrite: true,
        fsync: true,
        ..ExportOptions::default()
    };
    export_safetensors(&tag, &out, &over).unwrap();
    assert!(std::fs::read(&out).unwrap() == std::fs::read(&src).unwrap());
    // The output limit is checked before writing, with the size it would have written.
    let size = std::fs::metadata(&out).unwrap().len();
    let capped = out.with_file_name("capped.safetensors");
    let tight = ExportOptions {
        max_output: Some(size - 1),
        ..over.clone()
    };
    let e = export_safetensors(&tag, &capped, &tight).unwrap_err();
    assert!(
        e.to_string()
            .contains(&format!("of {size} exceeds the limit of {}", size - 1)),
        "{e}"
    );
    assert!(!capped.exists());
}

/// A safetensors file from a header and data.
fn st_file(header: &str, data: &[u8]) -> Vec<u8> {
    let mut out = (header.len() as u64).to_le_bytes().to_vec();
    out.extend_from_slice(header.as_bytes());
    out.extend_from_slice(data);
    out
}

fn import_bytes(
    dir: &Path,
    bytes: &[u8],
) -> modelzip::Result<modelzip::interop::safetensors::ImportReport> {
    let path = dir.join("in.safetensors");
    std::fs::write(&path, bytes).unwrap();
    let archive = dir.join("a.zip");
    let _ = std::fs::remove_file(&archive);
    import_safetensors(&archive, "t", &[path], &opts())
}

#[test]
fn hostile_headers_are_refused_with_what_and_where() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let t = |dtype: &str, shape: &str, b: u64, e: u64| {
        format!(r#""dtype":"{dtype}","shape":{shape},"data_offsets":[{b},{e}]"#)
    };
    let mut huge = u64::MAX.to_le_bytes().to_vec();
    huge.extend_from_slice(b"{}");
    let mut past = 1000u64.to_le_bytes().to_vec();
    past.extend_from_slice(b"{}      ");
    let mut not_utf8 = st_file(r#"{"X":1}"#, b"");
    not_utf8[10] = 0xff;
    let cases: Vec<(&str, Vec<u8>, &str, Option<u64>)> = vec![
        (
            "empty file",
            vec![],
            "truncated safetensors header length",
            Some(0),
        ),
        (
            "huge header length",
            huge,
            "safetensors header length of 18446744073709551615 exceeds the limit of 100000000",
            Some(0),
        ),
        (
            "header past the file",
            past,
            "truncated safetensors header: needs 1000 bytes, 8 remain",
            Some(8),
        ),
        (
            "not JSON",
            st_file("{\"a\":", b""),
            "is not a JSON object",
            Some(12),
        ),
        ("not UTF-8", not_utf8, "not UTF-8", Some(10)),
        (
            "offsets past the file",
            st_file(
                &format!("{{\"w\":{{{}}}}}", t("F32", "[4]", 0, 16)),
                &[0; 8],
            ),
            "tensor \"w\": data_offsets [0, 16] do not lie within the file's 8 data bytes",
            None,
        ),
        (
            "overlapping",
            st_file(
                &format!(
                    "{{\"a\":{{{}}},\"b\":{{{}}}}}",
                    t("F32", "[2]", 0, 8),
                    t("F32", "[2]", 4, 12)
                ),
                &[0; 12],
            ),
            "tensor \"b\" (data_offsets [4, 12]) overlaps tensor \"a\", which ends at data byte 8",
            None,
        ),
        (
            "gap",
            st_file(
                &format!(
                    "{{\"a\":{{{}}},\"b\":{{{}}}}}",
                    t("U8", "[2]", 0, 2),
                    t("U8", "[2]", 4, 6)
                ),
                &[0; 6],
            ),
            "data bytes 2..4 before tensor \"b\" belong to no tensor",
            None,
        ),
        (
            "span not dtype x shape",
            st_file(&format!("{{\"w\":{{{}}}}}", t("F32", "[3]", 0, 8)), &[0; 8]),
            "tensor \"w\": data_offsets [0, 8] span 8 bytes, dtype F32 × shape [3] needs 12",
            None,
        ),
        (
            "trailing bytes",
            st_file(&format!("{{\"w\":{{{}}}}}", t("U8", "[2]", 0, 2)), &[0; 5]),
            "3 data bytes follow the last tensor",
            None,
        ),
        (
            "shape overflow",
            st_file(
                &format!(
                    "{{\"w\":{{{}}}}}",
                    t("F64", "[4294967296,4294967296,16]", 0, 0)
                ),
                b"",
            ),
            "tensor \"w\": shape [4294967296, 4294967296, 16]: size overflow",
            Some(8),
        ),
        (
            // Empty, so dtype × shape is 0 bytes: it was written with the dim as -2^63,
            // leaving an archive whose tensor no reader accepts.
            "dim past 2^63 - 1",
            st_file(
                &format!("{{\"w\":{{{}}}}}", t("U8", "[9223372036854775808,0]", 0, 0)),
                b"",
            ),
            "dimension 9223372036854775808 at index 0 of dims [9223372036854775808, 0] exceeds \
             2^63 - 1",
            Some(8),
        ),
        (
            "negative dim",
            st_file(&format!("{{\"w\":{{{}}}}}", t("U8", "[-1]", 0, 0)), b""),
            "\"shape\" must be a list of non-negative integers",
            Some(8),
        ),
        (
            "unknown dtype",
            st_file(
                &format!("{{\"w\":{{{}}}}}", t("F128", "[1]", 0, 16)),
                &[0; 16],
            ),
            "tensor \"w\": \"F128\" is not a safetensors dtype",
            Some(8),
        ),
        (
            "metadata not strings",
            st_file(r#"{"__metadata__":{"n":1}}"#, b""),
            "__metadata__ maps names to strings; key \"n\" has 1",
            Some(8),
        ),
        (
            "entry not an object",
            st_file(r#"{"w":[1,2]}"#, b""),
            "tensor \"w\": its header entry is not a JSON object",
            Some(8),
        ),
        (
            "empty tensor name",
            st_file(
                r#"{"":{"dtype":"U8","shape":[1],"data_offsets":[0,1]}}"#,
                &[0],
            ),
            "a tensor has the empty name \"\"",
            None,
        ),
        (
            "missing offsets",
            st_file(r#"{"w":{"dtype":"U8","shape":[1]}}"#, &[0]),
            "tensor \"w\": its header entry has no \"data_offsets\" field",
            Some(8),
        ),
    ];
    for (what, bytes, want, offset) in cases {
        let e = import_bytes(d, &bytes).unwrap_err();
        let msg = e.to_string();
        assert!(msg.contains(want), "{what}: {msg}");
        assert!(msg.contains("in.safetensors"), "{what}: {msg}");
        match offset {
            Some(o) => assert_eq!(e.location().offset, Some(o), "{what}: {msg}"),
            // A name is not at one byte; every other refusal says where.
            None if what == "empty tensor name" => {}
            None => assert!(e.location().offset.is_some(), "{what}: {msg}"),
        }
        assert!(!d.join("a.zip").exists(), "{what}");
    }
    // A __metadata__ larger than a metadata.json may be.
    let big = format!(r#"{{"__metadata__":{{"k":"{}"}}}}"#, "x".repeat(5 << 20));
    let e = import_bytes(d, &st_file(&big, b"")).unwrap_err();
    assert!(matches!(e.kind(), ErrorKind::LimitExceeded { .. }), "{e}");
    assert!(e.to_string().contains("__metadata__"), "{e}");
    assert!(!d.join("a.zip").exists());
    // Byte offsets of data errors count from the start of the file.
    let h = format!(
        "{{\"a\":{{{}}},\"b\":{{{}}}}}",
        t("F32", "[2]", 0, 8),
        t("F32", "[2]", 4, 12)
    );
    let e = import_bytes(d, &st_file(&h, &[0; 12])).unwrap_err();
    assert_eq!(e.location().offset, Some(8 + h.len() as u64 + 4));
}

#[test]
fn an_unaligned_but_consistent_file_imports_and_comes_back_exactly() {
    // A 3-byte tensor first leaves the F32 tensor at data offset 3: unusual, but valid
    // safetensors (the library reads it); the archive stores it aligned.
    let dir = tempfile::tempdir().unwrap();
    let h = r#"{"a":{"dtype":"U8","shape":[3],"data_offsets":[0,3]},"b":{"dtype":"F32","shape":[2],"data_offsets":[3,11]}}"#;
    let pad = " ".repeat(h.len().next_multiple_of(8) - h.len());
    let mut data = vec![1u8, 2, 3];
    data.extend_from_slice(&1.5f32.to_le_bytes());
    data.extend_from_slice(&(-2.0f32).to_le_bytes());
    let bytes = st_file(&format!("{h}{pad}"), &data);
    safetensors::SafeTensors::deserialize(&bytes).expect("the library reads it");
    let r = import_bytes(dir.path(), &bytes).unwrap();
    assert!(r.exact_export);
    let a = Archive::open(dir.path().join("a.zip")).unwrap();
    let tag = a.tag("t").unwrap();
    assert_eq!(
        tag.param("b").unwrap().view().to_vec::<f32>().unwrap(),
        [1.5, -2.0]
    );
    assert!(export_safetensors_bytes(&tag).unwrap() == bytes);
}

#[test]
fn every_truncation_and_header_byte_flip_is_an_error_or_a_clean_import() {
    let dir = tempfile::tempdir().unwrap();
    let original = std::fs::read(fixtures().join("no_metadata.safetensors")).unwrap();
    for len in 0..original.len() {
        let e = import_bytes(dir.path(), &original[..len]).unwrap_err();
        assert!(e.location().file.is_some(), "truncated to {len}: {e}");
    }
    let n = u64::from_le_bytes(original[..8].try_into().unwrap()) as usize;
    let mut imported = 0;
    for i in 0..8 + n {
        for flip in [0x01u8, 0x20, 0x80] {
            let mut b = original.clone();
            b[i] ^= flip;
            if let Ok(r) = import_bytes(dir.path(), &b) {
                // Whatever was accepted exports to a file the library reads.
                let a = Archive::open(dir.path().join("a.zip")).unwrap();
                let out = export_safetensors_bytes(&a.tag("t").unwrap()).unwrap();
                safetensors::SafeTensors::deserialize(&out).unwrap();
                assert_eq!(r.params.len(), 2);
                imported += 1;
            }
        }
    }
    // Flips inside tensor names and spaces of the padding are harmless.
    assert!(imported > 0);
}

#[test]
fn hostile_indexes_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let shard = d.join("model-00001-of-00001.safetensors");
    std::fs::copy(fixtures().join("no_metadata.safetensors"), &shard).unwrap();
    let cases = [
        (
            r#"{"weight_map":{"w":"../etc/passwd"}}"#,
            "not a plain file name",
        ),
        (
            r#"{"weight_map":{"w":"/etc/passwd"}}"#,
            "not a plain file name",
        ),
        (r#"{"weight_map":{"w":7}}"#, "not a file name"),
        (r#"{"metadata":{}}"#, "no \"weight_map\" object"),
        (r#"{"weight_map":{}}"#, "maps no tensor"),
        ("[", "not a JSON object"),
        (
            r#"{"weight_map":{"w":"model-00001-of-00001.safetensors"}}"#,
            "tensor \"b\" is in this shard, but the index maps it to no shard",
        ),
        (
            r#"{"weight_map":{"w":"model-00001-of-00001.safetensors","b":"model-00001-of-00001.safetensors","c":"model-00001-of-00001.safetensors"}}"#,
            "the index maps tensor \"c\" to \"model-00001-of-00001.safetensors\", which does not hold it",
        ),
    ];
    let archive = d.join("a.zip");
    for (json, want) in cases {
        let index = d.join("model.safetensors.index.json");
        std::fs::write(&index, json).unwrap();
        let e = import_safetensors(&archive, "t", &[index], &opts()).unwrap_err();
        assert!(e.to_string().contains(want), "{json}: {e}");
        assert!(!archive.exists());
    }
    // Shards that disagree on __metadata__, and a name in two files.
    let other = d.join("other.safetensors");
    std::fs::copy(fixtures().join("empty_metadata.safetensors"), &other).unwrap();
    let e = import_safetensors(&archive, "t", &[shard.clone(), other], &opts()).unwrap_err();
    assert!(
        e.to_string().contains("tensor \"w\" is in two files"),
        "{e}"
    );
    let e = import_safetensors(
        &archive,
        "t",
        &[fixtures().join("all_dtypes.safetensors"), shard],
        &opts(),
    )
    .unwrap_err();
    assert!(e.to_string().contains("__metadata__ differ"), "{e}");
    assert!(!archive.exists());
    assert!(matches!(
        import_safetensors(&archive, "t", &[], &opts())
            .unwrap_err()
            .kind(),
        ErrorKind::InvalidInput(_)
    ));
}

/// An INT8 variant of a safetensors tag exported as safetensors wrote each quantized
/// weight's INT8 values under the weight's own name (dtype I8) plus a `<name>@scale`
/// tensor: a loader casts the INT8 values to the model's dtype and runs on values 1/scale
/// times too large. It is refused, naming the weight and the source tag; an FP16 variant
/// exports (an FP16 checkpoint is what it is).
#[test]
fn an_int8_variant_is_refused_and_an_fp16_variant_exports() {
    let dir = tempfile::tempdir().unwrap();
    let zip = dir.path().join("v.zip");
    let file = fixtures().join("finetune/base.safetensors");
    import_safetensors(&zip, "fp32", &[file], &opts()).unwrap();
    let w = support::write_opts();
    // The fixture holds NaN and ±inf (round-trip cases): allowed here, the variants'
    // refusal of them is tested in variants.rs.
    let allow = modelzip::variants::AllowValues {
        non_finite: true,
        overflow: true,
    };
    let q = modelzip::variants::quantize(
        &zip,
        "fp32",
        "int8",
        &modelzip::variants::QuantizeOptions { per_channel: true },
        &allow,
        &w,
    )
    .unwrap();
    let quantized = q.changed().next().unwrap().name.clone();
    modelzip::variants::cast(&zip, "fp32", "fp16", DType::Fp16, &allow, &w).unwrap();
    let a = Archive::open(&zip).unwrap();
    let out = dir.path().join("int8.safetensors");
    let e = export_safetensors(&a.tag("int8").unwrap(), &out, &export_opts())
        .unwrap_err()
        .to_string();
    assert!(
        e.contains(&format!("{quantized}@scale"))
            && e.contains("INT8 variant")
            && e.contains("export its source tag \"fp32\""),
        "{e}"
    );
    assert!(!out.exists());
    let shards = dir.path().join("shards");
    std::fs::create_dir(&shards).unwrap();
    let e = export_sharded(&a.tag("int8").unwrap(), &shards, None).unwrap_err();
    assert!(e.to_string().contains("INT8 variant"), "{e}");
    assert!(std::fs::read_dir(&shards).unwrap().next().is_none());
    // Names alone do not make a variant: a checkpoint with "w" and "w@scale" exports.
    let a8 = [1u8, 2, 3, 4];
    let s4 = [0u8, 0, 128, 63];
    let named = safetensors::serialize(
        [
            (
                "w",
                safetensors::tensor::TensorView::new(safetensors::Dtype::I8, vec![4], &a8).unwrap(),
            ),
            (
                "w@scale",
                safetensors::tensor::TensorView::new(safetensors::Dtype::F32, vec![1], &s4)
                    .unwrap(),
            ),
        ],
        None,
    )
    .unwrap();
    let file = dir.path().join("named.safetensors");
    std::fs::write(&file, &named).unwrap();
    import_safetensors(&zip, "named", &[file], &opts()).unwrap();
    let a = Archive::open(&zip).unwrap();
    assert_eq!(
        export_safetensors_bytes(&a.tag("named").unwrap()).unwrap(),
        named
    );
    // FP16: every tensor as the variant holds it.
    let fp16 = a.tag("fp16").unwrap();
    let bytes = export_safetensors_bytes(&fp16).unwrap();
    let st = safetensors::SafeTensors::deserialize(&bytes).unwrap();
    assert_eq!(st.len(), fp16.params().len());
    for p in fp16.params() {
        let t = st.tensor(&p.name).unwrap();
        let v = fp16.param(&p.name).unwrap();
        assert_eq!(t.data(), v.view().data(), "{}", p.name);
        if v.view().dtype() == DType::Fp16 {
            assert_eq!(t.dtype(), safetensors::Dtype::F16, "{}", p.name);
        }
    }
}

/// Detection by content read the first 64 KiB and wanted the whole header in it: a file
/// without the .safetensors name whose header is longer (a checkpoint of a few thousand
/// tensors) was "not a model file of any known format".
#[test]
fn a_long_header_is_detected_by_content() {
    let dir = tempfile::tempdir().unwrap();
    let byte = [1u8];
    let names: Vec<String> = (0..2000)
        .map(|i| format!("model.layers.{i}.self_attn.q_proj.weight"))
        .collect();
    let views: Vec<_> = names
        .iter()
        .map(|n| {
            (
                n.as_str(),
                safetensors::tensor::TensorView::new(safetensors::Dtype::U8, vec![1], &byte)
                    .unwrap(),
            )
        })
        .collect();
    let bytes = safetensors::serialize(views, None).unwrap();
    let header = u64::from_le_bytes(bytes[..8].try_into().unwrap());
    assert!(header > 1 << 16, "{header}");
    let file = dir.path().join("weights.bin");
    std::fs::write(&file, &bytes).unwrap();
    let format = modelzip::interop::detect(std::slice::from_ref(&file));
    assert_eq!(format.map(|f| f.name()).ok(), Some("safetensors"));
    // A header length past the file's end is still not safetensors.
    let mut cut = bytes.clone();
    cut.truncate(1 << 17);
    std::fs::write(&file, &cut).unwrap();
    assert!(modelzip::interop::detect(std::slice::from_ref(&file)).is_err());
}

/// A directory with both model.safetensors and an index (save_pretrained leaves the
/// index of an earlier sharded save): the import took the index, transformers takes the
/// single file. It is refused, asking which; each imports when named.
#[test]
fn a_directory_with_a_single_file_and_an_index_is_refused_asking_which() {
    let dir = tempfile::tempdir().unwrap();
    let both = dir.path().join("both");
    std::fs::create_dir(&both).unwrap();
    for e in std::fs::read_dir(fixtures().join("sharded")).unwrap() {
        let p = e.unwrap().path();
        std::fs::copy(&p, both.join(p.file_name().unwrap())).unwrap();
    }
    std::fs::copy(
        fixtures().join("finetune/base.safetensors"),
        both.join("model.safetensors"),
    )
    .unwrap();
    let zip = dir.path().join("a.zip");
    let e = import_safetensors(&zip, "t", std::slice::from_ref(&both), &opts()).unwrap_err();
    assert!(
        e.to_string()
            .contains("both model.safetensors and model.safetensors.index.json"),
        "{e}"
    );
    assert!(!zip.exists());
    for (tag, input) in [
        ("single", both.join("model.safetensors")),
        ("index", both.join("model.safetensors.index.json")),
    ] {
        import_safetensors(&zip, tag, &[input], &opts()).unwrap();
    }
}

/// A tag with a graph exported as safetensors said nothing of what the file lacks: the
/// graph, and the constants the graph keeps whole (a TensorFlow string constant, an ONNX
/// INT4 initializer), which are not parameters. The export's notes say both.
#[test]
fn exporting_a_graph_tag_notes_what_a_safetensors_file_leaves_out() {
    let dir = tempfile::tempdir().unwrap();
    let zip = dir.path().join("a.zip");
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures");
    let f = modelzip::interop::format("safetensors").unwrap();
    for (format, file) in [
        ("tf", "tf/control.pb"),
        ("paddle", "paddle/3.3.1/mlp.pdmodel"),
    ] {
        let mut inputs = vec![root.join(file)];
        if format == "paddle" {
            inputs.push(root.join("paddle/3.3.1/mlp.pdiparams"));
        }
        modelzip::interop::format(format)
            .unwrap()
            .import(&zip, format, &inputs, &opts())
            .unwrap();
        let a = Archive::open(&zip).unwrap();
        let out = dir.path().join(format!("{format}.safetensors"));
        let r = f
            .export(&a.tag(format).unwrap(), &out, &export_opts())
            .unwrap();
        let notes = r.notes.join("; ");
        assert!(
            notes.contains("is not part of a safetensors file"),
            "{format}: {notes}"
        );
        assert_eq!(
            notes.contains("constant(s) the graph keeps whole"),
            format == "tf",
            "{format}: {notes}"
        );
    }
    // A tag without a graph has nothing left out.
    import_safetensors(
        &zip,
        "st",
        &[fixtures().join("finetune/base.safetensors")],
        &opts(),
    )
    .unwrap();
    let a = Archive::open(&zip).unwrap();
    let r = f
        .export(
            &a.tag("st").unwrap(),
            &dir.path().join("st.safetensors"),
            &export_opts(),
        )
        .unwrap();
    assert!(
        r.notes.iter().all(|n| !n.contains("graph")),
        "{:?}",
        r.notes
    );
}

/// A tag whose metadata.json names two shards alike (or a shard like the index): the
/// sharded export is refused before anything is written, with or without overwrite (one
/// shard replaced the other, its tensors lost, and the export said it succeeded).
#[test]
fn shards_named_alike_in_metadata_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let imported = dir.path().join("a.zip");
    import_safetensors(
        &imported,
        "t",
        std::slice::from_ref(&fixtures().join("sharded")),
        &opts(),
    )
    .unwrap();
    let a = Archive::open(&imported).unwrap();
    let tag = a.tag("t").unwrap();
    let meta: Value = serde_json::from_slice(&tag.metadata().unwrap().unwrap()).unwrap();
    for second in [
        "model-00001-of-00002.safetensors",
        "model.safetensors.index.json",
    ] {
        let mut m = meta.clone();
        m["safetensors"]["shards"][1]["file"] = second.into();
        let path = dir.path().join(format!("dup-{}.zip", second.len()));
        let mut b = TagBuilder::new("t").metadata(m.to_string());
        for p in tag.params() {
            b = b.param(&p.name, tag.param(&p.name).unwrap().view().to_owned());
        }
        let mut w = ArchiveWriter::create(&path).unwrap();
        w.add_tag(b).unwrap();
        w.finish().unwrap();
        let dup = Archive::open(&path).unwrap();
        for overwrite in [false, true] {
            let out = dir.path().join(format!("out-{}-{overwrite}", second.len()));
            std::fs::create_dir(&out).unwrap();
            let opts = ExportOptions {
                overwrite,
                ..export_opts()
            };
            let e = interop::format("safetensors")
                .unwrap()
                .export(&dup.tag("t").unwrap(), &out, &opts)
                .unwrap_err();
            assert!(
                e.to_string().contains("names another file of the export"),
                "{second}: {e}"
            );
            assert_eq!(std::fs::read_dir(&out).unwrap().count(), 0, "{second}");
        }
    }
}
