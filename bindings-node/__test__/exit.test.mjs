// The process can exit: after close(), and whenever nothing is in flight (the native side never
// keeps the event loop alive on its own).
import { test } from 'node:test'
import assert from 'node:assert/strict'
import { runChild } from './child.mjs'
import { fileURLToPath } from 'node:url'

const entry = fileURLToPath(new URL('../dist/index.mjs', import.meta.url))

const run = (source) => runChild(source, { timeoutMs: 8000 })

const prelude = `
import { Gate } from ${JSON.stringify(entry)}
const gate = new Gate({ defaultTimeoutMs: 600000 })
gate.register({ name: 'delete_file', parameters: { type: 'object' }, execute: () => 'ran' })
`

test('after close() the process exits: pending calls, a hung listener, streams and event listeners', async () => {
  const r = await run(`${prelude}
gate.on('confirmation-request', () => new Promise(() => {}))   // never answers, never settles
gate.on('confirmation-resolved', (e) => console.log('resolved', e.cancelReason))
const stream = gate.events()
;(async () => { for await (const e of stream) {} console.log('stream ended') })()
const p = gate.execute({ tool: 'delete_file', arguments: {} })
setTimeout(async () => {
  await gate.close()
  const r = await p
  console.log('result', r.status, r.decision.cancelReason)
}, 50)
`)
  assert.equal(r.code, 0, r.err)
  assert.match(r.out, /result cancelled shutdown/)
  assert.match(r.out, /stream ended/)
  assert.ok(r.ms < 5000, `took ${r.ms} ms`)
})

test('close() without awaiting it still lets the process exit', async () => {
  const r = await run(`${prelude}
gate.on('confirmation-request', () => new Promise(() => {}))
gate.confirm({ tool: 'delete_file', arguments: {} }).then((d) => console.log('decision', d.outcome, d.cancelReason))
setTimeout(() => { gate.close() }, 20)
`)
  assert.equal(r.code, 0, r.err)
  assert.match(r.out, /decision cancelled shutdown/)
  assert.ok(r.ms < 5000, `took ${r.ms} ms`)
})

test('a gate with listeners and nothing in flight does not keep the process alive', async () => {
  const r = await run(`${prelude}
gate.on('confirmation-request', (req) => req.approve())
gate.on('confirmation-resolved', () => {})
const stream = gate.events()
;(async () => { for await (const e of stream) {} })()
const r = await gate.execute({ tool: 'delete_file', arguments: {} })
console.log('done', r.status)
`)
  assert.equal(r.code, 0, r.err)
  assert.match(r.out, /done executed/)
  assert.ok(r.ms < 5000, `took ${r.ms} ms`)
})

test('a pending confirmation keeps the process alive until its deadline, like a timer', async () => {
  const r = await run(`
import { Gate } from ${JSON.stringify(entry)}
const gate = new Gate({ defaultTimeoutMs: 300 })
gate.register({ name: 'delete_file', parameters: { type: 'object' } })
gate.on('confirmation-request', () => new Promise(() => {}))
const t0 = Date.now()
gate.confirm({ tool: 'delete_file', arguments: {} }).then((d) => console.log('decision', d.outcome, Date.now() - t0 >= 290))
`)
  assert.equal(r.code, 0, r.err)
  assert.match(r.out, /decision timed-out true/)
})
