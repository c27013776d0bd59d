// The shared test vectors (tests/vectors/*.json, format: tests/vectors/README.md), driven
// through the Node API. A field this runner does not understand fails the test.
import { test } from 'node:test'
import assert from 'node:assert/strict'
import { copyFileSync, existsSync, mkdtempSync, readFileSync, rmSync } from 'node:fs'
import { tmpdir } from 'node:os'
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

// ---- config.json --------------------------------------------------------------------------

/** `bus_capacity` -> `busCapacity`: how Node spells the core's option names. */
const camel = (k) => k.replace(/_([a-z])/g, (_, c) => c.toUpperCase())
/** Gate options in Node's names (keys only: values are passed as they are, numbers as numbers). */
const gateOptions = (o) => Object.fromEntries(Object.entries(o).map(([k, v]) => [camel(k), v]))

const config = load('config.json')
onlyKeys(config, ['cases', 'description'], 'config.json')
assert.ok(config.cases.length > 0)

for (const c of config.cases) {
  onlyKeys(c, ['name', 'options', 'error', 'mentions'], `config.json ${c.name}`)
  test(`config: ${c.name}`, async () => {
    const options = gateOptions(c.options)
    if (c.error === undefined) {
      assert.equal(c.mentions, undefined)
      await new Gate(options).close()
      return
    }
    assert.throws(
      () => new Gate(options),
      (e) => {
        assert.ok(e instanceof SignoffError, String(e))
        assert.equal(e.code, c.error, e.message)
        if (c.mentions !== undefined) assert.ok(e.message.includes(camel(c.mentions)), `${e.message} names ${camel(c.mentions)}`)
        return true
      },
    )
  })
}

// ---- execute.json -------------------------------------------------------------------------

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

/** Waits (bounded) until `f()` is true. */
async function eventually(f, what, ms = 5000) {
  const deadline = Date.now() + ms
  while (!(await f())) {
    assert.ok(Date.now() < deadline, `timed out waiting for ${what}`)
    await sleep(5)
  }
}

const isAbort = (e) => e instanceof DOMException && e.name === 'AbortError'
const auditRecords = (file) =>
  readFileSync(file, 'utf8')
    .split('\n')
    .filter((l) => l.trim())
    .map((l) => JSON.parse(l))

const execute = load('execute.json')
onlyKeys(execute, ['cases', 'description'], 'execute.json')
assert.ok(execute.cases.length > 0)

for (const c of execute.cases) {
  onlyKeys(
    c,
    ['name', 'approve', 'cancel', 'close', 'runs', 'finished', 'resolved', 'execution', 'result'],
    `execute.json ${c.name}`,
  )
  assert.ok(('cancel' in c) !== ('close' in c), `execute.json ${c.name}: exactly one of cancel and close`)
  const close = 'close' in c
  const when = close ? c.close : c.cancel
  onlyKeys(c.resolved, ['outcome', 'cancel_reason'], `execute.json ${c.name}: resolved`)
  test(`execute: ${c.name}`, async () => {
    const dir = mkdtempSync(path.join(tmpdir(), 'signoff-vectors-'))
    const auditPath = path.join(dir, 'audit.jsonl')
    const gate = new Gate({ auditPath })
    let runs = 0
    let finished = 0
    let started
    let release
    const startedP = new Promise((resolve) => (started = resolve))
    const released = new Promise((resolve) => (release = resolve))
    gate.register({
      name: 'transfer',
      approval: 'required',
      execute: async () => {
        runs++
        started()
        await released
        finished++
        return { sent: true }
      },
    })
    const events = gate.observe()
    // The approver: approves every request at once, or never answers.
    let approver
    if (c.approve === true) gate.on('confirmation-request', (req) => req.approve())
    else if (c.approve === false) approver = gate.events()
    else assert.fail(`approve: ${c.approve}`)
    const controller = new AbortController()
    const call = gate.execute({ tool: 'transfer', arguments: {} }, { signal: controller.signal })
    if (when === 'while_waiting') await nextMatching(events, (e) => e.type === 'confirmation-request')
    else if (when === 'while_running') await Promise.race([startedP, sleep(5000).then(() => assert.fail('the tool did not start'))])
    else assert.fail(`cancel / close: ${when}`)
    if (close) {
      // The caller keeps waiting: it gets the tool's own result.
      await gate.close()
      release()
      const r = await Promise.race([call, sleep(5000).then(() => assert.fail('the call did not return'))])
      assert.equal(r.status, c.result)
      if (r.status === 'executed') assert.deepEqual(r.output, { sent: true })
    } else {
      controller.abort()
      // Node's way: the caller's promise rejects with the signal's reason.
      await assert.rejects(call, isAbort)
      release()
    }
    const resolved = await nextMatching(events, (e) => e.type === 'confirmation-resolved')
    assert.equal(resolved.outcome, c.resolved.outcome)
    assert.equal(resolved.cancelReason, c.resolved.cancel_reason)
    const execution = async () => {
      await gate.flushAudit()
      return auditRecords(auditPath).find((r) => r.kind === 'execution')
    }
    if (c.execution === null) {
      await sleep(100)
      assert.equal(await execution(), undefined, 'no execution record')
    } else {
      await eventually(execution, 'the execution record')
      assert.equal((await execution()).decision, c.execution)
    }
    await eventually(() => finished === c.finished, `finished = ${c.finished}`)
    assert.equal(runs, c.runs)
    assert.equal(finished, c.finished)
    approver?.close()
    events.close()
    await gate.close()
    rmSync(dir, { recursive: true, force: true })
  })
}

