//! Paddle models into archives: an inference model's `.pdmodel` + `.pdiparams`, or a
//! persistables directory.

use super::vars::{Declared, check_declared, declared};
use crate::archive::GraphFormat;
use crate::error::{Error, ErrorKind, Result};
use crate::graph::Graph;
use crate::interop::{ImportOptions, ImportReport, map_input, read_file, report, write_tag};
use crate::progress::Ticker;
use crate::tensor::{TensorView, decode_combined, decode_tensor};
use std::path::{Component, Path, PathBuf};

fn name_list(vars: &[Declared]) -> String {
    const SHOWN: usize = 8;
    let mut names: Vec<String> = vars
        .iter()
        .take(SHOWN)
        .map(|v| format!("{:?}", v.name))
        .collect();
    if vars.len() > SHOWN {
        names.push(format!("... {} more", vars.len() - SHOWN));
    }
    names.join(", ")
}

internal! {
    /// Decodes a `.pdiparams` against its program: one record per value the program loads
    /// from it ([`super::persistable_vars`] of a ProgramDesc; the parameters of a PIR
    /// program, [`crate::graph::PirProgram::params`]), in that order, each with the declared
    /// dtype and dims. Returns (name, tensor) pairs borrowing `params`.
    pub fn inference_params<'a>(
        graph: &Graph,
        params: &'a [u8],
    ) -> Result<Vec<(String, TensorView<'a>)>> {
        let vars = declared(graph)?;
        let records = decode_combined(params)?;
        if records.len() != vars.len() {
            return Err(ErrorKind::InvalidInput(format!(
                "the params file holds {} record(s), the program has {} {} to load from it ({})",
                records.len(),
                vars.len(),
                what_loads(graph),
                name_list(&vars)
            ))
            .into());
        }
        vars.iter()
            .zip(records)
            .map(|(var, rec)| {
                let what = format!("params record {} (byte {})", rec.index, rec.offset);
                check_declared(var, &rec.tensor, &what)
                    .map_err(|e| e.in_record(rec.index).at_offset(rec.offset))?;
                Ok((var.name.clone(), rec.tensor))
            })
            .collect()
    }
}

/// What a program's params file holds, for messages.
fn what_loads(graph: &Graph) -> &'static str {
    if matches!(graph, Graph::Pir(_)) {
        "parameter(s)"
    } else {
        "persistable variable(s)"
    }
}

/// A Paddle program file's bytes decoded, and what the tag stores: a ProgramDesc as
/// graph.pdmodel, byte for byte; a PIR program (JSON, [`crate::graph::pir`]) as
/// graph.fb holding the JSON byte for byte.
pub(super) fn decode_program(bytes: &[u8]) -> Result<(Graph, GraphFormat, Vec<u8>)> {
    if crate::graph::pir::looks_like_pir(bytes) {
        let g = Graph::from_pir_json(bytes)?;
        let fb = g.to_flatbuffers()?;
        Ok((g, GraphFormat::FlatBuffers, fb))
    } else {
        Ok((
            Graph::from_programdesc(bytes)?,
            GraphFormat::ProgramDesc,
            bytes.to_vec(),
        ))
    }
}

/// Imports a program that loads no parameters (Paddle's `jit.save` writes only the
/// `.pdmodel` of such a model) as tag `tag`: graph.pdmodel and no params. A program with
/// persistable variables is refused, naming them: its `.pdiparams` is needed.
pub fn import_program(
    archive: &Path,
    tag: &str,
    model_path: &Path,
    opts: &ImportOptions,
) -> Result<ImportReport> {
    let model = read_file(model_path)?;
    let (graph, enc, stored) = decode_program(&model).map_err(|e| e.in_file(model_path))?;
    let vars = declared(&graph).map_err(|e| e.in_file(model_path))?;
    if !vars.is_empty() {
        return Err(Error::new(ErrorKind::InvalidInput(format!(
            "the program loads {} {} ({}); give its .pdiparams too",
            vars.len(),
            what_loads(&graph),
            name_list(&vars)
        )))
        .in_file(model_path));
    }
    store(archive, tag, enc, &stored, &[], opts)
}

