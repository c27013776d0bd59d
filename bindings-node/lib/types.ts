import type {
  ApprovedByKind,
  CancelReasonKind,
  ConfirmationRequestData,
  ConfirmationResolvedData,
  ConfirmationResponseData,
  ConfirmationTimeoutData,
  OutcomeKind,
  RecordStateKind,
  ResponseDecisionKind,
  ScopeKind,
  StoredRecordData,
  MarkerClaimsData,
  TokenClaimsData,
  ToolStatusKind,
} from './native'
import type { PendingRequest } from './request'
import type { TokenKeys } from './token'

/** How a request ended: `'approved' | 'denied' | 'timed-out' | 'cancelled'`. */
export type Outcome = OutcomeKind
/**
 * Why a request was cancelled: `'no-approver' | 'shutdown' | 'aborted' | 'session-ended' |
 * 'approval-failed'` (the approval step itself failed before anyone decided).
 */
export type CancelReason = CancelReasonKind
/** How far an approval reaches: `'once'` (default) or `'session'`. */
export type Scope = ScopeKind
/** Why a call may run: `'not-gated' | 'person' | 'session-grant' | 'gating-disabled'`. */
export type ApprovedBy = ApprovedByKind
/** What became of a call. */
export type ToolStatus = ToolStatusKind
/** A person's decision in a response. */
export type ResponseDecision = ResponseDecisionKind

/**
 * Options for {@link Gate}, checked by the core's `GateConfig` (the same rules in every
 * language). An option not listed here (a typo, or another binding's name such as
 * `default_timeout_ms`), a value of the wrong type or out of range (a negative, fractional, NaN
 * or absurd number such as a `busCapacity` of 1e9), an option that needs another one or two that
 * exclude each other are refused with `SignoffError('config')` naming the option as written here
 * (with a suggestion for a misspelt one); an option left `undefined` or `null` is left out.
 */