// ---- flows.json -----------------------------------------------------------------------------

const flows = load('flows.json')
onlyKeys(flows, ['cases', 'tools', 'description'], 'flows.json')

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
const ACTIONS = [
  'respond',
  'wait_past_deadline',
  'close',
  'unsubscribe',
  'cancel',
  'end_session',
  'issue_token',
  'tamper_token',
  'rekey_token',
  'respond_token',
  'sleep_ms',
]
/** The actions a step may expect an `error` of, and an `outcome` of. */
const WITH_ERROR = ['respond', 'respond_token', 'issue_token']
const WITH_OUTCOME = ['respond', 'respond_token']
const DECISION_KEYS = ['outcome', 'by', 'arguments', 'edited', 'reason', 'responder', 'cancel_reason']
const RESPONSE_KEYS = { arguments_digest: 'argumentsDigest', session_id: 'sessionId', at_ms: 'atMs' }
const TOKEN_RESPONSE_KEYS = ['approver', 'decision', 'reason', 'scope', 'arguments']

function rename(obj, map, where) {
  onlyKeys(obj, Object.keys(map), where)
  return Object.fromEntries(Object.entries(obj).map(([k, v]) => [map[k], v]))
}

/** Replaces one `.`-separated part of a token. */
function withPart(token, i, f) {
  const parts = token.split('.')
  parts[i] = f(parts[i])
  return parts.join('.')
}

async function drain(stream) {
  const out = []
  for await (const e of stream) out.push(e)
  return out
}

const isCode = (code) => (e) => e instanceof SignoffError && e.code === code

/** The claims of an accepted marker, in the vectors' names, and Node's. */
const CLAIM_KEYS = { tool: 'tool', arguments_digest: 'argumentsDigest', approver: 'approver', request_id: 'requestId' }

