//! TensorFlow SavedModel directories in and out of archives.
//!
//! A SavedModel is `saved_model.pb` (the MetaGraphs), `fingerprint.pb`, `variables/`
//! (a TensorBundle checkpoint: `variables.index`, a table of one `BundleEntryProto` per
//! variable, and the data shards `variables.data-NNNNN-of-NNNNN`) and optional `assets/`.
//! Importing one (the `tf` format's [`crate::interop::Format::import`] of a directory) stores it as a tag: every numeric variable of the bundle
//! becomes a parameter named by its checkpoint key (`w1/.ATTRIBUTES/VARIABLE_VALUE`),
//! its dtype and dims from its entry, its size, offset and CRC-32C checked. The rest is
//! kept verbatim as the tag's own entries under `saved_model/` (docs/FORMAT.md):
//! `saved_model.pb`, `fingerprint.pb`, `variables.index` (the imported index, for the
//! keys, dtypes, shapes and header), `object_graph.bin` (the data of the
//! `_CHECKPOINTABLE_OBJECT_GRAPH` string entry, as stored) and `assets/...`.
//! Exporting such a tag ([`crate::interop::Format::export`]) writes the directory back: those files verbatim and a
//! single-shard bundle written from the tag's parameters with fresh offsets and
//! checksums. docs/TENSORFLOW.md has what is refused.

mod table;

use crate::archive::Tag;
use crate::error::{Error, ErrorKind, Result};
use crate::interop::{ExportOptions, Exported, ImportOptions, ImportReport, report, write_tag};
use crate::progress::Ticker;
use crate::tensor::{DType, TensorView};
use crate::tf_proto as pb;
use bytes::Bytes;
use prost::Message;
use std::collections::BTreeMap;
use std::fs::File;
use std::io::Write;
use std::path::{Path, PathBuf};

internal! {
    /// Largest `variables.index` accepted.
    pub const MAX_INDEX_BYTES: u64 = 256 << 20;
}

internal! {
    /// Largest file kept verbatim (`saved_model.pb`, an asset): protobuf's limit.
    pub const MAX_KEPT_BYTES: u64 = 1 << 31;
}

internal! {
    /// Most files under `assets/` and `assets.extra/`.
    pub const MAX_ASSETS: usize = 10_000;
}

/// Largest BundleEntryProto accepted: a non-sliced entry is a dtype, a shape of at
/// most 254 dims and four numbers.
const MAX_ENTRY_BYTES: usize = 8 << 10;

internal! {
    /// The checkpoint key of the object graph (a DT_STRING scalar, kept as stored).
    pub const OBJECT_GRAPH_KEY: &str = "_CHECKPOINTABLE_OBJECT_GRAPH";
}

internal! {
    /// Where a SavedModel's kept files go in the tag.
    pub const ENTRY_DIR: &str = "saved_model";
}
const SAVED_MODEL_PB: &str = "saved_model/saved_model.pb";
const FINGERPRINT_PB: &str = "saved_model/fingerprint.pb";
const INDEX: &str = "saved_model/variables.index";
const OBJECT_GRAPH: &str = "saved_model/object_graph.bin";

const DT_STRING: i32 = 7;

internal! {
/// tensorflow/core/protobuf/tensor_bundle.proto, BundleHeaderProto.
#[derive(Clone, PartialEq, Message)]
pub struct BundleHeader {
    /// Number of data shards.
    #[prost(int32, tag = "1")]
    pub num_shards: i32,
    /// 0: little-endian, 1: big-endian.
    #[prost(int32, tag = "2")]
    pub endianness: i32,
    /// Versioning of the bundle format.
    #[prost(message, optional, tag = "3")]
    pub version: Option<pb::VersionDef>,
}
}

internal! {
/// tensorflow/core/protobuf/tensor_bundle.proto, BundleEntryProto (the slices, which are
/// refused, undecoded).
#[derive(Clone, PartialEq, Message)]
pub struct BundleEntry {
    /// TensorFlow DataType.
    #[prost(int32, tag = "1")]
    pub dtype: i32,
    /// The tensor's shape.
    #[prost(message, optional, tag = "2")]
    pub shape: Option<pb::TensorShapeProto>,
    /// The data shard holding the bytes.
    #[prost(int32, tag = "3")]
    pub shard_id: i32,
    /// Offset of the bytes in the shard.
    #[prost(int64, tag = "4")]
    pub offset: i64,
    /// Size of the bytes.
    #[prost(int64, tag = "5")]
    pub size: i64,
    /// Masked CRC-32C of the bytes.
    #[prost(fixed32, tag = "6")]
    pub crc32c: u32,
    /// Slices of a partitioned variable (TensorSliceProto, left encoded).
    #[prost(bytes = "vec", repeated, tag = "7")]
    pub slices: Vec<Vec<u8>>,
}
}

fn invalid(msg: impl Into<String>) -> Error {
    ErrorKind::InvalidInput(msg.into()).into()
}

