//! `modelzip import` / `modelzip export`: format detection, --format, Paddle and
//! TensorFlow through the generic surface (tests/it/tf_interop.rs has the library's TF
//! tests).

use super::harness::{expect_error, fixture, json_of, modelzip};
use std::path::PathBuf;

fn paddle(file: &str) -> PathBuf {
    fixture(&format!("paddle/2.6.2/{file}"))
}

#[test]
fn paddle_files_are_detected_imported_and_exported_byte_for_byte() {
    let dir = tempfile::tempdir().unwrap();
    let zip = dir.path().join("m.zip");
    let r = json_of(
        modelzip()
            .arg("import")
            .arg(&zip)
            .args(["--tag", "fp32"])
            .arg(paddle("mlp.pdmodel"))
            .arg(paddle("mlp.pdiparams"))
            .arg("--json"),
    );
    assert_eq!(r["format"], "paddle");
    assert_eq!(r["graph"], "graph.pdmodel");
    assert_eq!(r["created"], true);
    // A persistables directory with its model: the same tensors, all shared.
    let r = json_of(
        modelzip()
            .arg("import")
            .arg(&zip)
            .args(["--tag", "dir"])
            .arg(paddle("mlp_persistables"))
            .arg(paddle("mlp.pdmodel"))
            .arg("--json"),
    );
    assert_eq!(r["format"], "paddle");
    let params = r["params"].as_array().unwrap();
    assert!(!params.is_empty());
    assert!(params.iter().all(|p| p["shared_from"] == "fp32"), "{r}");
    // Export without --format: the tag's own format.
    let prefix = dir.path().join("out");
    let e = json_of(
        modelzip()
            .arg("export")
            .arg(&zip)
            .args(["--tag", "fp32", "--out"])
            .arg(&prefix)
            .arg("--json"),
    );
    assert_eq!(e["format"], "paddle");
    assert_eq!(e["files"].as_array().unwrap().len(), 2);
    for ext in ["pdmodel", "pdiparams"] {
        let got = std::fs::read(dir.path().join(format!("out.{ext}"))).unwrap();
        let want = std::fs::read(paddle(&format!("mlp.{ext}"))).unwrap();
        assert!(got == want, "out.{ext} differs from the original");
    }
    // --out NAME.pdmodel is the prefix NAME; an existing file is refused without --force.
    let again = dir.path().join("out.pdmodel");
    let msg = expect_error(
        modelzip()
            .arg("export")
            .arg(&zip)
            .args(["--tag", "fp32", "--format", "paddle", "--out"])
            .arg(&again),
    );
    assert!(msg.contains("already exists"), "{msg}");
}

#[test]
fn paddle_content_is_detected_without_the_extension() {
    let dir = tempfile::tempdir().unwrap();
    let model = dir.path().join("model.bin");
    std::fs::copy(paddle("mlp.pdmodel"), &model).unwrap();
    let zip = dir.path().join("m.zip");
    let r = json_of(
        modelzip()
            .arg("import")
            .arg(&zip)
            .args(["--tag", "t"])
            .arg(&model)
            .arg(paddle("mlp.pdiparams"))
            .arg("--json"),
    );
    assert_eq!(r["format"], "paddle");
}

#[test]
fn a_file_of_no_known_format_is_refused_saying_what_was_tried() {
    let dir = tempfile::tempdir().unwrap();
    let junk = dir.path().join("notes.txt");
    std::fs::write(&junk, "hello, not a model\n").unwrap();
    let zip = dir.path().join("m.zip");
    let msg = expect_error(
        modelzip()
            .arg("import")
            .arg(&zip)
            .args(["--tag", "t"])
            .arg(&junk),
    );
    assert!(
        msg.contains("not a model file of any known format"),
        "{msg}"
    );
    assert!(
        msg.contains("paddle (")
            && msg.contains("tf (")
            && msg.contains("safetensors (")
            && msg.contains("onnx ("),
        "{msg}"
    );
    assert!(msg.contains("notes.txt"), "{msg}");
    assert!(!zip.exists(), "nothing is created for a refused import");
    let msg = expect_error(
        modelzip()
            .arg("import")
            .arg(&zip)
            .args(["--tag", "t", "--format", "caffe"])
            .arg(&junk),
    );
    assert!(msg.contains("unknown format \"caffe\""), "{msg}");
}

