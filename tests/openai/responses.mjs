// responses.mjs BASE_URL — the official OpenAI Node client (npm "openai") on
// kvinfer serve's Responses API (test_openai_responses, tests/test_openai_client.c, starts the
// server with a chat template that writes Hermes/Qwen tool calls):
//   1. responses.create, plain: a message item, the SDK's output_text;
//   2. responses.stream with the same seed: the client's own event parsing
//      (finalResponse) and the text deltas give the same text as 1;
//   3. a function tool with tool_choice "required": a function_call item whose
//      arguments validate (ajv) against the tool's parameters; its result sent
//      back with previous_response_id and a function_call_output item gets an
//      answer, and responses.retrieve / responses.delete find the response;
//   4. text.format json_schema: output_text parses and validates (ajv), plain
//      and streamed;
//   5. an unknown previous_response_id raises the client's NotFoundError (404).
// Prints one line per check; exits 1 at the first failure.
import OpenAI from 'openai';
import Ajv from 'ajv';

const base = process.argv[2];
const client = new OpenAI({ baseURL: `${base}/v1`, apiKey: 'none', maxRetries: 0, timeout: 300000 });
const ajv = new Ajv({ strict: false, allErrors: true });
const common = { model: 'stories260K', temperature: 0, seed: 7 };

function fail(what, detail) {
  console.log(`FAIL ${what}: ${detail}`);
  process.exit(1);
}

// The text of a response's message items (output_text is the SDK's, set by create only).
function textOf(rsp) {
  return rsp.output
    .filter((it) => it.type === 'message')
    .flatMap((it) => it.content.filter((c) => c.type === 'output_text').map((c) => c.text))
    .join('');
}

function ok(what) {
  console.log(`ok ${what}`);
}

// 1. plain
const plain = await client.responses.create({ ...common, input: 'Once upon a time', max_output_tokens: 32 });
if (plain.object !== 'response' || !plain.id.startsWith('resp_')) fail('plain', `shape ${JSON.stringify(plain)}`);
const msg = plain.output.find((it) => it.type === 'message');
if (!msg || msg.content[0].type !== 'output_text') fail('plain', `no message item: ${JSON.stringify(plain.output)}`);
if (typeof plain.output_text !== 'string' || plain.output_text.length === 0 || plain.output_text !== msg.content[0].text)
  fail('plain', `output_text '${plain.output_text}'`);
if (plain.usage.output_tokens !== 32 || plain.status !== 'incomplete' || plain.incomplete_details.reason !== 'max_output_tokens')
  fail('plain', `usage/status ${JSON.stringify(plain.usage)} ${plain.status}`);
ok('responses.create plain');

// 2. streamed with the client's helper
const stream = client.responses.stream({ ...common, input: 'Once upon a time', max_output_tokens: 32 });
let deltas = '';
let seq = -1;
stream.on('response.output_text.delta', (e) => {
  deltas += e.delta;
});
for await (const e of stream) {
  if (e.sequence_number !== seq + 1) fail('stream', `sequence_number ${e.sequence_number} after ${seq}`);
  seq = e.sequence_number;
}
const final = await stream.finalResponse();
if (textOf(final) !== plain.output_text) fail('stream', `'${textOf(final)}' vs '${plain.output_text}'`);
if (deltas !== plain.output_text) fail('stream', `deltas '${deltas}'`);
ok('responses.stream = create');

// 3. a function tool round trip
const weatherParams = {
  type: 'object',
  properties: {
    city: { type: 'string', minLength: 1, maxLength: 12 },
    unit: { type: 'string', enum: ['celsius', 'fahrenheit'] },
  },
  required: ['city', 'unit'],
  additionalProperties: false,
};
const tools = [{ type: 'function', name: 'get_weather', description: 'The weather of a city', parameters: weatherParams, strict: true }];
const first = await client.responses.create({
  ...common,
  input: 'What is the weather in Paris?',
  tools,
  tool_choice: 'required',
  parallel_tool_calls: false,
  max_output_tokens: 200,
});
const call = first.output.find((it) => it.type === 'function_call');
if (!call || call.name !== 'get_weather' || !call.call_id) fail('tool', `no call: ${JSON.stringify(first.output)}`);
const validate = ajv.compile(weatherParams);
if (!validate(JSON.parse(call.arguments))) fail('tool', `arguments ${call.arguments}: ${ajv.errorsText(validate.errors)}`);
ok('function_call item with valid arguments');
const second = await client.responses.create({
  ...common,
  previous_response_id: first.id,
  input: [{ type: 'function_call_output', call_id: call.call_id, output: JSON.stringify({ temp: 21, sky: 'clear' }) }],
  tools,
  max_output_tokens: 16,
});
if (second.previous_response_id !== first.id || second.output.length === 0) fail('round trip', JSON.stringify(second));
if (!(second.usage.input_tokens > first.usage.input_tokens)) fail('round trip', 'the conversation did not grow');
if (!(second.usage.input_tokens_details.cached_tokens > 0)) fail('round trip', 'no cached tokens');
ok('previous_response_id round trip');
const got = await client.responses.retrieve(first.id);
if (got.id !== first.id || JSON.stringify(got.output) !== JSON.stringify(first.output)) fail('retrieve', JSON.stringify(got));
const del = await client.responses.delete(second.id);
ok('responses.retrieve / delete');

// 4. json_schema
const personSchema = {
  type: 'object',
  properties: { name: { type: 'string', maxLength: 10 }, age: { type: 'integer' } },
  required: ['name', 'age'],
  additionalProperties: false,
};
const format = { type: 'json_schema', name: 'person', schema: personSchema, strict: true };
const vp = ajv.compile(personSchema);
const js = await client.responses.create({ ...common, input: 'A person, please.', text: { format }, max_output_tokens: 200 });
let parsed;
try {
  parsed = JSON.parse(js.output_text);
} catch (e) {
  fail('json_schema', `not JSON: ${js.output_text}`);
}
if (!vp(parsed)) fail('json_schema', `${js.output_text}: ${ajv.errorsText(vp.errors)}`);
ok('text.format json_schema');
const jss = client.responses.stream({ ...common, input: 'A person, please.', text: { format }, max_output_tokens: 200 });
const jsf = await jss.finalResponse();
if (textOf(jsf) !== js.output_text) fail('json_schema stream', `'${textOf(jsf)}' vs '${js.output_text}'`);
ok('text.format json_schema streamed');

// 5. a 404
try {
  await client.responses.create({ ...common, input: 'x', previous_response_id: 'resp_unknown' });
  fail('404', 'no error');
} catch (e) {
  if (!(e instanceof OpenAI.NotFoundError) || e.status !== 404) fail('404', `${e}`);
}
ok('unknown previous_response_id: NotFoundError');
void del;
console.log('all ok');
