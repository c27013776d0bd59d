// The Node API: conversions, listeners (fail-safe), answers and their error codes, execution,
// abort signals, close, event streams and lag.
import { test } from 'node:test'
import assert from 'node:assert/strict'
import { createHash } from 'node:crypto'
import { getEventListeners } from 'node:events'
import { mkdtempSync, readFileSync, rmSync } from 'node:fs'
import { tmpdir } from 'node:os'
import path from 'node:path'
import { setTimeout as sleep } from 'node:timers/promises'
import {
  Gate,
  SignoffError,
  HANDLER_RESPONDER,
  DEFAULT_KEYWORDS,
  fromOpenAIToolCall,
  toolCallsFromOpenAIMessage,
  fromAISDKToolCall,
  fromAnthropicToolUse,
  isSignoffError,
} from '../dist/index.mjs'

const pathSchema = {
  type: 'object',
  properties: { path: { type: 'string' } },
  required: ['path'],
  additionalProperties: false,
}

function makeGate(options = {}) {
  const gate = new Gate(options)
  const ran = []
  gate.register({
    name: 'delete_file',
    description: 'Deletes a file',
    parameters: pathSchema,
    editable: true,
    execute: (args) => {
      ran.push(['delete_file', args])
      return { deleted: args.path }
    },
  })
  gate.register({
    name: 'read_file',
    description: 'Reads a file',
    parameters: pathSchema,
    execute: async (args) => {
      ran.push(['read_file', args])
      return `contents of ${args.path}`
    },
  })
  return { gate, ran }
}

const code = (c) => (e) => e instanceof SignoffError && e.code === c

test('tool definitions become the core ToolSpec: camelCase keys, unknown keys refused', async () => {
  const gate = new Gate()
  gate.register({
    name: 'transfer_funds',
    description: 'Moves money',
    promptTemplate: 'Move money with {tool}? {args}',
    timeoutMs: 1234,
    readOnly: false,
    rules: [{ kind: 'greater_than', pointer: '/amount', value: 100 }],
  })
  const [info] = gate.tools()
  assert.equal(info.name, 'transfer_funds')
  assert.equal(info.promptTemplate, 'Move money with {tool}? {args}')
  assert.equal(info.timeoutMs, 1234)
  assert.deepEqual(info.rules, [{ kind: 'greater_than', pointer: '/amount', value: 100 }])
  // The prompt template and timeout reach the request.
  const stream = gate.events()
  const p = gate.confirm({ tool: 'transfer_funds', arguments: { amount: 5 } })
  const { value: req } = await stream.next()
  assert.equal(req.timeoutMs, 1234)
  assert.match(req.prompt, /^Move money with transfer_funds\?/)
  assert.ok(req.reasons.some((r) => r.includes('transfer')))
  req.deny()
  await p
  // A typo is refused, never ignored.
  assert.throws(() => gate.register({ name: 'x', aproval: 'required' }), code('malformed'))
  assert.throws(() => gate.register({ name: 'x', parameters: { type: 12 } }), code('invalid_tool'))
  assert.throws(() => gate.register({ name: '  ' }), code('invalid_tool'))
  // A tool's timeout has the gate default's bounds, checked by the core: 1 ms to 30 days.
  for (const timeoutMs of [0, 30 * 24 * 3600 * 1000 + 1]) {
    assert.throws(() => gate.register({ name: 'slow', timeoutMs }), code('invalid_tool'), String(timeoutMs))
  }
  assert.throws(() => gate.register({ name: 'x', approval: 'sometimes' }), code('malformed'))
  assert.throws(() => new Gate({ defaultTimeoutMS: 5 }), code('config'))
  assert.ok(DEFAULT_KEYWORDS.includes('delete'))
  await gate.close()
})

test('ungated calls resolve without a request; refused calls reject with the core code', async () => {
  const { gate } = makeGate()
  const stream = gate.events()
  const d = await gate.confirm({ tool: 'read_file', arguments: { path: '/a' } })
  assert.deepEqual(d, { outcome: 'approved', approved: true, arguments: { path: '/a' }, edited: false, by: 'not-gated', scope: 'once' })
  await assert.rejects(gate.confirm({ tool: 'nope' }), code('unknown_tool'))
  // `arguments: null` is no arguments, `{}`, as in every language (the schema then decides).
  await assert.rejects(gate.confirm({ tool: 'read_file', arguments: null }), (e) => code('invalid_arguments')(e) && /path/.test(e.message))
  await assert.rejects(gate.confirm({ tool: 'delete_file', arguments: { path: 1 } }), code('invalid_arguments'))
  await assert.rejects(gate.confirm({ tool: 'delete_file', arguments: { n: 10n } }), code('malformed'))
  await assert.rejects(gate.confirm({ tool: 42 }), code('malformed'))
  assert.deepEqual(gate.evaluate({ tool: 'delete_file', arguments: { path: '/a' } }), {
    required: true,
    forcedByRule: false,
    reasons: ['the tool name contains the keyword "delete"'],
  })
  await gate.close()
  assert.deepEqual((await toArray(stream)).map((e) => e.type), [])
})

async function toArray(stream) {
  const out = []
  for await (const e of stream) out.push(e)
  return out
}