export interface GateOptions {
  /** Approval timeout for tools that set none, in milliseconds (1 ms to 30 days). Default 60,000. */
  defaultTimeoutMs?: number
  /**
   * Words that, found as a word of a tool's name (`delete_file`, `sendEmail`), make a tool in the
   * default approval mode require approval. Replaces the default list ({@link DEFAULT_KEYWORDS}).
   */
  keywords?: string[]
  /**
   * Default `true`: a request made while no approver is attached (no `confirmation-request`
   * listener, no {@link Gate.events} stream; observers do not count) is cancelled at once
   * (`no-approver`), and so is every pending request when the last one goes away. Set `false`
   * when answers come from elsewhere (a remote UI calling {@link Gate.respond}): requests then
   * wait for their deadline. Not applied with `storeUrl` (a shared store's approvers are
   * elsewhere by design).
   */
  denyWhenUnobserved?: boolean
  /**
   * Append every request, response, outcome and execution to this JSON Lines file. Each line is
   * hash-chained to the one before it (check with `verifyAuditChain`); re-opening the file
   * continues the chain. A file that cannot be opened: `SignoffError('io')`.
   */
  auditPath?: string
  /**
   * Rotate the audit log when it reaches this many bytes: it is renamed `<path>.1`, `<path>.2`,
   * ... (oldest first) and a new file continues the same chain. Needs `auditPath`.
   */
  auditRotateBytes?: number
  /**
   * DEVELOPMENT ONLY: every call runs without approval. Announced on stderr and in the audit log.
   */
  dangerouslyDisableGating?: boolean
  /** Events buffered per subscriber before it is told it lagged: 1 to 1,048,576. Default 4,096. */
  busCapacity?: number
  /** Resolved request ids remembered to classify late responses: 0 to 10,000,000. Default 65,536. */
  rememberResolved?: number
  /**
   * Accept responses only from these responders (`responder` field); others are refused with
   * `unauthorized`. Default: any in-process response that matches its request. A request
   * listener that fails (or settles without answering) still ends its request at once
   * (`cancelled` / `'approval-failed'`): that is signoff's own fail-safe, not a response.
   */
  allowedResponders?: string[]
  /**
   * Keep pending requests and their states in this SQLite file (created if needed): requests,
   * their deadlines and whether their tool ran survive a restart. Call {@link Gate.recover} once,
   * after registering tools and before the first call. Every state change is committed before
   * the gate acts on it; a tool is recorded `executing` before it runs, so a crash can never
   * make it run twice. One gate per file: another gate (in this process or another) fails with
   * `store` until this one is closed ({@link Gate.close} releases the file).
   * @throws at construction: {@link SignoffError} `store` when the file cannot be opened or is
   *   in use.
   */
  storePath?: string
  /**
   * With `storePath`: every commit waits for the disk (`synchronous = FULL`), so states survive
   * a power loss too (slower). Default: survives any crash of the process.
   */
  synchronousFull?: boolean
  /**
   * Keep requests in this PostgreSQL database (`postgres://user:password@host:port/db`, or the
   * key-value form `host=... user=...`), shared with every gate that connects to it: gates in
   * many processes and hosts list ({@link Gate.pending}) and answer ({@link Gate.respond},
   * {@link Gate.respondToken}) each other's requests, and a waiting call wakes when another
   * process decides. Deadlines follow the database's clock. `denyWhenUnobserved` does not apply
   * (the approvers of a shared store are elsewhere by design). The tables are created if missing.
   * Not with `storePath`.
   *
   * With a shared store, `respond`, `respondJson`, `respondToken`, `issueToken`, `pending`,
   * `pendingPage`, `pendingCount`, `record`, `recover`, `cancelRequest`, `endSession`, a request's
   * `approve`/`deny`/`isPending`, and the start and end of each `confirm`/`execute`, wait for one
   * database round trip on the JavaScript thread.
   * @throws at construction: {@link SignoffError} `config` for a malformed URL, `store` when the
   *   server cannot be reached (after the connect timeout: 10 s unless the URL sets
   *   `connect_timeout`) or refuses.
   */
  storeUrl?: string
  /**
   * With `storeUrl`: this process's stable name in the shared store (`'billing-agent-1'`).
   * {@link Gate.recover} picks up only this owner's unfinished requests: give each agent process
   * a name of its own and reuse it after a crash; two live processes must never share one.
   * Default: a new random name (nothing to recover).
   */
  storeOwner?: string
  /**
   * With `storeUrl`: the PostgreSQL schema the tables are kept in (created if missing; 1 to 63
   * ASCII letters, digits or underscores). Default: the connection's search path (normally
   * `public`).
   */
  storeSchema?: string
  /**
   * With `storeUrl`: the audit log is kept in the same database (the table `signoff_audit`), one
   * hash chain that every process sharing the store appends to; `signoff audit verify --postgres
   * <url>` checks it. Not with `auditPath`.
   */
  auditInStore?: boolean
  /**
   * The keys approval tokens are signed and verified with ({@link Gate.issueToken},
   * {@link Gate.respondToken}): a {@link TokenKeys}, or the configuration format
   * (`key_id:base64secret`, comma- or newline-separated, current key first). Load them from
   * configuration so that issued tokens stay valid across a restart.
   */
  tokenKeys?: TokenKeys | string
  /**
   * How long an issued token is valid, in milliseconds. Default (and never beyond): its
   * request's deadline. Needs `tokenKeys`.
   */
  tokenTtlMs?: number
  /**
   * Who may approve which tools (the core's `Approvers`): tool name -> the responders who may
   * approve it; the key `'*'` lists responders who may approve every tool. Approvals must then
   * name their responder (`responder`, or the token's approver); others are refused with
   * `unauthorized`. Denials are accepted from anyone (refusing to run is the safe side). A
   * failed approval step (a request listener that throws) ends the request at once, as with
   * `allowedResponders`. Cannot be combined with `allowedResponders`.
   */
  approvers?: { [tool: string]: string[] }
  /**
   * Refuse (`unauthorized`) an approval whose responder is the request's own session id: an
   * agent session cannot approve its own calls. Cannot be combined with `allowedResponders`.
   */
  forbidSelfApproval?: boolean
}

/** Whether calls to a tool need approval. */
export type ApprovalMode = 'default' | 'required' | 'not_required'

/** Where a tool comes from. External tools are gated unless `readOnly`. */
export type ToolSource = { kind: 'built_in' } | { kind: 'external'; server: string }

/**
 * A declarative rule on a call's arguments: when it holds, the call needs approval whatever the
 * approval mode or session grants say. `pointer` is a JSON Pointer into the arguments (`/path`).
 * A missing value or a value of the wrong type makes a rule hold (rules fail safe).
 */
