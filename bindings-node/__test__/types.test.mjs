// The published types compile for a TypeScript user (`tsc --noEmit` on __test__/usage.mts and usage-cjs.cts, which
// imports 'signoff' through the package exports and checks misuse with @ts-expect-error).
import { test } from 'node:test'
import assert from 'node:assert/strict'
import { spawnSync } from 'node:child_process'
import { createRequire } from 'node:module'
import { fileURLToPath } from 'node:url'

test('tsc --noEmit on a usage file', () => {
  const require = createRequire(import.meta.url)
  const tsc = require.resolve('typescript/bin/tsc')
  const project = fileURLToPath(new URL('./tsconfig.json', import.meta.url))
  const r = spawnSync(process.execPath, [tsc, '--noEmit', '-p', project], { encoding: 'utf8' })
  assert.equal(r.status, 0, r.stdout + r.stderr)
})