test('a synchronous listener approves: the request shows what will run', async () => {
  const { gate } = makeGate()
  let seen
  gate.on('confirmation-request', (req) => {
    seen = req
    assert.equal(req.type, 'confirmation-request')
    assert.equal(req.tool, 'delete_file')
    assert.equal(req.description, 'Deletes a file')
    assert.deepEqual(req.arguments, { path: '/tmp/x' })
    assert.equal(req.displayArguments, '{\n  "path": "/tmp/x"\n}')
    assert.equal(req.toolCallId, 'call_9')
    assert.equal(req.sessionId, 's1')
    assert.ok(req.deadline instanceof Date && req.deadline.getTime() === req.deadlineMs)
    assert.ok(req.isPending())
    assert.equal(req.approve({ responder: 'alice' }), 'approved')
    assert.ok(!req.isPending())
    assert.throws(() => req.approve(), code('already_resolved'))
  })
  const d = await gate.confirm({ tool: 'delete_file', arguments: { path: '/tmp/x' }, callId: 'call_9', sessionId: 's1' })
  assert.equal(d.outcome, 'approved')
  assert.equal(d.by, 'person')
  assert.equal(d.responder, 'alice')
  assert.equal(d.requestId, seen.id)
  assert.equal(JSON.parse(JSON.stringify(seen)).argumentsDigest, seen.argumentsDigest)
  await gate.close()
})

test("a result's decision is the whole decision: its request id, and an approval's arguments and edit", async () => {
  const { gate } = makeGate()
  let answer = (req) => req.approve({ arguments: { path: '/tmp/y' }, responder: 'alice' })
  gate.on('confirmation-request', (req) => answer(req))
  const edited = await gate.execute({ tool: 'delete_file', arguments: { path: '/tmp/x' } })
  assert.equal(edited.status, 'executed')
  assert.ok(edited.requestId)
  assert.deepEqual(edited.decision, {
    outcome: 'approved',
    approved: true,
    requestId: edited.requestId,
    arguments: { path: '/tmp/y' },
    edited: true,
    by: 'person',
    scope: 'once',
    responder: 'alice',
  })
  assert.deepEqual(edited.arguments, { path: '/tmp/y' })
  answer = (req) => req.deny('no')
  const denied = await gate.execute({ tool: 'delete_file', arguments: { path: '/tmp/x' } })
  assert.deepEqual(denied.decision, { outcome: 'denied', approved: false, requestId: denied.requestId, reason: 'no' })
  const free = await gate.execute({ tool: 'read_file', arguments: { path: '/r' } })
  assert.deepEqual(free.decision, { outcome: 'approved', approved: true, arguments: { path: '/r' }, edited: false, by: 'not-gated', scope: 'once' })
  const [batched] = await gate.executeBatch([{ tool: 'delete_file', arguments: { path: '/tmp/z' } }])
  assert.equal(batched.decision.requestId, batched.requestId)
  assert.equal(batched.decision.outcome, 'denied')
  await gate.close()
})

test('an async listener answers later; denial reasons reach the model', async () => {
  const { gate, ran } = makeGate()
  gate.on('confirmation-request', async (req) => {
    await sleep(20)
    req.deny('not that file', { responder: 'bob' })
  })
  const r = await gate.execute({ tool: 'delete_file', arguments: { path: '/etc/passwd' }, callId: 'c1' })
  assert.equal(r.status, 'denied')
  assert.equal(r.decision.reason, 'not that file')
  assert.equal(r.decision.responder, 'bob')
  assert.match(r.content, /declined/)
  assert.match(r.content, /not that file/)
  assert.match(r.content, /Do not retry/)
  assert.deepEqual(r.toOpenAIMessage(), { role: 'tool', tool_call_id: 'c1', content: r.content })
  assert.deepEqual(ran, [])
  await gate.close()
})

// A listener's `req.approve()` answers through the run that showed it the request while that run
// lasts (a synchronous listener until it returns, an async one until its promise settles); after
// that, by id, and the core says why the request no longer waits. Two gates' runs on one thread
// never answer each other's requests.
test('approve() inside a listener run, after it, and with two gates on one thread', async () => {
  const a = makeGate()
  const b = makeGate()
  const kept = []
  const release = []
  a.gate.on('confirmation-request', async (req) => {
    kept.push(req)
    await new Promise((r) => release.push(r))
    assert.equal(req.approve(), 'approved')
    assert.throws(() => req.approve(), (e) => e instanceof SignoffError && e.code === 'already_resolved')
  })
  b.gate.on('confirmation-request', (req) => {
    kept.push(req) // returns without answering: the run ends, the request is cancelled
  })
  const ra = a.gate.execute({ tool: 'delete_file', arguments: { path: '/a' }, callId: 'a' })
  const rb = await b.gate.execute({ tool: 'delete_file', arguments: { path: '/b' }, callId: 'b' })
  assert.equal(rb.status, 'cancelled')
  assert.equal(rb.decision.cancelReason, 'approval-failed')
  const [fromA, fromB] = kept
  assert.equal(fromA.arguments.path, '/a')
  assert.equal(fromB.arguments.path, '/b')
  // b's run is over: by id, the core's refusal (it never turns into an approval of a's request).
  assert.throws(() => fromB.approve(), (e) => e instanceof SignoffError && e.code === 'already_resolved')
  assert.equal(a.gate.pendingCount, 1)
  release.shift()()
  const r = await ra
  assert.equal(r.status, 'executed')
  assert.deepEqual(a.ran, [['delete_file', { path: '/a' }]])
  assert.deepEqual(b.ran, [])
  // a's run has settled too: by id now, the same refusal.
  await sleep(5)
  assert.throws(() => fromA.approve(), (e) => e instanceof SignoffError && e.code === 'already_resolved')
  await a.gate.close()
  await b.gate.close()
})

