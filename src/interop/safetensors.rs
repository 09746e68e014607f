//! safetensors files (the Hugging Face checkpoint format) in and out of archives.
//!
//! A safetensors file is an 8-byte little-endian header length `N`, `N` bytes of JSON
//! (`{"__metadata__": {...}, "name": {"dtype", "shape", "data_offsets"}, ...}`, padded
//! with spaces to a multiple of 8) and the tensors' bytes, little-endian and row-major,
//! packed one after another. Those are the bytes a modelzip tensor file holds after its
//! record header, so they are stored as they are: a tensor unchanged between two
//! fine-tuned versions of a model is stored once.
//!
//! - Importing ([`super::format`]`("safetensors")` and [`super::Format::import`]) stores one file, a sharded checkpoint (its
//!   `model.safetensors.index.json`) or several shards as one tag: every tensor becomes a
//!   parameter of the same name, `__metadata__` goes to the tag's metadata.json.
//! - Exporting ([`super::Format::export`]) writes a tag back as one safetensors file, each tensor a
//!   safetensors `View` borrowing the archive's memory, or, to a directory, as a sharded
//!   checkpoint (the shards it was imported from, or cut to
//!   [`ExportOptions::max_shard_bytes`](super::ExportOptions::max_shard_bytes));
//!   [`export_safetensors_bytes`] returns the one file's bytes. A tag imported from one file exports to that
//!   file byte for byte when the file was written by the safetensors library, and a
//!   sharded checkpoint its shards and index.
//!
//! Mapping, what is kept and what is refused: docs/SAFETENSORS.md.
//!
//! ```no_run
//! use modelzip::interop::{self, ExportOptions, ImportOptions};
//! use modelzip::Archive;
//! use std::path::{Path, PathBuf};
//!
//! let st = interop::format("safetensors")?;
//! st.import(Path::new("model.zip"), "base", &[PathBuf::from("model.safetensors")],
//!           &ImportOptions::default())?;
//! let archive = Archive::open("model.zip")?;
//! st.export(&archive.tag("base")?, Path::new("out.safetensors"), &ExportOptions::default())?;
//! // A sharded checkpoint, at most 2 GB of tensor data a shard, into the directory `shards`:
//! let sharded = ExportOptions { max_shard_bytes: Some(2_000_000_000), ..ExportOptions::default() };
//! let written = st.export(&archive.tag("base")?, Path::new("shards"), &sharded)?;
//! // The shards, then model.safetensors.index.json, each with its size.
//! for (path, bytes) in &written.files {
//!     println!("{} ({bytes} bytes)", path.display());
//! }
//! # Ok::<(), modelzip::Error>(())
//! ```

use super::paddle::{self, ImportedParam};
pub(crate) use super::{ExportOptions, ImportOptions};
use crate::archive::{Tag, TensorData};
use crate::error::{Error, ErrorKind, Result};
use crate::json_cost::check_json_cost;
use crate::progress::Ticker;
use crate::tensor::{DType, TensorFile, TensorView, data_len};
use safetensors::tensor::{Dtype, View};
use serde_json::{Map, Value};
use std::borrow::Cow;
use std::collections::HashMap;
use std::io::Write;
use std::path::{Component, Path, PathBuf};

internal! {
    /// The largest header a safetensors file may declare: the limit of the safetensors
    /// library itself (files with a larger one are refused by every reader).
    pub const MAX_HEADER_BYTES: u64 = 100_000_000;
}

internal! {
    /// The largest `model.safetensors.index.json` read (checked before it is read).
    pub const MAX_INDEX_BYTES: u64 = 64 << 20;
}

internal! {
    /// The index file of a sharded checkpoint, as `transformers` names it.
    pub const INDEX_FILE: &str = "model.safetensors.index.json";
}

internal! {
    /// The single-file checkpoint name `transformers` uses.
    pub const SINGLE_FILE: &str = "model.safetensors";
}

internal! {
    /// The metadata.json key under which an import records what it kept (docs/SAFETENSORS.md).
    pub const METADATA_KEY: &str = "safetensors";
}

/// The key of a safetensors header that holds the file's free-form metadata.
const HEADER_METADATA: &str = "__metadata__";

/// The modelzip element type of a safetensors dtype; `None` for the types modelzip
/// cannot hold (F4, F6_E2M3, F6_E3M2, F8_E8M0, F8_E4M3FNUZ, F8_E5M2FNUZ).
pub(crate) fn dtype_from_safetensors(d: Dtype) -> Option<DType> {
    Some(match d {
        Dtype::BOOL => DType::Bool,
        Dtype::U8 => DType::Uint8,
        Dtype::I8 => DType::Int8,
        Dtype::F8_E5M2 => DType::Fp8E5m2,
        // safetensors' F8_E4M3 is torch.float8_e4m3fn (finite only, no infinities).
        Dtype::F8_E4M3 => DType::Fp8E4m3fn,
        Dtype::I16 => DType::Int16,
        Dtype::U16 => DType::Uint16,
        Dtype::F16 => DType::Fp16,
        Dtype::BF16 => DType::Bf16,
        Dtype::I32 => DType::Int32,
        Dtype::U32 => DType::Uint32,
        Dtype::F32 => DType::Fp32,
        Dtype::C64 => DType::Complex64,
        Dtype::F64 => DType::Fp64,
        Dtype::I64 => DType::Int64,
        Dtype::U64 => DType::Uint64,
        _ => return None,
    })
}

/// The safetensors dtype of a modelzip element type; `None` for SIZE_T and COMPLEX128,
/// which safetensors has no dtype for.
pub(crate) fn dtype_to_safetensors(d: DType) -> Option<Dtype> {
    Some(match d {
        DType::Bool => Dtype::BOOL,
        DType::Uint8 => Dtype::U8,
        DType::Int8 => Dtype::I8,
        DType::Fp8E5m2 => Dtype::F8_E5M2,
        DType::Fp8E4m3fn => Dtype::F8_E4M3,
        DType::Int16 => Dtype::I16,
        DType::Uint16 => Dtype::U16,
        DType::Fp16 => Dtype::F16,
        DType::Bf16 => Dtype::BF16,
        DType::Int32 => Dtype::I32,
        DType::Uint32 => Dtype::U32,
        DType::Fp32 => Dtype::F32,
        DType::Complex64 => Dtype::C64,
        DType::Fp64 => Dtype::F64,
        DType::Int64 => Dtype::I64,
        DType::Uint64 => Dtype::U64,
        _ => return None,
    })
}

/// The dtype's name as safetensors headers spell it (`F32`, `BF16`, `F8_E4M3`).
fn dtype_name(d: Dtype) -> String {
    match serde_json::to_value(d) {
        Ok(Value::String(s)) => s,
        _ => d.to_string(),
    }
}

fn invalid(msg: String) -> Error {
    Error::new(ErrorKind::InvalidInput(msg))
}

internal! {
    /// One tensor of a safetensors file.
    #[derive(Debug, Clone, PartialEq)]
    pub struct FileTensor<'a> {
        /// Its name in the header.
        pub name: String,
        /// Its safetensors dtype (as the header spells it).
        pub(crate) st_dtype: Dtype,
        /// Its dtype, dims and bytes, borrowed from the file.
        pub view: TensorView<'a>,
        /// Where its bytes are, counted from the end of the header (the header's
        /// `data_offsets`).
        pub begin: u64,
        /// The end of its bytes, exclusive.
        pub end: u64,
    }
}

internal! {
    /// A safetensors file checked as [`import_safetensors`] checks it (see
    /// [`read_safetensors`]), its tensors borrowed from the bytes.
    #[derive(Debug, Clone, PartialEq)]
    pub struct SafetensorsFile<'a> {
        /// The header as stored (the JSON and its padding).
        pub header: &'a [u8],
        /// `__metadata__`, keys in file order; `None` when the header has none.
        pub(crate) metadata: Option<Map<String, Value>>,
        /// The tensors, in data-offset order.
        pub tensors: Vec<FileTensor<'a>>,
    }
}

