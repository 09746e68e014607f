//! Variants through the library: quantize (with and without a graph, both graph
//! encodings), cast, and diff, on the real Paddle fixture models and synthetic tags.

use crate::support::ProgramOf;

use modelzip::graph::AttrValue;

use modelzip::tensor::decode_combined;
use modelzip::variants::{
    AllowValues, GraphChange, ParamChange, QuantizeOptions, VariantReport, cast, diff_tags,
    quantize,
};
use modelzip::{Archive, ArchiveWriter, DType, ErrorKind, TagBuilder, Tensor, WriteOptions};
use modelzip::{Graph, GraphFormat};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

fn fixture(rel: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/paddle")
        .join(rel)
}

fn fast() -> WriteOptions {
    // Waiting for the lock: another test's child process can hold it for a moment
    // between fork and exec (the descriptor is close-on-exec, not close-on-fork).
    WriteOptions {
        fsync: false,
        wait_for_lock: true,
        ..WriteOptions::default()
    }
}

/// A tag from a fixture `.pdmodel` + `.pdiparams`: the combined file's records are block
/// 0's persistable variables except feed/fetch, sorted by byte value.
fn fixture_tag(name: &str, version: &str, model: &str, enc: GraphFormat) -> TagBuilder {
    let pd = std::fs::read(fixture(&format!("{version}/{model}.pdmodel"))).unwrap();
    let graph = Graph::decode(GraphFormat::ProgramDesc, &pd).unwrap();
    let mut names: Vec<&str> = graph.prog().blocks[0]
        .vars
        .iter()
        .filter(|v| v.is_persistable() && v.name != "feed" && v.name != "fetch")
        .map(|v| v.name.as_str())
        .collect();
    names.sort();
    let params = std::fs::read(fixture(&format!("{version}/{model}.pdiparams"))).unwrap();
    let records = decode_combined(&params).unwrap();
    assert_eq!(records.len(), names.len());
    let bytes = match enc {
        GraphFormat::ProgramDesc => pd.clone(),
        GraphFormat::FlatBuffers => graph.encode(GraphFormat::FlatBuffers).unwrap(),
    };
    let mut tag = TagBuilder::new(name).graph(enc, bytes);
    for (n, r) in names.iter().zip(records) {
        tag = tag.param(*n, r.tensor.to_owned());
    }
    tag
}

fn archive_with(dir: &Path, tag: TagBuilder) -> PathBuf {
    let path = dir.join("m.zip");
    let mut w = ArchiveWriter::create_with(&path, &fast()).unwrap();
    w.add_tag(tag).unwrap();
    w.finish().unwrap();
    path
}

fn quantized_names(r: &VariantReport) -> Vec<(String, Option<usize>)> {
    r.params
        .iter()
        .filter_map(|p| match &p.change {
            ParamChange::Quantized { axis, .. } => Some((p.name.clone(), *axis)),
            _ => None,
        })
        .collect()
}

fn f32s(archive: &Archive, tag: &str, name: &str) -> Vec<f32> {
    let t = archive.tag(tag).unwrap();
    let d = t.param(name).unwrap();
    d.view().to_f32_vec().unwrap()
}

fn metadata(archive: &Archive, tag: &str) -> serde_json::Value {
    let t = archive.tag(tag).unwrap();
    serde_json::from_slice(&t.metadata().unwrap().unwrap()).unwrap()
}

fn new_graph(archive: &Archive, tag: &str) -> (GraphFormat, Graph) {
    let t = archive.tag(tag).unwrap();
    let (enc, bytes) = t.graph().unwrap().unwrap();
    (enc, Graph::decode(enc, &bytes).unwrap())
}

#[test]
fn quantize_mlp_with_graph_per_tensor() {
    let dir = tempfile::tempdir().unwrap();
    let path = archive_with(
        dir.path(),
        fixture_tag("fp32", "3.3.1", "mlp", GraphFormat::ProgramDesc),
    );
    let r = quantize(
        &path,
        "FP32",
        "int8",
        &QuantizeOptions::default(),
        &AllowValues::default(),
        &fast(),
    )
    .unwrap();
    assert_eq!(r.tag, "int8");
    assert_eq!(r.source_tag, "fp32");
    assert_eq!(
        quantized_names(&r),
        [
            ("fc_0.w_0".to_string(), None),
            ("fc_1.w_0".to_string(), None)
        ]
    );
    // Biases are untouched: references to fp32's files, no bytes of their own.
    for p in &r.params {
        if p.name.ends_with(".b_0") {
            assert_eq!(p.change, ParamChange::Unchanged);
            assert!(p.shared, "{} should be shared", p.name);
            assert_eq!(p.stored_bytes, 0);
        }
        if let ParamChange::Scale { of } = &p.change {
            assert_eq!(p.name, format!("{of}@scale"));
            assert_eq!(p.dims, [1]);
            assert_eq!(p.dtype, DType::Fp32);
        }
    }
    let archive = Archive::open(&path).unwrap();
    let int8 = archive.tag("int8").unwrap();
    let names: Vec<_> = int8.params().iter().map(|p| p.name.as_str()).collect();
    assert_eq!(
        names,
        [
            "fc_0.b_0",
            "fc_0.w_0",
            "fc_0.w_0@scale",
            "fc_1.b_0",
            "fc_1.w_0",
            "fc_1.w_0@scale"
        ]
    );
    for p in int8.params() {
        assert_eq!(p.location.shared, p.name.ends_with(".b_0"), "{}", p.name);
    }
    // INT8 data is a quarter of the FP32 data.
    for w in ["fc_0.w_0", "fc_1.w_0"] {
        let a = archive.tag("fp32").unwrap().param(w).unwrap();
        let q = int8.param(w).unwrap();
        assert_eq!(q.view().dtype(), DType::Int8);
        assert_eq!(q.view().dims(), a.view().dims());
        assert_eq!(q.view().data().len() * 4, a.view().data().len());
        // Dequantized values are within half a step of the originals.
        let scale = f32s(&archive, "int8", &format!("{w}@scale"))[0];
        let orig = a.view().to_f32_vec().unwrap();
        let qv = q.view().to_vec::<i8>().unwrap();
        for (x, &qi) in orig.iter().zip(&qv) {
            assert!((x - f32::from(qi) * scale).abs() <= scale / 2.0 + 1e-7);
        }
    }
    // The own bytes of the new tag: INT8 weights and scales, nothing else.
    let weights: u64 = ["fc_0.w_0", "fc_1.w_0"]
        .iter()
        .map(|w| {
            (archive
                .tag("fp32")
                .unwrap()
                .param(w)
                .unwrap()
                .view()
                .data()
                .len()
                / 4) as u64
        })
        .sum();
    assert!(r.stored_bytes() >= weights && r.stored_bytes() < weights + 400);

    let m = metadata(&archive, "int8");
    assert!(m["created"].is_string());
    let q = &m["quantization"];
    assert_eq!(q["scheme"], "symmetric-int8");
    assert_eq!(q["per_channel"], false);
    assert_eq!(q["source_tag"], "fp32");
    assert_eq!(q["params"]["fc_0.w_0"]["axis"], serde_json::Value::Null);
    assert_eq!(q["params"]["fc_1.w_0"]["scale"], "fc_1.w_0@scale");

    // The graph dequantizes before the muls.
    let (enc, g) = new_graph(&archive, "int8");
    assert_eq!(enc, GraphFormat::ProgramDesc);
    let b = &g.prog().blocks[0];
    let types: Vec<_> = b.ops.iter().map(|o| o.op_type.as_str()).collect();
    assert_eq!(
        &types[..6],
        [
            "feed",
            "cast",
            "elementwise_mul",
            "cast",
            "elementwise_mul",
            "mul"
        ]
    );
    let cast_op = &b.ops[1];
    assert_eq!(cast_op.get_attr("in_dtype"), Some(&AttrValue::Int(21)));
    assert_eq!(cast_op.get_attr("out_dtype"), Some(&AttrValue::Int(5)));
    assert_eq!(b.ops[2].get_attr("axis"), Some(&AttrValue::Int(-1)));
    let muls: Vec<_> = b.ops.iter().filter(|o| o.op_type == "mul").collect();
    assert_eq!(
        muls[0].inputs.iter().find(|s| s.name == "Y").unwrap().args,
        ["fc_0.w_0@dequant"]
    );
    assert_eq!(
        muls[1].inputs.iter().find(|s| s.name == "Y").unwrap().args,
        ["fc_1.w_0@dequant"]
    );
    let var = |n: &str| b.vars.iter().find(|v| v.name == n).unwrap();
    assert_eq!(var("fc_0.w_0").dtype, Some(DType::Int8));
    assert!(var("fc_0.w_0@scale").is_persistable());
    assert_eq!(var("fc_0.w_0@scale").shape, [1]);
    assert!(!var("fc_0.w_0@dequant").is_persistable());
    assert!(archive.verify().is_ok());
}

