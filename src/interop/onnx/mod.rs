//! ONNX models in and out of archives.
//!
//! `import_model` stores a ModelProto as a tag: every top-level initializer
//! (`graph.initializer`) of a dtype modelzip holds becomes a parameter named by the
//! initializer (LoDTensor layout, deduplicated against the archive like every tensor),
//! and the rest of the model goes to `graph.fb` (an [`OnnxGraph`]): the ModelProto
//! with those initializers' values removed, plus for each initializer whether its
//! values were in `raw_data` or in the dtype's typed field (`float_data`,
//! `int32_data`, ...). Nodes, inputs, outputs, value_info, opset_import,
//! metadata_props, functions, doc strings and subgraphs (with their own initializers)
//! stay in the stored model as they came. Initializers with data in an external file
//! (`data_location: EXTERNAL`) are read from beside the model, refusing locations
//! outside its directory, ranges past the file's end and tensors that together read
//! more than the files hold; other tensors' external data (subgraph initializers,
//! attributes) is read into the stored model.
//!
//! `export_model` rebuilds the ModelProto, equal to the imported one as a protobuf
//! message but with external data inline in `raw_data`; exporting to a file
//! ([`super::Format::export`]) writes external data back to the files and offsets it came from (or, with
//! [`ExportOptions::external_data`], every parameter in `PATH.data` at 64-byte aligned
//! offsets). docs/ONNX.md has the mapping and what is refused.
//!
//! ```no_run
//! use modelzip::interop::{self, ExportOptions, ImportOptions};
//! use modelzip::Archive;
//! use std::path::{Path, PathBuf};
//!
//! let onnx = interop::format("onnx")?;
//! onnx.import(Path::new("model.zip"), "v1", &[PathBuf::from("mlp.onnx")],
//!             &ImportOptions::default())?;
//! let archive = Archive::open("model.zip")?;
//! onnx.export(&archive.tag("v1")?, Path::new("out.onnx"), &ExportOptions::default())?;
//! # Ok::<(), modelzip::Error>(())
//! ```

pub(crate) mod dump;
pub(crate) mod variants;

use super::{
    ExportOptions, Exported, Format, ImportOptions, ImportReport, check_output_size, has_ext, head,
    read_whole, report, write_tag, write_temp,
};
use crate::archive::{GraphFormat, Tag, TensorData};
use crate::error::{Error, ErrorKind, Result};
use crate::graph::{Graph, OnnxGraph, OnnxInit};
use crate::onnx_proto as pb;
use crate::progress::Ticker;
use crate::tensor::{DType, TensorView};
use bytes::Bytes;
use prost::Message;
use prost_reflect::{DescriptorPool, MessageDescriptor};
use std::collections::{HashMap, HashSet};
use std::io::Read;
use std::path::{Component, Path, PathBuf};
use std::sync::OnceLock;

internal! {
    /// Largest ModelProto accepted (protobuf's own limit is 2 GiB).
    pub const MAX_MODEL_BYTES: u64 = 1 << 31;
}

internal! {
    /// Alignment of each tensor's offset in an exported external data file.
    pub const EXTERNAL_ALIGN: u64 = 64;
}

fn gerr(msg: impl Into<String>) -> Error {
    ErrorKind::Graph(msg.into()).into()
}

fn invalid(msg: impl Into<String>) -> Error {
    ErrorKind::InvalidInput(msg.into()).into()
}

fn pool() -> Result<&'static DescriptorPool> {
    static POOL: OnceLock<Option<DescriptorPool>> = OnceLock::new();
    POOL.get_or_init(|| DescriptorPool::decode(pb::FILE_DESCRIPTOR_SET).ok())
        .as_ref()
        .ok_or_else(|| gerr("the compiled ONNX descriptor set is unreadable"))
}

fn descriptor(name: &str) -> Result<MessageDescriptor> {
    pool()?
        .get_message_by_name(name)
        .ok_or_else(|| gerr(format!("{name} is missing from the descriptor set")))
}

internal! {
/// Decodes a binary ModelProto. Fields onnx.proto does not declare are refused (they
/// could not be kept), as are nesting deeper than 100 messages (subgraphs inside
/// subgraphs) and encodings that would decode to far more memory than their size.
pub fn decode_model(bytes: &[u8]) -> Result<pb::ModelProto> {
    check_model_wire(bytes)?;
    pb::ModelProto::decode(bytes).map_err(|e| gerr(format!("invalid ONNX protobuf: {e}")))
}
}

/// [`decode_model`] of a mapped file: `raw_data` values are slices of `bytes`, not
/// copies.
fn decode_model_shared(bytes: Bytes) -> Result<pb::ModelProto> {
    check_model_wire(&bytes)?;
    pb::ModelProto::decode(bytes).map_err(|e| gerr(format!("invalid ONNX protobuf: {e}")))
}

/// What [`decode_model`] checks on the wire before decoding.
fn check_model_wire(bytes: &[u8]) -> Result<()> {
    if bytes.len() as u64 > MAX_MODEL_BYTES {
        return Err(ErrorKind::LimitExceeded {
            what: "ONNX model size",
            size: bytes.len() as u64,
            limit: MAX_MODEL_BYTES,
        }
        .into());
    }
    crate::proto_walk::precheck(bytes, &descriptor("onnx.ModelProto")?, "ONNX model")
}

// ---------------------------------------------------------------------------------
// Dtypes and values

internal! {
    /// The modelzip dtype of an ONNX `TensorProto.DataType` number, when it has one.
    pub fn dtype_from_onnx(dt: i32) -> Option<DType> {
        use pb::tensor_proto::DataType as D;
        Some(match D::try_from(dt).ok()? {
            D::Float => DType::Fp32,
            D::Uint8 => DType::Uint8,
            D::Int8 => DType::Int8,
            D::Uint16 => DType::Uint16,
            D::Int16 => DType::Int16,
            D::Int32 => DType::Int32,
            D::Int64 => DType::Int64,
            D::Bool => DType::Bool,
            D::Float16 => DType::Fp16,
            D::Double => DType::Fp64,
            D::Uint32 => DType::Uint32,
            D::Uint64 => DType::Uint64,
            D::Complex64 => DType::Complex64,
            D::Complex128 => DType::Complex128,
            D::Bfloat16 => DType::Bf16,
            D::Float8e4m3fn => DType::Fp8E4m3fn,
            D::Float8e5m2 => DType::Fp8E5m2,
            _ => return None,
        })
    }
}

/// Values written in any typed field of a tensor.
fn typed_total(t: &pb::TensorProto) -> usize {
    t.float_data.len()
        + t.int32_data.len()
        + t.string_data.len()
        + t.int64_data.len()
        + t.double_data.len()
        + t.uint64_data.len()
}

