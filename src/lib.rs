//! # modelzip
//!
//! Zip-based, multi-tag model archives. One zip file holds several versions
//! ("tags") of a model — FP32 and INT8 variants, checkpoints after 1,000 and 5,000
//! steps — each with its graph, parameters, optimizer state and training
//! configuration. Tensors are stored in PaddlePaddle's LoDTensor binary layout, so
//! Paddle models move in and out byte for byte.
//!
//! The building blocks:
//! - [`DType`], [`Tensor`] and the zero-copy [`TensorView`];
//! - [`tensor::codec`]: the LoDTensor record codec, byte-exact with Paddle;
//! - [`Graph`]: one graph model for both graph encodings, Paddle ProgramDesc
//!   (`graph.pdmodel`) and FlatBuffers (`graph.fb`), with [`graph::dump`] renderings;
//! - [`TrainingConfig`]: the updater and its state, stored as `trainingConfig.fb`.
//! - [`interop::paddle`]: Paddle inference models (`.pdmodel` + `.pdiparams`) and
//!   persistables directories in and out of archive tags, byte for byte.
//! - [`variants`]: INT8 / FP16 / BF16 tags derived from a float tag, and tag diffs.
//!
//! ```
//! use modelzip::{Tensor, tensor};
//!
//! let t = Tensor::from_slice(vec![2, 2], &[1.0f32, 2.0, 3.0, 4.0])?;
//! let mut bytes = Vec::new();
//! tensor::encode_tensor(&t.view(), &mut bytes)?;
//! let back = tensor::decode_tensor(&bytes)?;       // borrows `bytes`, no copy
//! assert_eq!(back.dims(), &[2, 2]);
//! assert_eq!(back.to_vec::<f32>()?, vec![1.0, 2.0, 3.0, 4.0]);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

#![deny(missing_docs)]

pub mod archive;
pub mod checkpoint;
pub mod error;
pub mod graph;
pub mod interop;
pub mod onnx_proto;
pub mod paddle_proto;
pub mod progress;
#[cfg(feature = "remote")]
pub mod remote;
pub mod tensor;
pub mod tf_proto;
pub mod variants;

pub use archive::{
    AppendMode, Appender, Archive, ArchiveWriter, CompactReport, OpenOptions, ParamEntry, Removal,
    RemoveReport, Tag, TagBuilder, TagWriter, TensorData, TensorKind, TensorLocation, UpdaterEntry,
    VerifyFinding, VerifyReport, WriteOptions, append_tag, compact, remove_tags,
};
pub use error::{Error, ErrorKind, Location, Result};
pub use graph::{Graph, GraphFormat, TrainingConfig};
pub use tensor::{DType, Lod, Tensor, TensorView};
