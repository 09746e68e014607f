//! Helpers the archive commands share: opening with a clear error, tensor JSON.

use super::CliError;
use super::output::sha256_hex;
use modelzip::TensorView;
use modelzip::archive::{Archive, Tag, TensorLocation};
use serde_json::{Value, json};
use std::path::Path;

/// Refuses an archive path that is a directory, as `<what failed>: the archive path is
/// a directory, not a file` (the OS's own answer, from mapping it, is "No such
/// device"). `what_failed` names the path.
pub fn refuse_directory(path: &Path, what_failed: &str) -> Result<(), CliError> {
    if path.is_dir() {
        return Err(CliError(format!(
            "{what_failed}: the archive path is a directory, not a file"
        )));
    }
    Ok(())
}

/// Opens an archive, turning a failure into `cannot open PATH: why`.
pub fn open(path: &Path) -> Result<Archive, CliError> {
    refuse_directory(path, &format!("cannot open {}", path.display()))?;
    Archive::open(path).map_err(|e| CliError(format!("cannot open {}: {e}", path.display())))
}

/// The tag named `name`, or the default (newest) tag.
pub fn pick_tag<'a>(archive: &'a Archive, name: Option<&str>) -> Result<Tag<'a>, CliError> {
    match name {
        Some(n) => archive
            .tag(n)
            .map_err(|e| CliError(format!("cannot read tag {n}: {e}"))),
        None => archive.latest().map_err(|e| match archive.default_tag() {
            Some(t) => CliError(format!("cannot read tag {t} (the newest): {e}")),
            None => CliError(format!("cannot read the newest tag: {e}")),
        }),
    }
}

/// Turns a library error about tag `tag` into `cannot read tag TAG: why`.
pub fn tag_err(tag: &str) -> impl Fn(modelzip::Error) -> CliError + '_ {
    move |e| CliError(format!("cannot read tag {tag}: {e}"))
}

/// The JSON description of a stored tensor (the shape `show --json` documents).
pub fn tensor_json(name: Option<&str>, loc: &TensorLocation, t: &TensorView<'_>) -> Value {
    let mut m = serde_json::Map::new();
    if let Some(n) = name {
        m.insert("name".into(), json!(n));
    }
    m.insert("dtype".into(), json!(t.dtype().name()));
    m.insert("dtype_code".into(), json!(t.dtype().code()));
    m.insert("dims".into(), json!(t.dims()));
    m.insert("lod".into(), json!(t.lod()));
    m.insert("entry".into(), json!(loc.entry));
    let shared = if loc.shared {
        json!(loc.tag)
    } else {
        Value::Null
    };
    m.insert("shared_from".into(), shared);
    m.insert("data_sha256".into(), json!(sha256_hex(t.data())));
    Value::Object(m)
}
