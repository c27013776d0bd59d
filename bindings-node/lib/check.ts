// Checks of what the user writes (option objects, calls, responses, tool definitions, event
// names, string parameters) before anything reaches the addon: a mistake is refused at once with
// a `SignoffError` naming the field as the user wrote it and listing the valid ones in Node's
// names, never accepted and lost, and never reported as a napi conversion of a Rust type or
// under a snake_case name the user never wrote.
import { SignoffError, type ErrorCode } from './errors'

/** A `SignoffError('malformed')` with the core's prefix. @internal */
export function malformed(message: string): SignoffError {
  return new SignoffError(`malformed payload: ${message}`, 'malformed')
}

/** A value, briefly, for an error message. @internal */
export function show(v: unknown): string {
  switch (typeof v) {
    case 'string':
      return JSON.stringify(v.length > 60 ? `${v.slice(0, 57)}...` : v)
    case 'bigint':
      return `${v}n`
    case 'number':
    case 'boolean':
    case 'undefined':
      return String(v)
    case 'symbol':
      return `a symbol (${v.toString()})`
    case 'function':
      return 'a function'
    default:
      if (v === null) return 'null'
      return Array.isArray(v) ? 'an array' : 'an object'
  }
}

const list = (names: readonly string[]): string => names.join(', ')

/** Lower case without separators: `session_id`, `sessionID` and `sessionId` are one name. */
const squash = (s: string): string => s.toLowerCase().replace(/[-_\s]/g, '')

/** Edit distance, a swap of two neighbours counting as one edit (`scpoe` is one from `scope`). */
function distance(a: string, b: string): number {
  const d: number[][] = Array.from({ length: a.length + 1 }, (_, i) =>
    Array.from({ length: b.length + 1 }, (_, j) => (i === 0 ? j : j === 0 ? i : 0)),
  )
  for (let i = 1; i <= a.length; i++) {
    for (let j = 1; j <= b.length; j++) {
      const row = d[i]!
      const cost = a[i - 1] === b[j - 1] ? 0 : 1
      row[j] = Math.min(d[i - 1]![j]! + 1, row[j - 1]! + 1, d[i - 1]![j - 1]! + cost)
      if (i > 1 && j > 1 && a[i - 1] === b[j - 2] && a[i - 2] === b[j - 1]) row[j] = Math.min(row[j]!, d[i - 2]![j - 2]! + 1)
    }
  }
  return d[a.length]![b.length]!
}

/**
 * The valid name `word` was probably meant to be: an alias (another binding's or API's name for
 * it), the same name in another case or with other separators, or one within a typo or two.
 */
function suggest(word: string, valid: readonly string[], aliases?: Readonly<Record<string, string>>): string | undefined {
  const alias = aliases && Object.prototype.hasOwnProperty.call(aliases, word) ? aliases[word] : undefined
  if (alias !== undefined) return alias
  const w = squash(word)
  const same = valid.find((v) => squash(v) === w)
  if (same !== undefined) return same
  let best: string | undefined
  let bestD = Infinity
  for (const v of valid) {
    const d = distance(w, squash(v))
    if (d < bestD) {
      best = v
      bestD = d
    }
  }
  return bestD <= Math.max(1, Math.min(3, Math.floor(w.length / 3))) ? best : undefined
}

/** A plain record: an object that is neither null nor an array. */
export const isRecord = (v: unknown): v is Record<string, unknown> =>
  v !== null && typeof v === 'object' && !Array.isArray(v)

/** What an object the user writes may hold. @internal */
export interface Shape {
  /** The object in messages: `the call`, `the tool definition`, `calls[2]`. */
  readonly what: string
  /** Its fields, in Node's names, in documentation order. */
  readonly fields: readonly string[]
  /** Names written for a field elsewhere (other bindings, the wire, model APIs): name -> field. */
  readonly aliases?: Readonly<Record<string, string>>
  /** Error code (default `malformed`). */
  readonly code?: ErrorCode
}

function fail(shape: Pick<Shape, 'code'>, message: string): SignoffError {
  const code = shape.code ?? 'malformed'
  return code === 'malformed' ? malformed(message) : new SignoffError(`configuration error: ${message}`, code)
}

/**
 * `o` as a record of `shape`'s fields: refused when it is not an object (`hint` says what it is),
 * or when it has a field that is not one of them. `undefined` is `{}` when `optional`.
 * @internal
 */
export function fields(o: unknown, shape: Shape, optional = false): Record<string, unknown> {
  if (o === undefined && optional) return {}
  if (!isRecord(o)) {
    throw fail(shape, `${shape.what} must be an object ({ ${list(shape.fields)} }), not ${show(o)}`)
  }
  for (const k of Object.keys(o)) {
    if (!shape.fields.includes(k)) throw unknownField(k, shape)
  }
  return o
}