#[test]
fn onnx_models_go_in_and_come_out_inline_or_with_external_data() {
    let dir = tempfile::tempdir().unwrap();
    let zip = dir.path().join("m.zip");
    let src = fixture("onnx/mlp.onnx");
    let r = json_of(
        modelzip()
            .arg("import")
            .arg(&zip)
            .args(["--tag", "v1"])
            .arg(&src)
            .arg("--json"),
    );
    assert_eq!(r["format"], "onnx");
    assert_eq!(r["graph"], "graph.fb");
    assert_eq!(r["params"].as_array().unwrap().len(), 6);
    // Export without --format picks onnx and gives the file back byte for byte.
    let out = dir.path().join("back.onnx");
    let e = json_of(
        modelzip()
            .arg("export")
            .arg(&zip)
            .args(["--tag", "v1", "--out"])
            .arg(&out)
            .arg("--json"),
    );
    assert_eq!(e["format"], "onnx");
    assert_eq!(std::fs::read(&out).unwrap(), std::fs::read(&src).unwrap());
    let ext = dir.path().join("ext.onnx");
    let e = json_of(
        modelzip()
            .arg("export")
            .arg(&zip)
            .args(["--tag", "v1", "--external-data", "--out"])
            .arg(&ext)
            .arg("--json"),
    );
    let files = e["files"].as_array().unwrap();
    assert_eq!(files.len(), 2);
    assert!(
        files[1]["path"]
            .as_str()
            .unwrap()
            .ends_with("ext.onnx.data")
    );
    // --external-data is for onnx only; nothing is written.
    let pb = dir.path().join("x.pb");
    let msg = expect_error(
        modelzip()
            .arg("export")
            .arg(&zip)
            .args(["--tag", "v1", "--format", "tf", "--external-data", "--out"])
            .arg(&pb),
    );
    assert!(msg.contains("--external-data is for onnx exports"), "{msg}");
    assert!(!pb.exists());
    // The graph command lists the model.
    let text = modelzip()
        .arg("graph")
        .arg(&zip)
        .args(["--tag", "v1"])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&text.stdout);
    assert!(text.contains("ONNX model: ir_version 8"), "{text}");
    assert!(
        text.contains("Gemm(h5, head.weight, head.bias) -> y  head"),
        "{text}"
    );
    let dot = modelzip()
        .arg("graph")
        .arg(&zip)
        .args(["--tag", "v1", "--format", "dot"])
        .output()
        .unwrap();
    let dot = String::from_utf8_lossy(&dot.stdout);
    assert!(
        dot.contains("w4 [shape=box, label=\"head.weight\\n[128, 10]\"];"),
        "{dot}"
    );
    assert!(
        dot.contains("w4 -> n6;") && dot.contains("i0 -> n0;"),
        "{dot}"
    );
}

fn tf(file: &str) -> PathBuf {
    fixture(&format!("tf/{file}"))
}

