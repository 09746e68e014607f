//! Malformed graph.fb and graph.pdmodel bytes give errors, never panics.

use modelzip::Graph;
use modelzip::GraphFormat;
use modelzip::paddle_proto as pb;
use proptest::prelude::*;
use prost::Message;

fn fixture(name: &str) -> Vec<u8> {
    let p = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/paddle")
        .join(name);
    std::fs::read(p).unwrap()
}

fn pd_err(bytes: &[u8]) -> String {
    Graph::decode(GraphFormat::ProgramDesc, bytes)
        .unwrap_err()
        .to_string()
}

fn fb_err(bytes: &[u8]) -> String {
    Graph::decode(GraphFormat::FlatBuffers, bytes)
        .unwrap_err()
        .to_string()
}

fn program() -> pb::ProgramDesc {
    pb::ProgramDesc::decode(fixture("2.6.2/mlp.pdmodel").as_slice()).unwrap()
}

#[test]
fn programdesc_garbage_and_truncation() {
    assert!(pd_err(b"").contains("no blocks"));
    assert!(pd_err(b"\xff\xff\xff\xff").contains("invalid ProgramDesc"));
    let bytes = fixture("3.3.1/conv.pdmodel");
    for cut in (1..bytes.len()).step_by(13) {
        // Some prefixes end on a field boundary and are valid messages; none may panic.
        let _ = Graph::decode(GraphFormat::ProgramDesc, &bytes[..cut]);
    }
    assert!(Graph::decode(GraphFormat::ProgramDesc, &bytes[..bytes.len() - 1]).is_err());
}

/// Paddle 3 saves a PIR program as JSON by default: the ProgramDesc decoder says the
/// bytes are JSON and points to the PIR reader.
#[test]
fn programdesc_decoder_names_pir_json() {
    for json in [
        &br#"{"base_code":{"magic":"pir","version":1},"program":{"regions":[]}}"#[..],
        b" \n\t{}",
        b"{",
    ] {
        let e = pd_err(json);
        assert!(
            e.contains("this is JSON") && e.contains("PIR") && e.contains("from_pir_json"),
            "{e}"
        );
    }
    // Other garbage keeps the protobuf error.
    assert!(!pd_err(b"\xff\xff\xff\xff").contains("PIR"));
    assert!(!pd_err(b"[1, 2]").contains("PIR"));
}

#[test]
fn programdesc_unknown_enum_values_are_named() {
    let mut p = program();
    let name = p.blocks[0].vars[1].name.clone();
    p.blocks[0].vars[1].r#type.r#type = 99;
    let e = pd_err(&p.encode_to_vec());
    assert!(
        e.contains("block 0") && e.contains(&name) && e.contains("VarType.Type value 99"),
        "{e}"
    );

    let mut p = program();
    let v = &mut p.blocks[0].vars[1];
    let name = v.name.clone();
    if let Some(d) = v.r#type.dense_tensor.as_mut() {
        d.tensor.data_type = 77;
    }
    let e = pd_err(&p.encode_to_vec());
    assert!(e.contains(&name) && e.contains("77"), "{e}");

    let mut p = program();
    let op = &mut p.blocks[0].ops[1];
    let op_type = op.r#type.clone();
    op.attrs[0].r#type = 42;
    let attr = op.attrs[0].name.clone();
    let e = pd_err(&p.encode_to_vec());
    assert!(
        e.contains(&format!("op 1 ({op_type})"))
            && e.contains(&attr)
            && e.contains("AttrType value 42"),
        "{e}"
    );

    let mut p = program();
    p.blocks[0].ops[0].attrs.push(pb::op_desc::Attr {
        name: "s".into(),
        r#type: 16,
        scalar: Some(pb::Scalar {
            r#type: 9,
            ..Default::default()
        }),
        ..Default::default()
    });
    assert!(pd_err(&p.encode_to_vec()).contains("Scalar.Type value 9"));

    let mut p = program();
    p.blocks[0].vars[0].r#type.tuple = Some(pb::var_type::Tuple {
        element_type: vec![5, 1000],
    });
    assert!(pd_err(&p.encode_to_vec()).contains("1000"));
}

