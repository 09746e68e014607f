//! Round trips of real Paddle programs and synthetic graphs through both encodings.

use crate::support::ProgramOf;

use modelzip::{Graph, GraphFormat};
use std::path::PathBuf;

fn fixtures() -> Vec<PathBuf> {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/paddle");
    let mut out = Vec::new();
    for version in std::fs::read_dir(&root).unwrap() {
        for f in std::fs::read_dir(version.unwrap().path()).unwrap() {
            let p = f.unwrap().path();
            if p.extension().is_some_and(|e| e == "pdmodel") {
                out.push(p);
            }
        }
    }
    out.sort();
    out
}

#[test]
fn paddle_fixtures_round_trip_byte_for_byte() {
    let files = fixtures();
    assert!(files.len() >= 4, "fixtures missing: {files:?}");
    for path in files {
        let bytes = std::fs::read(&path).unwrap();
        let g = Graph::decode(GraphFormat::ProgramDesc, &bytes)
            .unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        assert_eq!(
            g.encode(GraphFormat::ProgramDesc).unwrap(),
            bytes,
            "{}",
            path.display()
        );
        let fb = g.encode(GraphFormat::FlatBuffers).unwrap();
        let back = Graph::decode(GraphFormat::FlatBuffers, &fb).unwrap();
        assert_eq!(back, g, "{}", path.display());
        assert_eq!(
            back.encode(GraphFormat::ProgramDesc).unwrap(),
            bytes,
            "{}",
            path.display()
        );
    }
}

mod synthetic {
    use crate::support::ProgramOf;
    use modelzip::DType;
    use modelzip::Graph;
    use modelzip::GraphFormat;
    use modelzip::graph::{AttrValue, Op, Slot, Var, VarKind};
    use modelzip::paddle_proto as pb;
    use pb::{op_desc, var_desc, var_type};
    use prost::Message;

    fn tensor(dt: i32, dims: &[i64]) -> var_type::TensorDesc {
        var_type::TensorDesc {
            data_type: dt,
            dims: dims.to_vec(),
        }
    }

