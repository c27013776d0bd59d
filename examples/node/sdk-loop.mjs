#!/usr/bin/env node
// The tool loop you write with the OpenAI or the Anthropic SDK, with signoff between the model
// and the tools.
//
//   node examples/node/sdk-loop.mjs                # the approver approves (the default)
//   node examples/node/sdk-loop.mjs --auto deny    # the approver denies every gated call
//
// The same task runs twice, once per message format, against a scripted model: no network, no
// SDK, no API key. The model's responses are plain objects shaped like the APIs' JSON, which is
// what the `openai` and `@anthropic-ai/sdk` packages return, so the loops stay the same with them.
//
// - OpenAI Chat Completions: the assistant message has `tool_calls`, and their `arguments` are
//   JSON *text*. Each result goes back as its own `{ role: 'tool', tool_call_id, content }`
//   message, in the order of the calls.
// - Anthropic Messages: the assistant's `content` has `tool_use` blocks, and their `input` is an
//   object. All the results go back in one user message of `tool_result` blocks, with `is_error`.
//
// In its first turn the model asks for three calls: it reads a file (not gated, so it runs at
// once), deletes a file (gated, so the approver is asked) and makes a mistake that must not get
// through. For OpenAI the mistake is arguments that are not JSON; for Anthropic it is arguments
// that do not match the schema. The model then reacts to what it reads back. If it may go on, it
// fixes its mistake. If the user declined, it stops.
//
// Build the package first (`cd bindings-node && npm install && npm run build`). In a project of
// your own: `import { Gate, fromOpenAIToolCall, fromAnthropicToolUse } from 'signoff'`.
import { Gate, fromOpenAIToolCall, fromAnthropicToolUse } from '../../bindings-node/dist/index.mjs'

const TASK = 'Delete /tmp/old.log and /tmp/cache.bin, and tell me what /tmp/notes.txt says.'
const NOTES = 'Standup moved to 10:00.'
const MAX_TURNS = 8

const argv = process.argv.slice(2)
const auto = argv[0] === '--auto' && argv.length === 2 ? argv[1] : argv.length === 0 ? 'approve' : undefined
if (auto !== 'approve' && auto !== 'deny') {
  console.error('usage: sdk-loop.mjs [--auto approve|deny]   (default: approve)')
  process.exit(2)
}

const say = (who, text) => console.log(`${who.padEnd(11)} ${text}`)

// ---- the tools: an in-memory file system -----------------------------------------------------

const PATH_ONLY = {
  type: 'object',
  properties: { path: { type: 'string' } },
  required: ['path'],
  additionalProperties: false,
}

function newGate(files) {
  const gate = new Gate({ defaultTimeoutMs: 30_000 })
  // readOnly: runs without asking. destructive (and "delete" in the name): gated.
  gate.register({
    name: 'read_file',
    description: 'Reads a text file',
    parameters: PATH_ONLY,
    readOnly: true,
    execute: ({ path }) => {
      if (!files.has(path)) throw new Error(`no such file: ${path}`)
      return files.get(path)
    },
  })
  gate.register({
    name: 'delete_file',
    description: 'Deletes a file permanently',
    parameters: PATH_ONLY,
    destructive: true,
    execute: ({ path }) => {
      if (!files.delete(path)) throw new Error(`no such file: ${path}`)
      return `deleted ${path}`
    },
  })
  gate.on('confirmation-request', (req) => {
    // Print before answering: once answered, the loop goes on and prints the results.
    say('approver', `${req.tool} ${JSON.stringify(req.arguments)} -> ${auto === 'approve' ? 'approved' : 'denied'} (--auto ${auto})`)
    if (auto === 'approve') req.approve({ responder: 'auto' })
    else req.deny('--auto deny: no files are deleted today', { responder: 'auto' })
  })
  return gate
}

// ---- OpenAI Chat Completions -----------------------------------------------------------------

/** The key repeated in an object of valid JSON text, if any (`JSON.parse` keeps the last one). */
function repeatedKey(text) {
  const objects = [] // per open object, the keys seen; null for an array
  let last
  for (const [token] of text.matchAll(/"(?:[^"\\]|\\.)*"|[{}[\]:]/g)) {
    if (token === '{') objects.push(new Set())
    else if (token === '[') objects.push(null)
    else if (token === '}' || token === ']') objects.pop()
    else if (token === ':') {
      const key = JSON.parse(last)
      if (objects.at(-1).has(key)) return key
      objects.at(-1).add(key)
    }
    last = token
  }
}

/**
 * A call for the gate or, when the arguments are not JSON, the refusal to send back instead.
 * Nobody can review arguments that do not parse, so such a call never reaches an approver.
 */
