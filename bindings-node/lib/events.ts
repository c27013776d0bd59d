import { toSignoffError } from './errors'
import { native, type ConfirmationRequestData, type NativeGate, type NativeSubscription } from './native'
import { PendingRequest } from './request'
import type {
  ConfirmationResolvedEvent,
  ConfirmationResponseEvent,
  ConfirmationTimeoutEvent,
  SignoffEvent,
} from './types'

/**
 * A subscriber fell behind and `missed` events were dropped for it. `pending` is every request
 * still pending when this was noticed: re-sync from it (de-duplicate by id). Never silent: the
 * event stream yields it in place of what was missed.
 */
export interface LaggedEvent {
  type: 'lagged'
  missed: number
  pending: PendingRequest[]
}

/** The bus's event types. */
export type EventType = 'confirmation-request' | 'confirmation-response' | 'confirmation-timeout' | 'confirmation-resolved'

/** Options of {@link Gate.events}. */
export interface EventStreamOptions {
  /** Only these event types (a lag is always yielded). Default: all. */
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
  | { type: 'lagged'; missed: number; pending: ConfirmationRequestData[] }

/** Parses a batch from the addon. @internal */
export function wrapBatch(json: string, gate: NativeGate): GateEvent[] {
  const items = JSON.parse(json) as Item[]
  const out: GateEvent[] = new Array(items.length)
  for (let i = 0; i < items.length; i++) {
    const item = items[i]!
    if (item.type === 'confirmation-request') out[i] = PendingRequest.from(item, gate)
    else if (item.type === 'lagged') {
      out[i] = { type: 'lagged', missed: item.missed, pending: item.pending.map((d) => PendingRequest.from(d, gate)) }
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
  readonly #onClose?: (s: EventStream) => void

  /** @internal */
  constructor(gate: NativeGate, types?: EventType[], onClose?: (s: EventStream) => void) {
    this.#gate = gate
    try {
      this.#sub = gate.subscribe(types)
    } catch (e) {
      throw toSignoffError(e)
    }
    this.#onClose = onClose
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
    this.#onClose?.(this)
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
 * snake_case fields) into its JavaScript form (camelCase fields).
 * @throws {@link SignoffError} `malformed`
 */
export function parseEvent(json: string | object): SignoffEvent {
  try {
    return JSON.parse(native.parseEvent(typeof json === 'string' ? json : JSON.stringify(json))) as SignoffEvent
  } catch (e) {
    throw toSignoffError(e)
  }
}

/**
 * The core's stable JSON form (snake_case fields, `type` tag) of an event object, e.g. to send
 * it to a remote UI.
 * @throws {@link SignoffError} `malformed`
 */
export function serializeEvent(event: SignoffEvent | PendingRequest): Record<string, unknown> {
  try {
    return JSON.parse(native.serializeEvent(JSON.stringify(event))) as Record<string, unknown>
  } catch (e) {
    throw toSignoffError(e)
  }
}
