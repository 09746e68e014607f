//! The Paddle and graph commands through the real binary: import-paddle, export-paddle,
//! convert, graph.

use crate::support::ProgramOf;

use super::harness::{expect_error, fixture, json_of, modelzip};
use modelzip::GraphFormat;
use serde_json::Value;
use std::path::{Path, PathBuf};

const VERSIONS: [&str; 2] = ["2.6.2", "3.3.1"];
const MODELS: [&str; 2] = ["mlp", "conv"];

fn paddle(version: &str, file: &str) -> PathBuf {
    fixture(&format!("paddle/{version}/{file}"))
}

fn import(archive: &Path, tag: &str, version: &str, model: &str) -> Value {
    json_of(
        modelzip()
            .arg("import-paddle")
            .arg(archive)
            .args(["--tag", tag])
            .arg(paddle(version, &format!("{model}.pdmodel")))
            .arg(paddle(version, &format!("{model}.pdiparams")))
            .arg("--json"),
    )
}

fn export(archive: &Path, tag: &str, prefix: &Path) -> Value {
    json_of(
        modelzip()
            .arg("export-paddle")
            .arg(archive)
            .args(["--tag", tag, "--out"])
            .arg(prefix)
            .arg("--json"),
    )
}

fn convert(archive: &Path, tag: &str, to: &str) -> Value {
    json_of(
        modelzip()
            .arg("convert")
            .arg(archive)
            .args(["--tag", tag, "--to", to, "--json"]),
    )
}

/// `prefix` + `.` + `e` (a prefix like `fb-mlp-2.6.2` has no extension to replace).
fn ext(prefix: &Path, e: &str) -> PathBuf {
    PathBuf::from(format!("{}.{e}", prefix.display()))
}

fn same_file(a: impl AsRef<Path>, b: impl AsRef<Path>) {
    let (a, b) = (a.as_ref(), b.as_ref());
    assert!(
        std::fs::read(a).unwrap() == std::fs::read(b).unwrap(),
        "{} and {} differ",
        a.display(),
        b.display()
    );
}

#[test]
fn import_convert_export_round_trips_every_fixture_model() {
    let dir = tempfile::tempdir().unwrap();
    let zip = dir.path().join("m.zip");
    let mut first = true;
    for v in VERSIONS {
        for m in MODELS {
            let tag = format!("{m}-{v}");
            let r = import(&zip, &tag, v, m);
            assert_eq!(r["tag"], tag.as_str());
            assert_eq!(r["created"], first);
            first = false;
            let pdmodel = paddle(v, &format!("{m}.pdmodel"));
            let pdiparams = paddle(v, &format!("{m}.pdiparams"));
            assert_eq!(r["graph_bytes"], std::fs::metadata(&pdmodel).unwrap().len());
            let names: Vec<&str> = r["params"]
                .as_array()
                .unwrap()
                .iter()
                .map(|p| p["name"].as_str().unwrap())
                .collect();
            let mut sorted = names.clone();
            sorted.sort();
            assert_eq!(names, sorted);

            let out = dir.path().join(format!("direct-{tag}"));
            let e = export(&zip, &tag, &out);
            assert_eq!(e["graph_converted"], false);
            same_file(e["pdmodel"].as_str().unwrap(), &pdmodel);
            same_file(e["pdiparams"].as_str().unwrap(), &pdiparams);

            let c = convert(&zip, &tag, "flatbuffers");
            assert_eq!(c["from"], "programdesc");
            assert_eq!(c["to"], "flatbuffers");
            assert_eq!(c["changed"], true);
            let out = dir.path().join(format!("fb-{tag}"));
            let e = export(&zip, &tag, &out);
            assert_eq!(e["graph_converted"], true);
            same_file(ext(&out, "pdmodel"), &pdmodel);
            same_file(ext(&out, "pdiparams"), &pdiparams);

            let c = convert(&zip, &tag, "programdesc");
            assert_eq!(c["changed"], true);
            let c = convert(&zip, &tag, "programdesc");
            assert_eq!(c["changed"], false);
            let out = dir.path().join(format!("back-{tag}"));
            export(&zip, &tag, &out);
            same_file(ext(&out, "pdmodel"), &pdmodel);
            same_file(ext(&out, "pdiparams"), &pdiparams);
        }
    }
    modelzip().arg("verify").arg(&zip).assert().success();
}

