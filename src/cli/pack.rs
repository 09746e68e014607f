//! `modelzip pack`: create an archive or add a tag from a directory of tensor files.

use super::common::{
    WriteArgs, archive_dir, is_url, open, refuse_directory, refuse_non_archive, remote_write_fields,
};
use super::output::{print, print_json};
use super::progress::Progress;
use super::{CliError, Outcome};
use modelzip::Graph;
use modelzip::tensor;
use modelzip::{AppendMode, Appender, ArchiveWriter, GraphFormat, TagWriter, validate_tag_name};
use serde_json::json;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// Create ARCHIVE with tag T, or add tag T to an existing ARCHIVE, from a directory
/// of Paddle LoDTensor files (a persistables directory).
///
/// Each file under DIR becomes a parameter named by its path relative to DIR with
/// `/` separators, in sorted order; symlinks to files and directories are followed.
/// ARCHIVE must not be inside DIR (or UPDATER). A `__model__` (ProgramDesc) or
/// `graph.fb` at the root of DIR is the tag's graph, not a parameter, so what
/// `extract` writes packs back into the same tag; --graph FILE wins over it. A DIR with neither parameters
/// nor a graph is refused (an empty tag is most likely a wrong path).
/// The graph is decoded before anything is written (graph.fb through the FlatBuffers
/// verifier); a Paddle 3 PIR program (.json) is checked and kept byte for byte in the
/// tag's graph.fb. With --updater, each file `UPDATER/<param>/<array>` is a
/// state array of <param> (the directory path), arrays in sorted file-name order.
/// Tensors equal to ones already in the archive are stored once.
///
/// Adding to an existing archive appends in place by default (cost proportional to
/// the new tag, crash-safe with a rollback journal); --rewrite writes a new file
/// and renames it over the old one.
///
/// ARCHIVE may be an s3:// or az:// URL: the tag is appended to the object where it lies (its
/// old bytes copied by the store, only the new tag, tables and central directory
/// uploaded), committed only if the object is still the version read; a new object is
/// created only if none appears meanwhile (docs/REMOTE.md, "Remote appends").
///
/// Prints one line on success: the tag, its graph (if any) and where it came from, its
/// parameter count and how many of its tensors are shared with older tags (--json:
/// one JSON document instead).
///
/// Example:
///   modelzip pack model.zip --tag step-1000 ckpt/params --updater ckpt/adam
///   modelzip pack model.zip --tag fp32 model_dir --graph model.pdmodel
///   modelzip pack model.zip --tag step-2000 ckpt/params --json
///   modelzip pack ck.zip --tag step-3000 ckpt/params --step 3000 --metric loss=0.31 --metric lr=1e-4
///   modelzip extract model.zip --tag fp32 --out fp32/ && modelzip pack copy.zip fp32/ --tag fp32
#[derive(clap::Args, Debug)]
#[command(verbatim_doc_comment)]
#[command(mut_arg("json", |a| a.help(r#"Print one JSON document: {"archive", "tag", "created", "mode", "params", "updater_arrays", "shared", "graph"}; for an s3:// or az:// ARCHIVE also "version", "previous_version", "bytes_uploaded", "bytes_copied", "bytes_reread", "requests", "stale_uploads_aborted""#)))]
pub struct Args {
    /// The archive to create or add to.
    archive: PathBuf,
    /// Directory of LoDTensor files, one per parameter.
    dir: PathBuf,
    /// Name of the new tag.
    #[arg(long)]
    tag: String,
    /// Graph file: a Paddle .pdmodel (ProgramDesc), a Paddle 3 PIR program (.json) or a
    /// modelzip graph.fb (default: DIR/__model__ or DIR/graph.fb, if present).
    #[arg(long)]
    graph: Option<PathBuf>,
    /// Directory of updater (optimizer) state: UPDATER/<param>/<array>, each <param> a parameter in DIR.
    #[arg(long)]
    updater: Option<PathBuf>,
    /// Add in place (the default when the archive exists).
    #[arg(long, conflicts_with = "rewrite")]
    append: bool,
    /// Add by rewriting the whole archive to a new file and renaming it.
    #[arg(long)]
    rewrite: bool,
    #[command(flatten)]
    meta: super::tag_meta::MetaArgs,
    #[command(flatten)]
    write: WriteArgs,
}

