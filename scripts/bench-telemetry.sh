#!/usr/bin/env bash
# Telemetry's cost, side by side in one run: the drain and publish
# workloads of bench/telemetry/cost_test.go built against BASE's runtime
# (a commit before telemetry: off is all it knows) and against this
# checkout's runtime, telemetry off and on (the OpenTelemetry SDK), run in
# turn ROUNDS times.
#
#   bash scripts/bench-telemetry.sh BASE [ROUNDS]
set -euo pipefail
base=${1:?usage: bench-telemetry.sh BASE [ROUNDS]}
rounds=${2:-3}
root=$(git rev-parse --show-toplevel)
tmp=$(mktemp -d)
cleanup() {
	git -C "$root" worktree remove --force "$tmp/base" >/dev/null 2>&1 || true
	rm -rf "$tmp"
}
trap cleanup EXIT
git -C "$root" worktree add --detach "$tmp/base" "$base" >/dev/null 2>&1
mkdir -p "$tmp/base/bench/telemetrycost"
cp "$root/bench/telemetry/cost_test.go" "$root/bench/telemetry/doc.go" "$tmp/base/bench/telemetrycost/"
(cd "$tmp/base/bench" && go test -c -o "$tmp/base.test" ./telemetrycost/)
(cd "$root/bench" && go test -c -o "$tmp/head.test" ./telemetry/)
run() { # label binary bench benchtime
	"$2" -test.run '^$' -test.bench "$3" -test.benchtime "$4" -test.benchmem | grep '^Benchmark' | sed "s/^/$1 /"
}
for i in $(seq "$rounds"); do
	echo "# round $i"
	run base "$tmp/base.test" 'CostDrain' 3x
	run head "$tmp/head.test" 'CostDrain' 3x
	run base "$tmp/base.test" 'CostPublish' 200000x
	run head "$tmp/head.test" 'CostPublish' 200000x
done