fn dtype_from_tf(dt: i32) -> Option<DType> {
    super::dtype_from_tf(dt)
}

internal! {
/// Whether `dir` is a SavedModel directory (holds `saved_model.pb`).
pub fn is_saved_model_dir(dir: &Path) -> bool {
    dir.is_dir() && dir.join("saved_model.pb").is_file()
}
}

/// Whether tag `tag` was imported from a SavedModel (holds `saved_model/saved_model.pb`).
pub fn is_saved_model_tag(tag: &Tag<'_>) -> bool {
    tag.archive()
        .has_entry(&format!("{}/{SAVED_MODEL_PB}", tag.name()))
}

/// The refusal of a tag made by `cast` or `quantize` from a SavedModel tag (its
/// metadata.json names the source): the SavedModel's graph restores only the dtypes it
/// was saved with, and the variant keeps none of its files. `None` for any other tag.
pub(crate) fn refuse_variant(tag: &Tag<'_>) -> Result<Option<Error>> {
    let Some(meta) = tag.metadata()? else {
        return Ok(None);
    };
    let Ok(serde_json::Value::Object(m)) = serde_json::from_slice(&meta) else {
        return Ok(None);
    };
    for (key, what) in [("cast", "a cast"), ("quantization", "a quantized copy")] {
        let Some(source) = m
            .get(key)
            .and_then(|v| v.get("source_tag"))
            .and_then(|v| v.as_str())
        else {
            continue;
        };
        let Ok(src) = tag.archive().tag(source) else {
            continue;
        };
        if is_saved_model_tag(&src) {
            return Ok(Some(invalid(format!(
                "tag {:?} is {what} of SavedModel tag {source:?}; a SavedModel restores its variables only in the dtypes it was saved with, so it cannot be exported as one: export tag {source:?}, or the parameters of {:?} as \"safetensors\" (--format safetensors)",
                tag.name(),
                tag.name()
            ))));
        }
    }
    Ok(None)
}

internal! {
/// A parsed checkpoint index: the header and the entries by key, in key order.
pub struct Bundle {
    /// The header (key "").
    pub header: BundleHeader,
    /// Every other entry, in key order.
    pub entries: Vec<(String, BundleEntry)>,
}
}

internal! {
/// Parses a `variables.index`: the table, the header under key "", an entry for every
/// other key. Refuses a big-endian bundle, a header without shards, and entries that do
/// not decode or are too large to be unsliced.
pub fn parse_index(bytes: &[u8]) -> Result<Bundle> {
    if bytes.len() as u64 > MAX_INDEX_BYTES {
        return Err(ErrorKind::LimitExceeded {
            what: "checkpoint index size",
            size: bytes.len() as u64,
            limit: MAX_INDEX_BYTES,
        }
        .into());
    }
    let rows = table::read(bytes)?;
    let mut header = None;
    let mut entries = Vec::with_capacity(rows.len());
    for (key, value) in rows {
        if key.first() == Some(&0) {
            return Err(sliced_key(&key));
        }
        let name = String::from_utf8(key)
            .map_err(|e| invalid(format!("checkpoint key {:?} is not UTF-8", e.as_bytes())))?;
        if value.len() > MAX_ENTRY_BYTES {
            return Err(invalid(format!(
                "checkpoint entry {name:?} is {} bytes, more than the {MAX_ENTRY_BYTES} an unsliced entry or the header takes; sliced (partitioned) variables are not supported",
                value.len()
            )));
        }
        if name.is_empty() {
            let h = BundleHeader::decode(value.as_slice())
                .map_err(|e| invalid(format!("checkpoint header (key \"\"): {e}")))?;
            header = Some(h);
            continue;
        }
        let e = BundleEntry::decode(value.as_slice())
            .map_err(|e| invalid(format!("checkpoint entry {name:?}: {e}")))?;
        entries.push((name, e));
    }
    let header = header.ok_or_else(|| invalid("the checkpoint index has no header (key \"\")"))?;
    if header.endianness != 0 {
        return Err(invalid(
            "the checkpoint is big-endian; only little-endian bundles are read",
        ));
    }
    if header.num_shards < 1 && !entries.is_empty() {
        return Err(invalid(format!(
            "the checkpoint header says {} data shards",
            header.num_shards
        )));
    }
    Ok(Bundle { header, entries })
}
}

