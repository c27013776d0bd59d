// The browser approval console (gate.serveConsole) against its real server, with node:http: sign-in,
// the session cookie and page key, a real gated call decided over HTTP, errors, closing, process exit.
import { test } from 'node:test'
import assert from 'node:assert/strict'
import http from 'node:http'
import net from 'node:net'
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import path from 'node:path'
import { inspect } from 'node:util'
import { fileURLToPath } from 'node:url'
import { setTimeout as sleep } from 'node:timers/promises'
import { runChild } from './child.mjs'
import { Console, Gate, Secret, SignoffError, TokenKeys } from '../dist/index.mjs'

const entry = fileURLToPath(new URL('../dist/index.mjs', import.meta.url))
const code = (c) => (e) => e instanceof SignoffError && e.code === c
const pathSchema = { type: 'object', properties: { path: { type: 'string' } }, required: ['path'] }

function keyedGate(options = {}) {
  const gate = new Gate({ tokenKeys: new TokenKeys('k1', Secret.generate()), ...options })
  const runs = []
  gate.register({
    name: 'delete_file',
    description: 'Deletes a file',
    parameters: pathSchema,
    execute: (args) => {
      runs.push(args)
      return 'deleted'
    },
  })
  return { gate, runs }
}

/** Just enough of a browser: the console's origin, its session cookie, the page key from the sign-in's answer. */
class Browser {
  constructor(console_) {
    const u = new URL(console_.url)
    this.host = u.hostname
    this.port = Number(u.port)
    this.origin = `http://${this.host}:${this.port}`
    this.cookie = undefined
    this.key = undefined
  }

  request(method, path_, { body, headers = {} } = {}) {
    return new Promise((resolve, reject) => {
      const h = { ...headers }
      if (this.cookie) h.Cookie = this.cookie
      const data = body === undefined ? undefined : JSON.stringify(body)
      if (data !== undefined) h['Content-Type'] = 'application/json'
      const req = http.request({ host: this.host, port: this.port, method, path: path_, headers: h, agent: false }, (res) => {
        let text = ''
        res.setEncoding('utf8')
        res.on('data', (c) => (text += c))
        res.on('end', () => resolve({ status: res.statusCode, headers: res.headers, text }))
      })
      req.on('error', reject)
      req.end(data)
    })
  }

  async signIn(link) {
    const token = link.split('#token=')[1]
    const r = await this.request('POST', '/login', { body: { token }, headers: { Origin: this.origin } })
    if (r.status === 200) {
      this.cookie = r.headers['set-cookie'][0].split(';')[0]
      this.key = JSON.parse(r.text).key
    }
    return r
  }

  async loadPage() {
    const r = await this.request('GET', '/')
    assert.equal(r.status, 200, r.text)
    return r.text
  }

  async decide(request, fields = {}) {
    const body = { id: request.id, digest: request.argumentsDigest, decision: 'approve', scope: 'once', ...fields }
    const r = await this.request('POST', '/api/decide', {
      body,
      headers: { Origin: this.origin, 'x-signoff-key': this.key },
    })
    return { status: r.status, body: JSON.parse(r.text) }
  }
}

async function waitPending(gate) {
  for (let i = 0; i < 2000; i++) {
    const [request] = gate.pending()
    if (request) return request
    await sleep(10)
  }
  throw new Error('no request became pending')
}

function refused(port) {
  return new Promise((resolve) => {
    const s = net.connect({ host: '127.0.0.1', port })
    s.on('connect', () => {
      s.destroy()
      resolve(false)
    })
    s.on('error', (e) => resolve(e.code === 'ECONNREFUSED'))
  })
}

test('sign in with a link, then approve a real call over HTTP: the tool runs once', async () => {
  const { gate, runs } = keyedGate()
  const console_ = await gate.serveConsole({ title: 'approvals' })
  try {
    assert.ok(console_ instanceof Console)
    assert.match(console_.url, /^http:\/\/127\.0\.0\.1:\d+\/$/)
    assert.equal(console_.address.port, Number(new URL(console_.url).port))
    assert.equal(console_.gate, gate)
    assert.equal(console_.closed, false)
    assert.match(inspect(console_), /^Console \{ url: 'http:\/\/127\.0\.0\.1:\d+\/', closed: false \}$/)
    const browser = new Browser(console_)

    let r = await browser.request('GET', '/login')
    assert.equal(r.status, 200)
    assert.match(r.headers['content-type'], /^text\/html/)
    assert.match(r.text, /<html/)
    r = await browser.request('GET', '/')
    assert.equal(r.status, 303)
    assert.equal(r.headers.location, 'login')

    const link = console_.signInLink('alice')
    assert.ok(link.startsWith(`${console_.url}login#token=`))
    r = await browser.signIn(link)
    assert.equal(r.status, 200, r.text)
    const answer = JSON.parse(r.text)
    assert.equal(answer.approver, 'alice')
    assert.ok(answer.key.length >= 43)
    const cookies = r.headers['set-cookie']
    assert.equal(cookies.length, 1)
    assert.match(cookies[0], /HttpOnly/)
    assert.match(cookies[0], /SameSite=Strict/)
    // A sign-in link is single-use.
    assert.equal((await new Browser(console_).signIn(link)).status, 401)

    // The page is a shell: the key and the data come only with the key.
    const page = await browser.loadPage()
    assert.match(page, /approvals/)
    assert.ok(!page.includes(browser.key))

    const call = gate.execute({ tool: 'delete_file', arguments: { path: '/tmp/x' }, callId: 'c1' })
    const request = await waitPending(gate)
    assert.equal(request.tool, 'delete_file')

    // The cookie without the page key (what any other server on this host receives), or from
    // another origin: refused, and nothing changes.
    const bare = { id: request.id, digest: request.argumentsDigest, decision: 'approve' }
    r = await browser.request('POST', '/api/decide', { body: bare, headers: { Origin: browser.origin } })
    assert.equal(r.status, 401)
    assert.equal(JSON.parse(r.text).kind, 'key')
    r = await browser.request('POST', '/api/decide', {
      body: bare,
      headers: { Origin: 'http://evil.example', 'x-signoff-key': browser.key },
    })
    assert.equal(r.status, 403)
    assert.equal(gate.pendingCount, 1)

    const decided = await browser.decide(request)
    assert.equal(decided.status, 200, JSON.stringify(decided.body))
    assert.equal(decided.body.outcome, 'approved')
    const result = await call
    assert.equal(result.status, 'executed')
    assert.deepEqual(runs, [{ path: '/tmp/x' }])
    // Answered once: a second decision loses, and the tool still ran once.
    const again = await browser.decide(request)
    assert.equal(again.status, 409)
    assert.deepEqual(runs, [{ path: '/tmp/x' }])

    // A denial from the page, with its reason, reaches the model.
    const denied = gate.execute({ tool: 'delete_file', arguments: { path: '/tmp/y' } })
    const second = await waitPending(gate)
    const d = await browser.decide(second, { decision: 'deny', reason: 'not now' })
    assert.equal(d.status, 200)
    assert.equal(d.body.outcome, 'denied')
    const dr = await denied
    assert.equal(dr.status, 'denied')
    assert.match(dr.content, /not now/)
    assert.deepEqual(runs, [{ path: '/tmp/x' }])
  } finally {
    await console_.close()
    await gate.close()
  }
  assert.equal(console_.closed, true)
})