#[test]
fn tf_graphdefs_go_in_as_pb_or_pbtxt_and_out_as_either() {
    let dir = tempfile::tempdir().unwrap();
    let zip = dir.path().join("m.zip");
    let r = json_of(
        modelzip()
            .arg("import")
            .arg(&zip)
            .args(["--tag", "v1"])
            .arg(tf("mlp.pb"))
            .arg("--json"),
    );
    assert_eq!(r["format"], "tf");
    assert_eq!(r["graph"], "graph.fb");
    assert_eq!(r["params"].as_array().unwrap().len(), 4);
    let r = json_of(
        modelzip()
            .arg("import")
            .arg(&zip)
            .args(["--tag", "v1-text"])
            .arg(tf("mlp.pbtxt"))
            .arg("--json"),
    );
    assert_eq!(r["format"], "tf");
    let summary = modelzip()
        .arg("import")
        .arg(&zip)
        .args(["--tag", "v2"])
        .arg(tf("finetune_v1.pb"))
        .output()
        .unwrap();
    assert!(summary.status.success());
    let line = String::from_utf8_lossy(&summary.stdout);
    assert!(
        line.starts_with("added tag v2 in ") && line.contains(" from tf: graph.fb ("),
        "{line}"
    );
    // Export without --format picks tf; .pbtxt writes text.
    let pb = dir.path().join("back.pb");
    let e = json_of(
        modelzip()
            .arg("export")
            .arg(&zip)
            .args(["--tag", "v1", "--out"])
            .arg(&pb)
            .arg("--json"),
    );
    assert_eq!(e["format"], "tf");
    assert_eq!(e["notes"][0], "binary GraphDef");
    let txt = dir.path().join("back.pbtxt");
    let e = json_of(
        modelzip()
            .arg("export")
            .arg(&zip)
            .args(["--tag", "v1-text", "--format", "tf", "--out"])
            .arg(&txt)
            .arg("--json"),
    );
    assert_eq!(e["notes"][0], "text GraphDef");
    let text = std::fs::read_to_string(&txt).unwrap();
    assert!(text.starts_with("node"), "{}", &text[..40]);
    // Both exports import again as the same graph (the text one by content too).
    let again = dir.path().join("again.txt");
    std::fs::copy(&txt, &again).unwrap();
    for (tag, file) in [("from-pb", &pb), ("from-text", &again)] {
        let r = json_of(
            modelzip()
                .arg("import")
                .arg(&zip)
                .args(["--tag", tag])
                .arg(file)
                .arg("--json"),
        );
        assert_eq!(r["format"], "tf", "{tag}");
        assert!(
            r["params"]
                .as_array()
                .unwrap()
                .iter()
                .all(|p| !p["shared_from"].is_null()),
            "{r}"
        );
    }
    let msg = expect_error(
        modelzip()
            .arg("export")
            .arg(&zip)
            .args(["--tag", "v1", "--out"])
            .arg(&pb),
    );
    assert!(msg.contains("already exists"), "{msg}");
}

#[test]
fn each_format_refuses_the_others_tags() {
    let dir = tempfile::tempdir().unwrap();
    let zip = dir.path().join("m.zip");
    for (tag, files) in [
        ("tf", vec![tf("mlp.pb")]),
        ("pd", vec![paddle("mlp.pdmodel"), paddle("mlp.pdiparams")]),
    ] {
        let ok = modelzip()
            .arg("import")
            .arg(&zip)
            .args(["--tag", tag, "-q"])
            .args(&files)
            .output()
            .unwrap();
        assert!(
            ok.status.success(),
            "{}",
            String::from_utf8_lossy(&ok.stderr)
        );
    }
    let msg = expect_error(
        modelzip()
            .arg("export")
            .arg(&zip)
            .args(["--tag", "pd", "--format", "tf", "--out"])
            .arg(dir.path().join("x.pb")),
    );
    assert!(msg.contains("is a Paddle program"), "{msg}");
    let msg = expect_error(
        modelzip()
            .arg("export")
            .arg(&zip)
            .args(["--tag", "tf", "--format", "paddle", "--out"])
            .arg(dir.path().join("x")),
    );
    assert!(msg.contains("TensorFlow GraphDef"), "{msg}");
    let msg = expect_error(
        modelzip()
            .arg("export-paddle")
            .arg(&zip)
            .args(["--tag", "tf", "--out"])
            .arg(dir.path().join("y")),
    );
    assert!(msg.contains("TensorFlow GraphDef"), "{msg}");
    // --format tf on a Paddle program file, and paddle on a GraphDef.
    let msg = expect_error(
        modelzip()
            .arg("import")
            .arg(&zip)
            .args(["--tag", "x", "--format", "tf"])
            .arg(paddle("mlp.pdmodel")),
    );
    assert!(msg.contains("mlp.pdmodel"), "{msg}");
    let msg = expect_error(
        modelzip()
            .arg("import")
            .arg(&zip)
            .args(["--tag", "y", "--format", "paddle"])
            .arg(tf("mlp.pb")),
    );
    assert!(msg.contains("mlp.pb"), "{msg}");
    let leftovers: Vec<_> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().to_string())
        .filter(|n| n != "m.zip" && n != "m.zip.lock")
        .collect();
    assert!(leftovers.is_empty(), "refused exports left {leftovers:?}");
}

