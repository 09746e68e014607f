//! `modelzip quantize`: derive an INT8 tag from a float tag.

use super::output::{clean, human_bytes, print, print_json};
use super::progress::Progress;
use super::{CliError, Outcome};
use modelzip::archive::WriteOptions;
use modelzip::variants::{self, ParamChange, QuantizeOptions, VariantReport};
use serde_json::{Value, json};
use std::path::{Path, PathBuf};

/// Derive an INT8 tag from a float tag and add it to the archive (in place).
///
/// Symmetric linear quantization, one scale per tensor or (--per-channel) per output
/// channel: q = round_half_even(x / scale) saturated to [-127, 127], scale =
/// max|x| / 127. With a graph, the weights of matmul/mul/fc/conv ops are quantized
/// and the graph dequantizes them before use (Paddle runs the result); without one,
/// every float parameter of rank >= 2. Each quantized parameter keeps its name and
/// gets its FP32 scales as <name>@scale. Everything else (biases, norms) is shared
/// with the source tag at no cost. The scheme is recorded in the tag's
/// metadata.json under "quantization".
///
/// Refused (exit 2, nothing written): a source tag that is quantized already (it
/// has a <name>@scale parameter or a "quantization" record) or that has nothing to
/// quantize (e.g. an FP16 tag whose graph reads its weights through cast ops).
///
/// Example:
///   modelzip quantize model.zip --from fp32 --tag int8 --per-channel
#[derive(clap::Args, Debug)]
#[command(verbatim_doc_comment)]
pub struct Args {
    /// The archive.
    archive: PathBuf,
    /// The float tag to quantize (ignoring case).
    #[arg(long = "from", value_name = "TAG")]
    from: String,
    /// Name of the new tag.
    #[arg(long, value_name = "NEW")]
    tag: String,
    /// One scale per output channel instead of one per tensor (recommended: the INT8
    /// error then depends less on how channel ranges differ; docs/VARIANTS.md).
    #[arg(long)]
    per_channel: bool,
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
    let progress = Progress::new(args.quiet || args.json, "quantizing");
    let write = WriteOptions {
        wait_for_lock: args.wait,
        progress: progress.hook(),
        ..WriteOptions::default()
    };
    let options = QuantizeOptions {
        per_channel: args.per_channel,
    };
    let report = variants::quantize(&args.archive, &args.from, &args.tag, &options, &write)
        .map_err(|e| {
            CliError(format!(
                "cannot quantize tag {} of {}: {e}",
                args.from,
                args.archive.display()
            ))
        })?;
    progress.finish();
    render(&args.archive, &report, args.json, args.quiet, "quantized")
}

/// Renders a variant report (shared by `quantize` and `cast`).
pub fn render(
    archive: &Path,
    report: &VariantReport,
    json: bool,
    quiet: bool,
    verb: &str,
) -> Result<Outcome, CliError> {
    if json {
        return print_json(&report_json(archive, report)).map(|_| Outcome::Success);
    }
    if quiet {
        return Ok(Outcome::Success);
    }
    let changed = report.changed().count();
    let shared = report.params.iter().filter(|p| p.shared).count();
    let mut out = format!(
        "added tag {} from {}: {changed} param(s) {verb}, {shared} of {} shared, {} stored\n",
        clean(&report.tag),
        clean(&report.source_tag),
        report.params.len(),
        human_bytes(report.stored_bytes(), false)
    );
    for p in report.changed() {
        let how = match &p.change {
            ParamChange::Quantized {
                axis: Some(a),
                scale,
            } => format!("per channel, axis {a}, scales in {}", clean(scale)),
            ParamChange::Quantized { axis: None, scale } => {
                format!("per tensor, scale in {}", clean(scale))
            }
            ParamChange::Cast { from } => format!("from {}", from.name()),
            _ => String::new(),
        };
        out.push_str(&format!(
            "  {:<32} {:<6} {:<16} {how}\n",
            clean(&p.name),
            p.dtype.name(),
            format!("{:?}", p.dims)
        ));
    }
    print(&out).map(|_| Outcome::Success)
}

/// The JSON document of `quantize --json` and `cast --json` (documented in docs/CLI.md).
fn report_json(archive: &Path, r: &VariantReport) -> Value {
    let params: Vec<Value> = r
        .params
        .iter()
        .map(|p| {
            let mut m = serde_json::Map::new();
            m.insert("name".into(), json!(p.name));
            m.insert("dtype".into(), json!(p.dtype.name()));
            m.insert("dims".into(), json!(p.dims));
            let change = match &p.change {
                ParamChange::Quantized { axis, scale } => {
                    m.insert("axis".into(), json!(axis));
                    m.insert("scale".into(), json!(scale));
                    "quantized"
                }
                ParamChange::Scale { of } => {
                    m.insert("of".into(), json!(of));
                    "scale"
                }
                ParamChange::Cast { from } => {
                    m.insert("from".into(), json!(from.name()));
                    "cast"
                }
                _ => "unchanged",
            };
            m.insert("change".into(), json!(change));
            m.insert("shared".into(), json!(p.shared));
            m.insert("stored_bytes".into(), json!(p.stored_bytes));
            Value::Object(m)
        })
        .collect();
    json!({
        "archive": archive.display().to_string(),
        "tag": r.tag,
        "source_tag": r.source_tag,
        "graph": r.graph.map(|g| g.file_name()),
        "changed": r.changed().count(),
        "shared": r.params.iter().filter(|p| p.shared).count(),
        "stored_bytes": r.stored_bytes(),
        "params": params,
    })
}