    fn dense_var(name: &str, dims: &[i64]) -> pb::VarDesc {
        pb::VarDesc {
            name: name.into(),
            r#type: pb::VarType {
                r#type: 7,
                dense_tensor: Some(var_type::DenseTensorDesc {
                    tensor: tensor(5, dims),
                    legacy_lod_level: Some(0),
                }),
                ..Default::default()
            },
            persistable: Some(false),
            ..Default::default()
        }
    }

    fn attr(name: &str, ty: i32) -> op_desc::Attr {
        op_desc::Attr {
            name: name.into(),
            r#type: ty,
            ..Default::default()
        }
    }

    fn scalar(ty: i32) -> pb::Scalar {
        pb::Scalar {
            r#type: ty,
            b: (ty == 1).then_some(true),
            i: (ty == 2).then_some(-7),
            r: (ty == 3).then_some(2.5),
            c: (ty == 4).then_some(pb::Complex { r: 1.0, i: -1.0 }),
        }
    }

    fn slot(name: &str, args: &[&str]) -> op_desc::Var {
        op_desc::Var {
            parameter: name.into(),
            arguments: args.iter().map(|s| s.to_string()).collect(),
        }
    }

    /// Every AttrType, every var kind, nested blocks, optional fields present and absent.
    pub fn program() -> pb::ProgramDesc {
        let every_attr = vec![
            op_desc::Attr {
                i: Some(-3),
                ..attr("int", 0)
            },
            op_desc::Attr {
                f: Some(0.1),
                ..attr("float", 1)
            },
            op_desc::Attr {
                s: Some("héllo".into()),
                ..attr("string", 2)
            },
            op_desc::Attr {
                ints: vec![1, -2, 3],
                ..attr("ints", 3)
            },
            op_desc::Attr {
                floats: vec![0.5, f32::MIN_POSITIVE],
                ..attr("floats", 4)
            },
            op_desc::Attr {
                strings: vec!["a".into(), String::new()],
                ..attr("strings", 5)
            },
            op_desc::Attr {
                b: Some(true),
                ..attr("boolean", 6)
            },
            op_desc::Attr {
                bools: vec![true, false],
                ..attr("booleans", 7)
            },
            op_desc::Attr {
                block_idx: Some(1),
                ..attr("sub_block", 8)
            },
            op_desc::Attr {
                l: Some(i64::MIN),
                ..attr("long", 9)
            },
            op_desc::Attr {
                blocks_idx: vec![1, 2],
                ..attr("blocks", 10)
            },
            op_desc::Attr {
                longs: vec![i64::MAX, 0],
                ..attr("longs", 11)
            },
            op_desc::Attr {
                float64s: vec![1e300, -0.0],
                ..attr("float64s", 12)
            },
            op_desc::Attr {
                var_name: Some("x".into()),
                ..attr("var", 13)
            },
            op_desc::Attr {
                vars_name: vec!["x".into(), "y".into()],
                ..attr("vars", 14)
            },
            op_desc::Attr {
                float64: Some(std::f64::consts::PI),
                ..attr("float64", 15)
            },
            op_desc::Attr {
                scalar: Some(scalar(4)),
                ..attr("scalar", 16)
            },
            op_desc::Attr {
                scalars: vec![scalar(1), scalar(2), scalar(3)],
                ..attr("scalars", 17)
            },
            // Empty lists and a scalar with no value field.
            attr("empty_ints", 3),
            op_desc::Attr {
                scalar: Some(pb::Scalar {
                    r#type: 3,
                    ..Default::default()
                }),
                ..attr("bare_scalar", 16)
            },
            op_desc::Attr {
                i: Some(5),
                ..attr("dtype", 0)
            },
        ];
        let feed = pb::VarDesc {
            name: "feed".into(),
            r#type: pb::VarType {
                r#type: 9,
                ..Default::default()
            },
            persistable: Some(true),
            ..Default::default()
        };
        let x = pb::VarDesc {
            need_check_feed: Some(true),
            stop_gradient: Some(true),
            ..dense_var("x", &[-1, 4])
        };
        let w = pb::VarDesc {
            persistable: Some(true),
            is_parameter: Some(true),
            stop_gradient: Some(false),
            attrs: vec![
                var_desc::Attr {
                    name: "i".into(),
                    r#type: 0,
                    i: Some(1),
                    s: None,
                    ints: vec![],
                },
                var_desc::Attr {
                    name: "s".into(),
                    r#type: 2,
                    i: None,
                    s: Some("v".into()),
                    ints: vec![],
                },
                var_desc::Attr {
                    name: "ints".into(),
                    r#type: 3,
                    i: None,
                    s: None,
                    ints: vec![1, 2],
                },
            ],
            ..dense_var("w", &[4, 2])
        };
        let c = pb::VarDesc {
            persistable: Some(true),
            r#type: pb::VarType {
                r#type: 7,
                // No legacy_lod_level written.
                dense_tensor: Some(var_type::DenseTensorDesc {
                    tensor: tensor(22, &[]),
                    legacy_lod_level: None,
                }),
                ..Default::default()
            },
            ..dense_var("c", &[])
        };
        // Flags not written at all.
        let y = pb::VarDesc {
            persistable: None,
            ..dense_var("y", &[-1, 2])
        };
        let arr = pb::VarDesc {
            name: "arr".into(),
            r#type: pb::VarType {
                r#type: 13,
                tensor_array: Some(var_type::DenseTensorArrayDesc {
                    tensor: tensor(3, &[-1]),
                    legacy_lod_level: Some(1),
                }),
                ..Default::default()
            },
            ..Default::default()
        };
        let rows = pb::VarDesc {
            name: "rows".into(),
            r#type: pb::VarType {
                r#type: 8,
                selected_rows: Some(tensor(5, &[10, 3])),
                ..Default::default()
            },
            ..Default::default()
        };
        let reader = pb::VarDesc {
            name: "reader".into(),
            r#type: pb::VarType {
                r#type: 15,
                reader: Some(var_type::ReaderDesc {
                    dense_tensor: vec![
                        var_type::DenseTensorDesc {
                            tensor: tensor(5, &[-1, 4]),
                            legacy_lod_level: Some(0),
                        },
                        var_type::DenseTensorDesc {
                            tensor: tensor(3, &[-1, 1]),
                            legacy_lod_level: None,
                        },
                    ],
                }),
                ..Default::default()
            },
            ..Default::default()
        };
        let tuple = pb::VarDesc {
            name: "tuple".into(),
            r#type: pb::VarType {
                r#type: 18,
                tuple: Some(var_type::Tuple {
                    element_type: vec![5, 7, 3],
                }),
                ..Default::default()
            },
            ..Default::default()
        };
        // A dense tensor that also carries a stray selected_rows description.
        let odd = pb::VarDesc {
            r#type: pb::VarType {
                r#type: 7,
                dense_tensor: Some(var_type::DenseTensorDesc {
                    tensor: tensor(6, &[2]),
                    legacy_lod_level: Some(0),
                }),
                selected_rows: Some(tensor(6, &[3])),
                vocab: Some(tensor(5, &[])),
                ..Default::default()
            },
            ..dense_var("odd", &[2])
        };
        let strings = pb::VarDesc {
            name: "strs".into(),
            r#type: pb::VarType {
                r#type: 26,
                strings: Some(tensor(5, &[-1])),
                ..Default::default()
            },
            ..Default::default()
        };
        let empty_reader = pb::VarDesc {
            name: "empty_reader".into(),
            r#type: pb::VarType {
                r#type: 15,
                reader: Some(var_type::ReaderDesc {
                    dense_tensor: vec![],
                }),
                ..Default::default()
            },
            ..Default::default()
        };
        let main_ops = vec![
            pb::OpDesc {
                r#type: "feed".into(),
                inputs: vec![slot("X", &["feed"])],
                outputs: vec![slot("Out", &["x"])],
                attrs: vec![op_desc::Attr {
                    i: Some(0),
                    ..attr("col", 0)
                }],
                is_target: None,
            },
            pb::OpDesc {
                r#type: "everything".into(),
                inputs: vec![slot("X", &["x", "w"]), slot("Empty", &[])],
                outputs: vec![slot("Out", &["y"])],
                attrs: every_attr,
                is_target: Some(false),
            },
            pb::OpDesc {
                r#type: "while".into(),
                inputs: vec![slot("X", &["y"]), slot("Condition", &["c"])],
                outputs: vec![slot("Out", &["y"]), slot("StepScopes", &["scopes"])],
                attrs: vec![op_desc::Attr {
                    block_idx: Some(1),
                    ..attr("sub_block", 8)
                }],
                is_target: Some(true),
            },
            pb::OpDesc {
                r#type: "conditional_block".into(),
                inputs: vec![slot("Cond", &["c"]), slot("Input", &["y"])],
                outputs: vec![slot("Out", &["y"])],
                attrs: vec![
                    op_desc::Attr {
                        block_idx: Some(2),
                        ..attr("sub_block", 8)
                    },
                    op_desc::Attr {
                        b: Some(true),
                        ..attr("is_scalar_condition", 6)
                    },
                ],
                is_target: None,
            },
        ];
        let block0 = pb::BlockDesc {
            idx: 0,
            parent_idx: -1,
            vars: vec![
                feed,
                x,
                w,
                c,
                y,
                arr,
                rows,
                reader,
                tuple,
                odd,
                strings,
                empty_reader,
            ],
            ops: main_ops,
            forward_block_idx: Some(-1),
        };
        let block1 = pb::BlockDesc {
            idx: 1,
            parent_idx: 0,
            vars: vec![dense_var("inner", &[-1, 2])],
            ops: vec![pb::OpDesc {
                r#type: "relu".into(),
                inputs: vec![slot("X", &["y"])],
                outputs: vec![slot("Out", &["inner"])],
                attrs: vec![],
                is_target: None,
            }],
            forward_block_idx: None,
        };
        let block2 = pb::BlockDesc {
            idx: 2,
            parent_idx: 0,
            vars: vec![],
            ops: vec![],
            forward_block_idx: Some(1),
        };
        pb::ProgramDesc {
            blocks: vec![block0, block1, block2],
            version: Some(pb::Version {
                version: Some(2006002),
            }),
            op_version_map: Some(pb::OpVersionMap {
                pair: vec![pb::op_version_map::OpVersionPair {
                    op_name: "while".into(),
                    op_version: pb::OpVersion { version: 2 },
                }],
            }),
        }
    }

    fn round_trip_bytes(bytes: &[u8]) -> Graph {
        let g = Graph::decode(GraphFormat::ProgramDesc, bytes).unwrap();
        assert_eq!(g.encode(GraphFormat::ProgramDesc).unwrap(), bytes);
        let fb = g.encode(GraphFormat::FlatBuffers).unwrap();
        let back = Graph::decode(GraphFormat::FlatBuffers, &fb).unwrap();
        assert_eq!(back, g);
        assert_eq!(back.encode(GraphFormat::ProgramDesc).unwrap(), bytes);
        // Decoded again field by field with prost as well.
        assert_eq!(
            pb::ProgramDesc::decode(back.encode(GraphFormat::ProgramDesc).unwrap().as_slice())
                .unwrap(),
            pb::ProgramDesc::decode(bytes).unwrap()
        );
        g
    }

    #[test]
    fn every_attr_type_var_kind_and_nested_block_round_trips() {
        let bytes = program().encode_to_vec();
        let g = round_trip_bytes(&bytes);
        assert_eq!(g.prog().blocks.len(), 3);
        let kinds: Vec<VarKind> = g.prog().blocks[0].vars.iter().map(|v| v.kind).collect();
        assert_eq!(
            kinds,
            [
                VarKind::Other(9),
                VarKind::Placeholder,
                VarKind::Parameter,
                VarKind::Constant,
                VarKind::Variable,
                VarKind::Array,
                VarKind::Other(8),
                VarKind::Other(15),
                VarKind::Other(18),
                VarKind::Variable,
                VarKind::Other(26),
                VarKind::Other(15),
            ]
        );
        let every = &g.prog().blocks[0].ops[1];
        assert_eq!(every.attrs.len(), 21);
        assert_eq!(every.get_attr("sub_block"), Some(&AttrValue::Block(1)));
        // A Paddle INT named dtype stays an INT.
        assert_eq!(every.get_attr("dtype"), Some(&AttrValue::Int(5)));
        assert_eq!(g.prog().blocks[0].vars[3].dtype, Some(DType::Bf16));
        assert_eq!(g.prog().blocks[0].vars[3].lod_level, None);
        assert_eq!(g.prog().blocks[2].forward_block_idx, Some(1));
    }

    #[test]
    fn absent_optional_messages_stay_absent() {
        let mut p = program();
        p.version = None;
        p.op_version_map = Some(pb::OpVersionMap { pair: vec![] });
        let g = round_trip_bytes(&p.encode_to_vec());
        assert_eq!(g.prog().version, None);
        assert_eq!(g.prog().op_version_map, Some(vec![]));
        p.op_version_map = None;
        assert_eq!(
            round_trip_bytes(&p.encode_to_vec()).prog().op_version_map,
            None
        );
    }

    /// A SameDiff-shaped graph: one block, placeholders/constants/variables, named ops,
    /// long/double/bool/data-type arguments.
    pub fn samediff() -> Graph {
        let mut g = Graph::from(modelzip::graph::Program::default());
        let b = &mut g.prog_mut().blocks[0];
        b.vars.push(Var::new(
            "in",
            VarKind::Placeholder,
            DType::Fp32,
            vec![-1, 784],
        ));
        b.vars.push(Var::new(
            "w0",
            VarKind::Parameter,
            DType::Fp32,
            vec![784, 10],
        ));
        b.vars
            .push(Var::new("scale", VarKind::Constant, DType::Fp16, vec![]));
        b.vars
            .push(Var::new("mm", VarKind::Variable, DType::Fp32, vec![-1, 10]));
        b.vars.push(Var::new(
            "out",
            VarKind::Variable,
            DType::Bf16,
            vec![-1, 10],
        ));
        b.ops.push(
            Op::new("matmul", "mmul")
                .input("input", &["in", "w0"])
                .output("output", &["mm"])
                .attr("transposeX", AttrValue::Long(0))
                .attr("alpha", AttrValue::Float64(1.0))
                .attr("transposeY", AttrValue::Bool(false))
                .attr("beta", AttrValue::Float64(0.0)),
        );
        b.ops.push(
            Op::new("cast_out", "cast")
                .input("input", &["mm"])
                .output("output", &["out"])
                .attr("dtype", AttrValue::DataType(DType::Bf16))
                .attr("inplace", AttrValue::Bool(true))
                .attr("out_dtype", AttrValue::DataType(DType::Fp32)),
        );
        g
    }

    #[test]
    fn samediff_graph_survives_both_encodings() {
        let g = samediff();
        let pd = g.encode(GraphFormat::ProgramDesc).unwrap();
        let from_pd = Graph::decode(GraphFormat::ProgramDesc, &pd).unwrap();
        assert_eq!(from_pd, g);
        assert_eq!(from_pd.encode(GraphFormat::ProgramDesc).unwrap(), pd);
        let fb = g.encode(GraphFormat::FlatBuffers).unwrap();
        assert_eq!(&fb[4..8], b"MZGF");
        assert_eq!(Graph::decode(GraphFormat::FlatBuffers, &fb).unwrap(), g);
        assert_eq!(
            Graph::decode(
                GraphFormat::FlatBuffers,
                &from_pd.encode(GraphFormat::FlatBuffers).unwrap()
            )
            .unwrap(),
            g
        );
        // In the ProgramDesc, data types are INT attributes Paddle can read.
        let p = pb::ProgramDesc::decode(pd.as_slice()).unwrap();
        let cast = &p.blocks[0].ops[1];
        assert_eq!(cast.attrs[0].r#type, 0);
        assert_eq!(cast.attrs[0].i, Some(22));
        assert_eq!(
            cast.attrs.last().unwrap().name,
            modelzip::graph::programdesc::MODELZIP_ATTR
        );
    }

    #[test]
    fn contradictory_kind_is_refused_for_programdesc() {
        let mut g = samediff();
        g.prog_mut().blocks[0].vars[3].persistable = Some(true); // a "variable" that reads back as constant
        let e = g.encode(GraphFormat::ProgramDesc).unwrap_err().to_string();
        assert!(e.contains("var \"mm\"") && e.contains("contradicts"), "{e}");
        // Implied flags are filled in when absent.
        let mut g = Graph::from(modelzip::graph::Program::default());
        g.prog_mut().blocks[0].vars.push(Var {
            need_check_feed: None,
            persistable: None,
            ..Var::new("p", VarKind::Placeholder, DType::Fp32, vec![1])
        });
        let back = Graph::decode(
            GraphFormat::ProgramDesc,
            &g.encode(GraphFormat::ProgramDesc).unwrap(),
        )
        .unwrap();
        assert_eq!(back.prog().blocks[0].vars[0].kind, VarKind::Placeholder);
        assert_eq!(back.prog().blocks[0].vars[0].need_check_feed, Some(true));
    }

    #[test]
    fn op_slots_keep_their_names() {
        let g = samediff();
        let back = Graph::decode(
            GraphFormat::ProgramDesc,
            &g.encode(GraphFormat::ProgramDesc).unwrap(),
        )
        .unwrap();
        assert_eq!(
            back.prog().blocks[0].ops[0].inputs[0],
            Slot::new("input", &["in", "w0"])
        );
    }
}

