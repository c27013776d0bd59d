/**
 * signoff: a person between an AI agent and the tools it calls.
 *
 * @packageDocumentation
 */
export { Gate, DEFAULT_KEYWORDS, DEFAULT_SESSION, HANDLER_RESPONDER, MARKER_META_KEY } from './gate'
export { PendingRequest } from './request'
export { Console } from './console'
export type { ConsoleOptions, ConsoleAddress } from './console'
export { EventStream, parseEvent, serializeEvent } from './events'
export type { GateEvent, LaggedEvent, EventType, EventStreamOptions } from './events'
export {
  ToolResult,
  fromOpenAIToolCall,
  toolCallsFromOpenAIMessage,
  fromAISDKToolCall,
  fromAnthropicToolUse,
} from './result'
export type { OpenAIToolCall, OpenAIResponsesFunctionCall, FromModelOptions } from './result'
export { SignoffError, ERROR_CODES, isSignoffError } from './errors'
export { MAX_NESTING } from './json'
export { Secret, TokenKeys } from './token'
export { verifyAuditChain } from './audit'
export type { ChainReport, ChainProblem, ChainProblemKind, VerifyAuditChainOptions } from './audit'
export type { ErrorCode } from './errors'
export type * from './types'
