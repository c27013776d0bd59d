// Pending requests in pages: `gate.pendingPage({ after, limit })` costs O(limit) however many
// are pending, `gate.pendingAll()` iterates them all a page at a time and lets the event loop run
// in between, and a lagging subscriber gets at most 1,000 requests plus a cursor (`more`) for the
// rest, instead of a copy of everything.
import { test, after } from 'node:test'
import assert from 'node:assert/strict'
import { setTimeout as sleep } from 'node:timers/promises'
import { Gate, SignoffError } from '../dist/index.mjs'

const N = 2_500
const code = (c) => (e) => e instanceof SignoffError && e.code === c

// A failed test must not leave thousands of confirmations keeping the process alive.
const gates = new Set()
after(() => Promise.all([...gates].map((g) => g.close())))
function newGate(options) {
  const gate = new Gate(options)
  gates.add(gate)
  return gate
}

/** A gate that keeps requests pending while nobody listens, and `n` pending calls of `gated`. */
function pendingGate(n, options = {}) {
  const gate = newGate({ denyWhenUnobserved: false, defaultTimeoutMs: 600_000, ...options })
  gate.register({ name: 'gated', approval: 'required', parameters: { type: 'object' } })
  const calls = []
  for (let i = 0; i < n; i++) calls.push(gate.confirm({ tool: 'gated', arguments: { i } }))
  return { gate, calls }
}

/** Oldest first: by creation time, then id (the core's cursor order). */
function assertOrdered(requests) {
  for (let i = 1; i < requests.length; i++) {
    const a = requests[i - 1]
    const b = requests[i]
    assert.ok(
      a.createdAtMs < b.createdAtMs || (a.createdAtMs === b.createdAtMs && a.id < b.id),
      `request ${i} is out of order`,
    )
  }
}

async function closeAll(gate, calls) {
  await gate.close()
  const decisions = await Promise.all(calls)
  assert.ok(decisions.every((d) => d.outcome === 'cancelled' && d.cancelReason === 'shutdown'))
}

test('pendingPage: every pending request once, oldest first; next is null at the end', async () => {
  const { gate, calls } = pendingGate(N)
  assert.equal(gate.pendingCount, N)
  const pages = []
  let after
  for (;;) {
    const page = gate.pendingPage({ after, limit: 1000 })
    pages.push(page)
    assert.ok(page.requests.length <= 1000)
    if (page.next === null) break
    assert.equal(typeof page.next, 'string')
    assert.match(page.next, /^\d+-[0-9a-f-]{36}$/)
    after = page.next
  }
  assert.deepEqual(pages.map((p) => p.requests.length), [1000, 1000, 500])
  const all = pages.flatMap((p) => p.requests)
  assert.equal(new Set(all.map((r) => r.id)).size, N, 'each request once')
  assertOrdered(all)
  // The same order as the full copy, and every request is answerable.
  assert.deepEqual(all.map((r) => r.id), gate.pending().map((r) => r.id))
  assert.deepEqual(new Set(all.map((r) => r.arguments.i)), new Set(Array.from({ length: N }, (_, i) => i)))
  assert.equal(all[0].isPending(), true)
  // The default limit is 1,000.
  assert.equal(gate.pendingPage().requests.length, 1000)
  assert.equal(gate.pendingPage({}).next, pages[0].next)
  // A page ends where the next one starts, and answering a request does not shift the pages.
  const second = gate.pendingPage({ after: pages[0].next, limit: 10 })
  assert.deepEqual(second.requests.map((r) => r.id), pages[1].requests.slice(0, 10).map((r) => r.id))
  assert.equal(pages[0].requests[5].deny(), 'denied')
  assert.deepEqual(gate.pendingPage({ after: pages[0].next, limit: 10 }).requests.map((r) => r.id), second.requests.map((r) => r.id))
  await closeAll(gate, calls.filter((_, i) => i !== pages[0].requests[5].arguments.i))
})

test('pendingPage: a cursor that is not one is malformed, and so is a bad limit or option', async () => {
  const { gate, calls } = pendingGate(3)
  for (const after of ['garbage', '', '12-not-a-uuid', '-1b4e28ba-2fa1-11d2-883f-0016d3cca427', 'x-1b4e28ba-2fa1-11d2-883f-0016d3cca427']) {
    assert.throws(() => gate.pendingPage({ after }), (e) => code('malformed')(e) && e.message.includes('cursor'), JSON.stringify(after))
  }
  assert.throws(() => gate.pendingPage({ after: 42 }), code('malformed'))
  for (const limit of [0, -1, 1.5, NaN, Infinity, 2 ** 32, '10', null]) {
    assert.throws(() => gate.pendingPage({ limit }), (e) => code('malformed')(e) && e.message.includes('limit'), String(limit))
    assert.throws(() => gate.pendingAll({ pageSize: limit }), (e) => code('malformed')(e) && e.message.includes('pageSize'), String(limit))
  }
  // A typo is refused, never ignored (it would restart from the oldest on every call).
  assert.throws(() => gate.pendingPage({ cursor: 'x' }), code('malformed'))
  assert.throws(() => gate.pendingAll({ limit: 5 }), code('malformed'))
  // A well-formed cursor past the end is an empty last page; limit 1 pages one by one.
  const [first, second, third] = gate.pending()
  assert.deepEqual(gate.pendingPage({ after: `${Number.MAX_SAFE_INTEGER}-${first.id}` }), { requests: [], next: null })
  const one = gate.pendingPage({ limit: 1 })
  assert.deepEqual(one.requests.map((r) => r.id), [first.id])
  assert.deepEqual(gate.pendingPage({ after: one.next, limit: 1 }).requests.map((r) => r.id), [second.id])
  assert.deepEqual(gate.pendingPage({ after: one.next }).requests.map((r) => r.id), [second.id, third.id])
  await closeAll(gate, calls)
})