/// The refusal of a key that starts with a zero byte: TensorFlow's key of one slice of
/// a sliced (partitioned) variable (`EncodeTensorNameSlice`: OrderedCode of 0, the
/// variable's name, then the slice's extents), which a SavedModel saved with a
/// sharding callback such as `MaxShardSizePolicy` writes for a variable larger than a
/// shard. Names the variable (its name is the OrderedCode string after the leading
/// 0: `00 FF` stands for 00, `FF 00` for FF, ended by `00 01`).
fn sliced_key(key: &[u8]) -> Error {
    let mut name = Vec::new();
    let mut i = 1;
    while i < key.len() {
        match (key[i], key.get(i + 1)) {
            (0, Some(0xFF)) => name.push(0),
            (0xFF, Some(0)) => name.push(0xFF),
            (0, _) => break,
            (b, _) => {
                name.push(b);
                i += 1;
                continue;
            }
        }
        i += 2;
    }
    invalid(format!(
        "a checkpoint key names a slice of variable {:?}: a sliced (partitioned) variable, \
         as a sharding callback such as tf.train.experimental.MaxShardSizePolicy writes for \
         a variable larger than a shard; only whole variables are imported (save without \
         the sharding callback)",
        String::from_utf8_lossy(&name)
    ))
}

internal! {
/// Writes a checkpoint index: the header under key "", then the entries (whose keys
/// must be in strictly increasing byte order).
pub fn write_index(bundle: &Bundle) -> Vec<u8> {
    let mut rows: Vec<(Vec<u8>, Vec<u8>)> = vec![(Vec::new(), bundle.header.encode_to_vec())];
    for (k, e) in &bundle.entries {
        rows.push((k.as_bytes().to_vec(), e.encode_to_vec()));
    }
    let refs: Vec<(&[u8], &[u8])> = rows.iter().map(|(k, v)| (k.as_slice(), v.as_slice())).collect();
    table::write(&refs)
}
}

/// The dims of an entry's shape (refusing unknown rank and negative sizes).
fn entry_dims(key: &str, e: &BundleEntry) -> Result<Vec<u64>> {
    let Some(shape) = &e.shape else {
        return Ok(Vec::new());
    };
    if shape.unknown_rank {
        return Err(invalid(format!(
            "checkpoint entry {key:?} has an unknown rank"
        )));
    }
    shape
        .dim
        .iter()
        .map(|d| {
            u64::try_from(d.size)
                .map_err(|_| invalid(format!("checkpoint entry {key:?} has dimension {}", d.size)))
        })
        .collect()
}

/// What an entry is: a numeric tensor (dtype and dims, its byte size checked against
/// the entry's), or the object graph kept as stored. Everything else is refused.
enum Kind {
    Numeric(DType, Vec<u64>),
    ObjectGraph,
}

fn classify(key: &str, e: &BundleEntry) -> Result<Kind> {
    if !e.slices.is_empty() {
        return Err(invalid(format!(
            "checkpoint entry {key:?} is sliced ({} slices: a partitioned variable); only whole variables are imported",
            e.slices.len()
        )));
    }
    if key == OBJECT_GRAPH_KEY {
        if e.dtype != DT_STRING {
            return Err(invalid(format!(
                "checkpoint entry {key:?} has TensorFlow dtype {}, not DT_STRING",
                e.dtype
            )));
        }
        // Dims whose product passes 2^64 are no single string either (checked: a wrapped
        // product could be 1).
        let one = entry_dims(key, e)?
            .iter()
            .try_fold(1u64, |n, &d| n.checked_mul(d))
            == Some(1);
        if !one {
            return Err(invalid(format!(
                "checkpoint entry {key:?} is not a single string"
            )));
        }
        return Ok(Kind::ObjectGraph);
    }
    let Some(dtype) = dtype_from_tf(e.dtype) else {
        let what = match e.dtype {
            7 => "a string tensor",
            20 => "a resource",
            21 => "a variant",
            _ => "of a dtype modelzip does not store",
        };
        return Err(invalid(format!(
            "checkpoint entry {key:?} is {what} (TensorFlow dtype {}); only numeric variables and {OBJECT_GRAPH_KEY} are imported",
            e.dtype
        )));
    };
    let dims = entry_dims(key, e)?;
    let numel = crate::tensor::element_count(&dims)
        .map_err(|err| invalid(format!("checkpoint entry {key:?}: {err}")))?;
    let want = numel.checked_mul(dtype.size() as u64);
    if want != Some(e.size as u64) || e.size < 0 {
        return Err(invalid(format!(
            "checkpoint entry {key:?} says {} bytes, but {dtype} {dims:?} takes {}",
            e.size,
            want.map_or("more than 2^64".to_string(), |w| w.to_string())
        )));
    }
    Ok(Kind::Numeric(dtype, dims))
}

