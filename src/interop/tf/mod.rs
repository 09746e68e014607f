//! TensorFlow frozen GraphDefs in and out of archives.
//!
//! A frozen GraphDef is a graph whose variables have become `Const` nodes holding the
//! weights. `import_graphdef` stores one as a tag: every numeric `Const` node's value
//! becomes a parameter named after the node (LoDTensor layout, deduplicated against the
//! archive like every tensor), and the graph goes to `graph.fb` (a [`TfGraph`]) with
//! each such Const referring to its parameter. Everything else is kept as it came:
//! string and other non-numeric constants, attributes of every kind, control inputs
//! (`^node`), devices, the function library, versions and debug info.
//! `export_graphdef` rebuilds the GraphDef, equal to the imported one as a protobuf
//! message: node order, attributes, library, versions, and each Const's value in the
//! form it came in (`tensor_content`, the typed field, or the splat form where fewer
//! values than elements are written and TensorFlow repeats the last one).
//!
//! Binary (`.pb`) and text (`.pbtxt`) GraphDefs are read and written; docs/TENSORFLOW.md has
//! the mapping and what is refused.
//!
//! ```no_run
//! use modelzip::interop::{tf, ExportOptions, ImportOptions};
//! use modelzip::Archive;
//! use std::path::Path;
//!
//! tf::import_graphdef_file(Path::new("model.zip"), "v1", Path::new("frozen.pb"),
//!                          &ImportOptions::default())?;
//! let archive = Archive::open("model.zip")?;
//! tf::export_graphdef_file(&archive.tag("v1")?, Path::new("out.pbtxt"),
//!                          &ExportOptions::default())?;
//! # Ok::<(), modelzip::Error>(())
//! ```

pub(crate) mod dump;
pub mod saved_model;

use super::{
    ExportOptions, Exported, Format, ImportOptions, ImportReport, has_ext, head, read_whole,
    report, write_file_atomically, write_tag,
};
use crate::archive::{GraphFormat, Tag, TensorData};
use crate::error::{Error, ErrorKind, Result};
use crate::graph::{Graph, TfAttr, TfGraph, TfNode, TfParamRef};
use crate::progress::Ticker;
use crate::proto_walk::{MAX_DEPTH, Stop, Walk, decode_budget, decode_stored};
use crate::tensor::{DType, TensorView};
use crate::tf_proto as pb;
use bytes::Bytes;
use prost::Message;
use prost_reflect::{DescriptorPool, DynamicMessage, MessageDescriptor};
use std::collections::{BTreeMap, HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

internal! {
    /// Largest GraphDef accepted (protobuf's own limit is 2 GiB).
    pub const MAX_GRAPHDEF_BYTES: u64 = 1 << 31;
}

internal! {
    /// Most nodes a GraphDef may have, counted on the wire before decoding, over the graph
    /// and its library's functions. Real frozen graphs have thousands; decoding costs a few
    /// hundred bytes per node whatever its encoded size.
    pub const MAX_NODES: u64 = 200_000;
}

internal! {
    /// Deepest nesting of messages accepted in a text GraphDef (the binary decoder stops at
    /// 100 as well).
    pub const MAX_TEXT_DEPTH: usize = 100;
}

internal! {
    /// Most bytes the splat constants (fewer values than elements) of one GraphDef are
    /// expanded to as parameters, in all; a splat past it stays in the graph as written (it
    /// is small there), so a few bytes of GraphDef cannot ask for gigabytes.
    pub const MAX_SPLAT_BYTES: u64 = 256 << 20;
}

fn gerr(msg: impl Into<String>) -> Error {
    ErrorKind::Graph(msg.into()).into()
}

fn invalid(msg: impl Into<String>) -> Error {
    ErrorKind::InvalidInput(msg.into()).into()
}

// ---------------------------------------------------------------------------------
// GraphDef bytes and text

fn pool() -> Result<&'static DescriptorPool> {
    static POOL: OnceLock<Option<DescriptorPool>> = OnceLock::new();
    POOL.get_or_init(|| DescriptorPool::decode(pb::FILE_DESCRIPTOR_SET).ok())
        .as_ref()
        .ok_or_else(|| gerr("the compiled TensorFlow descriptor set is unreadable"))
}

fn descriptor(name: &str) -> Result<MessageDescriptor> {
    pool()?
        .get_message_by_name(name)
        .ok_or_else(|| gerr(format!("{name} is missing from the descriptor set")))
}

/// Nodes of the graph and of its library's functions, counted on the wire (a malformed
/// encoding stops the count; the decoder reports it).
fn count_nodes(bytes: &[u8]) -> u64 {
    use crate::graph::programdesc::delimited_fields;
    let mut n = 0u64;
    for (field, payload) in delimited_fields(bytes) {
        match field {
            1 => n += 1,
            2 => {
                for (f, function) in delimited_fields(payload) {
                    if f == 1 {
                        n += delimited_fields(function).filter(|(f, _)| *f == 3).count() as u64;
                    }
                }
            }
            _ => {}
        }
    }
    n
}

fn check_size(len: u64) -> Result<()> {
    if len > MAX_GRAPHDEF_BYTES {
        return Err(ErrorKind::LimitExceeded {
            what: "GraphDef size",
            size: len,
            limit: MAX_GRAPHDEF_BYTES,
        }
        .into());
    }
    Ok(())
}

internal! {
/// Decodes a binary GraphDef, refusing more than [`MAX_NODES`] nodes and nesting deeper
/// than protobuf's recursion limit (100).
pub fn decode_graphdef(bytes: &[u8]) -> Result<pb::GraphDef> {
    check_graphdef_wire(bytes)?;
    pb::GraphDef::decode(bytes).map_err(invalid_pb)
}
}

/// [`decode_graphdef`] of a mapped file: `tensor_content` values are slices of `bytes`,
/// not copies.
fn decode_graphdef_shared(bytes: Bytes) -> Result<pb::GraphDef> {
    check_graphdef_wire(&bytes)?;
    pb::GraphDef::decode(bytes).map_err(invalid_pb)
}

fn invalid_pb(e: prost::DecodeError) -> Error {
    gerr(format!("invalid GraphDef protobuf: {e}"))
}

/// What [`decode_graphdef`] checks on the wire before decoding.
fn check_graphdef_wire(bytes: &[u8]) -> Result<()> {
    check_size(bytes.len() as u64)?;
    let nodes = count_nodes(bytes);
    if nodes > MAX_NODES {
        return Err(ErrorKind::LimitExceeded {
            what: "GraphDef nodes",
            size: nodes,
            limit: MAX_NODES,
        }
        .into());
    }
    let budget = decode_budget(bytes.len());
    let mut walk = Walk {
        left: budget,
        unknown: None,
        skip_unknown: false,
    };
    match walk.message(bytes, &descriptor("tensorflow.GraphDef")?, 0) {
        Ok(()) | Err(Stop::Malformed) => {}
        Err(Stop::Unknown) => {
            // prost would drop the field silently; a GraphDef from a newer TensorFlow
            // could not come back whole, so it is refused, naming the field.
            return Err(gerr(format!(
                "GraphDef{} is not in TensorFlow's GraphDef contract as this build knows it \
                 (schemas/tensorflow); it could not be kept",
                walk.unknown.unwrap_or_default()
            )));
        }
        Err(Stop::TooDeep) => {
            return Err(gerr(format!(
                "invalid GraphDef protobuf: messages nested deeper than {MAX_DEPTH}"
            )));
        }
        Err(Stop::TooBig) => {
            return Err(ErrorKind::LimitExceeded {
                what: "estimated decoded GraphDef size",
                size: budget.saturating_add(1),
                limit: budget,
            }
            .into());
        }
    }
    Ok(())
}

