//! ONNX interop on the fixtures the `onnx` package made (tests/onnx/make_fixtures.py):
//! import → verify → export gives the original ModelProto back as a message; external
//! data in and out; every dtype and value form; dedup across fine-tuned versions;
//! refusals of other formats' tags and of hostile models. ONNX Runtime itself runs the
//! exports in tests/onnx/run_exported.py (not part of cargo test).

use crate::support::{export_opts, import_opts as opts};
use modelzip::Archive;
use modelzip::GraphFormat;
use modelzip::WriteOptions;
use modelzip::interop::onnx::{self, EXTERNAL_ALIGN};
use modelzip::interop::{self, ExportOptions};
use modelzip::onnx_proto as pb;
use modelzip::{DType, Graph};
use prost::Message;
use std::path::{Path, PathBuf};

const MODELS: [&str; 6] = [
    "mlp",
    "cnn",
    "control",
    "dtypes",
    "finetune_v1",
    "finetune_v2",
];

fn fixture(file: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/onnx")
        .join(file)
}

fn original(model: &str) -> pb::ModelProto {
    pb::ModelProto::decode(
        std::fs::read(fixture(&format!("{model}.onnx")))
            .unwrap()
            .as_slice(),
    )
    .unwrap()
}

fn initializers(m: &pb::ModelProto) -> &[pb::TensorProto] {
    &m.graph.as_ref().unwrap().initializer
}

#[test]
fn every_fixture_exports_as_the_message_it_was_imported_from() {
    let dir = tempfile::tempdir().unwrap();
    let zip = dir.path().join("onnx.zip");
    for m in MODELS {
        let r = onnx::import_model_file(&zip, m, &fixture(&format!("{m}.onnx")), &opts()).unwrap();
        assert_eq!(r.graph_entry, Some("graph.fb"), "{m}");
        assert!(
            !r.params.is_empty(),
            "{m}: no initializer became a parameter"
        );
    }
    let a = Archive::open(&zip).unwrap();
    let report = a.verify();
    assert!(report.is_ok(), "{:?}", report.problems);
    for m in MODELS {
        let tag = a.tag(m).unwrap();
        let (model, used, unused) = onnx::export_model(&tag).unwrap();
        let want = original(m);
        assert_eq!(model, want, "{m}: exported model differs");
        // Equal as a message, and here even byte for byte as the onnx package wrote it.
        assert_eq!(
            model.encode_to_vec(),
            std::fs::read(fixture(&format!("{m}.onnx"))).unwrap(),
            "{m}"
        );
        assert_eq!(used.len(), tag.params().len(), "{m}");
        assert!(unused.is_empty(), "{m}: {unused:?}");
        // Through the registry, to a file.
        let out = dir.path().join(format!("{m}.onnx"));
        let e = interop::format("onnx")
            .unwrap()
            .export(&tag, &out, &export_opts())
            .unwrap();
        assert_eq!(
            e.files,
            vec![(out.clone(), std::fs::metadata(&out).unwrap().len())]
        );
        assert_eq!(
            std::fs::read(&out).unwrap(),
            std::fs::read(fixture(&format!("{m}.onnx"))).unwrap(),
            "{m}.onnx differs"
        );
        assert_eq!(interop::origin_of(&tag).unwrap().unwrap().name(), "onnx");
    }
}

#[test]
fn initializers_of_every_dtype_and_form_become_parameters() {
    let dir = tempfile::tempdir().unwrap();
    let zip = dir.path().join("d.zip");
    let r = onnx::import_model_file(&zip, "d", &fixture("dtypes.onnx"), &opts()).unwrap();
    let got = |name: &str| {
        r.params
            .iter()
            .find(|p| p.name == name)
            .map(|p| (p.dtype, p.dims.clone()))
    };
    let expect = [
        ("float", DType::Fp32),
        ("double", DType::Fp64),
        ("float16", DType::Fp16),
        ("bfloat16", DType::Bf16),
        ("int8", DType::Int8),
        ("int16", DType::Int16),
        ("int32", DType::Int32),
        ("int64", DType::Int64),
        ("uint8", DType::Uint8),
        ("uint16", DType::Uint16),
        ("uint32", DType::Uint32),
        ("uint64", DType::Uint64),
        ("bool", DType::Bool),
        ("complex64", DType::Complex64),
        ("complex128", DType::Complex128),
        ("float8e4m3fn", DType::Fp8E4m3fn),
        ("float8e5m2", DType::Fp8E5m2),
    ];
    for (name, dtype) in expect {
        for form in ["raw", "typed"] {
            let (d, _) = got(&format!("{name}.{form}")).unwrap_or_else(|| panic!("{name}.{form}"));
            assert_eq!(d, dtype, "{name}.{form}");
        }
    }
    assert_eq!(got("scalar"), Some((DType::Fp32, vec![])));
    assert_eq!(got("empty"), Some((DType::Fp32, vec![0, 3])));
    // Strings and INT4 stay in the model; everything else is a parameter.
    assert_eq!(got("words"), None);
    assert_eq!(got("int4"), None);
    assert_eq!(r.params.len(), expect.len() * 2 + 2);
    // Raw and typed forms of one dtype hold the same values (deduplicated).
    let a = Archive::open(&zip).unwrap();
    let t = a.tag("d").unwrap();
    for (name, _) in expect {
        let raw = t.param(&format!("{name}.raw")).unwrap();
        let typed = t.param(&format!("{name}.typed")).unwrap();
        if !name.starts_with("float8") && name != "bfloat16" {
            assert_eq!(raw.view().data(), typed.view().data(), "{name}");
        }
    }
    let int8 = t.param("int8.typed").unwrap();
    assert_eq!(&int8.view().data()[..2], &[0x80, 0x7f]);
}

#[test]
fn subgraphs_functions_and_metadata_stay_in_the_model() {
    let dir = tempfile::tempdir().unwrap();
    let zip = dir.path().join("c.zip");
    let r = onnx::import_model_file(&zip, "c", &fixture("control.onnx"), &opts()).unwrap();
    let names: Vec<&str> = r.params.iter().map(|p| p.name.as_str()).collect();
    // Only the top-level initializers; the If / Loop bodies keep theirs.
    assert_eq!(names, ["go", "scale", "trips"]);
    let a = Archive::open(&zip).unwrap();
    let (model, _, _) = onnx::export_model(&a.tag("c").unwrap()).unwrap();
    assert_eq!(model.functions.len(), 1);
    let g = model.graph.unwrap();
    let ops: Vec<&str> = g.node.iter().map(|n| n.op_type()).collect();
    assert_eq!(ops, ["If", "Loop", "Scaled"]);
    // The typed fields came back typed.
    let scale = g.initializer.iter().find(|t| t.name() == "scale").unwrap();
    assert_eq!(scale.float_data, [1.0, 2.0, 3.0, 4.0]);
    assert!(scale.raw_data.is_none());
    let m = original("mlp");
    assert_eq!(m.metadata_props.len(), 2);
}

