// What the gate says names Node's own API, never the Rust builder's; OpenAI tool calls in either
// API's shape (issue 42, items 6 and 8).
import { test } from 'node:test'
import assert from 'node:assert/strict'
import { fileURLToPath } from 'node:url'
import { Gate, Secret, TokenKeys, fromOpenAIToolCall } from '../dist/index.mjs'
import { runChild } from './child.mjs'

const entry = fileURLToPath(new URL('../dist/index.mjs', import.meta.url))
const RUST_ONLY = ['GateBuilder', 'Gate::', 'on_request', 'deny_when_unobserved', 'subscribe()', 'token_keys']

test('the no-approver warning on stderr names the options and methods of Node', async () => {
  const r = await runChild(
    `
import { Gate } from ${JSON.stringify(entry)}
const gate = new Gate()
gate.register({ name: 'delete_file', approval: 'required' })
const d = await gate.confirm({ tool: 'delete_file', arguments: {} })
console.log(d.outcome, d.cancelReason)
await gate.close()
`,
    { timeoutMs: 15_000 },
  )
  assert.equal(r.code, 0, r.err)
  assert.match(r.out, /cancelled no-approver/)
  assert.match(r.err, /no approver is attached/)
  assert.ok(r.err.includes('`new Gate({ denyWhenUnobserved: false })`'), r.err)
  assert.ok(r.err.includes("`gate.on('confirmation-request', listener)`"), r.err)
  assert.ok(r.err.includes('`await gate.serveConsole()`'), r.err)
  for (const rust of RUST_ONLY) assert.ok(!r.err.includes(rust), `${rust} in ${r.err}`)
})

test('recovery and token errors name the methods and options of Node', async () => {
  const gate = new Gate()
  gate.recover()
  assert.throws(
    () => gate.recover(),
    (e) => e.code === 'config' && e.message.includes('`gate.recover()` runs once per gate') && !e.message.includes('Gate::'),
  )
  assert.throws(
    () => gate.issueToken('6f1c2b7e-2a40-4f59-9f0c-2f4a7d3b9e11', 'alice'),
    (e) => e.code === 'config' && e.message.includes('this gate has no token keys (`new Gate({ tokenKeys })`)') && !e.message.includes('GateBuilder'),
  )
  await gate.close()
  const keyed = new Gate({ tokenKeys: new TokenKeys('k1', Secret.generate()) })
  await keyed.close()
})

test('fromOpenAIToolCall takes a Responses API function_call item too', async () => {
  const item = { type: 'function_call', id: 'fc_1', call_id: 'call_2', name: 'read_file', arguments: '{"path":"/q"}', status: 'completed' }
  assert.deepEqual(fromOpenAIToolCall(item, { sessionId: 's1' }), {
    tool: 'read_file',
    arguments: { path: '/q' },
    callId: 'call_2',
    sessionId: 's1',
    metadata: undefined,
  })
  assert.deepEqual(fromOpenAIToolCall({ ...item, arguments: '' }).arguments, {})
  const gate = new Gate()
  gate.register({ name: 'read_file', approval: 'not_required', execute: ({ path }) => `read ${path}` })
  const r = await gate.execute(fromOpenAIToolCall(item))
  assert.deepEqual(r.toOpenAIResponsesItem(), { type: 'function_call_output', call_id: 'call_2', output: r.content })
  // Passed as is, it is refused with the converter named.
  await assert.rejects(gate.execute(item), (e) => e.code === 'malformed' && e.message.includes('fromOpenAIToolCall(item)'))
  await gate.close()
  for (const [bad, problem] of [
    [{ type: 'function_call', call_id: 'c', arguments: '{}' }, '`name` is'],
    [{ type: 'function_call', call_id: 7, name: 'f' }, '`call_id` is'],
    [{ id: 'c', type: 'function' }, '`function` is'],
  ]) {
    assert.throws(
      () => fromOpenAIToolCall(bad),
      (e) => e.code === 'malformed' && e.message.includes(problem) && e.message.includes("type: 'function_call', call_id, name, arguments"),
    )
  }
})
