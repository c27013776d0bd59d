#!/usr/bin/env node
// Runs the README's Node examples the way a reader does: the package packed (`npm pack`) and
// installed into a new project (`npm init -y`, the default module type), each example saved under
// the file name its README tells the reader (the `node <file>` it says to run) and run with
// `node <file>` there. Fails when the install warns EBADENGINE, when a README does not name the
// file, or when a run exits non-zero, writes to stderr (a warning is not "runs as pasted") or
// prints anything but what the README says it prints. Needs the built package (dist/, the addon).
//
//   node scripts/check-readme-as-user.cjs [<readme>#<heading> ...]   (default: the list below)
'use strict'
const { spawnSync } = require('node:child_process')
const fs = require('node:fs')
const os = require('node:os')
const path = require('node:path')

const root = path.resolve(__dirname, '..')
const examples = process.argv.length > 2
  ? process.argv.slice(2).map((a) => { const i = a.indexOf('#'); return [path.resolve(a.slice(0, i)), a.slice(i + 1)] })
  : [
      [path.join(root, 'README.md'), '### Quickstart'],
      [path.join(root, 'README.md'), '### Remote approval and durable store'],
      [path.join(root, '..', 'README.md'), '## Node quickstart'],
    ]
const npm = process.env.npm_execpath ? [process.execPath, process.env.npm_execpath] : ['npm']

function run(cmd, args, cwd) {
  const r = spawnSync(cmd, args, { cwd, encoding: 'utf8', timeout: 120_000 })
  return { status: r.status, stdout: r.stdout ?? '', stderr: r.stderr ?? '', output: `${r.stdout ?? ''}${r.stderr ?? ''}` }
}
const failures = []
function fail(msg) {
  failures.push(msg)
  console.error(`FAIL ${msg}`)
}

const tmp = fs.mkdtempSync(path.join(os.tmpdir(), 'signoff-readme-'))
try {
  const pack = run(npm[0], [...npm.slice(1), 'pack', '--pack-destination', tmp, '--silent'], root)
  if (pack.status !== 0) throw new Error(`npm pack failed:\n${pack.output}`)
  const tarball = path.join(tmp, pack.stdout.trim().split('\n').pop())
  const project = path.join(tmp, 'project')
  fs.mkdirSync(project)
  const init = run(npm[0], [...npm.slice(1), 'init', '-y'], project)
  if (init.status !== 0) throw new Error(`npm init -y failed:\n${init.output}`)
  const install = run(npm[0], [...npm.slice(1), 'install', '--no-audit', '--no-fund', tarball], project)
  if (install.status !== 0) throw new Error(`npm install ${path.basename(tarball)} failed:\n${install.output}`)
  if (/EBADENGINE/.test(install.output)) fail(`npm install of the packed package warns EBADENGINE on node ${process.version}:\n${install.output}`)
  else console.log(`ok   npm install ${path.basename(tarball)} (no EBADENGINE on node ${process.version})`)

  for (const [readmePath, heading] of examples) {
    const where = `${path.relative(root, readmePath)} "${heading}"`
    const readme = fs.readFileSync(readmePath, 'utf8')
    const at = readme.indexOf(`\n${heading}\n`)
    if (at === -1) { fail(`${where}: no such heading`); continue }
    const section = readme.slice(at + 1)
    const block = section.match(/```js\n([\s\S]*?)```/)
    const expected = section.match(/prints\n\n```text\n([\s\S]*?)```/)
    if (!block || !expected) { fail(`${where}: no \`\`\`js block followed by "prints" and a \`\`\`text block`); continue }
    const names = [...section.slice(0, block.index).matchAll(/`node ([\w.-]+\.[cm]?js)`/g)]
    if (!names.length) {
      fail(`${where}: the README does not say which file to save the example in and run (e.g. "save this as \`quickstart.mjs\` and run \`node quickstart.mjs\`"); a reader who pastes it into a .js file gets a SyntaxError or a warning from node, depending on its version`)
      continue
    }
    const file = names[names.length - 1][1]
    fs.writeFileSync(path.join(project, file), block[1])
    const r = run(process.execPath, [file], project)
    if (r.status !== 0) fail(`${where}: \`node ${file}\` exited ${r.status}:\n${r.output}`)
    else if (r.stderr !== '') fail(`${where}: \`node ${file}\` wrote to stderr:\n${r.stderr}`)
    else if (r.stdout !== expected[1]) fail(`${where}: \`node ${file}\` printed\n${r.stdout}\ninstead of\n${expected[1]}`)
    else console.log(`ok   ${where}: node ${file}`)
    fs.rmSync(path.join(project, file))
  }
} finally {
  fs.rmSync(tmp, { recursive: true, force: true })
}
if (failures.length) {
  console.error(`README examples as a user runs them: ${failures.length} failed`)
  process.exit(1)
}
