//! The save plan: where every tensor of a sharded save goes, computed by every rank from
//! the same description with no communication.
//!
//! The description is the list of global tensors (parameters and updater arrays: name,
//! element type, global shape) and the world size. The plan sorts the tensors
//! (parameters by name, then updater arrays by parameter and slot), numbers their tensor
//! files in that order and lays their entries out back to back in the staged extension:
//! local header (padded so the data is 64-byte aligned), LoDTensor record header, data.
//! A shard along the first dimension (rows `[a, b)`) is then one contiguous byte range of
//! its tensor's entry. The plan's digest (SHA-256 of its canonical description) is what
//! ranks compare to find out that they were given different descriptions.

use super::super::container::write::{EntrySpec, local_header};
use super::super::reader::TensorKind;
use crate::error::{ErrorKind, Result};
use crate::tensor::DType;
use sha2::Digest;
use std::collections::HashMap;

/// One global tensor of a sharded save: a parameter or one updater state array.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TensorSpec {
    /// Parameter name (for an updater array, the parameter it belongs to).
    pub name: String,
    /// `None` for the parameter itself, `Some(slot)` for its updater array `slot`
    /// (slots of one parameter are 0, 1, ... without gaps).
    pub updater_slot: Option<u32>,
    /// Element type.
    pub dtype: DType,
    /// Global shape (every rank's rows together).
    pub dims: Vec<u64>,
}

impl TensorSpec {
    /// Parameter `name` of element type `dtype` and global shape `dims`.
    pub fn param(name: impl Into<String>, dtype: DType, dims: Vec<u64>) -> TensorSpec {
        TensorSpec {
            name: name.into(),
            updater_slot: None,
            dtype,
            dims,
        }
    }

    /// Updater state array `slot` of parameter `name` (Adam's moments: slots 0 and 1).
    pub fn updater(name: impl Into<String>, slot: u32, dtype: DType, dims: Vec<u64>) -> TensorSpec {
        TensorSpec {
            name: name.into(),
            updater_slot: Some(slot),
            dtype,
            dims,
        }
    }

    /// `"w"` or `"w" (updater 1)`, as errors name it.
    pub(crate) fn label(&self) -> String {
        match self.updater_slot {
            None => format!("{:?}", self.name),
            Some(s) => format!("{:?} (updater {s})", self.name),
        }
    }

    /// Rows (the first dimension; a scalar is one row).
    pub(crate) fn rows(&self) -> u64 {
        self.dims.first().copied().unwrap_or(1)
    }
}

/// Where one tensor goes: its entry, relative to the start of the staged extension.
#[derive(Debug, Clone)]
pub(crate) struct Planned {
    pub spec: TensorSpec,
    pub kind: TensorKind,
    /// Tensor file number within its kind (`params/<index>.lodtensor`).
    pub index: u64,
    /// Entry name, `<tag>/params/<index>.lodtensor`.
    pub entry_name: String,
    /// Offset of the local header.
    pub header_offset: u64,
    /// Offset of the record (its LoDTensor header; the entry's data starts here).
    pub record_offset: u64,
    /// The LoDTensor record header (written by the committing rank).
    pub record_header: Vec<u8>,
    /// Bytes of one row.
    pub row_bytes: u64,
    /// Bytes of the record: header and data.
    pub record_len: u64,
}

impl Planned {
    /// Offset, within the record, of row `row`.
    pub fn row_offset(&self, row: u64) -> u64 {
        self.record_header.len() as u64 + row * self.row_bytes
    }

    /// One past the entry's last byte, relative to the extension.
    pub fn end(&self) -> u64 {
        self.record_offset + self.record_len
    }

    /// The entry's local header (its data 64-byte aligned) at file offset `at`, its
    /// data's CRC-32 `crc`, and its directory record.
    pub fn entry_header(
        &self,
        crc: u32,
        at: u64,
        dos: (u16, u16),
    ) -> Result<(Vec<u8>, super::super::container::ZipEntry)> {
        let spec = EntrySpec {
            uncompressed_size: self.record_len,
            align_after: Some(self.record_header.len() as u64),
            ..EntrySpec::stored(&self.entry_name, crc, &[])
        };
        local_header(&spec, at, dos)
    }
}

/// The plan of a sharded save of tag `tag` by `world_size` ranks.
#[derive(Debug, Clone)]
pub(crate) struct Plan {
    pub tag: String,
    pub world_size: u32,
    pub tensors: Vec<Planned>,
    /// Bytes of the staged extension (every entry).
    pub ext_len: u64,
    /// SHA-256 of the canonical description, lowercase hex.
    pub digest: String,
    by_name: HashMap<(String, Option<u32>), usize>,
}

/// The most ranks a sharded save takes: rank 0 keeps a slot for each and looks for each
/// one's marker while it waits (a world size read from a number a caller or a group
/// file gives would otherwise size them unchecked).
pub(crate) const MAX_WORLD_SIZE: u32 = 1 << 17;

