#!/usr/bin/env node
// An OpenAI-style tool loop with signoff between the model and the tools.
//
//   node examples/node/agent-loop.mjs                 # a person answers in the terminal
//   node examples/node/agent-loop.mjs --auto approve  # CI: approve everything
//   node examples/node/agent-loop.mjs --auto deny     # CI: deny everything
//
// The "model" is scripted (no network): it asks for a few tool calls in the OpenAI Chat
// Completions format, reads the tool messages back, and answers. The tools work on an in-memory
// file system, so nothing on this machine is touched. Build the package first
// (`cd bindings-node && npm install && npm run build`).
//
// In a project of your own: `import { Gate, toolCallsFromOpenAIMessage } from 'signoff'`.
import { createInterface } from 'node:readline/promises'
import { Gate, toolCallsFromOpenAIMessage } from '../../bindings-node/dist/index.mjs'

// ---- command line ------------------------------------------------------------------------------

const argv = process.argv.slice(2)
const autoAt = argv.indexOf('--auto')
const auto = autoAt >= 0 ? argv[autoAt + 1] : undefined
if (autoAt >= 0 && auto !== 'approve' && auto !== 'deny') {
  console.error('usage: agent-loop.mjs [--auto approve|deny]')
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

const gate = new Gate({ defaultTimeoutMs: 120_000 })
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

// ---- the approver ------------------------------------------------------------------------------

const rl = auto ? undefined : createInterface({ input: process.stdin, output: process.stdout, terminal: process.stdin.isTTY })
// Lines are buffered by the iterator, so piped answers work too (`printf 'a\nd\n' | ...`).
const lines = rl?.[Symbol.asyncIterator]()
async function prompt(question) {
  process.stdout.write(question)
  const next = await lines.next()
  if (next.done) throw new Error('stdin closed')
  if (!process.stdin.isTTY) process.stdout.write(next.value + '\n')
  return next.value
}
let queue = Promise.resolve() // one question at a time: batches ask several

function show(req) {
  const secs = Math.max(0, Math.round((req.deadlineMs - Date.now()) / 1000))
  console.log('\n── approval needed ' + '─'.repeat(50))
  console.log(`tool:        ${req.tool}`)
  console.log(`description: ${req.description}`)
  console.log(`why:         ${req.reasons.join('; ')}`)
  console.log(`arguments:\n${req.displayArguments.replace(/^/gm, '  ')}`)
  console.log(`deadline:    ${req.deadline.toLocaleTimeString()} (in ${secs} s)`)
}

async function ask(req) {
  show(req)
  if (auto === 'approve') {
    req.approve({ responder: 'ci' })
    console.log('→ approved (--auto approve)')
    return
  }
  if (auto === 'deny') {
    req.deny('denied by --auto deny', { responder: 'ci' })
    console.log('→ denied (--auto deny)')
    return
  }
  for (;;) {
    if (!req.isPending()) {
      console.log('→ no longer pending (timed out or cancelled)')
      return
    }
    const choice = (await prompt('[a]pprove  [d]eny  [e]dit  [s]ession-approve > ')).trim().toLowerCase()
    try {
      if (choice === 'a') {
        req.approve({ responder: 'terminal' })
      } else if (choice === 's') {
        req.approve({ scope: 'session', responder: 'terminal' })
        console.log(`(later ${req.tool} calls in session ${req.sessionId} run without asking)`)
      } else if (choice === 'd') {
        const reason = (await prompt('reason (shown to the model): ')).trim()
        req.deny(reason || undefined, { responder: 'terminal' })
      } else if (choice === 'e') {
        if (!req.editable) {
          console.log('this tool does not allow edits')
          continue
        }
        const text = await prompt('new arguments as JSON: ')
        let edited
        try {
          edited = JSON.parse(text)
        } catch (e) {
          console.log(`not JSON: ${e.message}`)
          continue
        }
        req.approve({ arguments: edited, responder: 'terminal' })
      } else {
        continue
      }
      return
    } catch (e) {
      // e.g. invalid_arguments for an edit that does not match the schema; the request stays.
      console.log(`refused (${e.code ?? 'error'}): ${e.message}`)
    }
  }
}

// A listener may be async: signoff waits for it. If it ends without answering or fails (here:
// stdin closed before an answer), the approval step failed: the call ends at once as cancelled
// (approval-failed) and the tool does not run. The model is told the approval step failed, not
// that anyone declined; the error itself goes to stderr (and to the audit log, if there is one).
gate.on('confirmation-request', (req) => (queue = queue.then(() => ask(req))))

// ---- the scripted model ------------------------------------------------------------------------

let turn = 0
function fakeModel(messages) {
  turn++
  const call = (id, name, args) => ({ id, type: 'function', function: { name, arguments: JSON.stringify(args) } })
  if (turn === 1) {
    return { role: 'assistant', content: null, tool_calls: [call('call_1', 'list_files', { dir: '/tmp' }), call('call_2', 'read_file', { path: '/home/me/notes.txt' })] }
  }
  if (turn === 2) {
    return {
      role: 'assistant',
      content: null,
      tool_calls: [
        call('call_3', 'delete_file', { path: '/tmp/build.log' }),
        call('call_4', 'delete_file', { path: '/tmp/cache.bin' }),
        call('call_5', 'send_email', { to: 'boss@example.com', subject: 'Q3 report', body: 'Attached.', attachment: '/home/me/q3-report.pdf' }),
      ],
    }
  }
  // Final answer, from what the tools said.
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
  console.log(`\nmodel asks for: ${reply.tool_calls.map((c) => c.function.name).join(', ')}`)
  const results = await gate.executeBatch(toolCallsFromOpenAIMessage(reply, { sessionId: 'demo' }))
  for (const r of results) {
    console.log(`  ${r.callId} ${r.tool}: ${r.status}`)
    messages.push(r.toOpenAIMessage())
  }
}

console.log(`\nassistant: ${messages.at(-1).content}`)
console.log(`\nfiles left: ${[...files.keys()].join(', ')}`)
console.log(`emails sent: ${outbox.length}`)
rl?.close()
await gate.close()
