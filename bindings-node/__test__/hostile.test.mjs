// Hostile input: user values that are not JSON (NaN, Infinity, functions, symbols, undefined,
// Maps, Sets, BigInts, class instances, cycles, deep nesting) are refused as `malformed`, naming
// the path, on every way a value enters the core. `JSON.stringify` would have turned them into
// something else (NaN -> null, a Map -> {}, an undefined property -> nothing) and a person would
// have approved a value the tool never ran with. Nothing is asked and nothing runs; a refused
// answer leaves the request pending. JSON text from the user is parsed by the core's strict
// parser: a repeated key is refused, never "last one wins".
import { test } from 'node:test'
import assert from 'node:assert/strict'
import vm from 'node:vm'
import { Gate, SignoffError, TokenKeys, MAX_NESTING, parseEvent, serializeEvent } from '../dist/index.mjs'

const SECRET = 'AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8='

class Point {
  constructor() {
    this.x = 1
  }
}

/** `levels` arrays nested in each other around `leaf` (built without recursion). */
function nest(levels, leaf = 'x') {
  let v = leaf
  for (let i = 0; i < levels; i++) v = [v]
  return v
}

/** The JSON text of `nest(levels)` (JSON.stringify would overflow the stack on deep ones). */
const nestText = (levels) => '['.repeat(levels) + '"x"' + ']'.repeat(levels)

/** Values that are not JSON, each refused with this message (after the path). */
const NOT_JSON = [
  ['NaN', () => NaN, /is NaN: JSON has no NaN or Infinity; refusing instead of sending null/],
  ['Infinity', () => Infinity, /is Infinity: JSON has no NaN or Infinity; refusing instead of sending null/],
  ['-Infinity', () => -Infinity, /is -Infinity: JSON has no NaN or Infinity; refusing instead of sending null/],
  ['a function', () => function f() {}, /is a function: functions are not JSON/],
  ['a symbol', () => Symbol('s'), /is a symbol: symbols are not JSON/],
  ['a BigInt', () => 10n, /is a BigInt: JSON has no BigInt/],
  ['a Map', () => new Map([['a', 1]]), /is a Map, which is not JSON/],
  ['a Set', () => new Set([1]), /is a Set, which is not JSON/],
  ['a Buffer', () => Buffer.from('hi'), /is a Buffer, which is not JSON/],
  ['a Uint8Array', () => new Uint8Array(2), /is a Uint8Array, which is not JSON/],
  ['a class instance', () => new Point(), /is a Point instance, which is not JSON/],
]

const DEEP = /: arrays and objects nest deeper than 64 levels \(or contain a cycle\)/
/** The core's text parser: a document may nest 65 levels, so that what it carries may nest 64. */
const DEEP_TEXT = /arrays and objects nest deeper than 64 levels inside it/

/**
 * Every refusal case, for a value whose path starts at `root` and whose nesting message names
 * `what`: `[name, make value, expected path, message]`.
 */
function cases(root, what) {
  const out = []
  for (const [name, make, message] of NOT_JSON) {
    out.push([`${name} (top level)`, make, root, message])
    out.push([`${name} in an array`, () => ({ items: [1, 2, 3, make()] }), `${root}.items[3]`, message])
    out.push([`${name} in an object`, () => ({ a: { 'b c': make() } }), `${root}.a["b c"]`, message])
  }
  const undef = /is undefined: JSON has no undefined; omit the key or use null/
  out.push(['undefined in an array', () => ({ items: [1, undefined] }), `${root}.items[1]`, undef])
  out.push(['undefined as a property', () => ({ a: 1, b: undefined }), `${root}.b`, undef])
  // eslint-disable-next-line no-sparse-arrays
  out.push(['a hole in an array', () => ({ items: [1, , 3] }), `${root}.items[1]`, /hole in a sparse array/])
  out.push([
    'a cycle',
    () => {
      const a = { n: 1 }
      a.self = a
      return { a }
    },
    `${what} contains a reference cycle: ${root}.a.self is ${root}.a itself`,
    /contains a reference cycle/,
  ])
  out.push([
    'a cycle through an array',
    () => {
      const list = []
      list.push({ list })
      return list
    },
    `${what} contains a reference cycle`,
    /contains a reference cycle/,
  ])
  out.push(['20,000 levels', () => ({ a: nest(20_000) }), `${what}: arrays and objects nest deeper`, DEEP])
  out.push(['65 levels', () => ({ a: nest(64) }), `${what}: arrays and objects nest deeper`, DEEP])
  out.push(['a throwing getter', () => ({ get a() { throw new Error('boom') } }), `${root}.a`, /could not be read: boom/])
  out.push(['a toJSON that returns NaN', () => ({ when: { toJSON: () => NaN } }), `${root}.when`, /is NaN/])
  out.push(['a lone surrogate', () => ({ s: 'ok \ud800' }), `${root}.s`, /lone surrogate/])
  return out
}