fn external_inlined() -> pb::ModelProto {
    let mut m = original("external");
    let data = std::fs::read(fixture("external.bin")).unwrap();
    for t in &mut m.graph.as_mut().unwrap().initializer {
        let get = |k: &str| {
            t.external_data
                .iter()
                .find(|kv| kv.key() == k)
                .map(|kv| kv.value().to_string())
        };
        let off: usize = get("offset").map_or(0, |v| v.parse().unwrap());
        let len: usize = get("length").unwrap().parse().unwrap();
        t.raw_data = Some(data[off..off + len].to_vec().into());
        t.external_data.clear();
        t.data_location = None;
    }
    m
}

#[test]
fn external_data_comes_in_and_goes_out_aligned() {
    let dir = tempfile::tempdir().unwrap();
    let zip = dir.path().join("e.zip");
    let r = onnx::import_model_file(&zip, "e", &fixture("external.onnx"), &opts()).unwrap();
    assert_eq!(r.params.len(), 6);
    let a = Archive::open(&zip).unwrap();
    let tag = a.tag("e").unwrap();
    // Inline by default: the model with its data in raw_data.
    let (model, _, _) = onnx::export_model(&tag).unwrap();
    assert_eq!(model, external_inlined());
    // With external data: PATH.data, 64-byte aligned offsets, lengths exact.
    let out = dir.path().join("out.onnx");
    let e = onnx::export_model_file(
        &tag,
        &out,
        &ExportOptions {
            external_data: true,
            ..export_opts()
        },
    )
    .unwrap();
    let data_path = dir.path().join("out.onnx.data");
    assert_eq!(
        e.files.iter().map(|f| f.0.clone()).collect::<Vec<_>>(),
        [out.clone(), data_path.clone()]
    );
    let data = std::fs::read(&data_path).unwrap();
    let written = pb::ModelProto::decode(std::fs::read(&out).unwrap().as_slice()).unwrap();
    let inlined = external_inlined();
    for (t, want) in initializers(&written).iter().zip(initializers(&inlined)) {
        assert_eq!(t.data_location, Some(1), "{}", t.name());
        let kv: Vec<(&str, &str)> = t
            .external_data
            .iter()
            .map(|kv| (kv.key(), kv.value()))
            .collect();
        assert_eq!(kv[0], ("location", "out.onnx.data"));
        let off: u64 = kv[1].1.parse().unwrap();
        let len: usize = kv[2].1.parse().unwrap();
        assert_eq!(off % EXTERNAL_ALIGN, 0, "{}", t.name());
        let off = off as usize;
        assert_eq!(
            Some(&data[off..off + len]),
            want.raw_data.as_deref(),
            "{}",
            t.name()
        );
    }
    // The external export imports back as the same tag.
    let r = onnx::import_model_file(&zip, "again", &out, &opts()).unwrap();
    assert!(
        r.params
            .iter()
            .all(|p| p.shared_from.as_deref() == Some("e")),
        "{r:?}"
    );
    // Existing files are refused without --force, and nothing is changed.
    let before = std::fs::read(&out).unwrap();
    let e = onnx::export_model_file(
        &tag,
        &out,
        &ExportOptions {
            external_data: true,
            ..export_opts()
        },
    )
    .unwrap_err();
    assert!(e.to_string().contains("refusing to overwrite"), "{e}");
    assert_eq!(std::fs::read(&out).unwrap(), before);
    // Past --max-output: refused before anything is written.
    let small = dir.path().join("small.onnx");
    let e = onnx::export_model_file(
        &tag,
        &small,
        &ExportOptions {
            max_output: Some(1000),
            ..export_opts()
        },
    )
    .unwrap_err();
    assert!(e.to_string().contains("ONNX export size"), "{e}");
    assert!(!small.exists());
}

/// The external fixture under other names in `dir`: the model `model` with `name` as its
/// data file (the same bytes and offsets as onnx wrote them).
fn fresh_external(dir: &Path, model: &str, name: &str) -> PathBuf {
    let mut m = original("external");
    let data = std::fs::read(fixture("external.bin")).unwrap();
    for t in &mut m.graph.as_mut().unwrap().initializer {
        for kv in &mut t.external_data {
            if kv.key() == "location" {
                kv.value = Some(name.to_string());
            }
        }
    }
    std::fs::write(dir.join(name), &data).unwrap();
    let path = dir.join(model);
    std::fs::write(&path, m.encode_to_vec()).unwrap();
    path
}

#[test]
fn external_data_goes_back_where_it_came_from() {
    let dir = tempfile::tempdir().unwrap();
    let zip = dir.path().join("e.zip");
    onnx::import_model_file(&zip, "fixture", &fixture("external.onnx"), &opts()).unwrap();
    let src = dir.path().join("src");
    std::fs::create_dir(&src).unwrap();
    let fresh = fresh_external(&src, "fresh.onnx", "fresh.weights");
    onnx::import_model_file(&zip, "fresh", &fresh, &opts()).unwrap();
    let a = Archive::open(&zip).unwrap();
    assert!(a.verify().is_ok());

    // The fixture: the model and its data file byte for byte.
    let out = dir.path().join("out");
    std::fs::create_dir(&out).unwrap();
    let e = onnx::export_model_file(
        &a.tag("fixture").unwrap(),
        &out.join("m.onnx"),
        &export_opts(),
    )
    .unwrap();
    assert_eq!(
        e.files.iter().map(|f| f.0.clone()).collect::<Vec<_>>(),
        [out.join("m.onnx"), out.join("external.bin")]
    );
    assert!(e.notes[0].contains("external.bin"), "{:?}", e.notes);
    assert_eq!(
        std::fs::read(out.join("m.onnx")).unwrap(),
        std::fs::read(fixture("external.onnx")).unwrap()
    );
    let (got, want) = (
        std::fs::read(out.join("external.bin")).unwrap(),
        std::fs::read(fixture("external.bin")).unwrap(),
    );
    assert_eq!(got, want);

    // Laid out as onnx writes it into a fresh directory: both files byte for byte.
    let e = onnx::export_model_file(
        &a.tag("fresh").unwrap(),
        &out.join("fresh.onnx"),
        &export_opts(),
    )
    .unwrap();
    assert_eq!(e.files[1].0, out.join("fresh.weights"));
    for f in ["fresh.onnx", "fresh.weights"] {
        assert_eq!(
            std::fs::read(out.join(f)).unwrap(),
            std::fs::read(src.join(f)).unwrap(),
            "{f}"
        );
    }
    // An existing data file is refused without overwrite, and nothing is written.
    let e = onnx::export_model_file(
        &a.tag("fresh").unwrap(),
        &out.join("again.onnx"),
        &export_opts(),
    )
    .unwrap_err();
    assert!(e.to_string().contains("refusing to overwrite"), "{e}");
    assert!(e.to_string().contains("fresh.weights"), "{e}");
    assert!(!out.join("again.onnx").exists());
    let overwrite = ExportOptions {
        overwrite: true,
        ..export_opts()
    };
    onnx::export_model_file(
        &a.tag("fresh").unwrap(),
        &out.join("again.onnx"),
        &overwrite,
    )
    .unwrap();
    assert_eq!(
        std::fs::read(out.join("fresh.weights")).unwrap(),
        std::fs::read(src.join("fresh.weights")).unwrap()
    );
    // The in-memory model stays whole (inline), and --external-data still writes
    // PATH.data instead.
    let (m, _, _) = onnx::export_model(&a.tag("fresh").unwrap()).unwrap();
    assert!(
        initializers(&m)
            .iter()
            .all(|t| t.raw_data.is_some() && t.external_data.is_empty())
    );
    let ext = ExportOptions {
        external_data: true,
        ..export_opts()
    };
    let e = onnx::export_model_file(&a.tag("fresh").unwrap(), &out.join("x.onnx"), &ext).unwrap();
    assert_eq!(e.files[1].0, out.join("x.onnx.data"));
}

