import { checkParam, fields, malformed, optEnum, optString, show, type Shape } from './check'
import { toSignoffError } from './errors'
import { toJson } from './json'
import { native, type ConfirmationRequestData, type NativeGate } from './native'
import type { ApproveOptions, DenyOptions, Outcome } from './types'

/**
 * A confirmation request waiting for a person: everything a UI shows, and the means to answer
 * it. Answers are bound to this request (the core checks its id, tool, argument digest and
 * session).
 *
 * Show {@link displayArguments} (escaped), not a rendering of {@link arguments} of your own.
 */
type Rest = Omit<ConfirmationRequestData, 'type' | 'id' | 'tool' | 'arguments' | 'displayArguments'> & {
  displayArguments?: string
}

const APPROVE: Shape = {
  what: 'the options of approve',
  fields: ['arguments', 'scope', 'responder'],
  aliases: { args: 'arguments', editedArguments: 'arguments', edited: 'arguments', by: 'responder', approver: 'responder' },
}
const DENY: Shape = { what: 'the options of deny', fields: ['responder'], aliases: { by: 'responder', approver: 'responder' } }

export class PendingRequest implements ConfirmationRequestData {
  readonly type = 'confirmation-request' as const
  // @generated begin request-properties (core/tests/sourcegen.rs, from the core's `ConfirmationRequest`)
  /** The request's id (a UUID); a response carries it back. */
  readonly id: string
  /** The tool's name. */
  readonly tool: string
  /** The arguments that run if the request is approved unchanged. */
  readonly arguments: any
  // @generated end request-properties
  #rest: Rest | string
  /** The arguments' canonical JSON, while `displayArguments` has not been derived from it. */
  #argsJson: string | undefined
  /** The listener run that showed this request (its token), if a listener was handed it. */
  readonly #run: number | undefined
  readonly #gate: NativeGate

  /**
   * @internal `rest` is the request's other fields (JSON text from a listener's dispatch, parsed
   * when first read); `displayArguments` comes from `argsJson` when `rest` lacks it; `run` is
   * the listener run's token, through which an approval as shown is given while the run lasts.
   */
  constructor(gate: NativeGate, id: string, tool: string, args: unknown, rest: Rest | string, argsJson?: string, run?: number) {
    this.id = id
    this.tool = tool
    this.arguments = args
    this.#rest = rest
    this.#argsJson = argsJson
    this.#run = run
    this.#gate = gate
  }

  /** @internal */
  static from(d: ConfirmationRequestData, gate: NativeGate): PendingRequest {
    return new PendingRequest(gate, d.id, d.tool, d.arguments, d)
  }

  get #r(): Rest {
    const r = this.#rest
    return typeof r === 'string' ? (this.#rest = JSON.parse(r) as Rest) : r
  }

