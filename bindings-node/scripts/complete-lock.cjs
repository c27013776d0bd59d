#!/usr/bin/env node
// Completes package-lock.json with the per-platform optional packages of @napi-rs/cli's native
// helpers (@napi-rs/lzma, tar, wasm-tools) that npm could not record because the registry it was
// generated against served only this platform's builds. `npm ci` refuses a lock that lacks them
// ("Missing: ... from lock file") even on platforms that skip them. Each entry gets the
// os / cpu / libc its napi-rs platform suffix stands for, so npm skips it elsewhere; it has no
// integrity hash (npm fetches it from the registry if a platform ever needs it). On a machine
// with the full registry, `rm package-lock.json && npm install --package-lock-only` makes this
// unnecessary.
'use strict'
const fs = require('node:fs')
const path = require('node:path')

const file = path.resolve(__dirname, '..', 'package-lock.json')
const lock = JSON.parse(fs.readFileSync(file, 'utf8'))
const platforms = {
  'android-arm-eabi': { os: ['android'], cpu: ['arm'] },
  'android-arm64': { os: ['android'], cpu: ['arm64'] },
  'darwin-arm64': { os: ['darwin'], cpu: ['arm64'] },
  'darwin-x64': { os: ['darwin'], cpu: ['x64'] },
  'freebsd-x64': { os: ['freebsd'], cpu: ['x64'] },
  'linux-arm-gnueabihf': { os: ['linux'], cpu: ['arm'], libc: ['glibc'] },
  'linux-arm64-gnu': { os: ['linux'], cpu: ['arm64'], libc: ['glibc'] },
  'linux-arm64-musl': { os: ['linux'], cpu: ['arm64'], libc: ['musl'] },
  'linux-ppc64-gnu': { os: ['linux'], cpu: ['ppc64'], libc: ['glibc'] },
  'linux-riscv64-gnu': { os: ['linux'], cpu: ['riscv64'], libc: ['glibc'] },
  'linux-s390x-gnu': { os: ['linux'], cpu: ['s390x'], libc: ['glibc'] },
  'linux-x64-gnu': { os: ['linux'], cpu: ['x64'], libc: ['glibc'] },
  'linux-x64-musl': { os: ['linux'], cpu: ['x64'], libc: ['musl'] },
  'wasm32-wasi': { cpu: ['wasm32'] },
  'win32-arm64-msvc': { os: ['win32'], cpu: ['arm64'] },
  'win32-ia32-msvc': { os: ['win32'], cpu: ['ia32'] },
  'win32-x64-msvc': { os: ['win32'], cpu: ['x64'] },
}
let added = 0
for (const [, pkg] of Object.entries(lock.packages)) {
  for (const [dep, version] of Object.entries(pkg.optionalDependencies ?? {})) {
    const key = `node_modules/${dep}`
    if (lock.packages[key]) continue
    const suffix = Object.keys(platforms).find((p) => dep.endsWith(`-${p}`))
    if (!suffix) throw new Error(`unknown platform for ${dep}`)
    lock.packages[key] = { version, dev: true, optional: true, ...platforms[suffix] }
    added++
  }
}
lock.packages = Object.fromEntries(Object.entries(lock.packages).sort(([a], [b]) => (a === '' ? -1 : b === '' ? 1 : a < b ? -1 : 1)))
fs.writeFileSync(file, JSON.stringify(lock, null, 2) + '\n')
console.log(`package-lock.json: ${added} platform entries added`)
