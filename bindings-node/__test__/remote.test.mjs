// Remote approval with signed tokens, approvers, the durable store across a real process restart
// (SIGKILL), and the hash-chained audit log.
import { test } from 'node:test'
import assert from 'node:assert/strict'
import { mkdtempSync, readFileSync, rmSync, writeFileSync, existsSync } from 'node:fs'
import { tmpdir } from 'node:os'
import path from 'node:path'
import { inspect } from 'node:util'
import { fileURLToPath } from 'node:url'
import { startChild } from './child.mjs'
import { setTimeout as sleep } from 'node:timers/promises'
import { Gate, Secret, SignoffError, TokenKeys, verifyAuditChain } from '../dist/index.mjs'

const entry = fileURLToPath(new URL('../dist/index.mjs', import.meta.url))
const SECRET_A = 'AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8='
const SECRET_B = 'ISIjJCUmJygpKissLS4vMDEyMzQ1Njc4OTo7PD0+P0A='
const code = (c) => (e) => e instanceof SignoffError && e.code === c
const pathSchema = { type: 'object', properties: { path: { type: 'string' } }, required: ['path'] }

function tmp() {
  return mkdtempSync(path.join(tmpdir(), 'signoff-remote-'))
}

/** A remote-approval gate (nobody listens in process) with a counting `delete_file`. */
function remoteGate(options = {}) {
  const gate = new Gate({ tokenKeys: new TokenKeys('k1', SECRET_A), denyWhenUnobserved: false, ...options })
  const runs = []
  gate.register({
    name: 'delete_file',
    parameters: pathSchema,
    editable: true,
    execute: async ({ path }) => {
      runs.push(path)
      return { deleted: path }
    },
  })
  return { gate, runs }
}

/** Starts `execute` and returns its promise with the request it published. */
function pendingCall(gate, call) {
  const before = new Set(gate.pending().map((r) => r.id))
  const result = gate.execute(call)
  const req = gate.pending().find((r) => !before.has(r.id))
  assert.ok(req, 'the call is pending')
  return { result, req }
}

/**
 * {@link pendingCall} for a store that writes new requests on a thread of its own (SQLite with
 * `synchronousFull`): the request is listed once it is stored.
 */
async function storedCall(gate, call) {
  const before = new Set(gate.pending().map((r) => r.id))
  const result = gate.execute(call)
  for (let i = 0; i < 500; i++) {
    const req = gate.pending().find((r) => !before.has(r.id))
    if (req) return { result, req }
    await new Promise((r) => setTimeout(r, 10))
  }
  assert.fail('the call never became pending')
}

const b64url = (o) => Buffer.from(JSON.stringify(o)).toString('base64url')

test('a token approval runs the stored arguments exactly once; a replay is already_used', async () => {
  const dir = tmp()
  const auditPath = path.join(dir, 'audit.jsonl')
  const { gate, runs } = remoteGate({ auditPath })
  const { result, req } = pendingCall(gate, { tool: 'delete_file', arguments: { path: '/etc/passwd' }, callId: 'c1' })
  const token = gate.issueToken(req.id, 'alice')
  assert.match(token, /^so1\.k1\./)
  assert.equal(req.issueToken('alice').split('.')[1], 'k1')

  const claims = gate.inspectToken(token)
  assert.equal(claims.requestId, req.id)
  assert.equal(claims.approver, 'alice')
  assert.equal(claims.tool, 'delete_file')
  assert.equal(claims.argumentsDigest, req.argumentsDigest)
  assert.equal(claims.sessionId, 'default')
  assert.equal(claims.expiresAtMs, req.deadlineMs, 'expires with the request by default')
  assert.equal(claims.keyId, 'k1')

  assert.equal(gate.respondToken(token, { approver: 'alice', decision: 'approve' }), 'approved')
  const r = await result
  assert.equal(r.status, 'executed')
  assert.deepEqual(r.output, { deleted: '/etc/passwd' })
  assert.equal(r.decision.responder, 'alice')
  assert.deepEqual(runs, ['/etc/passwd'])

  assert.throws(() => gate.respondToken(token, { approver: 'alice', decision: 'approve' }), code('already_used'))
  assert.throws(() => gate.issueToken(req.id, 'alice'), code('not_pending'))
  await sleep(20)
  assert.deepEqual(runs, ['/etc/passwd'], 'nothing ran again')
  await gate.close()

  const log = readFileSync(auditPath, 'utf8')
  assert.ok(!log.includes(token), 'a token is never logged')
  const records = log.trim().split('\n').map((l) => JSON.parse(l))
  assert.ok(records.some((x) => x.decision === 'token-issued' && x.responder === 'alice'))
  assert.ok(records.some((x) => x.kind === 'response-rejected' && x.error_kind === 'already_used'))
  rmSync(dir, { recursive: true })
})