#[test]
fn external_data_in_a_subdirectory_and_inline_initializers_mix() {
    let dir = tempfile::tempdir().unwrap();
    let src = dir.path().join("src");
    std::fs::create_dir_all(src.join("weights")).unwrap();
    // Kernels in weights/k.bin, biases inline.
    let inlined = external_inlined();
    let mut m = inlined.clone();
    let mut blob = Vec::new();
    for t in &mut m.graph.as_mut().unwrap().initializer {
        if !t.name().contains("kernel") {
            continue;
        }
        let data = t.raw_data.take().unwrap();
        let kv = |k: &str, v: String| pb::StringStringEntryProto {
            key: Some(k.into()),
            value: Some(v),
        };
        t.external_data = vec![
            kv("location", "weights/k.bin".into()),
            kv("offset", blob.len().to_string()),
            kv("length", data.len().to_string()),
        ];
        t.data_location = Some(1);
        blob.extend_from_slice(&data);
        blob.extend_from_slice(&[0; 3]); // a gap, as an aligning writer leaves
    }
    std::fs::write(src.join("weights/k.bin"), &blob).unwrap();
    std::fs::write(src.join("m.onnx"), m.encode_to_vec()).unwrap();
    let zip = dir.path().join("e.zip");
    onnx::import_model_file(&zip, "t", &src.join("m.onnx"), &opts()).unwrap();
    let a = Archive::open(&zip).unwrap();
    let tag = a.tag("t").unwrap();
    let out = dir.path().join("out");
    std::fs::create_dir(&out).unwrap();
    // Without the subdirectory: refused, nothing written.
    let e = onnx::export_model_file(&tag, &out.join("m.onnx"), &export_opts()).unwrap_err();
    assert!(e.to_string().contains("weights"), "{e}");
    assert!(std::fs::read_dir(&out).unwrap().next().is_none());
    std::fs::create_dir(out.join("weights")).unwrap();
    onnx::export_model_file(&tag, &out.join("m.onnx"), &export_opts()).unwrap();
    // The last gap is not written (nothing after it); the rest byte for byte.
    let got = std::fs::read(out.join("weights/k.bin")).unwrap();
    assert_eq!(got[..], blob[..blob.len() - 3]);
    assert_eq!(
        std::fs::read(out.join("m.onnx")).unwrap(),
        std::fs::read(src.join("m.onnx")).unwrap()
    );
}

#[test]
fn stored_external_locations_cannot_write_outside_the_output_directory() {
    use modelzip::{ArchiveWriter, GraphFormat, TagBuilder};
    let dir = tempfile::tempdir().unwrap();
    let zip = dir.path().join("e.zip");
    onnx::import_model_file(&zip, "e", &fixture("external.onnx"), &opts()).unwrap();
    let a = Archive::open(&zip).unwrap();
    let tag = a.tag("e").unwrap();
    let (_, fb) = tag.graph().unwrap().unwrap();
    let good = Graph::decode(GraphFormat::FlatBuffers, &fb).unwrap();
    let out = dir.path().join("out");
    std::fs::create_dir(&out).unwrap();
    type Edit = Box<dyn Fn(&mut Vec<(String, String)>, usize)>;
    let cases: [(&str, Edit); 5] = [
        (
            "is not a relative file path",
            Box::new(|e, _| e[0].1 = "../evil.bin".into()),
        ),
        (
            "is not a relative file path",
            Box::new(|e, _| e[0].1 = "/tmp/evil.bin".into()),
        ),
        (
            "is not the parameter's",
            Box::new(|e, _| e[2].1 = "4".into()),
        ),
        ("overflows", Box::new(|e, _| e[1].1 = u64::MAX.to_string())),
        (
            "overlap",
            Box::new(|e, i| {
                if i == 1 {
                    e[1].1 = "2".into()
                }
            }),
        ),
    ];
    for (n, (why, edit)) in cases.iter().enumerate() {
        let mut g = good.clone();
        for (i, init) in onnx_of(&mut g).initializers.iter_mut().enumerate() {
            if i == 0 || *why == "overlap" {
                edit(&mut init.external, i);
            }
        }
        let bad = dir.path().join(format!("bad{n}.zip"));
        let mut b = TagBuilder::new("bad").graph(
            GraphFormat::FlatBuffers,
            g.encode(GraphFormat::FlatBuffers).unwrap(),
        );
        for p in tag.params() {
            b = b.param(p.name.clone(), tag.tensor_owned(&p.location).unwrap());
        }
        let mut w = ArchiveWriter::create_with(
            &bad,
            &WriteOptions {
                fsync: false,
                ..WriteOptions::default()
            },
        )
        .unwrap();
        w.add_tag(b).unwrap();
        w.finish().unwrap();
        let ba = Archive::open(&bad).unwrap();
        let e =
            onnx::export_model_file(&ba.tag("bad").unwrap(), &out.join("m.onnx"), &export_opts())
                .unwrap_err();
        assert!(e.to_string().contains(why), "{why}: {e}");
        assert!(
            std::fs::read_dir(&out).unwrap().next().is_none(),
            "{why}: something written"
        );
        if *why != "overlap" {
            let v = ba.verify();
            assert!(!v.is_ok(), "{why}: verify finds nothing");
        }
    }
    assert!(!dir.path().join("evil.bin").exists());
}

