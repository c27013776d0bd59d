// Loads the `_native` addon through the loader napi generated (native/_native.js), which picks the
// .node file next to it or the per-platform package (@signoff/node-<platform>).
import * as path from 'node:path'

/** The addon's exports, typed by the checked-in native/_native.d.ts. */
export type Native = typeof import('../native/_native.js')

// dist/*.js -> ../native/_native.js (a runtime path: the loader is not part of the compilation)
// eslint-disable-next-line @typescript-eslint/no-require-imports
export const native: Native = require(path.join(__dirname, '..', 'native', '_native.js'))

export type {
  ApprovedByKind,
  CancelReasonKind,
  ChainProblemData,
  ChainProblemKind,
  ChainReportData,
  ConfirmationRequestData,
  ConfirmationResolvedData,
  ConfirmationResponseData,
  ConfirmationTimeoutData,
  DecisionData,
  ErrorCode,
  EvaluationData,
  LaggedData,
  NativeConsole,
  NativeGate,
  NativeSecret,
  NativeSubscription,
  NativeTokenKeys,
  NotRestoredData,
  OutcomeKind,
  PendingPageData,
  RecordStateKind,
  RecoveryData,
  ResponseDecisionKind,
  ScopeKind,
  StoredRecordData,
  TokenClaimsData,
  MarkerClaimsData,
  ToolCallData,
  ToolResultData,
  ToolStatusKind,
} from '../native/_native.js'
