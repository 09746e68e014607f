//! Moving models between modelzip archives and other frameworks' files.
//!
//! Every foreign format is one module and one [`Format`] value registered in
//! [`FORMATS`]; the `modelzip import` / `modelzip export` commands and
//! [`detect`] / [`format()`] work through that list only, so a new format is a new
//! module plus one line there.
//!
//! - [`onnx`]: ONNX models (`.onnx`, external data included) in and out, with every
//!   top-level initializer as a parameter and the rest of the model kept in `graph.fb`.
//! - [`paddle`]: Paddle inference models (`.pdmodel` + `.pdiparams`) and persistables
//!   directories in, `.pdmodel` + `.pdiparams` out, byte for byte.
//! - [`safetensors`]: safetensors files and sharded checkpoints in, one file or shards
//!   out (byte for byte for files the safetensors library wrote).
//! - [`tf`]: TensorFlow frozen GraphDefs (`.pb` binary, `.pbtxt` text) in and out, with
//!   every numeric `Const` as a parameter and the rest of the graph kept in `graph.fb`.
//! - [`tf::saved_model`]: TensorFlow SavedModel directories in and out (through [`tf`]'s
//!   registered format), every numeric checkpoint variable as a parameter and the rest
//!   kept verbatim under the tag's `saved_model/`.
//!
//! Each foreign format with a graph (ONNX, TensorFlow) is one folder
//! (`src/interop/<format>/`): its import and export, its protobuf types, the dumps of its
//! graph kind ([`crate::dump`] dispatches to them) and its variant rules (ONNX
//! quantization); safetensors, which has no graph, is one file. Paddle's programs
//! (ProgramDesc, PIR) are the seed encodings of [`crate::graph`] (their protobuf types in
//! `src/paddle_proto.rs`); `paddle/` holds their import and export. The graph kinds' stored forms are part of the
//! neutral model in [`crate::graph`], which never imports this module
//! (tests/it/structure.rs).
//!
//! Converting a tag's graph between `graph.pdmodel` and `graph.fb` inside an archive is
//! [`crate::archive::convert_graph`].

pub mod onnx;
pub mod paddle;
pub mod safetensors;
pub mod tf;

use crate::archive::{AppendMode, Appender, Archive, ArchiveWriter, Tag, TagWriter, WriteOptions};
use crate::error::{Error, ErrorKind, Result};
use crate::graph::Graph;
use crate::tensor::DType;
use bytes::Bytes;
use std::io::Write;
use std::path::{Path, PathBuf};

/// One foreign model format: imported as a tag, and written back from a tag. How its
/// files and tags are recognised ([`detect`], [`origin_of`]) is the crate's own
/// (`Recognise`), so the formats are the registered ones.
pub trait Format: Sync + Recognise {
    /// The name `--format` takes (`paddle`, `tf`).
    fn name(&self) -> &'static str;

    /// Imports `inputs` as tag `tag` of the archive at `archive` (created if absent).
    fn import(
        &self,
        archive: &Path,
        tag: &str,
        inputs: &[PathBuf],
        opts: &ImportOptions,
    ) -> Result<ImportReport>;

    /// Writes tag `tag` to `out` in this format.
    fn export(&self, tag: &Tag<'_>, out: &Path, opts: &ExportOptions) -> Result<Exported>;
}

mod recognise {
    use crate::archive::Tag;
    use crate::error::Result;
    use std::path::PathBuf;

    /// How a [`Format`](super::Format)'s files and tags are recognised: what [`detect`]
    /// and [`origin_of`] ask of each registered format. Public in this private module, so
    /// that no type outside the crate implements it (nor `Format`).
    ///
    /// [`detect`]: super::detect
    /// [`origin_of`]: super::origin_of
    pub trait Recognise {
        /// What the format is recognised from, for "none of these" errors
        /// (`a .pb binary or .pbtxt text GraphDef`).
        fn recognised_from(&self) -> &'static str;

        /// Whether the inputs name this format by their file names (extensions, a
        /// directory). Reads nothing.
        fn matches_name(&self, inputs: &[PathBuf]) -> bool;

        /// Whether the first input's content is this format (reads at most what is
        /// needed; a read failure is `false`, the import reports it).
        fn matches_content(&self, inputs: &[PathBuf]) -> bool;

