//! `modelzip quantize`: derive an INT8 tag from a float tag.

use super::common::{WriteArgs, is_url, require_archive};
use super::output::{clean, human_bytes, print, print_json};
use super::{CliError, Outcome};
use modelzip::variants::{self, AllowValues, ParamChange, QuantizeOptions, VariantReport};
use modelzip::{ErrorKind, WriteOptions};
use serde_json::{Value, json};
use std::path::{Path, PathBuf};

/// Derive an INT8 tag from a float tag and add it to the archive (in place).
///
/// Symmetric linear quantization, one scale per tensor or (--per-channel) per output
/// channel: q = round_half_even(x / scale) saturated to [-127, 127], scale =
/// max|x| / 127. With a Paddle graph, the weights of matmul/mul/fc/conv ops are
/// quantized and the graph dequantizes them before use (Paddle runs the result).
/// With an ONNX model (a tag imported from .onnx), the weights of the main graph's
/// MatMul/Gemm/Conv nodes are quantized and the model gets a DequantizeLinear node
/// per weight (`modelzip export` writes it, ONNX Runtime runs it; per channel needs
/// opset 13, raised from 11/12 only when safe; docs/ONNX.md). Without a graph,
/// every float parameter of rank >= 2. Each quantized parameter keeps its name and
/// gets its FP32 scales as <name>@scale. Everything else (biases, norms) is shared
/// with the source tag at no cost. The scheme is recorded in the tag's
/// metadata.json under "quantization".
///
/// Values no INT8 step represents are refused (exit 2, nothing written): NaN or
/// ±inf in a weight to quantize; the error names the parameter, how many there
/// are and the first's index. --allow-non-finite quantizes them to 0 (left out of
/// the scale) and reports the count per parameter (text and --json).
///
/// Refused (exit 2, nothing written): a source tag that is quantized already (it
/// has a <name>@scale parameter or a "quantization" record), a cast variant (a
/// "cast" record: quantize its source tag), a tag that has nothing to quantize
/// (e.g. an FP16 tag whose graph reads its weights through cast ops), and
/// an ONNX model whose opset is too old for DequantizeLinear.
///
/// Example:
///   modelzip quantize model.zip --from fp32 --tag int8 --per-channel
#[derive(clap::Args, Debug)]
#[command(verbatim_doc_comment)]
pub struct Args {
    #[command(flatten)]
    variant: VariantArgs,
    /// One scale per output channel instead of one per tensor (recommended: the INT8
    /// error then depends less on how channel ranges differ; docs/VARIANTS.md). A
    /// weight whose ops disagree on its channel axis is quantized per tensor, and its
    /// line (and --json's "per_tensor_reason") says why.
    #[arg(long)]
    per_channel: bool,
    /// Quantize NaN and +-inf in a weight to 0 (left out of its scale) instead of
    /// refusing them; the report counts them per parameter.
    #[arg(long)]
    allow_non_finite: bool,
}

/// The arguments of a command that derives a new tag from one in the archive
/// (`quantize`, `cast`): `ARCHIVE --from TAG --tag NEW` and the write switches.
#[derive(clap::Args, Debug)]
#[command(mut_arg("json", |a| a.help(r#"Print one JSON document describing the new tag; for an s3:// or az:// ARCHIVE also "version", "previous_version", "bytes_uploaded", "bytes_copied", "bytes_reread", "requests", "stale_uploads_aborted""#)))]
pub struct VariantArgs {
    /// The archive (a path, or an s3:// or az:// URL: the new tag is a remote append).
    archive: PathBuf,
    /// The tag to derive the new tag from (ignoring case).
    #[arg(long = "from", value_name = "TAG")]
    from: String,
    /// Name of the new tag.
    #[arg(long, value_name = "NEW")]
    tag: String,
    #[command(flatten)]
    write: WriteArgs,
}

