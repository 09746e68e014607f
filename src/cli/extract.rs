//! `modelzip extract`: a tag as a Paddle persistables directory.

use super::common::{OutputArgs, TagArgs, tag_err};
use super::output::{print, print_json};
use super::{CliError, Outcome};
use modelzip::archive::GraphEncoding;
use modelzip::tensor;
use serde_json::json;
use std::collections::HashSet;
use std::fs::{File, OpenOptions};
use std::io::Write;
use std::path::{Path, PathBuf};

/// Write a tag as a Paddle persistables directory: one LoDTensor file per
/// parameter, named by the parameter name (a `/` in the name makes a
/// subdirectory), plus the graph: `__model__` for a ProgramDesc (the name Paddle's
/// load_inference_model looks for in a directory) or `graph.fb`.
///
/// Never writes outside DIR, never follows or creates symlinks, and never
/// overwrites an existing file unless --force. On failure the files and
/// directories it created are removed (DIR too, when it created DIR). `pack`
/// reads the directory back as the same tag (the graph from `__model__` or
/// `graph.fb`); updater state is not extracted.
///
/// Example:
///   modelzip extract model.zip --tag fp32 --out fp32_params/
///   modelzip extract model.zip --out latest/ --json
#[derive(clap::Args, Debug)]
#[command(verbatim_doc_comment)]
#[command(mut_arg("json", |a| a.help(r#"Print one JSON document: {"archive", "tag", "out", "files"}"#)))]
#[command(mut_arg("quiet", |a| a.help("Print nothing on success")))]
#[command(mut_arg("quiet", |a| a.conflicts_with("json")))]
pub struct Args {
    #[command(flatten)]
    input: TagArgs,
    /// The target directory (created if missing).
    #[arg(long)]
    out: PathBuf,
    /// Replace existing files.
    #[arg(long)]
    force: bool,
    #[command(flatten)]
    output: OutputArgs,
}

/// The relative path for a parameter name of tag `tag`, or why it cannot be one.
fn safe_relative(tag: &str, name: &str) -> Result<PathBuf, CliError> {
    let refuse = |why: &str| {
        CliError::Failed(format!(
            "cannot extract tag {tag}: refusing to extract parameter {name:?}: {why} (entry {tag}/params.txt)"
        ))
    };
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
                return Err(CliError::Failed(format!(
                    "cannot create directory {}: something that is not a directory is in the way (symlinks are never followed)",
                    dir.display()
                )));
            }
            Err(_) => {
                std::fs::create_dir(&dir).map_err(|e| {
                    CliError::Failed(format!("cannot create {}: {e}", dir.display()))
                })?;
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
            return Err(CliError::Failed(format!(
                "cannot write {}: the file exists (use --force to overwrite)",
                path.display()
            )));
        }
        if m.is_dir() {
            return Err(CliError::Failed(format!(
                "cannot write {}: a directory is in the way",
                path.display()
            )));
        }
        std::fs::remove_file(path)
            .map_err(|e| CliError::Failed(format!("cannot replace {}: {e}", path.display())))?;
    }
    OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(path)
        .map_err(|e| CliError::Failed(format!("cannot create {}: {e}", path.display())))
}

/// Creates `out` and any missing parents, returning the directories it created
/// (outermost first), so a failed extract can remove them again.
fn create_out_dir(out: &Path) -> Result<Vec<PathBuf>, CliError> {
    let mut missing = Vec::new();
    let mut dir = out;
    loop {
        match std::fs::symlink_metadata(dir) {
            Ok(_) => break,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                missing.push(dir.to_path_buf());
                match dir.parent() {
                    Some(p) if !p.as_os_str().is_empty() => dir = p,
                    _ => break,
                }
            }
            Err(e) => {
                return Err(CliError::Failed(format!(
                    "cannot create {}: {e}",
                    dir.display()
                )));
            }
        }
    }
    missing.reverse();
    let mut created = Vec::new();
    for d in missing {
        if let Err(e) = std::fs::create_dir(&d) {
            remove_dirs(&created);
            return Err(CliError::Failed(format!(
                "cannot create {}: {e}",
                d.display()
            )));
        }
        created.push(d);
    }
    match std::fs::metadata(out) {
        Ok(m) if m.is_dir() => Ok(created),
        _ => Err(CliError::Failed(format!(
            "cannot extract to {}: not a directory",
            out.display()
        ))),
    }
}

