#!/usr/bin/env bash
# Paddle acceptance run (not part of `cargo test`): for each Paddle venv present, build the
# release binary, import each fixture model of that Paddle version into an archive, convert
# its graph to graph.fb and back, export it, check the exported files against Paddle's
# (byte for byte), run each export and the fixture it came from in one Paddle process and
# compare: bit for bit with the original's output, and the original's loosely (relative
# --tol) with the committed *.output.npy, which another CPU may have computed. The
# graph.fb state is exported and run too (converted to ProgramDesc on export).
# Writes the record tests/paddle/last_run.md.
#
#   tests/paddle/acceptance.sh [--tol 1e-5]
#
# Venvs: $PADDLE26_PYTHON (default /work/venvs/paddle26/bin/python, paddlepaddle 2.6.2) and
# $PADDLE3_PYTHON (default /work/venvs/paddle3/bin/python, paddlepaddle 3.3.1).
set -euo pipefail

tol=1e-5
if [[ "${1:-}" == "--tol" ]]; then tol="$2"; shift 2; fi

root="$(cd "$(dirname "$0")/../.." && pwd)"
cd "$root"
cargo build --release --quiet
bin="$root/target/release/modelzip"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT

declare -A venv=(
  [2.6.2]="${PADDLE26_PYTHON:-/work/venvs/paddle26/bin/python}"
  [3.3.1]="${PADDLE3_PYTHON:-/work/venvs/paddle3/bin/python}"
)
models=(mlp conv)
rows=()
versions=()
failed=0

same() { cmp -s "$1" "$2" && echo yes || echo NO; }

for v in 2.6.2 3.3.1; do
  py="${venv[$v]}"
  fx="tests/fixtures/paddle/$v"
  if [[ ! -x "$py" ]]; then
    rows+=("| $v | - | - | - | - | - | - | skipped: no venv at \`$py\` |")
    continue
  fi
  versions+=("$v")
  zip="$work/$v.zip"
  cases=()
  declare -A ident=()
  for m in "${models[@]}"; do
    "$bin" import-paddle "$zip" --tag "$m" "$fx/$m.pdmodel" "$fx/$m.pdiparams" -q
    "$bin" convert "$zip" --tag "$m" --to flatbuffers -q
    "$bin" export-paddle "$zip" --tag "$m" --out "$work/$v-$m-fb" -q
    "$bin" convert "$zip" --tag "$m" --to programdesc -q
    "$bin" export-paddle "$zip" --tag "$m" --out "$work/$v-$m" -q
    for s in fb ""; do
      p="$work/$v-$m${s:+-$s}"
      ident[$m$s]="$(same "$p.pdmodel" "$fx/$m.pdmodel")/$(same "$p.pdiparams" "$fx/$m.pdiparams")"
      cases+=("$p" "$fx/$m" "$fx/$m.input.npy" "$fx/$m.output.npy")
    done
  done
  if ! "$bin" verify "$zip" >/dev/null; then "$bin" verify "$zip" || true; failed=1; fi
  set +e
  out="$("$py" tests/paddle/run_exported.py --tol "$tol" "${cases[@]}" 2>"$work/stderr-$v")"
  rc=$?
  set -e
  echo "$out"
  if [[ $rc -ne 0 ]]; then failed=1; sed -n '1,20p' "$work/stderr-$v" >&2; fi
  for m in "${models[@]}"; do
    for s in "" fb; do
      p="$work/$v-$m${s:+-$s}"
      line="$(grep -F "$p " <<<"$out" || true)"
      diff="$(sed -n 's/.*max_abs_diff=\([^ ]*\).*/\1/p' <<<"$line")"
      rel="$(sed -n 's/.*recorded_rel=\([^ ]*\).*/\1/p' <<<"$line")"
      paddle_v="$(sed -n 's/.*paddle=\([^ ]*\).*/\1/p' <<<"$line")"
      verdict=FAIL
      [[ "$line" == *" ok" ]] && verdict=pass
      [[ "${ident[$m$s]}" == yes/yes ]] || { verdict=FAIL; failed=1; }
      [[ "$verdict" == pass ]] || failed=1
      path="pdmodel → graph.fb → pdmodel"
      [[ -n "$s" ]] && path="pdmodel → graph.fb (export converts)"
      rows+=("| $v | ${paddle_v:-?} | $m | $path | ${ident[$m$s]} | ${diff:-n/a} | ${rel:-n/a} | $verdict |")
    done
  done
  unset ident
done

{
  echo "# Paddle acceptance run"
  echo
  echo "Written by \`tests/paddle/acceptance.sh\` (not part of \`cargo test\`)."
  echo
  echo "- date: $(date -u +%Y-%m-%dT%H:%M:%SZ)"
  echo "- modelzip: $(git rev-parse --short HEAD)$(git diff --quiet HEAD -- src tests ':!tests/paddle/last_run.md' || echo ' (+ uncommitted changes)'), release build"
  echo "- Paddle versions: ${versions[*]:-none}"
  echo "- checks: each export's output equals the original fixture's, run in the same Paddle process with one thread, bit for bit (max abs diff 0); the original's is within $tol x max|recorded| of the committed \`*.output.npy\` (computed when the fixture was made, maybe on another CPU)"
  echo "- steps per model: \`import-paddle\` → \`convert --to flatbuffers\` → \`export-paddle\` (from graph.fb) → \`convert --to programdesc\` → \`export-paddle\`; each export run with \`paddle.static.load_inference_model\` on the CPU (\`tests/paddle/run_exported.py\`)"
  echo "- result: $([[ $failed -eq 0 ]] && echo PASS || echo FAIL)"
  echo
  echo "| fixture | Paddle | model | graph path | identical .pdmodel/.pdiparams | export vs original, max abs diff | original vs recorded, rel | result |"
  echo "|---|---|---|---|---|---|---|---|"
  printf '%s\n' "${rows[@]}"
} > tests/paddle/last_run.md

cat tests/paddle/last_run.md
exit $failed