#[test]
fn a_fine_tuned_version_costs_only_its_changed_tensors() {
    let dir = tempfile::tempdir().unwrap();
    let zip = dir.path().join("f.zip");
    onnx::import_model_file(&zip, "v1", &fixture("finetune_v1.onnx"), &opts()).unwrap();
    let r = onnx::import_model_file(&zip, "v2", &fixture("finetune_v2.onnx"), &opts()).unwrap();
    let shared: Vec<&str> = r
        .params
        .iter()
        .filter(|p| p.shared_from.is_some())
        .map(|p| p.name.as_str())
        .collect();
    assert_eq!(shared.len(), 4, "{shared:?}");
    assert!(!shared.iter().any(|n| n.starts_with("head")), "{shared:?}");
    let a = Archive::open(&zip).unwrap();
    let own = |t: &str| -> u64 {
        a.tag(t)
            .unwrap()
            .own_entries()
            .iter()
            .map(|e| a.entry_stored_size(e).unwrap())
            .sum()
    };
    let (v1, v2) = (own("v1"), own("v2"));
    assert!(
        v2 * 100 <= v1 * 40,
        "v2 owns {v2} bytes, more than 40% of v1's {v1}"
    );
}

#[test]
fn tags_of_another_format_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let zip = dir.path().join("m.zip");
    onnx::import_model_file(&zip, "onnx", &fixture("mlp.onnx"), &opts()).unwrap();
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    interop::tf::import_graphdef_file(&zip, "tf", &root.join("tests/fixtures/tf/mlp.pb"), &opts())
        .unwrap();
    let paddle = root.join("tests/fixtures/paddle/2.6.2");
    interop::paddle::import_inference_model_files(
        &zip,
        "paddle",
        &paddle.join("mlp.pdmodel"),
        &paddle.join("mlp.pdiparams"),
        &opts(),
    )
    .unwrap();
    let a = Archive::open(&zip).unwrap();
    let out = dir.path().join("x.onnx");
    let fmt = interop::format("onnx").unwrap();
    for (tag, why) in [
        ("tf", "is a TensorFlow GraphDef (graph.fb)"),
        ("paddle", "is a Paddle program (graph.pdmodel)"),
    ] {
        let e = fmt
            .export(&a.tag(tag).unwrap(), &out, &export_opts())
            .unwrap_err();
        assert!(e.to_string().contains(why), "{tag}: {e}");
    }
    let onnx_tag = a.tag("onnx").unwrap();
    let e = interop::format("tf")
        .unwrap()
        .export(&onnx_tag, &dir.path().join("x.pb"), &export_opts())
        .unwrap_err();
    // An ONNX graph.fb is named as one (it was called "a Paddle/SameDiff graph.fb").
    assert!(
        e.to_string().contains(
            "is an ONNX model (graph.fb); TensorFlow export needs a graph imported from \
             TensorFlow; export it as \"onnx\" (--format onnx)"
        ),
        "{e}"
    );
    let e = interop::format("paddle")
        .unwrap()
        .export(&onnx_tag, &dir.path().join("x"), &export_opts())
        .unwrap_err();
    assert!(e.to_string().contains("ONNX model"), "{e}");
    assert!(!out.exists() && !dir.path().join("x.pb").exists());
    assert!(!dir.path().join("x.pdmodel").exists());
    let (_, bytes) = onnx_tag.graph().unwrap().unwrap();
    let e = Graph::decode(GraphFormat::FlatBuffers, &bytes)
        .unwrap()
        .encode(GraphFormat::ProgramDesc)
        .unwrap_err();
    assert!(e.to_string().contains("ONNX model"), "{e}");
}

#[test]
fn onnx_is_detected_by_name_and_content() {
    let dir = tempfile::tempdir().unwrap();
    let bin = dir.path().join("model.bin");
    std::fs::copy(fixture("cnn.onnx"), &bin).unwrap();
    for p in [fixture("cnn.onnx"), bin] {
        assert_eq!(
            interop::detect(std::slice::from_ref(&p)).unwrap().name(),
            "onnx",
            "{p:?}"
        );
    }
    // A TensorFlow GraphDef is not taken for ONNX, nor ONNX for TensorFlow.
    let pb = dir.path().join("frozen.bin");
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    std::fs::copy(root.join("tests/fixtures/tf/cnn.pb"), &pb).unwrap();
    assert_eq!(interop::detect(&[pb]).unwrap().name(), "tf");
}

// ---------------------------------------------------------------------------------
// Hostile models

fn import_model_in(dir: &Path, m: &pb::ModelProto) -> String {
    let file = dir.join("h.onnx");
    std::fs::write(&file, m.encode_to_vec()).unwrap();
    import_file(dir, &file)
}

fn import_file(dir: &Path, file: &Path) -> String {
    let zip = dir.join("h.zip");
    let e = onnx::import_model_file(&zip, "h", file, &opts()).unwrap_err();
    assert!(!zip.exists(), "a refused import leaves no archive");
    e.to_string()
}

fn with_initializer(t: pb::TensorProto) -> pb::ModelProto {
    let mut m = original("mlp");
    m.graph.as_mut().unwrap().initializer.push(t);
    m
}

fn external(
    location: &str,
    offset: Option<u64>,
    length: Option<u64>,
    dims: &[i64],
) -> pb::TensorProto {
    let kv = |k: &str, v: String| pb::StringStringEntryProto {
        key: Some(k.into()),
        value: Some(v),
    };
    let mut ext = vec![kv("location", location.into())];
    if let Some(o) = offset {
        ext.push(kv("offset", o.to_string()));
    }
    if let Some(l) = length {
        ext.push(kv("length", l.to_string()));
    }
    pb::TensorProto {
        name: Some("ext".into()),
        data_type: Some(1),
        dims: dims.to_vec(),
        external_data: ext,
        data_location: Some(1),
        ..Default::default()
    }
}

#[test]
fn huge_dims_and_wrong_lengths_are_refused_naming_the_initializer() {
    let dir = tempfile::tempdir().unwrap();
    let huge = pb::TensorProto {
        name: Some("huge".into()),
        data_type: Some(1),
        dims: vec![1 << 40, 1 << 40],
        raw_data: Some(vec![0; 4].into()),
        ..Default::default()
    };
    let e = import_model_in(dir.path(), &with_initializer(huge));
    assert!(e.contains("\"huge\"") && e.contains("h.onnx"), "{e}");
    let overflow = pb::TensorProto {
        name: Some("overflow".into()),
        data_type: Some(1),
        dims: vec![i64::MAX, i64::MAX],
        float_data: vec![1.0],
        ..Default::default()
    };
    let e = import_model_in(dir.path(), &with_initializer(overflow));
    assert!(e.contains("overflow an element count"), "{e}");
    let short = pb::TensorProto {
        name: Some("short".into()),
        data_type: Some(1),
        dims: vec![3],
        raw_data: Some(vec![0; 8].into()),
        ..Default::default()
    };
    let e = import_model_in(dir.path(), &with_initializer(short));
    assert!(
        e.contains("raw_data holds 8 bytes, but FP32 [3] needs 12"),
        "{e}"
    );
}

