import { isRecord, malformed, show } from './check'
import { toSignoffError } from './errors'
import { wrapperToJson } from './json'
import { native, type ConfirmationRequestData, type NativeGate, type NativeSubscription } from './native'
import { PendingRequest } from './request'
import type {
  ConfirmationResolvedEvent,
  ConfirmationResponseEvent,
  ConfirmationTimeoutEvent,
  SignoffEvent,
} from './types'

/**
 * A subscriber fell behind and `missed` events were dropped for it. Never silent: the event
 * stream (and a `'lagged'` listener) gets this in place of what was missed.
 *
 * Re-sync from it, de-duplicating by id: `pending` holds the oldest requests pending when this
 * was noticed, at most 1,000 of them; when more were pending, `more` is a cursor to read the
 * rest from with {@link Gate.pendingPage} (`{ after: more }`) or, page by page, until its `next`
 * is `null`. So a lag costs the same with ten or a million requests pending.
 *
 * @example
 * ```ts
 * if (event.type === 'lagged') {
 *   for (const req of event.pending) show(req)
 *   for (let after = event.more; after !== null; ) {
 *     const page = gate.pendingPage({ after })
 *     page.requests.forEach(show)
 *     after = page.next
 *   }
 * }
 * ```
 */
export interface LaggedEvent {
  type: 'lagged'
  missed: number
  /** The oldest pending requests, at most 1,000, oldest first. */
  pending: PendingRequest[]
  /** A {@link Gate.pendingPage} cursor when more requests are pending than `pending` holds, else `null`. */
  more: string | null
}

/** The bus's event types. */
export type EventType = 'confirmation-request' | 'confirmation-response' | 'confirmation-timeout' | 'confirmation-resolved'

/** Options of {@link Gate.events} (another option is refused: `malformed`). */
export interface EventStreamOptions {
  /**
   * Only these event types (a lag is always yielded). Default: all. A type not in
   * {@link EventType} is refused (`malformed`), listing them.
   */
  types?: EventType[]
}

/** What a gate's event stream yields. Requests come as answerable {@link PendingRequest}s. */
export type GateEvent =
  | PendingRequest
  | ConfirmationResponseEvent
  | ConfirmationTimeoutEvent
  | ConfirmationResolvedEvent
  | LaggedEvent

type Item =
  | ConfirmationRequestData
  | ConfirmationResponseEvent
  | ConfirmationTimeoutEvent
  | ConfirmationResolvedEvent
  | { type: 'lagged'; missed: number; pending: ConfirmationRequestData[]; more: string | null }

/** Parses a batch from the addon. @internal */
export function wrapBatch(json: string, gate: NativeGate): GateEvent[] {
  const items = JSON.parse(json) as Item[]
  const out: GateEvent[] = new Array(items.length)
  for (let i = 0; i < items.length; i++) {
    const item = items[i]!
    if (item.type === 'confirmation-request') out[i] = PendingRequest.from(item, gate)
    else if (item.type === 'lagged') {
      out[i] = {
        type: 'lagged',
        missed: item.missed,
        pending: item.pending.map((d) => PendingRequest.from(d, gate)),
        more: item.more,
      }
    } else out[i] = item
  }
  return out
}

const BATCH = 256

/**
 * The events of one gate, in bus order, as an async iterator: `for await (const e of
 * gate.events())`. The subscription starts when the stream is created; leaving the loop (`break`,
 * `return`, an exception) or calling {@link EventStream.close} unsubscribes. The stream ends
 * after the gate is closed and every event published until then was delivered.
 */
export class EventStream implements AsyncIterableIterator<GateEvent> {
  readonly #sub: NativeSubscription
  readonly #gate: NativeGate
  #buf: GateEvent[] = []
  #at = 0
  #done = false
  #tail: Promise<unknown> = Promise.resolve()

  /** @internal */
  constructor(gate: NativeGate, types?: EventType[], observe = false) {
    this.#gate = gate
    try {
      this.#sub = gate.subscribe(types, observe)
    } catch (e) {
      throw toSignoffError(e)
    }
  }

  /** The next event; `done` once closed or once the gate is closed. */
  next(): Promise<IteratorResult<GateEvent, undefined>> {
    if (this.#at < this.#buf.length) {
      const value = this.#buf[this.#at]!
      this.#buf[this.#at++] = undefined as never
      return Promise.resolve({ value, done: false })
    }
    // Serialized, so concurrent next() calls see events in order.
    const p = this.#tail.then(() => this.#pull())
    this.#tail = p.catch(() => undefined)
    return p
  }

  async #pull(): Promise<IteratorResult<GateEvent, undefined>> {
    if (this.#at < this.#buf.length) {
      const value = this.#buf[this.#at]!
      this.#buf[this.#at++] = undefined as never
      return { value, done: false }
    }
    if (this.#done) return { value: undefined, done: true }
    let batch: string | null
    try {
      batch = await this.#sub.next(BATCH)
    } catch (e) {
      throw toSignoffError(e)
    }
    if (batch === null || this.#done) {
      this.close()
      return { value: undefined, done: true }
    }
    this.#buf = wrapBatch(batch, this.#gate)
    this.#at = 1
    const value = this.#buf[0]!
    this.#buf[0] = undefined as never
    return { value, done: false }
  }

  /** Unsubscribes. Called for you when a `for await` loop exits. */
  close(): void {
    if (this.#done) return
    this.#done = true
    this.#buf = []
    this.#at = 0
    this.#sub.close()
  }

  async return(): Promise<IteratorResult<GateEvent, undefined>> {
    this.close()
    return { value: undefined, done: true }
  }

  async throw(e?: unknown): Promise<IteratorResult<GateEvent, undefined>> {
    this.close()
    throw e
  }

  [Symbol.asyncIterator](): this {
    return this
  }
}

/**
 * Parses an event from the core's stable JSON form (a JSON string or a parsed object with
 * snake_case fields) into its JavaScript form (camelCase fields). Strictly: a repeated key, a
 * value that is not JSON (see {@link Gate.confirm}), or what the event carries (its arguments,
 * metadata) nested deeper than `MAX_NESTING` levels (the event around them is the one level
 * more a document may have, the same for a string and an object) is `malformed`.
 * @throws {@link SignoffError} `malformed`
 */
export function parseEvent(json: string | object): SignoffEvent {
  if (typeof json !== 'string' && !isRecord(json)) {
    throw malformed(`parseEvent: \`json\` is ${show(json)}: it must be an event as JSON text or as an object`)
  }
  try {
    return JSON.parse(
      native.parseEvent(typeof json === 'string' ? json : wrapperToJson(json, 'event', 'the event')!),
    ) as SignoffEvent
  } catch (e) {
    throw toSignoffError(e)
  }
}

/**
 * The core's stable JSON form (snake_case fields, `type` tag) of an event object, e.g. to send
 * it to a remote UI. Converted strictly, as {@link parseEvent} does: every request a gate
 * accepted (arguments nested up to `MAX_NESTING` levels) can be sent.
 * @throws {@link SignoffError} `malformed`
 */
export function serializeEvent(event: SignoffEvent | PendingRequest): Record<string, unknown> {
  if (!isRecord(event)) throw malformed(`serializeEvent: \`event\` is ${show(event)}: it must be an event object`)
  try {
    return JSON.parse(native.serializeEvent(wrapperToJson(event, 'event', 'the event')!)) as Record<string, unknown>
  } catch (e) {
    throw toSignoffError(e)
  }
}
