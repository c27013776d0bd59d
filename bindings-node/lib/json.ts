// Strict conversion of JavaScript values to JSON text, for every user value that reaches the core
// (call arguments, edited arguments, metadata, tool schemas, responses, events).
//
// `JSON.stringify` coerces silently: NaN and ±Infinity become `null`, functions, symbols and
// `undefined` properties vanish, `undefined` array elements become `null`, a Map or a Set becomes
// `{}`. A person would then approve one value and the tool run with another. This serializer
// writes the same text as `JSON.stringify` for everything JSON can represent and refuses the rest
// (`SignoffError('malformed')`, naming the path), in one pass: each property is read once, so
// what is checked is what is sent.
import { SignoffError, describe } from './errors'
import { native } from './native'

/**
 * How deeply arrays and objects may nest in a value signoff accepts (arguments, edited
 * arguments, metadata, a tool's `parameters` schema): a top-level object or array counts as 1.
 * The core's `signoff::json::MAX_NESTING` (64), the same in every language. Deeper values (and
 * reference cycles) are refused as `malformed`.
 */
export const MAX_NESTING: number = native.maxNesting()

const OBJECT_PROTO = Object.prototype

/** A value that is not JSON; `keys` (innermost first) and `containers` are filled in on the way out. */
class Refusal {
  readonly keys: Array<string | number> = []
  readonly containers: object[] = []
  constructor(
    readonly problem: string,
    readonly cause?: unknown,
    /** Nested deeper than MAX_NESTING (the deepest container is the first in `containers`). */
    readonly deep = false,
  ) {}
}

const NON_FINITE = 'JSON has no NaN or Infinity; refusing instead of sending null'

