// Approval markers (loopback de-duplication): a call a person approved through one gate is
// accepted once by another gate sharing the keys; everything else throws, so that gate asks.
import { test } from 'node:test'
import assert from 'node:assert/strict'
import { Gate, MARKER_META_KEY, Secret, SignoffError, TokenKeys } from '../dist/index.mjs'

const SECRET_A = 'AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8='
const code = (c) => (e) => e instanceof SignoffError && e.code === c
const schema = { type: 'object', properties: { path: { type: 'string' } }, required: ['path'] }

function gate(keys = new TokenKeys('k1', SECRET_A)) {
  const g = new Gate({ tokenKeys: keys, defaultTimeoutMs: 30000 })
  g.register({ name: 'fs__write_file', parameters: schema, approval: 'required', editable: true })
  g.register({ name: 'fs__read_file', parameters: schema, approval: 'not_required' })
  return g
}

/** A person (alice) answers the next request on `g` with `answer`; returns the decision. */
async function decided(g, answer, path = '/tmp/a') {
  const listener = (req) => answer(req)
  g.on('confirmation-request', listener)
  try {
    return await g.confirm({ tool: 'fs__write_file', arguments: { path } })
  } finally {
    g.off('confirmation-request', listener)
  }
}

const approve = (req) => req.approve({ responder: 'alice' })

test('a marker is accepted once by a gate sharing the keys', async () => {
  const [local, remote] = [gate(), gate()]
  const d = await decided(local, approve)
  const marker = local.approvalMarker('fs__write_file', d)
  assert.match(marker, /^so1m\./)
  assert.equal(MARKER_META_KEY, 'dev.signoff/approval')
  const claims = remote.acceptApprovalMarker(marker, 'fs__write_file', { path: '/tmp/a' })
  assert.equal(claims.approver, 'alice')
  assert.equal(claims.requestId, d.requestId)
  assert.throws(() => remote.acceptApprovalMarker(marker, 'fs__write_file', { path: '/tmp/a' }), code('already_used'))
  assert.throws(() => local.approvalMarker('fs__write_file', d), code('already_used'))
  await Promise.all([local.close(), remote.close()])
})

test('other arguments, another tool or other keys are refused, and consume nothing', async () => {
  const [local, remote, stranger] = [gate(), gate(), gate(new TokenKeys('k1', Secret.generate()))]
  const marker = local.approvalMarker('fs__write_file', await decided(local, approve))
  assert.throws(() => remote.acceptApprovalMarker(marker, 'fs__write_file', { path: '/etc/passwd' }), code('mismatch'))
  assert.throws(() => remote.acceptApprovalMarker(marker, 'fs__delete', { path: '/tmp/a' }), code('mismatch'))
  assert.throws(() => stranger.acceptApprovalMarker(marker, 'fs__write_file', { path: '/tmp/a' }), code('bad_signature'))
  assert.throws(() => remote.acceptApprovalMarker('nope', 'fs__write_file', { path: '/tmp/a' }), code('malformed'))
  assert.throws(() => remote.acceptApprovalMarker(marker, 'fs__write_file', { path: NaN }), code('malformed'))
  remote.acceptApprovalMarker(marker, 'fs__write_file', { path: '/tmp/a' })
  await Promise.all([local.close(), remote.close(), stranger.close()])
})

test('an edit is what the marker carries', async () => {
  const [local, remote] = [gate(), gate()]
  const d = await decided(local, (req) => req.approve({ arguments: { path: '/tmp/b' }, responder: 'alice' }))
  assert.equal(d.edited, true)
  const marker = local.approvalMarker('fs__write_file', d)
  assert.throws(() => remote.acceptApprovalMarker(marker, 'fs__write_file', { path: '/tmp/a' }), code('mismatch'))
  remote.acceptApprovalMarker(marker, 'fs__write_file', { path: '/tmp/b' })
  await Promise.all([local.close(), remote.close()])
})

test("only a person's approval gets a marker", async () => {
  const local = gate()
  const denied = await decided(local, (req) => req.deny('no', { responder: 'alice' }))
  assert.throws(() => local.approvalMarker('fs__write_file', denied), code('malformed'))
  const notGated = await local.confirm({ tool: 'fs__read_file', arguments: { path: '/tmp/a' } })
  assert.equal(notGated.by, 'not-gated')
  assert.throws(() => local.approvalMarker('fs__read_file', notGated), code('malformed'))
  assert.throws(() => local.approvalMarker('fs__write_file', null), code('malformed'))
  await local.close()
  const keyless = new Gate({ defaultTimeoutMs: 30000 })
  keyless.register({ name: 'fs__write_file', parameters: schema, approval: 'required' })
  const d = await decided(keyless, approve)
  assert.throws(() => keyless.approvalMarker('fs__write_file', d), code('config'))
  await keyless.close()
})

test('with a durable store a marker stays used after the gate restarts', async () => {
  const { mkdtempSync, rmSync } = await import('node:fs')
  const { tmpdir } = await import('node:os')
  const path = await import('node:path')
  const dir = mkdtempSync(path.join(tmpdir(), 'signoff-marker-'))
  try {
    const storePath = path.join(dir, 'proxy.db')
    const proxy = () => {
      const g = new Gate({ tokenKeys: new TokenKeys('k1', SECRET_A), storePath, synchronousFull: true })
      g.register({ name: 'fs__write_file', parameters: schema, approval: 'required' })
      return g
    }
    const local = gate()
    const marker = local.approvalMarker('fs__write_file', await decided(local, approve))
    const first = proxy()
    first.acceptApprovalMarker(marker, 'fs__write_file', { path: '/tmp/a' })
    await first.close()
    // The same marker replayed to the proxy restarted within the marker's minute.
    const restarted = proxy()
    assert.throws(() => restarted.acceptApprovalMarker(marker, 'fs__write_file', { path: '/tmp/a' }), code('already_used'))
    await Promise.all([local.close(), restarted.close()])
  } finally {
    rmSync(dir, { recursive: true, force: true })
  }
})
