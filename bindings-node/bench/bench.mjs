// Benchmarks for the Node binding. Run from bindings-node/ after `npm run build` (release):
//
//   node --expose-gc bench/bench.mjs            (or: npm run bench)
//   node --expose-gc bench/bench.mjs --quick    (smaller counts, for a smoke run)
//
// 1. Overhead per approval: one gated no-op tool call through `gate.execute`, approved by an
//    automatic listener that checks the tool name and the arguments, vs the same no-op tool called
//    in a plain (ungated) loop. Per-call wall time, median and p99. Also against `gate.execute` of
//    an ungated tool (what the approval alone adds; the Python bench's definition).
// 2. Approvals per second with 1,000 pending: a window of 1,000 outstanding confirmations, kept
//    full, answered by (a) an event-stream consumer (`for await ... of gate.events()`), (b) the same
//    reading only requests (`gate.events({ types: ['confirmation-request'] })`) and (c) a listener
//    that answers its queue in batches.
// 3. Memory per pending request: 20,000 requests pending at once.
import { Gate } from '../dist/index.mjs'

const quick = process.argv.includes('--quick')
const N = quick ? 20_000 : 200_000
const WARM = quick ? 5_000 : 20_000
const gc = globalThis.gc ?? (() => {})

const hr = () => process.hrtime.bigint()
const pct = (sorted, p) => sorted[Math.min(sorted.length - 1, Math.floor((p / 100) * sorted.length))]
const us = (ns) => Number(ns) / 1000

function stats(samples) {
  const s = BigInt64Array.from(samples).sort()
  return { median: us(pct(s, 50)), p99: us(pct(s, 99)) }
}

const schema = {
  type: 'object',
  properties: { invoice: { type: 'string' }, amount: { type: 'number' } },
  required: ['invoice', 'amount'],
}
const args = { invoice: 'INV-1', amount: 42 }
const noop = (a) => ({ ok: true, invoice: a.invoice })

function makeGate(opts = {}) {
  const gate = new Gate(opts)
  gate.register({ name: 'pay_invoice', description: 'Pays an invoice', parameters: schema, execute: noop })
  gate.register({ name: 'read_invoice', description: 'Reads an invoice', parameters: schema, execute: noop })
  return gate
}

async function timeLoop(n, fn) {
  const samples = new Array(n)
  for (let i = 0; i < n; i++) {
    const t0 = hr()
    await fn(i)
    samples[i] = hr() - t0
  }
  return samples
}

async function overhead() {
  const gate = makeGate()
  let approved = 0
  gate.on('confirmation-request', (req) => {
    if (req.tool === 'pay_invoice' && req.arguments.amount <= 100 && req.arguments.invoice === 'INV-1') {
      req.approve()
      approved++
    } else {
      req.deny('not allowed')
    }
  })
  const call = { tool: 'pay_invoice', arguments: args, callId: 'c1' }
  const ungated = { tool: 'read_invoice', arguments: args, callId: 'c1' }

  // Warm up every path.
  await timeLoop(WARM, async () => noop(args))
  await timeLoop(WARM, () => gate.execute(call))
  await timeLoop(WARM, () => gate.execute(ungated))
  await timeLoop(WARM, () => gate.confirm(call))

  gc()
  const base = stats(await timeLoop(N, async () => noop(args)))
  gc()
  const passthrough = stats(await timeLoop(N, () => gate.execute(ungated)))
  gc()
  const confirm = stats(await timeLoop(N, () => gate.confirm(call)))
  gc()
  const t0 = hr()
  const gated = stats(
    await timeLoop(N, async () => {
      const r = await gate.execute(call)
      if (r.status !== 'executed') throw new Error(`unexpected ${r.status}: ${r.content}`)
    }),
  )
  const elapsed = Number(hr() - t0) / 1e9
  if (approved < N) throw new Error('the approver did not run for every call')
  await gate.close()
  return { base, passthrough, confirm, gated, sequentialPerSec: N / elapsed }
}

