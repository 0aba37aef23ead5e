// Starts kinesalite, dynalite or kinesis-mock in memory on 127.0.0.1 and a
// port the kernel picks (so there is no race over a "free" port), then
// prints "LISTENING <port>" for scripts/with-servers.sh to read.
//
//   node scripts/local-server.js kinesalite|dynalite|kinesis-mock
'use strict'

const net = require('net')
const path = require('path')

const which = process.argv[2]
// kinesis-mock (Cats Effect) replaces process.exit with a graceful exit that
// waits for its servers to close, which never happens while a client keeps
// a connection open; the handlers below use the real one.
const exit = process.exit.bind(process)

function usage() {
  console.error('usage: node scripts/local-server.js kinesalite|dynalite|kinesis-mock')
  exit(2)
}

if (which === 'kinesalite' || which === 'dynalite') {
  let server
  if (which === 'kinesalite') {
    // Zero state-transition delays and a high shard limit: tests create,
    // reshard and delete streams all the time.
    server = require('kinesalite')({ createStreamMs: 0, deleteStreamMs: 0, updateStreamMs: 0, shardLimit: 1000 })
  } else {
    server = require('dynalite')({ createTableMs: 0, deleteTableMs: 0, updateTableMs: 0 })
  }
  server.on('error', (err) => {
    console.error(`${which}: ${err.message}`)
    exit(1)
  })
  server.listen(0, '127.0.0.1', () => {
    console.log(`LISTENING ${server.address().port}`)
  })
} else if (which === 'kinesis-mock') {
  startKinesisMock()
} else {
  usage()
}

// kinesis-mock (npm kinesis-local) is a Scala.js build: plain JavaScript, no
// JVM. It is configured by environment variables only, binds every interface
// and has no way to report a kernel-picked port, so it runs in this process
// with net.Server#listen wrapped: every listener is bound to 127.0.0.1, and
// the plain-HTTP one (asked for on the marker port below) on a port the
// kernel picks, which is then printed. Its TLS listener cannot be turned
// off; it gets a kernel-picked loopback port too and is not used.
function startKinesisMock() {
  const plainMarker = 4568 // what kinesis-mock is told; never bound
  const env = {
    KINESIS_MOCK_PLAIN_PORT: String(plainMarker),
    KINESIS_MOCK_TLS_PORT: '0',
    // Its self-signed certificate, found relative to the working directory
    // unless the path is absolute.
    KINESIS_MOCK_CERT_PATH: path.join(path.dirname(require.resolve('kinesis-local/package.json')), 'server.json'),
    // No artificial delays: every state change completes at once.
    CREATE_STREAM_DURATION: '0ms',
    DELETE_STREAM_DURATION: '0ms',
    REGISTER_STREAM_CONSUMER_DURATION: '0ms',
    DEREGISTER_STREAM_CONSUMER_DURATION: '0ms',
    START_STREAM_ENCRYPTION_DURATION: '0ms',
    STOP_STREAM_ENCRYPTION_DURATION: '0ms',
    MERGE_SHARDS_DURATION: '0ms',
    SPLIT_SHARD_DURATION: '0ms',
    UPDATE_SHARD_COUNT_DURATION: '0ms',
    UPDATE_STREAM_MODE_DURATION: '0ms',
    // Tests create many streams and reshard them; the shard limit counts
    // every open shard of the account.
    SHARD_LIMIT: '10000',
    ON_DEMAND_STREAM_COUNT_LIMIT: '1000',
    // In memory only.
    SHOULD_PERSIST_DATA: 'false',
    LOAD_DATA_IF_EXISTS: 'false',
    LOG_LEVEL: process.env.KINESIS_MOCK_LOG_LEVEL || 'WARN',
  }
  Object.assign(process.env, env)

  const listen = net.Server.prototype.listen
  net.Server.prototype.listen = function (...args) {
    let port
    let cb
    if (typeof args[args.length - 1] === 'function') cb = args.pop()
    if (args[0] !== null && typeof args[0] === 'object') port = Number(args[0].port)
    else port = Number(args[0])
    const plain = port === plainMarker
    this.once('listening', () => {
      if (plain) console.log(`LISTENING ${this.address().port}`)
    })
    return listen.call(this, plain ? 0 : port, '127.0.0.1', cb)
  }
  require('kinesis-local/main.js')
}

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
  exit(1)
})
// Exit promptly on TERM/INT even as PID 1.
for (const sig of ['SIGTERM', 'SIGINT']) process.on(sig, () => exit(0))
