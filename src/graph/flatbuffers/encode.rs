//! A [`Graph`] to graph.fb bytes.

use ::flatbuffers::{FlatBufferBuilder, ForwardsUOffset, Vector, WIPOffset};

use super::schema::{
    SCHEMA_VERSION, SCHEMA_VERSION_ONNX, SCHEMA_VERSION_PIR, SCHEMA_VERSION_TF, widen,
};
use crate::error::Result;
use crate::graph::generated::graph as fbg;
use crate::graph::model::{
    Attr, AttrValue, Block, DenseTensorDesc, Graph, OnnxGraph, Op, Program, Scalar, Slot,
    TensorDesc, TfGraph, TfNode, Var, VarKind, VarTypeExtra,
};
use crate::graph::programdesc::{gerr, in_where};
use crate::tensor::DType;

pub(super) type Fbb<'a> = FlatBufferBuilder<'a>;

/// Encodes a graph as graph.fb bytes. A foreign kind (TensorFlow, ONNX, PIR) is stored
/// beside one empty main block, as every graph.fb reader since schema version 1 expects.
pub fn encode(g: &Graph) -> Result<Vec<u8>> {
    let main_only = Program::default();
    let program = match g {
        Graph::Program(p) => p,
        Graph::Tf(_) | Graph::Onnx(_) | Graph::Pir(_) => &main_only,
    };
    if program.blocks.is_empty() {
        return Err(gerr("graph has no blocks"));
    }
    let mut fbb = Fbb::with_capacity(4096);
    let blocks = program
        .blocks
        .iter()
        .enumerate()
        .map(|(i, b)| block_to_fb(&mut fbb, b).map_err(|e| in_where(e, &format!("block {i}"))))
        .collect::<Result<Vec<_>>>()?;
    let blocks = fbb.create_vector(&blocks);
    let op_version_map = program.op_version_map.as_ref().map(|pairs| {
        let items: Vec<_> = pairs
            .iter()
            .map(|(name, v)| {
                let op_name = Some(fbb.create_string(name));
                fbg::OpVersion::create(
                    &mut fbb,
                    &fbg::OpVersionArgs {
                        op_name,
                        version: *v,
                    },
                )
            })
            .collect();
        fbb.create_vector(&items)
    });
    let (mut tf, mut onnx, mut pir) = (None, None, None);
    let schema_version = match g {
        Graph::Program(_) => SCHEMA_VERSION,
        Graph::Tf(t) => {
            tf = Some(tf_to_fb(&mut fbb, t));
            SCHEMA_VERSION_TF
        }
        Graph::Onnx(o) => {
            onnx = Some(onnx_to_fb(&mut fbb, o));
            SCHEMA_VERSION_ONNX
        }
        Graph::Pir(p) => {
            let json = Some(fbb.create_vector(&p.json));
            pir = Some(fbg::PirGraph::create(&mut fbb, &fbg::PirGraphArgs { json }));
            SCHEMA_VERSION_PIR
        }
    };
    let root = fbg::Graph::create(
        &mut fbb,
        &fbg::GraphArgs {
            schema_version,
            blocks: Some(blocks),
            version: program.version,
            op_version_map,
            tf,
            onnx,
            pir,
        },
    );
    fbg::finish_graph_buffer(&mut fbb, root);
    Ok(fbb.finished_data().to_vec())
}

fn onnx_to_fb<'a>(fbb: &mut Fbb<'a>, g: &OnnxGraph) -> WIPOffset<fbg::OnnxGraph<'a>> {
    let inits: Vec<_> = g
        .initializers
        .iter()
        .map(|i| {
            let param = i.param.as_ref().map(|p| fbb.create_string(p));
            let external = if i.external.is_empty() {
                None
            } else {
                let entries: Vec<_> = i
                    .external
                    .iter()
                    .map(|(k, v)| {
                        let key = Some(fbb.create_string(k));
                        let value = Some(fbb.create_string(v));
                        fbg::OnnxEntry::create(fbb, &fbg::OnnxEntryArgs { key, value })
                    })
                    .collect();
                Some(fbb.create_vector(&entries))
            };
            fbg::OnnxInit::create(
                fbb,
                &fbg::OnnxInitArgs {
                    param,
                    typed: i.typed,
                    external,
                },
            )
        })
        .collect();
    let initializers = Some(fbb.create_vector(&inits));
    let model = Some(fbb.create_vector(&g.model));
    fbg::OnnxGraph::create(
        fbb,
        &fbg::OnnxGraphArgs {
            model,
            initializers,
        },
    )
}