        /// Whether the tag's graph came from this format (what `export` uses when no
        /// format is given).
        fn is_origin_of(&self, tag: &Tag<'_>) -> Result<bool>;
    }
}
use recognise::Recognise;

/// Every registered format, in the order detection tries them.
pub static FORMATS: &[&dyn Format] = &[
    // safetensors first: its names (.safetensors, an index, a directory holding one) are
    // the most specific, and Paddle claims any other directory but a TensorFlow
    // SavedModel's (tf claims that one).
    &safetensors::SafetensorsFormat,
    &paddle::PaddleFormat,
    &tf::TfFormat,
    &onnx::OnnxFormat,
];

/// The registered format named `name` (case-insensitive).
pub fn format(name: &str) -> Result<&'static dyn Format> {
    FORMATS
        .iter()
        .copied()
        .find(|f| f.name().eq_ignore_ascii_case(name))
        .ok_or_else(|| {
            ErrorKind::InvalidInput(format!(
                "unknown format {name:?} (known: {})",
                FORMATS
                    .iter()
                    .map(|f| f.name())
                    .collect::<Vec<_>>()
                    .join(", ")
            ))
            .into()
        })
}

/// The format of `inputs`: first by file names (extensions, a directory), then by the
/// first file's content. None matching is an error saying what was tried.
pub fn detect(inputs: &[PathBuf]) -> Result<&'static dyn Format> {
    let Some(first) = inputs.first() else {
        return Err(ErrorKind::InvalidInput("no input files given".into()).into());
    };
    // A missing input is that, not a file of no known format.
    std::fs::metadata(first).map_err(|e| Error::from(e).in_file(first))?;
    if let Some(f) = FORMATS.iter().find(|f| f.matches_name(inputs)) {
        return Ok(*f);
    }
    if let Some(f) = FORMATS.iter().find(|f| f.matches_content(inputs)) {
        return Ok(*f);
    }
    let tried: Vec<String> = FORMATS
        .iter()
        .map(|f| format!("{} ({})", f.name(), f.recognised_from()))
        .collect();
    Err(Error::new(ErrorKind::InvalidInput(format!(
        "not a model file of any known format; tried by name and content: {}",
        tried.join("; ")
    )))
    .in_file(first))
}

/// The format a tag came from, if any registered format claims it.
pub fn origin_of(tag: &Tag<'_>) -> Result<Option<&'static dyn Format>> {
    for f in FORMATS {
        if f.is_origin_of(tag)? {
            return Ok(Some(*f));
        }
    }
    Ok(None)
}

/// What an export wrote, whatever the format.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Exported {
    /// The tag exported, spelled as in tags.txt.
    pub tag: String,
    /// The format written.
    pub format: &'static str,
    /// The files written with their sizes in bytes, in the order written.
    pub files: Vec<(PathBuf, u64)>,
    /// The parameters written.
    pub params: Vec<String>,
    /// Parameters of the tag the exported model does not use (not written).
    pub unused: Vec<String>,
    /// Remarks worth telling the user (e.g. "converted from graph.fb").
    pub notes: Vec<String>,
    /// True when the graph was written in another encoding than the archive stores
    /// (Paddle: a graph.fb program written as a ProgramDesc `.pdmodel`).
    pub graph_converted: bool,
}

/// What a tag's graph is, when an export needs one of another kind.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(crate) enum GraphKind {
    /// No graph at all.
    None,
    /// No graph.fb, but a TensorFlow SavedModel kept under `saved_model/`.
    SavedModel,
    /// A Paddle program: graph.pdmodel, or a graph.fb that is neither TensorFlow nor ONNX.
    Paddle { fb: bool },
    /// A TensorFlow GraphDef in graph.fb.
    Tf,
    /// An ONNX model in graph.fb.
    Onnx,
    /// A Paddle PIR program (JSON) in graph.fb.
    Pir,
}

impl GraphKind {
    /// The kind of a tag without graph.pdmodel or graph.fb: a SavedModel tag holds its
    /// `saved_model.pb` (kept undecoded), any other has no graph at all.
    pub(crate) fn without_graph(tag: &Tag<'_>) -> GraphKind {
        if tf::saved_model::is_saved_model_tag(tag) {
            GraphKind::SavedModel
        } else {
            GraphKind::None
        }
    }

    /// The kind of a graph decoded from graph.fb.
    pub(crate) fn of_fb(g: &Graph) -> GraphKind {
        match g {
            Graph::Program(_) => GraphKind::Paddle { fb: true },
            Graph::Tf(_) => GraphKind::Tf,
            Graph::Onnx(_) => GraphKind::Onnx,
            Graph::Pir(_) => GraphKind::Pir,
        }
    }
}

/// The graph.fb graph of `tag` as the kind `take` accepts (it hands back any other), or
/// the error saying what the tag holds instead and how it does export (`target` names
/// the format asked for: `ONNX`, `TensorFlow`).
pub(crate) fn foreign_graph<T>(
    tag: &Tag<'_>,
    target: &str,
    take: impl FnOnce(Graph) -> std::result::Result<T, Graph>,
) -> Result<T> {
    let name = tag.name();
    let wrong = |has| wrong_graph(name, has, target);
    match tag.graph()? {
        None => Err(wrong(GraphKind::without_graph(tag))),
        Some((crate::graph::GraphFormat::ProgramDesc, _)) => {
            Err(wrong(GraphKind::Paddle { fb: false }))
        }
        Some((crate::graph::GraphFormat::FlatBuffers, bytes)) => {
            let g = Graph::from_flatbuffers(&bytes)
                .map_err(|e| e.in_entry(format!("{name}/graph.fb")))?;
            take(g).map_err(|other| wrong(GraphKind::of_fb(&other)))
        }
    }
}