/// [`decode_stored`] of a TensorFlow message (`desc`: `tensorflow.AttrValue`, ...).
pub(crate) fn decode_stored_tf<M: Message + Default>(bytes: &[u8], desc: &str) -> Result<M> {
    decode_stored(bytes, pool()?, desc, desc)
}

/// The deepest `{`/`<` nesting of a text-format message and the number of separators
/// (`:`, `,`, `{`, `<`: at least one per value parsed), outside strings and comments.
fn text_shape(text: &str) -> (usize, u64) {
    let (mut depth, mut max, mut items) = (0usize, 0usize, 0u64);
    let mut quote: Option<u8> = None;
    let mut bytes = text.bytes();
    while let Some(b) = bytes.next() {
        match quote {
            Some(q) => {
                if b == b'\\' {
                    bytes.next();
                } else if b == q {
                    quote = None;
                }
            }
            None => match b {
                b'"' | b'\'' => quote = Some(b),
                b'#' => {
                    for c in bytes.by_ref() {
                        if c == b'\n' {
                            break;
                        }
                    }
                }
                b'{' | b'<' => {
                    depth += 1;
                    max = max.max(depth);
                    items += 1;
                }
                b'}' | b'>' => depth = depth.saturating_sub(1),
                b':' | b',' => items += 1,
                _ => {}
            },
        }
    }
    (max, items)
}

/// Estimated bytes the text parser holds per value (reflection values in lists, then the
/// typed message).
const TEXT_ITEM_COST: u64 = 128;

internal! {
/// Parses a text-format GraphDef (`.pbtxt`).
pub fn parse_graphdef_text(text: &str) -> Result<pb::GraphDef> {
    check_size(text.len() as u64)?;
    let (depth, items) = text_shape(text);
    if depth > MAX_TEXT_DEPTH {
        return Err(ErrorKind::LimitExceeded {
            what: "text GraphDef nesting depth",
            size: depth as u64,
            limit: MAX_TEXT_DEPTH as u64,
        }
        .into());
    }
    // Text is parsed whole through reflection: millions of tiny values (`s: ["", "", ...]`,
    // 3 bytes each) would cost far more than the text; the budget is twice a binary one.
    let budget = decode_budget(text.len()).saturating_mul(2);
    let cost = items.saturating_mul(TEXT_ITEM_COST);
    if cost > budget {
        return Err(ErrorKind::LimitExceeded {
            what: "estimated decoded text GraphDef size",
            size: cost,
            limit: budget,
        }
        .into());
    }
    let msg = DynamicMessage::parse_text_format(descriptor("tensorflow.GraphDef")?, text)
        .map_err(|e| gerr(format!("invalid text GraphDef: {e}")))?;
    decode_graphdef(&msg.encode_to_vec())
}
}

/// The GraphDef an export of `tag` to a `.pb` file writes, as text format (`.pbtxt`), the
/// way TensorFlow's `text_format` reads it.
pub fn export_graphdef_text(tag: &Tag<'_>) -> Result<String> {
    graphdef_to_text(&export_graphdef(tag)?.0)
}

internal! {
/// A GraphDef as text format, the way TensorFlow's `text_format` reads it.
pub fn graphdef_to_text(g: &pb::GraphDef) -> Result<String> {
    let mut msg = DynamicMessage::new(descriptor("tensorflow.GraphDef")?);
    msg.transcode_from(g)
        .map_err(|e| gerr(format!("cannot convert the GraphDef for text output: {e}")))?;
    let mut text = msg.to_text_format_with_options(
        &prost_reflect::text_format::FormatOptions::new().pretty(true),
    );
    text.push('\n');
    Ok(text)
}
}

/// The file names of a SavedModel's MetaGraphs (not GraphDefs) in its directory.
const SAVED_MODEL_FILES: [&str; 2] = ["saved_model.pb", "saved_model.pbtxt"];

/// Whether `p` is a TensorFlow SavedModel: a directory holding `saved_model.pb` (or
/// `.pbtxt`), or such a file, known by its content whatever its name: a SavedModel
/// starts with its schema version 1 (field 1, a varint: bytes 0x08 0x01) and then its
/// MetaGraphs (field 2: 0x12), which a GraphDef never does (its field 1 is a node,
/// length-delimited: 0x0a) nor an ONNX model (IR version 3 or more after its 0x08), or as
/// text with `saved_model_schema_version` / `meta_graphs`.
pub(crate) fn is_saved_model(p: &Path) -> bool {
    if p.is_dir() {
        return SAVED_MODEL_FILES.iter().any(|f| p.join(f).is_file());
    }
    let start = head(p, 256);
    if start.starts_with(&[0x08, 0x01, 0x12]) {
        return true;
    }
    let text = String::from_utf8_lossy(&start);
    let first = text
        .lines()
        .map(str::trim)
        .find(|l| !l.is_empty() && !l.starts_with('#'));
    first.is_some_and(|l| {
        l.starts_with("saved_model_schema_version") || l.starts_with("meta_graphs")
    })
}

/// The SavedModel directory `p` names: `p` itself, or the directory of a binary
/// `saved_model.pb` given as the file (known by its content); `None` for anything else.
fn saved_model_dir(p: &Path) -> Option<PathBuf> {
    if !is_saved_model(p) {
        return None;
    }
    if p.is_dir() {
        return Some(p.to_path_buf());
    }
    let dir = crate::archive::parent_dir(p);
    let beside = dir.join("variables").is_dir() || dir.join("fingerprint.pb").is_file();
    (p.file_name().is_some_and(|n| n == "saved_model.pb") && beside).then_some(dir)
}

/// The refusal of a SavedModel, saying what to import instead.
fn saved_model_refused(p: &Path) -> Error {
    invalid(
        "this is a TensorFlow SavedModel's saved_model.pb (MetaGraphs; the weights are in \
         variables/ beside it), not a frozen GraphDef; import the SavedModel directory that \
         holds it and variables/ (docs/TENSORFLOW.md, \"SavedModels\")"
            .to_string(),
    )
    .in_file(p)
}