fn tf_to_fb<'a>(fbb: &mut Fbb<'a>, g: &TfGraph) -> WIPOffset<fbg::TfGraph<'a>> {
    let nodes: Vec<_> = g.nodes.iter().map(|n| tf_node_to_fb(fbb, n)).collect();
    let nodes = fbb.create_vector(&nodes);
    let rest = (!g.rest.is_empty()).then(|| fbb.create_vector(&g.rest));
    fbg::TfGraph::create(
        fbb,
        &fbg::TfGraphArgs {
            nodes: Some(nodes),
            rest,
        },
    )
}

fn tf_node_to_fb<'a>(fbb: &mut Fbb<'a>, n: &TfNode) -> WIPOffset<fbg::TfNode<'a>> {
    let attrs: Vec<_> = n
        .attrs
        .iter()
        .map(|a| {
            let name = Some(fbb.create_string(&a.name));
            let value = Some(fbb.create_vector(&a.value));
            let param = a.param.as_ref().map(|p| fbb.create_string(&p.param));
            let typed_count = a
                .param
                .as_ref()
                .and_then(|p| p.typed_count)
                .map(|c| i64::try_from(c).unwrap_or(i64::MAX));
            fbg::TfAttr::create(
                fbb,
                &fbg::TfAttrArgs {
                    name,
                    value,
                    param,
                    typed_count,
                },
            )
        })
        .collect();
    let attrs = (!attrs.is_empty()).then(|| fbb.create_vector(&attrs));
    let name = Some(fbb.create_string(&n.name));
    let op = Some(fbb.create_string(&n.op));
    let inputs = (!n.inputs.is_empty()).then(|| string_vec(fbb, &n.inputs));
    let device = (!n.device.is_empty()).then(|| fbb.create_string(&n.device));
    let rest = (!n.rest.is_empty()).then(|| fbb.create_vector(&n.rest));
    fbg::TfNode::create(
        fbb,
        &fbg::TfNodeArgs {
            name,
            op,
            inputs,
            device,
            attrs,
            rest,
        },
    )
}

pub(super) fn string_vec<'a>(
    fbb: &mut Fbb<'a>,
    items: &[String],
) -> WIPOffset<Vector<'a, ForwardsUOffset<&'a str>>> {
    let offsets: Vec<_> = items.iter().map(|s| fbb.create_string(s)).collect();
    fbb.create_vector(&offsets)
}

fn block_to_fb<'a>(fbb: &mut Fbb<'a>, b: &Block) -> Result<WIPOffset<fbg::Block<'a>>> {
    let vars = b
        .vars
        .iter()
        .map(|v| var_to_fb(fbb, v).map_err(|e| in_where(e, &format!("var {:?}", v.name))))
        .collect::<Result<Vec<_>>>()?;
    let variables = Some(fbb.create_vector(&vars));
    let ops = b
        .ops
        .iter()
        .enumerate()
        .map(|(i, o)| op_to_fb(fbb, o).map_err(|e| in_where(e, &format!("op {i} ({})", o.op_type))))
        .collect::<Result<Vec<_>>>()?;
    let operations = Some(fbb.create_vector(&ops));
    Ok(fbg::Block::create(
        fbb,
        &fbg::BlockArgs {
            idx: b.idx,
            parent_idx: b.parent_idx,
            forward_block_idx: b.forward_block_idx,
            variables,
            operations,
        },
    ))
}

fn dtype_to_fb(d: DType) -> fbg::DataType {
    fbg::DataType(d.code())
}

fn tensor_to_fb<'a>(fbb: &mut Fbb<'a>, t: &TensorDesc) -> WIPOffset<fbg::TensorDesc<'a>> {
    let dims = Some(fbb.create_vector(&t.dims));
    fbg::TensorDesc::create(
        fbb,
        &fbg::TensorDescArgs {
            data_type: dtype_to_fb(t.dtype),
            dims,
        },
    )
}

fn dense_to_fb<'a>(fbb: &mut Fbb<'a>, d: &DenseTensorDesc) -> WIPOffset<fbg::DenseTensorDesc<'a>> {
    let tensor = Some(tensor_to_fb(fbb, &d.tensor));
    fbg::DenseTensorDesc::create(
        fbb,
        &fbg::DenseTensorDescArgs {
            tensor,
            lod_level: d.lod_level,
        },
    )
}