/// The CRC-32C TensorFlow computes for a string tensor of one element as stored
/// (tensor_bundle.cc, WriteStringTensor): over the length as a little-endian u32 (a
/// u64 past 4 GiB; it is written as a varint), the masked checksum of that, which
/// follows the varint, and the string's bytes (checked against what tensorflow 2.21
/// writes). Refuses data of another layout.
fn string_crc(key: &str, data: &[u8]) -> Result<u32> {
    let bad = |why: &str| invalid(format!("checkpoint entry {key:?}: {why}"));
    let mut pos = 0;
    let mut len = 0u64;
    let mut done = false;
    for i in 0..10 {
        let Some(&b) = data.get(pos) else { break };
        pos += 1;
        len |= u64::from(b & 0x7f) << (7 * i);
        if b & 0x80 == 0 {
            done = true;
            break;
        }
    }
    if !done {
        return Err(bad("the string's length is not a varint"));
    }
    let crc = match u32::try_from(len) {
        Ok(l) => crc32c::crc32c(&l.to_le_bytes()),
        Err(_) => crc32c::crc32c(&len.to_le_bytes()),
    };
    let Some(stored) = data.get(pos..pos + 4) else {
        return Err(bad("the string's length checksum is missing"));
    };
    if u32::from_le_bytes(stored.try_into().unwrap_or([0; 4])) != table::mask(crc) {
        return Err(Error::new(ErrorKind::Checksum(format!(
            "checkpoint entry {key:?}: the string length's checksum does not match"
        ))));
    }
    let rest = (data.len() - pos - 4) as u64;
    if rest != len {
        return Err(bad(&format!(
            "the string is {len} bytes long, but {rest} bytes follow its length"
        )));
    }
    Ok(crc32c::crc32c_append(
        crc32c::crc32c_append(crc, stored),
        &data[pos + 4..],
    ))
}

/// The data shards of a bundle with `n` shards, opened on first use.
struct Shards {
    dir: PathBuf,
    n: i32,
    /// Each shard read so far, mapped (`map_input`): a tensor is a slice of its map,
    /// so an import's memory does not grow with the variables (docs/RELIABILITY.md).
    open: BTreeMap<i32, (Bytes, PathBuf)>,
    /// The ranges read so far, by (shard, start): their end and entry.
    read: BTreeMap<(i32, u64), (u64, String)>,
}

impl Shards {
    /// The bytes of entry `e`, checked: inside its shard, and matching its CRC-32C.
    fn read(&mut self, key: &str, e: &BundleEntry, string: bool) -> Result<Bytes> {
        if e.shard_id < 0 || e.shard_id >= self.n {
            return Err(invalid(format!(
                "checkpoint entry {key:?} is in shard {}, but the bundle has {}",
                e.shard_id, self.n
            )));
        }
        if !self.open.contains_key(&e.shard_id) {
            let p = self
                .dir
                .join(format!("variables.data-{:05}-of-{:05}", e.shard_id, self.n));
            let map = crate::interop::map_input(&p)?;
            self.open.insert(e.shard_id, (map, p));
        }
        let Some((map, p)) = self.open.get(&e.shard_id) else {
            return Err(invalid("shard table out of step"));
        };
        let len = map.len() as u64;
        let (off, size) = (e.offset, e.size);
        let range = u64::try_from(off)
            .ok()
            .zip(u64::try_from(size).ok())
            .and_then(|(o, s)| Some((o, o.checked_add(s)?)))
            .filter(|&(_, end)| end <= len);
        let Some((start, end)) = range else {
            return Err(Error::new(ErrorKind::InvalidInput(format!(
                "checkpoint entry {key:?}: {size} bytes at offset {off} run past the shard's {len} bytes"
            )))
            .in_file(p));
        };
        // TensorFlow writes each variable's bytes once, one after another. Entries
        // naming one range would each be checksummed and hashed again: a small index
        // over one large range would cost its size times their number.
        if end > start {
            let shard = e.shard_id;
            let before = self.read.range(..=(shard, start)).next_back();
            let after = self.read.range((shard, start)..).next();
            let overlap = before
                .filter(|((s, _), (b_end, _))| *s == shard && *b_end > start)
                .or(after.filter(|((s, a_start), _)| *s == shard && *a_start < end));
            if let Some((&(_, o_start), (o_end, other))) = overlap {
                return Err(Error::new(ErrorKind::InvalidInput(format!(
                    "checkpoint entry {key:?} reads bytes {start}..{end}, which overlap the \
                     bytes {o_start}..{o_end} of entry {other:?}; TensorFlow writes each \
                     variable's bytes once, and entries reading the same bytes more than \
                     once are refused"
                )))
                .in_file(p)
                .at_offset(start));
            }
            self.read.insert((shard, start), (end, key.to_string()));
        }
        // In range of a map of `len` bytes, so both fit a usize.
        let data = map.slice(start as usize..end as usize);
        let crc = table::mask(if string {
            string_crc(key, &data).map_err(|err| err.in_file(p).at_offset(off as u64))?
        } else {
            crc32c::crc32c(&data)
        });
        if crc != e.crc32c {
            return Err(Error::new(ErrorKind::Checksum(format!(
                "checkpoint entry {key:?}: stored masked CRC-32C {:#010x}, its {size} bytes at offset {off} have {crc:#010x}",
                e.crc32c
            )))
            .in_file(p)
            .at_offset(off as u64));
        }
        Ok(data)
    }
}

