import { fields, isRecord, malformed, optString, show, type Shape } from './check'
import { native, type ToolResultData } from './native'
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
  /** The arguments the tool ran with (the same object as an approval's `decision.arguments`). */
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
    const decision = d.decision
    if (decision !== undefined) {
      // The native layer leaves out of the decision what the result says already (its JSON is
      // parsed on every call): the request id, and an approval's arguments and `edited`.
      if (decision.requestId === undefined && d.requestId !== undefined) decision.requestId = d.requestId
      if (decision.approved && decision.arguments === undefined && d.arguments !== undefined) {
        decision.arguments = d.arguments
        decision.edited = d.edited
      }
    }
    this.decision = decision as Decision | undefined
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

/**
 * An OpenAI Responses API `function_call` output item (also what the OpenAI Agents SDK hands
 * over): answer it with {@link ToolResult.toOpenAIResponsesItem}.
 */
export interface OpenAIResponsesFunctionCall {
  type: 'function_call'
  call_id: string
  name: string
  arguments: string
  id?: string
  status?: string
}

/** Options for the converters from model tool calls. */
export interface FromModelOptions {
  sessionId?: string
  metadata?: unknown
}

const FROM_MODEL: Shape = {
  what: 'the options',
  fields: ['sessionId', 'metadata'],
  aliases: { session: 'sessionId', meta: 'metadata' },
}

/** The options checked (`sessionId`, `metadata`), for `converter`'s message. */
function fromModel(options: unknown, converter: string): { sessionId?: string; metadata: unknown } {
  const shape = { ...FROM_MODEL, what: `the options of ${converter}` }
  const o = fields(options, shape, true)
  return { sessionId: optString(o, 'sessionId', shape), metadata: o.metadata }
}

function notA(converter: string, what: string, shape: string, v: unknown, problem?: string): never {
  const why = problem ?? `got ${show(v)}`
  throw malformed(`${converter}: not ${what} (${shape}): ${why}`)
}

function parseArguments(raw: unknown): unknown {
  if (typeof raw !== 'string') return raw ?? {}
  if (raw.trim() === '') return {}
  // Read as strictly as the core reads JSON: text with a repeated key (which value would run?),
  // NaN or too deep nesting is left as the raw string, like text that is not JSON at all: the
  // tool's schema refuses it (`invalid_arguments`) and the model is told so, instead of the call
  // silently running with other arguments.
  if (!native.isStrictJson(raw)) return raw
  return JSON.parse(raw)
}

/**
 * A {@link ToolCall} from an OpenAI tool call (arguments are parsed JSON): a Chat Completions
 * tool call (`{ id, type: 'function', function: { name, arguments } }`) or a Responses API
 * `function_call` item (`{ type: 'function_call', call_id, name, arguments }`).
 */
export function fromOpenAIToolCall(tc: OpenAIToolCall | OpenAIResponsesFunctionCall, options: FromModelOptions = {}): ToolCall {
  const what = 'an OpenAI tool call'
  const shape =
    "{ id, type: 'function', function: { name, arguments } } (Chat Completions) or { type: 'function_call', call_id, name, arguments } (Responses)"
  if (!isRecord(tc)) notA('fromOpenAIToolCall', what, shape, tc)
  if (tc.type === 'function_call' || (tc.function === undefined && tc.call_id !== undefined)) {
    // The Responses API: the name and arguments on the item itself, its id as `call_id`.
    if (typeof tc.name !== 'string') notA('fromOpenAIToolCall', what, shape, tc, `\`name\` is ${show(tc.name)}`)
    if (tc.call_id !== undefined && typeof tc.call_id !== 'string') {
      notA('fromOpenAIToolCall', what, shape, tc, `\`call_id\` is ${show(tc.call_id)}`)
    }
    const { sessionId, metadata } = fromModel(options, 'fromOpenAIToolCall')
    return { tool: tc.name, arguments: parseArguments(tc.arguments), callId: tc.call_id as string | undefined, sessionId, metadata }
  }
  const fn: unknown = tc.function
  if (!isRecord(fn)) notA('fromOpenAIToolCall', what, shape, tc, `\`function\` is ${show(fn)}`)
  if (typeof fn.name !== 'string') notA('fromOpenAIToolCall', what, shape, tc, `\`function.name\` is ${show(fn.name)}`)
  const { sessionId, metadata } = fromModel(options, 'fromOpenAIToolCall')
  return { tool: fn.name, arguments: parseArguments(fn.arguments), callId: tc.id, sessionId, metadata }
}

/** The tool calls of an OpenAI assistant message (`[]` when it has none). */
export function toolCallsFromOpenAIMessage(
  message: { tool_calls?: OpenAIToolCall[] | null },
  options: FromModelOptions = {},
): ToolCall[] {
  if (!isRecord(message)) {
    throw malformed(`toolCallsFromOpenAIMessage: the message must be an object (an assistant message, with tool_calls), not ${show(message)}`)
  }
  const calls: unknown = message.tool_calls ?? []
  if (!Array.isArray(calls)) {
    throw malformed(`toolCallsFromOpenAIMessage: the message's tool_calls must be an array, not ${show(calls)}`)
  }
  fromModel(options, 'toolCallsFromOpenAIMessage')
  return calls.map((tc: OpenAIToolCall) => fromOpenAIToolCall(tc, options))
}

/** A {@link ToolCall} from a Vercel AI SDK tool call (`{ toolCallId, toolName, input | args }`). */
export function fromAISDKToolCall(
  tc: { toolCallId: string; toolName: string; input?: unknown; args?: unknown },
  options: FromModelOptions = {},
): ToolCall {
  const shape = '{ toolCallId, toolName, input }'
  if (!isRecord(tc)) notA('fromAISDKToolCall', 'a Vercel AI SDK tool call', shape, tc)
  if (typeof tc.toolName !== 'string') notA('fromAISDKToolCall', 'a Vercel AI SDK tool call', shape, tc, `\`toolName\` is ${show(tc.toolName)}`)
  const { sessionId, metadata } = fromModel(options, 'fromAISDKToolCall')
  return {
    tool: tc.toolName,
    arguments: parseArguments(tc.input !== undefined ? tc.input : tc.args),
    callId: tc.toolCallId,
    sessionId,
    metadata,
  }
}

/** A {@link ToolCall} from an Anthropic `tool_use` content block. */
export function fromAnthropicToolUse(
  block: { id: string; name: string; input: unknown },
  options: FromModelOptions = {},
): ToolCall {
  const shape = "{ type: 'tool_use', id, name, input }"
  if (!isRecord(block)) notA('fromAnthropicToolUse', 'an Anthropic tool_use block', shape, block)
  if (typeof block.name !== 'string') notA('fromAnthropicToolUse', 'an Anthropic tool_use block', shape, block, `\`name\` is ${show(block.name)}`)
  const { sessionId, metadata } = fromModel(options, 'fromAnthropicToolUse')
  return { tool: block.name, arguments: block.input ?? {}, callId: block.id, sessionId, metadata }
}
