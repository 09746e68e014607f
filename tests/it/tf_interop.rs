//! TensorFlow interop on the fixtures TensorFlow 2.21 made (tests/tf/make_fixtures.py):
//! import → verify → export gives the original GraphDef back as a message, for binary
//! and text in and out; every dtype and value form; dedup across fine-tuned versions;
//! refusals of other formats' tags and of hostile GraphDefs. TensorFlow itself runs
//! the exports in tests/tf/run_exported.py (not part of cargo test).

use crate::support::{export_opts, import_opts as opts};
use modelzip::Archive;
use modelzip::GraphFormat;
use modelzip::interop::tf::{self, MAX_NODES};
use modelzip::interop::{self, ExportOptions};
use modelzip::tf_proto as pb;
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
        .join("tests/fixtures/tf")
        .join(file)
}

fn original(model: &str) -> pb::GraphDef {
    pb::GraphDef::decode(
        std::fs::read(fixture(&format!("{model}.pb")))
            .unwrap()
            .as_slice(),
    )
    .unwrap()
}

/// Messages compared by their encoding (prost encodes fields in number order and maps
/// in key order, so equal messages encode equally; NaN values compare too).
fn same_message(a: &pb::GraphDef, b: &pb::GraphDef) -> bool {
    a.encode_to_vec() == b.encode_to_vec()
}

#[test]
fn every_fixture_exports_as_the_message_it_was_imported_from() {
    let dir = tempfile::tempdir().unwrap();
    let zip = dir.path().join("tf.zip");
    for m in MODELS {
        let r = tf::import_graphdef_file(&zip, m, &fixture(&format!("{m}.pb")), &opts()).unwrap();
        assert_eq!(r.graph_entry, Some("graph.fb"), "{m}");
        assert!(!r.params.is_empty(), "{m}: no constant became a parameter");
    }
    let a = Archive::open(&zip).unwrap();
    let report = a.verify();
    assert!(report.is_ok(), "{:?}", report.problems);
    for m in MODELS {
        let tag = a.tag(m).unwrap();
        let (def, used, unused) = tf::export_graphdef(&tag).unwrap();
        assert!(
            same_message(&def, &original(m)),
            "{m}: exported GraphDef differs"
        );
        assert_eq!(used.len(), tag.params().len(), "{m}");
        assert!(unused.is_empty(), "{m}: {unused:?}");
        // Binary and text files through the registry.
        for ext in ["pb", "pbtxt"] {
            let out = dir.path().join(format!("{m}.{ext}"));
            let e = interop::format("tf")
                .unwrap()
                .export(&tag, &out, &export_opts())
                .unwrap();
            assert_eq!(e.files[0].0, out);
            assert_eq!(e.files[0].1, std::fs::metadata(&out).unwrap().len());
            let back = tf::read_graphdef_file(&out).unwrap();
            assert!(same_message(&back, &original(m)), "{m}.{ext} differs");
            // Written node by node, the binary file is byte for byte the whole message's
            // encoding, and the text one the same single `node: [...]` list (text maps
            // come out in no fixed order, so text is compared as messages above).
            let whole = if ext == "pb" {
                def.encode_to_vec()
            } else {
                let t = std::fs::read_to_string(&out).unwrap();
                assert!(t.starts_with("node: [{\n"), "{m}");
                assert_eq!(t.matches("\nnode: ").count(), 0, "{m}: one node list");
                t.into_bytes()
            };
            assert!(
                std::fs::read(&out).unwrap() == whole,
                "{m}.{ext}: bytes differ"
            );
        }
        // The text export is text format.
        let text = std::fs::read_to_string(dir.path().join(format!("{m}.pbtxt"))).unwrap();
        assert!(
            text.starts_with("node"),
            "{m}: {}",
            &text[..40.min(text.len())]
        );
    }
}