impl SafetensorsFile<'_> {
    /// True when writing these tensors back (this metadata, this order) gives this
    /// header byte for byte: the header is laid out as the safetensors library lays it out.
    pub fn header_is_canonical(&self) -> Result<bool> {
        let again = render_header(
            self.metadata.as_ref(),
            self.tensors.iter().map(|t| {
                (
                    t.name.as_str(),
                    t.st_dtype,
                    t.view.dims().to_vec(),
                    t.begin,
                    t.end,
                )
            }),
        )?;
        Ok(again == self.header)
    }
}

internal! {
    /// Whether `bytes` start like a safetensors file: a header length within
    /// [`MAX_HEADER_BYTES`] and the file, and a header that starts with `{` (after any
    /// whitespace). A cheap test for
    /// telling formats apart; [`read_safetensors`] checks the whole file.
    pub fn looks_like_safetensors(bytes: &[u8]) -> bool {
        let Some(prefix) = bytes.get(..8) else {
            return false;
        };
        let mut word = [0u8; 8];
        word.copy_from_slice(prefix);
        let n = u64::from_le_bytes(word);
        if !(2..=MAX_HEADER_BYTES).contains(&n) || n > bytes.len() as u64 - 8 {
            return false;
        }
        // JSON may start with whitespace (the safetensors library accepts it).
        bytes[8..8 + n as usize]
            .iter()
            .find(|b| !b.is_ascii_whitespace())
            == Some(&b'{')
    }
}

/// The byte offset in `text` of serde_json's 1-based line and column.
fn json_offset(text: &str, line: usize, column: usize) -> u64 {
    let line_start: usize = text
        .split_inclusive('\n')
        .take(line.saturating_sub(1))
        .map(str::len)
        .sum();
    (line_start + column.saturating_sub(1)).min(text.len()) as u64
}

fn header_field<'v>(info: &'v Map<String, Value>, name: &str, field: &str) -> Result<&'v Value> {
    info.get(field).ok_or_else(|| {
        invalid(format!(
            "tensor {name:?}: its header entry has no {field:?} field"
        ))
    })
}

fn u64_list(v: &Value, name: &str, field: &str) -> Result<Vec<u64>> {
    let bad = || {
        invalid(format!(
            "tensor {name:?}: {field:?} must be a list of non-negative integers, not {v}"
        ))
    };
    v.as_array()
        .ok_or_else(bad)?
        .iter()
        .map(|x| x.as_u64().ok_or_else(bad))
        .collect()
}

internal! {
    /// Checks a whole safetensors file (the whole file must be in `bytes`) and borrows its
    /// tensors: what [`import_safetensors`] refuses, this refuses, with the byte offset in the
    /// file in the error's location.
    pub fn read_safetensors(bytes: &[u8]) -> Result<SafetensorsFile<'_>> {
        let len = bytes.len() as u64;
        let Some(prefix) = bytes.get(..8) else {
            return Err(Error::new(ErrorKind::truncated("safetensors header length", 8, len))
            .at_offset(0));
        };
        let mut word = [0u8; 8];
        word.copy_from_slice(prefix);
        let n = u64::from_le_bytes(word);
        if n > MAX_HEADER_BYTES {
            return Err(Error::new(ErrorKind::LimitExceeded {
                what: "safetensors header length",
                size: n,
                limit: MAX_HEADER_BYTES,
            })
            .at_offset(0));
        }
        if n > len - 8 {
            return Err(Error::new(ErrorKind::truncated("safetensors header", n, len - 8))
            .at_offset(8));
        }
        // n <= MAX_HEADER_BYTES, so it fits in usize.
        let data_start = 8 + n as usize;
        let header = &bytes[8..data_start];
        let data_bytes = len - 8 - n;
        let text = std::str::from_utf8(header).map_err(|e| {
            invalid(format!("the safetensors header is not UTF-8: {e}"))
                .at_offset(8 + e.valid_up_to() as u64)
        })?;
        check_json_cost(header, "estimated memory of parsing the safetensors header")
            .map_err(|e| e.at_offset(8))?;
        let root: Map<String, Value> = serde_json::from_str(text).map_err(|e| {
            invalid(format!(
                "the safetensors header (bytes 8..{data_start}) is not a JSON object: {e}"
            ))
            .at_offset(8 + json_offset(text, e.line(), e.column()))
        })?;
        let mut metadata = None;
        let mut tensors: Vec<(String, Dtype, DType, Vec<u64>, u64, u64)> = Vec::new();
        for (name, v) in &root {
            if name == HEADER_METADATA {
                let m = v.as_object().ok_or_else(|| {
                    invalid(format!("{HEADER_METADATA} must be a JSON object, not {v}")).at_offset(8)
                })?;
                if let Some((k, bad)) = m.iter().find(|(_, x)| !x.is_string()) {
                    return Err(invalid(format!(
                        "{HEADER_METADATA} maps names to strings; key {k:?} has {bad}"
                    ))
                    .at_offset(8));
                }
                metadata = Some(m.clone());
                continue;
            }
            let at = |e: Error| e.at_offset(8);
            let info = v.as_object().ok_or_else(|| {
                at(invalid(format!(
                    "tensor {name:?}: its header entry is not a JSON object"
                )))
            })?;
            let dt = header_field(info, name, "dtype").map_err(at)?;
            let st_dtype: Dtype = dt
                .as_str()
                .and_then(|s| serde_json::from_value(Value::String(s.to_string())).ok())
                .ok_or_else(|| {
                    at(invalid(format!(
                        "tensor {name:?}: {dt} is not a safetensors dtype"
                    )))
                })?;
            let dtype = dtype_from_safetensors(st_dtype).ok_or_else(|| {
                at(invalid(format!(
                    "tensor {name:?} has dtype {}, which modelzip cannot hold (no such element \
                     type; see docs/SAFETENSORS.md for the dtypes it can)",
                    dtype_name(st_dtype)
                )))
            })?;
            let dims = u64_list(
                header_field(info, name, "shape").map_err(at)?,
                name,
                "shape",
            )
            .map_err(at)?;
            let offsets = u64_list(
                header_field(info, name, "data_offsets").map_err(at)?,
                name,
                "data_offsets",
            )
            .map_err(at)?;
            let [begin, end] = offsets[..] else {
                return Err(at(invalid(format!(
                    "tensor {name:?}: data_offsets must be [begin, end], not {offsets:?}"
                ))));
            };
            let need = data_len(dtype, &dims).map_err(|e| {
                at(invalid(format!(
                    "tensor {name:?}: shape {dims:?}: {}",
                    e.kind()
                )))
            })?;
            if end < begin || end > data_bytes {
                return Err(invalid(format!(
                    "tensor {name:?}: data_offsets [{begin}, {end}] do not lie within the file's \
                     {data_bytes} data bytes"
                ))
                .at_offset(data_start as u64 + begin.min(data_bytes)));
            }
            if end - begin != need {
                return Err(invalid(format!(
                    "tensor {name:?}: data_offsets [{begin}, {end}] span {} bytes, dtype {} × shape \
                     {dims:?} needs {need}",
                    end - begin,
                    dtype_name(st_dtype)
                ))
                .at_offset(data_start as u64 + begin));
            }
            tensors.push((name.clone(), st_dtype, dtype, dims, begin, end));
        }
        tensors.sort_by_key(|t| (t.4, t.5));
        let mut covered = 0u64;
        let mut prev: Option<&str> = None;
        for (name, _, _, _, begin, end) in &tensors {
            if *begin < covered {
                return Err(invalid(format!(
                    "tensor {name:?} (data_offsets [{begin}, {end}]) overlaps tensor {:?}, which \
                     ends at data byte {covered}",
                    prev.unwrap_or_default()
                ))
                .at_offset(data_start as u64 + begin));
            }
            if *begin > covered {
                return Err(invalid(format!(
                    "data bytes {covered}..{begin} before tensor {name:?} belong to no tensor \
                     (safetensors packs tensors without gaps)"
                ))
                .at_offset(data_start as u64 + covered));
            }
            covered = *end;
            prev = Some(name);
        }
        if covered != data_bytes {
            return Err(invalid(format!(
                "{} data bytes follow the last tensor (the tensors cover {covered} of {data_bytes})",
                data_bytes - covered
            ))
            .at_offset(data_start as u64 + covered));
        }
        // The reference reader must agree; it gives the tensors' bytes.
        let st = safetensors::SafeTensors::deserialize(bytes)
            .map_err(|e| invalid(format!("the safetensors library refuses the file: {e}")))?;
        let mut out = Vec::with_capacity(tensors.len());
        for (name, st_dtype, dtype, dims, begin, end) in tensors {
            let t = st
                .tensor(&name)
                .map_err(|e| invalid(format!("the safetensors library refuses the file: {e}")))?;
            let view = TensorView::new(dtype, dims, Vec::new(), t.data())
                .map_err(|e| e.at_offset(data_start as u64 + begin))?;
            out.push(FileTensor {
                name,
                st_dtype,
                view,
                begin,
                end,
            });
        }
        Ok(SafetensorsFile {
            header,
            metadata,
            tensors: out,
        })
    }
}

