//! Rust types for TensorFlow's GraphDef protobuf (schemas/tensorflow/, Apache-2.0),
//! generated at build time by prost-build with protox as the compiler. Maps are
//! `BTreeMap`s, so a message encodes the same way every time (keys in order).

#![allow(missing_docs, clippy::all)]
// Private without the test-internals feature: the crate uses only some of the messages.
#![cfg_attr(not(feature = "test-internals"), allow(dead_code))]

include!(concat!(env!("OUT_DIR"), "/tensorflow.rs"));

/// The compiled `FileDescriptorSet` of graph.proto and its imports (for reflection and
/// text format).
pub const FILE_DESCRIPTOR_SET: &[u8] =
    include_bytes!(concat!(env!("OUT_DIR"), "/tensorflow_descriptor.bin"));
