//! The graph.fb codec: [`Graph`] ⇄ FlatBuffers bytes of `schemas/graph.fbs`.
//!
//! Reading checks the file identifier, runs the FlatBuffers verifier with the limits in
//! `verifier_options`, then converts, checking every enum value and the lengths of
//! the parallel vectors. docs/GRAPH.md documents the mapping.

use ::flatbuffers::{FlatBufferBuilder, ForwardsUOffset, Vector, VerifierOptions, WIPOffset};

use super::generated::graph as fbg;
use super::model::{
    Attr, AttrValue, Block, DenseTensorDesc, Graph, OnnxGraph, OnnxInit, Op, Scalar, ScalarType,
    Slot, TensorDesc, TfAttr, TfGraph, TfNode, TfParamRef, Var, VarKind, VarTypeExtra,
    var_type_name,
};
use super::programdesc::{gerr, in_where};
use crate::error::{ErrorKind, Result};
use crate::tensor::DType;

/// The file identifier of graph.fb (bytes 4..8).
pub const IDENTIFIER: &str = "MZGF";
/// The schema version this code writes and reads.
pub const SCHEMA_VERSION: i32 = 1;

/// The schema_version of a graph.fb holding a TensorFlow graph (`Graph.tf`), so that
/// builds that do not know the `tf` field refuse it instead of reading an empty graph.
pub const SCHEMA_VERSION_TF: i32 = 2;

/// The schema_version of a graph.fb holding an ONNX model (`Graph.onnx`).
pub const SCHEMA_VERSION_ONNX: i32 = 3;

/// Whether graph.fb bytes hold an ONNX model (schema_version 3 with `onnx`); `false`
/// for anything that does not verify.
pub fn is_onnx(bytes: &[u8]) -> bool {
    verified_root::<fbg::Graph>(bytes, IDENTIFIER, "graph.fb").is_ok_and(|r| r.onnx().is_some())
}

/// Whether graph.fb bytes hold a TensorFlow graph (schema_version 2 with `tf`); `false`
/// for anything that does not verify.
pub fn is_tf(bytes: &[u8]) -> bool {
    verified_root::<fbg::Graph>(bytes, IDENTIFIER, "graph.fb").is_ok_and(|r| r.tf().is_some())
}
/// Largest graph.fb accepted.
pub const MAX_GRAPH_FB_BYTES: usize = 1 << 31;

/// The verifier limits used for every graph.fb and trainingConfig.fb read of `len`
/// bytes. The apparent size (what the object graph expands to, counting shared objects
/// each time) is held to 16 times the input, at least 16 MiB, so a small file whose
/// offsets all point at one big string cannot make the reader allocate gigabytes.
pub(crate) fn verifier_options(len: usize) -> VerifierOptions {
    VerifierOptions {
        max_depth: 32,
        max_tables: 10_000_000,
        max_apparent_size: len.saturating_mul(16).clamp(16 << 20, 1 << 31),
        ignore_missing_null_terminator: false,
    }
}

/// Checks size and identifier, then verifies `bytes` as a FlatBuffer of root `T`.
pub(crate) fn verified_root<'b, T>(
    bytes: &'b [u8],
    identifier: &str,
    what: &str,
) -> Result<T::Inner>
where
    T: ::flatbuffers::Follow<'b> + ::flatbuffers::Verifiable + 'b,
{
    if bytes.len() > MAX_GRAPH_FB_BYTES {
        return Err(ErrorKind::LimitExceeded {
            what: "FlatBuffers size",
            size: bytes.len() as u64,
            limit: MAX_GRAPH_FB_BYTES as u64,
        }
        .into());
    }
    match bytes.get(4..8) {
        Some(id) if id == identifier.as_bytes() => {}
        Some(id) => {
            return Err(gerr(format!(
                "{what}: file identifier {:?} is not {identifier:?}",
                String::from_utf8_lossy(id)
            )));
        }
        None => {
            return Err(ErrorKind::Truncated {
                what: "FlatBuffers header",
                needed: 8,
                available: bytes.len() as u64,
            }
            .into());
        }
    }
    ::flatbuffers::root_with_opts::<T>(&verifier_options(bytes.len()), bytes)
        .map_err(|e| gerr(format!("{what}: FlatBuffers verification failed: {e}")))
}

