//! A walk of protobuf wire data guided by message descriptors, before prost decodes it:
//! charges an estimate of what decoding will allocate, refuses nesting deeper than
//! prost's recursion limit, and finds fields the contract does not declare. Shared by
//! every protobuf the crate reads (ProgramDesc, TensorFlow, ONNX), so a few KiB of input
//! cannot ask for gigabytes.

use crate::error::{Error, ErrorKind, Result};
use prost::Message;
use prost_reflect::{DescriptorPool, MessageDescriptor};

fn gerr(msg: impl Into<String>) -> Error {
    ErrorKind::Graph(msg.into()).into()
}

/// Deepest message nesting walked (prost's own recursion limit is 100 too).
pub(crate) const MAX_DEPTH: usize = 100;

/// Checks protobuf `bytes` of message `desc` before prost decodes them (shared with the
/// ONNX import): fields the contract does not declare are refused (prost would drop
/// them, and the message could not come back whole), as are nesting deeper than 100
/// and an estimated decoded size past [`decode_budget`]. Malformed bytes pass, for
/// prost to report precisely. `what` names the message in errors (`ONNX model`).
pub(crate) fn precheck(bytes: &[u8], desc: &MessageDescriptor, what: &str) -> Result<()> {
    let budget = decode_budget(bytes.len());
    let mut walk = Walk {
        left: budget,
        unknown: None,
        skip_unknown: false,
    };
    match walk.message(bytes, desc, 0) {
        Ok(()) | Err(Stop::Malformed) => Ok(()),
        Err(Stop::Unknown) => Err(gerr(format!(
            "{what}{} is not in the protobuf contract this build knows; it could not be kept",
            walk.unknown.unwrap_or_default()
        ))),
        Err(Stop::TooDeep) => Err(gerr(format!(
            "invalid {what} protobuf: messages nested deeper than {MAX_DEPTH}"
        ))),
        Err(Stop::TooBig) => Err(ErrorKind::LimitExceeded {
            what: "estimated decoded protobuf size",
            size: budget.saturating_add(1),
            limit: budget,
        }
        .into()),
    }
}

/// What decoding `len` bytes may cost in memory: 8 times the input plus 64 MiB. Real
/// GraphDefs are mostly tensor bytes (copied once) and need far less; a file of millions
/// of empty messages or strings (each 2 bytes on the wire, up to hundreds of bytes
/// decoded) is refused before it is decoded.
pub(crate) fn decode_budget(len: usize) -> u64 {
    (len as u64).saturating_mul(8).saturating_add(64 << 20)
}

/// The least decode budget of a protobuf stored in an archive (graph.fb's ONNX model,
/// TensorFlow node fields and attributes): the import checked the file it came from
/// against that file's size, but the stored message lost its weights, so its own size
/// can be far smaller than what it legitimately decodes to.
const STORED_DECODE_BUDGET: u64 = 1 << 30;

/// Decodes a protobuf read back from an archive (`desc`: its full message name), after
/// the same walk as an import's: an archive is input too, and a few KiB of deflated
/// graph.fb can hold millions of empty messages (gigabytes decoded).
pub(crate) fn decode_stored<M: Message + Default>(
    bytes: &[u8],
    pool: &DescriptorPool,
    desc: &str,
    what: &str,
) -> Result<M> {
    let desc = pool
        .get_message_by_name(desc)
        .ok_or_else(|| gerr(format!("{desc} is missing from the descriptor set")))?;
    let budget = decode_budget(bytes.len()).max(STORED_DECODE_BUDGET);
    walk_within(
        bytes,
        &desc,
        budget,
        what,
        "estimated decoded size of a stored protobuf",
    )?;
    M::decode(bytes).map_err(|e| gerr(format!("{what} does not decode: {e}")))
}

/// Walks `bytes` as message `desc` (past fields it does not declare) and refuses nesting
/// deeper than [`MAX_DEPTH`] and an estimated decoded size past `budget` (`limit_what`
/// names it in the error). Malformed bytes pass, for the decoder to report precisely.
pub(crate) fn walk_within(
    bytes: &[u8],
    desc: &MessageDescriptor,
    budget: u64,
    what: &str,
    limit_what: &'static str,
) -> Result<()> {
    let mut walk = Walk {
        left: budget,
        unknown: None,
        skip_unknown: true,
    };
    match walk.message(bytes, desc, 0) {
        Ok(()) | Err(Stop::Malformed | Stop::Unknown) => Ok(()),
        Err(Stop::TooDeep) => Err(gerr(format!(
            "{what}: messages nested deeper than {MAX_DEPTH}"
        ))),
        Err(Stop::TooBig) => Err(Error::new(ErrorKind::LimitExceeded {
            what: limit_what,
            size: budget.saturating_add(1),
            limit: budget,
        })),
    }
}

