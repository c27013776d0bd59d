// A PostgreSQL store shared by many gates (`storeUrl`): a request made through one gate is listed
// and answered through another, in this process or in another one; racing answers from several
// processes resolve each request once; an owner killed with SIGKILL recovers its requests.
//
// Needs a real server: SIGNOFF_TEST_POSTGRES_URL (scripts/with-postgres.sh sets it). Without it
// these tests are skipped, unless SIGNOFF_REQUIRE_POSTGRES is set. Every test keeps its tables in
// a schema of its own, so reruns never see old rows.
import { test } from 'node:test'
import assert from 'node:assert/strict'
import { randomBytes } from 'node:crypto'
import { mkdtempSync, readFileSync, existsSync, rmSync } from 'node:fs'
import { createServer } from 'node:net'
import { tmpdir } from 'node:os'
import path from 'node:path'
import { fileURLToPath } from 'node:url'
import { setTimeout as sleep } from 'node:timers/promises'
import { Gate, SignoffError } from '../dist/index.mjs'
import { startChild } from './child.mjs'

const entry = fileURLToPath(new URL('../dist/index.mjs', import.meta.url))
const URL_ = process.env.SIGNOFF_TEST_POSTGRES_URL || undefined
if (!URL_ && process.env.SIGNOFF_REQUIRE_POSTGRES) {
  throw new Error('SIGNOFF_REQUIRE_POSTGRES is set but SIGNOFF_TEST_POSTGRES_URL is not (run under scripts/with-postgres.sh)')
}
const skip = URL_ ? false : 'no SIGNOFF_TEST_POSTGRES_URL (run under scripts/with-postgres.sh)'
const SECRET = 'AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8='
const code = (c) => (e) => e instanceof SignoffError && e.code === c
const pathSchema = { type: 'object', properties: { path: { type: 'string' } }, required: ['path'] }

/** A schema of the test's own. */
const schema = () => 't_' + randomBytes(16).toString('hex')

/** A gate on the shared store with a counting `delete_file`. */
function sharedGate(storeSchema, options = {}) {
  const gate = new Gate({ storeUrl: URL_, storeSchema, ...options })
  const runs = []
  gate.register({
    name: 'delete_file',
    parameters: pathSchema,
    editable: true,
    execute: ({ path }) => {
      runs.push(path)
      return { deleted: path }
    },
  })
  return { gate, runs }
}

async function until(f, what, timeoutMs = 10_000) {
  const t0 = Date.now()
  while (!f()) {
    if (Date.now() - t0 > timeoutMs) throw new Error(`timed out waiting for ${what}`)
    await sleep(5)
  }
}

/** The pending requests once `gate` lists at least `n` (made elsewhere). */
async function listed(gate, n = 1) {
  await until(() => gate.pending().length >= n, `${n} pending request(s) listed`)
  return gate.pending()
}

test('a call made through one gate is listed, approved through another, and runs once', { skip }, async () => {
  const s = schema()
  // No listener on the agent's gate: with a shared store the request waits all the same.
  const { gate: agent, runs } = sharedGate(s)
  const { gate: consoleGate } = sharedGate(s)
  try {
    const result = agent.execute({ tool: 'delete_file', arguments: { path: '/tmp/x' }, callId: 'c1' })
    const [req] = await listed(consoleGate)
    assert.equal(req.tool, 'delete_file')
    assert.deepEqual(req.arguments, { path: '/tmp/x' })
    assert.equal(consoleGate.pendingCount, 1)
    assert.equal(agent.pendingCount, 1)
    assert.deepEqual(consoleGate.pendingPage({ limit: 10 }).requests.map((r) => r.id), [req.id])
    assert.equal(consoleGate.record(req.id).state, 'pending')

    const t0 = Date.now()
    assert.equal(req.approve({ responder: 'alice' }), 'approved')
    const r = await result
    assert.ok(Date.now() - t0 < 3000, `the waiting call woke after ${Date.now() - t0} ms`)
    assert.equal(r.status, 'executed')
    assert.deepEqual(r.output, { deleted: '/tmp/x' })
    assert.deepEqual(runs, ['/tmp/x'])
    await until(() => consoleGate.record(req.id).state === 'done', 'done')
    const done = consoleGate.record(req.id)
    assert.equal(done.responder, 'alice')
    assert.deepEqual(done.result.output, { deleted: '/tmp/x' })
    // A second answer, through either gate, is refused and changes nothing.
    assert.throws(() => consoleGate.respond({ id: req.id, decision: 'approve' }), code('already_resolved'))
    assert.throws(() => agent.respond({ id: req.id, decision: 'deny' }), code('already_resolved'))
    assert.deepEqual(consoleGate.pending(), [])
    assert.deepEqual(runs, ['/tmp/x'])
  } finally {
    await agent.close()
    await consoleGate.close()
  }
})