#[test]
fn quantize_conv_per_channel_axes_and_graph_fb() {
    let dir = tempfile::tempdir().unwrap();
    let path = archive_with(
        dir.path(),
        fixture_tag("fp32", "2.6.2", "conv", GraphFormat::FlatBuffers),
    );
    let opts = QuantizeOptions { per_channel: true };
    let r = quantize(
        &path,
        "fp32",
        "int8",
        &opts,
        &AllowValues::default(),
        &fast(),
    )
    .unwrap();
    assert_eq!(
        quantized_names(&r),
        [
            ("conv2d_0.w_0".to_string(), Some(0)),
            ("fc_2.w_0".to_string(), Some(1))
        ]
    );
    let scale_dims: BTreeMap<_, _> = r
        .params
        .iter()
        .filter(|p| matches!(p.change, ParamChange::Scale { .. }))
        .map(|p| (p.name.clone(), p.dims.clone()))
        .collect();
    assert_eq!(scale_dims["conv2d_0.w_0@scale"], [4]);
    assert_eq!(scale_dims["fc_2.w_0@scale"], [5]);
    // Batch norm and biases are shared.
    let shared: Vec<_> = r
        .params
        .iter()
        .filter(|p| p.shared)
        .map(|p| p.name.as_str())
        .collect();
    assert_eq!(shared.len(), 6, "{shared:?}");
    let archive = Archive::open(&path).unwrap();
    let (enc, g) = new_graph(&archive, "int8");
    assert_eq!(enc, GraphFormat::FlatBuffers);
    let b = &g.prog().blocks[0];
    let conv = b.ops.iter().find(|o| o.op_type == "conv2d").unwrap();
    assert_eq!(
        conv.inputs
            .iter()
            .find(|s| s.name == "Filter")
            .unwrap()
            .args,
        ["conv2d_0.w_0@dequant"]
    );
    let axes: Vec<_> = b
        .ops
        .iter()
        .filter(|o| o.op_type == "elementwise_mul")
        .map(|o| o.get_attr("axis").cloned())
        .collect();
    assert_eq!(axes, [Some(AttrValue::Int(0)), Some(AttrValue::Int(1))]);
    // The graph re-encodes to ProgramDesc too.
    let pd = g.encode(GraphFormat::ProgramDesc).unwrap();
    assert_eq!(Graph::decode(GraphFormat::ProgramDesc, &pd).unwrap(), g);
    // Per-channel dequantization is within half a step of each channel's scale.
    let orig = f32s(&archive, "fp32", "conv2d_0.w_0");
    let scales = f32s(&archive, "int8", "conv2d_0.w_0@scale");
    let q = archive.tag("int8").unwrap().param("conv2d_0.w_0").unwrap();
    let qv = q.view().to_vec::<i8>().unwrap();
    for (i, (x, &qi)) in orig.iter().zip(&qv).enumerate() {
        let s = scales[i / 27];
        assert!((x - f32::from(qi) * s).abs() <= s / 2.0 + 1e-7);
    }
    assert_eq!(
        metadata(&archive, "int8")["quantization"]["params"]["conv2d_0.w_0"]["axis"],
        0
    );
}

