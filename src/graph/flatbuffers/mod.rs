//! The graph.fb codec: [`Graph`](crate::graph::Graph) ⇄ FlatBuffers bytes of `schemas/graph.fbs`.
//!
//! Reading checks the file identifier, runs the FlatBuffers verifier with the limits in
//! `verifier_options`, then converts, checking every enum value and the lengths of
//! the parallel vectors. docs/GRAPH.md documents the mapping.

mod decode;
mod encode;
mod schema;
#[cfg(test)]
mod tests;

pub use decode::decode;
pub use encode::encode;
pub(crate) use schema::verified_root;
// (Read by the crate's tests through the test-internals feature.)
#[allow(unused_imports)]
pub use schema::{
    IDENTIFIER, MAX_GRAPH_FB_BYTES, SCHEMA_VERSION, SCHEMA_VERSION_ONNX, SCHEMA_VERSION_PIR,
    SCHEMA_VERSION_TF, is_onnx, is_pir, is_tf,
};