#[test]
fn text_and_binary_imports_give_the_same_tag() {
    let dir = tempfile::tempdir().unwrap();
    let zip = dir.path().join("tf.zip");
    for m in MODELS {
        let pb_tag = format!("{m}-pb");
        let txt_tag = format!("{m}-txt");
        tf::import_graphdef_file(&zip, &pb_tag, &fixture(&format!("{m}.pb")), &opts()).unwrap();
        let r = tf::import_graphdef_file(&zip, &txt_tag, &fixture(&format!("{m}.pbtxt")), &opts())
            .unwrap();
        // Every tensor of the text import is stored already (by the binary import).
        assert!(
            r.params.iter().all(|p| p.shared_from.is_some()),
            "{m}: {:?}",
            r.params
        );
        let a = Archive::open(&zip).unwrap();
        let g1 = a.tag(&pb_tag).unwrap().graph().unwrap().unwrap();
        let g2 = a.tag(&txt_tag).unwrap().graph().unwrap().unwrap();
        assert_eq!(
            g1, g2,
            "{m}: graph.fb differs between .pb and .pbtxt imports"
        );
    }
}

#[test]
fn constants_of_every_dtype_and_form_become_parameters() {
    let dir = tempfile::tempdir().unwrap();
    let zip = dir.path().join("tf.zip");
    let r = tf::import_graphdef_file(&zip, "d", &fixture("dtypes.pb"), &opts()).unwrap();
    let dtypes = [
        ("float16", DType::Fp16),
        ("float32", DType::Fp32),
        ("float64", DType::Fp64),
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
    ];
    for (name, dtype) in dtypes {
        for form in ["content", "typed", "splat"] {
            let pname = format!("const-{name}.{form}/value");
            let p = r
                .params
                .iter()
                .find(|p| p.name == pname)
                .unwrap_or_else(|| panic!("no parameter {pname}"));
            assert_eq!(p.dtype, dtype, "{pname}");
            let dims: &[u64] = if form == "splat" { &[3, 4] } else { &[2, 3] };
            assert_eq!(p.dims, dims, "{pname}");
        }
    }
    let a = Archive::open(&zip).unwrap();
    let t = a.tag("d").unwrap();
    // The content and typed forms of one constant are the same tensor, stored once.
    let content = t.param("const-float32.content/value").unwrap();
    let typed = t.param("const-float32.typed/value").unwrap();
    assert_eq!(content.view(), typed.view());
    let scalar = r.params.iter().find(|p| p.name == "scalar").unwrap();
    assert_eq!(scalar.dims, Vec::<u64>::new());
    assert_eq!(
        t.param("scalar").unwrap().view().to_vec::<f32>().unwrap(),
        [3.5]
    );
    let empty = r.params.iter().find(|p| p.name == "empty").unwrap();
    assert_eq!(empty.dims, [0, 3]);
    // The string constant stays in the graph.
    assert!(r.params.iter().all(|p| p.name != "words"));
    let (_, bytes) = t.graph().unwrap().unwrap();
    let Graph::Tf(g) = Graph::decode(GraphFormat::FlatBuffers, &bytes).unwrap() else {
        panic!("expected a TensorFlow graph")
    };
    let words = g.nodes.iter().find(|n| n.name == "words").unwrap();
    assert!(words.attrs.iter().all(|a| a.param.is_none()));
}

#[test]
fn the_control_flow_graph_keeps_its_library_control_inputs_and_devices() {
    let def = original("control");
    assert!(def.library.as_ref().is_some_and(|l| !l.function.is_empty()));
    let split = tf::split_graphdef(def.clone()).unwrap();
    let g = &split.graph;
    assert!(
        g.nodes
            .iter()
            .any(|n| n.inputs.iter().any(|i| i.starts_with('^')))
    );
    assert!(g.nodes.iter().any(|n| !n.device.is_empty()));
    assert!(g.nodes.iter().any(|n| n.name.len() >= 200));
    assert!(
        g.nodes
            .iter()
            .any(|n| n.op == "StatelessWhile" || n.op == "While")
    );
    let rest = pb::GraphDef::decode(g.rest.as_slice()).unwrap();
    assert_eq!(rest.library, def.library);
    assert_eq!(rest.versions, def.versions);
}

