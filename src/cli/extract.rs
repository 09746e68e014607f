//! `modelzip extract`: a tag as a Paddle persistables directory.

use super::common::{open, pick_tag, tag_err};
use super::output::{print, print_json};
use super::{CliError, Outcome};
use modelzip::archive::GraphEncoding;
use modelzip::tensor;
use serde_json::json;
use std::fs::{File, OpenOptions};
use std::io::Write;
use std::path::{Path, PathBuf};

/// Write a tag as a Paddle persistables directory: one LoDTensor file per
/// parameter, named by the parameter name (a `/` in the name makes a
/// subdirectory), plus the graph: `__model__` for a ProgramDesc (the name Paddle's
/// load_inference_model looks for in a directory) or `graph.fb`.
///
/// Never writes outside DIR, never follows or creates symlinks, and never
/// overwrites an existing file unless --force. On failure the files it created
/// are removed.
///
/// Example:
///   modelzip extract model.zip --tag fp32 --out fp32_params/
///   modelzip extract model.zip --out latest/ --json
#[derive(clap::Args, Debug)]
#[command(verbatim_doc_comment)]
pub struct Args {
    /// The archive.
    archive: PathBuf,
    /// The tag (ignoring case); default: the newest.
    #[arg(long)]
    tag: Option<String>,
    /// The target directory (created if missing).
    #[arg(long)]
    out: PathBuf,
    /// Replace existing files.
    #[arg(long)]
    force: bool,
    /// Print one JSON document: {"archive", "tag", "out", "files"}.
    #[arg(long)]
    json: bool,
    /// Print nothing on success.
    #[arg(short, long, conflicts_with = "json")]
    quiet: bool,
}

/// The relative path for a parameter name, or why it cannot be one.
fn safe_relative(name: &str) -> Result<PathBuf, CliError> {
    let refuse = |why: &str| CliError(format!("refusing to extract parameter {name:?}: {why}"));
    if name.starts_with('/') {
        return Err(refuse("absolute path"));
    }
    if name.contains('\\') || name.contains('\0') {
        return Err(refuse("backslash or NUL in the name"));
    }
    let bytes = name.as_bytes();
    if bytes.len() >= 2 && bytes[1] == b':' && bytes[0].is_ascii_alphabetic() {
        return Err(refuse("drive letter"));
    }
    let mut out = PathBuf::new();
    for part in name.split('/') {
        if part.is_empty() || part == "." || part == ".." {
            return Err(refuse("empty, `.` or `..` path component"));
        }
        out.push(part);
    }
    Ok(out)
}

/// Creates the directories of `rel` under `root`, refusing symlinks on the way.
fn make_parents(root: &Path, rel: &Path, created: &mut Vec<PathBuf>) -> Result<(), CliError> {
    let mut dir = root.to_path_buf();
    let parents: Vec<_> = rel
        .parent()
        .map(|p| p.components().collect())
        .unwrap_or_default();
    for c in parents {
        dir.push(c);
        match std::fs::symlink_metadata(&dir) {
            Ok(m) if m.is_dir() => {}
            Ok(_) => {
                return Err(CliError(format!(
                    "{} exists and is not a directory (symlinks are never followed)",
                    dir.display()
                )));
            }
            Err(_) => {
                std::fs::create_dir(&dir)
                    .map_err(|e| CliError(format!("cannot create {}: {e}", dir.display())))?;
                created.push(dir.clone());
            }
        }
    }
    Ok(())
}

/// Opens `path` for writing without following a symlink, replacing a file only when `force`.
fn create_file(path: &Path, force: bool) -> Result<File, CliError> {
    if let Ok(m) = std::fs::symlink_metadata(path) {
        if !force {
            return Err(CliError(format!(
                "{} exists (use --force to overwrite)",
                path.display()
            )));
        }
        if m.is_dir() {
            return Err(CliError(format!("{} is a directory", path.display())));
        }
        std::fs::remove_file(path)
            .map_err(|e| CliError(format!("cannot replace {}: {e}", path.display())))?;
    }
    OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(path)
        .map_err(|e| CliError(format!("cannot create {}: {e}", path.display())))
}

pub fn run(args: Args) -> Result<Outcome, CliError> {
    let archive = open(&args.archive)?;
    let tag = pick_tag(&archive, args.tag.as_deref())?;
    // Check every name and decode every tensor before writing anything. Each file:
    // (path relative to the output, the same with `/` separators, bytes).
    let mut files: Vec<(PathBuf, String, Vec<u8>)> = Vec::new();
    if let Some((enc, bytes)) = tag.graph().map_err(tag_err(tag.name()))? {
        let name = match enc {
            GraphEncoding::ProgramDesc => "__model__",
            GraphEncoding::FlatBuffers => "graph.fb",
        };
        files.push((PathBuf::from(name), name.to_string(), bytes.into_owned()));
    }
    for p in tag.params() {
        let rel = safe_relative(&p.name)?;
        if files.iter().any(|(f, _, _)| *f == rel) {
            return Err(CliError(format!(
                "parameter {:?} collides with another file in the output",
                p.name
            )));
        }
        let data = tag.param(&p.name).map_err(tag_err(tag.name()))?;
        let mut bytes = Vec::new();
        tensor::encode_tensor(&data.view(), &mut bytes)
            .map_err(|e| CliError(format!("cannot encode {}: {e}", p.name)))?;
        files.push((rel, p.name.clone(), bytes));
    }
    std::fs::create_dir_all(&args.out)
        .map_err(|e| CliError(format!("cannot create {}: {e}", args.out.display())))?;
    let mut created_files: Vec<PathBuf> = Vec::new();
    let mut created_dirs: Vec<PathBuf> = Vec::new();
    let result = (|| {
        for (rel, _, bytes) in &files {
            make_parents(&args.out, rel, &mut created_dirs)?;
            let path = args.out.join(rel);
            let mut f = create_file(&path, args.force)?;
            created_files.push(path.clone());
            f.write_all(bytes)
                .and_then(|_| f.sync_all())
                .map_err(|e| CliError(format!("cannot write {}: {e}", path.display())))?;
        }
        Ok::<(), CliError>(())
    })();
    if let Err(e) = result {
        for f in created_files.iter().rev() {
            let _ = std::fs::remove_file(f);
        }
        for d in created_dirs.iter().rev() {
            let _ = std::fs::remove_dir(d);
        }
        return Err(e);
    }
    if args.json {
        let written: Vec<&str> = files.iter().map(|(_, n, _)| n.as_str()).collect();
        print_json(&json!({
            "archive": args.archive.display().to_string(),
            "tag": tag.name(),
            "out": args.out.display().to_string(),
            "files": written,
        }))?;
    } else if !args.quiet {
        print(&format!(
            "extracted tag {} ({} files) to {}\n",
            tag.name(),
            files.len(),
            args.out.display()
        ))?;
    }
    Ok(Outcome::Success)
}
