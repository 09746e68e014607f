//! INT8 variants of ONNX tags (`variants::quantize` on a tag imported from ONNX): the
//! stored model gets a DequantizeLinear node per quantized weight, the INT8 tag costs
//! ≤ 30% of the FP32 tag's bytes (parameters, and the whole tag), the dequantized weights are within half a
//! step of the originals, and the refusals (nothing to quantize, weights only in
//! subgraphs or graph inputs, opset too old, name clashes).
//!
//! ONNX Runtime runs the exports in tests/onnx/run_exported.py: set
//! MODELZIP_ONNX_EXPORT_DIR (./test.sh does) to keep them there for it.

use crate::support::{import_opts as opts, write_opts};
use modelzip::interop::ExportOptions;
use modelzip::interop::onnx;
use modelzip::onnx_proto as pb;
use modelzip::variants::{AllowValues, ParamChange, QuantizeOptions, VariantReport, quantize};
use modelzip::{Archive, DType};
use prost::Message;
use std::collections::HashMap;
use std::path::{Path, PathBuf};

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

fn q(per_channel: bool) -> QuantizeOptions {
    QuantizeOptions { per_channel }
}

fn graph(m: &pb::ModelProto) -> &pb::GraphProto {
    m.graph.as_ref().unwrap()
}

fn f32s(a: &Archive, tag: &str, param: &str) -> (Vec<u64>, Vec<f32>) {
    let t = a.tag(tag).unwrap().param(param).unwrap();
    let v = t.view();
    (v.dims().to_vec(), v.to_f32_vec().unwrap())
}

/// Every quantized value of `int8` times its scale is within half a step of `fp32`'s.
fn check_dequantized(a: &Archive, fp32: &str, int8: &str, w: &str, axis: Option<usize>) {
    let (dims, want) = f32s(a, fp32, w);
    let t = a.tag(int8).unwrap().param(w).unwrap();
    let v = t.view();
    assert_eq!(v.dtype(), DType::Int8, "{w}");
    assert_eq!(v.dims(), dims.as_slice(), "{w}");
    let qs: Vec<i8> = v.data().iter().map(|&b| b as i8).collect();
    let (sdims, scales) = f32s(a, int8, &format!("{w}@scale"));
    let inner: usize = axis.map_or(1, |a| dims[a + 1..].iter().product::<u64>() as usize);
    let channels = axis.map_or(1, |a| dims[a] as usize);
    match axis {
        Some(_) => assert_eq!(sdims, vec![channels as u64], "{w}"),
        None => assert!(sdims.is_empty(), "{w}: per-tensor scale is a scalar"),
    }
    let mut worst = 0f32;
    for (i, (&x, &qi)) in want.iter().zip(&qs).enumerate() {
        let s = scales[(i / inner) % channels];
        let err = (f32::from(qi) * s - x).abs();
        assert!(
            err <= s / 2.0 * 1.0001 + 1e-12,
            "{w}[{i}]: {x} vs {qi} × {s}"
        );
        worst = worst.max(err);
    }
    // The step is a real one: max|x| of each channel maps to ±127.
    assert!(scales.iter().all(|&s| s > 0.0), "{w}: {scales:?}");
    assert!(qs.iter().any(|&x| x.abs() == 127), "{w}");
    assert!(worst > 0.0, "{w}: no rounding at all is implausible");
}

/// The expected (weight, channel axis) of each fixture, in first-use order.
fn weights_of(model: &str) -> Vec<(&'static str, usize)> {
    match model {
        "mlp" | "finetune_v1" => vec![
            ("dense/kernel:0", 1),
            ("dense_1/kernel:0", 1),
            ("head.weight", 1), // Gemm without transB: [K, N]
        ],
        "cnn" => vec![("conv.w", 0), ("fc.w", 0)], // Conv [M, C, kh, kw]; Gemm transB=1: [N, K]
        _ => unreachable!(),
    }
}

/// The tag's own stored bytes of parameter files (shared ones cost nothing).
fn param_bytes(a: &Archive, tag: &str) -> u64 {
    let t = a.tag(tag).unwrap();
    t.params()
        .iter()
        .filter(|p| !p.location.shared)
        .map(|p| t.stored_size(&p.location))
        .sum()
}