/** Asserts `e` is a `malformed` SignoffError whose message names `path` and matches `message`. */
function assertRefused(e, path, message, label) {
  assert.ok(e instanceof SignoffError, `${label}: a SignoffError, got ${e}`)
  assert.equal(e.code, 'malformed', `${label}: ${e.message}`)
  assert.ok(e.message.includes(path), `${label}: the message names ${path}: ${e.message}`)
  assert.match(e.message, message, label)
}

/** The error `fn` throws or rejects with (fails when it succeeds). */
async function failure(fn, label) {
  try {
    await fn()
  } catch (e) {
    return e
  }
  assert.fail(`${label}: accepted`)
}

/**
 * A gate with `free` (never gated) and `gated` (always, editable) tools whose executors record
 * their runs; request listeners record what they were shown and deny.
 */
function setup(options = {}) {
  const gate = new Gate({ defaultTimeoutMs: 60_000, ...options })
  const ran = []
  const shown = []
  for (const [name, approval] of [['free', 'not_required'], ['gated', 'required']]) {
    gate.register({
      name,
      approval,
      editable: true,
      parameters: {},
      execute: (args) => {
        ran.push([name, args])
        return 'ok'
      },
    })
  }
  return { gate, ran, shown }
}

function denyAll(gate, shown) {
  gate.on('confirmation-request', (req) => {
    shown.push(req.arguments)
    req.deny()
  })
}

test('MAX_NESTING is the core limit', () => {
  assert.equal(MAX_NESTING, 64)
})

test('evaluate refuses arguments that are not JSON', async (t) => {
  const { gate } = setup()
  for (const [name, make, path, message] of cases('arguments', 'arguments')) {
    await t.test(name, async () => {
      const e = await failure(() => gate.evaluate({ tool: 'gated', arguments: make() }), name)
      assertRefused(e, path, message, name)
    })
  }
  await gate.close()
})

for (const method of ['confirm', 'execute']) {
  for (const field of ['arguments', 'metadata']) {
    test(`${method} refuses ${field} that are not JSON: nothing is asked, nothing runs`, async (t) => {
      const { gate, ran, shown } = setup()
      denyAll(gate, shown)
      for (const tool of ['free', 'gated']) {
        for (const [name, make, path, message] of cases(field, field)) {
          await t.test(`${tool}: ${name}`, async () => {
            const call = { tool, arguments: { ok: 1 }, [field]: make() }
            const e = await failure(() => gate[method](call), name)
            assertRefused(e, path, message, name)
            assert.deepEqual(ran, [], 'the executor was not called')
            assert.deepEqual(shown, [], 'nobody was asked')
            assert.equal(gate.pendingCount, 0)
          })
        }
      }
      // The gate still works.
      assert.equal((await gate.execute({ tool: 'free', arguments: { n: 1 }, metadata: { m: [1] } })).status, 'executed')
      assert.deepEqual(ran, [['free', { n: 1 }]])
      await gate.close()
    })
  }
}

test('executeBatch refuses the whole batch when one call is not JSON', async () => {
  const { gate, ran } = setup()
  const calls = [
    { tool: 'free', arguments: { n: 1 } },
    { tool: 'free', arguments: { items: [1, 2, 3, NaN] } },
  ]
  const e = await failure(() => gate.executeBatch(calls), 'batch')
  assertRefused(e, 'calls[1].arguments.items[3]', /is NaN/, 'batch')
  const m = await failure(() => gate.executeBatch([{ tool: 'free', metadata: { f: () => 1 } }]), 'batch metadata')
  assertRefused(m, 'calls[0].metadata.f', /is a function/, 'batch metadata')
  assert.deepEqual(ran, [])
  const ok = await gate.executeBatch([{ tool: 'free', arguments: { a: nest(63) } }, { tool: 'free' }])
  assert.deepEqual(ok.map((r) => r.status), ['executed', 'executed'])
  await gate.close()
})

