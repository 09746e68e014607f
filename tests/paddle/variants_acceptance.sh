#!/usr/bin/env bash
# Paddle acceptance of the quantize/cast variants (not part of `cargo test`).
#
# For each fixture model (mlp, conv) and Paddle version (3.3.1, 2.6.2): Paddle writes
# the model's parameters as a persistables directory; `modelzip pack` makes tag fp32
# with the fixture .pdmodel as graph; `modelzip quantize` (per tensor, per channel) and
# `modelzip cast` (fp16, bf16) derive variants; `modelzip extract` writes each tag as
# `__model__` + one file per parameter; Paddle loads and runs it
# (tests/paddle/run_variants.py) beside the fixture's own FP32 model, in one process,
# and the variant's output is compared with the fixture's computed there (the committed
# *.output.npy, maybe from another CPU, only checks the fixture's output loosely).
# Writes tests/paddle/variants_last_run.md; exits 1 if any run fails.
#
# Usage: bash tests/paddle/variants_acceptance.sh     (from the repository root)
# Env:   PADDLE3=/work/venvs/paddle3/bin/python PADDLE26=/work/venvs/paddle26/bin/python
set -euo pipefail

root=$(cd "$(dirname "$0")/../.." && pwd)
cd "$root"
cargo build -q --bin modelzip
mz="$root/target/debug/modelzip"
py3=${PADDLE3:-/work/venvs/paddle3/bin/python}
py26=${PADDLE26:-/work/venvs/paddle26/bin/python}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
record="$root/tests/paddle/variants_last_run.md"

# Tolerance per tag: max |variant output - fixture output| / max |fixture output|, both
# computed in the same run (fp32: the same program and weights, bit for bit).
# Regression tolerances for these two small fixtures (2-3x their measured figures), not
# the accuracy to expect of other models: docs/VARIANTS.md ("Other models") gives the
# measured INT8 figures of larger models and the tolerance to use for them.
tol() {
  case "$1" in
    fp32) echo 0 ;;
    fp16) echo 2e-3 ;;
    bf16) echo 2e-2 ;;
    int8 | int8-pc) echo 3e-2 ;;
  esac
}

results="$work/results.jsonl"
: >"$results"
fail=0
for ver in 3.3.1 2.6.2; do
  if [ "$ver" = 3.3.1 ]; then py=$py3; else py=$py26; fi
  for model in mlp conv; do
    fx="tests/fixtures/paddle/$ver/$model"
    d="$work/$ver-$model"
    mkdir -p "$d"
    "$py" tests/paddle/persistables.py "$fx" "$d/persist" >/dev/null 2>&1
    "$mz" pack "$d/m.zip" "$d/persist" --tag fp32 --graph "$fx.pdmodel" -q
    "$mz" quantize "$d/m.zip" --from fp32 --tag int8 -q
    "$mz" quantize "$d/m.zip" --from fp32 --tag int8-pc --per-channel -q
    "$mz" cast "$d/m.zip" --from fp32 --tag fp16 --dtype fp16 -q
    "$mz" cast "$d/m.zip" --from fp32 --tag bf16 --dtype bf16 -q
    "$mz" verify "$d/m.zip" >/dev/null
    for tag in fp32 int8 int8-pc fp16 bf16; do
      "$mz" extract "$d/m.zip" --tag "$tag" --out "$d/$tag" -q
      if line=$("$py" tests/paddle/run_variants.py "$d/$tag" "$fx" "$fx.input.npy" "$fx.output.npy" "$(tol "$tag")" 2>"$d/$tag.err"); then
        :
      else
        fail=1
        [ -n "$line" ] || line="{\"pass\": false, \"error\": $(tail -1 "$d/$tag.err" | python3 -c 'import json,sys; print(json.dumps(sys.stdin.read().strip()))')}"
      fi
      echo "$line" | python3 -c "import json,sys; r=json.loads(sys.stdin.read()); r.update(version='$ver', model='$model', tag='$tag', tol=$(tol "$tag")); print(json.dumps(r))" >>"$results"
    done
  done
done

python3 - "$results" "$record" <<'PY'
import json, sys, datetime, subprocess
rows = [json.loads(l) for l in open(sys.argv[1])]
commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True).stdout.strip()
with open(sys.argv[2], "w") as f:
    f.write("# Paddle acceptance of variants: last run\n\n")
    f.write(f"Written by `tests/paddle/variants_acceptance.sh` on "
            f"{datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d %H:%M} UTC at commit {commit}.\n\n")
    f.write("Each tag was extracted with `modelzip extract` and run by Paddle "
            "(`load_inference_model(dir, model_filename='__model__', params_filename=None)`, CPU) "
            "on the fixture's input, beside the fixture's FP32 model in the same process (one thread). "
            "`max abs` is the largest |output - fixture output|, both computed in this run; "
            "`rel` divides it by the largest |fixture output|; the run passes when rel <= tolerance "
            "and the fixture's output is within 1e-5 (relative) of the committed *.output.npy.\n\n")
    f.write("| Paddle | model | tag | max abs | rel | tolerance | result |\n|---|---|---|---|---|---|---|\n")
    for r in rows:
        res = "pass" if r.get("pass") else "FAIL " + r.get("error", "")
        ma = f"{r['max_abs']:.3e}" if "max_abs" in r else "-"
        mr = f"{r['max_rel']:.3e}" if "max_rel" in r else "-"
        f.write(f"| {r.get('paddle', r['version'])} | {r['model']} | {r['tag']} | {ma} | {mr} | {r['tol']:g} | {res} |\n")
print(open(sys.argv[2]).read())
PY
exit $fail