// A failed approval step (a listener that throws, rejects, or settles without answering) is not
// a person's refusal: the request ends at once as cancelled / approval-failed, the model is told
// the approval step failed (never the error's text, never "declined"), and the detail goes to the
// audit log (and stderr).
const FAILED_STEP = /the approval step failed/
for (const [name, listener, detail] of [
  ['throws', () => { throw new Error('boom') }, 'the approval handler failed: boom'],
  ['rejects', async () => { await sleep(5); throw new Error('late boom') }, 'the approval handler failed: late boom'],
  ['throws a non-Error', () => { throw 'just a string' }, 'the approval handler failed: just a string'],
  ['returns without answering', () => {}, 'the approval handler returned without answering'],
  ['resolves without answering', async () => { await sleep(5) }, 'the approval handler returned without answering'],
]) {
  test(`a listener that ${name}: cancelled (approval-failed), the tool does not run, the detail is audited only`, async () => {
    const dir = mkdtempSync(path.join(tmpdir(), 'signoff-'))
    const auditPath = path.join(dir, 'audit.jsonl')
    const { gate, ran } = makeGate({ auditPath })
    const resolved = []
    gate.on('confirmation-resolved', (e) => resolved.push(e))
    gate.on('confirmation-request', listener)
    const r = await gate.execute({ tool: 'delete_file', arguments: { path: '/x' }, callId: 'c' })
    assert.equal(r.status, 'cancelled')
    assert.equal(r.decision.outcome, 'cancelled')
    assert.equal(r.decision.cancelReason, 'approval-failed')
    assert.equal(r.decision.reason, 'approval-failed')
    assert.equal(r.decision.responder, undefined)
    assert.match(r.content, FAILED_STEP)
    assert.match(r.content, /Do not retry/)
    assert.doesNotMatch(r.content, /declined/)
    assert.ok(!r.content.includes(detail), r.content)
    assert.deepEqual(ran, [])
    await sleep(10)
    assert.equal(resolved.length, 1)
    assert.equal(resolved[0].outcome, 'cancelled')
    assert.equal(resolved[0].cancelReason, 'approval-failed')
    assert.equal(resolved[0].reason, undefined)
    await gate.close()
    const records = readFileSync(auditPath, 'utf8').trim().split('\n').map((l) => JSON.parse(l))
    const notice = records.find((x) => x.kind === 'notice' && x.decision === 'approval-failed')
    assert.ok(notice, JSON.stringify(records.map((x) => x.kind)))
    assert.equal(notice.responder, HANDLER_RESPONDER)
    assert.equal(notice.reason, detail)
    assert.equal(notice.request_id, r.requestId)
    rmSync(dir, { recursive: true, force: true })
  })
}

for (const [name, options] of [
  ['allowedResponders', { allowedResponders: ['alice'] }],
  ['approvers', { approvers: { delete_file: ['alice'] } }],
]) {
  test(`with ${name}: a failing listener still ends the call at once (approval-failed), not at its deadline`, async () => {
    const dir = mkdtempSync(path.join(tmpdir(), 'signoff-'))
    const auditPath = path.join(dir, 'audit.jsonl')
    const { gate, ran } = makeGate({ ...options, auditPath, defaultTimeoutMs: 60_000 })
    let listener = () => {
      throw new Error('db password is hunter2')
    }
    gate.on('confirmation-request', (req) => listener(req))
    for (const [how, detail] of [
      ['throws', 'the approval handler failed: db password is hunter2'],
      ['rejects', 'the approval handler failed: token expired for carol'],
      ['returns', 'the approval handler returned without answering'],
    ]) {
      if (how === 'rejects') {
        listener = async () => {
          await sleep(5)
          throw new Error('token expired for carol')
        }
      } else if (how === 'returns') {
        listener = () => {}
      }
      const t0 = performance.now()
      const r = await gate.execute({ tool: 'delete_file', arguments: { path: `/${how}` }, callId: how })
      const took = performance.now() - t0
      assert.ok(took < 5_000, `${how}: ended after ${took} ms (its timeout is 60 s)`)
      assert.equal(r.status, 'cancelled', how)
      assert.equal(r.decision.cancelReason, 'approval-failed', how)
      assert.match(r.content, FAILED_STEP)
      assert.doesNotMatch(r.content, /declined/)
      assert.doesNotMatch(r.content, /hunter2|carol|without answering/)
      assert.deepEqual(ran, [])
      await gate.flushAudit()
      const records = readFileSync(auditPath, 'utf8').trim().split('\n').map((l) => JSON.parse(l))
      const notice = records.find((x) => x.kind === 'notice' && x.request_id === r.requestId)
      assert.ok(notice, `${how}: a notice for the request`)
      assert.equal(notice.decision, 'approval-failed')
      assert.equal(notice.responder, HANDLER_RESPONDER)
      assert.equal(notice.reason, detail)
      // signoff's own fail-safe is not a response the authenticator could refuse.
      assert.ok(!records.some((x) => x.kind === 'response-rejected'), `${how}: nothing was refused`)
    }
    // A person named in the configuration still answers as before.
    listener = (req) => req.approve({ responder: 'alice' })
    assert.equal((await gate.execute({ tool: 'delete_file', arguments: { path: '/ok' } })).status, 'executed')
    await gate.close()
    rmSync(dir, { recursive: true, force: true })
  })
}

test('no listener, no subscriber: cancelled at once (no-approver), the tool does not run', async () => {
  const { gate, ran } = makeGate()
  const r = await gate.execute({ tool: 'delete_file', arguments: { path: '/x' } })
  assert.equal(r.status, 'cancelled')
  assert.equal(r.decision.cancelReason, 'no-approver')
  assert.match(r.content, /no one was available/)
  assert.deepEqual(ran, [])
  // Removing the last listener unsubscribes again.
  const l = (req) => req.approve()
  gate.on('confirmation-request', l)
  assert.equal(gate.approverCount, 1)
  assert.equal((await gate.confirm({ tool: 'delete_file', arguments: { path: '/y' } })).outcome, 'approved')
  gate.off('confirmation-request', l)
  await sleep(5)
  assert.equal(gate.approverCount, 0)
  assert.equal((await gate.confirm({ tool: 'delete_file', arguments: { path: '/y' } })).reason, 'no-approver')
  await gate.close()
})

