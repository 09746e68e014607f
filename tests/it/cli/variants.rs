//! The variant commands through the real binary: quantize, cast, diff.

use crate::support::ProgramOf;

use super::harness::{expect_error, fixture, json_of, modelzip};
use serde_json::Value;
use std::path::{Path, PathBuf};

/// An archive with tag fp32: the 3.3.1 mlp fixture's persistables and graph.
fn mlp_archive(dir: &Path) -> PathBuf {
    let a = dir.join("m.zip");
    modelzip()
        .arg("pack")
        .arg(&a)
        .arg(fixture("paddle/3.3.1/mlp_persistables"))
        .args(["--tag", "fp32", "--graph"])
        .arg(fixture("paddle/3.3.1/mlp.pdmodel"))
        .args(["-q", "--wait"])
        .assert()
        .success();
    a
}

fn param<'a>(doc: &'a Value, name: &str) -> &'a Value {
    doc["params"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["name"] == name)
        .unwrap_or_else(|| panic!("{name} not in {doc}"))
}

#[test]
fn quantize_json_describes_the_new_tag() {
    let dir = tempfile::tempdir().unwrap();
    let a = mlp_archive(dir.path());
    let doc = json_of(modelzip().arg("quantize").arg(&a).args([
        "--from",
        "FP32",
        "--tag",
        "int8",
        "--per-channel",
        "--json",
        "--wait",
    ]));
    assert_eq!(doc["tag"], "int8");
    assert_eq!(doc["source_tag"], "fp32");
    assert_eq!(doc["graph"], "graph.pdmodel");
    assert_eq!(doc["changed"], 2);
    assert_eq!(doc["shared"], 2);
    assert_eq!(doc["params"].as_array().unwrap().len(), 6);
    let w = param(&doc, "fc_0.w_0");
    assert_eq!(w["change"], "quantized");
    assert_eq!(w["dtype"], "INT8");
    assert_eq!(w["axis"], 1);
    assert_eq!(w["scale"], "fc_0.w_0@scale");
    assert_eq!(w["shared"], false);
    let s = param(&doc, "fc_0.w_0@scale");
    assert_eq!(s["change"], "scale");
    assert_eq!(s["of"], "fc_0.w_0");
    assert_eq!(s["dims"], serde_json::json!([16]));
    let b = param(&doc, "fc_0.b_0");
    assert_eq!(b["change"], "unchanged");
    assert_eq!(b["shared"], true);
    assert_eq!(b["stored_bytes"], 0);
    let stored: u64 = doc["params"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["stored_bytes"].as_u64().unwrap())
        .sum();
    assert_eq!(doc["stored_bytes"].as_u64(), Some(stored));
    // The tag is there and newest; show agrees on sharing.
    let show = json_of(modelzip().arg("show").arg(&a).arg("--json"));
    assert_eq!(show["tag"], "int8");
    assert_eq!(param(&show, "fc_0.b_0")["shared_from"], "fp32");
    modelzip().arg("verify").arg(&a).assert().success();
}

#[test]
fn cast_json_and_human_output() {
    let dir = tempfile::tempdir().unwrap();
    let a = mlp_archive(dir.path());
    let doc = json_of(modelzip().arg("cast").arg(&a).args([
        "--from", "fp32", "--tag", "bf16", "--dtype", "bf16", "--json", "--wait",
    ]));
    assert_eq!(doc["changed"], 4);
    let w = param(&doc, "fc_1.w_0");
    assert_eq!(w["change"], "cast");
    assert_eq!(w["from"], "FP32");
    assert_eq!(w["dtype"], "BF16");
    let out = modelzip()
        .arg("cast")
        .arg(&a)
        .args([
            "--from", "fp32", "--tag", "fp16", "--dtype", "fp16", "--wait",
        ])
        .output()
        .unwrap();
    assert!(out.status.success());
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(
        text.starts_with("added tag fp16 from fp32: 4 param(s) cast"),
        "{text}"
    );
}

