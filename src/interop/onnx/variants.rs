//! INT8 variants of tags imported from ONNX: which initializers are the weights of
//! `MatMul` / `Gemm` / `Conv` nodes, and the stored ModelProto rewritten so that a
//! `DequantizeLinear` node produces each quantized weight under its original name.
//!
//! Only the main graph is looked at: weights read inside subgraphs (If / Loop / Scan
//! bodies) or functions, initializers that are also graph inputs (a caller may
//! override them), and initializers a `training_info` updates stay FP32.

use super::decode_model;
use crate::error::{Error, ErrorKind, Result};
use crate::graph::{OnnxGraph, OnnxInit};
use crate::onnx_proto as pb;
use prost::Message;
use std::collections::{HashMap, HashSet};

/// The opset of the default domain from which `DequantizeLinear` exists (per tensor).
pub(crate) const OPSET_PER_TENSOR: i64 = 10;
/// The opset from which `DequantizeLinear` takes an `axis` (per channel).
pub(crate) const OPSET_PER_AXIS: i64 = 13;
/// The IR version opset 13 needs.
const IR_FOR_OPSET_13: i64 = 7;

fn graph_err(msg: impl Into<String>) -> Error {
    ErrorKind::Graph(msg.into()).into()
}

fn invalid(msg: impl Into<String>) -> Error {
    ErrorKind::InvalidInput(msg.into()).into()
}

/// Whether a node or opset entry is in ONNX's default domain.
fn default_domain(domain: Option<&str>) -> bool {
    matches!(domain, None | Some("") | Some("ai.onnx"))
}

/// One quantizable weight of the main graph.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct OnnxWeight {
    /// The tag parameter holding it.
    pub param: String,
    /// The nodes that read it as their weight, each with where it says the output
    /// channels are: distinct (op type, axis) pairs in first-use order (nodes that
    /// disagree make it quantized per tensor).
    pub uses: Vec<(String, usize)>,
}

/// The weight input of a node and its output-channel axis for a weight of `rank`:
/// `MatMul` B (`[..., K, N]`: the last axis), `Gemm` B (`[K, N]`: axis 1, or `[N, K]`
/// with `transB`: axis 0), `Conv` W (`[M, C/group, k...]`: axis 0).
fn weight_input(node: &pb::NodeProto, rank: usize) -> Option<(usize, usize)> {
    if !default_domain(node.domain.as_deref()) {
        return None;
    }
    let axis = match node.op_type.as_deref()? {
        "MatMul" => rank.checked_sub(1)?,
        "Gemm" => {
            let trans_b = node
                .attribute
                .iter()
                .find(|a| a.name.as_deref() == Some("transB"))
                .and_then(|a| a.i)
                .unwrap_or(0);
            if rank != 2 {
                return None;
            }
            if trans_b != 0 { 0 } else { 1 }
        }
        "Conv" => 0,
        _ => return None,
    };
    Some((1, axis))
}