#[test]
fn int8_variants_of_the_mlp_and_cnn_dequantize_in_the_model() {
    let dir = tempfile::tempdir().unwrap();
    let zip = dir.path().join("q.zip");
    let keep = std::env::var_os("MODELZIP_ONNX_EXPORT_DIR").map(PathBuf::from);
    let mut ratios = Vec::new();
    for model in ["mlp", "cnn", "finetune_v1"] {
        onnx::import_model_file(&zip, model, &fixture(&format!("{model}.onnx")), &opts()).unwrap();
        for per_channel in [true, false] {
            let tag = format!("{model}_int8{}", if per_channel { "" } else { "_tensor" });
            let r: VariantReport = quantize(
                &zip,
                model,
                &tag,
                &q(per_channel),
                &AllowValues::default(),
                &write_opts(),
            )
            .unwrap();
            let want = weights_of(model);
            let changed: Vec<&str> = r.changed().map(|p| p.name.as_str()).collect();
            let mut names: Vec<&str> = want.iter().map(|w| w.0).collect();
            names.sort_unstable();
            let mut got = changed.clone();
            got.sort_unstable();
            assert_eq!(got, names, "{tag}");
            for p in &r.params {
                match &p.change {
                    ParamChange::Quantized {
                        axis,
                        scale,
                        per_tensor_reason,
                    } => {
                        let a = want.iter().find(|w| w.0 == p.name).unwrap().1;
                        assert_eq!(*axis, per_channel.then_some(a), "{tag} {}", p.name);
                        assert_eq!(*per_tensor_reason, None, "{tag} {}", p.name);
                        assert_eq!(scale, &format!("{}@scale", p.name));
                        assert!(!p.shared);
                    }
                    ParamChange::Scale { .. } => assert_eq!(p.dtype, DType::Fp32),
                    ParamChange::Unchanged => assert!(p.shared, "{tag} {} not shared", p.name),
                    other => panic!("{tag} {}: {other:?}", p.name),
                }
            }

            let a = Archive::open(&zip).unwrap();
            let report = a.verify();
            assert!(report.is_ok(), "{tag}: {:?}", report.problems);
            for &(w, axis) in &want {
                check_dequantized(&a, model, &tag, w, per_channel.then_some(axis));
            }

            // The model: DequantizeLinear nodes first, then the original nodes as they
            // were; each weight's initializer replaced by <W>_quantized (INT8) and
            // <W>_scale (FP32); everything else as it came.
            let (m, used, unused) = onnx::export_model(&a.tag(&tag).unwrap()).unwrap();
            assert!(unused.is_empty(), "{tag}: {unused:?}");
            assert_eq!(used.len(), r.params.len(), "{tag}");
            let orig = original(model);
            let (g, og) = (graph(&m), graph(&orig));
            assert_eq!(
                m.opset_import, orig.opset_import,
                "{tag}: opset 17 is enough"
            );
            assert_eq!(m.ir_version, orig.ir_version);
            assert_eq!((&g.input, &g.output), (&og.input, &og.output));
            assert_eq!(&g.node[want.len()..], og.node.as_slice(), "{tag}");
            for (n, &(w, axis)) in g.node.iter().zip(&want) {
                assert_eq!(n.op_type.as_deref(), Some("DequantizeLinear"));
                assert_eq!(
                    n.input,
                    vec![format!("{w}_quantized"), format!("{w}_scale")],
                    "{tag}: no zero point: symmetric INT8"
                );
                assert_eq!(n.output, vec![w.to_string()]);
                let axes: Vec<Option<i64>> = n
                    .attribute
                    .iter()
                    .filter(|a| a.name.as_deref() == Some("axis"))
                    .map(|a| a.i)
                    .collect();
                let want_axes = if per_channel {
                    vec![Some(axis as i64)]
                } else {
                    vec![]
                };
                assert_eq!(axes, want_axes, "{tag} {w}");
            }
            assert_eq!(g.initializer.len(), og.initializer.len() + want.len());
            let inits: HashMap<&str, &pb::TensorProto> = g
                .initializer
                .iter()
                .map(|t| (t.name.as_deref().unwrap(), t))
                .collect();
            for t in &og.initializer {
                let name = t.name.as_deref().unwrap();
                match want.iter().find(|w| w.0 == name) {
                    None => assert_eq!(inits[name], t, "{tag} {name}"),
                    Some(&(_, axis)) => {
                        assert!(!inits.contains_key(name), "{tag} {name}");
                        let qt = inits[format!("{name}_quantized").as_str()];
                        assert_eq!(qt.data_type, Some(pb::tensor_proto::DataType::Int8 as i32));
                        assert_eq!(qt.dims, t.dims);
                        assert_eq!(
                            qt.raw_data.as_ref().map(|b| b.len()),
                            Some(t.dims.iter().product::<i64>() as usize)
                        );
                        let st = inits[format!("{name}_scale").as_str()];
                        assert_eq!(st.data_type, Some(pb::tensor_proto::DataType::Float as i32));
                        let sd = if per_channel {
                            vec![t.dims[axis]]
                        } else {
                            vec![]
                        };
                        assert_eq!(st.dims, sd, "{tag} {name}");
                    }
                }
            }

            // Bytes: the tag's own parameter files against the FP32 tag's.
            let (own, fp32) = (param_bytes(&a, &tag), param_bytes(&a, model));
            assert_eq!(own, r.stored_bytes(), "{tag}");
            let ratio = own as f64 / fp32 as f64;
            ratios.push((tag.clone(), ratio));
            assert!(ratio <= 0.30, "{tag}: {own} of {fp32} bytes ({ratio:.3})");
            // The whole tag (graph.fb, metadata, params.txt, checksums included) is
            // within 30% too: the fixtures are 80-90 KB of weights, so those fixed
            // files do not dominate.
            let (own, fp32) = (a.stored_bytes_under(&tag), a.stored_bytes_under(model));
            assert!(own * 10 <= fp32 * 3, "{tag}: whole tag {own} of {fp32}");

            if let Some(k) = &keep {
                std::fs::create_dir_all(k).unwrap();
                let out = k.join(format!("{tag}.onnx"));
                let eo = ExportOptions {
                    fsync: false,
                    overwrite: true,
                    ..ExportOptions::default()
                };
                onnx::export_model_file(&a.tag(&tag).unwrap(), &out, &eo).unwrap();
            }
        }
    }
    assert_eq!(ratios.len(), 6);
    eprintln!("own parameter bytes / FP32: {ratios:?}");
}