/** A gate with one pending call of `gated`, its request, and the call's result promise. */
async function pendingGated(options) {
  const s = setup({ denyWhenUnobserved: false, ...options })
  const result = s.gate.execute({ tool: 'gated', arguments: { path: '/tmp/a' } })
  const [req] = s.gate.pending()
  assert.ok(req, 'pending')
  return { ...s, result, req }
}

test('approving with edited arguments that are not JSON is refused; the request stays pending', async (t) => {
  const { gate, ran, result, req } = await pendingGated()
  for (const [name, make, path, message] of cases('arguments', 'edited arguments')) {
    await t.test(name, async () => {
      const e = await failure(() => req.approve({ arguments: make() }), name)
      assertRefused(e, path, message, name)
      assert.ok(req.isPending(), 'still pending')
      assert.deepEqual(ran, [])
    })
  }
  assert.equal(req.approve({ arguments: { path: '/tmp/b', when: new Date(0) } }), 'approved')
  const r = await result
  assert.equal(r.status, 'executed')
  assert.deepEqual(ran, [['gated', { path: '/tmp/b', when: '1970-01-01T00:00:00.000Z' }]])
  await gate.close()
})

test('gate.respond with edited arguments that are not JSON is refused; the request stays pending', async (t) => {
  const { gate, ran, result, req } = await pendingGated()
  for (const [name, make, path, message] of cases('arguments', 'edited arguments')) {
    await t.test(name, async () => {
      const e = await failure(() => gate.respond({ id: req.id, decision: 'approve', arguments: make() }), name)
      assertRefused(e, path, message, name)
      assert.ok(req.isPending(), 'still pending')
    })
  }
  // Other fields of the response too (its optional fields may be left undefined).
  const e = await failure(() => gate.respond({ id: req.id, decision: 'deny', reason: Symbol('r') }), 'reason')
  assertRefused(e, 'reason', /is a symbol/, 'reason')
  assert.ok(req.isPending())
  assert.equal(gate.respond({ id: req.id, decision: 'approve', reason: undefined, arguments: { a: nest(63) } }), 'approved')
  assert.equal((await result).status, 'executed')
  assert.deepEqual(ran, [['gated', { a: nest(63) }]])
  await gate.close()
})

test('respondToken with edited arguments that are not JSON is refused; the request stays pending', async () => {
  const { gate, ran, result, req } = await pendingGated({ tokenKeys: new TokenKeys('k1', SECRET) })
  const token = gate.issueToken(req.id, 'alice')
  for (const [name, make, path, message] of cases('arguments', 'edited arguments')) {
    const e = await failure(() => gate.respondToken(token, { approver: 'alice', decision: 'approve', arguments: make() }), name)
    assertRefused(e, path, message, name)
    assert.ok(req.isPending(), `${name}: still pending`)
  }
  assert.equal(gate.respondToken(token, { approver: 'alice', decision: 'approve', arguments: { ok: true } }), 'approved')
  assert.equal((await result).status, 'executed')
  assert.deepEqual(ran, [['gated', { ok: true }]])
  await gate.close()
})