/// Files under `dir`, as (name relative to dir with `/`, path), sorted by name.
fn tensor_files(dir: &Path, what: &str) -> Result<Vec<(String, PathBuf)>, CliError> {
    let meta = std::fs::metadata(dir)
        .map_err(|e| CliError::Failed(format!("cannot read {}: {e}", dir.display())))?;
    if !meta.is_dir() {
        return Err(CliError::Failed(format!(
            "cannot pack {what} {}: not a directory (pack reads a directory of LoDTensor files, one per tensor)",
            dir.display()
        )));
    }
    let mut out = Vec::new();
    // Symlinks are followed (a directory assembled from links packs like a copy of
    // it); walkdir refuses a link that loops back to a directory it is inside.
    for entry in walkdir::WalkDir::new(dir)
        .follow_links(true)
        .sort_by_file_name()
    {
        let entry = entry.map_err(|e| {
            let path = e.path().unwrap_or(dir).display().to_string();
            match e.io_error() {
                Some(io) => CliError::Failed(format!("cannot read {path}: {io}")),
                None => CliError::Failed(format!("cannot read {path}: {e}")),
            }
        })?;
        if !entry.file_type().is_file() {
            continue;
        }
        let not_utf8 = || {
            CliError::Failed(format!(
                "cannot pack {}: file name is not UTF-8 (parameter names are) (file {})",
                dir.display(),
                entry.path().display()
            ))
        };
        let rel = entry.path().strip_prefix(dir).map_err(|_| not_utf8())?;
        let parts: Option<Vec<&str>> = rel.components().map(|c| c.as_os_str().to_str()).collect();
        let name = parts.ok_or_else(not_utf8)?.join("/");
        out.push((name, entry.path().to_path_buf()));
    }
    out.sort();
    Ok(out)
}

/// Refuses an archive whose directory is `dir` or lies under it: the archive and its
/// sidecar files (lock, journal, temp file) would be read as tensor files, by this
/// `pack` or the next one. Paths are compared after resolving symlinks.
fn refuse_archive_inside(archive: &Path, dir: &Path, what: &str) -> Result<(), CliError> {
    let Ok(dir_real) = std::fs::canonicalize(dir) else {
        return Ok(()); // tensor_files says what is wrong with it
    };
    // Where the archive's file is (its lock and temp files go there), and where the
    // name given is (a symlink to the archive there would be read too).
    let given = match archive.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => Path::new("."),
    };
    let places = [archive_dir(archive), std::fs::canonicalize(given).ok()];
    match places.iter().flatten().find(|a| a.starts_with(&dir_real)) {
        Some(_) => Err(CliError::Failed(format!(
            "cannot pack {what} {}: the archive {} is inside it (the archive and its .lock file would be read as tensor files); write the archive outside the directory",
            dir.display(),
            archive.display()
        ))),
        _ => Ok(()),
    }
}

/// The root file names of a persistables directory that hold its graph, not a
/// parameter: what `extract` writes (and `__model__` is what Paddle writes).
const GRAPH_FILES: [(&str, GraphFormat); 2] = [
    ("__model__", GraphFormat::ProgramDesc),
    ("graph.fb", GraphFormat::FlatBuffers),
];

/// A graph read and decoded before anything is written.
struct GraphFile {
    path: PathBuf,
    encoding: GraphFormat,
    bytes: Vec<u8>,
}

/// Reads a graph file and checks that it decodes: graph.fb through the FlatBuffers
/// verifier, anything else as a Paddle ProgramDesc.
fn read_graph(path: &Path, encoding: Option<GraphFormat>) -> Result<GraphFile, CliError> {
    let bytes = std::fs::read(path).map_err(|e| {
        if path.is_dir() {
            CliError::Failed(format!(
                "cannot read graph {}: it is a directory, not a graph file",
                path.display()
            ))
        } else {
            CliError::Failed(format!("cannot read graph {}: {e}", path.display()))
        }
    })?;
    let encoding = encoding.unwrap_or_else(|| {
        let is_fb = path.extension().is_some_and(|e| e == "fb")
            || GraphFormat::sniff(&bytes) == Some(GraphFormat::FlatBuffers);
        if is_fb {
            GraphFormat::FlatBuffers
        } else {
            GraphFormat::ProgramDesc
        }
    });
    if encoding == GraphFormat::ProgramDesc && modelzip::graph::looks_like_pir(&bytes) {
        // A Paddle 3 PIR program: kept byte for byte in a graph.fb.
        let fb = Graph::from_pir_json(&bytes)
            .and_then(|g| g.encode(GraphFormat::FlatBuffers))
            .map_err(|e| {
                CliError::Failed(format!(
                    "cannot use graph {} as a Paddle PIR program (.json): {e}",
                    path.display()
                ))
            })?;
        return Ok(GraphFile {
            path: path.to_path_buf(),
            encoding: GraphFormat::FlatBuffers,
            bytes: fb,
        });
    }
    let what = match encoding {
        GraphFormat::FlatBuffers => "a modelzip graph.fb",
        GraphFormat::ProgramDesc => "a Paddle ProgramDesc (.pdmodel)",
    };
    Graph::decode(encoding, &bytes).map_err(|e| {
        CliError::Failed(format!(
            "cannot use graph {} as {what}: {e}",
            path.display()
        ))
    })?;
    Ok(GraphFile {
        path: path.to_path_buf(),
        encoding,
        bytes,
    })
}

