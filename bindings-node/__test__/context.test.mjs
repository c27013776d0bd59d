// The context an executor receives (its second argument): which call it runs, from the core's
// CallContext, and the gate's signal.
import { test } from 'node:test'
import assert from 'node:assert/strict'
import { setTimeout as sleep } from 'node:timers/promises'
import { Gate } from '../dist/index.mjs'

const pathSchema = { type: 'object', properties: { path: { type: 'string' } }, required: ['path'] }

/** What a context says about its call (everything but the signal). */
const fields = ({ tool, callId, requestId, sessionId, edited }) => ({ tool, callId, requestId, sessionId, edited })

function gateRecording() {
  const gate = new Gate()
  const seen = []
  gate.register({
    name: 'write_sync',
    approval: 'required',
    editable: true,
    parameters: pathSchema,
    execute: (_args, context) => (seen.push(context), 'ok'),
  })
  gate.register({
    name: 'write_async',
    approval: 'required',
    editable: true,
    parameters: pathSchema,
    execute: async (_args, context) => {
      await sleep(1)
      seen.push(context)
      return 'ok'
    },
  })
  return { gate, seen }
}

for (const tool of ['write_sync', 'write_async']) {
  test(`${tool}: an approved call sees the request the person answered, its call id and session, and whether it was edited`, async () => {
    const { gate, seen } = gateRecording()
    const requests = []
    let edit
    gate.on('confirmation-request', (req) => {
      requests.push(req)
      req.approve(edit ? { arguments: edit } : {})
    })
    for (edit of [undefined, { path: '/b' }]) {
      const r = await gate.execute({ tool, arguments: { path: '/a' }, sessionId: 's1', callId: `c-${requests.length}` })
      assert.equal(r.status, 'executed', r.content)
      const req = requests.at(-1)
      const context = seen.at(-1)
      assert.deepEqual(fields(context), {
        tool,
        callId: `c-${requests.length - 1}`,
        requestId: req.id,
        sessionId: 's1',
        edited: edit !== undefined,
      })
      assert.equal(r.requestId, context.requestId)
      assert.ok(Object.isFrozen(context))
      assert.ok(context.signal instanceof AbortSignal)
      assert.equal(context.signal.aborted, false)
    }
    await gate.close()
  })
}

test('an ungated call has no request (null), and a call without an id has a null callId', async () => {
  const gate = new Gate({ dangerouslyDisableGating: true })
  const seen = []
  gate.register({ name: 'note', execute: (_a, context) => (seen.push(context), 'ok') })
  await gate.execute({ tool: 'note', arguments: {}, callId: 'c9' })
  await gate.execute({ tool: 'note', arguments: {} })
  assert.deepEqual(seen.map(fields), [
    { tool: 'note', callId: 'c9', requestId: null, sessionId: 'default', edited: false },
    { tool: 'note', callId: null, requestId: null, sessionId: 'default', edited: false },
  ])
  await gate.close()
})

test('concurrent calls each see their own context (execute and executeBatch)', async () => {
  const gate = new Gate()
  const seen = new Map()
  let started = 0
  let bothStarted
  const both = new Promise((resolve) => (bothStarted = resolve))
  gate.register({
    name: 'work',
    approval: 'required',
    execute: async ({ path }, context) => {
      if (++started % 2 === 0) bothStarted()
      await both // both run at once
      seen.set(path, fields(context))
      return 'ok'
    },
  })
  const requests = new Map()
  let shown = []
  gate.on(
    'confirmation-request',
    (req) =>
      new Promise((answered) => {
        requests.set(req.toolCallId, req)
        shown.push([req, answered])
        if (shown.length < 2) return
        // Answered out of order, once both are shown.
        for (const [r, done] of shown.reverse()) (r.approve(), done())
        shown = []
      }),
  )
  const results = await Promise.all(
    ['a', 'b'].map((p) => gate.execute({ tool: 'work', arguments: { path: p }, sessionId: `s-${p}`, callId: `c-${p}` })),
  )
  assert.deepEqual(results.map((r) => r.status), ['executed', 'executed'])
  for (const p of ['a', 'b']) {
    assert.deepEqual(seen.get(p), { tool: 'work', callId: `c-${p}`, requestId: requests.get(`c-${p}`).id, sessionId: `s-${p}`, edited: false })
  }
  requests.clear()
  seen.clear()
  const batch = await gate.executeBatch(['a', 'b'].map((p) => ({ tool: 'work', arguments: { path: p }, sessionId: `s-${p}`, callId: `c-${p}` })))
  assert.deepEqual(batch.map((r) => r.status), ['executed', 'executed'])
  for (const p of ['a', 'b']) assert.equal(seen.get(p).requestId, requests.get(`c-${p}`).id)
  await gate.close()
})

test("after the gate closes, a running tool's context reports it: its signal is aborted", async () => {
  const gate = new Gate()
  let context
  let release
  gate.register({
    name: 'slow',
    approval: 'required',
    execute: async (_a, c) => {
      context = c
      await new Promise((resolve) => (release = resolve))
      return c.signal.aborted ? 'stopped early' : 'done'
    },
  })
  gate.on('confirmation-request', (req) => req.approve())
  const call = gate.execute({ tool: 'slow', arguments: {}, callId: 'c1' })
  while (!context) await sleep(1)
  assert.equal(context.signal.aborted, false)
  assert.notEqual(context.requestId, null)
  await gate.close()
  assert.equal(context.signal.aborted, true)
  release()
  const r = await call
  // Not interrupted: the call gets the tool's own result.
  assert.equal(r.status, 'executed')
  assert.equal(r.output, 'stopped early')
})