/// Imports an inference model (`.pdmodel` and `.pdiparams` bytes) as tag `tag` of the
/// archive at `archive` (created if absent). `graph.pdmodel` is the exact model bytes;
/// the parameters are checked against the program's declarations before anything is written.
/// A Paddle 3 PIR program (the `.json` Paddle 3 writes by default) in place of the
/// `.pdmodel` is stored as graph.fb holding the JSON bytes as they are
/// ([`crate::graph::PirGraph`]).
/// Tensors identical to ones already in the archive are referenced, not copied.
///
/// # Examples
///
/// ```
/// use modelzip::interop::{paddle, ImportOptions};
///
/// let fixtures = std::path::Path::new("tests/fixtures/paddle/3.3.1");
/// let model = std::fs::read(fixtures.join("mlp.pdmodel"))?;
/// let params = std::fs::read(fixtures.join("mlp.pdiparams"))?;
/// let dir = tempfile::tempdir()?;
/// let path = dir.path().join("model.zip");
/// let report =
///     paddle::import_inference_model(&path, "fp32", &model, &params, &ImportOptions::default())?;
/// assert!(report.created && !report.params.is_empty());
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub fn import_inference_model(
    archive: &Path,
    tag: &str,
    model: &[u8],
    params: &[u8],
    opts: &ImportOptions,
) -> Result<ImportReport> {
    let (graph, enc, stored) = decode_program(model)?;
    let tensors = inference_params(&graph, params)?;
    store(archive, tag, enc, &stored, &tensors, opts)
}