test('pendingAll: every request once, oldest first, and the event loop runs between pages', async () => {
  const { gate, calls } = pendingGate(N)
  let ticked
  let seen = 0
  setImmediate(() => (ticked = seen))
  const all = []
  for await (const req of gate.pendingAll({ pageSize: 500 })) {
    all.push(req)
    seen++
  }
  assert.equal(all.length, N)
  assert.equal(new Set(all.map((r) => r.id)).size, N)
  assertOrdered(all)
  assert.deepEqual(all.map((r) => r.id), gate.pending().map((r) => r.id))
  assert.ok(ticked !== undefined && ticked < N, `a macrotask ran during the iteration (after ${ticked} requests)`)
  // The default page size; leaving the loop early is fine.
  let n = 0
  for await (const req of gate.pendingAll()) {
    assert.equal(req.type, 'confirmation-request')
    if (++n === 3) break
  }
  await closeAll(gate, calls)
  // After close nothing is pending.
  const after = []
  for await (const req of gate.pendingAll()) after.push(req)
  assert.deepEqual(after, [])
  assert.deepEqual(gate.pendingPage(), { requests: [], next: null })
})

test('a lagging subscriber gets at most 1,000 pending requests and a cursor for the rest', async () => {
  const gate = newGate({ busCapacity: 8, denyWhenUnobserved: false, defaultTimeoutMs: 600_000 })
  gate.register({ name: 'gated', approval: 'required', parameters: { type: 'object' } })
  const stream = gate.events()
  const lags = []
  gate.on('lagged', (e) => lags.push(e))
  const calls = []
  for (let i = 0; i < N; i++) calls.push(gate.confirm({ tool: 'gated', arguments: { i } }))
  const all = gate.pending().map((r) => r.id)

  /** The ids of a lag's snapshot followed by every page from its cursor. */
  function resync(lag, limit) {
    const ids = lag.pending.map((r) => r.id)
    for (let after = lag.more; after !== null; ) {
      const page = gate.pendingPage({ after, limit })
      ids.push(...page.requests.map((r) => r.id))
      after = page.next
    }
    return ids
  }

  // The async iterator form: the stream was not read while N requests were published.
  const { value: lag } = await stream.next()
  assert.equal(lag.type, 'lagged')
  assert.ok(lag.missed >= N - 16, `missed ${lag.missed}`)
  assert.equal(lag.pending.length, 1000)
  assertOrdered(lag.pending)
  assert.equal(typeof lag.more, 'string')
  assert.equal(lag.more, `${lag.pending.at(-1).createdAtMs}-${lag.pending.at(-1).id}`)
  // Paging from `more` yields the rest, each once.
  assert.deepEqual(resync(lag), all)
  stream.close()

  // The EventEmitter form. Its subscription is read after every call into the gate, so make it
  // miss events published by one call: ending a session cancels its 20 requests at once.
  for (let i = 0; i < 20; i++) calls.push(gate.confirm({ tool: 'gated', arguments: { i }, sessionId: 'other' }))
  assert.equal(gate.endSession('other'), 20)
  for (let i = 0; i < 100 && lags.length === 0; i++) await sleep(10)
  assert.ok(lags.length >= 1, 'the lagged listener was called')
  const last = lags.at(-1)
  assert.equal(last.type, 'lagged')
  assert.ok(last.missed > 0)
  assert.equal(last.pending.length, 1000)
  assert.equal(typeof last.more, 'string')
  assert.deepEqual(resync(last, 700), all)

  // The snapshot is answerable.
  const answered = lag.pending[0].arguments.i
  assert.equal(lag.pending[0].approve(), 'approved')
  assert.equal((await calls[answered]).outcome, 'approved')
  await gate.close()
  const rest = await Promise.all(calls.filter((_, i) => i !== answered))
  assert.ok(rest.every((d) => d.outcome === 'cancelled'))
})

test('pending() and a large page come whole when their JSON is larger than one addon chunk (16 MiB)', async () => {
  const gate = newGate({ denyWhenUnobserved: false, defaultTimeoutMs: 600_000 })
  gate.register({ name: 'gated', approval: 'required', parameters: { type: 'object' } })
  const big = 'x'.repeat(600_000) // shown three times per request (arguments, displayArguments, prompt)
  const calls = []
  for (let i = 0; i < 40; i++) calls.push(gate.confirm({ tool: 'gated', arguments: { i, big } }))
  const all = gate.pending()
  assert.equal(all.length, 40)
  assert.ok(all.every((r) => r.arguments.big === big))
  assert.deepEqual(new Set(all.map((r) => r.arguments.i)).size, 40)
  assertOrdered(all)
  const page = gate.pendingPage({ limit: 40 })
  assert.deepEqual(page.requests.map((r) => r.id), all.map((r) => r.id))
  assert.equal(page.next, all.at(-1) && `${all.at(-1).createdAtMs}-${all.at(-1).id}`)
  assert.deepEqual(gate.pendingPage({ after: page.next }), { requests: [], next: null })
  await closeAll(gate, calls)
})
