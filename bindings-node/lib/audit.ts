import { checkParam, fields, optString, type Shape } from './check'
import { toSignoffError } from './errors'
import { native, type ChainProblemData, type ChainProblemKind, type ChainReportData } from './native'

export type { ChainProblemKind }
/** The first problem in an audit chain: which file and line, the record's `seq`, in words. */
export type ChainProblem = ChainProblemData
/** What {@link verifyAuditChain} found. `intact` is true when `problem` is absent. */
export type ChainReport = ChainReportData

/** Options of {@link verifyAuditChain}. */
export interface VerifyAuditChainOptions {
  /**
   * The SQLite store (`GateOptions.storePath`) of the gate that wrote the log. A gate built with
   * both `storePath` and `auditPath` anchors the chain's head in the store after each batch of
   * records; with it, verification also reports records cut from the end (`truncated`) and a
   * replaced anchored record (`edited`). Verify after that gate is closed: while a gate has the
   * database open it is locked.
   */
  storePath?: string
}

const OPTIONS: Shape = {
  what: 'the options of verifyAuditChain',
  fields: ['storePath'],
  aliases: { store: 'storePath', db: 'storePath', database: 'storePath' },
}

/**
 * Verifies a hash-chained audit log written with `GateOptions.auditPath` (the core's
 * `verify_chain`): its rotated files (`<path>.1`, `<path>.2`, ..., see
 * `GateOptions.auditRotateBytes`) then `path`, as one chain. Reports the first record that was
 * `edited`, `missing`, `reordered`, or a line that is not a chained record (`malformed`).
 *
 * The chain alone cannot show records **cut from the end**: a log truncated after any record is
 * still a valid chain, and is reported intact. Pass `storePath` (the durable store the gate
 * that wrote the log used, once that gate is closed) to check the log against the head anchored
 * there (the core's `verify_chain_anchored`): a log that ends before the anchored record is
 * `truncated`, one whose anchored record was replaced is `edited`. A log that goes on past the
 * anchor is fine (the anchor may lag by the records of the last batch). A store that never
 * anchored this log (no audit log was configured with it) adds nothing. Without a durable store
 * there is no anchor: keep the log somewhere its writer cannot rewrite.
 *
 * @example
 * ```ts
 * await gate.close()
 * const report = verifyAuditChain('audit.jsonl', { storePath: 'signoff.db' })
 * if (!report.intact) console.error(`${report.problem!.file}:${report.problem!.line}: ${report.problem!.message}`)
 * ```
 * @throws {@link SignoffError} `io` when the log or `storePath` does not exist or the log cannot
 *   be read, `store` when `storePath` cannot be read (a gate still has it open, or it is not
 *   signoff's), `malformed` for an unknown option or a value of the wrong type.
 */
export function verifyAuditChain(path: string, options: VerifyAuditChainOptions = {}): ChainReport {
  checkParam(path, 'path', 'verifyAuditChain')
  const storePath = optString(fields(options, OPTIONS), 'storePath', OPTIONS)
  try {
    return native.verifyAuditChain(path, storePath)
  } catch (e) {
    throw toSignoffError(e)
  }
}