#[test]
fn external_data_outside_the_directory_or_past_the_file_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let inner = dir.path().join("model");
    std::fs::create_dir(&inner).unwrap();
    std::fs::write(dir.path().join("secret.bin"), [0u8; 64]).unwrap();
    std::fs::write(inner.join("w.bin"), [0u8; 16]).unwrap();
    for location in ["../secret.bin", "/etc/passwd", "a/../../secret.bin", ""] {
        let e = import_model_in(
            &inner,
            &with_initializer(external(location, None, Some(16), &[4])),
        );
        assert!(
            e.contains("not a relative path inside the model's directory"),
            "{location}: {e}"
        );
    }
    #[cfg(unix)]
    {
        std::os::unix::fs::symlink(dir.path().join("secret.bin"), inner.join("link.bin")).unwrap();
        let e = import_model_in(
            &inner,
            &with_initializer(external("link.bin", None, None, &[16])),
        );
        assert!(e.contains("outside the model's directory"), "{e}");
    }
    let e = import_model_in(
        &inner,
        &with_initializer(external("w.bin", Some(8), Some(16), &[4])),
    );
    assert!(
        e.contains("offset + length past the end of the file"),
        "{e}"
    );
    let e = import_model_in(
        &inner,
        &with_initializer(external("w.bin", Some(17), None, &[0])),
    );
    assert!(e.contains("offset past the end of the file"), "{e}");
    let e = import_model_in(
        &inner,
        &with_initializer(external("w.bin", None, Some(16), &[1 << 40])),
    );
    assert!(e.contains("external data holds 16 bytes"), "{e}");
    let e = import_model_in(
        &inner,
        &with_initializer(external("missing.bin", None, Some(4), &[1])),
    );
    assert!(e.contains("missing.bin"), "{e}");
    // A correct one in the same directory imports.
    let file = inner.join("ok.onnx");
    std::fs::write(
        &file,
        with_initializer(external("w.bin", Some(0), Some(16), &[4])).encode_to_vec(),
    )
    .unwrap();
    let r = onnx::import_model_file(&dir.path().join("ok.zip"), "ok", &file, &opts()).unwrap();
    assert!(r.params.iter().any(|p| p.name == "ext"));
}

#[test]
fn deeply_nested_subgraphs_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let mut g = pb::GraphProto {
        name: Some("leaf".into()),
        ..Default::default()
    };
    for _ in 0..200 {
        let attr = pb::AttributeProto {
            name: Some("then_branch".into()),
            r#type: Some(5),
            g: Some(g),
            ..Default::default()
        };
        g = pb::GraphProto {
            name: Some("g".into()),
            node: vec![pb::NodeProto {
                op_type: Some("If".into()),
                attribute: vec![attr],
                ..Default::default()
            }],
            ..Default::default()
        };
    }
    let m = pb::ModelProto {
        ir_version: Some(8),
        graph: Some(g),
        ..Default::default()
    };
    let e = import_model_in(dir.path(), &m);
    assert!(e.contains("nested deeper than 100"), "{e}");
}

#[test]
fn truncated_unknown_and_graphless_models_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let bytes = std::fs::read(fixture("mlp.onnx")).unwrap();
    let file = dir.path().join("t.onnx");
    std::fs::write(&file, &bytes[..bytes.len() / 2]).unwrap();
    let e = import_file(dir.path(), &file);
    assert!(
        e.contains("invalid ONNX protobuf") && e.contains("t.onnx"),
        "{e}"
    );
    // Field 99 (varint) in the ModelProto: not in onnx.proto, so it could not be kept.
    let mut unknown = bytes.clone();
    unknown.extend([0x98, 0x06, 0x01]);
    std::fs::write(&file, &unknown).unwrap();
    let e = import_file(dir.path(), &file);
    assert!(e.contains("unknown field number 99"), "{e}");
    let e = import_model_in(
        dir.path(),
        &pb::ModelProto {
            ir_version: Some(8),
            ..Default::default()
        },
    );
    assert!(e.contains("has no graph"), "{e}");
}

#[test]
fn a_million_empty_nodes_are_refused_before_decoding() {
    let dir = tempfile::tempdir().unwrap();
    // GraphProto.node (field 1), empty, 10^6 times: 2 MB on the wire, far more decoded.
    let graph = [0x0au8, 0x00].repeat(1_000_000);
    let mut bytes = vec![0x08, 0x08]; // ir_version 8
    bytes.push(0x3a); // ModelProto.graph (field 7, length-delimited)
    let mut len = graph.len();
    while len >= 0x80 {
        bytes.push((len as u8) | 0x80);
        len >>= 7;
    }
    bytes.push(len as u8);
    bytes.extend(graph);
    let file = dir.path().join("million.onnx");
    std::fs::write(&file, &bytes).unwrap();
    let e = import_file(dir.path(), &file);
    assert!(e.contains("estimated decoded protobuf size"), "{e}");
}

#[test]
fn duplicate_and_unusable_names_stay_in_the_model() {
    let dir = tempfile::tempdir().unwrap();
    let mut m = original("mlp");
    let inits = &mut m.graph.as_mut().unwrap().initializer;
    let mut dup = inits[0].clone();
    dup.raw_data = Some(vec![0; dup.raw_data.as_ref().unwrap().len()].into());
    inits.push(dup);
    let mut newline = inits[1].clone();
    newline.name = Some("two\nlines".into());
    inits.push(newline);
    let file = dir.path().join("dup.onnx");
    std::fs::write(&file, m.encode_to_vec()).unwrap();
    let zip = dir.path().join("dup.zip");
    let r = onnx::import_model_file(&zip, "d", &file, &opts()).unwrap();
    assert_eq!(r.params.len(), 6);
    let a = Archive::open(&zip).unwrap();
    assert!(a.verify().is_ok());
    let (back, _, _) = onnx::export_model(&a.tag("d").unwrap()).unwrap();
    assert_eq!(back, m);
}

// ---------------------------------------------------------------------------------
// External data as the onnx package leaves it (tests/onnx/make_reload_fixtures.py)

/// A model onnx.load read with its external data and onnx.save wrote inline: every
/// initializer has `data_location: DEFAULT` written out. They were kept whole in the
/// model (no parameter, no dedup); they are parameters, and the file comes back byte for
/// byte.
#[test]
fn initializers_with_data_location_default_become_parameters() {
    let dir = tempfile::tempdir().unwrap();
    let zip = dir.path().join("r.zip");
    let file = fixture("reloaded.onnx");
    let original = pb::ModelProto::decode(std::fs::read(&file).unwrap().as_slice()).unwrap();
    assert!(
        initializers(&original)
            .iter()
            .all(|t| t.data_location == Some(0))
    );
    onnx::import_model_file(&zip, "ext", &fixture("external.onnx"), &opts()).unwrap();
    let r = onnx::import_model_file(&zip, "reloaded", &file, &opts()).unwrap();
    assert_eq!(r.params.len(), initializers(&original).len());
    assert!(
        r.params
            .iter()
            .all(|p| p.shared_from.as_deref() == Some("ext")),
        "the same values as the external fixture's are stored once: {:?}",
        r.params
    );
    let a = Archive::open(&zip).unwrap();
    let tag = a.tag("reloaded").unwrap();
    let out = dir.path().join("out.onnx");
    onnx::export_model_file(&tag, &out, &export_opts()).unwrap();
    assert_eq!(std::fs::read(&out).unwrap(), std::fs::read(&file).unwrap());
}

