#!/usr/bin/env bash
# modelzip quickstart: builds the CLI, packages FP32, INT8 and FP16 variants of a small
# model that real Paddle 3.3.1 wrote (bundled under tests/fixtures/paddle/3.3.1/), lists
# the tags, verifies the archive and exports the INT8 variant back to Paddle's format.
# Needs only the Rust toolchain. Output goes to target/quickstart/.
set -euo pipefail
cd "$(dirname "$0")"
cargo build --release --quiet
mz=target/release/modelzip
model=tests/fixtures/paddle/3.3.1
out=target/quickstart
rm -rf "$out" && mkdir -p "$out"
run() { echo "\$ modelzip $*"; "$mz" "$@"; echo; }
run import-paddle "$out/demo.zip" --tag fp32 "$model/mlp.pdmodel" "$model/mlp.pdiparams"
run quantize "$out/demo.zip" --from fp32 --tag int8 --per-channel
run cast "$out/demo.zip" --from fp32 --tag fp16 --dtype fp16
run tags "$out/demo.zip"
run verify "$out/demo.zip"
run diff "$out/demo.zip" fp32 int8
run export-paddle "$out/demo.zip" --tag int8 --out "$out/mlp_int8"
echo "Done: $out/demo.zip holds three variants; $out/mlp_int8.pdmodel + .pdiparams load in Paddle."