test('a denial by token, and an edit by token (validated like any edit)', async () => {
  const { gate, runs } = remoteGate()
  const a = pendingCall(gate, { tool: 'delete_file', arguments: { path: '/a' } })
  const t = gate.issueToken(a.req.id, 'alice')
  assert.equal(gate.respondToken(t, { approver: 'alice', decision: 'deny', reason: 'no' }), 'denied')
  const ra = await a.result
  assert.equal(ra.status, 'denied')
  assert.match(ra.content, /no/)

  const b = pendingCall(gate, { tool: 'delete_file', arguments: { path: '/b' } })
  const tb = gate.issueToken(b.req.id, 'alice')
  assert.throws(
    () => gate.respondToken(tb, { approver: 'alice', decision: 'approve', arguments: { path: 5 } }),
    code('invalid_arguments'),
  )
  assert.throws(() => gate.respondToken(tb, { approver: 'alice', decision: 'maybe' }), code('malformed'))
  assert.equal(gate.respondToken(tb, { approver: 'alice', decision: 'approve', arguments: { path: '/tmp/b' } }), 'approved')
  const rb = await b.result
  assert.equal(rb.edited, true)
  assert.deepEqual(runs, ['/tmp/b'])
  await gate.close()
})

test('a tampered token is bad_signature; junk is malformed; another key id is unknown_key; nothing changes', async () => {
  const { gate, runs } = remoteGate()
  const { result, req } = pendingCall(gate, { tool: 'delete_file', arguments: { path: '/a' } })
  const other = pendingCall(gate, { tool: 'delete_file', arguments: { path: '/b' } })
  const token = gate.issueToken(req.id, 'alice')
  const [prefix, kid, body, sig] = token.split('.')
  const claims = JSON.parse(Buffer.from(body, 'base64url').toString())

  for (const [field, value] of [
    ['rid', other.req.id],
    ['tool', 'read_file'],
    ['dig', other.req.argumentsDigest],
    ['sid', 'another-session'],
    ['apr', 'mallory'],
    ['exp', claims.exp + 3_600_000],
  ]) {
    const forged = [prefix, kid, b64url({ ...claims, [field]: value }), sig].join('.')
    const approver = field === 'apr' ? 'mallory' : 'alice'
    assert.throws(() => gate.respondToken(forged, { approver, decision: 'approve' }), code('bad_signature'), field)
    assert.throws(() => gate.inspectToken(forged), code('bad_signature'), field)
  }
  const flipped = sig[3] === 'A' ? 'B' : 'A'
  const badSig = [prefix, kid, body, sig.slice(0, 3) + flipped + sig.slice(4)].join('.')
  assert.throws(() => gate.respondToken(badSig, { approver: 'alice', decision: 'approve' }), code('bad_signature'))

  // The same key id with another secret: forged.
  const forger = remoteGate({ tokenKeys: new TokenKeys('k1', SECRET_B) })
  const f = pendingCall(forger.gate, { tool: 'delete_file', arguments: { path: '/a' } })
  const forged = forger.gate.issueToken(f.req.id, 'alice')
  assert.throws(() => gate.respondToken(forged, { approver: 'alice', decision: 'approve' }), code('bad_signature'))
  // A key id this gate does not hold.
  const stranger = remoteGate({ tokenKeys: new TokenKeys('k9', SECRET_A) })
  const s = pendingCall(stranger.gate, { tool: 'delete_file', arguments: { path: '/a' } })
  const foreign = stranger.gate.issueToken(s.req.id, 'alice')
  assert.throws(() => gate.respondToken(foreign, { approver: 'alice', decision: 'approve' }), code('unknown_key'))
  assert.throws(() => gate.inspectToken(foreign), code('unknown_key'))

  for (const junk of ['', 'so1', 'so1.k1.x', 'so2.k1.e30.AAAA', `${token}.x`, 'so1.k1.e30.!!!']) {
    assert.throws(() => gate.respondToken(junk, { approver: 'alice', decision: 'approve' }), code('malformed'), junk)
  }

  assert.equal(gate.pendingCount, 2)
  assert.deepEqual(runs, [])
  assert.equal(gate.respondToken(token, { approver: 'alice', decision: 'approve' }), 'approved')
  assert.deepEqual((await result).output, { deleted: '/a' })
  assert.deepEqual(runs, ['/a'])
  await Promise.all([gate.close(), forger.gate.close(), stranger.gate.close()])
  await Promise.all([other.result, f.result, s.result])
})