/// A safetensors header: `__metadata__` first, then the tensors in the order given, in the
/// compact JSON the safetensors library writes, padded with spaces to a multiple of 8.
fn render_header<'n>(
    metadata: Option<&Map<String, Value>>,
    tensors: impl Iterator<Item = (&'n str, Dtype, Vec<u64>, u64, u64)>,
) -> Result<Vec<u8>> {
    let mut root = Map::new();
    if let Some(m) = metadata {
        root.insert(HEADER_METADATA.to_string(), Value::Object(m.clone()));
    }
    for (name, dtype, dims, begin, end) in tensors {
        let mut info = Map::new();
        info.insert("dtype".into(), Value::String(dtype_name(dtype)));
        info.insert("shape".into(), dims.into());
        info.insert("data_offsets".into(), vec![begin, end].into());
        root.insert(name.to_string(), Value::Object(info));
    }
    let mut bytes = serde_json::to_vec(&Value::Object(root))
        .map_err(|e| invalid(format!("cannot render the safetensors header: {e}")))?;
    bytes.resize(bytes.len().next_multiple_of(8), b' ');
    Ok(bytes)
}

internal! {
/// What an import did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ImportReport {
    /// The new tag.
    pub tag: String,
    /// True when the archive did not exist and was created.
    pub created: bool,
    /// The safetensors files read, in the order their tensors were stored.
    pub files: Vec<PathBuf>,
    /// The parameters, in the order stored (each file's tensors by data offset).
    pub params: Vec<ImportedParam>,
    /// True when the export gives back what was imported byte for byte:
    /// an export to a file that file, for one file; an export to a directory the shards
    /// and index, for a sharded checkpoint. It does when every header is laid out as
    /// the safetensors library lays it out and the index as `transformers` writes it.
    pub exact_export: bool,
    /// For an `s3://` archive: the remote append's versions and costs.
    #[cfg(feature = "remote")]
    pub remote: Option<crate::remote::RemoteWrite>,
}
}

/// A sharded checkpoint's index.
struct IndexInfo {
    path: PathBuf,
    /// Its `"metadata"` object.
    metadata: Option<Value>,
    /// Tensor name → shard file name.
    weight_map: HashMap<String, String>,
    /// True when the index is what [`render_index`] writes for it (as `transformers` writes
    /// it: sorted keys, indent 2, ASCII only, a final newline).
    canonical: bool,
}

/// Where the tensors of `inputs` are: one file, a directory holding `model.safetensors`
/// or `model.safetensors.index.json`, an index, or several shards. Returns the files
/// and the index when there is one.
fn resolve_inputs(inputs: &[PathBuf]) -> Result<(Vec<PathBuf>, Option<IndexInfo>)> {
    let [only] = inputs else {
        if inputs.is_empty() {
            return Err(invalid("no safetensors file given".into()));
        }
        return Ok((inputs.to_vec(), None));
    };
    let index_path = if only.is_dir() {
        let index = only.join(INDEX_FILE);
        let single = only.join(SINGLE_FILE);
        if index.is_file() && single.is_file() {
            // transformers loads model.safetensors then; an index left from an earlier
            // sharded save is common (save_pretrained does not remove it). Which one is
            // meant is the user's to say.
            return Err(invalid(format!(
                "the directory holds both {SINGLE_FILE} and {INDEX_FILE}; name the one to \
                 import (transformers loads {SINGLE_FILE})"
            ))
            .in_file(only));
        } else if index.is_file() {
            index
        } else if single.is_file() {
            return Ok((vec![single], None));
        } else {
            return Err(invalid(format!(
                "the directory has neither {INDEX_FILE} nor {SINGLE_FILE}"
            ))
            .in_file(only));
        }
    } else if only.to_string_lossy().ends_with(".json") {
        only.clone()
    } else {
        return Ok((vec![only.clone()], None));
    };
    let (files, info) = read_index(&index_path).map_err(|e| e.in_file(&index_path))?;
    Ok((files, Some(info)))
}

/// Reads a sharded checkpoint's index: `{"metadata": {...}, "weight_map": {tensor: shard}}`.
/// The shards are files beside it, in byte order of their names.
fn read_index(path: &Path) -> Result<(Vec<PathBuf>, IndexInfo)> {
    let size = std::fs::metadata(path)?.len();
    if size > MAX_INDEX_BYTES {
        return Err(ErrorKind::LimitExceeded {
            what: "safetensors index size",
            size,
            limit: MAX_INDEX_BYTES,
        }
        .into());
    }
    let bytes = std::fs::read(path)?;
    check_json_cost(&bytes, "estimated memory of parsing the safetensors index")?;
    let root: Map<String, Value> = serde_json::from_slice(&bytes)
        .map_err(|e| invalid(format!("the index is not a JSON object: {e}")).at_line(e.line()))?;
    let map = root
        .get("weight_map")
        .and_then(Value::as_object)
        .ok_or_else(|| invalid("the index has no \"weight_map\" object".into()))?;
    let dir = crate::archive::parent_dir(path);
    let mut weight_map = HashMap::with_capacity(map.len());
    let mut shards: Vec<&str> = Vec::new();
    for (tensor, shard) in map {
        let shard = shard.as_str().ok_or_else(|| {
            invalid(format!(
                "weight_map: tensor {tensor:?} maps to {shard}, not a file name"
            ))
        })?;
        let plain = !shard.is_empty()
            && !shard.contains('\0')
            && Path::new(shard)
                .components()
                .all(|c| matches!(c, Component::Normal(_)));
        if !plain {
            return Err(invalid(format!(
                "weight_map: tensor {tensor:?} maps to {shard:?}, which is not a plain file name \
                 beside the index; refusing to read it"
            )));
        }
        shards.push(shard);
        weight_map.insert(tensor.clone(), shard.to_string());
    }
    if shards.is_empty() {
        return Err(invalid("the index's weight_map maps no tensor".into()));
    }
    shards.sort_unstable();
    shards.dedup();
    let files = shards.iter().map(|s| dir.join(s)).collect();
    let canonical = root.keys().all(|k| k == "metadata" || k == "weight_map")
        && render_index(&Value::Object(root.clone())).as_bytes() == bytes.as_slice();
    Ok((
        files,
        IndexInfo {
            path: path.to_path_buf(),
            metadata: root.get("metadata").cloned(),
            weight_map,
            canonical,
        },
    ))
}