test('a denial with a reason from another gate reaches the call; tokens work across gates', { skip }, async () => {
  const s = schema()
  const { gate: agent, runs } = sharedGate(s, { tokenKeys: `k1:${SECRET}` })
  const { gate: consoleGate } = sharedGate(s, { tokenKeys: `k1:${SECRET}` })
  try {
    const result = agent.execute({ tool: 'delete_file', arguments: { path: '/etc' } })
    const [req] = await listed(consoleGate)
    assert.equal(consoleGate.respond({ id: req.id, decision: 'deny', reason: 'not /etc', responder: 'bob' }), 'denied')
    const r = await result
    assert.equal(r.status, 'denied')
    assert.equal(r.decision.reason, 'not /etc')
    assert.equal(r.decision.responder, 'bob')
    assert.match(r.content, /not \/etc/)
    assert.deepEqual(runs, [])
    assert.equal(agent.record(req.id).state, 'denied')

    const asked = agent.confirm({ tool: 'delete_file', arguments: { path: '/tmp/t' } })
    const [again] = await listed(consoleGate)
    const token = consoleGate.issueToken(again.id, 'dana')
    assert.equal(consoleGate.respondToken(token, { approver: 'dana', decision: 'approve' }), 'approved')
    const d = await asked
    assert.equal(d.outcome, 'approved')
    assert.deepEqual(d.arguments, { path: '/tmp/t' })
    assert.throws(() => agent.respondToken(token, { approver: 'dana', decision: 'approve' }), code('already_used'))
  } finally {
    await agent.close()
    await consoleGate.close()
  }
})

// ---- configuration and connection errors ----------------------------------------------------

test('store options are checked; an unreachable server is a store error, not a hang', { skip }, async () => {
  const refused = (c, ...names) => (e) => code(c)(e) && names.every((n) => e.message.includes(n))
  assert.throws(() => new Gate({ storeUrl: URL_, storePath: path.join(tmpdir(), 'x.db') }), refused('config', '`storeUrl`', '`storePath`'))
  assert.throws(() => new Gate({ storeOwner: 'agent-1' }), refused('config', '`storeOwner`', '`storeUrl`'))
  assert.throws(() => new Gate({ storeSchema: schema() }), refused('config', '`storeSchema`', '`storeUrl`'))
  assert.throws(() => new Gate({ storeUrl: '' }), refused('config', '`storeUrl`'))
  assert.throws(() => new Gate({ storeUrl: 42 }), refused('config', '`storeUrl`'))
  assert.throws(() => new Gate({ storeUrl: 'postgres://[not a host' }), refused('config', 'storeUrl'))
  assert.throws(() => new Gate({ storeUrl: URL_, storeSchema: 'no-dashes; drop table x' }), refused('config', '`storeSchema`'))

  const port = await new Promise((resolve) => {
    const srv = createServer()
    srv.listen(0, '127.0.0.1', () => {
      const p = srv.address().port
      srv.close(() => resolve(p))
    })
  })
  const t0 = Date.now()
  assert.throws(() => new Gate({ storeUrl: `postgres://signoff@127.0.0.1:${port}/signoff?connect_timeout=3` }), refused('store', 'connect'))
  assert.throws(() => new Gate({ storeUrl: 'postgres://signoff@127.0.0.1:1/signoff' }), code('store'))
  assert.ok(Date.now() - t0 < 8000, `took ${Date.now() - t0} ms`)
})

// ---- other processes ------------------------------------------------------------------------

