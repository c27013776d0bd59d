// What a new user gets wrong, and what they are told: a typo'd event name, a field named as in
// another binding (`executor`, `name`, `requestId`), a gate option that does not exist, a value
// of the wrong type. Each is refused at once (never accepted and lost) with a `SignoffError`
// whose message names the field as the user wrote it and lists the valid ones in Node's names,
// never a Rust type, a napi conversion or a snake_case name the user never wrote.
import { test } from 'node:test'
import assert from 'node:assert/strict'
import { errorMonitor, once } from 'node:events'
import { mkdtempSync, rmSync } from 'node:fs'
import { tmpdir } from 'node:os'
import path from 'node:path'
import {
  Gate,
  SignoffError,
  ERROR_CODES,
  Secret,
  TokenKeys,
  fromOpenAIToolCall,
  fromAISDKToolCall,
  fromAnthropicToolUse,
  toolCallsFromOpenAIMessage,
  verifyAuditChain,
  parseEvent,
  serializeEvent,
} from '../dist/index.mjs'

const GATE_EVENTS = ['confirmation-request', 'confirmation-response', 'confirmation-timeout', 'confirmation-resolved', 'lagged']
const TOOL_FIELDS = [
  'name',
  'description',
  'parameters',
  'approval',
  'editable',
  'promptTemplate',
  'rules',
  'source',
  'readOnly',
  'destructive',
  'timeoutMs',
  'execute',
]
const CALL_FIELDS = ['tool', 'arguments', 'sessionId', 'callId', 'metadata']
const RESPONSE_FIELDS = ['id', 'decision', 'arguments', 'scope', 'reason', 'responder', 'tool', 'argumentsDigest', 'sessionId', 'atMs']
const GATE_OPTIONS = [
  'defaultTimeoutMs',
  'keywords',
  'denyWhenUnobserved',
  'auditPath',
  'auditRotateBytes',
  'dangerouslyDisableGating',
  'busCapacity',
  'rememberResolved',
  'allowedResponders',
  'storePath',
  'synchronousFull',
  'storeUrl',
  'storeOwner',
  'storeSchema',
  'tokenKeys',
  'tokenTtlMs',
  'approvers',
  'forbidSelfApproval',
]
/** What the user never wrote: Rust types, napi conversions, JavaScript engine errors. */
const LEAKS = /rust type|napi|Failed to convert|Failed to get|Undefined|\bString\b|Cannot read properties|is not a function|Cannot convert/

/**
 * A check for `assert.throws` / `assert.rejects`: a `SignoffError` with `code`, whose message
 * contains every string of `names` (in backquotes or quotes: as the user writes it), none of
 * `never`, and nothing that leaks the implementation.
 */
function refused(code, names = [], never = []) {
  return (e) => {
    assert.ok(e instanceof SignoffError, `a SignoffError, not ${e?.constructor?.name}: ${e?.message}`)
    assert.equal(e.code, code, e.message)
    assert.ok(ERROR_CODES.includes(e.code))
    for (const n of names) assert.ok(e.message.includes(n), `the message names ${n}: ${e.message}`)
    for (const n of never) assert.ok(!e.message.includes(n), `the message does not say ${n}: ${e.message}`)
    assert.doesNotMatch(e.message, LEAKS)
    return true
  }
}

function makeGate(options = {}) {
  const gate = new Gate({ denyWhenUnobserved: false, ...options })
  gate.register({
    name: 'delete_file',
    parameters: { type: 'object', properties: { path: { type: 'string' } } },
    editable: true,
    execute: ({ path }) => ({ deleted: path }),
  })
  return gate
}

/** A pending request of `gate` (answer it before closing). */
async function pendingRequest(gate) {
  const stream = gate.events({ types: ['confirmation-request'] })
  const decision = gate.confirm({ tool: 'delete_file', arguments: { path: '/a' }, sessionId: 's1' })
  const { value: req } = await stream.next()
  stream.close()
  return { req, decision }
}

// ---- event names ----------------------------------------------------------------------------

