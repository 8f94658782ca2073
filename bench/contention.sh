#!/usr/bin/env bash
# contention.sh MODEL [KVINFER...] — decode and 16-stream serving with -t 1 and -t 2,
# on a quiet machine and with one core kept busy by a spinning child process
# (issue 17: a thread pool that survives a busy CPU). Each KVINFER binary (default
# build/kvinfer) is measured in turn, variants alternated, REPS times (default 3);
# prints one line per measurement: binary, load, threads, decode tok/s (kvinfer
# bench tg64, median of its repetitions), serving output tok/s (kvinfer loadgen,
# 16 streams x 32 tokens).
# Not a test: it measures a shared machine; compare medians of the lines.
set -euo pipefail
model=${1:?usage: bench/contention.sh MODEL [KVINFER...]}
shift
bins=("$@")
[ ${#bins[@]} -eq 0 ] && bins=(build/kvinfer)
reps=${REPS:-3}
port=${PORT:-18231}

spin() { while :; do :; done; }

decode() { # BIN THREADS
  "$1" bench -m "$model" -p 0 -n 64 -r 3 -t "$2" --no-hw --json |
    python3 -c 'import json,sys; j=json.load(sys.stdin); r=[t for t in j["results"] if t.get("n_gen",0)>0][0]; print("%.1f" % r["avg_ts"])'
}

serve() { # BIN THREADS
  "$1" serve -m "$model" -t "$2" --port "$port" --parallel 16 -c 256 --quiet >/dev/null 2>&1 &
  local pid=$!
  for _ in $(seq 50); do curl -s "http://127.0.0.1:$port/health" | grep -q ok && break; sleep 0.2; done
  "$1" loadgen --url "http://127.0.0.1:$port" --concurrency 16 --requests 32 --prompt-len 16 --gen-len 32 --json |
    python3 -c 'import json,sys; print("%.1f" % json.load(sys.stdin)["output_throughput"])'
  kill "$pid"; wait "$pid" 2>/dev/null || true
}

echo "binary load threads decode_tok_s serve16_tok_s"
for rep in $(seq "$reps"); do
  for load in quiet busy; do
    hog=""
    if [ "$load" = busy ]; then spin & hog=$!; fi
    for bin in "${bins[@]}"; do
      for t in 1 2; do
        echo "$bin $load $t $(decode "$bin" "$t") $(serve "$bin" "$t")"
      done
    done
    if [ -n "$hog" ]; then kill "$hog"; wait "$hog" 2>/dev/null || true; fi
  done
done
