import { checkParam } from './check'
import { SignoffError, toSignoffError } from './errors'
import { native, type NativeSecret, type NativeTokenKeys } from './native'

const INSPECT = Symbol.for('nodejs.util.inspect.custom')
/** Module-private: lets the factories wrap a native object the constructor did not make. */
const WRAP: unique symbol = Symbol('wrap')

function call<T>(f: () => T): T {
  try {
    return f()
  } catch (e) {
    throw toSignoffError(e)
  }
}

let unwrapSecret: (s: Secret) => NativeSecret
let unwrapKeys: (k: TokenKeys) => NativeTokenKeys

/**
 * A key that signs approval tokens (the core's `Secret`: at least 32 bytes). Its bytes live in
 * the native addon: printing, inspecting or `JSON.stringify`-ing a `Secret` never shows them;
 * only {@link toBase64} does.
 *
 * @example
 * ```ts
 * const secret = Secret.generate()
 * console.log(secret) // Secret <redacted>
 * saveToYourSecretStore(secret.toBase64())
 * ```
 */
export class Secret {
  readonly #native: NativeSecret

  private constructor(n: NativeSecret) {
    this.#native = n
  }

  static {
    unwrapSecret = (s) => s.#native
  }

  /**
   * Decodes base64 key material (standard or URL-safe, padded or not).
   * @throws {@link SignoffError} `config` (not base64, or shorter than 32 bytes).
   */
  static fromBase64(text: string): Secret {
    checkParam(text, 'text', 'Secret.fromBase64', 'config')
    return new Secret(call(() => native.NativeSecret.fromBase64(text)))
  }

  /**
   * Wraps raw key bytes (at least 32).
   * @throws {@link SignoffError} `config` (too short).
   */
  static fromBytes(bytes: Uint8Array): Secret {
    if (!(bytes instanceof Uint8Array)) {
      throw new SignoffError('configuration error: Secret.fromBytes: `bytes` must be a Uint8Array (a Buffer is one) of at least 32 bytes', 'config')
    }
    return new Secret(call(() => native.NativeSecret.fromBytes(bytes)))
  }

  /**
   * 32 random bytes from the operating system's generator. For tests and development: in
   * production, load keys from configuration so issued tokens survive a restart.
   */
  static generate(): Secret {
    return new Secret(native.NativeSecret.generate())
  }

  /** The base64 form, to store in configuration (the only way to read the key). */
  toBase64(): string {
    return this.#native.toBase64()
  }

  /** `'Secret <redacted>'`. */
  toString(): string {
    return 'Secret <redacted>'
  }

  /** `'<redacted>'`: `JSON.stringify` never writes the key. */
  toJSON(): string {
    return '<redacted>'
  }

  /** @internal */
  [INSPECT](): string {
    return 'Secret <redacted>'
  }
}

/**
 * The keys a gate signs and verifies approval tokens with (the core's `TokenKeys`). The first
 * key is current: new tokens are signed with it; the others still verify tokens issued before a
 * rotation. Immutable: {@link rotate} and {@link withVerifyOnly} return new key sets. Printing
 * or inspecting a `TokenKeys` shows the key ids only.
 *
 * The configuration format ({@link TokenKeys.parse}, {@link TokenKeys.fromEnv},
 * {@link TokenKeys.fromFile}, or a string as `GateOptions.tokenKeys`): `key_id:base64secret`
 * entries separated by commas or newlines, current key first; blank lines and `#` comments are
 * ignored. Key ids are 1-64 characters of `[A-Za-z0-9_-]`.
 *
 * @example
 * ```ts
 * const keys = TokenKeys.fromEnv('SIGNOFF_TOKEN_KEYS') // "k2:<base64>,k1:<base64>"
 * const gate = new Gate({ tokenKeys: keys, denyWhenUnobserved: false })
 * ```
 */
export class TokenKeys {
  readonly #native: NativeTokenKeys