/// Removes the (empty) directories, innermost first.
fn remove_dirs(dirs: &[PathBuf]) {
    for d in dirs.iter().rev() {
        let _ = std::fs::remove_dir(d);
    }
}

pub fn run(args: Args) -> Result<Outcome, CliError> {
    let archive = args.input.open()?;
    let tag = args.input.pick(&archive)?;
    let tag_name = tag.name();
    // Check every name and decode every tensor before writing anything. Each file:
    // (path relative to the output, the same with `/` separators, bytes).
    let mut files: Vec<(PathBuf, String, Vec<u8>)> = Vec::new();
    if let Some((enc, bytes)) = tag.graph().map_err(tag_err(tag_name))? {
        let name = match enc {
            GraphEncoding::ProgramDesc => "__model__",
            GraphEncoding::FlatBuffers => "graph.fb",
        };
        files.push((PathBuf::from(name), name.to_string(), bytes.into_owned()));
    }
    // Every path a file takes and every directory one needs: a parameter "a" next to
    // "a/b" cannot be written.
    let mut file_paths: HashSet<PathBuf> = files.iter().map(|(f, _, _)| f.clone()).collect();
    let mut dir_paths: HashSet<PathBuf> = HashSet::new();
    for p in tag.params() {
        let rel = safe_relative(tag_name, &p.name)?;
        let collides = |what: &str| {
            CliError::Failed(format!(
                "cannot extract tag {tag_name}: parameter {:?} collides with {what} in the output (entry {tag_name}/params.txt)",
                p.name
            ))
        };
        if file_paths.contains(&rel) {
            return Err(collides("another file"));
        }
        if dir_paths.contains(&rel) {
            return Err(collides("the directory of another parameter"));
        }
        for dir in rel.ancestors().skip(1) {
            if dir.as_os_str().is_empty() {
                break;
            }
            if file_paths.contains(dir) {
                return Err(collides("another file (it needs it as a directory)"));
            }
            dir_paths.insert(dir.to_path_buf());
        }
        file_paths.insert(rel.clone());
        let data = tag.param(&p.name).map_err(tag_err(tag_name))?;
        let mut bytes = Vec::new();
        tensor::encode_tensor(&data.view(), &mut bytes).map_err(|e| {
            CliError::Failed(format!(
                "cannot encode parameter {:?} of tag {tag_name}: {e}",
                p.name
            ))
        })?;
        files.push((rel, p.name.clone(), bytes));
    }
    let out_dirs = create_out_dir(&args.out)?;
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
                .map_err(|e| CliError::Failed(format!("cannot write {}: {e}", path.display())))?;
        }
        Ok::<(), CliError>(())
    })();
    if let Err(e) = result {
        for f in created_files.iter().rev() {
            let _ = std::fs::remove_file(f);
        }
        remove_dirs(&created_dirs);
        remove_dirs(&out_dirs);
        return Err(e);
    }
    if args.output.json {
        let written: Vec<&str> = files.iter().map(|(_, n, _)| n.as_str()).collect();
        print_json(&json!({
            "archive": args.input.archive.display().to_string(),
            "tag": tag.name(),
            "out": args.out.display().to_string(),
            "files": written,
        }))?;
    } else if !args.output.quiet {
        print(&format!(
            "extracted tag {} ({} files) to {}\n",
            tag.name(),
            files.len(),
            args.out.display()
        ))?;
    }
    Ok(Outcome::Success)
}
