// examples/node/agent-loop.mjs, non-interactive (as CI runs it) and with piped answers.
import { test } from 'node:test'
import assert from 'node:assert/strict'
import { spawnSync } from 'node:child_process'
import { fileURLToPath } from 'node:url'

const example = fileURLToPath(new URL('../../examples/node/agent-loop.mjs', import.meta.url))
const run = (args, input) => spawnSync(process.execPath, [example, ...args], { encoding: 'utf8', input, timeout: 30_000 })

test('--auto approve: the gated calls run', () => {
  const r = run(['--auto', 'approve'])
  assert.equal(r.status, 0, r.stderr)
  assert.match(r.stdout, /call_3 delete_file: executed/)
  assert.match(r.stdout, /call_5 send_email: executed/)
  assert.match(r.stdout, /files left: \/home\/me\/notes.txt, \/home\/me\/q3-report.pdf\n/)
  assert.match(r.stdout, /emails sent: 1/)
})

test('--auto deny: nothing gated runs, the model is told why', () => {
  const r = run(['--auto', 'deny'])
  assert.equal(r.status, 0, r.stderr)
  assert.match(r.stdout, /call_1 list_files: executed/) // read-only: not gated
  assert.match(r.stdout, /call_3 delete_file: denied/)
  assert.match(r.stdout, /Their reason: "denied by --auto deny"\. Do not retry/)
  assert.match(r.stdout, /emails sent: 0/)
  assert.match(r.stdout, /\/tmp\/build.log, \/tmp\/cache.bin/)
})

test('terminal answers: edit (refused, then valid), deny with a reason, approve for the session', () => {
  const r = run([], 'e\n{"path": 5}\ne\n{"path":"/tmp/cache.bin"}\nd\nkeep it\ns\n')
  assert.equal(r.status, 0, r.stderr)
  assert.match(r.stdout, /refused \(invalid_arguments\)/)
  assert.match(r.stdout, /the tool ran with \{"path":"\/tmp\/cache.bin"\}/)
  assert.match(r.stdout, /call_4 delete_file: denied/)
  assert.match(r.stdout, /Their reason: "keep it"/)
  assert.match(r.stdout, /call_5 send_email: executed/)
  assert.match(r.stdout, /deadline: /)
})

test('stdin closing before an answer fails safe: the approval step failed, the detail on stderr only', () => {
  const r = run([], 'a\n')
  assert.equal(r.status, 0, r.stderr)
  assert.match(r.stdout, /call_3 delete_file: executed/)
  assert.match(r.stdout, /call_4 delete_file: cancelled/)
  assert.match(r.stdout, /call_5 send_email: cancelled/)
  // The model reads that the approval step failed, not that someone declined, and not the error.
  assert.match(r.stdout, /- call_4: This call to `delete_file` did not run: the approval step failed/)
  assert.doesNotMatch(r.stdout, /stdin closed/)
  assert.doesNotMatch(r.stdout, /declined/)
  assert.match(r.stderr, /the approval handler failed: stdin closed/)
  assert.match(r.stdout, /files left: \/home\/me\/notes.txt, \/home\/me\/q3-report.pdf, \/tmp\/cache.bin\n/)
  assert.match(r.stdout, /emails sent: 0/)
})
