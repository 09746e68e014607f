//! graph.fb bytes to a [`Graph`]: verified, then converted with every enum value and
//! the lengths of the parallel vectors checked.

use ::flatbuffers::{ForwardsUOffset, Vector};

use super::schema::{
    IDENTIFIER, SCHEMA_VERSION, SCHEMA_VERSION_ONNX, SCHEMA_VERSION_PIR, SCHEMA_VERSION_TF, narrow,
    verified_root,
};
use crate::error::Result;
use crate::graph::generated::graph as fbg;
use crate::graph::model::{
    Attr, AttrValue, Block, DenseTensorDesc, Graph, OnnxGraph, OnnxInit, Op, Program, Scalar,
    ScalarType, Slot, TensorDesc, TfAttr, TfGraph, TfNode, TfParamRef, Var, VarKind, VarTypeExtra,
    var_type_name,
};
use crate::graph::programdesc::{gerr, in_where};
use crate::tensor::DType;

/// Decodes graph.fb bytes.
pub fn decode(bytes: &[u8]) -> Result<Graph> {
    let root = verified_root::<fbg::Graph>(bytes, IDENTIFIER, "graph.fb")?;
    let tf = root.tf().map(tf_from_fb).transpose()?;
    let onnx = root.onnx().map(onnx_from_fb).transpose()?;
    let pir = match root.pir() {
        Some(p) => {
            let json = bytes_of(p.json());
            // The program is checked on every read, with the same bounds as on import.
            crate::graph::pir::parse(&json)?;
            Some(crate::graph::pir::PirGraph { json })
        }
        None => None,
    };
    if [tf.is_some(), onnx.is_some(), pir.is_some()]
        .iter()
        .filter(|&&x| x)
        .count()
        > 1
    {
        return Err(gerr(
            "graph.fb holds more than one of a TensorFlow graph, an ONNX model and a PIR program",
        ));
    }
    let want = if tf.is_some() {
        SCHEMA_VERSION_TF
    } else if onnx.is_some() {
        SCHEMA_VERSION_ONNX
    } else if pir.is_some() {
        SCHEMA_VERSION_PIR
    } else {
        SCHEMA_VERSION
    };
    if root.schema_version() != want {
        return Err(gerr(format!(
            "graph.fb schema_version {} is not supported (this build reads {SCHEMA_VERSION}, \
             {SCHEMA_VERSION_TF} for a TensorFlow graph, {SCHEMA_VERSION_ONNX} for an \
             ONNX model and {SCHEMA_VERSION_PIR} for a Paddle PIR program)",
            root.schema_version()
        )));
    }
    let blocks = root
        .blocks()
        .ok_or_else(|| gerr("graph.fb has no blocks"))?
        .iter()
        .enumerate()
        .map(|(i, b)| block_from_fb(b).map_err(|e| in_where(e, &format!("block {i}"))))
        .collect::<Result<Vec<_>>>()?;
    if blocks.is_empty() {
        return Err(gerr("graph.fb has no blocks"));
    }
    let program = Program {
        blocks,
        version: root.version(),
        op_version_map: root.op_version_map().map(|m| {
            m.iter()
                .map(|p| (p.op_name().to_string(), p.version()))
                .collect()
        }),
    };
    let foreign = match (tf, onnx, pir) {
        (None, None, None) => return Ok(Graph::Program(program)),
        (Some(t), _, _) => Graph::Tf(t),
        (_, Some(o), _) => Graph::Onnx(o),
        (_, _, Some(p)) => Graph::Pir(p),
    };
    // A foreign kind sits beside one empty main block and nothing else: anything more
    // would be dropped on the way to the model, so it is refused rather than lost.
    if program != Program::default() {
        return Err(gerr(format!(
            "graph.fb holds {} and also Paddle blocks, a version or an op version map              (only one empty main block may sit beside it)",
            foreign.kind_name()
        )));
    }
    Ok(foreign)
}

fn onnx_from_fb(g: fbg::OnnxGraph<'_>) -> Result<OnnxGraph> {
    Ok(OnnxGraph {
        model: bytes_of(g.model()),
        initializers: g
            .initializers()
            .map(|v| {
                v.iter()
                    .map(|i| OnnxInit {
                        param: i.param().map(str::to_string),
                        typed: i.typed(),
                        external: i
                            .external()
                            .map(|v| {
                                v.iter()
                                    .map(|e| {
                                        (
                                            e.key().unwrap_or_default().to_string(),
                                            e.value().unwrap_or_default().to_string(),
                                        )
                                    })
                                    .collect()
                            })
                            .unwrap_or_default(),
                    })
                    .collect()
            })
            .unwrap_or_default(),
    })
}

