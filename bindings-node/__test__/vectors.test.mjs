// The shared test vectors (tests/vectors/*.json, format: tests/vectors/README.md), driven
// through the Node API. A field this runner does not understand fails the test.
import { test } from 'node:test'
import assert from 'node:assert/strict'
import { readFileSync } from 'node:fs'
import { fileURLToPath } from 'node:url'
import path from 'node:path'
import { setTimeout as sleep } from 'node:timers/promises'
import { Gate, SignoffError, parseEvent, serializeEvent } from '../dist/index.mjs'

const dir = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..', '..', 'tests', 'vectors')
const load = (f) => JSON.parse(readFileSync(path.join(dir, f), 'utf8'))

function onlyKeys(obj, allowed, where) {
  for (const k of Object.keys(obj)) {
    assert.ok(allowed.includes(k), `${where}: field \`${k}\` is not understood by this runner`)
  }
}

// ---- events.json ----------------------------------------------------------------------------

const events = load('events.json')
onlyKeys(events, ['events', 'description'], 'events.json')
assert.ok(events.events.length > 0)

for (const [i, ev] of events.events.entries()) {
  test(`events.json #${i} (${ev.type}) round-trips`, () => {
    const obj = parseEvent(ev)
    assert.equal(obj.type, ev.type)
    assert.ok(!Object.keys(obj).some((k) => k.includes('_')), 'JavaScript event fields are camelCase')
    assert.deepStrictEqual(serializeEvent(obj), ev)
    // From the JSON text as well.
    assert.deepStrictEqual(serializeEvent(parseEvent(JSON.stringify(ev))), ev)
  })
}

// ---- malformed_responses.json ---------------------------------------------------------------

const malformed = load('malformed_responses.json')
onlyKeys(malformed, ['cases', 'description'], 'malformed_responses.json')

for (const c of malformed.cases) {
  onlyKeys(c, ['name', 'json', 'error'], `malformed_responses.json ${c.name}`)
  test(`malformed response: ${c.name}`, async () => {
    const gate = new Gate()
    gate.register({ name: 'delete_file', parameters: { type: 'object' } })
    const expectErr = (e) => e instanceof SignoffError && e.code === c.error
    // No request pending.
    assert.throws(() => gate.respondJson(c.json), expectErr)
    // A request pending: it stays pending.
    const stream = gate.events()
    const p = gate.confirm({ tool: 'delete_file', arguments: { path: '/x' } })
    const { value: req } = await stream.next()
    assert.equal(req.type, 'confirmation-request')
    assert.throws(() => gate.respondJson(c.json), expectErr)
    assert.ok(req.isPending())
    req.deny()
    assert.equal((await p).outcome, 'denied')
    await gate.close()
  })
}

// ---- flows.json -----------------------------------------------------------------------------

const flows = load('flows.json')
onlyKeys(flows, ['cases', 'tools', 'description'], 'flows.json')

const GATE_KEYS = {
  default_timeout_ms: 'defaultTimeoutMs',
  keywords: 'keywords',
  deny_when_unobserved: 'denyWhenUnobserved',
  dangerously_disable_gating: 'dangerouslyDisableGating',
  allowed_responders: 'allowedResponders',
}
const CALL_KEYS = { tool: 'tool', arguments: 'arguments', session_id: 'sessionId', call_id: 'callId', metadata: 'metadata' }
const TOOL_KEYS = {
  name: 'name',
  description: 'description',
  parameters: 'parameters',
  approval: 'approval',
  editable: 'editable',
  prompt_template: 'promptTemplate',
  rules: 'rules',
  source: 'source',
  read_only: 'readOnly',
  destructive: 'destructive',
  timeout_ms: 'timeoutMs',
}
const ACTIONS = ['respond', 'wait_past_deadline', 'close', 'unsubscribe', 'cancel', 'end_session']
const DECISION_KEYS = ['outcome', 'by', 'arguments', 'edited', 'reason', 'responder', 'cancel_reason']
const RESPONSE_KEYS = { arguments_digest: 'argumentsDigest', session_id: 'sessionId', at_ms: 'atMs' }

function rename(obj, map, where) {
  onlyKeys(obj, Object.keys(map), where)
  return Object.fromEntries(Object.entries(obj).map(([k, v]) => [map[k], v]))
}

/** Reads events until one matches, failing after `ms`. */
async function nextMatching(stream, pred, ms = 5000) {
  const deadline = Date.now() + ms
  for (;;) {
    const left = deadline - Date.now()
    assert.ok(left > 0, 'timed out waiting for an event')
    const r = await Promise.race([stream.next(), sleep(left).then(() => ({ timeout: true }))])
    assert.ok(!r.timeout, 'timed out waiting for an event')
    assert.ok(!r.done, 'the event stream ended')
    if (pred(r.value)) return r.value
  }
}