#[test]
fn import_dir_with_and_without_model_and_text_output() {
    let dir = tempfile::tempdir().unwrap();
    let zip = dir.path().join("m.zip");
    let persist = paddle("3.3.1", "mlp_persistables");
    import(&zip, "combined", "3.3.1", "mlp");
    let r = json_of(
        modelzip()
            .arg("import-paddle")
            .arg(&zip)
            .args(["--tag", "dir", "--dir"])
            .arg(&persist)
            .arg("--model")
            .arg(paddle("3.3.1", "mlp.pdmodel"))
            .args(["--rewrite", "--json"]),
    );
    for p in r["params"].as_array().unwrap() {
        assert_eq!(p["shared_from"], "combined", "{p}");
    }
    let out = modelzip()
        .arg("import-paddle")
        .arg(&zip)
        .args(["--tag", "bare", "--dir"])
        .arg(&persist)
        .output()
        .unwrap();
    assert!(out.status.success());
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(text.contains("added tag bare"), "{text}");
    assert!(text.contains("no graph, 4 param(s), 4 shared"), "{text}");
    let e = expect_error(
        modelzip()
            .arg("export-paddle")
            .arg(&zip)
            .arg("--out")
            .arg(dir.path().join("x")),
    );
    assert!(e.contains("no graph"), "{e}");
    let e = expect_error(modelzip().arg("convert").arg(&zip).args([
        "--tag",
        "bare",
        "--to",
        "flatbuffers",
    ]));
    assert!(e.contains("no graph"), "{e}");
    let e = expect_error(modelzip().arg("graph").arg(&zip));
    assert!(e.contains("no graph"), "{e}");
}

#[test]
fn import_errors_are_one_line_and_name_the_problem() {
    let dir = tempfile::tempdir().unwrap();
    let zip = dir.path().join("m.zip");
    let e = expect_error(
        modelzip()
            .arg("import-paddle")
            .arg(&zip)
            .args(["--tag", "t"])
            .arg(paddle("3.3.1", "mlp.pdmodel"))
            .arg(paddle("3.3.1", "conv.pdiparams")),
    );
    assert!(e.contains("8 record(s)"), "{e}");
    assert!(e.contains("conv.pdiparams"), "{e}");
    assert!(!zip.exists());
    let persist = dir.path().join("p");
    std::fs::create_dir(&persist).unwrap();
    std::fs::copy(
        paddle("3.3.1", "mlp_persistables/fc_0.b_0"),
        persist.join("fc_0.b_0"),
    )
    .unwrap();
    let e = expect_error(
        modelzip()
            .arg("import-paddle")
            .arg(&zip)
            .args(["--tag", "t", "--dir"])
            .arg(&persist)
            .arg("--model")
            .arg(paddle("3.3.1", "mlp.pdmodel")),
    );
    assert!(e.contains("\"fc_0.w_0\"") && e.contains("no file"), "{e}");
    // Neither a model pair nor a directory.
    let e = expect_error(
        modelzip()
            .arg("import-paddle")
            .arg(&zip)
            .args(["--tag", "t"]),
    );
    assert!(e.contains("--dir"), "{e}");
    // A model without its params is a usage error.
    let out = modelzip()
        .arg("import-paddle")
        .arg(&zip)
        .args(["--tag", "t"])
        .arg(paddle("3.3.1", "mlp.pdmodel"))
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    // A duplicate tag.
    import(&zip, "t", "3.3.1", "mlp");
    let e = expect_error(
        modelzip()
            .arg("import-paddle")
            .arg(&zip)
            .args(["--tag", "T"])
            .arg(paddle("3.3.1", "mlp.pdmodel"))
            .arg(paddle("3.3.1", "mlp.pdiparams")),
    );
    assert!(e.contains("already exists"), "{e}");
}

