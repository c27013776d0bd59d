// Scale: N confirmations pending at once (default 1,000,000; `--n`), nobody answering. Prints
// the RSS once they are all pending, the time of one `pendingPage({ limit: 1000 })` and of one
// full `pending()` (which blocks the event loop for all of it), how long iterating them with
// `pendingAll()` takes and the longest the event loop waited meanwhile; then closes the gate and
// checks that every call resolved (cancelled / shutdown). Not run by the tests.
//
//   node --expose-gc bench/scale.mjs [--n 1000000]     (npm run scale -- --n 1000000)
//
// With a million pending, `pending()` builds one JSON text of every request and a million
// objects from it: give V8 room (`--max-old-space-size=8192`) if it runs out of heap.
import { monitorEventLoopDelay } from 'node:perf_hooks'
import { Gate } from '../dist/index.mjs'

const arg = (name, dflt) => {
  const i = process.argv.indexOf(name)
  return i > 0 ? Number(process.argv[i + 1]) : dflt
}
const N = arg('--n', 1_000_000)
if (!Number.isInteger(N) || N < 1) {
  console.error('usage: scale.mjs [--n <pending confirmations>]')
  process.exit(2)
}

const fmt = (n, digits = 0) => n.toLocaleString('en-US', { minimumFractionDigits: digits, maximumFractionDigits: digits })
const mb = (b) => `${fmt(b / 1024 / 1024, 1)} MB`
const ms = (t) => `${fmt(t, t < 10 ? 3 : 1)} ms`
const gc = () => globalThis.gc?.()
const tick = () => new Promise((r) => setImmediate(r))

const gate = new Gate({ denyWhenUnobserved: false, defaultTimeoutMs: 24 * 3600_000 })
gate.register({
  name: 'pay_invoice',
  description: 'Pays an invoice',
  approval: 'required',
  parameters: {
    type: 'object',
    properties: { invoice: { type: 'string' }, amount: { type: 'number' } },
    required: ['invoice', 'amount'],
  },
})

const { rss: rss0, heapUsed: heap0 } = process.memoryUsage()
let t = performance.now()
const calls = new Array(N)
for (let i = 0; i < N; i++) {
  calls[i] = gate.confirm({ tool: 'pay_invoice', arguments: { invoice: `INV-${i}`, amount: i % 1000 }, callId: `c${i}` })
  if (i % 50_000 === 49_999) await tick()
}
const created = performance.now() - t
if (gate.pendingCount !== N) throw new Error(`${gate.pendingCount} pending, expected ${N}`)
await tick()
gc()
const { rss, heapUsed } = process.memoryUsage()
console.log(`${fmt(N)} confirmations pending (made in ${ms(created)})`)
console.log(`rss with them pending: ${mb(rss)} (${mb(rss0)} before; ${fmt((rss - rss0) / N)} bytes per pending call)`)
console.log(`of which the V8 heap: ${fmt((heapUsed - heap0) / N)} bytes per pending call (the promise, and this script's array of them)`)

// One page, from the start and from the middle of the order.
t = performance.now()
const first = gate.pendingPage({ limit: 1000 })
const firstTime = performance.now() - t
t = performance.now()
const second = gate.pendingPage({ after: first.next, limit: 1000 })
const secondTime = performance.now() - t
if (first.requests.length !== Math.min(N, 1000)) throw new Error(`first page: ${first.requests.length}`)
console.log(`pendingPage({ limit: 1000 }): ${ms(firstTime)} (first page), ${ms(secondTime)} (second page, ${second.requests.length} requests)`)

// Every page, through pendingAll: how long the event loop waited at most meanwhile.
const delay = monitorEventLoopDelay({ resolution: 1 })
delay.enable()
t = performance.now()
let seen = 0
for await (const req of gate.pendingAll()) {
  if (req.type === 'confirmation-request') seen++
}
const allTime = performance.now() - t
delay.disable()
if (seen !== N) throw new Error(`pendingAll yielded ${seen}, expected ${N}`)
console.log(
  `pendingAll(): ${fmt(seen)} requests in ${ms(allTime)}, ${fmt(Math.ceil(N / 1000))} pages; event-loop delay ` +
    `meanwhile p50 ${ms(delay.percentile(50) / 1e6)}, p99 ${ms(delay.percentile(99) / 1e6)}, ` +
    `max ${ms(delay.max / 1e6)} (garbage collection included)`,
)

// The whole copy in one call.
gc()
t = performance.now()
let all
try {
  all = gate.pending()
} catch (e) {
  console.log(`pending(): failed after ${ms(performance.now() - t)}: ${e.message}`)
}
if (all) {
  const fullTime = performance.now() - t
  console.log(`pending(): ${fmt(all.length)} requests in ${ms(fullTime)} (one synchronous call: the event loop is blocked throughout)`)
  console.log(`rss after pending(): ${mb(process.memoryUsage().rss)}`)
  if (all.length !== N) throw new Error(`pending() returned ${all.length}`)
}
all = undefined
gc()

// Close: every call resolves, as cancelled / shutdown.
t = performance.now()
await gate.close()
const decisions = await Promise.all(calls)
const closeTime = performance.now() - t
const shutdown = decisions.filter((d) => d.outcome === 'cancelled' && d.cancelReason === 'shutdown').length
console.log(`close(): every call resolved in ${ms(closeTime)}: ${fmt(shutdown)} of ${fmt(N)} cancelled (shutdown)`)
if (shutdown !== N || gate.pendingCount !== 0) {
  console.error('FAIL: not every call resolved as cancelled / shutdown')
  process.exit(1)
}
