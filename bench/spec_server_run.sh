#!/bin/sh
# usage: run.sh MODE(plain|ngram) CONC REQS GEN
BIN=${KVI_BIN:-build/kvinfer}
MODE=$1; C=$2; N=$3; G=$4
EXTRA=""
[ "$MODE" = ngram ] && EXTRA="--spec ngram"
$BIN serve -m /tmp/s110m-q8_0.gguf --port 0 -t 2 --parallel 16 -c 512 --quiet $EXTRA > ${TMPDIR:-/tmp}/srv.out 2>${TMPDIR:-/tmp}/srv.err &
PID=$!
for i in $(seq 100); do grep -q "kvinfer: ready" ${TMPDIR:-/tmp}/srv.out 2>/dev/null && break; sleep 0.2; done
PORT=$(grep -o '127.0.0.1:[0-9]*' ${TMPDIR:-/tmp}/srv.out | head -1 | cut -d: -f2)
OUT=$($BIN loadgen --url http://127.0.0.1:$PORT --concurrency $C --requests $N --prompt-len 32 --gen-len $G --json 2>/dev/null)
MET=$(curl -s http://127.0.0.1:$PORT/metrics 2>/dev/null | grep -E "^kvinfer_spec_(drafted|accepted)_total|^kvinfer_spec_cost_row|^kvinfer_steps_total" | tr '\n' ' ')
kill $PID; wait $PID 2>/dev/null
TPS=$(echo "$OUT" | python3 -c 'import json,sys; j=json.load(sys.stdin); print(j.get("output_throughput", j.get("output_tokens_per_s", "?")))' 2>/dev/null)
echo "$MODE c=$C tok/s=$TPS $MET"
echo "$OUT" > ${TMPDIR:-/tmp}/last.json