/// A file kept verbatim, refused past [`MAX_KEPT_BYTES`].
fn read_kept(p: &Path) -> Result<Vec<u8>> {
    let len = std::fs::metadata(p)
        .map_err(|e| Error::from(e).in_file(p))?
        .len();
    if len > MAX_KEPT_BYTES {
        return Err(Error::new(ErrorKind::LimitExceeded {
            what: "SavedModel file size",
            size: len,
            limit: MAX_KEPT_BYTES,
        })
        .in_file(p));
    }
    super::super::read_file(p)
}

/// The files under `dir/sub` (recursively), as paths relative to `dir` with `/`.
fn list_assets(dir: &Path, sub: &str, out: &mut Vec<String>) -> Result<()> {
    let root = dir.join(sub);
    if !root.exists() {
        return Ok(());
    }
    let mut stack = vec![(root, sub.to_string())];
    while let Some((d, rel)) = stack.pop() {
        let rd = std::fs::read_dir(&d).map_err(|e| Error::from(e).in_file(&d))?;
        let mut names = Vec::new();
        for ent in rd {
            let ent = ent.map_err(|e| Error::from(e).in_file(&d))?;
            names.push(ent);
        }
        names.sort_by_key(|e| e.file_name());
        for ent in names {
            let p = ent.path();
            let name = ent
                .file_name()
                .into_string()
                .map_err(|n| invalid(format!("asset name {n:?} is not UTF-8")).in_file(&p))?;
            let ft = ent.file_type().map_err(|e| Error::from(e).in_file(&p))?;
            let r = format!("{rel}/{name}");
            if ft.is_dir() {
                stack.push((p, r));
            } else if ft.is_file() {
                out.push(r);
                if out.len() > MAX_ASSETS {
                    return Err(Error::new(ErrorKind::LimitExceeded {
                        what: "SavedModel asset files",
                        size: out.len() as u64,
                        limit: MAX_ASSETS as u64,
                    })
                    .in_file(dir));
                }
            } else {
                return Err(invalid(
                    "is neither a file nor a directory (a symlink?); SavedModel assets must be plain files",
                )
                .in_file(&p));
            }
        }
    }
    Ok(())
}

/// The files of a SavedModel directory that are not kept or read are refused, so
/// nothing is lost without a word.
fn check_layout(dir: &Path) -> Result<()> {
    let known = |n: &str| {
        matches!(
            n,
            "saved_model.pb" | "fingerprint.pb" | "variables" | "assets" | "assets.extra"
        )
    };
    let rd = std::fs::read_dir(dir).map_err(|e| Error::from(e).in_file(dir))?;
    for ent in rd {
        let ent = ent.map_err(|e| Error::from(e).in_file(dir))?;
        let name = ent.file_name().to_string_lossy().into_owned();
        if !known(&name) {
            return Err(invalid(format!(
                "{name:?} is not part of a SavedModel (saved_model.pb, fingerprint.pb, variables/, assets/, assets.extra/); refusing to leave it out"
            ))
            .in_file(dir));
        }
    }
    let vars = dir.join("variables");
    if vars.is_dir() {
        let rd = std::fs::read_dir(&vars).map_err(|e| Error::from(e).in_file(&vars))?;
        for ent in rd {
            let ent = ent.map_err(|e| Error::from(e).in_file(&vars))?;
            let name = ent.file_name().to_string_lossy().into_owned();
            let shard = name
                .strip_prefix("variables.data-")
                .is_some_and(|r| r.len() == 14 && r.as_bytes()[5..9] == *b"-of-");
            if name != "variables.index" && !shard {
                return Err(invalid(format!(
                    "{name:?} is neither the checkpoint's index nor one of its data shards; refusing to leave it out"
                ))
                .in_file(&vars));
            }
        }
    }
    Ok(())
}