test('several listeners: the approval step fails only when all settled and none answered', async () => {
  const { gate } = makeGate()
  gate.on('confirmation-request', () => {}) // returns at once without answering
  gate.on('confirmation-request', async (req) => {
    await sleep(30)
    req.approve()
  })
  const d = await gate.confirm({ tool: 'delete_file', arguments: { path: '/x' } })
  assert.equal(d.outcome, 'approved')
  await gate.close()
})

test('once() listeners handle one request', async () => {
  const { gate } = makeGate()
  gate.once('confirmation-request', async (req) => {
    await sleep(10)
    req.approve()
  })
  assert.equal((await gate.confirm({ tool: 'delete_file', arguments: { path: '/x' } })).outcome, 'approved')
  await sleep(5)
  assert.equal(gate.listenerCount('confirmation-request'), 0)
  assert.equal((await gate.confirm({ tool: 'delete_file', arguments: { path: '/x' } })).reason, 'no-approver')
  await gate.close()
})

test('edits and session grants', async () => {
  const { gate, ran } = makeGate()
  gate.register({ name: 'pay', approval: 'required', parameters: { type: 'object' }, execute: () => 'paid' })
  let next = (req) => req.approve({ arguments: { path: '/tmp/safe' } })
  gate.on('confirmation-request', (req) => next(req))
  const r = await gate.execute({ tool: 'delete_file', arguments: { path: '/home/a' } })
  assert.equal(r.status, 'executed')
  assert.equal(r.edited, true)
  assert.deepEqual(r.arguments, { path: '/tmp/safe' })
  assert.deepEqual(ran, [['delete_file', { path: '/tmp/safe' }]])
  assert.match(r.content, /changed the arguments/)

  // Invalid edits and edits on a non-editable tool are refused; the request stays.
  next = (req) => {
    assert.throws(() => req.approve({ arguments: { path: 5 } }), code('invalid_arguments'))
    assert.throws(() => req.approve({ scope: 'forever' }), code('malformed'))
    assert.ok(req.isPending())
    req.deny()
  }
  assert.equal((await gate.confirm({ tool: 'delete_file', arguments: { path: '/a' } })).outcome, 'denied')
  next = (req) => {
    assert.throws(() => req.approve({ arguments: { other: 1 } }), code('edits_not_allowed'))
    req.approve({ scope: 'session' })
  }
  assert.equal((await gate.confirm({ tool: 'pay', arguments: {}, sessionId: 's1' })).scope, 'session')
  assert.deepEqual(gate.grants('s1'), ['pay'])
  next = () => assert.fail('a session grant needs no request')
  const again = await gate.confirm({ tool: 'pay', arguments: { a: 1 }, sessionId: 's1' })
  assert.equal(again.by, 'session-grant')
  // Never across sessions.
  next = (req) => req.deny()
  assert.equal((await gate.confirm({ tool: 'pay', arguments: {}, sessionId: 's2' })).outcome, 'denied')
  assert.ok(gate.revokeGrant('s1', 'pay'))
  assert.equal((await gate.confirm({ tool: 'pay', arguments: {}, sessionId: 's1' })).outcome, 'denied')
  await gate.close()
})

test('gate.respond: every rejection has its stable code and leaves the request pending', async () => {
  const { gate } = makeGate({ defaultTimeoutMs: 60_000 })
  const stream = gate.events()
  const p = gate.confirm({ tool: 'delete_file', arguments: { path: '/a' }, sessionId: 's1' })
  const { value: req } = await stream.next()
  const bound = { id: req.id, tool: req.tool, argumentsDigest: req.argumentsDigest, sessionId: req.sessionId }
  assert.throws(() => gate.respond({ ...bound, id: '00000000-0000-4000-8000-000000000000', decision: 'approve' }), code('unknown_request'))
  assert.throws(() => gate.respond({ ...bound, tool: 'read_file', decision: 'approve' }), code('mismatch'))
  assert.throws(() => gate.respond({ ...bound, sessionId: 's2', decision: 'approve' }), code('mismatch'))
  assert.throws(() => gate.respond({ ...bound, argumentsDigest: 'sha256:00', decision: 'approve' }), code('mismatch'))
  assert.throws(() => gate.respond({ ...bound, decision: 'approve', argumentz: {} }), code('malformed'))
  assert.throws(() => gate.respond({ ...bound, decision: 'deny', scope: 'session' }), code('malformed'))
  assert.throws(() => gate.respondJson('{"id": 5}'), code('malformed'))
  assert.ok(req.isPending())
  // `arguments: null` is no edit (as an absent option is): an approval runs what was shown.
  assert.equal(gate.respond({ ...bound, decision: 'approve', responder: 'carol', arguments: null }), 'approved')
  assert.throws(() => gate.respond({ ...bound, decision: 'deny' }), code('already_resolved'))
  const d = await p
  assert.equal(d.responder, 'carol')
  assert.deepEqual([d.arguments, d.edited], [{ path: '/a' }, false])
  await gate.close()
  assert.throws(() => gate.respond({ ...bound, decision: 'deny' }), code('closed'))
  const e = (() => { try { gate.respond({ ...bound, decision: 'deny' }) } catch (x) { return x } })()
  assert.ok(e instanceof Error && e.name === 'SignoffError' && isSignoffError(e, 'closed'))
})

test('timeouts deny; a late answer is expired', async () => {
  const { gate } = makeGate({ defaultTimeoutMs: 50 })
  const timeouts = []
  gate.on('confirmation-timeout', (e) => timeouts.push(e))
  let late
  gate.on('confirmation-request', (req) => {
    late = req
    return sleep(120).then(() => assert.throws(() => req.approve(), code('expired')))
  })
  const r = await gate.execute({ tool: 'delete_file', arguments: { path: '/x' } })
  assert.equal(r.status, 'timed-out')
  assert.equal(r.decision.timeoutMs, 50)
  assert.match(r.content, /within 50 ms/)
  await sleep(150)
  assert.equal(timeouts.length, 1)
  assert.equal(timeouts[0].id, late.id)
  await gate.close()
})