test('a typo in an event name is refused (malformed), listing the valid names, by every listener method', async () => {
  const gate = makeGate()
  const typo = 'confirmation-reqest'
  const f = () => {}
  const methods = ['on', 'once', 'addListener', 'prependListener', 'prependOnceListener', 'off', 'removeListener']
  for (const m of methods) {
    assert.throws(() => gate[m](typo, f), refused('malformed', [typo, ...GATE_EVENTS, 'did you mean "confirmation-request"']), m)
  }
  assert.throws(() => gate.removeAllListeners(typo), refused('malformed', [typo, ...GATE_EVENTS]))
  assert.throws(() => gate.on('request', f), refused('malformed', ['"request"', ...GATE_EVENTS]))
  assert.throws(() => gate.on('confirmation_request', f), refused('malformed', ['did you mean "confirmation-request"']))
  assert.throws(() => gate.on('confirmationResolved', f), refused('malformed', ['did you mean "confirmation-resolved"']))
  assert.throws(() => gate.on(Symbol('mine'), f), refused('malformed', [...GATE_EVENTS]))
  // Nothing was registered: no listener, no bus subscriber.
  assert.equal(gate.listenerCount(typo), 0)
  assert.deepEqual(gate.eventNames(), [])
  assert.equal(gate.approverCount, 0)
  // A listener that is not a function is refused the same way.
  assert.throws(() => gate.on('confirmation-request', 'approve'), refused('malformed', ['listener', 'function']))
  assert.throws(() => gate.once('confirmation-resolved', undefined), refused('malformed', ['listener', 'function']))
  await gate.close()
})

test("EventEmitter's own events keep working, and so do events.once / events.on", async () => {
  const gate = makeGate()
  const seen = []
  gate.on('newListener', (name) => seen.push(['new', name]))
  gate.on('removeListener', (name) => seen.push(['removed', name]))
  gate.on('error', () => {})
  gate.on(errorMonitor, () => {})
  const l = () => {}
  gate.on('confirmation-resolved', l)
  gate.off('confirmation-resolved', l)
  assert.deepEqual(
    seen.filter(([k]) => k === 'new').map(([, n]) => n),
    ['removeListener', 'error', errorMonitor, 'confirmation-resolved'],
  )
  assert.ok(seen.some(([k, n]) => k === 'new' && n === 'confirmation-resolved'))
  assert.ok(seen.some(([k, n]) => k === 'removed' && n === 'confirmation-resolved'))
  gate.removeAllListeners('error')
  assert.equal(gate.listenerCount('error'), 0)
  gate.removeAllListeners() // without an argument: every listener
  assert.deepEqual(gate.eventNames(), [])
  // events.once registers an 'error' listener next to the one asked for.
  gate.on('confirmation-request', (req) => req.approve())
  const resolved = once(gate, 'confirmation-resolved')
  const r = await gate.execute({ tool: 'delete_file', arguments: { path: '/tmp/x' } })
  assert.equal(r.status, 'executed')
  const [event] = await resolved
  assert.equal(event.outcome, 'approved')
  await assert.rejects(once(gate, 'confirmation-resolvd'), refused('malformed', ['confirmation-resolvd', ...GATE_EVENTS]))
  await gate.close()
})

test('events(): an unknown option or event type is refused, listing the valid ones', async () => {
  const gate = makeGate()
  assert.throws(
    () => gate.events({ types: ['confirmation-reqest'] }),
    refused('malformed', ['confirmation-reqest', 'confirmation-request', 'confirmation-response', 'confirmation-timeout', 'confirmation-resolved']),
  )
  assert.throws(() => gate.events({ type: ['confirmation-request'] }), refused('malformed', ['`type`', 'did you mean `types`']))
  assert.throws(() => gate.events({ types: 'confirmation-request' }), refused('malformed', ['`types`', 'array']))
  assert.throws(() => gate.events('confirmation-request'), refused('malformed', ['options']))
  assert.equal(gate.approverCount, 0)
  await gate.close()
})

// ---- tool definitions -----------------------------------------------------------------------

