#!/usr/bin/env node
// Checks that every package `npm ci` can install here accepts every Node version this package's
// `engines` promises (the README says the same), so that no Node in that range prints
// `npm warn EBADENGINE`: `npm ci` itself only checks the Node that runs it (test.sh checks that
// too). Walks package-lock.json from the root (its devDependencies too) through dependencies and
// optional dependencies, skipping the wasm32-only builds (never installed on Node) and what only
// they need.
// Needs `semver`, which the devDependencies bring (run after `npm ci`).
'use strict'
const path = require('node:path')
const semver = require('semver')

const root = path.resolve(__dirname, '..')
const lock = require(path.join(root, 'package-lock.json')).packages
const promised = lock[''].engines.node
if (promised !== require(path.join(root, 'package.json')).engines.node) {
  console.error('package-lock.json is stale: its engines differ from package.json (run npm install)')
  process.exit(1)
}

// Node's lookup: <from>/node_modules/<dep>, then each parent's, then the top level.
function resolve(from, dep) {
  for (let at = from; ; ) {
    const key = `${at ? `${at}/` : ''}node_modules/${dep}`
    if (lock[key]) return key
    if (!at) return null
    const i = at.lastIndexOf('/node_modules/')
    at = i < 0 ? '' : at.slice(0, i)
  }
}

const seen = new Set()
const bad = []
const queue = ['']
while (queue.length) {
  const key = queue.shift()
  if (seen.has(key)) continue
  seen.add(key)
  const pkg = lock[key]
  if (pkg.cpu && pkg.cpu.every((c) => c === 'wasm32')) continue
  const needs = pkg.engines && pkg.engines.node
  if (key && needs && !semver.subset(promised, needs)) bad.push(`${key.replace(/^.*node_modules\//, '')}@${pkg.version} needs node ${needs}`)
  for (const field of key ? ['dependencies', 'optionalDependencies'] : ['dependencies', 'devDependencies', 'optionalDependencies']) {
    for (const dep of Object.keys(pkg[field] || {})) {
      const found = resolve(key, dep)
      if (found) queue.push(found)
    }
  }
}
if (bad.length) {
  console.error(`engines promises node ${promised}, but on part of that range npm warns EBADENGINE for:\n  ${bad.join('\n  ')}`)
  process.exit(1)
}
console.log(`engines: all ${seen.size - 1} locked packages accept node ${promised}`)