/** A flow case's `after_decision` steps: approval markers for `decision`. */
function afterDecision(gate, decision, c, req) {
  let marker
  for (const [i, step] of (c.after_decision ?? []).entries()) {
    const where = `${c.name}: after_decision ${i}`
    const expectError = (f) => assert.throws(f, isCode(step.error), `${where}: expected ${step.error}`)
    if (step.approval_marker !== undefined) {
      onlyKeys(step, ['approval_marker', 'error'], where)
      const issue = () => gate.approvalMarker(step.approval_marker, decision)
      if (step.error !== undefined) expectError(issue)
      else marker = issue()
    } else if (step.tamper_marker !== undefined) {
      onlyKeys(step, ['tamper_marker'], where)
      assert.equal(step.tamper_marker, true)
      marker = withPart(marker, 3, (sig) => (sig[0] === 'A' ? 'B' : 'A') + sig.slice(1))
    } else if (step.rekey_marker !== undefined) {
      onlyKeys(step, ['rekey_marker'], where)
      marker = withPart(marker, 1, () => step.rekey_marker)
    } else if (step.accept_approval_marker !== undefined) {
      onlyKeys(step, ['accept_approval_marker', 'error', 'claims'], where)
      const call = step.accept_approval_marker
      onlyKeys(call, ['tool', 'arguments'], `${where}: accept_approval_marker`)
      const accept = () => gate.acceptApprovalMarker(marker, call.tool, call.arguments)
      if (step.error !== undefined) {
        assert.equal(step.claims, undefined, `${where}: claims with an error`)
        expectError(accept)
        continue
      }
      const claims = accept()
      onlyKeys(step.claims ?? {}, Object.keys(CLAIM_KEYS), `${where}: claims`)
      for (const [k, v] of Object.entries(step.claims ?? {})) {
        assert.deepStrictEqual(claims[CLAIM_KEYS[k]], v === '$request' && k === 'request_id' ? req.id : v, `${where}: claims.${k}`)
      }
    } else {
      assert.fail(`${where}: unknown step ${JSON.stringify(step)}`)
    }
  }
}