/// Estimated heap bytes of one decoded message / string, per element.
const MESSAGE_COST: u64 = 256;
const STRING_COST: u64 = 24;

pub(crate) enum Stop {
    /// A field the descriptor does not declare (path in `Walk::unknown`).
    Unknown,
    /// Over the memory budget.
    TooBig,
    /// Nested deeper than [`MAX_DEPTH`].
    TooDeep,
    /// Not valid protobuf: left for prost to report precisely.
    Malformed,
}

/// A walk of protobuf wire data guided by the message descriptors: charges an estimate
/// of what decoding will allocate and finds fields the contract does not declare.
pub(crate) struct Walk {
    pub(crate) left: u64,
    pub(crate) unknown: Option<String>,
    /// Walk past fields the descriptor does not declare (charged as bytes) instead of
    /// stopping at the first.
    pub(crate) skip_unknown: bool,
}

impl Walk {
    fn charge(&mut self, n: u64) -> std::result::Result<(), Stop> {
        self.left = self.left.checked_sub(n).ok_or(Stop::TooBig)?;
        Ok(())
    }

    pub(crate) fn message(
        &mut self,
        mut b: &[u8],
        desc: &MessageDescriptor,
        depth: usize,
    ) -> std::result::Result<(), Stop> {
        use prost_reflect::Kind;
        if depth > MAX_DEPTH {
            return Err(Stop::TooDeep);
        }
        fn varint(b: &mut &[u8]) -> std::result::Result<u64, Stop> {
            let mut v = 0u64;
            for i in 0..10 {
                let (&byte, rest) = b.split_first().ok_or(Stop::Malformed)?;
                *b = rest;
                v |= u64::from(byte & 0x7f) << (7 * i);
                if byte & 0x80 == 0 {
                    return Ok(v);
                }
            }
            Err(Stop::Malformed)
        }
        while !b.is_empty() {
            let key = varint(&mut b)?;
            let number = u32::try_from(key >> 3).map_err(|_| Stop::Malformed)?;
            let Some(field) = desc.get_field(number) else {
                if !self.skip_unknown {
                    self.unknown = Some(format!(": unknown field number {number}"));
                    return Err(Stop::Unknown);
                }
                let n = match key & 7 {
                    0 => {
                        varint(&mut b)?;
                        0
                    }
                    1 => 8,
                    5 => 4,
                    2 => usize::try_from(varint(&mut b)?).map_err(|_| Stop::Malformed)?,
                    _ => return Err(Stop::Malformed),
                };
                b = b.get(n..).ok_or(Stop::Malformed)?;
                self.charge(STRING_COST + n as u64)?;
                continue;
            };
            let repeated = field.is_list() || field.is_map();
            match key & 7 {
                0 => {
                    varint(&mut b)?;
                    if repeated {
                        self.charge(8)?;
                    }
                }
                1 | 5 => {
                    let n = if key & 7 == 1 { 8 } else { 4 };
                    b = b.get(n..).ok_or(Stop::Malformed)?;
                    if repeated {
                        self.charge(8)?;
                    }
                }
                2 => {
                    let len = usize::try_from(varint(&mut b)?).map_err(|_| Stop::Malformed)?;
                    let payload = b.get(..len).ok_or(Stop::Malformed)?;
                    b = &b[len..];
                    match field.kind() {
                        Kind::Message(m) => {
                            self.charge(MESSAGE_COST)?;
                            if let Err(stop) = self.message(payload, &m, depth + 1) {
                                if let (Stop::Unknown, Some(rest)) = (&stop, &self.unknown) {
                                    self.unknown = Some(format!(".{}{rest}", field.name()));
                                }
                                return Err(stop);
                            }
                        }
                        Kind::String | Kind::Bytes => {
                            self.charge(STRING_COST + len as u64)?;
                        }
                        // A packed run of scalars: at most one element per byte.
                        _ => self.charge(8 * len as u64)?,
                    }
                }
                _ => return Err(Stop::Malformed),
            }
        }
        Ok(())
    }
}