test('respondJson parses strictly: a repeated key, NaN, 1e999, deep nesting are malformed; the request stays pending', async (t) => {
  const { gate, ran, result, req } = await pendingGated()
  const id = JSON.stringify(req.id)
  const refused = [
    ['a repeated decision', `{"id":${id},"decision":"deny","decision":"approve"}`, /duplicate key "decision"/],
    ['a repeated id', `{"id":${id},"id":${id},"decision":"approve"}`, /duplicate key "id"/],
    ['a repeated key in the edit', `{"id":${id},"decision":"approve","arguments":{"path":"/tmp/a","path":"/etc"}}`, /duplicate key "path"/],
    ['NaN', `{"id":${id},"decision":"approve","arguments":{"n":NaN}}`, /not acceptable JSON/],
    ['Infinity', `{"id":${id},"decision":"approve","arguments":{"n":Infinity}}`, /not acceptable JSON/],
    ['1e999', `{"id":${id},"decision":"approve","arguments":{"n":1e999}}`, /not acceptable JSON/],
    ['20,000 levels', `{"id":${id},"decision":"approve","arguments":{"a":${nestText(20_000)}}}`, DEEP_TEXT],
    // Edited arguments nested 65 levels (66 with the response object around them).
    ['65 levels', `{"id":${id},"decision":"approve","arguments":{"a":${nestText(64)}}}`, DEEP_TEXT],
    ['trailing data', `{"id":${id},"decision":"deny"} {"id":${id},"decision":"approve"}`, /not acceptable JSON/],
  ]
  for (const [name, json, message] of refused) {
    await t.test(name, () => {
      const e = (() => {
        try {
          gate.respondJson(json)
        } catch (x) {
          return x
        }
        assert.fail(`${name}: accepted`)
      })()
      assert.ok(e instanceof SignoffError, name)
      assert.equal(e.code, 'malformed', `${name}: ${e.message}`)
      assert.match(e.message, message, name)
      assert.ok(req.isPending(), `${name}: still pending`)
    })
  }
  assert.deepEqual(ran, [])
  // Edited arguments nested exactly 64 levels are accepted in the text, as in the object form
  // (the response object around them is the one extra level the text may have), and answer.
  assert.equal(gate.respondJson(`{"id":${id},"decision":"approve","arguments":{"a":${nestText(63)}}}`), 'approved')
  assert.equal((await result).status, 'executed')
  assert.deepEqual(ran, [['gated', { a: nest(63) }]])
  await gate.close()
})

test('exactly 64 levels are accepted everywhere; 65 are refused', async () => {
  const { gate, ran } = setup()
  const at64 = { a: nest(63) } // the object is level 1
  const at65 = { a: nest(64) }
  assert.equal(gate.evaluate({ tool: 'free', arguments: at64 }).required, false)
  assert.equal(nest(64).length, 1)
  assert.equal(gate.evaluate({ tool: 'free', arguments: nest(64) }).required, false)
  assert.throws(() => gate.evaluate({ tool: 'free', arguments: nest(65) }), (e) => e.code === 'malformed' && DEEP.test(e.message))
  assert.equal((await gate.execute({ tool: 'free', arguments: at64, metadata: at64 })).status, 'executed')
  assert.deepEqual(ran, [['free', at64]])
  for (const field of ['arguments', 'metadata']) {
    const e = await failure(() => gate.execute({ tool: 'free', [field]: at65 }), field)
    assertRefused(e, `malformed payload: ${field}: arrays and objects nest deeper than 64 levels (or contain a cycle)`, DEEP, field)
  }
  assert.equal(ran.length, 1)
  await gate.close()
})

test('a 1,000,000-deep value is refused quickly, without a crash', async () => {
  const { gate, ran } = setup()
  const deep = nest(1_000_000)
  const t0 = performance.now()
  await assert.rejects(gate.execute({ tool: 'free', arguments: { deep } }), (e) => e.code === 'malformed' && DEEP.test(e.message))
  assert.throws(() => gate.evaluate({ tool: 'free', arguments: deep }), (e) => e.code === 'malformed')
  const text = nestText(1_000_000)
  assert.throws(() => gate.respondJson(text), (e) => e.code === 'malformed' && DEEP_TEXT.test(e.message))
  assert.throws(() => parseEvent(text), (e) => e.code === 'malformed' && DEEP_TEXT.test(e.message))
  assert.ok(performance.now() - t0 < 2_000, `took ${performance.now() - t0} ms`)
  assert.deepEqual(ran, [])
  await gate.close()
})