for (const c of flows.cases) {
  onlyKeys(
    c,
    [
      'name',
      'tools',
      'gate',
      'subscribe',
      'call',
      'confirm_error',
      'expect_request',
      'request',
      'steps',
      'decision',
      'events_after',
      'after_decision',
    ],
    `flows.json ${c.name}`,
  )
  test(`flow: ${c.name}`, async () => {
    const gate = new Gate(gateOptions(c.gate ?? {}))
    // The core's ToolSpec JSON, its keys in Node's names (rules and sources are the same JSON).
    for (const spec of c.tools ?? flows.tools) gate.register(rename(spec, TOOL_KEYS, `${c.name}: tool ${spec.name}`))
    const call = rename(c.call, CALL_KEYS, `${c.name}: call`)

    if (c.confirm_error !== undefined) {
      await assert.rejects(gate.confirm(call), isCode(c.confirm_error))
      assert.equal(gate.pendingCount, 0)
      await gate.close()
      return
    }

    const subscribe = c.subscribe ?? true
    assert.ok([true, false, 'observer'].includes(subscribe), `subscribe: ${subscribe}`)
    const stream = subscribe === 'observer' ? gate.observe() : subscribe ? gate.events() : undefined
    const controller = new AbortController()
    const decisionP = gate.confirm(call, { signal: controller.signal })
    decisionP.catch(() => {})
    const expectRequest = c.expect_request ?? true
    let cancelled = false

    let req
    if (expectRequest && stream) {
      req = await nextMatching(stream, (e) => e.type === 'confirmation-request')
      const wire = serializeEvent(req)
      for (const [k, v] of Object.entries(c.request ?? {})) {
        assert.deepStrictEqual(wire[k], v, `request field ${k}`)
      }
      let token
      for (const [i, step] of (c.steps ?? []).entries()) {
        const where = `${c.name}: step ${i}`
        onlyKeys(step, [...ACTIONS, 'error', 'outcome'], where)
        const actions = Object.keys(step).filter((k) => ACTIONS.includes(k))
        assert.equal(actions.length, 1, `${where}: exactly one action`)
        const action = actions[0]
        if (!WITH_ERROR.includes(action)) assert.equal(step.error, undefined, `${where}: no error expected for ${action}`)
        if (!WITH_OUTCOME.includes(action)) assert.equal(step.outcome, undefined, `${where}: no outcome expected for ${action}`)
        /** Runs `f`: it must fail with the step's error, or succeed with its outcome. */
        const expect = (f) => {
          if (step.error !== undefined) assert.throws(f, isCode(step.error), `${where}: expected ${step.error}`)
          else if (step.outcome !== undefined) assert.equal(f(), step.outcome, `${where}: outcome`)
          else return f()
        }
        if (action === 'respond') {
          const r = { ...step.respond }
          for (const k of ['id', 'tool', 'arguments_digest', 'session_id']) {
            if (r[k] === '$request') r[k] = wire[k]
          }
          // The JavaScript form (camelCase), passed on verbatim otherwise.
          const js = Object.fromEntries(Object.entries(r).map(([k, v]) => [RESPONSE_KEYS[k] ?? k, v]))
          expect(() => gate.respond(js))
        } else if (action === 'issue_token') {
          const t = expect(() => gate.issueToken(req.id, step.issue_token))
          if (step.error === undefined) token = t
        } else if (action === 'tamper_token') {
          assert.equal(step.tamper_token, true)
          token = withPart(token, 3, (sig) => (sig[0] === 'A' ? 'B' : 'A') + sig.slice(1))
        } else if (action === 'rekey_token') {
          token = withPart(token, 1, () => step.rekey_token)
        } else if (action === 'respond_token') {
          onlyKeys(step.respond_token, TOKEN_RESPONSE_KEYS, `${where}: token response`)
          expect(() => gate.respondToken(token, step.respond_token))
        } else if (action === 'sleep_ms') {
          await sleep(step.sleep_ms)
        } else if (action === 'wait_past_deadline') {
          await sleep(Math.max(0, req.deadlineMs - Date.now()) + 40)
        } else if (action === 'close') {
          await gate.close()
        } else if (action === 'unsubscribe') {
          stream.close()
        } else if (action === 'cancel') {
          controller.abort()
          cancelled = true
        } else if (action === 'end_session') {
          gate.endSession(step.end_session)
        }
      }
    } else {
      assert.equal(c.steps, undefined, `${c.name}: steps need a request`)
      assert.equal(c.request, undefined, `${c.name}: request fields need a subscriber`)
    }

    onlyKeys(c.decision, DECISION_KEYS, `${c.name}: decision`)
    if (cancelled) {
      // The cancelled caller gets no decision (its promise rejects with the signal's reason):
      // the request's end is read from its confirmation-resolved event below.
      await assert.rejects(decisionP, isAbort)
      onlyKeys(c.decision, ['outcome', 'cancel_reason'], `${c.name}: decision of a cancelled call`)
      assert.equal(c.after_decision, undefined, `${c.name}: a cancelled call has no decision for after_decision`)
    } else {
      const decision = await decisionP
      for (const [k, v] of Object.entries(c.decision)) {
        if (k === 'cancel_reason') {
          assert.equal(decision.reason, v, 'cancel reason (core JSON field `reason`)')
          assert.equal(decision.cancelReason, v)
        } else {
          assert.deepStrictEqual(decision[k], v, `decision.${k}`)
        }
      }
      assert.equal(decision.approved, decision.outcome === 'approved')
      afterDecision(gate, decision, c, req)
    }

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
      if (cancelled) {
        const resolved = rest.find((e) => e.type === 'confirmation-resolved')
        assert.ok(resolved, 'a confirmation-resolved event')
        assert.equal(resolved.outcome, c.decision.outcome)
        assert.equal(resolved.cancelReason, c.decision.cancel_reason)
      }
    } else {
      assert.equal(c.events_after, undefined)
      assert.ok(!cancelled, `${c.name}: a cancel step needs a subscriber`)
    }
    assert.equal(gate.pendingCount, 0)
  })
}

// ---- durable.json ---------------------------------------------------------------------------

const durable = load('durable.json')
onlyKeys(durable, ['cases', 'tools', 'description'], 'durable.json')
assert.ok(durable.cases.length > 0 && durable.tools.length > 0)

const RECOVERY_LISTS = { restored: 'restored', timed_out: 'timedOut', interrupted: 'interrupted', not_restored: 'notRestored' }
/** The request fields a recovered entry must keep, and Node's names for them. */
const KEPT = { id: 'id', tool: 'tool', arguments: 'arguments', arguments_digest: 'argumentsDigest', session_id: 'sessionId', deadline_ms: 'deadlineMs' }