#[test]
fn quantize_without_graph_takes_float_params_of_rank_two_or_more() {
    let dir = tempfile::tempdir().unwrap();
    let w: Vec<f32> = (0..12).map(|i| i as f32 - 5.5).collect();
    let f: Vec<f32> = (0..54).map(|i| (i as f32 * 0.7).sin()).collect();
    let tag = TagBuilder::new("base")
        .param("w", Tensor::from_slice(vec![4, 3], &w).unwrap())
        .param("f", Tensor::from_slice(vec![2, 3, 3, 3], &f).unwrap())
        .param(
            "b",
            Tensor::from_slice(vec![3], &[1.0f32, 2.0, 3.0]).unwrap(),
        )
        .param(
            "ids",
            Tensor::from_slice(vec![2, 2], &[1i64, 2, 3, 4]).unwrap(),
        )
        .metadata(br#"{"description":"kept","created":"2020-01-01T00:00:00Z"}"#.to_vec());
    let path = archive_with(dir.path(), tag);
    let opts = QuantizeOptions { per_channel: true };
    let r = quantize(&path, "base", "q", &opts, &AllowValues::default(), &fast()).unwrap();
    assert_eq!(r.graph, None);
    assert_eq!(
        quantized_names(&r),
        [("w".to_string(), Some(1)), ("f".to_string(), Some(0))]
    );
    let archive = Archive::open(&path).unwrap();
    let m = metadata(&archive, "q");
    assert_eq!(m["description"], "kept");
    assert_ne!(m["created"], "2020-01-01T00:00:00Z");
    assert_eq!(m["quantization"]["per_channel"], true);
    let q = archive.tag("q").unwrap();
    for p in q.params() {
        assert_eq!(p.location.shared, p.name == "b" || p.name == "ids");
    }
    assert!(q.graph().unwrap().is_none());
}

#[test]
fn cast_values_are_half_conversions_and_graph_casts_back() {
    let dir = tempfile::tempdir().unwrap();
    let path = archive_with(
        dir.path(),
        fixture_tag("fp32", "3.3.1", "conv", GraphFormat::ProgramDesc),
    );
    let r16 = cast(
        &path,
        "fp32",
        "fp16",
        DType::Fp16,
        &AllowValues::default(),
        &fast(),
    )
    .unwrap();
    let rb = cast(
        &path,
        "fp32",
        "bf16",
        DType::Bf16,
        &AllowValues::default(),
        &fast(),
    )
    .unwrap();
    assert_eq!(r16.changed().count(), r16.params.len());
    assert!(
        rb.params
            .iter()
            .all(|p| p.dtype == DType::Bf16 && !p.shared)
    );
    let archive = Archive::open(&path).unwrap();
    let src = archive.tag("fp32").unwrap();
    for p in src.params() {
        let orig = src.param(&p.name).unwrap().view().to_f32_vec().unwrap();
        let h = archive.tag("fp16").unwrap().param(&p.name).unwrap();
        let want: Vec<half::f16> = orig.iter().map(|&x| half::f16::from_f32(x)).collect();
        assert_eq!(h.view().to_vec::<half::f16>().unwrap(), want);
        let b = archive.tag("bf16").unwrap().param(&p.name).unwrap();
        let want: Vec<half::bf16> = orig.iter().map(|&x| half::bf16::from_f32(x)).collect();
        assert_eq!(b.view().to_vec::<half::bf16>().unwrap(), want);
    }
    assert_eq!(metadata(&archive, "fp16")["cast"]["dtype"], "FP16");
    assert_eq!(metadata(&archive, "bf16")["cast"]["source_tag"], "fp32");
    let (_, g) = new_graph(&archive, "bf16");
    let b = &g.prog().blocks[0];
    let casts: Vec<_> = b.ops.iter().filter(|o| o.op_type == "cast").collect();
    assert_eq!(casts.len(), src.params().len());
    assert!(
        casts
            .iter()
            .all(|c| c.get_attr("in_dtype") == Some(&AttrValue::Int(22)))
    );
    // batch_norm reads and writes its running statistics through the FP32 copies.
    let bn = b.ops.iter().find(|o| o.op_type == "batch_norm").unwrap();
    for slot in bn.inputs.iter().chain(&bn.outputs) {
        for a in &slot.args {
            assert!(
                !a.starts_with("batch_norm_0.w_") || a.ends_with("@cast"),
                "{a}"
            );
        }
    }
}

#[test]
fn cast_shares_non_fp32_params() {
    let dir = tempfile::tempdir().unwrap();
    let tag = TagBuilder::new("base")
        .param(
            "w",
            Tensor::from_slice(vec![2], &[0.1f32, 70000.0]).unwrap(),
        )
        .param("ids", Tensor::from_slice(vec![2], &[1i64, 2]).unwrap());
    let path = archive_with(dir.path(), tag);
    // 70000 is beyond FP16's range: refused unless allowed, then stored as +inf.
    let e = cast(
        &path,
        "base",
        "half",
        DType::Fp16,
        &AllowValues::default(),
        &fast(),
    )
    .unwrap_err();
    assert_unrepresentable(&e, "overflow");
    assert!(e.to_string().contains("1 value(s)"), "{e}");
    assert!(e.to_string().contains("first at flat index 1:"), "{e}");
    let allow = AllowValues {
        overflow: true,
        ..AllowValues::default()
    };
    let r = cast(&path, "base", "half", DType::Fp16, &allow, &fast()).unwrap();
    assert_eq!(r.params[0].overflowed, 1);
    assert_eq!(r.params[1].change, ParamChange::Unchanged);
    assert!(r.params[1].shared);
    let archive = Archive::open(&path).unwrap();
    let v = f32s(&archive, "half", "w");
    assert_eq!(v[1], f32::INFINITY); // beyond FP16's range, as half converts it
}

#[test]
fn refusals_say_what_and_why() {
    let dir = tempfile::tempdir().unwrap();
    let tag = TagBuilder::new("base")
        .param(
            "w",
            Tensor::from_slice(vec![2, 2], &[1.0f32, 2.0, 3.0, 4.0]).unwrap(),
        )
        .param("w@scale", Tensor::from_slice(vec![1], &[1.0f32]).unwrap());
    let path = archive_with(dir.path(), tag);
    let q = QuantizeOptions::default();
    let e = quantize(&path, "base", "BASE", &q, &AllowValues::default(), &fast()).unwrap_err();
    assert!(matches!(e.kind(), ErrorKind::TagExists(_)), "{e}");
    let e = quantize(&path, "nope", "x", &q, &AllowValues::default(), &fast()).unwrap_err();
    assert!(matches!(e.kind(), ErrorKind::TagNotFound { .. }), "{e}");
    let e = quantize(&path, "base", "x", &q, &AllowValues::default(), &fast()).unwrap_err();
    assert!(
        e.to_string()
            .contains("already has a parameter \"w@scale\""),
        "{e}"
    );
    let e = quantize(
        &path,
        "base",
        "bad/name",
        &q,
        &AllowValues::default(),
        &fast(),
    )
    .unwrap_err();
    assert!(matches!(e.kind(), ErrorKind::InvalidTagName { .. }), "{e}");
    let e = cast(
        &path,
        "base",
        "x",
        DType::Int8,
        &AllowValues::default(),
        &fast(),
    )
    .unwrap_err();
    assert!(e.to_string().contains("FP16 or BF16"), "{e}");
    // Nothing was added.
    assert_eq!(Archive::open(&path).unwrap().tags(), ["base"]);
}

#[test]
fn diff_reports_shared_changed_and_dequantized_error() {
    let dir = tempfile::tempdir().unwrap();
    let path = archive_with(
        dir.path(),
        fixture_tag("fp32", "3.3.1", "mlp", GraphFormat::ProgramDesc),
    );
    quantize(
        &path,
        "fp32",
        "int8",
        &QuantizeOptions { per_channel: true },
        &AllowValues::default(),
        &fast(),
    )
    .unwrap();
    let archive = Archive::open(&path).unwrap();
    let d = diff_tags(&archive, "fp32", "int8").unwrap();
    assert_eq!(d.graph, GraphChange::Changed);
    assert_eq!(d.added, ["fc_0.w_0@scale", "fc_1.w_0@scale"]);
    assert!(d.removed.is_empty());
    assert_eq!(d.shared, ["fc_0.b_0", "fc_1.b_0"]);
    assert_eq!(d.changed.len(), 2);
    for c in &d.changed {
        assert!(c.dequantized);
        let scales = f32s(&archive, "int8", &format!("{}@scale", c.name));
        let max_scale = scales.iter().fold(0f32, |m, &s| m.max(s));
        let abs = c.max_abs_diff.unwrap();
        assert!(
            abs > 0.0 && abs <= f64::from(max_scale) / 2.0 + 1e-7,
            "{c:?}"
        );
        assert!(c.max_rel_diff.unwrap() < 0.01);
    }
    assert!(!d.is_identical());
    let same = diff_tags(&archive, "int8", "INT8").unwrap();
    assert!(same.is_identical());
    assert_eq!(same.shared.len(), 6);
}

/// Variants derived from a checkpoint are not checkpoints: they do not carry the
/// checkpoint keys (`step`, `metrics`), so a checkpointer neither resumes from them nor
/// removes them; other user keys are carried over.
#[test]
fn variants_of_a_checkpoint_are_not_checkpoints() {
    use modelzip::checkpoint::{Checkpoint, CheckpointOptions, Checkpointer, Retention};
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("c.zip");
    let opts = CheckpointOptions {
        retention: Retention {
            keep_last: Some(1),
            ..Retention::default()
        },
        write: fast(),
        ..CheckpointOptions::default()
    };
    let state = |step: u64| {
        let w: Vec<f32> = (0..12).map(|i| (i as f32 + step as f32) * 0.1).collect();
        let mut c = Checkpoint::new(step);
        c.params
            .push(("w".into(), Tensor::from_slice(vec![4, 3], &w).unwrap()));
        c.metrics.insert("loss".into(), 1.0 / step as f64);
        c
    };
    let mut ck = Checkpointer::open(&path, opts.clone()).unwrap();
    ck.save(&state(5)).unwrap();
    let q = QuantizeOptions { per_channel: true };
    quantize(
        &path,
        "step-000000005",
        "step5-int8",
        &q,
        &AllowValues::default(),
        &fast(),
    )
    .unwrap();
    cast(
        &path,
        "step-000000005",
        "step5-fp16",
        DType::Fp16,
        &AllowValues::default(),
        &fast(),
    )
    .unwrap();
    let archive = Archive::open(&path).unwrap();
    for (tag, record) in [("step5-int8", "quantization"), ("step5-fp16", "cast")] {
        let m = metadata(&archive, tag);
        assert!(m.get("step").is_none(), "{tag}: {m}");
        assert!(m.get("metrics").is_none(), "{tag}: {m}");
        assert_eq!(m[record]["source_tag"], "step-000000005");
    }
    drop(archive);
    assert_eq!(ck.latest().unwrap().unwrap(), state(5));
    assert!(ck.restore("step5-int8").is_err());
    ck.save(&state(6)).unwrap();
    ck.save(&state(7)).unwrap();
    assert_eq!(
        ck.tags().unwrap(),
        ["step5-int8", "step5-fp16", "step-000000007"]
    );
    assert_eq!(ck.latest().unwrap().unwrap(), state(7));
}

/// A variant of a variant is refused before any work, with what and why: quantizing a
/// quantized tag, casting a quantized tag (it would cast the scales and drop the
/// quantization record), casting a tag with no FP32 parameter, quantizing a cast tag
/// whose graph reads its weights through cast ops.
#[test]
fn variants_of_variants_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let path = archive_with(
        dir.path(),
        fixture_tag("fp32", "3.3.1", "mlp", GraphFormat::ProgramDesc),
    );
    let pc = QuantizeOptions { per_channel: true };
    quantize(
        &path,
        "fp32",
        "int8",
        &QuantizeOptions::default(),
        &AllowValues::default(),
        &fast(),
    )
    .unwrap();
    quantize(
        &path,
        "fp32",
        "int8pc",
        &pc,
        &AllowValues::default(),
        &fast(),
    )
    .unwrap();
    cast(
        &path,
        "fp32",
        "fp16",
        DType::Fp16,
        &AllowValues::default(),
        &fast(),
    )
    .unwrap();
    let before = Archive::open(&path).unwrap().tags().to_vec();
    let refused = |e: modelzip::Error, parts: &[&str]| {
        assert!(matches!(e.kind(), ErrorKind::InvalidInput(_)), "{e}");
        let text = e.to_string();
        for p in parts {
            assert!(text.contains(p), "{text:?} lacks {p:?}");
        }
        assert_eq!(e.location().file.as_deref(), Some(path.as_path()));
    };
    for from in ["int8", "INT8PC"] {
        for opts in [QuantizeOptions::default(), pc.clone()] {
            refused(
                quantize(
                    &path,
                    from,
                    "again",
                    &opts,
                    &AllowValues::default(),
                    &fast(),
                )
                .unwrap_err(),
                &[
                    "already has a parameter \"fc_0.w_0@scale\"",
                    "quantized already",
                    "its source tag \"fp32\"",
                ],
            );
        }
        refused(
            cast(
                &path,
                from,
                "again",
                DType::Fp16,
                &AllowValues::default(),
                &fast(),
            )
            .unwrap_err(),
            &[
                "is quantized",
                "\"fc_0.w_0@scale\"",
                "drop its quantization record",
                "cast its source tag \"fp32\"",
            ],
        );
    }
    refused(
        cast(
            &path,
            "fp16",
            "again",
            DType::Bf16,
            &AllowValues::default(),
            &fast(),
        )
        .unwrap_err(),
        &[
            "tag \"fp16\" has no FP32 parameter to cast to BF16",
            "its parameters are FP16",
            "a cast variant (FP16)",
            "cast its source tag \"fp32\"",
        ],
    );
    refused(
        quantize(
            &path,
            "fp16",
            "again",
            &pc,
            &AllowValues::default(),
            &fast(),
        )
        .unwrap_err(),
        &[
            "tag \"fp16\" has nothing to quantize",
            "a cast variant (FP16)",
            "quantize its source tag \"fp32\"",
        ],
    );
    assert_eq!(Archive::open(&path).unwrap().tags(), before);
}

