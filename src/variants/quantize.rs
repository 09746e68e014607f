//! `quantize`: an INT8 tag derived from a float tag (symmetric, per tensor or per
//! output channel), with a graph that dequantizes the weights before use.

use super::quantize_math::{self, Quantized};
use super::rewrite::{Conversion, converted};
use super::variant::{
    AllowValues, CAST, ParamChange, QUANTIZATION, ValueCounts, Variant, VariantReport, cast_dtype,
    check_non_finite, derive_instead, derive_variant, quantized_because, source_metadata,
    user_metadata,
};
use crate::archive::{Archive, WriteOptions};
use crate::error::{Error, ErrorKind, Result};
use crate::graph::{AttrValue, Graph, Op};
use crate::interop::onnx::variants::OnnxQuant;
use crate::progress::Ticker;
use crate::tensor::{DType, Tensor};
use serde_json::json;
use std::collections::{HashMap, HashSet};
use std::path::Path;

/// Options of [`quantize`].
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct QuantizeOptions {
    /// One scale per output channel instead of one per tensor. Recommended: where
    /// channel ranges differ it cuts the error several-fold (measured figures and
    /// tolerances in docs/VARIANTS.md).
    pub per_channel: bool,
}

/// Where a weight's output channels are, as the consuming op says.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum ChannelAxis {
    /// A fixed axis (conv filters: 0, transposed conv filters: 1).
    Fixed(usize),
    /// Counted from the end (matmul / mul / fc: the last axis, or the one before it
    /// when the weight is transposed).
    FromEnd(usize),
}

impl ChannelAxis {
    fn resolve(self, rank: usize) -> Option<usize> {
        match self {
            ChannelAxis::Fixed(a) => (a < rank).then_some(a),
            ChannelAxis::FromEnd(k) => rank.checked_sub(k + 1),
        }
    }

    /// The rule in words: `axis 1`, `the last axis`, `axis -2`.
    fn describe(self) -> String {
        match self {
            ChannelAxis::Fixed(a) => format!("axis {a}"),
            ChannelAxis::FromEnd(0) => "the last axis".to_string(),
            ChannelAxis::FromEnd(k) => format!("axis -{}", k + 1),
        }
    }
}

/// The ops that read a weight, each with where it says the weight's output channels are:
/// distinct (op type, rule) pairs in first-use order. Without a graph, one pseudo-use.
type WeightUses = Vec<(String, ChannelAxis)>;

fn attr_true(op: &Op, name: &str) -> bool {
    matches!(op.get_attr(name), Some(AttrValue::Bool(true)))
}

/// The weight slot of a matmul/conv-style op and where its output channels are.
fn weight_slot(op: &Op) -> Option<(&'static str, ChannelAxis)> {
    Some(match op.op_type.as_str() {
        "mul" => ("Y", ChannelAxis::FromEnd(0)),
        "matmul" => (
            "Y",
            ChannelAxis::FromEnd(usize::from(attr_true(op, "transpose_Y"))),
        ),
        "matmul_v2" => (
            "Y",
            ChannelAxis::FromEnd(usize::from(attr_true(op, "trans_y"))),
        ),
        "fc" => ("W", ChannelAxis::FromEnd(0)),
        "conv2d" | "depthwise_conv2d" | "conv3d" | "fused_conv2d" | "conv2d_fusion" => {
            ("Filter", ChannelAxis::Fixed(0))
        }
        "conv2d_transpose" | "depthwise_conv2d_transpose" | "conv3d_transpose" => {
            ("Filter", ChannelAxis::Fixed(1))
        }
        _ => return None,
    })
}

/// The weights the graph feeds to matmul/conv-style ops, with the ops that read them
/// ([`WeightUses`]), in first-use order. A weight some op writes is left alone.
fn graph_weights(graph: &Graph) -> Vec<(String, WeightUses)> {
    // Only a program has ops modelzip rewrites (an ONNX model's are found apart).
    let blocks = graph.program().map_or(&[][..], |p| p.blocks.as_slice());
    let written: HashSet<&str> = blocks
        .iter()
        .flat_map(|b| &b.ops)
        .flat_map(|op| &op.outputs)
        .flat_map(|s| s.args.iter().map(String::as_str))
        .collect();
    let mut order: Vec<String> = Vec::new();
    let mut uses: HashMap<String, WeightUses> = HashMap::new();
    for op in blocks.iter().flat_map(|b| &b.ops) {
        let Some((slot, axis)) = weight_slot(op) else {
            continue;
        };
        for s in op.inputs.iter().filter(|s| s.name == slot) {
            for arg in &s.args {
                if written.contains(arg.as_str()) {
                    continue;
                }
                let u = uses.entry(arg.clone()).or_insert_with(|| {
                    order.push(arg.clone());
                    Vec::new()
                });
                if !u.iter().any(|(t, a)| *t == op.op_type && *a == axis) {
                    u.push((op.op_type.clone(), axis));
                }
            }
        }
    }
    order
        .into_iter()
        .map(|n| {
            let u = uses.remove(&n).unwrap_or_default();
            (n, u)
        })
        .collect()
}

