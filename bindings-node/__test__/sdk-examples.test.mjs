// examples/node/sdk-loop.mjs: the tool loop with OpenAI- and Anthropic-shaped messages and a
// scripted model, in both non-interactive modes (as CI runs it). The results it prints are parsed
// back and checked in each API's shape.
import { test } from 'node:test'
import assert from 'node:assert/strict'
import { spawnSync } from 'node:child_process'
import { fileURLToPath } from 'node:url'

const example = fileURLToPath(new URL('../../examples/node/sdk-loop.mjs', import.meta.url))

/** Runs the example; returns its output and the result messages / blocks it printed, per API. */
function run(...args) {
  const r = spawnSync(process.execPath, [example, ...args], { encoding: 'utf8', timeout: 60_000 })
  assert.equal(r.status, 0, `exit ${r.status}\n${r.stderr}\n${r.stdout}`)
  const [openai, anthropic] = r.stdout.split('\n== Anthropic Messages')
  assert.ok(anthropic, r.stdout)
  // The lines that print a result: "tool        {...}" (OpenAI), "user        {...}" and its
  // continuation lines (Anthropic).
  const printed = (part) =>
    part
      .split('\n')
      .map((line) => line.match(/^(?:tool|user)?\s+(\{.*\})$/))
      .filter(Boolean)
      .map((m) => JSON.parse(m[1]))
  return { out: r.stdout, openai: printed(openai), anthropic: printed(anthropic) }
}

const NOTES = 'Standup moved to 10:00.'
const BAD_JSON = /^The call to `delete_file` was refused and did not run: its arguments are not valid JSON \(.+\)\. Send it again with the arguments as one JSON object\.$/
const BAD_SCHEMA = /^The call to `delete_file` was refused and did not run: original arguments for `delete_file` do not match its schema: /
const DECLINED =
  'The user declined this call to `delete_file`, so the tool did not run. Their reason: "--auto deny: no files are deleted today". Do not retry the same call; continue without it, or ask the user what they would like to do instead.'

function assertShapes({ openai, anthropic }, ids) {
  // OpenAI: { role: 'tool', tool_call_id, content }, one per call, in call order.
  for (const m of openai) assert.deepEqual(Object.keys(m), ['role', 'tool_call_id', 'content'])
  assert.ok(openai.every((m) => m.role === 'tool' && typeof m.content === 'string'))
  assert.deepEqual(openai.map((m) => m.tool_call_id), ids.map((n) => `call_${n}`))
  // Anthropic: { type: 'tool_result', tool_use_id, content, is_error }, in tool_use order.
  for (const b of anthropic) assert.deepEqual(Object.keys(b), ['type', 'tool_use_id', 'content', 'is_error'])
  assert.ok(anthropic.every((b) => b.type === 'tool_result' && typeof b.content === 'string'))
  assert.deepEqual(anthropic.map((b) => b.tool_use_id), ids.map((n) => `toolu_${n}`))
}

test('sdk-loop, default (--auto approve): results in both shapes, the model fixes its mistakes', () => {
  const r = run()
  assertShapes(r, ['01', '02', '03', '04'])
  const [read, del, bad, fixed] = r.openai
  assert.equal(read.content, NOTES) // ungated read
  assert.equal(del.content, 'deleted /tmp/old.log') // gated, approved
  assert.match(bad.content, BAD_JSON) // arguments that are not JSON: refused, the model told
  assert.equal(fixed.content, 'deleted /tmp/cache.bin')
  assert.match(r.out, /^assistant +tool_call call_04 delete_file \{"path": "\/tmp\/cache.bin"\}$/m) // resent, fixed

  assert.deepEqual(r.anthropic.map((b) => b.is_error), [false, false, true, false])
  assert.equal(r.anthropic[0].content, NOTES)
  assert.equal(r.anthropic[1].content, 'deleted /tmp/old.log')
  assert.match(r.anthropic[2].content, BAD_SCHEMA)
  assert.equal(r.anthropic[3].content, 'deleted /tmp/cache.bin')

  assert.equal(r.out.match(/^approver +delete_file \{"path":"\/tmp\/old.log"\} -> approved \(--auto approve\)$/gm)?.length, 2)
  assert.match(r.out, /^assistant +"Deleted \/tmp\/old.log and \/tmp\/cache.bin/m)
  assert.match(r.out, /^assistant +text "Deleted \/tmp\/old.log and \/tmp\/cache.bin/m)
  assert.equal(r.out.match(/^files left +\/tmp\/notes.txt$/gm)?.length, 2)
  assert.match(
    r.out,
    /^summary: --auto approve \| openai: call_01 executed, call_02 executed, call_03 rejected, call_04 executed \| anthropic: toolu_01 executed, toolu_02 executed, toolu_03 rejected, toolu_04 executed \| files deleted: 4 \| ok$/m,
  )
})

test('sdk-loop --auto deny: the model is told not to retry, reacts, and nothing is deleted', () => {
  const r = run('--auto', 'deny')
  assertShapes(r, ['01', '02', '03'])
  assert.deepEqual(r.openai.map((m) => m.content.replace(BAD_JSON, '<bad json>')), [NOTES, DECLINED, '<bad json>'])
  assert.deepEqual(r.anthropic.map((b) => b.is_error), [false, true, true])
  assert.equal(r.anthropic[1].content, DECLINED)
  assert.match(r.anthropic[2].content, BAD_SCHEMA)

  assert.equal(r.out.match(/^approver +delete_file \{"path":"\/tmp\/old.log"\} -> denied \(--auto deny\)$/gm)?.length, 2)
  // It stops instead of resending, and says why.
  assert.match(r.out, /^assistant +"You declined deleting \/tmp\/old.log, so I did not retry it and left \/tmp\/cache.bin alone too\./m)
  assert.match(r.out, /^assistant +text "You declined deleting \/tmp\/old.log, so I did not retry it and left \/tmp\/cache.bin alone too\./m)
  assert.doesNotMatch(r.out, /call_04|toolu_04|deleted \/tmp\//)
  assert.equal(r.out.match(/^files left +\/tmp\/cache.bin, \/tmp\/notes.txt, \/tmp\/old.log$/gm)?.length, 2)
  assert.match(
    r.out,
    /^summary: --auto deny \| openai: call_01 executed, call_02 denied, call_03 rejected \| anthropic: toolu_01 executed, toolu_02 denied, toolu_03 rejected \| files deleted: 0 \| ok$/m,
  )
})

test('sdk-loop: an unknown flag is a usage error', () => {
  const r = spawnSync(process.execPath, [example, '--auto', 'maybe'], { encoding: 'utf8', timeout: 30_000 })
  assert.equal(r.status, 2)
  assert.match(r.stderr, /usage: sdk-loop.mjs \[--auto approve\|deny\]/)
})
