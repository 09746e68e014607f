//! What graph.fb is: its identifier and schema versions, and the verified root every
//! read of a modelzip FlatBuffer (graph.fb, trainingConfig.fb) starts from.

use ::flatbuffers::VerifierOptions;

use crate::error::{ErrorKind, Result};
use crate::graph::generated::graph as fbg;
use crate::graph::programdesc::gerr;

/// The file identifier of graph.fb (bytes 4..8).
pub const IDENTIFIER: &str = "MZGF";
/// The schema version this code writes and reads.
pub const SCHEMA_VERSION: i32 = 1;

/// The schema_version of a graph.fb holding a TensorFlow graph (`Graph.tf`), so that
/// builds that do not know the `tf` field refuse it instead of reading an empty graph.
pub const SCHEMA_VERSION_TF: i32 = 2;

/// The schema_version of a graph.fb holding an ONNX model (`Graph.onnx`).
pub const SCHEMA_VERSION_ONNX: i32 = 3;

/// The schema_version of a graph.fb holding a Paddle PIR program (`Graph.pir`).
pub const SCHEMA_VERSION_PIR: i32 = 4;

/// Whether graph.fb bytes hold a Paddle PIR program (schema_version 4 with `pir`);
/// `false` for anything that does not verify.
#[cfg_attr(not(feature = "test-internals"), allow(dead_code))] // Used by the tests.
pub fn is_pir(bytes: &[u8]) -> bool {
    verified_root::<fbg::Graph>(bytes, IDENTIFIER, "graph.fb").is_ok_and(|r| r.pir().is_some())
}

/// Whether graph.fb bytes hold an ONNX model (schema_version 3 with `onnx`); `false`
/// for anything that does not verify.
pub fn is_onnx(bytes: &[u8]) -> bool {
    verified_root::<fbg::Graph>(bytes, IDENTIFIER, "graph.fb").is_ok_and(|r| r.onnx().is_some())
}

/// Whether graph.fb bytes hold a TensorFlow graph (schema_version 2 with `tf`); `false`
/// for anything that does not verify.
pub fn is_tf(bytes: &[u8]) -> bool {
    verified_root::<fbg::Graph>(bytes, IDENTIFIER, "graph.fb").is_ok_and(|r| r.tf().is_some())
}
/// Largest graph.fb accepted.
pub const MAX_GRAPH_FB_BYTES: usize = 1 << 31;

/// The verifier limits used for every graph.fb and trainingConfig.fb read of `len`
/// bytes. The apparent size (what the object graph expands to, counting shared objects
/// each time) is held to 16 times the input, at least 16 MiB, so a small file whose
/// offsets all point at one big string cannot make the reader allocate gigabytes. Tables
/// (counted each time they are reached) are held to one per 8 bytes of the input (a
/// table is at least its 4-byte vtable offset and the 4-byte offset to it) plus 1,024,
/// at most 10 million: each decodes to a struct of up to a few hundred bytes, so a file of
/// offsets all pointing at one small table would otherwise decode to 40 times its size.
pub(crate) fn verifier_options(len: usize) -> VerifierOptions {
    VerifierOptions {
        max_depth: 32,
        max_tables: (len / 8).saturating_add(1024).min(10_000_000),
        max_apparent_size: len.saturating_mul(16).clamp(16 << 20, 1 << 31),
        ignore_missing_null_terminator: false,
    }
}

/// Checks size and identifier, then verifies `bytes` as a FlatBuffer of root `T`.
pub(crate) fn verified_root<'b, T>(
    bytes: &'b [u8],
    identifier: &str,
    what: &str,
) -> Result<T::Inner>
where
    T: ::flatbuffers::Follow<'b> + ::flatbuffers::Verifiable + 'b,
{
    if bytes.len() > MAX_GRAPH_FB_BYTES {
        return Err(ErrorKind::LimitExceeded {
            what: "FlatBuffers size",
            size: bytes.len() as u64,
            limit: MAX_GRAPH_FB_BYTES as u64,
        }
        .into());
    }
    match bytes.get(4..8) {
        Some(id) if id == identifier.as_bytes() => {}
        Some(id) => {
            return Err(gerr(format!(
                "{what}: file identifier {:?} is not {identifier:?}",
                String::from_utf8_lossy(id)
            )));
        }
        None => {
            return Err(ErrorKind::truncated("FlatBuffers header", 8, bytes.len() as u64)
            .into());
        }
    }
    ::flatbuffers::root_with_opts::<T>(&verifier_options(bytes.len()), bytes)
        .map_err(|e| gerr(format!("{what}: FlatBuffers verification failed: {e}")))
}

/// An f32 FLOAT attribute as the f64 graph.fb stores, NaN payload included (a plain
/// conversion may quiet a signaling NaN, and the ProgramDesc would not come back).
pub(super) fn widen(x: f32) -> f64 {
    if !x.is_nan() {
        return f64::from(x);
    }
    let b = u64::from(x.to_bits());
    f64::from_bits(((b & 0x8000_0000) << 32) | 0x7ff0_0000_0000_0000 | ((b & 0x007f_ffff) << 29))
}

/// The inverse of [`widen`]: keeps the payload of a NaN that has one in f32's bits.
pub(super) fn narrow(x: f64) -> f32 {
    if x.is_nan() {
        let b = x.to_bits();
        let payload = ((b >> 29) & 0x007f_ffff) as u32;
        if payload != 0 {
            return f32::from_bits(((b >> 32) as u32 & 0x8000_0000) | 0x7f80_0000 | payload);
        }
    }
    x as f32
}