test('register({ name, executor }) is refused naming `executor` and listing the fields in Node names', async () => {
  const gate = new Gate()
  for (const executor of [() => 1, async () => 1, 'not even a function']) {
    assert.throws(
      () => gate.register({ name: 'x', executor }),
      refused('malformed', ['`executor`', 'did you mean `execute`', ...TOOL_FIELDS.map((f) => ` ${f}`)], ['prompt_template', 'read_only', 'timeout_ms']),
    )
  }
  // The core's snake_case names are not Node's.
  assert.throws(() => gate.register({ name: 'x', read_only: true }), refused('malformed', ['`read_only`', 'did you mean `readOnly`']))
  assert.throws(() => gate.register({ name: 'x', timeout_ms: 5 }), refused('malformed', ['`timeout_ms`', 'did you mean `timeoutMs`']))
  assert.throws(() => gate.register({ name: 'x', schema: {} }), refused('malformed', ['`schema`', 'did you mean `parameters`']))
  // Missing and mistyped fields are named as written.
  assert.throws(() => gate.register({ description: 'no name' }), refused('malformed', ['`name`', 'missing']))
  assert.throws(() => gate.register({ name: 5 }), refused('malformed', ['`name`', 'string', '5']))
  assert.throws(() => gate.register({ name: 'x', description: 5 }), refused('malformed', ['`description`', 'string']))
  assert.throws(() => gate.register({ name: 'x', timeoutMs: '5' }), refused('malformed', ['`timeoutMs`', '"5"']))
  assert.throws(() => gate.register({ name: 'x', timeoutMs: 1.5 }), refused('malformed', ['`timeoutMs`', 'whole']))
  assert.throws(() => gate.register({ name: 'x', readOnly: 'yes' }), refused('malformed', ['`readOnly`', 'boolean']))
  assert.throws(() => gate.register({ name: 'x', approval: 'always' }), refused('malformed', ['`approval`', 'required', 'not_required']))
  assert.throws(() => gate.register({ name: 'x', execute: 'rm -rf' }), refused('malformed', ['`execute`', 'function']))
  assert.throws(() => gate.register({ name: 'x', parameters: 'object' }), refused('malformed', ['`parameters`', 'JSON Schema']))
  assert.throws(() => gate.register({ name: 'x', rules: {} }), refused('malformed', ['`rules`', 'array']))
  assert.throws(
    () => gate.register({ name: 'x', rules: [{ kind: 'path_outside', pointer: '/path', prefix: ['/tmp'] }] }),
    refused('malformed', ['rules[0]', '`prefix`', 'did you mean `prefixes`']),
  )
  assert.throws(
    () => gate.register({ name: 'x', rules: [{ kind: 'greater_than', pointer: '/amount', value: 100, inclusive: true }] }),
    refused('malformed', ['rules[0]', '`inclusive`', 'pointer', 'value']),
  )
  assert.throws(
    () => gate.register({ name: 'x', rules: [{ kind: 'path-outside', pointer: '/path', prefixes: [] }] }),
    refused('malformed', ['rules[0]', 'path-outside', 'path_outside', 'greater_than', 'one_of', 'not_one_of', 'contains']),
  )
  assert.throws(() => gate.register({ name: 'x', source: { kind: 'mcp', server: 's' } }), refused('malformed', ['`source`', 'built_in', 'external']))
  assert.throws(() => gate.register({ name: 'x', source: { kind: 'external' } }), refused('malformed', ['`source`', '`server`']))
  assert.throws(() => gate.register(), refused('malformed', ['tool definition', 'object']))
  assert.throws(() => gate.register('delete_file'), refused('malformed', ['tool definition', 'object']))
  assert.deepEqual(gate.tools(), [], 'nothing was registered')
  // What gate.tools() returns registers again as is.
  gate.register({ name: 'x', readOnly: true, timeoutMs: 5, promptTemplate: 'ok?', rules: [{ kind: 'contains', pointer: '/a', substring: 'b' }] })
  const [info] = gate.tools()
  gate.register(info)
  assert.deepEqual(gate.tools(), [info])
  // Optional fields may be undefined or null (absent).
  gate.register({ name: 'y', description: undefined, promptTemplate: null, timeoutMs: null, execute: undefined })
  await gate.close()
})

