// Reference ids for test_tokref: transformers.js's tokenizer (@lenml/tokenizers, an
// implementation independent of kvinfer) encodes every string of strings.json with
// each tokenizer.json named on the command line (the folder of tokenizer.json and
// tokenizer_config.json), add_special_tokens on (its default). Prints one JSON
// object: { "<folder>": [[ids of string 0], [ids of string 1], ...], ... }.
import { readFileSync } from "node:fs";
import { TokenizerLoader } from "@lenml/tokenizers";

const [stringsPath, ...dirs] = process.argv.slice(2);
const strings = JSON.parse(readFileSync(stringsPath, "utf8"));
const out = {};
for (const dir of dirs) {
  const tok = TokenizerLoader.fromPreTrained({
    tokenizerJSON: JSON.parse(readFileSync(`${dir}/tokenizer.json`, "utf8")),
    tokenizerConfig: JSON.parse(readFileSync(`${dir}/tokenizer_config.json`, "utf8")),
  });
  out[dir] = strings.map((s) => Array.from(tok.encode(s)));
}
process.stdout.write(JSON.stringify(out) + "\n");
