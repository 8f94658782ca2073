// The transformers.js tokenizer (@lenml/tokenizers) of a folder holding
// tokenizer.json and tokenizer_config.json, for ref_ids.mjs and ref_wpm.mjs.
import { readFileSync } from "node:fs";
import { TokenizerLoader } from "@lenml/tokenizers";

export function readJSON(path) {
  return JSON.parse(readFileSync(path, "utf8"));
}

export function loadTokenizer(dir) {
  return TokenizerLoader.fromPreTrained({
    tokenizerJSON: readJSON(`${dir}/tokenizer.json`),
    tokenizerConfig: readJSON(`${dir}/tokenizer_config.json`),
  });
}