// ---- calls ----------------------------------------------------------------------------------

test('execute({ name }) is refused naming `tool` and `name`, not a Rust String', async () => {
  const gate = makeGate()
  await assert.rejects(gate.execute({ name: 'delete_file' }), refused('malformed', ['`name`', '`tool`', ...CALL_FIELDS]))
  await assert.rejects(gate.confirm({ name: 'delete_file' }), refused('malformed', ['`name`', '`tool`']))
  assert.throws(() => gate.evaluate({ name: 'delete_file' }), refused('malformed', ['`name`', '`tool`']))
  await assert.rejects(gate.executeBatch([{ tool: 'delete_file' }, { name: 'delete_file' }]), refused('malformed', ['calls[1]', '`name`', '`tool`']))
  // Missing, mistyped.
  await assert.rejects(gate.execute({}), refused('malformed', ['`tool`', 'missing']))
  await assert.rejects(gate.execute({ arguments: { path: '/a' } }), refused('malformed', ['`tool`', 'missing']))
  await assert.rejects(gate.execute({ tool: 42 }), refused('malformed', ['`tool`', 'string', '42']))
  await assert.rejects(gate.execute({ tool: 'delete_file', sessionId: 7 }), refused('malformed', ['`sessionId`', 'string']))
  await assert.rejects(gate.execute({ tool: 'delete_file', callId: {} }), refused('malformed', ['`callId`', 'string']))
  // Other bindings' and the wire's names: a session that was silently ignored is refused.
  await assert.rejects(gate.execute({ tool: 'delete_file', session_id: 'u1' }), refused('malformed', ['`session_id`', 'did you mean `sessionId`']))
  await assert.rejects(gate.execute({ tool: 'delete_file', args: {} }), refused('malformed', ['`args`', 'did you mean `arguments`']))
  // A model's own tool-call object: pointed at the converter.
  await assert.rejects(
    gate.execute({ id: 'call_1', type: 'function', function: { name: 'delete_file', arguments: '{}' } }),
    refused('malformed', ['fromOpenAIToolCall']),
  )
  await assert.rejects(gate.execute({ type: 'tool_use', id: 'tu', name: 'delete_file', input: {} }), refused('malformed', ['fromAnthropicToolUse']))
  await assert.rejects(gate.execute({ type: 'tool-call', toolCallId: 't', toolName: 'delete_file', input: {} }), refused('malformed', ['fromAISDKToolCall']))
  // Not an object at all.
  for (const call of [undefined, null, 'delete_file', ['delete_file']]) {
    await assert.rejects(gate.execute(call), refused('malformed', ['call', 'object']), String(call))
    await assert.rejects(gate.confirm(call), refused('malformed', ['call', 'object']), String(call))
  }
  await assert.rejects(gate.executeBatch({ tool: 'delete_file' }), refused('malformed', ['calls', 'array']))
  await assert.rejects(gate.executeBatch([null]), refused('malformed', ['calls[0]', 'object']))
  // The call options.
  await assert.rejects(gate.execute({ tool: 'delete_file' }, { sginal: new AbortController().signal }), refused('malformed', ['`sginal`', 'did you mean `signal`']))
  await assert.rejects(gate.execute({ tool: 'delete_file' }, { signal: 5 }), refused('malformed', ['`signal`', 'AbortSignal']))
  await assert.rejects(gate.executeBatch([], { timeout: 5 }), refused('malformed', ['`timeout`', 'signal']))
  assert.equal(gate.pendingCount, 0, 'nothing was asked')
  await gate.close()
})

// ---- answers --------------------------------------------------------------------------------

