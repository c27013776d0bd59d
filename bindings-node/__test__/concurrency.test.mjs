// 1,000 concurrent confirmations answered in random order, through each way of answering.
import { test } from 'node:test'
import assert from 'node:assert/strict'
import { setTimeout as sleep } from 'node:timers/promises'
import { Gate } from '../dist/index.mjs'

const N = 1000

function shuffle(a) {
  for (let i = a.length - 1; i > 0; i--) {
    const j = Math.floor(Math.random() * (i + 1))
    ;[a[i], a[j]] = [a[j], a[i]]
  }
  return a
}

function makeGate() {
  const gate = new Gate({ defaultTimeoutMs: 60_000 })
  gate.register({
    name: 'delete_file',
    parameters: { type: 'object', properties: { n: { type: 'integer' } }, required: ['n'] },
    execute: ({ n }) => ({ deleted: n }),
  })
  return gate
}

/** Approves even calls, denies odd ones with a reason naming the call. */
function answer(req) {
  const n = req.arguments.n
  if (n % 2 === 0) req.approve({ responder: `r${n}` })
  else req.deny(`no ${n}`)
}

function check(decisions) {
  assert.equal(decisions.length, N)
  decisions.forEach((d, n) => {
    if (n % 2 === 0) {
      assert.equal(d.outcome, 'approved', `call ${n}`)
      assert.equal(d.responder, `r${n}`)
      assert.deepEqual(d.arguments, { n })
    } else {
      assert.equal(d.outcome, 'denied', `call ${n}`)
      assert.equal(d.reason, `no ${n}`)
    }
  })
}

test('1,000 concurrent confirmations answered in random order by a listener', async () => {
  const gate = makeGate()
  const held = []
  gate.on('confirmation-request', (req) => new Promise((resolve) => held.push({ req, resolve })))
  const ps = Array.from({ length: N }, (_, n) => gate.confirm({ tool: 'delete_file', arguments: { n }, callId: `c${n}` }))
  while (held.length < N) await sleep(1)
  assert.equal(gate.pendingCount, N)
  for (const { req, resolve } of shuffle(held)) {
    answer(req)
    resolve()
  }
  check(await Promise.all(ps))
  assert.equal(gate.pendingCount, 0)
  await gate.close()
})

test('1,000 concurrent executions answered in random order from an event stream', async () => {
  const gate = makeGate()
  const stream = gate.events()
  const ps = Array.from({ length: N }, (_, n) => gate.execute({ tool: 'delete_file', arguments: { n }, callId: `c${n}` }))
  const reqs = []
  // next(), not `for await` + break: leaving the loop would unsubscribe the only observer, and the
  // core would then cancel everything pending (no-approver).
  while (reqs.length < N) {
    const { value: e } = await stream.next()
    if (e.type === 'confirmation-request') reqs.push(e)
  }
  assert.equal(new Set(reqs.map((r) => r.id)).size, N)
  for (const req of shuffle(reqs)) answer(req)
  const results = await Promise.all(ps)
  check(results.map((r) => r.decision))
  results.forEach((r, n) => {
    assert.equal(r.callId, `c${n}`)
    assert.equal(r.status, n % 2 === 0 ? 'executed' : 'denied')
    if (n % 2 === 0) assert.deepEqual(r.output, { deleted: n })
  })
  await gate.close()
})

test('1,000 concurrent confirmations answered in random order with gate.respond, racing duplicates', async () => {
  const gate = makeGate()
  const stream = gate.events()
  const ps = Array.from({ length: N }, (_, n) => gate.confirm({ tool: 'delete_file', arguments: { n } }))
  const pending = gate.pending()
  assert.equal(pending.length, N)
  let rejected = 0
  for (const req of shuffle([...pending, ...pending])) {
    const n = req.arguments.n
    try {
      gate.respond({ id: req.id, tool: req.tool, argumentsDigest: req.argumentsDigest, sessionId: req.sessionId, ...(n % 2 === 0 ? { decision: 'approve', responder: `r${n}` } : { decision: 'deny', reason: `no ${n}` }) })
    } catch (e) {
      assert.equal(e.code, 'already_resolved')
      rejected++
    }
  }
  assert.equal(rejected, N) // exactly one answer per request counted
  check(await Promise.all(ps))
  stream.close()
  await gate.close()
})