/// The tensors named `name` anywhere in the subgraphs of `g`'s nodes.
fn subgraph_tensors<'m>(g: &'m pb::GraphProto, name: &str, out: &mut Vec<&'m pb::TensorProto>) {
    for n in &g.node {
        for a in &n.attribute {
            for sub in a.g.iter().chain(&a.graphs) {
                out.extend(sub.initializer.iter().filter(|t| t.name() == name));
                subgraph_tensors(sub, name, out);
            }
        }
    }
}

/// onnx's save_as_external_data moves subgraph initializers to the data file too. They
/// stayed in the stored model as references to a file the archive does not hold, so
/// an export elsewhere gave a model ONNX Runtime cannot load. They are read in at import
/// and come back inline, with the values of the data file.
#[test]
fn external_data_of_subgraph_initializers_is_read_into_the_model() {
    let src = fixture("nested_external/control.onnx");
    let original = pb::ModelProto::decode(std::fs::read(&src).unwrap().as_slice()).unwrap();
    let data = std::fs::read(fixture("nested_external/control.bin")).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let zip = dir.path().join("n.zip");
    onnx::import_model_file(&zip, "n", &src, &opts()).unwrap();
    let a = Archive::open(&zip).unwrap();
    let out = dir.path().join("out.onnx");
    let e = onnx::export_model_file(&a.tag("n").unwrap(), &out, &export_opts()).unwrap();
    assert_eq!(e.files.len(), 1, "no data file: {:?}", e.files);
    let back = pb::ModelProto::decode(std::fs::read(&out).unwrap().as_slice()).unwrap();
    let mut checked = 0;
    for name in ["then.k", "else.k", "body.k"] {
        let mut was = Vec::new();
        subgraph_tensors(original.graph.as_ref().unwrap(), name, &mut was);
        let mut now = Vec::new();
        subgraph_tensors(back.graph.as_ref().unwrap(), name, &mut now);
        let ([was], [now]) = (&was[..], &now[..]) else {
            panic!("{name}: {} before, {} after", was.len(), now.len());
        };
        assert_eq!(was.data_location, Some(1), "{name} was external");
        let get = |k: &str| {
            was.external_data
                .iter()
                .find(|kv| kv.key() == k)
                .map(|kv| kv.value().parse::<usize>().unwrap())
        };
        let (off, len) = (get("offset").unwrap_or(0), get("length").unwrap());
        assert_eq!(now.data_location, None, "{name}");
        assert!(now.external_data.is_empty(), "{name}");
        assert_eq!(
            now.raw_data.as_deref(),
            Some(&data[off..off + len]),
            "{name}"
        );
        assert_eq!((&now.dims, now.data_type), (&was.dims, was.data_type));
        checked += 1;
    }
    assert_eq!(checked, 3);
    // Without a model directory (a ModelProto in memory) they are refused, naming them.
    let e = onnx::split_model(original, None).unwrap_err().to_string();
    assert!(
        e.contains("node 0 (If) attribute")
            && e.contains(".k\")")
            && e.contains("no model directory"),
        "{e}"
    );
}

/// Many initializers naming one range of a large file: each was read into memory in
/// full (a 2 KB model made the import hold 30 copies of a 64 MB file). All reads
/// together may not exceed what the files named hold.
#[test]
fn initializers_reading_one_range_many_times_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("w.bin"), [7u8; 64]).unwrap();
    let mut m = original("mlp");
    for i in 0..2 {
        let mut t = external("w.bin", Some(0), Some(64), &[16]);
        t.name = Some(format!("again{i}"));
        m.graph.as_mut().unwrap().initializer.push(t);
    }
    let e = import_model_in(dir.path(), &m);
    assert!(
        e.contains("initializer") && e.contains("\"again1\"") && e.contains("more than once"),
        "{e}"
    );
    assert!(e.contains("of 128 exceeds the limit of 64"), "{e}");
    // Disjoint ranges of the same file are fine.
    let mut m = original("mlp");
    for i in 0..2 {
        let mut t = external("w.bin", Some(32 * i), Some(32), &[8]);
        t.name = Some(format!("half{i}"));
        m.graph.as_mut().unwrap().initializer.push(t);
    }
    let file = dir.path().join("ok.onnx");
    std::fs::write(&file, m.encode_to_vec()).unwrap();
    let r = onnx::import_model_file(&dir.path().join("ok.zip"), "ok", &file, &opts()).unwrap();
    assert_eq!(
        r.params
            .iter()
            .filter(|p| p.name.starts_with("half"))
            .count(),
        2
    );
}

/// Every node and attribute was given its location as a string on the walk that reads
/// nested external data, each copying its node's op type: a 16 MiB op type with 100,000
/// attributes was 1.6 TB of copying (minutes) from a 16 MB model, though nothing was
/// external. The location is now made only for an error; the walk is linear in the
/// model (a second here), and the error still says where.
#[test]
fn a_long_op_type_with_many_attributes_is_walked_once() {
    let op_type = "A".repeat(16 << 20);
    let mut attribute: Vec<pb::AttributeProto> = std::iter::repeat_with(Default::default)
        .take(100_000)
        .collect();
    // The last attribute's tensor is external and there is no model directory.
    attribute.push(pb::AttributeProto {
        name: Some("last".into()),
        t: Some(external("w.bin", Some(0), Some(64), &[16])),
        ..Default::default()
    });
    let mut m = original("mlp");
    m.graph.as_mut().unwrap().node.insert(
        0,
        pb::NodeProto {
            op_type: Some(op_type.clone()),
            attribute,
            ..Default::default()
        },
    );
    let e = onnx::split_model(m, None).unwrap_err().to_string();
    let want = format!("graph node 0 ({op_type}) attribute \"last\" (\"ext\"): ");
    assert!(
        e.contains(&want) && e.contains("no model directory"),
        "{} ... {}",
        &e[..100],
        &e[e.len() - 200..]
    );
}

