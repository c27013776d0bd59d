// examples/node/agent-loop.mjs with a person at the terminal: the approver never blocks on a stale
// prompt. Each scenario runs twice: with stdin on a pipe, and with stdin on a pseudo-terminal (as a
// person's terminal: readline in terminal mode, raw input) through a tiny Python pty wrapper.
// stdout and stderr are pipes, read as they come.
import { test } from 'node:test'
import assert from 'node:assert/strict'
import { spawn, spawnSync } from 'node:child_process'
import { fileURLToPath } from 'node:url'

const example = fileURLToPath(new URL('../../examples/node/agent-loop.mjs', import.meta.url))

// Runs argv[1:] with its stdin on a new pty (echo off), copying what this wrapper reads on its own
// stdin to the terminal, byte for byte; exits with the program's status.
const PTY_WRAPPER = String.raw`
import os, select, subprocess, sys, termios
master, slave = os.openpty()
attrs = termios.tcgetattr(slave)
attrs[3] &= ~termios.ECHO
termios.tcsetattr(slave, termios.TCSANOW, attrs)
proc = subprocess.Popen(sys.argv[1:], stdin=slave, close_fds=True)
os.close(slave)
inputs = [0, master]
while proc.poll() is None:
    ready, _, _ = select.select(inputs, [], [], 0.05)
    if 0 in ready:
        data = os.read(0, 4096)
        if data:
            os.write(master, data)
        else:
            inputs.remove(0)
    if master in ready:
        try:
            os.read(master, 4096)  # nothing is echoed; drain whatever else comes
        except OSError:
            inputs.remove(master)
sys.exit(proc.returncode if proc.returncode >= 0 else 128 - proc.returncode)
`

const noPty =
  process.platform === 'win32' || spawnSync('python3', ['-c', 'import os, termios; os.openpty()']).status !== 0
    ? 'needs python3 with pty support'
    : false

const MODES = [
  { name: 'stdin on a pipe', pty: false, skip: false },
  { name: 'stdin on a terminal', pty: true, skip: noPty },
]

/** Terminal control sequences (readline redrawing its prompt) and carriage returns removed. */
const clean = (s) => s.replace(/\x1b\[[0-9;?]*[A-Za-z]/g, '').replace(/\r/g, '')
const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms))

class Run {
  out = ''
  err = ''
  exit = undefined // { code, signal } once it ended

  constructor(args, { pty }) {
    this.pty = pty
    this.proc = pty
      ? spawn('python3', ['-c', PTY_WRAPPER, process.execPath, example, ...args], { stdio: 'pipe' })
      : spawn(process.execPath, [example, ...args], { stdio: 'pipe' })
    this.proc.stdout.setEncoding('utf8').on('data', (d) => (this.out += d))
    this.proc.stderr.setEncoding('utf8').on('data', (d) => (this.err += d))
    this.proc.stdin.on('error', () => {}) // it may exit before reading everything
    this.ended = new Promise((resolve) => this.proc.on('close', (code, signal) => resolve((this.exit = { code, signal }))))
  }

  text() {
    return clean(this.out)
  }

  /** Waits until stdout matches `pattern`; false when it did not within `ms` (or the run ended). */
  async waitFor(pattern, ms) {
    const end = Date.now() + ms
    while (!pattern.test(this.text())) {
      if (this.exit || Date.now() > end) return false
      await sleep(20)
    }
    return true
  }

  type(text) {
    this.proc.stdin.write(text)
  }

  /** Closes stdin the way each kind of input closes: end of the pipe, or Ctrl-D at the terminal. */
  closeInput() {
    if (this.pty) this.type('\x04')
    else this.proc.stdin.end()
  }

  /** Waits for the example to exit (kills it after `ms`). */
  async finish(ms) {
    const timer = setTimeout(() => this.proc.kill('SIGKILL'), ms)
    const exit = await this.ended
    clearTimeout(timer)
    if (this.pty) this.proc.stdin.destroy()
    return exit
  }
}

const EXPIRED = 'expired: nobody answered in time; the tool did not run'