/// A tag with a quantization record but no scale parameter (as the buggy `quantize --from
/// int8` used to write), and tags with nothing to derive.
#[test]
fn quantized_records_and_empty_sources_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let w = Tensor::from_slice(vec![2, 2], &[1.0f32, 2.0, 3.0, 4.0]).unwrap();
    let tag = TagBuilder::new("rec")
        .param("w", w)
        .metadata(br#"{"quantization": {"params": {}}}"#.to_vec());
    let path = archive_with(dir.path(), tag);
    let q = QuantizeOptions::default();
    let e = quantize(&path, "rec", "x", &q, &AllowValues::default(), &fast()).unwrap_err();
    assert!(
        e.to_string()
            .contains("already has a \"quantization\" record in its metadata.json"),
        "{e}"
    );
    assert!(
        e.to_string().contains("quantize a float tag instead"),
        "{e}"
    );
    let e = cast(
        &path,
        "rec",
        "x",
        DType::Fp16,
        &AllowValues::default(),
        &fast(),
    )
    .unwrap_err();
    assert!(e.to_string().contains("is quantized"), "{e}");
    let ints = TagBuilder::new("ints")
        .param(
            "ids",
            Tensor::from_slice(vec![2, 2], &[1i64, 2, 3, 4]).unwrap(),
        )
        .param("b", Tensor::from_slice(vec![2], &[1.0f32, 2.0]).unwrap());
    modelzip::append_tag(&path, ints, modelzip::AppendMode::InPlace, &fast()).unwrap();
    let e = quantize(&path, "ints", "x", &q, &AllowValues::default(), &fast()).unwrap_err();
    assert!(
        e.to_string().contains(
            "tag \"ints\" has nothing to quantize: it has no graph and no float parameter of rank >= 2"
        ),
        "{e}"
    );
    // The FP32 bias is something to cast.
    cast(
        &path,
        "ints",
        "x",
        DType::Fp16,
        &AllowValues::default(),
        &fast(),
    )
    .unwrap();
    let e = cast(
        &path,
        "x",
        "y",
        DType::Bf16,
        &AllowValues::default(),
        &fast(),
    )
    .unwrap_err();
    assert!(
        e.to_string().contains("its parameters are INT64, FP16"),
        "{e}"
    );
    assert_eq!(Archive::open(&path).unwrap().tags(), ["rec", "ints", "x"]);
}

