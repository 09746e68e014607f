//! Paddle inference models in and out of archives.
//!
//! An inference model is a `.pdmodel` (a ProgramDesc protobuf) plus a `.pdiparams`
//! (`save_combine`: one LoDTensor record per persistable variable of block 0, in the
//! order of the variable names sorted by byte value, feed/fetch holders excluded).
//!
//! - [`import_inference_model`] stores one as a tag: `graph.pdmodel` holds the exact
//!   `.pdmodel` bytes, and every record becomes a parameter named after its variable,
//!   after checking the record count, dtypes and dims against the program.
//! - [`import_persistables_dir`] does the same from a directory of one-tensor files
//!   (`save_persistables` / `save_vars`), with or without a model.
//! - [`export_inference_model`] writes a tag back as `PREFIX.pdmodel` + `PREFIX.pdiparams`
//!   that `paddle.static.load_inference_model(PREFIX, exe)` loads; for a tag imported
//!   from Paddle both files are byte-identical to Paddle's.
//!
//! ```no_run
//! use modelzip::interop::paddle::{self, ExportOptions, ImportOptions};
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
//! paddle::export_inference_model(&archive.tag("fp32")?, Path::new("out/inference"),
//!                                &ExportOptions::default())?;
//! # Ok::<(), modelzip::Error>(())
//! ```

pub use super::{ExportOptions, ImportOptions, ImportReport, ImportedParam, default_max_output};
use super::{Exported, Format, has_ext, head, read_file};
// The import and export plumbing every format shares (safetensors reaches it through here).
pub(crate) use super::{persist, report, write_tag, write_temp};
use crate::archive::{GraphFormat, Tag, TensorData};
use crate::error::{Error, ErrorKind, Result};
use crate::graph::{Graph, Var};
use crate::progress::Ticker;
use crate::tensor::{TensorView, decode_combined, decode_tensor, encode_combined};
use std::borrow::Cow;
use std::collections::{HashMap, HashSet};
use std::io::Write;
use std::path::{Component, Path, PathBuf};

/// Paddle `VarType.Type` numbers of persistable variables that are not saved in a
/// params file: FEED_MINIBATCH, FETCH_LIST, READER, RAW.
const NOT_SAVED: [i32; 4] = [9, 10, 15, 17];

/// Paddle's `VarType.Type` number of a dense tensor (LoDTensor).
const DENSE_TENSOR: i32 = 7;

/// What an export wrote.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExportReport {
    /// The tag exported, spelled as in tags.txt.
    pub tag: String,
    /// `PREFIX.pdmodel`.
    pub model_path: PathBuf,
    /// `PREFIX.pdiparams`; `None` when the program has no persistable variables (like
    /// Paddle's own `save_inference_model`, no params file is written then).
    pub params_path: Option<PathBuf>,
    /// Bytes of the `.pdmodel`.
    pub model_bytes: u64,
    /// Bytes of the `.pdiparams`.
    pub params_bytes: u64,
    /// True when the tag's graph was graph.fb and was converted to ProgramDesc.
    pub graph_converted: bool,
    /// The parameters written, in file order.
    pub params: Vec<String>,
    /// Parameters of the tag the program does not use (not written).
    pub unused: Vec<String>,
}

/// The variables whose values a Paddle inference params file holds: block 0's
/// persistable variables except feed/fetch holders (and READER/RAW), sorted by name
/// (byte order). A persistable variable of another non-tensor type (SELECTED_ROWS,
/// tensor arrays, ...) is an error: Paddle's inference files cannot hold it.
pub fn persistable_vars(graph: &Graph) -> Result<Vec<&Var>> {
    let block = graph
        .main_block()
        .ok_or_else(|| Error::new(ErrorKind::Graph("the program has no block 0".into())))?;
    let mut vars = Vec::new();
    for v in &block.vars {
        if !v.is_persistable() {
            continue;
        }
        let ty = v.kind.paddle_type();
        if NOT_SAVED.contains(&ty) {
            continue;
        }
        if ty != DENSE_TENSOR {
            return Err(ErrorKind::Graph(format!(
                "block 0: persistable variable {:?} has type {}, which Paddle inference \
                 params files do not hold",
                v.name,
                crate::graph::model::var_type_name(ty)
                    .map(str::to_string)
                    .unwrap_or_else(|| ty.to_string())
            ))
            .into());
        }
        vars.push(v);
    }
    vars.sort_by(|a, b| a.name.as_bytes().cmp(b.name.as_bytes()));
    let dup = vars.windows(2).find_map(|w| match w {
        [a, b] if a.name == b.name => Some(a.name.as_str()),
        _ => None,
    });
    if let Some(name) = dup {
        return Err(ErrorKind::Graph(format!("block 0 declares variable {name:?} twice")).into());
    }
    Ok(vars)
}

