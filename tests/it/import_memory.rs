//! Imports keep their own memory bounded, whatever the size of the parameters: each
//! importer's input files are mapped and every parameter is written from the map, so the
//! process's anonymous memory (`RssAnon`: heap and stacks, not the file-backed pages of
//! the maps) stays far below the input's size. Each test builds a 256 MiB input (four
//! 64 MiB FP32 tensors, written a tensor at a time) and bounds the import's peak
//! `RssAnon` at 64 MiB (measured: about 15 MiB; holding the parameters took 2 × the input
//! for an inline ONNX or TensorFlow model, 1 × for the others; docs/RELIABILITY.md).

use crate::support::ProgramOf;

use crate::support::rss::peak_anon;
use modelzip::Graph;
use modelzip::GraphFormat;
use modelzip::TensorView;
use modelzip::graph::{Attr, AttrValue, Block, Op, Var, VarKind};
use modelzip::tensor::{encode_combined, encode_tensor};
use modelzip::{DType, onnx_proto as onnx_pb, tf_proto as tf_pb};
use prost::Message;
use std::ffi::OsStr;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

/// Tensors per input, and each one's FP32 elements (64 MiB).
const TENSORS: usize = 4;
const ELEMS: usize = 16 << 20;
/// The bound on the import's peak anonymous memory.
const BOUND_KIB: u64 = 64 << 10;

/// One input at a time: the tests share two cores and the disk with each other.
static ONE_AT_A_TIME: Mutex<()> = Mutex::new(());

/// Tensor `i`'s bytes (each tensor different, so none is deduplicated).
fn data(i: usize) -> Vec<u8> {
    vec![i as u8 + 1; ELEMS * 4]
}

fn name(i: usize) -> String {
    format!("w{i}")
}

/// Runs `cmd` (`import`, `pack`) of `inputs` (every file in `dir`) into a new archive in
/// `dir` and checks its peak anonymous memory and what it stored.
fn check_import(dir: &Path, cmd: &[&str], inputs: &[PathBuf]) {
    let input_bytes = tree_len(dir);
    assert!(input_bytes >= (TENSORS * ELEMS * 4) as u64, "{input_bytes}");
    let zip = dir.join("out.zip");
    let mut args: Vec<&OsStr> = cmd.iter().map(OsStr::new).collect();
    args.push(zip.as_os_str());
    args.extend(inputs.iter().map(|p| p.as_os_str()));
    args.extend(["--tag", "t"].map(OsStr::new));
    let p = peak_anon(&args);
    assert_eq!(p.code, Some(0), "{cmd:?} failed: {}", p.stderr);
    assert!(p.samples > 0, "no sample of the import's memory was taken");
    assert!(
        p.anon_kib < BOUND_KIB,
        "{cmd:?} of {input_bytes} bytes peaked at {} KiB of anonymous memory (bound {} KiB; \
         VmHWM {} KiB)",
        p.anon_kib,
        BOUND_KIB,
        p.hwm_kib
    );
    // Every parameter was stored: the archive holds the tensors' bytes.
    let a = modelzip::Archive::open(&zip).unwrap();
    let tag = a.tag("t").unwrap();
    assert_eq!(tag.params().len(), TENSORS);
    for i in 0..TENSORS {
        let t = tag.param(&name(i)).unwrap();
        let v = t.view();
        assert_eq!(v.data().len(), ELEMS * 4);
        assert!(v.data().iter().all(|&b| b == i as u8 + 1), "tensor {i}");
    }
}

/// The bytes of the files in `dir` and its subdirectories (the inputs).
fn tree_len(dir: &Path) -> u64 {
    std::fs::read_dir(dir)
        .unwrap()
        .map(|e| {
            let e = e.unwrap();
            let meta = e.metadata().unwrap();
            if meta.is_dir() {
                tree_len(&e.path())
            } else {
                meta.len()
            }
        })
        .sum()
}

fn create(p: &Path) -> std::io::BufWriter<std::fs::File> {
    std::io::BufWriter::new(std::fs::File::create(p).unwrap())
}