internal! {
/// Imports the SavedModel directory `dir` as tag `tag` of the archive at `archive`
/// (created if absent): each numeric checkpoint variable as a parameter named by its
/// key, the rest kept under `saved_model/` in the tag. Tensors are read, checked and
/// written one at a time.
pub fn import_saved_model(
    archive: &Path,
    tag: &str,
    dir: &Path,
    opts: &ImportOptions,
) -> Result<ImportReport> {
    if dir.join("saved_model.pbtxt").exists() && !dir.join("saved_model.pb").exists() {
        return Err(invalid(
            "a text SavedModel (saved_model.pbtxt) is not supported; save it in binary form",
        )
        .in_file(dir));
    }
    check_layout(dir)?;
    let saved_model = read_kept(&dir.join("saved_model.pb"))?;
    let fp_path = dir.join("fingerprint.pb");
    let fingerprint = if fp_path.exists() {
        Some(read_kept(&fp_path)?)
    } else {
        None
    };
    let vars = dir.join("variables");
    let index_path = vars.join("variables.index");
    if !saved_model.starts_with(&[0x08, 0x01, 0x12]) {
        return Err(invalid(
            "does not start like a SavedModel (schema version 1, then its MetaGraphs)",
        )
        .in_file(dir.join("saved_model.pb")));
    }
    // tf.saved_model.save always writes the checkpoint, if only for the object graph.
    if !index_path.is_file() {
        return Err(invalid(
            "the SavedModel has no variables/variables.index (its checkpoint); a SavedModel without one (TensorFlow 1's, without variables) is not supported",
        )
        .in_file(dir));
    }
    let index = read_kept(&index_path)?;
    let b = parse_index(&index).map_err(|e| e.in_file(&index_path))?;
    let (index, bundle) = (Some(index), Some(b));
    let mut numeric = Vec::new();
    let mut object_graph = None;
    let mut shards = Shards {
        dir: vars.clone(),
        n: bundle.as_ref().map_or(0, |b| b.header.num_shards),
        open: BTreeMap::new(),
        read: BTreeMap::new(),
    };
    if let Some(b) = &bundle {
        for (key, e) in &b.entries {
            match classify(key, e).map_err(|err| err.in_file(&index_path))? {
                Kind::Numeric(d, dims) => numeric.push((key.clone(), d, dims, e.clone())),
                Kind::ObjectGraph => object_graph = Some(shards.read(key, e, true)?),
            }
        }
    }
    let mut assets = Vec::new();
    list_assets(dir, "assets", &mut assets)?;
    list_assets(dir, "assets.extra", &mut assets)?;
    let mut ticker = Ticker::from_hook(opts.write.progress.as_ref(), numeric.len() as u64);
    let created = write_tag(archive, tag, opts, |w| {
        w.extra_entry(SAVED_MODEL_PB, &saved_model)?;
        if let Some(f) = &fingerprint {
            w.extra_entry(FINGERPRINT_PB, f)?;
        }
        if let Some(i) = &index {
            w.extra_entry(INDEX, i)?;
        }
        if let Some(g) = &object_graph {
            w.extra_entry(OBJECT_GRAPH, g)?;
        }
        for rel in &assets {
            let bytes = read_kept(&dir.join(rel))?;
            w.extra_entry(&format!("{ENTRY_DIR}/{rel}"), &bytes)?;
        }
        // Keys are in byte order already (the table's order), as params.txt wants.
        for (key, d, dims, e) in &numeric {
            let data = shards.read(key, e, false)?;
            let t = TensorView::new(*d, dims.clone(), Vec::new(), &data)
                .map_err(|err| invalid(format!("checkpoint entry {key:?}: {err}")))?;
            w.param(key, &t)?;
            ticker.tick();
        }
        Ok(())
    })?;
    report(archive, tag, created, None)
}
}

/// The bytes of the tag's kept entry `rel` (under `saved_model/`), if present.
fn kept(tag: &Tag<'_>, rel: &str) -> Result<Option<Vec<u8>>> {
    let name = format!("{}/{rel}", tag.name());
    if !tag.archive().has_entry(&name) {
        return Ok(None);
    }
    Ok(Some(tag.archive().entry_bytes(&name)?.into_owned()))
}