#[test]
fn graph_prints_tf_graphs_and_draws_any_graph_as_dot() {
    let dir = tempfile::tempdir().unwrap();
    let zip = dir.path().join("m.zip");
    for (tag, files) in [
        ("tf", vec![tf("control.pb")]),
        ("pd", vec![paddle("mlp.pdmodel"), paddle("mlp.pdiparams")]),
    ] {
        let ok = modelzip()
            .arg("import")
            .arg(&zip)
            .args(["--tag", tag, "-q"])
            .args(&files)
            .output()
            .unwrap();
        assert!(ok.status.success());
    }
    let out = modelzip()
        .arg("graph")
        .arg(&zip)
        .args(["--tag", "tf"])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("TensorFlow graph: "), "{text}");
    assert!(text.contains("library: 4 function(s)"), "{text}");
    assert!(text.contains(" = While("), "{text}");
    assert!(text.contains("(param loop.w"), "{text}");
    assert!(text.contains("@/device:CPU:0"), "{text}");
    let j = json_of(
        modelzip()
            .arg("graph")
            .arg(&zip)
            .args(["--tag", "tf", "--format", "json"]),
    );
    let nodes = j["graph"]["tensorflow"]["nodes"].as_array().unwrap();
    assert!(nodes.iter().any(|n| n["op"] == "If"));
    // pbtxt of a TensorFlow tag is the whole GraphDef, values included.
    let out = modelzip()
        .arg("graph")
        .arg(&zip)
        .args(["--tag", "tf", "--format", "pbtxt"])
        .output()
        .unwrap();
    let pbtxt = dir.path().join("g.pbtxt");
    std::fs::write(&pbtxt, &out.stdout).unwrap();
    let want = modelzip::interop::tf::read_graphdef_file(&tf("control.pb")).unwrap();
    let got = modelzip::interop::tf::read_graphdef_file(&pbtxt).unwrap();
    assert!(
        got == want,
        "graph --format pbtxt is not the imported GraphDef"
    );
    for (tag, op_label) in [
        ("tf", "label=\"While\\n"),
        ("pd", "label=\"elementwise_add\""),
    ] {
        let out = modelzip()
            .arg("graph")
            .arg(&zip)
            .args(["--tag", tag, "--format", "dot"])
            .output()
            .unwrap();
        assert!(out.status.success());
        let dot = String::from_utf8_lossy(&out.stdout);
        assert!(
            dot.starts_with("digraph G {") && dot.trim_end().ends_with('}'),
            "{dot}"
        );
        assert!(dot.contains(" -> "), "{dot}");
        assert!(dot.contains(op_label), "{tag}: {dot}");
    }
}

fn st(file: &str) -> PathBuf {
    fixture(&format!("safetensors/{file}"))
}

