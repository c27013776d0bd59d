// Lifecycle: what close(), garbage collection and removing the last request listener release,
// and that none of it leaves the process unable to exit or a call waiting for its deadline.
import { test } from 'node:test'
import assert from 'node:assert/strict'
import { runChild as run } from './child.mjs'
import { fileURLToPath } from 'node:url'
import { setTimeout as sleep } from 'node:timers/promises'
import { Gate } from '../dist/index.mjs'
import { mkdtempSync, readFileSync, rmSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'

const entry = fileURLToPath(new URL('../dist/index.mjs', import.meta.url))

/** Resolves `p`, or rejects once `ms` have passed. */
function within(p, ms, what) {
  let timer
  const late = new Promise((_, reject) => {
    timer = setTimeout(() => reject(new Error(`${what} did not settle within ${ms} ms`)), ms)
  })
  return Promise.race([p, late]).finally(() => clearTimeout(timer))
}

test('close() with an approved tool whose promise never settles: the process exits, the call stays pending', async () => {
  const r = await run(`
import { Gate } from ${JSON.stringify(entry)}
const gate = new Gate({ defaultTimeoutMs: 600000 })
let started
const running = new Promise((resolve) => (started = resolve))
gate.register({
  name: 'delete_file',
  parameters: { type: 'object' },
  execute: () => {
    started()
    return new Promise(() => {}) // never settles
  },
})
gate.on('confirmation-request', (req) => req.approve())
const call = gate.execute({ tool: 'delete_file', arguments: {} })
await running
await gate.close()
console.log('closed')
// Not interrupted, the tool has no result to give: its call is pending, as the tool is, and
// neither keeps the process alive.
call.then((result) => console.log('result', result.status))
`)
  assert.equal(r.code, 0, `exit code ${r.code} (${r.signal})\nstdout: ${r.out}\nstderr: ${r.err}`)
  assert.match(r.out, /closed/)
  assert.doesNotMatch(r.out, /result/)
})

test('close() while a tool runs: the tool finishes and its call resolves with its own result', async () => {
  const dir = mkdtempSync(join(tmpdir(), 'signoff-close-'))
  const auditPath = join(dir, 'audit.jsonl')
  const gate = new Gate({ auditPath })
  let started
  let release
  const running = new Promise((resolve) => (started = resolve))
  const released = new Promise((resolve) => (release = resolve))
  gate.register({
    name: 'transfer',
    approval: 'required',
    execute: async (_args, context) => {
      started()
      await released
      return { sent: true, stoppedEarly: context.signal.aborted }
    },
  })
  gate.on('confirmation-request', (req) => req.approve())
  const call = gate.execute({ tool: 'transfer', arguments: { amount: 5 } })
  await within(running, 5000, 'the tool')
  await gate.close()
  release()
  const r = await within(call, 5000, 'the call')
  assert.equal(r.status, 'executed')
  assert.deepEqual(r.output, { sent: true, stoppedEarly: true })
  // Its audit record says what happened, not a made-up failure.
  const executions = () =>
    readFileSync(auditPath, 'utf8')
      .split('\n')
      .filter((l) => l.trim())
      .map((l) => JSON.parse(l))
      .filter((rec) => rec.kind === 'execution')
  for (let i = 0; i < 200 && executions().length === 0; i++) await sleep(10)
  assert.deepEqual(
    executions().map((rec) => rec.decision),
    ['ok'],
  )
  rmSync(dir, { recursive: true, force: true })
})

// With a listener of the other events too, after one event has reached it: the loop that emits
// them kept the gate alive across its next wait (never collected, its store locked).
for (const events of [false, true]) {
test(`a gate with a request listener${events ? ' and a confirmation-resolved one, after an event,' : ''} dropped without close() is released once collected`, async () => {
  const r = await run(
    `
const events = ${events}
import { Gate } from ${JSON.stringify(entry)}
import { mkdtempSync, readdirSync, rmSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
const dir = mkdtempSync(join(tmpdir(), 'signoff-gc-'))
const counts = () => ({ threads: readdirSync('/proc/self/task').length, fds: readdirSync('/proc/self/fd').length })
async function collect() {
  for (let i = 0; i < 6; i++) {
    globalThis.gc()
    await new Promise((resolve) => setTimeout(resolve, 10))
  }
}
// Each gate has a durable store (a file and its lock) and an audit log (a file and a writer thread).
function open(name) {
  const gate = new Gate({ storePath: join(dir, name + '.db'), auditPath: join(dir, name + '.jsonl') })
  gate.register({ name: 'delete_file', parameters: { type: 'object' }, execute: () => 'ran' })
  gate.on('confirmation-request', (req) => req.approve())
  if (events) gate.on('confirmation-resolved', () => {})
  return gate
}
// With \`events\`, one call first, so that the resolved listener has had an event.
async function used(name) {
  const gate = open(name)
  if (events) await gate.execute({ tool: 'delete_file', arguments: {} })
}
// Warm up (the addon's runtime and its threads), closing normally.
const warm = open('warm')
console.log('warm', (await warm.execute({ tool: 'delete_file', arguments: {} })).status)
await warm.close()
await collect()

// Dropped without close(): once collected, its database may be opened again in this process.
await used('same')
await collect()
try {
  const again = open('same')
  console.log('reopened', (await again.execute({ tool: 'delete_file', arguments: {} })).status)
} catch (e) {
  console.log('reopen failed', e.code, e.message)
}
await collect()

const before = counts()
for (let i = 0; i < 50; i++) await used('g' + i)
await collect()
const after = counts()
console.log('counts', JSON.stringify({ before, after }))
rmSync(dir, { recursive: true, force: true })
// Nothing else: the process must exit by itself.
`,
    { args: ['--expose-gc'] },
  )
  assert.equal(r.code, 0, `exit code ${r.code} (${r.signal})\nstdout: ${r.out}\nstderr: ${r.err}`)
  assert.match(r.out, /warm executed/)
  assert.match(r.out, /reopened executed/, r.out)
  const { before, after } = JSON.parse(/counts (.*)/.exec(r.out)[1])
  // 50 leaked gates would keep 50 audit threads and 150+ file descriptors.
  assert.ok(after.threads <= before.threads + 1, `threads grew: ${JSON.stringify({ before, after })}`)
  assert.ok(after.fds <= before.fds + 2, `file descriptors grew: ${JSON.stringify({ before, after })}`)
})
}

function gate(options = {}) {
  const g = new Gate({ defaultTimeoutMs: 600_000, ...options })
  const ran = []
  g.register({ name: 'delete_file', parameters: { type: 'object' }, execute: () => ran.push(1) })
  return { gate: g, ran }
}

test('off() of the last request listener while its async handler is pending ends the request at once (no-approver)', async () => {
  const { gate: g, ran } = gate()
  let handled
  const seen = new Promise((resolve) => (handled = resolve))
  let release
  let late
  const l = (req) => {
    handled(req)
    return new Promise((resolve) => (release = resolve)).then(() => {
      try {
        req.approve()
        late = 'approved'
      } catch (e) {
        late = e.code
      }
    })
  }
  g.on('confirmation-request', l)
  const call = g.execute({ tool: 'delete_file', arguments: {} })
  const req = await seen
  g.off('confirmation-request', l)
  const r = await within(call, 5000, 'execute')
  assert.equal(r.status, 'cancelled')
  // Nobody is left who can answer: the core's reason for that (`no-approver`), the same as a
  // call made with no listener.
  assert.equal(r.decision.cancelReason, 'no-approver')
  assert.deepEqual(ran, [])
  assert.equal(req.isPending(), false)
  // The removed listener settling later changes nothing (its answer is refused).
  release()
  await sleep(5)
  assert.equal(late, 'already_resolved')
  assert.equal(g.approverCount, 0)
  // A listener added again handles the next request.
  g.on('confirmation-request', (q) => q.approve())
  assert.equal((await g.confirm({ tool: 'delete_file', arguments: {} })).outcome, 'approved')
  await g.close()
})

test('a closed gate has no approvers, whoever attached before or after (the core count, as in Python and Swift)', async () => {
  const g = new Gate()
  g.on('confirmation-request', (q) => q.approve())
  const stream = g.events()
  assert.equal(g.approverCount, 2)
  await g.close()
  assert.equal(g.approverCount, 0)
  g.on('confirmation-request', (q) => q.approve())
  const late = g.events()
  assert.equal(g.approverCount, 0)
  await stream.return()
  await late.return()
})

test('off() of the last request listener while another approver remains: the request it handled ends at once', async () => {
  const { gate: g } = gate()
  // An event stream can answer the requests it yields: it is an approver too.
  const stream = g.events()
  let handled
  const seen = new Promise((resolve) => (handled = resolve))
  const l = (req) => {
    handled(req)
    return new Promise(() => {}) // never settles
  }
  g.on('confirmation-request', l)
  const call = g.confirm({ tool: 'delete_file', arguments: {} })
  await seen
  g.off('confirmation-request', l)
  const d = await within(call, 5000, 'confirm')
  assert.equal(d.outcome, 'cancelled')
  // Someone else could still answer, so the request was not left without an approver: the
  // approval step (the listener holding it) was abandoned before it answered.
  assert.equal(d.cancelReason, 'approval-failed')
  stream.close()
  await g.close()
})

test('close() closes at once, even when flushing the audit log and releasing the store run off the thread', async () => {
  const dir = mkdtempSync(join(tmpdir(), 'signoff-close-'))
  const gate = new Gate({ auditPath: join(dir, 'audit.jsonl'), storePath: join(dir, 'signoff.db') })
  let ran = 0
  gate.register({ name: 'delete_file', parameters: { type: 'object' }, execute: () => ++ran })
  gate.on('confirmation-request', (req) => {
    req.approve()
  })
  assert.equal((await gate.execute({ tool: 'delete_file', arguments: {} })).status, 'executed')
  const closing = gate.close() // not awaited: nothing that needs approval may run meanwhile
  const r = await gate.execute({ tool: 'delete_file', arguments: {} })
  assert.equal(r.status, 'cancelled', r.content)
  assert.equal(r.decision.cancelReason, 'shutdown')
  assert.equal(ran, 1)
  await closing
  rmSync(dir, { recursive: true })
})

// close() from inside a listener closes the gate at once, whatever it holds: an in-memory gate
// used to close at the first poll of its close task, after the listener returned, so an approval
// given after close() in the same listener was accepted and the tool ran.
for (const options of [{}, { auditPath: 'audit' }]) {
  test(`close() inside a listener: a later approval in it is refused, nothing runs (${options.auditPath ? 'audit log' : 'in memory'})`, async () => {
    const dir = mkdtempSync(join(tmpdir(), 'signoff-close-'))
    const { gate: g, ran } = gate(options.auditPath ? { auditPath: join(dir, 'audit.jsonl') } : {})
    let answer
    let closing
    g.on('confirmation-request', (req) => {
      closing = g.close()
      assert.equal(g.closed, true)
      try {
        answer = req.approve()
      } catch (e) {
        answer = e.code
      }
    })
    const r = await within(g.execute({ tool: 'delete_file', arguments: {} }), 5000, 'execute')
    await closing
    assert.equal(answer, 'closed')
    assert.equal(r.status, 'cancelled')
    assert.deepEqual(ran, [])
    rmSync(dir, { recursive: true, force: true })
  })
}

// The last request listener removed, then another added in the same tick: a swap, not a
// removal. A `once` listener is gone again once it has taken its request, by the time the
// removal is acted on; its run used to be abandoned then (the request cancelled, no-approver).
for (const add of ['once', 'on']) {
  test(`off() of the last request listener, then ${add}() of an async one in the same tick: it answers`, async () => {
    const { gate: g, ran } = gate()
    const old = () => {}
    g.on('confirmation-request', old)
    g.off('confirmation-request', old)
    let answer
    g[add]('confirmation-request', async (req) => {
      await sleep(20)
      answer = req.approve()
    })
    const r = await within(g.execute({ tool: 'delete_file', arguments: {} }), 5000, 'execute')
    assert.equal(answer, 'approved')
    assert.equal(r.status, 'executed')
    assert.equal(ran.length, 1)
    await g.close()
  })
}
