//! Paddle inference models in and out of archives.
//!
//! An inference model is a `.pdmodel` (a ProgramDesc protobuf) plus a `.pdiparams`
//! (`save_combine`: one LoDTensor record per persistable variable of block 0, in the
//! order of the variable names sorted by byte value, feed/fetch holders excluded).
//! Paddle 3 writes the program as `.json` by default (a PIR program): modelzip takes
//! that in place of the `.pdmodel` everywhere below, keeps it byte for byte in graph.fb
//! ([`crate::graph::PirGraph`]) and writes it back as `PREFIX.json`; its `.pdiparams`
//! holds the program's parameters in the order of their names sorted by byte value.
//!
//! - [`import_inference_model`] stores one as a tag: `graph.pdmodel` holds the exact
//!   `.pdmodel` bytes, and every record becomes a parameter named after its variable,
//!   after checking the record count, dtypes and dims against the program.
//! - [`import_persistables_dir`] does the same from a directory of one-tensor files
//!   (`save_persistables` / `save_vars`), with or without a model.
//! - the `paddle` [`super::Format`]'s `export` writes a tag back as `PREFIX.pdmodel` + `PREFIX.pdiparams`
//!   that `paddle.static.load_inference_model(PREFIX, exe)` loads; for a tag imported
//!   from Paddle both files are byte-identical to Paddle's.
//!
//! ```no_run
//! use modelzip::interop::{self, paddle, ExportOptions, ImportOptions};
//! use modelzip::Archive;
//! use std::path::Path;
//!
//! let report = paddle::import_inference_model_files(
//!     Path::new("model.zip"), "fp32",
//!     Path::new("inference.pdmodel"), Path::new("inference.pdiparams"),
//!     &ImportOptions::default(),
//! )?;
//! assert_eq!(report.tag, "fp32");
//! let archive = Archive::open("model.zip")?;
//! let exported = interop::format("paddle")?.export(
//!     &archive.tag("fp32")?, Path::new("out/inference"), &ExportOptions::default(),
//! )?; // out/inference.pdmodel + .pdiparams: exported.files
//! # Ok::<(), modelzip::Error>(())
//! ```

// The options and reports every format shares are public in `interop` only.
pub(crate) use super::{ExportOptions, ImportOptions, ImportReport, ImportedParam};
use super::{Exported, Format, has_ext, head};
// The import and export plumbing every format shares (safetensors reaches it through here).
pub(crate) use super::{persist, report, write_tag, write_temp};
use crate::archive::{GraphFormat, Tag};
use crate::error::{ErrorKind, Result};
use crate::graph::Graph;
use std::path::{Path, PathBuf};

mod export;
pub(crate) use export::check_params;
mod import;
#[cfg(test)]
mod tests;
mod vars;

pub use export::export_inference_model_bytes;
internal! {
    pub use export::{ExportReport, export_inference_model, export_paths, export_paths_pir};
}
pub use import::{
    import_inference_model, import_inference_model_files, import_persistables_dir, import_program,
};
internal! {
    pub use import::{DIR_MODEL_FILE, inference_params};
}
internal! {
    pub use vars::persistable_vars;
}

/// Whether `p` is named `.json` and starts like a PIR program (a safetensors index is
/// JSON too).
fn is_pir_file(p: &Path) -> bool {
    has_ext(p, "json") && crate::graph::pir::looks_like_pir(&head(p, 64))
}

/// Paddle in the [`super::FORMATS`] registry: `.pdmodel` (+ `.pdiparams`) files or a
/// persistables directory (+ its model) in, `PREFIX.pdmodel` + `PREFIX.pdiparams` out.
pub(crate) struct PaddleFormat;

impl Format for PaddleFormat {
    fn name(&self) -> &'static str {
        "paddle"
    }

    fn import(
        &self,
        archive: &Path,
        tag: &str,
        inputs: &[PathBuf],
        opts: &ImportOptions,
    ) -> Result<ImportReport> {
        match inputs {
            [dir] if dir.is_dir() => import_persistables_dir(archive, tag, dir, None, opts),
            [dir, model] if dir.is_dir() => {
                import_persistables_dir(archive, tag, dir, Some(model), opts)
            }
            [model] => import_program(archive, tag, model, opts),
            // The two files named the other way round: their names say which is which.
            [params, model]
                if has_ext(params, "pdiparams")
                    && (has_ext(model, "pdmodel") || is_pir_file(model)) =>
            {
                import_inference_model_files(archive, tag, model, params, opts)
            }
            [model, params] => import_inference_model_files(archive, tag, model, params, opts),
            _ => Err(ErrorKind::InvalidInput(format!(
                "a Paddle import takes MODEL.pdmodel (or MODEL.json) [PARAMS.pdiparams] or \
                 DIR [MODEL], not {} files",
                inputs.len()
            ))
            .into()),
        }
    }

    fn export(&self, tag: &Tag<'_>, out: &Path, opts: &ExportOptions) -> Result<Exported> {
        super::refuse_shard_size(opts, self.name())?;
        // `--out model.pdmodel` (or `model.pdiparams`, `model.json`) means the prefix `model`.
        let prefix = if has_ext(out, "pdmodel") || has_ext(out, "pdiparams") || has_ext(out, "json")
        {
            out.with_extension("")
        } else {
            out.to_path_buf()
        };
        let r = export_inference_model(tag, &prefix, opts)?;
        let mut files = vec![(r.model_path, r.model_bytes)];
        if let Some(p) = r.params_path {
            files.push((p, r.params_bytes));
        }
        let mut notes = Vec::new();
        if r.graph_converted {
            notes.push("program converted from graph.fb".to_string());
        }
        if files.len() == 1 {
            notes.push("no .pdiparams (the program loads no parameters)".to_string());
        }
        Ok(Exported {
            tag: r.tag,
            format: self.name(),
            files,
            params: r.params,
            unused: r.unused,
            notes,
            graph_converted: r.graph_converted,
        })
    }
}

impl super::Recognise for PaddleFormat {
    fn recognised_from(&self) -> &'static str {
        "a .pdmodel ProgramDesc or a Paddle 3 PIR .json program, optionally with its \
         .pdiparams, or a persistables directory"
    }

    fn matches_name(&self, inputs: &[PathBuf]) -> bool {
        inputs.first().is_some_and(|p| {
            (p.is_dir() && !super::tf::is_saved_model(p)) || has_ext(p, "pdmodel") || is_pir_file(p)
        }) || matches!(inputs, [a, b] if has_ext(a, "pdiparams")
            && (has_ext(b, "pdmodel") || is_pir_file(b)))
    }

    fn matches_content(&self, inputs: &[PathBuf]) -> bool {
        // A ProgramDesc starts with a block (field 1, length-delimited) and decodes with
        // its required fields; a GraphDef also starts with field 1 but its nodes do not
        // decode as blocks.
        let Some(first) = inputs.first() else {
            return false;
        };
        if crate::graph::pir::looks_like_pir(&head(first, 64)) {
            return true;
        }
        head(first, 1) == [0x0a]
            && super::read_whole(first).is_ok_and(|b| Graph::from_programdesc(&b).is_ok())
    }

    fn is_origin_of(&self, tag: &Tag<'_>) -> Result<bool> {
        Ok(match tag.graph()? {
            None => false,
            Some((GraphFormat::ProgramDesc, _)) => true,
            Some((GraphFormat::FlatBuffers, bytes)) => {
                !crate::graph::flatbuffers::is_tf(&bytes)
                    && !crate::graph::flatbuffers::is_onnx(&bytes)
            }
        })
    }
}