/// The error for exporting tag `name`, whose graph is `has`, as `target` (which needs a
/// graph imported from `target`): says what the tag holds and the formats it does
/// export as, e.g. `the graph of tag "v1" is a Paddle program (graph.fb); TensorFlow
/// export needs a graph imported from TensorFlow; export it as "paddle" (--format
/// paddle), or as "safetensors" for the parameters only`.
pub(crate) fn wrong_graph(name: &str, has: GraphKind, target: &str) -> Error {
    let (what, format) = match has {
        GraphKind::None => (format!("tag {name:?} has no graph"), None),
        GraphKind::SavedModel => (
            format!(
                "tag {name:?} holds a TensorFlow SavedModel (saved_model/saved_model.pb, \
                 kept undecoded; no graph.fb)"
            ),
            Some("tf"),
        ),
        GraphKind::Paddle { fb } => (
            format!(
                "the graph of tag {name:?} is a Paddle program ({})",
                if fb { "graph.fb" } else { "graph.pdmodel" }
            ),
            Some("paddle"),
        ),
        GraphKind::Tf => (
            format!("the graph of tag {name:?} is a TensorFlow GraphDef (graph.fb)"),
            Some("tf"),
        ),
        GraphKind::Onnx => (
            format!("the graph of tag {name:?} is an ONNX model (graph.fb)"),
            Some("onnx"),
        ),
        GraphKind::Pir => (
            format!("the graph of tag {name:?} is a Paddle 3 PIR program (graph.fb)"),
            Some("paddle"),
        ),
    };
    let then = match format {
        Some(f) => format!(
            "export it as {f:?} (--format {f}), or as \"safetensors\" for the parameters only"
        ),
        None => "export its parameters as \"safetensors\" (--format safetensors)".to_string(),
    };
    let needs = if target == "Paddle" {
        "a Paddle program (graph.pdmodel, or a graph.fb holding one)".to_string()
    } else {
        format!("a graph imported from {target}")
    };
    ErrorKind::InvalidInput(format!("{what}; {target} export needs {needs}; {then}")).into()
}

/// Whether a file's extension is `ext` (ASCII case-insensitive).
pub(crate) fn has_ext(p: &Path, ext: &str) -> bool {
    p.extension()
        .and_then(|e| e.to_str())
        .is_some_and(|e| e.eq_ignore_ascii_case(ext))
}

/// The one input file of a format that imports exactly one (`takes`: what it takes, for
/// the error, e.g. "one .onnx file").
pub(crate) fn single_input<'a>(
    inputs: &'a [PathBuf],
    format: &str,
    takes: &str,
) -> Result<&'a Path> {
    match inputs {
        [p] => Ok(p),
        _ => Err(Error::new(ErrorKind::InvalidInput(format!(
            "{format} import takes {takes}, not {}",
            inputs.len()
        )))),
    }
}

/// A whole protobuf model file (ONNX, TensorFlow, a ProgramDesc), refused past 2 GiB
/// (protobuf's own limit), mapped as by [`map_input`].
pub(crate) fn read_whole(p: &Path) -> Result<Bytes> {
    let len = std::fs::metadata(p)
        .map_err(|e| Error::from(e).in_file(p))?
        .len();
    if len > 1 << 31 {
        return Err(Error::new(ErrorKind::LimitExceeded {
            what: "model file size",
            size: len,
            limit: 1 << 31,
        })
        .in_file(p));
    }
    map_input(p)
}

/// An input file's bytes, mapped read-only (not read into memory): what an import uses
/// of it costs page cache (file-backed pages the kernel can drop), not the process's own
/// memory, and protobuf `bytes` fields decoded from it ([`Bytes`] buffers) are slices of
/// the map. A file that is not a regular file (a pipe) is read whole; an empty one is
/// empty (it cannot be mapped).
pub(crate) fn map_input(p: &Path) -> Result<Bytes> {
    let file = std::fs::File::open(p).map_err(|e| Error::from(e).in_file(p))?;
    let meta = file.metadata().map_err(|e| Error::from(e).in_file(p))?;
    if meta.is_dir() {
        return Err(Error::from(std::io::Error::new(
            std::io::ErrorKind::IsADirectory,
            "is a directory, not a file",
        ))
        .in_file(p));
    }
    if !meta.is_file() {
        return read_file(p).map(Bytes::from);
    }
    if meta.len() == 0 {
        return Ok(Bytes::new());
    }
    // Safety: the map is read-only and owned by the `Bytes` (and every slice of it), so it
    // outlives the bytes borrowed from it. Imports never write their inputs. Another
    // program truncating an input while it is imported is outside what this library can
    // guard against (reads past the new end fault, as for every mapped file here:
    // docs/RELIABILITY.md); the archive is then left as a killed import leaves it.
    let map = unsafe { memmap2::Mmap::map(&file) }.map_err(|e| Error::from(e).in_file(p))?;
    Ok(Bytes::from_owner(map))
}