#[test]
fn diff_json_and_exit_code() {
    let dir = tempfile::tempdir().unwrap();
    let a = mlp_archive(dir.path());
    modelzip()
        .arg("quantize")
        .arg(&a)
        .args(["--from", "fp32", "--tag", "int8", "-q", "--wait"])
        .assert()
        .success();
    let doc = json_of(
        modelzip()
            .arg("diff")
            .arg(&a)
            .args(["fp32", "int8", "--json"]),
    );
    assert_eq!(doc["tag_a"], "fp32");
    assert_eq!(doc["tag_b"], "int8");
    assert_eq!(doc["identical"], false);
    assert_eq!(doc["graph"], "changed");
    assert_eq!(
        doc["added"],
        serde_json::json!(["fc_0.w_0@scale", "fc_1.w_0@scale"])
    );
    assert_eq!(doc["removed"], serde_json::json!([]));
    assert_eq!(doc["shared"], serde_json::json!(["fc_0.b_0", "fc_1.b_0"]));
    assert_eq!(doc["copied"], serde_json::json!([]));
    let changed = doc["changed"].as_array().unwrap();
    assert_eq!(changed.len(), 2);
    for c in changed {
        assert_eq!(c["dtype_a"], "FP32");
        assert_eq!(c["dtype_b"], "INT8");
        assert_eq!(c["dequantized"], true);
        assert_eq!(c["dims_a"], c["dims_b"]);
        let abs = c["max_abs_diff"].as_f64().unwrap();
        let rel = c["max_rel_diff"].as_f64().unwrap();
        assert!(abs > 0.0 && rel > 0.0 && rel < 0.01, "{c}");
    }
    // --exit-code: 1 when they differ, 0 when identical; without it, 0 either way.
    modelzip()
        .arg("diff")
        .arg(&a)
        .args(["fp32", "int8", "--exit-code"])
        .assert()
        .code(1);
    modelzip()
        .arg("diff")
        .arg(&a)
        .args(["fp32", "int8"])
        .assert()
        .success();
    let same =
        json_of(
            modelzip()
                .arg("diff")
                .arg(&a)
                .args(["int8", "INT8", "--json", "--exit-code"]),
        );
    assert_eq!(same["identical"], true);
    assert_eq!(same["graph"], "same");
}

#[test]
fn errors_are_one_line() {
    let dir = tempfile::tempdir().unwrap();
    let a = mlp_archive(dir.path());
    let e = expect_error(
        modelzip()
            .arg("quantize")
            .arg(&a)
            .args(["--from", "nope", "--tag", "x"]),
    );
    assert!(e.contains("no tag \"nope\"; tags: fp32"), "{e}");
    let e = expect_error(
        modelzip()
            .arg("cast")
            .arg(&a)
            .args(["--from", "fp32", "--tag", "FP32", "--dtype", "fp16"]),
    );
    assert!(e.contains("already exists"), "{e}");
    let e = expect_error(modelzip().arg("diff").arg(&a).args(["fp32", "missing"]));
    assert!(e.contains("missing"), "{e}");
    let e = expect_error(
        modelzip()
            .arg("diff")
            .arg(dir.path().join("none.zip"))
            .args(["a", "b"]),
    );
    assert!(e.contains("cannot open"), "{e}");
}

#[test]
fn variants_of_variants_are_refused_in_one_line() {
    let dir = tempfile::tempdir().unwrap();
    let a = mlp_archive(dir.path());
    for args in [
        [
            "quantize",
            "--from",
            "fp32",
            "--tag",
            "int8",
            "--per-channel",
        ]
        .as_slice(),
        &["cast", "--from", "fp32", "--tag", "fp16", "--dtype", "fp16"],
    ] {
        modelzip()
            .arg(args[0])
            .arg(&a)
            .args(&args[1..])
            .args(["-q", "--wait"])
            .assert()
            .success();
    }
    let tags_before = json_of(modelzip().arg("tags").arg(&a).arg("--json"));
    let e = expect_error(modelzip().arg("quantize").arg(&a).args([
        "--from",
        "int8",
        "--tag",
        "int8-again",
        "--wait",
    ]));
    assert!(
        e.contains("already has a parameter \"fc_0.w_0@scale\"")
            && e.contains("quantize its source tag \"fp32\" instead"),
        "{e}"
    );
    let e = expect_error(modelzip().arg("cast").arg(&a).args([
        "--from",
        "int8",
        "--tag",
        "int8-fp16",
        "--dtype",
        "fp16",
        "--wait",
    ]));
    assert!(
        e.contains("is quantized") && e.contains("cast its source tag \"fp32\" instead"),
        "{e}"
    );
    let e = expect_error(modelzip().arg("cast").arg(&a).args([
        "--from", "fp16", "--tag", "bf16", "--dtype", "bf16", "--wait",
    ]));
    assert!(
        e.contains("has no FP32 parameter to cast to BF16: its parameters are FP16"),
        "{e}"
    );
    let e = expect_error(modelzip().arg("quantize").arg(&a).args([
        "--from",
        "fp16",
        "--tag",
        "fp16-int8",
        "--wait",
    ]));
    assert!(e.contains("has nothing to quantize"), "{e}");
    // Nothing was added.
    let tags_after = json_of(modelzip().arg("tags").arg(&a).arg("--json"));
    assert_eq!(tags_after, tags_before);
}

