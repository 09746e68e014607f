//! `modelzip pack`: create an archive or add a tag from a directory of tensor files.

use super::common::{open, refuse_directory};
use super::output::{print, print_json};
use super::progress::Progress;
use super::{CliError, Outcome};
use modelzip::archive::{
    AppendMode, Appender, ArchiveWriter, GraphEncoding, TagWriter, WriteOptions,
};
use modelzip::tensor;
use serde_json::json;
use std::path::{Path, PathBuf};

/// Create ARCHIVE with tag T, or add tag T to an existing ARCHIVE, from a directory
/// of Paddle LoDTensor files (a persistables directory).
///
/// Each file under DIR becomes a parameter named by its path relative to DIR with
/// `/` separators, in sorted order. With --updater, each file `UPDATER/<param>/<array>`
/// is a state array of <param>, arrays in sorted file-name order. Tensors equal to
/// ones already in the archive are stored once.
///
/// Adding to an existing archive appends in place by default (cost proportional to
/// the new tag, crash-safe with a rollback journal); --rewrite writes a new file
/// and renames it over the old one.
///
/// Prints one line on success: the tag, its parameter count and how many of its
/// tensors are shared with older tags (--json: one JSON document instead).
///
/// Example:
///   modelzip pack model.zip --tag step-1000 ckpt/params --updater ckpt/adam
///   modelzip pack model.zip --tag fp32 model_dir --graph model.pdmodel
///   modelzip pack model.zip --tag step-2000 ckpt/params --json
#[derive(clap::Args, Debug)]
#[command(verbatim_doc_comment)]
pub struct Args {
    /// The archive to create or add to.
    archive: PathBuf,
    /// Directory of LoDTensor files, one per parameter.
    dir: PathBuf,
    /// Name of the new tag.
    #[arg(long)]
    tag: String,
    /// Graph file: a Paddle .pdmodel (ProgramDesc) or a modelzip graph.fb.
    #[arg(long)]
    graph: Option<PathBuf>,
    /// Directory of updater (optimizer) state: UPDATER/<param>/<array>.
    #[arg(long)]
    updater: Option<PathBuf>,
    /// Add in place (the default when the archive exists).
    #[arg(long, conflicts_with = "rewrite")]
    append: bool,
    /// Add by rewriting the whole archive to a new file and renaming it.
    #[arg(long)]
    rewrite: bool,
    /// Wait for another writer to finish instead of failing.
    #[arg(long)]
    wait: bool,
    /// Print one JSON document: {"archive", "tag", "created", "mode", "params",
    /// "updater_arrays", "shared", "graph"}.
    #[arg(long)]
    json: bool,
    /// Print nothing on success (and no progress bar).
    #[arg(short, long, conflicts_with = "json")]
    quiet: bool,
}

