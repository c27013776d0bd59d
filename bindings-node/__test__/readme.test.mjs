// The quickstart (and the remote-approval example) in README.md run as written and print what the
// README says they print.
import { test } from 'node:test'
import assert from 'node:assert/strict'
import { readFileSync, writeFileSync, rmSync } from 'node:fs'
import { spawnSync } from 'node:child_process'
import { fileURLToPath } from 'node:url'

for (const [path, heading] of [
  ['../README.md', '### Quickstart'],
  ['../README.md', '### Remote approval and durable store'],
  ['../../README.md', '## Node quickstart'],
]) {
  test(`README: ${heading.replace(/^#+ /, '')} (${path})`, () => {
    const readme = readFileSync(fileURLToPath(new URL(path, import.meta.url)), 'utf8')
    const at = readme.indexOf(heading)
    assert.notEqual(at, -1, `no "${heading}" in ${path}`)
    const section = readme.slice(at)
    const code = section.match(/```js\n([\s\S]*?)```/)[1]
    const expected = section.match(/prints\n\n```text\n([\s\S]*?)```/)[1]
    // Inside the package, so that `import ... from 'signoff'` resolves to it (self-reference).
    const file = fileURLToPath(new URL('./.tmp-quickstart.mjs', import.meta.url))
    writeFileSync(file, code)
    try {
      const r = spawnSync(process.execPath, [file], { encoding: 'utf8', timeout: 20_000 })
      assert.equal(r.status, 0, r.stderr)
      assert.equal(r.stdout, expected)
    } finally {
      rmSync(file, { force: true })
    }
  })
}
