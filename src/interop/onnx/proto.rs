//! Rust types for ONNX's ModelProto (schemas/onnx/onnx.proto, Apache-2.0), generated at
//! build time by prost-build with protox as the compiler. The file is proto2, so every
//! optional field is an `Option` and a message re-encodes with the fields it came with.

#![allow(missing_docs, clippy::all)]
// Private without the test-internals feature: the crate uses only some of the messages.
#![cfg_attr(not(feature = "test-internals"), allow(dead_code))]

include!(concat!(env!("OUT_DIR"), "/onnx.rs"));

/// The compiled `FileDescriptorSet` of onnx.proto (for reflection).
pub const FILE_DESCRIPTOR_SET: &[u8] =
    include_bytes!(concat!(env!("OUT_DIR"), "/onnx_descriptor.bin"));
