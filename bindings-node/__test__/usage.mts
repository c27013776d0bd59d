// Compiled (not run) by types.test.mjs: what a TypeScript user writes, through the package's
// `import` entry. Lines marked @ts-expect-error must fail to compile.
import {
  Gate,
  SignoffError,
  ERROR_CODES,
  isSignoffError,
  fromOpenAIToolCall,
  parseEvent,
  serializeEvent,
  type Decision,
  type ErrorCode,
  type ExecutionContext,
  type GateEvent,
  type PendingRequest,
  type ToolDefinition,
  type ToolResult,
  type Outcome,
  Secret,
  TokenKeys,
  verifyAuditChain,
  type ChainReport,
  type Recovery,
  type StoredRecord,
  type TokenClaims,
  type RecordState,
  type PendingPage,
  type LaggedEvent,
  Console,
  type ConsoleOptions,
} from 'signoff'

interface DeleteArgs {
  path: string
}

const tool: ToolDefinition<DeleteArgs> = {
  name: 'delete_file',
  description: 'Deletes a file',
  parameters: { type: 'object', properties: { path: { type: 'string' } }, required: ['path'] },
  approval: 'required',
  editable: true,
  rules: [{ kind: 'path_outside', pointer: '/path', prefixes: ['/tmp'] }],
  source: { kind: 'external', server: 'fs' },
  execute: async ({ path }, context: ExecutionContext) => {
    const requestId: string | null = context.requestId
    const callId: string | null = context.callId
    const who = [context.tool, context.sessionId, context.edited] satisfies [string, string, boolean]
    // @ts-expect-error the context is read-only
    context.edited = true
    return { deleted: path, aborted: context.signal.aborted, requestId, callId, who }
  },
}

const gate = new Gate({ defaultTimeoutMs: 30_000, keywords: ['delete'], denyWhenUnobserved: true })
gate.register(tool)

// @ts-expect-error unknown approval mode
gate.register({ name: 'x', approval: 'sometimes' })
// @ts-expect-error unknown option
new Gate({ defaultTimeoutMS: 1 })

gate.on('confirmation-request', async (req: PendingRequest) => {
  const shown: string = req.displayArguments
  const deadline: Date = req.deadline
  void shown
  void deadline
  const outcome: Outcome = req.approve({ arguments: { path: '/tmp/x' }, scope: 'session', responder: 'me' })
  void outcome
  // @ts-expect-error scope is 'once' | 'session'
  req.approve({ scope: 'forever' })
  req.deny('because')
})
gate.on('confirmation-resolved', (e) => {
  const cancel: 'no-approver' | 'shutdown' | 'aborted' | 'session-ended' | 'approval-failed' | undefined = e.cancelReason
  void cancel
})
gate.on('lagged', (e) => {
  const n: number = e.missed
  const pending: PendingRequest[] = e.pending
  const more: string | null = e.more
  void n
  void pending
  void more
})

async function paging(): Promise<void> {
  const page: PendingPage = gate.pendingPage({ after: undefined, limit: 500 })
  const requests: PendingRequest[] = page.requests
  const next: string | null = page.next
  if (next !== null) gate.pendingPage({ after: next })
  gate.pendingPage()
  void requests
  // @ts-expect-error the cursor is a string from an earlier page
  gate.pendingPage({ after: 5 })
  // @ts-expect-error unknown option
  gate.pendingPage({ cursor: 'x' })
  for await (const req of gate.pendingAll({ pageSize: 100 })) {
    const r: PendingRequest = req
    void r
  }
  for await (const req of gate.pendingAll()) void req
  const lag: LaggedEvent = { type: 'lagged', missed: 1, pending: [], more: null }
  void lag
}
void paging