test('execute: outputs, failures, refusals; each approved call runs exactly once', async () => {
  const { gate, ran } = makeGate()
  let calls = 0
  gate.register({ name: 'count', approval: 'not_required', execute: () => ++calls })
  gate.register({ name: 'fail_sync', approval: 'not_required', execute: () => { throw new Error('disk full') } })
  gate.register({ name: 'fail_async', approval: 'not_required', execute: async () => { throw new TypeError('bad') } })
  gate.register({ name: 'bigint', approval: 'not_required', execute: () => 10n })
  gate.register({ name: 'no_exec', approval: 'not_required' })
  gate.register({ name: 'big', approval: 'not_required', execute: (a) => ({ n: a.n, when: new Date(0) }) })

  assert.equal((await gate.execute({ tool: 'count' })).output, 1)
  assert.equal(calls, 1)
  const f1 = await gate.execute({ tool: 'fail_sync', callId: 'f1' })
  assert.equal(f1.status, 'failed')
  assert.equal(f1.error, 'disk full')
  assert.match(f1.content, /ran and failed: disk full/)
  assert.equal(f1.isError, true)
  assert.equal((await gate.execute({ tool: 'fail_async' })).error, 'bad')
  assert.match((await gate.execute({ tool: 'bigint' })).error, /not JSON/)
  const nx = await gate.execute({ tool: 'no_exec' })
  assert.equal(nx.status, 'rejected')
  assert.equal(nx.errorCode, 'no_executor')
  const unknown = await gate.execute({ tool: 'format_disk', callId: 'u' })
  assert.equal(unknown.status, 'rejected')
  assert.equal(unknown.errorCode, 'unknown_tool')
  assert.match(unknown.content, /refused and did not run/)
  // JSON semantics across the boundary: integers stay integers, dates become strings.
  const big = await gate.execute({ tool: 'big', arguments: { n: 5_000_000_000 } })
  assert.deepEqual(big.output, { n: 5_000_000_000, when: '1970-01-01T00:00:00.000Z' })
  assert.equal(big.content, '{"n":5000000000,"when":"1970-01-01T00:00:00.000Z"}')
  const ok = await gate.execute({ tool: 'read_file', arguments: { path: '/a' }, callId: 'r' })
  assert.equal(ok.content, 'contents of /a')
  assert.deepEqual(ok.toAnthropicBlock(), { type: 'tool_result', tool_use_id: 'r', content: 'contents of /a', is_error: false })
  assert.deepEqual(ok.toAISDKMessage(), {
    role: 'tool',
    content: [{ type: 'tool-result', toolCallId: 'r', toolName: 'read_file', output: { type: 'text', value: 'contents of /a' } }],
  })
  assert.deepEqual(ran, [['read_file', { path: '/a' }]])
  await gate.close()
})

test('the digest the person approves is the core digest of the canonical JSON', async () => {
  const { gate } = makeGate()
  gate.register({ name: 'pay', approval: 'required', parameters: { type: 'object' } })
  const stream = gate.events()
  // An undefined property is not JSON: refused (JSON.stringify would drop it), never sent.
  await assert.rejects(
    gate.confirm({ tool: 'pay', arguments: { to: 'x', skip: undefined } }),
    (e) => code('malformed')(e) && e.message.includes('arguments.skip is undefined'),
  )
  const p = gate.confirm({ tool: 'pay', arguments: { to: 'x', amount: 5_000_000_000 } })
  const { value: req } = await stream.next()
  const canonical = '{"amount":5000000000,"to":"x"}'
  assert.equal(req.argumentsDigest, 'sha256:' + createHash('sha256').update(canonical).digest('hex'))
  assert.deepEqual(req.arguments, { to: 'x', amount: 5_000_000_000 })
  req.deny()
  await p
  await gate.close()
})

test('executeBatch: order kept, concurrent decisions, each call at most once', async () => {
  const { gate, ran } = makeGate()
  const held = []
  gate.on('confirmation-request', (req) => new Promise((resolve) => held.push({ req, resolve })))
  const calls = [
    { tool: 'delete_file', arguments: { path: '/1' }, callId: 'a' },
    { tool: 'read_file', arguments: { path: '/2' }, callId: 'b' },
    { tool: 'delete_file', arguments: { path: '/3' }, callId: 'c' },
    { tool: 'nope', callId: 'd' },
    { tool: 'delete_file', arguments: { path: '/5' }, callId: 'e' },
  ]
  const p = gate.executeBatch(calls)
  while (held.length < 3) await sleep(1)
  // The ungated call already ran while the others wait.
  assert.deepEqual(ran, [['read_file', { path: '/2' }]])
  // Answer in reverse order.
  for (const { req, resolve } of held.reverse()) {
    if (req.arguments.path === '/3') req.deny('no')
    else req.approve()
    resolve()
  }
  const results = await p
  assert.deepEqual(results.map((r) => r.callId), ['a', 'b', 'c', 'd', 'e'])
  assert.deepEqual(results.map((r) => r.status), ['executed', 'executed', 'denied', 'rejected', 'executed'])
  assert.equal(ran.filter(([, a]) => a.path === '/1').length, 1)
  assert.equal(ran.filter(([, a]) => a.path === '/3').length, 0)
  assert.equal(ran.length, 3)
  await gate.close()
})

const aborted = (e) => e instanceof DOMException && e.name === 'AbortError'

