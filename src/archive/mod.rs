//! Multi-tag model archives: reading, writing, appending, and maintenance.
//!
//! See FORMAT.md for the layout. [`Archive`] reads (zero-copy over a memory map),
//! [`ArchiveWriter`] writes a new archive atomically, [`Appender`] / [`append_tag`] add
//! tags to an existing one, and [`remove_tag`], [`prune`], [`compact`] and
//! [`convert_graph`] rewrite it.

mod append;
mod container;
mod durable;
pub mod entry_name;
#[doc(hidden)]
pub mod fault;
mod journal;
mod lock;
mod maintenance;
mod reader;
mod regraph;
pub mod tag_name;
pub mod text;
mod time;
mod writer;

pub use append::{AppendMode, Appender, append_tag};
pub use container::{ALIGN_EXTRA, DATA_ALIGN};
pub use entry_name::check_entry_name;
pub use lock::WriteLock;
pub use maintenance::{
    CompactReport, compact, compact_with, prune, prune_with, remove_tag, remove_tag_with,
};
pub use reader::{
    Archive, GraphEncoding, OpenOptions, ParamEntry, Problem, TAGS_TXT, Tag, TensorData,
    TensorKind, TensorLocation, UpdaterEntry, VerifyReport,
};
pub use regraph::{GraphRewrite, convert_graph, replace_graph};
pub use tag_name::{TagName, validate_tag_name};
pub use text::ParamRef;
pub use time::rfc3339;
pub use writer::{ArchiveWriter, TagBuilder, TagWriter, WriteOptions};
