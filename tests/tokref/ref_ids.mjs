// Reference ids for test_tokref: transformers.js's tokenizer (@lenml/tokenizers, an
// implementation independent of kvinfer) encodes every string of strings.json with
// each tokenizer.json named on the command line (the folder of tokenizer.json and
// tokenizer_config.json), add_special_tokens on (its default). Prints one JSON
// object: { "<folder>": [[ids of string 0], [ids of string 1], ...], ... }.
import { loadTokenizer, readJSON } from "./load.mjs";

const [stringsPath, ...dirs] = process.argv.slice(2);
const strings = readJSON(stringsPath);
const out = {};
for (const dir of dirs) {
  const tok = loadTokenizer(dir);
  out[dir] = strings.map((s) => Array.from(tok.encode(s)));
}
process.stdout.write(JSON.stringify(out) + "\n");
