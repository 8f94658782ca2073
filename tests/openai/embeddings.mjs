// embeddings.mjs BASE_URL — the official OpenAI Node client's embeddings.create
// against `kvinfer serve --embeddings` on the synthetic qwen3-embed f32 model of
// ../shared/golden/embed (tests/test_openai_client.c built as
// test_openai_embeddings starts it and sets KVI_SHARED_DIR). Checks, against
// llama.cpp's goldens (qwen3-embed-f32.embed.json):
//   1. the client's default request (it asks for base64 and decodes it): every
//      text's vector within 1 - cos <= 1e-5 of the golden, usage.prompt_tokens
//      the golden's token count;
//   2. encoding_format "float": the same vectors;
//   3. token-id inputs (a list of lists);
//   4. dimensions 32: 32 values of unit length, the golden raw vector's first 32
//      renormalised here (cos >= 0.99999);
//   5. dimensions beyond the model's 128 raises BadRequestError (400).
// Prints one line per check; exits 1 at the first failure.
import OpenAI from 'openai';
import { readFileSync } from 'node:fs';

const base = process.argv[2];
const shared = process.env.KVI_SHARED_DIR || '../../../shared';
const golden = JSON.parse(readFileSync(`${shared}/golden/embed/qwen3-embed-f32.embed.json`, 'utf8'));
const client = new OpenAI({ baseURL: `${base}/v1`, apiKey: 'none', maxRetries: 0, timeout: 300000 });

function fail(what, detail) {
  console.log(`FAIL ${what}: ${detail}`);
  process.exit(1);
}

function cosine(a, b) {
  let ab = 0, aa = 0, bb = 0;
  for (let i = 0; i < a.length; i++) { ab += a[i] * b[i]; aa += a[i] * a[i]; bb += b[i] * b[i]; }
  return ab / Math.sqrt(aa * bb);
}

const texts = golden.inputs.map((x) => x.text);
const nTokens = golden.inputs.reduce((s, x) => s + x.tokens.length, 0);

function checkAll(what, res) {
  if (res.data.length !== golden.inputs.length) fail(what, `${res.data.length} vectors`);
  let worst = 0;
  res.data.forEach((d, i) => {
    const e = Array.from(d.embedding);
    if (d.index !== i || e.length !== golden.n_embd_out) fail(what, `index ${d.index}, length ${e.length}`);
    const gap = 1 - cosine(e, golden.inputs[i].embedding);
    if (!(gap <= 1e-5)) fail(what, `input ${i}: 1 - cos ${gap}`);
    worst = Math.max(worst, gap);
  });
  if (res.usage.prompt_tokens !== nTokens || res.usage.total_tokens !== nTokens)
    fail(what, `usage ${JSON.stringify(res.usage)}, golden ${nTokens} tokens`);
  console.log(`ok ${what}: ${res.data.length} vectors, worst 1 - cos ${worst.toExponential(2)}`);
}

checkAll('default (base64)', await client.embeddings.create({ model: 'qwen3-embed', input: texts, user: 'u' }));
checkAll('float', await client.embeddings.create({ model: 'qwen3-embed', input: texts, encoding_format: 'float' }));
checkAll('token ids', await client.embeddings.create({ model: 'x', input: golden.inputs.map((x) => x.tokens) }));

const d32 = await client.embeddings.create({ model: 'x', input: texts[0], dimensions: 32 });
const v = Array.from(d32.data[0].embedding);
const norm = Math.sqrt(v.reduce((s, x) => s + x * x, 0));
const c32 = cosine(v, golden.inputs[0].embedding_raw.slice(0, 32));
if (v.length !== 32 || Math.abs(norm - 1) > 1e-5 || !(c32 >= 0.99999)) fail('dimensions', `${v.length} values, norm ${norm}, cos ${c32}`);
console.log(`ok dimensions 32: norm ${norm.toFixed(6)}, cos ${c32.toFixed(9)}`);

try {
  await client.embeddings.create({ model: 'x', input: 'a', dimensions: 1000 });
  fail('400', 'no error');
} catch (e) {
  if (!(e instanceof OpenAI.BadRequestError) || e.status !== 400) fail('400', `${e}`);
  console.log(`ok 400: ${e.message}`);
}
console.log('all ok');