fn store(
    archive: &Path,
    tag: &str,
    enc: GraphFormat,
    model: &[u8],
    tensors: &[(String, TensorView<'_>)],
    opts: &ImportOptions,
) -> Result<ImportReport> {
    let mut ticker = Ticker::from_hook(opts.write.progress.as_ref(), tensors.len() as u64);
    let created = write_tag(archive, tag, opts, |w| {
        w.graph(enc, model)?;
        for (name, t) in tensors {
            w.param(name, t)?;
            ticker.tick();
        }
        Ok(())
    })?;
    report(archive, tag, created, Some(model.len() as u64))
}

/// [`import_inference_model`] from files; errors name the file they concern. The
/// `.pdiparams` is mapped, not read into memory: each tensor is written to the archive
/// from the map.
pub fn import_inference_model_files(
    archive: &Path,
    tag: &str,
    model_path: &Path,
    params_path: &Path,
    opts: &ImportOptions,
) -> Result<ImportReport> {
    let model = read_file(model_path)?;
    let params = map_input(params_path)?;
    let (graph, enc, stored) = decode_program(&model).map_err(|e| e.in_file(model_path))?;
    // A program that cannot say which variables it loads is the model file's fault.
    declared(&graph).map_err(|e| e.in_file(model_path))?;
    let tensors = inference_params(&graph, &params).map_err(|e| e.in_file(params_path))?;
    store(archive, tag, enc, &stored, &tensors, opts)
}

/// The file of variable `name` in a persistables directory (Paddle joins the name onto
/// the directory); names that could leave the directory are refused.
pub(super) fn var_file(dir: &Path, name: &str) -> Result<PathBuf> {
    let rel = Path::new(name);
    let plain = !name.is_empty()
        && !name.contains('\0')
        && rel.components().all(|c| matches!(c, Component::Normal(_)));
    if !plain {
        return Err(ErrorKind::InvalidInput(format!(
            "variable name {name:?} is not a plain relative file name; refusing to read it \
             from a directory"
        ))
        .into());
    }
    Ok(dir.join(rel))
}

internal! {
    /// Name of the model file `save_inference_model(dirname)` writes into the directory.
    pub const DIR_MODEL_FILE: &str = "__model__";
}

/// Imports a persistables directory (one LoDTensor file per variable, named after it)
/// as tag `tag`. The model is `model`, else `DIR/__model__` when present, else
/// `DIR/graph.fb` (what `modelzip extract` writes for a graph.fb tag; a model whose name
/// ends in `.fb` is read as graph.fb and stored as the ProgramDesc it converts to, or as
/// it is when it holds a PIR program). With a model: exactly its
/// persistable variables (a PIR program: its parameters; a missing file is an
/// error; other files are ignored), each checked against its declaration, and the model
/// becomes `graph.pdmodel` (a PIR `.json`: graph.fb holding it). Without one: a
/// directory holding one program `PREFIX.pdmodel` or PIR `PREFIX.json` with its
/// `PREFIX.pdiparams` (what `paddle.jit.save` and `save_inference_model` write) and no
/// file starting like a LoDTensor record besides is imported as those two files
/// ([`import_inference_model_files`]); one holding programs or `.pdiparams` any other
/// way is refused, listing them; else every regular file directly in `dir`, named by its
/// file name, sorted by byte value, and no graph.
pub fn import_persistables_dir(
    archive: &Path,
    tag: &str,
    dir: &Path,
    model: Option<&Path>,
    opts: &ImportOptions,
) -> Result<ImportReport> {
    // A SavedModel directory (--format paddle, import-paddle --dir) would be read as
    // persistables and fail on its first file's "LoDTensor version".
    if crate::interop::tf::is_saved_model(dir) {
        return Err(Error::new(ErrorKind::InvalidInput(
            "the directory is a TensorFlow SavedModel (it holds saved_model.pb), not a Paddle \
             model; import it as tf (`modelzip import` detects it; --format tf)"
                .into(),
        ))
        .in_file(dir));
    }
    let default_model = dir.join(DIR_MODEL_FILE);
    // What `modelzip extract` writes for a graph.fb tag.
    let default_fb = dir.join("graph.fb");
    let model_path = match model {
        Some(m) => Some(m.to_path_buf()),
        None if default_model.is_file() => Some(default_model),
        None if default_fb.is_file() => Some(default_fb),
        None => None,
    };
    let Some(model_path) = model_path else {
        let files = dir_files(dir)?;
        if let Some((model, params)) = inference_model_in(dir, &files)? {
            return import_inference_model_files(archive, tag, &model, &params, opts);
        }
        let mut ticker = Ticker::from_hook(opts.write.progress.as_ref(), files.len() as u64);
        let created = write_tag(archive, tag, opts, |w| {
            for (name, path) in &files {
                let bytes = map_input(path)?;
                let t = decode_tensor(&bytes).map_err(|e| e.in_file(path))?;
                w.param(name, &t)?;
                ticker.tick();
            }
            Ok(())
        })?;
        return report(archive, tag, created, None);
    };
    let model = read_file(&model_path)?;
    let (graph, enc, model) = if model_path.extension().is_some_and(|e| e == "fb") {
        // A modelzip graph.fb: stored as the ProgramDesc it converts to, or as it is
        // when it holds a PIR program.
        let g = Graph::from_flatbuffers(&model).map_err(|e| e.in_file(&model_path))?;
        if matches!(g, Graph::Pir(_)) {
            (g, GraphFormat::FlatBuffers, model)
        } else {
            let pd = g.to_programdesc().map_err(|e| e.in_file(&model_path))?;
            (g, GraphFormat::ProgramDesc, pd)
        }
    } else {
        decode_program(&model).map_err(|e| e.in_file(&model_path))?
    };
    let vars = declared(&graph).map_err(|e| e.in_file(&model_path))?;
    let mut files = Vec::with_capacity(vars.len());
    for v in &vars {
        let path = var_file(dir, &v.name).map_err(|e| e.in_file(dir))?;
        if !path.is_file() {
            return Err(Error::new(ErrorKind::InvalidInput(format!(
                "variable {:?} is persistable in the program but the directory has no \
                 file {:?} for it",
                v.name, v.name
            )))
            .in_file(dir));
        }
        files.push((v, path));
    }
    let mut ticker = Ticker::from_hook(opts.write.progress.as_ref(), files.len() as u64);
    let created = write_tag(archive, tag, opts, |w| {
        w.graph(enc, &model)?;
        for (var, path) in &files {
            let bytes = map_input(path)?;
            let t = decode_tensor(&bytes).map_err(|e| e.in_file(path))?;
            check_declared(var, &t, &format!("file {}", path.display()))?;
            w.param(&var.name, &t)?;
            ticker.tick();
        }
        Ok(())
    })?;
    report(archive, tag, created, Some(model.len() as u64))
}

/// The inference model a directory holds instead of persistables, as (model, params):
/// `paddle.jit.save(layer, "DIR/PREFIX")` and `save_inference_model("DIR/PREFIX", ..)`
/// write `PREFIX.pdmodel` or (Paddle 3) the PIR program `PREFIX.json`, with
/// `PREFIX.pdiparams` (and, Paddle 2's `jit.save`, `PREFIX.pdiparams.info`). `None`
/// when `files` (the directory's) hold no program and no `.pdiparams`: a persistables
/// directory. Anything else holding one of them (two programs, a program without its
/// `.pdiparams` or the other way round, files that start like a LoDTensor record beside
/// them) is refused, listing what was found. Other files are ignored.
fn inference_model_in(
    dir: &Path,
    files: &[(String, PathBuf)],
) -> Result<Option<(PathBuf, PathBuf)>> {
    let is_info = |name: &str| name.to_ascii_lowercase().ends_with(".pdiparams.info");
    let (mut models, mut params, mut others) = (Vec::new(), Vec::new(), Vec::new());
    for (name, path) in files {
        if crate::interop::has_ext(path, "pdmodel") || super::is_pir_file(path) {
            models.push((name, path));
        } else if crate::interop::has_ext(path, "pdiparams") {
            params.push((name, path));
        } else if !is_info(name) && crate::interop::head(path, 4) == [0; 4] {
            // A LoDTensor record starts with version 0 (u32): a persistables file. Other
            // files (a README, PaddleOCR's inference.yml) are not read.
            others.push(name);
        }
    }
    if models.is_empty() && params.is_empty() {
        return Ok(None);
    }
    let prefix = |name: &str| Path::new(name).file_stem().map(|s| s.to_os_string());
    if let ([(m, model)], [(p, param)], []) = (&models[..], &params[..], &others[..])
        && prefix(m) == prefix(p)
    {
        return Ok(Some((model.to_path_buf(), param.to_path_buf())));
    }
    const SHOWN: usize = 8;
    let mut found = Vec::new();
    for (what, names) in [
        (
            "program",
            models.iter().map(|(n, _)| *n).collect::<Vec<_>>(),
        ),
        (".pdiparams", params.iter().map(|(n, _)| *n).collect()),
        ("persistables-like file", others),
    ] {
        if names.is_empty() {
            continue;
        }
        let mut shown: Vec<String> = names.iter().take(SHOWN).map(|n| format!("{n:?}")).collect();
        if names.len() > SHOWN {
            shown.push(format!("... {} more", names.len() - SHOWN));
        }
        let plural = if names.len() == 1 { "" } else { "s" };
        found.push(format!(
            "{} {what}{plural} ({})",
            names.len(),
            shown.join(", ")
        ));
    }
    Err(Error::new(ErrorKind::InvalidInput(format!(
        "the directory is neither one inference model nor a persistables directory: it \
         holds {}; a directory imports as an inference model when it holds exactly \
         PREFIX.pdmodel (or a PIR program PREFIX.json) and PREFIX.pdiparams and no \
         persistables-like file (starting with a LoDTensor version 0), and as a \
         persistables directory when it holds no program and no .pdiparams; give the program and its .pdiparams as two files instead (or \
         the directory and its program, for a persistables directory)",
        found.join(", ")
    )))
    .in_file(dir))
}

/// Regular files directly in `dir` as (file name, path), sorted by name bytes.
fn dir_files(dir: &Path) -> Result<Vec<(String, PathBuf)>> {
    let rd = std::fs::read_dir(dir).map_err(|e| Error::from(e).in_file(dir))?;
    let mut out = Vec::new();
    for entry in rd {
        let entry = entry.map_err(|e| Error::from(e).in_file(dir))?;
        let path = entry.path();
        // Follows symlinks: a linked tensor file is still a tensor file.
        if !path.is_file() {
            continue;
        }
        let name = entry.file_name().into_string().map_err(|n| {
            Error::new(ErrorKind::InvalidInput(format!(
                "file name {n:?} is not UTF-8, so it cannot be a parameter name"
            )))
            .in_file(dir)
        })?;
        out.push((name, path));
    }
    out.sort();
    Ok(out)
}