test('wrong approver is refused without using up the token', async () => {
  const { gate, runs } = remoteGate()
  const { result, req } = pendingCall(gate, { tool: 'delete_file', arguments: { path: '/a' } })
  const token = gate.issueToken(req.id, 'alice')
  assert.throws(() => gate.respondToken(token, { approver: 'bob', decision: 'approve' }), (e) => {
    assert.ok(code('wrong_approver')(e))
    assert.match(e.message, /alice/)
    return true
  })
  assert.throws(() => gate.issueToken(req.id, '  '), code('malformed'))
  assert.equal(gate.respondToken(token, { approver: 'alice', decision: 'approve' }), 'approved')
  await result
  assert.deepEqual(runs, ['/a'])
  await gate.close()
})

test('an expired token is token_expired; the request still waits and a fresh token works', async () => {
  const { gate, runs } = remoteGate({ tokenTtlMs: 30 })
  const { result, req } = pendingCall(gate, { tool: 'delete_file', arguments: { path: '/a' } })
  const token = gate.issueToken(req.id, 'alice')
  const claims = gate.inspectToken(token)
  assert.ok(claims.expiresAtMs - claims.issuedAtMs <= 30)
  await sleep(60)
  assert.throws(() => gate.respondToken(token, { approver: 'alice', decision: 'approve' }), code('token_expired'))
  assert.ok(gate.pending().some((r) => r.id === req.id))
  assert.equal(gate.respondToken(gate.issueToken(req.id, 'alice'), { approver: 'alice', decision: 'approve' }), 'approved')
  await result
  assert.deepEqual(runs, ['/a'])
  await gate.close()
})

test('key rotation: old tokens still verify, new ones use the current key; an old key set does not know it', async () => {
  const k1 = new TokenKeys('k1', Secret.fromBase64(SECRET_A))
  const k2 = k1.rotate('k2', SECRET_B)
  assert.equal(k2.currentKeyId, 'k2')
  assert.deepEqual(k2.keyIds(), ['k2', 'k1'])
  assert.deepEqual(k1.keyIds(), ['k1'], 'rotate returns a new key set')
  const parsed = TokenKeys.parse(`# current first\nk2:${SECRET_B}\n\nk1:${SECRET_A}`)
  assert.deepEqual(parsed.keyIds(), ['k2', 'k1'])
  assert.deepEqual(new TokenKeys('k1', SECRET_A).withVerifyOnly('old', SECRET_B).keyIds(), ['k1', 'old'])

  const before = remoteGate({ tokenKeys: k1 })
  const a = pendingCall(before.gate, { tool: 'delete_file', arguments: { path: '/a' } })
  const oldToken = before.gate.issueToken(a.req.id, 'alice')

  const after = remoteGate({ tokenKeys: k2 })
  assert.equal(after.gate.inspectToken(oldToken).keyId, 'k1')
  const b = pendingCall(after.gate, { tool: 'delete_file', arguments: { path: '/b' } })
  const newToken = after.gate.issueToken(b.req.id, 'alice')
  assert.match(newToken, /^so1\.k2\./)
  assert.throws(() => before.gate.inspectToken(newToken), code('unknown_key'))
  // The configuration string form, with the retired key verify-only.
  const viaString = remoteGate({ tokenKeys: `k2:${SECRET_B},k1:${SECRET_A}` })
  assert.equal(viaString.gate.inspectToken(oldToken).requestId, a.req.id)
  assert.equal(viaString.gate.inspectToken(newToken).requestId, b.req.id)

  assert.equal(after.gate.respondToken(newToken, { approver: 'alice', decision: 'approve' }), 'approved')
  await b.result
  await Promise.all([before.gate.close(), after.gate.close(), viaString.gate.close()])
  await a.result
})