/// A safetensors file holding tensors `range` (header written by hand).
fn safetensors_file(path: &Path, range: std::ops::Range<usize>) {
    let mut header = serde_json::Map::new();
    for (k, i) in range.clone().enumerate() {
        let (start, end) = (k * ELEMS * 4, (k + 1) * ELEMS * 4);
        header.insert(
            name(i),
            serde_json::json!({"dtype": "F32", "shape": [ELEMS], "data_offsets": [start, end]}),
        );
    }
    let mut h = serde_json::to_vec(&header).unwrap();
    while !h.len().is_multiple_of(8) {
        h.push(b' ');
    }
    let mut f = create(path);
    f.write_all(&(h.len() as u64).to_le_bytes()).unwrap();
    f.write_all(&h).unwrap();
    for i in range {
        f.write_all(&data(i)).unwrap();
    }
    f.flush().unwrap();
}

#[test]
fn safetensors_import_of_256_mib_stays_under_64_mib() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|p| p.into_inner());
    let d = tempfile::tempdir().unwrap();
    let file = d.path().join("model.safetensors");
    safetensors_file(&file, 0..TENSORS);
    check_import(d.path(), &["import"], &[file]);
}

#[test]
fn sharded_safetensors_import_of_256_mib_stays_under_64_mib() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|p| p.into_inner());
    let d = tempfile::tempdir().unwrap();
    let ckpt = d.path().join("ckpt");
    std::fs::create_dir(&ckpt).unwrap();
    let half = TENSORS / 2;
    let shards = [
        "model-00001-of-00002.safetensors",
        "model-00002-of-00002.safetensors",
    ];
    safetensors_file(&ckpt.join(shards[0]), 0..half);
    safetensors_file(&ckpt.join(shards[1]), half..TENSORS);
    let map: serde_json::Map<_, _> = (0..TENSORS)
        .map(|i| (name(i), shards[usize::from(i >= half)].into()))
        .collect();
    let index = serde_json::json!({"metadata": {}, "weight_map": map});
    std::fs::write(
        ckpt.join("model.safetensors.index.json"),
        serde_json::to_vec(&index).unwrap(),
    )
    .unwrap();
    check_import(d.path(), &["import"], &[ckpt]);
}

fn view(bytes: &[u8]) -> TensorView<'_> {
    TensorView::new(DType::Fp32, vec![ELEMS as u64], Vec::new(), bytes).unwrap()
}

#[test]
fn paddle_import_of_a_256_mib_pdiparams_stays_under_64_mib() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|p| p.into_inner());
    let d = tempfile::tempdir().unwrap();
    let mut block = Block::main();
    for i in 0..TENSORS {
        let mut v = Var::new(name(i), VarKind::Parameter, DType::Fp32, vec![ELEMS as i64]);
        v.persistable = Some(true);
        block.vars.push(v);
    }
    let graph = Graph::from(modelzip::graph::Program {
        blocks: vec![block],
        ..modelzip::graph::Program::default()
    });
    let model = d.path().join("m.pdmodel");
    std::fs::write(&model, graph.encode(GraphFormat::ProgramDesc).unwrap()).unwrap();
    let params = d.path().join("m.pdiparams");
    let mut f = create(&params);
    // Records in the order Paddle loads them: by name.
    for i in 0..TENSORS {
        let bytes = data(i);
        encode_combined([&view(&bytes)], &mut f).unwrap();
    }
    f.flush().unwrap();
    check_import(d.path(), &["import"], &[model, params]);
}

/// A persistables directory: one LoDTensor file per tensor.
fn persistables(dir: &Path) -> PathBuf {
    let p = dir.join("params");
    std::fs::create_dir(&p).unwrap();
    for i in 0..TENSORS {
        let mut f = create(&p.join(name(i)));
        encode_tensor(&view(&data(i)), &mut f).unwrap();
        f.flush().unwrap();
    }
    p
}

#[test]
fn paddle_persistables_import_and_pack_of_256_mib_stay_under_64_mib() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|p| p.into_inner());
    let d = tempfile::tempdir().unwrap();
    let params = persistables(d.path());
    check_import(d.path(), &["import"], std::slice::from_ref(&params));
    std::fs::remove_file(d.path().join("out.zip")).unwrap();
    check_import(d.path(), &["pack"], &[params]);
}

