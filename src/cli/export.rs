//! `modelzip export`: a tag as model files of any registered format.

use super::common::{OutputArgs, TagArgs};
use super::output::{clean, print, print_json};
use super::{CliError, Outcome};
use modelzip::interop::{self, ExportOptions};
use serde_json::json;
use std::path::PathBuf;

/// Export a tag as model files of a format (default: the format the tag came from).
///
///   paddle  PATH is a prefix: writes PATH.pdmodel and PATH.pdiparams (a PATH ending in
///           .pdmodel, .json or .pdiparams is taken as its prefix; a directory such as
///           out/ is refused, it is no prefix), which paddle.static.load_inference_model
///           loads; a tag imported from Paddle comes out byte for byte; a tag imported
///           from a Paddle 3 PIR program writes PATH.json (as Paddle wrote it) instead
///           of PATH.pdmodel
///   tf      writes a frozen GraphDef: text format when PATH ends in .pbtxt, binary
///           otherwise; a tag imported from TensorFlow comes out as the same message;
///           a tag imported from a SavedModel is written as a SavedModel directory at
///           PATH (saved_model.pb, fingerprint.pb and assets as imported, the variables
///           in one checkpoint shard); a cast or quantized copy of one is refused
///   safetensors  PATH is a file, or an existing directory for a sharded checkpoint's
///           shards and index: the shards the tag was imported from, else shards of
///           at most 5 GB of tensor data (SIZE with --max-shard-size), cut as
///           transformers cuts them; a tag imported from safetensors comes out byte for
///           byte; an INT8 variant is refused (the file has no place for its scales)
///   onnx    writes a .onnx ModelProto; a tag imported from ONNX comes out as the same
///           message, external data included: the initializers that were in external
///           files go back to the same file names beside PATH at the same offsets (a
///           location in a subdirectory needs that directory); with --external-data
///           every initializer goes to PATH.data instead, at 64-byte aligned offsets
///
/// A tag of another origin is refused (a Paddle program is not a TensorFlow graph and
/// vice versa). Files are written to temp files and renamed into place; existing files
/// are refused unless --force.
///
/// Example:
///   modelzip export model.zip --tag fp32 --out export/inference
///   modelzip export model.zip --tag v1 --format tf --out frozen.pb
///   modelzip export model.zip --tag v1 --out frozen.pbtxt --force --json
///   modelzip export model.zip --tag sm --out exported_saved_model
///   modelzip export model.zip --tag hf --format safetensors --out model.safetensors
///   modelzip export model.zip --tag hf --format safetensors --out shards/ --max-shard-size 2G
///   modelzip export model.zip --tag v2 --out model.onnx --external-data
#[derive(clap::Args, Debug)]
#[command(verbatim_doc_comment)]
#[command(mut_arg("quiet", |a| a.help("Print nothing on success")))]
pub struct Args {
    #[command(flatten)]
    input: TagArgs,
    /// The format to write; default: the one the tag was imported from.
    #[arg(long, value_name = "paddle|tf|safetensors|onnx")]
    format: Option<String>,
    /// Where to write: a prefix for paddle; a file for tf (a directory for a SavedModel
    /// tag) and onnx; a file or an existing directory for safetensors (above).
    #[arg(long, value_name = "PATH")]
    out: PathBuf,
    #[command(flatten)]
    limits: ExportLimits,
    /// onnx only: write every initializer to PATH.data beside the model (instead of
    /// inline, or the external files a model imported with external data named).
    #[arg(long)]
    external_data: bool,
    /// safetensors only: write a sharded checkpoint into the existing directory PATH,
    /// at most SIZE bytes of tensor data a shard (a tensor larger than that gets a shard
    /// of its own; K, M, G or T suffix, powers of 1024).
    #[arg(
        long,
        value_name = "SIZE",
        value_parser = super::extract::parse_size,
        allow_negative_numbers = true
    )]
    max_shard_size: Option<u64>,
    #[command(flatten)]
    output: OutputArgs,
}