export type ArgRule =
  | { kind: 'path_outside'; pointer: string; prefixes: string[] }
  | { kind: 'greater_than'; pointer: string; value: number }
  | { kind: 'one_of'; pointer: string; values: unknown[] }
  | { kind: 'not_one_of'; pointer: string; values: unknown[] }
  | { kind: 'contains'; pointer: string; substring: string }

/**
 * What an executor receives besides the arguments: which call it runs, from the core's
 * `CallContext` (one frozen object per call, so concurrent calls never see each other's), and
 * the gate's `signal`.
 */
export interface ExecutionContext {
  /** The tool's name. */
  readonly tool: string
  /** The model's id for the call (`null` when the call had none). */
  readonly callId: string | null
  /** The confirmation request a person answered; `null` when the call was not gated. */
  readonly requestId: string | null
  /** The agent session. */
  readonly sessionId: string
  /** A person changed the arguments before approving. */
  readonly edited: boolean
  /**
   * Aborted when the gate is closed: the call resolves at once (`failed`, its result unknown)
   * and what the tool returns later is ignored, so stop early if you can. The caller's own
   * `signal` is not passed on: cancelling a call once its tool started does not interrupt the
   * tool (see {@link CallOptions.signal}).
   */
  readonly signal: AbortSignal
}

/**
 * Runs a tool with its approved arguments: return (or resolve) its JSON output, throw (or
 * reject) to report a failure to the model. Called at most once per approved call. The output is
 * written as `JSON.stringify` writes it, except that NaN, ±Infinity, a Map, a Set or an
 * ArrayBuffer in it (which that would turn into `null` or `{}`) fail the call, naming the path.
 */
export type Executor<Args = any> = (args: Args, context: ExecutionContext) => unknown

/**
 * A tool definition. Converted to the core's `ToolSpec` (camelCase keys become the core's
 * snake_case ones). A field not listed here is refused (`malformed`) so a typo never weakens
 * policy: the message names it and lists these fields, and suggests the one meant (`executor`,
 * the Python and Rust name, is `execute` here; the core's `read_only` is `readOnly`). So is a
 * value of the wrong type, a rule or `source` with a field its kind does not have, naming it as
 * written (`rules[0]`, `timeoutMs`). Optional fields left `undefined` or `null` are absent, so
 * what {@link Gate.tools} returns registers as is.
 */
export interface ToolDefinition<Args = any> {
  /** Unique name, as the model calls it. */
  name: string
  /** What the tool does, shown to the person. */
  description?: string
  /**
   * JSON Schema of the arguments. Default: any object. Must be JSON, converted strictly like
   * call arguments (NaN, `undefined` values, functions... are refused as `malformed`, see
   * {@link Gate.confirm}).
   */
  parameters?: Record<string, unknown>
  /** Whether calls need approval. Default `'default'`: decided by the policy. */
  approval?: ApprovalMode
  /** Whether the person may edit the arguments before approving. Default false. */
  editable?: boolean
  /** Prompt shown to the person; `{tool}`, `{args}` and `{description}` are substituted. */
  promptTemplate?: string
  /** Argument rules that force approval when they hold. */
  rules?: ArgRule[]
  /** Where the tool comes from. Default built-in. */
  source?: ToolSource
  /** Hint: the tool only reads. */
  readOnly?: boolean
  /** Hint: the tool destroys or changes something irreversibly (gated in the default mode). */
  destructive?: boolean
  /** Approval timeout for this tool, in milliseconds (1 to 30 days). */
  timeoutMs?: number
  /** The function that runs the tool (sync or async). Needed by `execute`, not by `confirm`. */
  execute?: Executor<Args>
}

/** A registered tool, as the core holds it. */
export interface ToolInfo {
  name: string
  description: string
  parameters: Record<string, unknown>
  approval: ApprovalMode
  editable: boolean
  promptTemplate?: string
  rules?: ArgRule[]
  source: ToolSource
  readOnly: boolean
  destructive: boolean
  timeoutMs?: number
}

/**
 * A tool call from the model. A field not listed here is refused (`malformed`), naming it and
 * suggesting the one meant (`name` is `tool` here, `session_id` is `sessionId`); a model's own
 * tool-call object is refused with the converter that makes it a call ({@link
 * fromOpenAIToolCall}, {@link fromAISDKToolCall}, {@link fromAnthropicToolUse}). `sessionId` and
 * `callId` left `undefined` or `null` are absent.
 */