/// The FP32 top-level initializers of rank ≥ 2 that are tag parameters and that main
/// graph `MatMul` / `Gemm` / `Conv` nodes read as their weight, in first-use order.
pub(crate) fn weights(g: &OnnxGraph) -> Result<Vec<OnnxWeight>> {
    let m = decode_model(&g.model)?;
    let graph = m
        .graph
        .as_ref()
        .ok_or_else(|| graph_err("the stored ONNX model has no graph"))?;
    if graph.initializer.len() != g.initializers.len() {
        return Err(graph_err(format!(
            "the stored ONNX model has {} initializers, graph.fb describes {}",
            graph.initializer.len(),
            g.initializers.len()
        )));
    }
    let inputs: HashSet<&str> = graph
        .input
        .iter()
        .filter_map(|v| v.name.as_deref())
        .collect();
    let trained: HashSet<&str> = m
        .training_info
        .iter()
        .flat_map(|t| &t.update_binding)
        .filter_map(|kv| kv.key.as_deref())
        .collect();
    // A name two initializers share (the second kept whole in the model) cannot become
    // a node output: such weights stay as they are.
    let mut count: HashMap<&str, usize> = HashMap::new();
    let sparse = graph
        .sparse_initializer
        .iter()
        .filter_map(|s| s.values.as_ref().and_then(|v| v.name.as_deref()));
    for n in graph
        .initializer
        .iter()
        .filter_map(|t| t.name.as_deref())
        .chain(sparse)
    {
        *count.entry(n).or_default() += 1;
    }
    // Initializer name -> (parameter, rank), for those that can be quantized at all.
    let mut candidates: HashMap<&str, (&str, usize)> = HashMap::new();
    for (t, init) in graph.initializer.iter().zip(&g.initializers) {
        let (Some(name), Some(param)) = (t.name.as_deref(), init.param.as_deref()) else {
            continue;
        };
        let fp32 = t.data_type == Some(pb::tensor_proto::DataType::Float as i32);
        let unique = count.get(name) == Some(&1);
        if fp32 && unique && t.dims.len() >= 2 && !inputs.contains(name) && !trained.contains(name)
        {
            candidates.insert(name, (param, t.dims.len()));
        }
    }
    let mut order: Vec<&str> = Vec::new();
    let mut uses: HashMap<&str, Vec<(String, usize)>> = HashMap::new();
    for node in &graph.node {
        let Some(w) = node.input.get(1).map(String::as_str) else {
            continue;
        };
        let Some(&(_, rank)) = candidates.get(w) else {
            continue;
        };
        let Some((_, axis)) = weight_input(node, rank) else {
            continue;
        };
        let op = node.op_type.as_deref().unwrap_or_default();
        let u = uses.entry(w).or_insert_with(|| {
            order.push(w);
            Vec::new()
        });
        if !u.iter().any(|(t, a)| t == op && *a == axis) {
            u.push((op.to_string(), axis));
        }
    }
    Ok(order
        .into_iter()
        .map(|w| OnnxWeight {
            param: candidates[w].0.to_string(),
            uses: uses.remove(w).unwrap_or_default(),
        })
        .collect())
}

/// One weight as the INT8 tag stores it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct OnnxQuant {
    /// The parameter (INT8 in the new tag, under the weight's own name).
    pub param: String,
    /// The FP32 scale parameter (`<param>@scale`).
    pub scale_param: String,
    /// Its dims: `[]` per tensor, `[C]` per channel.
    pub scale_dims: Vec<u64>,
    /// The channel axis, `None` per tensor.
    pub axis: Option<usize>,
}

/// Every value and node name the model uses, in every graph (subgraphs see the main
/// graph's names, so a new name must be new everywhere).
fn all_names(m: &pb::ModelProto) -> HashSet<String> {
    fn graph_names(g: &pb::GraphProto, out: &mut HashSet<String>) {
        let values = g.input.iter().chain(&g.output).chain(&g.value_info);
        out.extend(values.filter_map(|v| v.name.clone()));
        out.extend(g.initializer.iter().filter_map(|t| t.name.clone()));
        out.extend(
            g.sparse_initializer
                .iter()
                .filter_map(|s| s.values.as_ref().and_then(|v| v.name.clone())),
        );
        for n in &g.node {
            out.extend(n.input.iter().chain(&n.output).cloned());
            out.extend(n.name.clone());
            for a in &n.attribute {
                for sub in a.g.iter().chain(&a.graphs) {
                    graph_names(sub, out);
                }
            }
        }
    }
    let mut out = HashSet::new();
    if let Some(g) = &m.graph {
        graph_names(g, &mut out);
    }
    out
}

/// The default-domain op types of every graph (main graph and subgraphs).
fn default_ops(m: &pb::ModelProto) -> HashSet<String> {
    fn walk(g: &pb::GraphProto, out: &mut HashSet<String>) {
        for n in &g.node {
            if default_domain(n.domain.as_deref()) {
                out.extend(n.op_type.clone());
            }
            for a in &n.attribute {
                for sub in a.g.iter().chain(&a.graphs) {
                    walk(sub, out);
                }
            }
        }
    }
    let mut out = HashSet::new();
    if let Some(g) = &m.graph {
        walk(g, &mut out);
    }
    out
}

