// ai.mjs BASE_URL — the Vercel AI SDK (npm "ai" with its providers
// @ai-sdk/openai-compatible, @ai-sdk/openai and @ai-sdk/anthropic) against a
// running `kvinfer serve` (tests/test_agents.c starts one with Qwen2.5's chat
// template, so tool calls are Hermes/Qwen <tool_call> blocks).
//
// Data: `apis` lists the four models under test — chat completions through
// the openai-compatible provider and through @ai-sdk/openai's .chat(), the
// Responses API through .responses(), the Messages API through @ai-sdk/anthropic
// — each with the function that reads the text out of its raw non-streamed
// answer. Every request goes through `recordingFetch`, which keeps the last
// answer's raw body and appends "METHOD PATH BODY" lines to the file named by
// the environment's KVI_AGENTS_DUMP (when set),
// so the test log shows what the SDK sent.
//
// For each API:
//   1. generateText (temperature 0): the SDK's text equals the text in the
//      server's raw answer, and the SDK accepted the usage and finish;
//   2. streamText with the same settings: the streamed text equals (1)'s,
//      since greedy decoding of the same prompt gives the same tokens;
//   3. a tool with toolChoice "required": the call's input validates against
//      the tool's zod schema (parallel calls off, in each provider's own
//      option), then the tool's result goes back in a second step
//      (toolChoice "none"), which must finish with text;
//   4. the first step of (3) streamed: the same call input.
// Prints one "ok ..." line per check and "all ok"; exits 1 at the first failure.
import { generateText, streamText, tool, stepCountIs } from 'ai';
import { createOpenAICompatible } from '@ai-sdk/openai-compatible';
import { createOpenAI } from '@ai-sdk/openai';
import { createAnthropic } from '@ai-sdk/anthropic';
import { appendFileSync } from 'node:fs';
import { z } from 'zod';

const base = process.argv[2];
const dump = process.env.KVI_AGENTS_DUMP;
let lastRaw = null;

async function recordingFetch(url, init) {
  const path = new URL(url).pathname;
  if (dump) appendFileSync(dump, `${init?.method ?? 'GET'} ${path} ${init?.body ?? ''}\n`);
  const res = await fetch(url, init);
  if (!res.ok) {
    const text = await res.clone().text();
    console.log(`FAIL ${path}: HTTP ${res.status} ${text}`);
    process.exit(1);
  }
  const stream = (res.headers.get('content-type') ?? '').includes('event-stream');
  if (!stream) lastRaw = await res.clone().json();
  return res;
}

const key = 'none';
const compat = createOpenAICompatible({ name: 'kvinfer', baseURL: `${base}/v1`, apiKey: key, fetch: recordingFetch });
const openai = createOpenAI({ baseURL: `${base}/v1`, apiKey: key, fetch: recordingFetch });
const anthropic = createAnthropic({ baseURL: `${base}/v1`, apiKey: key, fetch: recordingFetch });

const joinText = (parts, type) =>
  parts.filter((p) => p.type === type).map((p) => p.text).join('');
const apis = [
  { name: 'openai-compatible chat', model: compat.chatModel('stories260K'), text: (r) => r.choices[0].message.content ?? '' },
  { name: 'openai chat', model: openai.chat('stories260K'), text: (r) => r.choices[0].message.content ?? '' },
  {
    name: 'openai responses',
    model: openai.responses('stories260K'),
    text: (r) => r.output.filter((o) => o.type === 'message').map((o) => joinText(o.content, 'output_text')).join(''),
  },
  { name: 'anthropic messages', model: anthropic('stories260K'), text: (r) => joinText(r.content, 'text') },
];

function fail(what, detail) {
  console.log(`FAIL ${what}: ${detail}`);
  process.exit(1);
}