fn bytes_of(v: Option<Vector<'_, u8>>) -> Vec<u8> {
    v.map(|v| v.bytes().to_vec()).unwrap_or_default()
}

fn tf_from_fb(g: fbg::TfGraph<'_>) -> Result<TfGraph> {
    let nodes = g
        .nodes()
        .map(|ns| {
            ns.iter()
                .enumerate()
                .map(|(i, n)| {
                    tf_node_from_fb(n).map_err(|e| in_where(e, &format!("TensorFlow node {i}")))
                })
                .collect::<Result<Vec<_>>>()
        })
        .transpose()?
        .unwrap_or_default();
    Ok(TfGraph {
        nodes,
        rest: bytes_of(g.rest()),
    })
}

fn tf_node_from_fb(n: fbg::TfNode<'_>) -> Result<TfNode> {
    let attrs = n
        .attrs()
        .map(|v| {
            v.iter()
                .map(|a| {
                    let param = match (a.param(), a.typed_count()) {
                        (Some(p), count) => Some(TfParamRef {
                            param: p.to_string(),
                            typed_count: count
                                .map(|c| {
                                    u64::try_from(c).map_err(|_| {
                                        gerr(format!(
                                            "attr {:?}: negative typed_count {c}",
                                            a.name()
                                        ))
                                    })
                                })
                                .transpose()?,
                        }),
                        (None, None) => None,
                        (None, Some(_)) => {
                            return Err(gerr(format!(
                                "attr {:?}: typed_count without a param",
                                a.name()
                            )));
                        }
                    };
                    Ok(TfAttr {
                        name: a.name().to_string(),
                        value: bytes_of(a.value()),
                        param,
                    })
                })
                .collect::<Result<Vec<_>>>()
        })
        .transpose()?
        .unwrap_or_default();
    Ok(TfNode {
        name: n.name().to_string(),
        op: n.op().to_string(),
        inputs: strings(n.inputs()),
        device: n.device().unwrap_or_default().to_string(),
        attrs,
        rest: bytes_of(n.rest()),
    })
}

fn strings(v: Option<Vector<'_, ForwardsUOffset<&str>>>) -> Vec<String> {
    v.map(|v| v.iter().map(str::to_string).collect())
        .unwrap_or_default()
}

fn dtype_from_fb(d: fbg::DataType) -> Result<DType> {
    DType::from_code(d.0.into()).map_err(|_| gerr(format!("unknown DataType value {}", d.0)))
}

fn block_from_fb(b: fbg::Block<'_>) -> Result<Block> {
    let vars = b
        .variables()
        .map(|vs| {
            vs.iter()
                .map(|v| var_from_fb(v).map_err(|e| in_where(e, &format!("var {:?}", v.name()))))
                .collect::<Result<Vec<_>>>()
        })
        .transpose()?
        .unwrap_or_default();
    let ops = b
        .operations()
        .map(|os| {
            os.iter()
                .enumerate()
                .map(|(i, o)| {
                    op_from_fb(o).map_err(|e| in_where(e, &format!("op {i} ({})", o.op_type())))
                })
                .collect::<Result<Vec<_>>>()
        })
        .transpose()?
        .unwrap_or_default();
    Ok(Block {
        idx: b.idx(),
        parent_idx: b.parent_idx(),
        forward_block_idx: b.forward_block_idx(),
        vars,
        ops,
    })
}

fn tensor_from_fb(t: fbg::TensorDesc<'_>) -> Result<TensorDesc> {
    Ok(TensorDesc {
        dtype: dtype_from_fb(t.data_type())?,
        dims: t.dims().map(|d| d.iter().collect()).unwrap_or_default(),
    })
}

fn dense_from_fb(d: fbg::DenseTensorDesc<'_>) -> Result<DenseTensorDesc> {
    Ok(DenseTensorDesc {
        tensor: tensor_from_fb(d.tensor())?,
        lod_level: d.lod_level(),
    })
}

fn opt_tensor(t: Option<fbg::TensorDesc<'_>>) -> Result<Option<TensorDesc>> {
    t.map(tensor_from_fb).transpose()
}