function fromOpenAI(toolCall, sessionId) {
  const { name, arguments: text } = toolCall.function
  let problem
  try {
    JSON.parse(text || '{}')
    const key = repeatedKey(text || '{}')
    if (key !== undefined) problem = `its arguments are not valid JSON (repeated key ${JSON.stringify(key)})`
  } catch (e) {
    problem = `its arguments are not valid JSON (${e.message})`
  }
  if (problem === undefined) return fromOpenAIToolCall(toolCall, { sessionId })
  return {
    refused: {
      role: 'tool',
      tool_call_id: toolCall.id,
      content: `The call to \`${name}\` was refused and did not run: ${problem}. Send it again with the arguments as one JSON object.`,
    },
    callId: toolCall.id,
    status: 'rejected',
  }
}

const toolCall = (id, name, args) => ({ id, type: 'function', function: { name, arguments: args } })
function completion(content, toolCalls) {
  const message = { role: 'assistant', content, ...(toolCalls ? { tool_calls: toolCalls } : {}) }
  return {
    id: 'chatcmpl-scripted',
    object: 'chat.completion',
    model: 'scripted',
    choices: [{ index: 0, message, finish_reason: toolCalls ? 'tool_calls' : 'stop' }],
  }
}

/** Answers like `client.chat.completions.create`. It reads only the tool messages it is sent. */
class ScriptedOpenAI {
  turn = 0
  create({ messages }) {
    this.turn++
    const said = Object.fromEntries(messages.filter((m) => m.role === 'tool').map((m) => [m.tool_call_id, m.content]))
    if (this.turn === 1) {
      return completion(null, [
        toolCall('call_01', 'read_file', '{"path": "/tmp/notes.txt"}'),
        toolCall('call_02', 'delete_file', '{"path": "/tmp/old.log"}'),
        toolCall('call_03', 'delete_file', '{"path": "/tmp/cache.bin"'), // cut short: not JSON
      ])
    }
    if (this.turn === 2) {
      if (said.call_02.includes('Do not retry')) {
        return completion(
          `You declined deleting /tmp/old.log, so I did not retry it and left /tmp/cache.bin alone too. /tmp/notes.txt says: ${said.call_01}`,
        )
      }
      return completion(null, [toolCall('call_04', 'delete_file', '{"path": "/tmp/cache.bin"}')])
    }
    if (said.call_04.includes('Do not retry')) {
      return completion(`Deleted /tmp/old.log; you declined /tmp/cache.bin. /tmp/notes.txt says: ${said.call_01}`)
    }
    return completion(
      `Deleted /tmp/old.log and /tmp/cache.bin (my first call for it had broken arguments, so I sent it again). /tmp/notes.txt says: ${said.call_01}`,
    )
  }
}

async function openaiLoop(gate) {
  const client = new ScriptedOpenAI()
  const tools = gate.openAITools()
  const messages = [{ role: 'user', content: TASK }]
  say('user', JSON.stringify(TASK))
  const every = []
  for (let turn = 0; turn < MAX_TURNS; turn++) {
    const response = client.create({ model: 'scripted', messages, tools })
    const message = response.choices[0].message
    messages.push(message)
    if (!message.tool_calls?.length) {
      say('assistant', JSON.stringify(message.content))
      return every
    }
    message.tool_calls.forEach((tc, i) => say(i === 0 ? 'assistant' : '', `tool_call ${tc.id} ${tc.function.name} ${tc.function.arguments}`))
    const prepared = message.tool_calls.map((tc) => fromOpenAI(tc, 'openai-demo'))
    // One batch, in order: the read runs at once, each gated call waits for its own answer.
    const ran = (await gate.executeBatch(prepared.filter((p) => !p.refused))).values()
    const results = prepared.map((p) => (p.refused ? p : ran.next().value))
    for (const r of results) {
      messages.push(r.refused ?? r.toOpenAIMessage()) // { role: 'tool', tool_call_id, content }
      say('tool', JSON.stringify(messages.at(-1)))
    }
    every.push(...results)
  }
  throw new Error('the model did not finish')
}

// ---- Anthropic Messages ----------------------------------------------------------------------

const toolUse = (id, name, input) => ({ type: 'tool_use', id, name, input })
const text = (s) => ({ type: 'text', text: s })
function anthropicMessage(content) {
  const stop = content.some((b) => b.type === 'tool_use') ? 'tool_use' : 'end_turn'
  return { id: 'msg_scripted', type: 'message', role: 'assistant', model: 'scripted', content, stop_reason: stop }
}