fn extra_to_fb<'a>(
    fbb: &mut Fbb<'a>,
    x: &VarTypeExtra,
) -> Option<WIPOffset<fbg::VarTypeExtra<'a>>> {
    if x.is_empty() {
        return None;
    }
    let t = |t: &Option<TensorDesc>, fbb: &mut Fbb<'a>| t.as_ref().map(|t| tensor_to_fb(fbb, t));
    let selected_rows = t(&x.selected_rows, fbb);
    let string = t(&x.string, fbb);
    let strings = t(&x.strings, fbb);
    let vocab = t(&x.vocab, fbb);
    let sparse_coo = t(&x.sparse_coo, fbb);
    let sparse_csr = t(&x.sparse_csr, fbb);
    let dense_tensor = x.dense_tensor.as_ref().map(|d| dense_to_fb(fbb, d));
    let tensor_array = x.tensor_array.as_ref().map(|d| dense_to_fb(fbb, d));
    let reader = x.reader.as_ref().map(|r| {
        let items: Vec<_> = r.iter().map(|d| dense_to_fb(fbb, d)).collect();
        fbb.create_vector(&items)
    });
    let tuple = x.tuple.as_ref().map(|e| fbb.create_vector(e));
    Some(fbg::VarTypeExtra::create(
        fbb,
        &fbg::VarTypeExtraArgs {
            selected_rows,
            dense_tensor,
            tensor_array,
            reader,
            tuple,
            string,
            strings,
            vocab,
            sparse_coo,
            sparse_csr,
        },
    ))
}

fn kind_to_fb(k: VarKind) -> fbg::VarKind {
    match k {
        VarKind::Placeholder => fbg::VarKind::PLACEHOLDER,
        VarKind::Constant => fbg::VarKind::CONSTANT,
        VarKind::Variable => fbg::VarKind::VARIABLE,
        VarKind::Parameter => fbg::VarKind::PARAMETER,
        VarKind::Array => fbg::VarKind::ARRAY,
        VarKind::Other(_) => fbg::VarKind::OTHER,
    }
}

fn var_to_fb<'a>(fbb: &mut Fbb<'a>, v: &Var) -> Result<WIPOffset<fbg::Variable<'a>>> {
    let name = Some(fbb.create_string(&v.name));
    let shape = Some(fbb.create_vector(&v.shape));
    let attrs = if v.attrs.is_empty() {
        None
    } else {
        let items = v
            .attrs
            .iter()
            .map(|a| attribute_to_fb(fbb, a))
            .collect::<Result<Vec<_>>>()?;
        Some(fbb.create_vector(&items))
    };
    let extra = extra_to_fb(fbb, &v.extra);
    Ok(fbg::Variable::create(
        fbb,
        &fbg::VariableArgs {
            name,
            kind: kind_to_fb(v.kind),
            paddle_type: v.kind.paddle_type(),
            data_type: v.dtype.map(dtype_to_fb),
            shape,
            lod_level: v.lod_level,
            persistable: v.persistable,
            need_check_feed: v.need_check_feed,
            is_parameter: v.is_parameter,
            stop_gradient: v.stop_gradient,
            attrs,
            extra,
        },
    ))
}

fn scalar_to_fb<'a>(fbb: &mut Fbb<'a>, s: &Scalar) -> WIPOffset<fbg::Scalar<'a>> {
    let c = s.c.map(|(r, i)| fbg::Complex::new(r, i));
    fbg::Scalar::create(
        fbb,
        &fbg::ScalarArgs {
            // ScalarType codes are 1..=4, so the cast is exact.
            type_: fbg::ScalarType(s.kind.code() as i8),
            b: s.b,
            i: s.i,
            r: s.r,
            c: c.as_ref(),
        },
    )
}

fn attribute_to_fb<'a>(fbb: &mut Fbb<'a>, a: &Attr) -> Result<WIPOffset<fbg::Attribute<'a>>> {
    let name = Some(fbb.create_string(&a.name));
    let mut args = fbg::AttributeArgs {
        name,
        // AttrType codes are 0..=17, so the cast is exact.
        type_: fbg::AttrType(a.value.paddle_type() as i8),
        ..Default::default()
    };
    match &a.value {
        AttrValue::Int(i) | AttrValue::Block(i) => args.i = Some(*i),
        AttrValue::Long(l) => args.l = Some(*l),
        AttrValue::Float(f) => args.f = Some(widen(*f)),
        AttrValue::Float64(f) => args.f = Some(*f),
        AttrValue::Bool(b) => args.b = Some(*b),
        AttrValue::String(s) | AttrValue::Var(s) => args.s = Some(fbb.create_string(s)),
        AttrValue::Ints(v) | AttrValue::Blocks(v) => args.ints = Some(fbb.create_vector(v)),
        AttrValue::Floats(v) => args.floats = Some(fbb.create_vector(v)),
        AttrValue::Strings(v) | AttrValue::Vars(v) => args.strings = Some(string_vec(fbb, v)),
        AttrValue::Bools(v) => args.bools = Some(fbb.create_vector(v)),
        AttrValue::Longs(v) => args.longs = Some(fbb.create_vector(v)),
        AttrValue::Float64s(v) => args.float64s = Some(fbb.create_vector(v)),
        AttrValue::Scalar(s) => {
            let s = scalar_to_fb(fbb, s);
            args.scalars = Some(fbb.create_vector(&[s]));
        }
        AttrValue::Scalars(v) => {
            let items: Vec<_> = v.iter().map(|s| scalar_to_fb(fbb, s)).collect();
            args.scalars = Some(fbb.create_vector(&items));
        }
        AttrValue::DataType(_) => {
            return Err(gerr(format!(
                "attr {:?}: a DATA_TYPE value is only allowed as an op argument",
                a.name
            )));
        }
    }
    Ok(fbg::Attribute::create(fbb, &args))
}