test('approvers: an unlisted approver and self-approval are unauthorized; denials are accepted', async () => {
  const { gate, runs } = remoteGate({
    approvers: { delete_file: ['alice'], '*': ['admin'] },
    forbidSelfApproval: true,
  })
  gate.register({ name: 'send_email', parameters: { type: 'object' }, execute: () => 'sent' })

  const a = pendingCall(gate, { tool: 'delete_file', arguments: { path: '/a' }, sessionId: 's1' })
  const mallory = gate.issueToken(a.req.id, 'mallory')
  assert.throws(() => gate.respondToken(mallory, { approver: 'mallory', decision: 'approve' }), code('unauthorized'))
  assert.throws(() => a.req.approve({ responder: 'mallory' }), code('unauthorized'))
  assert.throws(() => a.req.approve(), code('unauthorized'), 'an approval must name its responder')
  assert.ok(a.req.isPending(), 'a refused approval changes nothing')
  // Refusing to run is the safe side: anyone matching the request may deny.
  assert.equal(gate.respondToken(mallory, { approver: 'mallory', decision: 'deny' }), 'denied')
  assert.equal((await a.result).status, 'denied')

  // Alice's own session cannot approve its calls, even though she approves delete_file.
  const self = pendingCall(gate, { tool: 'delete_file', arguments: { path: '/self' }, sessionId: 'alice' })
  const own = gate.issueToken(self.req.id, 'alice')
  assert.throws(() => gate.respondToken(own, { approver: 'alice', decision: 'approve' }), (e) => {
    assert.ok(code('unauthorized')(e))
    assert.match(e.message, /own session/)
    return true
  })
  assert.equal(gate.respondToken(gate.issueToken(self.req.id, 'admin'), { approver: 'admin', decision: 'approve' }), 'approved')
  assert.equal((await self.result).status, 'executed')

  // '*': admin approves every tool; alice only delete_file.
  const mail = pendingCall(gate, { tool: 'send_email', arguments: {}, sessionId: 's2' })
  assert.throws(() => mail.req.approve({ responder: 'alice' }), code('unauthorized'))
  assert.equal(mail.req.approve({ responder: 'admin' }), 'approved')
  assert.equal((await mail.result).status, 'executed')
  assert.deepEqual(runs, ['/self'])
  await gate.close()
})

test('options and keys are checked: config errors, secrets never printed', async () => {
  assert.throws(() => new Gate({ tokenTtlMs: 1000 }), code('config'))
  assert.throws(() => new Gate({ synchronousFull: true }), code('config'))
  assert.throws(() => new Gate({ auditRotateBytes: 1000 }), code('config'))
  assert.throws(() => new Gate({ approvers: { x: ['a'] }, allowedResponders: ['a'] }), code('config'))
  assert.throws(() => new Gate({ tokenKeys: 42 }), code('config'))
  assert.throws(() => new Gate({ tokenKeys: 'k1:c2hvcnQ=' }), code('config'))
  assert.throws(() => new Gate({ storePath: path.join(tmp(), 'no', 'such', 'dir', 'x.db') }), code('store'))
  assert.throws(() => Secret.fromBytes(new Uint8Array(31)), code('config'))
  assert.throws(() => Secret.fromBase64('not base64!'), code('config'))
  assert.throws(() => new TokenKeys('a.b', SECRET_A), code('config'))
  assert.throws(() => TokenKeys.parse(''), code('config'))
  assert.throws(() => TokenKeys.fromEnv('SIGNOFF_TEST_SURELY_UNSET'), code('config'))
  assert.throws(() => new TokenKeys('k1', SECRET_A).withVerifyOnly('k1', SECRET_B), code('config'))
  const dir = tmp()
  const file = path.join(dir, 'keys')
  writeFileSync(file, `k1:${SECRET_A}\n`)
  assert.equal(TokenKeys.fromFile(file).currentKeyId, 'k1')
  process.env.SIGNOFF_TEST_KEYS = `k3:${SECRET_B}`
  assert.equal(TokenKeys.fromEnv('SIGNOFF_TEST_KEYS').currentKeyId, 'k3')
  delete process.env.SIGNOFF_TEST_KEYS
  rmSync(dir, { recursive: true })

  const secret = Secret.generate()
  const b64 = secret.toBase64()
  assert.equal(Buffer.from(b64, 'base64').length, 32)
  assert.equal(Secret.fromBytes(Buffer.from(b64, 'base64')).toBase64(), b64)
  const keys = new TokenKeys('k1', secret).withVerifyOnly('k0', Secret.fromBase64(SECRET_A))
  const gate = new Gate({ tokenKeys: keys })
  for (const shown of [
    inspect(secret),
    inspect(keys, { showHidden: true, depth: 10 }),
    inspect(gate, { depth: 10 }),
    String(secret),
    String(keys),
    JSON.stringify({ secret, keys }),
    `${secret}`,
  ]) {
    assert.ok(!shown.includes(b64) && !shown.includes(SECRET_A), shown)
  }
  assert.equal(inspect(secret), 'Secret <redacted>')
  assert.match(inspect(keys), /k1.*k0/)

  // Tokens need keys; the in-memory store keeps no records; recover runs once, before any call.
  const plain = new Gate({ denyWhenUnobserved: false })
  plain.register({ name: 'delete_file', parameters: { type: 'object' } })
  const rec = plain.recover()
  assert.deepEqual(rec, { restored: [], timedOut: [], interrupted: [], notRestored: [] })
  assert.throws(() => plain.recover(), code('config'))
  const p = plain.confirm({ tool: 'delete_file', arguments: {} })
  const [req] = plain.pending()
  assert.throws(() => plain.issueToken(req.id, 'alice'), code('config'))
  assert.throws(() => plain.inspectToken('so1.k1.e30.AAAA'), code('config'))
  assert.equal(plain.record(req.id), undefined)
  // An id that is not a UUID names no request, as in every language (and as `respond` says).
  assert.throws(() => plain.record('not-a-uuid'), code('unknown_request'))
  assert.throws(() => plain.cancelRequest('not-a-uuid'), code('unknown_request'))
  assert.throws(() => plain.respond({ id: 'not-a-uuid', decision: 'approve' }), code('unknown_request'))
  const late = new Gate()
  late.register({ name: 'delete_file', parameters: { type: 'object' } })
  assert.equal((await late.confirm({ tool: 'delete_file', arguments: {} })).cancelReason, 'no-approver')
  assert.throws(() => late.recover(), code('config'))
  await Promise.all([gate.close(), plain.close(), late.close()])
  assert.equal((await p).outcome, 'cancelled')
})