/// Everything `pack` reads before it takes the lock: the graph (decoded), the
/// parameter files, and the updater files grouped by parameter.
struct Inputs {
    graph: Option<GraphFile>,
    params: Vec<(String, PathBuf)>,
    /// (parameter name, its array files in sorted file-name order), by parameter name.
    updater: Vec<(String, Vec<PathBuf>)>,
}

fn gather(args: &Args) -> Result<Inputs, CliError> {
    refuse_archive_inside(&args.archive, &args.dir, "parameters from")?;
    if let Some(dir) = &args.updater {
        refuse_archive_inside(&args.archive, dir, "updater state from")?;
    }
    let mut params = tensor_files(&args.dir, "parameters from")?;
    // A graph at the root of DIR (`extract` writes one) is the graph, not a parameter;
    // --graph wins over it.
    let mut found: Vec<(PathBuf, GraphFormat)> = Vec::new();
    params.retain(
        |(name, path)| match GRAPH_FILES.iter().find(|(f, _)| f == name) {
            Some((_, enc)) => {
                found.push((path.clone(), *enc));
                false
            }
            None => true,
        },
    );
    let graph = match (&args.graph, found.as_slice()) {
        (Some(g), _) => Some(read_graph(g, None)?),
        (None, []) => None,
        (None, [(path, enc)]) => Some(read_graph(path, Some(*enc))?),
        (None, _) => {
            return Err(CliError::Failed(format!(
                "cannot pack {}: it holds both __model__ and graph.fb at its root; pass --graph to choose the tag's graph",
                args.dir.display()
            )));
        }
    };
    if params.is_empty() && graph.is_none() {
        return Err(CliError::Failed(format!(
            "cannot pack {}: the directory holds no parameter files (a tag needs parameters or a graph; is the path right?)",
            args.dir.display()
        )));
    }
    let mut updater = Vec::new();
    if let Some(dir) = &args.updater {
        // Grouped by parameter name, not by adjacency: the files of "a/b" sort between
        // "a/0_m" and "a/z_v".
        let mut groups: BTreeMap<String, Vec<PathBuf>> = BTreeMap::new();
        for (rel, path) in tensor_files(dir, "updater state from")? {
            let Some((param, _array)) = rel.rsplit_once('/') else {
                return Err(CliError::Failed(format!(
                    "cannot pack updater state from {}: {rel} is not in a <param>/ directory (the layout is UPDATER/<param>/<array>) (file {})",
                    dir.display(),
                    path.display()
                )));
            };
            groups.entry(param.to_string()).or_default().push(path);
        }
        // Optimizer state belongs to a parameter: a directory that names none (a typo, or
        // state from another model) would be stored silently, so it is refused.
        let names: std::collections::HashSet<&str> =
            params.iter().map(|(name, _)| name.as_str()).collect();
        let unknown: Vec<&str> = groups
            .keys()
            .map(String::as_str)
            .filter(|p| !names.contains(p))
            .collect();
        if let Some(first) = unknown.first() {
            let more = match unknown.len() {
                1 => String::new(),
                n => format!(" and {} more", n - 1),
            };
            return Err(CliError::Failed(format!(
                "cannot pack updater state from {}: {first:?}{more} is not a parameter in {} (UPDATER/<param>/<array> holds the state of parameter <param>; directory {})",
                dir.display(),
                args.dir.display(),
                dir.join(first).display()
            )));
        }
        updater = groups.into_iter().collect();
    }
    Ok(Inputs {
        graph,
        params,
        updater,
    })
}

/// What `pack` wrote, read back from the archive.
struct Packed {
    tag: String,
    created: bool,
    mode: &'static str,
    params: usize,
    updater_arrays: usize,
    /// Params and updater arrays stored as references to files of older tags.
    shared: usize,
    graph: Option<&'static str>,
}

impl Packed {
    /// The `--json` document (the remote append adds its costs to it).
    fn json(&self, shown: &str) -> serde_json::Value {
        json!({
            "archive": shown,
            "tag": self.tag,
            "created": self.created,
            "mode": self.mode,
            "params": self.params,
            "updater_arrays": self.updater_arrays,
            "shared": self.shared,
            "graph": self.graph,
        })
    }

