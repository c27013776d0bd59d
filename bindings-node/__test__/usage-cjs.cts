// Compiled (not run) by types.test.mjs: the package's `require` entry.
import signoff = require('signoff')

const gate = new signoff.Gate()
gate.register({ name: 'read_file', execute: () => 'x' })
const p: Promise<signoff.ToolResult> = gate.execute({ tool: 'read_file' })
void p
const e: signoff.SignoffError = new signoff.SignoffError('m', 'closed')
void e
