//! `modelzip import`: a model file of any registered format as a new tag.

use super::common::{
    WriteArgs, is_url, refuse_archive_in_modelless_dir, refuse_directory, refuse_non_archive,
    require_inputs,
};
use super::output::{print, print_json};
use super::progress::Progress;
use super::{CliError, Outcome};
use modelzip::AppendMode;
use modelzip::interop::{self, ImportOptions, ImportReport};
use serde_json::json;
use std::path::PathBuf;

/// Import a model as tag T of ARCHIVE, creating the archive if needed.
///
/// The format is detected from the files' names, then from the first file's content
/// (--format forces it):
///   paddle  MODEL.pdmodel [PARAMS.pdiparams] (or the two the other way round), Paddle
///           3's default MODEL.json (a PIR program) [PARAMS.pdiparams], a
///           persistables DIR [MODEL], or a DIR holding one PREFIX.pdmodel or
///           PREFIX.json with its PREFIX.pdiparams (what paddle.jit.save(net, "DIR/PREFIX")
///           and save_inference_model write), imported as those two files
///   tf      a frozen TensorFlow GraphDef: MODEL.pb (binary) or MODEL.pbtxt (text),
///           or a SavedModel directory (DIR holding saved_model.pb and variables/)
///   safetensors  FILE.safetensors [MORE.safetensors], a model.safetensors.index.json,
///           or a DIR holding either (a sharded checkpoint)
///   onnx    MODEL.onnx (external data is read from files beside it)
/// A file of no known format is refused, saying what was tried.
///
/// Paddle: the program is stored as graph.pdmodel, byte for byte (a PIR program: in
/// graph.fb, byte for byte), and each persistable variable becomes a parameter (see
/// 'modelzip import-paddle --help', the same import).
/// TensorFlow: every numeric Const node's value becomes a parameter named after the
/// node; the rest of the graph (string constants, attributes, control inputs, devices,
/// the function library, versions) is kept in graph.fb, so export gives the same
/// GraphDef back. A SavedModel: every numeric checkpoint variable becomes a parameter
/// named by its key (w/.ATTRIBUTES/VARIABLE_VALUE); saved_model.pb, fingerprint.pb,
/// the checkpoint's index and object graph and assets/ are kept under saved_model/ in
/// the tag, so export writes the directory back (docs/TENSORFLOW.md).
/// safetensors: every tensor becomes a parameter of the same name, its bytes as they are;
/// __metadata__ is kept in metadata.json (docs/SAFETENSORS.md).
/// --step, --metric and --metadata store the tag's metadata.json as `pack` does (a
/// checkpoint, as the library's Checkpointer stores one); safetensors' key is added.
/// ONNX: every top-level initializer becomes a parameter named by the initializer; the
/// rest of the model (nodes, inputs, outputs, opsets, functions, subgraphs with their
/// own initializers, metadata) is kept in graph.fb, so export gives the same ModelProto
/// back (docs/ONNX.md).
///
/// Tensors equal to ones already in the archive are stored once. Adding to an
/// existing archive appends in place (crash-safe with a rollback journal); --rewrite
/// writes a new file and renames it.
///
/// Example:
///   modelzip import model.zip --tag fp32 inference.pdmodel inference.pdiparams
///   modelzip import model.zip --tag step-100 persistables/ inference.pdmodel
///   modelzip import model.zip --tag p3 saved/            (saved/model.json + .pdiparams)
///   modelzip import model.zip --tag v1 frozen_graph.pb
///   modelzip import model.zip --tag v2 graph.txt --format tf
///   modelzip import model.zip --tag sm saved_model_dir/
///   modelzip import model.zip --tag hf model.safetensors.index.json
///   modelzip import model.zip --tag v3 model.onnx
///   modelzip import ck.zip --tag step-500 model.onnx --step 500 --metric loss=0.42
#[derive(clap::Args, Debug)]
#[command(verbatim_doc_comment)]
#[command(mut_arg("json", |a| a.help(r#"Print one JSON document instead of a summary; for an s3:// or az:// ARCHIVE also "version", "previous_version", "bytes_uploaded", "bytes_copied", "bytes_reread", "requests", "stale_uploads_aborted""#)))]
pub struct Args {
    /// The archive to create or add to (a path, or an s3:// or az:// URL: a remote append,
    /// which creates the object when there is none).
    archive: PathBuf,
    /// The model file(s) or directory.
    #[arg(value_name = "FILE", required = true, num_args = 1..)]
    inputs: Vec<PathBuf>,
    /// Name of the new tag.
    #[arg(long)]
    tag: String,
    /// The format of the input, instead of detecting it.
    #[arg(long, value_name = "paddle|tf|safetensors|onnx")]
    format: Option<String>,
    /// Add by rewriting the whole archive to a new file and renaming it.
    #[arg(long)]
    rewrite: bool,
    #[command(flatten)]
    meta: super::tag_meta::MetaArgs,
    #[command(flatten)]
    write: WriteArgs,
}