/// Decodes graph.fb bytes.
pub fn decode(bytes: &[u8]) -> Result<Graph> {
    let root = verified_root::<fbg::Graph>(bytes, IDENTIFIER, "graph.fb")?;
    let tf = root.tf().map(tf_from_fb).transpose()?;
    let onnx = root.onnx().map(onnx_from_fb).transpose()?;
    if tf.is_some() && onnx.is_some() {
        return Err(gerr(
            "graph.fb holds both a TensorFlow graph and an ONNX model",
        ));
    }
    let want = if tf.is_some() {
        SCHEMA_VERSION_TF
    } else if onnx.is_some() {
        SCHEMA_VERSION_ONNX
    } else {
        SCHEMA_VERSION
    };
    if root.schema_version() != want {
        return Err(gerr(format!(
            "graph.fb schema_version {} is not supported (this build reads {SCHEMA_VERSION}, \
             {SCHEMA_VERSION_TF} for a TensorFlow graph and {SCHEMA_VERSION_ONNX} for an \
             ONNX model)",
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
    Ok(Graph {
        blocks,
        version: root.version(),
        op_version_map: root.op_version_map().map(|m| {
            m.iter()
                .map(|p| (p.op_name().to_string(), p.version()))
                .collect()
        }),
        tf,
        onnx,
    })
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

/// An f32 FLOAT attribute as the f64 graph.fb stores, NaN payload included (a plain
/// conversion may quiet a signaling NaN, and the ProgramDesc would not come back).
fn widen(x: f32) -> f64 {
    if !x.is_nan() {
        return f64::from(x);
    }
    let b = u64::from(x.to_bits());
    f64::from_bits(((b & 0x8000_0000) << 32) | 0x7ff0_0000_0000_0000 | ((b & 0x007f_ffff) << 29))
}

/// The inverse of [`widen`]: keeps the payload of a NaN that has one in f32's bits.
fn narrow(x: f64) -> f32 {
    if x.is_nan() {
        let b = x.to_bits();
        let payload = ((b >> 29) & 0x007f_ffff) as u32;
        if payload != 0 {
            return f32::from_bits(((b >> 32) as u32 & 0x8000_0000) | 0x7f80_0000 | payload);
        }
    }
    x as f32
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

// ---------------------------------------------------------------------------------
// Encoding

type Fbb<'a> = FlatBufferBuilder<'a>;

/// Encodes a graph as graph.fb bytes.
pub fn encode(g: &Graph) -> Result<Vec<u8>> {
    if g.blocks.is_empty() {
        return Err(gerr("graph has no blocks"));
    }
    let mut fbb = Fbb::with_capacity(4096);
    let blocks = g
        .blocks
        .iter()
        .enumerate()
        .map(|(i, b)| block_to_fb(&mut fbb, b).map_err(|e| in_where(e, &format!("block {i}"))))
        .collect::<Result<Vec<_>>>()?;
    let blocks = fbb.create_vector(&blocks);
    let op_version_map = g.op_version_map.as_ref().map(|pairs| {
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
    let tf = g.tf.as_ref().map(|t| tf_to_fb(&mut fbb, t));
    let onnx = g.onnx.as_ref().map(|o| onnx_to_fb(&mut fbb, o));
    let root = fbg::Graph::create(
        &mut fbb,
        &fbg::GraphArgs {
            schema_version: if tf.is_some() {
                SCHEMA_VERSION_TF
            } else if onnx.is_some() {
                SCHEMA_VERSION_ONNX
            } else {
                SCHEMA_VERSION
            },
            blocks: Some(blocks),
            version: g.version,
            op_version_map,
            tf,
            onnx,
        },
    );
    fbg::finish_graph_buffer(&mut fbb, root);
    Ok(fbb.finished_data().to_vec())
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

fn string_vec<'a>(
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

#[cfg(test)]
mod tests {
    use super::*;

    /// graph.fb bytes with one block holding `vars` and the op `op` builds.
    fn build(
        schema_version: i32,
        var: impl for<'a> FnOnce(&mut Fbb<'a>) -> Option<WIPOffset<fbg::Variable<'a>>>,
        op: impl for<'a> FnOnce(&mut Fbb<'a>) -> Option<WIPOffset<fbg::Operation<'a>>>,
    ) -> Vec<u8> {
        let mut fbb = Fbb::new();
        let vars: Vec<_> = var(&mut fbb).into_iter().collect();
        let ops: Vec<_> = op(&mut fbb).into_iter().collect();
        let variables = Some(fbb.create_vector(&vars));
        let operations = Some(fbb.create_vector(&ops));
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
        let op = &g.blocks[0].ops[0];
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
        let mut g = Graph::new();
        g.blocks[0].ops.push(op);
        let bytes = encode(&g).unwrap();
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
}
