#!/usr/bin/env bash
# Runs a command with local Kinesis (kinesalite and kinesis-mock) and
# DynamoDB (dynalite) servers on free loopback ports:
#
#   bash scripts/with-servers.sh go test -race ./...
#
# Installs the servers, and the AsyncAPI parser the tests validate
# documents with, from the committed lockfile (npm ci, skipped when
# node_modules already matches it), starts them in memory on 127.0.0.1
# (plain HTTP, no artificial delays), waits until each answers, exports
# KINESIS_TEST_ENDPOINT (kinesalite), KINESIS_MOCK_TEST_ENDPOINT
# (kinesis-mock), DYNAMODB_TEST_ENDPOINT and KINESISGEN_LIVE=required, runs
# the command, stops every server on any exit and exits with the command's
# status.
set -euo pipefail

if [ "$#" -eq 0 ]; then
	echo "usage: $0 command [args...]" >&2
	exit 2
fi

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
startup_timeout="${WITH_SERVERS_TIMEOUT:-60}" # kinesis-mock parses 9 MB of JavaScript first: seconds on a loaded machine

logs="$(mktemp -d "${TMPDIR:-/tmp}/kinesisgen-servers.XXXXXX")"
pids=()
names=()
cmd_pid=""
cmd_started=""

# running PID: the process exists and is not a zombie waiting to be reaped.
running() {
	local st
	st="$(ps -o stat= -p "$1" 2>/dev/null)" || return 1
	[[ $st != Z* ]]
}

cleanup() {
	local status=$?
	trap - EXIT INT TERM HUP
	if [ -n "$cmd_pid" ]; then kill "$cmd_pid" 2>/dev/null || true; fi
	local i
	for i in "${!pids[@]}"; do
		# A server that died under the tests explains their failures.
		if [ -n "$cmd_started" ] && ! kill -0 "${pids[$i]}" 2>/dev/null; then
			echo "with-servers: ${names[$i]} is no longer running; its log:" >&2
			cat "$logs/${names[$i]}.log" >&2 || true
		fi
	done
	for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; done
	# A server still running 5 s after SIGTERM is killed: none may outlive us.
	local waited=0
	for pid in "${pids[@]}"; do
		while running "$pid" && [ "$waited" -lt 50 ]; do
			sleep 0.1
			waited=$((waited + 1))
		done
		kill -KILL "$pid" 2>/dev/null || true
	done
	for pid in "${pids[@]}"; do wait "$pid" 2>/dev/null || true; done
	if [ "$status" -eq 0 ]; then
		rm -rf "$logs"
	else
		# The servers' logs explain a failed run; keep them.
		echo "with-servers: server logs kept in $logs" >&2
	fi
	exit "$status"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM
trap 'exit 129' HUP

fail() {
	echo "with-servers: $*" >&2
	exit 1
}

command -v node >/dev/null || fail "node is not installed (the local servers need Node.js and npm)"
command -v npm >/dev/null || fail "npm is not installed (the local servers need Node.js and npm)"

# npm ci only when node_modules was not installed from this very lockfile.
stamp="$root/node_modules/.kinesisgen-lock"
want="$(cksum <"$root/package-lock.json")"
if [ ! -f "$stamp" ] || [ "$(cat "$stamp")" != "$want" ]; then
	echo "with-servers: installing kinesalite, kinesis-mock and dynalite (npm ci)" >&2
	(cd "$root" && npm ci --no-audit --no-fund --loglevel=error >"$logs/npm.log" 2>&1) || {
		cat "$logs/npm.log" >&2
		fail "npm ci failed"
	}
	echo "$want" >"$stamp"
fi

# start NAME: launches the server and waits until it accepts connections;
# sets $port. (Not run in a subshell: the trap must know every PID.)
start() {
	local name=$1 log="$logs/$1.log" deadline pid
	port=""
	: >"$log" # exists before the background job opens it, so the poll below can read it
	node "$root/scripts/local-server.js" "$name" >"$log" 2>&1 </dev/null &
	pid=$!
	pids+=("$pid")
	names+=("$name")
	deadline=$((SECONDS + startup_timeout))
	while [ -z "$port" ]; do
		if ! kill -0 "$pid" 2>/dev/null; then
			echo "----- $name log -----" >&2
			cat "$log" >&2
			fail "$name exited before it was listening"
		fi
		if [ "$SECONDS" -ge "$deadline" ]; then
			echo "----- $name log -----" >&2
			cat "$log" >&2
			fail "$name did not start listening within ${startup_timeout}s"
		fi
		port="$(sed -n 's/^LISTENING \([0-9][0-9]*\)$/\1/p' "$log")"
		[ -n "$port" ] || sleep 0.1
	done
	# The server said it listens: wait until a connection is accepted too.
	until (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null; do
		if [ "$SECONDS" -ge "$deadline" ]; then
			cat "$log" >&2
			fail "$name on port $port did not accept connections within ${startup_timeout}s"
		fi
		sleep 0.1
	done
}

start kinesalite
kport=$port
start kinesis-mock
mport=$port
start dynalite
dport=$port
export KINESIS_TEST_ENDPOINT="http://127.0.0.1:$kport"
export KINESIS_MOCK_TEST_ENDPOINT="http://127.0.0.1:$mport"
export DYNAMODB_TEST_ENDPOINT="http://127.0.0.1:$dport"
export KINESISGEN_LIVE=required
echo "with-servers: kinesalite at $KINESIS_TEST_ENDPOINT, kinesis-mock at $KINESIS_MOCK_TEST_ENDPOINT, dynalite at $DYNAMODB_TEST_ENDPOINT" >&2

# Run the command in the background so a signal reaches our trap at once.
set +e
"$@" &
cmd_pid=$!
cmd_started=1
wait "$cmd_pid"
status=$?
cmd_pid=""
set -e
exit "$status"
