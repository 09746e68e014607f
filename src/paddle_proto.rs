//! Rust types for Paddle's ProgramDesc protobuf (schemas/paddle/framework.proto),
//! generated at build time by prost-build with protox as the compiler.

#![allow(missing_docs, clippy::all)]
// Private without the test-internals feature: the crate uses only some of the messages.
#![cfg_attr(not(feature = "test-internals"), allow(dead_code))]

include!(concat!(env!("OUT_DIR"), "/paddle.framework.proto.rs"));

/// The compiled `FileDescriptorSet` of framework.proto (for reflection and text format).
pub const FILE_DESCRIPTOR_SET: &[u8] =
    include_bytes!(concat!(env!("OUT_DIR"), "/framework_descriptor.bin"));
