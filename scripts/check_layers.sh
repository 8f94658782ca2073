#!/usr/bin/env bash
# Checks that dependencies point one way: every `#include "..."` in the library,
# the server, the CLI and the benchmarks names a header of its own layer or of a
# lower one, and no header named *_int.h is included from outside its layer.
# The layers and their order are data: scripts/layers.txt.
#
#   scripts/check_layers.sh [ROOT]     check the tree at ROOT (default: the repository)
#   scripts/check_layers.sh --self-test
#                                      check the repository, then plant violations in
#                                      scratch copies and require the check to fail
#
# Exit 0 when clean; 1 with one line per violation on stderr.
set -euo pipefail

here="$(cd "$(dirname "$0")" && pwd)"
table="$here/layers.txt"

# layer_of ROOT-RELATIVE-PATH: sets LAYER_NAME and LAYER_RANK from the longest
# matching folder (or file) of the table; both empty when none holds the path.
declare -a L_NAME=() L_RANK=() L_DIR=()
while read -r name rank dir; do
  [[ -z "$name" || "$name" == \#* ]] && continue
  L_NAME+=("$name"); L_RANK+=("$rank"); L_DIR+=("$dir")
done <"$table"

layer_of() {
  local path="$1" best=-1 best_len=-1 i d
  for i in "${!L_DIR[@]}"; do
    d="${L_DIR[$i]}"
    if [[ "$path" == "$d" || "$path" == "$d"/* ]] && ((${#d} > best_len)); then
      best=$i; best_len=${#d}
    fi
  done
  LAYER_NAME=""; LAYER_RANK=""
  if ((best >= 0)); then LAYER_NAME="${L_NAME[$best]}"; LAYER_RANK="${L_RANK[$best]}"; fi
}

# resolve ROOT FILE INCLUDE: sets TARGET to the root-relative path the compiler
# would open (the includer's folder, then src/, include/ and the root; "a/../b"
# folded), empty when none exists.
resolve() {
  local root="$1" file="$2" inc="$3" cand
  TARGET=""
  for cand in "${file%/*}/$inc" "src/$inc" "include/$inc" "$inc"; do
    if [[ -f "$root/$cand" ]]; then
      while [[ "$cand" =~ (^|/)[^/.][^/]*/\.\./ ]]; do cand="${cand/${BASH_REMATCH[0]}/${BASH_REMATCH[1]}}"; done
      TARGET="$cand"
      return 0
    fi
  done
}

check_tree() {
  local root="$1" bad=0 file inc fn fr tn tr
  local -a files
  mapfile -t files < <(cd "$root" && find src include server cli bench -name '*.[ch]' 2>/dev/null | sort)
  for file in "${files[@]}"; do
    layer_of "$file"
    fn="$LAYER_NAME"; fr="$LAYER_RANK"
    [[ -z "$fn" ]] && continue
    while IFS= read -r inc; do
      resolve "$root" "$file" "$inc"
      if [[ -z "$TARGET" ]]; then
        echo "$file: #include \"$inc\": no such header in the tree" >&2; bad=1; continue
      fi
      layer_of "$TARGET"
      tn="$LAYER_NAME"; tr="$LAYER_RANK"
      if [[ -z "$tn" ]]; then
        echo "$file: #include \"$inc\": $TARGET belongs to no layer" >&2; bad=1; continue
      fi
      if [[ "$fn" != "$tn" ]] && ((tr >= fr)); then
        echo "$file: #include \"$inc\": layer $fn (rank $fr) may not include layer $tn (rank $tr)" >&2; bad=1
      fi
      if [[ "$TARGET" == *_int.h && "$fn" != "$tn" ]]; then
        echo "$file: #include \"$inc\": $TARGET is private to layer $tn" >&2; bad=1
      fi
    done < <(sed -n 's/^[[:space:]]*#[[:space:]]*include[[:space:]]*"\([^"]*\)".*/\1/p' "$root/$file")
  done
  return $bad
}

self_test() {
  local repo="$1" scratch rc
  check_tree "$repo" || { echo "check_layers: the tree itself is not clean" >&2; return 1; }
  scratch="$(mktemp -d)"
  trap 'rm -rf "$scratch"' RETURN
  # plant NAME FILE LINE: a copy of the tree with LINE added to FILE must fail
  plant() {
    local name="$1" file="$2" line="$3" copy="$scratch/$1"
    mkdir -p "$copy"
    (cd "$repo" && cp -r src include server cli bench "$copy"/)
    printf '%s\n' "$line" >>"$copy/$file"
    if check_tree "$copy" 2>"$scratch/$name.err"; then
      echo "check_layers self-test: planted '$line' in $file was not caught" >&2
      return 1
    fi
    echo "self-test: $name caught: $(head -n1 "$scratch/$name.err")"
  }
  plant upward src/kernels/kernels.c '#include "model/model.h"' || return 1
  plant api_below src/formats/gguf.c '#include "kvinfer.h"' || return 1
  plant sibling src/tools/synth.c '#include "sampling/sampler_int.h"' || return 1
  plant private src/sched/scheduler.c '#include "engine/engine_int.h"' || return 1
  plant server_cli server/server_http.c '#include "cli/cli.h"' || return 1
  plant missing src/base/error.c '#include "base/no_such_header.h"' || return 1
  echo "check_layers self-test: clean tree passes, 6 planted violations fail"
}

repo="$(cd "$here/.." && pwd)"
if [[ "${1:-}" == "--self-test" ]]; then
  self_test "$repo"
else
  root="$(cd "${1:-$repo}" && pwd)"
  if check_tree "$root"; then echo "check_layers: clean"; else exit 1; fi
fi