async function main(): Promise<void> {
  const d: Decision = await gate.confirm({ tool: 'delete_file', arguments: { path: '/a' } }, { signal: AbortSignal.timeout(10) })
  if (d.outcome === 'approved') {
    const by: 'not-gated' | 'person' | 'session-grant' | 'gating-disabled' = d.by
    void by
  } else if (d.outcome === 'cancelled') {
    const why: 'no-approver' | 'shutdown' | 'aborted' | 'session-ended' | 'approval-failed' = d.reason
    void why
  }
  const r: ToolResult = await gate.execute(fromOpenAIToolCall({ id: 'c', function: { name: 'delete_file', arguments: '{}' } }))
  const msg: { role: 'tool'; tool_call_id: string; content: string } = r.toOpenAIMessage()
  void msg
  const rs: ToolResult[] = await gate.executeBatch([{ tool: 'delete_file' }])
  void rs
  for await (const e of gate.events()) {
    const ev: GateEvent = e
    if (ev.type === 'confirmation-request') ev.approve()
    else if (ev.type === 'lagged') ev.pending.forEach((p) => p.deny())
    break
  }
  for await (const e of gate.observe({ types: ['confirmation-resolved'] })) {
    const ev: GateEvent = e
    void ev
    break
  }
  const approvers: number = gate.approverCount
  void approvers
  try {
    gate.respond({ id: 'x', decision: 'approve', argumentsDigest: 'sha256:..', sessionId: 's' })
  } catch (e) {
    if (e instanceof SignoffError) {
      const c: ErrorCode = e.code
      void c
    }
    if (isSignoffError(e, 'already_resolved')) void e.code
  }
  // @ts-expect-error decision is 'approve' | 'deny'
  gate.respond({ id: 'x', decision: 'maybe' })
  const codes: readonly ErrorCode[] = ERROR_CODES
  void codes
  const ev = parseEvent('{}')
  const wire: Record<string, unknown> = serializeEvent(ev)
  void wire
  await gate.close()
}
void main

async function remote(): Promise<void> {
  const keys: TokenKeys = new TokenKeys('k1', Secret.generate()).rotate('k2', 'AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8=')
  const current: string = keys.currentKeyId
  const ids: string[] = keys.keyIds()
  void current
  void ids
  const g = new Gate({
    storePath: '/tmp/signoff.db',
    synchronousFull: true,
    tokenKeys: keys,
    tokenTtlMs: 60_000,
    approvers: { delete_file: ['alice'], '*': ['admin'] },
    forbidSelfApproval: true,
    auditPath: '/tmp/audit.jsonl',
    auditRotateBytes: 1 << 20,
    denyWhenUnobserved: false,
  })
  new Gate({ tokenKeys: 'k1:AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8=' })
  const shared = (): Gate =>
    new Gate({ storeUrl: 'postgres://signoff@db.internal/signoff', storeOwner: 'agent-1', storeSchema: 'signoff' })
  void shared
  // @ts-expect-error storeUrl is a connection string
  const badUrl = (): Gate => new Gate({ storeUrl: 5432 })
  void badUrl
  // @ts-expect-error approvers map tools to lists of names
  new Gate({ approvers: { delete_file: 'alice' } })
  const rec: Recovery = g.recover()
  const first: PendingRequest | undefined = rec.restored[0]
  const token: string = first ? first.issueToken('alice') : g.issueToken('id', 'alice')
  const claims: TokenClaims = g.inspectToken(token)
  const exp: number = claims.expiresAtMs
  void exp
  const o: Outcome = g.respondToken(token, { approver: 'alice', decision: 'approve', scope: 'once' })
  void o
  // @ts-expect-error a token response names its approver
  g.respondToken(token, { decision: 'approve' })
  const r: StoredRecord | undefined = g.record(claims.requestId)
  const st: RecordState | undefined = r?.state
  void st
  const report: ChainReport = verifyAuditChain('/tmp/audit.jsonl')
  const anchored: ChainReport = verifyAuditChain('/tmp/audit.jsonl', { storePath: '/tmp/signoff.db' })
  void anchored
  // @ts-expect-error the option is storePath
  verifyAuditChain('/tmp/audit.jsonl', { store: '/tmp/signoff.db' })
  const kind: 'edited' | 'missing' | 'reordered' | 'malformed' | 'truncated' | undefined = report.problem?.kind
  void kind
  await g.close()
}
void remote

// The approval console.
async function approvalConsole(): Promise<void> {
  const g = new Gate({ tokenKeys: new TokenKeys('k1', Secret.generate()) })
  const options: ConsoleOptions = { bind: '127.0.0.1:0', signInTtlMs: 60_000, approverKeys: { alice: 'a-long-enough-key' } }
  const c: Console = await g.serveConsole(options)
  const url: string = c.url
  const link: string = c.signInLink('alice')
  const port: number = c.address.port
  const closed: boolean = c.closed
  void [url, link, port, closed]
  // @ts-expect-error durations are in milliseconds: signInTtlMs
  await g.serveConsole({ signInTtl: 60 })
  // @ts-expect-error approver keys map names to keys
  await g.serveConsole({ approverKeys: ['alice'] })
  await c.close()
  await g.close()
}
void approvalConsole
