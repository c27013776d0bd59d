import { native, type ChainProblemData, type ChainProblemKind, type ChainReportData } from './native'

export type { ChainProblemKind }
/** The first problem in an audit chain: which file and line, the record's `seq`, in words. */
export type ChainProblem = ChainProblemData
/** What {@link verifyAuditChain} found. `intact` is true when `problem` is absent. */
export type ChainReport = ChainReportData

/**
 * Verifies a hash-chained audit log written with `GateOptions.auditPath` (the core's
 * `verify_chain`): its rotated files (`<path>.1`, `<path>.2`, ..., see
 * `GateOptions.auditRotateBytes`) then `path`, as one chain. Reports the first record that was
 * `edited`, `missing`, `reordered`, or a line that is not a chained record (`malformed`).
 *
 * @example
 * ```ts
 * const report = verifyAuditChain('audit.jsonl')
 * if (!report.intact) console.error(`${report.problem!.file}:${report.problem!.line}: ${report.problem!.message}`)
 * ```
 * @throws Error when the log cannot be read (e.g. it does not exist).
 */
export function verifyAuditChain(path: string): ChainReport {
  return native.verifyAuditChain(path)
}