#[test]
fn export_refuses_to_overwrite_without_force() {
    let dir = tempfile::tempdir().unwrap();
    let zip = dir.path().join("m.zip");
    import(&zip, "t", "2.6.2", "conv");
    let prefix = dir.path().join("inference");
    std::fs::write(ext(&prefix, "pdmodel"), b"mine").unwrap();
    let e = expect_error(
        modelzip()
            .arg("export-paddle")
            .arg(&zip)
            .arg("--out")
            .arg(&prefix),
    );
    assert!(e.contains("already exists") && e.contains("--force"), "{e}");
    assert_eq!(std::fs::read(ext(&prefix, "pdmodel")).unwrap(), b"mine");
    assert!(!ext(&prefix, "pdiparams").exists());
    let out = modelzip()
        .arg("export-paddle")
        .arg(&zip)
        .arg("--out")
        .arg(&prefix)
        .arg("--force")
        .output()
        .unwrap();
    assert!(out.status.success());
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(text.contains("8 param(s)"), "{text}");
    same_file(ext(&prefix, "pdmodel"), paddle("2.6.2", "conv.pdmodel"));
    same_file(ext(&prefix, "pdiparams"), paddle("2.6.2", "conv.pdiparams"));
}

#[test]
fn graph_prints_text_json_and_pbtxt_for_both_encodings() {
    let dir = tempfile::tempdir().unwrap();
    let zip = dir.path().join("m.zip");
    import(&zip, "pd", "3.3.1", "mlp");
    import(&zip, "fb", "3.3.1", "mlp");
    convert(&zip, "fb", "flatbuffers");

    let out = modelzip()
        .arg("graph")
        .arg(&zip)
        .args(["--tag", "pd"])
        .output()
        .unwrap();
    assert!(out.status.success());
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(
        text.starts_with("tag pd: graph.pdmodel (6246 bytes)"),
        "{text}"
    );
    assert!(text.contains("var fc_0.w_0"), "{text}");
    assert!(text.contains("mul(X=[x] Y=[fc_0.w_0])"), "{text}");

    let pd = json_of(
        modelzip()
            .arg("graph")
            .arg(&zip)
            .args(["--tag", "pd", "--format", "json"]),
    );
    let fb = json_of(modelzip().arg("graph").arg(&zip).args(["--format", "json"]));
    assert_eq!(pd["tag"], "pd");
    assert_eq!(pd["entry"], "pd/graph.pdmodel");
    assert_eq!(pd["encoding"], "programdesc");
    assert_eq!(fb["tag"], "fb");
    assert_eq!(fb["encoding"], "flatbuffers");
    assert_eq!(pd["graph"], fb["graph"], "the same graph in both encodings");
    assert_eq!(pd["graph"]["version"], 3003001);
    let vars = pd["graph"]["blocks"][0]["vars"].as_array().unwrap();
    assert!(
        vars.iter()
            .any(|v| v["name"] == "fc_0.w_0" && v["persistable"] == true)
    );

    let pbtxt = |tag: &str| {
        let out = modelzip()
            .arg("graph")
            .arg(&zip)
            .args(["--tag", tag, "--format", "pbtxt"])
            .output()
            .unwrap();
        assert!(out.status.success());
        String::from_utf8(out.stdout).unwrap()
    };
    let a = pbtxt("pd");
    assert!(a.contains("blocks"), "{a}");
    assert!(a.contains("\"fc_0.w_0\""), "{a}");
    assert_eq!(a, pbtxt("fb"));

    let e = expect_error(modelzip().arg("graph").arg(&zip).args(["--tag", "nope"]));
    assert!(e.contains("nope"), "{e}");
}

