// Starts kinesalite or dynalite in memory on 127.0.0.1 and a port the
// kernel picks (so there is no race over a "free" port), then prints
// "LISTENING <port>" for scripts/with-servers.sh to read.
//
//   node scripts/local-server.js kinesalite|dynalite
'use strict'

const which = process.argv[2]
let server
if (which === 'kinesalite') {
  // Zero state-transition delays and a high shard limit: tests create,
  // reshard and delete streams all the time.
  server = require('kinesalite')({ createStreamMs: 0, deleteStreamMs: 0, updateStreamMs: 0, shardLimit: 1000 })
} else if (which === 'dynalite') {
  server = require('dynalite')({ createTableMs: 0, deleteTableMs: 0, updateTableMs: 0 })
} else {
  console.error('usage: node scripts/local-server.js kinesalite|dynalite')
  process.exit(2)
}
server.on('error', (err) => {
  console.error(`${which}: ${err.message}`)
  process.exit(1)
})
server.listen(0, '127.0.0.1', () => {
  console.log(`LISTENING ${server.address().port}`)
})
// kinesalite rethrows a request's 'error' event, so a client that gives up
// mid-request (a Go context deadline, a killed test process) would take the
// server down for every other test. A request the client aborted is the
// client's business: log it and keep serving; anything else is a real crash.
process.on('uncaughtException', (err) => {
  if (err && (err.code === 'ECONNRESET' || err.code === 'EPIPE' || err.message === 'aborted')) {
    console.error(`${which}: client went away mid-request (${err.code || err.message}); still serving`)
    return
  }
  console.error(err)
  process.exit(1)
})
// Exit promptly on TERM/INT even as PID 1.
for (const sig of ['SIGTERM', 'SIGINT']) process.on(sig, () => process.exit(0))