/// Default-domain ops whose meaning is the same at opsets 11, 12 and 13 (the versions
/// in between only added types or attributes with defaults that keep the old
/// behaviour; checked against onnx 1.23.2's schema history). A model of opset 11 or 12
/// that uses only these can have its opset raised to 13. Not here, among others:
/// Softmax / LogSoftmax / Hardmax (axis semantics changed in 13), Split, Squeeze,
/// Unsqueeze, ReduceSum (axes became an input in 13), Dropout (ratio became an input
/// in 12), Resize.
const SAFE_TO_13: &[&str] = &[
    "Abs",
    "Add",
    "And",
    "ArgMax",
    "ArgMin",
    "AveragePool",
    "BatchNormalization",
    "Cast",
    "Ceil",
    "Clip",
    "Concat",
    "Constant",
    "ConstantOfShape",
    "Conv",
    "ConvTranspose",
    "DequantizeLinear",
    "Div",
    "Elu",
    "Equal",
    "Erf",
    "Exp",
    "Expand",
    "Flatten",
    "Floor",
    "Gather",
    "Gemm",
    "GlobalAveragePool",
    "GlobalMaxPool",
    "Greater",
    "HardSigmoid",
    "Identity",
    "InstanceNormalization",
    "LRN",
    "LeakyRelu",
    "Less",
    "Log",
    "MatMul",
    "Max",
    "MaxPool",
    "Mean",
    "Min",
    "Mul",
    "Neg",
    "Not",
    "Or",
    "PRelu",
    "Pad",
    "Pow",
    "Range",
    "Reciprocal",
    "ReduceMax",
    "ReduceMean",
    "ReduceMin",
    "Relu",
    "Reshape",
    "Selu",
    "Shape",
    "Sigmoid",
    "Slice",
    "Softplus",
    "Sqrt",
    "Sub",
    "Sum",
    "Tanh",
    "Tile",
    "TopK",
    "Transpose",
    "Where",
];

/// Makes the model's default-domain opset at least `need`: as it is when it already
/// is, raised to 13 from 11 or 12 when every op keeps its meaning, refused otherwise.
fn ensure_opset(m: &mut pb::ModelProto, need: i64, per_channel: bool) -> Result<()> {
    let entry = m
        .opset_import
        .iter()
        .position(|o| default_domain(o.domain.as_deref()));
    let Some(i) = entry else {
        // No default-domain op can be in the model; importing the domain changes nothing.
        m.opset_import.push(pb::OperatorSetIdProto {
            domain: Some(String::new()),
            version: Some(need),
        });
        return raise_ir(m, need);
    };
    let have = m.opset_import[i].version.unwrap_or(1);
    if have >= need {
        return Ok(());
    }
    let what = if per_channel {
        format!("per-channel DequantizeLinear (its axis attribute) needs opset {OPSET_PER_AXIS}")
    } else {
        format!("DequantizeLinear needs opset {OPSET_PER_TENSOR}")
    };
    let instead = if per_channel && have >= OPSET_PER_TENSOR {
        "quantize per tensor (without --per-channel), or convert the model to opset 13 \
         (onnx.version_converter) and import it again"
    } else {
        "convert the model to opset 13 (onnx.version_converter) and import it again"
    };
    if have < 11 {
        return Err(invalid(format!(
            "the model imports the default ONNX domain at opset {have}; {what}, and raising \
             the opset from below 11 could change what its other nodes mean: {instead}"
        )));
    }
    let ops = default_ops(m);
    let mut unsafe_ops: Vec<&str> = ops
        .iter()
        .map(String::as_str)
        .filter(|o| !SAFE_TO_13.contains(o))
        .collect();
    unsafe_ops.sort_unstable();
    if !unsafe_ops.is_empty() {
        return Err(invalid(format!(
            "the model imports the default ONNX domain at opset {have}; {what}, and raising \
             it could change what these nodes mean: {}; {instead}",
            unsafe_ops.join(", ")
        )));
    }
    let function_imports = m.functions.iter().any(|f| {
        f.opset_import
            .iter()
            .any(|o| default_domain(o.domain.as_deref()))
    });
    if function_imports {
        return Err(invalid(format!(
            "the model imports the default ONNX domain at opset {have}; {what}, and its \
             functions import that domain at their own opset, which would no longer \
             match: {instead}"
        )));
    }
    m.opset_import[i].version = Some(OPSET_PER_AXIS);
    raise_ir(m, OPSET_PER_AXIS)
}

