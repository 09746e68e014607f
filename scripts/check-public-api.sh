#!/usr/bin/env bash
# Renders the library's public API (default features) and fails (exit 1, with a diff)
# when it differs from the committed listing docs/public-api.txt, so that every change to
# the surface shows in review and an unintended one fails CI. With --write, replaces the
# listing instead (commit the diff with the change that caused it).
#
# How: rustdoc's JSON output (unstable; RUSTC_BOOTSTRAP=1 lets the stable toolchain write
# it) rendered by the `public-api` crate in scripts/public-api/, pinned to the release that
# reads the JSON format version of the toolchain in use (0.52.1: format 57, Rust 1.95).
set -euo pipefail
cd "$(dirname "$0")/.."

LISTING=docs/public-api.txt
# The most items the listing may hold: a ratchet that goes down with every removal and up
# only for a new capability, said in the commit (issue 28 set the
# goal at 650; lower this number in the same commit that removes items).
MAX_ITEMS=821
target="${CARGO_TARGET_DIR:-target}"

RUSTC_BOOTSTRAP=1 cargo rustdoc --lib --quiet -- -Z unstable-options --output-format json
tmp="$(mktemp)"
trap 'rm -f "$tmp"' EXIT
{
  cat <<'HEADER'
# The public API of the modelzip library with its default features: one item a line, as
# the public-api crate renders rustdoc's JSON (blanket, auto-trait and derived impls left
# out). Generated and checked by scripts/check-public-api.sh (run by .ci/run): after an
# intended change, run `scripts/check-public-api.sh --write` and commit this file with it.
# The shape (what is at the root, which modules stay public) is described in src/lib.rs.
# No type of a dependency appears here except half's f16 and bf16, the element types of
# FP16 / BF16 tensors (`impl Element for half::...`).
#
# Budget: at most MAX_ITEMS lines (scripts/check-public-api.sh fails past it; the number
# goes up only with a new capability, down with every removal). The goal is 650 (issue
# 28). Gone so far: what only the crate's own code used (the lock, the entry-name
# constants, the record codec's parts, the quantization arithmetic, a second whole-at-once
# diff, a tag-name type, the string type of tensor locations, the element trait's
# constants, the per-format import and export functions the `Format` trait covers, with
# their reports, the sharded safetensors export among them: a shard size is an export
# option; the wrappers of the remote removal and compaction reports: a report's `remote`
# field holds the commit, as for every other write; Paddle's type numbers of graph values,
# DType::from_name beside its FromStr, the progress hook's raw callback, the `_allowing`
# twins of quantize and cast: the values to allow are an argument of both; the error
# kinds' fields that only fed their messages: a kind holds its message, and fields only
# where a caller acts on them, LimitExceeded's and UnrepresentableValues' `allow`;
# OpenOptions' setters beside its public fields, Error::into_kind and Error::new (beside
# From<ErrorKind>), DType::from_code and is_float, Program::main_block (`blocks[0]`),
# Tag::file_entry, and how a `Format` recognises its files and tags, which only detect and
# origin_of ask; TensorFile's decoding twins of decode_tensor and decode_combined over its
# bytes, and the tensor codec's size helpers, data_len and encoded_len: encode_tensor
# returns a record's size; Var's constructor per kind: Var::new takes the kind and sets
# the flags it implies; Graph's from_/to_ programdesc and flatbuffers beside decode and
# encode, which take the GraphFormat; the setters of ShardedOptions and RemoteOptions
# beside their public fields, and RemoteOptions::new beside its Default, as Program::new
# was; TrainingConfig::hyper_parameter, a find in its public pairs; Archive::
# tag_summary_from_tables beside tag_summaries, which the CLI now calls instead of its own
# copy; TensorKind::dir; Archive::has_entry beside entry_stored_size, when TagSummary
# gained `sharded`, the world size `tags` had read from each metadata.json;
# interop::paddle::export_paths, which only export-paddle's check of existing files
# used: the export refuses them itself, PREFIX.json for a PIR program). Added since,
# capabilities: OpenOptions::writer_wait (an open that never waits for a writer; the
# Python package opens so on the calling thread first) and SaveReport::deferred (a
# committed save whose retention pass found the archive locked says so instead of
# failing). What stands
# between:
# the error kinds (43), the dtypes (29), the graph model (108), the reports users read
# field by field, and whatever the CLI (a client of this API, src/cli) needs.
# Each item is public at one path only. Why each public module exists:
# - the root: the archive (open, read, write, append, maintain), the error type and its
#   kinds, tensors (DType, Tensor, TensorView, Element, Lod) and Graph / GraphFormat /
#   TrainingConfig: what every user names.
# - checkpoint: the training-loop API (save, restore, retention).
# - dump: renderings of any graph (text, JSON, DOT, its operations and edges as JSON).
# - extract: a tag written out as files, safely (options, report and limits).
# - graph: the graph model users build and read (Program, Block, Var, Op, attributes) and
#   the foreign kinds as opaque values.
# - interop: import and export, one submodule per foreign format, and the shared options
#   and reports.
# - progress: the progress hook long operations call.
# - remote: archives in object stores (options, upload, download).
# - tensor: the LoDTensor codec (Paddle's record layout) for files outside archives.
# - variants: quantize, cast and diff.
HEADER
  cargo run --quiet -p modelzip-public-api -- "$target/doc/modelzip.json"
} >"$tmp"

if [ "${1:-}" = "--write" ]; then
  cp "$tmp" "$LISTING"
  echo "wrote $LISTING"
  exit 0
fi
items="$(grep -vc '^#' "$tmp")"
if [ "$items" -gt "$MAX_ITEMS" ]; then
  echo "error: the public API has $items items, over the budget of $MAX_ITEMS (header of $LISTING)." >&2
  exit 1
fi
if ! diff -u "$LISTING" "$tmp"; then
  echo "error: the public API differs from $LISTING (above: - committed, + now)." >&2
  echo "If the change is intended, run scripts/check-public-api.sh --write and commit it." >&2
  exit 1
fi
echo "public API matches $LISTING"
