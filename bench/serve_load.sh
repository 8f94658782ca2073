#!/bin/sh
# bench/serve_load.sh — the serving measurements of bench/RESULTS-server.md:
# `kvinfer serve -t 2` on a synthetic stories110M-shaped Q8_0 model driven by
# `kvinfer loadgen` (streamed completions of 128 tokens) at 1, 4, 16 and 64
# concurrent streams; a 512-token shared prefix with and without the prefix
# cache; the worst inter-token gap of a running stream while a ~4k-token prompt
# arrives, with chunked prefill (--batch-tokens 256) and without (8192).
# Usage: bench/serve_load.sh [BUILD_DIR]   (default build); writes JSON lines to
# stdout. Models are written to /tmp by `kvinfer synth` when missing.
set -eu
B=${1:-build}/kvinfer
M=/tmp/s110m-q8_0.gguf
M8=/tmp/s110m-q8_0-ctx8k.gguf
[ -f $M ] || $B synth --preset stories110M --type q8_0 -o $M >&2
[ -f $M8 ] || $B synth --preset stories110M --type q8_0 --ctx 8192 -o $M8 >&2
OUT=$(mktemp)
start() {   # start MODEL ARGS...: sets PID and PORT
    m=$1; shift
    $B serve -m $m --port 0 -t 2 --quiet "$@" >$OUT 2>/dev/null &
    PID=$!
    while ! grep -q ready $OUT; do sleep 0.2; done
    PORT=$(grep -o '127.0.0.1:[0-9]*' $OUT | head -1 | cut -d: -f2)
}
stop() { kill $PID; wait $PID || true; }
lg() { $B loadgen --url http://127.0.0.1:$PORT --json --timeout 300 "$@"; }

start $M -c 1024 --parallel 64
lg --concurrency 1 --requests 2 --gen-len 16 >/dev/null    # warm-up
for c in 1 4 16 64; do
    n=$c; [ $c -lt 4 ] && n=4
    echo "streams $c: $(lg --concurrency $c --requests $n --prompt-len 32 --gen-len 128)"
done
for p in 0 512; do
    echo "shared-prefix $p: $(lg --concurrency 16 --requests 32 --prompt-len 576 --shared-prefix $p --gen-len 128 --seed 3)"
done
stop
start $M -c 1024 --parallel 64 --no-prefix-cache
echo "shared-prefix 512 no-prefix-cache: $(lg --concurrency 16 --requests 32 --prompt-len 576 --shared-prefix 512 --gen-len 128 --seed 3)"
stop

for bt in 8192 256; do
    start $M8 -c 8192 --parallel 4 --batch-tokens $bt
    # the stream must still run when the long prompt arrives (~300 tok/s alone)
    lg --concurrency 1 --requests 1 --prompt-len 16 --gen-len 2000 >$OUT.stream &
    L=$!
    sleep 1
    lg --concurrency 1 --requests 1 --prompt-len 4000 --gen-len 1 --seed 9 >$OUT.long
    wait $L
    echo "batch-tokens $bt stream: $(cat $OUT.stream)"
    echo "batch-tokens $bt long prompt: $(cat $OUT.long)"
    stop
done
rm -f $OUT $OUT.stream $OUT.long