#[test]
fn a_fine_tuned_version_costs_only_its_changed_tensors() {
    let dir = tempfile::tempdir().unwrap();
    let zip = dir.path().join("tf.zip");
    tf::import_graphdef_file(&zip, "v1", &fixture("finetune_v1.pb"), &opts()).unwrap();
    let r = tf::import_graphdef_file(&zip, "v2", &fixture("finetune_v2.pb"), &opts()).unwrap();
    let shared: Vec<&str> = r
        .params
        .iter()
        .filter(|p| p.shared_from.is_some())
        .map(|p| p.name.as_str())
        .collect();
    assert!(shared.iter().any(|n| n.contains("dense_1")), "{shared:?}");
    assert!(!shared.iter().any(|n| n.contains("dense_2")), "{shared:?}");
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
    tf::import_graphdef_file(&zip, "tf", &fixture("mlp.pb"), &opts()).unwrap();
    let paddle = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/paddle/2.6.2");
    interop::paddle::import_inference_model_files(
        &zip,
        "paddle",
        &paddle.join("mlp.pdmodel"),
        &paddle.join("mlp.pdiparams"),
        &opts(),
    )
    .unwrap();
    let a = Archive::open(&zip).unwrap();
    let tf_tag = a.tag("tf").unwrap();
    let pd_tag = a.tag("paddle").unwrap();
    assert_eq!(interop::origin_of(&tf_tag).unwrap().unwrap().name(), "tf");
    assert_eq!(
        interop::origin_of(&pd_tag).unwrap().unwrap().name(),
        "paddle"
    );
    let out = dir.path().join("x.pb");
    let e = interop::format("tf")
        .unwrap()
        .export(&pd_tag, &out, &export_opts())
        .unwrap_err();
    assert!(
        e.to_string()
            .contains("is a Paddle program (graph.pdmodel)"),
        "{e}"
    );
    let e = interop::format("paddle")
        .unwrap()
        .export(&tf_tag, &dir.path().join("x"), &export_opts())
        .unwrap_err();
    assert!(e.to_string().contains("TensorFlow GraphDef"), "{e}");
    assert!(!out.exists() && !dir.path().join("x.pdmodel").exists());
    // Converting a TensorFlow graph to a ProgramDesc is refused the same way.
    let (enc, bytes) = tf_tag.graph().unwrap().unwrap();
    assert_eq!(enc, GraphFormat::FlatBuffers);
    let e = Graph::decode(GraphFormat::FlatBuffers, &bytes)
        .unwrap()
        .encode(GraphFormat::ProgramDesc)
        .unwrap_err();
    assert!(e.to_string().contains("TensorFlow GraphDef"), "{e}");
}

#[test]
fn formats_are_detected_by_name_and_content() {
    let dir = tempfile::tempdir().unwrap();
    let bin = dir.path().join("frozen.bin");
    std::fs::copy(fixture("cnn.pb"), &bin).unwrap();
    let txt = dir.path().join("frozen.txt");
    std::fs::copy(fixture("cnn.pbtxt"), &txt).unwrap();
    for p in [fixture("cnn.pb"), fixture("cnn.pbtxt"), bin, txt] {
        assert_eq!(
            interop::detect(std::slice::from_ref(&p)).unwrap().name(),
            "tf",
            "{p:?}"
        );
    }
    let paddle = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/paddle/2.6.2");
    let pd = dir.path().join("program.bin");
    std::fs::copy(paddle.join("mlp.pdmodel"), &pd).unwrap();
    assert_eq!(interop::detect(&[pd]).unwrap().name(), "paddle");
    let junk = dir.path().join("junk.bin");
    std::fs::write(&junk, [0x0a, 0x05, 1, 2, 3]).unwrap();
    let Err(e) = interop::detect(&[junk]) else {
        panic!("junk was detected as a format");
    };
    assert!(e.to_string().contains("tried by name and content"), "{e}");
}