async function until(f, what, timeoutMs = 5000) {
  const t0 = Date.now()
  while (!f()) {
    if (Date.now() - t0 > timeoutMs) throw new Error(`timed out waiting for ${what}`)
    await sleep(5)
  }
}

test('durable restart across processes: SIGKILL, recover, approve with a token issued before, runs once', async () => {
  const dir = tmp()
  const db = path.join(dir, 'signoff.db')
  const first = startChild(`
import { Gate } from ${JSON.stringify(entry)}
const gate = new Gate({ storePath: ${JSON.stringify(db)}, tokenKeys: 'k1:${SECRET_A}', denyWhenUnobserved: false })
gate.register({ name: 'delete_file', parameters: { type: 'object' }, execute: () => { console.log('RAN delete_file in the first process') } })
gate.register({ name: 'send_email', parameters: { type: 'object' }, execute: () => { console.log('EXECUTING send_email'); return new Promise(() => {}) } })
gate.register({ name: 'wipe_disk', parameters: { type: 'object' }, timeoutMs: 300, execute: () => 'wiped' })
gate.recover()
gate.execute({ tool: 'delete_file', arguments: { path: '/tmp/a' }, callId: 'c1' })
const [a] = gate.pending()
gate.execute({ tool: 'send_email', arguments: { to: 'x' } })
gate.execute({ tool: 'wipe_disk', arguments: {} })
const b = gate.pending().find((r) => r.tool === 'send_email')
const c = gate.pending().find((r) => r.tool === 'wipe_disk')
b.approve({ responder: 'bob' })   // its executor starts and never finishes
console.log('IDS ' + JSON.stringify({ a: a.id, token: a.issueToken('alice'), b: b.id, c: c.id, cDeadline: c.deadlineMs }))
`)
  const ids = JSON.parse((await first.line(/^IDS /)).slice(4))
  await first.line(/^EXECUTING send_email/)
  first.proc.kill('SIGKILL')
  const gone = await first.exited
  assert.equal(gone.signal, 'SIGKILL')
  assert.ok(!gone.out.includes('RAN'), gone.out)
  await sleep(Math.max(0, ids.cDeadline - Date.now() + 20))

  // The keys were rotated meanwhile: the token signed with k1 still verifies.
  const gate = new Gate({ storePath: db, tokenKeys: `k2:${SECRET_B}\nk1:${SECRET_A}`, denyWhenUnobserved: false })
  const runs = { delete_file: 0, send_email: 0, wipe_disk: 0 }
  const contexts = []
  gate.register({
    name: 'delete_file',
    parameters: { type: 'object' },
    execute: async ({ path }, { tool, callId, requestId, sessionId, edited }) => {
      contexts.push({ tool, callId, requestId, sessionId, edited })
      return (runs.delete_file++, { deleted: path })
    },
  })
  gate.register({ name: 'send_email', parameters: { type: 'object' }, execute: () => runs.send_email++ })
  gate.register({ name: 'wipe_disk', parameters: { type: 'object' }, execute: () => runs.wipe_disk++ })
  assert.equal(gate.record(ids.a).state, 'pending')
  assert.equal(gate.record(ids.b).state, 'executing')

  const rec = gate.recover()
  assert.deepEqual(rec.restored.map((r) => r.id), [ids.a])
  assert.equal(rec.restored[0].toolCallId, 'c1')
  assert.equal(rec.restored[0].deadlineMs, gate.inspectToken(ids.token).expiresAtMs, 'the original deadline')
  assert.deepEqual(rec.timedOut.map((r) => r.id), [ids.c])
  assert.deepEqual(rec.interrupted.map((r) => [r.request.id, r.state, r.responder]), [[ids.b, 'executing', 'bob']])
  assert.deepEqual(rec.notRestored, [])
  assert.equal(gate.record(ids.b).state, 'interrupted')
  assert.equal(gate.record(ids.c).state, 'timed-out')
  assert.deepEqual(gate.pending().map((r) => r.id), [ids.a])

  assert.equal(gate.respondToken(ids.token, { approver: 'alice', decision: 'approve' }), 'approved')
  await until(() => gate.record(ids.a).state === 'done', 'the restored call to finish')
  const done = gate.record(ids.a)
  assert.equal(done.responder, 'alice')
  assert.match(done.tokenFingerprint, /^[0-9a-f]{64}$/)
  assert.equal(done.result.status, 'executed')
  assert.deepEqual(done.result.output, { deleted: '/tmp/a' })
  assert.throws(() => gate.respondToken(ids.token, { approver: 'alice', decision: 'approve' }), code('already_used'))
  await sleep(30)
  assert.deepEqual(runs, { delete_file: 1, send_email: 0, wipe_disk: 0 }, 'exactly once; interrupted and timed-out never run')
  // Run from the core's task (off the JavaScript thread), it still knows its call: the restored request.
  assert.deepEqual(contexts, [{ tool: 'delete_file', callId: 'c1', requestId: ids.a, sessionId: 'default', edited: false }])
  await gate.close()

  // A third start finds nothing left to do, and the history is intact.
  const again = new Gate({ storePath: db, tokenKeys: `k1:${SECRET_A}`, denyWhenUnobserved: false })
  assert.deepEqual(again.recover(), { restored: [], timedOut: [], interrupted: [], notRestored: [] })
  assert.equal(again.record(ids.a).state, 'done')
  assert.throws(() => again.respondToken(ids.token, { approver: 'alice', decision: 'approve' }), code('already_used'))
  await again.close()
  rmSync(dir, { recursive: true })
})