/// An output path that is a directory was "file already exists; refusing to overwrite
/// it", and with overwrite the rename failed after the other files were written (a
/// sharded safetensors export whose index path is a directory put its shards in place,
/// then removed them). Every format refuses it up front, overwrite or not, and writes
/// nothing.
#[test]
fn an_output_path_that_is_a_directory_is_refused_by_every_format() {
    let dir = tempfile::tempdir().unwrap();
    let zip = dir.path().join("m.zip");
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures");
    let inputs: [(&str, Vec<PathBuf>); 4] = [
        ("onnx", vec![fixture("mlp.onnx")]),
        ("tf", vec![root.join("tf/mlp.pb")]),
        (
            "paddle",
            vec![
                root.join("paddle/3.3.1/mlp.pdmodel"),
                root.join("paddle/3.3.1/mlp.pdiparams"),
            ],
        ),
        (
            "safetensors",
            vec![root.join("safetensors/finetune/base.safetensors")],
        ),
    ];
    let out = dir.path().join("out");
    std::fs::create_dir(&out).unwrap();
    for (format, files) in inputs {
        let f = interop::format(format).unwrap();
        f.import(&zip, format, &files, &opts()).unwrap();
        let a = Archive::open(&zip).unwrap();
        let tag = a.tag(format).unwrap();
        // The directory in the place of the (first, or last written) file.
        let (target, blocker) = match format {
            "paddle" => (out.join("m"), out.join("m.pdiparams")),
            "safetensors" => (out.clone(), out.join("model.safetensors.index.json")),
            _ => (out.join("m"), out.join("m")),
        };
        std::fs::create_dir(&blocker).unwrap();
        for overwrite in [false, true] {
            let o = ExportOptions {
                overwrite,
                ..export_opts()
            };
            let Err(e) = f.export(&tag, &target, &o) else {
                panic!("{format}: exported over a directory");
            };
            assert!(e.to_string().contains("is a directory"), "{format}: {e}");
        }
        let left: Vec<_> = std::fs::read_dir(&out)
            .unwrap()
            .map(|e| e.unwrap().path())
            .collect();
        assert_eq!(left, std::slice::from_ref(&blocker), "{format}");
        std::fs::remove_dir(&blocker).unwrap();
    }
}

/// A model naming one parameter from many initializers (an INT8 variant's model is all
/// inline too) was built whole in memory, then encoded, and only then refused as past
/// 2 GiB: here 2.1 GB twice for a 1 MB archive. The inline size is known before: the
/// export is refused before anything is built or written.
#[test]
fn a_model_past_2_gib_inline_is_refused_before_it_is_built() {
    let dir = tempfile::tempdir().unwrap();
    let n = 2100;
    let inits = (0..n)
        .map(|i| pb::TensorProto {
            name: Some(format!("w{i}")),
            data_type: Some(1),
            dims: vec![1 << 18],
            ..Default::default()
        })
        .collect();
    let model = pb::ModelProto {
        ir_version: Some(8),
        graph: Some(pb::GraphProto {
            name: Some("g".into()),
            initializer: inits,
            ..Default::default()
        }),
        ..Default::default()
    };
    let g = Graph::Onnx(modelzip::graph::OnnxGraph {
        model: model.encode_to_vec(),
        initializers: vec![
            modelzip::graph::OnnxInit {
                param: Some("w".into()),
                typed: false,
                external: Vec::new(),
            };
            n
        ],
    });
    let zip = dir.path().join("m.zip");
    let w = modelzip::Tensor::from_bytes(DType::Fp32, vec![1 << 18], vec![0; 1 << 20]).unwrap();
    let mut aw = modelzip::ArchiveWriter::create_with(&zip, &crate::support::write_opts()).unwrap();
    aw.add_tag(
        modelzip::TagBuilder::new("big")
            .graph(
                modelzip::GraphFormat::FlatBuffers,
                g.encode(GraphFormat::FlatBuffers).unwrap(),
            )
            .param("w", w),
    )
    .unwrap();
    aw.finish().unwrap();
    let a = Archive::open(&zip).unwrap();
    let out = dir.path().join("out");
    std::fs::create_dir(&out).unwrap();
    let e = onnx::export_model_file(&a.tag("big").unwrap(), &out.join("m.onnx"), &export_opts())
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("at least")
            && e.contains("past protobuf's 2 GiB")
            && e.contains("external data"),
        "{e}"
    );
    assert!(std::fs::read_dir(&out).unwrap().next().is_none());
}

/// Millions of empty messages (2 bytes each) deflate to almost nothing: a 44 KB archive
/// whose graph.fb holds a 10 MB stored model of 5 million empty nodes made export and
/// verify take 2.7 GB (27 GB for ten times as many). The stored protobufs of ONNX and
/// TensorFlow tags are walked before they are decoded, as imports walk files.
#[test]
fn a_stored_model_of_millions_of_empty_messages_is_refused_before_decoding() {
    fn delimited(field: u8, payload: &[u8]) -> Vec<u8> {
        let mut out = vec![(field << 3) | 2];
        let mut len = payload.len() as u64;
        loop {
            let b = (len & 0x7f) as u8;
            len >>= 7;
            if len == 0 {
                out.push(b);
                break;
            }
            out.push(b | 0x80);
        }
        out.extend_from_slice(payload);
        out
    }
    // 5 million empty entries of a repeated message field.
    let empties = |field: u8| [(field << 3) | 2, 0].repeat(5_000_000);
    let onnx = Graph::Onnx(modelzip::graph::OnnxGraph {
        // ModelProto.graph (7) holding 5 million empty GraphProto.node (1).
        model: delimited(7, &empties(1)),
        initializers: Vec::new(),
    });
    let tf = Graph::Tf(modelzip::graph::TfGraph {
        nodes: vec![modelzip::graph::TfNode {
            name: "n".into(),
            op: "NoOp".into(),
            inputs: Vec::new(),
            device: String::new(),
            // AttrValue.list (1) holding 5 million empty ListValue.shape (7).
            attrs: vec![modelzip::graph::TfAttr {
                name: "a".into(),
                value: delimited(1, &empties(7)),
                param: None,
            }],
            rest: Vec::new(),
        }],
        rest: Vec::new(),
    });
    let dir = tempfile::tempdir().unwrap();
    let zip = dir.path().join("h.zip");
    let mut w = modelzip::ArchiveWriter::create_with(&zip, &crate::support::write_opts()).unwrap();
    for (name, g) in [("onnx", onnx), ("tf", tf)] {
        w.add_tag(modelzip::TagBuilder::new(name).graph(
            modelzip::GraphFormat::FlatBuffers,
            g.encode(GraphFormat::FlatBuffers).unwrap(),
        ))
        .unwrap();
    }
    w.finish().unwrap();
    assert!(std::fs::metadata(&zip).unwrap().len() < 1 << 20);
    let a = Archive::open(&zip).unwrap();
    for (name, out) in [("onnx", "h.onnx"), ("tf", "h.pb")] {
        let out = dir.path().join(out);
        let Err(e) =
            interop::format(name)
                .unwrap()
                .export(&a.tag(name).unwrap(), &out, &export_opts())
        else {
            panic!("{name}: exported");
        };
        assert!(
            e.to_string()
                .contains("estimated decoded size of a stored protobuf"),
            "{name}: {e}"
        );
        assert!(!out.exists(), "{name}");
    }
    let report = a.verify();
    assert_eq!(report.problems.len(), 2, "{:?}", report.problems);
    // `modelzip graph` renders what it can without decoding either.
    for name in ["onnx", "tf"] {
        let (_, fb) = a.tag(name).unwrap().graph().unwrap().unwrap();
        let g = Graph::decode(GraphFormat::FlatBuffers, &fb).unwrap();
        let text = modelzip::dump::text(&g);
        assert!(text.len() < 1 << 20, "{name}: {} bytes", text.len());
    }
}