export interface ToolCall {
  /** The tool's name. */
  tool: string
  /**
   * The arguments (an object for most schemas). Default `{}`. Must be JSON: converted strictly,
   * never coerced (see {@link Gate.confirm}).
   */
  arguments?: unknown
  /** The agent session; session grants never cross sessions. Default `'default'`. */
  sessionId?: string
  /** The model's id for this call, carried to the request and the result. */
  callId?: string
  /** Free metadata, shown with the request. Must be JSON, like the arguments. */
  metadata?: unknown
}

/** Options of `confirm`, `execute` and `executeBatch` (another option is refused: `malformed`). */
export interface CallOptions {
  /**
   * Aborting stops the caller waiting: the promise rejects with `signal.reason` (an `AbortError`
   * by default), and an already aborted signal rejects at once without asking anyone. The rule
   * is the same in every language: while the call waits for a decision, its request is cancelled
   * (`cancelled` / `aborted`, as listeners and event streams see it) and the tool never runs;
   * once the tool has started it is not interrupted: it runs to the end and its result is
   * recorded (audit log, durable store).
   */
  signal?: AbortSignal
}

/** Why a call needs (or does not need) approval. */
export interface Evaluation {
  required: boolean
  /** An argument rule holds: session grants do not apply. */
  forcedByRule: boolean
  reasons: string[]
}

/** The gate's decision: run (with these arguments) or not. */
export type Decision =
  | {
      outcome: 'approved'
      approved: true
      /** Absent when no request was made (not gated, session grant, gating disabled). */
      requestId?: string
      /** The arguments to run with: the original ones or the person's edit. */
      arguments: unknown
      edited: boolean
      by: ApprovedBy
      scope: Scope
      responder?: string
    }
  | { outcome: 'denied'; approved: false; requestId: string; reason?: string; responder?: string }
  | { outcome: 'timed-out'; approved: false; requestId: string; timeoutMs: number }
  | {
      outcome: 'cancelled'
      approved: false
      requestId?: string
      /** The cancel reason (as in the core's JSON). */
      reason: CancelReason
      cancelReason: CancelReason
    }

/** Options of {@link PendingRequest.approve} (another option is refused: `malformed`). */
export interface ApproveOptions {
  /**
   * Edited arguments (the tool must be `editable`); validated against its schema. Must be JSON,
   * like a call's arguments (see {@link Gate.confirm}).
   */
  arguments?: unknown
  /** `'session'`: also approve later calls of this tool in this session. Default `'once'`. */
  scope?: Scope
  /** Who answered (recorded in events and the audit log). */
  responder?: string
}

/** Options of {@link PendingRequest.deny} (another option is refused: `malformed`). */
export interface DenyOptions {
  /** Who answered. */
  responder?: string
}

/**
 * A person's answer to a request, for {@link Gate.respond}. Fields are checked against the
 * request when present (`tool`, `argumentsDigest`, `sessionId`: `mismatch` when they differ,
 * naming the field so). A field not listed here (`requestId`: the request's id is `id`; the
 * core's JSON names such as `session_id`, which {@link Gate.respondJson} takes) is refused
 * (`malformed`), and so is a missing `id` or `decision`, before the gate sees the response.
 */
export interface ConfirmationResponseInput {
  // @generated begin response-input (core/tests/sourcegen.rs, from the core's `ConfirmationResponse`)
  /** The request's id. */
  id: string
  /** Approve or deny. */
  decision: ResponseDecision
  /** Once (default) or for the rest of the session. */
  scope?: Scope
  /**
   * Edited arguments (approve only; the tool must be editable). Validated against the
   * tool's schema before they can run. `null` is no edit, as when absent.
   */
  arguments?: unknown
  /** The person's reason, passed to the model on a denial. */
  reason?: string
  /** Who answered. */
  responder?: string
  /** The tool the person saw; checked against the request when present. */
  tool?: string
  /** The digest of the arguments the person saw; checked against the request when present. */
  argumentsDigest?: string
  /** The request's session; checked against the request when present. */
  sessionId?: string
  /** When the person answered, in Unix epoch milliseconds; filled in by the gate when absent. */
  atMs?: number
  // @generated end response-input
  /** Optional: a `confirmation-response` event can be passed as it is. */
  type?: 'confirmation-response'
}