/// Writes `m` and then, for each tensor, `piece(i)`: protobuf merges a repeated field
/// written in pieces, so a large model is written without holding it.
fn write_in_pieces<M: Message>(path: &Path, head: &M, piece: impl Fn(usize) -> M) {
    let mut f = create(path);
    f.write_all(&head.encode_to_vec()).unwrap();
    for i in 0..TENSORS {
        f.write_all(&piece(i).encode_to_vec()).unwrap();
    }
    f.flush().unwrap();
}

fn onnx_head() -> onnx_pb::ModelProto {
    onnx_pb::ModelProto {
        ir_version: Some(9),
        opset_import: vec![onnx_pb::OperatorSetIdProto {
            domain: Some(String::new()),
            version: Some(21),
        }],
        graph: Some(onnx_pb::GraphProto {
            name: Some("g".into()),
            ..Default::default()
        }),
        ..Default::default()
    }
}

fn onnx_tensor(i: usize) -> onnx_pb::TensorProto {
    onnx_pb::TensorProto {
        name: Some(name(i)),
        data_type: Some(onnx_pb::tensor_proto::DataType::Float as i32),
        dims: vec![ELEMS as i64],
        ..Default::default()
    }
}

fn onnx_piece(t: onnx_pb::TensorProto) -> onnx_pb::ModelProto {
    onnx_pb::ModelProto {
        graph: Some(onnx_pb::GraphProto {
            initializer: vec![t],
            ..Default::default()
        }),
        ..Default::default()
    }
}

#[test]
fn onnx_import_of_256_mib_inline_initializers_stays_under_64_mib() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|p| p.into_inner());
    let d = tempfile::tempdir().unwrap();
    let model = d.path().join("m.onnx");
    write_in_pieces(&model, &onnx_head(), |i| {
        onnx_piece(onnx_pb::TensorProto {
            raw_data: Some(data(i).into()),
            ..onnx_tensor(i)
        })
    });
    check_import(d.path(), &["import"], &[model]);
}

#[test]
fn onnx_import_of_256_mib_external_data_stays_under_64_mib() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|p| p.into_inner());
    let d = tempfile::tempdir().unwrap();
    let mut f = create(&d.path().join("m.onnx.data"));
    for i in 0..TENSORS {
        f.write_all(&data(i)).unwrap();
    }
    f.flush().unwrap();
    let kv = |k: &str, v: String| onnx_pb::StringStringEntryProto {
        key: Some(k.into()),
        value: Some(v),
    };
    let mut m = onnx_head();
    m.graph.as_mut().unwrap().initializer = (0..TENSORS)
        .map(|i| onnx_pb::TensorProto {
            data_location: Some(onnx_pb::tensor_proto::DataLocation::External as i32),
            external_data: vec![
                kv("location", "m.onnx.data".into()),
                kv("offset", (i * ELEMS * 4).to_string()),
                kv("length", (ELEMS * 4).to_string()),
            ],
            ..onnx_tensor(i)
        })
        .collect();
    let model = d.path().join("m.onnx");
    std::fs::write(&model, m.encode_to_vec()).unwrap();
    check_import(d.path(), &["import"], &[model]);
}

#[test]
fn tf_import_of_a_256_mib_graphdef_stays_under_64_mib() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|p| p.into_inner());
    let d = tempfile::tempdir().unwrap();
    let pb_path = d.path().join("g.pb");
    write_in_pieces(&pb_path, &tf_pb::GraphDef::default(), |i| {
        let t = tf_pb::TensorProto {
            dtype: tf_pb::DataType::DtFloat as i32,
            tensor_shape: Some(tf_pb::TensorShapeProto {
                dim: vec![tf_pb::tensor_shape_proto::Dim {
                    size: ELEMS as i64,
                    name: String::new(),
                }],
                unknown_rank: false,
            }),
            tensor_content: data(i).into(),
            ..Default::default()
        };
        let mut n = tf_pb::NodeDef {
            name: name(i),
            op: "Const".into(),
            ..Default::default()
        };
        n.attr.insert(
            "value".into(),
            tf_pb::AttrValue {
                value: Some(tf_pb::attr_value::Value::Tensor(t)),
            },
        );
        tf_pb::GraphDef {
            node: vec![n],
            ..Default::default()
        }
    });
    check_import(d.path(), &["import"], &[pb_path]);
}