  /**
   * One key, which signs and verifies.
   * @param secret a {@link Secret}, or its base64 form.
   * @throws {@link SignoffError} `config` (bad key id, bad or short secret).
   */
  constructor(keyId: string, secret: Secret | string)
  /** @internal */
  constructor(keyId: typeof WRAP, secret: NativeTokenKeys)
  constructor(keyId: string | typeof WRAP, secret: Secret | string | NativeTokenKeys) {
    if (keyId === WRAP) {
      this.#native = secret as NativeTokenKeys
      return
    }
    checkParam(keyId, 'keyId', 'new TokenKeys', 'config')
    const s = toSecret(secret as Secret | string)
    this.#native = call(() => new native.NativeTokenKeys(keyId, s))
  }

  static {
    unwrapKeys = (k) => k.#native
  }

  /**
   * Parses the configuration format (see the class docs).
   * @throws {@link SignoffError} `config`.
   */
  static parse(text: string): TokenKeys {
    checkParam(text, 'text', 'TokenKeys.parse', 'config')
    return new TokenKeys(WRAP, call(() => native.NativeTokenKeys.parse(text)))
  }

  /**
   * Reads the configuration format from an environment variable (its value is never logged).
   * @throws {@link SignoffError} `config` (unset, or not the format).
   */
  static fromEnv(name: string): TokenKeys {
    checkParam(name, 'name', 'TokenKeys.fromEnv', 'config')
    return new TokenKeys(WRAP, call(() => native.NativeTokenKeys.fromEnv(name)))
  }

  /**
   * Reads the configuration format from a file (e.g. a mounted secret).
   * @throws {@link SignoffError} `config` (unreadable, or not the format).
   */
  static fromFile(path: string): TokenKeys {
    checkParam(path, 'path', 'TokenKeys.fromFile', 'config')
    return new TokenKeys(WRAP, call(() => native.NativeTokenKeys.fromFile(path)))
  }

  /**
   * Rotation: a new key set where `keyId` is current (signs new tokens) and these keys still
   * verify. Reusing an id replaces that key.
   * @throws {@link SignoffError} `config`.
   */
  rotate(keyId: string, secret: Secret | string): TokenKeys {
    checkParam(keyId, 'keyId', 'keys.rotate', 'config')
    const s = toSecret(secret)
    return new TokenKeys(WRAP, call(() => this.#native.rotate(keyId, s)))
  }

  /**
   * A new key set with `keyId` added as a key that verifies but never signs (a retired key
   * whose tokens may still be out).
   * @throws {@link SignoffError} `config` (duplicate or bad key id).
   */
  withVerifyOnly(keyId: string, secret: Secret | string): TokenKeys {
    checkParam(keyId, 'keyId', 'keys.withVerifyOnly', 'config')
    const s = toSecret(secret)
    return new TokenKeys(WRAP, call(() => this.#native.withVerifyOnly(keyId, s)))
  }

  /** The id of the key new tokens are signed with. */
  get currentKeyId(): string {
    return this.#native.currentKeyId
  }

  /** Every key id, current first. */
  keyIds(): string[] {
    return this.#native.keyIds()
  }

  /** The key ids only (`JSON.stringify` never writes a key). */
  toJSON(): { currentKeyId: string; keyIds: string[] } {
    return { currentKeyId: this.currentKeyId, keyIds: this.keyIds() }
  }

  /** `'TokenKeys(k2, k1)'`: the key ids, current first. */
  toString(): string {
    return `TokenKeys(${this.keyIds().join(', ')})`
  }

  /** @internal */
  [INSPECT](): string {
    return `TokenKeys { currentKeyId: '${this.currentKeyId}', keyIds: [${this.keyIds().map((k) => `'${k}'`).join(', ')}] }`
  }
}

function toSecret(secret: Secret | string): NativeSecret {
  if (secret instanceof Secret) return unwrapSecret(secret)
  if (typeof secret === 'string') return call(() => native.NativeSecret.fromBase64(secret))
  throw new SignoffError('configuration error: a token secret is a Secret or its base64 form', 'config')
}

/** The native key set behind `keys`. @internal */
export function nativeTokenKeys(keys: TokenKeys): NativeTokenKeys {
  return unwrapKeys(keys)
}