/// The values of dtype `d` in its typed field, as little-endian element bytes; `None`
/// when a value does not fit the dtype (the initializer then stays in the model).
fn typed_to_bytes(t: &pb::TensorProto, d: DType) -> Option<Vec<u8>> {
    fn ints(v: &[i32], lo: i64, hi: i64, width: usize) -> Option<Vec<u8>> {
        let mut out = Vec::with_capacity(v.len() * width);
        for &x in v {
            let x = i64::from(x);
            if x < lo || x > hi {
                return None;
            }
            out.extend_from_slice(&x.to_le_bytes()[..width]);
        }
        Some(out)
    }
    Some(match d {
        DType::Fp32 | DType::Complex64 => {
            t.float_data.iter().flat_map(|x| x.to_le_bytes()).collect()
        }
        DType::Fp64 | DType::Complex128 => {
            t.double_data.iter().flat_map(|x| x.to_le_bytes()).collect()
        }
        DType::Int64 => t.int64_data.iter().flat_map(|x| x.to_le_bytes()).collect(),
        DType::Uint64 => t.uint64_data.iter().flat_map(|x| x.to_le_bytes()).collect(),
        DType::Uint32 => {
            let mut out = Vec::with_capacity(t.uint64_data.len() * 4);
            for &x in &t.uint64_data {
                out.extend_from_slice(&u32::try_from(x).ok()?.to_le_bytes());
            }
            out
        }
        DType::Int32 => ints(&t.int32_data, i32::MIN.into(), i32::MAX.into(), 4)?,
        DType::Int16 => ints(&t.int32_data, i16::MIN.into(), i16::MAX.into(), 2)?,
        DType::Int8 => ints(&t.int32_data, i8::MIN.into(), i8::MAX.into(), 1)?,
        DType::Uint16 | DType::Fp16 | DType::Bf16 => ints(&t.int32_data, 0, 0xffff, 2)?,
        DType::Uint8 | DType::Fp8E4m3fn | DType::Fp8E5m2 => ints(&t.int32_data, 0, 0xff, 1)?,
        DType::Bool => ints(&t.int32_data, 0, 1, 1)?,
        DType::SizeT => return None,
    })
}

/// The number of values dtype `d` writes in its typed field for `n` elements.
fn typed_count(d: DType, numel: u64) -> u64 {
    if matches!(d, DType::Complex64 | DType::Complex128) {
        numel.saturating_mul(2)
    } else {
        numel
    }
}

/// Writes element bytes back into the dtype's typed field.
fn bytes_to_typed(t: &mut pb::TensorProto, d: DType, data: &[u8]) -> Result<()> {
    fn chunks<const N: usize>(data: &[u8]) -> impl Iterator<Item = [u8; N]> + '_ {
        // chunks_exact yields N-byte chunks only, so first_chunk always gives one.
        data.chunks_exact(N)
            .filter_map(|c| c.first_chunk::<N>().copied())
    }
    match d {
        DType::Fp32 | DType::Complex64 => {
            t.float_data = chunks(data).map(f32::from_le_bytes).collect()
        }
        DType::Fp64 | DType::Complex128 => {
            t.double_data = chunks(data).map(f64::from_le_bytes).collect()
        }
        DType::Int64 => t.int64_data = chunks(data).map(i64::from_le_bytes).collect(),
        DType::Uint64 => t.uint64_data = chunks(data).map(u64::from_le_bytes).collect(),
        DType::Uint32 => {
            t.uint64_data = chunks(data)
                .map(|c| u64::from(u32::from_le_bytes(c)))
                .collect()
        }
        DType::Int32 => t.int32_data = chunks(data).map(i32::from_le_bytes).collect(),
        DType::Int16 => {
            t.int32_data = chunks(data)
                .map(|c| i32::from(i16::from_le_bytes(c)))
                .collect()
        }
        DType::Int8 => t.int32_data = data.iter().map(|&b| i32::from(b as i8)).collect(),
        DType::Uint16 | DType::Fp16 | DType::Bf16 => {
            t.int32_data = chunks(data)
                .map(|c| i32::from(u16::from_le_bytes(c)))
                .collect()
        }
        DType::Uint8 | DType::Fp8E4m3fn | DType::Fp8E5m2 | DType::Bool => {
            t.int32_data = data.iter().map(|&b| i32::from(b)).collect()
        }
        DType::SizeT => return Err(invalid("SizeT has no ONNX typed field")),
    }
    Ok(())
}

/// The dims of an initializer: non-negative, with an element count that fits.
fn tensor_dims(t: &pb::TensorProto) -> Result<(Vec<u64>, u64)> {
    let dims = t
        .dims
        .iter()
        .map(|&d| u64::try_from(d))
        .collect::<std::result::Result<Vec<u64>, _>>()
        .map_err(|_| invalid(format!("dims {:?} has a negative dimension", t.dims)))?;
    // The product of the non-zero dims must fit too (as every tensor modelzip stores).
    let numel = crate::tensor::element_count(&dims)
        .map_err(|_| invalid(format!("dims {:?} overflow an element count", t.dims)))?;
    Ok((dims, numel))
}

/// Whether a name can be a parameter name (params.txt is one name a line).
fn usable_name(name: &str) -> bool {
    !name.is_empty() && !name.contains(['\n', '\r', '\0'])
}

// ---------------------------------------------------------------------------------
// External data

const DATA_LOCATION_EXTERNAL: i32 = pb::tensor_proto::DataLocation::External as i32;

/// The file an external-data `location` names, inside `dir` (the model's directory):
/// relative, no `..`, and still inside `dir` after symbolic links are resolved.
fn external_path(dir: &Path, location: &str) -> Result<PathBuf> {
    let rel = Path::new(location);
    if location.is_empty()
        || !rel
            .components()
            .all(|c| matches!(c, Component::Normal(_) | Component::CurDir))
    {
        return Err(invalid(format!(
            "external data location {location:?} is not a relative path inside the model's \
             directory"
        )));
    }
    let base = dir
        .canonicalize()
        .map_err(|e| Error::from(e).in_file(dir))?;
    let path = base.join(rel);
    let real = path
        .canonicalize()
        .map_err(|e| Error::from(e).in_file(&path))?;
    if !real.starts_with(&base) {
        return Err(invalid(format!(
            "external data location {location:?} resolves to {}, outside the model's \
             directory {}",
            real.display(),
            base.display()
        )));
    }
    Ok(real)
}

/// What an import has read from external data files so far: a model may name one range
/// of a file from many tensors, so the bytes used are bounded by the files themselves —
/// all the tensors together may read no more than the distinct files they name hold.
#[derive(Default)]
struct ExternalReads {
    /// Each file named so far (canonical path): its size and its map.
    files: HashMap<PathBuf, (u64, Bytes)>,
    /// The sum of those sizes.
    budget: u64,
    /// The bytes read so far.
    read: u64,
}

