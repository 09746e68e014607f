//! Moving models between modelzip archives and other frameworks' files.
//!
//! - [`paddle`]: Paddle inference models (`.pdmodel` + `.pdiparams`) and persistables
//!   directories in, `.pdmodel` + `.pdiparams` out, byte for byte.
//! - [`safetensors`]: safetensors files and sharded checkpoints in, one file or shards
//!   out (byte for byte for files the safetensors library wrote).
//!
//! Converting a tag's graph between `graph.pdmodel` and `graph.fb` inside an archive is
//! [`crate::archive::convert_graph`].

pub mod paddle;
pub mod safetensors;