#[test]
fn the_quantized_tag_is_refused_as_a_source_and_exports_with_external_data() {
    let dir = tempfile::tempdir().unwrap();
    let zip = dir.path().join("q.zip");
    onnx::import_model_file(&zip, "cnn", &fixture("cnn.onnx"), &opts()).unwrap();
    quantize(
        &zip,
        "cnn",
        "int8",
        &q(true),
        &AllowValues::default(),
        &write_opts(),
    )
    .unwrap();
    let e = quantize(
        &zip,
        "int8",
        "again",
        &q(true),
        &AllowValues::default(),
        &write_opts(),
    )
    .unwrap_err();
    assert!(e.to_string().contains("quantized already"), "{e}");
    let a = Archive::open(&zip).unwrap();
    let out = dir.path().join("x.onnx");
    let eo = ExportOptions {
        fsync: false,
        external_data: true,
        ..ExportOptions::default()
    };
    onnx::export_model_file(&a.tag("int8").unwrap(), &out, &eo).unwrap();
    let m = pb::ModelProto::decode(std::fs::read(&out).unwrap().as_slice()).unwrap();
    let q = graph(&m)
        .initializer
        .iter()
        .find(|t| t.name.as_deref() == Some("conv.w_quantized"))
        .unwrap();
    let len = q
        .external_data
        .iter()
        .find(|kv| kv.key.as_deref() == Some("length"));
    assert_eq!(len.unwrap().value.as_deref(), Some("864")); // 32 x 3 x 3 x 3 bytes
}

// ---------------------------------------------------------------------------------
// Hand-built models: what is left FP32, and the refusals