/// Files under `dir`, as (name relative to dir with `/`, path), sorted by name.
fn tensor_files(dir: &Path) -> Result<Vec<(String, PathBuf)>, CliError> {
    let mut out = Vec::new();
    for entry in walkdir::WalkDir::new(dir)
        .follow_links(false)
        .sort_by_file_name()
    {
        let entry = entry.map_err(|e| CliError(format!("cannot read {}: {e}", dir.display())))?;
        if !entry.file_type().is_file() {
            continue;
        }
        let rel = entry
            .path()
            .strip_prefix(dir)
            .map_err(|e| CliError(e.to_string()))?;
        let parts: Option<Vec<&str>> = rel.components().map(|c| c.as_os_str().to_str()).collect();
        let name = parts
            .ok_or_else(|| {
                CliError(format!(
                    "file name is not UTF-8: {}",
                    entry.path().display()
                ))
            })?
            .join("/");
        out.push((name, entry.path().to_path_buf()));
    }
    out.sort();
    Ok(out)
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

/// Reads tag `name` back from the finished archive.
fn read_back(args: &Args, created: bool, mode: &'static str) -> Result<Packed, CliError> {
    let archive = open(&args.archive)?;
    let tag = archive
        .tag(&args.tag)
        .map_err(|e| CliError(format!("cannot read back {}: {e}", args.archive.display())))?;
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
        .map_err(|e| CliError(format!("cannot read back tag {}: {e}", tag.name())))?
        .map(|(g, _)| match g {
            GraphEncoding::FlatBuffers => "flatbuffers",
            GraphEncoding::ProgramDesc => "programdesc",
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

fn graph_encoding(path: &Path, bytes: &[u8]) -> GraphEncoding {
    let is_fb = path.extension().is_some_and(|e| e == "fb") || bytes.get(4..8) == Some(b"MZGF");
    if is_fb {
        GraphEncoding::FlatBuffers
    } else {
        GraphEncoding::ProgramDesc
    }
}

fn fill(tag: &mut TagWriter<'_>, args: &Args, progress: &Progress) -> Result<(), CliError> {
    if let Some(g) = &args.graph {
        let bytes =
            std::fs::read(g).map_err(|e| CliError(format!("cannot read {}: {e}", g.display())))?;
        tag.graph(graph_encoding(g, &bytes), &bytes)
            .map_err(|e| CliError(format!("cannot add graph {}: {e}", g.display())))?;
    }
    let params = tensor_files(&args.dir)?;
    progress.set_length(params.len() as u64);
    for (name, path) in &params {
        let bytes = std::fs::read(path)
            .map_err(|e| CliError(format!("cannot read {}: {e}", path.display())))?;
        let t = tensor::decode_tensor(&bytes)
            .map_err(|e| CliError(format!("cannot decode {}: {e}", path.display())))?;
        tag.param(name, &t)
            .map_err(|e| CliError(format!("{name}: {e}")))?;
        progress.inc(1);
    }
    if let Some(dir) = &args.updater {
        let files = tensor_files(dir)?;
        let mut groups: Vec<(String, Vec<PathBuf>)> = Vec::new();
        for (rel, path) in files {
            let Some((param, _array)) = rel.rsplit_once('/') else {
                return Err(CliError(format!(
                    "updater file {} is not in a <param>/ directory",
                    path.display()
                )));
            };
            match groups.last_mut() {
                Some((p, v)) if p == param => v.push(path),
                _ => groups.push((param.to_string(), vec![path])),
            }
        }
        for (param, paths) in groups {
            let blobs: Vec<Vec<u8>> = paths
                .iter()
                .map(|p| {
                    std::fs::read(p)
                        .map_err(|e| CliError(format!("cannot read {}: {e}", p.display())))
                })
                .collect::<Result<_, _>>()?;
            let views = blobs
                .iter()
                .zip(&paths)
                .map(|(b, p)| {
                    tensor::decode_tensor(b)
                        .map_err(|e| CliError(format!("cannot decode {}: {e}", p.display())))
                })
                .collect::<Result<Vec<_>, _>>()?;
            tag.updater(&param, &views)
                .map_err(|e| CliError(format!("{param}: {e}")))?;
        }
    }
    Ok(())
}

pub fn run(args: Args) -> Result<Outcome, CliError> {
    let shown = args.archive.display().to_string();
    let fail = |e: modelzip::Error| CliError(format!("cannot write {shown}: {e}"));
    refuse_directory(&args.archive, &format!("cannot write {shown}"))?;
    let progress = Progress::new(args.quiet || args.json, "packing");
    let opts = WriteOptions {
        wait_for_lock: args.wait,
        ..WriteOptions::default()
    };
    let (created, mode) = if args.archive.exists() {
        let (mode, name) = if args.rewrite {
            (AppendMode::Rewrite, "rewrite")
        } else {
            (AppendMode::InPlace, "in_place")
        };
        let mut appender = Appender::open_with(&args.archive, mode, &opts).map_err(fail)?;
        let mut tag = appender.begin_tag(&args.tag).map_err(fail)?;
        fill(&mut tag, &args, &progress)?;
        tag.finish().map_err(fail)?;
        appender.finish().map_err(fail)?;
        (false, name)
    } else {
        let mut writer = ArchiveWriter::create_with(&args.archive, &opts).map_err(fail)?;
        let mut tag = writer.begin_tag(&args.tag).map_err(fail)?;
        fill(&mut tag, &args, &progress)?;
        tag.finish().map_err(fail)?;
        writer.finish().map_err(fail)?;
        (true, "new")
    };
    progress.finish();
    if args.quiet {
        return Ok(Outcome::Success);
    }
    let p = read_back(&args, created, mode)?;
    if args.json {
        print_json(&json!({
            "archive": shown,
            "tag": p.tag,
            "created": p.created,
            "mode": p.mode,
            "params": p.params,
            "updater_arrays": p.updater_arrays,
            "shared": p.shared,
            "graph": p.graph,
        }))?;
    } else {
        let updater = if p.updater_arrays > 0 {
            format!(", {} updater array(s)", p.updater_arrays)
        } else {
            String::new()
        };
        print(&format!(
            "{} tag {} in {shown}: {} param(s){updater}, {} shared with older tags\n",
            if p.created {
                "created archive with"
            } else {
                "added"
            },
            p.tag,
            p.params,
            p.shared,
        ))?;
    }
    Ok(Outcome::Success)
}