/**
 * A child's gate on `db` (the script that makes it, and its `delete_file` that prints `RAN <path>`),
 * after a first child left two requests pending there (`/one`, `/two`) and died without close().
 */
async function leftPending(db) {
  const setup = `
import { Gate } from ${JSON.stringify(entry)}
const gate = new Gate({ storePath: ${JSON.stringify(db)}, denyWhenUnobserved: false, defaultTimeoutMs: 600000 })
gate.register({ name: 'delete_file', parameters: { type: 'object' }, execute: async ({ path }) => { console.log('RAN ' + path); return 1 } })
`
  const first = startChild(`${setup}
gate.confirm({ tool: 'delete_file', arguments: { path: '/one' } })
gate.confirm({ tool: 'delete_file', arguments: { path: '/two' } })
console.log('READY')
process.exit(0) // no close: as if the process died
`)
  await first.line(/READY/)
  assert.equal((await first.exited).code, 0)
  return setup
}

test('a restored request is shown to listeners, keeps the process alive, and close() lets it exit', async () => {
  const dir = tmp()
  const db = path.join(dir, 'signoff.db')
  const setup = await leftPending(db)

  // Nothing but the restored requests keeps this process alive. (The gate is held: like any
  // unreferenced gate, one nobody can reach is collected and keeps nothing alive.)
  const keep = startChild(`${setup}
globalThis.gate = gate
console.log('RESTORED ' + gate.recover().restored.length)
`)
  await keep.line(/RESTORED 2/)
  const kept = await Promise.race([keep.exited, sleep(700).then(() => 'alive')])
  assert.equal(kept, 'alive', 'a restored request keeps the process alive, like a confirmation in flight')
  keep.proc.kill('SIGKILL')
  await keep.exited

  const second = startChild(`${setup}
const paths = new Map()
gate.on('confirmation-resolved', (e) => console.log('RESOLVED ' + paths.get(e.id) + ' ' + e.outcome))
gate.on('confirmation-request', (req) => {
  paths.set(req.id, req.arguments.path)
  console.log('SHOWN ' + req.arguments.path)
  if (req.arguments.path === '/one') req.approve()
  else return new Promise(() => {}) // never answers
})
const rec = gate.recover()
console.log('RESTORED ' + rec.restored.length)
setTimeout(() => gate.close(), 300)
`)
  const r = await Promise.race([second.exited, sleep(8000, 'hung', { ref: false })])
  assert.notEqual(r, 'hung', 'the process exits after close()')
  assert.equal(r.code, 0, r.err)
  assert.match(r.out, /RESTORED 2/)
  assert.match(r.out, /SHOWN \/one/)
  assert.match(r.out, /SHOWN \/two/)
  assert.equal(r.out.match(/RAN \/one/g)?.length, 1)
  assert.doesNotMatch(r.out, /RAN \/two/)
  assert.match(r.out, /RESOLVED \/one approved/)
  assert.match(r.out, /RESOLVED \/two cancelled/)

  const check = new Gate({ storePath: db })
  check.register({ name: 'delete_file', parameters: { type: 'object' } })
  check.recover()
  assert.deepEqual(check.pending(), [])
  await check.close()
  rmSync(dir, { recursive: true })
})