/// The tag `base` holding parameter `w` (dims `dims`, FP32 `values`), in a new archive.
fn one_param(dir: &Path, dims: Vec<u64>, values: &[f32]) -> PathBuf {
    let tag = TagBuilder::new("base").param("w", Tensor::from_slice(dims, values).unwrap());
    archive_with(dir, tag)
}

#[test]
fn cast_refuses_overflow_and_non_finite_unless_allowed() {
    let dir = tempfile::tempdir().unwrap();
    // 65519.996 rounds to 65504 (FP16's largest); 65520 and beyond round to inf.
    let v = [1.0f32, 65519.996, -65520.0, 1e6, 1e-8, 0.0];
    let path = one_param(dir.path(), vec![2, 3], &v);
    let e = cast(
        &path,
        "base",
        "fp16",
        DType::Fp16,
        &AllowValues::default(),
        &fast(),
    )
    .unwrap_err();
    assert_unrepresentable(&e, "overflow");
    let msg = e.to_string();
    assert!(
        msg.starts_with("parameter \"w\": 2 value(s) ")
            && msg.contains("(the first at flat index 2: -65520)"),
        "{msg}"
    );
    assert!(
        msg.contains("beyond FP16's range (largest finite 65504)"),
        "{msg}"
    );
    assert!(
        msg.contains("entry base/params/"),
        "the entry is named: {msg}"
    );
    // BF16's range holds them: cast, and 1e-8 is not lost either.
    let r = cast(
        &path,
        "base",
        "bf16",
        DType::Bf16,
        &AllowValues::default(),
        &fast(),
    )
    .unwrap();
    assert_eq!((r.params[0].overflowed, r.params[0].underflowed), (0, 0));
    let allow = AllowValues {
        overflow: true,
        ..AllowValues::default()
    };
    let r = cast(&path, "base", "fp16", DType::Fp16, &allow, &fast()).unwrap();
    let p = &r.params[0];
    // 1e-8 is below half of FP16's smallest subnormal (2^-25 ≈ 2.98e-8): it becomes 0.
    assert_eq!((p.non_finite, p.overflowed, p.underflowed), (0, 2, 1));
    let archive = Archive::open(&path).unwrap();
    assert_eq!(
        f32s(&archive, "fp16", "w"),
        [1.0, 65504.0, f32::NEG_INFINITY, f32::INFINITY, 0.0, 0.0]
    );

    // NaN and inf in the source: refused (before the overflow check), then kept.
    let dir = tempfile::tempdir().unwrap();
    let path = one_param(dir.path(), vec![3], &[0.5, f32::NAN, f32::INFINITY]);
    let e = cast(
        &path,
        "base",
        "bf16",
        DType::Bf16,
        &AllowValues::default(),
        &fast(),
    )
    .unwrap_err();
    assert_unrepresentable(&e, "non_finite");
    assert!(e.to_string().contains("2 value(s)"), "{e}");
    assert!(e.to_string().contains("first at flat index 1:"), "{e}");
    assert!(e.to_string().contains("are NaN or infinite"), "{e}");
    assert_eq!(Archive::open(&path).unwrap().tags(), ["base"]);
    let allow = AllowValues {
        non_finite: true,
        ..AllowValues::default()
    };
    let r = cast(&path, "base", "bf16", DType::Bf16, &allow, &fast()).unwrap();
    assert_eq!(r.params[0].non_finite, 2);
    let archive = Archive::open(&path).unwrap();
    let v = f32s(&archive, "bf16", "w");
    assert!(
        v[0] == 0.5 && v[1].is_nan() && v[2] == f32::INFINITY,
        "{v:?}"
    );
}

#[test]
fn quantize_refuses_non_finite_unless_allowed() {
    for per_channel in [false, true] {
        let dir = tempfile::tempdir().unwrap();
        // dims [2, 2], no graph: channel axis 1 (columns).
        let path = one_param(
            dir.path(),
            vec![2, 2],
            &[1.0, -2.0, f32::INFINITY, f32::NAN],
        );
        let opts = QuantizeOptions { per_channel };
        let e = quantize(
            &path,
            "base",
            "int8",
            &opts,
            &AllowValues::default(),
            &fast(),
        )
        .unwrap_err();
        assert_unrepresentable(&e, "non_finite");
        assert!(e.to_string().contains("2 value(s)"), "{e}");
        assert!(e.to_string().contains("first at flat index 2: inf"), "{e}");
        assert_eq!(Archive::open(&path).unwrap().tags(), ["base"]);
        let allow = AllowValues {
            non_finite: true,
            ..AllowValues::default()
        };
        let r = quantize(&path, "base", "int8", &opts, &allow, &fast()).unwrap();
        assert_eq!(r.params[0].non_finite, 2);
        let archive = Archive::open(&path).unwrap();
        let t = archive.tag("int8").unwrap();
        let q = t.param("w").unwrap().view().to_vec::<i8>().unwrap();
        let s = f32s(&archive, "int8", "w@scale");
        if per_channel {
            assert_eq!(
                (q, s),
                (vec![127, -127, 0, 0], vec![1.0 / 127.0, 2.0 / 127.0])
            );
        } else {
            assert_eq!((q, s), (vec![64, -127, 0, 0], vec![2.0 / 127.0]));
        }
    }
}

/// FP32 bits, then the FP16 and BF16 bits numpy 2.4.6 (`astype(np.float16)`) and
/// ml_dtypes 0.6.0 (`astype(ml_dtypes.bfloat16)`) give for them: signed zeros, FP16's
/// range edge (65504, 65520 = the tie that rounds to inf), subnormals and their ties,
/// ties to even in the normal range, BF16's range edge, infinities.
const ROUNDING: [(u32, u16, u16); 28] = [
    (0x00000000, 0x0000, 0x0000),
    (0x80000000, 0x8000, 0x8000),
    (0x477FF000, 0x7C00, 0x4780),
    (0x477FEFFF, 0x7BFF, 0x4780),
    (0x477FE000, 0x7BFF, 0x4780),
    (0xC77FF000, 0xFC00, 0xC780),
    (0x33000000, 0x0000, 0x3300),
    (0x33000001, 0x0001, 0x3300),
    (0x32FFFFFF, 0x0000, 0x3300),
    (0x33C00000, 0x0002, 0x33C0),
    (0x387FC000, 0x03FF, 0x3880),
    (0x387FE000, 0x0400, 0x3880),
    (0x38800000, 0x0400, 0x3880),
    (0x3F801000, 0x3C00, 0x3F80),
    (0x3F803000, 0x3C02, 0x3F80),
    (0x3F802000, 0x3C01, 0x3F80),
    (0x3F801001, 0x3C01, 0x3F80),
    (0x7F800000, 0x7C00, 0x7F80),
    (0xFF800000, 0xFC00, 0xFF80),
    (0x7F7FFFFF, 0x7C00, 0x7F80),
    (0x3F808000, 0x3C04, 0x3F80),
    (0x3F818000, 0x3C0C, 0x3F82),
    (0x3F80C000, 0x3C06, 0x3F81),
    (0x7F7F8000, 0x7C00, 0x7F80),
    (0x7F7F7FFF, 0x7C00, 0x7F7F),
    (0x00008000, 0x0000, 0x0000),
    (0x00018000, 0x0000, 0x0002),
    (0x00000001, 0x0000, 0x0000),
];

