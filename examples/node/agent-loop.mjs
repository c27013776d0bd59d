#!/usr/bin/env node
// An OpenAI-style tool loop with signoff between the model and the tools.
//
//   node examples/node/agent-loop.mjs                 # a person answers in the terminal
//   node examples/node/agent-loop.mjs --timeout 10    # 10 s to answer each request (default 120)
//   node examples/node/agent-loop.mjs --auto approve  # CI: approve everything
//   node examples/node/agent-loop.mjs --auto deny     # CI: deny everything
//
// The "model" is scripted (no network): it asks for a few tool calls in the OpenAI Chat
// Completions format, reads the tool messages back, and answers. The tools work on an in-memory
// file system, so nothing on this machine is touched. Build the package first
// (`cd bindings-node && npm install && npm run build`).
//
// Keys: a = approve, d = deny (asks for a reason, shown to the model), e = edit the arguments
// (JSON) and approve, s = approve this tool for the rest of the session. Answers can be piped too,
// one a line (`printf 'a\nd\nnot now\ns\n' | node examples/node/agent-loop.mjs`): lines read
// before a request is shown wait for it.
//
// The terminal approver never waits on a stale prompt. One request is on screen at a time, the
// others wait their turn. When the request on screen times out or ends elsewhere, it is withdrawn
// at once and the next one shown. A line answers the request that was on screen when it was typed,
// never one that has gone. When stdin closes (Ctrl-D), nobody is left to answer: every waiting
// request fails safe (its tool does not run) and the example ends normally.
//
// In a project of your own: `import { Gate, toolCallsFromOpenAIMessage } from 'signoff'`.
import { clearScreenDown, createInterface, cursorTo } from 'node:readline'
import { parseArgs } from 'node:util'
import { Gate, toolCallsFromOpenAIMessage } from '../../bindings-node/dist/index.mjs'

// ---- command line ------------------------------------------------------------------------------

const USAGE = 'usage: agent-loop.mjs [--auto approve|deny] [--timeout SECONDS]'
let auto, timeoutSeconds
try {
  const { values } = parseArgs({ options: { auto: { type: 'string' }, timeout: { type: 'string' } } })
  auto = values.auto
  if (auto !== undefined && auto !== 'approve' && auto !== 'deny') throw new Error(`--auto takes approve or deny, not ${JSON.stringify(auto)}`)
  timeoutSeconds = Number(values.timeout ?? 120)
  if (!(timeoutSeconds > 0 && timeoutSeconds <= 86_400)) throw new Error(`--timeout takes seconds, more than 0 and at most 86400, not ${JSON.stringify(values.timeout)}`)
} catch (e) {
  console.error(`${e.message}\n${USAGE}`)
  process.exit(2)
}

// ---- the tools (an in-memory file system and outbox) ------------------------------------------

const files = new Map([
  ['/home/me/notes.txt', 'Buy milk. Send the Q3 report to my boss.'],
  ['/home/me/q3-report.pdf', '%PDF-1.7 ...'],
  ['/tmp/build.log', 'ok'],
  ['/tmp/cache.bin', '...'],
])
const outbox = []

const gate = new Gate({ defaultTimeoutMs: Math.max(1, Math.round(timeoutSeconds * 1000)) })
gate.register({
  name: 'list_files',
  description: 'Lists the files in a directory',
  parameters: { type: 'object', properties: { dir: { type: 'string' } }, required: ['dir'] },
  readOnly: true,
  execute: ({ dir }) => [...files.keys()].filter((f) => f.startsWith(dir.endsWith('/') ? dir : dir + '/')),
})
gate.register({
  name: 'read_file',
  description: 'Reads a text file',
  parameters: { type: 'object', properties: { path: { type: 'string' } }, required: ['path'] },
  execute: ({ path }) => {
    if (!files.has(path)) throw new Error(`no such file: ${path}`)
    return files.get(path)
  },
})
gate.register({
  // "delete" in the name: gated by the default policy.
  name: 'delete_file',
  description: 'Deletes a file permanently',
  parameters: { type: 'object', properties: { path: { type: 'string' } }, required: ['path'], additionalProperties: false },
  editable: true,
  execute: ({ path }) => {
    if (!files.delete(path)) throw new Error(`no such file: ${path}`)
    return { deleted: path }
  },
})
gate.register({
  // "send" in the name: gated. Editable, so the person can fix the recipient.
  name: 'send_email',
  description: 'Sends an email on your behalf',
  parameters: {
    type: 'object',
    properties: { to: { type: 'string' }, subject: { type: 'string' }, body: { type: 'string' }, attachment: { type: 'string' } },
    required: ['to', 'subject', 'body'],
    additionalProperties: false,
  },
  editable: true,
  execute: (email) => {
    outbox.push(email)
    return { sent: true, to: email.to }
  },
})