#[test]
fn safetensors_files_shards_and_directories_go_in_and_come_out_byte_for_byte() {
    let dir = tempfile::tempdir().unwrap();
    let zip = dir.path().join("m.zip");
    let import = |tag: &str, input: PathBuf| {
        json_of(
            modelzip()
                .arg("import")
                .arg(&zip)
                .args(["--tag", tag])
                .arg(input)
                .arg("--json"),
        )
    };
    let r = import("base", st("finetune/base.safetensors"));
    assert_eq!(r["format"], "safetensors");
    assert_eq!(r["created"], true);
    let r = import("tuned", st("finetune/tuned.safetensors"));
    let params = r["params"].as_array().unwrap();
    assert!(params.iter().any(|p| p["shared_from"] == "base"), "{r}");
    // A sharded checkpoint by its index and by its directory; content without the name.
    assert_eq!(
        import("sh", st("sharded/model.safetensors.index.json"))["format"],
        "safetensors"
    );
    assert_eq!(import("shdir", st("sharded"))["format"], "safetensors");
    let renamed = dir.path().join("weights.bin");
    std::fs::copy(st("finetune/base.safetensors"), &renamed).unwrap();
    assert_eq!(import("renamed", renamed)["format"], "safetensors");

    // Export without --format: the tag's own format, the original bytes back.
    let out = dir.path().join("tuned.safetensors");
    let e = json_of(
        modelzip()
            .arg("export")
            .arg(&zip)
            .args(["--tag", "tuned", "--out"])
            .arg(&out)
            .arg("--json"),
    );
    assert_eq!(e["format"], "safetensors");
    assert!(
        std::fs::read(&out).unwrap() == std::fs::read(st("finetune/tuned.safetensors")).unwrap()
    );
    // To a directory: the shards and index as they were imported.
    let shards = dir.path().join("shards");
    std::fs::create_dir(&shards).unwrap();
    json_of(
        modelzip()
            .arg("export")
            .arg(&zip)
            .args(["--tag", "sh", "--out"])
            .arg(&shards)
            .arg("--json"),
    );
    for name in [
        "model-00001-of-00002.safetensors",
        "model-00002-of-00002.safetensors",
        "model.safetensors.index.json",
    ] {
        let got = std::fs::read(shards.join(name)).unwrap();
        assert!(
            got == std::fs::read(st(&format!("sharded/{name}"))).unwrap(),
            "{name}"
        );
    }
    // --max-shard-size cuts the shards to a size; the files listed are the shards, then
    // the index, with their sizes.
    let cut = dir.path().join("cut");
    std::fs::create_dir(&cut).unwrap();
    let e = json_of(
        modelzip()
            .arg("export")
            .arg(&zip)
            .args(["--tag", "sh", "--max-shard-size", "12K", "--out"])
            .arg(&cut)
            .arg("--json"),
    );
    let files = e["files"].as_array().unwrap();
    assert!(files.len() > 4, "{e}");
    let n = files.len() - 1;
    for (i, f) in files.iter().enumerate() {
        let path = PathBuf::from(f["path"].as_str().unwrap());
        let want = if i < n {
            format!("model-{:05}-of-{n:05}.safetensors", i + 1)
        } else {
            "model.safetensors.index.json".to_string()
        };
        assert_eq!(path, cut.join(want), "{e}");
        assert_eq!(f["bytes"], std::fs::metadata(&path).unwrap().len(), "{e}");
    }
    // A shard size for another format, or without a directory: refused, nothing written.
    let pd = dir.path().join("pd");
    let msg = expect_error(
        modelzip()
            .arg("export")
            .arg(&zip)
            .args([
                "--tag",
                "sh",
                "--format",
                "paddle",
                "--max-shard-size",
                "1M",
                "--out",
            ])
            .arg(&pd),
    );
    assert!(msg.contains("is for safetensors exports"), "{msg}");
    let one = dir.path().join("one.safetensors");
    let msg = expect_error(
        modelzip()
            .arg("export")
            .arg(&zip)
            .args(["--tag", "sh", "--max-shard-size", "1M", "--out"])
            .arg(&one),
    );
    assert!(msg.contains("no existing directory"), "{msg}");
    assert!(!one.exists() && !dir.path().join("pd.pdmodel").exists());
    // A Paddle tag exports as safetensors when asked; a safetensors tag is no Paddle model.
    modelzip()
        .arg("import")
        .arg(&zip)
        .args(["--tag", "p"])
        .arg(paddle("mlp.pdmodel"))
        .arg(paddle("mlp.pdiparams"))
        .assert()
        .success();
    let p = dir.path().join("p.safetensors");
    let e = json_of(
        modelzip()
            .arg("export")
            .arg(&zip)
            .args(["--tag", "p", "--format", "safetensors", "--out"])
            .arg(&p)
            .arg("--json"),
    );
    assert_eq!(e["format"], "safetensors");
    assert!(p.is_file());
    let msg = expect_error(
        modelzip()
            .arg("export")
            .arg(&zip)
            .args(["--tag", "base", "--format", "paddle", "--out"])
            .arg(dir.path().join("x")),
    );
    assert!(msg.contains("has no graph"), "{msg}");
}

