#!/usr/bin/env bash
# Runs every cargo-fuzz target in fuzz/fuzz_targets/ for SECONDS_PER_TARGET seconds
# (default 60) in turn, one libFuzzer process at a time, then prints a summary
# table. Exits non-zero if any target crashed (or leaked, hung, ran out of memory)
# or failed to build. Needs cargo-fuzz and a nightly toolchain (see fuzz/README.md);
# never part of `cargo test` or CI.
#
#   scripts/fuzz.sh [SECONDS_PER_TARGET]
#
# Environment:
#   FUZZ_TARGETS    space-separated subset of targets (default: all)
#   FUZZ_TOOLCHAIN  rustup toolchain (default: nightly)
#   FUZZ_MAX_LEN    libFuzzer -max_len (default: max(4096, 2 × largest seed))
#   FUZZ_ARGS       extra libFuzzer flags, e.g. "-only_ascii=1"
#
# A target's dictionary fuzz/dict/<target>.dict, if present, is passed as -dict=.
set -euo pipefail

secs=${1:-60}
if ! [[ $secs =~ ^[0-9]+$ ]] || [ "$secs" -eq 0 ]; then
    echo "usage: $0 [SECONDS_PER_TARGET]" >&2
    exit 2
fi
toolchain=${FUZZ_TOOLCHAIN:-nightly}
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"

if ! cargo "+$toolchain" fuzz --version >/dev/null 2>&1; then
    echo "error: needs cargo-fuzz on toolchain '$toolchain':" >&2
    echo "  rustup toolchain install nightly && cargo install cargo-fuzz" >&2
    exit 2
fi

if [ -n "${FUZZ_TARGETS:-}" ]; then
    read -r -a targets <<<"$FUZZ_TARGETS"
else
    targets=()
    for f in fuzz/fuzz_targets/*.rs; do
        targets+=("$(basename "$f" .rs)")
    done
fi

logs=fuzz/logs
mkdir -p "$logs"
# Debug assertions on: integer overflow and debug_assert! become findings.
build_flags=(--debug-assertions)

echo "building ${#targets[@]} fuzz targets with +$toolchain ..."
for t in "${targets[@]}"; do
    cargo "+$toolchain" fuzz build "${build_flags[@]}" "$t"
done

rows=()
failed=0
for t in "${targets[@]}"; do
    corpus=fuzz/corpus/$t
    artifacts=fuzz/artifacts/$t
    mkdir -p "$corpus" "$artifacts"
    max_len=${FUZZ_MAX_LEN:-}
    if [ -z "$max_len" ]; then
        largest=$(find "$corpus" -type f -printf '%s\n' | sort -n | tail -1)
        max_len=$(( 2 * ${largest:-0} ))
        [ "$max_len" -ge 4096 ] || max_len=4096
    fi
    dict=()
    [ -f "fuzz/dict/$t.dict" ] && dict=(-dict="$root/fuzz/dict/$t.dict")
    stamp=$(mktemp)
    log=$logs/$t.log
    echo "== $t: ${secs}s, max_len=$max_len, log $log"
    start=$(date +%s)
    status=0
    # Run from the log directory: with -jobs, libFuzzer writes fuzz-0.log to its cwd.
    # shellcheck disable=SC2086 # FUZZ_ARGS is split on purpose
    (cd "$logs" && cargo "+$toolchain" fuzz run --fuzz-dir "$root/fuzz" "${build_flags[@]}" \
        "$t" "$root/$corpus" -- \
        -max_total_time="$secs" -jobs=1 -workers=1 -rss_limit_mb=2048 \
        -max_len="$max_len" -timeout=10 -print_final_stats=1 "${dict[@]}" ${FUZZ_ARGS:-} \
        >"$t.log" 2>&1) || status=$?
    rm -f "$logs/fuzz-0.log" # a copy of what libFuzzer already printed to $log
    elapsed=$(( $(date +%s) - start ))
    execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -1)
    new=$(find "$artifacts" -type f -newer "$stamp" \
        \( -name 'crash-*' -o -name 'leak-*' -o -name 'timeout-*' -o -name 'oom-*' \))
    rm -f "$stamp"
    crashes=$(printf '%s' "$new" | grep -c . || true)
    if [ "$status" -ne 0 ] && [ "$crashes" -eq 0 ]; then
        echo "   $t exited with status $status without an artifact; see $log" >&2
        crashes="err"
        failed=1
    elif [ "$crashes" -ne 0 ]; then
        failed=1
        printf '   artifact: %s\n' $new
        grep -m1 -E "panicked at|ERROR: libFuzzer|SUMMARY" "$log" | sed 's/^/   /' || true
    fi
    rows+=("$t $elapsed ${execs:-?} $crashes")
done

echo
printf '%-24s %8s %14s %8s\n' target seconds executions crashes
for r in "${rows[@]}"; do
    # shellcheck disable=SC2086
    printf '%-24s %8s %14s %8s\n' $r
done
if [ "$failed" -ne 0 ]; then
    echo
    echo "FAILED: crash artifacts are in fuzz/artifacts/<target>/; reproduce with"
    echo "  cargo +$toolchain fuzz run <target> fuzz/artifacts/<target>/<file>"
    exit 1
fi