/// The switches of every export: `--force` and `--max-output`.
#[derive(clap::Args, Debug)]
pub struct ExportLimits {
    /// Replace existing files (never the archive being read).
    #[arg(long)]
    pub force: bool,
    /// Refuse to write more than SIZE bytes in all (bytes, or with a K, M, G or T
    /// suffix, powers of 1024). Default: 16 GiB or 100 times the archive's size,
    /// whichever is larger. Checked before anything is written.
    #[arg(
        long,
        value_name = "SIZE",
        value_parser = super::extract::parse_size,
        allow_negative_numbers = true
    )]
    pub max_output: Option<u64>,
}

impl ExportLimits {
    /// The export options these switches ask for.
    pub fn options(&self) -> ExportOptions {
        ExportOptions {
            overwrite: self.force,
            max_output: self.max_output,
            ..ExportOptions::default()
        }
    }
}

pub fn run(args: Args) -> Result<Outcome, CliError> {
    let archive = args.input.open()?;
    let tag = args.input.pick(&archive)?;
    let fail = |e: modelzip::Error| {
        CliError::Failed(format!(
            "cannot export tag {:?} of {}: {e}",
            tag.name(),
            args.input.archive.display()
        ))
    };
    let format = match &args.format {
        Some(name) => interop::format(name).map_err(fail)?,
        None => interop::origin_of(&tag).map_err(fail)?.ok_or_else(|| {
            fail(modelzip::Error::from(modelzip::ErrorKind::InvalidInput(
                "the tag has no graph of a known format; pass --format".into(),
            )))
        })?,
    };
    if args.external_data && format.name() != "onnx" {
        return Err(fail(modelzip::Error::from(
            modelzip::ErrorKind::InvalidInput(format!(
                "--external-data is for onnx exports, not {}",
                format.name()
            )),
        )));
    }
    // A path ending in `/` that is not a directory: the export would try to create a
    // file named `new/` ("Not a directory (os error 20)"). Paddle's prefix check and an
    // existing directory are the library's.
    let slash = args
        .out
        .as_os_str()
        .to_str()
        .is_some_and(|s| s.ends_with('/') || s.ends_with(std::path::MAIN_SEPARATOR));
    let saved_model = format.name() == "tf" && interop::tf::saved_model::is_saved_model_tag(&tag);
    if slash && format.name() != "paddle" && !saved_model && !args.out.is_dir() {
        let why = if format.name() == "safetensors" {
            "is not an existing directory: create it to write shards and an index there, or give a file path"
        } else {
            "names a directory, which does not exist; the export writes a file here, give a file path"
        };
        return Err(CliError::Failed(format!(
            "cannot export tag {:?} of {}: {why} (file {})",
            tag.name(),
            args.input.archive.display(),
            args.out.display()
        )));
    }
    let opts = ExportOptions {
        external_data: args.external_data,
        max_shard_bytes: args.max_shard_size,
        ..args.limits.options()
    };
    let r = format.export(&tag, &args.out, &opts).map_err(fail)?;
    if args.output.json {
        let files: Vec<_> = r
            .files
            .iter()
            .map(|(p, n)| json!({"path": p.display().to_string(), "bytes": n}))
            .collect();
        return print_json(&json!({
            "tag": r.tag,
            "format": r.format,
            "files": files,
            "params": r.params,
            "unused_params": r.unused,
            "notes": r.notes,
        }))
        .map(|_| Outcome::Success);
    }
    if !args.output.quiet {
        let files: Vec<String> = r
            .files
            .iter()
            .map(|(p, n)| format!("{} ({n} bytes)", p.display()))
            .collect();
        let mut out = format!(
            "tag {} as {}: {}, {} param(s)",
            r.tag,
            r.format,
            files.join(", "),
            r.params.len()
        );
        for note in &r.notes {
            out.push_str(&format!("; {note}"));
        }
        out.push('\n');
        out.push_str(&not_exported(&r.unused, "model"));
        print(&out)?;
    }
    Ok(Outcome::Success)
}

/// The line naming the parameters an export left out (empty when there are none).
pub fn not_exported(unused: &[String], what: &str) -> String {
    if unused.is_empty() {
        return String::new();
    }
    let names: Vec<_> = unused.iter().map(|n| clean(n)).collect();
    format!(
        "not exported ({} param(s) the {what} does not use): {}\n",
        unused.len(),
        names.join(", ")
    )
}