fn extra_from_fb(x: Option<fbg::VarTypeExtra<'_>>) -> Result<VarTypeExtra> {
    let Some(x) = x else {
        return Ok(VarTypeExtra::default());
    };
    Ok(VarTypeExtra {
        selected_rows: opt_tensor(x.selected_rows())?,
        dense_tensor: x.dense_tensor().map(dense_from_fb).transpose()?,
        tensor_array: x.tensor_array().map(dense_from_fb).transpose()?,
        reader: x
            .reader()
            .map(|r| r.iter().map(dense_from_fb).collect::<Result<Vec<_>>>())
            .transpose()?,
        tuple: x
            .tuple()
            .map(|t| {
                t.iter()
                    .map(|e| match var_type_name(e) {
                        Some(_) => Ok(e),
                        None => Err(gerr(format!("tuple: unknown VarType.Type value {e}"))),
                    })
                    .collect::<Result<Vec<_>>>()
            })
            .transpose()?,
        string: opt_tensor(x.string())?,
        strings: opt_tensor(x.strings())?,
        vocab: opt_tensor(x.vocab())?,
        sparse_coo: opt_tensor(x.sparse_coo())?,
        sparse_csr: opt_tensor(x.sparse_csr())?,
    })
}

fn kind_from_fb(k: fbg::VarKind, paddle_type: i32) -> Result<VarKind> {
    Ok(match k {
        fbg::VarKind::PLACEHOLDER => VarKind::Placeholder,
        fbg::VarKind::CONSTANT => VarKind::Constant,
        fbg::VarKind::VARIABLE => VarKind::Variable,
        fbg::VarKind::PARAMETER => VarKind::Parameter,
        fbg::VarKind::ARRAY => VarKind::Array,
        // As in a ProgramDesc, only Paddle's VarType.Type numbers: an unknown one would be
        // written to a graph.pdmodel that neither Paddle nor modelzip reads.
        fbg::VarKind::OTHER => match var_type_name(paddle_type) {
            Some(_) => VarKind::Other(paddle_type),
            None => return Err(gerr(format!("unknown VarType.Type value {paddle_type}"))),
        },
        other => return Err(gerr(format!("unknown VarKind value {}", other.0))),
    })
}

fn var_from_fb(v: fbg::Variable<'_>) -> Result<Var> {
    let kind = kind_from_fb(v.kind(), v.paddle_type())?;
    if kind.paddle_type() != v.paddle_type() {
        return Err(gerr(format!(
            "kind {} does not match paddle_type {}",
            kind.name(),
            v.paddle_type()
        )));
    }
    let attrs = v
        .attrs()
        .map(|a| a.iter().map(attribute_from_fb).collect::<Result<Vec<_>>>())
        .transpose()?
        .unwrap_or_default();
    Ok(Var {
        name: v.name().to_string(),
        kind,
        dtype: v.data_type().map(dtype_from_fb).transpose()?,
        shape: v.shape().map(|s| s.iter().collect()).unwrap_or_default(),
        lod_level: v.lod_level(),
        persistable: v.persistable(),
        need_check_feed: v.need_check_feed(),
        is_parameter: v.is_parameter(),
        stop_gradient: v.stop_gradient(),
        attrs,
        extra: extra_from_fb(v.extra())?,
    })
}

fn scalar_from_fb(s: fbg::Scalar<'_>) -> Result<Scalar> {
    Ok(Scalar {
        kind: ScalarType::from_code(s.type_().0.into())
            .ok_or_else(|| gerr(format!("unknown ScalarType value {}", s.type_().0)))?,
        b: s.b(),
        i: s.i(),
        r: s.r(),
        c: s.c().map(|c| (c.r(), c.i())),
    })
}