test('approver keys sign in, from an object or a file', async () => {
  const { gate } = keyedGate()
  let console_ = await gate.serveConsole({ approverKeys: { carol: 'carol-has-a-long-key' }, signInTtlMs: 60_000 })
  let browser = new Browser(console_)
  let r = await browser.request('POST', '/login', {
    body: { approver: 'carol', key: 'carol-has-a-long-key' },
    headers: { Origin: browser.origin },
  })
  assert.equal(r.status, 200)
  assert.equal(JSON.parse(r.text).approver, 'carol')
  r = await browser.request('POST', '/login', {
    body: { approver: 'carol', key: 'not-carols-key-at-all' },
    headers: { Origin: browser.origin },
  })
  assert.equal(r.status, 401)
  await console_.close()

  const dir = mkdtempSync(path.join(tmpdir(), 'signoff-console-'))
  try {
    const file = path.join(dir, 'approvers')
    writeFileSync(file, '# operators\ndave:dave-has-a-long-key\n')
    console_ = await gate.serveConsole({ approverKeysFile: file, sessionTtlMs: 3_600_000 })
    browser = new Browser(console_)
    r = await browser.request('POST', '/login', {
      body: { approver: 'dave', key: 'dave-has-a-long-key' },
      headers: { Origin: browser.origin },
    })
    assert.equal(r.status, 200)
    await console_.close()
  } finally {
    rmSync(dir, { recursive: true })
    await gate.close()
  }
})

test('configuration errors are `config`; an empty approver is `malformed`', async () => {
  const plain = new Gate()
  await assert.rejects(plain.serveConsole(), (e) => code('config')(e) && /token keys/.test(e.message))
  await plain.close()
  const { gate } = keyedGate()
  for (const bad of [
    { bind: 'localhost' },
    { bind: '0.0.0.0:0' },
    { publicOrigin: 'approve.example.com' },
    { signInTtlMs: 0 },
    { sessionTtlMs: 1.5 },
    { history: -1 },
    { approverKeys: { erin: 'short' } },
    { approverKeys: { erin: 7 } },
    { approverKeys: { erin: 'erin-has-a-long-key' }, approverKeysFile: '/nonexistent' },
    { approverKeysFile: '/nonexistent/approvers' },
    { allowRemote: 'yes' },
    { bindAddress: '127.0.0.1:0' },
    'fast',
  ]) {
    await assert.rejects(gate.serveConsole(bad), code('config'), JSON.stringify(bad))
  }
  const console_ = await gate.serveConsole()
  assert.throws(() => console_.signInLink(''), code('malformed'))
  assert.throws(() => console_.signInLink(5), code('malformed'))
  await console_.close()
  await gate.close()
})

test('close() releases the port and is idempotent; it works after the gate is closed too', async () => {
  const { gate } = keyedGate()
  const console_ = await gate.serveConsole()
  const { port } = console_.address
  assert.equal(await refused(port), false)
  const closing = console_.close()
  assert.equal(console_.close(), closing)
  await closing
  assert.equal(console_.closed, true)
  assert.equal(await refused(port), true)
  await console_.close()

  const other = await gate.serveConsole()
  await gate.close()
  await other.close()
  assert.equal(await refused(other.address.port), true)
  // A closed gate still starts a console (its decisions then fail with `closed`).
  const late = await gate.serveConsole()
  await late.close()
})

test('an open console does not keep the process alive by itself', async () => {
  const r = await runChild(
    `
import { Gate, TokenKeys, Secret } from ${JSON.stringify(entry)}
const gate = new Gate({ tokenKeys: new TokenKeys('k1', Secret.generate()) })
const console_ = await gate.serveConsole()
console.log('serving', console_.url)
`,
    { timeoutMs: 8000 },
  )
  assert.equal(r.code, 0, r.err)
  assert.match(r.out, /serving http:\/\/127\.0\.0\.1:\d+\//)
  assert.ok(r.ms < 5000, `took ${r.ms} ms`)
})