// ---------------------------------------------------------------------------------
// Hostile GraphDefs

fn import_bytes(bytes: &[u8], name: &str) -> String {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join(name);
    std::fs::write(&file, bytes).unwrap();
    let zip = dir.path().join("h.zip");
    let e = tf::import_graphdef_file(&zip, "h", &file, &opts()).unwrap_err();
    assert!(!zip.exists(), "a refused import leaves no archive");
    e.to_string()
}

fn const_node(name: &str, t: pb::TensorProto) -> pb::NodeDef {
    let mut n = pb::NodeDef {
        name: name.into(),
        op: "Const".into(),
        ..Default::default()
    };
    n.attr.insert(
        "value".into(),
        pb::AttrValue {
            value: Some(pb::attr_value::Value::Tensor(t)),
        },
    );
    n
}

fn shape(dims: &[i64]) -> Option<pb::TensorShapeProto> {
    Some(pb::TensorShapeProto {
        dim: dims
            .iter()
            .map(|&size| pb::tensor_shape_proto::Dim {
                size,
                name: String::new(),
            })
            .collect(),
        unknown_rank: false,
    })
}

fn graph_of(nodes: Vec<pb::NodeDef>) -> Vec<u8> {
    pb::GraphDef {
        node: nodes,
        ..Default::default()
    }
    .encode_to_vec()
}

#[test]
fn a_truncated_graphdef_is_refused_naming_the_file() {
    let bytes = std::fs::read(fixture("mlp.pb")).unwrap();
    let e = import_bytes(&bytes[..bytes.len() / 2], "cut.pb");
    assert!(e.contains("invalid GraphDef protobuf"), "{e}");
    assert!(e.contains("cut.pb"), "{e}");
}

#[test]
fn tensor_content_of_the_wrong_length_is_refused_naming_the_node() {
    let t = pb::TensorProto {
        dtype: pb::DataType::DtFloat as i32,
        tensor_shape: shape(&[4, 4]),
        tensor_content: vec![0; 60].into(),
        ..Default::default()
    };
    let e = import_bytes(&graph_of(vec![const_node("w/short", t)]), "short.pb");
    assert!(e.contains("node 0 (\"w/short\""), "{e}");
    assert!(
        e.contains("tensor_content holds 60 bytes, but FP32 [4, 4] needs 64"),
        "{e}"
    );
}

#[test]
fn absurd_dims_are_refused_without_allocating() {
    // 2^62 x 2^62 elements with one value (a splat): the count overflows.
    let t = pb::TensorProto {
        dtype: pb::DataType::DtFloat as i32,
        tensor_shape: shape(&[1 << 62, 1 << 62]),
        float_val: vec![1.0],
        ..Default::default()
    };
    let e = import_bytes(&graph_of(vec![const_node("huge", t)]), "huge.pb");
    assert!(e.contains("\"huge\"") && e.contains("overflow"), "{e}");
    // A negative dim.
    let t = pb::TensorProto {
        dtype: pb::DataType::DtFloat as i32,
        tensor_shape: shape(&[-7]),
        float_val: vec![1.0],
        ..Default::default()
    };
    let e = import_bytes(&graph_of(vec![const_node("neg", t)]), "neg.pb");
    assert!(e.contains("negative dimension -7"), "{e}");
    // 2^40 elements from one value: a splat too large to expand stays in the graph.
    let t = pb::TensorProto {
        dtype: pb::DataType::DtFloat as i32,
        tensor_shape: shape(&[1 << 20, 1 << 20]),
        float_val: vec![0.5],
        ..Default::default()
    };
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("splat.pb");
    let bytes = graph_of(vec![const_node("big-splat", t)]);
    std::fs::write(&file, &bytes).unwrap();
    let zip = dir.path().join("s.zip");
    let r = tf::import_graphdef_file(&zip, "s", &file, &opts()).unwrap();
    assert!(r.params.is_empty());
    let a = Archive::open(&zip).unwrap();
    let (def, _, _) = tf::export_graphdef(&a.tag("s").unwrap()).unwrap();
    assert_eq!(def.encode_to_vec(), bytes);
}