/** A call waiting for a person, as plain data (the `confirmation-request` event). */
export type ConfirmationRequestEvent = ConfirmationRequestData
/** A person's answer (`confirmation-response`). */
export type ConfirmationResponseEvent = ConfirmationResponseData
/** A request's deadline passed with no answer (`confirmation-timeout`). */
export type ConfirmationTimeoutEvent = ConfirmationTimeoutData
/** The final event of every request (`confirmation-resolved`). */
export type ConfirmationResolvedEvent = ConfirmationResolvedData
/** Any event in the core's vocabulary, as plain data. */
export type SignoffEvent =
  | ConfirmationRequestEvent
  | ConfirmationResponseEvent
  | ConfirmationTimeoutEvent
  | ConfirmationResolvedEvent

/** What an approval token says, once its signature verified ({@link Gate.inspectToken}). */
export type TokenClaims = TokenClaimsData

/** What an accepted approval marker says ({@link Gate.acceptApprovalMarker}). */
export type MarkerClaims = MarkerClaimsData

/** A person's answer presented with an approval token ({@link Gate.respondToken}). */
export interface TokenResponseInput {
  /**
   * Who presents the token, as your server authenticated them (a logged-in user, a verified
   * chat account). Must be the approver the token was issued to (`wrong_approver` otherwise).
   */
  approver: string
  /** `'approve'` runs exactly the arguments stored with the request (or the edit below). */
  decision: ResponseDecision
  /**
   * Edited arguments (approvals only; the tool must be `editable`): validated against the
   * schema and re-checked by the tool's rules, as for {@link Gate.respond}.
   */
  arguments?: unknown
  /** `'once'` (default) or `'session'`. */
  scope?: Scope
  /** The person's reason (passed to the model on a denial). */
  reason?: string
}

/**
 * Where a request is in its life (durable store): `pending → approved → executing → done`, or
 * `pending → denied | timed-out | cancelled`, or `pending → approved → released` (a `confirm`
 * caller took the approval and runs the tool itself). `interrupted`: found `approved` or
 * `executing` at start-up, reported and never run again.
 */
export type RecordState = RecordStateKind

/**
 * A request as the durable store keeps it ({@link Gate.record}). `result` is, for `done`, the
 * tool's result as plain data (`status`, `output`, `content`, ...); for `interrupted` and
 * `cancelled`, a note.
 */
export type StoredRecord = StoredRecordData

/** What {@link Gate.recover} found and did. */
export interface Recovery {
  /**
   * Still pending: waiting again until their original deadlines (answerable here, or with
   * their tokens). Approving one runs its tool's executor once; the result is stored
   * ({@link Gate.record}).
   */
  restored: PendingRequest[]
  /** Their deadline passed while the process was down: resolved as timed out. */
  timedOut: ConfirmationRequestEvent[]
  /**
   * Approved or executing when the process stopped: the tool may or may not have run, so each
   * is now `interrupted` and never run again (the records as they were found).
   */
  interrupted: StoredRecord[]
  /**
   * Pending, but cancelled instead of restored: the tool is not registered or has no executor,
   * or the stored arguments no longer match their digest or the tool's schema.
   */
  notRestored: Array<{ request: ConfirmationRequestEvent; reason: string }>
}

/** Options of {@link Gate.pendingPage}. */
export interface PendingPageOptions {
  /**
   * Start after this cursor: an earlier page's `next`, or a lag's `more`
   * (`<createdAtMs>-<id>`). Left out: from the oldest pending request.
   */
  after?: string
  /** At most this many requests: a whole number from 1 to 2^32 - 1. Default 1,000. */
  limit?: number
}

/** One page of pending requests ({@link Gate.pendingPage}). */
export interface PendingPage {
  /** Oldest first (by creation time, then id). */
  requests: PendingRequest[]
  /** The cursor the next page starts after (pass it as `after`); `null` on the last page. */
  next: string | null
}

/** Options of {@link Gate.pendingAll}. */
export interface PendingAllOptions {
  /** Requests read per page (between pages the event loop runs): 1 to 2^32 - 1. Default 1,000. */
  pageSize?: number
}