// Aborted by a listener while the listeners are being shown the request (inside the call that
// made it): the request is cancelled at once, so a later listener's approval is refused and the
// tool never runs. It used to be cancelled only after the listeners returned: the approval was
// accepted, the tool ran, and the caller, told AbortError, never learnt it.
// A batch publishes its calls' requests one after the other in the same poll: aborted while the
// first is shown, the others are cancelled without being shown (one was shown and approved).
test('a batch aborted by a listener while its first request is shown: no other is shown, nothing runs', async () => {
  const { gate, ran } = makeGate()
  const agent = new AbortController()
  const shown = []
  gate.on('confirmation-request', (req) => {
    shown.push(req.arguments.path)
    if (req.arguments.path === '/b1') agent.abort()
  })
  gate.on('confirmation-request', (req) => {
    try {
      req.approve()
    } catch {}
  })
  const calls = ['/b1', '/b2', '/b3'].map((path, i) => ({ tool: 'delete_file', arguments: { path }, callId: `b${i}` }))
  await assert.rejects(gate.executeBatch(calls, { signal: agent.signal }), aborted)
  assert.deepEqual(shown, ['/b1'])
  assert.deepEqual(ran, [])
  assert.equal(gate.pendingCount, 0)
  await gate.close()
})

for (const method of ['execute', 'confirm']) {
  test(`a signal aborted by a listener, then an approval by another (${method}): refused, nothing runs`, async () => {
    const { gate, ran } = makeGate()
    const agent = new AbortController()
    const resolved = []
    gate.on('confirmation-resolved', (e) => resolved.push(e))
    let answer
    gate.on('confirmation-request', () => agent.abort())
    gate.on('confirmation-request', (req) => {
      assert.equal(req.isPending(), false)
      try {
        answer = req.approve()
      } catch (e) {
        answer = e.code
      }
    })
    await assert.rejects(gate[method]({ tool: 'delete_file', arguments: { path: '/etc/passwd' } }, { signal: agent.signal }), aborted)
    assert.equal(answer, 'already_resolved')
    assert.deepEqual(ran, [])
    await sleep(10)
    assert.deepEqual(resolved.map((e) => [e.outcome, e.cancelReason]), [['cancelled', 'aborted']])
    // The gate goes on: the next call is asked and answered.
    gate.removeAllListeners('confirmation-request')
    gate.on('confirmation-request', (req) => req.approve())
    assert.equal((await gate.execute({ tool: 'delete_file', arguments: { path: '/tmp/a' } })).status, 'executed')
    await gate.close()
  })
}

test('an aborted signal: the caller stops waiting; a waiting request is cancelled (aborted), a started tool finishes', async () => {
  const { gate, ran } = makeGate()
  const stream = gate.events()
  // Aborted while waiting: the request is cancelled (aborted) and the tool never runs.
  const ac = new AbortController()
  const p = gate.execute({ tool: 'delete_file', arguments: { path: '/x' } }, { signal: ac.signal })
  const { value: req } = await stream.next()
  ac.abort()
  await assert.rejects(p, aborted)
  assert.throws(() => req.approve(), code('already_resolved'))
  const resolved = (await stream.next()).value
  assert.equal(resolved.type, 'confirmation-resolved')
  assert.equal(resolved.cancelReason, 'aborted')
  // The signal's own reason is what the caller gets.
  const ac1 = new AbortController()
  const p1 = gate.confirm({ tool: 'delete_file', arguments: { path: '/x1' } }, { signal: ac1.signal })
  await stream.next()
  ac1.abort(new Error('the user left'))
  await assert.rejects(p1, /the user left/)
  assert.equal((await stream.next()).value.cancelReason, 'aborted')
  stream.close()
  // Already aborted: rejects at once, nobody is asked.
  let asked = 0
  gate.on('confirmation-request', (q) => {
    asked++
    q.approve()
  })
  await assert.rejects(gate.execute({ tool: 'delete_file', arguments: { path: '/y' } }, { signal: AbortSignal.abort() }), aborted)
  await assert.rejects(
    gate.executeBatch([{ tool: 'delete_file', arguments: { path: '/z' } }, { tool: 'read_file', arguments: { path: '/r' } }], { signal: AbortSignal.abort() }),
    aborted,
  )
  assert.equal(asked, 0)
  assert.deepEqual(ran, [])
  // Once the tool has started it is not interrupted: it runs to the end; only the caller stops
  // waiting. (Its result is recorded: the shared execute.json vectors check the audit record.)
  let release
  let finished = false
  gate.register({
    name: 'slow_delete',
    parameters: { type: 'object' },
    execute: async (_a, { signal }) => {
      assert.equal(signal.aborted, false)
      await new Promise((resolve) => (release = resolve))
      finished = true
      return 'done'
    },
  })
  const ac2 = new AbortController()
  const slow = gate.execute({ tool: 'slow_delete', arguments: {} }, { signal: ac2.signal })
  await sleep(10)
  ac2.abort()
  await assert.rejects(slow, aborted)
  assert.equal(finished, false)
  release()
  await sleep(10)
  assert.equal(finished, true)
  // A listener that aborts the very call it is shown: the caller stops waiting too.
  const ac4 = new AbortController()
  gate.removeAllListeners('confirmation-request')
  gate.on('confirmation-request', () => ac4.abort())
  await assert.rejects(gate.confirm({ tool: 'delete_file', arguments: { path: '/w' } }, { signal: ac4.signal }), aborted)
  gate.removeAllListeners('confirmation-request')
  gate.on('confirmation-request', (q) => q.approve())
  // A signal that never fires: its listeners are removed when the call settles.
  const ac3 = new AbortController()
  for (let i = 0; i < 50; i++) await gate.confirm({ tool: 'delete_file', arguments: { path: '/q' } }, { signal: ac3.signal })
  assert.equal(getEventListeners(ac3.signal, 'abort').length, 0)
  await gate.close()
})