fn attribute_from_fb(a: fbg::Attribute<'_>) -> Result<Attr> {
    let name = a.name();
    let missing = |f: &str| gerr(format!("attr {name:?}: value field {f} is missing"));
    let scalars = || {
        a.scalars()
            .map(|v| v.iter().map(scalar_from_fb).collect::<Result<Vec<_>>>())
            .transpose()
            .map(Option::unwrap_or_default)
    };
    let value = match a.type_() {
        fbg::AttrType::INT => AttrValue::Int(a.i().ok_or_else(|| missing("i"))?),
        fbg::AttrType::BLOCK => AttrValue::Block(a.i().ok_or_else(|| missing("i"))?),
        fbg::AttrType::LONG => AttrValue::Long(a.l().ok_or_else(|| missing("l"))?),
        // FLOAT values were widened from f32, so narrowing is exact.
        fbg::AttrType::FLOAT => AttrValue::Float(narrow(a.f().ok_or_else(|| missing("f"))?)),
        fbg::AttrType::FLOAT64 => AttrValue::Float64(a.f().ok_or_else(|| missing("f"))?),
        fbg::AttrType::BOOLEAN => AttrValue::Bool(a.b().ok_or_else(|| missing("b"))?),
        fbg::AttrType::STRING => AttrValue::String(a.s().ok_or_else(|| missing("s"))?.into()),
        fbg::AttrType::VAR => AttrValue::Var(a.s().ok_or_else(|| missing("s"))?.into()),
        fbg::AttrType::INTS => {
            AttrValue::Ints(a.ints().map(|v| v.iter().collect()).unwrap_or_default())
        }
        fbg::AttrType::BLOCKS => {
            AttrValue::Blocks(a.ints().map(|v| v.iter().collect()).unwrap_or_default())
        }
        fbg::AttrType::FLOATS => {
            AttrValue::Floats(a.floats().map(|v| v.iter().collect()).unwrap_or_default())
        }
        fbg::AttrType::STRINGS => AttrValue::Strings(strings(a.strings())),
        fbg::AttrType::VARS => AttrValue::Vars(strings(a.strings())),
        fbg::AttrType::BOOLEANS => {
            AttrValue::Bools(a.bools().map(|v| v.iter().collect()).unwrap_or_default())
        }
        fbg::AttrType::LONGS => {
            AttrValue::Longs(a.longs().map(|v| v.iter().collect()).unwrap_or_default())
        }
        fbg::AttrType::FLOAT64S => {
            AttrValue::Float64s(a.float64s().map(|v| v.iter().collect()).unwrap_or_default())
        }
        fbg::AttrType::SCALAR => {
            let mut s = scalars()?;
            if s.len() != 1 {
                return Err(gerr(format!(
                    "attr {name:?}: a SCALAR holds one scalar, not {}",
                    s.len()
                )));
            }
            match s.pop() {
                Some(s) => AttrValue::Scalar(s),
                None => return Err(missing("scalars")),
            }
        }
        fbg::AttrType::SCALARS => AttrValue::Scalars(scalars()?),
        other => {
            return Err(gerr(format!(
                "attr {name:?}: unknown AttrType value {}",
                other.0
            )));
        }
    };
    Ok(Attr {
        name: name.to_string(),
        value,
    })
}

fn slots_from_fb(v: Option<Vector<'_, ForwardsUOffset<fbg::Slot<'_>>>>) -> Vec<Slot> {
    v.map(|v| {
        v.iter()
            .map(|s| Slot {
                name: s.name().to_string(),
                args: strings(s.args()),
            })
            .collect()
    })
    .unwrap_or_default()
}

/// Fails unless the name and value vectors of one argument group have equal lengths.
fn same_len(group: &str, names: usize, values: usize) -> Result<()> {
    if names == values {
        Ok(())
    } else {
        Err(gerr(format!(
            "{group}_arg_names has {names} entries but {group}_args has {values}"
        )))
    }
}