/// An archive with tag fp32: parameter `w` of dims [2, 2] holding `values`.
fn archive_of(dir: &Path, values: &[f32]) -> PathBuf {
    let a = dir.join("v.zip");
    let mut w = modelzip::ArchiveWriter::create(&a).unwrap();
    w.add_tag(modelzip::TagBuilder::new("fp32").param(
        "w",
        modelzip::Tensor::from_slice(vec![2, 2], values).unwrap(),
    ))
    .unwrap();
    w.finish().unwrap();
    a
}

fn tags_of(a: &Path) -> Value {
    json_of(modelzip().arg("tags").arg(a).arg("--json"))
}

#[test]
fn unrepresentable_values_are_refused_with_the_flag_to_allow_them() {
    let dir = tempfile::tempdir().unwrap();
    let a = archive_of(dir.path(), &[0.5, 1e6, 2.0, -1e6]);
    let before = tags_of(&a);
    let e = expect_error(modelzip().arg("cast").arg(&a).args([
        "--from", "fp32", "--tag", "fp16", "--dtype", "fp16", "--wait",
    ]));
    assert!(
        e.contains("parameter \"w\": 2 value(s) are beyond FP16's range")
            && e.contains("first at flat index 1: 1000000")
            && e.ends_with("pass --allow-overflow to cast anyway"),
        "{e}"
    );
    assert_eq!(tags_of(&a), before, "nothing written");
    let doc = json_of(modelzip().arg("cast").arg(&a).args([
        "--from",
        "fp32",
        "--tag",
        "fp16",
        "--dtype",
        "fp16",
        "--allow-overflow",
        "--json",
        "--wait",
    ]));
    let w = param(&doc, "w");
    assert_eq!((&w["overflowed"], &w["non_finite"]), (&2.into(), &0.into()));
    let out = modelzip()
        .arg("cast")
        .arg(&a)
        .args([
            "--from",
            "fp32",
            "--tag",
            "fp16b",
            "--dtype",
            "fp16",
            "--allow-overflow",
            "--wait",
        ])
        .output()
        .unwrap();
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(
        text.contains("; 2 value(s) beyond range stored as +-inf"),
        "{text}"
    );

    std::fs::create_dir(dir.path().join("q")).unwrap();
    let a = archive_of(&dir.path().join("q"), &[1.0, f32::NAN, 2.0, 3.0]);
    let e = expect_error(modelzip().arg("quantize").arg(&a).args([
        "--from",
        "fp32",
        "--tag",
        "int8",
        "--per-channel",
        "--wait",
    ]));
    assert!(
        e.contains(
            "parameter \"w\": 1 value(s) are NaN or infinite (the first at flat index 1: NaN)"
        ) && e.ends_with("pass --allow-non-finite to quantize anyway"),
        "{e}"
    );
    let doc = json_of(modelzip().arg("quantize").arg(&a).args([
        "--from",
        "fp32",
        "--tag",
        "int8",
        "--per-channel",
        "--allow-non-finite",
        "--json",
        "--wait",
    ]));
    assert_eq!(param(&doc, "w")["non_finite"], 1);
    // diff: the NaN quantized to 0 makes the difference inf; the pair is counted and
    // the finite values' error given beside it.
    let d = json_of(
        modelzip()
            .arg("diff")
            .arg(&a)
            .args(["fp32", "int8", "--json"]),
    );
    let w = &d["changed"][0];
    assert_eq!(
        (&w["max_abs_diff"], &w["non_finite_mismatches"]),
        (&Value::from("inf"), &Value::from(1))
    );
    assert!(w["finite_max_abs_diff"].as_f64().unwrap() < 0.02, "{w}");
    let out = modelzip()
        .arg("diff")
        .arg(&a)
        .args(["fp32", "int8"])
        .output()
        .unwrap();
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(
        text.contains(
            "max abs inf rel inf (dequantized) (1 NaN/inf mismatch(es); finite values: max abs "
        ),
        "{text}"
    );
}