/// JSON as Python's `json.dumps(v, indent=2, sort_keys=True) + "\n"` writes it, which is
/// how `transformers` writes `model.safetensors.index.json` (numbers as serde_json writes
/// them: the same for the integers an index holds).
fn render_index(v: &Value) -> String {
    fn string(s: &str, out: &mut String) {
        out.push('"');
        for c in s.chars() {
            match c {
                '"' => out.push_str("\\\""),
                '\\' => out.push_str("\\\\"),
                '\n' => out.push_str("\\n"),
                '\r' => out.push_str("\\r"),
                '\t' => out.push_str("\\t"),
                '\u{8}' => out.push_str("\\b"),
                '\u{c}' => out.push_str("\\f"),
                // Python escapes everything outside printable ASCII (0x20..=0x7e).
                c if !(' '..='~').contains(&c) => {
                    let mut units = [0u16; 2];
                    for u in c.encode_utf16(&mut units) {
                        out.push_str(&format!("\\u{u:04x}"));
                    }
                }
                c => out.push(c),
            }
        }
        out.push('"');
    }
    fn value(v: &Value, depth: usize, out: &mut String) {
        let pad = |out: &mut String, d: usize| {
            out.push('\n');
            out.push_str(&"  ".repeat(d));
        };
        match v {
            Value::String(s) => string(s, out),
            Value::Array(items) if !items.is_empty() => {
                out.push('[');
                for (i, x) in items.iter().enumerate() {
                    if i > 0 {
                        out.push(',');
                    }
                    pad(out, depth + 1);
                    value(x, depth + 1, out);
                }
                pad(out, depth);
                out.push(']');
            }
            Value::Object(m) if !m.is_empty() => {
                let mut keys: Vec<&String> = m.keys().collect();
                keys.sort();
                out.push('{');
                for (i, k) in keys.into_iter().enumerate() {
                    if i > 0 {
                        out.push(',');
                    }
                    pad(out, depth + 1);
                    string(k, out);
                    out.push_str(": ");
                    value(&m[k], depth + 1, out);
                }
                pad(out, depth);
                out.push('}');
            }
            other => out.push_str(&other.to_string()),
        }
    }
    let mut out = String::new();
    value(v, 0, &mut out);
    out.push('\n');
    out
}

internal! {
/// Imports safetensors as tag `tag` of the archive at `archive` (created if absent, else
/// added as `opts.mode` says, in place by default). `inputs` is one `.safetensors` file; a
/// sharded checkpoint's `model.safetensors.index.json` (its shards are read from beside
/// it, and must hold exactly the tensors it maps to them); a directory with either; or
/// several shard files (tensor names unique across them).
///
/// Every tensor becomes a parameter of the same name, its bytes stored as they are (so
/// tensors identical to ones already in the archive are referenced, not copied). The
/// files' `__metadata__` is kept in the tag's metadata.json (shards must agree on it).
/// Every file is checked whole before anything is written: a dtype modelzip cannot hold
/// is refused naming the tensor, a malformed header (too long, truncated, not JSON,
/// offsets past the file, overlapping or leaving gaps, spans that do not match dtype ×
/// shape) is refused with its byte offset.
pub fn import_safetensors(
    archive: &Path,
    tag: &str,
    inputs: &[PathBuf],
    opts: &ImportOptions,
) -> Result<ImportReport> {
    let (files, index) = resolve_inputs(inputs)?;
    let maps = files
        .iter()
        .map(TensorFile::open)
        .collect::<Result<Vec<_>>>()?;
    let parsed = maps
        .iter()
        .zip(&files)
        .map(|(m, f)| read_safetensors(m.bytes()).map_err(|e| e.in_file(f)))
        .collect::<Result<Vec<_>>>()?;
    // Names unique across files; with an index, each shard holds exactly its tensors.
    let mut seen: HashMap<&str, &Path> = HashMap::new();
    for (p, f) in parsed.iter().zip(&files) {
        for t in &p.tensors {
            if t.name.is_empty() {
                return Err(invalid(
                    "a tensor has the empty name \"\", which a modelzip parameter cannot have"
                        .into(),
                )
                .in_file(f));
            }
            if let Some(other) = seen.insert(&t.name, f) {
                return Err(invalid(format!(
                    "tensor {:?} is in two files: {} and {}",
                    t.name,
                    other.display(),
                    f.display()
                )));
            }
            if let Some(ix) = &index {
                let map = &ix.weight_map;
                let want = map
                    .get(&t.name)
                    .map(|s| crate::archive::parent_dir(&ix.path).join(s));
                if want.as_deref() != Some(f.as_path()) {
                    return Err(invalid(format!(
                        "tensor {:?} is in this shard, but the index maps it to {}",
                        t.name,
                        map.get(&t.name)
                            .map_or("no shard".to_string(), |s| format!("{s:?}"))
                    ))
                    .in_file(f));
                }
            }
        }
    }
    if let Some(ix) = &index
        && let Some((name, shard)) = ix
            .weight_map
            .iter()
            .find(|(n, _)| !seen.contains_key(n.as_str()))
    {
        return Err(invalid(format!(
            "the index maps tensor {name:?} to {shard:?}, which does not hold it"
        ))
        .in_file(&ix.path));
    }
    let metadata = parsed[0].metadata.clone();
    if let Some(i) = parsed.iter().position(|p| p.metadata != metadata) {
        return Err(invalid(format!(
            "the files' {HEADER_METADATA} differ ({} and {}); a tag keeps one",
            files[0].display(),
            files[i].display()
        )));
    }
    let single = parsed.len() == 1 && index.is_none();
    let all_canonical = parsed
        .iter()
        .map(SafetensorsFile::header_is_canonical)
        .collect::<Result<Vec<bool>>>()?
        .into_iter()
        .all(|c| c);
    let exact_export = all_canonical && index.as_ref().is_none_or(|ix| ix.canonical);
    let file_name = |p: &Path| {
        p.file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default()
    };
    let mut kept = Map::new();
    if let Some(m) = &metadata {
        kept.insert(HEADER_METADATA.into(), Value::Object(m.clone()));
    }
    kept.insert(
        "order".into(),
        Value::String(if single { "file" } else { "aligned" }.into()),
    );
    if let Some(ix) = &index {
        kept.insert("index".into(), Value::String(file_name(&ix.path)));
        if let Some(m) = &ix.metadata {
            kept.insert("index_metadata".into(), m.clone());
        }
    }
    if !single {
        let shards = parsed
            .iter()
            .zip(&files)
            .map(|(p, f)| serde_json::json!({"file": file_name(f), "tensors": p.tensors.len()}))
            .collect();
        kept.insert("shards".into(), Value::Array(shards));
    }
    // The caller's metadata.json (ImportOptions::metadata), with the files' key added.
    let mut root = match &opts.metadata {
        Some(m) => match serde_json::from_slice::<Value>(m) {
            Ok(Value::Object(o)) if !o.contains_key(METADATA_KEY) => o,
            Ok(Value::Object(_)) => {
                return Err(invalid(format!(
                    "the metadata given has a {METADATA_KEY:?} key, which the import writes"
                )));
            }
            _ => return Err(invalid("the metadata given is not a JSON object".into())),
        },
        None => Map::new(),
    };
    root.insert(METADATA_KEY.into(), Value::Object(kept));
    let metadata_json = serde_json::to_vec(&Value::Object(root))
        .map_err(|e| invalid(format!("cannot render metadata.json: {e}")))?;
    // Leave room for the "created" key the writer adds: readers refuse a larger file.
    let room = crate::archive::MAX_METADATA_BYTES - 64;
    if metadata_json.len() as u64 > room {
        return Err(Error::new(ErrorKind::LimitExceeded {
            what: "metadata.json holding the files' __metadata__",
            size: metadata_json.len() as u64,
            limit: room,
        })
        .in_file(&files[0]));
    }

    let total: usize = parsed.iter().map(|p| p.tensors.len()).sum();
    let mut ticker = Ticker::from_hook(opts.write.progress.as_ref(), total as u64);
    let created = paddle::write_tag(archive, tag, opts, |w| {
        w.metadata(&metadata_json)?;
        for (p, f) in parsed.iter().zip(&files) {
            for t in &p.tensors {
                w.param(&t.name, &t.view).map_err(|e| e.in_file(f))?;
                ticker.tick();
            }
        }
        Ok(())
    })?;
    let r = paddle::report(archive, tag, created, None)?;
    Ok(ImportReport {
        tag: r.tag,
        created: r.created,
        files,
        params: r.params,
        exact_export,
        #[cfg(feature = "remote")]
        remote: r.remote,
    })
}
}