#[test]
fn help_has_examples() {
    for cmd in ["graph", "convert", "import-paddle", "export-paddle"] {
        let out = modelzip().args([cmd, "--help"]).output().unwrap();
        assert!(out.status.success());
        let text = String::from_utf8(out.stdout).unwrap();
        assert!(text.contains("Example:"), "{cmd}: {text}");
        assert!(text.contains(&format!("modelzip {cmd} ")), "{cmd}: {text}");
    }
}

/// A PIR program in JSON (what Paddle 3 saves by default) that is malformed is named as
/// such, with what is wrong: as a model file and as DIR/__model__.
#[test]
fn import_names_what_is_wrong_with_a_malformed_pir_program() {
    let dir = tempfile::tempdir().unwrap();
    let zip = dir.path().join("m.zip");
    let json = dir.path().join("inference.json");
    std::fs::write(
        &json,
        b"\n  {\"base_code\":{\"magic\":\"pir\",\"trainable\":false,\"version\":1},\"program\":{}}",
    )
    .unwrap();
    let e = expect_error(
        modelzip()
            .arg("import-paddle")
            .arg(&zip)
            .args(["--tag", "t"])
            .arg(&json)
            .arg(paddle("3.3.1", "mlp.pdiparams")),
    );
    assert!(
        e.contains("PIR program") && e.contains("\"program\" has no \"regions\""),
        "{e}"
    );
    assert!(e.contains("inference.json"), "{e}");
    let persist = dir.path().join("p");
    std::fs::create_dir(&persist).unwrap();
    std::fs::copy(&json, persist.join("__model__")).unwrap();
    let e = expect_error(
        modelzip()
            .arg("import-paddle")
            .arg(&zip)
            .args(["--tag", "t", "--dir"])
            .arg(&persist),
    );
    assert!(e.contains("PIR") && e.contains("__model__"), "{e}");
    assert!(!zip.exists());
}

/// A graph.fb tag extracted to a directory (params + graph.fb) imports back with
/// `import-paddle --dir`: the graph.fb becomes the ProgramDesc it converts to, which is
/// Paddle's original, and the export is byte-identical to Paddle's files.
#[test]
fn extract_of_a_graph_fb_tag_imports_back_with_dir() {
    let d = tempfile::tempdir().unwrap();
    let a = d.path().join("m.zip");
    import(&a, "fp32", "3.3.1", "mlp");
    convert(&a, "fp32", "flatbuffers");
    let out = d.path().join("ex");
    modelzip()
        .arg("extract")
        .arg(&a)
        .args(["--tag", "fp32", "--out"])
        .arg(&out)
        .assert()
        .success();
    assert!(out.join("graph.fb").is_file());
    let r = json_of(
        modelzip()
            .arg("import-paddle")
            .arg(&a)
            .args(["--tag", "back", "--dir"])
            .arg(&out)
            .arg("--json"),
    );
    assert_eq!(r["params"].as_array().unwrap().len(), 4, "{r}");
    let prefix = d.path().join("back");
    export(&a, "back", &prefix);
    same_file(ext(&prefix, "pdmodel"), paddle("3.3.1", "mlp.pdmodel"));
    same_file(ext(&prefix, "pdiparams"), paddle("3.3.1", "mlp.pdiparams"));
}

fn pir(file: &str) -> PathBuf {
    fixture(&format!("paddle/pir/{file}"))
}