fn slots_to_fb<'a>(
    fbb: &mut Fbb<'a>,
    slots: &[Slot],
) -> WIPOffset<Vector<'a, ForwardsUOffset<fbg::Slot<'a>>>> {
    let items: Vec<_> = slots
        .iter()
        .map(|s| {
            let name = Some(fbb.create_string(&s.name));
            let args = Some(string_vec(fbb, &s.args));
            fbg::Slot::create(fbb, &fbg::SlotArgs { name, args })
        })
        .collect();
    fbb.create_vector(&items)
}

fn op_to_fb<'a>(fbb: &mut Fbb<'a>, o: &Op) -> Result<WIPOffset<fbg::Operation<'a>>> {
    let (mut i_names, mut i_vals, mut i_types) = (Vec::new(), Vec::new(), Vec::new());
    let (mut t_names, mut t_vals, mut t_types) = (Vec::new(), Vec::new(), Vec::new());
    let (mut b_names, mut b_vals) = (Vec::new(), Vec::new());
    let (mut d_names, mut d_vals) = (Vec::new(), Vec::new());
    let mut others = Vec::new();
    let mut order = Vec::new();
    for a in &o.attrs {
        match &a.value {
            AttrValue::Int(v) => {
                i_names.push(a.name.clone());
                i_vals.push(i64::from(*v));
                i_types.push(fbg::AttrType::INT);
                order.push(fbg::ArgGroup::I);
            }
            AttrValue::Long(v) => {
                i_names.push(a.name.clone());
                i_vals.push(*v);
                i_types.push(fbg::AttrType::LONG);
                order.push(fbg::ArgGroup::I);
            }
            AttrValue::Float(v) => {
                t_names.push(a.name.clone());
                t_vals.push(widen(*v));
                t_types.push(fbg::AttrType::FLOAT);
                order.push(fbg::ArgGroup::T);
            }
            AttrValue::Float64(v) => {
                t_names.push(a.name.clone());
                t_vals.push(*v);
                t_types.push(fbg::AttrType::FLOAT64);
                order.push(fbg::ArgGroup::T);
            }
            AttrValue::Bool(v) => {
                b_names.push(a.name.clone());
                b_vals.push(*v);
                order.push(fbg::ArgGroup::B);
            }
            AttrValue::DataType(d) => {
                d_names.push(a.name.clone());
                d_vals.push(dtype_to_fb(*d));
                order.push(fbg::ArgGroup::D);
            }
            _ => {
                others.push(attribute_to_fb(fbb, a)?);
                order.push(fbg::ArgGroup::OTHER);
            }
        }
    }
    let name = Some(fbb.create_string(&o.name));
    let op_type = Some(fbb.create_string(&o.op_type));
    let flat = |slots: &[Slot]| -> Vec<String> {
        slots.iter().flat_map(|s| s.args.iter().cloned()).collect()
    };
    let inputs = Some(string_vec(fbb, &flat(&o.inputs)));
    let outputs = Some(string_vec(fbb, &flat(&o.outputs)));
    let input_slots = Some(slots_to_fb(fbb, &o.inputs));
    let output_slots = Some(slots_to_fb(fbb, &o.outputs));
    let args = fbg::OperationArgs {
        name,
        op_type,
        inputs,
        outputs,
        input_slots,
        output_slots,
        i_arg_names: Some(string_vec(fbb, &i_names)),
        i_args: Some(fbb.create_vector(&i_vals)),
        i_arg_types: Some(fbb.create_vector(&i_types)),
        t_arg_names: Some(string_vec(fbb, &t_names)),
        t_args: Some(fbb.create_vector(&t_vals)),
        t_arg_types: Some(fbb.create_vector(&t_types)),
        b_arg_names: Some(string_vec(fbb, &b_names)),
        b_args: Some(fbb.create_vector(&b_vals)),
        d_arg_names: Some(string_vec(fbb, &d_names)),
        d_args: Some(fbb.create_vector(&d_vals)),
        attrs: Some(fbb.create_vector(&others)),
        attr_order: Some(fbb.create_vector(&order)),
        is_target: o.is_target,
    };
    Ok(fbg::Operation::create(fbb, &args))
}