/// Points a tensor's `raw_data` at its external data, a slice of the mapped file (not a
/// copy), clearing `external_data` and `data_location`; checks the location, offset and
/// length against the file and the tensor's dtype and dims, and the total read against
/// what the files hold.
fn load_external(t: &mut pb::TensorProto, dir: &Path, reads: &mut ExternalReads) -> Result<()> {
    let (mut location, mut offset, mut length) = (None, 0u64, None);
    for kv in &t.external_data {
        let key = kv.key.as_deref().unwrap_or("");
        let value = kv.value.as_deref().unwrap_or("");
        let number = |what: &str| {
            value.parse::<u64>().map_err(|_| {
                invalid(format!(
                    "external data {what} {value:?} is not a non-negative integer"
                ))
            })
        };
        match key {
            "location" => location = Some(value.to_string()),
            "offset" => offset = number("offset")?,
            "length" => length = Some(number("length")?),
            "checksum" => {}
            other => {
                return Err(invalid(format!(
                    "external data key {other:?} is not one ONNX defines (location, offset, \
                     length, checksum)"
                )));
            }
        }
    }
    let location = location.ok_or_else(|| invalid("external data without a location"))?;
    let path = external_path(dir, &location)?;
    let (file_len, map) = match reads.files.get(&path) {
        Some(f) => f.clone(),
        None => {
            let map = super::map_input(&path)?;
            (map.len() as u64, map)
        }
    };
    if offset > file_len {
        return Err(Error::new(ErrorKind::truncated(
            "external data (offset past the end of the file)",
            offset,
            file_len,
        ))
        .in_file(&path));
    }
    let length = length.unwrap_or(file_len - offset);
    let end = offset.saturating_add(length);
    if end > file_len {
        return Err(Error::new(ErrorKind::truncated(
            "external data (offset + length past the end of the file)",
            end,
            file_len,
        ))
        .in_file(&path));
    }
    // The length must be what the dtype and dims need, when the dtype is known; the
    // allocation below is then bounded by both the file and the declared shape.
    if let Some(d) = dtype_from_onnx(t.data_type.unwrap_or(0)) {
        let (_, numel) = tensor_dims(t)?;
        let need = numel.checked_mul(d.size() as u64);
        if need != Some(length) {
            return Err(invalid(format!(
                "external data holds {length} bytes, but {d} {:?} needs {}",
                t.dims,
                need.map_or("more than 2^64".to_string(), |n| n.to_string())
            )));
        }
    }
    // And all reads together by the files: many tensors naming one range would
    // otherwise make a small model write many copies of a large file.
    if let std::collections::hash_map::Entry::Vacant(e) = reads.files.entry(path.clone()) {
        e.insert((file_len, map.clone()));
        reads.budget = reads.budget.saturating_add(file_len);
    }
    let read = reads.read.saturating_add(length);
    if read > reads.budget {
        return Err(Error::new(ErrorKind::LimitExceeded {
            what: "external data read (tensors reading the same bytes more than once)",
            size: read,
            limit: reads.budget,
        })
        .in_file(&path));
    }
    reads.read = read;
    // Both within the map's length (checked above), so within usize.
    let (start, end) = (offset as usize, end as usize);
    t.raw_data = Some(map.slice(start..end));
    t.external_data.clear();
    t.data_location = None;
    Ok(())
}

/// Where a tensor is in the model, for an error that names it: a step below its parent
/// (borrowed), rendered only when displayed. The walk over every node and attribute
/// builds no string; a model whose op types and attribute names are long and many
/// would otherwise cost their length times their count.
#[derive(Clone, Copy)]
struct At<'a> {
    parent: Option<&'a At<'a>>,
    step: Step<'a>,
}

#[derive(Clone, Copy)]
enum Step<'a> {
    /// "initializer {i}", "sparse initializer {i}", "node {i}", "function {i}".
    Indexed(&'static str, usize),
    /// A node's op type, "({op_type})".
    OpType(&'a str),
    /// "attribute {name:?}".
    Attribute(&'a str),
    /// "graph", "values", "indices", "default".
    Part(&'static str),
}

impl<'a> At<'a> {
    fn root(step: Step<'static>) -> At<'static> {
        At { parent: None, step }
    }

    fn then(&'a self, step: Step<'a>) -> At<'a> {
        At {
            parent: Some(self),
            step,
        }
    }
}

impl std::fmt::Display for At<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if let Some(p) = self.parent {
            write!(f, "{p} ")?;
        }
        match self.step {
            Step::Indexed(what, i) => write!(f, "{what} {i}"),
            Step::OpType(op) => write!(f, "({op})"),
            Step::Attribute(name) => write!(f, "attribute {name:?}"),
            Step::Part(part) => f.write_str(part),
        }
    }
}

/// What [`each_nested_tensor`] calls on each tensor, with where it is.
type OnTensor<'f> = dyn FnMut(&mut pb::TensorProto, &At<'_>) -> Result<()> + 'f;

/// Calls `f` on every tensor of a graph with where it is (`at`), recursing into the
/// subgraphs and tensors of node attributes; the graph's own initializers only when
/// `initializers` (the main graph's are handled on their own).
fn each_nested_tensor(
    g: &mut pb::GraphProto,
    at: &At<'_>,
    initializers: bool,
    f: &mut OnTensor<'_>,
) -> Result<()> {
    if initializers {
        for (i, t) in g.initializer.iter_mut().enumerate() {
            f(t, &at.then(Step::Indexed("initializer", i)))?;
        }
    }
    for (i, s) in g.sparse_initializer.iter_mut().enumerate() {
        each_sparse_tensor(s, &at.then(Step::Indexed("sparse initializer", i)), f)?;
    }
    for (i, n) in g.node.iter_mut().enumerate() {
        each_node_tensor(n, &at.then(Step::Indexed("node", i)), f)?;
    }
    Ok(())
}

fn each_sparse_tensor(
    s: &mut pb::SparseTensorProto,
    at: &At<'_>,
    f: &mut OnTensor<'_>,
) -> Result<()> {
    if let Some(t) = s.values.as_mut() {
        f(t, &at.then(Step::Part("values")))?;
    }
    if let Some(t) = s.indices.as_mut() {
        f(t, &at.then(Step::Part("indices")))?;
    }
    Ok(())
}

fn each_node_tensor(n: &mut pb::NodeProto, at: &At<'_>, f: &mut OnTensor<'_>) -> Result<()> {
    let at = at.then(Step::OpType(n.op_type.as_deref().unwrap_or("")));
    for a in &mut n.attribute {
        each_attribute_tensor(a, &at, f)?;
    }
    Ok(())
}

fn each_attribute_tensor(
    a: &mut pb::AttributeProto,
    at: &At<'_>,
    f: &mut OnTensor<'_>,
) -> Result<()> {
    let at = at.then(Step::Attribute(a.name.as_deref().unwrap_or("")));
    if let Some(t) = a.t.as_mut() {
        f(t, &at)?;
    }
    for t in &mut a.tensors {
        f(t, &at)?;
    }
    if let Some(s) = a.sparse_tensor.as_mut() {
        each_sparse_tensor(s, &at, f)?;
    }
    for s in &mut a.sparse_tensors {
        each_sparse_tensor(s, &at, f)?;
    }
    if let Some(g) = a.g.as_mut() {
        each_nested_tensor(g, &at, true, f)?;
    }
    for g in &mut a.graphs {
        each_nested_tensor(g, &at, true, f)?;
    }
    Ok(())
}