/// NaNs with payloads. numpy keeps a signalling NaN signalling (0x7FA00000 -> 0x7D00) and
/// ml_dtypes makes every NaN 0x7FC0; the cast (the `half` crate) makes them quiet and
/// keeps the sign and the top payload bits, as IEEE 754 recommends.
const NANS: [u32; 5] = [0x7FC00000, 0xFFC00001, 0x7F800001, 0x7FA00000, 0x7FFFFFFF];

#[test]
fn cast_rounds_like_numpy_to_the_bit() {
    let dir = tempfile::tempdir().unwrap();
    let bits: Vec<u32> = ROUNDING.iter().map(|r| r.0).chain(NANS).collect();
    let src: Vec<f32> = bits.iter().map(|&b| f32::from_bits(b)).collect();
    let path = one_param(dir.path(), vec![src.len() as u64], &src);
    let allow = AllowValues {
        non_finite: true,
        overflow: true,
    };
    cast(&path, "base", "fp16", DType::Fp16, &allow, &fast()).unwrap();
    cast(&path, "base", "bf16", DType::Bf16, &allow, &fast()).unwrap();
    let archive = Archive::open(&path).unwrap();
    let h = archive.tag("fp16").unwrap().param("w").unwrap();
    let h: Vec<u16> = h
        .view()
        .to_vec::<half::f16>()
        .unwrap()
        .iter()
        .map(|x| x.to_bits())
        .collect();
    let b = archive.tag("bf16").unwrap().param("w").unwrap();
    let b: Vec<u16> = b
        .view()
        .to_vec::<half::bf16>()
        .unwrap()
        .iter()
        .map(|x| x.to_bits())
        .collect();
    let want_h: Vec<u16> = ROUNDING
        .iter()
        .map(|r| r.1)
        .chain(
            NANS.iter()
                .map(|&x| ((x >> 16) as u16 & 0x8000) | 0x7E00 | ((x >> 13) as u16 & 0x3FF)),
        )
        .collect();
    let want_b: Vec<u16> = ROUNDING
        .iter()
        .map(|r| r.2)
        .chain(NANS.iter().map(|&x| (x >> 16) as u16 | 0x0040))
        .collect();
    assert_eq!(h, want_h);
    assert_eq!(b, want_b);
}

/// numpy 2.4.6 (seeded normal values × column ranges 1, 0.01, 0, 300; an all-zero column
/// with a -0.0; a column whose largest magnitude is negative), quantized in float32 as
/// `scale = max|x| / 127`, `q = clip(rint(x / scale), -127, 127)` (0 where the scale is
/// 0), and dequantized as Paddle's cast + elementwise_mul compute it, `float32(q) * scale`.
const NP_X: [u32; 12] = [
    0x3aa13d19, 0x3b43c92f, 0x80000000, 0xc38596ba, 0xbee8ca9c, 0xbd4ccccd, 0x0, 0x43c90844,
    0xbefc027e, 0xbbcb5135, 0x0, 0x42d621d8,
];
const NP_Q_TENSOR: [i8; 12] = [0, 0, 0, -84, 0, 0, 0, 127, 0, 0, 0, 34];
const NP_SCALE_TENSOR: [u32; 1] = [0x404a9d7f];
const NP_DEQ_TENSOR: [u32; 12] = [
    0x0, 0x0, 0x0, 0xc384f75b, 0x0, 0x0, 0x0, 0x43c90844, 0x0, 0x0, 0x0, 0x42d74757,
];
const NP_Q_CHANNEL: [i8; 12] = [0, 8, 0, -84, -117, -127, 0, 127, -127, -16, 0, 34];
const NP_SCALE_CHANNEL: [u32; 4] = [0x3b7dfe7b, 0x39ce69a0, 0x0, 0x404a9d7f];
const NP_DEQ_CHANNEL: [u32; 12] = [
    0x0, 0x3b4e69a0, 0x0, 0xc384f75b, 0xbee82a9c, 0xbd4ccccd, 0x0, 0x43c90844, 0xbefc027e,
    0xbbce69a0, 0x0, 0x42d74757,
];