test('what JSON can represent is accepted and arrives exactly as JSON.stringify writes it', async () => {
  const { gate, ran } = setup()
  const nullProto = Object.assign(Object.create(null), { k: 'v' })
  const otherRealm = vm.runInNewContext('({ a: [1, { b: "c" }] })')
  const args = {
    s: 'quote " backslash \\ newline \n tab \t nul \u0000 bidi \u202e emoji 😀 line sep \u2028',
    long: 'x'.repeat(1000) + '"',
    n: [0, -0, 1.5, -2e-7, 1e21, Number.MAX_SAFE_INTEGER, 5_000_000_000],
    b: [true, false, null],
    when: new Date(Date.UTC(2024, 0, 2)),
    invalidDate: new Date(NaN),
    custom: { toJSON: (key) => ({ key }) },
    nullProto,
    otherRealm,
    [Symbol('skipped')]: 'symbol-keyed properties are not data',
    'key "with" quotes': 1,
  }
  const r = await gate.execute({ tool: 'free', arguments: args })
  assert.equal(r.status, 'executed')
  const expected = JSON.parse(JSON.stringify(args))
  assert.deepEqual(ran[0][1], expected)
  assert.equal(ran[0][1].when, '2024-01-02T00:00:00.000Z')
  assert.equal(ran[0][1].invalidDate, null)
  assert.deepEqual(ran[0][1].custom, { key: 'custom' })
  assert.equal(ran[0][1].n[5], Number.MAX_SAFE_INTEGER)
  // Shared (not cyclic) references are fine.
  const shared = { x: 1 }
  assert.equal((await gate.execute({ tool: 'free', arguments: { a: shared, b: [shared, shared] } })).status, 'executed')
  await gate.close()
})

// A tool's output: JSON.stringify's text, except where it would report data the tool did not
// return (NaN and ±Infinity as null, a Map, a Set or an ArrayBuffer as {}): then the call fails,
// naming the path, as in Python and Swift. What JSON.stringify writes faithfully (an undefined
// property left out, a class instance's own fields, toJSON, real nulls and empty objects) passes.
test("a tool's output that JSON.stringify would change fails the call, naming the path", async () => {
  const gate = new Gate()
  const NAN = 'JSON has no NaN or Infinity; refusing instead of sending null'
  const refused = [
    ['nan', () => ({ score: NaN }), `the tool's return value.score is NaN: ${NAN}`],
    ['top', () => Infinity, `the tool's return value is Infinity: ${NAN}`],
    ['array', async () => [1, { x: [null, -Infinity] }], `the tool's return value[1].x[1] is -Infinity: ${NAN}`],
    ['map', () => ({ 'a b': new Map([[1, 2]]) }), `the tool's return value["a b"] is a Map, which JSON.stringify writes as {}; refusing instead of sending that: convert it first, e.g. Object.fromEntries(map)`],
    ['set', async () => ({ s: new Set(['x']) }), `the tool's return value.s is a Set, which JSON.stringify writes as {}`],
    ['buffer', () => ({ b: new ArrayBuffer(4) }), `the tool's return value.b is an ArrayBuffer, which JSON.stringify writes as {}`],
    ['realm', () => vm.runInNewContext('({ m: new Map() })'), `the tool's return value.m is a Map`],
    ['via_toJSON', () => ({ v: { toJSON: () => ({ n: NaN }) } }), `the tool's return value.v.n is NaN`],
    ['boxed', () => ({ n: new Number(NaN) }), `the tool's return value.n is NaN: ${NAN}`],
  ]
  let runs = 0
  for (const [name, fn] of refused) {
    gate.register({ name, approval: 'not_required', execute: () => (runs++, fn()) })
    gate.register({ name: `${name}_gated`, approval: 'required', execute: () => (runs++, fn()) })
  }
  gate.on('confirmation-request', (req) => req.approve())
  for (const [name, , message] of refused) {
    for (const tool of [name, `${name}_gated`]) {
      const r = await gate.execute({ tool, callId: tool })
      assert.equal(r.status, 'failed', tool)
      assert.ok(r.error.startsWith(message), `${tool}: ${r.error}`)
      assert.equal(r.output, undefined)
      assert.equal(r.isError, true)
    }
  }
  assert.equal(runs, refused.length * 2)

  class Row {
    constructor() {
      this.id = 7
      this.note = null
    }
  }
  const faithful = {
    nulls: [null, { a: null }],
    empty: {},
    gone: undefined,
    f() {},
    row: new Row(),
    when: new Date(0),
    invalid: new Date(NaN),
    bytes: Buffer.from('hi'),
    text: 'null {} NaN',
  }
  gate.register({ name: 'faithful', approval: 'not_required', execute: async () => faithful })
  gate.register({ name: 'nothing', approval: 'not_required', execute: () => undefined })
  const ok = await gate.execute({ tool: 'faithful' })
  assert.equal(ok.status, 'executed', ok.error)
  assert.deepEqual(ok.output, JSON.parse(JSON.stringify(faithful)))
  assert.deepEqual(JSON.parse(ok.content), JSON.parse(JSON.stringify(faithful)))
  assert.equal((await gate.execute({ tool: 'nothing' })).output, null)
  await gate.close()
})