function unknownField(k: string, shape: Shape): SignoffError {
  const s = suggest(k, shape.fields, shape.aliases)
  const mean = s === undefined ? '' : ` (did you mean \`${s}\`?)`
  return fail(shape, `unknown field \`${k}\` in ${shape.what}${mean}; its fields are ${list(shape.fields)}`)
}

/**
 * Refuses `v` for field `k` of `shape`, in the form of the JSON converter's refusals:
 * `` `k` of the call is <v>: it must be <expected> ``. @internal
 */
export function badField(shape: Pick<Shape, 'what' | 'code'>, k: string, expected: string, v: unknown): SignoffError {
  return fail(shape, `\`${k}\` of ${shape.what} is ${show(v)}: it must be ${expected}`)
}

/** Optional fields may be left out, `undefined` or `null`: all three are absent. */
const absent = (v: unknown): v is undefined | null => v === undefined || v === null

/** A required string field. @internal */
export function reqString(o: Record<string, unknown>, k: string, shape: Shape, hint = ''): string {
  const v = o[k]
  if (absent(v)) throw fail(shape, `\`${k}\` is missing from ${shape.what}${hint}`)
  if (typeof v !== 'string') throw badField(shape, k, 'a string', v)
  return v
}

/** An optional string field (`undefined` when absent). @internal */
export function optString(o: Record<string, unknown>, k: string, shape: Shape): string | undefined {
  const v = o[k]
  if (absent(v)) return undefined
  if (typeof v !== 'string') throw badField(shape, k, 'a string', v)
  return v
}

/** An optional boolean field. @internal */
export function optBool(o: Record<string, unknown>, k: string, shape: Shape): boolean | undefined {
  const v = o[k]
  if (absent(v)) return undefined
  if (typeof v !== 'boolean') throw badField(shape, k, 'a boolean', v)
  return v
}

/** An optional number field: finite, at least `min`, a whole number when `whole`, at most `max`. @internal */
export function optNumber(
  o: Record<string, unknown>,
  k: string,
  shape: Shape,
  expected: string,
  { min = 0, max = Number.MAX_SAFE_INTEGER, whole = false }: { min?: number; max?: number; whole?: boolean } = {},
): number | undefined {
  const v = o[k]
  if (absent(v)) return undefined
  if (typeof v !== 'number' || !Number.isFinite(v) || v < min || v > max || (whole && !Number.isInteger(v))) {
    throw badField(shape, k, expected, v)
  }
  return v
}

/** An optional field that is one of `values`. @internal */
export function optEnum<T extends string>(o: Record<string, unknown>, k: string, shape: Shape, values: readonly T[]): T | undefined {
  const v = o[k]
  if (absent(v)) return undefined
  if (typeof v !== 'string' || !(values as readonly string[]).includes(v)) {
    throw badField(shape, k, `one of ${values.map((x) => JSON.stringify(x)).join(', ')}`, v)
  }
  return v as T
}

/** A required field that is one of `values`. @internal */
export function reqEnum<T extends string>(o: Record<string, unknown>, k: string, shape: Shape, values: readonly T[]): T {
  if (absent(o[k])) {
    throw fail(shape, `\`${k}\` is missing from ${shape.what} (one of ${values.map((x) => JSON.stringify(x)).join(', ')})`)
  }
  return optEnum(o, k, shape, values)!
}

/** An optional array of strings; its items are named `k[i]`. @internal */
export function optStrings(o: Record<string, unknown>, k: string, shape: Shape): string[] | undefined {
  const v = o[k]
  if (absent(v)) return undefined
  if (!Array.isArray(v)) throw badField(shape, k, 'an array of strings', v)
  v.forEach((x, i) => {
    if (typeof x !== 'string') throw badField(shape, `${k}[${i}]`, 'a string', x)
  })
  return v as string[]
}

/** Throws unless `v` is a string parameter of `method`, naming it. @internal */
export function checkParam(v: unknown, name: string, method: string, code: ErrorCode = 'malformed'): asserts v is string {
  if (typeof v !== 'string') throw fail({ code }, `${method}: \`${name}\` is ${show(v)}: it must be a string`)
}

// ---- the shapes ------------------------------------------------------------------------------

/** The fields of a tool call ({@link ToolCall}). @internal */
export const CALL_FIELDS = ['tool', 'arguments', 'sessionId', 'callId', 'metadata'] as const

const CALL_ALIASES = {
  name: 'tool',
  toolName: 'tool',
  tool_name: 'tool',
  args: 'arguments',
  input: 'arguments',
  params: 'arguments',
  parameters: 'arguments',
  session: 'sessionId',
  id: 'callId',
  toolCallId: 'callId',
  tool_call_id: 'callId',
  toolUseId: 'callId',
  meta: 'metadata',
}

