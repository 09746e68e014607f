//! `modelzip export-paddle`: a tag as PREFIX.pdmodel + PREFIX.pdiparams.

use super::common::{OutputArgs, TagArgs};
use super::export::ExportLimits;
use super::output::{print, print_json};
use super::{CliError, Outcome};
use modelzip::interop;
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
#[command(mut_arg("quiet", |a| a.help("Print nothing on success")))]
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
    // What the format writes for `--out model.pdmodel` (or .pdiparams, .json): the
    // prefix `model`, as `export --format paddle` does.
    let prefix = match args.out.extension().and_then(|e| e.to_str()) {
        Some("pdmodel" | "pdiparams" | "json") => args.out.with_extension(""),
        _ => args.out.clone(),
    };
    // The library refuses an existing file before it writes anything (`PREFIX.json`
    // rather than `PREFIX.pdmodel` for a PIR program): the hint is the CLI's.
    let failed = |e: modelzip::Error| {
        let hint = match e.kind() {
            modelzip::ErrorKind::Io(io) if io.kind() == std::io::ErrorKind::AlreadyExists => {
                " (pass --force to replace it)"
            }
            _ => "",
        };
        CliError::Failed(format!(
            "cannot export tag {:?} of {}: {e}{hint}",
            tag.name(),
            args.input.archive.display()
        ))
    };
    let r = interop::format("paddle")
        .and_then(|f| f.export(&tag, &prefix, &args.limits.options()))
        .map_err(failed)?;
    // The program first, then the parameters when the program loads any.
    let (model_path, model_bytes) = r.files.first().cloned().unwrap_or_default();
    let params_file = r.files.get(1).cloned();
    if args.output.json {
        return print_json(&json!({
            "tag": r.tag,
            "pdmodel": model_path.display().to_string(),
            "pdiparams": params_file.as_ref().map(|(p, _)| p.display().to_string()),
            "pdmodel_bytes": model_bytes,
            "pdiparams_bytes": params_file.as_ref().map_or(0, |(_, n)| *n),
            "graph_converted": r.graph_converted,
            "params": r.params,
            "unused_params": r.unused,
        }))
        .map(|_| Outcome::Success);
    }
    if !args.output.quiet {
        let params = match &params_file {
            Some((p, n)) => format!("{} ({n} bytes, {} param(s))", p.display(), r.params.len()),
            None => "no .pdiparams (the program loads no parameters)".to_string(),
        };
        let mut out = format!(
            "tag {}: {} ({} bytes{}), {params}\n",
            r.tag,
            model_path.display(),
            model_bytes,
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