#[test]
fn onnx_int8_variant_and_external_data_through_the_cli() {
    let dir = tempfile::tempdir().unwrap();
    let zip = dir.path().join("m.zip");
    modelzip()
        .arg("import")
        .arg(&zip)
        .args(["--tag", "fp32", "-q"])
        .arg(fixture("onnx/external.onnx"))
        .assert()
        .success();
    // graph --format json names where each initializer's values came from.
    let g = json_of(
        modelzip()
            .arg("graph")
            .arg(&zip)
            .args(["--tag", "fp32", "--format", "json"]),
    );
    let init = &g["graph"]["onnx"]["initializers"][0];
    assert_eq!(init["external"]["location"], "external.bin", "{init}");
    let q = json_of(modelzip().arg("quantize").arg(&zip).args([
        "--from",
        "fp32",
        "--tag",
        "int8",
        "--per-channel",
        "--json",
    ]));
    assert_eq!(q["changed"], 3, "{q}");
    let head = q["params"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["name"] == "head.weight")
        .unwrap();
    assert_eq!(head["axis"], 1, "Gemm without transB: [K, N]");
    // The plain export of the FP32 tag writes external.bin beside it; the INT8 tag's
    // model is inline, with a DequantizeLinear node per weight.
    let out = dir.path().join("out");
    std::fs::create_dir(&out).unwrap();
    modelzip()
        .arg("export")
        .arg(&zip)
        .args(["--tag", "fp32", "-q", "--out"])
        .arg(out.join("fp32.onnx"))
        .assert()
        .success();
    assert!(out.join("external.bin").is_file());
    let e = json_of(
        modelzip()
            .arg("export")
            .arg(&zip)
            .args(["--tag", "int8", "--json", "--out"])
            .arg(out.join("int8.onnx")),
    );
    assert_eq!(e["files"].as_array().unwrap().len(), 1, "{e}");
    let text = modelzip()
        .arg("graph")
        .arg(&zip)
        .args(["--tag", "int8"])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&text.stdout);
    assert!(
        text.contains("DequantizeLinear(head.weight_quantized, head.weight_scale) -> head.weight"),
        "{text}"
    );
    let help = modelzip().args(["quantize", "--help"]).output().unwrap();
    assert!(String::from_utf8_lossy(&help.stdout).contains("DequantizeLinear"));
}