/// Up to `n` first bytes of a file (empty when it cannot be read).
pub(crate) fn head(p: &Path, n: u64) -> Vec<u8> {
    use std::io::Read;
    let mut out = Vec::new();
    if let Ok(f) = std::fs::File::open(p) {
        let _ = f.take(n).read_to_end(&mut out);
    }
    out
}

/// How imports write the archive.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ImportOptions {
    /// How the tag is added when the archive exists (in place by default).
    pub mode: AppendMode,
    /// Lock waiting, fsync, text compression and progress (one unit per parameter written).
    pub write: WriteOptions,
    /// The new tag's metadata.json (a JSON object; `created` is added as for every tag),
    /// e.g. a checkpoint's `{"step": N, "metrics": {...}}` (docs/checkpoints.md). An
    /// import that stores metadata of its own (safetensors' `__metadata__`) adds its key
    /// to this object. None: only what the import stores.
    pub metadata: Option<Vec<u8>>,
}

/// One parameter an import stored.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ImportedParam {
    /// Parameter (variable) name.
    pub name: String,
    /// Element type.
    pub dtype: DType,
    /// Dimensions.
    pub dims: Vec<u64>,
    /// The older tag whose identical tensor file is referenced instead of a new copy.
    pub shared_from: Option<String>,
}

/// What an import did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ImportReport {
    /// The new tag.
    pub tag: String,
    /// True when the archive did not exist and was created.
    pub created: bool,
    /// The graph entry stored (`graph.pdmodel`, `graph.fb`), when a model was imported.
    pub graph_entry: Option<&'static str>,
    /// Size of the stored graph entry, when a model was imported.
    pub graph_bytes: Option<u64>,
    /// The parameters, in params.txt order (names sorted by byte value).
    pub params: Vec<ImportedParam>,
    /// For an `s3://` archive: the remote append's versions and costs (bytes uploaded,
    /// copied by the store, requests).
    #[cfg(feature = "remote")]
    pub remote: Option<crate::remote::RemoteWrite>,
}

/// What writing an imported tag did: whether it created the archive and, for an `s3://`
/// archive, what the remote append cost.
pub(crate) struct Written {
    pub created: bool,
    #[cfg(feature = "remote")]
    pub remote: Option<crate::remote::RemoteWrite>,
}

/// Options of every format's export.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExportOptions {
    /// Replace existing `PREFIX.pdmodel` / `PREFIX.pdiparams` (default false: refuse).
    pub overwrite: bool,
    /// fsync the files and their directory before returning (default true).
    pub fsync: bool,
    /// Largest number of bytes the export may write (all its files together), checked
    /// before anything is written; `None` (the default) is 16 GiB or 100 times the
    /// archive's size, whichever is larger. A program may name one tensor file under many variable names, so
    /// what an export writes is not bounded by the archive's size.
    pub max_output: Option<u64>,
    /// ONNX only: write the initializers to `PATH.data` beside the model, at 64-byte
    /// aligned offsets, instead of inside it (default false). Other formats ignore it
    /// (`modelzip export` refuses `--external-data` for them).
    pub external_data: bool,
    /// safetensors only: write a sharded checkpoint into `out`, an existing directory
    /// (shards `model-0000I-of-0000N.safetensors` and `model.safetensors.index.json`),
    /// the tensors cut into shards of at most this many bytes of data as `transformers`
    /// cuts them (a tensor larger than that gets a shard of its own). `None` (the
    /// default): a directory `out` gets the shards the tag was imported from, or shards
    /// of 5 GB (transformers' default); a file `out` gets one file. Every other format
    /// refuses it (an `InvalidInput` error, before anything is written).
    pub max_shard_bytes: Option<u64>,
}

impl Default for ExportOptions {
    fn default() -> Self {
        ExportOptions {
            overwrite: false,
            fsync: true,
            max_output: None,
            external_data: false,
            max_shard_bytes: None,
        }
    }
}

/// Refuses `opts.max_shard_bytes` (safetensors only) for an export as `format`.
pub(crate) fn refuse_shard_size(opts: &ExportOptions, format: &str) -> Result<()> {
    match opts.max_shard_bytes {
        Some(n) => Err(ErrorKind::InvalidInput(format!(
            "a shard size (max_shard_bytes {n}, --max-shard-size) is for safetensors \
             exports; a {format} export writes no shards"
        ))
        .into()),
        None => Ok(()),
    }
}

/// The default output limit of an export or extract of an archive of `archive_len`
/// bytes: 16 GiB or 100 times the archive's size, whichever is larger.
pub(crate) fn default_max_output(archive_len: u64) -> u64 {
    (16u64 << 30).max(archive_len.saturating_mul(100))
}