test('restored requests that all finish let the process exit without close()', async () => {
  const dir = tmp()
  const db = path.join(dir, 'signoff.db')
  const setup = await leftPending(db)
  // Answered later, off any call into the gate: once both have run, nothing keeps it alive.
  const second = startChild(`${setup}
globalThis.gate = gate
gate.on('confirmation-request', (req) => new Promise((ok) => setTimeout(() => ok(req.approve()), 50)))
console.log('RESTORED ' + gate.recover().restored.length)
`)
  const r = await Promise.race([second.exited, sleep(8000, 'hung', { ref: false })])
  assert.notEqual(r, 'hung', 'the process exits once the last restored request has run')
  second.proc.kill('SIGKILL')
  assert.equal(r.code, 0, r.err)
  assert.match(r.out, /RESTORED 2/)
  assert.equal(r.out.match(/RAN \/(one|two)/g)?.length, 2, r.out)
  rmSync(dir, { recursive: true })
})

test('audit log: verifyAuditChain finds an edited line, and checks rotated files as one chain', async () => {
  const dir = tmp()
  const auditPath = path.join(dir, 'audit.jsonl')
  const { gate } = remoteGate({ auditPath })
  for (const p of ['/a', '/b', '/c']) {
    const { result, req } = pendingCall(gate, { tool: 'delete_file', arguments: { path: p } })
    gate.respondToken(gate.issueToken(req.id, 'alice'), { approver: 'alice', decision: p === '/b' ? 'deny' : 'approve' })
    await result
  }
  await gate.close()

  const ok = verifyAuditChain(auditPath)
  assert.equal(ok.intact, true)
  assert.equal(ok.problem, undefined)
  assert.deepEqual(ok.files, [auditPath])
  const lines = readFileSync(auditPath, 'utf8').trim().split('\n')
  assert.equal(ok.records, lines.length)
  assert.equal(ok.head, JSON.parse(lines.at(-1)).hash)

  // Someone turns a denial into an approval after the fact.
  const at = lines.findIndex((l) => l.includes('"decision":"deny"'))
  assert.ok(at > 0)
  const edited = [...lines]
  edited[at] = edited[at].replace('"decision":"deny"', '"decision":"approve"')
  writeFileSync(auditPath, edited.join('\n') + '\n')
  const bad = verifyAuditChain(auditPath)
  assert.equal(bad.intact, false)
  assert.equal(bad.problem.kind, 'edited')
  assert.equal(bad.problem.file, auditPath)
  assert.equal(bad.problem.line, at + 1)
  assert.equal(bad.problem.seq, at)
  assert.equal(bad.records, at)

  // Rotation: several files, one chain; a deleted file is missing records.
  const rotPath = path.join(dir, 'rotated.jsonl')
  const rot = remoteGate({ auditPath: rotPath, auditRotateBytes: 600 })
  for (let i = 0; i < 6; i++) {
    const { result, req } = pendingCall(rot.gate, { tool: 'delete_file', arguments: { path: `/r${i}` } })
    rot.gate.respondToken(rot.gate.issueToken(req.id, 'alice'), { approver: 'alice', decision: 'approve' })
    await result
    await rot.gate.flushAudit()
  }
  await rot.gate.close()
  const report = verifyAuditChain(rotPath)
  assert.equal(report.intact, true, JSON.stringify(report.problem))
  assert.ok(report.files.length > 2, `${report.files.length} files`)
  assert.equal(report.files.at(-1), rotPath)
  assert.ok(existsSync(`${rotPath}.1`))
  rmSync(`${rotPath}.2`)
  const gap = verifyAuditChain(rotPath)
  assert.equal(gap.problem.kind, 'missing')

  assert.throws(() => verifyAuditChain(path.join(dir, 'nope.jsonl')), /nope\.jsonl/)
  rmSync(dir, { recursive: true })
})

