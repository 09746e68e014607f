//! `modelzip cast`: derive an FP16 or BF16 tag from a float tag.

use super::progress::Progress;
use super::{CliError, Outcome};
use modelzip::DType;
use modelzip::archive::WriteOptions;
use modelzip::variants;
use std::path::PathBuf;

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
/// Refused (exit 2, nothing written): a quantized source tag (its <name>@scale
/// parameters would be cast and its quantization record dropped) and a source tag
/// with no FP32 parameter (e.g. an FP16 tag: cast its FP32 source instead).
///
/// Example:
///   modelzip cast model.zip --from fp32 --tag fp16 --dtype fp16
#[derive(clap::Args, Debug)]
#[command(verbatim_doc_comment)]
pub struct Args {
    /// The archive.
    archive: PathBuf,
    /// The tag to cast (ignoring case).
    #[arg(long = "from", value_name = "TAG")]
    from: String,
    /// Name of the new tag.
    #[arg(long, value_name = "NEW")]
    tag: String,
    /// The dtype of the new tag's float parameters.
    #[arg(long, value_enum, ignore_case = true)]
    dtype: CastDType,
    /// Wait for another writer to finish instead of failing.
    #[arg(long)]
    wait: bool,
    /// Print one JSON document describing the new tag.
    #[arg(long)]
    json: bool,
    /// Print nothing on success (and no progress bar).
    #[arg(short, long, conflicts_with = "json")]
    quiet: bool,
}

pub fn run(args: Args) -> Result<Outcome, CliError> {
    let progress = Progress::new(args.quiet || args.json, "casting");
    let write = WriteOptions {
        wait_for_lock: args.wait,
        progress: progress.hook(),
        ..WriteOptions::default()
    };
    let dtype = match args.dtype {
        CastDType::Fp16 => DType::Fp16,
        CastDType::Bf16 => DType::Bf16,
    };
    let report =
        variants::cast(&args.archive, &args.from, &args.tag, dtype, &write).map_err(|e| {
            CliError(format!(
                "cannot cast tag {} of {}: {e}",
                args.from,
                args.archive.display()
            ))
        })?;
    progress.finish();
    super::quantize::render(&args.archive, &report, args.json, args.quiet, "cast")
}