/// `export --format tf` (or onnx) of a tag whose graph is a Paddle graph.fb said
/// "holds a Paddle/SameDiff graph.fb": it says what the tag holds, what the export needs
/// and which formats the tag does export as.
#[test]
fn exporting_a_paddle_graph_fb_as_tf_or_onnx_says_what_to_do_instead() {
    let dir = tempfile::tempdir().unwrap();
    let zip = dir.path().join("m.zip");
    modelzip()
        .arg("import")
        .arg(&zip)
        .args(["--tag", "pd", "-q"])
        .args([paddle("mlp.pdmodel"), paddle("mlp.pdiparams")])
        .assert()
        .success();
    modelzip()
        .args(["convert", "--tag", "pd", "--to", "flatbuffers", "-q"])
        .arg(&zip)
        .assert()
        .success();
    for (format, name, out) in [("tf", "TensorFlow", "x.pb"), ("onnx", "ONNX", "x.onnx")] {
        let msg = expect_error(
            modelzip()
                .arg("export")
                .arg(&zip)
                .args(["--tag", "pd", "--format", format, "--out"])
                .arg(dir.path().join(out)),
        );
        assert!(
            msg.ends_with(&format!(
                ": the graph of tag \"pd\" is a Paddle program (graph.fb); {name} export \
                 needs a graph imported from {name}; export it as \"paddle\" (--format paddle), \
                 or as \"safetensors\" for the parameters only"
            )),
            "{msg}"
        );
        assert!(!dir.path().join(out).exists());
    }
    // What the message suggests works.
    modelzip()
        .arg("export")
        .arg(&zip)
        .args(["--tag", "pd", "--format", "paddle", "-q", "--out"])
        .arg(dir.path().join("p"))
        .assert()
        .success();
}

#[test]
fn exporting_a_tf_or_onnx_graph_as_paddle_says_what_to_do_instead() {
    let dir = tempfile::tempdir().unwrap();
    let zip = dir.path().join("m.zip");
    for (tag, src) in [("t", tf("mlp.pb")), ("o", fixture("onnx/mlp.onnx"))] {
        modelzip()
            .arg("import")
            .arg(&zip)
            .args(["--tag", tag, "-q"])
            .arg(src)
            .assert()
            .success();
    }
    for (tag, what, format, out) in [
        ("t", "a TensorFlow GraphDef", "tf", "x.pb"),
        ("o", "an ONNX model", "onnx", "x.onnx"),
    ] {
        let msg = expect_error(
            modelzip()
                .arg("export")
                .arg(&zip)
                .args(["--tag", tag, "--format", "paddle", "--out"])
                .arg(dir.path().join("p")),
        );
        assert!(
            msg.ends_with(&format!(
                ": the graph of tag \"{tag}\" is {what} (graph.fb); Paddle export needs a \
                 Paddle program (graph.pdmodel, or a graph.fb holding one); export it as \
                 \"{format}\" (--format {format}), or as \"safetensors\" for the parameters only"
            )),
            "{msg}"
        );
        assert!(!dir.path().join("p.pdmodel").exists());
        assert!(!dir.path().join("p.pdiparams").exists());
        // What the message suggests works.
        modelzip()
            .arg("export")
            .arg(&zip)
            .args(["--tag", tag, "--format", format, "-q", "--out"])
            .arg(dir.path().join(out))
            .assert()
            .success();
    }
}