async function windowed(kind) {
  const gate = makeGate()
  const WINDOW = 1000
  const total = N
  let started = 0
  let done = 0
  let maxPending = 0
  let minPendingAtSteady = Infinity
  const call = { tool: 'pay_invoice', arguments: args }
  let stream
  if (kind === 'stream' || kind === 'request stream') {
    stream = kind === 'stream' ? gate.events() : gate.events({ types: ['confirmation-request'] })
    ;(async () => {
      for await (const e of stream) {
        if (e.type === 'confirmation-request') {
          if (e.tool === 'pay_invoice' && e.arguments.amount <= 100) e.approve()
          else e.deny('not allowed')
        }
      }
    })()
  } else {
    let queue = []
    let scheduled = false
    const flush = () => {
      scheduled = false
      const q = queue
      queue = []
      for (const { req, resolve } of q) {
        if (req.tool === 'pay_invoice' && req.arguments.amount <= 100) req.approve()
        else req.deny('not allowed')
        resolve()
      }
    }
    gate.on('confirmation-request', (req) => {
      if (!scheduled) {
        scheduled = true
        setImmediate(flush)
      }
      return new Promise((resolve) => queue.push({ req, resolve }))
    })
  }
  const t0 = hr()
  await new Promise((resolveAll, rejectAll) => {
    const startOne = () => {
      started++
      gate.confirm(call).then((d) => {
        if (!d.approved) return rejectAll(new Error(`unexpected ${d.outcome}`))
        done++
        if (started - done > maxPending) maxPending = started - done
        if (done > WINDOW && done < total - WINDOW) minPendingAtSteady = Math.min(minPendingAtSteady, gate.pendingCount)
        if (done === total) resolveAll()
        else if (started < total) startOne()
      }, rejectAll)
    }
    for (let i = 0; i < WINDOW; i++) startOne()
  })
  const secs = Number(hr() - t0) / 1e9
  stream?.close()
  await gate.close()
  return { perSec: total / secs, maxInFlight: maxPending, minPending: minPendingAtSteady }
}

async function memoryPerPending() {
  const M = 20_000
  const gate = makeGate({ denyWhenUnobserved: false, defaultTimeoutMs: 600_000 })
  const call = { tool: 'pay_invoice', arguments: args }
  // Warm up the allocator and the code paths.
  let ps = []
  for (let i = 0; i < 2000; i++) ps.push(gate.confirm(call))
  for (const r of gate.pending()) r.deny()
  await Promise.all(ps)
  ps = []
  gc()
  await new Promise((r) => setTimeout(r, 50))
  gc()
  const before = process.memoryUsage()
  for (let i = 0; i < M; i++) ps.push(gate.confirm(call))
  gc()
  const after = process.memoryUsage()
  if (gate.pendingCount !== M) throw new Error(`expected ${M} pending, got ${gate.pendingCount}`)
  await gate.close()
  const outcomes = await Promise.all(ps)
  if (outcomes.some((d) => d.outcome !== 'cancelled')) throw new Error('close did not cancel everything')
  return {
    rssPerPending: (after.rss - before.rss) / M,
    heapPerPending: (after.heapUsed - before.heapUsed) / M,
  }
}

const fmt = (x) => x.toFixed(2)
const o = await overhead()
console.log(`calls per measurement: ${N} (after ${WARM} warm-up)`)
console.log(`baseline (await noop(args))          median ${fmt(o.base.median)} us  p99 ${fmt(o.base.p99)} us`)
console.log(`gate.execute, ungated tool           median ${fmt(o.passthrough.median)} us  p99 ${fmt(o.passthrough.p99)} us`)
console.log(`gate.confirm, gated, auto-approved   median ${fmt(o.confirm.median)} us  p99 ${fmt(o.confirm.p99)} us`)
console.log(`gate.execute, gated, auto-approved   median ${fmt(o.gated.median)} us  p99 ${fmt(o.gated.p99)} us`)
console.log(
  `overhead per approval (gated execute - baseline): median ${fmt(o.gated.median - o.base.median)} us, p99 ${fmt(o.gated.p99 - o.base.p99)} us`,
)
console.log(
  `overhead per approval (gated execute - ungated execute, as Python's bench reports it): median ${fmt(o.gated.median - o.passthrough.median)} us`,
)
console.log(`sequential gated executes: ${Math.round(o.sequentialPerSec)}/s`)
for (const kind of ['stream', 'request stream', 'listener']) {
  const w = await windowed(kind)
  console.log(
    `approvals/s with 1,000 pending (${kind} approver): ${Math.round(w.perSec)}/s  (max in flight ${w.maxInFlight}, min pending at steady state ${w.minPending})`,
  )
}
const m = await memoryPerPending()
console.log(`memory per pending request (20,000 pending): rss ${Math.round(m.rssPerPending)} B, JS heap ${Math.round(m.heapPerPending)} B`)