internal! {
/// Reads a GraphDef file: text format when the name ends in `.pbtxt` (or the content is
/// not binary protobuf but parses as text), binary otherwise. A SavedModel
/// (`saved_model.pb`, or a directory holding it) is refused, saying so.
pub fn read_graphdef_file(path: &Path) -> Result<pb::GraphDef> {
    if is_saved_model(path) {
        return Err(saved_model_refused(path));
    }
    let bytes = read_whole(path)?;
    let located = |e: Error| e.in_file(path);
    if has_ext(path, "pbtxt") {
        let text = std::str::from_utf8(&bytes).map_err(|e| {
            located(invalid(format!(
                "a .pbtxt GraphDef must be UTF-8 text; byte {} is not",
                e.valid_up_to()
            )))
        })?;
        return parse_graphdef_text(text).map_err(located);
    }
    match decode_graphdef_shared(bytes.clone()) {
        Ok(g) => Ok(g),
        Err(binary) => match std::str::from_utf8(&bytes) {
            Ok(text) if looks_like_text(text) => parse_graphdef_text(text).map_err(located),
            _ => Err(located(binary)),
        },
    }
}
}

/// Whether text starts like a text-format GraphDef (`node {`, `library {`, ...).
fn looks_like_text(text: &str) -> bool {
    let first = text
        .lines()
        .map(str::trim)
        .find(|l| !l.is_empty() && !l.starts_with('#'));
    first.is_some_and(|l| {
        ["node", "library", "versions", "version", "debug_info"]
            .iter()
            .any(|k| {
                l.strip_prefix(k)
                    .is_some_and(|r| r.trim_start().starts_with(['{', '<', ':']))
            })
    })
}

// ---------------------------------------------------------------------------------
// Dtypes and tensor values

/// TensorFlow's `DataType` number of a dtype modelzip stores, and back.
pub(crate) fn dtype_from_tf(dt: i32) -> Option<DType> {
    Some(match pb::DataType::try_from(dt).ok()? {
        pb::DataType::DtFloat => DType::Fp32,
        pb::DataType::DtDouble => DType::Fp64,
        pb::DataType::DtInt32 => DType::Int32,
        pb::DataType::DtUint8 => DType::Uint8,
        pb::DataType::DtInt16 => DType::Int16,
        pb::DataType::DtInt8 => DType::Int8,
        pb::DataType::DtComplex64 => DType::Complex64,
        pb::DataType::DtInt64 => DType::Int64,
        pb::DataType::DtBool => DType::Bool,
        pb::DataType::DtBfloat16 => DType::Bf16,
        pb::DataType::DtUint16 => DType::Uint16,
        pb::DataType::DtComplex128 => DType::Complex128,
        pb::DataType::DtHalf => DType::Fp16,
        pb::DataType::DtUint32 => DType::Uint32,
        pb::DataType::DtUint64 => DType::Uint64,
        _ => return None,
    })
}

/// The typed field of a dtype's values, as (values written, element count they make).
fn typed_len(t: &pb::TensorProto, d: DType) -> (usize, usize) {
    let n = match d {
        DType::Fp32 => t.float_val.len(),
        DType::Fp64 => t.double_val.len(),
        DType::Int32 | DType::Int16 | DType::Int8 | DType::Uint8 | DType::Uint16 => t.int_val.len(),
        DType::Int64 => t.int64_val.len(),
        DType::Uint32 => t.uint32_val.len(),
        DType::Uint64 => t.uint64_val.len(),
        DType::Bool => t.bool_val.len(),
        DType::Fp16 | DType::Bf16 => t.half_val.len(),
        DType::Complex64 => t.scomplex_val.len(),
        DType::Complex128 => t.dcomplex_val.len(),
        _ => 0,
    };
    let per = if matches!(d, DType::Complex64 | DType::Complex128) {
        2
    } else {
        1
    };
    (n, n / per)
}

/// Whether the TensorProto holds nothing but dtype, shape, version_number and the
/// values of dtype `d` in one form (the dtype's typed field, or tensor_content).
fn values_are_regular(t: &pb::TensorProto, d: DType) -> bool {
    let (written, _) = typed_len(t, d);
    let all = t.half_val.len()
        + t.float_val.len()
        + t.double_val.len()
        + t.int_val.len()
        + t.string_val.len()
        + t.scomplex_val.len()
        + t.int64_val.len()
        + t.bool_val.len()
        + t.dcomplex_val.len()
        + t.resource_handle_val.len()
        + t.variant_val.len()
        + t.uint32_val.len()
        + t.uint64_val.len()
        + t.float8_val.len();
    all == written && (t.tensor_content.is_empty() || written == 0)
}

/// The dims of a Const's shape: known, non-negative, with their element count.
fn const_dims(t: &pb::TensorProto) -> Result<Vec<u64>> {
    let Some(shape) = &t.tensor_shape else {
        return Ok(Vec::new());
    };
    if shape.unknown_rank {
        return Err(invalid("the constant's shape has an unknown rank"));
    }
    shape
        .dim
        .iter()
        .enumerate()
        .map(|(i, d)| {
            u64::try_from(d.size).map_err(|_| Error::from(ErrorKind::negative_dim(i, d.size)))
        })
        .collect()
}

/// The little-endian bytes of the first `k` values of the typed field, expanded to
/// `numel` elements the way TensorFlow does: the last value repeated, zeros when none.
/// `None` when a value does not fit the dtype (an int_val of 300 for uint8), so the
/// constant cannot come back from a parameter exactly.
fn typed_bytes(t: &pb::TensorProto, d: DType, numel: usize) -> Option<Vec<u8>> {
    let size = d.size();
    let mut out = Vec::with_capacity(numel.checked_mul(size)?);
    fn ints<T: TryFrom<i32>>(
        v: &[i32],
        out: &mut Vec<u8>,
        put: impl Fn(T, &mut Vec<u8>),
    ) -> Option<()> {
        for &x in v {
            put(T::try_from(x).ok()?, out);
        }
        Some(())
    }
    match d {
        DType::Fp32 => t.float_val.iter().for_each(|x| out.extend(x.to_le_bytes())),
        DType::Fp64 => t
            .double_val
            .iter()
            .for_each(|x| out.extend(x.to_le_bytes())),
        DType::Int32 => t.int_val.iter().for_each(|x| out.extend(x.to_le_bytes())),
        DType::Int16 => ints::<i16>(&t.int_val, &mut out, |x, o| o.extend(x.to_le_bytes()))?,
        DType::Int8 => ints::<i8>(&t.int_val, &mut out, |x, o| o.extend(x.to_le_bytes()))?,
        DType::Uint8 => ints::<u8>(&t.int_val, &mut out, |x, o| o.push(x))?,
        DType::Uint16 => ints::<u16>(&t.int_val, &mut out, |x, o| o.extend(x.to_le_bytes()))?,
        DType::Fp16 | DType::Bf16 => {
            ints::<u16>(&t.half_val, &mut out, |x, o| o.extend(x.to_le_bytes()))?
        }
        DType::Int64 => t.int64_val.iter().for_each(|x| out.extend(x.to_le_bytes())),
        DType::Uint32 => t
            .uint32_val
            .iter()
            .for_each(|x| out.extend(x.to_le_bytes())),
        DType::Uint64 => t
            .uint64_val
            .iter()
            .for_each(|x| out.extend(x.to_le_bytes())),
        DType::Bool => t.bool_val.iter().for_each(|&x| out.push(u8::from(x))),
        DType::Complex64 => t
            .scomplex_val
            .iter()
            .for_each(|x| out.extend(x.to_le_bytes())),
        DType::Complex128 => t
            .dcomplex_val
            .iter()
            .for_each(|x| out.extend(x.to_le_bytes())),
        _ => return None,
    }
    let have = out.len() / size;
    if have >= numel {
        out.truncate(numel * size);
    } else if have == 0 {
        out.resize(numel * size, 0);
    } else {
        let last = out[(have - 1) * size..].to_vec();
        for _ in have..numel {
            out.extend_from_slice(&last);
        }
    }
    Some(out)
}

