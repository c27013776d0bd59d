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