/// Largest global tensor a plan accepts (the format's limit is the zip64 size; this
/// only keeps the arithmetic far from overflow).
const MAX_TENSOR_BYTES: u64 = 1 << 50;

impl Plan {
    /// Computes the plan: the same on every rank given the same arguments (the order of
    /// `specs` does not matter).
    pub fn new(tag: &str, world_size: u32, specs: &[TensorSpec]) -> Result<Plan> {
        super::super::tag_name::validate_tag_name(tag)?;
        if world_size == 0 {
            return Err(invalid("a sharded save needs a world size of at least 1"));
        }
        if world_size > MAX_WORLD_SIZE {
            return Err(invalid(&format!(
                "a sharded save of {world_size} ranks is more than modelzip's limit of {MAX_WORLD_SIZE}"
            )));
        }
        let mut sorted: Vec<TensorSpec> = specs.to_vec();
        sorted.sort_by(|a, b| {
            (a.updater_slot.is_some(), &a.name, a.updater_slot).cmp(&(
                b.updater_slot.is_some(),
                &b.name,
                b.updater_slot,
            ))
        });
        let mut by_name = HashMap::with_capacity(sorted.len());
        for (i, s) in sorted.iter().enumerate() {
            if s.name.is_empty() {
                return Err(invalid("a tensor of a sharded save has an empty name"));
            }
            if by_name
                .insert((s.name.clone(), s.updater_slot), i)
                .is_some()
            {
                return Err(invalid(&format!("tensor {} is described twice", s.label())));
            }
        }
        // Updater slots of a parameter are 0..k.
        for s in &sorted {
            if let Some(slot) = s.updater_slot
                && slot > 0
                && !by_name.contains_key(&(s.name.clone(), Some(slot - 1)))
            {
                return Err(invalid(&format!(
                    "updater array {slot} of {:?} is described without array {}",
                    s.name,
                    slot - 1
                )));
            }
        }
        let mut tensors = Vec::with_capacity(sorted.len());
        let mut pos = 0u64;
        let mut next = [0u64; 2];
        for spec in sorted {
            let kind = if spec.updater_slot.is_some() {
                TensorKind::Updater
            } else {
                TensorKind::Params
            };
            let k = usize::from(kind == TensorKind::Updater);
            let index = next[k];
            next[k] += 1;
            let elems = spec
                .dims
                .iter()
                .try_fold(1u64, |a, &d| a.checked_mul(d))
                .filter(|&n| n.checked_mul(spec.dtype.size() as u64).is_some());
            let data_len = elems
                .map(|n| n * spec.dtype.size() as u64)
                .filter(|&b| b <= MAX_TENSOR_BYTES)
                .ok_or_else(|| {
                    invalid(&format!(
                        "tensor {} of shape {:?} is too large",
                        spec.label(),
                        spec.dims
                    ))
                })?;
            let rows = spec.rows();
            let row_bytes = data_len.checked_div(rows).unwrap_or(0);
            let record_header = crate::tensor::codec::header_for(spec.dtype, &spec.dims);
            let record_len = record_header.len() as u64 + data_len;
            let entry_name = format!("{tag}/{}/{index}.lodtensor", kind.dir());
            let entry = EntrySpec {
                uncompressed_size: record_len,
                align_after: Some(record_header.len() as u64),
                ..EntrySpec::stored(&entry_name, 0, &[])
            };
            let (h, _) = local_header(&entry, pos, (0, 0))?;
            let record_offset = pos + h.len() as u64;
            tensors.push(Planned {
                spec,
                kind,
                index,
                entry_name,
                header_offset: pos,
                record_offset,
                record_header,
                row_bytes,
                record_len,
            });
            pos = record_offset + record_len;
        }
        let digest = digest_of(tag, world_size, &tensors);
        Ok(Plan {
            tag: tag.to_string(),
            world_size,
            tensors,
            ext_len: pos,
            digest,
            by_name,
        })
    }

    /// Makes the digest that of this plan saved by group `id` (ranks of another group,
    /// given the same description, then compute another digest).
    pub fn join_group(&mut self, id: &str) {
        let mut h = sha2::Sha256::new();
        h.update(format!(
            "{}\ngroup {}\n",
            self.digest,
            serde_json::to_string(id).unwrap_or_default()
        ));
        self.digest = super::super::hashing::hex_digest(&h.finalize().into());
    }

    /// Position of tensor `name`/`slot` in [`Plan::tensors`].
    pub fn position(&self, name: &str, slot: Option<u32>) -> Option<usize> {
        self.by_name.get(&(name.to_string(), slot)).copied()
    }
}

/// SHA-256 of the plan's canonical description: format line, tag, world size, then one
/// line per tensor in plan order (kind, JSON-quoted name, slot, dtype, dims).
fn digest_of(tag: &str, world_size: u32, tensors: &[Planned]) -> String {
    let mut h = sha2::Sha256::new();
    h.update(format!("modelzip-sharded-plan 1\n{tag}\n{world_size}\n"));
    for t in tensors {
        let name = serde_json::to_string(&t.spec.name).unwrap_or_default();
        let slot = t
            .spec
            .updater_slot
            .map_or("-".to_string(), |s| s.to_string());
        let dims: Vec<String> = t.spec.dims.iter().map(u64::to_string).collect();
        h.update(format!(
            "{} {name} {slot} {} [{}]\n",
            t.kind.dir(),
            t.spec.dtype.name(),
            dims.join(",")
        ));
    }
    super::super::hashing::hex_digest(&h.finalize().into())
}

