//! `modelzip extract`: a tag as a Paddle persistables directory. The work and its
//! guarantees are the library's ([`modelzip::extract`]); this parses and prints.

use super::common::{OutputArgs, TagArgs};
use super::output::{human_bytes, print, print_json};
use super::{CliError, Outcome};
use modelzip::extract::{BYTES_LIMIT, ExtractOptions, FILES_LIMIT, extract};
use modelzip::{Error, ErrorKind};
use std::path::{Path, PathBuf};

/// Write a tag as a Paddle persistables directory: one LoDTensor file per
/// parameter, named by the parameter name (a `/` in the name makes a
/// subdirectory), plus the graph: `__model__` for a ProgramDesc (the name Paddle's
/// load_inference_model looks for in a directory) or `graph.fb`.
///
/// Never writes outside DIR, never follows or creates symlinks, and never
/// overwrites an existing file unless --force. Every file is written under a
/// temporary name and renamed into place once all are written and fsynced, so
/// each name holds its old file or the complete new one, even after a crash. On
/// failure the temporaries and the files and directories it created are removed
/// (DIR too, when it created DIR); existing files are left as they were unless
/// the failure came while renaming. `pack`
/// reads the directory back as the same tag (the graph from `__model__` or
/// `graph.fb`); updater state is not extracted. The files and bytes it would write are
/// added up first and refused above --max-files / --max-output (many names may share
/// one tensor file, so a small archive can describe a large directory).
///
/// With --link, a name whose tensor file was already written in this extract is a
/// hard link to that first file instead of a copy: no bytes and no inode per alias
/// (much faster for many aliases). Names that share a tensor file then share one
/// inode: writing to one changes all of them. Use it for read-only use or to save disk
/// and time. Where a link cannot be made (another filesystem, links unsupported, the
/// filesystem's limit of links per file) that name is written as a copy.
///
/// Example:
///   modelzip extract model.zip --tag fp32 --out fp32_params/
///   modelzip extract model.zip --out latest/ --json
///   modelzip extract aliases.zip --out big/ --link --max-files 300000
#[derive(clap::Args, Debug)]
#[command(verbatim_doc_comment)]
#[command(mut_arg("json", |a| a.help(r#"Print one JSON document: {"archive", "tag", "out", "files", "links"}"#)))]
#[command(mut_arg("quiet", |a| a.help("Print nothing on success")))]
pub struct Args {
    #[command(flatten)]
    input: TagArgs,
    /// The target directory (created if missing).
    #[arg(long)]
    out: PathBuf,
    /// Replace existing files (atomically: each file or link is made under a
    /// temporary name in the same directory, then renamed over it); never the
    /// archive being read, nor a directory. Also deletes the temporaries a killed
    /// extract left there (`.modelzip-extract.PID.N`, `.modelzip-link.PID.N`, their
    /// process gone or 15 minutes old).
    #[arg(long)]
    force: bool,
    /// Make every further name of an already written tensor file a hard link to the
    /// first file written for it, not a copy. Linked names share one inode: writing
    /// to one changes them all (for read-only use, or to save disk and time). Where a
    /// link cannot be made, that name is a copy.
    #[arg(long)]
    link: bool,
    #[command(flatten)]
    output: OutputArgs,
    /// Refuse to write more than SIZE bytes in all (bytes, or with a K, M, G or T
    /// suffix, powers of 1024). Default: 16 GiB or 100 times the archive's size,
    /// whichever is larger. Checked before anything is written. With --link, only
    /// the distinct files count (links add no bytes; a copy made where a link
    /// cannot be is counted when made).
    #[arg(long, value_name = "SIZE", value_parser = parse_size, allow_negative_numbers = true)]
    max_output: Option<u64>,
    /// Refuse to write more than N files. Default: 100000. Checked before anything
    /// is written. Every name counts, hard links (--link) included.
    #[arg(long, value_name = "N", default_value_t = DEFAULT_MAX_FILES, allow_negative_numbers = true)]
    max_files: u64,
}

/// Files `extract` writes at most unless `--max-files` says otherwise.
pub const DEFAULT_MAX_FILES: u64 = modelzip::extract::DEFAULT_MAX_FILES;