#[test]
fn packed_repeated_fields_are_accepted() {
    use modelzip::graph::AttrValue;
    // attrs { name "a" type INTS ints [1, 2] packed }, in op { type "t" }, in block 0.
    let attr = [0x0a, 0x01, b'a', 0x10, 0x03, 0x32, 0x02, 0x01, 0x02];
    let mut op = vec![0x1a, 0x01, b't', 0x22, attr.len() as u8];
    op.extend_from_slice(&attr);
    let mut block = vec![
        0x08,
        0x00,
        0x10,
        0xff,
        0xff,
        0xff,
        0xff,
        0xff,
        0xff,
        0xff,
        0xff,
        0xff,
        0x01,
        0x22,
        op.len() as u8,
    ];
    block.extend_from_slice(&op);
    let mut bytes = vec![0x0a, block.len() as u8];
    bytes.extend_from_slice(&block);
    let g = Graph::decode(GraphFormat::ProgramDesc, &bytes).unwrap();
    assert_eq!(g.prog().blocks[0].parent_idx, -1);
    assert_eq!(
        g.prog().blocks[0].ops[0].get_attr("a"),
        Some(&AttrValue::Ints(vec![1, 2]))
    );
    // Written back the way Paddle writes proto2 repeated fields: unpacked.
    let out = g.encode(GraphFormat::ProgramDesc).unwrap();
    assert!(out.windows(4).any(|w| w == [0x30, 0x01, 0x30, 0x02]));
}

#[test]
fn sniff_tells_the_formats_apart() {
    let pd = std::fs::read(fixtures()[0].clone()).unwrap();
    let fb = Graph::decode(GraphFormat::ProgramDesc, &pd)
        .unwrap()
        .encode(GraphFormat::FlatBuffers)
        .unwrap();
    assert_eq!(GraphFormat::sniff(&pd), Some(GraphFormat::ProgramDesc));
    assert_eq!(GraphFormat::sniff(&fb), Some(GraphFormat::FlatBuffers));
    assert_eq!(GraphFormat::sniff(b"PK\x03\x04"), None);
    assert_eq!(
        GraphFormat::from_file_name("graph.fb"),
        Some(GraphFormat::FlatBuffers)
    );
    assert_eq!(GraphFormat::ProgramDesc.file_name(), "graph.pdmodel");
}
