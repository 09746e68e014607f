//! Paddle 3 PIR programs (`<prefix>.json`, Paddle 3's default save format): import →
//! export byte for byte on the real Paddle 3.3.1 fixtures, the parameter order of the
//! params file, sharing between tags, and hostile or mismatched inputs refused with
//! errors that say what, why and where.

use crate::support::{export_opts, import_opts as opts};

use modelzip::graph::{PirGraph, pir};
use modelzip::interop::paddle::{
    self, export_inference_model, export_inference_model_bytes, import_inference_model,
    import_inference_model_files, import_persistables_dir, import_program,
};
use modelzip::tensor::{decode_combined, encode_combined, encode_tensor};
use modelzip::{Archive, Graph, GraphFormat};
use std::path::{Path, PathBuf};

const MODELS: [&str; 2] = ["mlp", "cnn"];

fn fixture(file: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/paddle/pir")
        .join(file)
}

fn read(file: &str) -> Vec<u8> {
    std::fs::read(fixture(file)).unwrap()
}

/// The parameter names in .pdiparams record order, as the fixture script checked them
/// against the values Paddle saved.
fn manifest_order(model: &str) -> Vec<String> {
    let m: serde_json::Value = serde_json::from_slice(&read("models.json")).unwrap();
    m["models"][model]["params_in_record_order"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_str().unwrap().to_string())
        .collect()
}

#[test]
fn import_then_export_is_byte_identical_for_every_pir_fixture() {
    let d = tempfile::tempdir().unwrap();
    let zip = d.path().join("m.zip");
    for m in MODELS {
        let r = import_inference_model_files(
            &zip,
            m,
            &fixture(&format!("{m}.json")),
            &fixture(&format!("{m}.pdiparams")),
            &opts(),
        )
        .unwrap();
        let names: Vec<String> = r.params.iter().map(|p| p.name.clone()).collect();
        assert_eq!(names, manifest_order(m), "{m}");
        let a = Archive::open(&zip).unwrap();
        let tag = a.tag(m).unwrap();
        let (enc, bytes) = tag.graph().unwrap().unwrap();
        assert_eq!(enc, GraphFormat::FlatBuffers);
        assert!(modelzip::graph::flatbuffers::is_pir(&bytes));
        let g = Graph::decode(GraphFormat::FlatBuffers, &bytes).unwrap();
        let modelzip::Graph::Pir(pir) = &g else {
            panic!("expected a PIR program, got {}", g.kind_name())
        };
        assert_eq!(pir.json, read(&format!("{m}.json")));

        let prefix = d.path().join(format!("out-{m}"));
        let e = export_inference_model(&tag, &prefix, &export_opts()).unwrap();
        assert_eq!(e.model_path, d.path().join(format!("out-{m}.json")));
        assert_eq!(e.params, manifest_order(m));
        assert!(e.unused.is_empty() && !e.graph_converted);
        assert_eq!(
            std::fs::read(&e.model_path).unwrap(),
            read(&format!("{m}.json"))
        );
        assert_eq!(
            std::fs::read(e.params_path.unwrap()).unwrap(),
            read(&format!("{m}.pdiparams"))
        );
        let (model, params) = export_inference_model_bytes(&tag).unwrap();
        assert_eq!(model, read(&format!("{m}.json")));
        assert_eq!(params, read(&format!("{m}.pdiparams")));
    }
    let r = Archive::open(&zip).unwrap().verify();
    assert!(r.is_ok(), "{:?}", r.problems);
}

/// The records of a PIR params file are the program's parameters sorted by name: the
/// cnn's JSON lists them in another order (the last-created first), and its float64
/// buffer and its batch-norm statistics are parameters too.
#[test]
fn the_params_file_order_is_the_names_sorted_not_the_program_order() {
    let json = read("cnn.json");
    let text = String::from_utf8(json.clone()).unwrap();
    let order = manifest_order("cnn");
    let pos = |n: &str| text.find(&format!("\"{n}\"")).unwrap();
    assert!(
        order.windows(2).any(|w| pos(&w[0]) > pos(&w[1])),
        "the fixture's program order is already sorted; the test shows nothing"
    );
    let p = pir::parse(&json).unwrap();
    let names: Vec<&str> = p.params.iter().map(|p| p.name.as_str()).collect();
    assert_eq!(names, order);
    let buffer = p
        .params
        .iter()
        .find(|p| p.name == "generated_tensor_0")
        .unwrap();
    assert_eq!(buffer.dtype, Some(modelzip::DType::Fp64));
    assert_eq!(buffer.dims, Some(vec![1]));
    let bytes = read("cnn.pdiparams");
    let recs = decode_combined(&bytes).unwrap();
    for (p, r) in p.params.iter().zip(&recs) {
        assert_eq!(Some(r.tensor.dtype()), p.dtype, "{}", p.name);
    }
    assert!(p.ops > p.params.len());
}

