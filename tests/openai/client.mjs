// client.mjs BASE_URL — the official OpenAI Node client (npm "openai") against a
// running `kvinfer serve` (tests/test_openai_client.c starts one with a chat
// template that writes Hermes/Qwen tool calls). Every answer is checked with
// ajv against the schema it had to follow:
//   1. tools + tool_choice "required": message.tool_calls, finish_reason
//      "tool_calls", arguments that validate against the tool's parameters;
//   2. the same streamed, accumulated by the client's own stream helper
//      (chat.completions.stream → finalChatCompletion);
//   3. tool_choice naming one function: exactly that function is called;
//   4. response_format json_schema: content that parses and validates, plain
//      and streamed;
//   5. a bad request (tool_choice naming no tool) raises the client's
//      BadRequestError with status 400.
// Prints one line per check; exits 1 at the first failure.
import OpenAI from 'openai';
import Ajv from 'ajv';

const base = process.argv[2];
const client = new OpenAI({ baseURL: `${base}/v1`, apiKey: 'none', maxRetries: 0, timeout: 300000 });
const ajv = new Ajv({ strict: false, allErrors: true });

const weatherParams = {
  type: 'object',
  properties: {
    city: { type: 'string', minLength: 1, maxLength: 12 },
    unit: { type: 'string', enum: ['celsius', 'fahrenheit'] },
    hourly: { type: 'boolean' },
  },
  required: ['city', 'unit', 'hourly'],
  additionalProperties: false,
};
const timeParams = {
  type: 'object',
  properties: { zone: { type: 'string', enum: ['UTC', 'Europe/Paris', 'Asia/Tokyo'] } },
  required: ['zone'],
  additionalProperties: false,
};
const tools = [
  { type: 'function', function: { name: 'get_weather', description: 'The weather of a city', parameters: weatherParams } },
  { type: 'function', function: { name: 'get_time', description: 'The time in a zone', parameters: timeParams } },
];
const schemaOf = { get_weather: weatherParams, get_time: timeParams };
const messages = [{ role: 'user', content: 'What is the weather in Paris?' }];
const common = { model: 'stories260K', messages, max_tokens: 200, temperature: 0, seed: 7 };

function fail(what, detail) {
  console.log(`FAIL ${what}: ${detail}`);
  process.exit(1);
}

function checkCalls(what, completion, onlyName) {
  const choice = completion.choices[0];
  if (choice.finish_reason !== 'tool_calls') fail(what, `finish_reason ${choice.finish_reason}`);
  const calls = choice.message.tool_calls;
  if (!Array.isArray(calls) || calls.length < 1) fail(what, `no tool_calls: ${JSON.stringify(choice.message)}`);
  for (const call of calls) {
    if (call.type !== 'function' || typeof call.id !== 'string' || !call.id) fail(what, `call shape ${JSON.stringify(call)}`);
    const name = call.function.name;
    if (!schemaOf[name]) fail(what, `unknown function ${name}`);
    if (onlyName && name !== onlyName) fail(what, `called ${name}, not ${onlyName}`);
    let args;
    try {
      args = JSON.parse(call.function.arguments);
    } catch (e) {
      fail(what, `arguments are not JSON: ${call.function.arguments}`);
    }
    const validate = ajv.compile(schemaOf[name]);
    if (!validate(args)) fail(what, `arguments ${call.function.arguments}: ${ajv.errorsText(validate.errors)}`);
    console.log(`ok ${what}: ${name}(${call.function.arguments})`);
  }
}

function checkJson(what, text, schema) {
  let v;
  try {
    v = JSON.parse(text);
  } catch (e) {
    fail(what, `content is not JSON: ${text}`);
  }
  const validate = ajv.compile(schema);
  if (!validate(v)) fail(what, `${text}: ${ajv.errorsText(validate.errors)}`);
  console.log(`ok ${what}: ${text}`);
}

// 1. required, plain
const c1 = await client.chat.completions.create({ ...common, tools, tool_choice: 'required', parallel_tool_calls: false });
checkCalls('required', c1);

// 2. required, streamed through the client's accumulating helper
const stream = client.chat.completions.stream({ ...common, tools, tool_choice: 'required', parallel_tool_calls: false });
let deltas = 0;
stream.on('chunk', () => deltas++);
const c2 = await stream.finalChatCompletion();
checkCalls(`required, streamed (${deltas} chunks)`, c2);
if (JSON.stringify(c2.choices[0].message.tool_calls.map((c) => c.function))
    !== JSON.stringify(c1.choices[0].message.tool_calls.map((c) => c.function)))
  fail('streamed == plain', 'the streamed calls differ from the plain ones');
console.log('ok streamed calls == plain calls');

// 3. a named function (one call: this tiny model would repeat parallel calls to the token limit)
const c3 = await client.chat.completions.create({
  ...common, tools, tool_choice: { type: 'function', function: { name: 'get_time' } }, parallel_tool_calls: false,
});
checkCalls('named get_time', c3, 'get_time');

// 4. response_format json_schema, plain and streamed
const answer = {
  type: 'object',
  properties: {
    title: { type: 'string', maxLength: 20 },
    mood: { type: 'string', enum: ['happy', 'sad'] },
    stars: { type: 'array', items: { type: 'integer', enum: [1, 2, 3, 4, 5] }, minItems: 1, maxItems: 3 },
  },
  required: ['title', 'mood', 'stars'],
  additionalProperties: false,
};
const rf = { type: 'json_schema', json_schema: { name: 'story', schema: answer, strict: true } };
const c4 = await client.chat.completions.create({ ...common, response_format: rf });
if (c4.choices[0].finish_reason !== 'stop') fail('json_schema', `finish_reason ${c4.choices[0].finish_reason}`);
checkJson('json_schema', c4.choices[0].message.content, answer);
let text = '';
const s4 = await client.chat.completions.create({ ...common, response_format: rf, stream: true });
for await (const chunk of s4) text += chunk.choices[0]?.delta?.content ?? '';
checkJson('json_schema, streamed', text, answer);

// 5. the client's error type for a 400
try {
  await client.chat.completions.create({ ...common, tools, tool_choice: { type: 'function', function: { name: 'nope' } } });
  fail('400', 'a tool_choice naming no tool was accepted');
} catch (e) {
  if (!(e instanceof OpenAI.BadRequestError) || e.status !== 400) fail('400', `${e}`);
  console.log(`ok 400: ${e.message}`);
}
console.log('all ok');