/** A child agent: makes one `execute` call through its own gate, prints PENDING <id>, then RESULT <json>. */
function agentChild(storeSchema, { owner, countFile }) {
  const session = owner ?? 'child'
  return startChild(`
import { appendFileSync } from 'node:fs'
import { Gate } from ${JSON.stringify(entry)}
const options = { storeUrl: ${JSON.stringify(URL_)}, storeSchema: ${JSON.stringify(storeSchema)} }
${owner ? `options.storeOwner = ${JSON.stringify(owner)}` : ''}
const gate = new Gate(options)
gate.register({
  name: 'delete_file',
  parameters: { type: 'object', properties: { path: { type: 'string' } }, required: ['path'] },
  execute: ({ path }) => { appendFileSync(${JSON.stringify(countFile)}, path + '\\n'); return { deleted: path } },
})
if (gate.recover().restored.length !== 0) throw new Error('nothing to recover')
const result = gate.execute({ tool: 'delete_file', arguments: { path: '/tmp/child' }, sessionId: ${JSON.stringify(session)} })
// The schema is shared: other processes' requests are listed too.
const mine = gate.pending().find((r) => r.sessionId === ${JSON.stringify(session)})
console.log('PENDING ' + mine.id)
const r = await result
console.log('RESULT ' + JSON.stringify({ status: r.status, output: r.output }))
await gate.close()
`)
}

function tmp() {
  return mkdtempSync(path.join(tmpdir(), 'signoff-pg-'))
}

test('a call in another process is listed and approved here, and runs once there', { skip }, async () => {
  const s = schema()
  const dir = tmp()
  const countFile = path.join(dir, 'runs.txt')
  const child = agentChild(s, { countFile })
  const { gate } = sharedGate(s)
  try {
    const id = (await child.line(/^PENDING /)).slice(8)
    const [req] = gate.pending()
    assert.equal(req.id, id)
    assert.equal(req.sessionId, 'child')
    assert.equal(req.approve({ responder: 'alice' }), 'approved')
    const out = JSON.parse((await child.line(/^RESULT /)).slice(7))
    assert.deepEqual(out, { status: 'executed', output: { deleted: '/tmp/child' } })
    const exit = await child.exited
    assert.equal(exit.code, 0, exit.err)
    assert.deepEqual(readFileSync(countFile, 'utf8').trim().split('\n'), ['/tmp/child'])
    const rec = gate.record(id)
    assert.equal(rec.state, 'done')
    assert.equal(rec.responder, 'alice')
  } finally {
    if (child.proc.exitCode === null) child.proc.kill('SIGKILL')
    await gate.close()
    rmSync(dir, { recursive: true, force: true })
  }
})

test('racing answers from several processes resolve each request once', { skip }, async () => {
  const s = schema()
  const { gate: agent, runs } = sharedGate(s)
  const n = 5
  try {
    const results = Array.from({ length: n }, (_, i) => agent.execute({ tool: 'delete_file', arguments: { path: `/tmp/${i}` } }))
    const ids = (await listed(agent, n)).map((r) => r.id)
    const startAt = Date.now() + 2500
    const answerers = [0, 1, 2].map((k) =>
      startChild(`
import { Gate } from ${JSON.stringify(entry)}
const gate = new Gate({ storeUrl: ${JSON.stringify(URL_)}, storeSchema: ${JSON.stringify(s)} })
const out = []
// Start answering together (each process connected by then).
Atomics.wait(new Int32Array(new SharedArrayBuffer(4)), 0, 0, Math.max(0, ${startAt} - Date.now()))
for (const id of ${JSON.stringify(ids)}) {
  try {
    out.push(gate.respond(${k % 2 === 0} ? { id, decision: 'approve', responder: 'p${k}' } : { id, decision: 'deny', reason: 'no from p${k}', responder: 'p${k}' }))
  } catch (e) {
    out.push('error:' + e.code)
  }
}
console.log('OUT ' + JSON.stringify(out))
await gate.close()
`),
    )
    const outs = []
    for (const a of answerers) outs.push(JSON.parse((await a.line(/^OUT /, 30_000)).slice(4)))
    for (let i = 0; i < n; i++) {
      const answers = outs.map((o) => o[i])
      const wins = answers.filter((a) => a === 'approved' || a === 'denied')
      assert.equal(wins.length, 1, `request ${i}: ${answers}`)
      assert.deepEqual(answers.filter((a) => a.startsWith('error:')), ['error:already_resolved', 'error:already_resolved'], `request ${i}: ${answers}`)
    }
    const done = await Promise.all(results)
    const executed = done.filter((r) => r.status === 'executed').length
    assert.ok(done.every((r) => r.status === 'executed' || r.status === 'denied'))
    assert.equal(runs.length, executed, 'each approved call ran once, no denied call ran')
    for (const a of answerers) assert.equal((await a.exited).code, 0)
  } finally {
    await agent.close()
  }
})

