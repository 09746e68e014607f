//! `modelzip export-paddle`: a tag as PREFIX.pdmodel + PREFIX.pdiparams.

use super::common::{OutputArgs, TagArgs};
use super::export::ExportLimits;
use super::output::{print, print_json};
use super::{CliError, Outcome};
use modelzip::interop::paddle;
use serde_json::json;
use std::path::PathBuf;

/// Export a tag as a Paddle inference model: PREFIX.pdmodel (the tag's graph.pdmodel,
/// or its graph.fb converted to ProgramDesc) and PREFIX.pdiparams (the parameters of
/// the program's persistable variables in name order, as save_combine writes them),
/// which paddle.static.load_inference_model(PREFIX, exe) loads. A tag imported from
/// Paddle comes out byte for byte. A tag imported from a Paddle 3 PIR program (.json)
/// is written as PREFIX.json (the JSON as Paddle wrote it) + PREFIX.pdiparams, which
/// paddle.jit.load(PREFIX) loads. An alias of 'modelzip export --format paddle'.
/// Both files are written to temp files and renamed into place; existing files are
/// refused unless --force.
///
/// Example:
///   modelzip export-paddle model.zip --tag fp32 --out export/inference
///   modelzip export-paddle model.zip --out inference --force --json
#[derive(clap::Args, Debug)]
#[command(verbatim_doc_comment)]
pub struct Args {
    #[command(flatten)]
    input: TagArgs,
    /// Output prefix: writes PREFIX.pdmodel (PREFIX.json for a PIR program) and
    /// PREFIX.pdiparams.
    #[arg(long, value_name = "PREFIX")]
    out: PathBuf,
    #[command(flatten)]
    limits: ExportLimits,
    #[command(flatten)]
    output: OutputArgs,
}

pub fn run(args: Args) -> Result<Outcome, CliError> {
    let archive = args.input.open()?;
    let tag = args.input.pick(&archive)?;
    if !args.limits.force {
        let (m, p) = paddle::export_paths(&args.out);
        for path in [m, p] {
            if path.exists() {
                return Err(CliError::Failed(format!(
                    "cannot export: {} already exists (pass --force to replace it)",
                    path.display()
                )));
            }
        }
    }
    let r =
        paddle::export_inference_model(&tag, &args.out, &args.limits.options()).map_err(|e| {
            CliError::Failed(format!(
                "cannot export tag {:?} of {}: {e}",
                tag.name(),
                args.input.archive.display()
            ))
        })?;
    if args.output.json {
        return print_json(&json!({
            "tag": r.tag,
            "pdmodel": r.model_path.display().to_string(),
            "pdiparams": r.params_path.as_ref().map(|p| p.display().to_string()),
            "pdmodel_bytes": r.model_bytes,
            "pdiparams_bytes": r.params_bytes,
            "graph_converted": r.graph_converted,
            "params": r.params,
            "unused_params": r.unused,
        }))
        .map(|_| Outcome::Success);
    }
    if !args.output.quiet {
        let params = match &r.params_path {
            Some(p) => format!(
                "{} ({} bytes, {} param(s))",
                p.display(),
                r.params_bytes,
                r.params.len()
            ),
            None => "no .pdiparams (the program loads no parameters)".to_string(),
        };
        let mut out = format!(
            "tag {}: {} ({} bytes{}), {params}\n",
            r.tag,
            r.model_path.display(),
            r.model_bytes,
            if r.graph_converted {
                ", converted from graph.fb"
            } else {
                ""
            },
        );
        out.push_str(&super::export::not_exported(&r.unused, "program"));
        print(&out)?;
    }
    Ok(Outcome::Success)
}
