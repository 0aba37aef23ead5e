#!/usr/bin/env bash
# Telemetry's cost, side by side in one run: the drain and publish
# workloads of bench/telemetry/cost_test.go built against BASE's runtime
# (a commit before telemetry: off is all it knows) and against this
# checkout's runtime, telemetry off and on (the OpenTelemetry SDK), run in
# turn ROUNDS times. With PREV, bench/telemetry as of commit PREV is built
# too (its runtime, its variants) and run beside them as "prev": a change
# to telemetry measured before and after in one run.
#
#   bash scripts/bench-telemetry.sh BASE [ROUNDS] [PREV]
set -euo pipefail
base=${1:?usage: bench-telemetry.sh BASE [ROUNDS] [PREV]}
rounds=${2:-3}
prev=${3:-}
root=$(git rev-parse --show-toplevel)
tmp=$(mktemp -d)
cleanup() {
	git -C "$root" worktree remove --force "$tmp/base" >/dev/null 2>&1 || true
	git -C "$root" worktree remove --force "$tmp/prev" >/dev/null 2>&1 || true
	rm -rf "$tmp"
}
trap cleanup EXIT
git -C "$root" worktree add --detach "$tmp/base" "$base" >/dev/null 2>&1
mkdir -p "$tmp/base/bench/telemetrycost"
cp "$root/bench/telemetry/cost_test.go" "$root/bench/telemetry/doc.go" "$tmp/base/bench/telemetrycost/"
(cd "$tmp/base/bench" && go test -c -o "$tmp/base.test" ./telemetrycost/)
(cd "$root/bench" && go test -c -o "$tmp/head.test" ./telemetry/)
if [ -n "$prev" ]; then
	git -C "$root" worktree add --detach "$tmp/prev" "$prev" >/dev/null 2>&1
	(cd "$tmp/prev/bench" && go test -c -o "$tmp/prev.test" ./telemetry/)
fi
run() { # label binary bench benchtime
	"$2" -test.run '^$' -test.bench "$3" -test.benchtime "$4" -test.benchmem | grep '^Benchmark' | sed "s/^/$1 /"
}
for i in $(seq "$rounds"); do
	echo "# round $i"
	run base "$tmp/base.test" 'CostDrain' 3x
	if [ -n "$prev" ]; then run prev "$tmp/prev.test" 'CostDrain' 3x; fi
	run head "$tmp/head.test" 'CostDrain' 3x
	run base "$tmp/base.test" 'CostPublish' 200000x
	if [ -n "$prev" ]; then run prev "$tmp/prev.test" 'CostPublish' 200000x; fi
	run head "$tmp/head.test" 'CostPublish' 200000x
done
