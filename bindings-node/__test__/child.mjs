// Shared by the tests that run a child `node` and watch whether it exits (not a test file itself).
import { spawn } from 'node:child_process'

/** Runs `source` as an ES module in a child `node`; fails if it has not exited within `timeoutMs`. */
export function runChild(source, { timeoutMs = 20_000, args = [] } = {}) {
  return new Promise((resolve, reject) => {
    const t0 = Date.now()
    const child = spawn(process.execPath, [...args, '--input-type=module', '-e', source], {
      stdio: ['ignore', 'pipe', 'pipe'],
    })
    let out = ''
    let err = ''
    child.stdout.on('data', (d) => (out += d))
    child.stderr.on('data', (d) => (err += d))
    const timer = setTimeout(() => {
      child.kill('SIGKILL')
      reject(new Error(`the child did not exit within ${timeoutMs} ms\nstdout: ${out}\nstderr: ${err}`))
    }, timeoutMs)
    child.on('exit', (code, signal) => {
      clearTimeout(timer)
      resolve({ code, signal, out, err, ms: Date.now() - t0 })
    })
  })
}

/**
 * Starts `source` as an ES module in a child `node` and keeps talking to it: `line(re)` waits for
 * a stdout line matching `re`; `exited` resolves with `{ code, signal, out, err }`.
 */
export function startChild(source, { args = [] } = {}) {
  const proc = spawn(process.execPath, [...args, '--input-type=module', '-e', source], {
    stdio: ['ignore', 'pipe', 'pipe'],
  })
  let out = ''
  let err = ''
  const waiters = []
  proc.stdout.on('data', (d) => {
    out += d
    for (const w of waiters.splice(0)) w()
  })
  proc.stderr.on('data', (d) => (err += d))
  const exited = new Promise((resolve) => proc.on('exit', (code, signal) => resolve({ code, signal, out, err })))
  return {
    proc,
    exited,
    /** The first stdout line matching `re`. */
    async line(re, timeoutMs = 15_000) {
      const t0 = Date.now()
      for (;;) {
        const m = out.split('\n').find((l) => re.test(l))
        if (m) return m
        if (Date.now() - t0 > timeoutMs || proc.exitCode !== null || proc.signalCode !== null) {
          throw new Error(`no line ${re}\nstdout: ${out}\nstderr: ${err}`)
        }
        await new Promise((r) => {
          const t = setTimeout(r, 50)
          waiters.push(() => {
            clearTimeout(t)
            r()
          })
        })
      }
    },
  }
}
