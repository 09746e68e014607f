//! `modelzip import-paddle`: a Paddle inference model or persistables directory as a tag.

use super::common::{
    WriteArgs, is_url, refuse_archive_in_modelless_dir, refuse_directory, refuse_non_archive,
    require_inputs,
};
use super::output::{print, print_json};
use super::{CliError, Outcome};
use modelzip::interop::ImportReport;
use modelzip::interop::paddle;
use std::path::PathBuf;

/// Import a Paddle inference model (MODEL.pdmodel + PARAMS.pdiparams) or a
/// persistables directory (--dir: one LoDTensor file per variable, named after it) as
/// tag T of ARCHIVE, creating the archive if needed. An alias of
/// 'modelzip import --format paddle' (which takes DIR [MODEL] instead of --dir/--model).
///
/// The program is stored as graph.pdmodel, byte for byte. Each persistable variable
/// of block 0 (except feed/fetch) becomes a parameter, in name order; the record
/// count, dtypes and dims must match what the program declares. A Paddle 3 PIR
/// program (MODEL.json, Paddle 3's default) in place of the .pdmodel is kept byte for
/// byte in graph.fb, and its parameters are checked and stored the same way. A directory with a
/// model (--model FILE, or DIR/__model__, or DIR/graph.fb as `extract` writes it,
/// stored as the ProgramDesc it converts to) imports exactly the model's variables;
/// without one, every file in DIR, and no graph; but a DIR holding one PREFIX.pdmodel or
/// PREFIX.json with its PREFIX.pdiparams (what paddle.jit.save(net, "DIR/PREFIX") and
/// save_inference_model write) is that inference model, and a DIR holding programs or
/// .pdiparams any other way is refused, listing them. Tensors equal to ones already in the
/// archive are stored once. Adding to an existing archive appends in place (crash-safe
/// with a rollback journal); --rewrite writes a new file and renames it.
///
/// Example:
///   modelzip import-paddle model.zip --tag fp32 inference.pdmodel inference.pdiparams
///   modelzip import-paddle model.zip --tag p3 inference.json inference.pdiparams
///   modelzip import-paddle model.zip --tag step-100 --dir persistables --model inference.pdmodel
#[derive(clap::Args, Debug)]
#[command(verbatim_doc_comment)]
#[command(mut_arg("json", |a| a.help(r#"Print one JSON document instead of a summary; for an s3:// or az:// ARCHIVE also "version", "previous_version", "bytes_uploaded", "bytes_copied", "bytes_reread", "requests", "stale_uploads_aborted""#)))]
pub struct Args {
    /// The archive to create or add to (a path, or an s3:// or az:// URL: a remote append,
    /// which creates the object when there is none).
    archive: PathBuf,
    /// The program: a Paddle .pdmodel (ProgramDesc), or a Paddle 3 PIR program (.json).
    #[arg(value_name = "MODEL.pdmodel", conflicts_with = "dir")]
    model_file: Option<PathBuf>,
    /// The parameters: a Paddle .pdiparams (save_combine). Leave it out for a program
    /// that loads no parameters (Paddle writes no .pdiparams for one).
    #[arg(value_name = "PARAMS.pdiparams", conflicts_with = "dir")]
    params_file: Option<PathBuf>,
    /// Name of the new tag.
    #[arg(long)]
    tag: String,
    /// A persistables directory instead of a .pdiparams.
    #[arg(long, value_name = "DIR")]
    dir: Option<PathBuf>,
    /// The program of a persistables directory, .pdmodel or PIR .json (default:
    /// DIR/__model__, else DIR/graph.fb, if present; a FILE ending in .fb is read as
    /// graph.fb).
    #[arg(long, value_name = "FILE", requires = "dir")]
    model: Option<PathBuf>,
    /// Add by rewriting the whole archive to a new file and renaming it.
    #[arg(long)]
    rewrite: bool,
    #[command(flatten)]
    meta: super::tag_meta::MetaArgs,
    #[command(flatten)]
    write: WriteArgs,
}

pub fn run(args: Args) -> Result<Outcome, CliError> {
    let progress = args.write.output.progress("importing");
    let opts = modelzip::interop::ImportOptions {
        metadata: args.meta.build()?,
        ..super::import::import_options(args.rewrite, &args.write, &progress)
    };
    let shown = args.archive.display().to_string();
    let fail = |e: modelzip::Error| CliError::Failed(format!("cannot import into {shown}: {e}"));
    // A URL is the library's to check (an s3:// archive gets the tag by a remote append).
    if !is_url(&args.archive) {
        refuse_directory(&args.archive, &format!("cannot import into {shown}"))?;
        refuse_non_archive(&args.archive, &format!("cannot import into {shown}"))?;
    }
    let inputs = [&args.model_file, &args.params_file, &args.dir, &args.model];
    require_inputs(
        inputs.into_iter().flatten().map(PathBuf::as_path),
        &format!("cannot import into {shown}"),
    )?;
    if let Some(m) = args.model_file.as_ref().filter(|m| m.is_dir()) {
        return Err(CliError::Failed(format!(
            "cannot import into {shown}: {} is a directory, not a .pdmodel or .json; import a persistables directory with --dir {0}",
            m.display()
        )));
    }
    if let Some(dir) = &args.dir {
        refuse_archive_in_modelless_dir(
            &args.archive,
            dir,
            args.model.as_deref(),
            &format!("cannot import into {shown}"),
        )?;
    }
    let report = match (&args.dir, &args.model_file, &args.params_file) {
        (Some(dir), None, None) => paddle::import_persistables_dir(
            &args.archive,
            &args.tag,
            dir,
            args.model.as_deref(),
            &opts,
        )
        .map_err(fail)?,
        (None, Some(model), Some(params)) => {
            paddle::import_inference_model_files(&args.archive, &args.tag, model, params, &opts)
                .map_err(fail)?
        }
        (None, Some(model), None) => {
            paddle::import_program(&args.archive, &args.tag, model, &opts).map_err(fail)?
        }
        _ => {
            return Err(CliError::Failed(
                "usage: give MODEL.pdmodel (or MODEL.json) and PARAMS.pdiparams, or --dir DIR (see 'modelzip import-paddle --help')".into(),
            ));
        }
    };
    progress.finish();
    if args.write.output.json {
        return print_json(&report_json(&shown, &report)).map(|_| Outcome::Success);
    }
    if !args.write.output.quiet {
        print(&super::import::summary(&shown, None, &report))?;
    }
    Ok(Outcome::Success)
}

/// import-paddle's own document: `import`'s without `format` and `graph`.
fn report_json(archive: &str, r: &ImportReport) -> serde_json::Value {
    let mut doc = super::import::report_json(archive, "paddle", r);
    if let Some(o) = doc.as_object_mut() {
        o.remove("format");
        o.remove("graph");
    }
    doc
}