#[test]
fn deep_nesting_is_refused() {
    // AttrValue.list.func[0].attr["a"].list.func[0]... 200 levels deep.
    let mut v = pb::AttrValue::default();
    for _ in 0..200 {
        let mut f = pb::NameAttrList {
            name: "f".into(),
            ..Default::default()
        };
        f.attr.insert("a".into(), v);
        v = pb::AttrValue {
            value: Some(pb::attr_value::Value::Func(f)),
        };
    }
    let mut n = pb::NodeDef {
        name: "deep".into(),
        op: "NoOp".into(),
        ..Default::default()
    };
    n.attr.insert("f".into(), v);
    let e = import_bytes(&graph_of(vec![n]), "deep.pb");
    assert!(e.contains("nested deeper than 100"), "{e}");
    // The same in text format.
    let text = "node { name: \"deep\" op: \"NoOp\" attr { key: \"f\" value { ".to_string()
        + &"func { name: \"f\" attr { key: \"a\" value { ".repeat(200);
    let e = import_bytes(text.as_bytes(), "deep.pbtxt");
    assert!(e.contains("nesting depth"), "{e}");
}

#[test]
fn a_million_nodes_are_refused_before_decoding() {
    // Each empty node is 2 bytes on the wire.
    let bytes = [0x0au8, 0x00].repeat(1_000_000);
    let e = import_bytes(&bytes, "million.pb");
    assert!(
        e.contains("GraphDef nodes") && e.contains(&MAX_NODES.to_string()),
        "{e}"
    );
}

#[test]
fn duplicate_and_empty_node_names_are_refused() {
    let t = || pb::TensorProto {
        dtype: pb::DataType::DtInt32 as i32,
        tensor_shape: shape(&[1]),
        int_val: vec![1],
        ..Default::default()
    };
    let e = import_bytes(
        &graph_of(vec![const_node("a", t()), const_node("a", t())]),
        "dup.pb",
    );
    assert!(e.contains("the name \"a\" is used twice"), "{e}");
    let e = import_bytes(&graph_of(vec![const_node("", t())]), "anon.pb");
    assert!(e.contains("has no name"), "{e}");
}

