import { native, type ErrorCode } from './native'

export type { ErrorCode }

/**
 * Every error code, in the core's declaration order. Generated from the core's `ErrorKind::ALL`
 * at load time, so it cannot drift from the Rust side.
 */
export const ERROR_CODES: readonly ErrorCode[] = Object.freeze(native.errorCodes() as ErrorCode[])

/**
 * The error every signoff call throws (or rejects with) when the core refuses something: an
 * unknown tool or request, a response for a request that already resolved or expired, a response
 * that does not match what was shown, a malformed payload, a closed gate... And when a call is
 * given what it cannot take: a field or option it does not know, a value of the wrong type, an
 * event a gate never emits (`malformed`, naming it as written and listing the valid ones), a
 * token key or file it cannot use (`config`).
 *
 * `code` is the core's stable `ErrorKind` name (see {@link ERROR_CODES}); match on it, not on the
 * message.
 *
 * @example
 * ```ts
 * try { gate.respond({ id, decision: 'approve' }) }
 * catch (e) { if (e instanceof SignoffError && e.code === 'already_resolved') { ... } }
 * ```
 */
export class SignoffError extends Error {
  /** The core's error kind, e.g. `'already_resolved'`. */
  readonly code: ErrorCode

  constructor(message: string, code: ErrorCode, options?: { cause?: unknown }) {
    super(message, options)
    this.name = 'SignoffError'
    this.code = code
  }
}

native.setErrorClass(SignoffError)

/** True when `e` is a {@link SignoffError} (with `code`, when given). */
export function isSignoffError(e: unknown, code?: ErrorCode): e is SignoffError {
  return e instanceof SignoffError && (code === undefined || e.code === code)
}

/**
 * Errors thrown by the addon's argument conversion (a wrong type where the core expects a
 * string, an object...) become `SignoffError('malformed')`; everything else passes through.
 * @internal
 */
export function toSignoffError(e: unknown): unknown {
  if (e instanceof SignoffError) return e
  if (e instanceof Error && typeof (e as { code?: unknown }).code === 'string') {
    const code = (e as unknown as { code: string }).code
    if (code === 'InvalidArg' || code.endsWith('Expected') || code === 'GenericFailure' && /convert/i.test(e.message)) {
      return new SignoffError(`malformed payload: ${e.message}`, 'malformed', { cause: e })
    }
  }
  return e
}

/** A thrown value's message, as the core reports it. @internal */
export function describe(e: unknown): string {
  if (e instanceof Error) return e.message
  try {
    return String(e)
  } catch {
    return 'an exception that cannot be shown'
  }
}
