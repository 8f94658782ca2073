// client.mjs BASE_URL — the official Anthropic TypeScript SDK (npm
// "@anthropic-ai/sdk") against a running `kvinfer serve` (tests/test_anthropic_client.c
// starts one with Qwen2.5's chat template, which writes Hermes tool calls):
//   1. messages.create with temperature 0.8 and kvinfer's `seed` (sent as an
//      extra body field): a message with a text block and usage;
//   2. messages.stream with the same body: the SDK's stream helper assembles a
//      final message equal to the non-streamed one (content, stop_reason,
//      usage.output_tokens), and its text events join to the same text;
//   3. a tool-use round trip: tool_choice any → a tool_use block whose input
//      validates (ajv) against the tool's input_schema → a tool_result → a reply;
//   4. messages.countTokens = input_tokens + cache_read_input_tokens of 1.;
//   5. max_tokens missing → the SDK's BadRequestError (status 400,
//      invalid_request_error).
// Prints one line per check; exits 1 at the first failure.
import Anthropic from '@anthropic-ai/sdk';
import Ajv from 'ajv';

const base = process.argv[2];
const client = new Anthropic({ baseURL: base, apiKey: 'sk-anthropic', maxRetries: 0, timeout: 300000 });
const ajv = new Ajv({ strict: false, allErrors: true });

function check(cond, what, detail) {
  if (!cond) {
    console.log(`FAIL ${what}${detail !== undefined ? ': ' + JSON.stringify(detail) : ''}`);
    process.exit(1);
  }
  console.log(`ok ${what}`);
}

const messages = [{ role: 'user', content: [{ type: 'text', text: 'Once upon a time' }] }];
const body = { model: 'stories260K', max_tokens: 48, temperature: 0.8, top_k: 40, seed: 1234, messages };

// 1. create
const plain = await client.messages.create(body);
check(plain.type === 'message' && plain.role === 'assistant' && plain.id.startsWith('msg_'), 'create: a message', plain);
check(plain.content.length === 1 && plain.content[0].type === 'text' && plain.content[0].text.length > 0,
      'create: one text block', plain.content);
check(plain.stop_reason === 'max_tokens' && plain.usage.output_tokens === 48, 'create: stop_reason max_tokens',
      plain.usage);

// 2. stream: the helper's final message equals the plain one
const stream = client.messages.stream(body);
let joined = '';
stream.on('text', (t) => { joined += t; });
const final = await stream.finalMessage();
check(JSON.stringify(final.content) === JSON.stringify(plain.content), 'stream: final content == create content',
      { final: final.content, plain: plain.content });
check(joined === plain.content[0].text, 'stream: text events join to the text');
check(final.stop_reason === plain.stop_reason && final.stop_sequence === plain.stop_sequence &&
      final.usage.output_tokens === plain.usage.output_tokens &&
      final.usage.input_tokens + final.usage.cache_read_input_tokens ===
        plain.usage.input_tokens + plain.usage.cache_read_input_tokens,
      'stream: stop_reason, stop_sequence and usage == create', { final: final.usage, plain: plain.usage });

// 3. tool use round trip
const schema = {
  type: 'object',
  properties: {
    city: { type: 'string', minLength: 1, maxLength: 12 },
    unit: { type: 'string', enum: ['celsius', 'fahrenheit'] },
  },
  required: ['city', 'unit'],
  additionalProperties: false,
};
const tools = [{ name: 'get_weather', description: 'Weather of a city', input_schema: schema }];
const ask = [{ role: 'user', content: 'What is the weather in Paris?' }];
const call = await client.messages.create({
  model: 'stories260K', max_tokens: 200, temperature: 0, tools, messages: ask,
  tool_choice: { type: 'any', disable_parallel_tool_use: true },
});
const use = call.content.find((b) => b.type === 'tool_use');
check(call.stop_reason === 'tool_use' && use && use.name === 'get_weather' && use.id.startsWith('toolu_'),
      'tools: a tool_use block', call);
const validate = ajv.compile(schema);
check(validate(use.input), 'tools: input validates against input_schema', { input: use.input, errors: validate.errors });
const answer = await client.messages.create({
  model: 'stories260K', max_tokens: 16, temperature: 0, tools,
  messages: [...ask, { role: 'assistant', content: call.content },
             { role: 'user', content: [{ type: 'tool_result', tool_use_id: use.id, content: 'Sunny, 21 degrees' }] }],
});
check(answer.type === 'message' && answer.content.length >= 0 && answer.usage.output_tokens > 0,
      'tools: the tool_result round trip answers', answer);

// 4. countTokens
const count = await client.messages.countTokens({ model: 'stories260K', messages });
check(count.input_tokens === plain.usage.input_tokens + plain.usage.cache_read_input_tokens,
      'countTokens == the prompt of create', { count, usage: plain.usage });

// 5. errors
try {
  await client.messages.create({ model: 'stories260K', messages });
  check(false, 'max_tokens missing is refused');
} catch (e) {
  check(e instanceof Anthropic.BadRequestError && e.status === 400 && e.error?.error?.type === 'invalid_request_error',
        'max_tokens missing: BadRequestError', { name: e.constructor?.name, status: e.status, error: e.error });
}
console.log('all ok');