fn invalid(msg: &str) -> crate::Error {
    ErrorKind::InvalidInput(msg.to_string()).into()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A world size past the limit is refused before anything is sized by it; waits
    /// of any length end somewhere the clock can count.
    #[test]
    fn world_sizes_past_the_limit_are_refused_and_long_waits_do_not_overflow() {
        let specs = [TensorSpec::param("w", DType::Fp32, vec![4, 2])];
        let e = Plan::new("t", MAX_WORLD_SIZE + 1, &specs).err().unwrap();
        assert!(e.to_string().contains("limit of 131072"), "{e}");
        assert!(Plan::new("t", u32::MAX, &specs).is_err());
        assert!(Plan::new("t", 4, &specs).is_ok());
        let far = super::super::deadline(std::time::Duration::MAX);
        assert!(far > std::time::Instant::now() + std::time::Duration::from_secs(86_400));
    }

    fn specs() -> Vec<TensorSpec> {
        vec![
            TensorSpec::param("w", DType::Fp32, vec![10, 3]),
            TensorSpec::updater("w", 1, DType::Fp32, vec![10, 3]),
            TensorSpec::param("b", DType::Fp32, vec![3]),
            TensorSpec::updater("w", 0, DType::Fp32, vec![10, 3]),
        ]
    }

    #[test]
    fn the_plan_does_not_depend_on_the_order_of_the_description() {
        let a = Plan::new("step-1", 4, &specs()).unwrap();
        let mut rev = specs();
        rev.reverse();
        let b = Plan::new("step-1", 4, &rev).unwrap();
        assert_eq!(a.digest, b.digest);
        assert_eq!(a.ext_len, b.ext_len);
        let names: Vec<&str> = a.tensors.iter().map(|t| t.entry_name.as_str()).collect();
        assert_eq!(
            names,
            [
                "step-1/params/0.lodtensor",
                "step-1/params/1.lodtensor",
                "step-1/updater/0.lodtensor",
                "step-1/updater/1.lodtensor"
            ]
        );
        assert_eq!(a.tensors[0].spec.name, "b");
        // Data 64-byte aligned, entries back to back.
        for (i, t) in a.tensors.iter().enumerate() {
            assert_eq!((t.record_offset + t.record_header.len() as u64) % 64, 0);
            if i > 0 {
                assert_eq!(t.header_offset, a.tensors[i - 1].end());
            }
        }
        assert_eq!(a.tensors[1].row_bytes, 12);
    }

    #[test]
    fn any_difference_in_the_description_changes_the_digest() {
        let a = Plan::new("step-1", 4, &specs()).unwrap();
        assert_ne!(a.digest, Plan::new("step-1", 3, &specs()).unwrap().digest);
        assert_ne!(a.digest, Plan::new("step-2", 4, &specs()).unwrap().digest);
        let mut s = specs();
        s[0].dims = vec![11, 3];
        assert_ne!(a.digest, Plan::new("step-1", 4, &s).unwrap().digest);
        let mut s = specs();
        s[2].dtype = DType::Fp64;
        assert_ne!(a.digest, Plan::new("step-1", 4, &s).unwrap().digest);
        // A group id: the same id the same digest, another id another.
        let mut g1 = Plan::new("step-1", 4, &specs()).unwrap();
        g1.join_group("job-1");
        let mut g1b = Plan::new("step-1", 4, &specs()).unwrap();
        g1b.join_group("job-1");
        let mut g2 = Plan::new("step-1", 4, &specs()).unwrap();
        g2.join_group("job-2");
        assert_eq!(g1.digest, g1b.digest);
        assert_ne!(g1.digest, g2.digest);
        assert_ne!(g1.digest, a.digest);
    }

    #[test]
    fn bad_descriptions_are_refused_with_the_tensor_named() {
        let mut s = specs();
        s.push(TensorSpec::param("w", DType::Fp32, vec![1]));
        let e = Plan::new("t", 2, &s).unwrap_err().to_string();
        assert!(e.contains("\"w\" is described twice"), "{e}");
        let s = vec![TensorSpec::updater("w", 1, DType::Fp32, vec![1])];
        let e = Plan::new("t", 2, &s).unwrap_err().to_string();
        assert!(e.contains("without array 0"), "{e}");
        let s = vec![TensorSpec::param("w", DType::Fp32, vec![u64::MAX, 4])];
        let e = Plan::new("t", 2, &s).unwrap_err().to_string();
        assert!(e.contains("too large"), "{e}");
        assert!(Plan::new("t", 0, &specs()).is_err());
        assert!(Plan::new("bad/tag", 1, &specs()).is_err());
    }
}
