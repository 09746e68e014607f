//! `cast`: an FP16 or BF16 tag derived from a float tag, with a graph that casts the
//! parameters back to FP32 before use.

use super::rewrite::{Conversion, converted};
use super::variant::{
    AllowValues, CAST, ParamChange, QUANTIZATION, ValueCounts, Variant, VariantReport, cast_dtype,
    check_non_finite, derive_instead, derive_variant, find_bad, quantized_because, source_metadata,
    unrepresentable, user_metadata,
};
use crate::archive::{Archive, WriteOptions};
use crate::error::{Error, ErrorKind, Result};
use crate::graph::Graph;
use crate::progress::Ticker;
use crate::tensor::{DType, Tensor};
use serde_json::json;
use std::path::Path;

/// Derives tag `new_tag`, with every FP32 parameter stored as `dtype` (FP16 or BF16,
/// rounded to nearest, ties to even, by the `half` crate), from tag `from_tag` of the
/// archive at `path`, and appends it in place.
///
/// Parameters of other dtypes are written unchanged and so shared with the source tag.
/// The graph (if any) gets one `cast` op (`dtype` → FP32) per cast parameter that is a
/// variable of block 0, inserted after the feed ops, and every op that used the parameter
/// reads `<name>@cast` instead, so the model still computes in FP32. The graph is written
/// in the source tag's encoding. metadata.json records
/// `"cast": {"dtype": "FP16", "source_tag": ...}`, beside the source tag's user keys (not
/// its checkpoint keys `step` and `metrics`: a variant is not a checkpoint). Updater
/// state and the training config are not carried over.
///
/// Refused before anything is written, with [`ErrorKind::UnrepresentableValues`]
/// naming the parameter, the count and the first index, unless `allow` allows them: NaN
/// or ±inf in an FP32 parameter ([`AllowValues::non_finite`]: converted anyway, NaN
/// stays NaN, ±inf stays ±inf), and finite values beyond `dtype`'s range, |x| ≥ 65520
/// for FP16, which IEEE rounding makes ±inf ([`AllowValues::overflow`]: stored as
/// ±inf). The report counts the values allowed per parameter
/// ([`VariantParam::non_finite`], [`VariantParam::overflowed`]); pass
/// `&AllowValues::default()` to refuse them all.
///
/// Refused before any work, with [`ErrorKind::InvalidInput`]: a quantized source tag (a
/// `<name>@scale` parameter beside `<name>`, or a `quantization` record: a cast would
/// turn its scales into `dtype` and drop the record), and a source tag with no FP32
/// parameter (e.g. an FP16 variant), and a tag whose graph is an ONNX model or a
/// TensorFlow graph (they declare the parameters' dtypes, which cast does not
/// rewrite). Also refused: a `dtype` other than FP16/BF16, an
/// invalid or existing new tag name, an unknown source tag.
///
/// [`VariantParam::non_finite`]: super::VariantParam::non_finite
/// [`VariantParam::overflowed`]: super::VariantParam::overflowed
pub fn cast(
    path: impl AsRef<Path>,
    from_tag: &str,
    new_tag: &str,
    dtype: DType,
    allow: &AllowValues,
    write: &WriteOptions,
) -> Result<VariantReport> {
    let path = path.as_ref();
    if !matches!(dtype, DType::Fp16 | DType::Bf16) {
        return Err(ErrorKind::InvalidInput(format!(
            "cast makes FP16 or BF16 variants, not {}",
            dtype.name()
        ))
        .into());
    }
    derive_variant(path, from_tag, new_tag, write, |archive, ticker| {
        build(archive, from_tag, dtype, allow, ticker)
    })
}

/// `values` converted to `dtype` (FP16 or BF16), round to nearest even.
fn convert(dims: Vec<u64>, values: &[f32], dtype: DType) -> Result<Tensor> {
    if dtype == DType::Bf16 {
        let v: Vec<half::bf16> = values.iter().map(|&x| half::bf16::from_f32(x)).collect();
        Tensor::from_slice(dims, &v)
    } else {
        let v: Vec<half::f16> = values.iter().map(|&x| half::f16::from_f32(x)).collect();
        Tensor::from_slice(dims, &v)
    }
}

/// The value `x` becomes in `dtype` (FP16 or BF16), back as FP32.
fn round_trip(x: f32, dtype: DType) -> f32 {
    if dtype == DType::Bf16 {
        half::bf16::from_f32(x).to_f32()
    } else {
        half::f16::from_f32(x).to_f32()
    }
}

/// Refuses the values of FP32 parameter `name` that `dtype` cannot carry (NaN/±inf, and
/// finite values that round to ±inf) unless `allow` allows them; counts them, and the
/// nonzero values that become ±0.
fn check_values(
    name: &str,
    values: &[f32],
    dtype: DType,
    allow: &AllowValues,
) -> Result<ValueCounts> {
    let non_finite = check_non_finite(
        name,
        values,
        allow,
        "the cast would store them as they are (NaN, ±inf)",
        false,
    )?;
    let (overflowed, first) = find_bad(values, |_, x| {
        x.is_finite() && round_trip(x, dtype).is_infinite()
    });
    if let Some((first_index, first_value)) = first
        && !allow.overflow
    {
        let max = if dtype == DType::Bf16 {
            "3.3895e38"
        } else {
            "65504"
        };
        return Err(unrepresentable(
            name,
            &format!("are beyond {}'s range (largest finite {max})", dtype.name()),
            overflowed,
            (first_index, first_value),
            "the cast would store them as ±inf",
            "overflow",
        ));
    }
    let (underflowed, _) = find_bad(values, |_, x| x != 0.0 && round_trip(x, dtype) == 0.0);
    Ok(ValueCounts {
        non_finite,
        overflowed,
        underflowed,
    })
}