/// Reads the external data of every tensor that does not become a parameter (subgraph
/// initializers, node attributes, sparse initializers, functions, training graphs) into
/// the model, so the stored model does not depend on files the archive does not hold.
fn inline_nested_external(
    m: &mut pb::ModelProto,
    dir: Option<&Path>,
    reads: &mut ExternalReads,
) -> Result<()> {
    let mut load = |t: &mut pb::TensorProto, at: &At<'_>| -> Result<()> {
        if t.data_location != Some(DATA_LOCATION_EXTERNAL) {
            return Ok(());
        }
        let name = t.name.clone().unwrap_or_default();
        let here = |e: Error| gerr(format!("{at} ({name:?}): {e}"));
        let dir = dir.ok_or_else(|| {
            here(invalid(
                "its data is in an external file, and no model directory is known",
            ))
        })?;
        load_external(t, dir, reads).map_err(here)
    };
    if let Some(g) = m.graph.as_mut() {
        each_nested_tensor(g, &At::root(Step::Part("graph")), false, &mut load)?;
    }
    for (i, func) in m.functions.iter_mut().enumerate() {
        let function = At::root(Step::Indexed("function", i));
        for (j, n) in func.node.iter_mut().enumerate() {
            each_node_tensor(n, &function.then(Step::Indexed("node", j)), &mut load)?;
        }
        let default = function.then(Step::Part("default"));
        for a in &mut func.attribute_proto {
            each_attribute_tensor(a, &default, &mut load)?;
        }
    }
    for (i, ti) in m.training_info.iter_mut().enumerate() {
        let info = At::root(Step::Indexed("training_info", i));
        if let Some(g) = ti.initialization.as_mut() {
            let at = info.then(Step::Part("initialization"));
            each_nested_tensor(g, &at, true, &mut load)?;
        }
        if let Some(g) = ti.algorithm.as_mut() {
            let at = info.then(Step::Part("algorithm"));
            each_nested_tensor(g, &at, true, &mut load)?;
        }
    }
    Ok(())
}

// ---------------------------------------------------------------------------------
// Split and join

internal! {
/// One initializer lifted out of the model as a parameter.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Lifted {
    /// The initializer's name, which the parameter takes.
    pub name: String,
    /// Element type.
    pub dtype: DType,
    /// Dimensions.
    pub dims: Vec<u64>,
    /// The values, little-endian row-major: a slice of the model's (or its external data
    /// file's) map when they were in `raw_data`.
    pub data: Bytes,
}
}

/// An initializer's values as a parameter: dtype, dims, bytes, and whether they were in
/// the typed field.
type Values = (DType, Vec<u64>, Bytes, bool);

internal! {
/// Where [`join_model`] puts a parameter's bytes instead of back in the tensor.
pub type Place<'f> = dyn FnMut(&mut pb::TensorProto, &[u8]) -> Result<()> + 'f;
}

/// Takes an initializer's values out when they can be a parameter: `Some((dtype, dims,
/// bytes, typed))`, the tensor left with its values removed; `None` leaves it whole.
fn lift(t: &mut pb::TensorProto) -> Result<Option<Values>> {
    let Some(d) = dtype_from_onnx(t.data_type.unwrap_or(0)) else {
        return Ok(None);
    };
    // `data_location: DEFAULT` written out (as onnx does for every tensor it loaded from
    // external data) is inline data; it stays in the stored model and comes back.
    let external = t
        .data_location
        .is_some_and(|l| l != pb::tensor_proto::DataLocation::Default as i32);
    if t.segment.is_some() || external || !t.external_data.is_empty() {
        return Ok(None);
    }
    let (dims, numel) = tensor_dims(t)?;
    let need = numel
        .checked_mul(d.size() as u64)
        .ok_or_else(|| invalid(format!("{d} {dims:?} is more than 2^64 bytes")))?;
    let written = typed_total(t);
    if let Some(raw) = &t.raw_data {
        if written != 0 {
            return Ok(None);
        }
        if raw.len() as u64 != need {
            return Err(invalid(format!(
                "raw_data holds {} bytes, but {d} {dims:?} needs {need}",
                raw.len()
            )));
        }
        let data = t.raw_data.take().unwrap_or_default();
        return Ok(Some((d, dims, data, false)));
    }
    let want = typed_count(d, numel);
    if written as u64 != want {
        return Err(invalid(format!(
            "holds {written} typed values, but {d} {dims:?} needs {want}"
        )));
    }
    let Some(data) = typed_to_bytes(t, d) else {
        return Ok(None);
    };
    if data.len() as u64 != need {
        // The values were in another dtype's field.
        return Ok(None);
    }
    t.float_data.clear();
    t.int32_data.clear();
    t.int64_data.clear();
    t.double_data.clear();
    t.uint64_data.clear();
    Ok(Some((d, dims, Bytes::from(data), true)))
}

internal! {
/// Splits a ModelProto into the graph.fb model and the parameters. `dir` is the
/// model's directory, for external data (`None`: external data is refused).
pub fn split_model(mut m: pb::ModelProto, dir: Option<&Path>) -> Result<(OnnxGraph, Vec<Lifted>)> {
    let Some(graph) = m.graph.as_mut() else {
        return Err(gerr("the ONNX model has no graph"));
    };
    let mut reads = ExternalReads::default();
    let mut names = HashSet::new();
    let mut inits = Vec::with_capacity(graph.initializer.len());
    let mut params = Vec::new();
    for (i, t) in graph.initializer.iter_mut().enumerate() {
        let name = t.name.clone().unwrap_or_default();
        let place = |e: Error| gerr(format!("initializer {i} ({name:?}): {e}"));
        let mut external = Vec::new();
        if t.data_location == Some(DATA_LOCATION_EXTERNAL) {
            external = t
                .external_data
                .iter()
                .map(|kv| {
                    (
                        kv.key.clone().unwrap_or_default(),
                        kv.value.clone().unwrap_or_default(),
                    )
                })
                .collect();
            let dir = dir.ok_or_else(|| {
                place(invalid(
                    "its data is in an external file, and no model directory is known",
                ))
            })?;
            load_external(t, dir, &mut reads).map_err(place)?;
        }
        let fresh = usable_name(&name) && names.insert(name.clone());
        let lifted = if fresh { lift(t).map_err(place)? } else { None };
        match lifted {
            Some((dtype, dims, data, typed)) => {
                inits.push(OnnxInit {
                    param: Some(name.clone()),
                    typed,
                    external,
                });
                params.push(Lifted {
                    name,
                    dtype,
                    dims,
                    data,
                });
            }
            None => inits.push(OnnxInit::default()),
        }
    }
    inline_nested_external(&mut m, dir, &mut reads)?;
    let size = m.encoded_len() as u64;
    if size > MAX_MODEL_BYTES {
        return Err(ErrorKind::LimitExceeded {
            what: "ONNX model without its parameters (external data of subgraphs, \
                   attributes and other tensors that are not top-level initializers read in)",
            size,
            limit: MAX_MODEL_BYTES,
        }
        .into());
    }
    Ok((
        OnnxGraph {
            model: m.encode_to_vec(),
            initializers: inits,
        },
        params,
    ))
}
}