/// `modelzip export model.zip --out model.zip --force` replaced the archive with the
/// export (every tag lost). Every format refuses the archive it reads as an output, with
/// overwrite too; the archive is left as it was.
#[test]
fn the_archive_itself_is_refused_as_an_output_by_every_format() {
    let dir = tempfile::tempdir().unwrap();
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures");
    let inputs: [(&str, Vec<PathBuf>); 4] = [
        ("onnx", vec![fixture("mlp.onnx")]),
        ("tf", vec![root.join("tf/mlp.pb")]),
        (
            "paddle",
            vec![
                root.join("paddle/3.3.1/mlp.pdmodel"),
                root.join("paddle/3.3.1/mlp.pdiparams"),
            ],
        ),
        (
            "safetensors",
            vec![root.join("safetensors/finetune/base.safetensors")],
        ),
    ];
    for (format, files) in inputs {
        let zip = dir.path().join(format!("{format}.zip"));
        let f = interop::format(format).unwrap();
        f.import(&zip, format, &files, &opts()).unwrap();
        let before = std::fs::read(&zip).unwrap();
        // paddle writes PREFIX.pdmodel: the archive named as the params file.
        let target = if format == "paddle" {
            let link = dir.path().join("p.pdiparams");
            std::fs::hard_link(&zip, &link).unwrap();
            dir.path().join("p")
        } else {
            zip.clone()
        };
        let a = Archive::open(&zip).unwrap();
        let o = ExportOptions {
            overwrite: true,
            ..export_opts()
        };
        let Err(e) = f.export(&a.tag(format).unwrap(), &target, &o) else {
            panic!("{format}: exported over its archive");
        };
        assert!(
            e.to_string()
                .contains("is the archive the tag is read from"),
            "{format}: {e}"
        );
        drop(a);
        assert_eq!(std::fs::read(&zip).unwrap(), before, "{format}");
        assert!(Archive::open(&zip).unwrap().tag(format).is_ok());
    }
}

/// onnx's save_as_external_data(convert_attribute=True) puts a Constant node's value in
/// the data file: read into the stored model at import, it comes back inline.
#[test]
fn external_data_of_an_attribute_tensor_is_read_into_the_model() {
    let src = fixture("nested_external/constant.onnx");
    let original = pb::ModelProto::decode(std::fs::read(&src).unwrap().as_slice()).unwrap();
    let value = |m: &pb::ModelProto| {
        m.graph.as_ref().unwrap().node[0].attribute[0]
            .t
            .clone()
            .unwrap()
    };
    let was = value(&original);
    assert_eq!(was.data_location, Some(1));
    let data = std::fs::read(fixture("nested_external/constant.bin")).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let zip = dir.path().join("c.zip");
    onnx::import_model_file(&zip, "c", &src, &opts()).unwrap();
    let a = Archive::open(&zip).unwrap();
    let out = dir.path().join("out.onnx");
    onnx::export_model_file(&a.tag("c").unwrap(), &out, &export_opts()).unwrap();
    let now = value(&pb::ModelProto::decode(std::fs::read(&out).unwrap().as_slice()).unwrap());
    assert_eq!(now.data_location, None);
    assert!(now.external_data.is_empty());
    assert_eq!(now.raw_data.as_deref(), Some(&data[..16]));
    assert_eq!(
        data[..16]
            .chunks(4)
            .map(|c| f32::from_le_bytes(c.try_into().unwrap()))
            .collect::<Vec<_>>(),
        [0.0, 0.125, 0.25, 0.375]
    );
}

/// The ONNX model of a graph decoded from an ONNX tag.
fn onnx_of(g: &mut Graph) -> &mut modelzip::graph::OnnxGraph {
    match g {
        Graph::Onnx(o) => o,
        other => panic!("expected an ONNX model, got {}", other.kind_name()),
    }
}

/// An ONNX export of `n` initializers that all name one deflated tensor file inflates it
/// once (it was inflated for the size count and again for each initializer while the
/// model and its external data were built): the export of 40 does the work of one.
#[test]
fn export_inflates_a_deflated_parameter_once_however_many_initializers_name_it() {
    use modelzip::internals::work_counts;
    let archive = |dir: &Path, n: usize| {
        let inits = (0..n)
            .map(|i| pb::TensorProto {
                name: Some(format!("w{i}")),
                data_type: Some(1),
                dims: vec![256],
                ..Default::default()
            })
            .collect();
        let model = pb::ModelProto {
            ir_version: Some(8),
            graph: Some(pb::GraphProto {
                name: Some("g".into()),
                initializer: inits,
                ..Default::default()
            }),
            ..Default::default()
        };
        let g = Graph::Onnx(modelzip::graph::OnnxGraph {
            model: model.encode_to_vec(),
            initializers: vec![
                modelzip::graph::OnnxInit {
                    param: Some("w".into()),
                    typed: false,
                    external: Vec::new(),
                };
                n
            ],
        });
        let plain = dir.join("plain.zip");
        let w = modelzip::Tensor::from_slice(vec![256], &[0.75f32; 256]).unwrap();
        let mut aw =
            modelzip::ArchiveWriter::create_with(&plain, &crate::support::write_opts()).unwrap();
        aw.add_tag(
            modelzip::TagBuilder::new("t")
                .graph(
                    modelzip::GraphFormat::FlatBuffers,
                    g.encode(GraphFormat::FlatBuffers).unwrap(),
                )
                .param("w", w),
        )
        .unwrap();
        aw.finish().unwrap();
        let zip = dir.join("deflated.zip");
        let bytes = crate::reference_amplification::deflated_copy(&plain, |_| None);
        std::fs::write(&zip, bytes).unwrap();
        zip
    };
    for external_data in [false, true] {
        let mut inflated = Vec::new();
        for n in [1, 40] {
            let dir = tempfile::tempdir().unwrap();
            let zip = archive(dir.path(), n);
            let a = Archive::open(&zip).unwrap();
            let tag = a.tag("t").unwrap();
            let before = work_counts(&a).inflated;
            let opts = modelzip::interop::ExportOptions {
                external_data,
                ..export_opts()
            };
            let r = onnx::export_model_file(&tag, &dir.path().join("m.onnx"), &opts).unwrap();
            inflated.push(work_counts(&a).inflated - before);
            assert_eq!(r.params.len(), n);
        }
        assert_eq!(
            inflated[0], inflated[1],
            "external {external_data}: {inflated:?}"
        );
    }
}
