//! Names from an archive are data, not terminal input: human output escapes control and
//! invisible format characters in them (JSON output escapes on its own).

use crate::support::ProgramOf;

use super::harness::{expect_error, json_of, modelzip};
use modelzip::DType;
use modelzip::Graph;
use modelzip::Tensor;
use modelzip::graph::{Op, Var, VarKind};
use modelzip::{ArchiveWriter, GraphFormat, TagBuilder};
use std::path::Path;

const EVIL: &str = "evil\u{1b}[31mRED\u{1b}[0m\nfake_row\u{202e}";
const SHOWN: &str = "evil\\u{1b}[31mRED\\u{1b}[0m\\nfake_row\\u{202e}";

fn hostile_archive(path: &Path) {
    let t = Tensor::from_slice(vec![2], &[1.0f32, 2.0]).unwrap();
    let t2 = Tensor::from_slice(vec![2], &[1.0f32, 3.0]).unwrap();
    let mut g = Graph::from(modelzip::graph::Program::default());
    g.prog_mut().blocks[0]
        .vars
        .push(Var::new(EVIL, VarKind::Parameter, DType::Fp32, vec![2]));
    g.prog_mut().blocks[0].ops.push(
        Op::new(EVIL, "relu")
            .input("X", &[EVIL])
            .output("Out", &["y"]),
    );
    let mut w = ArchiveWriter::create(path).unwrap();
    w.add_tag(
        TagBuilder::new("a")
            .graph(
                GraphFormat::ProgramDesc,
                g.encode(GraphFormat::ProgramDesc).unwrap(),
            )
            .param(EVIL, t.clone())
            .param(format!("unused{EVIL}"), t.clone())
            .updater(EVIL, vec![t.clone()])
            .metadata(br#"{"created": "\u001b[2J\nfake"}"#.to_vec()),
    )
    .unwrap();
    w.add_tag(
        TagBuilder::new("b")
            .param(EVIL, t2)
            .param(format!("{EVIL}2"), t),
    )
    .unwrap();
    w.finish().unwrap();
}

fn stdout_of(args: &[&str], archive: &Path) -> String {
    let out = modelzip()
        .arg(args[0])
        .arg(archive)
        .args(&args[1..])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

fn assert_clean(what: &str, text: &str) {
    assert!(
        !text
            .chars()
            .any(|c| (c.is_control() && c != '\n') || c == '\u{202e}'),
        "{what}: {text:?}"
    );
    assert!(
        !text.lines().any(|l| l.starts_with("fake")),
        "{what}: a name started a line: {text}"
    );
}

#[test]
fn human_output_escapes_control_characters_in_names() {
    let dir = tempfile::tempdir().unwrap();
    let a = dir.path().join("m.zip");
    hostile_archive(&a);
    let cases: [&[&str]; 6] = [
        &["show", "--tag", "a"],
        &["show", "--tag", "b"],
        &["cat", EVIL, "--tag", "a"],
        &["diff", "a", "b"],
        &["graph", "--tag", "a"],
        &["tags"],
    ];
    for args in cases {
        let text = stdout_of(args, &a);
        assert_clean(args[0], &text);
        if args[0] != "tags" {
            assert!(text.contains(SHOWN), "{args:?}: {text}");
        }
    }
    let show = stdout_of(&["show", "--tag", "a"], &a);
    assert_eq!(show.lines().count(), 5, "{show}"); // header, columns, 2 params, updater
    let prefix = dir.path().join("m");
    let prefix = prefix.to_str().unwrap();
    let export = stdout_of(&["export-paddle", "--tag", "a", "--out", prefix], &a);
    assert_clean("export-paddle", &export);
    assert!(export.contains(&format!("unused{SHOWN}")), "{export}");
    let tags = stdout_of(&["tags"], &a);
    assert!(tags.contains("\\u{1b}[2J\\nfake"), "{tags}");
    // JSON keeps the name exactly.
    let doc = json_of(
        modelzip()
            .arg("show")
            .arg(&a)
            .args(["--tag", "a", "--json"]),
    );
    assert_eq!(doc["params"][0]["name"], EVIL);
    // An error line that quotes a name is one clean line too.
    let line = expect_error(modelzip().arg("cat").arg(&a).arg(format!("{EVIL}x")));
    assert_clean("cat error", &line);
}

/// An ONNX model's names (node name, op type, domain, values, graph inputs and outputs,
/// opset domain) are escaped in `graph`'s listing as every other graph kind's are.
#[test]
fn an_onnx_listing_escapes_the_models_names() {
    use modelzip::onnx_proto as pb;
    use prost::Message;
    let dir = tempfile::tempdir().unwrap();
    let s = |v: &str| Some(v.to_string());
    let value = |name: &str| pb::ValueInfoProto {
        name: s(name),
        ..Default::default()
    };
    let w = pb::TensorProto {
        dims: vec![2],
        data_type: Some(1),
        name: s("W"),
        raw_data: Some(bytes::Bytes::copy_from_slice(&[0u8; 8])),
        ..Default::default()
    };
    let model = pb::ModelProto {
        ir_version: Some(8),
        opset_import: vec![pb::OperatorSetIdProto {
            domain: s(""),
            version: Some(13),
        }],
        graph: Some(pb::GraphProto {
            name: s("g"),
            node: vec![pb::NodeProto {
                input: vec!["X".into(), "W".into()],
                output: vec![EVIL.into()],
                name: s(EVIL),
                op_type: s(&format!("Add{EVIL}")),
                domain: s(&format!("{EVIL}.d")),
                ..Default::default()
            }],
            initializer: vec![w],
            input: vec![value(&format!("X{EVIL}"))],
            output: vec![value(EVIL)],
            ..Default::default()
        }),
        ..Default::default()
    };
    let file = dir.path().join("evil.onnx");
    std::fs::write(&file, model.encode_to_vec()).unwrap();
    let a = dir.path().join("m.zip");
    modelzip::interop::onnx::import_model_file(&a, "v1", &file, &crate::support::import_opts())
        .unwrap();
    let text = stdout_of(&["graph"], &a);
    assert_clean("graph (ONNX)", &text);
    assert!(text.contains(&format!("Add{SHOWN}")), "{text}");
}