/// Checks a parameter against the dtype and dims the model declares for it.
fn check_param(t: &pb::TensorProto, v: &TensorView<'_>, name: &str) -> Result<()> {
    let want = dtype_from_onnx(t.data_type.unwrap_or(0));
    let (dims, _) = tensor_dims(t)?;
    if want != Some(v.dtype()) || dims != v.dims() {
        return Err(invalid(format!(
            "parameter {name:?} is {} {:?}, the model declares ONNX data_type {} {dims:?}",
            v.dtype(),
            v.dims(),
            t.data_type.unwrap_or(0)
        )));
    }
    if !v.lod().is_empty() {
        return Err(invalid(format!(
            "parameter {name:?} has a LoD, which an ONNX tensor cannot hold"
        )));
    }
    Ok(())
}

/// The ModelProto stored in graph.fb, walked before it is decoded (see
/// `tf::decode_stored`).
pub(crate) fn decode_stored_model(g: &OnnxGraph) -> Result<pb::ModelProto> {
    crate::proto_walk::decode_stored(
        &g.model,
        pool()?,
        "onnx.ModelProto",
        "the stored ONNX model",
    )
}

internal! {
/// Rebuilds the ModelProto from graph.fb's model and the parameters `param` gives.
/// `place` decides where each parameter's bytes go: `None` puts them back in the form
/// they came in; `Some` is called with the tensor and its bytes (external data).
pub fn join_model<'p, D: std::borrow::Borrow<TensorData<'p>>>(
    g: &OnnxGraph,
    mut param: impl FnMut(&str) -> Result<D>,
    mut place: Option<&mut Place<'_>>,
) -> Result<pb::ModelProto> {
    let mut m = decode_stored_model(g)?;
    let graph = m
        .graph
        .as_mut()
        .ok_or_else(|| gerr("the stored ONNX model has no graph"))?;
    if graph.initializer.len() != g.initializers.len() {
        return Err(gerr(format!(
            "the stored ONNX model has {} initializers, graph.fb describes {}",
            graph.initializer.len(),
            g.initializers.len()
        )));
    }
    for (i, (t, init)) in graph
        .initializer
        .iter_mut()
        .zip(&g.initializers)
        .enumerate()
    {
        let Some(p) = &init.param else {
            continue;
        };
        let here = |e: Error| gerr(format!("initializer {i} ({p:?}): {e}"));
        let data = param(p).map_err(here)?;
        let v = data.borrow().view();
        check_param(t, &v, p).map_err(here)?;
        match place.as_mut() {
            Some(f) => f(t, v.data()).map_err(here)?,
            None if init.typed => bytes_to_typed(t, v.dtype(), v.data()).map_err(here)?,
            None => t.raw_data = Some(Bytes::copy_from_slice(v.data())),
        }
    }
    Ok(m)
}
}

// ---------------------------------------------------------------------------------
// Import and export

internal! {
/// Imports a ModelProto as tag `tag` of the archive at `archive` (created if absent):
/// the initializers as parameters, the rest as graph.fb. External data is refused
/// (use [`import_model_file`], which knows the model's directory).
pub fn import_model(
    archive: &Path,
    tag: &str,
    model: pb::ModelProto,
    opts: &ImportOptions,
) -> Result<ImportReport> {
    let (g, params) = split_model(model, None)?;
    store(archive, tag, g, params, opts)
}
}

internal! {
/// `import_model` from a `.onnx` file, with external data read from its directory;
/// errors name the file.
pub fn import_model_file(
    archive: &Path,
    tag: &str,
    path: &Path,
    opts: &ImportOptions,
) -> Result<ImportReport> {
    let bytes = read_whole(path)?;
    let m = decode_model_shared(bytes).map_err(|e| e.in_file(path))?;
    let dir = crate::archive::parent_dir(path);
    let (g, params) = split_model(m, Some(&dir)).map_err(|e| e.in_file(path))?;
    store(archive, tag, g, params, opts)
}
}

fn store(
    archive: &Path,
    tag: &str,
    onnx: OnnxGraph,
    params: Vec<Lifted>,
    opts: &ImportOptions,
) -> Result<ImportReport> {
    let fb = Graph::Onnx(onnx).to_flatbuffers()?;
    let mut tensors = Vec::with_capacity(params.len());
    for p in &params {
        tensors.push((
            &p.name,
            TensorView::new(p.dtype, p.dims.clone(), Vec::new(), &p.data)
                .map_err(|e| invalid(format!("initializer {:?}: {e}", p.name)))?,
        ));
    }
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
    /// The tag's ONNX model, or an error saying what the tag holds instead.
    pub fn onnx_graph(tag: &Tag<'_>) -> Result<OnnxGraph> {
        super::foreign_graph(tag, "ONNX", |g| match g {
            Graph::Onnx(onnx) => Ok(onnx),
            other => Err(other),
        })
    }
}

internal! {
/// The ModelProto of a tag imported from ONNX (values in the form they came in, external
/// data inline in `raw_data`), with
/// the parameters used and the ones the model does not refer to.
pub fn export_model(tag: &Tag<'_>) -> Result<(pb::ModelProto, Vec<String>, Vec<String>)> {
    let g = onnx_graph(tag)?;
    let name = tag.name().to_string();
    let params = ParamReads::new(tag);
    let m = join_model(&g, |p| params.data(p), None)
        .map_err(|e| e.in_entry(format!("{name}/graph.fb")))?;
    let (used, unused) = used_params(tag, &g);
    Ok((m, used, unused))
}
}

fn used_params(tag: &Tag<'_>, g: &OnnxGraph) -> (Vec<String>, Vec<String>) {
    let used: Vec<String> = g
        .initializers
        .iter()
        .filter_map(|i| i.param.clone())
        .collect();
    let set: HashSet<&str> = used.iter().map(String::as_str).collect();
    let unused = tag
        .params()
        .iter()
        .filter(|p| !set.contains(p.name.as_str()))
        .map(|p| p.name.clone())
        .collect();
    (used, unused)
}

internal! {
    /// Checks that an ONNX model stored in `tag` can be exported: the stored model decodes,
    /// every parameter it refers to exists with the declared dtype and dims, and the kept
    /// external data entries name a plain relative location with the parameter's length.
    /// Reads the parameters in place (no copies).
    pub fn check_refs(tag: &Tag<'_>, g: &OnnxGraph) -> Result<()> {
        let mut nothing = |_: &mut pb::TensorProto, _: &[u8]| Ok(());
        join_model(g, |p| tag.param(p), Some(&mut nothing))?;
        // Where a plain export would write the initializers imported from external data.
        for (i, init) in g.initializers.iter().enumerate() {
            let (Some(p), false) = (&init.param, init.external.is_empty()) else {
                continue;
            };
            let len = tag.param(p)?.view().data().len() as u64;
            external_slot(init, len).map_err(|e| gerr(format!("initializer {i} ({p:?}): {e}")))?;
        }
        Ok(())
    }
}

