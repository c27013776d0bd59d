#!/usr/bin/env node
// Builds the `_native` addon with @napi-rs/cli.
//
// The .node file goes to native/ (next to the checked-in loader native/_native.js). The loader and
// type definitions napi generates go to native/generated/ (not checked in); the checked-in copies
// in native/ are what the facade compiles and runs against. __test__/dts.test.mjs fails when they
// differ; `npm run update-native-types` refreshes the checked-in copies.
'use strict'
const { spawnSync } = require('node:child_process')
const fs = require('node:fs')
const path = require('node:path')

const root = path.resolve(__dirname, '..')
const args = process.argv.slice(2)
const release = args.includes('--release')
const update = args.includes('--update-types')

const napiArgs = [
  'build',
  '--platform',
  '--output-dir', 'native',
  '--js', 'generated/_native.js',
  '--dts', 'generated/_native.d.ts',
  '--no-const-enum',
]
if (release) napiArgs.push('--release', '--strip')
fs.mkdirSync(path.join(root, 'native', 'generated'), { recursive: true })

const cli = require.resolve('@napi-rs/cli/package.json', { paths: [root] })
const bin = path.join(path.dirname(cli), require(cli).bin.napi)
const r = spawnSync(process.execPath, [bin, ...napiArgs], { cwd: root, stdio: 'inherit' })
if (r.status !== 0) process.exit(r.status ?? 1)

for (const f of ['_native.js', '_native.d.ts']) {
  const generated = path.join(root, 'native', 'generated', f)
  const checkedIn = path.join(root, 'native', f)
  const fresh = fs.readFileSync(generated, 'utf8')
  if (update || !fs.existsSync(checkedIn)) {
    fs.writeFileSync(checkedIn, fresh)
    console.log(`native/${f}: written from the build`)
  } else if (fs.readFileSync(checkedIn, 'utf8') !== fresh) {
    console.warn(`native/${f} differs from what this build generated; run \`npm run update-native-types\` and commit it`)
  }
}