/// Refuses an export of `total` bytes (`what`) above `opts.max_output` (default:
/// [`default_max_output`] of `tag`'s archive), before anything is written.
pub(crate) fn check_output_size(
    tag: &Tag<'_>,
    opts: &ExportOptions,
    what: &'static str,
    total: u64,
) -> Result<()> {
    let limit = opts
        .max_output
        .unwrap_or_else(|| default_max_output(tag.archive().len_bytes()));
    if total > limit {
        return Err(Error::new(ErrorKind::LimitExceeded {
            what,
            size: total,
            limit,
        }));
    }
    Ok(())
}

/// Where a new tag goes: a new archive or an existing one, or (feature `remote`) the
/// archive at an `s3://` URL, by a remote append (created when absent).
pub(crate) enum Target {
    New(Box<ArchiveWriter>),
    Add(Appender),
    #[cfg(feature = "remote")]
    Remote(Box<crate::remote::RemoteAppender>),
}

impl Target {
    /// Opens the archive at `path` for adding, or starts creating it when absent.
    fn open(path: &Path, opts: &ImportOptions) -> Result<(Target, bool)> {
        #[cfg(feature = "remote")]
        if let Some(url) = crate::archive::url_of(path) {
            if opts.mode == AppendMode::Rewrite {
                return Err(ErrorKind::InvalidInput(format!(
                    "{url} is appended to where it lies (a remote append): a rewrite does not apply to a URL"
                ))
                .into());
            }
            let remote = crate::remote::RemoteOptions::default();
            let a = crate::remote::RemoteAppender::open(url, &remote, &opts.write)?;
            let created = a.creates();
            return Ok((Target::Remote(Box::new(a)), created));
        }
        let exists = path
            .try_exists()
            .map_err(|e| Error::from(e).in_file(path))?;
        if !exists {
            let w = ArchiveWriter::create_with(path, &opts.write)?;
            // Checked again under the write lock: another writer may have created the
            // archive since, and finishing would replace it.
            if !path
                .try_exists()
                .map_err(|e| Error::from(e).in_file(path))?
            {
                return Ok((Target::New(Box::new(w)), true));
            }
        }
        let a = Appender::open_with(path, opts.mode, &opts.write)?;
        Ok((Target::Add(a), false))
    }

    fn begin_tag(&mut self, name: &str) -> Result<TagWriter<'_>> {
        match self {
            Target::New(w) => w.begin_tag(name),
            Target::Add(a) => a.begin_tag(name),
            #[cfg(feature = "remote")]
            Target::Remote(a) => a.begin_tag(name),
        }
    }

    /// Finishes the tag; for a remote append, returns what it cost.
    fn finish(self, created: bool) -> Result<Written> {
        match self {
            Target::New(w) => w.finish()?,
            Target::Add(a) => a.finish()?,
            #[cfg(feature = "remote")]
            Target::Remote(a) => {
                return Ok(Written {
                    created,
                    remote: Some(a.finish()?),
                });
            }
        }
        Ok(Written {
            created,
            #[cfg(feature = "remote")]
            remote: None,
        })
    }
}