/// Writes the first `k` elements of `data` into the typed field of dtype `d`.
fn fill_typed(t: &mut pb::TensorProto, d: DType, data: &[u8], k: usize) -> Result<()> {
    let size = d.size();
    let need = k
        .checked_mul(size)
        .filter(|&n| n <= data.len())
        .ok_or_else(|| {
            invalid(format!(
                "the graph asks for {k} typed value(s), the parameter holds {} element(s)",
                data.len() / size
            ))
        })?;
    let data = &data[..need];
    fn each<const N: usize>(data: &[u8]) -> impl Iterator<Item = [u8; N]> + '_ {
        data.chunks_exact(N)
            .map(|c| <[u8; N]>::try_from(c).unwrap_or([0; N]))
    }
    match d {
        DType::Fp32 => t.float_val = each::<4>(data).map(f32::from_le_bytes).collect(),
        DType::Fp64 => t.double_val = each::<8>(data).map(f64::from_le_bytes).collect(),
        DType::Int32 => t.int_val = each::<4>(data).map(i32::from_le_bytes).collect(),
        DType::Int16 => {
            t.int_val = each::<2>(data)
                .map(|b| i32::from(i16::from_le_bytes(b)))
                .collect()
        }
        DType::Int8 => t.int_val = data.iter().map(|&b| i32::from(b as i8)).collect(),
        DType::Uint8 => t.int_val = data.iter().map(|&b| i32::from(b)).collect(),
        DType::Uint16 => {
            t.int_val = each::<2>(data)
                .map(|b| i32::from(u16::from_le_bytes(b)))
                .collect()
        }
        DType::Fp16 | DType::Bf16 => {
            t.half_val = each::<2>(data)
                .map(|b| i32::from(u16::from_le_bytes(b)))
                .collect()
        }
        DType::Int64 => t.int64_val = each::<8>(data).map(i64::from_le_bytes).collect(),
        DType::Uint32 => t.uint32_val = each::<4>(data).map(u32::from_le_bytes).collect(),
        DType::Uint64 => t.uint64_val = each::<8>(data).map(u64::from_le_bytes).collect(),
        DType::Bool => t.bool_val = data.iter().map(|&b| b != 0).collect(),
        DType::Complex64 => t.scomplex_val = each::<4>(data).map(f32::from_le_bytes).collect(),
        DType::Complex128 => t.dcomplex_val = each::<8>(data).map(f64::from_le_bytes).collect(),
        _ => return Err(invalid(format!("dtype {d} has no TensorFlow typed field"))),
    }
    Ok(())
}

/// A Const value made a parameter: its values as bytes, the stripped tensor, and how
/// the values were written.
#[derive(Debug)]
struct Lifted {
    dtype: DType,
    dims: Vec<u64>,
    /// A slice of the decoded file's map when the values were in `tensor_content`.
    data: Bytes,
    typed_count: Option<u64>,
}

/// The numeric value of a Const as a parameter, or `None` when it stays in the graph
/// (a string or other non-numeric dtype, values in more than one form, a value that
/// does not fit its dtype, more typed values than elements, a splat larger than what is
/// left of `splat_left`, which it is charged). `t` is changed only when lifted. A
/// malformed tensor (bad shape, tensor_content of the wrong length) is an error.
fn lift(t: &mut pb::TensorProto, splat_left: &mut u64) -> Result<Option<Lifted>> {
    let Some(dtype) = dtype_from_tf(t.dtype) else {
        return Ok(None);
    };
    let dims = const_dims(t)?;
    let len = crate::tensor::data_len(dtype, &dims)?;
    let numel = crate::tensor::element_count(&dims)?;
    if !values_are_regular(t, dtype) {
        return Ok(None);
    }
    if !t.tensor_content.is_empty() {
        if t.tensor_content.len() as u64 != len {
            return Err(invalid(format!(
                "tensor_content holds {} bytes, but {dtype} {dims:?} needs {len}",
                t.tensor_content.len()
            )));
        }
        let data = std::mem::take(&mut t.tensor_content);
        return Ok(Some(Lifted {
            dtype,
            dims,
            data,
            typed_count: None,
        }));
    }
    let (written, values) = typed_len(t, dtype);
    if written % 2 == 1 && matches!(dtype, DType::Complex64 | DType::Complex128) {
        return Ok(None);
    }
    let splat = (values as u64) < numel;
    if values as u64 > numel || splat && len > *splat_left {
        return Ok(None);
    }
    let numel =
        usize::try_from(numel).map_err(|_| ErrorKind::SizeOverflow(format!("{numel} elements")))?;
    let Some(data) = typed_bytes(t, dtype, numel) else {
        return Ok(None);
    };
    if splat {
        *splat_left -= len;
    }
    let stripped = pb::TensorProto {
        dtype: t.dtype,
        tensor_shape: t.tensor_shape.take(),
        version_number: t.version_number,
        ..Default::default()
    };
    *t = stripped;
    Ok(Some(Lifted {
        dtype,
        dims,
        data: Bytes::from(data),
        typed_count: Some(values as u64),
    }))
}

/// Puts a parameter's values back into a stripped TensorProto.
fn lower(t: &mut pb::TensorProto, data: &[u8], typed_count: Option<u64>) -> Result<()> {
    let dtype = dtype_from_tf(t.dtype).ok_or_else(|| {
        invalid(format!(
            "the stored tensor has TensorFlow dtype {}, which no parameter holds",
            t.dtype
        ))
    })?;
    match typed_count {
        None => t.tensor_content = Bytes::copy_from_slice(data),
        Some(k) => {
            let k = usize::try_from(k)
                .map_err(|_| ErrorKind::SizeOverflow(format!("{k} typed values")))?;
            fill_typed(t, dtype, data, k)?
        }
    }
    Ok(())
}

// ---------------------------------------------------------------------------------
// GraphDef <-> TfGraph

internal! {
/// A GraphDef split into the graph graph.fb keeps and the parameters it refers to.
pub struct Split {
    /// The graph, with each lifted Const referring to its parameter.
    pub graph: TfGraph,
    /// The parameters as (name, dtype, dims, little-endian bytes), in node order.
    pub params: Vec<(String, DType, Vec<u64>, Bytes)>,
}
}

