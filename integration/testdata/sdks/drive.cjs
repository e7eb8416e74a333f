// Drives the vendors' own API clients against the model API hosts of the
// test's fake internet, inside a doorman sandbox (integration/rulesets_test.go).
// Each call prints one line: "R <case> <JSON result>"; each request body a
// client sent, "SENT <host><path> <base64 body>". The clients are loaded
// from $SDKS/node_modules (npm ci of this directory's lock file).
'use strict';
const path = require('node:path');
const mod = (name) => require(path.join(process.env.SDKS, 'node_modules', name));

const MARKER = 'dm-show-tool-use';
const realFetch = globalThis.fetch;
// Record what each client sends, byte for byte, before it goes.
globalThis.fetch = async (input, init) => {
  const url = new URL(typeof input === 'string' ? input : input.url);
  const body = init && init.body;
  if (typeof body === 'string') {
    console.log('SENT ' + url.host + url.pathname + ' ' + Buffer.from(body).toString('base64'));
  }
  return realFetch(input, init);
};

const Anthropic = mod('@anthropic-ai/sdk').default;
const OpenAI = mod('openai').default;
const { GoogleGenAI } = mod('@google/genai');

const anthropic = new Anthropic({ apiKey: 'dm-test-key', maxRetries: 0 });
const openai = new OpenAI({ apiKey: 'dm-test-key', maxRetries: 0 });
const genai = new GoogleGenAI({ apiKey: 'dm-test-key' });

// errInfo names what a client raised: the status and doorman's error
// fields if the body was doorman's refusal.
function errInfo(e) {
  const body = e && (e.error && e.error.error ? e.error.error : e.error);
  const out = { error: String(e && e.message || e).slice(0, 4000) };
  if (e && e.status) out.status = e.status;
  if (body && typeof body === 'object') {
    for (const k of ['type', 'tool', 'rule', 'reason']) if (body[k]) out[k] = body[k];
  }
  // @google/genai puts the body in the message.
  const m = /"type":"doorman_policy"/.test(out.error);
  if (m) out.type = 'doorman_policy';
  const tool = /"tool":"([^"]*)"/.exec(out.error);
  if (tool) out.tool = tool[1];
  return out;
}

async function run(name, fn) {
  let res;
  try {
    res = await fn();
  } catch (e) {
    res = errInfo(e);
  }
  console.log('R ' + name + ' ' + JSON.stringify(res));
}

// stream collects a streamed answer's text until the stream ends or
// breaks; a break is reported with what came before it.
async function stream(iter, textOf) {
  let text = '';
  try {
    for await (const ev of await iter) text += textOf(ev) || '';
  } catch (e) {
    return Object.assign({ text }, errInfo(e));
  }
  return { text };
}

const anthropicText = (m) => m.content.filter((b) => b.type === 'text').map((b) => b.text).join('');
const msgs = (s) => [{ role: 'user', content: s }];

const cases = {
  // Anthropic: Messages, JSON and streamed.
  'anthropic.plain': () => anthropic.messages.create({ model: 'claude-fake', max_tokens: 16, messages: msgs('hi') }).then((m) => ({ text: anthropicText(m) })),
  'anthropic.plain-stream': () => stream(anthropic.messages.create({ model: 'claude-fake', max_tokens: 16, messages: msgs('hi'), stream: true }),
    (ev) => ev.type === 'content_block_delta' && ev.delta.type === 'text_delta' ? ev.delta.text : ''),
  'anthropic.web_search': () => anthropic.messages.create({
    model: 'claude-fake', max_tokens: 16, messages: msgs('hi'),
    tools: [{ type: 'web_search_20250305', name: 'web_search', max_uses: 2 }, { name: 'lookup', description: 'd', input_schema: { type: 'object', properties: {} } }],
  }).then((m) => ({ text: anthropicText(m) })),
  'anthropic.web_fetch': () => anthropic.messages.create({
    model: 'claude-fake', max_tokens: 16, messages: msgs('hi'), tools: [{ type: 'web_fetch_20250910', name: 'web_fetch' }],
  }).then((m) => ({ text: anthropicText(m) })),
  'anthropic.tool-use-stream': () => stream(anthropic.messages.create({ model: 'claude-fake', max_tokens: 16, messages: msgs(MARKER), stream: true }),
    (ev) => ev.type === 'content_block_delta' && ev.delta.type === 'text_delta' ? ev.delta.text : ''),
  'anthropic.tool-use-json': () => anthropic.messages.create({ model: 'claude-fake', max_tokens: 16, messages: msgs(MARKER) }).then((m) => ({ text: anthropicText(m) })),

  // OpenAI: Chat Completions and Responses.
  'openai.plain': () => openai.chat.completions.create({ model: 'gpt-fake', messages: msgs('hi') }).then((c) => ({ text: c.choices[0].message.content })),
  'openai.plain-stream': () => stream(openai.chat.completions.create({ model: 'gpt-fake', messages: msgs('hi'), stream: true }),
    (c) => c.choices[0] && c.choices[0].delta.content),
  'openai.web_search_options': () => openai.chat.completions.create({ model: 'gpt-fake', messages: msgs('hi'), web_search_options: {} })
    .then((c) => ({ text: c.choices[0].message.content })),
  'openai.responses-plain': () => openai.responses.create({ model: 'gpt-fake', input: 'hi' }).then((r) => ({ text: r.output_text })),
  'openai.web_search': () => openai.responses.create({
    model: 'gpt-fake', input: 'hi', tools: [{ type: 'web_search' }, { type: 'function', name: 'lookup', parameters: { type: 'object', properties: {} }, strict: false }],
  }).then((r) => ({ text: r.output_text })),
  'openai.mcp': () => openai.responses.create({
    model: 'gpt-fake', input: 'hi', tools: [{ type: 'mcp', server_label: 'x', server_url: 'https://mcp.example.org/sse', require_approval: 'never' }],
  }).then((r) => ({ text: r.output_text })),
  'openai.tool-use-stream': () => stream(openai.responses.create({ model: 'gpt-fake', input: MARKER, stream: true }),
    (ev) => ev.type === 'response.output_text.delta' ? ev.delta : ''),
  'openai.chat-tool-use-stream': () => stream(openai.chat.completions.create({ model: 'gpt-fake', messages: msgs(MARKER), stream: true }),
    (c) => c.choices[0] && c.choices[0].delta.content),

  // Google: Gemini API.
  'gemini.plain': () => genai.models.generateContent({ model: 'gemini-fake', contents: 'hi' }).then((r) => ({ text: r.text })),
  'gemini.plain-stream': () => stream(genai.models.generateContentStream({ model: 'gemini-fake', contents: 'hi' }), (c) => c.text),
  'gemini.google_search': () => genai.models.generateContent({
    model: 'gemini-fake', contents: 'hi',
    config: { tools: [{ googleSearch: {} }, { functionDeclarations: [{ name: 'lookup', description: 'd' }] }] },
  }).then((r) => ({ text: r.text })),
  'gemini.url_context': () => genai.models.generateContent({
    model: 'gemini-fake', contents: 'hi', config: { tools: [{ urlContext: {} }, { codeExecution: {} }] },
  }).then((r) => ({ text: r.text })),
  'gemini.tool-use-stream': () => stream(genai.models.generateContentStream({ model: 'gemini-fake', contents: MARKER }), (c) => c.text),
};

(async () => {
  const only = (process.env.CASES || '').split(',').filter(Boolean);
  for (const [name, fn] of Object.entries(cases)) {
    if (only.length === 0 || only.includes(name)) await run(name, fn);
  }
})();