impl VariantArgs {
    /// Runs `make(archive, from, new tag, write options)` behind a progress bar labelled
    /// `label`, then prints its report; `command` names it in an error, `verb` says what
    /// was done to the changed parameters ("quantized", "cast").
    pub fn run(
        &self,
        command: &str,
        label: &str,
        verb: &str,
        make: impl FnOnce(&Path, &str, &str, &WriteOptions) -> modelzip::Result<VariantReport>,
    ) -> Result<Outcome, CliError> {
        // A directory is said to be one (the OS's answer was "No such device"); a URL is
        // the library's (an s3:// archive gets the tag by a remote append).
        if !is_url(&self.archive) {
            require_archive(
                &self.archive,
                &format!(
                    "cannot {command} tag {} of {}",
                    self.from,
                    self.archive.display()
                ),
            )?;
        }
        let progress = self.write.output.progress(label);
        let write = self.write.options_reporting(&progress);
        let report = make(&self.archive, &self.from, &self.tag, &write).map_err(|e| {
            let hint = match e.kind() {
                ErrorKind::UnrepresentableValues { allow, .. } => format!(
                    "; pass --allow-{} to {command} anyway",
                    allow.replace('_', "-")
                ),
                _ => String::new(),
            };
            CliError::Failed(format!(
                "cannot {command} tag {} of {}: {e}{hint}",
                self.from,
                self.archive.display()
            ))
        })?;
        progress.finish();
        let output = &self.write.output;
        render(&self.archive, &report, output.json, output.quiet, verb)
    }
}

pub fn run(args: Args) -> Result<Outcome, CliError> {
    let options = QuantizeOptions {
        per_channel: args.per_channel,
    };
    let allow = AllowValues {
        non_finite: args.allow_non_finite,
        overflow: false,
    };
    args.variant.run(
        "quantize",
        "quantizing",
        "quantized",
        |archive, from, tag, write| variants::quantize(archive, from, tag, &options, &allow, write),
    )
}

/// Renders a variant report (shared by `quantize` and `cast`).
fn render(
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
        "added tag {} from {}: {changed} param(s) {verb}, {shared} of {} shared, {} stored{}\n",
        clean(&report.tag),
        clean(&report.source_tag),
        report.params.len(),
        human_bytes(report.stored_bytes(), false),
        super::common::remote_cost(report.remote.as_ref()),
    );
    for p in report.changed() {
        let how = match &p.change {
            ParamChange::Quantized {
                axis: Some(a),
                scale,
                ..
            } => format!("per channel, axis {a}, scales in {}", clean(scale)),
            ParamChange::Quantized {
                axis: None,
                scale,
                per_tensor_reason,
            } => {
                let mut s = format!("per tensor, scale in {}", clean(scale));
                // --per-channel asked, and this one could not be: say why.
                if let Some(why) = per_tensor_reason {
                    s.push_str(&format!("; not per channel: {}", clean(why)));
                }
                s
            }
            ParamChange::Cast { from } => format!("from {}", from.name()),
            _ => String::new(),
        };
        out.push_str(&format!(
            "  {:<32} {:<6} {:<16} {how}{}\n",
            clean(&p.name),
            p.dtype.name(),
            format!("{:?}", p.dims),
            value_notes(p)
        ));
    }
    print(&out).map(|_| Outcome::Success)
}

/// What the report counts of a parameter's values (allowed NaN/inf, overflow, values
/// flushed to zero), as `; ...` notes; empty when there is nothing to say.
fn value_notes(p: &variants::VariantParam) -> String {
    let mut s = String::new();
    if p.non_finite > 0 {
        s.push_str(&format!("; {} NaN/inf value(s) allowed", p.non_finite));
    }
    if p.overflowed > 0 {
        s.push_str(&format!(
            "; {} value(s) beyond range stored as +-inf",
            p.overflowed
        ));
    }
    if p.underflowed > 0 {
        s.push_str(&format!("; {} nonzero value(s) became 0", p.underflowed));
    }
    s
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
                ParamChange::Quantized {
                    axis,
                    scale,
                    per_tensor_reason,
                } => {
                    m.insert("axis".into(), json!(axis));
                    m.insert("scale".into(), json!(scale));
                    m.insert("per_tensor_reason".into(), json!(per_tensor_reason));
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
            m.insert("non_finite".into(), json!(p.non_finite));
            m.insert("overflowed".into(), json!(p.overflowed));
            m.insert("underflowed".into(), json!(p.underflowed));
            Value::Object(m)
        })
        .collect();
    let doc = json!({
        "archive": archive.display().to_string(),
        "tag": r.tag,
        "source_tag": r.source_tag,
        "graph": r.graph.map(|g| g.file_name()),
        "changed": r.changed().count(),
        "shared": r.params.iter().filter(|p| p.shared).count(),
        "stored_bytes": r.stored_bytes(),
        "params": params,
    });
    super::common::with_remote(doc, r.remote.as_ref())
}