#[test]
fn verify_and_export_check_a_stored_graph_against_its_parameters() {
    use modelzip::graph::{TfAttr, TfGraph, TfNode, TfParamRef};
    use modelzip::{ArchiveWriter, TagBuilder, Tensor};
    let value = pb::AttrValue {
        value: Some(pb::attr_value::Value::Tensor(pb::TensorProto {
            dtype: pb::DataType::DtFloat as i32,
            tensor_shape: shape(&[2]),
            ..Default::default()
        })),
    };
    let node = |param: &str| TfNode {
        name: "w".into(),
        op: "Const".into(),
        attrs: vec![TfAttr {
            name: "value".into(),
            value: value.encode_to_vec(),
            param: Some(TfParamRef {
                param: param.into(),
                typed_count: None,
            }),
        }],
        ..Default::default()
    };
    let fb = |param: &str| {
        Graph::Tf(TfGraph {
            nodes: vec![node(param)],
            rest: Vec::new(),
        })
        .encode(GraphFormat::FlatBuffers)
        .unwrap()
    };
    let dir = tempfile::tempdir().unwrap();
    let zip = dir.path().join("bad.zip");
    let mut w = ArchiveWriter::create(&zip).unwrap();
    let three = Tensor::from_slice(vec![3], &[1.0f32, 2.0, 3.0]).unwrap();
    let two = Tensor::from_slice(vec![2], &[1.0f32, 2.0]).unwrap();
    w.add_tag(
        TagBuilder::new("wrong-dims")
            .graph(GraphFormat::FlatBuffers, fb("w"))
            .param("w", three),
    )
    .unwrap();
    w.add_tag(
        TagBuilder::new("missing")
            .graph(GraphFormat::FlatBuffers, fb("nope"))
            .param("w", two.clone()),
    )
    .unwrap();
    w.add_tag(
        TagBuilder::new("good")
            .graph(GraphFormat::FlatBuffers, fb("w"))
            .param("w", two),
    )
    .unwrap();
    w.finish().unwrap();
    let a = Archive::open(&zip).unwrap();
    let report = a.verify();
    let problems: Vec<String> = report
        .problems
        .iter()
        .map(|p| format!("{:?}: {}", p.entry, p.message))
        .collect();
    assert_eq!(problems.len(), 2, "{problems:?}");
    assert!(
        problems[0].contains("wrong-dims/graph.fb")
            && problems[0].contains("parameter \"w\" is FP32 [3], the graph declares"),
        "{problems:?}"
    );
    assert!(
        problems[1].contains("missing/graph.fb") && problems[1].contains("nope"),
        "{problems:?}"
    );
    for t in ["wrong-dims", "missing"] {
        assert!(tf::export_graphdef(&a.tag(t).unwrap()).is_err(), "{t}");
    }
    let (def, _, _) = tf::export_graphdef(&a.tag("good").unwrap()).unwrap();
    let pb::AttrValue {
        value: Some(pb::attr_value::Value::Tensor(t)),
    } = &def.node[0].attr["value"]
    else {
        panic!("no tensor");
    };
    assert_eq!(t.tensor_content.len(), 8);
}

/// A graph of `n` Const nodes that all name one parameter of `elems` f32 values.
fn alias_graph_archive(dir: &Path, n: usize, elems: usize) -> PathBuf {
    use modelzip::graph::{TfAttr, TfGraph, TfNode, TfParamRef};
    use modelzip::{ArchiveWriter, TagBuilder, Tensor};
    let value = pb::AttrValue {
        value: Some(pb::attr_value::Value::Tensor(pb::TensorProto {
            dtype: pb::DataType::DtFloat as i32,
            tensor_shape: shape(&[elems as i64]),
            ..Default::default()
        })),
    };
    let nodes = (0..n)
        .map(|i| TfNode {
            name: format!("c{i}"),
            op: "Const".into(),
            attrs: vec![TfAttr {
                name: "value".into(),
                value: value.encode_to_vec(),
                param: Some(TfParamRef {
                    param: "w".into(),
                    typed_count: None,
                }),
            }],
            ..Default::default()
        })
        .collect();
    let fb = Graph::Tf(TfGraph {
        nodes,
        rest: Vec::new(),
    })
    .encode(GraphFormat::FlatBuffers)
    .unwrap();
    let zip = dir.join("alias.zip");
    let w_tensor = Tensor::from_slice(vec![elems as u64], &vec![0.25f32; elems]).unwrap();
    let mut w = ArchiveWriter::create(&zip).unwrap();
    w.add_tag(
        TagBuilder::new("a")
            .graph(GraphFormat::FlatBuffers, fb)
            .param("w", w_tensor),
    )
    .unwrap();
    w.finish().unwrap();
    zip
}

