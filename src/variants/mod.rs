//! Derived variants of a tag: INT8 quantization and FP16/BF16 casts, and tag diffs.
//!
//! [`quantize`] and [`cast`] read a float tag, derive new tensors, rewrite the graph so
//! that it converts the stored values back to FP32 before use (Paddle runs the result
//! unchanged; an ONNX model gets DequantizeLinear nodes that ONNX Runtime runs), and append the variant as a new tag in place. Parameters the variant does
//! not change are written as they are, so the archive writer's dedup turns them into
//! references to the source tag's files: they cost no bytes. [`compare_tags`] compares two
//! tags parameter by parameter.
//!
//! ```no_run
//! use modelzip::variants::{AllowValues, QuantizeOptions, quantize, cast};
//! use modelzip::{DType, WriteOptions};
//!
//! let opts = WriteOptions::default();
//! let refuse = AllowValues::default(); // NaN, ±inf and overflow refused
//! let int8 = quantize("model.zip", "fp32", "int8",
//!                     &QuantizeOptions { per_channel: true }, &refuse, &opts)?;
//! println!("{} params quantized", int8.changed().count());
//! cast("model.zip", "fp32", "fp16", DType::Fp16, &refuse, &opts)?;
//! # Ok::<(), modelzip::Error>(())
//! ```

mod cast;
mod diff;
mod quantize;
internal_mod!(quantize_math);
mod rewrite;
mod variant;

pub use cast::cast;
pub use diff::{GraphChange, ParamDiff, TagComparison, compare_tags};
internal! {
    /// The whole comparison at once (the crate's tests; users iterate a [`TagComparison`]).
    pub use diff::{TagDiff, diff_tags};
}
pub use quantize::{QuantizeOptions, quantize};
pub use variant::{AllowValues, ParamChange, VariantParam, VariantReport};

/// Why `tag` is an INT8 variant `modelzip quantize` made (its metadata.json has a
/// quantization record), with what to export instead: for exports whose format has no
/// place for the scales. Parameter names alone (`w` beside `w@scale`) do not make one:
/// an imported checkpoint may use such names.
pub(crate) fn quantized_variant(tag: &crate::archive::Tag<'_>) -> crate::Result<Option<String>> {
    let meta = variant::source_metadata(tag)?;
    let Some(record) = meta.get(variant::QUANTIZATION) else {
        return Ok(None);
    };
    let scales = record
        .get("params")
        .and_then(serde_json::Value::as_object)
        .and_then(|m| m.iter().next())
        .map(|(w, r)| {
            let scale = r
                .get("scale")
                .and_then(serde_json::Value::as_str)
                .unwrap_or("?");
            format!(" (parameter {w:?} holds INT8 values, its scales are in {scale:?})")
        })
        .unwrap_or_default();
    Ok(Some(format!(
        "is an INT8 variant{scales}, and the export would write the INT8 values as the \
         weights, which no loader dequantizes; export {} instead",
        variant::derive_instead(&meta, variant::QUANTIZATION)
    )))
}
