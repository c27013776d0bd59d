import type { ToolResultData } from './native'
import type { Decision, ToolCall, ToolStatus } from './types'
import type { ErrorCode } from './errors'

/**
 * What became of one call, in the model's terms. `content` is the text to hand back to the model
 * as the tool message: the tool's output, or (for a call that did not run) words telling it the
 * user declined and not to retry.
 */
export class ToolResult {
  /** The model's id for the call. */
  readonly callId?: string
  readonly tool: string
  readonly status: ToolStatus
  /** The tool's output, when it ran and succeeded. */
  readonly output?: unknown
  /** The tool's error, or why the call was refused. */
  readonly error?: string
  /** The error code, when the call was refused (`rejected`). */
  readonly errorCode?: ErrorCode
  /** The arguments the tool ran with. */
  readonly arguments?: unknown
  /** The person changed the arguments before approving. */
  readonly edited: boolean
  /** The confirmation request, if one was made. */
  readonly requestId?: string
  /** The gate's decision. */
  readonly decision?: Decision
  /** Text for the model. */
  readonly content: string
  /** True unless the tool ran successfully (Anthropic-style `is_error`). */
  readonly isError: boolean

  /** @internal */
  constructor(d: ToolResultData) {
    this.callId = d.callId
    this.tool = d.tool
    this.status = d.status
    this.output = d.output
    this.error = d.error
    this.errorCode = d.errorCode
    this.arguments = d.arguments
    this.edited = d.edited
    this.requestId = d.requestId
    this.decision = d.decision as Decision | undefined
    this.content = d.content
    this.isError = d.isError
  }

  /** True when the tool ran (`executed` or `failed`). */
  get ran(): boolean {
    return this.status === 'executed' || this.status === 'failed'
  }

  /** The OpenAI Chat Completions tool message: `{ role: 'tool', tool_call_id, content }`. */
  toOpenAIMessage(): { role: 'tool'; tool_call_id: string; content: string } {
    return { role: 'tool', tool_call_id: this.callId ?? '', content: this.content }
  }

  /** The OpenAI Responses API item: `{ type: 'function_call_output', call_id, output }`. */
  toOpenAIResponsesItem(): { type: 'function_call_output'; call_id: string; output: string } {
    return { type: 'function_call_output', call_id: this.callId ?? '', output: this.content }
  }

  /** A Vercel AI SDK (v5) tool result part. */
  toAISDKToolResult(): {
    type: 'tool-result'
    toolCallId: string
    toolName: string
    output: { type: 'text' | 'error-text'; value: string }
  } {
    return {
      type: 'tool-result',
      toolCallId: this.callId ?? '',
      toolName: this.tool,
      output: { type: this.isError ? 'error-text' : 'text', value: this.content },
    }
  }

  /** A Vercel AI SDK (v5) tool message holding this result. */
  toAISDKMessage(): { role: 'tool'; content: ReturnType<ToolResult['toAISDKToolResult']>[] } {
    return { role: 'tool', content: [this.toAISDKToolResult()] }
  }

  /** An Anthropic Messages `tool_result` content block. */
  toAnthropicBlock(): { type: 'tool_result'; tool_use_id: string; content: string; is_error: boolean } {
    return { type: 'tool_result', tool_use_id: this.callId ?? '', content: this.content, is_error: this.isError }
  }
}

/** An OpenAI Chat Completions tool call (`message.tool_calls[i]`). */
export interface OpenAIToolCall {
  id: string
  type?: 'function'
  function: { name: string; arguments: string }
}

/** Options for the converters from model tool calls. */
export interface FromModelOptions {
  sessionId?: string
  metadata?: unknown
}

function parseArguments(raw: unknown): unknown {
  if (typeof raw !== 'string') return raw ?? {}
  if (raw.trim() === '') return {}
  try {
    return JSON.parse(raw)
  } catch {
    // Left as the raw string: the tool's schema refuses it (`invalid_arguments`) and the model
    // is told so, instead of the call silently running with other arguments.
    return raw
  }
}

/** A {@link ToolCall} from an OpenAI Chat Completions tool call (arguments are parsed JSON). */
export function fromOpenAIToolCall(tc: OpenAIToolCall, options: FromModelOptions = {}): ToolCall {
  return {
    tool: tc.function.name,
    arguments: parseArguments(tc.function.arguments),
    callId: tc.id,
    sessionId: options.sessionId,
    metadata: options.metadata,
  }
}

/** The tool calls of an OpenAI assistant message (`[]` when it has none). */
export function toolCallsFromOpenAIMessage(
  message: { tool_calls?: OpenAIToolCall[] | null },
  options: FromModelOptions = {},
): ToolCall[] {
  return (message.tool_calls ?? []).map((tc) => fromOpenAIToolCall(tc, options))
}

/** A {@link ToolCall} from a Vercel AI SDK tool call (`{ toolCallId, toolName, input | args }`). */
export function fromAISDKToolCall(
  tc: { toolCallId: string; toolName: string; input?: unknown; args?: unknown },
  options: FromModelOptions = {},
): ToolCall {
  return {
    tool: tc.toolName,
    arguments: parseArguments(tc.input !== undefined ? tc.input : tc.args),
    callId: tc.toolCallId,
    sessionId: options.sessionId,
    metadata: options.metadata,
  }
}

/** A {@link ToolCall} from an Anthropic `tool_use` content block. */
export function fromAnthropicToolUse(
  block: { id: string; name: string; input: unknown },
  options: FromModelOptions = {},
): ToolCall {
  return { tool: block.name, arguments: block.input ?? {}, callId: block.id, sessionId: options.sessionId, metadata: options.metadata }
}
