#!/usr/bin/env bash
# Real-world op coverage beyond the small fixtures: paddle.vision's resnet18 and
# mobilenet_v2 go import -> convert to flatbuffers -> export (run in Paddle) -> convert
# back -> export (compared byte for byte with Paddle's files), and their INT8 (per
# channel) and BF16 variants are exported and run in Paddle. Writes tests/paddle/zoo_last_run.md.
# Needs a Paddle venv: PADDLE_PY=/path/to/venv/bin/python (default /work/venvs/paddle3/bin/python).
set -euo pipefail
root="$(cd "$(dirname "$0")/../.." && pwd)"
py="${PADDLE_PY:-/work/venvs/paddle3/bin/python}"
cargo build --release --quiet --manifest-path "$root/Cargo.toml"
mz="$root/target/release/modelzip"
work="$(mktemp -d)"; trap 'rm -rf "$work"' EXIT
cd "$work"
record="$root/tests/paddle/zoo_last_run.md"
{
  echo "# paddle.vision models through modelzip — last run"
  echo
  echo "$(date -u +%Y-%m-%dT%H:%M:%SZ), $("$py" -c 'import paddle; print("paddle", paddle.__version__)' 2>/dev/null), \`tests/paddle/zoo_check.sh\`"
  echo
  echo '```'
} > "$record"
for n in resnet mobilenet; do
  "$py" "$root/tests/paddle/zoo_models.py" "$n" >/dev/null 2>&1
  "$mz" import-paddle zoo.zip --tag "$n" "$n.pdmodel" "$n.pdiparams" -q
  "$mz" convert zoo.zip --tag "$n" --to flatbuffers -q
  "$mz" export-paddle zoo.zip --tag "$n" --out "${n}_fb" -q
  "$mz" convert zoo.zip --tag "$n" --to programdesc -q
  "$mz" export-paddle zoo.zip --tag "$n" --out "${n}_rt" -q
  cmp "$n.pdmodel" "${n}_rt.pdmodel" && cmp "$n.pdiparams" "${n}_rt.pdiparams" \
    && echo "$n: import -> fb -> pd -> export is byte-identical to Paddle's files" >> "$record"
  "$mz" quantize zoo.zip --from "$n" --tag "$n-int8" --per-channel -q
  "$mz" export-paddle zoo.zip --tag "$n-int8" --out "${n}_int8" -q
  "$mz" cast zoo.zip --from "$n" --tag "$n-bf16" --dtype bf16 -q
  "$mz" export-paddle zoo.zip --tag "$n-bf16" --out "${n}_bf16" -q
done
"$mz" verify zoo.zip >> "$record"
"$mz" tags zoo.zip >> "$record"
"$py" "$root/tests/paddle/run_exported.py" --tol 1e-5 \
  resnet_fb resnet resnet.input.npy resnet.output.npy mobilenet_fb mobilenet mobilenet.input.npy mobilenet.output.npy \
  2>/dev/null | sed "s|$work/||" >> "$record"
# Variants: max abs diff against the FP32 output; the record prints the outputs' magnitude beside it.
"$py" "$root/tests/paddle/run_exported.py" --tol 1.0 \
  resnet_int8 resnet.input.npy resnet.output.npy mobilenet_int8 mobilenet.input.npy mobilenet.output.npy \
  resnet_bf16 resnet.input.npy resnet.output.npy mobilenet_bf16 mobilenet.input.npy mobilenet.output.npy \
  2>/dev/null | sed "s|$work/||" >> "$record"
"$py" -c "import numpy as np; print('max |output|: resnet %.3g, mobilenet %.3g' % (abs(np.load('resnet.output.npy')).max(), abs(np.load('mobilenet.output.npy')).max()))" >> "$record"
echo '```' >> "$record"
cat "$record"