#[test]
fn programdesc_missing_required_fields_are_named() {
    // A block with parent_idx but no idx.
    let e = pd_err(&[0x0a, 0x02, 0x10, 0x00]);
    assert!(e.contains("required field idx"), "{e}");
    // An op with no type: blocks[0] { idx 0 parent_idx 0 ops { } }.
    let e = pd_err(&[0x0a, 0x06, 0x08, 0x00, 0x10, 0x00, 0x22, 0x00]);
    assert!(
        e.contains("ops[0]") && e.contains("required field type"),
        "{e}"
    );
    // A var whose TensorDesc has no data_type: vars { name "v" type { type 7 dense_tensor { tensor { } } } }.
    let var = [
        0x0a, 0x01, b'v', 0x12, 0x06, 0x08, 0x07, 0x1a, 0x02, 0x0a, 0x00,
    ];
    let mut block = vec![0x08, 0x00, 0x10, 0x00, 0x1a, var.len() as u8];
    block.extend_from_slice(&var);
    let mut bytes = vec![0x0a, block.len() as u8];
    bytes.extend_from_slice(&block);
    let e = pd_err(&bytes);
    assert!(
        e.contains("vars[0] (\"v\")") && e.contains("data_type"),
        "{e}"
    );
    // An INT attribute without its value.
    let mut p = program();
    p.blocks[0].ops[0].attrs[0] = pb::op_desc::Attr {
        name: "col".into(),
        r#type: 0,
        ..Default::default()
    };
    assert!(pd_err(&p.encode_to_vec()).contains("value field i is missing"));
    // A value in a field its type does not use.
    let mut p = program();
    p.blocks[0].ops[0].attrs[0].s = Some("x".into());
    assert!(pd_err(&p.encode_to_vec()).contains("field s is set"));
}

#[test]
fn flatbuffers_garbage_identifier_truncation_and_offsets() {
    let g = Graph::decode(GraphFormat::ProgramDesc, &fixture("2.6.2/conv.pdmodel")).unwrap();
    let fb = g.encode(GraphFormat::FlatBuffers).unwrap();
    assert!(fb_err(b"").contains("truncated"));
    assert!(fb_err(b"abc").contains("truncated"));
    assert!(fb_err(&fixture("2.6.2/conv.pdmodel")).contains("identifier"));
    let mut wrong = fb.clone();
    wrong[4..8].copy_from_slice(b"MZTC");
    assert!(fb_err(&wrong).contains("identifier"));
    for cut in (8..fb.len()).step_by(17) {
        assert!(
            Graph::decode(GraphFormat::FlatBuffers, &fb[..cut]).is_err(),
            "prefix {cut}"
        );
    }
    // Root offset pointing outside the buffer.
    let mut bad = fb.clone();
    bad[0..4].copy_from_slice(&u32::MAX.to_le_bytes());
    assert!(fb_err(&bad).contains("verification"));
    let mut bad = fb.clone();
    bad[0..4].copy_from_slice(&((fb.len() as u32) - 2).to_le_bytes());
    assert!(Graph::decode(GraphFormat::FlatBuffers, &bad).is_err());
}

