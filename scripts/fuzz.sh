#!/usr/bin/env bash
# fuzz.sh TARGET|all SECONDS — builds the libFuzzer targets (build-fuzz: CC=clang,
# -DKVI_FUZZ=ON) and runs one target, or every one in turn, for SECONDS each on a
# copy of its seed corpus (tests/fuzz/corpus/<target>/) in a scratch folder: new
# inputs, logs and crash artifacts stay there, never in the repository.
# Exits non-zero when any run reports a crash, a leak, a timeout (-timeout=10) or
# an out-of-memory (-rss_limit_mb=2048); the failing input is named in the output
# (copy it into tests/fuzz/corpus/<target>/ as a regression input once fixed).
# Environment: FUZZ_SCRATCH (default: a fresh mktemp -d), FUZZ_BUILD (build-fuzz),
# FUZZ_JOBS (build parallelism, 2).
set -euo pipefail

if [ $# -ne 2 ] || ! [[ $2 =~ ^[0-9]+$ ]]; then
    echo "usage: scripts/fuzz.sh TARGET|all SECONDS   (targets: tests/fuzz/fuzz_*.c)" >&2
    exit 2
fi
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
all=$(ls tests/fuzz/fuzz_*.c | sed -e 's|.*/fuzz_||' -e 's|\.c$||' | grep -v '^util$')
if [ "$1" = all ]; then
    targets=$all
elif grep -qx "$1" <<<"$all"; then
    targets=$1
else
    echo "fuzz.sh: unknown target '$1' (one of: $(echo $all))" >&2
    exit 2
fi
seconds=$2
if ! command -v clang >/dev/null; then
    echo "fuzz.sh: clang not found (Debian: apt-get install clang)" >&2
    exit 2
fi

build=${FUZZ_BUILD:-build-fuzz}
CC=clang cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=Release -DKVI_FUZZ=ON >/dev/null
cmake --build "$build" -j "${FUZZ_JOBS:-2}" --target $(sed 's/^/fuzz_/' <<<"$targets") >/dev/null

scratch=${FUZZ_SCRATCH:-$(mktemp -d -t kvi-fuzz.XXXXXX)}
echo "fuzz.sh: scratch folder $scratch"
failed=0
for t in $targets; do
    dir=$scratch/$t
    mkdir -p "$dir/corpus" "$dir/artifacts"
    cp -r tests/fuzz/corpus/"$t"/. "$dir/corpus/"
    dict=()
    [ -f tests/fuzz/"$t".dict ] && dict=(-dict=tests/fuzz/"$t".dict)
    rc=0
    "$build/fuzz_$t" "$dir/corpus" "${dict[@]}" -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 \
        -print_final_stats=1 -artifact_prefix="$dir/artifacts/" >"$dir/log" 2>&1 || rc=$?
    runs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$dir/log")
    speed=$(sed -n 's/^stat::average_exec_per_sec: *//p' "$dir/log")
    cov=$(grep -o 'cov: [0-9]*' "$dir/log" | tail -1 | cut -d' ' -f2)
    if [ $rc -eq 0 ]; then
        echo "fuzz_$t: ok, ${seconds} s, ${runs:-?} runs, ${speed:-?} exec/s, ${cov:-?} edges"
    else
        failed=1
        echo "fuzz_$t: FAILED (exit $rc) after ${runs:-?} runs; log $dir/log"
        grep -E '^==[0-9]+==ERROR|SUMMARY|^artifact_prefix|Test unit written|ALARM|out-of-memory|detected memory leaks' \
            "$dir/log" | head -8 | sed 's/^/    /'
    fi
done
exit $failed