/// Writes one new tag: creates the archive, or adds to it as `opts.mode` says.
/// Returns whether the archive was created (and a remote append's costs).
pub(crate) fn write_tag(
    archive: &Path,
    tag: &str,
    opts: &ImportOptions,
    fill: impl FnOnce(&mut TagWriter<'_>) -> Result<()>,
) -> Result<Written> {
    let run = || -> Result<Written> {
        let (mut target, created) = Target::open(archive, opts)?;
        let mut w = target.begin_tag(tag)?;
        fill(&mut w)?;
        if let Some(meta) = &opts.metadata
            && !w.has_metadata()
        {
            w.metadata(meta)?;
        }
        w.finish()?;
        target.finish(created)
    };
    run().map_err(|e| e.in_file(archive))
}

/// Reads back what was stored for the report.
pub(crate) fn report(
    archive: &Path,
    tag: &str,
    written: Written,
    graph_bytes: Option<u64>,
) -> Result<ImportReport> {
    #[cfg(feature = "remote")]
    let a = match crate::archive::url_of(archive) {
        Some(url) => crate::remote::RemoteOptions::default().open(url)?,
        None => Archive::open(archive)?,
    };
    #[cfg(not(feature = "remote"))]
    let a = Archive::open(archive)?;
    let t = a.tag(tag)?;
    let graph_entry = t.graph()?.map(|(enc, _)| enc.file_name());
    // The dtypes and dims from the tensors' headers (from a remote archive: one batch,
    // not the data).
    let locations: Vec<_> = t.params().iter().map(|p| &p.location).collect();
    let heads = a.tensor_heads(&locations)?;
    let mut params = Vec::with_capacity(t.params().len());
    for (p, h) in t.params().iter().zip(heads) {
        params.push(ImportedParam {
            name: p.name.clone(),
            dtype: h.dtype,
            dims: h.dims,
            shared_from: p.location.shared.then(|| p.location.tag.to_string()),
        });
    }
    Ok(ImportReport {
        tag: t.name().to_string(),
        created: written.created,
        graph_entry,
        graph_bytes,
        params,
        #[cfg(feature = "remote")]
        remote: written.remote,
    })
}

/// The tag's parameters an export did not use (`used`: the names it wrote), in the tag's
/// order.
pub(crate) fn unused_params(tag: &Tag<'_>, used: &[String]) -> Vec<String> {
    let used: std::collections::HashSet<&str> = used.iter().map(String::as_str).collect();
    tag.params()
        .iter()
        .filter(|p| !used.contains(p.name.as_str()))
        .map(|p| p.name.clone())
        .collect()
}

pub(crate) fn read_file(path: &Path) -> Result<Vec<u8>> {
    std::fs::read(path).map_err(|e| Error::from(e).in_file(path))
}

pub(crate) fn file_len(temp: &Path, target: &Path) -> Result<u64> {
    std::fs::metadata(temp)
        .map(|m| m.len())
        .map_err(|e| Error::from(e).in_file(target))
}

/// Writes a temp file beside `target` (removed on drop unless persisted).
pub(crate) fn write_temp(
    target: &Path,
    fsync: bool,
    fill: impl FnOnce(&mut dyn Write) -> std::io::Result<()>,
) -> Result<tempfile::NamedTempFile> {
    let temp = crate::archive::new_temp_beside(target)?;
    let written = (|| -> std::io::Result<()> {
        let f = temp.as_file().try_clone()?;
        let mut w = std::io::BufWriter::with_capacity(
            1 << 20,
            crate::archive::EarlyWriteback::new(f, 0, fsync),
        );
        fill(&mut w)?;
        w.flush()?;
        drop(w);
        if fsync {
            temp.as_file().sync_all()?;
        }
        Ok(())
    })();
    written.map_err(|e| Error::from(e).in_file(target))?;
    Ok(temp)
}

/// Puts the files of one export (a model and its data, shards and their index) at their
/// targets, in the order given, as one set as far as renames allow. With `overwrite`, an
/// existing target (and each of `stale`, an earlier export's file this one does not
/// write) is first moved aside, to a hidden name beside it; a failure then removes
/// every file this call put in place and moves back every one moved aside, so an error
/// leaves the files as they were (without `overwrite`, nothing existed to lose). After
/// the last rename the moved-aside files are removed. A crash between the renames can
/// leave a mix of old and new files, with the old ones' moved-aside copies beside them
/// (`.NAME.modelzip-old-…`), which the next whole set at those targets deletes once
/// they are older than [`MOVED_ASIDE_GRACE`].
pub(crate) fn persist_all(
    temps: Vec<(tempfile::NamedTempFile, PathBuf)>,
    stale: &[PathBuf],
    overwrite: bool,
) -> Result<()> {
    // Two files of the set at one path: the second would replace the first (and, moved
    // aside as an old file, delete it).
    let mut targets = std::collections::HashSet::new();
    if let Some((_, t)) = temps.iter().find(|(_, t)| !targets.insert(t)) {
        return Err(Error::new(ErrorKind::InvalidInput(
            "the export would write two files at this path".into(),
        ))
        .in_file(t));
    }
    let mut aside: Vec<(PathBuf, PathBuf)> = Vec::new();
    let mut placed: Vec<PathBuf> = Vec::new();
    let undo = |placed: &[PathBuf], aside: &[(PathBuf, PathBuf)]| {
        for p in placed.iter().rev() {
            let _ = std::fs::remove_file(p);
        }
        for (a, target) in aside.iter().rev() {
            let _ = std::fs::rename(a, target);
        }
    };
    let move_aside = |target: &Path, aside: &mut Vec<(PathBuf, PathBuf)>| -> Result<()> {
        if !overwrite || target.symlink_metadata().is_err() {
            return Ok(());
        }
        let name = target.file_name().unwrap_or_default().to_string_lossy();
        // The process, the time and the position in the set: no other file's name (a
        // rename onto one would replace it).
        let a = crate::archive::parent_dir(target).join(format!(
            ".{name}.modelzip-old-{}-{:08x}-{}",
            std::process::id(),
            std::time::UNIX_EPOCH
                .elapsed()
                .map_or(0, |d| d.subsec_nanos()),
            aside.len()
        ));
        std::fs::rename(target, &a).map_err(|e| Error::from(e).in_file(target))?;
        aside.push((a, target.to_path_buf()));
        Ok(())
    };
    for path in stale {
        if let Err(e) = move_aside(path, &mut aside) {
            undo(&placed, &aside);
            return Err(e);
        }
    }
    for (temp, target) in temps {
        let put = move_aside(&target, &mut aside).and_then(|()| persist(temp, &target, false));
        if let Err(e) = put {
            undo(&placed, &aside);
            return Err(e);
        }
        placed.push(target);
    }
    for (a, _) in &aside {
        let _ = std::fs::remove_file(a);
    }
    remove_dead_moved_aside(placed.iter().chain(stale));
    Ok(())
}

/// How long a moved-aside file ([`persist_all`]) must have gone unmodified before another
/// export of the same target takes it for a killed export's: a live export keeps one for
/// the few renames of its set.
const MOVED_ASIDE_GRACE: std::time::Duration = std::time::Duration::from_secs(15 * 60);

/// Deletes the moved-aside copies of `targets` (`.NAME.modelzip-old-…`) that an export
/// killed between its renames left, once the targets hold a whole new export: they are
/// older versions of them, which that export was replacing. Each directory is read once
/// (a sharded export may place thousands of files in one).
fn remove_dead_moved_aside<'p>(targets: impl Iterator<Item = &'p PathBuf>) {
    let mut names: std::collections::HashMap<PathBuf, std::collections::HashSet<&str>> =
        std::collections::HashMap::new();
    for t in targets {
        if let Some(name) = t.file_name().and_then(|n| n.to_str()) {
            names
                .entry(crate::archive::parent_dir(t))
                .or_default()
                .insert(name);
        }
    }
    for (dir, names) in names {
        let Ok(rd) = std::fs::read_dir(&dir) else {
            continue;
        };
        for e in rd.flatten() {
            let copy_of = e.file_name().to_str().and_then(|n| {
                let rest = n.strip_prefix('.')?;
                let (name, _) = rest.rsplit_once(".modelzip-old-")?;
                names.contains(name).then_some(())
            });
            let dead = copy_of.is_some()
                && e.metadata()
                    .and_then(|m| m.modified())
                    .ok()
                    .and_then(|t| t.elapsed().ok())
                    .is_some_and(|age| age > MOVED_ASIDE_GRACE);
            if dead {
                let _ = std::fs::remove_file(e.path());
            }
        }
    }
}