/** The database as it is on disk now (with its write-ahead log): what a new process finds. */
function snapshot(from, to) {
  copyFileSync(from, to)
  if (existsSync(`${from}-wal`)) copyFileSync(`${from}-wal`, `${to}-wal`)
}

const past = (deadlineMs) => sleep(Math.max(0, deadlineMs - Date.now()) + 50)

for (const c of durable.cases) {
  onlyKeys(
    c,
    ['name', 'call', 'before_restart', 'down_past_deadline', 'register_after_restart', 'recovered_as', 'found_state', 'steps', 'record', 'runs'],
    `durable.json ${c.name}`,
  )
  onlyKeys(c.record, ['state', 'responder', 'arguments'], `durable.json ${c.name}: record`)
  test(`durable: ${c.name}`, async () => {
    const dir = mkdtempSync(path.join(tmpdir(), 'signoff-durable-'))
    const specs = (execute) => durable.tools.map((t) => ({ ...rename(t, TOOL_KEYS, `${c.name}: tool ${t.name}`), execute }))
    let before = 0
    let after = 0
    let started
    let release
    const startedP = new Promise((resolve) => (started = resolve))
    const released = new Promise((resolve) => (release = resolve))

    // Before the restart: the call is left pending, or approved and running.
    const a = new Gate({ storePath: path.join(dir, 'a.db') })
    for (const spec of specs(async () => {
      before++
      started()
      await released
      return { sent: true }
    }))
      a.register(spec)
    const streamA = a.events()
    const call = a.execute(rename(c.call, CALL_KEYS, `${c.name}: call`))
    const req = await nextMatching(streamA, (e) => e.type === 'confirmation-request')
    const wire = serializeEvent(req)
    assert.ok(['pending', 'executing'].includes(c.before_restart), `before_restart: ${c.before_restart}`)
    const executing = c.before_restart === 'executing'
    if (executing) {
      a.respond({ id: req.id, decision: 'approve', responder: 'alice' })
      await Promise.race([startedP, sleep(5000).then(() => assert.fail('the tool did not start'))])
    }
    // It goes away: what is on disk now is what the next process finds.
    snapshot(path.join(dir, 'a.db'), path.join(dir, 'b.db'))
    release()
    await a.close()
    await call
    streamA.close()
    assert.equal(before, executing ? 1 : 0, 'runs before the restart')
    assert.ok([undefined, true, false].includes(c.down_past_deadline))
    if (c.down_past_deadline) await past(req.deadlineMs)

    // After the restart.
    const b = new Gate({ storePath: path.join(dir, 'b.db') })
    assert.ok([undefined, true, false].includes(c.register_after_restart))
    if (c.register_after_restart ?? true) {
      for (const spec of specs(async () => {
        after++
        return { sent: true }
      }))
        b.register(spec)
    }
    const streamB = b.events()
    const recovery = b.recover()
    assert.ok(Object.keys(RECOVERY_LISTS).includes(c.recovered_as), `recovered_as: ${c.recovered_as}`)
    for (const [list, js] of Object.entries(RECOVERY_LISTS)) {
      assert.equal(recovery[js].length, list === c.recovered_as ? 1 : 0, `recovery.${js}`)
    }
    const entry = recovery[RECOVERY_LISTS[c.recovered_as]][0]
    const found = ['restored', 'timed_out'].includes(c.recovered_as) ? entry : entry.request
    if (c.recovered_as === 'interrupted') assert.equal(entry.state, c.found_state, 'the state found')
    else assert.equal(c.found_state, undefined, 'found_state is for interrupted calls')
    if (c.recovered_as === 'not_restored') assert.ok(entry.reason, 'a reason')
    for (const [k, js] of Object.entries(KEPT)) {
      assert.deepStrictEqual(found[js], wire[k], `the recovered request's ${k}`)
    }
    if (c.recovered_as === 'restored') {
      const again = await nextMatching(streamB, (e) => e.type === 'confirmation-request')
      assert.equal(again.id, req.id, 'the restored request is published again')
    }
    for (const [i, step] of c.steps.entries()) {
      const where = `${c.name}: step ${i}`
      if (step.respond !== undefined) {
        onlyKeys(step, ['respond', 'error', 'outcome'], where)
        const r = { ...step.respond }
        for (const k of ['id', 'tool', 'arguments_digest', 'session_id']) {
          if (r[k] === '$request') r[k] = wire[k]
        }
        const js = Object.fromEntries(Object.entries(r).map(([k, v]) => [RESPONSE_KEYS[k] ?? k, v]))
        if (step.error !== undefined) assert.throws(() => b.respond(js), isCode(step.error), `${where}: expected ${step.error}`)
        else assert.equal(b.respond(js), step.outcome, `${where}: outcome`)
      } else if (step.wait_past_deadline !== undefined) {
        onlyKeys(step, ['wait_past_deadline'], where)
        assert.equal(step.wait_past_deadline, true)
        await past(req.deadlineMs)
      } else {
        assert.fail(`${where}: unknown step ${JSON.stringify(step)}`)
      }
    }
    const FINAL = ['done', 'released', 'denied', 'timed-out', 'cancelled', 'interrupted']
    await eventually(() => FINAL.includes(b.record(req.id)?.state), 'a final record')
    await sleep(50)
    const record = b.record(req.id)
    for (const [k, v] of Object.entries(c.record)) assert.deepStrictEqual(record[k], v, `record.${k}`)
    assert.equal(after, c.runs, 'runs after the restart')
    assert.equal(before, executing ? 1 : 0, 'runs before the restart')
    streamB.close()
    await b.close()

    // Another restart: a settled request is never picked up again.
    let later = 0
    const g = new Gate({ storePath: path.join(dir, 'b.db') })
    for (const spec of specs(async () => {
      later++
      return { sent: true }
    }))
      g.register(spec)
    const again = g.recover()
    for (const js of Object.values(RECOVERY_LISTS)) assert.equal(again[js].length, 0, `recovery.${js} after another restart`)
    assert.equal(g.record(req.id).state, record.state, 'the record after another restart')
    await sleep(50)
    assert.equal(later, 0, 'runs after another restart')
    await g.close()
    rmSync(dir, { recursive: true, force: true })
  })
}