/// A SavedModel directory through the CLI: detected, imported, exported (the default
/// format for its tag, into `DIR/` that does not exist yet) with its assets, a second
/// export refused without --force, a cast copy refused naming its source.
#[test]
fn a_saved_model_directory_goes_in_and_comes_out_with_its_assets() {
    let dir = tempfile::tempdir().unwrap();
    let sm = dir.path().join("sm");
    let src = fixture("tf/saved_model/mlp");
    for rel in [
        "saved_model.pb",
        "fingerprint.pb",
        "variables/variables.index",
        "variables/variables.data-00000-of-00001",
    ] {
        std::fs::create_dir_all(sm.join(rel).parent().unwrap()).unwrap();
        std::fs::copy(src.join(rel), sm.join(rel)).unwrap();
    }
    std::fs::create_dir_all(sm.join("assets/sub")).unwrap();
    std::fs::write(sm.join("assets/vocab.txt"), b"a\nb\n").unwrap();
    std::fs::write(sm.join("assets/sub/x.bin"), [0u8, 1, 2]).unwrap();
    let zip = dir.path().join("m.zip");
    let r = json_of(
        modelzip()
            .arg("import")
            .arg(&zip)
            .args(["--tag", "sm"])
            .arg(&sm)
            .arg("--json"),
    );
    assert_eq!(r["format"], "tf");
    assert!(r["graph"].is_null());
    assert_eq!(r["params"].as_array().unwrap().len(), 6);
    let out = dir.path().join("exported");
    let mut slash = out.clone().into_os_string();
    slash.push("/");
    let e = json_of(
        modelzip()
            .arg("export")
            .arg(&zip)
            .args(["--tag", "sm", "--out"])
            .arg(&slash)
            .arg("--json"),
    );
    assert_eq!(e["format"], "tf");
    for rel in ["assets/vocab.txt", "assets/sub/x.bin", "saved_model.pb"] {
        assert_eq!(
            std::fs::read(out.join(rel)).unwrap(),
            std::fs::read(sm.join(rel)).unwrap(),
            "{rel}"
        );
    }
    let msg = expect_error(
        modelzip()
            .arg("export")
            .arg(&zip)
            .args(["--tag", "sm", "--out"])
            .arg(&out),
    );
    assert!(msg.contains("already exists"), "{msg}");
    let ok = modelzip()
        .arg("cast")
        .arg(&zip)
        .args(["--from", "sm", "--tag", "half", "--dtype", "fp16", "-q"])
        .output()
        .unwrap();
    assert!(ok.status.success());
    let msg = expect_error(
        modelzip()
            .arg("export")
            .arg(&zip)
            .args(["--tag", "half", "--out"])
            .arg(dir.path().join("half")),
    );
    assert!(
        msg.contains("is a cast of SavedModel tag \"sm\"") && msg.contains("--format safetensors"),
        "{msg}"
    );
    assert!(!dir.path().join("half").exists());
}

/// A SavedModel tag has no graph.fb but is not graph-less: `graph` and exports as
/// ONNX or Paddle say it holds a SavedModel and point to `--format tf` (they said "has
/// no graph" and offered only safetensors).
#[test]
fn a_saved_model_tag_as_another_format_says_it_holds_a_saved_model() {
    let dir = tempfile::tempdir().unwrap();
    let zip = dir.path().join("m.zip");
    modelzip()
        .arg("import")
        .arg(&zip)
        .args(["--tag", "sm", "-q"])
        .arg(fixture("tf/saved_model/mlp"))
        .assert()
        .success();
    let msg = expect_error(modelzip().arg("convert").arg(&zip).args([
        "--tag",
        "sm",
        "--to",
        "flatbuffers",
    ]));
    assert!(
        msg.contains("tag \"sm\" holds a TensorFlow SavedModel"),
        "{msg}"
    );
    let msg = expect_error(modelzip().arg("graph").arg(&zip).args(["--tag", "sm"]));
    assert!(
        msg.contains("holds a TensorFlow SavedModel") && msg.contains("modelzip export"),
        "{msg}"
    );
    for (format, out) in [("onnx", "m.onnx"), ("paddle", "m")] {
        let msg = expect_error(
            modelzip()
                .arg("export")
                .arg(&zip)
                .args(["--tag", "sm", "--format", format, "--out"])
                .arg(dir.path().join(out)),
        );
        assert!(
            msg.contains("tag \"sm\" holds a TensorFlow SavedModel") && msg.contains("--format tf"),
            "{format}: {msg}"
        );
    }
    // Imported as Paddle, it was read as a persistables directory: "unsupported
    // LoDTensor version ... (file fingerprint.pb)".
    let sm = fixture("tf/saved_model/mlp");
    let by_format = expect_error(
        modelzip()
            .arg("import")
            .arg(&zip)
            .args(["--tag", "p", "--format", "paddle"])
            .arg(&sm),
    );
    let by_dir = expect_error(
        modelzip()
            .arg("import-paddle")
            .arg(&zip)
            .args(["--tag", "p", "--dir"])
            .arg(&sm),
    );
    for msg in [by_format, by_dir] {
        assert!(
            msg.contains("the directory is a TensorFlow SavedModel") && msg.contains("--format tf"),
            "{msg}"
        );
    }
}