/** The call options (`confirm`, `execute`, `executeBatch`). @internal */
export const CALL_OPTIONS: Shape = { what: 'the call options', fields: ['signal'], aliases: { abortSignal: 'signal' } }

/** A model's tool-call object passed as is: the converter that makes it a call. */
function converterFor(o: Record<string, unknown>): string | undefined {
  if (isRecord(o.function) && o.tool === undefined) return 'an OpenAI tool call: convert it with fromOpenAIToolCall(toolCall)'
  if (o.type === 'function_call' && o.tool === undefined) {
    return 'an OpenAI Responses API function_call item: convert it with fromOpenAIToolCall(item)'
  }
  if (o.type === 'tool_use') return 'an Anthropic tool_use block: convert it with fromAnthropicToolUse(block)'
  if (typeof o.toolName === 'string' && o.tool === undefined) return 'a Vercel AI SDK tool call: convert it with fromAISDKToolCall(toolCall)'
  return undefined
}

/** A checked tool call. @internal */
export interface CheckedCall {
  tool: string
  arguments: unknown
  sessionId?: string
  callId?: string
  metadata: unknown
}

/** Checks a tool call the user wrote (`what`: `the call`, `calls[2]`). @internal */
export function checkCall(call: unknown, what = 'the call'): CheckedCall {
  const shape: Shape = { what, fields: CALL_FIELDS, aliases: CALL_ALIASES }
  if (isRecord(call)) {
    const model = converterFor(call)
    if (model !== undefined) throw malformed(`${what} is ${model}; a call is { ${list(CALL_FIELDS)} }`)
  }
  const o = fields(call, shape)
  return {
    tool: reqString(o, 'tool', shape, ": the tool's name, e.g. { tool: 'delete_file', arguments: { path: '/tmp/a' } }"),
    arguments: o.arguments,
    sessionId: optString(o, 'sessionId', shape),
    callId: optString(o, 'callId', shape),
    metadata: o.metadata,
  }
}

/** Checks the call options; returns the signal, if any. @internal */
export function checkCallOptions(options: unknown): AbortSignal | undefined {
  const o = fields(options, CALL_OPTIONS, true)
  const signal = o.signal
  if (absent(signal)) return undefined
  const s = signal as { aborted?: unknown; addEventListener?: unknown }
  if (typeof s !== 'object' || typeof s.aborted !== 'boolean' || typeof s.addEventListener !== 'function') {
    throw badField(CALL_OPTIONS, 'signal', 'an AbortSignal (e.g. new AbortController().signal)', signal)
  }
  return signal as AbortSignal
}

// ---- event names -----------------------------------------------------------------------------

/** The events a gate emits, in Node's order of a request's life. @internal */
export const GATE_EVENTS = [
  'confirmation-request',
  'confirmation-response',
  'confirmation-timeout',
  'confirmation-resolved',
  'lagged',
] as const

/** EventEmitter's own events (and what `events.once` / `events.on` listen to). */
const EMITTER_EVENTS = ['newListener', 'removeListener', 'error'] as const
const VALID_EVENTS: ReadonlySet<string | symbol> = new Set<string | symbol>([...GATE_EVENTS, ...EMITTER_EVENTS])

/**
 * Refuses an event name a gate never emits (`malformed`, listing the names): a typo'd request
 * listener would otherwise leave every request unobserved, and so cancelled at once. The
 * EventEmitter's own events (`newListener`, `removeListener`, `error`, `events.errorMonitor`)
 * are accepted. @internal
 */
export function checkEvent(event: unknown, method: string, errorMonitor: symbol): void {
  if (VALID_EVENTS.has(event as string) || event === errorMonitor) return
  const valid = GATE_EVENTS.map((e) => JSON.stringify(e))
  const s = typeof event === 'string' ? suggest(event, [...GATE_EVENTS, ...EMITTER_EVENTS]) : undefined
  const mean = s === undefined ? '' : ` (did you mean ${JSON.stringify(s)}?)`
  const name = typeof event === 'string' ? JSON.stringify(event) : show(event)
  throw malformed(
    `unknown event ${name} in gate.${method}()${mean}: a Gate emits ${list(valid)} (and, as every EventEmitter, ` +
      '"newListener", "removeListener" and "error")',
  )
}

/** Refuses a listener that is not a function. @internal */
export function checkListener(listener: unknown, method: string): void {
  if (typeof listener !== 'function') {
    throw malformed(`gate.${method}(event, listener): the listener must be a function, not ${show(listener)}`)
  }
}