    /// What the human line says was done.
    fn verb(&self) -> &'static str {
        if self.created {
            "created archive with"
        } else {
            "added"
        }
    }
}

/// Reads tag `name` back from the finished archive.
fn read_back(args: &Args, created: bool, mode: &'static str) -> Result<Packed, CliError> {
    let archive = open(&args.archive)?;
    let tag = archive.tag(&args.tag).map_err(|e| {
        CliError::Failed(format!("cannot read back {}: {e}", args.archive.display()))
    })?;
    let arrays = tag.updater().iter().flat_map(|u| u.arrays.iter());
    let shared = tag
        .params()
        .iter()
        .map(|p| &p.location)
        .chain(arrays)
        .filter(|l| l.shared)
        .count();
    let graph = tag
        .graph()
        .map_err(|e| CliError::Failed(format!("cannot read back tag {}: {e}", tag.name())))?
        .map(|(g, _)| match g {
            GraphFormat::FlatBuffers => "flatbuffers",
            GraphFormat::ProgramDesc => "programdesc",
        });
    Ok(Packed {
        tag: tag.name().to_string(),
        created,
        mode,
        params: tag.params().len(),
        updater_arrays: tag.updater().iter().map(|u| u.arrays.len()).sum(),
        shared,
        graph,
    })
}

/// A tensor file, mapped (not read into memory): its tensor is written to the archive
/// from the map, so packing costs the process memory of no tensor.
fn read_tensor_file(path: &Path) -> Result<tensor::TensorFile, CliError> {
    tensor::TensorFile::open(path)
        .map_err(|e| CliError::Failed(format!("cannot read {}: {}", path.display(), e.kind())))
}

fn decode_err(path: &Path) -> impl Fn(modelzip::Error) -> CliError + '_ {
    move |e| CliError::Failed(format!("cannot decode {}: {e}", path.display()))
}

fn fill(
    tag: &mut TagWriter<'_>,
    args: &Args,
    inputs: &Inputs,
    metadata: Option<&[u8]>,
    progress: &Progress,
) -> Result<(), CliError> {
    let name = &args.tag;
    if let Some(json) = metadata {
        tag.metadata(json).map_err(|e| {
            CliError::Failed(format!("cannot add metadata.json to tag {name}: {e}"))
        })?;
    }
    if let Some(g) = &inputs.graph {
        tag.graph(g.encoding, &g.bytes).map_err(|e| {
            CliError::Failed(format!(
                "cannot add graph {} to tag {name}: {e}",
                g.path.display()
            ))
        })?;
    }
    progress.set_length(inputs.params.len() as u64);
    for (param, path) in &inputs.params {
        let file = read_tensor_file(path)?;
        let t = tensor::decode_tensor(file.bytes()).map_err(decode_err(path))?;
        tag.param(param, &t).map_err(|e| match e.kind() {
            // Writing the archive failed (a full disk), not reading the input file.
            modelzip::ErrorKind::Io(_) => CliError::Failed(format!(
                "cannot write {} (adding parameter {param:?} of tag {name}): {e}",
                args.archive.display()
            )),
            _ => CliError::Failed(format!(
                "cannot add parameter {param:?} to tag {name}: {e} (file {})",
                path.display()
            )),
        })?;
        progress.inc(1);
    }
    for (param, paths) in &inputs.updater {
        let blobs: Vec<tensor::TensorFile> = paths
            .iter()
            .map(|p| read_tensor_file(p))
            .collect::<Result<_, _>>()?;
        let views = blobs
            .iter()
            .zip(paths)
            .map(|(b, p)| tensor::decode_tensor(b.bytes()).map_err(decode_err(p)))
            .collect::<Result<Vec<_>, _>>()?;
        tag.updater(param, &views).map_err(|e| {
            let dir = paths[0].parent().unwrap_or(Path::new("."));
            CliError::Failed(format!(
                "cannot add the updater state of {param:?} to tag {name}: {e} (file {})",
                dir.display()
            ))
        })?;
    }
    Ok(())
}