test('an owner killed with SIGKILL: its successor recovers the pending request, which runs once', { skip }, async () => {
  const s = schema()
  const dir = tmp()
  const countFile = path.join(dir, 'runs.txt')
  const child = agentChild(s, { owner: 'agent-x', countFile })
  const other = agentChild(s, { owner: 'agent-y', countFile })
  try {
    const id = (await child.line(/^PENDING /)).slice(8)
    const otherId = (await other.line(/^PENDING /)).slice(8)
    child.proc.kill('SIGKILL') // no close(), nothing cleaned up
    assert.equal((await child.exited).signal, 'SIGKILL')

    // (denyWhenUnobserved: false as with SQLite: the core still applies the rule in recover().)
    const { gate, runs } = sharedGate(s, { storeOwner: 'agent-x', denyWhenUnobserved: false })
    const rec = gate.recover()
    // Only this owner's request: agent-y's is still waited for by its own (live) process.
    assert.deepEqual(rec.restored.map((r) => r.id), [id])
    assert.deepEqual([rec.timedOut, rec.interrupted, rec.notRestored], [[], [], []])
    assert.deepEqual(new Set(gate.pending().map((r) => r.id)), new Set([id, otherId]))

    const { gate: consoleGate } = sharedGate(s)
    assert.equal(consoleGate.respond({ id, decision: 'approve', responder: 'carol' }), 'approved')
    await consoleGate.close()
    await until(() => gate.record(id).state === 'done', 'the restored call to run')
    assert.deepEqual(runs, ['/tmp/child'])
    assert.ok(!existsSync(countFile), 'the killed process never ran it')
    assert.throws(() => gate.respond({ id, decision: 'approve' }), code('already_resolved'))
    await gate.close()
  } finally {
    for (const c of [child, other]) if (c.proc.exitCode === null && c.proc.signalCode === null) c.proc.kill('SIGKILL')
    rmSync(dir, { recursive: true, force: true })
  }
})

test('a restored request keeps its process alive until it has run, then lets it exit', { skip }, async () => {
  const s = schema()
  const dir = tmp()
  const countFile = path.join(dir, 'runs.txt')
  const child = agentChild(s, { owner: 'agent-z', countFile })
  let successor
  try {
    const id = (await child.line(/^PENDING /)).slice(8)
    child.proc.kill('SIGKILL')
    await child.exited
    // The successor only recovers: nothing but the restored request keeps it alive.
    successor = startChild(`
import { appendFileSync } from 'node:fs'
import { Gate } from ${JSON.stringify(entry)}
const gate = new Gate({ storeUrl: ${JSON.stringify(URL_)}, storeSchema: ${JSON.stringify(s)}, storeOwner: 'agent-z', denyWhenUnobserved: false })
gate.register({
  name: 'delete_file',
  parameters: { type: 'object', properties: { path: { type: 'string' } }, required: ['path'] },
  execute: ({ path }) => { appendFileSync(${JSON.stringify(countFile)}, path + '\\n'); return { deleted: path } },
})
globalThis.gate = gate
console.log('RESTORED ' + gate.recover().restored.length)
`)
    await successor.line(/RESTORED 1/)
    const kept = await Promise.race([successor.exited, sleep(700).then(() => 'alive')])
    assert.equal(kept, 'alive', 'a restored request keeps the process alive, as with storePath')
    const { gate: consoleGate } = sharedGate(s)
    assert.equal(consoleGate.respond({ id, decision: 'approve', responder: 'carol' }), 'approved')
    await consoleGate.close()
    const r = await Promise.race([successor.exited, sleep(10_000, 'hung', { ref: false })])
    assert.notEqual(r, 'hung', 'the process exits once the restored request has run')
    assert.equal(r.code, 0, r.err)
    assert.equal(readFileSync(countFile, 'utf8'), '/tmp/child\n')
  } finally {
    for (const c of [child, successor]) if (c && c.proc.exitCode === null && c.proc.signalCode === null) c.proc.kill('SIGKILL')
    rmSync(dir, { recursive: true, force: true })
  }
})
