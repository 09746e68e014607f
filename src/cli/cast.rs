//! `modelzip cast`: derive an FP16 or BF16 tag from a float tag.

use super::quantize::VariantArgs;
use super::{CliError, Outcome};
use modelzip::DType;
use modelzip::variants;

/// The dtypes a cast variant can have.
#[derive(clap::ValueEnum, Clone, Copy, Debug)]
pub enum CastDType {
    /// IEEE half precision.
    Fp16,
    /// bfloat16.
    Bf16,
}

/// Derive an FP16 or BF16 tag from a float tag and add it to the archive (in place).
///
/// Every FP32 parameter is rounded to the target dtype (to nearest, ties to even);
/// other parameters are shared with the source tag at no cost. With a graph, each
/// cast parameter is cast back to FP32 by an inserted `cast` op before use, so the
/// model still computes in FP32 and Paddle runs it. metadata.json records
/// "cast": {"dtype", "source_tag"}.
///
/// Values the dtype cannot carry are refused (exit 2, nothing written): NaN or
/// +-inf, and finite values beyond its range (|x| >= 65520 for FP16, which rounding
/// makes +-inf); the error names the parameter, how many there are and the first's
/// index. --allow-non-finite keeps NaN/inf as they are, --allow-overflow stores
/// out-of-range values as +-inf; the report counts them per parameter, and the
/// nonzero values that became 0 (text and --json).
///
/// Refused (exit 2, nothing written): a quantized source tag (its <name>@scale
/// parameters would be cast and its quantization record dropped), a source tag
/// with no FP32 parameter (e.g. an FP16 tag: cast its FP32 source instead), a tag
/// imported from ONNX or a TensorFlow GraphDef (its model declares the parameters'
/// dtypes, which cast does not rewrite), and a Paddle 3 PIR tag. A SavedModel tag is
/// cast as parameters only: the new tag keeps none of the SavedModel's files and
/// exports as safetensors, not as a SavedModel.
///
/// Example:
///   modelzip cast model.zip --from fp32 --tag fp16 --dtype fp16
#[derive(clap::Args, Debug)]
#[command(verbatim_doc_comment)]
pub struct Args {
    #[command(flatten)]
    variant: VariantArgs,
    /// The dtype of the new tag's float parameters.
    #[arg(long, value_enum, ignore_case = true)]
    dtype: CastDType,
    /// Keep NaN and +-inf (as NaN and +-inf) instead of refusing them.
    #[arg(long)]
    allow_non_finite: bool,
    /// Store finite values beyond the dtype's range as +-inf instead of refusing them.
    #[arg(long)]
    allow_overflow: bool,
}

pub fn run(args: Args) -> Result<Outcome, CliError> {
    let dtype = match args.dtype {
        CastDType::Fp16 => DType::Fp16,
        CastDType::Bf16 => DType::Bf16,
    };
    let allow = variants::AllowValues {
        non_finite: args.allow_non_finite,
        overflow: args.allow_overflow,
    };
    args.variant
        .run("cast", "casting", "cast", |archive, from, tag, write| {
            variants::cast(archive, from, tag, dtype, &allow, write)
        })
}