internal! {
    /// The external data file of a model written to `out`: `out` + `.data`.
    pub fn external_data_path(out: &Path) -> PathBuf {
        let mut s = out.as_os_str().to_owned();
        s.push(".data");
        PathBuf::from(s)
    }
}

/// The file an external-data `location` names for an export beside `dir`: a relative
/// path of plain components whose directory exists inside `dir` (symbolic links
/// resolved), so a stored model cannot make an export write elsewhere.
fn export_location(dir: &Path, location: &str) -> Result<PathBuf> {
    let rel = plain_location(location)?;
    let base = dir
        .canonicalize()
        .map_err(|e| Error::from(e).in_file(dir))?;
    let parent = base.join(rel.parent().unwrap_or(Path::new("")));
    let real = parent
        .canonicalize()
        .map_err(|e| Error::from(e).in_file(&parent))?;
    if !real.starts_with(&base) {
        return Err(invalid(format!(
            "external data location {location:?} resolves to {}, outside the output \
             directory {}",
            real.display(),
            base.display()
        )));
    }
    Ok(dir.join(rel))
}

/// `location` as a relative file path of plain components (no root, no `..`).
fn plain_location(location: &str) -> Result<&Path> {
    let rel = Path::new(location);
    let plain = rel
        .components()
        .all(|c| matches!(c, Component::Normal(_) | Component::CurDir));
    if !plain || location.is_empty() || rel.file_name().is_none() {
        return Err(invalid(format!(
            "external data location {location:?} is not a relative file path inside the \
             model's directory"
        )));
    }
    Ok(rel)
}

/// The location and offset a parameter of `len` bytes imported from external data goes
/// back to, from its initializer's stored entries: a plain relative location, numbers
/// where numbers belong, the length (when given) the parameter's, an end that fits.
fn external_slot(init: &OnnxInit, len: u64) -> Result<(&str, u64)> {
    let get = |k: &str| {
        init.external
            .iter()
            .find(|(key, _)| key == k)
            .map(|(_, v)| v.as_str())
    };
    let number = |k: &str| -> Result<Option<u64>> {
        get(k)
            .map(|v| {
                v.parse::<u64>().map_err(|_| {
                    invalid(format!(
                        "external data {k} {v:?} is not a non-negative integer"
                    ))
                })
            })
            .transpose()
    };
    let location = get("location").ok_or_else(|| invalid("external data without a location"))?;
    plain_location(location)?;
    let offset = number("offset")?.unwrap_or(0);
    if let Some(l) = number("length")?
        && l != len
    {
        return Err(invalid(format!(
            "external data length {l} is not the parameter's {len} bytes"
        )));
    }
    offset
        .checked_add(len)
        .ok_or_else(|| invalid(format!("external data offset {offset} overflows")))?;
    Ok((location, offset))
}

/// Where one parameter goes back in an external data file.
struct Slot {
    offset: u64,
    len: u64,
    param: String,
}

/// The external data files of a plain export of a model imported with external data:
/// each file (as [`export_location`] resolves it) with its parameters by offset, and
/// its size. Ranges that overlap are refused unless they are the same parameter bytes
/// at the same place (one tensor named twice).
type Layout = Vec<(PathBuf, Vec<Slot>, u64)>;

/// The parameters of a tag for one export: each tensor file read at most once, however
/// many initializers name it (a deflated file is inflated once, and its copy shared),
/// and its size taken from its header alone where only the size is needed.
struct ParamReads<'t, 'a> {
    tag: &'t Tag<'a>,
    read: std::cell::RefCell<HashMap<&'t str, std::rc::Rc<TensorData<'a>>>>,
    lens: std::cell::RefCell<HashMap<&'t str, u64>>,
}

impl<'t, 'a> ParamReads<'t, 'a> {
    fn new(tag: &'t Tag<'a>) -> Self {
        ParamReads {
            tag,
            read: Default::default(),
            lens: Default::default(),
        }
    }

    fn location(&self, p: &str) -> Result<&'t crate::archive::TensorLocation> {
        let i = self.tag.param_index(p)?;
        Ok(&self.tag.params()[i].location)
    }

    /// Parameter `p`'s tensor (as [`Tag::param`] reads it).
    fn data(&self, p: &str) -> Result<std::rc::Rc<TensorData<'a>>> {
        let loc = self.location(p)?;
        if let Some(d) = self.read.borrow().get(&*loc.entry) {
            return Ok(d.clone());
        }
        let d = std::rc::Rc::new(self.tag.tensor(loc)?);
        self.read.borrow_mut().insert(&loc.entry, d.clone());
        Ok(d)
    }

    /// The bytes of parameter `p`'s data, from its header.
    fn len(&self, p: &str) -> Result<u64> {
        let loc = self.location(p)?;
        if let Some(&n) = self.lens.borrow().get(&*loc.entry) {
            return Ok(n);
        }
        let heads = self.tag.archive().tensor_heads(&[loc])?;
        let n = heads.first().map_or(0, |h| h.data_len);
        self.lens.borrow_mut().insert(&loc.entry, n);
        Ok(n)
    }
}

fn imported_layout(params: &ParamReads<'_, '_>, g: &OnnxGraph, dir: &Path) -> Result<Layout> {
    let mut files: Vec<(String, PathBuf, Vec<Slot>)> = Vec::new();
    for (i, init) in g.initializers.iter().enumerate() {
        let (Some(p), false) = (&init.param, init.external.is_empty()) else {
            continue;
        };
        let here = |e: Error| gerr(format!("initializer {i} ({p:?}): {e}"));
        let len = params.len(p).map_err(here)?;
        let (location, offset) = external_slot(init, len).map_err(here)?;
        let slot = Slot {
            offset,
            len,
            param: p.clone(),
        };
        match files.iter_mut().find(|f| f.0 == location) {
            Some(f) => f.2.push(slot),
            None => {
                let path = export_location(dir, location).map_err(here)?;
                files.push((location.to_string(), path, vec![slot]));
            }
        }
    }
    let mut layout: Layout = Vec::new();
    for (location, path, mut slots) in files {
        if layout.iter().any(|f| f.0 == path) {
            return Err(invalid(format!(
                "two external data locations name the same file {location:?}"
            )));
        }
        slots.sort_by_key(|s| (s.offset, s.len));
        for w in slots.windows(2) {
            let (a, b) = (&w[0], &w[1]);
            if b.offset < a.offset + a.len {
                let same = a.offset == b.offset
                    && a.len == b.len
                    && params.data(&a.param)?.view().data() == params.data(&b.param)?.view().data();
                if !same {
                    return Err(invalid(format!(
                        "the external data of {:?} and {:?} overlap in {location:?}; \
                         export with --external-data instead",
                        a.param, b.param
                    )));
                }
            }
        }
        let size = slots.iter().map(|s| s.offset + s.len).max().unwrap_or(0);
        layout.push((path, slots, size));
    }
    Ok(layout)
}