internal! {
/// Writes a tag imported from a SavedModel as a SavedModel directory at `out`: the kept
/// files verbatim and a single-shard checkpoint written from the tag's parameters (each
/// checked against the dtype and shape the imported index declares; a tag changed by
/// `cast` or `quantize` is refused). Written in a temp directory beside `out` and
/// renamed into place: nothing partial is left on failure.
pub fn export_saved_model(tag: &Tag<'_>, out: &Path, opts: &ExportOptions) -> Result<Exported> {
    let name = tag.name().to_string();
    if !is_saved_model_tag(tag) {
        return Err(invalid(format!(
            "tag {name:?} was not imported from a SavedModel (it has no {SAVED_MODEL_PB})"
        )));
    }
    let in_entry = |rel: &str| format!("{name}/{rel}");
    let saved_model = kept(tag, SAVED_MODEL_PB)?.unwrap_or_default();
    let fingerprint = kept(tag, FINGERPRINT_PB)?;
    let index = kept(tag, INDEX)?;
    let object_graph = kept(tag, OBJECT_GRAPH)?;
    let bundle = match &index {
        Some(b) => Some(parse_index(b).map_err(|e| e.in_entry(in_entry(INDEX)))?),
        None => None,
    };
    // Every parameter the index declares, checked before anything is written.
    let mut used = Vec::new();
    let mut total = (saved_model.len()
        + fingerprint.as_ref().map_or(0, Vec::len)
        + object_graph.as_ref().map_or(0, Vec::len)) as u64;
    if let Some(b) = &bundle {
        for (key, e) in &b.entries {
            match classify(key, e).map_err(|err| err.in_entry(in_entry(INDEX)))? {
                Kind::ObjectGraph => {
                    if object_graph.is_none() {
                        return Err(Error::new(ErrorKind::MissingEntry(in_entry(OBJECT_GRAPH))));
                    }
                }
                Kind::Numeric(d, dims) => {
                    let data = tag.param(key).map_err(|err| {
                        invalid(format!(
                            "the SavedModel's checkpoint has variable {key:?}, which tag {name:?} cannot give: {err}"
                        ))
                    })?;
                    let v = data.view();
                    if v.dtype() != d || v.dims() != dims.as_slice() || !v.lod().is_empty() {
                        return Err(invalid(format!(
                            "parameter {key:?} of tag {name:?} is {} {:?}, but the SavedModel declares {d} {dims:?} (was the tag made by cast or quantize? export the tag it came from, or export its parameters as safetensors)",
                            v.dtype(),
                            v.dims()
                        )));
                    }
                    total = total.saturating_add(v.data().len() as u64);
                    used.push(key.clone());
                }
            }
        }
    }
    super::super::check_output_size(tag, opts, "SavedModel export size", total)?;
    let assets: Vec<String> = tag
        .own_entries()
        .into_iter()
        .filter_map(|e| {
            e.strip_prefix(&format!("{name}/{ENTRY_DIR}/"))
                .map(str::to_string)
        })
        .filter(|r| r.starts_with("assets/") || r.starts_with("assets.extra/"))
        .collect();

    let parent = crate::archive::parent_dir(out);
    if !parent.is_dir() {
        return Err(invalid("the output directory's parent does not exist").in_file(&parent));
    }
    if out.exists() && !opts.overwrite {
        return Err(Error::from(std::io::Error::new(
            std::io::ErrorKind::AlreadyExists,
            "already exists; refusing to overwrite it",
        ))
        .in_file(out));
    }
    if out.exists() && !out.is_dir() {
        return Err(invalid("is a file; a SavedModel export writes a directory here").in_file(out));
    }
    // Replacing a directory that holds the archive being read would delete it.
    if let (Some(archive), Ok(dir)) = (tag.archive().path(), out.canonicalize())
        && archive.canonicalize().is_ok_and(|a| a.starts_with(&dir))
    {
        return Err(invalid(
            "holds the archive the tag is read from; refusing to replace it with the export",
        )
        .in_file(out));
    }
    let temp = tempfile::Builder::new()
        .prefix(".modelzip-saved-model-")
        .tempdir_in(&parent)
        .map_err(|e| Error::from(e).in_file(&parent))?;
    let root = temp.path();
    let mut files = Vec::new();
    let fsync = opts.fsync;
    let put = |files: &mut Vec<(PathBuf, u64)>, rel: &str, bytes: &[u8]| -> Result<()> {
        let p = root.join(rel);
        if let Some(d) = p.parent() {
            std::fs::create_dir_all(d).map_err(|e| Error::from(e).in_file(out.join(rel)))?;
        }
        let mut f = File::create(&p).map_err(|e| Error::from(e).in_file(out.join(rel)))?;
        f.write_all(bytes)
            .and_then(|_| if fsync { f.sync_all() } else { Ok(()) })
            .map_err(|e| Error::from(e).in_file(out.join(rel)))?;
        files.push((out.join(rel), bytes.len() as u64));
        Ok(())
    };
    put(&mut files, "saved_model.pb", &saved_model)?;
    if let Some(f) = &fingerprint {
        put(&mut files, "fingerprint.pb", f)?;
    }
    for rel in &assets {
        let bytes = kept(tag, &format!("{ENTRY_DIR}/{rel}"))?.unwrap_or_default();
        put(&mut files, rel, &bytes)?;
    }
    if let Some(b) = &bundle {
        let data_rel = "variables/variables.data-00000-of-00001";
        let data_path = root.join(data_rel);
        std::fs::create_dir_all(root.join("variables"))
            .map_err(|e| Error::from(e).in_file(out.join("variables")))?;
        let f = File::create(&data_path).map_err(|e| Error::from(e).in_file(out.join(data_rel)))?;
        let mut w = std::io::BufWriter::with_capacity(1 << 20, f);
        let mut offset = 0u64;
        let mut rows: Vec<(Vec<u8>, Vec<u8>)> = Vec::with_capacity(b.entries.len() + 1);
        let mut header = b.header.clone();
        header.num_shards = 1;
        rows.push((Vec::new(), header.encode_to_vec()));
        let io = |e: std::io::Error| Error::from(e).in_file(out.join(data_rel));
        for (key, e) in &b.entries {
            let mut entry = e.clone();
            let crc = if key == OBJECT_GRAPH_KEY {
                let g = object_graph.as_deref().unwrap_or_default();
                let crc = string_crc(key, g).map_err(|err| err.in_entry(in_entry(OBJECT_GRAPH)))?;
                w.write_all(g).map_err(io)?;
                entry.size = g.len() as i64;
                crc
            } else {
                let data = tag.param(key)?;
                let bytes = data.view().data();
                w.write_all(bytes).map_err(io)?;
                entry.size = bytes.len() as i64;
                crc32c::crc32c(bytes)
            };
            entry.shard_id = 0;
            entry.offset = offset as i64;
            entry.crc32c = table::mask(crc);
            offset += entry.size as u64;
            rows.push((key.as_bytes().to_vec(), entry.encode_to_vec()));
        }
        let f = w.into_inner().map_err(|e| io(e.into_error()))?;
        if opts.fsync {
            f.sync_all().map_err(io)?;
        }
        files.push((out.join(data_rel), offset));
        let refs: Vec<(&[u8], &[u8])> = rows
            .iter()
            .map(|(k, v)| (k.as_slice(), v.as_slice()))
            .collect();
        put(
            &mut files,
            "variables/variables.index",
            &table::write(&refs),
        )?;
    } else {
        std::fs::create_dir_all(root.join("variables"))
            .map_err(|e| Error::from(e).in_file(out.join("variables")))?;
    }
    if opts.fsync {
        sync_dirs(root)?;
    }
    // Into place. An existing directory (with overwrite): exchanged with the new one in
    // one rename where the system has it (Linux's RENAME_EXCHANGE: `out` is the old
    // directory or the new one at every instant), then removed; elsewhere moved aside
    // first and removed once the new one is in.
    if out.exists() && exchange(temp.path(), out).is_ok() {
        // The old directory is now at the temp path, which `temp` removes on drop.
        drop(temp);
    } else {
        put_in_place(temp, out, &parent)?;
    }
    if opts.fsync {
        File::open(&parent)
            .and_then(|d| d.sync_all())
            .map_err(|e| Error::from(e).in_file(&parent))?;
    }
    let unused = super::super::unused_params(tag, &used);
    Ok(Exported {
        tag: name,
        format: "tf",
        files,
        params: used,
        unused,
        notes: vec!["SavedModel directory, one checkpoint shard".to_string()],
        graph_converted: false,
    })
}
}