test('close(): pending calls are cancelled (shutdown), nothing runs, later answers fail `closed`', async () => {
  const { gate, ran } = makeGate()
  const seen = []
  gate.on('confirmation-request', (req) => {
    seen.push(req)
    return new Promise(() => {}) // never settles
  })
  const stream = gate.events()
  const p1 = gate.execute({ tool: 'delete_file', arguments: { path: '/1' } })
  const p2 = gate.confirm({ tool: 'delete_file', arguments: { path: '/2' } })
  await sleep(10)
  assert.equal(gate.pendingCount, 2)
  const closing = gate.close()
  assert.equal(gate.close(), closing)
  await closing
  const [r1, d2] = await Promise.all([p1, p2])
  assert.equal(r1.status, 'cancelled')
  assert.equal(r1.decision.cancelReason, 'shutdown')
  assert.equal(d2.cancelReason, 'shutdown')
  assert.deepEqual(ran, [])
  assert.throws(() => seen[0].approve(), code('closed'))
  assert.equal((await gate.confirm({ tool: 'delete_file', arguments: { path: '/3' } })).cancelReason, 'shutdown')
  assert.ok(gate.closed)
  // The stream delivers what was published, then ends.
  const types = (await toArray(stream)).map((e) => e.type)
  assert.deepEqual(types.filter((t) => t === 'confirmation-resolved').length, 2)
  assert.equal(types.filter((t) => t === 'confirmation-request').length, 2)
})

test('close(): a later call that needs approval is cancelled even under a session grant', async () => {
  const { gate, ran } = makeGate()
  gate.on('confirmation-request', (req) => req.approve({ scope: 'session' }))
  const call = (path) => ({ tool: 'delete_file', arguments: { path }, sessionId: 's1' })
  assert.equal((await gate.execute(call('/a'))).status, 'executed')
  assert.equal((await gate.confirm(call('/b'))).by, 'session-grant')
  await gate.close()
  const r = await gate.execute(call('/c'))
  assert.equal(r.status, 'cancelled')
  assert.equal(r.decision.cancelReason, 'shutdown')
  assert.deepEqual(ran, [['delete_file', { path: '/a' }]])
  // A tool that needs no approval is not the gate's to stop.
  assert.equal((await gate.execute({ tool: 'read_file', arguments: { path: '/r' } })).status, 'executed')
})

test('events(): breaking out unsubscribes; listeners of other events observe', async () => {
  const { gate } = makeGate()
  const responses = []
  gate.on('confirmation-response', (e) => responses.push(e))
  // An observer: it never answers, so it does not count as an approver.
  assert.equal(gate.approverCount, 0)
  const stream = gate.events()
  assert.equal(gate.approverCount, 1)
  const p = gate.confirm({ tool: 'delete_file', arguments: { path: '/x' } })
  for await (const e of stream) {
    if (e.type === 'confirmation-request') {
      e.approve({ responder: 'ui' })
      break
    }
  }
  assert.equal(gate.approverCount, 0)
  assert.equal((await p).responder, 'ui')
  await sleep(10)
  assert.equal(responses.length, 1)
  assert.equal(responses[0].responder, 'ui')
  assert.equal(responses[0].decision, 'approve')
  gate.removeAllListeners('confirmation-response')
  await sleep(5)
  assert.equal(gate.approverCount, 0)
  await gate.close()
})

test('a lagging stream gets a typed lag item with the pending snapshot', async () => {
  const { gate } = makeGate({ busCapacity: 4 })
  const stream = gate.events()
  const ps = []
  for (let i = 0; i < 20; i++) ps.push(gate.confirm({ tool: 'delete_file', arguments: { path: `/${i}` } }))
  const { value: first } = await stream.next()
  assert.equal(first.type, 'lagged')
  assert.ok(first.missed >= 16)
  assert.equal(first.pending.length, 20)
  assert.equal(first.more, null, 'fewer than 1,000 pending: the snapshot is all of them')
  // The snapshot is answerable.
  for (const req of first.pending) req.approve()
  const ds = await Promise.all(ps)
  assert.ok(ds.every((d) => d.outcome === 'approved'))
  // A lagging on() listener gets a 'lagged' event, never silence.
  stream.close()
  await gate.close()

  const g2 = makeGate({ busCapacity: 2 }).gate
  const lags = []
  g2.on('lagged', (e) => lags.push(e))
  g2.on('confirmation-request', (req) => req.approve())
  for (let i = 0; i < 10; i++) await g2.confirm({ tool: 'delete_file', arguments: { path: '/x' } })
  await sleep(20)
  assert.ok(lags.length >= 1)
  assert.ok(lags[0].missed > 0)
  await g2.close()
})

test('model tool-call converters', async () => {
  const { gate } = makeGate()
  assert.deepEqual(fromOpenAIToolCall({ id: 'c1', type: 'function', function: { name: 'read_file', arguments: '{"path":"/a"}' } }, { sessionId: 's' }), {
    tool: 'read_file',
    arguments: { path: '/a' },
    callId: 'c1',
    sessionId: 's',
    metadata: undefined,
  })
  const calls = toolCallsFromOpenAIMessage({
    role: 'assistant',
    tool_calls: [{ id: 'c2', type: 'function', function: { name: 'read_file', arguments: '{not json' } }],
  })
  const [bad] = await gate.executeBatch(calls)
  assert.equal(bad.status, 'rejected')
  assert.equal(bad.errorCode, 'invalid_arguments')
  assert.equal(bad.toOpenAIMessage().tool_call_id, 'c2')
  // Model-written text is read as strictly as the core reads JSON: a repeated key (which value
  // would run?) or NaN is not taken apart here; the gate refuses the raw text and tells the model.
  for (const text of ['{"path":"/a","path":"/b"}', '{"path":NaN}']) {
    const call = fromOpenAIToolCall({ id: 'c3', type: 'function', function: { name: 'read_file', arguments: text } })
    assert.equal(call.arguments, text)
    const r = await gate.execute(call)
    assert.equal(r.status, 'rejected')
    assert.equal(r.errorCode, 'invalid_arguments')
  }
  assert.deepEqual(fromAISDKToolCall({ toolCallId: 'x', toolName: 'read_file', input: { path: '/b' } }).arguments, { path: '/b' })
  assert.deepEqual(fromAnthropicToolUse({ id: 'tu', name: 'read_file', input: { path: '/c' } }).callId, 'tu')
  assert.deepEqual(gate.openAITools()[0], {
    type: 'function',
    function: { name: 'delete_file', description: 'Deletes a file', parameters: pathSchema },
  })
  await gate.close()
})