fn mutate(bytes: &[u8], edits: &[(usize, u8)], keep_prefix: usize) -> Vec<u8> {
    let mut out = bytes.to_vec();
    for &(pos, val) in edits {
        if out.len() > keep_prefix {
            let i = keep_prefix + pos % (out.len() - keep_prefix);
            out[i] = val;
        }
    }
    out
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 192, ..ProptestConfig::default() })]

    #[test]
    fn random_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..512)) {
        let _ = Graph::decode(GraphFormat::ProgramDesc, &bytes);
        let _ = Graph::decode(GraphFormat::FlatBuffers, &bytes);
        let _ = modelzip::TrainingConfig::decode(&bytes);
        let _ = modelzip::dump::pbtxt(&bytes);
        let mut with_id = bytes.clone();
        if with_id.len() >= 8 {
            with_id[4..8].copy_from_slice(b"MZGF");
            let _ = Graph::decode(GraphFormat::FlatBuffers, &with_id);
            with_id[4..8].copy_from_slice(b"MZTC");
            let _ = modelzip::TrainingConfig::decode(&with_id);
        }
    }

    #[test]
    fn mutated_programdesc_never_panics(edits in proptest::collection::vec((any::<usize>(), any::<u8>()), 1..8)) {
        let bytes = mutate(&fixture("2.6.2/mlp.pdmodel"), &edits, 0);
        if let Ok(g) = Graph::decode(GraphFormat::ProgramDesc, &bytes) {
            // Whatever decodes must encode in both formats and read back equal.
            let fb = g.encode(GraphFormat::FlatBuffers).unwrap();
            prop_assert_eq!(Graph::decode(GraphFormat::FlatBuffers, &fb).unwrap(), g.clone());
            prop_assert!(g.encode(GraphFormat::ProgramDesc).is_ok());
        }
    }

    #[test]
    fn mutated_flatbuffers_never_panic(edits in proptest::collection::vec((any::<usize>(), any::<u8>()), 1..8)) {
        let g = Graph::decode(GraphFormat::ProgramDesc, &fixture("3.3.1/mlp.pdmodel")).unwrap();
        let bytes = mutate(&g.encode(GraphFormat::FlatBuffers).unwrap(), &edits, 8);
        if let Ok(g) = Graph::decode(GraphFormat::FlatBuffers, &bytes) {
            let _ = g.encode(GraphFormat::ProgramDesc);
            let _ = modelzip::dump::text(&g);
        }
    }
}

/// The `@modelzip` attribute names an op's data-type attributes. Each INT attribute was
/// looked up in that list by a linear search (and again when converted), and each
/// data-type attribute counted by a scan of the op's attributes on encode: 200,000 of
/// them (a 3 MB program) were 10^11 string comparisons. Sets and one counting pass make
/// both linear; the program still reads as data types and encodes to the same bytes. A
/// name listed twice, or shared by two attributes (which `encode` refuses to write: a
/// STRING beside the INT was read as a data type, then the graph would not encode),
/// leaves the attribute an ordinary string.
#[test]
fn many_data_type_attributes_are_linear_and_round_trip() {
    let n = 200_000;
    let names: Vec<String> = (0..n).map(|i| format!("d{i:06}")).collect();
    let int = |name: &String| pb::op_desc::Attr {
        name: name.clone(),
        r#type: 0,
        i: Some(5),
        ..Default::default()
    };
    let with = |attrs: Vec<pb::op_desc::Attr>, dtype_args: &[String]| {
        let mut p = program();
        p.blocks[0].ops[0].attrs.extend(attrs);
        p.blocks[0].ops[0].attrs.push(pb::op_desc::Attr {
            name: "@modelzip".into(),
            r#type: 2,
            s: Some(serde_json::json!({ "dtype_args": dtype_args }).to_string()),
            ..Default::default()
        });
        p.encode_to_vec()
    };
    let dtypes = |g: &Graph| match g {
        Graph::Program(p) => p.blocks[0].ops[0]
            .attrs
            .iter()
            .filter(|a| matches!(a.value, modelzip::graph::AttrValue::DataType(_)))
            .count(),
        _ => panic!("not a program"),
    };
    // A name listed twice, two INT attributes of one listed name, a STRING attribute
    // of the listed name beside its INT one: ordinary attributes, written back as read.
    let d0 = &names[..1];
    let string = pb::op_desc::Attr {
        name: names[0].clone(),
        r#type: 2,
        s: Some("x".into()),
        ..Default::default()
    };
    for (what, bytes) in [
        (
            "listed twice",
            with(vec![int(&names[0])], &[d0, d0].concat()),
        ),
        ("two INT", with(vec![int(&names[0]), int(&names[0])], d0)),
        ("a STRING too", with(vec![string, int(&names[0])], d0)),
    ] {
        let g = Graph::decode(GraphFormat::ProgramDesc, &bytes).unwrap();
        assert_eq!(dtypes(&g), 0, "{what}");
        assert_eq!(g.encode(GraphFormat::ProgramDesc).unwrap(), bytes, "{what}");
    }
    // All 200,000 listed: data types, and the same bytes back.
    let bytes = with(names.iter().map(int).collect(), &names);
    let g = Graph::decode(GraphFormat::ProgramDesc, &bytes).unwrap();
    assert_eq!(dtypes(&g), n);
    assert_eq!(g.encode(GraphFormat::ProgramDesc).unwrap(), bytes);
}