// ---- the screen ----------------------------------------------------------------------------------

// Everything goes through say(), so that a line printed while a prompt waits for an answer (a
// request withdrawn, another one shown) starts on a line of its own.
let rl // the terminal (undefined with --auto)
let prompting = false // a prompt is on the last line, waiting for an answer

function say(text = '') {
  if (rl?.terminal && (prompting || rl.line)) {
    // Wipe the prompt and what was typed after it (the caller prompts again if it still holds).
    cursorTo(process.stdout, 0)
    clearScreenDown(process.stdout)
  } else if (prompting) {
    process.stdout.write('\n')
  }
  prompting = false
  console.log(text)
}

function promptFor(question) {
  if (rl.terminal) {
    rl.setPrompt(question)
    rl.prompt(true) // redraws what was typed so far, if anything
  } else {
    process.stdout.write(question)
  }
  prompting = true
}

// What was typed but not entered yet was meant for what is leaving the screen: drop it.
function discardTyped() {
  if (!rl?.terminal || rl.closed || !rl.line) return
  rl.setPrompt('')
  rl.write(null, { ctrl: true, name: 'e' }) // to the end of the line
  rl.write(null, { ctrl: true, name: 'u' }) // delete everything before the cursor
  prompting = false
}

const secondsLeft = (req) => Math.max(0, Math.ceil((req.deadlineMs - Date.now()) / 1000))
const label = (req) => `${req.tool} (call ${req.toolCallId ?? req.id})`

function show(req, waiting = 0) {
  say('\n── approval needed ' + '─'.repeat(50))
  say(`tool:        ${req.tool}  (call ${req.toolCallId ?? req.id})`)
  say(`description: ${req.description}`)
  say(`why:         ${req.reasons.join('; ')}`)
  say(`arguments:\n${req.displayArguments.replace(/^/gm, '  ')}`)
  say(`deadline:    ${req.deadline.toLocaleTimeString()} (in ${secondsLeft(req)} s)`)
  if (waiting) say(`(${waiting} more request${waiting > 1 ? 's' : ''} waiting)`)
}

// ---- the approvers ------------------------------------------------------------------------------

const EXPIRED = 'expired: nobody answered in time; the tool did not run'
// The error a request fails with when nobody can answer it. It goes to stderr and the audit log,
// never to the model: the model reads that the approval step failed.
const INPUT_CLOSED = 'stdin closed'

function autoApprover(answer) {
  return (req) => {
    show(req)
    if (answer === 'approve') {
      req.approve({ responder: 'ci' })
      say('→ approved (--auto approve)')
    } else {
      req.deny('denied by --auto deny', { responder: 'ci' })
      say('→ denied (--auto deny)')
    }
  }
}

/**
 * Shows one request at a time and answers it from the lines typed on stdin. Driven by events
 * only (requests, the gate's `confirmation-resolved` events, typed lines, a timer at the deadline
 * of the request on screen), so it never sits on a prompt that no longer means anything.
 *
 * Its `confirmation-request` listener returns a promise that settles once the request has ended.
 * signoff waits for it: if it settles while the request is still pending, the approval step
 * failed, and the call ends at once as cancelled (approval-failed), its tool not run. That is how
 * a closed stdin fails safe here: the model is told the approval step failed, not that anyone
 * declined; the error itself goes to stderr (and to the audit log, if there is one).
 */
class TerminalApprover {
  #held = new Map() // id -> entry: every request whose listener promise has not settled yet
  #waiting = [] // entries waiting their turn, oldest first
  #current // the entry on screen: { req, ended, fail }
  #step = 'key' // what the next line answers: 'key', 'reason' or 'edit'
  #timer // withdraws #current at its deadline
  #readAhead = [] // piped lines read while no request was on screen: they answer the next ones
  #gap = false // the request on screen went away unanswered, and nothing has replaced it yet
  #inputClosed = false
  #finished = false

