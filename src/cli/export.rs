//! `modelzip export`: a tag as model files of any registered format.

use super::common::{OutputArgs, TagArgs, refuse_replacing_archive};
use super::output::{clean, print, print_json};
use super::{CliError, Outcome};
use modelzip::interop::{self, ExportOptions};
use serde_json::json;
use std::path::{Path, PathBuf};

/// Export a tag as model files of a format (default: the format the tag came from).
///
///   paddle  PATH is a prefix: writes PATH.pdmodel and PATH.pdiparams (a PATH ending in
///           .pdmodel or .pdiparams is taken as its prefix; a directory such as out/ is
///           refused, it is no prefix), which paddle.static.load_inference_model
///           loads; a tag imported from Paddle comes out byte for byte
///   tf      writes a frozen GraphDef: text format when PATH ends in .pbtxt, binary
///           otherwise; a tag imported from TensorFlow comes out as the same message
///   safetensors  PATH is a file, or an existing directory for a sharded checkpoint's
///           shards and index; a tag imported from safetensors comes out byte for byte;
///           an INT8 variant is refused (the file has no place for its scales)
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
///   modelzip export model.zip --tag hf --format safetensors --out model.safetensors
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
    /// Where to write (a prefix for paddle, a file for tf and onnx).
    #[arg(long, value_name = "PATH")]
    out: PathBuf,
    #[command(flatten)]
    limits: ExportLimits,
    /// onnx only: write every initializer to PATH.data beside the model (instead of
    /// inline, or the external files a model imported with external data named).
    #[arg(long)]
    external_data: bool,
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
            fail(modelzip::Error::new(modelzip::ErrorKind::InvalidInput(
                "the tag has no graph of a known format; pass --format".into(),
            )))
        })?,
    };
    if args.external_data && format.name() != "onnx" {
        return Err(fail(modelzip::Error::new(
            modelzip::ErrorKind::InvalidInput(format!(
                "--external-data is for onnx exports, not {}",
                format.name()
            )),
        )));
    }
    check_out(format.name(), &args.out).map_err(|why| {
        CliError::Failed(format!(
            "cannot export tag {:?} of {}: {why}",
            tag.name(),
            args.input.archive.display()
        ))
    })?;
    refuse_replacing_archive(
        &args.input.archive,
        &output_files(format.name(), &args.out, args.external_data),
        &format!(
            "cannot export tag {:?} of {}",
            tag.name(),
            args.input.archive.display()
        ),
    )?;
    let opts = ExportOptions {
        external_data: args.external_data,
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

/// Refuses an `--out` that names a directory where the format writes a file, saying so
/// (the exports answered "Not a directory (os error 20)", or "file already exists" for
/// an existing directory, and a Paddle prefix ending in `/` wrote the hidden files
/// `DIR/.pdmodel` and `DIR/.pdiparams`). A safetensors export writes shards into an
/// existing directory; a path ending in `/` must be one.
pub fn check_out(format: &str, out: &Path) -> Result<(), String> {
    let slash = out
        .as_os_str()
        .to_str()
        .is_some_and(|s| s.ends_with('/') || s.ends_with(std::path::MAIN_SEPARATOR));
    let shown = out.display();
    match format {
        "safetensors" if slash && !out.is_dir() => Err(format!(
            "{shown} is not an existing directory: create it to write shards and an index there, or give a file path"
        )),
        "safetensors" => Ok(()),
        "paddle" if slash => Err(format!(
            "{shown} names a directory; --out is a path prefix such as {shown}inference (PREFIX.pdmodel and PREFIX.pdiparams are written)"
        )),
        "paddle" => Ok(()),
        _ if slash || out.is_dir() => Err(format!(
            "{shown} names a directory; --out names the file to write (e.g. {}/model.{})",
            shown.to_string().trim_end_matches('/'),
            if format == "onnx" { "onnx" } else { "pb" }
        )),
        _ => Ok(()),
    }
}

/// The files an export of `format` to `out` writes that can be named before it runs:
/// Paddle's two files (a PATH ending in `.pdmodel` is the prefix), else `out`, and with
/// `--external-data` its `.data` file. (Shards into a directory and ONNX external data
/// written back to the files it came from are named by the tag.)
fn output_files(format: &str, out: &Path, external_data: bool) -> Vec<PathBuf> {
    if format == "paddle" {
        let prefix = if out
            .extension()
            .is_some_and(|e| e.eq_ignore_ascii_case("pdmodel"))
        {
            out.with_extension("")
        } else {
            out.to_path_buf()
        };
        let (m, p) = interop::paddle::export_paths(&prefix);
        return vec![m, p];
    }
    let mut files = vec![out.to_path_buf()];
    if external_data {
        files.push(interop::onnx::external_data_path(out));
    }
    files
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