internal! {
/// Writes a tag imported from ONNX as a `.onnx` file, through a temp file renamed into
/// place. With `opts.external_data`, every parameter goes to `out.data` beside it
/// (64-byte aligned offsets) and the model refers to it. Without it, initializers that
/// were imported from external data go back to the files they came from (the same
/// `location`, relative to `out`, at the same offsets, with the same entries), and the
/// others inline.
pub fn export_model_file(tag: &Tag<'_>, out: &Path, opts: &ExportOptions) -> Result<Exported> {
    let dir = crate::archive::parent_dir(out);
    if !dir.is_dir() {
        return Err(Error::new(ErrorKind::InvalidInput(
            "the output directory does not exist".into(),
        ))
        .in_file(&dir));
    }
    let g = onnx_graph(tag)?;
    let name = tag.name().to_string();
    let in_fb = |e: Error| e.in_entry(format!("{name}/graph.fb"));
    let data_path = external_data_path(out);
    let params = ParamReads::new(tag);
    let layout = if opts.external_data {
        Vec::new()
    } else {
        imported_layout(&params, &g, &dir).map_err(in_fb)?
    };
    let mut targets: Vec<&Path> = vec![out];
    if opts.external_data {
        targets.push(&data_path);
    }
    let real = |p: &Path| {
        crate::archive::parent_dir(p)
            .canonicalize()
            .ok()
            .zip(p.file_name())
            .map(|(d, f)| d.join(f))
    };
    let out_real = real(out);
    for (path, _, _) in &layout {
        if out_real.is_some() && out_real == real(path) {
            return Err(Error::new(ErrorKind::InvalidInput(
                "the model's external data location names the output file itself".into(),
            ))
            .in_file(out));
        }
        targets.push(path);
    }
    for t in &targets {
        super::refuse_existing(tag, t, opts.overwrite)?;
    }
    // What would be written (and held in memory), before anything is: a graph.fb may
    // name one parameter from many initializers, and external data offsets may leave
    // gaps.
    let mut total = g.model.len() as u64;
    // The least the model itself will be: what stays inline is built in memory first.
    let mut inline = g.model.len() as u64;
    for init in &g.initializers {
        let Some(p) = init.param.as_ref() else {
            continue;
        };
        let len = params.len(p).map_err(in_fb)?;
        total = total.saturating_add(len + EXTERNAL_ALIGN);
        if !opts.external_data && (layout.is_empty() || init.external.is_empty()) {
            inline = inline.saturating_add(len);
        }
    }
    for (_, _, size) in &layout {
        total = total.saturating_add(*size);
    }
    check_output_size(tag, opts, "ONNX export size", total)?;
    if inline > MAX_MODEL_BYTES {
        return Err(invalid(format!(
            "the model would be at least {inline} bytes with its initializers inline, past \
             protobuf's 2 GiB; export it with external data"
        )));
    }
    let mut files = Vec::new();
    let mut data_temps = Vec::new();
    let model = if opts.external_data {
        let location = data_path
            .file_name()
            .and_then(|n| n.to_str())
            .ok_or_else(|| invalid("the output file name is not UTF-8"))?
            .to_string();
        // Offsets, in the order join_model meets the parameters (the initializers'
        // order); the bytes are read from the archive again while writing, not copied.
        let mut offsets: Vec<u64> = Vec::new();
        let mut offset = 0u64;
        let mut put = |t: &mut pb::TensorProto, data: &[u8]| -> Result<()> {
            offset = offset.div_ceil(EXTERNAL_ALIGN) * EXTERNAL_ALIGN;
            let kv = |k: &str, v: String| pb::StringStringEntryProto {
                key: Some(k.to_string()),
                value: Some(v),
            };
            t.external_data = vec![
                kv("location", location.clone()),
                kv("offset", offset.to_string()),
                kv("length", data.len().to_string()),
            ];
            t.data_location = Some(DATA_LOCATION_EXTERNAL);
            t.raw_data = None;
            offsets.push(offset);
            offset += data.len() as u64;
            Ok(())
        };
        let m = join_model(&g, |p| params.data(p), Some(&mut put)).map_err(in_fb)?;
        let names = g.initializers.iter().filter_map(|i| i.param.as_ref());
        let temp = write_temp(&data_path, opts.fsync, |w| {
            let mut at = 0u64;
            for (off, p) in offsets.iter().zip(names) {
                let data = params.data(p).map_err(std::io::Error::other)?;
                let bytes = data.view().data();
                std::io::copy(&mut std::io::repeat(0).take(off - at), w)?;
                w.write_all(bytes)?;
                at = off + bytes.len() as u64;
            }
            Ok(())
        })?;
        data_temps.push((temp, data_path.clone()));
        m
    } else if !layout.is_empty() {
        // The initializers with external data get their entries back as they came; the
        // others go inline in the form they came in.
        let mut forms = g
            .initializers
            .iter()
            .filter(|i| i.param.is_some())
            .map(|i| (i.typed, &i.external));
        let mut put = |t: &mut pb::TensorProto, data: &[u8]| -> Result<()> {
            let (typed, external) = forms
                .next()
                .ok_or_else(|| gerr("more parameters than initializers"))?;
            if !external.is_empty() {
                t.external_data = external
                    .iter()
                    .map(|(k, v)| pb::StringStringEntryProto {
                        key: Some(k.clone()),
                        value: Some(v.clone()),
                    })
                    .collect();
                t.data_location = Some(DATA_LOCATION_EXTERNAL);
                t.raw_data = None;
            } else if typed {
                let d = dtype_from_onnx(t.data_type.unwrap_or(0))
                    .ok_or_else(|| gerr("a parameter's initializer has no modelzip dtype"))?;
                bytes_to_typed(t, d, data)?;
            } else {
                t.raw_data = Some(Bytes::copy_from_slice(data));
            }
            Ok(())
        };
        let m = join_model(&g, |p| params.data(p), Some(&mut put)).map_err(in_fb)?;
        for (path, slots, _) in &layout {
            let temp = write_temp(path, opts.fsync, |w| {
                let mut at = 0u64;
                for s in slots {
                    if s.offset < at {
                        continue; // the same bytes as the slot before (checked)
                    }
                    let data = params.data(&s.param).map_err(std::io::Error::other)?;
                    std::io::copy(&mut std::io::repeat(0).take(s.offset - at), w)?;
                    w.write_all(data.view().data())?;
                    at = s.offset + s.len;
                }
                Ok(())
            })?;
            data_temps.push((temp, path.clone()));
        }
        m
    } else {
        join_model(&g, |p| params.data(p), None).map_err(in_fb)?
    };
    let bytes = model.encode_to_vec();
    if bytes.len() as u64 > MAX_MODEL_BYTES {
        return Err(invalid(format!(
            "the model is {} bytes, past protobuf's 2 GiB; export it with external data",
            bytes.len()
        )));
    }
    let temp = write_temp(out, opts.fsync, |w| w.write_all(&bytes))?;
    for (d, path) in &data_temps {
        files.push((path.clone(), super::file_len(d.path(), path)?));
    }
    files.insert(0, (out.to_path_buf(), super::file_len(temp.path(), out)?));
    // The data files first, the model last; a failure leaves every file as it was.
    let mut temps = data_temps;
    temps.push((temp, out.to_path_buf()));
    super::persist_all(temps, &[], opts.overwrite)?;
    if opts.fsync {
        let mut dirs: Vec<PathBuf> = vec![dir.clone()];
        for (path, _, _) in &layout {
            let d = crate::archive::parent_dir(path);
            if !dirs.contains(&d) {
                dirs.push(d);
            }
        }
        for d in dirs {
            std::fs::File::open(&d)
                .and_then(|f| f.sync_all())
                .map_err(|e| Error::from(e).in_file(&d))?;
        }
    }
    let (params, unused) = used_params(tag, &g);
    let notes = if opts.external_data {
        vec!["initializers in external data".to_string()]
    } else if !layout.is_empty() {
        let names: Vec<String> = layout
            .iter()
            .filter_map(|(p, _, _)| p.file_name())
            .map(|n| n.to_string_lossy().into_owned())
            .collect();
        vec![format!(
            "initializers imported from external data written back to {}",
            names.join(", ")
        )]
    } else {
        Vec::new()
    };
    Ok(Exported {
        tag: tag.name().to_string(),
        format: "onnx",
        files,
        params,
        unused,
        notes,
        graph_converted: false,
    })
}
}