/// Paddle 3's default save (`<prefix>.json` + `.pdiparams`) through `import`,
/// `import-paddle`, `graph`, `verify` and `export --format paddle` / `export-paddle`:
/// the export is Paddle's files byte for byte.
#[test]
fn pir_programs_import_show_verify_and_export_byte_identical() {
    let d = tempfile::tempdir().unwrap();
    let a = d.path().join("m.zip");
    let r = json_of(
        modelzip()
            .arg("import")
            .arg(&a)
            .args(["--tag", "mlp"])
            .arg(pir("mlp.json"))
            .arg(pir("mlp.pdiparams"))
            .arg("--json"),
    );
    assert_eq!(r["format"], "paddle", "{r}");
    assert_eq!(r["params"].as_array().unwrap().len(), 4, "{r}");
    let r = json_of(
        modelzip()
            .arg("import-paddle")
            .arg(&a)
            .args(["--tag", "cnn"])
            .arg(pir("cnn.json"))
            .arg(pir("cnn.pdiparams"))
            .arg("--json"),
    );
    assert_eq!(r["params"].as_array().unwrap().len(), 9, "{r}");

    let out = modelzip()
        .arg("graph")
        .arg(&a)
        .args(["--tag", "cnn"])
        .output()
        .unwrap();
    assert!(out.status.success());
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(text.contains("Paddle PIR program"), "{text}");
    assert!(text.contains("9 parameter(s)"), "{text}");
    assert!(text.contains("conv2d_0.w_0  FP32  [4, 3, 3, 3]"), "{text}");
    let g = json_of(
        modelzip()
            .arg("graph")
            .arg(&a)
            .args(["--tag", "mlp", "--format", "json"]),
    );
    assert_eq!(
        g["graph"]["pir"]["params"][1]["name"], "linear_0.w_0",
        "{g}"
    );
    assert!(g["graph"]["pir"]["ops"].as_u64().unwrap() > 4, "{g}");
    modelzip().arg("verify").arg(&a).assert().success();

    for (m, cmd) in [("mlp", "export"), ("cnn", "export-paddle")] {
        let prefix = d.path().join(format!("out-{m}"));
        let mut c = modelzip();
        c.arg(cmd).arg(&a).args(["--tag", m, "--out"]).arg(&prefix);
        if cmd == "export" {
            c.args(["--format", "paddle"]);
        }
        c.assert().success();
        same_file(ext(&prefix, "json"), pir(&format!("{m}.json")));
        same_file(ext(&prefix, "pdiparams"), pir(&format!("{m}.pdiparams")));
        assert!(!ext(&prefix, "pdmodel").exists());
    }

    // A PIR tag's export is refused for the files it writes (PREFIX.json), and only
    // for those: a leftover PREFIX.pdmodel is none of its business (export-paddle
    // refused it, checking a ProgramDesc's pair).
    let prefix = d.path().join("again");
    std::fs::write(ext(&prefix, "pdmodel"), b"left over").unwrap();
    modelzip()
        .arg("export-paddle")
        .arg(&a)
        .args(["--tag", "mlp", "--out"])
        .arg(&prefix)
        .assert()
        .success();
    same_file(ext(&prefix, "json"), pir("mlp.json"));
    assert_eq!(
        std::fs::read(ext(&prefix, "pdmodel")).unwrap(),
        b"left over"
    );
    let e = expect_error(
        modelzip()
            .arg("export-paddle")
            .arg(&a)
            .args(["--tag", "mlp", "--out"])
            .arg(&prefix),
    );
    assert!(
        e.contains("again.json") && e.contains("already exists") && e.contains("--force"),
        "{e}"
    );
    modelzip()
        .arg("export-paddle")
        .arg(&a)
        .args(["--tag", "mlp", "--force", "--out"])
        .arg(&prefix)
        .assert()
        .success();
}

