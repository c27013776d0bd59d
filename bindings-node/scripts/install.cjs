#!/usr/bin/env node
// `npm install` hook: makes sure the native addon and the compiled facade exist.
//
// * A published install finds both (dist/ in the tarball, the addon in the per-platform package
//   @signoff/node-<platform> or next to the loader) and does nothing.
// * A clone (`npm install` / `npm ci` in bindings-node/, or `npm install ./bindings-node` from
//   another project) builds what is missing: the addon with @napi-rs/cli (cargo, release) and
//   the facade with tsc, installing those devDependencies first when npm did not (a dependency
//   installed from a folder). Set SIGNOFF_SKIP_BUILD=1 to skip.
'use strict'
const { spawnSync } = require('node:child_process')
const fs = require('node:fs')
const path = require('node:path')

const root = path.resolve(__dirname, '..')
if (process.env.SIGNOFF_SKIP_BUILD) process.exit(0)

function nativeLoads() {
  try {
    require(path.join(root, 'native', '_native.js'))
    return true
  } catch {
    return false
  }
}

const haveNative = nativeLoads()
const haveDist = fs.existsSync(path.join(root, 'dist', 'index.js')) && fs.existsSync(path.join(root, 'dist', 'index.mjs'))
if (haveNative && haveDist) process.exit(0)

function fail(msg) {
  console.error(`signoff: ${msg}`)
  process.exit(1)
}

function resolvable(id) {
  try {
    require.resolve(id, { paths: [root] })
    return true
  } catch {
    return false
  }
}

function run(args, what) {
  console.log(`signoff: ${what}`)
  const r = spawnSync(process.execPath, args, { cwd: root, stdio: 'inherit' })
  if (r.status !== 0) fail(`${what} failed`)
}

// Installed as a dependency of another project (`npm install ./bindings-node`), npm does not
// install this package's devDependencies: install them here (from the lock file, no scripts).
const devDeps = ['@napi-rs/cli/package.json', 'typescript/package.json']
if (!devDeps.every(resolvable)) {
  const npmCli = process.env.npm_execpath
  if (!npmCli) fail(`building from source needs the devDependencies: run \`npm install\` in ${root}`)
  const ci = fs.existsSync(path.join(root, 'package-lock.json')) ? 'ci' : 'install'
  run([npmCli, ci, '--include=dev', '--ignore-scripts', '--no-audit', '--no-fund', '--no-save'], `installing the build tools (npm ${ci} in ${root})`)
  if (!devDeps.every(resolvable)) fail('the build tools did not install')
}

if (!haveNative) {
  const cargo = spawnSync('cargo', ['--version'], { encoding: 'utf8' })
  if (cargo.status !== 0) {
    fail(`no prebuilt binary for ${process.platform}-${process.arch} and no Rust toolchain to build one (https://rustup.rs)`)
  }
  run([path.join(root, 'scripts', 'build-native.cjs'), '--release'], 'building the native addon (cargo, release; a few minutes)')
}
if (!haveDist) {
  const tsc = require.resolve('typescript/bin/tsc', { paths: [root] })
  run([tsc, '-p', path.join(root, 'tsconfig.json')], 'compiling the TypeScript facade')
  run([path.join(root, 'scripts', 'write-esm.cjs')], 'writing the ESM entry')
}
