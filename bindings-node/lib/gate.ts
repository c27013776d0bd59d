import { EventEmitter, errorMonitor } from 'node:events'
import {
  CALL_FIELDS,
  GATE_EVENTS,
  badField,
  checkCall,
  checkCallOptions,
  checkEvent,
  checkListener,
  checkParam,
  fields,
  isRecord,
  malformed,
  optBool,
  optEnum,
  optNumber,
  optString,
  optStrings,
  reqEnum,
  reqString,
  show,
  type CheckedCall,
  type Shape,
} from './check'
import { consoleOptionsJson, wrapConsole, type Console, type ConsoleOptions } from './console'
import { SignoffError, describe, toSignoffError } from './errors'
import { EventStream, wrapBatch, type EventStreamOptions, type GateEvent, type LaggedEvent } from './events'
import {
  native,
  type ConfirmationRequestData,
  type DecisionData,
  type NativeGate,
  type NativeSubscription,
  type NativeTokenKeys,
  type PendingPageData,
  type RecoveryData,
  type StoredRecordData,
  type ToolResultData,
} from './native'
import { OutputNotJson, fieldsToJson, outputToJson, toJson } from './json'
import { PendingRequest } from './request'
import { ToolResult } from './result'
import { TokenKeys, nativeTokenKeys } from './token'
import type {
  CallOptions,
  ConfirmationResolvedEvent,
  ConfirmationResponseEvent,
  ConfirmationResponseInput,
  ConfirmationTimeoutEvent,
  Decision,
  Evaluation,
  ExecutionContext,
  Executor,
  GateOptions,
  Outcome,
  PendingAllOptions,
  PendingPage,
  PendingPageOptions,
  Recovery,
  StoredRecord,
  TokenClaims,
  MarkerClaims,
  TokenResponseInput,
  ToolCall,
  ToolDefinition,
  ToolInfo,
} from './types'

/** The core's default keyword list. */
export const DEFAULT_KEYWORDS: readonly string[] = Object.freeze(native.defaultKeywords())
/** The session used when a call names none. */
export const DEFAULT_SESSION: string = native.defaultSession()
/**
 * The responder named in the audit record (`notice`, decision `approval-failed`) of a failed
 * approval step: a request listener that threw, rejected, or settled without answering.
 */
export const HANDLER_RESPONDER: string = native.handlerResponder()

/**
 * The `_meta` key an approval marker travels under in an MCP request (`"dev.signoff/approval"`;
 * see {@link Gate.approvalMarker}).
 */
export const MARKER_META_KEY: string = native.markerMetaKey()

/**
 * The gate options as JSON for the core's `GateConfig`, which checks every option once (the same
 * rules in every language): a mistake is `SignoffError('config')` naming the option as written.
 * A value JSON cannot carry (NaN, Infinity, a function...) never reaches the core, and is refused
 * the same way.
 */
function optionsJson(options: unknown): string {
  try {
    return isRecord(options) ? fieldsToJson(options, (k) => k, 'the gate options') : toJson(options, 'options')!
  } catch (e) {
    if (!(e instanceof SignoffError)) throw e
    throw new SignoffError(e.message.replace(/^malformed payload: /, 'configuration error: '), 'config')
  }
}

/** A tool definition's fields, in Node's names (documentation order). */
const TOOL: Shape = {
  what: 'the tool definition',
  fields: [
    'name',
    'description',
    'parameters',
    'approval',
    'editable',
    'promptTemplate',
    'rules',
    'source',
    'readOnly',
    'destructive',
    'timeoutMs',
    'execute',
  ],
  aliases: {
    executor: 'execute',
    handler: 'execute',
    fn: 'execute',
    func: 'execute',
    run: 'execute',
    schema: 'parameters',
    inputSchema: 'parameters',
    input_schema: 'parameters',
    params: 'parameters',
    needsApproval: 'approval',
    requiresApproval: 'approval',
    requireApproval: 'approval',
    prompt: 'promptTemplate',
    timeout: 'timeoutMs',
  },
}

const APPROVAL_MODES = ['default', 'required', 'not_required'] as const
const RULE_FIELDS: Readonly<Record<string, readonly string[]>> = {
  path_outside: ['pointer', 'prefixes'],
  greater_than: ['pointer', 'value'],
  one_of: ['pointer', 'values'],
  not_one_of: ['pointer', 'values'],
  contains: ['pointer', 'substring'],
}
const RULE_KINDS = Object.keys(RULE_FIELDS)

/** Checks an argument rule (`rules[i]`); its values are converted to JSON later. */
function checkRule(rule: unknown, i: number): void {
  const what = `rules[${i}]`
  if (!isRecord(rule)) throw malformed(`${what} must be an object ({ kind, pointer, ... }), not ${show(rule)}`)
  const kind = reqEnum(rule, 'kind', { what, fields: ['kind'] }, RULE_KINDS)
  const shape: Shape = { what: `${what}, a ${kind} rule`, fields: ['kind', ...RULE_FIELDS[kind]!], aliases: { prefix: 'prefixes', path: 'pointer' } }
  fields(rule, shape)
  reqString(rule, 'pointer', shape, ': a JSON Pointer into the arguments, e.g. "/path"')
  if (kind === 'path_outside') {
    if (rule.prefixes === undefined) throw malformed(`\`prefixes\` is missing from ${shape.what}`)
    optStrings(rule, 'prefixes', shape)
  } else if (kind === 'greater_than') {
    if (rule.value === undefined) throw malformed(`\`value\` is missing from ${shape.what}`)
    // Not finite: refused by the JSON conversion, which says so.
    if (typeof rule.value !== 'number') throw badField(shape, 'value', 'a number', rule.value)
  } else if (kind === 'contains') {
    reqString(rule, 'substring', shape)
  } else if (!Array.isArray(rule.values)) {
    throw rule.values === undefined ? malformed(`\`values\` is missing from ${shape.what}`) : badField(shape, 'values', 'an array', rule.values)
  }
}

/** Checks a tool's `source`: `{ kind: 'built_in' }` or `{ kind: 'external', server }`. */
function checkSource(source: unknown): void {
  const what = '`source`'
  if (!isRecord(source)) throw malformed(`${what} of the tool definition must be { kind: 'built_in' } or { kind: 'external', server }, not ${show(source)}`)
  const kind = reqEnum(source, 'kind', { what, fields: ['kind'] }, ['built_in', 'external'])
  const shape: Shape = { what, fields: kind === 'external' ? ['kind', 'server'] : ['kind'] }
  fields(source, shape)
  if (kind === 'external') reqString(source, 'server', shape, ": the external server's name")
}

/**
 * Checks a tool definition; returns its fields but `execute` and `parameters`, absent ones left
 * out, and those two.
 */
function toolDefinition(tool: unknown): { spec: Record<string, unknown>; parameters: unknown; execute?: Executor } {
  const shape = TOOL
  const t = fields(tool, shape)
  reqString(t, 'name', shape, ": the tool's name, as the model calls it")
  optString(t, 'description', shape)
  optEnum(t, 'approval', shape, APPROVAL_MODES)
  optBool(t, 'editable', shape)
  optString(t, 'promptTemplate', shape)
  optBool(t, 'readOnly', shape)
  optBool(t, 'destructive', shape)
  optNumber(t, 'timeoutMs', shape, 'a whole number of milliseconds (1 to 30 days)', { whole: true })
  const { execute, parameters, rules, source } = t
  if (execute !== undefined && execute !== null && typeof execute !== 'function') {
    throw badField(shape, 'execute', 'a function (args, context) => output, sync or async', execute)
  }
  if (parameters !== undefined && parameters !== null && !isRecord(parameters) && typeof parameters !== 'boolean') {
    throw badField(shape, 'parameters', 'a JSON Schema (an object such as { type: "object", properties: {...} })', parameters)
  }
  if (rules !== undefined && rules !== null) {
    if (!Array.isArray(rules)) throw badField(shape, 'rules', 'an array of rules', rules)
    rules.forEach(checkRule)
  }
  if (source !== undefined && source !== null) checkSource(source)
  const spec: Record<string, unknown> = {}
  for (const [k, v] of Object.entries(t)) {
    if (k !== 'execute' && k !== 'parameters' && v !== undefined && v !== null) spec[k] = v
  }
  return { spec, parameters: parameters ?? undefined, execute: (execute ?? undefined) as Executor | undefined }
}