test('respond({ requestId }) names `requestId` and `id`, never request_id', async () => {
  const gate = makeGate()
  const { req, decision } = await pendingRequest(gate)
  assert.throws(
    () => gate.respond({ requestId: req.id, decision: 'approve' }),
    refused('malformed', ['`requestId`', 'did you mean `id`', ...RESPONSE_FIELDS], ['request_id', 'arguments_digest', 'session_id']),
  )
  assert.throws(() => gate.respond({ request_id: req.id, decision: 'approve' }), refused('malformed', ['`request_id`', 'did you mean `id`']))
  assert.throws(() => gate.respond({ decision: 'approve' }), refused('malformed', ['`id`', 'missing']))
  assert.throws(() => gate.respond({ id: req.id }), refused('malformed', ['`decision`', 'missing', '"approve"', '"deny"']))
  assert.throws(() => gate.respond({ id: req.id, decision: 'yes' }), refused('malformed', ['`decision`', '"yes"', '"approve"', '"deny"']))
  assert.throws(() => gate.respond({ id: 5, decision: 'approve' }), refused('malformed', ['`id`', 'string']))
  assert.throws(() => gate.respond({ id: req.id, decision: 'approve', scope: 'always' }), refused('malformed', ['`scope`', '"once"', '"session"']))
  assert.throws(() => gate.respond({ id: req.id, decision: 'approve', session_id: 's1' }), refused('malformed', ['`session_id`', 'did you mean `sessionId`']))
  assert.throws(() => gate.respond({ id: req.id, decision: 'approve', atMs: -1 }), refused('malformed', ['`atMs`']))
  assert.throws(() => gate.respond(req.id), refused('malformed', ['response', 'object']))
  // A mismatch names the field in Node's name.
  assert.throws(
    () => gate.respond({ id: req.id, decision: 'approve', argumentsDigest: 'sha256:00' }),
    refused('mismatch', ['argumentsDigest'], ['arguments_digest']),
  )
  assert.throws(() => gate.respond({ id: req.id, decision: 'approve', sessionId: 's2' }), refused('mismatch', ['sessionId'], ['session_id']))
  assert.ok(req.isPending(), 'every refusal left the request pending')
  // The response event's own shape (type included) is a response.
  assert.equal(gate.respond({ type: 'confirmation-response', id: req.id, decision: 'deny', reason: 'no' }), 'denied')
  assert.equal((await decision).outcome, 'denied')
  await gate.close()
})

test('approve / deny options: unknown and mistyped fields are refused; the request stays pending', async () => {
  const gate = makeGate()
  const { req, decision } = await pendingRequest(gate)
  assert.throws(() => req.approve({ scpoe: 'session' }), refused('malformed', ['`scpoe`', 'did you mean `scope`', 'arguments', 'responder']))
  assert.throws(() => req.approve({ args: { path: '/b' } }), refused('malformed', ['`args`', 'did you mean `arguments`']))
  assert.throws(() => req.approve({ responder: 5 }), refused('malformed', ['`responder`', 'string']))
  assert.throws(() => req.approve('session'), refused('malformed', ['approve', 'object']))
  assert.throws(() => req.deny({ reason: 'no' }), refused('malformed', ['reason', 'string']))
  assert.throws(() => req.deny('no', { respnder: 'a' }), refused('malformed', ['`respnder`', 'did you mean `responder`']))
  assert.throws(() => req.deny('no', 'alice'), refused('malformed', ['deny', 'object']))
  assert.throws(() => req.issueToken(5), refused('malformed', ['approver', 'string']))
  assert.ok(req.isPending())
  assert.equal(req.deny('no', { responder: 'alice' }), 'denied')
  assert.equal((await decision).outcome, 'denied')
  await gate.close()
})

test('respondToken: unknown and mistyped fields are refused', async () => {
  const gate = makeGate({ tokenKeys: new TokenKeys('k1', Secret.generate()) })
  const { req, decision } = await pendingRequest(gate)
  const token = req.issueToken('alice')
  assert.throws(
    () => gate.respondToken(token, { responder: 'alice', decision: 'approve' }),
    refused('malformed', ['`responder`', 'did you mean `approver`', 'approver', 'decision', 'arguments', 'scope', 'reason']),
  )
  assert.throws(() => gate.respondToken(token, { decision: 'approve' }), refused('malformed', ['`approver`', 'missing']))
  assert.throws(() => gate.respondToken(token, { approver: 5, decision: 'approve' }), refused('malformed', ['`approver`', 'string']))
  assert.throws(() => gate.respondToken(token, { approver: 'alice', decision: 'ok' }), refused('malformed', ['`decision`', '"approve"']))
  assert.throws(() => gate.respondToken(5, { approver: 'alice', decision: 'approve' }), refused('malformed', ['token', 'string']))
  assert.throws(() => gate.respondToken(token), refused('malformed', ['response', 'object']))
  assert.ok(req.isPending())
  assert.equal(gate.respondToken(token, { approver: 'alice', decision: 'deny' }), 'denied')
  assert.equal((await decision).outcome, 'denied')
  await gate.close()
})

