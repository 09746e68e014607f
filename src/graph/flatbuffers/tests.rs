use super::decode::decode;
use super::encode::{Fbb, encode, string_vec};
use crate::graph::generated::graph as fbg;
use crate::graph::model::{AttrValue, Graph, Op, Program, Slot};
use crate::tensor::DType;
use ::flatbuffers::WIPOffset;

/// graph.fb bytes with one block holding `vars` and the op `op` builds.
fn build(
    schema_version: i32,
    var: impl for<'a> FnOnce(&mut Fbb<'a>) -> Option<WIPOffset<fbg::Variable<'a>>>,
    op: impl for<'a> FnOnce(&mut Fbb<'a>) -> Option<WIPOffset<fbg::Operation<'a>>>,
) -> Vec<u8> {
    let mut fbb = Fbb::new();
    let vars: Vec<_> = var(&mut fbb).into_iter().collect();
    let ops: Vec<_> = op(&mut fbb).into_iter().collect();
    finish(fbb, schema_version, &vars, &ops)
}

/// Finishes graph.fb bytes with one block of `vars` and `ops` (tables already in `fbb`).
fn finish<'a>(
    mut fbb: Fbb<'a>,
    schema_version: i32,
    vars: &[WIPOffset<fbg::Variable<'a>>],
    ops: &[WIPOffset<fbg::Operation<'a>>],
) -> Vec<u8> {
    let variables = Some(fbb.create_vector(vars));
    let operations = Some(fbb.create_vector(ops));
    let block = fbg::Block::create(
        &mut fbb,
        &fbg::BlockArgs {
            idx: 0,
            parent_idx: -1,
            forward_block_idx: None,
            variables,
            operations,
        },
    );
    let blocks = Some(fbb.create_vector(&[block]));
    let root = fbg::Graph::create(
        &mut fbb,
        &fbg::GraphArgs {
            schema_version,
            blocks,
            ..Default::default()
        },
    );
    fbg::finish_graph_buffer(&mut fbb, root);
    fbb.finished_data().to_vec()
}

/// A SameDiff-style op: flat inputs/outputs and i/t/b/d args, nothing else.
fn seed_op<'a>(fbb: &mut Fbb<'a>, d_arg: i32, i_count: usize) -> WIPOffset<fbg::Operation<'a>> {
    let name = Some(fbb.create_string("add_1"));
    let op_type = Some(fbb.create_string("add"));
    let inputs = Some(string_vec(fbb, &["a".into(), "b".into()]));
    let outputs = Some(string_vec(fbb, &["c".into()]));
    let i_arg_names = Some(string_vec(fbb, &["axis".into()]));
    let i_args = Some(fbb.create_vector(&vec![-1i64; i_count]));
    let t_arg_names = Some(string_vec(fbb, &["alpha".into()]));
    let t_args = Some(fbb.create_vector(&[0.5f64]));
    let b_arg_names = Some(string_vec(fbb, &["inplace".into()]));
    let b_args = Some(fbb.create_vector(&[true]));
    let d_arg_names = Some(string_vec(fbb, &["dtype".into()]));
    let d_args = Some(fbb.create_vector(&[fbg::DataType(d_arg)]));
    fbg::Operation::create(
        fbb,
        &fbg::OperationArgs {
            name,
            op_type,
            inputs,
            outputs,
            i_arg_names,
            i_args,
            t_arg_names,
            t_args,
            b_arg_names,
            b_args,
            d_arg_names,
            d_args,
            ..Default::default()
        },
    )
}

#[test]
fn seed_style_operation_reads_with_defaults() {
    let bytes = build(1, |_| None, |fbb| Some(seed_op(fbb, 5, 1)));
    let g = decode(&bytes).unwrap();
    let op = &g.program().unwrap().blocks[0].ops[0];
    assert_eq!(op.name, "add_1");
    assert_eq!(op.inputs, vec![Slot::new("", &["a", "b"])]);
    assert_eq!(op.outputs, vec![Slot::new("", &["c"])]);
    let values: Vec<_> = op.attrs.iter().map(|a| a.value.clone()).collect();
    assert_eq!(
        values,
        [
            AttrValue::Long(-1),
            AttrValue::Float64(0.5),
            AttrValue::Bool(true),
            AttrValue::DataType(DType::Fp32)
        ]
    );
}

#[test]
fn our_operations_carry_the_seed_vectors() {
    let op = Op::new("n", "t")
        .input("X", &["a", "b"])
        .attr("k", AttrValue::Int(3))
        .attr("d", AttrValue::DataType(DType::Int8))
        .attr("s", AttrValue::String("x".into()));
    let mut g = Program::default();
    g.blocks[0].ops.push(op);
    let bytes = encode(&Graph::from(g)).unwrap();
    let root = fbg::root_as_graph(&bytes).unwrap();
    let o = root.blocks().unwrap().get(0).operations().unwrap().get(0);
    assert_eq!(o.inputs().unwrap().iter().collect::<Vec<_>>(), ["a", "b"]);
    assert_eq!(o.i_arg_names().unwrap().get(0), "k");
    assert_eq!(o.i_args().unwrap().get(0), 3);
    assert_eq!(o.d_args().unwrap().get(0), fbg::DataType::INT8);
    assert_eq!(o.attrs().unwrap().get(0).s(), Some("x"));
}