/// Per channel or not, then numpy's q, scale bits and dequantized bits.
type NumpyCase = (bool, &'static [i8], &'static [u32], &'static [u32]);

#[test]
fn quantize_matches_numpy_to_the_bit_and_diff_measures_the_dequantized_error() {
    let x: Vec<f32> = NP_X.iter().map(|&b| f32::from_bits(b)).collect();
    let cases: [NumpyCase; 2] = [
        (false, &NP_Q_TENSOR, &NP_SCALE_TENSOR, &NP_DEQ_TENSOR),
        (true, &NP_Q_CHANNEL, &NP_SCALE_CHANNEL, &NP_DEQ_CHANNEL),
    ];
    for (per_channel, want_q, want_s, want_deq) in cases {
        let dir = tempfile::tempdir().unwrap();
        let path = one_param(dir.path(), vec![3, 4], &x);
        let opts = QuantizeOptions { per_channel };
        quantize(
            &path,
            "base",
            "int8",
            &opts,
            &AllowValues::default(),
            &fast(),
        )
        .unwrap();
        let archive = Archive::open(&path).unwrap();
        let t = archive.tag("int8").unwrap();
        let q = t.param("w").unwrap().view().to_vec::<i8>().unwrap();
        assert_eq!(q, want_q, "per_channel {per_channel}");
        let s = f32s(&archive, "int8", "w@scale");
        let s_bits: Vec<u32> = s.iter().map(|v| v.to_bits()).collect();
        assert_eq!(s_bits, want_s, "per_channel {per_channel}");
        // What the exported graph computes: float32(q) * scale of the element's column.
        let deq: Vec<f32> = q
            .iter()
            .enumerate()
            .map(|(i, &v)| f32::from(v) * s[if per_channel { i % 4 } else { 0 }])
            .collect();
        let deq_bits: Vec<u32> = deq.iter().map(|v| v.to_bits()).collect();
        let want_bits: Vec<u32> = want_deq.to_vec();
        assert_eq!(deq_bits, want_bits, "per_channel {per_channel}");
        // diff dequantizes the same way: its error is the largest |x - deq|.
        let d = diff_tags(&archive, "base", "int8").unwrap();
        let c = d.changed.iter().find(|c| c.name == "w").unwrap();
        let want_abs = x
            .iter()
            .zip(&deq)
            .map(|(&a, &b)| (f64::from(a) - f64::from(b)).abs())
            .fold(0f64, f64::max);
        assert!(c.dequantized);
        assert_eq!(c.max_abs_diff, Some(want_abs));
        let range = x.iter().map(|v| f64::from(v.abs())).fold(0f64, f64::max);
        assert_eq!(c.max_rel_diff, Some(want_abs / range));
    }
}

#[test]
fn quantize_refuses_a_cast_variant_without_a_graph() {
    let dir = tempfile::tempdir().unwrap();
    let path = one_param(dir.path(), vec![2, 2], &[1.0, 2.0, 3.0, 4.0]);
    cast(
        &path,
        "base",
        "fp16",
        DType::Fp16,
        &AllowValues::default(),
        &fast(),
    )
    .unwrap();
    // Before the fix this quantized the FP16 copies and recorded "fp16" as the source.
    let e = quantize(
        &path,
        "fp16",
        "int8",
        &QuantizeOptions::default(),
        &AllowValues::default(),
        &fast(),
    )
    .unwrap_err();
    assert!(matches!(e.kind(), ErrorKind::InvalidInput(_)), "{e}");
    let text = e.to_string();
    assert!(
        text.contains("tag \"fp16\" is a cast variant (FP16)")
            && text.contains("quantize its source tag \"base\" instead"),
        "{text}"
    );
    assert_eq!(Archive::open(&path).unwrap().tags(), ["base", "fp16"]);
    // A tag that holds FP16 values of its own (no cast record) is a float tag: quantized.
    let dir = tempfile::tempdir().unwrap();
    let v: Vec<half::f16> = [1.0f32, -2.0, 0.5, 4.0]
        .iter()
        .map(|&x| half::f16::from_f32(x))
        .collect();
    let tag = TagBuilder::new("half").param("w", Tensor::from_slice(vec![2, 2], &v).unwrap());
    let path = archive_with(dir.path(), tag);
    let r = quantize(
        &path,
        "half",
        "int8",
        &QuantizeOptions::default(),
        &AllowValues::default(),
        &fast(),
    )
    .unwrap();
    assert_eq!(quantized_names(&r), [("w".to_string(), None)]);
}

#[test]
fn edge_shapes_and_non_float_params() {
    for per_channel in [false, true] {
        let dir = tempfile::tempdir().unwrap();
        let tag = TagBuilder::new("base")
            .param("scalar", Tensor::from_slice(vec![], &[3.0f32]).unwrap())
            .param(
                "vec",
                Tensor::from_slice(vec![3], &[1.0f32, 2.0, 3.0]).unwrap(),
            )
            .param("rows0", Tensor::from_slice::<f32>(vec![0, 3], &[]).unwrap())
            .param("cols0", Tensor::from_slice::<f32>(vec![3, 0], &[]).unwrap())
            .param(
                "zeros",
                Tensor::from_slice(vec![2, 3], &[0.0f32; 6]).unwrap(),
            )
            .param(
                "ids",
                Tensor::from_slice(vec![2, 2], &[1i64, 2, 3, 4]).unwrap(),
            )
            .param(
                "bytes",
                Tensor::from_slice(vec![2, 2], &[1u8, 2, 3, 4]).unwrap(),
            );
        let path = archive_with(dir.path(), tag);
        let opts = QuantizeOptions { per_channel };
        let r = quantize(
            &path,
            "base",
            "int8",
            &opts,
            &AllowValues::default(),
            &fast(),
        )
        .unwrap();
        // Rank >= 2 float params only; an empty one gets scales of its channel count.
        let axis = |a| if per_channel { Some(a) } else { None };
        assert_eq!(
            quantized_names(&r),
            [
                ("rows0".to_string(), axis(1)),
                ("cols0".to_string(), axis(1)),
                ("zeros".to_string(), axis(1)),
            ]
        );
        let archive = Archive::open(&path).unwrap();
        let dims = |n: &str| {
            archive
                .tag("int8")
                .unwrap()
                .param(n)
                .unwrap()
                .view()
                .dims()
                .to_vec()
        };
        let want = |c: u64| if per_channel { vec![c] } else { vec![1] };
        assert_eq!(dims("rows0@scale"), want(3));
        assert_eq!(dims("cols0@scale"), want(0));
        // An all-zero tensor: scale 0, q 0, no division by zero, and diff says error 0.
        assert!(
            f32s(&archive, "int8", "zeros@scale")
                .iter()
                .all(|&s| s == 0.0)
        );
        let t = archive.tag("int8").unwrap();
        assert_eq!(
            t.param("zeros").unwrap().view().to_vec::<i8>().unwrap(),
            [0; 6]
        );
        let d = diff_tags(&archive, "base", "int8").unwrap();
        let z = d.changed.iter().find(|c| c.name == "zeros").unwrap();
        assert_eq!((z.max_abs_diff, z.max_rel_diff), (Some(0.0), None));
        for n in ["scalar", "vec", "ids", "bytes"] {
            assert!(d.shared.iter().any(|s| s == n), "{n} shared: {d:?}");
        }
        let v = Archive::open(&path).unwrap().verify();
        assert!(v.is_ok(), "{v:?}");
        let c = cast(
            &path,
            "base",
            "fp16",
            DType::Fp16,
            &AllowValues::default(),
            &fast(),
        )
        .unwrap();
        let cast_names: Vec<&str> = c.changed().map(|p| p.name.as_str()).collect();
        assert_eq!(cast_names, ["scalar", "vec", "rows0", "cols0", "zeros"]);
    }
}

#[test]
fn diff_of_non_finite_values() {
    let dir = tempfile::tempdir().unwrap();
    let t = |name: &str, v: &[f32]| {
        TagBuilder::new(name).param("w", Tensor::from_slice(vec![v.len() as u64], v).unwrap())
    };
    let (nan, inf) = (f32::NAN, f32::INFINITY);
    let path = dir.path().join("m.zip");
    let mut w = ArchiveWriter::create_with(&path, &fast()).unwrap();
    w.add_tag(t("a", &[nan, inf, 1.0, -2.0])).unwrap();
    w.add_tag(t("close", &[nan, inf, 1.0, -2.5])).unwrap();
    w.add_tag(t("nan", &[1.0, inf, 1.0, -2.0])).unwrap();
    w.add_tag(t("neg", &[nan, -inf, 1.0, -2.0])).unwrap();
    w.add_tag(t("zero", &[-0.0, 0.0])).unwrap();
    w.add_tag(t("zero2", &[0.0, 0.0])).unwrap();
    w.finish().unwrap();
    let archive = Archive::open(&path).unwrap();
    let one = |a: &str, b: &str| {
        let d = diff_tags(&archive, a, b).unwrap();
        assert_eq!(d.changed.len(), 1, "{d:?}");
        (d.changed[0].max_abs_diff, d.changed[0].max_rel_diff)
    };
    let finite = |a: &str, b: &str| {
        let d = diff_tags(&archive, a, b).unwrap();
        let c = &d.changed[0];
        (
            c.non_finite_mismatches,
            c.finite_max_abs_diff,
            c.finite_max_rel_diff,
        )
    };
    // NaN = NaN and inf = inf; the range is the largest finite |a|.
    assert_eq!(one("a", "close"), (Some(0.5), Some(0.25)));
    assert_eq!(finite("a", "close"), (0, Some(0.5), Some(0.25)));
    assert_eq!(one("a", "nan"), (Some(f64::INFINITY), Some(f64::INFINITY)));
    assert_eq!(one("a", "neg"), (Some(f64::INFINITY), Some(f64::INFINITY)));
    // The mismatched NaN/inf are counted, and the finite values' error is still given.
    assert_eq!(finite("a", "nan"), (1, Some(0.0), Some(0.0)));
    assert_eq!(finite("nan", "close"), (1, Some(0.5), Some(0.25)));
    // -0.0 and 0.0 differ in bytes, not in value; an all-zero range has no relative.
    assert_eq!(one("zero", "zero2"), (Some(0.0), None));
}

/// A weight whose readers disagree on its channel axis (a matmul_v2 reading it as is and
/// one reading it transposed) was quantized per tensor with nothing said: the report
/// says why. Readers whose rules name the same axis of the weight (mul's last axis and
/// conv2d_transpose's axis 1 of a rank-2 weight) agree: per channel.
#[test]
fn per_channel_fallback_to_per_tensor_carries_its_reason() {
    use modelzip::graph::{Op, Var, VarKind};
    let mut g = Graph::from(modelzip::graph::Program::default());
    let b = &mut g.prog_mut().blocks[0];
    for v in ["w", "v"] {
        b.vars
            .push(Var::new(v, VarKind::Parameter, DType::Fp32, vec![4, 3]));
    }
    b.ops.push(
        Op::new("", "matmul_v2")
            .input("X", &["x"])
            .input("Y", &["w"])
            .output("Out", &["y1"]),
    );
    b.ops.push(
        Op::new("", "matmul_v2")
            .input("X", &["x2"])
            .input("Y", &["w"])
            .attr("trans_y", AttrValue::Bool(true))
            .output("Out", &["y2"]),
    );
    b.ops.push(
        Op::new("", "mul")
            .input("X", &["x"])
            .input("Y", &["v"])
            .output("Out", &["y3"]),
    );
    b.ops.push(
        Op::new("", "conv2d_transpose")
            .input("Input", &["x3"])
            .input("Filter", &["v"])
            .output("Output", &["y4"]),
    );
    let values: Vec<f32> = (0..12).map(|i| i as f32 - 5.5).collect();
    let t = Tensor::from_slice(vec![4, 3], &values).unwrap();
    let tag = TagBuilder::new("fp32")
        .graph(
            GraphFormat::FlatBuffers,
            g.encode(GraphFormat::FlatBuffers).unwrap(),
        )
        .param("v", t.clone())
        .param("w", t);
    let dir = tempfile::tempdir().unwrap();
    let path = archive_with(dir.path(), tag);
    let change = |r: &VariantReport, name: &str| {
        r.params
            .iter()
            .find(|p| p.name == name)
            .unwrap()
            .change
            .clone()
    };
    let r = quantize(
        &path,
        "fp32",
        "int8",
        &QuantizeOptions { per_channel: true },
        &AllowValues::default(),
        &fast(),
    )
    .unwrap();
    assert_eq!(
        change(&r, "w"),
        ParamChange::Quantized {
            axis: None,
            scale: "w@scale".into(),
            per_tensor_reason: Some(
                "the ops that read it disagree on its output-channel axis \
                 (matmul_v2 along axis 1, matmul_v2 along axis 0)"
                    .into()
            ),
        }
    );
    assert_eq!(
        change(&r, "v"),
        ParamChange::Quantized {
            axis: Some(1),
            scale: "v@scale".into(),
            per_tensor_reason: None,
        }
    );
    // Per tensor as asked: no reason to give.
    let r = quantize(
        &path,
        "fp32",
        "int8t",
        &QuantizeOptions::default(),
        &AllowValues::default(),
        &fast(),
    )
    .unwrap();
    for name in ["w", "v"] {
        assert!(
            matches!(
                change(&r, name),
                ParamChange::Quantized {
                    axis: None,
                    per_tensor_reason: None,
                    ..
                }
            ),
            "{name}"
        );
    }
}

/// `e` refuses values the target type cannot hold, naming `allow` as the way to allow them.
fn assert_unrepresentable(e: &modelzip::Error, allow: &str) {
    assert!(
        matches!(e.kind(), ErrorKind::UnrepresentableValues { allow: a, .. } if *a == allow),
        "{e}"
    );
}

/// Two params of equal values are one file of the new tag: the report counts its bytes
/// once (as the tag's own entries hold them), the second param with none of its own.
#[test]
fn a_variant_report_counts_a_file_two_params_share_once() {
    let dir = tempfile::tempdir().unwrap();
    let w: Vec<f32> = (0..64).map(|i| (i as f32 * 0.37).sin()).collect();
    let tag = TagBuilder::new("base")
        .param("a", Tensor::from_slice(vec![8, 8], &w).unwrap())
        .param("b", Tensor::from_slice(vec![8, 8], &w).unwrap());
    let path = archive_with(dir.path(), tag);
    let q = QuantizeOptions { per_channel: false };
    let rq = quantize(&path, "base", "q", &q, &AllowValues::default(), &fast()).unwrap();
    let rc = cast(
        &path,
        "base",
        "h",
        DType::Fp16,
        &AllowValues::default(),
        &fast(),
    )
    .unwrap();
    let archive = Archive::open(&path).unwrap();
    for (r, name) in [(&rq, "q"), (&rc, "h")] {
        let t = archive.tag(name).unwrap();
        let files: std::collections::BTreeSet<&str> = t
            .params()
            .iter()
            .filter(|p| !p.location.shared)
            .map(|p| p.location.entry())
            .collect();
        // a and b (and their scales) are one file each.
        assert!(files.len() < t.params().len(), "{name}: {files:?}");
        let own: u64 = files
            .iter()
            .map(|e| archive.entry_stored_size(e).unwrap())
            .sum();
        assert_eq!(r.stored_bytes(), own, "{name}");
        let b = r.params.iter().find(|p| p.name == "b").unwrap();
        assert_eq!((b.shared, b.stored_bytes), (false, 0), "{name}");
    }
}

/// A weight with no values (a dim of 0) whose channels pass the bound an empty weight's
/// scales have is quantized per tensor, saying why (2^40 of them asked for 4 TiB of
/// scales); one under it gets its scales, as `edge_shapes_and_non_float_params` says.
#[test]
fn an_empty_weight_asked_per_channel_is_quantized_per_tensor() {
    let dir = tempfile::tempdir().unwrap();
    let tag = TagBuilder::new("base")
        .param(
            "empty",
            Tensor::from_bytes(DType::Fp32, vec![0, 1 << 40], Vec::new()).unwrap(),
        )
        .param(
            "w",
            Tensor::from_slice(vec![2, 2], &[1.0f32, -2.0, 3.0, 0.5]).unwrap(),
        );
    let path = archive_with(dir.path(), tag);
    let q = QuantizeOptions { per_channel: true };
    let r = quantize(&path, "base", "q", &q, &AllowValues::default(), &fast()).unwrap();
    let empty = r.params.iter().find(|p| p.name == "empty").unwrap();
    match &empty.change {
        ParamChange::Quantized {
            axis,
            per_tensor_reason,
            ..
        } => {
            assert_eq!(*axis, None);
            let why = per_tensor_reason.as_deref().unwrap_or_default();
            assert!(why.starts_with("it holds no values"), "{why}");
        }
        c => panic!("{c:?}"),
    }
    assert_eq!(quantized_names(&r)[1], ("w".to_string(), Some(1)));
    let archive = Archive::open(&path).unwrap();
    assert!(archive.verify().is_ok());
}