// ---- subscriptions.json ---------------------------------------------------------------------

const subscriptions = load('subscriptions.json')
onlyKeys(subscriptions, ['cases', 'description', 'tools'], 'subscriptions.json')
assert.ok(subscriptions.cases.length > 0)

for (const c of subscriptions.cases) {
  onlyKeys(c, ['name', 'gate', 'types', 'calls', 'expect', 'error'], `subscriptions.json ${c.name}`)
  test(`subscription: ${c.name}`, async () => {
    const gate = new Gate(gateOptions(c.gate ?? {}))
    try {
      for (const spec of subscriptions.tools) gate.register(rename(spec, TOOL_KEYS, `${c.name}: tool ${spec.name}`))
      if (c.error !== undefined) {
        onlyKeys(c, ['name', 'types', 'error'], c.name)
        assert.throws(() => gate.events({ types: c.types }), isCode(c.error))
        return
      }
      const stream = gate.events({ types: c.types })
      for (const call of c.calls) {
        onlyKeys(call, ['call', 'answer', 'outcome'], `${c.name}: call`)
        const decisionP = gate.confirm(rename(call.call, CALL_KEYS, `${c.name}: call`))
        await eventually(() => gate.pendingCount === 1, `${c.name}: the request`)
        const [req] = gate.pending()
        if (call.answer === 'approve') gate.respond({ id: req.id, decision: 'approve' })
        else if (call.answer === 'deny') gate.respond({ id: req.id, decision: 'deny', reason: 'no' })
        else assert.equal(call.answer, 'wait', `${c.name}: answer ${call.answer}`)
        assert.equal((await decisionP).outcome, call.outcome, c.name)
      }
      await gate.close()
      const seen = (await drain(stream)).map((e) => e.type)
      assert.deepStrictEqual(seen, c.expect, c.name)
    } finally {
      await gate.close()
    }
  })
}