/** An executor as the addon calls it: the arguments' JSON text, the settle token, then the call's
 * context (`CallContext`) field by field. */
type NativeExecutor = (
  argsJson: string,
  token: number,
  tool: string,
  sessionId: string,
  edited: boolean,
  callId?: string,
  requestId?: string,
) => string | undefined

/** The addon's `confirm` and `execute`: the decision object or the result's JSON text, at once or as a promise. */
type NativeStart<T> = (
  this: NativeGate,
  tool: string,
  argumentsJson?: string | null,
  sessionId?: string | null,
  callId?: string | null,
  metadataJson?: string | null,
  abortId?: number | null,
) => T | null | Promise<T | null>

/** A response's fields ({@link ConfirmationResponseInput}), in Node's names. */
// @generated begin response-field-names (core/tests/sourcegen.rs, from the core's `ConfirmationResponse`)
const RESPONSE_FIELDS = ['id', 'decision', 'scope', 'arguments', 'reason', 'responder', 'tool', 'argumentsDigest', 'sessionId', 'atMs', 'type'] as const
// @generated end response-field-names
/** True when `A` and `B` name the same fields. */
type SameFields<A, B> = [Exclude<keyof A, keyof B> | Exclude<keyof B, keyof A>] extends [never] ? true : false
// Checked by the compiler: the fields `respond` takes are exactly those of its input type, and
// those of a response event (`ConfirmationResponseData`, generated from the addon's declaration,
// against which response events from JavaScript are checked before the core reads them).
const RESPONSE_SHAPE_CHECKED: SameFields<Record<(typeof RESPONSE_FIELDS)[number], unknown>, ConfirmationResponseInput> &
  SameFields<ConfirmationResponseInput, ConfirmationResponseEvent> = true
void RESPONSE_SHAPE_CHECKED
const RESPONSE: Shape = {
  what: 'the response',
  fields: RESPONSE_FIELDS,
  aliases: {
    requestId: 'id',
    request_id: 'id',
    approved: 'decision',
    approve: 'decision',
    outcome: 'decision',
    args: 'arguments',
    editedArguments: 'arguments',
    digest: 'argumentsDigest',
    session: 'sessionId',
    by: 'responder',
    approver: 'responder',
  },
}
/** What {@link Gate.respondToken} takes. */
const TOKEN_RESPONSE: Shape = {
  what: 'the token response',
  fields: ['approver', 'decision', 'arguments', 'scope', 'reason'],
  aliases: { responder: 'approver', by: 'approver', user: 'approver', args: 'arguments', approved: 'decision' },
}
const DECISIONS = ['approve', 'deny'] as const
const SCOPES = ['once', 'session'] as const

const STREAM_ALIASES = { type: 'types', events: 'types', filter: 'types' }
/** The event types an event stream filters on. */
const STREAM_TYPES: readonly string[] = GATE_EVENTS.filter((e) => e !== 'lagged')

/** The options of {@link Gate.events} and {@link Gate.observe}. */
/** A token response checked as {@link Gate.respondToken} takes it: the native arguments after the token. */
function tokenArgs(
  response: TokenResponseInput,
): [string, boolean, string | undefined, (typeof SCOPES)[number] | undefined, string | undefined] {
  const shape = TOKEN_RESPONSE
  const r = fields(response, shape)
  const approver = reqString(r, 'approver', shape, ': who presents the token, as your server authenticated them')
  const decision = reqEnum(r, 'decision', shape, DECISIONS)
  const scope = optEnum(r, 'scope', shape, SCOPES)
  const reason = optString(r, 'reason', shape)
  return [approver, decision === 'approve', toJson(r.arguments, 'arguments', 'edited arguments'), scope, reason]
}

function streamTypes(options: unknown, method: string): EventStreamOptions['types'] {
  const EVENTS_OPTIONS: Shape = { what: `the options of ${method}`, fields: ['types'], aliases: STREAM_ALIASES }
  const o = fields(options, EVENTS_OPTIONS, true)
  const types = o.types
  if (types === undefined || types === null) return undefined
  if (!Array.isArray(types)) throw badField(EVENTS_OPTIONS, 'types', `an array of event types (${STREAM_TYPES.join(', ')})`, types)
  types.forEach((t, i) => {
    if (typeof t !== 'string' || !STREAM_TYPES.includes(t)) {
      const valid = STREAM_TYPES.map((x) => JSON.stringify(x)).join(', ')
      const lag = t === 'lagged' ? ' (a lag is always yielded: leave it out)' : ''
      throw malformed(`unknown event type ${show(t)} at \`types[${i}]\` of the options of ${method}${lag}; the types are ${valid}`)
    }
  })
  return types as EventStreamOptions['types']
}

const REQUEST = 'confirmation-request'
/** Events delivered to `on()` listeners through a bus subscription. */
const BUS_EVENTS = new Set<string | symbol>(['confirmation-response', 'confirmation-timeout', 'confirmation-resolved', 'lagged'])

/**
 * The JSON text of a tool's output, as `JSON.stringify` writes it (`undefined`: `null`), except
 * what that would change without a word (NaN, ±Infinity, a Map, a Set: see `outputToJson`).
 */
function outputJson(v: unknown): string {
  try {
    return outputToJson(v)
  } catch (e) {
    if (e instanceof OutputNotJson) throw e
    throw new Error(`the tool returned a value that is not JSON (${describe(e)})`)
  }
}

function isThenable(v: unknown): v is PromiseLike<unknown> {
  return v !== null && (typeof v === 'object' || typeof v === 'function') && typeof (v as { then?: unknown }).then === 'function'
}

const camelToSnake = (k: string): string => k.replace(/[A-Z]/g, (c) => `_${c.toLowerCase()}`)
const snakeToCamel = (k: string): string => k.replace(/_([a-z])/g, (_, c: string) => c.toUpperCase())

const PAGE_OPTIONS: Shape = { what: 'the options of pendingPage', fields: ['after', 'limit'], aliases: { cursor: 'after', pageSize: 'limit' } }
const ALL_OPTIONS: Shape = { what: 'the options of pendingAll', fields: ['pageSize'], aliases: { limit: 'pageSize' } }
const MAX_PAGE = native.maxPageSize()

/** A page size: a whole number from 1 to 2^32 - 1 (default 1,000); `malformed` otherwise (the core's rule). */
function pageSize(v: unknown, name: string): number | undefined {
  if (v === undefined) return undefined
  if (typeof v === 'number' && Number.isInteger(v) && v >= 1 && v <= MAX_PAGE) return v
  throw new SignoffError(`malformed payload: ${name} must be a whole number from 1 to ${MAX_PAGE}, not ${show(v)}`, 'malformed')
}