for (const mode of MODES) {
  test(`an unanswered request expires at once, the next is shown without input, and a later answer is for it (${mode.name})`, { skip: mode.skip, timeout: 60_000 }, async () => {
    const run = new Run(['--timeout', '2'], mode)
    try {
      assert.ok(await run.waitFor(/approval needed/, 20_000), `the first request was never shown:\n${run.text()}\n${run.err}`)
      // Nobody answers. The two deletes (one batch) expire at ~2 s; the send that follows comes up.
      await run.waitFor(/expired: /, 5_000)
      await run.waitFor(/tool: +send_email[^]*\[a\]pprove/, 5_000)
      const mark = run.out.length
      const before = run.text()
      run.type('a\n') // typed after the expiry: for the request on screen now
      await run.waitFor(/call_5 send_email: \w+/, 5_000)
      run.closeInput() // nothing is left to answer
      const { code } = await run.finish(20_000)
      const out = run.text()
      const after = clean(run.out.slice(mark))

      // The first request shown was withdrawn as expired, and neither delete ran.
      const first = before.indexOf('approval needed')
      assert.ok(before.slice(first).includes(EXPIRED), `the first request was not reported expired before the answer:\n${before}`)
      assert.match(out, /call_3 delete_file: timed-out/)
      assert.match(out, /call_4 delete_file: timed-out/)
      assert.match(out, /files left: \/home\/me\/notes.txt, \/home\/me\/q3-report.pdf, \/tmp\/build.log, \/tmp\/cache.bin\n/)
      // The next request came up on its own, before anything was typed, with its real time left.
      assert.match(before, /tool: +send_email +\(call call_5\)/, `the next request was not shown without input:\n${before}`)
      assert.match(before.slice(before.indexOf('(call call_5)')), /answer within [12] s/)
      // The answer applied to the request on screen when it was typed: the email was sent.
      assert.match(after, /→ approved/)
      assert.match(after, /call_5 send_email: executed/)
      assert.match(out, /- call_5: \{"sent":true,"to":"boss@example.com"\}/)
      assert.match(out, /emails sent: 1\n/)
      assert.doesNotMatch(out, /too late|refused|ignored/)
      assert.doesNotMatch(run.err, /approval step .* failed/)
      assert.equal(code, 0, `${out}\n${run.err}`)
    } finally {
      run.proc.kill('SIGKILL')
    }
  })

  test(`stdin closing at once fails every waiting request safe, none runs, and the example exits with 0 (${mode.name})`, { skip: mode.skip, timeout: 60_000 }, async () => {
    const run = new Run([], mode) // the default timeout (120 s): this must not wait for it
    try {
      // A pipe ends at once. A terminal gets Ctrl-D as soon as the example reads it (a Ctrl-D typed
      // before the terminal switches to raw input is lost by the terminal, not by the example).
      if (mode.pty) assert.ok(await run.waitFor(/\[a\]pprove/, 20_000), run.text())
      run.closeInput()
      const started = Date.now()
      const { code } = await run.finish(20_000)
      const out = run.text()
      assert.ok(Date.now() - started < 15_000)
      assert.equal(code, 0, `${out}\n${run.err}`)
      assert.match(out, /call_1 list_files: executed/) // read-only: not gated
      assert.match(out, /call_2 read_file: executed/)
      for (const [call, tool] of [['call_3', 'delete_file'], ['call_4', 'delete_file'], ['call_5', 'send_email']]) {
        assert.match(out, new RegExp(`${call} ${tool}: cancelled`))
        assert.match(out, new RegExp(`- ${call}: This call to \`${tool}\` did not run: the approval step failed`))
      }
      assert.match(out, /files left: \/home\/me\/notes.txt, \/home\/me\/q3-report.pdf, \/tmp\/build.log, \/tmp\/cache.bin\n/)
      assert.match(out, /emails sent: 0\n/)
      // Nobody declined: the model is not told so, and the error itself is on stderr only.
      assert.doesNotMatch(out, /declined|stdin closed/)
      assert.match(run.err, /the approval handler failed: stdin closed/)
    } finally {
      run.proc.kill('SIGKILL')
    }
  })
}

test('--timeout takes seconds: anything else is a usage error', () => {
  for (const bad of ['0', '-1', 'soon', '86401']) {
    const r = spawnSync(process.execPath, [example, '--timeout', bad], { encoding: 'utf8', input: '', timeout: 30_000 })
    assert.equal(r.status, 2, `--timeout ${bad}: ${r.stdout}${r.stderr}`)
    assert.match(r.stderr, /usage: agent-loop\.mjs \[--auto approve\|deny\] \[--timeout SECONDS\]/)
  }
})
