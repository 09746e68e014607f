//! The integration tests: one binary, one module per area (the library, the CLI in
//! [`cli`], crash and hostile-input suites, format interop). Shared helpers are in
//! [`support`]. Run one area with `cargo test --test it AREA::` (e.g. `archive_crash::`).

mod alias_amplification;
mod archive_append;
mod archive_crash;
mod archive_roundtrip;
mod checkpoint;
mod cli;
mod concurrency;
mod crash_cli;
mod extract;
mod fuzz_regressions;
mod graph_hostile;
mod graph_roundtrip;
mod hostile;
mod import_memory;
mod mapped_heads;
mod onnx_interop;
mod onnx_quantize;
mod paddle_fixtures;
mod paddle_interop;
mod paddle_pir;
mod reference_amplification;
#[cfg(feature = "remote")]
mod remote;
mod safetensors_interop;
mod saved_model;
mod sharded;
mod sharded_boxes;
mod shared_graph;
mod slices;
mod structure;
mod summary;
mod support;
mod tensor_malformed;
mod tensor_props;
mod tf_interop;
mod variants;