fn op_from_fb(o: fbg::Operation<'_>) -> Result<Op> {
    let i_names = strings(o.i_arg_names());
    let i_vals: Vec<i64> = o.i_args().map(|v| v.iter().collect()).unwrap_or_default();
    let i_types: Vec<fbg::AttrType> = o
        .i_arg_types()
        .map(|v| v.iter().collect())
        .unwrap_or_default();
    let t_names = strings(o.t_arg_names());
    let t_vals: Vec<f64> = o.t_args().map(|v| v.iter().collect()).unwrap_or_default();
    let t_types: Vec<fbg::AttrType> = o
        .t_arg_types()
        .map(|v| v.iter().collect())
        .unwrap_or_default();
    let b_names = strings(o.b_arg_names());
    let b_vals: Vec<bool> = o.b_args().map(|v| v.iter().collect()).unwrap_or_default();
    let d_names = strings(o.d_arg_names());
    let d_vals: Vec<fbg::DataType> = o.d_args().map(|v| v.iter().collect()).unwrap_or_default();
    same_len("i", i_names.len(), i_vals.len())?;
    same_len("t", t_names.len(), t_vals.len())?;
    same_len("b", b_names.len(), b_vals.len())?;
    same_len("d", d_names.len(), d_vals.len())?;
    // Written by other tools, the type vectors may be absent: LONG and FLOAT64 then.
    if !i_types.is_empty() && i_types.len() != i_vals.len() {
        return Err(gerr("i_arg_types and i_args differ in length"));
    }
    if !t_types.is_empty() && t_types.len() != t_vals.len() {
        return Err(gerr("t_arg_types and t_args differ in length"));
    }

    let mut i = i_names
        .into_iter()
        .zip(i_vals)
        .zip(i_types.into_iter().map(Some).chain(std::iter::repeat(None)));
    let mut t = t_names
        .into_iter()
        .zip(t_vals)
        .zip(t_types.into_iter().map(Some).chain(std::iter::repeat(None)));
    let mut b = b_names.into_iter().zip(b_vals);
    let mut d = d_names.into_iter().zip(d_vals);
    let mut other = o.attrs().map(|v| v.iter()).into_iter().flatten();

    let next_i = |((name, v), ty): ((String, i64), Option<fbg::AttrType>)| -> Result<Attr> {
        let value = match ty {
            Some(fbg::AttrType::INT) => AttrValue::Int(
                i32::try_from(v)
                    .map_err(|_| gerr(format!("INT argument {name:?} = {v} overflows i32")))?,
            ),
            Some(fbg::AttrType::LONG) | None => AttrValue::Long(v),
            Some(x) => return Err(gerr(format!("i_arg_types holds {}, not INT or LONG", x.0))),
        };
        Ok(Attr { name, value })
    };
    let next_t = |((name, v), ty): ((String, f64), Option<fbg::AttrType>)| -> Result<Attr> {
        let value = match ty {
            Some(fbg::AttrType::FLOAT) => AttrValue::Float(narrow(v)),
            Some(fbg::AttrType::FLOAT64) | None => AttrValue::Float64(v),
            Some(x) => {
                return Err(gerr(format!(
                    "t_arg_types holds {}, not FLOAT or FLOAT64",
                    x.0
                )));
            }
        };
        Ok(Attr { name, value })
    };

    let mut attrs = Vec::new();
    let order: Option<Vec<fbg::ArgGroup>> = o.attr_order().map(|v| v.iter().collect());
    match order {
        Some(order) => {
            let short = |g: &str| {
                gerr(format!(
                    "attr_order names more {g} arguments than there are"
                ))
            };
            for g in order {
                let attr = match g {
                    fbg::ArgGroup::I => next_i(i.next().ok_or_else(|| short("i"))?)?,
                    fbg::ArgGroup::T => next_t(t.next().ok_or_else(|| short("t"))?)?,
                    fbg::ArgGroup::B => {
                        let (name, v) = b.next().ok_or_else(|| short("b"))?;
                        Attr {
                            name,
                            value: AttrValue::Bool(v),
                        }
                    }
                    fbg::ArgGroup::D => {
                        let (name, v) = d.next().ok_or_else(|| short("d"))?;
                        Attr {
                            name,
                            value: AttrValue::DataType(dtype_from_fb(v)?),
                        }
                    }
                    fbg::ArgGroup::OTHER => {
                        attribute_from_fb(other.next().ok_or_else(|| short("other"))?)?
                    }
                    x => return Err(gerr(format!("unknown ArgGroup value {}", x.0))),
                };
                attrs.push(attr);
            }
            if i.next().is_some()
                || t.next().is_some()
                || b.next().is_some()
                || d.next().is_some()
                || other.next().is_some()
            {
                return Err(gerr("attr_order names fewer arguments than there are"));
            }
        }
        // No order recorded (a SameDiff-style writer): group after group.
        None => {
            for x in i {
                attrs.push(next_i(x)?);
            }
            for x in t {
                attrs.push(next_t(x)?);
            }
            attrs.extend(b.map(|(name, v)| Attr {
                name,
                value: AttrValue::Bool(v),
            }));
            for (name, v) in d {
                attrs.push(Attr {
                    name,
                    value: AttrValue::DataType(dtype_from_fb(v)?),
                });
            }
            for a in other {
                attrs.push(attribute_from_fb(a)?);
            }
        }
    }

    let mut inputs = slots_from_fb(o.input_slots());
    let mut outputs = slots_from_fb(o.output_slots());
    // A writer that only knows the flat SameDiff lists: one unnamed slot each.
    if o.input_slots().is_none() && o.inputs().is_some() {
        inputs = vec![Slot {
            name: String::new(),
            args: strings(o.inputs()),
        }];
    }
    if o.output_slots().is_none() && o.outputs().is_some() {
        outputs = vec![Slot {
            name: String::new(),
            args: strings(o.outputs()),
        }];
    }
    Ok(Op {
        name: o.name().unwrap_or_default().to_string(),
        op_type: o.op_type().to_string(),
        inputs,
        outputs,
        attrs,
        is_target: o.is_target(),
    })
}