/** Answers like `client.messages.create`. It reads only the `tool_result` blocks it is sent. */
class ScriptedAnthropic {
  turn = 0
  create({ messages }) {
    this.turn++
    const got = Object.fromEntries(
      messages
        .filter((m) => m.role === 'user' && Array.isArray(m.content))
        .flatMap((m) => m.content.filter((b) => b.type === 'tool_result').map((b) => [b.tool_use_id, b])),
    )
    if (this.turn === 1) {
      return anthropicMessage([
        text("I'll read your notes and delete the two files."),
        toolUse('toolu_01', 'read_file', { path: '/tmp/notes.txt' }),
        toolUse('toolu_02', 'delete_file', { path: '/tmp/old.log' }),
        toolUse('toolu_03', 'delete_file', { file: '/tmp/cache.bin' }), // wrong key: not the schema
      ])
    }
    const notes = got.toolu_01.content
    if (this.turn === 2) {
      if (got.toolu_02.is_error && got.toolu_02.content.includes('Do not retry')) {
        return anthropicMessage([
          text(`You declined deleting /tmp/old.log, so I did not retry it and left /tmp/cache.bin alone too. /tmp/notes.txt says: ${notes}`),
        ])
      }
      return anthropicMessage([
        text('My call for /tmp/cache.bin did not match the schema; fixing it.'),
        toolUse('toolu_04', 'delete_file', { path: '/tmp/cache.bin' }),
      ])
    }
    if (got.toolu_04.is_error) {
      return anthropicMessage([text(`Deleted /tmp/old.log, but not /tmp/cache.bin. /tmp/notes.txt says: ${notes}`)])
    }
    return anthropicMessage([
      text(`Deleted /tmp/old.log and /tmp/cache.bin (my first call for it did not match the schema, so I sent it again). /tmp/notes.txt says: ${notes}`),
    ])
  }
}

async function anthropicLoop(gate) {
  const client = new ScriptedAnthropic()
  const tools = gate.tools().map((t) => ({ name: t.name, description: t.description, input_schema: t.parameters }))
  const messages = [{ role: 'user', content: TASK }]
  say('user', JSON.stringify(TASK))
  const every = []
  for (let turn = 0; turn < MAX_TURNS; turn++) {
    const response = client.create({ model: 'scripted', max_tokens: 1024, messages, tools })
    messages.push({ role: 'assistant', content: response.content })
    response.content.forEach((b, i) => {
      const shown = b.type === 'text' ? JSON.stringify(b.text) : `${b.id} ${b.name} ${JSON.stringify(b.input)}`
      say(i === 0 ? 'assistant' : '', `${b.type} ${shown}`)
    })
    if (response.stop_reason !== 'tool_use') return every
    const uses = response.content.filter((b) => b.type === 'tool_use')
    const results = await gate.executeBatch(uses.map((b) => fromAnthropicToolUse(b, { sessionId: 'anthropic-demo' })))
    // All the results in one user message; is_error is true when the tool did not run (or failed).
    messages.push({ role: 'user', content: results.map((r) => r.toAnthropicBlock()) })
    messages.at(-1).content.forEach((b, i) => say(i === 0 ? 'user' : '', JSON.stringify(b)))
    every.push(...results)
  }
  throw new Error('the model did not finish')
}

// ---- main --------------------------------------------------------------------------------------

async function run(title, loop) {
  console.log(`\n== ${title} (--auto ${auto}) ==`)
  const files = new Map([
    ['/tmp/notes.txt', NOTES],
    ['/tmp/old.log', 'old log lines'],
    ['/tmp/cache.bin', 'cache'],
  ])
  const gate = newGate(files)
  try {
    const results = await loop(gate)
    const left = [...files.keys()].sort()
    say('files left', left.join(', '))
    return { results, left }
  } finally {
    await gate.close()
  }
}

const openai = await run('OpenAI Chat Completions', openaiLoop)
const anthropic = await run('Anthropic Messages', anthropicLoop)

const gated = auto === 'approve' ? 'executed' : 'denied'
const expected = [['01', 'executed'], ['02', gated], ['03', 'rejected'], ...(auto === 'approve' ? [['04', 'executed']] : [])]
const kept = auto === 'approve' ? ['/tmp/notes.txt'] : ['/tmp/cache.bin', '/tmp/notes.txt', '/tmp/old.log']
const listed = (results) => results.map((r) => `${r.callId} ${r.status}`).join(', ')
const same = (a, b) => JSON.stringify(a) === JSON.stringify(b)
const ok =
  same(openai.results.map((r) => [r.callId, r.status]), expected.map(([n, s]) => [`call_${n}`, s])) &&
  same(anthropic.results.map((r) => [r.callId, r.status]), expected.map(([n, s]) => [`toolu_${n}`, s])) &&
  anthropic.results[2].errorCode === 'invalid_arguments' &&
  same(openai.left, kept) &&
  same(anthropic.left, kept)
const deleted = 6 - openai.left.length - anthropic.left.length
console.log(
  `\nsummary: --auto ${auto} | openai: ${listed(openai.results)} | anthropic: ${listed(anthropic.results)} | files deleted: ${deleted} | ${ok ? 'ok' : 'UNEXPECTED'}`,
)
process.exitCode = ok ? 0 : 1