fn build(
    archive: &Archive,
    from_tag: &str,
    dtype: DType,
    allow: &AllowValues,
    ticker: &mut Ticker<'_>,
) -> Result<Variant> {
    let tag = archive.tag(from_tag)?;
    let meta = source_metadata(&tag)?;
    if let Some(why) = quantized_because(&tag, &meta) {
        return Err(ErrorKind::InvalidInput(format!(
            "tag {:?} is quantized: it {why}; a cast would turn its scales into {} and drop \
             its quantization record, so cast {} instead",
            tag.name(),
            dtype.name(),
            derive_instead(&meta, QUANTIZATION)
        ))
        .into());
    }
    // Something to cast: at least one FP32 parameter.
    let mut has_fp32 = false;
    let mut dtypes: Vec<&'static str> = Vec::new();
    // From the headers alone (one batch from a remote archive; the data is read below).
    let locations: Vec<_> = tag.params().iter().map(|p| &p.location).collect();
    for h in tag.archive().tensor_heads(&locations)? {
        let d = h.dtype;
        has_fp32 |= d == DType::Fp32;
        if !dtypes.contains(&d.name()) {
            dtypes.push(d.name());
        }
    }
    if !has_fp32 {
        let has = if dtypes.is_empty() {
            "it has no parameters".to_string()
        } else {
            format!("its parameters are {}", dtypes.join(", "))
        };
        let hint = match cast_dtype(&meta) {
            Some(d) => format!(
                "; it is a cast variant ({d}): cast {} instead",
                derive_instead(&meta, CAST)
            ),
            None => String::new(),
        };
        return Err(ErrorKind::InvalidInput(format!(
            "tag {:?} has no FP32 parameter to cast to {}: {has}{hint}",
            tag.name(),
            dtype.name()
        ))
        .into());
    }
    let graph = match tag.graph()? {
        Some((enc, bytes)) => {
            let entry = format!("{}/{}", tag.name(), enc.file_name());
            let g = Graph::decode(enc, &bytes).map_err(|e| e.in_entry(entry))?;
            // Their parameters' dtypes are declared in the stored model (ONNX
            // initializers, TensorFlow Const nodes), which cast does not rewrite: the
            // tag would not verify nor export.
            let foreign = match &g {
                Graph::Onnx(_) => Some("an ONNX model (quantize derives an INT8 variant of it)"),
                Graph::Tf(_) => Some("a TensorFlow graph"),
                Graph::Pir(_) => Some("a Paddle PIR program"),
                Graph::Program(_) => None,
            };
            if let Some(what) = foreign {
                return Err(ErrorKind::InvalidInput(format!(
                    "tag {:?} holds {what}, whose declared parameter dtypes cast does not \
                     rewrite: cast the model before importing it",
                    tag.name()
                ))
                .into());
            }
            Some((enc, g))
        }
        None => None,
    };
    // The names of block 0's variables, gathered once (not scanned per parameter).
    let graph_vars: std::collections::HashSet<&str> = graph
        .as_ref()
        .and_then(|(_, g)| g.program())
        .and_then(|p| p.main_block())
        .map(|b| b.vars.iter().map(|v| v.name.as_str()).collect())
        .unwrap_or_default();
    let in_graph = |name: &str| graph_vars.contains(name);
    let mut out = Vec::with_capacity(tag.params().len());
    let mut convs = Vec::new();
    let mut counts = std::collections::HashMap::new();
    // The distinct tensors of the new tag, and per source tensor file (many names may
    // list one) its tensor there, whether it was cast and its counts: each file is read
    // and converted once, whatever the number of names listing it.
    let mut tensors = Vec::new();
    let mut by_entry: std::collections::HashMap<&str, (usize, bool, ValueCounts)> =
        std::collections::HashMap::new();
    for p in tag.params() {
        ticker.tick();
        let (i, cast, c) = match by_entry.get(&*p.location.entry) {
            Some(&done) => done,
            None => {
                #[cfg(test)]
                super::variant::work::note(&super::variant::work::CONVERTED);
                let data = tag.tensor(&p.location)?;
                let view = data.view();
                let done = if view.dtype() != DType::Fp32 {
                    tensors.push(view.to_owned());
                    (tensors.len() - 1, false, ValueCounts::default())
                } else {
                    let located = |e: Error| e.in_entry(p.location.entry.clone());
                    let values = view.to_f32_vec().map_err(located)?;
                    let c = check_values(&p.name, &values, dtype, allow).map_err(located)?;
                    let t = convert(view.dims().to_vec(), &values, dtype)?
                        .with_lod(view.lod().clone())
                        .map_err(located)?;
                    tensors.push(t);
                    (tensors.len() - 1, true, c)
                };
                by_entry.insert(&p.location.entry, done);
                done
            }
        };
        if !cast {
            out.push((p.name.clone(), i, ParamChange::Unchanged));
            continue;
        }
        if c != ValueCounts::default() {
            counts.insert(p.name.clone(), c);
        }
        out.push((p.name.clone(), i, ParamChange::Cast { from: DType::Fp32 }));
        if in_graph(&p.name) {
            convs.push(Conversion {
                param: p.name.clone(),
                stored: dtype,
                scale: None,
            });
        }
    }
    let graph = match graph {
        Some((enc, g)) => Some((enc, converted(tag.name(), enc, g, &convs)?)),
        None => None,
    };
    let mut metadata = user_metadata(meta);
    metadata.insert(
        CAST.into(),
        json!({"dtype": dtype.name(), "source_tag": tag.name()}),
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