/// The channel axis a weight of `dims` read by `uses` is quantized along: `Ok(None)` per
/// tensor as asked, `Ok(Some(axis))` per channel, and per channel asked but impossible
/// `Err(why)`: an op's axis does not fit the weight's rank, or the ops disagree on
/// the axis (a weight read by a matmul and, transposed, by another is both).
fn channel_axis(
    options: &QuantizeOptions,
    uses: &[(String, ChannelAxis)],
    dims: &[u64],
) -> std::result::Result<Option<usize>, String> {
    if !options.per_channel {
        return Ok(None);
    }
    let rank = dims.len();
    let mut resolved: Vec<(&str, usize)> = Vec::with_capacity(uses.len());
    for (op, rule) in uses {
        match rule.resolve(rank) {
            Some(a) => resolved.push((op, a)),
            None => {
                return Err(format!(
                    "{op} reads its output channels along {}, which a weight of rank {rank} \
                     (dims {dims:?}) does not have",
                    rule.describe()
                ));
            }
        }
    }
    match resolved.as_slice() {
        [] => Err("no op it feeds says which axis holds its output channels".to_string()),
        [(_, a), rest @ ..] if rest.iter().all(|(_, b)| b == a) => Ok(Some(*a)),
        _ => {
            let each: Vec<String> = resolved
                .iter()
                .map(|(op, a)| format!("{op} along axis {a}"))
                .collect();
            Err(format!(
                "the ops that read it disagree on its output-channel axis ({})",
                each.join(", ")
            ))
        }
    }
}

/// The dims of an ONNX weight's scales: `[C]` per channel, a scalar per tensor (what
/// DequantizeLinear takes).
fn onnx_scale_dims(axis: Option<usize>, dims: &[u64]) -> Vec<u64> {
    match axis.and_then(|a| dims.get(a)) {
        Some(&c) => vec![c],
        None => Vec::new(),
    }
}