/// The options of an import: in place, or by rewrite with `--rewrite`; the write
/// switches; progress reported to `progress`.
pub(super) fn import_options(
    rewrite: bool,
    write: &WriteArgs,
    progress: &Progress,
) -> ImportOptions {
    ImportOptions {
        mode: if rewrite {
            AppendMode::Rewrite
        } else {
            AppendMode::InPlace
        },
        write: write.options_reporting(progress),
        metadata: None,
    }
}

pub fn run(args: Args) -> Result<Outcome, CliError> {
    let shown = args.archive.display().to_string();
    // A URL is the library's to check (an s3:// archive gets the tag by a remote append).
    if !is_url(&args.archive) {
        refuse_directory(&args.archive, &format!("cannot import into {shown}"))?;
        refuse_non_archive(&args.archive, &format!("cannot import into {shown}"))?;
    }
    require_inputs(
        args.inputs.iter().map(PathBuf::as_path),
        &format!("cannot import into {shown}"),
    )?;
    let fail = |e: modelzip::Error| CliError::Failed(format!("cannot import into {shown}: {e}"));
    let metadata = args.meta.build()?;
    let format = match &args.format {
        Some(name) => interop::format(name).map_err(fail)?,
        None => interop::detect(&args.inputs).map_err(fail)?,
    };
    if let ([dir], "paddle") = (args.inputs.as_slice(), format.name()) {
        refuse_archive_in_modelless_dir(
            &args.archive,
            dir,
            None,
            &format!("cannot import into {shown}"),
        )?;
    }
    let progress = args.write.output.progress("importing");
    let opts = ImportOptions {
        metadata,
        ..import_options(args.rewrite, &args.write, &progress)
    };
    let report = format
        .import(&args.archive, &args.tag, &args.inputs, &opts)
        .map_err(fail)?;
    progress.finish();
    if args.write.output.json {
        return print_json(&report_json(&shown, format.name(), &report)).map(|_| Outcome::Success);
    }
    if !args.write.output.quiet {
        print(&summary(&shown, Some(format.name()), &report))?;
    }
    Ok(Outcome::Success)
}

/// The one-line human summary of an import (`from FORMAT` when a format is given).
pub fn summary(archive: &str, format: Option<&str>, report: &ImportReport) -> String {
    let shared = report
        .params
        .iter()
        .filter(|p| p.shared_from.is_some())
        .count();
    let graph = match (&report.graph_entry, report.graph_bytes) {
        (Some(entry), Some(n)) => format!("{entry} ({n} bytes), "),
        _ => "no graph, ".to_string(),
    };
    let from = format.map(|f| format!(" from {f}")).unwrap_or_default();
    format!(
        "{} tag {} in {archive}{from}: {graph}{} param(s), {shared} shared with older tags{}\n",
        if report.created {
            "created archive with"
        } else {
            "added"
        },
        report.tag,
        report.params.len(),
        super::common::remote_cost(report.remote.as_ref()),
    )
}

/// The JSON document of an import (`format` is null for import-paddle's own output).
pub fn report_json(archive: &str, format: &str, r: &ImportReport) -> serde_json::Value {
    let params: Vec<_> = r
        .params
        .iter()
        .map(|p| {
            json!({
                "name": p.name,
                "dtype": p.dtype.name(),
                "dims": p.dims,
                "shared_from": p.shared_from,
            })
        })
        .collect();
    let doc = json!({
        "archive": archive,
        "format": format,
        "tag": r.tag,
        "created": r.created,
        "graph": r.graph_entry,
        "graph_bytes": r.graph_bytes,
        "params": params,
    });
    super::common::with_remote(doc, r.remote.as_ref())
}