const weather = z.object({
  city: z.string().min(1).max(12),
  unit: z.enum(['celsius', 'fahrenheit']),
});
// one call (the tiny model would call again and again); each provider reads its own key
const oneCall = {
  kvinfer: { parallel_tool_calls: false },
  openai: { parallelToolCalls: false },
  anthropic: { disableParallelToolUse: true },
};
const prompt = 'Once upon a time';
const settings = { prompt, maxOutputTokens: 24, temperature: 0, maxRetries: 0 };

for (const api of apis) {
  const what = api.name;
  const plain = await generateText({ model: api.model, ...settings });
  const serverText = api.text(lastRaw);
  if (plain.text !== serverText) fail(`${what} generateText`, `${JSON.stringify(plain.text)} != ${JSON.stringify(serverText)}`);
  if (!plain.text) fail(`${what} generateText`, 'empty text');
  if (!(plain.usage.outputTokens > 0)) fail(`${what} generateText`, `usage ${JSON.stringify(plain.usage)}`);
  if (plain.finishReason !== 'length' && plain.finishReason !== 'stop') fail(`${what} generateText`, `finish ${plain.finishReason}`);
  console.log(`ok ${what} generateText: ${JSON.stringify(plain.text)} (${plain.finishReason})`);

  const streamed = streamText({ model: api.model, ...settings, onError: ({ error }) => fail(`${what} streamText`, error) });
  const text = await streamed.text;
  if (text !== plain.text) fail(`${what} streamText`, `${JSON.stringify(text)} != ${JSON.stringify(plain.text)}`);
  if ((await streamed.finishReason) !== plain.finishReason) fail(`${what} streamText`, `finish ${await streamed.finishReason}`);
  console.log(`ok ${what} streamText: the same text`);

  let input = null;
  const calls = await generateText({
    model: api.model,
    prompt: 'What is the weather in Paris?',
    maxOutputTokens: 100,
    temperature: 0,
    maxRetries: 0,
    tools: {
      get_weather: tool({
        description: 'The weather of a city',
        inputSchema: weather,
        execute: async (args) => {
          input = args;
          return { temperature: 21, unit: args.unit };
        },
      }),
    },
    toolChoice: 'required',
    providerOptions: oneCall,
    stopWhen: stepCountIs(2),
    prepareStep: ({ stepNumber }) => (stepNumber > 0 ? { toolChoice: 'none' } : {}),
  });
  const first = calls.steps[0];
  if (!first || first.finishReason !== 'tool-calls' || first.toolCalls.length < 1)
    fail(`${what} tool call`, `step 1: ${JSON.stringify(first?.content)} (${first?.finishReason})`);
  const call = first.toolCalls[0];
  if (call.toolName !== 'get_weather' || call.invalid || !weather.safeParse(call.input).success || input === null)
    fail(`${what} tool call`, JSON.stringify(call));
  if (calls.steps.length !== 2 || calls.steps[1].toolCalls.length !== 0 || !calls.steps[1].text)
    fail(`${what} tool result`, `steps ${calls.steps.length}: ${JSON.stringify(calls.steps.at(-1)?.content)}`);
  console.log(`ok ${what} tool call ${JSON.stringify(call.input)}, then ${JSON.stringify(calls.steps[1].text)}`);

  // the same first step streamed: the call arrives as tool-input deltas
  const streamedCall = streamText({
    model: api.model,
    prompt: 'What is the weather in Paris?',
    maxOutputTokens: 100,
    temperature: 0,
    maxRetries: 0,
    tools: { get_weather: tool({ description: 'The weather of a city', inputSchema: weather }) },
    toolChoice: 'required',
    providerOptions: oneCall,
    onError: ({ error }) => fail(`${what} streamed tool call`, error),
  });
  const streamedCalls = await streamedCall.toolCalls;
  if ((await streamedCall.finishReason) !== 'tool-calls' || streamedCalls.length !== 1 ||
      JSON.stringify(streamedCalls[0].input) !== JSON.stringify(call.input))
    fail(`${what} streamed tool call`, `${JSON.stringify(streamedCalls)} (${await streamedCall.finishReason})`);
  console.log(`ok ${what} streamed tool call: the same input`);
}
console.log('all ok');
