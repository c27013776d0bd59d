// Memory over 100,000 confirmations (after 200,000 warm-up ones, which fill the core's bounded memory of
// resolved request ids, 65,536 by default): every call goes the full way (a gated call, a request,
// a listener that checks it and approves, the decision back to JavaScript), half through
// `confirm`, half through `execute`. Every 10,000 it prints, after a full GC: the JS heap in use,
// and the memory outside V8's heap (RSS minus V8's heapTotal: the addon, the core, malloc). It
// fails (exit 1) if either grows more than the limits below across the measured 100,000.
// (Raw RSS also moves with V8 resizing its young generation under load, up to a few tens of MB
// and bounded; it is printed for reference.)
//
//   node --expose-gc bench/memory.mjs            (npm run memory)
import { Gate } from '../dist/index.mjs'

if (!globalThis.gc) {
  console.error('run with --expose-gc')
  process.exit(2)
}
const arg = (name, dflt) => { const i = process.argv.indexOf(name); return i > 0 ? Number(process.argv[i + 1]) : dflt }
const WARM = arg('--warm', 200_000)
const MEASURED = arg('--measured', 100_000)
const LIMIT_NATIVE = 8 * 1024 * 1024 // a leak of 80 B per call would be 8 MB; a leaked request ~2 KB
const LIMIT_HEAP = 2 * 1024 * 1024

const gate = new Gate()
gate.register({
  name: 'pay_invoice',
  parameters: { type: 'object', properties: { invoice: { type: 'string' }, amount: { type: 'number' } }, required: ['invoice', 'amount'] },
  execute: ({ invoice }) => ({ paid: invoice }),
})
let approved = 0
gate.on('confirmation-request', (req) => {
  if (req.tool === 'pay_invoice' && req.arguments.amount < 1000) {
    req.approve()
    approved++
  } else req.deny('too much')
})
const resolved = { n: 0 }
gate.on('confirmation-resolved', () => resolved.n++)

async function batch(n, from) {
  for (let i = 0; i < n; i++) {
    const call = { tool: 'pay_invoice', arguments: { invoice: `INV-${from + i}`, amount: (from + i) % 999 }, callId: `c${from + i}` }
    if (i % 2) {
      const r = await gate.execute(call)
      if (r.status !== 'executed') throw new Error(`${r.status}: ${r.content}`)
    } else {
      const d = await gate.confirm(call)
      if (!d.approved) throw new Error(d.outcome)
    }
  }
}

async function sample() {
  await new Promise((r) => setImmediate(r))
  gc()
  gc()
  const m = process.memoryUsage()
  return { rss: m.rss, native: m.rss - m.heapTotal, heap: m.heapUsed }
}

const mb = (b) => (b / 1024 / 1024).toFixed(2).padStart(7) + ' MB'
await batch(WARM, 0)
const start = await sample()
console.log(`after ${WARM} warm-up confirmations: outside V8 heap ${mb(start.native)}, JS heap ${mb(start.heap)}, rss ${mb(start.rss)}`)
let last = start
for (let done = 0; done < MEASURED; done += 10_000) {
  await batch(10_000, WARM + done)
  last = await sample()
  console.log(
    `+${String(done + 10_000).padStart(6)}: outside V8 heap ${mb(last.native)} (${mb(last.native - start.native)}), JS heap ${mb(last.heap)} (${mb(last.heap - start.heap)}), rss ${mb(last.rss)}`,
  )
}
if (approved !== WARM + MEASURED) throw new Error(`approved ${approved}`)
if (gate.pendingCount !== 0) throw new Error('requests left pending')
await gate.close()
const nativeGrowth = last.native - start.native
const heapGrowth = last.heap - start.heap
console.log(
  `growth over ${MEASURED} confirmations: outside V8 heap ${mb(nativeGrowth)}, JS heap ${mb(heapGrowth)} (limits ${mb(LIMIT_NATIVE)}, ${mb(LIMIT_HEAP)}); resolved events seen: ${resolved.n}`,
)
if (nativeGrowth > LIMIT_NATIVE || heapGrowth > LIMIT_HEAP) {
  console.error('memory is not flat')
  process.exit(1)
}