/// A PIR tag exported as TensorFlow or ONNX, converted to a ProgramDesc, cast or
/// quantized says what the tag holds and what to do instead.
#[test]
fn a_pir_tag_as_another_format_says_what_it_holds() {
    let d = tempfile::tempdir().unwrap();
    let a = d.path().join("m.zip");
    modelzip()
        .arg("import")
        .arg(&a)
        .args(["--tag", "p"])
        .arg(pir("mlp.json"))
        .arg(pir("mlp.pdiparams"))
        .assert()
        .success();
    for (format, out) in [("onnx", "m.onnx"), ("tf", "m.pb")] {
        let e = expect_error(
            modelzip()
                .arg("export")
                .arg(&a)
                .args(["--tag", "p", "--format", format, "--out"])
                .arg(d.path().join(out)),
        );
        assert!(e.contains("is a Paddle 3 PIR program (graph.fb)"), "{e}");
        assert!(e.contains("--format paddle"), "{e}");
    }
    // Variants would change parameter dtypes the JSON declares: refused, saying why.
    let e = expect_error(
        modelzip()
            .arg("cast")
            .arg(&a)
            .args(["--from", "p", "--tag", "h", "--dtype", "fp16"]),
    );
    assert!(e.contains("holds a Paddle PIR program"), "{e}");
    let e = expect_error(
        modelzip()
            .arg("quantize")
            .arg(&a)
            .args(["--from", "p", "--tag", "q"]),
    );
    assert!(e.contains("holds a Paddle PIR program"), "{e}");
    let e =
        expect_error(
            modelzip()
                .arg("convert")
                .arg(&a)
                .args(["--tag", "p", "--to", "programdesc"]),
        );
    assert!(e.contains("PIR program") && e.contains("p/graph.fb"), "{e}");
    // A directory in place of the prefix: the suggested prefix names the files a PIR
    // tag is written as (PREFIX.json, not PREFIX.pdmodel).
    let mut slash = d.path().join("out").into_os_string();
    slash.push("/");
    let e = expect_error(
        modelzip()
            .arg("export")
            .arg(&a)
            .args(["--tag", "p", "--format", "paddle", "--out"])
            .arg(&slash),
    );
    assert!(
        e.contains("names a directory, not a file prefix")
            && e.contains("writes inference.json and inference.pdiparams"),
        "{e}"
    );
}

/// `pack --graph model.json` stores a PIR program (checked, byte for byte in graph.fb)
/// with a persistables directory; the export gives Paddle's files back.
#[test]
fn pack_takes_a_pir_program_as_the_graph() {
    let d = tempfile::tempdir().unwrap();
    let dir = d.path().join("p");
    std::fs::create_dir(&dir).unwrap();
    let params = std::fs::read(pir("mlp.pdiparams")).unwrap();
    let recs = modelzip::tensor::decode_combined(&params).unwrap();
    let names = [
        "linear_0.b_0",
        "linear_0.w_0",
        "linear_1.b_0",
        "linear_1.w_0",
    ];
    for (name, r) in names.iter().zip(&recs) {
        let mut f = std::fs::File::create(dir.join(name)).unwrap();
        modelzip::tensor::encode_tensor(&r.tensor, &mut f).unwrap();
    }
    let a = d.path().join("m.zip");
    let r = json_of(
        modelzip()
            .arg("pack")
            .arg(&a)
            .arg(&dir)
            .args(["--tag", "t", "--graph"])
            .arg(pir("mlp.json"))
            .arg("--json"),
    );
    assert_eq!(r["graph"], "flatbuffers", "{r}");
    let prefix = d.path().join("out");
    export(&a, "t", &prefix);
    same_file(ext(&prefix, "json"), pir("mlp.json"));
    same_file(ext(&prefix, "pdiparams"), pir("mlp.pdiparams"));
}