test('the audit log records requests, answers, outcomes and executions', async () => {
  const dir = mkdtempSync(path.join(tmpdir(), 'signoff-'))
  const auditPath = path.join(dir, 'audit.jsonl')
  const { gate } = makeGate({ auditPath })
  gate.on('confirmation-request', (req) => req.approve({ responder: 'alice' }))
  await gate.execute({ tool: 'delete_file', arguments: { path: '/x' } })
  assert.throws(() => gate.respondJson('nope'), code('malformed'))
  await gate.flushAudit()
  await gate.close()
  const records = readFileSync(auditPath, 'utf8').trim().split('\n').map((l) => JSON.parse(l))
  const kinds = records.map((r) => r.kind)
  for (const k of ['request', 'response', 'outcome', 'execution', 'response-rejected']) assert.ok(kinds.includes(k), k)
  assert.equal(records.find((r) => r.kind === 'response').responder, 'alice')
  rmSync(dir, { recursive: true, force: true })
})

test('endSession cancels the session and drops its grants', async () => {
  const { gate } = makeGate()
  const stream = gate.events()
  const p = gate.confirm({ tool: 'delete_file', arguments: { path: '/x' }, sessionId: 'sx' })
  await stream.next()
  assert.equal(gate.endSession('sx'), 1)
  assert.equal((await p).cancelReason, 'session-ended')
  assert.equal(gate.pending().length, 0)
  stream.close()
  await gate.close()
})

test('a gate nobody references is collected, listeners, tools and all', async () => {
  if (!globalThis.gc) return // run with --expose-gc (npm test does)
  let collected = false
  const registry = new FinalizationRegistry(() => (collected = true))
  ;(() => {
    const { gate } = makeGate()
    gate.on('confirmation-request', (req) => req.approve())
    gate.on('confirmation-resolved', () => {})
    registry.register(gate, 'gate')
  })()
  for (let i = 0; i < 50 && !collected; i++) {
    await sleep(10)
    globalThis.gc()
  }
  assert.ok(collected, 'the gate was collected')
})

test('events({ types }) delivers only those types', async () => {
  const { gate } = makeGate()
  const only = gate.events({ types: ['confirmation-request', 'confirmation-resolved'] })
  assert.throws(() => gate.events({ types: ['confirmation-requests'] }), code('malformed'))
  const p = gate.confirm({ tool: 'delete_file', arguments: { path: '/x' } })
  const { value: req } = await only.next()
  req.approve()
  await p
  const { value: next } = await only.next()
  assert.equal(next.type, 'confirmation-resolved') // the response event was skipped
  only.close()
  await gate.close()
})

test('every field of the core request reaches JavaScript: in events, listeners, pending() and the core JSON', async () => {
  const { parseEvent, serializeEvent } = await import('../dist/index.mjs')
  const { gate } = makeGate({ denyWhenUnobserved: false })
  const seen = []
  let release
  const held = new Promise((r) => (release = r))
  // An async listener that answers later: the request stays pending meanwhile.
  gate.on('confirmation-request', async (req) => {
    seen.push(req)
    await held
    req.deny('no')
  })
  const stream = gate.events({ types: ['confirmation-request'] })
  const call = gate.confirm({
    tool: 'delete_file',
    arguments: { path: '/tmp/a_b\u202e\u200bc\n' },
    sessionId: 's1',
    callId: 'call_1',
    metadata: { user_id: 'u' },
  })
  const { value: event } = await stream.next()
  const [listed] = gate.pending()
  // The core's own JSON of the request (snake_case), every optional field set.
  const core = serializeEvent(event)
  const camel = (k) => k.replace(/_([a-z])/g, (_, c) => c.toUpperCase())
  const keys = Object.keys(core).map(camel).sort()
  assert.ok(keys.includes('toolCallId') && keys.includes('metadata'), keys.join())
  // The plain event (as `parseEvent` gives it) has exactly the core's fields...
  const plain = parseEvent(core)
  assert.deepEqual(Object.keys(plain).sort(), keys)
  assert.deepEqual(serializeEvent(plain), core)
  // ...field values keep their own keys...
  assert.deepEqual(plain.arguments, { path: '/tmp/a_b\u202e\u200bc\n' })
  // (a listener derives the display text from the arguments itself: it is the core's, escaped)
  assert.ok(!/[\u202e\u200b]/.test(plain.displayArguments), plain.displayArguments)
  assert.deepEqual(plain.metadata, { user_id: 'u' })
  assert.equal(plain.toolCallId, 'call_1')
  assert.equal(plain.sessionId, 's1')
  // ...and every one reads the same on the request a stream, a listener and pending() give.
  for (const [where, req] of [['a stream', event], ['a listener', seen[0]], ['pending()', listed]]) {
    for (const k of keys) assert.deepEqual(req[k], plain[k], `${k} of ${where}`)
  }
  release()
  assert.equal((await call).outcome, 'denied')
  await stream.return()
  gate.close()
})