/// `quantize --per-channel` fell back to per tensor for a weight its ops read along
/// different axes with nothing said but "per tensor": the text says why, --json has
/// `per_tensor_reason` (null when quantized as asked).
#[test]
fn quantize_says_why_a_weight_is_not_per_channel() {
    use modelzip::graph::{AttrValue, Op, Var, VarKind};
    use modelzip::{ArchiveWriter, DType, TagBuilder, Tensor};
    use modelzip::{Graph, GraphFormat};
    let mut g = Graph::from(modelzip::graph::Program::default());
    let b = &mut g.prog_mut().blocks[0];
    for v in ["w", "v"] {
        b.vars
            .push(Var::new(v, VarKind::Parameter, DType::Fp32, vec![4, 3]));
    }
    for (y, trans) in [("w", false), ("w", true), ("v", false)] {
        b.ops.push(
            Op::new("", "matmul_v2")
                .input("X", &["x"])
                .input("Y", &[y])
                .attr("trans_y", AttrValue::Bool(trans))
                .output("Out", &["y"]),
        );
    }
    let values: Vec<f32> = (0..12).map(|i| i as f32 - 5.5).collect();
    let t = Tensor::from_slice(vec![4, 3], &values).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let a = dir.path().join("m.zip");
    let mut w = ArchiveWriter::create(&a).unwrap();
    w.add_tag(
        TagBuilder::new("fp32")
            .graph(
                GraphFormat::FlatBuffers,
                g.encode(GraphFormat::FlatBuffers).unwrap(),
            )
            .param("v", t.clone())
            .param("w", t),
    )
    .unwrap();
    w.finish().unwrap();
    let why = "the ops that read it disagree on its output-channel axis \
               (matmul_v2 along axis 1, matmul_v2 along axis 0)";
    let doc = json_of(modelzip().arg("quantize").arg(&a).args([
        "--from",
        "fp32",
        "--tag",
        "int8",
        "--per-channel",
        "--json",
        "--wait",
    ]));
    assert_eq!(param(&doc, "w")["axis"], Value::Null);
    assert_eq!(param(&doc, "w")["per_tensor_reason"], why);
    assert_eq!(param(&doc, "v")["axis"], 1);
    assert_eq!(param(&doc, "v")["per_tensor_reason"], Value::Null);
    let out = modelzip()
        .arg("quantize")
        .arg(&a)
        .args([
            "--from",
            "fp32",
            "--tag",
            "int8b",
            "--per-channel",
            "--wait",
        ])
        .output()
        .unwrap();
    assert!(out.status.success());
    let text = String::from_utf8(out.stdout).unwrap();
    let line = text
        .lines()
        .find(|l| l.trim_start().starts_with("w "))
        .unwrap();
    assert!(
        line.ends_with(&format!(
            "per tensor, scale in w@scale; not per channel: {why}"
        )),
        "{text}"
    );
    let line = text
        .lines()
        .find(|l| l.trim_start().starts_with("v "))
        .unwrap();
    assert!(
        line.ends_with("per channel, axis 1, scales in v@scale"),
        "{text}"
    );
    // The tag's metadata.json keeps the reason too (and nothing for `v`).
    let ar = modelzip::Archive::open(&a).unwrap();
    let meta: Value =
        serde_json::from_slice(&ar.tag("int8").unwrap().metadata().unwrap().unwrap()).unwrap();
    let recorded = &meta["quantization"]["params"];
    assert_eq!(recorded["w"]["per_tensor_reason"], why, "{meta}");
    assert_eq!(recorded["w"]["axis"], Value::Null);
    assert!(recorded["v"].get("per_tensor_reason").is_none(), "{meta}");
}
