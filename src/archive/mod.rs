//! Multi-tag model archives: reading, writing, appending, and maintenance.
//!
//! See FORMAT.md for the layout. [`Archive`] reads (zero-copy over a memory map),
//! [`ArchiveWriter`] writes a new archive atomically, [`Appender`] / [`append_tag`] add
//! tags to an existing one, [`remove_tags`] removes tags (by a rewrite or in place),
//! and [`compact`] and [`convert_graph`] rewrite it.
//!
//! ```
//! use modelzip::{AppendMode, Archive, ArchiveWriter, TagBuilder, Tensor, WriteOptions};
//!
//! let dir = tempfile::tempdir()?;
//! let path = dir.path().join("model.zip");
//! let w = Tensor::from_slice(vec![2, 2], &[1.0f32, 2.0, 3.0, 4.0])?;
//! let mut writer = ArchiveWriter::create(&path)?;
//! writer.add_tag(TagBuilder::new("fp32").param("fc.w", w.clone()))?;
//! writer.finish()?;
//! // The same tensor in a new tag is stored once and referenced.
//! let step2 = TagBuilder::new("step-2").param("fc.w", w);
//! modelzip::append_tag(&path, step2, AppendMode::InPlace, &WriteOptions::default())?;
//!
//! let archive = Archive::open(&path)?;
//! assert_eq!(archive.tags(), &["fp32", "step-2"]);
//! let tag = archive.latest()?;
//! let data = tag.param("fc.w")?;            // zero-copy from the memory map
//! assert_eq!(data.view().as_slice::<f32>()?, &[1.0, 2.0, 3.0, 4.0]);
//! assert!(archive.verify().is_ok());
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

mod append;
mod archive_path;
mod container;
mod durable;
#[cfg(feature = "remote")]
pub(crate) use archive_path::ArchivePath;
#[cfg(feature = "remote")]
pub(crate) use durable::fsync_dir;
pub(crate) use durable::{new_temp_beside, parent_dir};
pub(crate) use pread::read_exact_at_split;
pub(crate) use writeback::EarlyWriteback;
#[cfg(feature = "remote")]
pub(crate) use writer::settle_before_replace;
mod entry_name;
pub mod fault;
mod hashing;
mod journal;
mod lock;
mod maintenance;
mod open;
#[cfg(unix)]
mod pread;
mod reader;
mod regraph;
mod session;
pub(crate) mod sharded;
mod shared_str;
mod slice;
mod summary;
mod tag;

// Used by the `remote` feature only.
#[cfg_attr(not(feature = "remote"), allow(dead_code))]
pub(crate) mod source;

mod tag_name;
pub mod text;
mod time;
mod verify;
mod writeback;
mod writer;

#[cfg_attr(not(feature = "remote"), allow(unused_imports))]
pub(crate) use append::url_of;
pub use append::{AppendMode, Appender, append_tag};
#[cfg(feature = "remote")]
pub(crate) use append::{finish_detached, remote_session};
pub use hashing::sha256_hex;
pub use lock::WriteLock;
pub use maintenance::{CompactReport, Removal, RemoveReport, compact, remove_tags};
#[cfg(feature = "remote")]
pub(crate) use maintenance::{compaction_session, removal_session};
pub(crate) use reader::GraphFormat;
pub use reader::{
    Archive, INFLATE_RATIO_FREE, OpenOptions, ParamEntry, TAGS_TXT, TensorData, TensorKind,
    TensorLocation, UpdaterEntry,
};
#[cfg(feature = "test-internals")]
pub use reader::{WorkCounts, dropped_work_counts, work_counts};
pub use regraph::{GraphRewrite, convert_graph, replace_graph};
#[cfg(feature = "remote")]
pub(crate) use session::Session;
pub use session::WriteOptions;
#[cfg(feature = "test-internals")]
pub use summary::summary_from_tables;
#[cfg(feature = "remote")]
pub(crate) use summary::written_by_commit;
pub use summary::{MAX_SUMMARY_BYTES, SUMMARY_TXT, SummaryStatus, TagSummary};
pub use tag::{MAX_METADATA_BYTES, Tag};
pub use tag_name::{MAX_TAG_NAME_LEN, validate_tag_name};
#[cfg(feature = "remote")]
pub(crate) use time::rfc3339;
pub use verify::{VerifyFinding, VerifyReport};
pub use writer::{ArchiveWriter, TagBuilder, TagWriter};