test('audit log with a durable store: records cut from the end are found with { storePath }', async () => {
  const dir = tmp()
  const auditPath = path.join(dir, 'audit.jsonl')
  const storePath = path.join(dir, 'signoff.db')
  const { gate } = remoteGate({ auditPath, storePath })
  gate.recover()
  for (const p of ['/a', '/b', '/c']) {
    const { result, req } = pendingCall(gate, { tool: 'delete_file', arguments: { path: p } })
    gate.respondToken(gate.issueToken(req.id, 'alice'), { approver: 'alice', decision: p === '/b' ? 'deny' : 'approve' })
    await result
  }
  await gate.flushAudit()
  // While the gate has the database open it is locked: verify after close.
  assert.throws(() => verifyAuditChain(auditPath, { storePath }), (e) => code('store')(e) && e.message.includes(storePath))
  await gate.close()

  const lines = readFileSync(auditPath, 'utf8').trim().split('\n')
  const intact = verifyAuditChain(auditPath, { storePath })
  assert.equal(intact.intact, true, JSON.stringify(intact.problem))
  assert.equal(intact.records, lines.length)
  assert.deepEqual(verifyAuditChain(auditPath, {}), verifyAuditChain(auditPath))
  assert.deepEqual(verifyAuditChain(auditPath, { storePath: undefined }), verifyAuditChain(auditPath))

  // Someone removes the last record (the last outcome, say).
  writeFileSync(auditPath, lines.slice(0, -1).join('\n') + '\n')
  const plain = verifyAuditChain(auditPath)
  assert.equal(plain.intact, true, 'the chain alone cannot show a cut end (the documented limit)')
  assert.equal(plain.records, lines.length - 1)
  const anchored = verifyAuditChain(auditPath, { storePath })
  assert.equal(anchored.intact, false)
  assert.equal(anchored.problem.kind, 'truncated')
  assert.equal(anchored.problem.seq, lines.length - 1)
  assert.equal(anchored.problem.file, auditPath)
  assert.match(anchored.problem.message, /cut from the end/)
  assert.equal(anchored.records, lines.length - 1)

  // Emptied altogether.
  writeFileSync(auditPath, '')
  assert.equal(verifyAuditChain(auditPath).intact, true)
  assert.equal(verifyAuditChain(auditPath, { storePath }).problem.kind, 'truncated')

  // A database that is not there is an error, never a silent unanchored check; so is a typo.
  // (`io`, with the path, as a missing log is, in every language)
  const nope = path.join(dir, 'nope.db')
  assert.throws(() => verifyAuditChain(auditPath, { storePath: nope }), (e) => code('io')(e) && e.message.includes(nope))
  assert.throws(() => verifyAuditChain(auditPath, { store: storePath }), code('malformed'))
  rmSync(dir, { recursive: true })
})

test('respondAsync / respondTokenAsync: a durable answer settles once recorded, with the same outcome and errors', async () => {
  const dir = tmp()
  const { gate, runs } = remoteGate({ storePath: path.join(dir, 'signoff.db'), synchronousFull: true })
  try {
    // A response answers; a wrong or a second one rejects as respond throws.
    const first = await storedCall(gate, { tool: 'delete_file', arguments: { path: '/tmp/a' } })
    const bound = (r) => ({ id: r.id, tool: r.tool, argumentsDigest: r.argumentsDigest, sessionId: r.sessionId })
    const wrong = { ...bound(first.req), argumentsDigest: 'sha256:00', decision: 'approve' }
    await assert.rejects(gate.respondAsync(wrong), code('mismatch'))
    assert.equal(await gate.respondAsync({ ...bound(first.req), decision: 'approve', responder: 'alice' }), 'approved')
    assert.equal((await first.result).status, 'executed')
    assert.deepEqual(runs, ['/tmp/a'])
    assert.equal(gate.record(first.req.id).state, 'done')
    await assert.rejects(gate.respondAsync({ ...bound(first.req), decision: 'deny' }), code('already_resolved'))
    // A token answers once; its replay rejects.
    const second = await storedCall(gate, { tool: 'delete_file', arguments: { path: '/tmp/b' } })
    const token = gate.issueToken(second.req.id, 'bob')
    await assert.rejects(gate.respondTokenAsync(token, { approver: 'eve', decision: 'approve' }), code('wrong_approver'))
    assert.equal(await gate.respondTokenAsync(token, { approver: 'bob', decision: 'deny', reason: 'no' }), 'denied')
    const denied = await second.result
    assert.equal(denied.status, 'denied')
    await assert.rejects(gate.respondTokenAsync(token, { approver: 'bob', decision: 'approve' }), code('already_used'))
    assert.deepEqual(runs, ['/tmp/a'], 'the denied call did not run')
    // Bad input is refused before anything is answered.
    await assert.rejects(gate.respondAsync({ id: second.req.id }), code('malformed'))
    await assert.rejects(gate.respondTokenAsync(token, {}), code('malformed'))
  } finally {
    await gate.close()
    rmSync(dir, { recursive: true, force: true })
  }
  // The in-memory store answers at once, through the same call.
  const mem = remoteGate()
  const third = pendingCall(mem.gate, { tool: 'delete_file', arguments: { path: '/tmp/c' } })
  assert.equal(await mem.gate.respondAsync({ id: third.req.id, decision: 'approve' }), 'approved')
  assert.equal((await third.result).status, 'executed')
  await mem.gate.close()
})