/// A parameter as safetensors sees it: dtype, shape and the archive's bytes, borrowed
/// (the names of one tensor file share its one read: a deflated file is inflated once).
#[derive(Debug)]
pub(crate) struct ParamView<'a> {
    dtype: Dtype,
    shape: Vec<usize>,
    data: std::sync::Arc<TensorData<'a>>,
}

impl View for ParamView<'_> {
    fn dtype(&self) -> Dtype {
        self.dtype
    }
    fn shape(&self) -> &[usize] {
        &self.shape
    }
    fn data(&self) -> Cow<'_, [u8]> {
        // A view of the mapped archive (or of the one decompressed copy): never copied.
        match &*self.data {
            TensorData::Mapped(v) => Cow::Borrowed(v.data()),
            TensorData::Owned(t) => Cow::Borrowed(t.data()),
        }
    }
    fn data_len(&self) -> usize {
        match &*self.data {
            TensorData::Mapped(v) => v.data().len(),
            TensorData::Owned(t) => t.data().len(),
        }
    }
}

/// A tag laid out as a safetensors file.
struct Layout<'a> {
    /// The padded header.
    header: Vec<u8>,
    /// The tensors in file order.
    tensors: Vec<(String, ParamView<'a>)>,
    /// The whole file's size.
    total: u64,
    /// The tensors' bytes.
    data_bytes: u64,
    metadata_written: bool,
}

/// What the tag's metadata.json says about safetensors (all empty for a tag that did not
/// come from safetensors).
#[derive(Debug, Default)]
struct Kept {
    /// `__metadata__`.
    metadata: Option<Map<String, Value>>,
    /// Keep params.txt order (a tag from one file).
    file_order: bool,
    /// The shards it came from: file name and tensor count, in params.txt order.
    shards: Vec<(String, usize)>,
    /// The index's `"metadata"`.
    index_metadata: Option<Value>,
}

fn kept_metadata(tag: &Tag<'_>) -> Result<Kept> {
    let entry = format!("{}/metadata.json", tag.name());
    let Some(bytes) = tag.metadata()? else {
        return Ok(Kept::default());
    };
    check_json_cost(&bytes, "estimated memory of parsing metadata.json")
        .map_err(|e| e.in_entry(&entry))?;
    let root: Value = serde_json::from_slice(&bytes)
        .map_err(|e| invalid(format!("metadata.json is not JSON: {e}")).in_entry(&entry))?;
    let Some(kept) = root.get(METADATA_KEY) else {
        return Ok(Kept::default());
    };
    let bad = |why: &str| invalid(format!("the {METADATA_KEY:?} record {why}")).in_entry(&entry);
    let kept = kept.as_object().ok_or_else(|| bad("is not an object"))?;
    let file_order = kept.get("order").and_then(Value::as_str) == Some("file");
    let metadata = match kept.get(HEADER_METADATA) {
        None => None,
        Some(Value::Object(m)) if m.values().all(Value::is_string) => Some(m.clone()),
        Some(_) => {
            return Err(bad(&format!(
                "has a {HEADER_METADATA} that is not an object of strings"
            )));
        }
    };
    let mut shards = Vec::new();
    if let Some(list) = kept.get("shards") {
        let list = list
            .as_array()
            .ok_or_else(|| bad("has \"shards\" that is not a list"))?;
        for s in list {
            let file = s.get("file").and_then(Value::as_str);
            let count = s.get("tensors").and_then(Value::as_u64);
            let (Some(file), Some(count)) = (file, count) else {
                return Err(bad("has a shard without \"file\" and \"tensors\""));
            };
            shards.push((
                file.to_string(),
                usize::try_from(count).unwrap_or(usize::MAX),
            ));
        }
    }
    Ok(Kept {
        metadata,
        file_order,
        shards,
        index_metadata: kept.get("index_metadata").cloned(),
    })
}

/// The tag's parameters as safetensors tensors, in params.txt order; refuses what
/// safetensors cannot express, naming the parameter.
fn param_views<'a>(tag: &Tag<'a>) -> Result<Vec<(String, ParamView<'a>)>> {
    let name = tag.name();
    if let Some(why) = crate::variants::quantized_variant(tag)? {
        return Err(invalid(format!(
            "tag {name:?} {why}; a safetensors file has no place for the scales"
        )));
    }
    let mut tensors = Vec::with_capacity(tag.params().len());
    // Each tensor file read once, however many names list it.
    let mut read: HashMap<&str, std::sync::Arc<TensorData<'a>>> = HashMap::new();
    for p in tag.params() {
        let refuse = |why: String| {
            invalid(format!(
                "parameter {:?} of tag {name:?} {why}; safetensors cannot express it",
                p.name
            ))
        };
        if p.name == HEADER_METADATA {
            return Err(refuse(format!("is named {HEADER_METADATA}")));
        }
        let data = match read.get(&*p.location.entry) {
            Some(d) => d.clone(),
            None => {
                let d = std::sync::Arc::new(tag.tensor(&p.location)?);
                read.insert(&p.location.entry, d.clone());
                d
            }
        };
        let v = data.view();
        if !v.lod().is_empty() {
            return Err(refuse(format!(
                "has a LoD (level of detail, {} level(s))",
                v.lod().len()
            )));
        }
        let dtype = dtype_to_safetensors(v.dtype())
            .ok_or_else(|| refuse(format!("has dtype {}", v.dtype())))?;
        let shape = v
            .dims()
            .iter()
            .map(|&d| usize::try_from(d))
            .collect::<std::result::Result<Vec<_>, _>>()
            .map_err(|_| {
                refuse(format!(
                    "has dims {:?} beyond this machine's usize",
                    v.dims()
                ))
            })?;
        drop(v);
        tensors.push((p.name.clone(), ParamView { dtype, shape, data }));
    }
    Ok(tensors)
}

/// Sorts tensors as the safetensors library does: larger alignment first, then by name,
/// so every tensor starts aligned for its dtype.
fn sort_aligned(tensors: &mut [(String, ParamView<'_>)]) {
    tensors.sort_by(|(ln, l), (rn, r)| r.dtype.cmp(&l.dtype).then(ln.cmp(rn)));
}

/// Lays out `tensors`, in this order, as one safetensors file.
fn layout_of<'a>(
    metadata: Option<&Map<String, Value>>,
    tensors: Vec<(String, ParamView<'a>)>,
) -> Result<Layout<'a>> {
    let mut offsets = Vec::with_capacity(tensors.len());
    let mut at = 0u64;
    for (_, t) in &tensors {
        let end = at.checked_add(t.data_len() as u64).ok_or_else(|| {
            ErrorKind::SizeOverflow("the export's data exceeds 2^64 bytes".into())
        })?;
        offsets.push((at, end));
        at = end;
    }
    let header = render_header(
        metadata,
        tensors.iter().zip(&offsets).map(|((n, t), &(b, e))| {
            let dims = t.shape.iter().map(|&d| d as u64).collect();
            (n.as_str(), t.dtype, dims, b, e)
        }),
    )?;
    if header.len() as u64 > MAX_HEADER_BYTES {
        return Err(ErrorKind::LimitExceeded {
            what: "safetensors header length",
            size: header.len() as u64,
            limit: MAX_HEADER_BYTES,
        }
        .into());
    }
    let total = (8 + header.len() as u64)
        .checked_add(at)
        .ok_or_else(|| ErrorKind::SizeOverflow("the export exceeds 2^64 bytes".into()))?;
    Ok(Layout {
        header,
        tensors,
        total,
        data_bytes: at,
        metadata_written: metadata.is_some(),
    })
}

fn layout<'a>(tag: &Tag<'a>) -> Result<Layout<'a>> {
    let kept = kept_metadata(tag)?;
    let mut tensors = param_views(tag)?;
    if !kept.file_order {
        sort_aligned(&mut tensors);
    }
    layout_of(kept.metadata.as_ref(), tensors)
}