fn value(name: &str, dims: &[i64]) -> pb::ValueInfoProto {
    use pb::type_proto::{Tensor, Value};
    let shape = pb::TensorShapeProto {
        dim: dims
            .iter()
            .map(|&d| pb::tensor_shape_proto::Dimension {
                value: Some(pb::tensor_shape_proto::dimension::Value::DimValue(d)),
                ..Default::default()
            })
            .collect(),
    };
    pb::ValueInfoProto {
        name: Some(name.into()),
        r#type: Some(pb::TypeProto {
            value: Some(Value::TensorType(Tensor {
                elem_type: Some(1),
                shape: Some(shape),
            })),
            ..Default::default()
        }),
        ..Default::default()
    }
}

fn weight(name: &str, dims: &[i64]) -> pb::TensorProto {
    let n: i64 = dims.iter().product();
    pb::TensorProto {
        name: Some(name.into()),
        data_type: Some(1),
        dims: dims.to_vec(),
        raw_data: Some(
            (0..n)
                .flat_map(|i| ((i as f32 * 0.37).sin()).to_le_bytes())
                .collect(),
        ),
        ..Default::default()
    }
}

fn node(op: &str, inputs: &[&str], output: &str) -> pb::NodeProto {
    pb::NodeProto {
        op_type: Some(op.into()),
        input: inputs.iter().map(|s| s.to_string()).collect(),
        output: vec![output.into()],
        ..Default::default()
    }
}

/// x[1,4] → MatMul(w[4,3]) → op → y, at `opset`.
fn small(opset: i64, op: &str) -> pb::ModelProto {
    pb::ModelProto {
        ir_version: Some(if opset >= 13 { 7 } else { 6 }),
        opset_import: vec![pb::OperatorSetIdProto {
            domain: Some(String::new()),
            version: Some(opset),
        }],
        graph: Some(pb::GraphProto {
            name: Some("small".into()),
            node: vec![node("MatMul", &["x", "w"], "h"), node(op, &["h"], "y")],
            initializer: vec![weight("w", &[4, 3])],
            input: vec![value("x", &[1, 4])],
            output: vec![value("y", &[1, 3])],
            ..Default::default()
        }),
        ..Default::default()
    }
}

fn quantize_model(
    m: &pb::ModelProto,
    per_channel: bool,
) -> (PathBuf, modelzip::Result<VariantReport>, tempfile::TempDir) {
    let dir = tempfile::tempdir().unwrap();
    let zip = dir.path().join("m.zip");
    onnx::import_model(&zip, "fp32", m.clone(), &opts()).unwrap();
    let r = quantize(
        &zip,
        "fp32",
        "int8",
        &q(per_channel),
        &AllowValues::default(),
        &write_opts(),
    );
    (zip, r, dir)
}

fn refused(m: &pb::ModelProto, per_channel: bool) -> String {
    let (zip, r, _dir) = quantize_model(m, per_channel);
    let e = r.unwrap_err();
    let a = Archive::open(&zip).unwrap();
    assert_eq!(a.tags(), ["fp32"], "a refused quantize adds no tag");
    e.to_string()
}

fn exported(zip: &Path) -> pb::ModelProto {
    let a = Archive::open(zip).unwrap();
    assert!(a.verify().is_ok());
    onnx::export_model(&a.tag("int8").unwrap()).unwrap().0
}

fn default_opset(m: &pb::ModelProto) -> Option<i64> {
    m.opset_import
        .iter()
        .find(|o| o.domain.as_deref() == Some(""))
        .and_then(|o| o.version)
}

#[test]
fn opset_11_is_raised_to_13_for_per_channel_when_every_op_keeps_its_meaning() {
    let (zip, r, _d) = quantize_model(&small(11, "Relu"), true);
    r.unwrap();
    let m = exported(&zip);
    assert_eq!(default_opset(&m), Some(13));
    assert_eq!(m.ir_version, Some(7));
    // Per tensor, opset 11 already has DequantizeLinear: nothing is raised.
    let (zip, r, _d) = quantize_model(&small(11, "Relu"), false);
    r.unwrap();
    let m = exported(&zip);
    assert_eq!(default_opset(&m), Some(11));
    assert_eq!(m.ir_version, Some(6));
    assert_eq!(
        graph(&m).node[0].op_type.as_deref(),
        Some("DequantizeLinear")
    );
}

