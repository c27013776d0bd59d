// The checked-in native/_native.d.ts (and loader) must be exactly what the build generates, and the
// error codes it declares must be the core's.
import { test } from 'node:test'
import assert from 'node:assert/strict'
import { existsSync, readFileSync } from 'node:fs'
import { fileURLToPath } from 'node:url'
import { createRequire } from 'node:module'
import { ERROR_CODES } from '../dist/index.mjs'

const here = (p) => fileURLToPath(new URL(p, import.meta.url))

for (const f of ['_native.d.ts', '_native.js']) {
  test(`native/${f} is what the build generated`, () => {
    const generated = here(`../native/generated/${f}`)
    assert.ok(existsSync(generated), 'run `npm run build` first (it writes native/generated/)')
    const fresh = readFileSync(generated, 'utf8')
    const checkedIn = readFileSync(here(`../native/${f}`), 'utf8')
    assert.equal(checkedIn, fresh, `native/${f} drifted from the build: run \`npm run update-native-types\` and commit it`)
  })
}

test('ERROR_CODES (from the core ErrorKind::ALL) match the ErrorCode type in the .d.ts', () => {
  const dts = readFileSync(here('../native/_native.d.ts'), 'utf8')
  const m = dts.match(/export type ErrorCode = ([^\n]+)/)
  assert.ok(m, 'ErrorCode is declared')
  const declared = [...m[1].matchAll(/'([a-z_]+)'/g)].map((x) => x[1])
  assert.deepEqual(declared, [...ERROR_CODES])
  assert.ok(ERROR_CODES.includes('already_resolved') && ERROR_CODES.includes('no_executor'))
})

test('GateOptions in the .d.ts names every option the core reads', () => {
  const native = createRequire(import.meta.url)('../native/_native.js')
  const core = native.gateOptionNames()
  assert.ok(core.includes('busCapacity') && core.includes('auditInStore'))
  const dts = readFileSync(here('../dist/types.d.ts'), 'utf8')
  const body = dts.match(/export interface GateOptions \{([\s\S]*?)\n\}/)
  assert.ok(body, 'GateOptions is declared')
  const declared = [...body[1].matchAll(/^ {4}(\w+)\?:/gm)].map((m) => m[1])
  assert.deepEqual([...declared].sort(), [...core].sort())
})

test('ESM and CommonJS load one module (one Gate, one SignoffError)', async () => {
  const require = createRequire(import.meta.url)
  const cjs = require('signoff')
  const esm = await import('signoff')
  assert.equal(cjs.Gate, esm.Gate)
  assert.equal(cjs.SignoffError, esm.SignoffError)
  const gate = new cjs.Gate()
  let err
  try {
    gate.respondJson('{')
  } catch (e) {
    err = e
  }
  assert.ok(err instanceof esm.SignoffError)
  assert.equal(err.code, 'malformed')
  await gate.close()
})