fn write_layout(l: &Layout<'_>, w: &mut dyn Write) -> std::io::Result<()> {
    w.write_all(&(l.header.len() as u64).to_le_bytes())?;
    w.write_all(&l.header)?;
    for (_, t) in &l.tensors {
        w.write_all(&t.data())?;
    }
    Ok(())
}

internal! {
/// What an export wrote.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExportReport {
    /// The tag exported, spelled as in tags.txt.
    pub tag: String,
    /// The file written.
    pub path: PathBuf,
    /// Its size.
    pub bytes: u64,
    /// The tensors, in file order.
    pub tensors: Vec<String>,
    /// True when `__metadata__` was written (from the tag's metadata.json).
    pub metadata_written: bool,
}
}

/// The safetensors bytes of tag `tag`, in memory (what an export to a file writes).
pub fn export_safetensors_bytes(tag: &Tag<'_>) -> Result<Vec<u8>> {
    let l = layout(tag)?;
    let mut out = Vec::new();
    out.try_reserve_exact(usize::try_from(l.total).unwrap_or(usize::MAX))
        .map_err(|e| {
            invalid(format!(
                "cannot hold a {}-byte export in memory: {e}",
                l.total
            ))
        })?;
    write_layout(&l, &mut out)?;
    Ok(out)
}

internal! {
/// Writes tag `tag`'s parameters as the safetensors file `out`.
///
/// Every parameter is one tensor of the same name; parameters that share one tensor file
/// are each written. The tensors are in the order the safetensors library writes (larger
/// dtypes first, then by name), or, for a tag imported from one safetensors file, in that
/// file's order; `__metadata__` is the one the import kept. A parameter with a LoD, or of
/// dtype SIZE_T or COMPLEX128, is refused naming it, and so is an INT8 variant (its
/// scales have no place in the file); the graph and updater state are not part of a
/// safetensors file and are left out.
///
/// The file is written to a temp file beside `out`, fsynced (if `opts.fsync`) and renamed
/// into place; an existing `out` is refused unless `opts.overwrite`.
pub fn export_safetensors(tag: &Tag<'_>, out: &Path, opts: &ExportOptions) -> Result<ExportReport> {
    let l = layout(tag)?;
    super::check_output_size(tag, opts, "export size (the safetensors file)", l.total)?;
    let dir = crate::archive::parent_dir(out);
    if !dir.is_dir() {
        return Err(invalid("the output directory does not exist".into()).in_file(&dir));
    }
    super::refuse_existing(tag, out, opts.overwrite)?;
    let temp = paddle::write_temp(out, opts.fsync, |w| write_layout(&l, w))?;
    let written = temp
        .as_file()
        .metadata()
        .map_err(|e| Error::from(e).in_file(out))?
        .len();
    if written != l.total {
        return Err(invalid(format!(
            "wrote {written} bytes, the layout needs {}",
            l.total
        ))
        .in_file(out));
    }
    paddle::persist(temp, out, opts.overwrite)?;
    if opts.fsync {
        std::fs::File::open(&dir)
            .and_then(|d| d.sync_all())
            .map_err(|e| Error::from(e).in_file(&dir))?;
    }
    Ok(ExportReport {
        tag: tag.name().to_string(),
        path: out.to_path_buf(),
        bytes: l.total,
        tensors: l.tensors.iter().map(|(n, _)| n.clone()).collect(),
        metadata_written: l.metadata_written,
    })
}
}

internal! {
    /// The shard size `transformers` uses by default (`max_shard_size="5GB"`).
    pub const DEFAULT_MAX_SHARD_BYTES: u64 = 5_000_000_000;
}

/// What a sharded export wrote.
struct ShardedExportReport {
    /// The tag exported, spelled as in tags.txt.
    tag: String,
    /// `DIR/model.safetensors.index.json`.
    index_path: PathBuf,
    /// The index's size in bytes.
    index_bytes: u64,
    /// The shards: path, size, tensors in file order.
    shards: Vec<(PathBuf, u64, Vec<String>)>,
    /// True when the shards are the ones the tag was imported from (names, tensors, order).
    as_imported: bool,
}

/// The note of a sharded export that wrote the shards the tag was imported from (same
/// names, same tensors in the same order).
const AS_IMPORTED: &str = "the shards as they were imported";

/// The shard file name `transformers` gives shard `i` (from 1) of `n`.
fn shard_name(i: usize, n: usize) -> String {
    format!("model-{i:05}-of-{n:05}.safetensors")
}