#[test]
fn export_counts_its_size_first_and_refuses_above_max_output() {
    let dir = tempfile::tempdir().unwrap();
    // 100 constants naming one 64 KiB parameter: 6.4 MB of GraphDef from a small archive.
    let zip = alias_graph_archive(dir.path(), 100, 16_384);
    let a = Archive::open(&zip).unwrap();
    let tag = a.tag("a").unwrap();
    let (def, _, _) = tf::export_graphdef(&tag).unwrap();
    let size = def.encoded_len() as u64;
    let listing = |d: &Path| {
        let mut v: Vec<_> = std::fs::read_dir(d)
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        v.sort();
        v
    };
    let before = listing(dir.path());
    for ext in ["pb", "pbtxt"] {
        let out = dir.path().join(format!("alias.{ext}"));
        let with_limit = |limit: u64| ExportOptions {
            max_output: Some(limit),
            ..export_opts()
        };
        // The lower bound (the parameters' bytes) already passes 1 MB.
        let e = tf::export_graphdef_file(&tag, &out, &with_limit(1_000_000)).unwrap_err();
        let msg = e.to_string();
        assert!(
            msg.contains("TensorFlow export size (at least)")
                && msg.contains("exceeds the limit of 1000000"),
            "{msg}"
        );
        assert!(!out.exists(), "nothing is written before the check");
        let whole = if ext == "pb" {
            size
        } else {
            tf::graphdef_to_text(&def).unwrap().len() as u64
        };
        // One byte short of the exact size: refused by the exact count.
        let e = tf::export_graphdef_file(&tag, &out, &with_limit(whole - 1)).unwrap_err();
        assert!(e.to_string().contains("exceeds the limit of"), "{e}");
        assert!(!out.exists(), "nothing is written before the check");
        assert_eq!(listing(dir.path()), before, "no temp file is left behind");
        // The exact size is allowed.
        let r = tf::export_graphdef_file(&tag, &out, &with_limit(whole)).unwrap();
        assert_eq!(r.files[0].1, whole);
        assert_eq!(std::fs::metadata(&out).unwrap().len(), whole);
        std::fs::remove_file(&out).unwrap();
    }
    // Through the CLI: exit 2, saying how much and the limit.
    let out = dir.path().join("cli.pb");
    let run = std::process::Command::new(env!("CARGO_BIN_EXE_modelzip"))
        .args(["export", "--format", "tf", "--max-output", "1M", "--out"])
        .arg(&out)
        .arg(&zip)
        .output()
        .unwrap();
    assert_eq!(run.status.code(), Some(2));
    let msg = String::from_utf8_lossy(&run.stderr);
    assert!(
        msg.contains("TensorFlow export size") && msg.contains("limit of 1048576"),
        "{msg}"
    );
    assert!(!out.exists());
}

/// A SavedModel directory was taken for a Paddle persistables directory (refused with a
/// LoDTensor error about fingerprint.pb), and its saved_model.pb for a GraphDef (refused
/// with an unknown field deep in the library). Both are TensorFlow's now, imported as a
/// SavedModel (tests/it/saved_model.rs); one without a checkpoint index is refused saying
/// so; a missing input is refused as missing, not as a file of no known format.
#[test]
fn a_saved_model_is_taken_for_one() {
    let dir = tempfile::tempdir().unwrap();
    let sm = dir.path().join("sm");
    std::fs::create_dir_all(sm.join("variables")).unwrap();
    // What tf.saved_model.save writes first: schema version 1, then MetaGraphs.
    std::fs::write(sm.join("saved_model.pb"), [0x08, 0x01, 0x12, 0x00]).unwrap();
    std::fs::write(sm.join("fingerprint.pb"), [0x08, 0xc8, 0x01]).unwrap();
    let zip = dir.path().join("m.zip");
    for input in [sm.clone(), sm.join("saved_model.pb")] {
        let format = interop::detect(std::slice::from_ref(&input)).unwrap();
        assert_eq!(format.name(), "tf", "{}", input.display());
        let e = format
            .import(&zip, "t", std::slice::from_ref(&input), &opts())
            .unwrap_err()
            .to_string();
        assert!(e.contains("no variables/variables.index"), "{e}");
        assert!(!zip.exists());
    }
    // Known by content, not name: a GraphDef named saved_model.pb imports, and an ONNX
    // model without its extension (it starts with 0x08 too) is still ONNX.
    let named = dir.path().join("saved_model.pb");
    std::fs::copy(fixture("mlp.pb"), &named).unwrap();
    let f = interop::detect(std::slice::from_ref(&named)).unwrap();
    f.import(&zip, "g", std::slice::from_ref(&named), &opts())
        .unwrap();
    let onnx = dir.path().join("model.bin");
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    std::fs::copy(root.join("tests/fixtures/onnx/mlp.onnx"), &onnx).unwrap();
    assert_eq!(interop::detect(&[onnx]).unwrap().name(), "onnx");
    let Err(e) = interop::detect(&[dir.path().join("missing")]) else {
        panic!("a missing input was detected as a format");
    };
    let e = e.to_string();
    assert!(e.contains("No such file") && e.contains("missing"), "{e}");
}