/// Derives INT8 tag `new_tag` from float tag `from_tag` of the archive at `path` and
/// appends it in place.
///
/// Which parameters: with a graph, the FP32 parameters of rank ≥ 2 that matmul/conv-style
/// ops read as weights (`Y` of `mul`/`matmul`/`matmul_v2`, `W` of `fc`, `Filter` of
/// `conv2d`/`depthwise_conv2d`/`conv3d`/`conv2d_transpose`/...); without a graph, every
/// float (FP16, BF16, FP32, FP64) parameter of rank ≥ 2. Each is stored as INT8 under its
/// name, with its FP32 scales as `<name>@scale` (dims `[1]` per tensor, `[C]` per
/// channel); real value ≈ q × scale. The channel axis is the weight's output axis: 0 for
/// conv filters, 1 for transposed-conv filters, the last axis for matmul/mul/fc weights
/// (the one before it when `trans_y`/`transpose_Y`); without a graph, the last axis of a
/// rank-2 tensor and axis 0 otherwise. A weight whose readers name different axes of it,
/// or an axis its rank lacks, is quantized per tensor, the report saying why
/// ([`ParamChange::Quantized`](super::ParamChange::Quantized)'s `per_tensor_reason`).
///
/// A tag imported from ONNX: the FP32 initializers of rank ≥ 2 that the main graph's
/// `MatMul` (B, last axis), `Gemm` (B, axis 1, or 0 with `transB`) and `Conv` (W, axis
/// 0) nodes read; not weights read only in subgraphs or functions, nor initializers
/// that are graph inputs. Their per-tensor scales are scalars (dims `[]`).
///
/// Every other parameter is written unchanged and so shared with the source tag. The
/// graph (if any) gets, per weight, `cast` (INT8 → FP32) and `elementwise_mul` by the
/// scale inserted after the feed ops, and its users read `<name>@dequant`; it is written
/// in the source tag's encoding. An ONNX model instead gets, per weight `W`, the
/// initializers `W_quantized` (INT8) and `W_scale` and a node
/// `DequantizeLinear(W_quantized, W_scale) -> W` at the start of the main graph
/// (docs/ONNX.md). metadata.json records the scheme under
/// `"quantization"`, beside the source tag's user keys (not its checkpoint keys `step`
/// and `metrics`: a variant is not a checkpoint). Updater state and the training config
/// are not carried over.
///
/// Refused before anything is written, with [`ErrorKind::UnrepresentableValues`]
/// naming the parameter, the count and the first index: NaN or ±inf in a parameter to
/// quantize (no scale represents them), unless `allow.non_finite`: then they are
/// quantized to 0, left out of the scale, and counted in the report
/// ([`VariantParam::non_finite`](super::VariantParam::non_finite)). `allow.overflow`
/// does not apply: every finite value has an INT8 step. Pass `&AllowValues::default()`
/// to refuse them.
///
/// Refused before any work, with [`ErrorKind::InvalidInput`]: a source tag that is
/// quantized already (a `<name>@scale` parameter beside `<name>`, or a `quantization`
/// record in its metadata.json), and one with nothing to quantize (no parameter the
/// rules above choose, e.g. an FP16 tag whose graph reads its weights through `cast`
/// ops), a cast variant (a `cast` record in its metadata.json: quantize its source
/// instead), and an ONNX model whose default-domain opset is below 10 (13 per channel) and
/// cannot safely be raised, or that already uses a name the rewrite needs. Also
/// refused: an invalid or existing new tag name, an unknown source tag.
pub fn quantize(
    path: impl AsRef<Path>,
    from_tag: &str,
    new_tag: &str,
    options: &QuantizeOptions,
    allow: &AllowValues,
    write: &WriteOptions,
) -> Result<VariantReport> {
    let path = path.as_ref();
    derive_variant(path, from_tag, new_tag, write, |archive, ticker| {
        build(archive, from_tag, options, allow, ticker)
    })
}