/// Writes tag `tag` as a sharded checkpoint in directory `dir`: shards
/// `model-0000I-of-0000N.safetensors` and `model.safetensors.index.json`, which
/// `transformers` (and modelzip's safetensors import) load.
///
/// With `max_shard_bytes` `None`, a tag imported from shards is written as those shards
/// (same names, same tensors in the same order, the kept index `"metadata"` when its
/// `total_size` still holds): byte for byte what was imported when
/// the import found the files written by the safetensors library. Otherwise the tensors, in the library's order
/// (larger dtypes first, then by name), are cut into shards of at most `max_shard_bytes`
/// of data (5 GB, as `transformers` uses, when `None`), as `transformers` cuts them: a
/// tensor larger than that gets a shard of its own. The index is written as `transformers`
/// writes it; `__metadata__` of every shard is the one the import kept. The refusals are
/// those of an export to one file.
///
/// Every file is written to a temp file first; only when all are written are they renamed
/// into place (the index last), so a failure leaves none of them behind. Existing files
/// are refused unless `opts.overwrite`. Users reach it through the [`Format`]
/// trait's export to a directory (with [`ExportOptions::max_shard_bytes`]).
///
/// [`Format`]: super::Format
fn export_safetensors_sharded(
    tag: &Tag<'_>,
    dir: &Path,
    max_shard_bytes: Option<u64>,
    opts: &ExportOptions,
) -> Result<ShardedExportReport> {
    if !dir.is_dir() {
        return Err(invalid("the output directory does not exist".into()).in_file(dir));
    }
    let kept = kept_metadata(tag)?;
    let mut tensors = param_views(tag)?;
    let counts: Vec<usize> = kept.shards.iter().map(|(_, n)| *n).collect();
    let as_imported = max_shard_bytes.is_none()
        && !kept.shards.is_empty()
        && counts.iter().try_fold(0usize, |a, &n| a.checked_add(n)) == Some(tensors.len());
    let mut groups: Vec<(String, Vec<(String, ParamView<'_>)>)> = Vec::new();
    if as_imported {
        let mut rest = tensors.into_iter();
        for (file, n) in &kept.shards {
            groups.push((file.clone(), rest.by_ref().take(*n).collect()));
        }
    } else {
        sort_aligned(&mut tensors);
        let max = max_shard_bytes.unwrap_or(DEFAULT_MAX_SHARD_BYTES);
        let mut parts: Vec<Vec<(String, ParamView<'_>)>> = Vec::new();
        let mut size = 0u64;
        for t in tensors {
            let len = t.1.data_len() as u64;
            if parts.is_empty() || (size > 0 && size.saturating_add(len) > max) {
                parts.push(Vec::new());
                size = 0;
            }
            size = size.saturating_add(len);
            if let Some(last) = parts.last_mut() {
                last.push(t);
            }
        }
        if parts.is_empty() {
            parts.push(Vec::new());
        }
        let n = parts.len();
        groups = parts
            .into_iter()
            .enumerate()
            .map(|(i, p)| (shard_name(i + 1, n), p))
            .collect();
    }
    let mut layouts = Vec::with_capacity(groups.len());
    let mut weight_map = Map::new();
    let mut total_size = 0u64;
    let mut names: std::collections::HashSet<String> = std::collections::HashSet::new();
    for (file, ts) in groups {
        let plain = matches!(
            Path::new(&file).components().collect::<Vec<_>>().as_slice(),
            [Component::Normal(_)]
        );
        if !plain {
            return Err(invalid(format!(
                "the shard name {file:?} kept in the tag's metadata.json is not a plain file name"
            )));
        }
        // Two shards (or a shard and the index) of one name: one file would replace the
        // other, its tensors lost.
        if file == INDEX_FILE || !names.insert(file.clone()) {
            return Err(invalid(format!(
                "the shard name {file:?} kept in the tag's metadata.json names another file of the export (a shard listed twice, or the index)"
            )));
        }
        for (n, _) in &ts {
            weight_map.insert(n.clone(), Value::String(file.clone()));
        }
        let l = layout_of(kept.metadata.as_ref(), ts)?;
        total_size = total_size.saturating_add(l.data_bytes);
        layouts.push((dir.join(&file), l));
    }
    let index_metadata = match &kept.index_metadata {
        Some(m)
            if as_imported && m.get("total_size").and_then(Value::as_u64) == Some(total_size) =>
        {
            m.clone()
        }
        _ => serde_json::json!({"total_size": total_size}),
    };
    let index = render_index(&serde_json::json!({
        "metadata": index_metadata,
        "weight_map": weight_map,
    }));
    let index_path = dir.join(INDEX_FILE);
    let all = layouts
        .iter()
        .map(|(_, l)| l.total)
        .fold(index.len() as u64, u64::saturating_add);
    super::check_output_size(tag, opts, "export size (the shards and their index)", all)?;
    for path in layouts.iter().map(|(p, _)| p).chain([&index_path]) {
        super::refuse_existing(tag, path, opts.overwrite)?;
    }
    let mut temps = Vec::with_capacity(layouts.len() + 1);
    for (path, l) in &layouts {
        temps.push((
            paddle::write_temp(path, opts.fsync, |w| write_layout(l, w))?,
            path.clone(),
        ));
    }
    temps.push((
        paddle::write_temp(&index_path, opts.fsync, |w| w.write_all(index.as_bytes()))?,
        index_path.clone(),
    ));
    // The shards first, the index last; a failure leaves every file as it was.
    super::persist_all(temps, &[], opts.overwrite)?;
    if opts.fsync {
        std::fs::File::open(dir)
            .and_then(|d| d.sync_all())
            .map_err(|e| Error::from(e).in_file(dir))?;
    }
    Ok(ShardedExportReport {
        tag: tag.name().to_string(),
        index_path,
        index_bytes: index.len() as u64,
        shards: layouts
            .iter()
            .map(|(p, l)| {
                (
                    p.clone(),
                    l.total,
                    l.tensors.iter().map(|(n, _)| n.clone()).collect(),
                )
            })
            .collect(),
        as_imported,
    })
}

/// What an export of a tag with a graph leaves out, for the export's notes: the graph,
/// and the constants it keeps whole (an ONNX model's string / INT4 initializers, a
/// TensorFlow graph's string constants), which are not parameters.
fn left_out(tag: &Tag<'_>) -> Result<Vec<String>> {
    let Some((enc, bytes)) = tag.graph()? else {
        return Ok(Vec::new());
    };
    let mut notes = vec![format!(
        "the graph ({}) is not part of a safetensors file: parameters only",
        enc.file_name()
    )];
    if enc == crate::archive::GraphFormat::FlatBuffers {
        let g = crate::graph::Graph::from_flatbuffers(&bytes)
            .map_err(|e| e.in_entry(format!("{}/graph.fb", tag.name())))?;
        let kept = match &g {
            crate::graph::Graph::Onnx(o) => {
                o.initializers.iter().filter(|i| i.param.is_none()).count()
            }
            crate::graph::Graph::Tf(t) => t
                .nodes
                .iter()
                .filter(|n| n.op == "Const" && n.attrs.iter().all(|a| a.param.is_none()))
                .count(),
            crate::graph::Graph::Program(_) | crate::graph::Graph::Pir(_) => 0,
        };
        if kept > 0 {
            notes.push(format!(
                "{kept} constant(s) the graph keeps whole (strings, dtypes modelzip does not \
                 hold as parameters) are not parameters and are not in the file"
            ));
        }
    }
    Ok(notes)
}

/// safetensors in the [`FORMATS`](super::FORMATS) list: `modelzip import` of `.safetensors`
/// files, a sharded checkpoint's index or a directory holding either; `modelzip export
/// --format safetensors` to one file, or to a directory as shards and their index.
pub(crate) struct SafetensorsFormat;

/// Whether `p` names a safetensors input: a `.safetensors` file, an index
/// (`*.safetensors.index.json`), or a directory holding `model.safetensors` or the index.
fn names_safetensors(p: &Path) -> bool {
    let name = p.file_name().and_then(|n| n.to_str()).unwrap_or("");
    super::has_ext(p, "safetensors")
        || name
            .to_ascii_lowercase()
            .ends_with(".safetensors.index.json")
        || (p.is_dir() && (p.join(SINGLE_FILE).is_file() || p.join(INDEX_FILE).is_file()))
}

impl super::Format for SafetensorsFormat {
    fn name(&self) -> &'static str {
        "safetensors"
    }

    fn import(
        &self,
        archive: &Path,
        tag: &str,
        inputs: &[PathBuf],
        opts: &ImportOptions,
    ) -> Result<super::ImportReport> {
        let r = import_safetensors(archive, tag, inputs, opts)?;
        Ok(super::ImportReport {
            tag: r.tag,
            created: r.created,
            graph_entry: None,
            graph_bytes: None,
            params: r.params,
            #[cfg(feature = "remote")]
            remote: r.remote,
        })
    }

    fn export(&self, tag: &Tag<'_>, out: &Path, opts: &ExportOptions) -> Result<super::Exported> {
        if opts.max_shard_bytes.is_some() && !out.is_dir() {
            return Err(invalid(
                "a shard size (max_shard_bytes) writes shards and their index into a \
                 directory, and this is no existing directory: create it, or leave the \
                 shard size out to write one file"
                    .into(),
            )
            .in_file(out));
        }
        if out.is_dir() {
            let r = export_safetensors_sharded(tag, out, opts.max_shard_bytes, opts)?;
            let mut files: Vec<(PathBuf, u64)> =
                r.shards.iter().map(|(p, n, _)| (p.clone(), *n)).collect();
            files.push((r.index_path, r.index_bytes));
            let params = r.shards.iter().flat_map(|(_, _, t)| t.clone()).collect();
            let mut notes = vec![format!("{} shard(s) and their index", r.shards.len())];
            if r.as_imported {
                notes.push(AS_IMPORTED.into());
            }
            notes.extend(left_out(tag)?);
            return Ok(super::Exported {
                tag: r.tag,
                format: "safetensors",
                files,
                params,
                unused: Vec::new(),
                notes,
                graph_converted: false,
            });
        }
        let r = export_safetensors(tag, out, opts)?;
        let mut notes = if r.metadata_written {
            vec!["__metadata__ written back".into()]
        } else {
            Vec::new()
        };
        notes.extend(left_out(tag)?);
        Ok(super::Exported {
            tag: r.tag,
            format: "safetensors",
            files: vec![(r.path, r.bytes)],
            params: r.tensors,
            unused: Vec::new(),
            notes,
            graph_converted: false,
        })
    }
}

impl super::Recognise for SafetensorsFormat {
    fn recognised_from(&self) -> &'static str {
        ".safetensors files, a model.safetensors.index.json, or a directory holding either"
    }

    fn matches_name(&self, inputs: &[PathBuf]) -> bool {
        !inputs.is_empty() && inputs.iter().all(|p| names_safetensors(p))
    }

    fn matches_content(&self, inputs: &[PathBuf]) -> bool {
        // The first 64 KiB and the file's size: a checkpoint of many tensors has a header
        // longer than what is read here.
        let Some(p) = inputs.first() else {
            return false;
        };
        let Ok(len) = std::fs::metadata(p).map(|m| m.len()) else {
            return false;
        };
        let head = super::head(p, 1 << 16);
        let Some(word) = head.first_chunk::<8>() else {
            return false;
        };
        let n = u64::from_le_bytes(*word);
        (2..=MAX_HEADER_BYTES).contains(&n)
            && n <= len.saturating_sub(8)
            && head[8..].iter().find(|b| !b.is_ascii_whitespace()) == Some(&b'{')
    }

    fn is_origin_of(&self, tag: &Tag<'_>) -> Result<bool> {
        if tag.graph()?.is_some() {
            return Ok(false);
        }
        let Some(bytes) = tag.metadata()? else {
            return Ok(false);
        };
        // JSON too costly to parse is not parsed here (a safetensors import never wrote it).
        Ok(
            check_json_cost(&bytes, "estimated memory of parsing metadata.json").is_ok()
                && serde_json::from_slice::<Value>(&bytes)
                    .ok()
                    .is_some_and(|v| v.get(METADATA_KEY).is_some()),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dtype_maps_are_inverse_where_both_exist() {
        for d in DType::ALL {
            if let Some(st) = dtype_to_safetensors(d) {
                assert_eq!(dtype_from_safetensors(st), Some(d), "{d}");
            } else {
                assert!(matches!(d, DType::SizeT | DType::Complex128), "{d}");
            }
        }
        for st in [
            Dtype::F4,
            Dtype::F6_E2M3,
            Dtype::F6_E3M2,
            Dtype::F8_E8M0,
            Dtype::F8_E4M3FNUZ,
            Dtype::F8_E5M2FNUZ,
        ] {
            assert_eq!(dtype_from_safetensors(st), None, "{st}");
        }
        assert_eq!(dtype_name(Dtype::F8_E4M3), "F8_E4M3");
        assert_eq!(dtype_name(Dtype::BOOL), "BOOL");
    }

    fn file(header: &str, data: &[u8]) -> Vec<u8> {
        let mut out = (header.len() as u64).to_le_bytes().to_vec();
        out.extend_from_slice(header.as_bytes());
        out.extend_from_slice(data);
        out
    }

    #[test]
    fn header_rendering_matches_the_safetensors_library() {
        let a = [1u8, 0, 0, 0, 2, 0, 0, 0];
        let b = [7u8; 3];
        let views = vec![
            (
                "b",
                safetensors::tensor::TensorView::new(Dtype::U8, vec![3], &b).unwrap(),
            ),
            (
                "a",
                safetensors::tensor::TensorView::new(Dtype::I32, vec![2], &a).unwrap(),
            ),
        ];
        let meta: HashMap<String, String> = [("format".to_string(), "pt".to_string())].into();
        let theirs = safetensors::serialize(views, Some(meta)).unwrap();
        let parsed = read_safetensors(&theirs).unwrap();
        let mut m = Map::new();
        m.insert("format".into(), "pt".into());
        assert_eq!(parsed.metadata.as_ref(), Some(&m));
        let names: Vec<&str> = parsed.tensors.iter().map(|t| t.name.as_str()).collect();
        assert_eq!(names, ["a", "b"]);
        let ours = render_header(
            Some(&m),
            parsed.tensors.iter().map(|t| {
                (
                    t.name.as_str(),
                    t.st_dtype,
                    t.view.dims().to_vec(),
                    t.begin,
                    t.end,
                )
            }),
        )
        .unwrap();
        assert_eq!(ours, parsed.header);
    }

    #[test]
    fn index_json_is_written_as_python_writes_it() {
        let v = serde_json::json!({
            "weight_map": {"b": "s1", "a\u{e9}\u{1f600}\n\"\\\u{7f}\u{1}": "s2"},
            "metadata": {"total_size": 12, "empty": {}, "list": [1, []]},
        });
        // json.dumps(v, indent=2, sort_keys=True) + "\n", from CPython 3.11.
        let want = "{\n  \"metadata\": {\n    \"empty\": {},\n    \"list\": [\n      1,\n      []\n    ],\n    \"total_size\": 12\n  },\n  \"weight_map\": {\n    \"a\\u00e9\\ud83d\\ude00\\n\\\"\\\\\\u007f\\u0001\": \"s2\",\n    \"b\": \"s1\"\n  }\n}\n";
        assert_eq!(render_index(&v), want);
    }

    #[test]
    fn sniffing_and_json_offsets() {
        assert!(looks_like_safetensors(&file("{}", b"")));
        assert!(looks_like_safetensors(&file("  {}", b"")));
        assert!(read_safetensors(&file("  {}", b"")).is_ok());
        for bad in [
            &b""[..],
            b"\x02\0\0\0\0\0\0\0",
            b"\x02\0\0\0\0\0\0\0[]",
            b"PK\x03\x04xxxxxx",
        ] {
            assert!(!looks_like_safetensors(bad), "{bad:?}");
        }
        assert!(!looks_like_safetensors(&u64::MAX.to_le_bytes()));
        assert_eq!(json_offset("{\"a\":", 1, 5), 4);
        assert_eq!(json_offset("{\n  x", 2, 3), 4);
        assert_eq!(json_offset("{}", 9, 9), 2);
        let e = read_safetensors(&file("{\"a\":1,]", b"")).unwrap_err();
        assert_eq!(e.location().offset, Some(8 + 7), "{e}"); // the `]`
    }

    #[test]
    fn hostile_headers_are_refused_with_offsets() {
        let e = read_safetensors(&[1, 2, 3]).unwrap_err();
        assert!(matches!(e.kind(), ErrorKind::Truncated(_)), "{e}");
        assert!(e.to_string().contains("needs 8 bytes"), "{e}");
        let e = read_safetensors(&u64::MAX.to_le_bytes()).unwrap_err();
        assert!(matches!(e.kind(), ErrorKind::LimitExceeded { .. }), "{e}");
        assert_eq!(e.location().offset, Some(0));
        let e = read_safetensors(&file("{}", b"")[..9]).unwrap_err();
        assert!(matches!(e.kind(), ErrorKind::Truncated(_)), "{e}");
        assert!(e.to_string().contains("needs 2 bytes"), "{e}");
        let h = r#"{"w":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}}"#;
        let e = read_safetensors(&file(h, &[0; 4])).unwrap_err();
        assert!(e.to_string().contains("\"w\""), "{e}");
        assert!(
            e.to_string().contains("within the file's 4 data bytes"),
            "{e}"
        );
    }

    #[test]
    fn headers_that_would_parse_to_far_more_than_their_size_are_refused_unparsed() {
        // 4 million shape entries: 8 MB of text that serde_json would hold as 4 million
        // 80-byte values (a 98 MB header of this kind took 6.3 GB and 92 s to import).
        let shape = vec!["0"; 4_000_000].join(",");
        let h = format!(r#"{{"w":{{"dtype":"F32","shape":[{shape}],"data_offsets":[0,0]}}}}"#);
        let e = read_safetensors(&file(&h, b"")).unwrap_err();
        let ErrorKind::LimitExceeded { what, size, limit } = e.kind() else {
            panic!("{e}");
        };
        assert!(what.contains("parsing the safetensors header"), "{e}");
        assert_eq!(*limit, crate::json_cost::json_budget(h.len()));
        assert!(size > limit, "{e}");
        assert_eq!(e.location().offset, Some(8));
        // So are many members and strings; escaped quotes do not end a string.
        let many = (0..2_000_000)
            .map(|i| format!(r#""{i}":"""#))
            .collect::<Vec<_>>()
            .join(",");
        let m = format!(r#"{{"__metadata__":{{{many}}}}}"#);
        assert!(check_json_cost(m.as_bytes(), "x").is_err());
        // Real headers cost a few times their size: one of 20,000 tensors (long names,
        // rank 4, metadata) passes, and a long escaped string costs its length.
        let tensors = (0..20_000)
            .map(|i| {
                format!(
                    r#""model.layers.{i}.mlp.w":{{"dtype":"F32","shape":[1,1,1,1],"data_offsets":[{},{}]}}"#,
                    4 * i,
                    4 * i + 4
                )
            })
            .collect::<Vec<_>>()
            .join(",");
        let h = format!(r#"{{"__metadata__":{{"format":"pt"}},{tensors}}}"#);
        let bytes = file(&h, &[0; 80_000]);
        assert_eq!(read_safetensors(&bytes).unwrap().tensors.len(), 20_000);
        let s = format!("[\"{}\"]", "a\\\"".repeat(1 << 20));
        assert!(check_json_cost(s.as_bytes(), "x").is_ok());
    }
}