internal! {
/// Splits a GraphDef: every numeric `Const` node's `value` becomes a parameter named
/// after the node; the rest is kept in a [`TfGraph`].
pub fn split_graphdef(mut g: pb::GraphDef) -> Result<Split> {
    let nodes = std::mem::take(&mut g.node);
    let mut seen = HashSet::with_capacity(nodes.len());
    let mut out = Vec::with_capacity(nodes.len());
    let mut params = Vec::new();
    let mut splat_left = MAX_SPLAT_BYTES;
    for (i, mut n) in nodes.into_iter().enumerate() {
        let place = |e: Error| invalid(format!("node {i} ({:?}, op {:?}): {e}", n.name, n.op));
        if n.name.is_empty() {
            return Err(invalid(format!("node {i} (op {:?}) has no name", n.op)));
        }
        if !seen.insert(n.name.clone()) {
            return Err(invalid(format!(
                "node {i}: the name {:?} is used twice",
                n.name
            )));
        }
        let mut attrs = Vec::with_capacity(n.attr.len());
        for (key, mut value) in std::mem::take(&mut n.attr) {
            let mut param = None;
            if n.op == "Const"
                && key == "value"
                && let Some(pb::attr_value::Value::Tensor(t)) = &mut value.value
                && let Some(l) = lift(t, &mut splat_left).map_err(place)?
            {
                params.push((n.name.clone(), l.dtype, l.dims, l.data));
                param = Some(TfParamRef {
                    param: n.name.clone(),
                    typed_count: l.typed_count,
                });
            }
            attrs.push(TfAttr {
                name: key,
                value: value.encode_to_vec(),
                param,
            });
        }
        let name = std::mem::take(&mut n.name);
        let op = std::mem::take(&mut n.op);
        let inputs = std::mem::take(&mut n.input);
        let device = std::mem::take(&mut n.device);
        out.push(TfNode {
            name,
            op,
            inputs,
            device,
            attrs,
            rest: n.encode_to_vec(),
        });
    }
    Ok(Split {
        graph: TfGraph {
            nodes: out,
            rest: g.encode_to_vec(),
        },
        params,
    })
}
}

internal! {
/// Rebuilds the GraphDef of a [`TfGraph`], taking each parameter's values from `param`.
pub fn join_graphdef<'p, D: std::borrow::Borrow<TensorData<'p>>>(
    g: &TfGraph,
    mut param: impl FnMut(&str) -> Result<D>,
) -> Result<pb::GraphDef> {
    let mut out = graph_fields(g)?;
    out.node.reserve(g.nodes.len());
    for (i, n) in g.nodes.iter().enumerate() {
        out.node.push(join_node(i, n, &mut param)?);
    }
    Ok(out)
}
}

/// The GraphDef's fields other than its nodes (library, versions, debug info).
fn graph_fields(g: &TfGraph) -> Result<pb::GraphDef> {
    decode_stored(
        &g.rest,
        pool()?,
        "tensorflow.GraphDef",
        "the stored GraphDef fields",
    )
}

/// Node `i` of the graph, each attribute that refers to a parameter filled with its values.
fn join_node<'p, D: std::borrow::Borrow<TensorData<'p>>>(
    i: usize,
    n: &TfNode,
    param: &mut impl FnMut(&str) -> Result<D>,
) -> Result<pb::NodeDef> {
    let place = |e: Error| gerr(format!("TensorFlow node {i} ({:?}): {e}", n.name));
    let mut node: pb::NodeDef =
        decode_stored(&n.rest, pool()?, "tensorflow.NodeDef", "its stored NodeDef")
            .map_err(place)?;
    node.name = n.name.clone();
    node.op = n.op.clone();
    node.input = n.inputs.clone();
    node.device = n.device.clone();
    let mut attrs = BTreeMap::new();
    for a in &n.attrs {
        let mut value: pb::AttrValue = decode_stored(
            &a.value,
            pool()?,
            "tensorflow.AttrValue",
            &format!("attr {:?}", a.name),
        )
        .map_err(place)?;
        if let Some(r) = &a.param {
            let Some(pb::attr_value::Value::Tensor(t)) = &mut value.value else {
                return Err(place(gerr(format!(
                    "attr {:?} refers to parameter {:?} but holds no tensor",
                    a.name, r.param
                ))));
            };
            let data = param(&r.param).map_err(place)?;
            let v = data.borrow().view();
            check_param(t, &v, &r.param).map_err(place)?;
            lower(t, v.data(), r.typed_count).map_err(place)?;
        }
        attrs.insert(a.name.clone(), value);
    }
    node.attr = attrs;
    Ok(node)
}

internal! {
    /// Checks that a TensorFlow graph stored in `tag` can be exported: every attribute
    /// decodes, and every parameter it refers to exists with the declared dtype and dims and
    /// enough elements for its typed values. Reads the parameters in place (no copies).
    pub fn check_refs(tag: &Tag<'_>, g: &TfGraph) -> Result<()> {
        for (i, n) in g.nodes.iter().enumerate() {
            let place = |e: Error| gerr(format!("TensorFlow node {i} ({:?}): {e}", n.name));
            for a in &n.attrs {
                let value: pb::AttrValue = decode_stored(
                    &a.value,
                    pool()?,
                    "tensorflow.AttrValue",
                    &format!("attr {:?}", a.name),
                )
                .map_err(place)?;
                let Some(r) = &a.param else {
                    continue;
                };
                let Some(pb::attr_value::Value::Tensor(t)) = &value.value else {
                    return Err(place(gerr(format!(
                        "attr {:?} refers to parameter {:?} but holds no tensor",
                        a.name, r.param
                    ))));
                };
                let data = tag.param(&r.param).map_err(place)?;
                let v = data.view();
                check_param(t, &v, &r.param).map_err(place)?;
                if r.typed_count.is_some_and(|k| k > v.numel()) {
                    return Err(place(invalid(format!(
                        "attr {:?} asks for more typed values than parameter {:?} has elements",
                        a.name, r.param
                    ))));
                }
            }
        }
        Ok(())
    }
}

/// Checks a parameter against the dtype and shape the graph declares for it.
fn check_param(t: &pb::TensorProto, v: &TensorView<'_>, name: &str) -> Result<()> {
    let want = dtype_from_tf(t.dtype);
    let dims = const_dims(t)?;
    if want != Some(v.dtype()) || dims != v.dims() {
        return Err(invalid(format!(
            "parameter {name:?} is {} {:?}, the graph declares TensorFlow dtype {} {dims:?}",
            v.dtype(),
            v.dims(),
            t.dtype
        )));
    }
    if !v.lod().is_empty() {
        return Err(invalid(format!(
            "parameter {name:?} has a LoD, which a TensorFlow tensor cannot hold"
        )));
    }
    Ok(())
}

// ---------------------------------------------------------------------------------
// Import and export

internal! {
/// Imports a GraphDef as tag `tag` of the archive at `archive` (created if absent): the
/// numeric Const values as parameters, the graph as graph.fb. Tensors identical to ones
/// already in the archive are referenced, not copied.
pub fn import_graphdef(
    archive: &Path,
    tag: &str,
    graph: pb::GraphDef,
    opts: &ImportOptions,
) -> Result<ImportReport> {
    store(archive, tag, split_graphdef(graph)?, opts)
}
}