fn build(
    archive: &Archive,
    from_tag: &str,
    options: &QuantizeOptions,
    allow: &AllowValues,
    ticker: &mut Ticker<'_>,
) -> Result<Variant> {
    let tag = archive.tag(from_tag)?;
    let meta = source_metadata(&tag)?;
    if let Some(why) = quantized_because(&tag, &meta) {
        return Err(ErrorKind::InvalidInput(format!(
            "tag {:?} {why}: it is quantized already; quantize {} instead",
            tag.name(),
            derive_instead(&meta, QUANTIZATION)
        ))
        .into());
    }
    let graph = match tag.graph()? {
        Some((enc, bytes)) => {
            let entry = format!("{}/{}", tag.name(), enc.file_name());
            let g = Graph::decode(enc, &bytes).map_err(|e| e.in_entry(entry))?;
            if matches!(g, Graph::Pir(_)) {
                // The JSON is kept as Paddle wrote it: no dequantize ops can go in.
                return Err(ErrorKind::InvalidInput(format!(
                    "tag {:?} holds a Paddle PIR program, which quantize does not rewrite: \
                     quantize the model in Paddle before importing it",
                    tag.name()
                ))
                .into());
            }
            Some((enc, g))
        }
        None => None,
    };
    let onnx = match &graph {
        Some((_, Graph::Onnx(o))) => Some(o),
        _ => None,
    };
    let params: HashMap<&str, usize> = tag
        .params()
        .iter()
        .enumerate()
        .map(|(i, p)| (p.name.as_str(), i))
        .collect();
    // The parameters' dtypes and dims, from their headers alone (one batch from a remote
    // archive: the data is read once, below, and only where it is needed).
    let locations: Vec<_> = tag.params().iter().map(|p| &p.location).collect();
    let heads = tag.archive().tensor_heads(&locations)?;

    // Which parameters to quantize, and along which axis (before knowing their rank).
    let mut chosen: HashMap<String, WeightUses> = HashMap::new();
    if let Some(o) = onnx {
        let entry = format!("{}/graph.fb", tag.name());
        for w in crate::interop::onnx::variants::weights(o).map_err(|e| e.in_entry(entry))? {
            if let Some(&i) = params.get(w.param.as_str()) {
                let h = &heads[i];
                if h.dtype == DType::Fp32 && h.dims.len() >= 2 {
                    let uses = w
                        .uses
                        .into_iter()
                        .map(|(op, a)| (op, ChannelAxis::Fixed(a)))
                        .collect();
                    chosen.insert(w.param, uses);
                }
            }
        }
    } else if let Some((_, g)) = &graph {
        for (name, uses) in graph_weights(g) {
            if let Some(&i) = params.get(name.as_str()) {
                let h = &heads[i];
                if h.dtype == DType::Fp32 && h.dims.len() >= 2 {
                    chosen.insert(name, uses);
                }
            }
        }
    } else {
        for (p, h) in tag.params().iter().zip(&heads) {
            let float = matches!(
                h.dtype,
                DType::Fp16 | DType::Bf16 | DType::Fp32 | DType::Fp64
            );
            if float && h.dims.len() >= 2 {
                let axis = if h.dims.len() == 2 {
                    ChannelAxis::FromEnd(0)
                } else {
                    ChannelAxis::Fixed(0)
                };
                chosen.insert(p.name.clone(), vec![("(no graph)".to_string(), axis)]);
            }
        }
    }

    if chosen.is_empty() {
        let which = if onnx.is_some() {
            "no FP32 initializer of rank >= 2 of its ONNX main graph is read as the weight of a \
             MatMul, Gemm or Conv node (weights inside subgraphs and functions, and \
             initializers that are also graph inputs, stay FP32)"
        } else if graph.is_some() {
            "no FP32 parameter of rank >= 2 is read as a weight by a matmul/conv-style op of its graph"
        } else {
            "it has no graph and no float parameter of rank >= 2"
        };
        let hint = match cast_dtype(&meta) {
            Some(dtype) => format!(
                "; it is a cast variant ({dtype}): quantize {} instead",
                derive_instead(&meta, CAST)
            ),
            None => String::new(),
        };
        return Err(ErrorKind::InvalidInput(format!(
            "tag {:?} has nothing to quantize: {which}{hint}",
            tag.name()
        ))
        .into());
    }

    // A cast variant with something to quantize (one without a graph: its FP16/BF16
    // params): refused too, like every variant of a variant. Its values are rounded
    // copies of its source's, and the INT8 tag would record it as its source.
    if let Some(dtype) = cast_dtype(&meta) {
        return Err(ErrorKind::InvalidInput(format!(
            "tag {:?} is a cast variant ({dtype}): quantizing it would quantize {dtype}-rounded \
             copies of its source's values; quantize {} instead",
            tag.name(),
            derive_instead(&meta, CAST)
        ))
        .into());
    }

    // An ONNX model is rewritten first, from the weights' dims alone: a model whose
    // opset is too old or that has a name the rewrite needs is refused before any
    // values are quantized.
    let onnx_rewritten = match onnx {
        Some(o) => {
            let mut quants = Vec::new();
            for (p, h) in tag.params().iter().zip(&heads) {
                let Some(uses) = chosen.get(&p.name) else {
                    continue;
                };
                let dims = h.dims.clone();
                let axis = channel_axis(options, uses, &dims).ok().flatten();
                quants.push(OnnxQuant {
                    param: p.name.clone(),
                    scale_param: format!("{}@scale", p.name),
                    scale_dims: onnx_scale_dims(axis, &dims),
                    axis,
                });
            }
            let entry = format!("{}/graph.fb", tag.name());
            Some(
                crate::interop::onnx::variants::rewrite(o, &quants)
                    .map_err(|e| e.in_entry(entry))?,
            )
        }
        None => None,
    };
    let is_onnx = onnx_rewritten.is_some();
    let mut out = Vec::with_capacity(tag.params().len() + chosen.len());
    let mut convs = Vec::new();
    let mut recorded = serde_json::Map::new();
    let mut counts = HashMap::new();
    // The distinct tensors of the new tag. Many names may list one source tensor file:
    // each file is read once per distinct result, copied once when written unchanged
    // and quantized once per channel axis (what the result depends on beside the file),
    // whatever the number of names.
    let mut tensors = Vec::new();
    let mut unchanged: HashMap<&str, usize> = HashMap::new();
    // (file, axis) -> (quantized tensor, scale tensor, non-finite count).
    let mut quantized: HashMap<(&str, Option<usize>), (usize, usize, u64)> = HashMap::new();
    for (p, h) in tag.params().iter().zip(&heads) {
        ticker.tick();
        let entry: &str = &p.location.entry;
        let Some(uses) = chosen.get(&p.name) else {
            let i = match unchanged.get(entry) {
                Some(&i) => i,
                None => {
                    #[cfg(test)]
                    super::variant::work::note(&super::variant::work::CONVERTED);
                    tensors.push(tag.tensor(&p.location)?.view().to_owned());
                    unchanged.insert(entry, tensors.len() - 1);
                    tensors.len() - 1
                }
            };
            out.push((p.name.clone(), i, ParamChange::Unchanged));
            continue;
        };
        // The header's dims (those of the data: a read checks them against it).
        let dims = h.dims.clone();
        // No `<name>@scale` exists: a tag that has one was refused above.
        let scale_name = format!("{}@scale", p.name);
        let (axis, per_tensor_reason) = match channel_axis(options, uses, &dims) {
            // An empty weight gets a scale per channel as any other, up to a bound (a dim
            // of 0 leaves the others free: one of 2^61 would ask for as many scales).
            Ok(Some(a))
                if dims.contains(&0)
                    && dims
                        .get(a)
                        .is_some_and(|&n| n > quantize_math::MAX_EMPTY_CHANNELS as u64) =>
            {
                let why = format!(
                    "it holds no values, and its {} channels are more scales than the {} an empty weight gets",
                    dims[a],
                    quantize_math::MAX_EMPTY_CHANNELS
                );
                (None, Some(why))
            }
            Ok(axis) => (axis, None),
            Err(why) => (None, Some(why)),
        };
        let scale_dims = if is_onnx {
            Some(onnx_scale_dims(axis, &dims))
        } else {
            None
        };
        let (qi, si, non_finite) = match quantized.get(&(entry, axis)) {
            Some(&done) => done,
            None => {
                #[cfg(test)]
                super::variant::work::note(&super::variant::work::CONVERTED);
                let data = tag.tensor(&p.location)?;
                let view = data.view();
                let values = view
                    .to_f32_vec()
                    .map_err(|e| e.in_entry(p.location.entry.clone()))?;
                let non_finite = check_non_finite(
                    &p.name,
                    &values,
                    allow,
                    "quantizing would store them as 0 and leave them out of the scale",
                    view.dtype() == DType::Fp64,
                )
                .map_err(|e| e.in_entry(p.location.entry.clone()))?;
                let q: Quantized = match axis {
                    Some(a) => quantize_math::per_channel(&values, &dims, a).ok_or_else(|| {
                        Error::new(ErrorKind::InvalidInput(format!(
                            "cannot quantize {:?} along axis {a}: dims {dims:?} do not match its {} values",
                            p.name,
                            values.len()
                        )))
                        .in_entry(p.location.entry.clone())
                    })?,
                    None => quantize_math::per_tensor(&values),
                };
                let scale_dims = scale_dims
                    .clone()
                    .unwrap_or_else(|| vec![q.scales.len() as u64]);
                let qt = Tensor::from_slice(dims.clone(), &q.values)?
                    .with_lod(view.lod().clone())
                    .map_err(|e| e.in_entry(p.location.entry.clone()))?;
                let st = Tensor::from_slice(scale_dims, &q.scales)?;
                tensors.push(qt);
                tensors.push(st);
                let done = (tensors.len() - 2, tensors.len() - 1, non_finite);
                quantized.insert((entry, axis), done);
                done
            }
        };
        if non_finite > 0 {
            counts.insert(
                p.name.clone(),
                ValueCounts {
                    non_finite,
                    ..ValueCounts::default()
                },
            );
        }
        // metadata.json keeps why a weight asked per channel got one scale.
        let mut record = json!({"axis": axis, "scale": scale_name});
        if let Some(why) = &per_tensor_reason {
            record["per_tensor_reason"] = json!(why);
        }
        let scale_dims = tensors[si].dims().to_vec();
        out.push((
            p.name.clone(),
            qi,
            ParamChange::Quantized {
                axis,
                scale: scale_name.clone(),
                per_tensor_reason,
            },
        ));
        out.push((
            scale_name.clone(),
            si,
            ParamChange::Scale { of: p.name.clone() },
        ));
        let mul_axis = axis.map_or(Ok(-1), i32::try_from).map_err(|_| {
            Error::new(ErrorKind::InvalidInput(format!(
                "axis of {:?} too large",
                p.name
            )))
        })?;
        convs.push(Conversion {
            param: p.name.clone(),
            stored: DType::Int8,
            scale: Some((scale_name.clone(), scale_dims, mul_axis)),
        });
        recorded.insert(p.name.clone(), record);
    }

    let graph = match graph {
        Some((enc, g)) if is_onnx => {
            let entry = format!("{}/{}", tag.name(), enc.file_name());
            let g = onnx_rewritten.map_or(g, Graph::Onnx);
            Some((enc, g.encode(enc).map_err(|e| e.in_entry(entry))?))
        }
        Some((enc, g)) => Some((enc, converted(tag.name(), enc, g, &convs)?)),
        None => None,
    };
    let mut metadata = user_metadata(meta);
    metadata.insert(
        QUANTIZATION.into(),
        json!({
            "scheme": "symmetric-int8",
            "per_channel": options.per_channel,
            "source_tag": tag.name(),
            "params": recorded,
        }),
    );
    Ok(Variant {
        source_tag: tag.name().to_string(),
        graph,
        params: out,
        tensors,
        metadata,
        counts,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::graph::{Var, VarKind};

    #[test]
    fn weight_slots_and_axes() {
        let mut p = crate::graph::Program::default();
        let b = &mut p.blocks[0];
        b.vars
            .push(Var::new("w", VarKind::Constant, DType::Fp32, vec![4, 3]));
        b.ops.push(
            Op::new("", "matmul_v2")
                .input("X", &["x"])
                .input("Y", &["w"])
                .attr("trans_y", AttrValue::Bool(true))
                .output("Out", &["y"]),
        );
        b.ops.push(
            Op::new("", "conv2d")
                .input("Filter", &["f"])
                .input("Input", &["y"])
                .output("Output", &["z"]),
        );
        b.ops.push(
            Op::new("", "conv2d_transpose")
                .input("Filter", &["ft"])
                .output("Output", &["z2"]),
        );
        b.ops.push(
            Op::new("", "elementwise_add")
                .input("X", &["z"])
                .input("Y", &["bias"])
                .output("Out", &["o"]),
        );
        b.ops
            .push(Op::new("", "mul").input("Y", &["o"]).output("Out", &["p"]));
        let w = graph_weights(&Graph::from(p));
        let one = |op: &str, a| vec![(op.to_string(), a)];
        assert_eq!(
            w,
            vec![
                ("w".to_string(), one("matmul_v2", ChannelAxis::FromEnd(1))),
                ("f".to_string(), one("conv2d", ChannelAxis::Fixed(0))),
                (
                    "ft".to_string(),
                    one("conv2d_transpose", ChannelAxis::Fixed(1))
                ),
            ]
        );
        assert_eq!(ChannelAxis::FromEnd(1).resolve(2), Some(0));
        assert_eq!(ChannelAxis::FromEnd(0).resolve(2), Some(1));
        assert_eq!(ChannelAxis::Fixed(1).resolve(1), None);
    }

    #[test]
    fn channel_axis_says_why_per_channel_cannot_be() {
        let per_channel = QuantizeOptions { per_channel: true };
        let uses = |u: &[(&str, ChannelAxis)]| -> WeightUses {
            u.iter().map(|(o, a)| (o.to_string(), *a)).collect()
        };
        let conv_t = uses(&[("conv2d_transpose", ChannelAxis::Fixed(1))]);
        assert_eq!(
            channel_axis(&per_channel, &conv_t, &[3, 4, 2, 2]),
            Ok(Some(1))
        );
        assert_eq!(
            channel_axis(&per_channel, &conv_t, &[3]),
            Err(
                "conv2d_transpose reads its output channels along axis 1, which a weight \
                 of rank 1 (dims [3]) does not have"
                    .to_string()
            )
        );
        let matmul_t = uses(&[("matmul", ChannelAxis::FromEnd(1))]);
        let e = channel_axis(&per_channel, &matmul_t, &[3]).unwrap_err();
        assert!(e.contains("along axis -2"), "{e}");
        // Different rules naming the same axis agree; different axes do not.
        let agree = uses(&[
            ("mul", ChannelAxis::FromEnd(0)),
            ("conv2d_transpose", ChannelAxis::Fixed(1)),
        ]);
        assert_eq!(channel_axis(&per_channel, &agree, &[4, 3]), Ok(Some(1)));
        assert_eq!(
            channel_axis(&per_channel, &agree, &[4, 3, 2]),
            Err("the ops that read it disagree on its output-channel axis \
                 (mul along axis 2, conv2d_transpose along axis 1)"
                .to_string())
        );
        // Per tensor as asked: no reason.
        assert_eq!(
            channel_axis(&QuantizeOptions::default(), &conv_t, &[3]),
            Ok(None)
        );
    }
}
