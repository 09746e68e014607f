//! Derived variants of a tag: INT8 quantization and FP16/BF16 casts, and tag diffs.
//!
//! [`quantize`] and [`cast`] read a float tag, derive new tensors, rewrite the graph so
//! that it converts the stored values back to FP32 before use (Paddle runs the result
//! unchanged; an ONNX model gets DequantizeLinear nodes that ONNX Runtime runs), and append the variant as a new tag in place. Parameters the variant does
//! not change are written as they are, so the archive writer's dedup turns them into
//! references to the source tag's files: they cost no bytes. [`diff_tags`] compares two
//! tags parameter by parameter.
//!
//! ```no_run
//! use modelzip::variants::{QuantizeOptions, quantize, cast};
//! use modelzip::{DType, WriteOptions};
//!
//! let opts = WriteOptions::default();
//! let int8 = quantize("model.zip", "fp32", "int8",
//!                     &QuantizeOptions { per_channel: true }, &opts)?;
//! println!("{} params quantized", int8.changed().count());
//! cast("model.zip", "fp32", "fp16", DType::Fp16, &opts)?;
//! # Ok::<(), modelzip::Error>(())
//! ```

mod cast;
mod diff;
mod onnx;
mod quantize;
pub mod quantize_math;
mod rewrite;
mod variant;

pub use cast::cast;
pub use diff::{GraphChange, ParamDiff, TagComparison, TagDiff, compare_tags, diff_tags};
pub use quantize::{QuantizeOptions, quantize};
pub use variant::{ParamChange, VariantParam, VariantReport};

/// Why `tag` is an INT8 variant, if it is (a `<name>@scale` parameter beside `<name>`, or
/// a quantization record), with what to export instead: for exports whose format has
/// no place for the scales.
pub(crate) fn quantized_variant(tag: &crate::archive::Tag<'_>) -> crate::Result<Option<String>> {
    let meta = variant::source_metadata(tag)?;
    Ok(variant::quantized_because(tag, &meta).map(|why| {
        format!(
            "{why}: it is an INT8 variant, and the export would write the INT8 values as \
             the weights, which no loader dequantizes; export {} instead",
            variant::derive_instead(&meta, variant::QUANTIZATION)
        )
    }))
}