/** Characters `JSON.stringify` escapes, and surrogates (checked for lone ones). */
const SPECIAL = /["\\\u0000-\u001f\ud800-\udfff]/
const LONE_SURROGATE = /[\ud800-\udbff](?![\udc00-\udfff])|(?<![\ud800-\udbff])[\udc00-\udfff]/

function quote(s: string): string {
  if (s.length < 256 && !SPECIAL.test(s)) return '"' + s + '"'
  if (LONE_SURROGATE.test(s)) {
    throw new Refusal('is a string with a lone surrogate (not Unicode text): JSON cannot carry it')
  }
  return JSON.stringify(s)
}

/** What a non-JSON object is, for messages: "a Map", "a Buffer", "a Foo instance". */
function kind(o: object): string {
  try {
    if (Buffer.isBuffer(o)) return 'a Buffer'
    const tag = Object.prototype.toString.call(o).slice(8, -1)
    if (tag !== 'Object') return `${/^[AEIO]/.test(tag) ? 'an' : 'a'} ${tag}`
    const ctor = (Object.getPrototypeOf(o) as { constructor?: unknown } | null)?.constructor
    const name = typeof ctor === 'function' ? ctor.name : ''
    return name ? `a ${name} instance` : 'an object with a custom prototype'
  } catch {
    return 'an object that cannot be inspected'
  }
}

function hint(o: object): string {
  if (o instanceof Map) return 'convert it first, e.g. Object.fromEntries(map)'
  if (o instanceof Set) return 'convert it first, e.g. [...set]'
  if (ArrayBuffer.isView(o) || o instanceof ArrayBuffer) {
    return 'convert it first, e.g. to a string or an array of numbers'
  }
  return 'give it a toJSON method or pass a plain object'
}

/** A plain object: Object.prototype or null as prototype (in this realm or another: vm contexts). */
function isPlain(o: object, proto: object | null): boolean {
  if (proto === OBJECT_PROTO || proto === null) return true
  return (
    Object.getPrototypeOf(proto) === null &&
    Object.prototype.toString.call(o) === '[object Object]' &&
    !ArrayBuffer.isView(o)
  )
}

/**
 * The JSON text of `v`, found at `key` in its container, `depth` containers deep. `toJSON` is
 * applied (once) unless `viaToJSON`.
 */
function write(v: unknown, depth: number, key: string | number, viaToJSON: boolean): string {
  switch (typeof v) {
    case 'string':
      return quote(v)
    case 'number':
      if (v - v === 0) return '' + v
      throw new Refusal(`is ${v}: ${NON_FINITE}`)
    case 'boolean':
      return v ? 'true' : 'false'
    case 'object':
      return v === null ? 'null' : container(v, depth, key, viaToJSON)
    case 'undefined':
      throw new Refusal('is undefined: JSON has no undefined; omit the key or use null')
    case 'function':
      throw new Refusal('is a function: functions are not JSON; refusing instead of dropping it')
    case 'symbol':
      throw new Refusal('is a symbol: symbols are not JSON; refusing instead of dropping it')
    case 'bigint':
      throw new Refusal('is a BigInt: JSON has no BigInt; convert it to a number or a string first')
    default:
      throw new Refusal(`is a ${typeof v}, which is not JSON`)
  }
}

function container(o: object, depth: number, key: string | number, viaToJSON: boolean): string {
  const isArray = Array.isArray(o)
  const proto = isArray ? null : Object.getPrototypeOf(o)
  if (!viaToJSON) {
    // As JSON.stringify: an object with a toJSON method (Date, ...) is written as what it returns.
    // Not a Buffer's: it would turn bytes into {type, data}.
    const toJSON = (o as { toJSON?: unknown }).toJSON
    if (typeof toJSON === 'function' && !ArrayBuffer.isView(o)) {
      return write(toJSON.call(o, typeof key === 'number' ? String(key) : key), depth, key, true)
    }
  }
  if (!isArray && !isPlain(o, proto)) throw new Refusal(`is ${kind(o)}, which is not JSON; ${hint(o)}`)
  if (depth >= MAX_NESTING) {
    const r = new Refusal('', undefined, true)
    r.containers.push(o)
    throw r
  }
  let k: string | number = 0
  try {
    if (isArray) {
      const a = o as unknown[]
      let s = '['
      for (let i = 0; i < a.length; i++) {
        k = i
        const x = a[i]
        if (x === undefined && !(i in a)) {
          throw new Refusal('is a hole in a sparse array: JSON has no undefined; use null')
        }
        if (i > 0) s += ','
        s += write(x, depth + 1, i, false)
      }
      return s + ']'
    }
    const keys = Object.keys(o)
    let s = '{'
    for (let i = 0; i < keys.length; i++) {
      k = keys[i]!
      if (i > 0) s += ','
      s += quote(k) + ':' + write((o as Record<string, unknown>)[k], depth + 1, k, false)
    }
    return s + '}'
  } catch (e) {
    const r = asRefusal(e)
    r.keys.push(k)
    if (r.deep) r.containers.push(o)
    throw r
  }
}

const IDENT = /^[A-Za-z_$][\w$]*$/

function pathOf(root: string, keys: ReadonlyArray<string | number>): string {
  let p = root
  for (const k of keys) p += typeof k === 'number' ? `[${k}]` : IDENT.test(k) ? `.${k}` : `[${JSON.stringify(k)}]`
  return p
}

/** A thrown value as a refusal (a getter, a proxy trap or a toJSON method threw). */
const asRefusal = (e: unknown): Refusal =>
  e instanceof Refusal ? e : new Refusal(`could not be read: ${describe(e)}`, e)

function refused(r: Refusal, root: string, what: string): SignoffError {
  const keys = r.keys.reverse()
  if (!r.deep) {
    const options = r.cause === undefined ? undefined : { cause: r.cause }
    return new SignoffError(`malformed payload: ${pathOf(root, keys)} ${r.problem}`, 'malformed', options)
  }
  // Nested too deep: through a reference cycle (a container inside itself), or really that deep.
  const outer = r.containers.reverse()
  const seen = new Map<object, number>()
  for (let i = 0; i < outer.length; i++) {
    const j = seen.get(outer[i]!)
    if (j !== undefined) {
      const at = (n: number): string => pathOf(root, keys.slice(0, n))
      return new SignoffError(
        `malformed payload: ${what} contains a reference cycle: ${at(i)} is ${at(j)} itself; JSON cannot represent it`,
        'malformed',
      )
    }
    seen.set(outer[i]!, i)
  }
  return new SignoffError(native.tooDeepMessage(what), 'malformed')
}

/**
 * The JSON text of a user value (`undefined` stays `undefined`: absent), as `JSON.stringify`
 * would write it, or a `SignoffError('malformed')` naming the path (from `root`) when the value
 * is not JSON: NaN or ±Infinity, a function, a symbol, a BigInt, `undefined` inside an array or
 * an object, a Map, a Set, a typed array or Buffer, a class instance without `toJSON`, a string
 * with a lone surrogate, a reference cycle, or nesting deeper than {@link MAX_NESTING}. Objects
 * with a `toJSON` method (a Date) are written as what it returns, as by `JSON.stringify`.
 * Symbol-keyed properties are not data and are skipped, as by `JSON.stringify`.
 * `what` names the value in the nesting message (default: `root`). @internal
 */
export function toJson(value: unknown, root: string, what: string = root): string | undefined {
  return convert(value, root, what, 0)
}

/**
 * The JSON text of a tool's output: what `JSON.stringify` writes (`undefined` is `null`; an
 * `undefined`, function or symbol property is left out, a class instance is written as its own
 * enumerable properties, `toJSON` is applied), except where that would change the data without
 * a word. NaN and ±Infinity (written as `null`) and a Map, a Set, a WeakMap, a WeakSet or an
 * ArrayBuffer (written as `{}`) throw an {@link OutputNotJson} naming the path (`the tool's return
 * value.items[2] is NaN: ...`): the call fails, as it does in Python and Swift, instead of
 * reporting data the tool did not return. Only a text with a `null` or a `{}` in it can hide
 * one: it is written again with a check of every value (a replacer function: for a large output
 * with a null somewhere, several times the cost of `JSON.stringify`), and that text is the one
 * returned. Not caught: a Map or a Set that has properties of its own besides its entries (they
 * are written, the entries are not). @internal
 */
export function outputToJson(v: unknown): string {
  const text = JSON.stringify(v) ?? 'null'
  return text.includes('null') || text.includes('{}') ? checkedOutput(v) : text
}

const OUTPUT_ROOT = "the tool's return value"

/** A tool's output that {@link outputToJson} refuses (its message names the path). @internal */
export class OutputNotJson extends Error {}
const LOSSY = new Set(['[object Map]', '[object Set]', '[object WeakMap]', '[object WeakSet]', '[object ArrayBuffer]'])

/** {@link outputToJson}'s second pass: `JSON.stringify` with a replacer that refuses and knows the path. */
function checkedOutput(v: unknown): string {
  const paths = new Map<object, string>()
  let top = true
  const text = JSON.stringify(v, function (this: object, k: string, x: unknown) {
    let path = OUTPUT_ROOT
    if (top) top = false
    else {
      const at = paths.get(this) ?? OUTPUT_ROOT
      path = Array.isArray(this) ? `${at}[${k}]` : IDENT.test(k) ? `${at}.${k}` : `${at}[${JSON.stringify(k)}]`
    }
    if (typeof x === 'number' && !(x - x === 0)) throw new OutputNotJson(`${path} is ${x}: ${NON_FINITE}`)
    if (x !== null && typeof x === 'object') {
      const tag = Object.prototype.toString.call(x)
      // A boxed number (`new Number(NaN)`) is written as its value.
      if (tag === '[object Number]' && !Number.isFinite(Number(x))) throw new OutputNotJson(`${path} is ${Number(x)}: ${NON_FINITE}`)
      if (LOSSY.has(tag)) {
        throw new OutputNotJson(`${path} is ${kind(x)}, which JSON.stringify writes as {}; refusing instead of sending that: ${hint(x)}`)
      }
      paths.set(x, path)
    }
    return x
  })
  return text ?? 'null'
}

/**
 * {@link toJson} for a document that wraps values (an event around a request's arguments): like
 * the core's strict text parser, it may nest one level deeper than {@link MAX_NESTING}, so that
 * what it carries may nest {@link MAX_NESTING} levels, as the gate accepts them. @internal
 */
export function wrapperToJson(value: unknown, root: string, what: string = root): string | undefined {
  return convert(value, root, what, -1)
}

function convert(value: unknown, root: string, what: string, depth: number): string | undefined {
  if (value === undefined) return undefined
  try {
    return write(value, depth, '', false)
  } catch (e) {
    throw refused(asRefusal(e), root, what)
  }
}

/**
 * The JSON text of an options object (a tool definition, a response) whose top-level keys are
 * renamed with `rename`; `undefined` fields are left out (they are optional fields, not data).
 * Field values are converted as by {@link toJson}, one level down, with their key as the root
 * of their path. @internal
 */
export function fieldsToJson(o: object, rename: (k: string) => string, what: string): string {
  const keys = Object.keys(o)
  let s = '{'
  let first = true
  for (const k of keys) {
    try {
      const v = (o as Record<string, unknown>)[k]
      if (v === undefined) continue
      const text = write(v, 1, k, false)
      s += (first ? '' : ',') + quote(rename(k)) + ':' + text
      first = false
    } catch (e) {
      throw refused(asRefusal(e), k, what)
    }
  }
  return s + '}'
}