/// `op_graph` keeps at most 20,000 edges of a GraphDef too, whose nodes read nodes
/// directly (the cap held only for edges folded through Paddle's variables).
#[test]
fn op_graph_caps_a_graphdefs_node_to_node_edges() {
    // 1,000 nodes, each reading the 30 before it: 29,535 edges.
    let nodes: Vec<pb::NodeDef> = (0..1000usize)
        .map(|i| pb::NodeDef {
            name: format!("n{i}"),
            op: "AddN".into(),
            input: (i.saturating_sub(30)..i).map(|j| format!("n{j}")).collect(),
            ..Default::default()
        })
        .collect();
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("dense.pb");
    std::fs::write(&file, graph_of(nodes)).unwrap();
    let zip = dir.path().join("d.zip");
    tf::import_graphdef_file(&zip, "d", &file, &opts()).unwrap();
    let a = Archive::open(&zip).unwrap();
    let (enc, bytes) = a.tag("d").unwrap().graph().unwrap().unwrap();
    let g = Graph::decode(enc, &bytes).unwrap();
    let doc: serde_json::Value = serde_json::from_str(&modelzip::dump::op_graph(&g)).unwrap();
    assert_eq!(doc["edges_truncated"], true);
    assert_eq!(doc["edges"].as_array().unwrap().len(), 20_000);
    // The same document every time (which edges are kept included).
    assert_eq!(modelzip::dump::op_graph(&g), modelzip::dump::op_graph(&g));
}

/// Exporting a graph whose constants all name one deflated tensor file inflates it once
/// (it was inflated three times per constant: for the size bound, the size pass and the
/// write): the export of 50 constants does the work of the export of one.
#[test]
fn export_inflates_a_deflated_parameter_once_however_many_constants_name_it() {
    use modelzip::internals::work_counts;
    let mut inflated = Vec::new();
    for n in [1, 50] {
        let dir = tempfile::tempdir().unwrap();
        let plain = alias_graph_archive(dir.path(), n, 256);
        let bytes = crate::reference_amplification::deflated_copy(&plain, |_| None);
        let zip = dir.path().join("deflated.zip");
        std::fs::write(&zip, bytes).unwrap();
        let a = Archive::open(&zip).unwrap();
        let tag = a.tag("a").unwrap();
        let before = work_counts(&a).inflated;
        let out = dir.path().join("alias.pb");
        let r = tf::export_graphdef_file(&tag, &out, &export_opts()).unwrap();
        inflated.push(work_counts(&a).inflated - before);
        assert_eq!(r.params.len(), n);
        assert!(std::fs::metadata(&out).unwrap().len() > n as u64 * 1024);
        // The GraphDef in memory too.
        let before = work_counts(&a).inflated;
        let (def, used, _) = tf::export_graphdef(&tag).unwrap();
        inflated.push(work_counts(&a).inflated - before);
        assert_eq!((def.node.len(), used.len()), (n, n));
    }
    assert_eq!(inflated[..2], inflated[2..], "{inflated:?}");
}