fn bad_var<'a>(fbb: &mut Fbb<'a>, kind: i8, data_type: i32) -> WIPOffset<fbg::Variable<'a>> {
    let name = Some(fbb.create_string("v"));
    fbg::Variable::create(
        fbb,
        &fbg::VariableArgs {
            name,
            kind: fbg::VarKind(kind),
            paddle_type: 7,
            data_type: Some(fbg::DataType(data_type)),
            ..Default::default()
        },
    )
}

fn short_order<'a>(fbb: &mut Fbb<'a>) -> WIPOffset<fbg::Operation<'a>> {
    let op_type = Some(fbb.create_string("t"));
    let attr_order = Some(fbb.create_vector(&[fbg::ArgGroup::I]));
    fbg::Operation::create(
        fbb,
        &fbg::OperationArgs {
            op_type,
            attr_order,
            ..Default::default()
        },
    )
}

#[test]
fn shared_strings_cannot_amplify() {
    // 20,000 references to one 100 KB string: a 180 KB file that expands to 2 GB.
    let bytes = build(
        1,
        |_| None,
        |fbb| {
            let big = fbb.create_shared_string(&"x".repeat(100_000));
            let refs = fbb.create_vector(&vec![big; 20_000]);
            let op_type = Some(fbb.create_string("t"));
            Some(fbg::Operation::create(
                fbb,
                &fbg::OperationArgs {
                    op_type,
                    inputs: Some(refs),
                    ..Default::default()
                },
            ))
        },
    );
    assert!(bytes.len() < 200_000);
    let e = decode(&bytes).unwrap_err().to_string();
    assert!(
        e.contains("verification failed") && e.contains("pparent"),
        "{e}"
    );
}

#[test]
fn bad_values_are_errors() {
    let e = decode(&build(1, |_| None, |fbb| Some(seed_op(fbb, 99, 1)))).unwrap_err();
    assert!(
        e.to_string()
            .contains("op 0 (add): unknown DataType value 99"),
        "{e}"
    );
    let e = decode(&build(1, |_| None, |fbb| Some(seed_op(fbb, 5, 2)))).unwrap_err();
    assert!(
        e.to_string()
            .contains("i_arg_names has 1 entries but i_args has 2"),
        "{e}"
    );
    // 2 is for TensorFlow graphs only.
    let e = decode(&build(2, |_| None, |_| None)).unwrap_err();
    assert!(e.to_string().contains("schema_version 2"), "{e}");
    let e = decode(&build(3, |_| None, |_| None)).unwrap_err();
    assert!(e.to_string().contains("schema_version 3"), "{e}");
    let e = decode(&build(1, |fbb| Some(bad_var(fbb, 42, 5)), |_| None)).unwrap_err();
    assert!(
        e.to_string()
            .contains("var \"v\": unknown VarKind value 42"),
        "{e}"
    );
    let e = decode(&build(1, |fbb| Some(bad_var(fbb, 2, -4)), |_| None)).unwrap_err();
    assert!(e.to_string().contains("unknown DataType value -4"), "{e}");
    let e = decode(&build(1, |fbb| Some(bad_var(fbb, 4, 5)), |_| None)).unwrap_err();
    assert!(
        e.to_string().contains("does not match paddle_type 7"),
        "{e}"
    );
    let e = decode(&build(1, |_| None, |fbb| Some(short_order(fbb)))).unwrap_err();
    assert!(
        e.to_string().contains("attr_order names more i arguments"),
        "{e}"
    );
}

#[test]
fn shared_tables_cannot_amplify() {
    // 1,000,000 references to one operation table: a 4 MB file that decoded to 1,000,000
    // operations, 156 MB (39 times its size), before tables were limited to one per 8
    // bytes of the file.
    let n = 1_000_000;
    let mut fbb = Fbb::new();
    let op_type = Some(fbb.create_string("t"));
    let op = fbg::Operation::create(
        &mut fbb,
        &fbg::OperationArgs {
            op_type,
            ..Default::default()
        },
    );
    let bytes = finish(fbb, 1, &[], &vec![op; n]);
    assert!(bytes.len() < 4_100_000);
    let e = decode(&bytes).unwrap_err().to_string();
    assert!(
        e.contains("verification failed") && e.contains("tables"),
        "{e}"
    );
    // The same operation once per 8 bytes of the file is within the limit.
    let mut fbb = Fbb::new();
    let ops: Vec<_> = (0..1000)
        .map(|i| {
            let op_type = Some(fbb.create_string(&format!("op{i}")));
            fbg::Operation::create(
                &mut fbb,
                &fbg::OperationArgs {
                    op_type,
                    ..Default::default()
                },
            )
        })
        .collect();
    let g = decode(&finish(fbb, 1, &[], &ops)).unwrap();
    assert_eq!(g.program().unwrap().blocks[0].ops.len(), 1000);
}