pub fn run(args: Args) -> Result<Outcome, CliError> {
    let shown = args.archive.display().to_string();
    let fail = |e: modelzip::Error| CliError::Failed(format!("cannot write {shown}: {e}"));
    let progress = args.write.output.progress("packing");
    let opts = args.write.options();
    if is_url(&args.archive) {
        return run_remote(&args, &opts, &progress);
    }
    // Everything that can be checked is checked before the lock is taken (and, for a
    // new archive, before its lock file exists).
    refuse_directory(&args.archive, &format!("cannot write {shown}"))?;
    refuse_non_archive(&args.archive, &format!("cannot write {shown}"))?;
    validate_tag_name(&args.tag)
        .map_err(|e| CliError::Failed(format!("cannot add tag to {shown}: {e}")))?;
    let inputs = gather(&args)?;
    let metadata = args.meta.build()?;
    // A new archive: its writer takes the lock (waiting with --wait), and the path is
    // checked again under it: another writer may have created the archive meanwhile, and
    // finishing would replace it. Then this appends to it instead.
    let mut writer = None;
    if !args.archive.exists() {
        let w = ArchiveWriter::create_with(&args.archive, &opts).map_err(fail)?;
        if !args.archive.exists() {
            writer = Some(w);
        }
    }
    let (created, mode) = if let Some(mut writer) = writer {
        let mut tag = writer.begin_tag(&args.tag).map_err(fail)?;
        fill(&mut tag, &args, &inputs, metadata.as_deref(), &progress)?;
        tag.finish().map_err(fail)?;
        writer.finish().map_err(fail)?;
        (true, "new")
    } else {
        let (mode, name) = if args.rewrite {
            (AppendMode::Rewrite, "rewrite")
        } else {
            (AppendMode::InPlace, "in_place")
        };
        let mut appender = Appender::open_with(&args.archive, mode, &opts).map_err(fail)?;
        let mut tag = appender.begin_tag(&args.tag).map_err(fail)?;
        fill(&mut tag, &args, &inputs, metadata.as_deref(), &progress)?;
        tag.finish().map_err(fail)?;
        appender.finish().map_err(fail)?;
        (false, name)
    };
    progress.finish();
    if args.write.output.quiet {
        return Ok(Outcome::Success);
    }
    let p = read_back(&args, created, mode)?;
    if args.write.output.json {
        print_json(&p.json(&shown))?;
    } else {
        let updater = if p.updater_arrays > 0 {
            format!(", {} updater array(s)", p.updater_arrays)
        } else {
            String::new()
        };
        let graph = match &inputs.graph {
            Some(g) => format!(
                "{} ({} bytes) from {}, ",
                g.encoding.file_name(),
                g.bytes.len(),
                g.path.display()
            ),
            None => String::new(),
        };
        print(&format!(
            "{} tag {} in {shown}: {graph}{} param(s){updater}, {} shared with older tags\n",
            p.verb(),
            p.tag,
            p.params,
            p.shared,
        ))?;
    }
    Ok(Outcome::Success)
}

/// `pack` to an `s3://` URL: the tag is appended to the object remotely (its old bytes
/// copied by the store, the new ones uploaded, committed only if the object is still the
/// version read), or a new object is created (only if none appears meanwhile).
fn run_remote(
    args: &Args,
    opts: &modelzip::WriteOptions,
    progress: &Progress,
) -> Result<Outcome, CliError> {
    let shown = args.archive.display().to_string();
    let fail = |e: modelzip::Error| CliError::Failed(format!("cannot write {shown}: {e}"));
    if args.rewrite {
        return Err(CliError::Failed(format!(
            "cannot write {shown}: --rewrite does not apply to a remote archive (a remote append composes a new version of the object; docs/REMOTE.md)"
        )));
    }
    validate_tag_name(&args.tag)
        .map_err(|e| CliError::Failed(format!("cannot add tag to {shown}: {e}")))?;
    let inputs = gather(args)?;
    let metadata = args.meta.build()?;
    let remote = modelzip::remote::RemoteOptions::default();
    let mut appender =
        modelzip::remote::RemoteAppender::open(&shown, &remote, opts).map_err(fail)?;
    let mut tag = appender.begin_tag(&args.tag).map_err(fail)?;
    fill(&mut tag, args, &inputs, metadata.as_deref(), progress)?;
    tag.finish().map_err(fail)?;
    let done = appender.finish().map_err(fail)?;
    progress.finish();
    if args.write.output.quiet {
        return Ok(Outcome::Success);
    }
    let mode = if done.created { "new" } else { "remote_append" };
    let p = read_back(args, done.created, mode)?;
    if args.write.output.json {
        let mut doc = p.json(&shown);
        if let serde_json::Value::Object(m) = &mut doc {
            m.extend(remote_write_fields(&done));
        }
        print_json(&doc)?;
    } else {
        print(&format!(
            "{} tag {} in {shown}: {} param(s), {} shared with older tags; {} bytes uploaded, {} copied by the store, {} requests\n",
            p.verb(),
            p.tag,
            p.params,
            p.shared,
            done.bytes_uploaded,
            done.bytes_copied,
            done.requests,
        ))?;
    }
    Ok(Outcome::Success)
}