test('tool definitions: a parameters schema or rule value that is not JSON is refused; undefined optional fields are not', async () => {
  const gate = new Gate()
  const bad = [
    [{ parameters: { type: 'object', properties: { n: { type: 'number', maximum: NaN } } } }, 'parameters.properties.n.maximum', /is NaN/],
    [{ parameters: { type: 'object', properties: { n: { type: 'number', default: undefined } } } }, 'parameters.properties.n.default', /is undefined/],
    [{ parameters: { type: 'object', pattern: /x/ } }, 'parameters.pattern', /is a RegExp/],
    [{ parameters: { a: nest(64) } }, "the tool's parameters: arrays and objects nest deeper", DEEP],
    [{ rules: [{ kind: 'greater_than', pointer: '/n', value: Infinity }] }, 'rules[0].value', /is Infinity/],
    [{ rules: [{ kind: 'one_of', pointer: '/n', values: [1, undefined] }] }, 'rules[0].values[1]', /is undefined/],
  ]
  for (const [extra, path, message] of bad) {
    const e = await failure(() => gate.register({ name: 'tool', ...extra }), path)
    assertRefused(e, path, message, path)
  }
  assert.deepEqual(gate.tools(), [])
  // A schema may nest 64 levels, as any value (unknown keywords are ignored by JSON Schema).
  gate.register({ name: 'tool', description: undefined, timeoutMs: undefined, parameters: { type: 'object', 'x-deep': nest(63) } })
  assert.deepEqual(gate.tools()[0].parameters['x-deep'], nest(63))
  await gate.close()
})

test('events: parseEvent refuses a repeated key and values that are not JSON', () => {
  const event = {
    type: 'confirmation-timeout',
    id: '00000000-0000-4000-8000-000000000001',
    tool: 't',
    session_id: 's',
    deadline_ms: 5,
    at_ms: 6,
  }
  assert.equal(parseEvent(event).sessionId, 's')
  const dup = JSON.stringify(event).replace('"tool":"t"', '"tool":"t","tool":"u"')
  assert.throws(() => parseEvent(dup), (e) => e.code === 'malformed' && /duplicate key "tool"/.test(e.message))
  assert.throws(() => parseEvent({ ...event, at_ms: NaN }), (e) => e.code === 'malformed' && e.message.includes('event.at_ms is NaN'))
  const camel = parseEvent(event)
  assert.deepEqual(serializeEvent(camel), event)
  assert.throws(() => serializeEvent({ ...camel, atMs: Infinity }), (e) => e.code === 'malformed' && e.message.includes('event.atMs is Infinity'))
})

test('events carry arguments nested exactly 64 levels, as text and as objects; 65 are refused', async () => {
  const { gate } = setup({ denyWhenUnobserved: false })
  const at64 = { a: nest(63) } // the arguments object is level 1; the event around it is one more
  const result = gate.confirm({ tool: 'gated', arguments: at64 })
  const [req] = gate.pending()
  // The request a gate accepted can be sent to a remote UI and read back, in both forms.
  const wire = serializeEvent(req)
  assert.deepEqual(wire.arguments, at64)
  assert.deepEqual(parseEvent(wire).arguments, at64)
  assert.deepEqual(parseEvent(JSON.stringify(wire)).arguments, at64)
  assert.deepEqual(serializeEvent(parseEvent(wire)), wire)
  // One level more is refused the same way by the text and the object form.
  const deeper = { ...wire, arguments: { a: nest(64) } }
  assert.throws(() => parseEvent(JSON.stringify(deeper)), (e) => e.code === 'malformed' && DEEP_TEXT.test(e.message))
  assert.throws(() => parseEvent(deeper), (e) => e.code === 'malformed' && DEEP.test(e.message) && e.message.includes('the event'))
  assert.throws(() => serializeEvent({ ...parseEvent(wire), arguments: { a: nest(64) } }), (e) => e.code === 'malformed' && DEEP.test(e.message))
  req.deny()
  assert.equal((await result).outcome, 'denied')
  await gate.close()
})
