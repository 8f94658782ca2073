// Reference ids for test_tokref_wpm: transformers.js's tokenizer (@lenml/tokenizers)
// on the WordPiece tokenizer.json folders named on the command line. For every
// string of the strings file: its ids with [CLS] / [SEP] (add_special_tokens on),
// the ids and token types of the pair (string i, string i+1) as a cross-encoder
// gets them, and the text decoded back from the ids without special tokens.
// Prints { "<folder>": { "ids": [[...]], "pair_ids": [[...]], "pair_types": [[...]],
// "decoded": ["..."] }, ... }.
import { loadTokenizer, readJSON } from "./load.mjs";

const [stringsPath, ...dirs] = process.argv.slice(2);
const strings = readJSON(stringsPath);
const out = {};
for (const dir of dirs) {
  const tok = loadTokenizer(dir);
  const ids = strings.map((s) => Array.from(tok.encode(s)));
  const pairs = strings.map((s, i) =>
    tok._call(s, {
      text_pair: strings[(i + 1) % strings.length],
      return_token_type_ids: true,
      return_tensor: false,
    }),
  );
  out[dir] = {
    ids,
    pair_ids: pairs.map((p) => Array.from(p.input_ids)),
    pair_types: pairs.map((p) => Array.from(p.token_type_ids)),
    decoded: ids.map((v) => tok.decode(v, { skip_special_tokens: true })),
  };
}
process.stdout.write(JSON.stringify(out) + "\n");