/// Swaps directories `a` and `b` in one rename (Linux's `RENAME_EXCHANGE`); an error
/// where the system or file system has no such rename.
fn exchange(a: &Path, b: &Path) -> std::io::Result<()> {
    #[cfg(any(target_os = "linux", target_os = "android"))]
    {
        use rustix::fs::{CWD, RenameFlags, renameat_with};
        renameat_with(CWD, a, CWD, b, RenameFlags::EXCHANGE).map_err(std::io::Error::from)
    }
    #[cfg(not(any(target_os = "linux", target_os = "android")))]
    {
        let _ = (a, b);
        Err(std::io::Error::from(std::io::ErrorKind::Unsupported))
    }
}

/// Renames the new directory `temp` to `out`, an existing `out` moved aside first and
/// removed once the new one is in (put back if the rename fails).
fn put_in_place(temp: tempfile::TempDir, out: &Path, parent: &Path) -> Result<()> {
    let old = if out.exists() {
        let aside = tempfile::Builder::new()
            .prefix(".modelzip-old-")
            .tempdir_in(parent)
            .map_err(|e| Error::from(e).in_file(parent))?;
        let dest = aside.path().join("old");
        std::fs::rename(out, &dest).map_err(|e| Error::from(e).in_file(out))?;
        Some(aside)
    } else {
        None
    };
    let kept_temp = temp.keep();
    if let Err(e) = std::fs::rename(&kept_temp, out) {
        let _ = std::fs::remove_dir_all(&kept_temp);
        if let Some(aside) = &old {
            let _ = std::fs::rename(aside.path().join("old"), out);
        }
        return Err(Error::from(e).in_file(out));
    }
    drop(old);
    Ok(())
}

/// fsyncs every directory under `root` (and it), so the renamed tree is durable.
fn sync_dirs(root: &Path) -> Result<()> {
    let mut stack = vec![root.to_path_buf()];
    while let Some(d) = stack.pop() {
        for ent in std::fs::read_dir(&d).map_err(|e| Error::from(e).in_file(&d))? {
            let ent = ent.map_err(|e| Error::from(e).in_file(&d))?;
            if ent.file_type().is_ok_and(|t| t.is_dir()) {
                stack.push(ent.path());
            }
        }
        File::open(&d)
            .and_then(|f| f.sync_all())
            .map_err(|e| Error::from(e).in_file(&d))?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The object graph's entry must be one string: dims whose product passes 2^64 are
    /// refused as not one, not multiplied past it (a panic with overflow checks on).
    #[test]
    fn an_object_graph_entry_of_dims_past_2_64_is_not_a_single_string() {
        let entry = |dims: &[i64]| BundleEntry {
            dtype: DT_STRING,
            shape: Some(crate::interop::tf::shape_of(dims)),
            shard_id: 0,
            offset: 0,
            size: 0,
            crc32c: 0,
            slices: Vec::new(),
        };
        assert!(matches!(
            classify(OBJECT_GRAPH_KEY, &entry(&[])),
            Ok(Kind::ObjectGraph)
        ));
        for dims in [&[1i64 << 32, 1 << 32][..], &[2], &[0]] {
            let e = classify(OBJECT_GRAPH_KEY, &entry(dims)).err().unwrap();
            assert!(
                e.to_string().contains("not a single string"),
                "{dims:?}: {e}"
            );
        }
    }
}