fn store(archive: &Path, tag: &str, split: Split, opts: &ImportOptions) -> Result<ImportReport> {
    let fb = Graph::Tf(split.graph).to_flatbuffers()?;
    let mut tensors = Vec::with_capacity(split.params.len());
    for (name, dtype, dims, data) in &split.params {
        tensors.push((
            name,
            TensorView::new(*dtype, dims.clone(), Vec::new(), data)
                .map_err(|e| invalid(format!("constant {name:?}: {e}")))?,
        ));
    }
    // params.txt lists names in byte order, like every other import.
    tensors.sort_by(|a, b| a.0.as_bytes().cmp(b.0.as_bytes()));
    let mut ticker = Ticker::from_hook(opts.write.progress.as_ref(), tensors.len() as u64);
    let created = write_tag(archive, tag, opts, |w| {
        w.graph(GraphFormat::FlatBuffers, &fb)?;
        for (name, t) in &tensors {
            w.param(name, t)?;
            ticker.tick();
        }
        Ok(())
    })?;
    report(archive, tag, created, Some(fb.len() as u64))
}

internal! {
/// `import_graphdef` from a `.pb` or `.pbtxt` file; errors name the file.
pub fn import_graphdef_file(
    archive: &Path,
    tag: &str,
    path: &Path,
    opts: &ImportOptions,
) -> Result<ImportReport> {
    let g = read_graphdef_file(path)?;
    let split = split_graphdef(g).map_err(|e| e.in_file(path))?;
    store(archive, tag, split, opts)
}
}

/// The tag's TensorFlow graph, or an error saying what the tag holds instead.
fn tf_graph(tag: &Tag<'_>) -> Result<TfGraph> {
    super::foreign_graph(tag, "TensorFlow", |g| match g {
        Graph::Tf(tf) => Ok(tf),
        other => Err(other),
    })
}

internal! {
/// The GraphDef of a tag imported from TensorFlow, with the parameters the graph does
/// not refer to.
pub fn export_graphdef(tag: &Tag<'_>) -> Result<(pb::GraphDef, Vec<String>, Vec<String>)> {
    let g = tf_graph(tag)?;
    let name = tag.name().to_string();
    let mut used = Vec::new();
    // Each tensor file read once, however many constants name it.
    let mut read: HashMap<&str, std::rc::Rc<TensorData<'_>>> = HashMap::new();
    let params = tag.params();
    let mut load = |p: &str| -> Result<std::rc::Rc<TensorData<'_>>> {
        let loc = &params[tag.param_index(p)?].location;
        if let Some(d) = read.get(&*loc.entry) {
            return Ok(d.clone());
        }
        let d = std::rc::Rc::new(tag.tensor(loc)?);
        read.insert(&loc.entry, d.clone());
        Ok(d)
    };
    let def = join_graphdef(&g, |p| {
        used.push(p.to_string());
        load(p).map_err(|e| {
            invalid(format!(
                "the graph refers to parameter {p:?}, which tag {name:?} cannot give: {e}"
            ))
        })
    })
    .map_err(|e| e.in_entry(format!("{name}/graph.fb")))?;
    let unused = super::unused_params(tag, &used);
    Ok((def, used, unused))
}
}

internal! {
/// Writes a tag imported from TensorFlow as a GraphDef file: text format when `out`
/// ends in `.pbtxt`, binary otherwise; through a temp file renamed into place.
///
/// The file's size is counted before anything is written and refused above
/// `opts.max_output` (a graph may name one parameter from many constants, so the export
/// is not bounded by the archive's size), and the GraphDef is written node by node: the
/// whole message is never held in memory.
pub fn export_graphdef_file(tag: &Tag<'_>, out: &Path, opts: &ExportOptions) -> Result<Exported> {
    let g = tf_graph(tag)?;
    let name = tag.name().to_string();
    let in_fb = |e: Error| e.in_entry(format!("{name}/graph.fb"));
    let text = has_ext(out, "pbtxt");
    let limit = opts
        .max_output
        .unwrap_or_else(|| super::default_max_output(tag.archive().len_bytes()));
    let over = |what: &'static str, size: u64| {
        Err(Error::new(ErrorKind::LimitExceeded { what, size, limit }))
    };
    // A lower bound first, from the parameters' sizes alone (their headers: no values
    // read nor converted): a graph naming one large parameter from many constants is
    // refused at once. Each tensor file's header is decoded once, however many
    // attributes name it.
    let params = tag.params();
    let mut refs = Vec::new();
    for n in &g.nodes {
        for r in n.attrs.iter().filter_map(|a| a.param.as_ref()) {
            refs.push(tag.param_index(&r.param).map_err(in_fb)?);
        }
    }
    let mut head_of: HashMap<&str, usize> = HashMap::new();
    let mut locs = Vec::new();
    for &i in &refs {
        let loc = &params[i].location;
        if !head_of.contains_key(&*loc.entry) {
            head_of.insert(&loc.entry, locs.len());
            locs.push(loc);
        }
    }
    let heads = tag.archive().tensor_heads(&locs).map_err(in_fb)?;
    let mut refs = refs.into_iter();
    let mut least = g.rest.len() as u64;
    for n in &g.nodes {
        least = least.saturating_add(n.rest.len() as u64);
        for _ in n.attrs.iter().filter(|a| a.param.is_some()) {
            let i = refs.next().unwrap_or_default();
            let h = &heads[head_of[&*params[i].location.entry]];
            least = least.saturating_add(h.data_len);
        }
        if least > limit {
            return over("TensorFlow export size (at least)", least);
        }
    }
    drop(heads);
    // Each tensor file read once for both passes below, however many attributes name
    // it (a deflated one is inflated once).
    let read: std::cell::RefCell<HashMap<&str, std::rc::Rc<TensorData<'_>>>> =
        std::cell::RefCell::default();
    let load = |p: &str| -> Result<std::rc::Rc<TensorData<'_>>> {
        let loc = &params[tag.param_index(p)?].location;
        if let Some(d) = read.borrow().get(&*loc.entry) {
            return Ok(d.clone());
        }
        let d = std::rc::Rc::new(tag.tensor(loc)?);
        read.borrow_mut().insert(&loc.entry, d.clone());
        Ok(d)
    };
    // The exact size, node by node (each one built, measured and dropped).
    let fields = graph_fields(&g).map_err(in_fb)?;
    let mut used = Vec::new();
    let mut param = |p: &str| {
        used.push(p.to_string());
        load(p).map_err(|e| {
            invalid(format!(
                "the graph refers to parameter {p:?}, which tag {name:?} cannot give: {e}"
            ))
        })
    };
    let tail = graph_fields_bytes(&fields, g.nodes.len(), text)?;
    let mut total = tail.len() as u64;
    for (i, n) in g.nodes.iter().enumerate() {
        let node = join_node(i, n, &mut param).map_err(in_fb)?;
        total = total.saturating_add(node_bytes(node, i, text)?.len() as u64);
        if total > limit {
            return over("TensorFlow export size (at least)", total);
        }
    }
    let mut again = |p: &str| load(p);
    // Checked before the file is renamed into place: a mismatch leaves no output. (The
    // two passes build the same nodes from the same mapped archive, so only a bug in
    // them could make the sizes differ.)
    let check = |len: u64| match len == total {
        true => Ok(()),
        false => Err(gerr(format!(
            "the GraphDef written is {len} bytes, not the {total} counted before writing"
        ))),
    };
    let len = write_file_atomically(
        tag,
        out,
        opts.overwrite,
        opts.fsync,
        |w| {
            let io = |e: Error| std::io::Error::other(e.to_string());
            for (i, n) in g.nodes.iter().enumerate() {
                let node = join_node(i, n, &mut again).map_err(|e| io(in_fb(e)))?;
                w.write_all(&node_bytes(node, i, text).map_err(io)?)?;
            }
            w.write_all(&tail)
        },
        check,
    )?;
    let unused = super::unused_params(tag, &used);
    Ok(Exported {
        tag: tag.name().to_string(),
        format: "tf",
        files: vec![(out.to_path_buf(), len)],
        params: used,
        unused,
        notes: vec![
            if text {
                "text GraphDef"
            } else {
                "binary GraphDef"
            }
            .to_string(),
        ],
        graph_converted: false,
    })
}
}