/// Parses `SIZE`: decimal bytes, optionally followed by K, M, G or T (powers of 1024;
/// `KiB`, `MB` etc. are read the same way).
pub fn parse_size(s: &str) -> Result<u64, String> {
    let t = s.trim();
    if t.starts_with('-') {
        return Err(format!("{s:?}: a size cannot be negative"));
    }
    let digits = t.bytes().take_while(u8::is_ascii_digit).count();
    let (num, unit) = t.split_at(digits);
    if digits > 0 && (unit.starts_with('.') || unit.starts_with(',')) {
        return Err(format!(
            "{s:?}: a size is a whole number of bytes, K, M, G or T (e.g. 1536M for 1.5G)"
        ));
    }
    let n: u64 = num
        .parse()
        .map_err(|_| format!("{s:?} is not a size (bytes, or a number with K, M, G or T)"))?;
    let shift = match unit.trim().to_ascii_uppercase().as_str() {
        "" | "B" => 0,
        "K" | "KB" | "KIB" => 10,
        "M" | "MB" | "MIB" => 20,
        "G" | "GB" | "GIB" => 30,
        "T" | "TB" | "TIB" => 40,
        _ => return Err(format!("{s:?}: unknown unit (use K, M, G or T)")),
    };
    n.checked_mul(1u64 << shift)
        .ok_or_else(|| format!("{s:?} does not fit in 64 bits"))
}

pub fn run(args: Args) -> Result<Outcome, CliError> {
    let archive = args.input.open()?;
    let tag = args.input.pick(&archive)?;
    let opts = ExtractOptions {
        force: args.force,
        link: args.link,
        max_output: args.max_output,
        max_files: args.max_files,
    };
    let report = extract(&tag, &args.out, &opts).map_err(|e| failed(tag.name(), e))?;
    if args.output.json {
        print_json(&ExtractJson {
            archive: &args.input.archive,
            tag: &report.tag,
            out: &args.out,
            paths: &report.paths,
            links: report.links,
        })?;
    } else if !args.output.quiet {
        let links = if args.link {
            format!(", {} of them hard links", report.links)
        } else {
            String::new()
        };
        print(&format!(
            "extracted tag {} ({} files{links}) to {}\n",
            report.tag,
            report.files,
            args.out.display()
        ))?;
    }
    Ok(Outcome::Success)
}

/// The library's error `e` in the CLI's words: the limits and `--force` named as options.
fn failed(tag: &str, e: Error) -> CliError {
    match e.kind() {
        ErrorKind::LimitExceeded { what, size, limit } if *what == FILES_LIMIT => {
            CliError::Failed(format!(
                "cannot extract tag {tag}: it would write {size} files, more than the limit of {limit} files (raise it with --max-files)"
            ))
        }
        ErrorKind::LimitExceeded { what, size, limit } if *what == BYTES_LIMIT => {
            let made = e
                .location()
                .file
                .as_ref()
                .map(|f| {
                    format!(
                        " ({} could not be a hard link, so it and further aliases are copies)",
                        f.display()
                    )
                })
                .unwrap_or_default();
            CliError::Failed(format!(
                "cannot extract tag {tag}: it would write {size} bytes ({}), more than the limit of {limit} bytes ({}; raise it with --max-output){made}",
                human_bytes(*size, false),
                human_bytes(*limit, false),
            ))
        }
        ErrorKind::Io(io) if io.kind() == std::io::ErrorKind::AlreadyExists => {
            CliError::Failed(format!("{e} (use --force to overwrite)"))
        }
        // The library's messages name the tag or the path already.
        ErrorKind::InvalidInput(_) | ErrorKind::Io(_) => CliError::Failed(e.to_string()),
        // What reading the tag failed on: its graph or a tensor file.
        _ => CliError::Failed(format!("cannot read tag {tag}: {e}")),
    }
}

/// The `extract --json` document, serialized as it is written.
struct ExtractJson<'a> {
    archive: &'a Path,
    tag: &'a str,
    out: &'a Path,
    paths: &'a [String],
    links: usize,
}

impl serde::Serialize for ExtractJson<'_> {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeMap;
        let mut m = s.serialize_map(Some(5))?;
        m.serialize_entry("archive", &self.archive.display().to_string())?;
        m.serialize_entry("tag", self.tag)?;
        m.serialize_entry("out", &self.out.display().to_string())?;
        m.serialize_entry("files", self.paths)?;
        m.serialize_entry("links", &self.links)?;
        m.end()
    }
}