/// Checks a tensor against its variable's declared dtype and dims (-1 matches any
/// extent; an undeclared dtype matches any). `what` names the tensor for the error.
fn check_declared(var: &Var, t: &TensorView<'_>, what: &str) -> Result<()> {
    if let Some(d) = var.dtype
        && d != t.dtype()
    {
        return Err(ErrorKind::InvalidInput(format!(
            "variable {:?}: the program declares dtype {}, {what} has {}",
            var.name,
            d.name(),
            t.dtype().name()
        ))
        .into());
    }
    let fits = var.shape.len() == t.dims().len()
        && var
            .shape
            .iter()
            .zip(t.dims())
            .all(|(&want, &got)| want < 0 || u64::try_from(want).is_ok_and(|w| w == got));
    if !fits {
        return Err(ErrorKind::InvalidInput(format!(
            "variable {:?}: the program declares dims {:?}, {what} has {:?}",
            var.name,
            var.shape,
            t.dims()
        ))
        .into());
    }
    Ok(())
}

fn name_list(vars: &[&Var]) -> String {
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

/// Decodes a `.pdiparams` against its program: one record per [`persistable_vars`]
/// entry, in that order, each with the declared dtype and dims. Returns (name, tensor)
/// pairs borrowing `params`.
pub fn inference_params<'a>(
    graph: &Graph,
    params: &'a [u8],
) -> Result<Vec<(String, TensorView<'a>)>> {
    let vars = persistable_vars(graph)?;
    let records = decode_combined(params)?;
    if records.len() != vars.len() {
        return Err(ErrorKind::InvalidInput(format!(
            "the params file holds {} record(s), the program has {} persistable variable(s) \
             to load from it ({})",
            records.len(),
            vars.len(),
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
    let graph = Graph::from_programdesc(&model).map_err(|e| e.in_file(model_path))?;
    let vars = persistable_vars(&graph).map_err(|e| e.in_file(model_path))?;
    if !vars.is_empty() {
        return Err(Error::new(ErrorKind::InvalidInput(format!(
            "the program loads {} persistable variable(s) ({}); give its .pdiparams too",
            vars.len(),
            name_list(&vars)
        )))
        .in_file(model_path));
    }
    store(archive, tag, &model, &[], opts)
}

/// Imports an inference model (`.pdmodel` and `.pdiparams` bytes) as tag `tag` of the
/// archive at `archive` (created if absent). `graph.pdmodel` is the exact model bytes;
/// the parameters are checked with [`inference_params`] before anything is written.
/// Tensors identical to ones already in the archive are referenced, not copied.
///
/// # Examples
///
/// ```
/// use modelzip::interop::paddle::{self, ImportOptions};
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
    let graph = Graph::from_programdesc(model)?;
    let tensors = inference_params(&graph, params)?;
    store(archive, tag, model, &tensors, opts)
}

fn store(
    archive: &Path,
    tag: &str,
    model: &[u8],
    tensors: &[(String, TensorView<'_>)],
    opts: &ImportOptions,
) -> Result<ImportReport> {
    let mut ticker = Ticker::from_hook(opts.write.progress.as_ref(), tensors.len() as u64);
    let created = write_tag(archive, tag, opts, |w| {
        w.graph(GraphFormat::ProgramDesc, model)?;
        for (name, t) in tensors {
            w.param(name, t)?;
            ticker.tick();
        }
        Ok(())
    })?;
    report(archive, tag, created, Some(model.len() as u64))
}

/// [`import_inference_model`] from files; errors name the file they concern.
pub fn import_inference_model_files(
    archive: &Path,
    tag: &str,
    model_path: &Path,
    params_path: &Path,
    opts: &ImportOptions,
) -> Result<ImportReport> {
    let model = read_file(model_path)?;
    let params = read_file(params_path)?;
    let graph = Graph::from_programdesc(&model).map_err(|e| e.in_file(model_path))?;
    // A program that cannot say which variables it loads is the model file's fault.
    persistable_vars(&graph).map_err(|e| e.in_file(model_path))?;
    let tensors = inference_params(&graph, &params).map_err(|e| e.in_file(params_path))?;
    store(archive, tag, &model, &tensors, opts)
}

/// The file of variable `name` in a persistables directory (Paddle joins the name onto
/// the directory); names that could leave the directory are refused.
fn var_file(dir: &Path, name: &str) -> Result<PathBuf> {
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

/// Name of the model file `save_inference_model(dirname)` writes into the directory.
pub const DIR_MODEL_FILE: &str = "__model__";

/// Imports a persistables directory (one LoDTensor file per variable, named after it)
/// as tag `tag`. The model is `model`, else `DIR/__model__` when present, else
/// `DIR/graph.fb` (what `modelzip extract` writes for a graph.fb tag; a model whose name
/// ends in `.fb` is read as graph.fb and stored as the ProgramDesc it converts to). With a model:
/// exactly its [`persistable_vars`] (a missing file is an error; other files are
/// ignored), each checked against its declaration, and the model becomes
/// `graph.pdmodel`. Without one: every regular file directly in `dir`, named by its file
/// name, sorted by byte value, and no graph.
pub fn import_persistables_dir(
    archive: &Path,
    tag: &str,
    dir: &Path,
    model: Option<&Path>,
    opts: &ImportOptions,
) -> Result<ImportReport> {
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
        let mut ticker = Ticker::from_hook(opts.write.progress.as_ref(), files.len() as u64);
        let created = write_tag(archive, tag, opts, |w| {
            for (name, path) in &files {
                let bytes = read_file(path)?;
                let t = decode_tensor(&bytes).map_err(|e| e.in_file(path))?;
                w.param(name, &t)?;
                ticker.tick();
            }
            Ok(())
        })?;
        return report(archive, tag, created, None);
    };
    let mut model = read_file(&model_path)?;
    let graph = if model_path.extension().is_some_and(|e| e == "fb") {
        // A modelzip graph.fb: stored as the ProgramDesc it converts to.
        let g = Graph::from_flatbuffers(&model).map_err(|e| e.in_file(&model_path))?;
        model = g.to_programdesc().map_err(|e| e.in_file(&model_path))?;
        g
    } else {
        Graph::from_programdesc(&model).map_err(|e| e.in_file(&model_path))?
    };
    let vars = persistable_vars(&graph).map_err(|e| e.in_file(&model_path))?;
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
        files.push((*v, path));
    }
    let mut ticker = Ticker::from_hook(opts.write.progress.as_ref(), files.len() as u64);
    let created = write_tag(archive, tag, opts, |w| {
        w.graph(GraphFormat::ProgramDesc, &model)?;
        for (var, path) in &files {
            let bytes = read_file(path)?;
            let t = decode_tensor(&bytes).map_err(|e| e.in_file(path))?;
            check_declared(var, &t, &format!("file {}", path.display()))?;
            w.param(&var.name, &t)?;
            ticker.tick();
        }
        Ok(())
    })?;
    report(archive, tag, created, Some(model.len() as u64))
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

/// A tag ready to be written as an inference model.
struct Prepared<'a> {
    model: Cow<'a, [u8]>,
    converted: bool,
    /// Each variable's name and its tensor (a position in `data`).
    params: Vec<(String, usize)>,
    /// Each tensor file the variables use, read once (many names may share one).
    data: Vec<TensorData<'a>>,
    unused: Vec<String>,
}

impl Prepared<'_> {
    /// Bytes the `.pdiparams` file takes.
    fn params_len(&self) -> u64 {
        let lens: Vec<u64> = self
            .data
            .iter()
            .map(|d| crate::tensor::codec::encoded_len(&d.view()))
            .collect();
        self.params
            .iter()
            .map(|&(_, i)| lens[i])
            .fold(0u64, u64::saturating_add)
    }
}

fn prepare<'a>(tag: &Tag<'a>) -> Result<Prepared<'a>> {
    let name = tag.name();
    let Some((enc, bytes)) = tag.graph()? else {
        return Err(ErrorKind::InvalidInput(format!(
            "tag {name:?} has no graph; exporting a Paddle inference model needs a program"
        ))
        .into());
    };
    let (graph, model, converted) = match enc {
        GraphFormat::ProgramDesc => {
            let g = Graph::from_programdesc(&bytes)
                .map_err(|e| e.in_entry(format!("{name}/graph.pdmodel")))?;
            (g, bytes, false)
        }
        GraphFormat::FlatBuffers => {
            let located = |e: Error| e.in_entry(format!("{name}/graph.fb"));
            let g = Graph::from_flatbuffers(&bytes).map_err(located)?;
            let pd = g.to_programdesc().map_err(located)?;
            (g, Cow::Owned(pd), true)
        }
    };
    let vars = persistable_vars(&graph)?;
    let mut params = Vec::with_capacity(vars.len());
    let mut data_of: HashMap<&str, usize> = HashMap::new();
    let mut all_data: Vec<TensorData<'a>> = Vec::new();
    let by_name: HashMap<&str, &crate::archive::TensorLocation> = tag
        .params()
        .iter()
        .map(|p| (p.name.as_str(), &p.location))
        .collect();
    for v in &vars {
        if !by_name.contains_key(v.name.as_str()) {
            return Err(ErrorKind::InvalidInput(format!(
                "variable {:?} is persistable in the program but tag {name:?} has no \
                 parameter of that name",
                v.name
            ))
            .into());
        }
        let loc = by_name[v.name.as_str()];
        let i = match data_of.get(loc.entry.as_str()) {
            Some(&i) => i,
            None => {
                all_data.push(tag.tensor(loc)?);
                data_of.insert(loc.entry.as_str(), all_data.len() - 1);
                all_data.len() - 1
            }
        };
        check_declared(
            v,
            &all_data[i].view(),
            &format!("parameter {:?} of tag {name:?}", v.name),
        )?;
        params.push((v.name.clone(), i));
    }
    let used: HashSet<&str> = vars.iter().map(|v| v.name.as_str()).collect();
    let unused = tag
        .params()
        .iter()
        .filter(|p| !used.contains(p.name.as_str()))
        .map(|p| p.name.clone())
        .collect();
    Ok(Prepared {
        model,
        converted,
        params,
        data: all_data,
        unused,
    })
}

fn write_params(p: &Prepared<'_>, w: &mut dyn Write) -> std::io::Result<u64> {
    let views: Vec<TensorView<'_>> = p.data.iter().map(TensorData::view).collect();
    encode_combined(p.params.iter().map(|&(_, i)| &views[i]), w)
}

/// The `.pdmodel` and `.pdiparams` bytes of tag `tag`, in memory (see
/// [`export_inference_model`] for the rules).
pub fn export_inference_model_bytes(tag: &Tag<'_>) -> Result<(Vec<u8>, Vec<u8>)> {
    let p = prepare(tag)?;
    let mut params = Vec::new();
    write_params(&p, &mut params)?;
    Ok((p.model.into_owned(), params))
}

/// `prefix` with `ext` appended (`out/model.v1` + `.pdmodel`, not a replaced extension).
fn with_suffix(prefix: &Path, ext: &str) -> PathBuf {
    let mut s = prefix.as_os_str().to_owned();
    s.push(ext);
    PathBuf::from(s)
}

/// The two paths an export of `prefix` writes: `PREFIX.pdmodel`, `PREFIX.pdiparams`.
pub fn export_paths(prefix: &Path) -> (PathBuf, PathBuf) {
    (
        with_suffix(prefix, ".pdmodel"),
        with_suffix(prefix, ".pdiparams"),
    )
}

/// Writes tag `tag` as `PREFIX.pdmodel` + `PREFIX.pdiparams`, the files
/// `paddle.static.load_inference_model(PREFIX, exe)` loads.
///
/// The program is the tag's `graph.pdmodel` as stored, or its `graph.fb` converted to
/// ProgramDesc; a tag without a graph is an error. The params file holds, in the order
/// of [`persistable_vars`], the tag's parameter of each variable (each must exist and
/// match the declared dtype and dims), written with [`encode_combined`]; parameters the
/// program does not use are left out and listed in the report.
///
/// Both files are written to temp files beside their targets, fsynced, then renamed
/// into place; existing files are refused unless `opts.overwrite`. If the second rename
/// fails, the first file is removed again, so no half pair is left behind.
pub fn export_inference_model(
    tag: &Tag<'_>,
    prefix: &Path,
    opts: &ExportOptions,
) -> Result<ExportReport> {
    let p = prepare(tag)?;
    let total = (p.model.len() as u64).saturating_add(p.params_len());
    super::check_output_size(
        tag,
        opts,
        "export size (the .pdmodel and .pdiparams files together)",
        total,
    )?;
    let (model_path, params_path) = export_paths(prefix);
    let dir = crate::archive::parent_dir(&model_path);
    if !dir.is_dir() {
        return Err(Error::new(ErrorKind::InvalidInput(
            "the output directory does not exist".into(),
        ))
        .in_file(&dir));
    }
    if !opts.overwrite {
        for path in [&model_path, &params_path] {
            if path.exists() {
                return Err(Error::new(ErrorKind::InvalidInput(
                    "file already exists; refusing to overwrite it".into(),
                ))
                .in_file(path));
            }
        }
    }
    let model_tmp = write_temp(&model_path, opts.fsync, |w| w.write_all(&p.model))?;
    let mut params_bytes = 0;
    let wrote_params = !p.params.is_empty();
    if wrote_params {
        let params_tmp = write_temp(&params_path, opts.fsync, |w| {
            write_params(&p, w).map(|_| ())
        })?;
        params_bytes = super::file_len(params_tmp.path(), &params_path)?;
        persist(params_tmp, &params_path, opts.overwrite)?;
    } else if params_path.exists() {
        // Only reached with `overwrite`: a params file of an earlier export would not
        // belong to this program.
        std::fs::remove_file(&params_path).map_err(|e| Error::from(e).in_file(&params_path))?;
    }
    if let Err(e) = persist(model_tmp, &model_path, opts.overwrite) {
        // Never leave a params file without its program.
        if wrote_params {
            let _ = std::fs::remove_file(&params_path);
        }
        return Err(e);
    }
    if opts.fsync {
        std::fs::File::open(&dir)
            .and_then(|d| d.sync_all())
            .map_err(|e| Error::from(e).in_file(&dir))?;
    }
    Ok(ExportReport {
        tag: tag.name().to_string(),
        model_bytes: p.model.len() as u64,
        params_bytes,
        model_path,
        params_path: wrote_params.then_some(params_path),
        graph_converted: p.converted,
        params: p.params.iter().map(|(n, _)| n.clone()).collect(),
        unused: p.unused,
    })
}

/// Paddle in the [`super::FORMATS`] registry: `.pdmodel` (+ `.pdiparams`) files or a
/// persistables directory (+ its model) in, `PREFIX.pdmodel` + `PREFIX.pdiparams` out.
pub struct PaddleFormat;

impl Format for PaddleFormat {
    fn name(&self) -> &'static str {
        "paddle"
    }

    fn recognised_from(&self) -> &'static str {
        "a .pdmodel ProgramDesc, optionally with its .pdiparams, or a persistables directory"
    }

    fn matches_name(&self, inputs: &[PathBuf]) -> bool {
        inputs
            .first()
            .is_some_and(|p| p.is_dir() || has_ext(p, "pdmodel"))
    }

    fn matches_content(&self, inputs: &[PathBuf]) -> bool {
        // A ProgramDesc starts with a block (field 1, length-delimited) and decodes with
        // its required fields; a GraphDef also starts with field 1 but its nodes do not
        // decode as blocks.
        let Some(first) = inputs.first() else {
            return false;
        };
        head(first, 1) == [0x0a]
            && super::read_whole(first).is_ok_and(|b| Graph::from_programdesc(&b).is_ok())
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
            [model, params] => import_inference_model_files(archive, tag, model, params, opts),
            _ => Err(ErrorKind::InvalidInput(format!(
                "a Paddle import takes MODEL.pdmodel [PARAMS.pdiparams] or DIR [MODEL], \
                 not {} files",
                inputs.len()
            ))
            .into()),
        }
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

    fn export(&self, tag: &Tag<'_>, out: &Path, opts: &ExportOptions) -> Result<Exported> {
        // `--out model.pdmodel` means the prefix `model`.
        let prefix = if has_ext(out, "pdmodel") {
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
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::graph::VarKind;
    use crate::tensor::DType;

    fn graph(vars: Vec<Var>) -> Graph {
        let mut g = Graph::new();
        g.blocks[0].vars = vars;
        g
    }

    fn holder(name: &str, ty: i32) -> Var {
        Var {
            kind: VarKind::Other(ty),
            dtype: None,
            persistable: Some(true),
            ..Var::new(name, VarKind::Other(ty), DType::Fp32, vec![])
        }
    }

    #[test]
    fn persistables_are_sorted_by_bytes_and_skip_feed_fetch_and_temporaries() {
        let g = graph(vec![
            Var::constant("a_2", DType::Fp32, vec![1]),
            holder("feed", 9),
            Var::variable("tmp", DType::Fp32, vec![-1]),
            Var::parameter("a_10", DType::Fp32, vec![1]),
            holder("fetch", 10),
            Var::constant("Beta", DType::Int64, vec![]),
            holder("raw", 17),
        ]);
        let names: Vec<&str> = persistable_vars(&g)
            .unwrap()
            .iter()
            .map(|v| v.name.as_str())
            .collect();
        assert_eq!(names, ["Beta", "a_10", "a_2"]);
    }

    #[test]
    fn unsupported_persistable_types_and_duplicates_are_errors() {
        let e = persistable_vars(&graph(vec![holder("rows", 8)])).unwrap_err();
        assert!(
            e.to_string().contains("\"rows\" has type SELECTED_ROWS"),
            "{e}"
        );
        let c = Var::constant("w", DType::Fp32, vec![2]);
        let e = persistable_vars(&graph(vec![c.clone(), c])).unwrap_err();
        assert!(e.to_string().contains("\"w\" twice"), "{e}");
    }

    #[test]
    fn declared_dims_minus_one_match_any_extent() {
        let v = Var::constant("w", DType::Fp32, vec![-1, 4]);
        let data = [0u8; 32];
        let ok = TensorView::new(DType::Fp32, vec![2, 4], Vec::new(), &data).unwrap();
        assert!(check_declared(&v, &ok, "t").is_ok());
        let bad = TensorView::new(DType::Fp32, vec![4, 2], Vec::new(), &data).unwrap();
        assert!(check_declared(&v, &bad, "t").is_err());
        let rank = TensorView::new(DType::Fp32, vec![8], Vec::new(), &data).unwrap();
        assert!(check_declared(&v, &rank, "t").is_err());
    }

    #[test]
    fn variable_names_cannot_leave_the_directory() {
        let d = Path::new("dir");
        assert_eq!(var_file(d, "a/b").unwrap(), Path::new("dir/a/b"));
        for bad in ["", "../x", "/etc/passwd", "a/../../b", ".", "a\0b"] {
            assert!(var_file(d, bad).is_err(), "{bad:?}");
        }
    }
}