pub(crate) fn persist(temp: tempfile::NamedTempFile, target: &Path, overwrite: bool) -> Result<()> {
    let done = if overwrite {
        temp.persist(target).map(|_| ())
    } else {
        temp.persist_noclobber(target).map(|_| ())
    };
    done.map_err(|e| Error::from(e.error).in_file(target))
}

/// Refuses an output path that is a directory (even with `overwrite`: a file cannot
/// replace it, and saying "already exists" would suggest `--force`), and an existing file
/// unless `overwrite`.
pub(crate) fn refuse_existing(tag: &Tag<'_>, target: &Path, overwrite: bool) -> Result<()> {
    // The archive being read: `--out model.zip --force` replaced it with the export.
    if let Some(archive) = tag.archive().path()
        && same_file(archive, target)
    {
        return Err(Error::new(ErrorKind::InvalidInput(
            "is the archive the tag is read from; refusing to replace it with the export".into(),
        ))
        .in_file(target));
    }
    if target.is_dir() {
        return Err(Error::from(std::io::Error::new(
            std::io::ErrorKind::IsADirectory,
            "is a directory; the export writes a file here, give a file path",
        ))
        .in_file(target));
    }
    if !overwrite && target.exists() {
        return Err(Error::from(std::io::Error::new(
            std::io::ErrorKind::AlreadyExists,
            "file already exists; refusing to overwrite it",
        ))
        .in_file(target));
    }
    Ok(())
}

/// Whether `a` and `b` are the same existing file (hard and symbolic links included).
fn same_file(a: &Path, b: &Path) -> bool {
    let (Ok(x), Ok(y)) = (std::fs::metadata(a), std::fs::metadata(b)) else {
        return false;
    };
    #[cfg(unix)]
    {
        use std::os::unix::fs::MetadataExt;
        x.dev() == y.dev() && x.ino() == y.ino()
    }
    #[cfg(not(unix))]
    {
        let _ = (x, y);
        matches!((a.canonicalize(), b.canonicalize()), (Ok(p), Ok(q)) if p == q)
    }
}

/// Writes `bytes` to `target` through a temp file beside it (fsynced when asked, then
/// renamed; existing files refused unless `overwrite`). `check` is given the size written
/// before the rename: its error leaves `target` as it was (the temp file is deleted).
/// Returns the size written.
pub(crate) fn write_file_atomically(
    tag: &Tag<'_>,
    target: &Path,
    overwrite: bool,
    fsync: bool,
    fill: impl FnOnce(&mut dyn Write) -> std::io::Result<()>,
    check: impl FnOnce(u64) -> Result<()>,
) -> Result<u64> {
    let dir = crate::archive::parent_dir(target);
    if !dir.is_dir() {
        return Err(Error::new(ErrorKind::InvalidInput(
            "the output directory does not exist".into(),
        ))
        .in_file(&dir));
    }
    refuse_existing(tag, target, overwrite)?;
    let temp = write_temp(target, fsync, fill)?;
    let len = file_len(temp.path(), target)?;
    check(len)?;
    persist(temp, target, overwrite)?;
    if fsync {
        std::fs::File::open(&dir)
            .and_then(|d| d.sync_all())
            .map_err(|e| Error::from(e).in_file(&dir))?;
    }
    Ok(len)
}