/// The bytes node `i` takes in the file: its encoding as field 1 of a GraphDef (prost
/// writes fields in number order, so the nodes come first), or its text inside the
/// `node: [{ ... }, { ... }]` list the whole message's text format writes.
fn node_bytes(node: pb::NodeDef, i: usize, text: bool) -> Result<Vec<u8>> {
    if !text {
        return Ok(pb::GraphDef {
            node: vec![node],
            ..Default::default()
        }
        .encode_to_vec());
    }
    let mut msg = DynamicMessage::new(descriptor("tensorflow.NodeDef")?);
    msg.transcode_from(&node)
        .map_err(|e| gerr(format!("cannot convert node {i} for text output: {e}")))?;
    let body = msg.to_text_format_with_options(
        &prost_reflect::text_format::FormatOptions::new().pretty(true),
    );
    let mut out = String::with_capacity(body.len() + body.len() / 8 + 16);
    out.push_str(if i == 0 { "node: [{\n" } else { "}, {\n" });
    for line in body.lines() {
        out.push_str("  ");
        out.push_str(line);
        out.push('\n');
    }
    Ok(out.into_bytes())
}

/// The bytes after the last node: the text list's end, then the GraphDef's other fields.
fn graph_fields_bytes(fields: &pb::GraphDef, nodes: usize, text: bool) -> Result<Vec<u8>> {
    if !text {
        return Ok(fields.encode_to_vec());
    }
    let mut out = String::new();
    if nodes > 0 {
        out.push_str("}]\n");
    }
    if *fields != pb::GraphDef::default() || nodes == 0 {
        out.push_str(&graphdef_to_text(fields)?);
    }
    Ok(out.into_bytes())
}

internal! {
    /// How many nodes of each op a TensorFlow graph has (for summaries).
    pub fn op_counts(g: &TfGraph) -> Vec<(String, usize)> {
        let mut m: HashMap<&str, usize> = HashMap::new();
        for n in &g.nodes {
            *m.entry(&n.op).or_default() += 1;
        }
        let mut v: Vec<(String, usize)> = m.into_iter().map(|(k, n)| (k.to_string(), n)).collect();
        v.sort();
        v
    }
}

/// TensorFlow in the [`super::FORMATS`] registry: frozen GraphDefs, `.pb` or `.pbtxt`.
pub(crate) struct TfFormat;

impl Format for TfFormat {
    fn name(&self) -> &'static str {
        "tf"
    }

    fn import(
        &self,
        archive: &Path,
        tag: &str,
        inputs: &[PathBuf],
        opts: &ImportOptions,
    ) -> Result<ImportReport> {
        let p = super::single_input(
            inputs,
            "a TensorFlow",
            "one GraphDef file (.pb or .pbtxt) or one SavedModel directory",
        )?;
        if let Some(dir) = saved_model_dir(p) {
            return saved_model::import_saved_model(archive, tag, &dir, opts);
        }
        import_graphdef_file(archive, tag, p, opts)
    }

    fn export(&self, tag: &Tag<'_>, out: &Path, opts: &ExportOptions) -> Result<Exported> {
        super::refuse_shard_size(opts, self.name())?;
        if saved_model::is_saved_model_tag(tag) {
            return saved_model::export_saved_model(tag, out, opts);
        }
        if let Some(e) = saved_model::refuse_variant(tag)? {
            return Err(e);
        }
        export_graphdef_file(tag, out, opts)
    }
}

impl super::Recognise for TfFormat {
    fn recognised_from(&self) -> &'static str {
        "a frozen TensorFlow GraphDef, .pb binary or .pbtxt text, or a SavedModel directory"
    }

    fn matches_name(&self, inputs: &[PathBuf]) -> bool {
        // A SavedModel directory too.
        matches!(inputs, [p] if has_ext(p, "pb") || has_ext(p, "pbtxt")
            || (p.is_dir() && is_saved_model(p)))
    }

    fn matches_content(&self, inputs: &[PathBuf]) -> bool {
        let [p] = inputs else {
            return false;
        };
        // A binary GraphDef starts with a node (field 1, length-delimited); a text one
        // with `node {` or another GraphDef field.
        let start = head(p, 4096);
        let plausible =
            start.first() == Some(&0x0a) || looks_like_text(&String::from_utf8_lossy(&start));
        plausible && read_graphdef_file(p).is_ok_and(|g| !g.node.is_empty())
    }

    fn is_origin_of(&self, tag: &Tag<'_>) -> Result<bool> {
        if saved_model::is_saved_model_tag(tag) || saved_model::refuse_variant(tag)?.is_some() {
            return Ok(true);
        }
        Ok(match tag.graph()? {
            Some((GraphFormat::FlatBuffers, bytes)) => crate::graph::flatbuffers::is_tf(&bytes),
            _ => false,
        })
    }
}