#[test]
fn a_graph_over_16_mib_compressing_past_100_to_1_is_stored_and_reads_back() {
    // The reader refuses deflated entries over 16 MiB that compress better than 100:1
    // (deflate bombs); graph.pdmodel and graph.fb are deflated by the writer, so a
    // program padded with a huge repetitive attribute was written deflated and then
    // refused: import exited 2 and left an archive whose graph did not read.
    use modelzip::Graph;
    use modelzip::graph::{Attr, AttrValue, Block, Op};
    let d = tempfile::tempdir().unwrap();
    let mut op = Op::new("", "scale");
    op.attrs.push(Attr {
        name: "padding".into(),
        value: AttrValue::String("x".repeat(20 << 20)),
    });
    let mut block = Block::main();
    block.ops.push(op);
    let graph = Graph::from(modelzip::graph::Program {
        blocks: vec![block],
        ..modelzip::graph::Program::default()
    });
    let program = graph.encode(GraphFormat::ProgramDesc).unwrap();
    let model = d.path().join("m.pdmodel");
    std::fs::write(&model, &program).unwrap();
    let zip = d.path().join("a.zip");
    json_of(
        modelzip()
            .arg("import")
            .arg(&zip)
            .arg(&model)
            .args(["--tag", "v1", "--json"]),
    );
    // Rewritten as graph.fb (deflated again by the rewrite) into a second tag.
    json_of(
        modelzip()
            .arg("import")
            .arg(&zip)
            .arg(&model)
            .args(["--tag", "v2", "--json"]),
    );
    convert(&zip, "v2", "flatbuffers");
    let report = json_of(modelzip().arg("verify").arg(&zip).arg("--json"));
    assert_eq!(report["ok"], true, "{report}");
    let a = modelzip::Archive::open(&zip).unwrap();
    let (fmt, bytes) = a.tag("v1").unwrap().graph().unwrap().unwrap();
    assert_eq!(fmt, modelzip::GraphFormat::ProgramDesc);
    assert_eq!(*bytes, program[..]);
    let (fmt, bytes) = a.tag("v2").unwrap().graph().unwrap().unwrap();
    assert_eq!(fmt, modelzip::GraphFormat::FlatBuffers);
    let back = Graph::decode(GraphFormat::FlatBuffers, &bytes).unwrap();
    assert_eq!(
        back.prog().blocks[0].ops[0].attrs,
        graph.prog().blocks[0].ops[0].attrs
    );
}

/// Copies fixture files into `dir` (created) under new names: (fixture, name).
fn populate(dir: &Path, files: &[(PathBuf, &str)]) {
    std::fs::create_dir_all(dir).unwrap();
    for (from, name) in files {
        std::fs::copy(from, dir.join(name)).unwrap();
    }
}

#[test]
fn a_directory_holding_one_inference_model_imports_as_that_model() {
    // What paddle.jit.save(net, "m/model") writes: m/model.json (Paddle 3, PIR) or
    // m/model.pdmodel + m/model.pdiparams.info (Paddle 2), with m/model.pdiparams. It was
    // read as a persistables directory: "unexpected bytes after the record".
    let d = tempfile::tempdir().unwrap();
    let zip = d.path().join("a.zip");
    // The same models imported from their files, to compare with.
    import(&zip, "files", "3.3.1", "mlp");
    json_of(
        modelzip()
            .arg("import")
            .arg(&zip)
            .args(["--tag", "pir-files", "--json"])
            .arg(pir("mlp.json"))
            .arg(pir("mlp.pdiparams")),
    );
    let pd = d.path().join("pd");
    populate(
        &pd,
        &[
            (paddle("3.3.1", "mlp.pdmodel"), "model.pdmodel"),
            (paddle("3.3.1", "mlp.pdiparams"), "model.pdiparams"),
        ],
    );
    // Not read: the pickle Paddle 2 writes beside them, and a README.
    std::fs::write(pd.join("model.pdiparams.info"), [0u8; 16]).unwrap();
    std::fs::write(pd.join("README.md"), "a model\n").unwrap();
    let pir_dir = d.path().join("pir");
    populate(
        &pir_dir,
        &[
            (pir("mlp.json"), "model.json"),
            (pir("mlp.pdiparams"), "model.pdiparams"),
        ],
    );
    let r = json_of(
        modelzip()
            .arg("import")
            .arg(&zip)
            .args(["--tag", "pd-dir", "--json"])
            .arg(&pd),
    );
    assert_eq!(r["format"], "paddle");
    assert_eq!(r["graph"], "graph.pdmodel");
    let params = r["params"].as_array().unwrap();
    assert!(!params.is_empty());
    for p in params {
        assert_eq!(p["shared_from"], "files", "{p}");
    }
    // import-paddle --dir takes it too; the PIR program is kept in graph.fb.
    let r = json_of(
        modelzip()
            .arg("import-paddle")
            .arg(&zip)
            .args(["--tag", "pir-dir", "--json", "--dir"])
            .arg(&pir_dir),
    );
    let params = r["params"].as_array().unwrap();
    assert!(!params.is_empty());
    for p in params {
        assert_eq!(p["shared_from"], "pir-files", "{p}");
    }
    // An archive inside the directory (and its lock file) is not read either.
    let inner = pir_dir.join("inner.zip");
    for tag in ["one", "two"] {
        json_of(
            modelzip()
                .arg("import")
                .arg(&inner)
                .args(["--tag", tag, "--json"])
                .arg(&pir_dir),
        );
    }
    let a = modelzip::Archive::open(&zip).unwrap();
    let graph = |t: &str| a.tag(t).unwrap().graph().unwrap().unwrap();
    assert_eq!(graph("pd-dir"), graph("files"));
    assert_eq!(graph("pir-dir"), graph("pir-files"));
    assert_eq!(graph("pir-dir").0, modelzip::GraphFormat::FlatBuffers);
    let report = json_of(modelzip().arg("verify").arg(&zip).arg("--json"));
    assert_eq!(report["ok"], true, "{report}");
}