/// A SavedModel of two data shards, two tensors each: each shard is mapped and every
/// variable written from the map (each was read into a Vec: 788 MiB for one 256 MiB
/// variable).
#[test]
fn saved_model_import_of_256_mib_in_two_shards_stays_under_64_mib() {
    use modelzip::interop::tf::saved_model::{Bundle, BundleEntry, BundleHeader, write_index};
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|p| p.into_inner());
    let d = tempfile::tempdir().unwrap();
    let sm = d.path().join("sm");
    std::fs::create_dir_all(sm.join("variables")).unwrap();
    // Schema version 1 and one empty MetaGraph: saved_model.pb is kept, not decoded.
    std::fs::write(sm.join("saved_model.pb"), [0x08, 0x01, 0x12, 0x00]).unwrap();
    let mut entries = Vec::new();
    for shard in 0..2 {
        let mut f = create(&sm.join(format!("variables/variables.data-{shard:05}-of-00002")));
        for (slot, i) in [2 * shard, 2 * shard + 1].into_iter().enumerate() {
            let bytes = data(i);
            let crc = crc32c::crc32c(&bytes);
            f.write_all(&bytes).unwrap();
            entries.push((
                name(i),
                BundleEntry {
                    dtype: 1, // DT_FLOAT
                    shape: Some(tf_pb::TensorShapeProto {
                        dim: vec![tf_pb::tensor_shape_proto::Dim {
                            size: ELEMS as i64,
                            name: String::new(),
                        }],
                        unknown_rank: false,
                    }),
                    shard_id: shard as i32,
                    offset: (slot * ELEMS * 4) as i64,
                    size: (ELEMS * 4) as i64,
                    crc32c: crc.rotate_right(15).wrapping_add(0xa282_ead8),
                    slices: Vec::new(),
                },
            ));
        }
        f.flush().unwrap();
    }
    let index = write_index(&Bundle {
        header: BundleHeader {
            num_shards: 2,
            endianness: 0,
            version: None,
        },
        entries,
    });
    std::fs::write(sm.join("variables/variables.index"), index).unwrap();
    check_import(d.path(), &["import"], &[sm]);
}

#[test]
fn a_program_attribute_of_8_mb_of_json_zeros_imports_under_80_mib() {
    // The last attribute of an op named "@modelzip" is parsed as JSON (modelzip's own
    // record of a graph.fb op name): 4 million `0,` parsed to 929 MB before the parse was
    // bounded by an estimate of its cost.
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|p| p.into_inner());
    let d = tempfile::tempdir().unwrap();
    let json = format!("[{}0]", "0,".repeat(4 << 20));
    let mut op = Op::new("", "scale");
    op.attrs.push(Attr {
        name: "@modelzip".into(),
        value: AttrValue::String(json),
    });
    let mut block = Block::main();
    block.ops.push(op);
    let graph = Graph::from(modelzip::graph::Program {
        blocks: vec![block],
        ..modelzip::graph::Program::default()
    });
    let model = d.path().join("m.pdmodel");
    std::fs::write(&model, graph.encode(GraphFormat::ProgramDesc).unwrap()).unwrap();
    let zip = d.path().join("out.zip");
    let args: Vec<&OsStr> = vec!["import".as_ref(), zip.as_os_str(), model.as_os_str()];
    let args = [args, ["--tag", "t"].map(OsStr::new).to_vec()].concat();
    let p = peak_anon(&args);
    assert_eq!(p.code, Some(0), "{}", p.stderr);
    assert!(p.samples > 0);
    assert!(
        p.anon_kib < BOUND_KIB + (16 << 10),
        "the import peaked at {} KiB of anonymous memory",
        p.anon_kib
    );
    // The attribute is kept as it came.
    let a = modelzip::Archive::open(&zip).unwrap();
    let (_, bytes) = a.tag("t").unwrap().graph().unwrap().unwrap();
    let g = Graph::decode(GraphFormat::ProgramDesc, &bytes).unwrap();
    assert_eq!(
        g.prog().blocks[0].ops[0].attrs,
        graph.prog().blocks[0].ops[0].attrs
    );
}