#[test]
fn detection_by_name_and_content_imports_the_pir_pair_either_way_round() {
    let d = tempfile::tempdir().unwrap();
    let zip = d.path().join("m.zip");
    let json = fixture("mlp.json");
    let params = fixture("mlp.pdiparams");
    let f = modelzip::interop::detect(&[params.clone(), json.clone()]).unwrap();
    assert_eq!(f.name(), "paddle");
    f.import(&zip, "a", &[params, json.clone()], &opts())
        .unwrap();
    // By content: a PIR program under another name.
    let renamed = d.path().join("program.txt");
    std::fs::copy(&json, &renamed).unwrap();
    let f = modelzip::interop::detect(std::slice::from_ref(&renamed)).unwrap();
    assert_eq!(f.name(), "paddle");
    let a = Archive::open(&zip).unwrap();
    assert_eq!(
        modelzip::interop::origin_of(&a.tag("a").unwrap())
            .unwrap()
            .unwrap()
            .name(),
        "paddle"
    );
}

/// Two tags of the same program share one graph.fb through shared.txt, and both export
/// Paddle's files.
#[test]
fn identical_pir_programs_are_stored_once() {
    let d = tempfile::tempdir().unwrap();
    let zip = d.path().join("m.zip");
    let (json, params) = (read("mlp.json"), read("mlp.pdiparams"));
    for t in ["a", "b"] {
        import_inference_model(&zip, t, &json, &params, &opts()).unwrap();
    }
    let a = Archive::open(&zip).unwrap();
    assert!(a.entry_stored_size("b/graph.fb").is_none());
    assert_eq!(a.tag("b").unwrap().shared_files(), &[("graph.fb", "a")]);
    for t in ["a", "b"] {
        let (model, p) = export_inference_model_bytes(&a.tag(t).unwrap()).unwrap();
        assert_eq!((model, p), (json.clone(), params.clone()), "{t}");
    }
    assert!(a.verify().is_ok());
}

/// A persistables directory (one file per parameter, as `save_vars` without a filename
/// writes) with the PIR program as its model.
#[test]
fn a_persistables_directory_with_a_pir_model_imports() {
    let d = tempfile::tempdir().unwrap();
    let dir = d.path().join("p");
    std::fs::create_dir(&dir).unwrap();
    let params = read("mlp.pdiparams");
    let recs = decode_combined(&params).unwrap();
    for (name, r) in manifest_order("mlp").iter().zip(&recs) {
        let mut f = std::fs::File::create(dir.join(name)).unwrap();
        encode_tensor(&r.tensor, &mut f).unwrap();
    }
    let zip = d.path().join("m.zip");
    import_persistables_dir(&zip, "t", &dir, Some(&fixture("mlp.json")), &opts()).unwrap();
    let a = Archive::open(&zip).unwrap();
    let (model, p) = export_inference_model_bytes(&a.tag("t").unwrap()).unwrap();
    assert_eq!(model, read("mlp.json"));
    assert_eq!(p, params);
}

fn import_err(json: &[u8], params: &[u8]) -> (String, PathBuf) {
    let d = tempfile::tempdir().unwrap();
    let zip = d.path().join("m.zip");
    let (jp, pp) = (
        d.path().join("model.json"),
        d.path().join("model.pdiparams"),
    );
    std::fs::write(&jp, json).unwrap();
    std::fs::write(&pp, params).unwrap();
    let e = import_inference_model_files(&zip, "t", &jp, &pp, &opts()).unwrap_err();
    assert!(!zip.exists(), "a failed import wrote {}", zip.display());
    (e.to_string(), d.keep())
}

#[test]
fn truncated_json_is_refused_naming_the_file_and_line() {
    let json = read("cnn.json");
    let (e, dir) = import_err(&json[..json.len() / 2], &read("cnn.pdiparams"));
    assert!(e.contains("not valid JSON"), "{e}");
    assert!(e.contains("model.json"), "{e}");
    assert!(e.contains("line 1"), "{e}");
    std::fs::remove_dir_all(dir).unwrap();
}