// ---- gate options ---------------------------------------------------------------------------

test('gate options are checked once, by the core (config), naming the option as written here', async () => {
  assert.throws(() => new Gate({ timeoutMs: 5 }), refused('config', ['`timeoutMs`', ...GATE_OPTIONS]))
  assert.throws(() => new Gate({ default_timeout_ms: 5 }), refused('config', ['`default_timeout_ms`', 'did you mean `defaultTimeoutMs`']))
  assert.throws(() => new Gate({ denyWhenUnobserverd: false }), refused('config', ['did you mean `denyWhenUnobserved`']))
  assert.throws(() => new Gate({ defaultTimeoutMs: '5' }), refused('config', ['`defaultTimeoutMs`', '"5"']))
  assert.throws(() => new Gate({ defaultTimeoutMs: -1 }), refused('config', ['`defaultTimeoutMs`']))
  assert.throws(() => new Gate({ keywords: 'delete' }), refused('config', ['`keywords`', 'list']))
  assert.throws(() => new Gate({ keywords: ['delete', 5] }), refused('config', ['`keywords`', 'strings']))
  assert.throws(() => new Gate({ denyWhenUnobserved: 'no' }), refused('config', ['`denyWhenUnobserved`', 'true or false']))
  for (const n of [-1, 0, 1.5, 1e9, NaN, Infinity, -Infinity]) {
    assert.throws(() => new Gate({ busCapacity: n }), refused('config', ['busCapacity'], ['bus_capacity']), String(n))
  }
  assert.throws(() => new Gate({ rememberResolved: 1.5 }), refused('config', ['`rememberResolved`', 'whole']))
  assert.throws(() => new Gate({ allowedResponders: 'alice' }), refused('config', ['`allowedResponders`', 'list']))
  assert.throws(() => new Gate({ approvers: { delete_file: 'alice' } }), refused('config', ['`approvers.delete_file`', 'list']))
  assert.throws(() => new Gate({ approvers: ['alice'] }), refused('config', ['`approvers`', 'object']))
  assert.throws(() => new Gate({ auditPath: 5 }), refused('config', ['`auditPath`', 'path']))
  assert.throws(() => new Gate({ storePath: {} }), refused('config', ['`storePath`', 'path']))
  assert.throws(() => new Gate({ tokenTtlMs: 1000 }), refused('config', ['`tokenTtlMs` needs `tokenKeys`']))
  assert.throws(() => new Gate({ defaultTimeoutMs: () => 5 }), refused('config', ['defaultTimeoutMs', 'function']))
  assert.throws(() => new Gate(null), refused('config', ['gate options', 'object']))
  assert.throws(() => new Gate('strict'), refused('config', ['gate options', 'object']))
  assert.throws(() => new Gate({ tokenKeys: 5 }), refused('config', ['tokenKeys']))
  // Optional options may be undefined or null (left out).
  await new Gate({ defaultTimeoutMs: undefined, auditPath: null }).close()
})

// ---- everything else the user passes --------------------------------------------------------