/// ONNX in the [`super::FORMATS`] registry: `.onnx` ModelProto files.
pub(crate) struct OnnxFormat;

impl Format for OnnxFormat {
    fn name(&self) -> &'static str {
        "onnx"
    }

    fn import(
        &self,
        archive: &Path,
        tag: &str,
        inputs: &[PathBuf],
        opts: &ImportOptions,
    ) -> Result<ImportReport> {
        let p = super::single_input(inputs, "an ONNX", "one .onnx file")?;
        import_model_file(archive, tag, p, opts)
    }

    fn export(&self, tag: &Tag<'_>, out: &Path, opts: &ExportOptions) -> Result<Exported> {
        super::refuse_shard_size(opts, self.name())?;
        export_model_file(tag, out, opts)
    }
}

impl super::Recognise for OnnxFormat {
    fn recognised_from(&self) -> &'static str {
        "an ONNX ModelProto, .onnx"
    }

    fn matches_name(&self, inputs: &[PathBuf]) -> bool {
        matches!(inputs, [p] if has_ext(p, "onnx"))
    }

    fn matches_content(&self, inputs: &[PathBuf]) -> bool {
        let [p] = inputs else {
            return false;
        };
        // A ModelProto starts with ir_version (field 1, varint) as every producer
        // writes it.
        head(p, 1).first() == Some(&0x08)
            && read_whole(p)
                .ok()
                .and_then(|b| decode_model_shared(b).ok())
                .is_some_and(|m| m.ir_version.is_some() && m.graph.is_some())
    }

    fn is_origin_of(&self, tag: &Tag<'_>) -> Result<bool> {
        Ok(match tag.graph()? {
            Some((GraphFormat::FlatBuffers, bytes)) => crate::graph::flatbuffers::is_onnx(&bytes),
            _ => false,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tensor(dt: pb::tensor_proto::DataType, dims: &[i64]) -> pb::TensorProto {
        pb::TensorProto {
            name: Some("w".into()),
            data_type: Some(dt as i32),
            dims: dims.to_vec(),
            ..Default::default()
        }
    }

    fn round_trip(t: &pb::TensorProto) -> Option<Vec<u8>> {
        let mut work = t.clone();
        let (d, _, data, typed) = lift(&mut work).unwrap()?;
        if typed {
            bytes_to_typed(&mut work, d, &data).unwrap();
        } else {
            work.raw_data = Some(data.clone());
        }
        assert_eq!(work.encode_to_vec(), t.encode_to_vec());
        Some(data.to_vec())
    }

    #[test]
    fn every_form_comes_back_as_written() {
        use pb::tensor_proto::DataType as D;
        let mut raw = tensor(D::Float, &[2]);
        raw.raw_data = Some([1.0f32, 2.0].iter().flat_map(|x| x.to_le_bytes()).collect());
        assert_eq!(round_trip(&raw).unwrap().len(), 8);
        let mut i8s = tensor(D::Int8, &[3]);
        i8s.int32_data = vec![-1, 0, 127];
        assert_eq!(round_trip(&i8s).unwrap(), vec![0xff, 0, 127]);
        let mut half = tensor(D::Float16, &[2]);
        half.int32_data = vec![0x3c00, 0xffff];
        assert_eq!(round_trip(&half).unwrap(), vec![0x00, 0x3c, 0xff, 0xff]);
        let mut u32s = tensor(D::Uint32, &[1]);
        u32s.uint64_data = vec![u64::from(u32::MAX)];
        assert_eq!(round_trip(&u32s).unwrap(), vec![0xff; 4]);
        let mut c = tensor(D::Complex128, &[1]);
        c.double_data = vec![1.0, -2.0];
        assert_eq!(round_trip(&c).unwrap().len(), 16);
        let mut b = tensor(D::Bool, &[]);
        b.int32_data = vec![1];
        assert_eq!(round_trip(&b).unwrap(), vec![1]);
        let empty = tensor(D::Float, &[0, 3]);
        assert_eq!(round_trip(&empty).unwrap(), Vec::<u8>::new());
    }

    #[test]
    fn irregular_values_stay_in_the_model() {
        use pb::tensor_proto::DataType as D;
        let mut s = tensor(D::String, &[1]);
        s.string_data = vec![b"x".to_vec()];
        assert!(round_trip(&s).is_none());
        let mut out_of_range = tensor(D::Uint8, &[1]);
        out_of_range.int32_data = vec![300];
        assert!(round_trip(&out_of_range).is_none());
        let mut both = tensor(D::Float, &[1]);
        both.float_data = vec![1.0];
        both.raw_data = Some(vec![0; 4].into());
        assert!(round_trip(&both).is_none());
        let mut wrong_field = tensor(D::Int64, &[1]);
        wrong_field.int32_data = vec![1];
        assert!(round_trip(&wrong_field).is_none());
        let mut int4 = tensor(D::Int4, &[2]);
        int4.int32_data = vec![0x12];
        assert!(round_trip(&int4).is_none());
    }

    #[test]
    fn malformed_initializers_are_errors() {
        use pb::tensor_proto::DataType as D;
        let mut short = tensor(D::Float, &[3]);
        short.raw_data = Some(vec![0; 8].into());
        let e = lift(&mut short).unwrap_err();
        assert!(e.to_string().contains("raw_data holds 8 bytes"), "{e}");
        let mut neg = tensor(D::Float, &[-1]);
        neg.float_data = vec![1.0];
        assert!(lift(&mut neg).is_err());
        let mut huge = tensor(D::Float, &[i64::MAX, i64::MAX]);
        huge.raw_data = Some(vec![0; 4].into());
        assert!(lift(&mut huge).is_err());
        let mut count = tensor(D::Double, &[2]);
        count.double_data = vec![1.0];
        let e = lift(&mut count).unwrap_err();
        assert!(e.to_string().contains("holds 1 typed values"), "{e}");
    }
}