  /** Pretty JSON of the arguments with control, bidi and zero-width characters escaped. */
  get displayArguments(): string {
    const r = this.#r
    if (r.displayArguments === undefined) {
      r.displayArguments = native.displayArguments(this.#argsJson ?? 'null')
      this.#argsJson = undefined
    }
    return r.displayArguments
  }
  /** When it stops waiting. */
  get deadline(): Date {
    return new Date(this.#r.deadlineMs)
  }
  // @generated begin request-getters (core/tests/sourcegen.rs, from the core's `ConfirmationRequest`)
  /** The tool's description, escaped for display. */
  get description(): string {
    return this.#r.description
  }
  /** The rendered prompt, escaped for display. */
  get prompt(): string {
    return this.#r.prompt
  }
  /** `sha256:<hex>` of the canonical JSON of the arguments; a response may echo it. */
  get argumentsDigest(): string {
    return this.#r.argumentsDigest
  }
  /** The agent session the call belongs to. */
  get sessionId(): string {
    return this.#r.sessionId
  }
  /** The model's id for this tool call, if it gave one. */
  get toolCallId(): string | undefined {
    return this.#r.toolCallId
  }
  /** Whether the person may edit the arguments. */
  get editable(): boolean {
    return this.#r.editable
  }
  /** Why approval is needed. */
  get reasons(): string[] {
    return this.#r.reasons
  }
  /** How long the request waits, in milliseconds. */
  get timeoutMs(): number {
    return this.#r.timeoutMs
  }
  /** When it stops waiting, in Unix epoch milliseconds. */
  get deadlineMs(): number {
    return this.#r.deadlineMs
  }
  /** When it was made, in Unix epoch milliseconds. */
  get createdAtMs(): number {
    return this.#r.createdAtMs
  }
  /** Free metadata from the caller (absent when none was given). */
  get metadata(): any {
    return this.#r.metadata
  }
  // @generated end request-getters

  /** True while nobody has answered and it has not timed out or been cancelled. */
  isPending(): boolean {
    return this.#gate.isPending(this.id)
  }

  /**
   * Approves: once (default) or for the session, optionally with edited arguments (converted
   * strictly, as a call's: see {@link Gate.confirm}; refused edits leave the request pending).
   * @returns the request's outcome (`'approved'`).
   * @throws {@link SignoffError} e.g. `already_resolved`, `expired`, `edits_not_allowed`,
   *   `invalid_arguments`, `malformed`, `closed`.
   */
  approve(options?: ApproveOptions): Outcome {
    if (options === undefined && this.#run !== undefined) {
      // From a listener while its run lasts: answered through the handle the run holds.
      let outcome: Outcome | null
      try {
        outcome = native.approveRun(this.#run)
      } catch (e) {
        throw toSignoffError(e)
      }
      if (outcome !== null) return outcome
    }
    const o = fields(options, APPROVE, true)
    const scope = optEnum(o, 'scope', APPROVE, ['once', 'session'])
    const responder = optString(o, 'responder', APPROVE)
    try {
      return this.#gate.answer(this.id, true, toJson(o.arguments, 'arguments', 'edited arguments'), scope, undefined, responder)
    } catch (e) {
      throw toSignoffError(e)
    }
  }

  /**
   * Denies, with an optional reason the model will read.
   * @returns the request's outcome (`'denied'`).
   * @throws {@link SignoffError} e.g. `already_resolved`, `expired`, `closed`.
   */
  deny(reason?: string, options?: DenyOptions): Outcome {
    if (reason !== undefined && reason !== null && typeof reason !== 'string') {
      throw malformed(`deny(reason, options): \`reason\` must be a string (what the model is told), not ${show(reason)}; e.g. req.deny('only files under /tmp', { responder: 'alice' })`)
    }
    const responder = optString(fields(options, DENY, true), 'responder', DENY)
    try {
      return this.#gate.answer(this.id, false, undefined, undefined, reason ?? undefined, responder)
    } catch (e) {
      throw toSignoffError(e)
    }
  }

  /**
   * Issues a signed approval token for this request, meant for `approver` only
   * (see {@link Gate.issueToken}).
   * @throws {@link SignoffError} `config` (the gate has no `tokenKeys`), `malformed`, `not_pending`.
   */
  issueToken(approver: string): string {
    checkParam(approver, 'approver', 'req.issueToken')
    try {
      return this.#gate.issueToken(this.id, approver)
    } catch (e) {
      throw toSignoffError(e)
    }
  }

  /** Every field as plain data (what `JSON.stringify` shows). */
  toJSON(): ConfirmationRequestData {
    const r = this.#r
    // @generated begin request-to-json (core/tests/sourcegen.rs, from the core's `ConfirmationRequest`)
    const d: ConfirmationRequestData = {
      type: 'confirmation-request',
      id: this.id,
      tool: this.tool,
      description: r.description,
      arguments: this.arguments,
      displayArguments: this.displayArguments,
      prompt: r.prompt,
      argumentsDigest: r.argumentsDigest,
      sessionId: r.sessionId,
      editable: r.editable,
      reasons: r.reasons,
      timeoutMs: r.timeoutMs,
      deadlineMs: r.deadlineMs,
      createdAtMs: r.createdAtMs,
    }
    if (r.toolCallId !== undefined) d.toolCallId = r.toolCallId
    if (r.metadata !== undefined) d.metadata = r.metadata
    // @generated end request-to-json
    return d
  }

  /** @internal */
  [Symbol.for('nodejs.util.inspect.custom')](): unknown {
    return Object.assign(Object.create(PendingRequest.prototype), this.toJSON())
  }
}
