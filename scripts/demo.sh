#!/usr/bin/env bash
# Builds kvinfer (optimised) and generates text. Arguments go to `kvinfer run`;
# with none, it generates from ../shared/models/stories260K.gguf.
set -euo pipefail
cd "$(dirname "$0")/.."
KVI_NO_WEB=1 scripts/deps.sh   # the browser test's packages are for scripts/test.sh
cmake -S . -B build -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build build -j"$(nproc)" >/dev/null
if [ $# -eq 0 ]; then
  set -- -m ../shared/models/stories260K.gguf -p "Once upon a time" -n 128
fi
exec ./build/kvinfer run "$@"
