//! # modelzip
//!
//! Zip-based, multi-tag model archives. One zip file holds several versions
//! ("tags") of a model — FP32 and INT8 variants, checkpoints after 1,000 and 5,000
//! steps — each with its graph, parameters, optimizer state and training
//! configuration. Tensors are stored in PaddlePaddle's LoDTensor binary layout, so
//! Paddle models move in and out byte for byte.
//!
//! The building blocks:
//! - [`Archive`] and [`Tag`] read archives (zero-copy over a memory map), [`ArchiveWriter`]
//!   writes one, [`Appender`] / [`append_tag`] add tags, [`remove_tags`] and [`compact`]
//!   maintain it;
//! - [`DType`], [`Tensor`] and the zero-copy [`TensorView`];
//! - [`tensor`]: the LoDTensor record codec, byte-exact with Paddle;
//! - [`Graph`]: one graph model for both graph encodings, Paddle ProgramDesc
//!   (`graph.pdmodel`) and FlatBuffers (`graph.fb`), with [`dump`] renderings;
//! - [`TrainingConfig`]: the updater and its state, stored as `trainingConfig.fb`.
//! - [`interop::paddle`]: Paddle inference models (`.pdmodel` + `.pdiparams`) and
//!   persistables directories in and out of archive tags, byte for byte.
//! - [`variants`]: INT8 / FP16 / BF16 tags derived from a float tag, and tag diffs.
//! - [`extract`]: a tag written out as a Paddle persistables directory, safely (what
//!   `modelzip extract` runs).
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

//! # The shape of the API
//!
//! The modules that hold the code are private; what users need is re-exported here, at
//! the root: the archive types and functions, the error type, the tensor types, and the
//! graph and training-config types users name most ([`Graph`], [`GraphFormat`],
//! [`TrainingConfig`]). A module is public only where it groups the functions of one
//! format or area whose names would clash or mislead at the root: [`interop`] (import
//! and export through the registered formats, and a submodule per model format for what
//! only it has), [`graph`] (the graph model, its
//! two encodings graph.fb and ProgramDesc behind [`Graph`]'s methods), [`dump`] (the
//! renderings of every graph kind: text, JSON, DOT, the operations and their edges), [`tensor`] (the LoDTensor codec: `encode_*` / `decode_*`), [`variants`]
//! (quantize, cast, diff), [`checkpoint`] (the training-loop API), [`extract`] (its
//! options, report and limit names would read as archive-wide at the root), [`progress`],
//! [`remote`] and [`sharded`] (one checkpoint written by many processes). No type of a dependency appears in a public signature (but `half`'s `f16`
//! and `bf16`, the element types of FP16 / BF16 tensors), and docs/public-api.txt lists
//! the whole surface (checked by scripts/check-public-api.sh).

#![deny(missing_docs)]

/// Declares a module private, or public and hidden with the `test-internals` feature
/// (the crate's own tests and fuzz targets use the raw protobuf types).
macro_rules! internal_mod {
    ($(#[$attr:meta])* $name:ident) => {
        $(#[$attr])*
        #[cfg(feature = "test-internals")]
        #[doc(hidden)]
        pub mod $name;
        $(#[$attr])*
        #[cfg(not(feature = "test-internals"))]
        pub(crate) mod $name;
    };
}

/// A struct whose fields only the crate reads: `$vis` (`pub` for a type users hold but
/// need not open, such as a foreign graph kind) with `pub(crate)` fields, or public with
/// public hidden fields under the `test-internals` feature (the crate's tests build and
/// inspect them).
macro_rules! internal_fields {
    (
        $(#[$attr:meta])*
        $vis:vis struct $name:ident {
            $($(#[$fattr:meta])* $field:ident : $ty:ty),* $(,)?
        }
    ) => {
        $(#[$attr])*
        #[cfg(feature = "test-internals")]
        pub struct $name {
            $($(#[$fattr])* #[doc(hidden)] pub $field: $ty),*
        }
        $(#[$attr])*
        #[cfg(not(feature = "test-internals"))]
        $vis struct $name {
            $($(#[$fattr])* pub(crate) $field: $ty),*
        }
    };
}

/// An item whose signature holds the raw protobuf types: `pub(crate)`, or public and
/// hidden with the `test-internals` feature (the crate's tests and fuzz targets call it).
macro_rules! internal {
    ($(#[$attr:meta])* pub $($item:tt)*) => {
        $(#[$attr])*
        #[cfg(feature = "test-internals")]
        #[doc(hidden)]
        pub $($item)*
        $(#[$attr])*
        #[cfg(not(feature = "test-internals"))]
        #[allow(dead_code, unused_imports)] // Some are used by the tests only.
        pub(crate) $($item)*
    };
}

mod archive;
pub mod checkpoint;
pub mod dump;
mod error;
pub mod extract;
pub mod graph;
pub mod interop;
mod json_cost;
mod keyed;
mod proto_walk;
internal_mod!(
    /// ONNX's protobuf types; the file lives in the format's folder.
    #[path = "interop/onnx/proto.rs"]
    onnx_proto
);
internal_mod!(paddle_proto);
pub mod progress;
#[cfg(feature = "remote")]
pub mod remote;
pub mod tensor;
/// Sharded saves: one tag written by many processes at once (docs/SHARDED.md).
pub mod sharded {
    pub use crate::archive::sharded::{ShardedOptions, ShardedReport, ShardedWriter, TensorSpec};
}
internal_mod!(
    /// TensorFlow's protobuf types; the file lives in the format's folder.
    #[path = "interop/tf/proto.rs"]
    tf_proto
);
pub mod variants;

pub use archive::{
    AppendMode, Appender, Archive, ArchiveWriter, CompactReport, GraphRewrite, MAX_METADATA_BYTES,
    MAX_TAG_NAME_LEN, OpenOptions, ParamEntry, Removal, RemoveReport, SummaryStatus, Tag,
    TagBuilder, TagSummary, TagWriter, TensorData, TensorKind, TensorLocation, UpdaterEntry,
    VerifyFinding, VerifyReport, WriteOptions, append_tag, compact, convert_graph, remove_tags,
    replace_graph, sha256_hex, validate_tag_name,
};
internal! {
    /// The archive's lock file, the names of its own entries and the thresholds its
    /// reader keeps: the crate's own tests reach them.
    pub use archive::{INFLATE_RATIO_FREE, MAX_SUMMARY_BYTES, SUMMARY_TXT, TAGS_TXT, WriteLock};
}
pub use error::{Error, ErrorKind, Location, Result};
pub use graph::format::GraphFormat;
pub use graph::model::Graph;
pub use graph::training_config::TrainingConfig;
pub use tensor::dtype::DType;
pub use tensor::lod::Lod;
pub use tensor::view::{Element, Tensor, TensorView};

/// The write-fault hook (`fault-injection` feature, for the crate's own tests): makes this
/// thread's archive writes fail after a byte budget, as a full disk would.
#[cfg(feature = "fault-injection")]
#[doc(hidden)]
pub mod fault {
    pub use crate::archive::fault::{bytes_written, set_write_budget};
}

/// Internals the crate's own tests and fuzz targets reach (`test-internals` feature): the
/// text-file parsers, the record decoder and the work counters of an archive's reads.
/// No stability promise.
#[cfg(feature = "test-internals")]
#[doc(hidden)]
pub mod internals {
    pub use crate::archive::text;
    pub use crate::archive::{WorkCounts, dropped_work_counts, summary_from_tables, work_counts};
    pub use crate::tensor::codec::decode_record_at;
}