#[test]
fn opsets_too_old_or_unsafe_to_raise_are_refused() {
    // Softmax's axis means something else from opset 13 on.
    let e = refused(&small(12, "Softmax"), true);
    assert!(
        e.contains("opset 12") && e.contains("Softmax") && e.contains("per tensor"),
        "{e}"
    );
    // ... so per tensor (opset 10 is enough) is the way.
    let (_, r, _d) = quantize_model(&small(12, "Softmax"), false);
    r.unwrap();
    // Below opset 10 there is no DequantizeLinear, and raising is not attempted.
    let e = refused(&small(9, "Relu"), false);
    assert!(
        e.contains("opset 9") && e.contains("DequantizeLinear needs opset 10"),
        "{e}"
    );
    let e = refused(&small(10, "Relu"), true);
    assert!(e.contains("opset 10") && e.contains("per tensor"), "{e}");
}

#[test]
fn nothing_to_quantize_is_refused() {
    // Weights only inside If / Loop bodies (and 1-D scales): the control fixture.
    let e = refused(&original("control"), true);
    assert!(
        e.contains("nothing to quantize") && e.contains("subgraphs"),
        "{e}"
    );
    // A weight that is also a graph input can be overridden by the caller: left alone.
    let mut m = small(17, "Relu");
    m.graph.as_mut().unwrap().input.push(value("w", &[4, 3]));
    let e = refused(&m, true);
    assert!(
        e.contains("nothing to quantize") && e.contains("graph inputs"),
        "{e}"
    );
    // A weight whose name a second initializer (kept whole in the model) shares.
    let mut m = small(17, "Relu");
    let mut twin = weight("w", &[4, 3]);
    twin.doc_string = Some("the second w".into());
    m.graph.as_mut().unwrap().initializer.push(twin);
    let e = refused(&m, true);
    assert!(e.contains("nothing to quantize"), "{e}");
    // A weight no MatMul / Gemm / Conv reads.
    let mut m = small(17, "Relu");
    let g = m.graph.as_mut().unwrap();
    g.node[0] = node("Add", &["x", "w"], "h");
    let e = refused(&m, false);
    assert!(e.contains("nothing to quantize"), "{e}");
}

#[test]
fn weights_inside_subgraphs_stay_fp32() {
    // Main graph: MatMul(x, w) → h; If(flag) then MatMul(h, then.w) (its own
    // initializer), else MatMul(h, outer) (a top-level initializer only the subgraph
    // reads). Only w is quantized.
    let branch = |name: &str, w: Option<pb::TensorProto>, weight_name: &str| pb::GraphProto {
        name: Some(name.into()),
        node: vec![node("MatMul", &["h", weight_name], &format!("{name}.out"))],
        initializer: w.into_iter().collect(),
        output: vec![value(&format!("{name}.out"), &[1, 2])],
        ..Default::default()
    };
    let attr = |name: &str, g: pb::GraphProto| pb::AttributeProto {
        name: Some(name.into()),
        r#type: Some(5),
        g: Some(g),
        ..Default::default()
    };
    let mut m = small(17, "Relu");
    let g = m.graph.as_mut().unwrap();
    g.node.truncate(1);
    let mut iff = node("If", &["flag"], "y");
    iff.attribute = vec![
        attr(
            "then_branch",
            branch("then", Some(weight("then.w", &[3, 2])), "then.w"),
        ),
        attr("else_branch", branch("else", None, "outer")),
    ];
    g.node.push(iff);
    g.initializer.push(weight("outer", &[3, 2]));
    let mut flag = value("flag", &[]);
    if let Some(pb::type_proto::Value::TensorType(t)) =
        flag.r#type.as_mut().and_then(|t| t.value.as_mut())
    {
        t.elem_type = Some(9);
    }
    g.input.push(flag);
    g.output = vec![value("y", &[1, 2])];
    let (zip, r, _d) = quantize_model(&m, true);
    let r = r.unwrap();
    let changed: Vec<&str> = r.changed().map(|p| p.name.as_str()).collect();
    assert_eq!(changed, ["w"]);
    let out = exported(&zip);
    let (g, og) = (graph(&out), graph(&m));
    assert_eq!(
        &g.node[1..],
        og.node.as_slice(),
        "the If and its branches as they were"
    );
    let outer = g
        .initializer
        .iter()
        .find(|t| t.name.as_deref() == Some("outer"))
        .unwrap();
    assert_eq!(outer, &og.initializer[1]);
    if let Some(k) = std::env::var_os("MODELZIP_ONNX_EXPORT_DIR") {
        std::fs::create_dir_all(&k).unwrap();
        let eo = ExportOptions {
            fsync: false,
            overwrite: true,
            ..ExportOptions::default()
        };
        let a = Archive::open(&zip).unwrap();
        onnx::export_model_file(
            &a.tag("int8").unwrap(),
            &Path::new(&k).join("subgraph_int8.onnx"),
            &eo,
        )
        .unwrap();
        onnx::export_model_file(
            &a.tag("fp32").unwrap(),
            &Path::new(&k).join("subgraph.onnx"),
            &eo,
        )
        .unwrap();
    }
}