/// A known shape of `dims`, for the tests here and in [`saved_model`].
#[cfg(test)]
pub(crate) fn shape_of(dims: &[i64]) -> pb::TensorShapeProto {
    pb::TensorShapeProto {
        dim: dims
            .iter()
            .map(|&size| pb::tensor_shape_proto::Dim {
                size,
                name: String::new(),
            })
            .collect(),
        unknown_rank: false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tensor(dtype: pb::DataType, dims: &[i64]) -> pb::TensorProto {
        pb::TensorProto {
            dtype: dtype as i32,
            tensor_shape: Some(shape_of(dims)),
            ..Default::default()
        }
    }

    fn round_trip(t: &pb::TensorProto) -> Option<Vec<u8>> {
        let mut work = t.clone();
        let mut left = MAX_SPLAT_BYTES;
        let l = lift(&mut work, &mut left).unwrap()?;
        let mut back = work.clone();
        lower(&mut back, &l.data, l.typed_count).unwrap();
        assert_eq!(back.encode_to_vec(), t.encode_to_vec());
        Some(l.data.to_vec())
    }

    #[test]
    fn every_form_comes_back_as_written() {
        let mut content = tensor(pb::DataType::DtFloat, &[2]);
        content.tensor_content = [1.0f32, 2.0].iter().flat_map(|x| x.to_le_bytes()).collect();
        assert_eq!(round_trip(&content).unwrap().len(), 8);
        let mut typed = tensor(pb::DataType::DtInt8, &[3]);
        typed.int_val = vec![-1, 0, 127];
        assert_eq!(round_trip(&typed).unwrap(), vec![0xff, 0, 127]);
        let mut splat = tensor(pb::DataType::DtHalf, &[2, 2]);
        splat.half_val = vec![0x3c00];
        assert_eq!(round_trip(&splat).unwrap(), [0x00, 0x3c].repeat(4));
        let mut two = tensor(pb::DataType::DtInt64, &[4]);
        two.int64_val = vec![5, 7];
        let data = round_trip(&two).unwrap();
        assert_eq!(
            data.chunks(8).map(|c| c[0]).collect::<Vec<_>>(),
            [5, 7, 7, 7]
        );
        let zeros = tensor(pb::DataType::DtDouble, &[3]);
        assert_eq!(round_trip(&zeros).unwrap(), vec![0; 24]);
        let mut c = tensor(pb::DataType::DtComplex64, &[2]);
        c.scomplex_val = vec![1.0, 2.0];
        assert_eq!(round_trip(&c).unwrap().len(), 16);
        let scalar = {
            let mut t = tensor(pb::DataType::DtBool, &[]);
            t.bool_val = vec![true];
            t
        };
        assert_eq!(round_trip(&scalar).unwrap(), vec![1]);
        let empty = tensor(pb::DataType::DtFloat, &[0, 3]);
        assert_eq!(round_trip(&empty).unwrap(), Vec::<u8>::new());
    }

    #[test]
    fn irregular_values_stay_in_the_graph() {
        let mut s = tensor(pb::DataType::DtString, &[1]);
        s.string_val = vec![b"x".to_vec()];
        assert!(round_trip(&s).is_none());
        let mut out_of_range = tensor(pb::DataType::DtUint8, &[1]);
        out_of_range.int_val = vec![300];
        assert!(round_trip(&out_of_range).is_none());
        let mut both = tensor(pb::DataType::DtFloat, &[1]);
        both.float_val = vec![1.0];
        both.tensor_content = vec![0; 4].into();
        assert!(round_trip(&both).is_none());
        let mut too_many = tensor(pb::DataType::DtInt32, &[1]);
        too_many.int_val = vec![1, 2];
        assert!(round_trip(&too_many).is_none());
        let mut huge_splat = tensor(pb::DataType::DtFloat, &[1 << 20, 1 << 20]);
        huge_splat.float_val = vec![0.5];
        assert!(round_trip(&huge_splat).is_none());
        // Splats share one budget: the second 160 MiB one stays in the graph.
        let mut big = tensor(pb::DataType::DtFloat, &[40 << 20]);
        big.float_val = vec![0.5];
        let mut left = MAX_SPLAT_BYTES;
        assert!(lift(&mut big.clone(), &mut left).unwrap().is_some());
        assert_eq!(left, MAX_SPLAT_BYTES - (160 << 20));
        let mut again = big.clone();
        assert!(lift(&mut again, &mut left).unwrap().is_none());
        assert_eq!(again, big, "a constant left in the graph is unchanged");
    }

    #[test]
    fn malformed_constants_are_errors() {
        let mut short = tensor(pb::DataType::DtFloat, &[3]);
        short.tensor_content = vec![0; 8].into();
        let e = lift(&mut short, &mut 0).unwrap_err();
        assert!(
            e.to_string()
                .contains("holds 8 bytes, but FP32 [3] needs 12"),
            "{e}"
        );
        let mut neg = tensor(pb::DataType::DtFloat, &[-1]);
        neg.float_val = vec![1.0];
        assert!(lift(&mut neg, &mut 0).is_err());
        let mut overflow = tensor(pb::DataType::DtFloat, &[i64::MAX, i64::MAX]);
        overflow.tensor_content = vec![0; 4].into();
        assert!(lift(&mut overflow, &mut 0).is_err());
    }

    #[test]
    fn text_shape_ignores_strings_and_comments() {
        assert_eq!(text_shape("node { name: \"{{{\" } # {{{{\n"), (1, 2));
        assert_eq!(text_shape("a { b < c { } > }"), (3, 3));
        assert_eq!(text_shape("s: [\"\", \"\"]").1, 2);
        let deep = "library { ".repeat(500);
        assert!(parse_graphdef_text(&deep).is_err());
    }

    #[test]
    fn fields_the_contract_does_not_declare_are_refused() {
        let mut node = pb::NodeDef {
            name: "a".into(),
            op: "NoOp".into(),
            ..Default::default()
        }
        .encode_to_vec();
        // Field 99, varint 1, inside the node.
        node.extend([0x98, 0x06, 0x01]);
        let mut bytes = vec![0x0a, node.len() as u8];
        bytes.extend(node);
        let e = decode_graphdef(&bytes).unwrap_err();
        assert!(
            e.to_string()
                .contains("GraphDef.node: unknown field number 99"),
            "{e}"
        );
    }

    #[test]
    fn a_million_empty_messages_are_refused_before_decoding() {
        // One node whose attr holds a list of 10^6 empty shapes: 2 MB on the wire,
        // hundreds of MB decoded.
        let list = pb::AttrValue {
            value: Some(pb::attr_value::Value::List(pb::attr_value::ListValue {
                shape: vec![pb::TensorShapeProto::default(); 1_000_000],
                ..Default::default()
            })),
        };
        let mut node = pb::NodeDef {
            name: "n".into(),
            op: "NoOp".into(),
            ..Default::default()
        };
        node.attr.insert("k".into(), list);
        let bytes = pb::GraphDef {
            node: vec![node],
            ..Default::default()
        }
        .encode_to_vec();
        let e = decode_graphdef(&bytes).unwrap_err();
        assert!(
            e.to_string().contains("estimated decoded GraphDef size"),
            "{e}"
        );
    }

    #[test]
    fn node_counts_come_from_the_wire() {
        let g = pb::GraphDef {
            node: vec![pb::NodeDef::default(); 3],
            library: Some(pb::FunctionDefLibrary {
                function: vec![pb::FunctionDef {
                    node_def: vec![pb::NodeDef::default(); 2],
                    ..Default::default()
                }],
                ..Default::default()
            }),
            ..Default::default()
        };
        assert_eq!(count_nodes(&g.encode_to_vec()), 5);
        let many = [0x0au8, 0x00].repeat(MAX_NODES as usize + 1);
        let e = decode_graphdef(&many).unwrap_err();
        assert!(e.to_string().contains("GraphDef nodes"), "{e}");
    }
}