/**
 * The approval gate. Register tools, then `confirm` or `execute` the model's calls: calls that
 * need approval publish a `confirmation-request` and wait for a person; every outcome other than
 * an explicit approval (a denial, the deadline, no listener, a failing listener, an aborted
 * signal, `close()`) is a decision not to run.
 *
 * Requests reach people two ways:
 * - `gate.on('confirmation-request', req => ...)`: answer with `req.approve()` / `req.deny()`.
 *   A listener may be async. When every listener has returned (or settled) and none answered, or
 *   one threw or rejected, the approval step failed: the core ends the request at once as
 *   `cancelled` with cancel reason `'approval-failed'` (even when `allowedResponders` or
 *   `approvers` restrict who may answer), the tool does not run, and the model is told that the
 *   approval step failed, not that a person declined. The error's text never reaches the model:
 *   it goes to the audit log (a `notice` record, decision `approval-failed`, responder
 *   {@link HANDLER_RESPONDER}) and to stderr. The listeners are called inside the call that made
 *   the request (the core's inline approver): one that answers at once completes it in the same
 *   JavaScript turn.
 * - `for await (const event of gate.events())`: a stream of every event, for UIs.
 *
 * Both are **approvers**: with `denyWhenUnobserved` (the default), a request made while neither
 * is attached is cancelled at once (`no-approver`). Loggers and displays observe instead, and
 * never keep a call waiting for nobody: `gate.observe()` streams, and the listeners of the other
 * events.
 *
 * The events are `confirmation-request`, `confirmation-response`, `confirmation-timeout`,
 * `confirmation-resolved` and `lagged`. `on`, `once`, `addListener`, `prependListener`,
 * `prependOnceListener`, `off`, `removeListener` and `removeAllListeners` refuse any other name
 * (but EventEmitter's own `newListener`, `removeListener` and `error`) with a
 * {@link SignoffError} `malformed` listing them, and a listener that is not a function.
 *
 * @example
 * ```ts
 * const gate = new Gate()
 * gate.register({ name: 'delete_file', execute: ({ path }) => fs.rmSync(path) })
 * gate.on('confirmation-request', (req) => { req.approve() })
 * const result = await gate.execute({ tool: 'delete_file', arguments: { path: '/tmp/x' }, callId: 'c1' })
 * messages.push(result.toOpenAIMessage())
 * ```
 */
export class Gate extends EventEmitter {
  readonly #native: NativeGate
  #abortSeq = 0
  #handlerOn = false
  /** Request listeners added so far (an abandonment decided before one was added is void). */
  #requestListenersAdded = 0
  /** Listener runs of the current handler whose promises have not settled. */
  #inFlight = 0
  /** Bumped when the handler stops with runs in flight: their later settling is ignored. */
  #handlerGen = 0
  /** Depth of `#run` calling the request listeners (a removal made then is a listener's own). */
  #calling = 0
  #pump?: NativeSubscription
  #closing?: Promise<void>
  /** Aborted when the gate closes: the `signal` executors receive. */
  readonly #closed = new AbortController()
  /** The executor wrappers handed to the addon, which only holds them weakly. */
  readonly #executors = new Map<string, NativeExecutor>()

  constructor(options: GateOptions = {}) {
    super()
    let json: string
    let keys: NativeTokenKeys | undefined
    if (isRecord(options) && options.tokenKeys instanceof TokenKeys) {
      keys = nativeTokenKeys(options.tokenKeys)
      json = optionsJson({ ...options, tokenKeys: undefined })
    } else {
      json = optionsJson(options)
    }
    try {
      this.#native = new native.NativeGate(json, keys)
    } catch (e) {
      throw toSignoffError(e)
    }
  }

  // ---- tools ---------------------------------------------------------------------------------