#[test]
fn a_directory_holding_programs_or_pdiparams_any_other_way_is_refused_listing_them() {
    let d = tempfile::tempdir().unwrap();
    let zip = d.path().join("a.zip");
    let (model, params) = (
        paddle("3.3.1", "mlp.pdmodel"),
        paddle("3.3.1", "mlp.pdiparams"),
    );
    // (directory, its files, what the error must say)
    type Case<'a> = (&'a str, Vec<(PathBuf, &'a str)>, &'a [&'a str]);
    let cases: [Case; 5] = [
        (
            "two-models",
            vec![
                (model.clone(), "a.pdmodel"),
                (pir("mlp.json"), "b.json"),
                (params.clone(), "a.pdiparams"),
            ],
            &[
                "2 programs (\"a.pdmodel\", \"b.json\")",
                "1 .pdiparams (\"a.pdiparams\")",
            ],
        ),
        (
            "no-params",
            vec![(model.clone(), "model.pdmodel")],
            &["holds 1 program (\"model.pdmodel\");"],
        ),
        (
            "no-model",
            vec![(params.clone(), "model.pdiparams")],
            &["holds 1 .pdiparams (\"model.pdiparams\");"],
        ),
        (
            "other-prefix",
            vec![
                (model.clone(), "a.pdmodel"),
                (params.clone(), "b.pdiparams"),
            ],
            &["1 program (\"a.pdmodel\"), 1 .pdiparams (\"b.pdiparams\");"],
        ),
        (
            "mixed",
            vec![
                (model.clone(), "model.pdmodel"),
                (params.clone(), "model.pdiparams"),
                (paddle("3.3.1", "mlp_persistables/fc_0.w_0"), "fc_0.w_0"),
            ],
            &["1 persistables-like file (\"fc_0.w_0\")"],
        ),
    ];
    for (name, files, expected) in cases {
        let dir = d.path().join(name);
        populate(&dir, &files);
        for cmd in [&["import"][..], &["import-paddle", "--dir"]] {
            let e = expect_error(
                modelzip()
                    .arg(cmd[0])
                    .arg(&zip)
                    .args(["--tag", "t"])
                    .args(&cmd[1..])
                    .arg(&dir),
            );
            assert!(
                e.contains("neither one inference model nor a persistables directory"),
                "{name}: {e}"
            );
            for s in expected {
                assert!(e.contains(s), "{name}: {e}");
            }
            assert!(
                e.contains("give the program and its .pdiparams as two files instead"),
                "{name}: {e}"
            );
            assert!(
                e.contains(&format!("(file {})", dir.display())),
                "{name}: {e}"
            );
        }
        assert!(!zip.exists(), "{name}: nothing is written");
    }
}