  constructor(gate) {
    rl = createInterface({ input: process.stdin, output: process.stdout, terminal: Boolean(process.stdin.isTTY) })
    rl.on('line', (text) => this.#onLine(text))
    rl.on('close', () => this.#onInputClosed())
    // e.g. EIO: the terminal went away. (Closing may fail the same way: once is enough.)
    rl.once('error', () => {
      rl.on('error', () => {})
      rl.close()
    })
    gate.on('confirmation-request', (req) => this.#onRequest(req))
    gate.on('confirmation-resolved', (event) => this.#onResolved(event))
    gate.on('lagged', () => this.#resync())
  }

  /** The agent is done: stop reading stdin. */
  finish() {
    this.#finished = true
    clearTimeout(this.#timer)
    rl.close()
  }

  // ---- what the gate says ----------------------------------------------------------------------

  #onRequest(req) {
    if (!req.isPending()) return undefined // it ended before it reached this listener
    return new Promise((ended, fail) => {
      const entry = { req, ended, fail }
      this.#held.set(req.id, entry)
      this.#waiting.push(entry)
      if (!this.#current) this.#showNext()
    })
  }

  #onResolved(event) {
    const entry = this.#held.get(event.id)
    if (!entry) return
    this.#held.delete(event.id)
    entry.ended()
    this.#withdraw(event.id, whyEnded(event))
  }

  // Events were missed: anything no longer pending has ended.
  #resync() {
    for (const [id, entry] of this.#held) {
      if (entry.req.isPending()) continue
      this.#held.delete(id)
      entry.ended()
      this.#withdraw(id, 'ended while this terminal was not keeping up')
    }
  }

  /** The request is no longer pending: take it off the screen, or out of the queue. */
  #withdraw(id, why) {
    if (this.#current?.req.id === id) {
      this.#takeDown(true)
      say(`\n${why}`)
      this.#showNext()
    } else {
      const at = this.#waiting.findIndex((e) => e.req.id === id)
      if (at < 0) return
      const [{ req }] = this.#waiting.splice(at, 1)
      say(`\n${label(req)}, which was waiting its turn: ${why}`)
      this.#prompt()
    }
  }

  #takeDown(unanswered) {
    clearTimeout(this.#timer)
    this.#current = undefined
    this.#step = 'key'
    if (unanswered) {
      this.#gap = true
      discardTyped()
    }
  }

  #showNext() {
    while (!this.#current && this.#waiting.length) {
      const entry = this.#waiting.shift()
      const { req } = entry
      const left = req.deadlineMs - Date.now()
      if (left <= 0 || !req.isPending()) {
        say(`\n${label(req)} ended before it could be shown` + (left <= 0 ? '; nobody answered in time; the tool did not run' : ''))
        continue // its confirmation-resolved event settles it
      }
      if (this.#inputClosed && !this.#readAhead.length) {
        this.#failUnanswerable(entry)
        continue
      }
      discardTyped() // typed before this request appeared: not meant for it
      this.#current = entry
      this.#step = 'key'
      this.#gap = false
      show(req, this.#waiting.length)
      // Withdraw it at its deadline, without waiting for the gate's event to arrive.
      this.#timer = setTimeout(() => this.#withdraw(req.id, EXPIRED), left)
      this.#prompt()
      while (this.#current === entry && this.#readAhead.length) this.#onAnswer(this.#readAhead.shift())
      if (this.#current === entry && this.#inputClosed) {
        this.#takeDown(false)
        this.#failUnanswerable(entry)
      }
    }
  }

  #prompt() {
    if (!this.#current) return
    if (this.#step === 'reason') promptFor('reason (shown to the model): ')
    else if (this.#step === 'edit') promptFor('new arguments as JSON: ')
    else promptFor(`[a]pprove  [d]eny  [e]dit  [s]ession-approve  (answer within ${secondsLeft(this.#current.req)} s) > `)
  }

  // ---- what the person types -------------------------------------------------------------------

  #onLine(text) {
    if (this.#current) {
      this.#onAnswer(text)
      return
    }
    // Nothing on screen. Piped answers may be read before their request is shown: they wait for
    // it, unless a request was just withdrawn unanswered (then they were meant for that one).
    if (!process.stdin.isTTY && !this.#gap) {
      this.#readAhead.push(text)
      return
    }
    if (text.trim()) say(`(no request on screen: ignored ${JSON.stringify(text.trim())})`)
  }

  #onAnswer(text) {
    const entry = this.#current
    const { req } = entry
    prompting = false
    if (!process.stdin.isTTY) process.stdout.write(text + '\n') // piped: show it after its prompt
    const choice = text.trim()
    if (this.#step === 'reason') {
      this.#respond(entry, () => req.deny(choice || undefined, { responder: 'terminal' }), '→ denied')
      return
    }
    if (this.#step === 'edit') {
      this.#step = 'key'
      let edited
      try {
        edited = JSON.parse(text)
      } catch (e) {
        say(`not JSON: ${e.message}`)
        this.#prompt()
        return
      }
      this.#respond(entry, () => req.approve({ arguments: edited, responder: 'terminal' }), '→ approved with your arguments')
      return
    }
    switch (choice.toLowerCase()) {
      case 'a':
        this.#respond(entry, () => req.approve({ responder: 'terminal' }), '→ approved')
        return
      case 's':
        this.#respond(
          entry,
          () => req.approve({ scope: 'session', responder: 'terminal' }),
          `→ approved (later ${req.tool} calls in session ${req.sessionId} run without asking)`,
        )
        return
      case 'd':
        this.#step = 'reason'
        break
      case 'e':
        if (req.editable) this.#step = 'edit'
        else say('this tool does not allow edits')
        break
    }
    this.#prompt()
  }

  #respond(entry, answer, done) {
    try {
      answer()
    } catch (e) {
      if (e.code !== 'expired' && entry.req.isPending()) {
        // e.g. invalid_arguments for an edit that does not match the schema: the request stays.
        say(`refused (${e.code ?? 'error'}): ${e.message}`)
        this.#step = 'key'
        this.#prompt()
        return
      }
      // It ended meanwhile (expired, answered elsewhere): its confirmation-resolved event settles it.
      this.#takeDown(true)
      say(`too late (${e.code ?? 'error'}): ${e.message}`)
      this.#showNext()
      return
    }
    say(done)
    this.#held.delete(entry.req.id)
    entry.ended()
    this.#takeDown(false)
    this.#showNext()
  }

  // ---- nobody left to answer ----------------------------------------------------------------------

  #onInputClosed() {
    if (this.#inputClosed) return
    this.#inputClosed = true
    if (this.#finished) return
    // Lines read ahead still answer the next requests; with none left, nothing can be answered.
    const unanswerable = this.#readAhead.length ? [] : [...(this.#current ? [this.#current] : []), ...this.#waiting]
    if (!unanswerable.length) return
    say('\ninput ended: nobody is left to answer, so every waiting request fails safe')
    this.#takeDown(false)
    this.#waiting = []
    for (const entry of unanswerable) this.#failUnanswerable(entry)
  }

  #failUnanswerable(entry) {
    this.#held.delete(entry.req.id)
    say(`→ ${label(entry.req)}: not answered, the input has ended; the tool does not run`)
    entry.fail(new Error(INPUT_CLOSED))
  }
}

function whyEnded(event) {
  const by = event.responder ? ` by ${event.responder}` : ''
  switch (event.outcome) {
    case 'timed-out':
      return EXPIRED
    case 'approved':
      return `answered elsewhere: approved${by}`
    case 'denied':
      return `answered elsewhere: denied${by}; the tool did not run`
    default:
      return `cancelled (${event.cancelReason ?? event.outcome}); the tool did not run`
  }
}

const approver = auto ? undefined : new TerminalApprover(gate)
if (auto) gate.on('confirmation-request', autoApprover(auto))

// ---- the scripted model ------------------------------------------------------------------------

let turn = 0
function fakeModel(messages) {
  turn++
  const call = (id, name, args) => ({ id, type: 'function', function: { name, arguments: JSON.stringify(args) } })
  if (turn === 1) {
    return { role: 'assistant', content: null, tool_calls: [call('call_1', 'list_files', { dir: '/tmp' }), call('call_2', 'read_file', { path: '/home/me/notes.txt' })] }
  }
  if (turn === 2) {
    // Clean up first...
    return {
      role: 'assistant',
      content: null,
      tool_calls: [call('call_3', 'delete_file', { path: '/tmp/build.log' }), call('call_4', 'delete_file', { path: '/tmp/cache.bin' })],
    }
  }
  if (turn === 3) {
    // ...then send the report.
    return {
      role: 'assistant',
      content: null,
      tool_calls: [call('call_5', 'send_email', { to: 'boss@example.com', subject: 'Q3 report', body: 'Attached.', attachment: '/home/me/q3-report.pdf' })],
    }
  }
  // Final answer, from what the gated tools said.
  const results = messages.filter((m) => m.role === 'tool').slice(-3)
  const lines = results.map((m) => `- ${m.tool_call_id}: ${m.content}`)
  return { role: 'assistant', content: `Here is what happened:\n${lines.join('\n')}` }
}

// ---- the loop ------------------------------------------------------------------------------------

const messages = [
  { role: 'system', content: 'You are a helpful assistant with file and email tools.' },
  { role: 'user', content: 'Clean up /tmp and send my Q3 report to my boss.' },
]
for (;;) {
  const reply = fakeModel(messages)
  messages.push(reply)
  if (!reply.tool_calls?.length) break
  say(`\nmodel asks for: ${reply.tool_calls.map((c) => c.function.name).join(', ')}`)
  const results = await gate.executeBatch(toolCallsFromOpenAIMessage(reply, { sessionId: 'demo' }))
  for (const r of results) {
    say(`  ${r.callId} ${r.tool}: ${r.status}`)
    messages.push(r.toOpenAIMessage())
  }
}

approver?.finish()
say(`\nassistant: ${messages.at(-1).content}`)
say(`\nfiles left: ${[...files.keys()].join(', ')}`)
say(`emails sent: ${outbox.length}`)
await gate.close()
