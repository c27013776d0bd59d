import { checkParam, fields, isRecord, optBool, optNumber, optString, badField, type Shape } from './check'
import { toSignoffError } from './errors'
import type { Gate } from './gate'
import type { NativeConsole } from './native'

const INSPECT = Symbol.for('nodejs.util.inspect.custom')

/**
 * How {@link Gate.serveConsole} runs the console. Every option is optional; an option left
 * `undefined` or `null` takes the console's default.
 */
export interface ConsoleOptions {
  /**
   * `'host:port'` to listen on. Default `'127.0.0.1:0'`: loopback, a free port. A non-loopback
   * address needs `allowRemote`.
   */
  bind?: string
  /** Allow a non-loopback `bind` (put the console behind TLS then). Default false. */
  allowRemote?: boolean
  /**
   * The origin people reach the console at behind a proxy, e.g. `'https://approve.example.com'`:
   * sign-in links use it, only its host is answered, and an `https` origin makes the session
   * cookie `Secure`.
   */
  publicOrigin?: string
  /**
   * People who may also sign in with a name and a key: `{ name: key }` (keys of at least 16
   * characters). Sign-in links work either way.
   */
  approverKeys?: Record<string, string>
  /** The same from a file of `name:key` or `name:sha256:<hex>` lines (`#` comments); not with `approverKeys`. */
  approverKeysFile?: string
  /** How long a sign-in link stays valid, in milliseconds. Default 15 minutes. */
  signInTtlMs?: number
  /** How long a browser stays signed in, in milliseconds. Default 12 hours. */
  sessionTtlMs?: number
  /** How many decided requests the page's history keeps. Default 500. */
  history?: number
  /** The page title. Default `'signoff'`. */
  title?: string
}

/** Where a console listens. */
export interface ConsoleAddress {
  host: string
  port: number
}

const OPTIONS: Shape = {
  what: 'the console options',
  fields: [
    'bind',
    'allowRemote',
    'publicOrigin',
    'approverKeys',
    'approverKeysFile',
    'signInTtlMs',
    'sessionTtlMs',
    'history',
    'title',
  ],
  aliases: {
    allow_remote: 'allowRemote',
    public_origin: 'publicOrigin',
    approver_keys: 'approverKeys',
    approver_keys_file: 'approverKeysFile',
    sign_in_ttl_ms: 'signInTtlMs',
    session_ttl_ms: 'sessionTtlMs',
    signInTtl: 'signInTtlMs',
    sessionTtl: 'sessionTtlMs',
    address: 'bind',
    host: 'bind',
  },
  code: 'config',
}

/** The console options as JSON for the native layer, checked (`config` errors). @internal */
export function consoleOptionsJson(options: unknown): string {
  const o = fields(options ?? undefined, OPTIONS, true)
  const ms = { min: 1, whole: true }
  let approverKeys: Record<string, string> | undefined
  const keys = o.approverKeys
  if (keys !== undefined && keys !== null) {
    if (!isRecord(keys)) throw badField(OPTIONS, 'approverKeys', 'an object { name: key }', keys)
    approverKeys = {}
    for (const [name, key] of Object.entries(keys)) {
      if (typeof key !== 'string') throw badField(OPTIONS, `approverKeys.${name}`, 'a string', key)
      approverKeys[name] = key
    }
  }
  return JSON.stringify({
    bind: optString(o, 'bind', OPTIONS),
    allowRemote: optBool(o, 'allowRemote', OPTIONS),
    publicOrigin: optString(o, 'publicOrigin', OPTIONS),
    approverKeys,
    approverKeysFile: optString(o, 'approverKeysFile', OPTIONS),
    signInTtlMs: optNumber(o, 'signInTtlMs', OPTIONS, 'a whole number of milliseconds, at least 1', ms),
    sessionTtlMs: optNumber(o, 'sessionTtlMs', OPTIONS, 'a whole number of milliseconds, at least 1', ms),
    history: optNumber(o, 'history', OPTIONS, 'a whole number', { whole: true }),
    title: optString(o, 'title', OPTIONS),
  })
}

let make: (n: NativeConsole, gate: Gate) => Console

/**
 * A running browser approval console, from {@link Gate.serveConsole}: a person signs in and
 * approves from a web page, live. The page lists every pending request as it arrives, with the
 * tool, why approval was asked and the arguments exactly as they will run, and lets a signed-in
 * person approve once, approve for the session, edit the arguments (checked against the tool's
 * schema, with a diff) or deny with a reason; decided requests and the verified audit chain are
 * one click away.
 *
 * The console never decides who may approve: each decision is submitted as a signed approval
 * token issued to the signed-in person, and the gate's `approvers` accept or refuse it.
 *
 * It runs on its own thread and, like an event stream, does not keep the process alive by
 * itself: keep the process running (your agent awaiting its calls does) while people use it.
 * {@link close} stops it; so does garbage collection of an unreferenced console. Closing the
 * gate does not close the console (its decisions then fail with `closed`).
 */
export class Console {
  readonly #native: NativeConsole
  readonly #gate: Gate
  #closing?: Promise<void>

  private constructor(n: NativeConsole, gate: Gate) {
    this.#native = n
    // The console keeps the gate it serves alive (a collected gate is released).
    this.#gate = gate
  }

  static {
    make = (n, gate) => new Console(n, gate)
  }

  /** The console's address, ending in `/`, e.g. `http://127.0.0.1:49152/` (or the `publicOrigin`). */
  get url(): string {
    return this.#native.url
  }

  /** The address it listens on. */
  get address(): ConsoleAddress {
    return this.#native.address
  }

  /** The gate it serves. */
  get gate(): Gate {
    return this.#gate
  }

  /**
   * A single-use sign-in link for `approver`, valid for `signInTtlMs`: `{url}login#token=...`.
   * Send it to that person only (it signs them in). The token is in the URL fragment, which
   * browsers never send to a server, so it does not end up in access logs; the page removes it
   * from the address bar once it has signed in.
   * @throws {@link SignoffError} `malformed` (an empty approver).
   */
  signInLink(approver: string): string {
    checkParam(approver, 'approver', 'signInLink')
    try {
      return this.#native.signInLink(approver)
    } catch (e) {
      throw toSignoffError(e)
    }
  }

  /** True once {@link close} was called. */
  get closed(): boolean {
    return this.#closing !== undefined || this.#native.closed
  }

  /**
   * Stops the server (off the JavaScript thread): open pages' event streams end and the port is
   * released. Pending requests are not touched (they stay pending for other approvers, or time
   * out). Idempotent.
   */
  close(): Promise<void> {
    this.#closing ??= Promise.resolve(this.#native.close())
    return this.#closing
  }

  [INSPECT](): string {
    return `Console { url: '${this.url}', closed: ${this.closed} }`
  }
}

/** Wraps a started native console. @internal */
export function wrapConsole(n: NativeConsole, gate: Gate): Console {
  return make(n, gate)
}