  /**
   * Registers (or replaces) a tool. The definition is converted to the core's `ToolSpec`
   * (camelCase keys become its snake_case ones; optional fields left `undefined` are absent);
   * `execute` (optional, sync or async) runs approved calls. The `parameters` schema and the
   * rules' values are converted strictly, like call arguments (see {@link Gate.confirm}).
   * @throws {@link SignoffError} `invalid_tool` (bad schema, empty name, bad rule), `malformed`
   *   (unknown key, wrong type, a value that is not JSON).
   */
  register<Args = any>(tool: ToolDefinition<Args>): this {
    const { spec, parameters, execute } = toolDefinition(tool)
    const wrapper = execute ? this.#executor(execute) : undefined
    try {
      this.#native.register(
        fieldsToJson(spec, camelToSnake, 'the tool definition'),
        toJson(parameters, 'parameters', "the tool's parameters"),
        wrapper,
      )
    } catch (e) {
      throw toSignoffError(e)
    }
    const name = spec.name as string
    if (wrapper) this.#executors.set(name, wrapper)
    else this.#executors.delete(name)
    return this
  }

  /** Removes a tool; later calls to it are refused (`unknown_tool`). */
  unregister(name: string): boolean {
    checkParam(name, 'name', 'unregister')
    this.#executors.delete(name)
    return this.#native.unregister(name)
  }

  /** Every registered tool, sorted by name. */
  tools(): ToolInfo[] {
    return (JSON.parse(this.#native.tools()) as Record<string, unknown>[]).map((t) => {
      const out: Record<string, unknown> = {}
      for (const [k, v] of Object.entries(t)) out[snakeToCamel(k)] = v
      return out as unknown as ToolInfo
    })
  }

  /** The registered tools as OpenAI Chat Completions `tools` entries. */
  openAITools(): Array<{ type: 'function'; function: { name: string; description: string; parameters: Record<string, unknown> } }> {
    return this.tools().map((t) => ({
      type: 'function' as const,
      function: { name: t.name, description: t.description, parameters: t.parameters },
    }))
  }

  /**
   * Whether a call would need approval right now, and why. Makes no request.
   * @throws {@link SignoffError} `unknown_tool`, `invalid_arguments`, `malformed` (arguments
   *   that are not JSON, see {@link Gate.confirm}).
   */
  evaluate(call: ToolCall): Evaluation {
    const c = checkCall(call)
    try {
      return this.#native.evaluate(c.tool, toJson(c.arguments, 'arguments'), c.sessionId)
    } catch (e) {
      throw toSignoffError(e)
    }
  }

  /**
   * The executor as the addon calls it: the output's JSON text when the tool returned
   * synchronously, else `undefined` and `settleExecution` later.
   */
  #executor(fn: Executor): NativeExecutor {
    // Not `this`: the wrapper must not keep the gate alive.
    const signal = this.#closed.signal
    const settle = (token: number, ok: boolean, v: unknown): undefined => {
      let text: string
      try {
        text = ok ? outputJson(v) : describe(v)
      } catch (e) {
        ;[ok, text] = [false, describe(e)]
      }
      native.settleExecution(token, ok, text)
    }
    return (argsJson, token, tool, sessionId, edited, callId, requestId) => {
      let r: unknown
      try {
        const context: ExecutionContext = Object.freeze({
          tool,
          callId: callId ?? null,
          requestId: requestId ?? null,
          sessionId,
          edited,
          signal,
        })
        r = fn(JSON.parse(argsJson), context)
        if (!isThenable(r)) return outputJson(r)
      } catch (e) {
        return settle(token, false, e)
      }
      r.then(
        (v) => settle(token, true, v),
        (e) => settle(token, false, e),
      )
      return undefined
    }
  }

  // ---- calls ---------------------------------------------------------------------------------

  /**
   * Asks for approval when the call needs it and resolves the decision. Resolves at once when no
   * approval is needed. Never runs the tool.
   *
   * Arguments and metadata must be JSON, and are converted strictly, never coerced: plain
   * objects (prototype `Object.prototype` or `null`), arrays, strings, booleans, `null` and
   * finite numbers; an object with a `toJSON` method (a `Date`) is converted to what it returns,
   * as by `JSON.stringify`. NaN and ±Infinity (which `JSON.stringify` turns into `null`),
   * functions, symbols, BigInts, `undefined` inside an array or as a property value (omit the
   * key or use `null`), Maps, Sets, typed arrays and Buffers, class instances without `toJSON`,
   * strings with a lone surrogate, reference cycles, and nesting deeper than
   * `MAX_NESTING` (64) levels of arrays and objects are refused as `malformed`, with the
   * path in the message (`arguments.items[3] is NaN: ...`): a person never approves one value
   * while the tool runs with another. Symbol-keyed properties are skipped, as by
   * `JSON.stringify`.
   * @rejects {@link SignoffError} `unknown_tool`, `invalid_arguments`, `malformed` (nothing is
   *   asked): also for a call that is not one (a field it does not have, such as `name` for
   *   `tool`; `tool` missing or not a string) or an unknown option, naming it as written.
   */
  confirm(call: ToolCall, options?: CallOptions): Promise<Decision> {
    try {
      // The native side settles with the decision object itself (no `.then` per call: with a
      // million calls pending, each would keep a second promise and a reaction).
      return Promise.resolve(this.#start<DecisionData>(this.#native.confirm, checkCall(call), checkCallOptions(options)) as Decision | Promise<Decision>)
    } catch (e) {
      return Promise.reject(toSignoffError(e))
    }
  }

  /**
   * Confirms the call and, if approved, runs its executor once. Never rejects for a refused
   * call: the result's `status` says what happened and `content` tells the model.
   * @rejects {@link SignoffError} `malformed` when the call is not one or the arguments or
   *   metadata are not JSON (see {@link Gate.confirm}); nothing is asked and nothing runs.
   */
  execute(call: ToolCall, options?: CallOptions): Promise<ToolResult> {
    try {
      const r = this.#start<string>(this.#native.execute, checkCall(call), checkCallOptions(options))
      return typeof r === 'string' ? Promise.resolve(parseResult(r)) : r.then(parseResult)
    } catch (e) {
      return Promise.reject(toSignoffError(e))
    }
  }

  /**
   * Runs the calls of one model turn concurrently: ungated calls run at once, each gated call
   * waits for its own decision; each runs at most once. Results come in the order of `calls`.
   * @rejects {@link SignoffError} `malformed` when `calls` is not an array, or a call is not one
   *   or its arguments or metadata are not JSON (see {@link Gate.confirm}), naming it
   *   (`calls[2]`); then no call is made.
   */
  executeBatch(calls: ToolCall[], options?: CallOptions): Promise<ToolResult[]> {
    try {
      if (!Array.isArray(calls)) {
        throw malformed(`executeBatch: \`calls\` must be an array of calls ({ ${CALL_FIELDS.join(', ')} }), not ${show(calls)}`)
      }
      const data = calls.map((call, i) => {
        const c = checkCall(call, `calls[${i}]`)
        return {
          tool: c.tool,
          argumentsJson: toJson(c.arguments, `calls[${i}].arguments`, 'arguments'),
          sessionId: c.sessionId,
          callId: c.callId,
          metadataJson: toJson(c.metadata, `calls[${i}].metadata`, 'metadata'),
        }
      })
      const signal = checkCallOptions(options)
      const r = signal
        ? this.#withSignal(signal, (id) => this.#native.executeBatch(data, id))
        : (this.#native.executeBatch(data) as string | Promise<string>)
      return typeof r === 'string' ? Promise.resolve(parseResults(r)) : r.then(parseResults)
    } catch (e) {
      return Promise.reject(toSignoffError(e))
    }
  }

  #start<T extends object | string>(fn: NativeStart<T>, call: CheckedCall, signal: AbortSignal | undefined): T | Promise<T> {
    const args = toJson(call.arguments, 'arguments')
    const meta = toJson(call.metadata, 'metadata')
    if (!signal) return fn.call(this.#native, call.tool, args, call.sessionId, call.callId, meta) as T | Promise<T>
    return this.#withSignal(signal, (id) => fn.call(this.#native, call.tool, args, call.sessionId, call.callId, meta, id))
  }

  /**
   * Starts a call that `signal` can abort: the caller stops waiting (the promise rejects with
   * `signal.reason`); the addon drops the call, so the core cancels a request it waits on
   * (`aborted`) and lets a tool that already started run to the end.
   */
  #withSignal<T>(signal: AbortSignal, start: (id: number) => T | null | Promise<T | null>): T | Promise<T> {
    if (signal.aborted) return Promise.reject(signal.reason)
    this.#abortSeq = this.#abortSeq >= 0xffff_fffe ? 1 : this.#abortSeq + 1
    const id = this.#abortSeq
    const onAbort = (): void => this.#native.abort(id)
    signal.addEventListener('abort', onAbort, { once: true })
    const done = (v: T | null): T => {
      signal.removeEventListener('abort', onAbort)
      if (v === null || signal.aborted) throw signal.reason
      return v
    }
    let r: T | null | Promise<T | null>
    try {
      r = start(id)
    } catch (e) {
      signal.removeEventListener('abort', onAbort)
      throw e
    }
    if (!(r instanceof Promise)) {
      try {
        return done(r)
      } catch (e) {
        return Promise.reject(e)
      }
    }
    return r.then(done, (e) => {
      signal.removeEventListener('abort', onAbort)
      throw e
    })
  }

  // ---- answers -------------------------------------------------------------------------------

  /**
   * Answers a pending request. The first valid response wins; a rejected one leaves the request
   * as it was. Edited `arguments` are converted strictly, as a call's (see {@link Gate.confirm});
   * optional fields left `undefined` are absent.
   * @returns the request's outcome (`'approved'` or `'denied'`).
   * @throws {@link SignoffError} `unknown_request`, `already_resolved`, `expired`, `mismatch`,
   *   `edits_not_allowed`, `invalid_arguments`, `unauthorized`, `malformed`, `closed`.
   */
  respond(response: ConfirmationResponseInput): Outcome {
    const [json, args] = this.#responseArgs(response)
    try {
      return this.#native.respond(json, args)
    } catch (e) {
      throw toSignoffError(e)
    }
  }

  /**
   * {@link respond} without holding the JavaScript thread while the answer is recorded: with a
   * durable store (`storePath`, `storeUrl`) the commit or database round trip happens on the
   * addon's threads and the promise settles once the answer is recorded; with the in-memory
   * store it settles at once. Same outcome and errors as {@link respond} (as a rejection). The
   * answer stands whether or not the promise is awaited.
   */
  async respondAsync(response: ConfirmationResponseInput): Promise<Outcome> {
    const [json, args] = this.#responseArgs(response)
    try {
      return await this.#native.respondAsync(json, args)
    } catch (e) {
      throw toSignoffError(e)
    }
  }

  /** A response checked as {@link respond} takes it: the core's JSON and the edited arguments. */
  #responseArgs(response: ConfirmationResponseInput): [string, string | undefined] {
    const shape = RESPONSE
    const r = fields(response, shape)
    const checked: Record<string, unknown> = {
      // @generated begin response-checks (core/tests/sourcegen.rs, from the core's `ConfirmationResponse`)
      id: reqString(r, 'id', shape, ': the id of the request it answers (req.id)'),
      decision: reqEnum(r, 'decision', shape, DECISIONS),
      scope: optEnum(r, 'scope', shape, SCOPES),
      reason: optString(r, 'reason', shape),
      responder: optString(r, 'responder', shape),
      tool: optString(r, 'tool', shape),
      argumentsDigest: optString(r, 'argumentsDigest', shape),
      sessionId: optString(r, 'sessionId', shape),
      atMs: optNumber(r, 'atMs', shape, 'a whole number of epoch milliseconds', { whole: true }),
      // @generated end response-checks
    }
    optEnum(r, 'type', shape, ['confirmation-response'])
    return [fieldsToJson(checked, camelToSnake, 'the response'), toJson(r.arguments, 'arguments', 'edited arguments')]
  }

  /**
   * Answers a pending request with a response in the core's JSON form (snake_case fields, e.g.
   * from a remote UI). Parsed strictly: a repeated key (`{"decision": "deny", "decision":
   * "approve"}`), a number that is not finite, or edited arguments nested deeper than
   * `MAX_NESTING` levels (the response object around them is the one level more the text may
   * have, so the boundary is the same as for {@link respond}'s object form) is `malformed`, and
   * the request stays pending. Same errors as {@link respond}.
   */
  respondJson(json: string): Outcome {
    checkParam(json, 'json', 'respondJson')
    try {
      return this.#native.respondJson(json)
    } catch (e) {
      throw toSignoffError(e)
    }
  }

  // ---- remote approval (signed tokens) -------------------------------------------------------

  /**
   * Issues a signed approval token for a pending request, meant for `approver` only: the link
   * a remote UI (browser, phone, chat) answers with through {@link respondToken}. It binds the
   * request id, tool, argument digest, session and approver, and expires at the request's
   * deadline (or sooner, with `tokenTtlMs`). The token is never written to the audit log (its
   * issue is, with the approver). Treat it as a credential.
   * @throws {@link SignoffError} `config` (the gate has no `tokenKeys`), `malformed` (empty
   *   approver), `unknown_request` (an id that is not a UUID), `not_pending`.
   */
  issueToken(requestId: string, approver: string): string {
    checkParam(requestId, 'requestId', 'issueToken')
    checkParam(approver, 'approver', 'issueToken')
    try {
      return this.#native.issueToken(requestId, approver)
    } catch (e) {
      throw toSignoffError(e)
    }
  }

  /**
   * Verifies a token's key and signature and returns what it claims (which request, tool,
   * approver, expiry), for a UI that shows what a link is for. Expiry, approver and the
   * request's state are checked by {@link respondToken}.
   * @throws {@link SignoffError} `config`, `malformed`, `unknown_key`, `bad_signature`.
   */
  inspectToken(token: string): TokenClaims {
    checkParam(token, 'token', 'inspectToken')
    try {
      return this.#native.inspectToken(token)
    } catch (e) {
      throw toSignoffError(e)
    }
  }

  /**
   * An approval marker for a call a person approved through this gate: send it with the call to
   * the next signoff gate it reaches, so the person is not asked twice. For an MCP server behind
   * `signoff mcp-proxy` (configured with the same `tokenKeys`), put it in the request's `_meta`
   * under {@link MARKER_META_KEY}:
   *
   * ```ts
   * const decision = await gate.confirm({ tool: 'fs__write_file', arguments: args })
   * if (decision.approved) {
   *   const marker = gate.approvalMarker('fs__write_file', decision)
   *   await client.callTool({ name: 'fs__write_file', arguments: decision.arguments, _meta: { [MARKER_META_KEY]: marker } })
   * }
   * ```
   *
   * It names `tool` (as the receiving gate knows it), the digest of the arguments approved to run
   * (`decision.arguments`, an edit included), who approved and the request; signed with the
   * gate's `tokenKeys`, accepted once, expires after a minute. One marker per request.
   * @throws {@link SignoffError} `config` (no `tokenKeys`), `malformed` (not a person's approval:
   *   denied, timed out, cancelled, not gated; or an empty tool), `already_used` (a marker was
   *   already issued for this request), `mismatch`.
   */
  approvalMarker(tool: string, decision: Decision): string {
    checkParam(tool, 'tool', 'approvalMarker')
    if (decision === null || typeof decision !== 'object') {
      throw new SignoffError('malformed payload: approvalMarker: `decision` must be a decision from gate.confirm', 'malformed')
    }
    try {
      return this.#native.approvalMarker(tool, coreDecisionJson(decision))
    } catch (e) {
      throw toSignoffError(e)
    }
  }

  /**
   * Accepts an approval marker from {@link approvalMarker} (a gate with the same keys) for a call
   * to `tool` with `args`, once; returns what it claims. On any error, ask a person as if there
   * were no marker. Acceptances and refusals are audited. With a durable store (`storePath`,
   * `storeUrl`) the acceptance is kept in it too: a replay is refused after a restart, and by
   * every gate sharing the store.
   * @throws {@link SignoffError} `malformed`, `unknown_key`, `bad_signature`, `token_expired`,
   *   `mismatch` (another tool or other arguments), `already_used`, `config`, `store` (the store
   *   could not record it).
   */
  acceptApprovalMarker(marker: string, tool: string, args: unknown): MarkerClaims {
    checkParam(marker, 'marker', 'acceptApprovalMarker')
    checkParam(tool, 'tool', 'acceptApprovalMarker')
    try {
      return this.#native.acceptApprovalMarker(marker, tool, toJson(args, 'arguments'))
    } catch (e) {
      throw toSignoffError(e)
    }
  }

  /**
   * Answers a pending request with a signed token, presented by `response.approver` (as your
   * server authenticated them). An approval runs exactly the arguments stored with the request,
   * or a validated edit where the tool allows it. A token answers once.
   * @returns the request's outcome (`'approved'` or `'denied'`).
   * @throws {@link SignoffError}, in the order checked: `closed`, `config`, `malformed`,
   *   `unknown_key`, `bad_signature`, `token_expired`, `wrong_approver`, `already_used`,
   *   `not_pending`, then what {@link respond} checks (`unauthorized` from `approvers` /
   *   `forbidSelfApproval`, `edits_not_allowed`, `invalid_arguments`). A rejected token changes
   *   nothing and is audited.
   */
  respondToken(token: string, response: TokenResponseInput): Outcome {
    checkParam(token, 'token', 'respondToken')
    const args = tokenArgs(response)
    try {
      return this.#native.respondToken(token, ...args)
    } catch (e) {
      throw toSignoffError(e)
    }
  }

  /**
   * {@link respondToken} without holding the JavaScript thread while the answer is recorded, as
   * {@link respondAsync} does for {@link respond}. Same outcome and errors (as a rejection).
   */
  async respondTokenAsync(token: string, response: TokenResponseInput): Promise<Outcome> {
    checkParam(token, 'token', 'respondTokenAsync')
    const args = tokenArgs(response)
    try {
      return await this.#native.respondTokenAsync(token, ...args)
    } catch (e) {
      throw toSignoffError(e)
    }
  }

  // ---- approval console ----------------------------------------------------------------------

  /**
   * Starts the browser approval console for this gate (the crate `signoff-console`) on its own
   * thread; resolves once it listens (starting runs off the JavaScript thread). The gate needs
   * `tokenKeys`: every decision made in the page is submitted as a signed approval token, and
   * the gate's `approvers` accept or refuse it. The console counts as an approver: while it
   * runs, gated calls wait for a person until their deadline. See {@link Console}.
   *
   * @example
   * ```ts
   * const gate = new Gate({ tokenKeys: new TokenKeys('k1', Secret.generate()) })
   * const console_ = await gate.serveConsole({ title: 'approvals' })
   * sendToAlice(console_.signInLink('alice')) // http://127.0.0.1:PORT/login#token=...
   * // ... the agent runs; Alice approves in her browser ...
   * await console_.close()
   * ```
   * @throws {@link SignoffError} `config` (rejects): the gate has no `tokenKeys`; an unknown
   *   option or one of the wrong type; `bind` is not an address, or not loopback without
   *   `allowRemote`, or cannot be bound; a bad `publicOrigin`; short or duplicate approver keys;
   *   both `approverKeys` and `approverKeysFile`; an unreadable keys file.
   */
  async serveConsole(options: ConsoleOptions = {}): Promise<Console> {
    const json = consoleOptionsJson(options)
    try {
      return wrapConsole(await this.#native.serveConsole(json), this)
    } catch (e) {
      throw toSignoffError(e)
    }
  }

  // ---- durable store -------------------------------------------------------------------------

  /**
   * A request's stored record in any state (`pending`, `approved`, `executing`, `done`, ...),
   * with the tool's result once `done`. Only a durable store (`storePath`, `storeUrl`) keeps
   * records; otherwise, and after {@link close}, `undefined`.
   * @throws {@link SignoffError} `unknown_request`: `requestId` is not a UUID (no request has it).
   */
  record(requestId: string): StoredRecord | undefined {
    checkParam(requestId, 'requestId', 'record')
    let r: string | null
    try {
      r = this.#native.record(requestId)
    } catch (e) {
      throw toSignoffError(e)
    }
    return r === null ? undefined : (JSON.parse(r) as StoredRecordData)
  }

  /**
   * Picks up what an earlier process left in the durable store (`storePath`; with `storeUrl`,
   * the unfinished requests of this gate's `storeOwner`). Call it once, after registering tools
   * and before the first call.
   *
   * - A pending request whose deadline has not passed waits again until that same deadline, is
   *   published again (request listeners and event streams registered before `recover()` see
   *   it), and can be answered here
   *   or with a token issued before the restart. Once approved, its tool's executor runs once
   *   and the result is stored ({@link record}).
   * - A pending request whose deadline passed is resolved as timed out.
   * - An approved or executing request becomes `interrupted` and is never run again: the tool
   *   may have run, and running it twice is worse than reporting it.
   *
   * With `denyWhenUnobserved` (the default), restored requests are cancelled at once when
   * nobody listens: durable, remotely approved setups use `denyWhenUnobserved: false`. Like a
   * confirmation in flight, an unfinished restored request keeps the process alive (until it
   * resolves, or {@link close}).
   * @throws {@link SignoffError} `config` (called twice, or after the first call), `store`.
   */
  recover(): Recovery {
    let r: RecoveryData
    try {
      r = JSON.parse(this.#native.recover()) as RecoveryData
    } catch (e) {
      throw toSignoffError(e)
    }
    return {
      restored: r.restored.map((d) => PendingRequest.from(d, this.#native)),
      timedOut: r.timedOut,
      interrupted: r.interrupted,
      notRestored: r.notRestored,
    }
  }

  /**
   * Cancels one pending request (reported as `cancelled` / `aborted`). Returns whether it was pending.
   * @throws {@link SignoffError} `unknown_request`: `id` is not a UUID (no request has it).
   */
  cancelRequest(id: string): boolean {
    checkParam(id, 'id', 'cancelRequest')
    try {
      return this.#native.cancelRequest(id)
    } catch (e) {
      throw toSignoffError(e)
    }
  }

  /**
   * Every pending request, oldest first. This copies the whole list in one synchronous call
   * (with a million pending, seconds during which the event loop is blocked): where many
   * requests may be pending (a UI that opens late, a re-sync after a lag), read them in pages
   * with {@link pendingPage} or iterate them with {@link pendingAll}.
   */
  pending(): PendingRequest[] {
    return this.#requests(this.#native.pending())
  }

  /** Requests from the addon: JSON arrays of their data, concatenated in order. */
  #requests(chunks: string[]): PendingRequest[] {
    const out: PendingRequest[] = []
    for (const chunk of chunks) {
      for (const d of JSON.parse(chunk) as ConfirmationRequestData[]) out.push(PendingRequest.from(d, this.#native))
    }
    return out
  }

  /**
   * One page of pending requests, oldest first (by creation time, then id): up to `limit`
   * (default 1,000) after the cursor `after` (from the oldest when it is left out). Pass the
   * page's `next` as `after` to read the next page; `next` is `null` on the last page. Each
   * page costs O(limit) however many requests are pending, and paging neither skips nor repeats
   * a request that stays pending (requests made meanwhile come on a later page; answered ones
   * drop out).
   *
   * @example
   * ```ts
   * for (let after: string | undefined; ; ) {
   *   const page = gate.pendingPage({ after, limit: 500 })
   *   page.requests.forEach(show)
   *   if (page.next === null) break
   *   after = page.next
   * }
   * ```
   * @throws {@link SignoffError} `malformed`: `after` is not a cursor from an earlier page (or a
   *   lag's `more`), `limit` is not a whole number from 1 to 2^32 - 1, or an option is unknown.
   */
  pendingPage(options: PendingPageOptions = {}): PendingPage {
    const { after, limit } = fields(options, PAGE_OPTIONS)
    if (after !== undefined && typeof after !== 'string') {
      throw new SignoffError(
        `malformed payload: after must be a cursor string (an earlier page's next, or a lag's more), or left out to start from the oldest; not ${show(after)}`,
        'malformed',
      )
    }
    let page: PendingPageData
    try {
      page = this.#native.pendingPage(after, pageSize(limit, 'limit'))
    } catch (e) {
      throw toSignoffError(e)
    }
    return { requests: this.#requests(page.requests), next: page.next ?? null }
  }

  /**
   * Every pending request, oldest first, as an async iterator: `for await (const req of
   * gate.pendingAll())`. Reads them a page at a time ({@link pendingPage}, `pageSize` each,
   * default 1,000) and lets the event loop run between pages, so it never blocks for long
   * however many are pending. Requests made while iterating come later in the iteration;
   * requests answered meanwhile may still be yielded (check {@link PendingRequest.isPending}).
   * @throws {@link SignoffError} `malformed` (at once): `pageSize` is not a whole number from 1
   *   to 2^32 - 1, or an option is unknown.
   */
  pendingAll(options: PendingAllOptions = {}): AsyncIterableIterator<PendingRequest> {
    return this.#pages(pageSize(fields(options, ALL_OPTIONS).pageSize, 'pageSize'))
  }

  async *#pages(limit: number | undefined): AsyncGenerator<PendingRequest, undefined, undefined> {
    let after: string | undefined
    for (;;) {
      const page = this.pendingPage({ after, limit })
      yield* page.requests
      if (page.next === null) return undefined
      after = page.next
      await new Promise<void>((resolve) => setImmediate(resolve))
    }
  }

  /** How many requests are pending. */
  get pendingCount(): number {
    return this.#native.pendingCount
  }

  /**
   * How many approvers are attached: the `confirmation-request` listeners (together, one) and
   * each open {@link events} stream. Observers ({@link observe} streams, listeners of the other
   * events) do not count. 0 once the gate is closed (nothing is asked any more).
   */
  get approverCount(): number {
    return this.#native.approverCount
  }

  /** The tools granted for a session (approved with `scope: 'session'`), sorted. */
  grants(sessionId: string): string[] {
    checkParam(sessionId, 'sessionId', 'grants')
    return this.#native.grants(sessionId)
  }

  /** Revokes a session grant. Returns whether one existed. */
  revokeGrant(sessionId: string, tool: string): boolean {
    checkParam(sessionId, 'sessionId', 'revokeGrant')
    checkParam(tool, 'tool', 'revokeGrant')
    return this.#native.revokeGrant(sessionId, tool)
  }

  /** Ends a session: drops its grants and cancels its pending requests. Returns how many. */
  endSession(sessionId: string): number {
    checkParam(sessionId, 'sessionId', 'endSession')
    return this.#native.endSession(sessionId)
  }

  /** True when gating is disabled (development only). */
  get gatingDisabled(): boolean {
    return this.#native.gatingDisabled
  }

  // ---- events --------------------------------------------------------------------------------

  /**
   * A stream of this gate's events, from now on, in order. Requests come as
   * {@link PendingRequest}s (answerable). A lag (the consumer fell more than `busCapacity` events
   * behind) is yielded as a {@link LaggedEvent}: the oldest pending requests (at most 1,000) and,
   * when more are pending, a cursor (`more`) to read the rest with {@link pendingPage}.
   *
   * The stream is an **approver** while open (it can answer the requests it yields): with
   * `denyWhenUnobserved`, a request is cancelled at once (`no-approver`) only when no request
   * listener and no such stream is left. A log, a metrics hook or a display that never answers
   * uses {@link observe} instead.
   *
   * @param options.types only these event types (e.g. `['confirmation-request']` for an approver
   *   UI that needs nothing else); a lag is always yielded.
   */
  events(options?: EventStreamOptions): EventStream {
    return this.#stream(streamTypes(options, 'events'), false)
  }

  /**
   * {@link events} for an **observer**: the same events in the same order, but the stream never
   * counts as someone who can answer, so it never keeps a call waiting for nobody (with
   * `denyWhenUnobserved`, a request made while only observers are attached is cancelled at once,
   * `no-approver`). For loggers, metrics and displays.
   *
   * @example
   * ```ts
   * for await (const e of gate.observe({ types: ['confirmation-resolved'] })) log(e.tool, e.outcome)
   * ```
   */
  observe(options?: EventStreamOptions): EventStream {
    return this.#stream(streamTypes(options, 'observe'), true)
  }

  #stream(types: EventStreamOptions['types'], observe: boolean): EventStream {
    const s = new EventStream(this.#native, types, observe)
    if (this.#native.isClosed) s.close()
    return s
  }

  /** True once {@link close} was called. */
  get closed(): boolean {
    return this.#closing !== undefined || this.#native.isClosed
  }

  /**
   * Shuts the gate down: every pending request is cancelled (`shutdown`; the tools do not run),
   * every later call that needs approval is cancelled at once (a session grant or
   * `dangerouslyDisableGating` no longer lets one through; a tool that needs no approval still
   * runs), later answers fail with `closed`, the audit log is
   * flushed, a durable store is closed (another gate may open the file), and the gate's native
   * resources are released (nothing keeps the process alive). A tool still running is not
   * interrupted (as in every language): the `signal` it was given is aborted, so it can stop
   * early, and its call resolves with the tool's own result once it settles (its audit record
   * is written; with a durable store, which is closed now, a restart reports it `interrupted`).
   * A tool that never settles leaves its call pending, as awaiting the tool itself would, and
   * does not keep the process alive.
   * Event streams end after delivering the final events. Idempotent.
   */
  close(): Promise<void> {
    if (!this.#closing) this.#closed.abort()
    this.#closing ??= Promise.resolve(this.#native.close()).then(() => {
      this.#stopPump()
      this.#handlerOn = false
    })
    return this.#closing
  }

  /** Waits until every audit record so far is on disk. */
  flushAudit(): Promise<void> {
    return Promise.resolve(this.#native.flushAudit())
  }

  // ---- listeners -----------------------------------------------------------------------------
  // EventEmitter semantics, plus: the first `confirmation-request` listener attaches the core's
  // inline approver (`Gate::on_request_inline`). Removing the last one detaches it:
  // - at once when it is removed from outside the listeners (`off()` while a listener's promise
  //   is pending): the requests it was handling end now instead of waiting for their deadline,
  //   `no-approver` (the core's reason when nobody is left who can answer) when it was the last
  //   approver, else `approval-failed`;
  // - once the pending listeners have settled when a listener removes itself while it is being
  //   called (`once()`, or `off()` inside the listener), so that it can still answer.
  // The first listener of another event type subscribes to the bus as an observer, the last one
  // unsubscribes.
  // An event name a gate never emits is refused (`malformed`, listing the names): a typo'd
  // request listener would leave requests unobserved, and so cancelled at once. EventEmitter's
  // own events (`newListener`, `removeListener`, `error`, `events.errorMonitor`) are accepted, so
  // `events.once(gate, ...)` and `events.on(gate, ...)` work.

  override on(event: string | symbol, listener: (...args: any[]) => void): this {
    checkEvent(event, 'on', errorMonitor)
    checkListener(listener, 'on')
    super.on(event, listener)
    this.#listening(event)
    return this
  }
  override addListener(event: string | symbol, listener: (...args: any[]) => void): this {
    checkEvent(event, 'addListener', errorMonitor)
    checkListener(listener, 'addListener')
    super.addListener(event, listener)
    this.#listening(event)
    return this
  }
  override prependListener(event: string | symbol, listener: (...args: any[]) => void): this {
    checkEvent(event, 'prependListener', errorMonitor)
    checkListener(listener, 'prependListener')
    super.prependListener(event, listener)
    this.#listening(event)
    return this
  }
  override once(event: string | symbol, listener: (...args: any[]) => void): this {
    checkEvent(event, 'once', errorMonitor)
    checkListener(listener, 'once')
    super.once(event, listener)
    this.#listening(event)
    return this
  }
  override prependOnceListener(event: string | symbol, listener: (...args: any[]) => void): this {
    checkEvent(event, 'prependOnceListener', errorMonitor)
    checkListener(listener, 'prependOnceListener')
    super.prependOnceListener(event, listener)
    this.#listening(event)
    return this
  }
  override off(event: string | symbol, listener: (...args: any[]) => void): this {
    checkEvent(event, 'off', errorMonitor)
    checkListener(listener, 'off')
    const abandon = this.#abandons(event, () => super.off(event, listener))
    queueMicrotask(() => this.#unlistening(event, abandon()))
    return this
  }
  override removeListener(event: string | symbol, listener: (...args: any[]) => void): this {
    checkEvent(event, 'removeListener', errorMonitor)
    checkListener(listener, 'removeListener')
    const abandon = this.#abandons(event, () => super.removeListener(event, listener))
    queueMicrotask(() => this.#unlistening(event, abandon()))
    return this
  }
  override removeAllListeners(event?: string | symbol): this {
    // Not `super.removeAllListeners(undefined)`: EventEmitter removes everything only when
    // called without an argument.
    if (event !== undefined) checkEvent(event, 'removeAllListeners', errorMonitor)
    const abandon = this.#abandons(event ?? REQUEST, () =>
      event === undefined ? super.removeAllListeners() : super.removeAllListeners(event),
    )
    queueMicrotask(() => {
      this.#unlistening(REQUEST, abandon())
      this.#unlistening('lagged')
    })
    return this
  }

  #listening(event: string | symbol): void {
    if (event === REQUEST) this.#requestListenersAdded++
    if (this.#native.isClosed) return
    if (event === REQUEST) {
      if (!this.#handlerOn) {
        this.#native.setRequestHandler(this.#dispatch)
        this.#handlerOn = true
      }
    } else if (BUS_EVENTS.has(event)) {
      this.#startPump()
    }
  }

  /**
   * Runs `remove`; true when it removed the last `confirmation-request` listener from outside
   * the listeners' own calls (then the runs in flight are abandoned: see `#unlistening`).
   */
  #removesLastRequestListener(event: string | symbol, remove: () => void): boolean {
    const before = this.listenerCount(REQUEST)
    remove()
    return event === REQUEST && this.#calling === 0 && before > 0 && this.listenerCount(REQUEST) === 0
  }

  /**
   * Runs `remove`; the answer, asked later (in the microtask that acts on the removal), to
   * "abandon the runs in flight?": yes when it removed the last request listener from outside
   * their own calls and no request listener has been added since (one added meanwhile, even a
   * `once` listener gone again after taking a request, makes it a swap: runs go on).
   */
  #abandons(event: string | symbol, remove: () => void): () => boolean {
    const added = this.#requestListenersAdded
    const last = this.#removesLastRequestListener(event, remove)
    return () => last && this.#requestListenersAdded === added
  }

  #unlistening(event: string | symbol, abandon = false): void {
    if (event === REQUEST) {
      if (abandon && this.#handlerOn && this.listenerCount(REQUEST) === 0) this.#stopHandler()
      else this.#maybeStopHandler()
    } else if (BUS_EVENTS.has(event)) {
      for (const e of BUS_EVENTS) if (this.listenerCount(e) > 0) return
      this.#stopPump()
    }
  }

  #maybeStopHandler(): void {
    if (this.#handlerOn && this.#inFlight === 0 && this.listenerCount(REQUEST) === 0) this.#stopHandler()
  }

  /**
   * Detaches the core's inline approver. Runs still in flight are abandoned: the addon ends the
   * requests they were handling at once (`no-approver` when the listeners were the gate's last
   * approver, else `approval-failed`), and their listeners settling later changes nothing.
   */
  #stopHandler(): void {
    this.#handlerOn = false
    if (this.#inFlight > 0) {
      this.#inFlight = 0
      this.#handlerGen++
    }
    if (!this.#native.isClosed) this.#native.setRequestHandler(null)
  }

  /** Runs the `confirmation-request` listeners for requests the core hands over. */
  readonly #dispatch = (token: number, id: string, tool: string, argsJson: string, rest: string): null | string | undefined =>
    this.#run(token, new PendingRequest(this.#native, id, tool, JSON.parse(argsJson), rest, argsJson, token))

  /**
   * Runs the listeners: `null` when all returned, the first failure's message when one threw,
   * `undefined` when some returned promises (`finishRequest` follows when they settle).
   */
  #run(token: number, req: PendingRequest): null | string | undefined {
    const listeners = this.rawListeners(REQUEST) as Array<(r: PendingRequest) => unknown>
    let failed = false
    let failure: unknown
    let waits: PromiseLike<unknown>[] | undefined
    this.#calling++
    try {
      for (const l of listeners) {
        try {
          const r = l.call(this, req)
          if (isThenable(r)) (waits ??= []).push(r)
        } catch (e) {
          if (!failed) {
            failed = true
            failure = e
          }
        }
      }
    } finally {
      this.#calling--
    }
    if (!waits) return failed ? describe(failure) : null
    this.#inFlight++
    const gen = this.#handlerGen
    if (waits.length === 1 && !failed) {
      waits[0]!.then(
        () => this.#finish(token, gen, false, undefined),
        (e: unknown) => this.#finish(token, gen, true, e),
      )
      return undefined
    }
    Promise.allSettled(waits).then((results) => {
      for (const r of results) {
        if (r.status === 'rejected' && !failed) {
          failed = true
          failure = r.reason
        }
      }
      this.#finish(token, gen, failed, failure)
    })
    return undefined
  }

  #finish(token: number, gen: number, failed: boolean, failure: unknown): void {
    // Abandoned when the handler stopped (the last listener was removed): its request has ended.
    if (gen !== this.#handlerGen) return
    this.#inFlight--
    // If no listener answered, the core now ends the request as cancelled (approval-failed).
    this.#native.finishRequest(token, failed ? describe(failure) : undefined)
    this.#maybeStopHandler()
  }

  #startPump(): void {
    if (this.#pump) return
    // An observer: these listeners never answer. Requests go to the request listeners through
    // the core's inline approver, not through here.
    const sub = this.#native.subscribe(['confirmation-response', 'confirmation-timeout', 'confirmation-resolved'], true)
    this.#pump = sub
    Gate.#pumpLoop(new WeakRef(this), sub).catch((e) =>
      process.nextTick(() => {
        throw e
      }),
    )
  }

  /**
   * Emits bus events to `on()` listeners. Holds the gate weakly: an unreferenced gate is collected.
   * The gate is only held by {@link Gate.#emitBatch}, never across the `await` (an async
   * function's frame would keep it, and with it the gate, its thread and its store's lock).
   */
  static async #pumpLoop(ref: WeakRef<Gate>, sub: NativeSubscription): Promise<void> {
    for (;;) {
      const batch = await sub.next(256)
      if (batch === null || !Gate.#emitBatch(ref, sub, batch)) return
    }
  }

  /** Emits one batch; false when the gate is gone or its pump was replaced. */
  static #emitBatch(ref: WeakRef<Gate>, sub: NativeSubscription, batch: Parameters<typeof wrapBatch>[0]): boolean {
    const gate = ref.deref()
    if (gate === undefined || gate.#pump !== sub) return false
    for (const event of wrapBatch(batch, gate.#native)) {
      if (event.type === REQUEST) continue
      try {
        if (event.type === 'lagged' && gate.listenerCount('lagged') === 0) {
          process.emitWarning(`signoff: an event listener lagged and missed ${(event as LaggedEvent).missed} events`, 'SignoffLagWarning')
        }
        gate.emit(event.type, event)
      } catch (e) {
        // Same as a throwing listener on any emitter: an uncaught exception.
        process.nextTick(() => {
          throw e
        })
      }
    }
    return true
  }

  #stopPump(): void {
    const sub = this.#pump
    this.#pump = undefined
    sub?.close()
  }
}

/** Typed listeners. */
export interface Gate {
  on(event: 'confirmation-request', listener: (request: PendingRequest) => unknown): this
  on(event: 'confirmation-response', listener: (event: ConfirmationResponseEvent) => void): this
  on(event: 'confirmation-timeout', listener: (event: ConfirmationTimeoutEvent) => void): this
  on(event: 'confirmation-resolved', listener: (event: ConfirmationResolvedEvent) => void): this
  on(event: 'lagged', listener: (event: LaggedEvent) => void): this
  on(event: string | symbol, listener: (...args: any[]) => void): this
  once(event: 'confirmation-request', listener: (request: PendingRequest) => unknown): this
  once(event: 'confirmation-response', listener: (event: ConfirmationResponseEvent) => void): this
  once(event: 'confirmation-timeout', listener: (event: ConfirmationTimeoutEvent) => void): this
  once(event: 'confirmation-resolved', listener: (event: ConfirmationResolvedEvent) => void): this
  once(event: 'lagged', listener: (event: LaggedEvent) => void): this
  once(event: string | symbol, listener: (...args: any[]) => void): this
  addListener(event: 'confirmation-request', listener: (request: PendingRequest) => unknown): this
  addListener(event: string | symbol, listener: (...args: any[]) => void): this
  off(event: 'confirmation-request', listener: (request: PendingRequest) => unknown): this
  off(event: string | symbol, listener: (...args: any[]) => void): this
  removeListener(event: 'confirmation-request', listener: (request: PendingRequest) => unknown): this
  removeListener(event: string | symbol, listener: (...args: any[]) => void): this
}


/** A decision in the core's JSON form (snake_case keys), as the native side reads it. */
function coreDecisionJson(d: Decision): string {
  const { requestId, timeoutMs, approved: _approved, cancelReason: _cancelReason, ...rest } = d as Decision & {
    requestId?: string
    timeoutMs?: number
    cancelReason?: string
  }
  const core: Record<string, unknown> = { ...rest }
  if (requestId !== undefined) core.request_id = requestId
  if (timeoutMs !== undefined) core.timeout_ms = timeoutMs
  for (const k of Object.keys(core)) if (core[k] === undefined) delete core[k]
  return toJson(core, 'decision') ?? '{}'
}
const parseResult = (s: string): ToolResult => new ToolResult(JSON.parse(s) as ToolResultData)
const parseResults = (s: string): ToolResult[] => (JSON.parse(s) as ToolResultData[]).map((d) => new ToolResult(d))

export type { GateEvent, DecisionData }