test('string parameters of the wrong type are refused naming the parameter', async () => {
  const gate = makeGate({ tokenKeys: new TokenKeys('k1', Secret.generate()) })
  const cases = [
    ['unregister', () => gate.unregister(5), 'name'],
    ['grants', () => gate.grants(5), 'sessionId'],
    ['revokeGrant', () => gate.revokeGrant('s1', 5), 'tool'],
    ['endSession', () => gate.endSession(undefined), 'sessionId'],
    ['issueToken', () => gate.issueToken(5, 'alice'), 'requestId'],
    ['inspectToken', () => gate.inspectToken(5), 'token'],
    ['record', () => gate.record(5), 'requestId'],
    ['cancelRequest', () => gate.cancelRequest(5), 'id'],
    ['respondJson', () => gate.respondJson({ id: 'x' }), 'json'],
  ]
  for (const [what, f, name] of cases) assert.throws(f, refused('malformed', [what, `\`${name}\``, 'string']), what)
  await gate.close()
})

test('token keys and the audit log: wrong types are config errors, unreadable logs io', async () => {
  assert.throws(() => new TokenKeys(5, Secret.generate()), refused('config', ['keyId', 'string']))
  assert.throws(() => TokenKeys.parse(5), refused('config', ['string']))
  assert.throws(() => TokenKeys.fromEnv(undefined), refused('config', ['string']))
  assert.throws(() => TokenKeys.fromFile(5), refused('config', ['string']))
  assert.throws(() => Secret.fromBase64(5), refused('config', ['string']))
  assert.throws(() => Secret.fromBytes('not bytes'), refused('config', ['Uint8Array']))
  const dir = mkdtempSync(path.join(tmpdir(), 'signoff-'))
  try {
    assert.throws(() => verifyAuditChain(path.join(dir, 'missing.jsonl')), refused('io', ['missing.jsonl']))
    assert.throws(() => verifyAuditChain(5), refused('malformed', ['path', 'string']))
    assert.throws(() => new Gate({ auditPath: path.join(dir, 'no', 'such', 'dir', 'audit.jsonl') }), refused('io', ['audit.jsonl']))
  } finally {
    rmSync(dir, { recursive: true, force: true })
  }
})

test("converters from the model's calls refuse what is not one, and unknown options", () => {
  assert.throws(() => fromOpenAIToolCall({ id: 'c1' }), refused('malformed', ['OpenAI', 'function']))
  assert.throws(() => fromOpenAIToolCall(undefined), refused('malformed', ['OpenAI']))
  assert.throws(
    () => fromOpenAIToolCall({ id: 'c1', function: { name: 'x', arguments: '{}' } }, { sesionId: 's' }),
    refused('malformed', ['`sesionId`', 'did you mean `sessionId`', 'metadata']),
  )
  assert.throws(() => toolCallsFromOpenAIMessage(undefined), refused('malformed', ['message']))
  assert.throws(() => fromAISDKToolCall({ toolCallId: 't' }), refused('malformed', ['toolName']))
  assert.throws(() => fromAnthropicToolUse({ id: 'tu' }), refused('malformed', ['name']))
  assert.deepEqual(fromOpenAIToolCall({ id: 'c1', function: { name: 'x', arguments: '{"a":1}' } }, { sessionId: 's' }), {
    tool: 'x',
    arguments: { a: 1 },
    callId: 'c1',
    sessionId: 's',
    metadata: undefined,
  })
})