#[cfg(test)]
mod tests {
    use super::persist_all;
    use std::io::Write;
    use std::path::Path;

    fn temp_in(dir: &Path, text: &str) -> tempfile::NamedTempFile {
        let mut t = tempfile::NamedTempFile::new_in(dir).unwrap();
        t.write_all(text.as_bytes()).unwrap();
        t
    }

    fn listing(dir: &Path) -> Vec<String> {
        let mut names: Vec<String> = std::fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        names.sort();
        names
    }

    /// A set of files replaced with `overwrite`: on a failure of a later rename, the
    /// earlier targets hold their old contents again and a stale file is back; on
    /// success the new contents are in place and nothing else is left.
    #[test]
    fn a_failed_set_leaves_the_old_files_and_a_whole_one_replaces_them() {
        let d = tempfile::tempdir().unwrap();
        let dir = d.path();
        for (name, text) in [("a.bin", "OLD A"), ("b.bin", "OLD B"), ("stale", "S")] {
            std::fs::write(dir.join(name), text).unwrap();
        }
        let before = listing(dir);
        // The last target's directory does not exist: its rename fails.
        let err = persist_all(
            vec![
                (temp_in(dir, "NEW A"), dir.join("a.bin")),
                (temp_in(dir, "NEW B"), dir.join("b.bin")),
                (temp_in(dir, "NEW C"), dir.join("missing/c.bin")),
            ],
            &[dir.join("stale")],
            true,
        )
        .unwrap_err();
        assert!(err.to_string().contains("c.bin"), "{err}");
        assert_eq!(listing(dir), before);
        assert_eq!(std::fs::read_to_string(dir.join("a.bin")).unwrap(), "OLD A");
        assert_eq!(std::fs::read_to_string(dir.join("b.bin")).unwrap(), "OLD B");

        persist_all(
            vec![
                (temp_in(dir, "NEW A"), dir.join("a.bin")),
                (temp_in(dir, "NEW B"), dir.join("b.bin")),
            ],
            &[dir.join("stale")],
            true,
        )
        .unwrap();
        assert_eq!(listing(dir), ["a.bin", "b.bin"]);
        assert_eq!(std::fs::read_to_string(dir.join("a.bin")).unwrap(), "NEW A");
    }

    /// A set that would write two files at one path is refused before any rename (the
    /// second replaced the first, and, moved aside as an old file, deleted it).
    #[test]
    fn two_files_at_one_path_are_refused() {
        let d = tempfile::tempdir().unwrap();
        let dir = d.path();
        std::fs::write(dir.join("a.bin"), "OLD").unwrap();
        let e = persist_all(
            vec![
                (temp_in(dir, "ONE"), dir.join("a.bin")),
                (temp_in(dir, "TWO"), dir.join("a.bin")),
            ],
            &[],
            true,
        )
        .unwrap_err();
        assert!(e.to_string().contains("two files at this path"), "{e}");
        assert_eq!(listing(dir), ["a.bin"]);
        assert_eq!(std::fs::read_to_string(dir.join("a.bin")).unwrap(), "OLD");
    }

    /// The moved-aside copies an export killed between its renames left are deleted by
    /// the next whole export of the same files, once older than the grace; a fresh one
    /// (a live export's) and other files are kept.
    #[test]
    fn a_killed_exports_moved_aside_copies_go_with_the_next_export() {
        let d = tempfile::tempdir().unwrap();
        let dir = d.path();
        let old = std::time::SystemTime::now() - super::MOVED_ASIDE_GRACE * 2;
        for name in [
            ".a.bin.modelzip-old-1-00000000-0",
            ".b.bin.modelzip-old-1-00000000-1",
        ] {
            let f = std::fs::File::create(dir.join(name)).unwrap();
            f.set_modified(old).unwrap();
        }
        std::fs::write(dir.join(".a.bin.modelzip-old-2-00000000-0"), "live").unwrap();
        let other = std::fs::File::create(dir.join(".c.bin.modelzip-old-1-00000000-0")).unwrap();
        other.set_modified(old).unwrap();
        persist_all(
            vec![
                (temp_in(dir, "NEW A"), dir.join("a.bin")),
                (temp_in(dir, "NEW B"), dir.join("b.bin")),
            ],
            &[],
            false,
        )
        .unwrap();
        assert_eq!(
            listing(dir),
            [
                ".a.bin.modelzip-old-2-00000000-0",
                ".c.bin.modelzip-old-1-00000000-0",
                "a.bin",
                "b.bin"
            ]
        );
    }
}