async function drain(stream) {
  const out = []
  for await (const e of stream) out.push(e)
  return out
}

for (const c of flows.cases) {
  onlyKeys(
    c,
    ['name', 'tools', 'gate', 'subscribe', 'call', 'confirm_error', 'expect_request', 'request', 'steps', 'decision', 'events_after'],
    `flows.json ${c.name}`,
  )
  test(`flow: ${c.name}`, async () => {
    const gate = new Gate(c.gate ? rename(c.gate, GATE_KEYS, `${c.name}: gate`) : {})
    // The core's ToolSpec JSON, its keys in Node's names (rules and sources are the same JSON).
    for (const spec of c.tools ?? flows.tools) gate.register(rename(spec, TOOL_KEYS, `${c.name}: tool ${spec.name}`))
    const call = rename(c.call, CALL_KEYS, `${c.name}: call`)

    if (c.confirm_error !== undefined) {
      await assert.rejects(gate.confirm(call), (e) => e instanceof SignoffError && e.code === c.confirm_error)
      assert.equal(gate.pendingCount, 0)
      await gate.close()
      return
    }

    const subscribe = c.subscribe ?? true
    const stream = subscribe ? gate.events() : undefined
    const controller = new AbortController()
    const decisionP = gate.confirm(call, { signal: controller.signal })
    const expectRequest = c.expect_request ?? true

    let req
    if (expectRequest && stream) {
      req = await nextMatching(stream, (e) => e.type === 'confirmation-request')
      const wire = serializeEvent(req)
      for (const [k, v] of Object.entries(c.request ?? {})) {
        assert.deepStrictEqual(wire[k], v, `request field ${k}`)
      }
      for (const [i, step] of (c.steps ?? []).entries()) {
        const where = `${c.name}: step ${i}`
        onlyKeys(step, [...ACTIONS, 'error', 'outcome'], where)
        const actions = Object.keys(step).filter((k) => ACTIONS.includes(k))
        assert.equal(actions.length, 1, `${where}: exactly one action`)
        const action = actions[0]
        if (action === 'respond') {
          const r = { ...step.respond }
          for (const k of ['id', 'tool', 'arguments_digest', 'session_id']) {
            if (r[k] === '$request') r[k] = wire[k]
          }
          // The JavaScript form (camelCase), passed on verbatim otherwise.
          const js = Object.fromEntries(Object.entries(r).map(([k, v]) => [RESPONSE_KEYS[k] ?? k, v]))
          if (step.error !== undefined) {
            assert.throws(
              () => gate.respond(js),
              (e) => e instanceof SignoffError && e.code === step.error,
              `${where}: expected ${step.error}`,
            )
          } else {
            assert.equal(gate.respond(js), step.outcome, `${where}: outcome`)
          }
        } else {
          assert.equal(step.error, undefined, `${where}: no error expected for ${action}`)
          assert.equal(step.outcome, undefined, `${where}: no outcome expected for ${action}`)
          if (action === 'wait_past_deadline') {
            await sleep(Math.max(0, req.deadlineMs - Date.now()) + 40)
          } else if (action === 'close') {
            await gate.close()
          } else if (action === 'unsubscribe') {
            stream.close()
          } else if (action === 'cancel') {
            controller.abort()
          } else if (action === 'end_session') {
            gate.endSession(step.end_session)
          }
        }
      }
    } else {
      assert.equal(c.steps, undefined, `${c.name}: steps need a request`)
      assert.equal(c.request, undefined, `${c.name}: request fields need a subscriber`)
    }

    const decision = await decisionP
    onlyKeys(c.decision, DECISION_KEYS, `${c.name}: decision`)
    for (const [k, v] of Object.entries(c.decision)) {
      if (k === 'cancel_reason') {
        assert.equal(decision.reason, v, 'cancel reason (core JSON field `reason`)')
        assert.equal(decision.cancelReason, v)
      } else {
        assert.deepStrictEqual(decision[k], v, `decision.${k}`)
      }
    }
    assert.equal(decision.approved, decision.outcome === 'approved')

    await gate.close()
    if (stream) {
      const rest = await drain(stream)
      if (!expectRequest) {
        assert.ok(!rest.some((e) => e.type === 'confirmation-request'), 'no request is published')
      }
      if (c.events_after !== undefined) {
        assert.deepStrictEqual(
          rest.map((e) => e.type),
          c.events_after,
        )
      }
    } else {
      assert.equal(c.events_after, undefined)
    }
    assert.equal(gate.pendingCount, 0)
  })
}