#[test]
fn a_name_the_rewrite_needs_that_exists_is_refused() {
    let mut m = small(17, "Relu");
    m.graph.as_mut().unwrap().node[1].output = vec!["w_scale".into()];
    m.graph.as_mut().unwrap().output = vec![value("w_scale", &[1, 3])];
    let e = refused(&m, true);
    assert!(
        e.contains("\"w_scale\"") && e.contains("already has"),
        "{e}"
    );
}

#[test]
fn cast_refuses_onnx_and_tensorflow_tags_it_cannot_rewrite() {
    let dir = tempfile::tempdir().unwrap();
    let zip = dir.path().join("c.zip");
    onnx::import_model_file(&zip, "onnx", &fixture("mlp.onnx"), &opts()).unwrap();
    let tf = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/tf/mlp.pb");
    modelzip::interop::tf::import_graphdef_file(&zip, "tf", &tf, &opts()).unwrap();
    for (tag, what) in [("onnx", "an ONNX model"), ("tf", "a TensorFlow graph")] {
        for dtype in [DType::Fp16, DType::Bf16] {
            let e = modelzip::variants::cast(
                &zip,
                tag,
                "half",
                dtype,
                &AllowValues::default(),
                &write_opts(),
            )
            .unwrap_err();
            assert!(e.to_string().contains(what), "{tag}: {e}");
        }
    }
    let a = Archive::open(&zip).unwrap();
    assert_eq!(a.tags(), ["onnx", "tf"]);
    assert!(a.verify().is_ok());
}

/// An initializer a MatMul reads along its last axis and a Gemm with transB along axis
/// 0 is quantized per tensor even with per channel asked: the report says why.
#[test]
fn per_channel_fallback_of_an_onnx_weight_carries_its_reason() {
    let mut m = small(13, "Relu");
    let g = m.graph.as_mut().unwrap();
    g.initializer = vec![weight("w", &[4, 4])];
    let mut gemm = node("Gemm", &["h", "w"], "y");
    gemm.attribute.push(pb::AttributeProto {
        name: Some("transB".into()),
        r#type: Some(pb::attribute_proto::AttributeType::Int as i32),
        i: Some(1),
        ..Default::default()
    });
    g.node = vec![node("MatMul", &["x", "w"], "h"), gemm];
    g.output = vec![value("y", &[1, 4])];
    let (zip, r, _d) = quantize_model(&m, true);
    let r = r.unwrap();
    let w = r.params.iter().find(|p| p.name == "w").unwrap();
    assert_eq!(
        w.change,
        ParamChange::Quantized {
            axis: None,
            scale: "w@scale".into(),
            per_tensor_reason: Some(
                "the ops that read it disagree on its output-channel axis \
                 (MatMul along axis 1, Gemm along axis 0)"
                    .into()
            ),
        }
    );
    // Per tensor in the model too: a scalar scale.
    let a = Archive::open(&zip).unwrap();
    assert_eq!(f32s(&a, "int8", "w@scale").0, Vec::<u64>::new());
}