/// Raises the IR version to what opset `opset` needs (7 for 13), from IR 4 or later
/// (every change since is an addition); refused from below 4.
fn raise_ir(m: &mut pb::ModelProto, opset: i64) -> Result<()> {
    let need = if opset >= OPSET_PER_AXIS {
        IR_FOR_OPSET_13
    } else {
        5
    };
    let have = m.ir_version.unwrap_or(0);
    if have >= need {
        return Ok(());
    }
    if have < 4 {
        return Err(invalid(format!(
            "the model has IR version {have}; opset {opset} needs IR version {need}, and \
             raising it from below 4 changes what initializers mean"
        )));
    }
    m.ir_version = Some(need);
    Ok(())
}

/// The stored model with each weight of `quants` replaced: its initializer becomes the
/// INT8 `<W>_quantized` (the parameter `param`), `<W>_scale` (the FP32 parameter
/// `scale_param`) follows it, and a `DequantizeLinear(<W>_quantized, <W>_scale)` node
/// (with `axis` per channel) at the start of the main graph outputs `<W>`, so every
/// other node reads the weight as before. The default domain's opset is raised when
/// needed and safe ([`ensure_opset`]).
pub(crate) fn rewrite(g: &OnnxGraph, quants: &[OnnxQuant]) -> Result<OnnxGraph> {
    let mut m = decode_model(&g.model)?;
    let per_channel = quants.iter().any(|q| q.axis.is_some());
    let need = if per_channel {
        OPSET_PER_AXIS
    } else {
        OPSET_PER_TENSOR
    };
    ensure_opset(&mut m, need, per_channel)?;
    let mut taken = all_names(&m);
    let by_param: HashMap<&str, &OnnxQuant> =
        quants.iter().map(|q| (q.param.as_str(), q)).collect();
    let graph = m
        .graph
        .as_mut()
        .ok_or_else(|| graph_err("the stored ONNX model has no graph"))?;
    if graph.initializer.len() != g.initializers.len() {
        return Err(graph_err(format!(
            "the stored ONNX model has {} initializers, graph.fb describes {}",
            graph.initializer.len(),
            g.initializers.len()
        )));
    }
    let old = std::mem::take(&mut graph.initializer);
    let mut inits = Vec::with_capacity(old.len() + quants.len());
    let mut descs = Vec::with_capacity(old.len() + quants.len());
    let mut nodes = Vec::with_capacity(quants.len());
    let mut done = 0usize;
    for (t, init) in old.into_iter().zip(&g.initializers) {
        let q = init.param.as_deref().and_then(|p| by_param.get(p));
        let Some(q) = q else {
            // Written inline: the INT8 model is a quarter of the size, and its
            // weights are no longer where the external data file had them.
            inits.push(t);
            descs.push(OnnxInit {
                external: Vec::new(),
                ..init.clone()
            });
            continue;
        };
        let name = t.name.clone().unwrap_or_default();
        let mut fresh = |suffix: &str| -> Result<String> {
            let n = format!("{name}{suffix}");
            if !taken.insert(n.clone()) {
                return Err(graph_err(format!(
                    "cannot quantize {name:?}: the model already has a value or node named {n:?}"
                )));
            }
            Ok(n)
        };
        let q_name = fresh("_quantized")?;
        let s_name = fresh("_scale")?;
        let node_name = fresh("_DequantizeLinear")?;
        let quantized = pb::TensorProto {
            name: Some(q_name.clone()),
            data_type: Some(pb::tensor_proto::DataType::Int8 as i32),
            ..t
        };
        let scale = pb::TensorProto {
            name: Some(s_name.clone()),
            data_type: Some(pb::tensor_proto::DataType::Float as i32),
            dims: q
                .scale_dims
                .iter()
                .map(|&d| i64::try_from(d).map_err(|_| invalid("scale dims too large")))
                .collect::<Result<_>>()?,
            ..Default::default()
        };
        inits.push(quantized);
        descs.push(OnnxInit {
            param: Some(q.param.clone()),
            ..OnnxInit::default()
        });
        inits.push(scale);
        descs.push(OnnxInit {
            param: Some(q.scale_param.clone()),
            ..OnnxInit::default()
        });
        let mut attribute = Vec::new();
        if let Some(a) = q.axis {
            attribute.push(pb::AttributeProto {
                name: Some("axis".into()),
                r#type: Some(pb::attribute_proto::AttributeType::Int as i32),
                i: Some(i64::try_from(a).map_err(|_| invalid("axis too large"))?),
                ..Default::default()
            });
        }
        nodes.push(pb::NodeProto {
            input: vec![q_name, s_name],
            output: vec![name],
            name: Some(node_name),
            op_type: Some("DequantizeLinear".into()),
            attribute,
            ..Default::default()
        });
        done += 1;
    }
    if done != quants.len() {
        // More initializers than weights: two name one parameter (graph.fb allows it),
        // which quantizing would write twice.
        return Err(graph_err(match done.checked_sub(quants.len()) {
            Some(extra) => format!(
                "{extra} initializers of the stored model hold a weight another initializer \
                 holds too; quantizing would write it twice"
            ),
            None => format!(
                "{} of the {} weights to quantize are not initializers of the stored model",
                quants.len() - done,
                quants.len()
            ),
        }));
    }
    graph.initializer = inits;
    nodes.append(&mut graph.node);
    graph.node = nodes;
    Ok(OnnxGraph {
        model: m.encode_to_vec(),
        initializers: descs,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn node(op: &str, inputs: &[&str], trans_b: Option<i64>) -> pb::NodeProto {
        pb::NodeProto {
            op_type: Some(op.into()),
            input: inputs.iter().map(|s| s.to_string()).collect(),
            output: vec![format!("{op}_out")],
            attribute: trans_b
                .map(|i| pb::AttributeProto {
                    name: Some("transB".into()),
                    i: Some(i),
                    r#type: Some(2),
                    ..Default::default()
                })
                .into_iter()
                .collect(),
            ..Default::default()
        }
    }

    #[test]
    fn weight_axes_follow_the_op() {
        assert_eq!(weight_input(&node("MatMul", &[], None), 2), Some((1, 1)));
        assert_eq!(weight_input(&node("MatMul", &[], None), 3), Some((1, 2)));
        assert_eq!(weight_input(&node("Gemm", &[], None), 2), Some((1, 1)));
        assert_eq!(weight_input(&node("Gemm", &[], Some(1)), 2), Some((1, 0)));
        assert_eq!(weight_input(&node("Gemm", &[], Some(0)), 2), Some((1, 1)));
        assert_eq!(weight_input(&node("Conv", &[], None), 4), Some((1, 0)));
        assert_eq!(weight_input(&node("Add", &[], None), 2), None);
        let mut custom = node("MatMul", &[], None);
        custom.domain = Some("com.example".into());
        assert_eq!(weight_input(&custom, 2), None);
    }

    fn model(opset: i64, ops: &[&str]) -> pb::ModelProto {
        pb::ModelProto {
            ir_version: Some(6),
            opset_import: vec![pb::OperatorSetIdProto {
                domain: Some(String::new()),
                version: Some(opset),
            }],
            graph: Some(pb::GraphProto {
                node: ops.iter().map(|o| node(o, &["a", "b"], None)).collect(),
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    #[test]
    fn opset_is_raised_only_when_safe() {
        let mut m = model(17, &["MatMul"]);
        ensure_opset(&mut m, 13, true).unwrap();
        assert_eq!(m.opset_import[0].version, Some(17));
        let mut m = model(11, &["MatMul", "Relu", "Gemm"]);
        ensure_opset(&mut m, 13, true).unwrap();
        assert_eq!(m.opset_import[0].version, Some(13));
        assert_eq!(m.ir_version, Some(7));
        let mut m = model(12, &["MatMul", "Softmax"]);
        let e = ensure_opset(&mut m, 13, true).unwrap_err().to_string();
        assert!(e.contains("Softmax") && e.contains("per tensor"), "{e}");
        assert_eq!(m.opset_import[0].version, Some(12));
        let mut m = model(9, &["MatMul"]);
        let e = ensure_opset(&mut m, 10, false).unwrap_err().to_string();
        assert!(e.contains("opset 9") && e.contains("below 11"), "{e}");
        let mut m = model(10, &["MatMul"]);
        ensure_opset(&mut m, 10, false).unwrap();
        assert_eq!(m.opset_import[0].version, Some(10));
    }
}
