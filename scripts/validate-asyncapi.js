// Validates AsyncAPI documents with the AsyncAPI Initiative's own parser
// (@asyncapi/parser, pinned in package-lock.json) and prints every
// diagnostic it reports. Exits 1 when any document has an error or a
// warning, 2 on bad usage; information and hints are printed only.
//
//   node scripts/validate-asyncapi.js FILE...
//
// The Go test TestAsyncAPIParser (generated_test/contracts_test.go) runs it
// under make test.
'use strict'

const { Parser, fromFile } = require('@asyncapi/parser')

const severities = ['error', 'warning', 'information', 'hint']

async function main (files) {
  if (files.length === 0) {
    console.error('usage: node scripts/validate-asyncapi.js FILE...')
    return 2
  }
  const parser = new Parser()
  let failed = false
  for (const file of files) {
    const { document, diagnostics } = await fromFile(parser, file).parse()
    for (const d of diagnostics) {
      const at = d.range ? `${d.range.start.line + 1}:${d.range.start.character + 1}` : '1:1'
      const path = (d.path || []).join('.')
      console.log(`${file}:${at}: ${severities[d.severity] || d.severity}: ${d.message} [${d.code}]${path ? ' at ' + path : ''}`)
      if (d.severity <= 1) failed = true
    }
    if (!document) {
      console.log(`${file}: not parsed`)
      failed = true
    } else {
      console.log(`${file}: AsyncAPI ${document.version()}, ${document.channels().length} channels, ${document.operations().length} operations, ${document.components().messages().length} messages`)
    }
  }
  return failed ? 1 : 0
}

main(process.argv.slice(2)).then((code) => { process.exitCode = code }, (err) => {
  console.error(err)
  process.exitCode = 1
})