#[test]
fn deep_nesting_is_refused_not_a_stack_overflow() {
    // Control flow nested a million levels deep (an op's regions hold blocks of ops).
    let mut deep = br#"{"base_code":{"magic":"pir","version":4},"program":{"regions":["#.to_vec();
    for _ in 0..1_000_000 {
        deep.extend_from_slice(br##"{"blocks":[{"ops":[{"#":"1.if","regions":["##);
    }
    let (e, dir) = import_err(&deep, &read("mlp.pdiparams"));
    assert!(e.contains("recursion limit") && e.contains("line 1"), "{e}");
    std::fs::remove_dir_all(dir).unwrap();
}

#[test]
fn a_params_file_with_a_record_missing_says_how_many_and_which() {
    let params = read("mlp.pdiparams");
    let recs = decode_combined(&params).unwrap();
    let mut three = Vec::new();
    encode_combined(recs.iter().take(3).map(|r| &r.tensor), &mut three).unwrap();
    let (e, dir) = import_err(&read("mlp.json"), &three);
    assert!(
        e.contains("3 record(s), the program has 4 parameter(s)"),
        "{e}"
    );
    assert!(
        e.contains("linear_1.w_0") && e.contains("model.pdiparams"),
        "{e}"
    );
    std::fs::remove_dir_all(dir).unwrap();
}

/// Replaces the first `from` after `after` in the JSON text.
fn edit_after(json: &[u8], after: &str, from: &str, to: &str) -> Vec<u8> {
    let text = String::from_utf8(json.to_vec()).unwrap();
    let at = text.find(after).unwrap();
    let (head, tail) = text.split_at(at);
    assert!(tail.contains(from), "{from} not after {after}");
    format!("{head}{}", tail.replacen(from, to, 1)).into_bytes()
}

#[test]
fn dims_or_dtype_other_than_the_program_declares_are_refused_naming_the_record() {
    let json = read("mlp.json");
    let params = read("mlp.pdiparams");
    // The program says linear_0.w_0 is [16, 8]; the record holds [8, 16].
    let wrong = edit_after(&json, "\"linear_0.w_0\"", "[8,16]", "[16,8]");
    let (e, dir) = import_err(&wrong, &params);
    assert!(e.contains("\"linear_0.w_0\""), "{e}");
    assert!(e.contains("[16, 8]") && e.contains("[8, 16]"), "{e}");
    assert!(e.contains("record 1"), "{e}");
    std::fs::remove_dir_all(dir).unwrap();
    let wrong = edit_after(&json, "\"linear_0.w_0\"", "0.t_f32", "0.t_f64");
    let (e, dir) = import_err(&wrong, &params);
    assert!(e.contains("FP64") && e.contains("FP32"), "{e}");
    std::fs::remove_dir_all(dir).unwrap();
    // A dtype no params file holds.
    let wrong = edit_after(&json, "\"linear_0.w_0\"", "0.t_f32", "0.t_pstring");
    let (e, dir) = import_err(&wrong, &params);
    assert!(
        e.contains("0.t_pstring") && e.contains("linear_0.w_0"),
        "{e}"
    );
    std::fs::remove_dir_all(dir).unwrap();
}

#[test]
fn a_pir_program_with_parameters_needs_its_params_file() {
    let d = tempfile::tempdir().unwrap();
    let zip = d.path().join("m.zip");
    let e = import_program(&zip, "t", &fixture("mlp.json"), &opts()).unwrap_err();
    let e = e.to_string();
    assert!(
        e.contains("4 parameter(s)") && e.contains(".pdiparams"),
        "{e}"
    );
    assert!(!zip.exists());
}

/// graph.fb holding a PIR program is checked on read as on import: a stored program
/// that does not parse is a graph error, not a panic or a silent empty graph.
#[test]
fn a_stored_pir_program_that_does_not_parse_is_refused_on_read() {
    let g = Graph::Pir(PirGraph {
        json: b"{\"base_code\":{\"magic\":\"pir\"".to_vec(),
    });
    let fb = g.encode(GraphFormat::FlatBuffers).unwrap();
    let e = Graph::decode(GraphFormat::FlatBuffers, &fb).unwrap_err();
    assert!(e.to_string().contains("PIR program"), "{e}");
    // A good one round-trips.
    let good = Graph::from_pir_json(&read("mlp.json")).unwrap();
    let back = Graph::decode(
        GraphFormat::FlatBuffers,
        &good.encode(GraphFormat::FlatBuffers).unwrap(),
    )
    .unwrap();
    assert_eq!(back, good);
    assert!(
        good.encode(GraphFormat::ProgramDesc)
            .unwrap_err()
            .to_string()
            .contains("PIR")
    );
}

/// A tag whose PIR program names a parameter the tag lacks fails verify and export,
/// naming the parameter.
#[test]
fn verify_and_export_name_a_parameter_the_tag_lacks() {
    let d = tempfile::tempdir().unwrap();
    let zip = d.path().join("m.zip");
    let g = Graph::from_pir_json(&read("mlp.json")).unwrap();
    let t = modelzip::TagBuilder::new("t").graph(
        GraphFormat::FlatBuffers,
        g.encode(GraphFormat::FlatBuffers).unwrap(),
    );
    let mut w = modelzip::ArchiveWriter::create_with(&zip, &crate::support::write_opts()).unwrap();
    w.add_tag(t).unwrap();
    w.finish().unwrap();
    let a = Archive::open(&zip).unwrap();
    let r = a.verify();
    assert!(!r.is_ok());
    let text = format!("{:?}", r.problems);
    assert!(
        text.contains("linear_0.b_0") && text.contains("t/graph.fb"),
        "{text}"
    );
    let e = paddle::export_inference_model_bytes(&a.tag("t").unwrap()).unwrap_err();
    assert!(e.to_string().contains("linear_0.b_0"), "{e}");
}