test('a sweep: whatever the user passes, an error is a SignoffError with a code and no implementation detail', async () => {
  // A junk value that is valid (`execute` options `undefined`, `{}`) leaves a call waiting with
  // nobody to answer it: a short deadline ends it (60 s each by default).
  const gate = makeGate({ tokenKeys: new TokenKeys('k1', Secret.generate()), defaultTimeoutMs: 2000 })
  const keys = new TokenKeys('k1', Secret.generate())
  const junk = [undefined, null, 5, 'x', [], {}, { bogus: 1 }, Symbol('s'), () => {}, 10n]
  const entry = {
    'new Gate': (v) => new Gate(v),
    register: (v) => gate.register(v),
    unregister: (v) => gate.unregister(v),
    evaluate: (v) => gate.evaluate(v),
    confirm: (v) => gate.confirm(v),
    execute: (v) => gate.execute(v),
    'execute options': (v) => gate.execute({ tool: 'delete_file', arguments: { path: '/x' } }, v),
    executeBatch: (v) => gate.executeBatch(v),
    'executeBatch item': (v) => gate.executeBatch([v]),
    respond: (v) => gate.respond(v),
    respondJson: (v) => gate.respondJson(v),
    issueToken: (v) => gate.issueToken(v, v),
    inspectToken: (v) => gate.inspectToken(v),
    respondToken: (v) => gate.respondToken(v, v),
    'respondToken response': (v) => gate.respondToken('t', v),
    record: (v) => gate.record(v),
    cancelRequest: (v) => gate.cancelRequest(v),
    pendingPage: (v) => gate.pendingPage(v),
    pendingAll: (v) => gate.pendingAll(v),
    grants: (v) => gate.grants(v),
    revokeGrant: (v) => gate.revokeGrant(v, v),
    endSession: (v) => gate.endSession(v),
    events: (v) => gate.events(v),
    on: (v) => gate.on(v, () => {}),
    'on listener': (v) => gate.on('confirmation-resolved', v),
    once: (v) => gate.once(v, () => {}),
    off: (v) => gate.off(v, () => {}),
    removeAllListeners: (v) => (v === undefined ? undefined : gate.removeAllListeners(v)),
    parseEvent: (v) => parseEvent(v),
    serializeEvent: (v) => serializeEvent(v),
    verifyAuditChain: (v) => verifyAuditChain(v),
    'verifyAuditChain options': (v) => verifyAuditChain('/nonexistent/audit.jsonl', v),
    fromOpenAIToolCall: (v) => fromOpenAIToolCall(v),
    toolCallsFromOpenAIMessage: (v) => toolCallsFromOpenAIMessage(v),
    fromAISDKToolCall: (v) => fromAISDKToolCall(v),
    fromAnthropicToolUse: (v) => fromAnthropicToolUse(v),
    'Secret.fromBase64': (v) => Secret.fromBase64(v),
    'Secret.fromBytes': (v) => Secret.fromBytes(v),
    'new TokenKeys': (v) => new TokenKeys(v, v),
    'TokenKeys.parse': (v) => TokenKeys.parse(v),
    'TokenKeys.fromEnv': (v) => TokenKeys.fromEnv(v),
    'TokenKeys.fromFile': (v) => TokenKeys.fromFile(v),
    'keys.rotate': (v) => keys.rotate(v, v),
    'keys.withVerifyOnly': (v) => keys.withVerifyOnly(v, v),
  }
  const made = []
  for (const [name, f] of Object.entries(entry)) {
    for (const v of junk) {
      const label = `${name}(${typeof v === 'symbol' ? 'a symbol' : typeof v === 'bigint' ? '10n' : JSON.stringify(v) ?? String(v)})`
      let out
      try {
        out = await f(v)
      } catch (e) {
        assert.ok(e instanceof SignoffError, `${label}: a SignoffError, not ${e?.constructor?.name}: ${e?.message}`)
        assert.ok(ERROR_CODES.includes(e.code), `${label}: ${e.code}`)
        assert.doesNotMatch(e.message, LEAKS, label)
        continue
      }
      if (out && typeof out.close === 'function') made.push(out)
    }
  }
  // The request-side methods, with what they refuse (a valid answer would end the request).
  const { req, decision } = await pendingRequest(gate)
  for (const v of [null, 5, 'x', [], { bogus: 1 }, Symbol('s'), () => {}, 10n]) {
    assert.throws(() => req.approve(v), refused('malformed'), `approve(${String(typeof v)})`)
  }
  for (const v of [5, [], {}, Symbol('s'), () => {}, 10n]) {
    assert.throws(() => req.deny(v), refused('malformed'), `deny(${String(typeof v)})`)
    assert.throws(() => req.issueToken(v), refused('malformed'), `issueToken(${String(typeof v)})`)
  }
  for (const v of [null, 5, 'x', [], { bogus: 1 }, Symbol('s'), () => {}, 10n]) {
    assert.throws(() => req.deny('no', v), refused('malformed'), `deny options ${String(typeof v)}`)
  }
  assert.ok(req.isPending())
  req.deny()
  await decision
  for (const m of made) await m.close()
  await gate.close()
})
