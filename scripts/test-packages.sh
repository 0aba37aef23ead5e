#!/usr/bin/env bash
# The package tests of make test (after vet), in five groups run side by
# side: the race group most of the time waits on timers and on the local
# servers, which leaves room for the CPU-bound simulations beside it.
#
#   race:    go test -race of every package but fleettest, fleettest/sim
#            and fleettest/dst, the longest first (so that they do not start
#            last), up to TEST_P (default 2) test binaries and builds at once
#   fleet:   go test -race of fleettest, the longest of them (its worker
#            processes against the local servers): in the race group it held
#            one of the TEST_P places for four minutes while the others'
#            tests queued behind the other
#   norace:  fleettest/sim and fleettest/dst without -race (the race detector
#            can crash on synctest bubbles: golang/go#78156), then the lease
#            pass's linearity, timed without -race, and the queue
#            subscribers' fault simulation (runtime, synctest bubbles too)
#   bench:   the bench module's interop and telemetry packages, under -race
#
#   split:   -race too, the two longest packages, runtime/shard and runtime, whose
#            tests mostly wait on real timers one after another: each test
#            binary is built once and run as TEST_SPLIT_SHARD (default 4)
#            and TEST_SPLIT_RUNTIME (default 3)
#            processes side by side, each with a part of the package's
#            tests (every test in exactly one part), so a test sees the same
#            process-wide state (goroutines, slog's default) as under
#            go test; they print "ok <package>(i/n) <time>"
#
# The race group's and the split parts' lines ("ok <package> <time>") print
# as they end, a failed part's output at the end; the no-race, fleettest
# and bench groups' output prints when the race group is done. Then a summary of
# every package's test time, slowest first, and the wall time. Exits non-zero
# when any group failed.
set -uo pipefail

# TEST_NICE=N runs the tests at a lower priority than the local servers
# (which must answer within the tests' bounds however busy the tests keep
# the CPU); off by default.
if [ -z "${TEST_PACKAGES_NICED:-}" ] && [ "${TEST_NICE:-0}" != 0 ]; then
	TEST_PACKAGES_NICED=1 exec nice -n "$TEST_NICE" bash "${BASH_SOURCE[0]}" "$@"
fi

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
GO="${GO:-go}"
P="${TEST_P:-2}"
logs="$(mktemp -d "${TMPDIR:-/tmp}/kinesisgen-test.XXXXXX")"
trap 'rm -rf "$logs"' EXIT
began=$SECONDS

# The packages split into parts, and how many.
declare -A split=([runtime/shard]="${TEST_SPLIT_SHARD:-4}" [runtime]="${TEST_SPLIT_RUNTIME:-3}")
live='Live|Kinesalite|KinesisMock|Dynalite|DynamoDB|KCL'

# The packages that take longest, started first; every other package follows
# in go list's order. (A package missing here is only started later.)
slow=(runtime/kinesistest generated_test runtime/kinesistest/conformance
	cmd/kinesisgen cmd/kinesislocal)
mod="$($GO list -m)"
skip=(-e '/fleettest$' -e '/fleettest/sim$' -e '/fleettest/dst$')
for p in "${!split[@]}"; do skip+=(-e "^$mod/$p\$"); done
mapfile -t all < <($GO list ./... | grep -v "${skip[@]}")
pkgs=()
for p in "${slow[@]}"; do
	for q in "${all[@]}"; do [ "$q" = "$mod/$p" ] && pkgs+=("$q"); done
done
for q in "${all[@]}"; do
	case " ${pkgs[*]} " in *" $q "*) ;; *) pkgs+=("$q") ;; esac
done

# Each background group in a process group of its own (setsid), ended
# whole if this script is interrupted.
export GO
setsid bash -c '$GO test -count=1 -timeout 10m ./fleettest/sim/ ./fleettest/dst/; s=$?
	$GO test -count=1 -timeout 5m -run "TestLeasePassIsLinearInTheLeases" ./runtime/shard/ || s=1
	$GO test -count=1 -timeout 5m -run "TestQueueSubscribersUnderFaults" ./runtime/ || s=1; exit $s' >"$logs/norace.log" 2>&1 &
norace_pid=$!
setsid bash -c '$GO test -race -count=1 -timeout 30m ./fleettest/' >"$logs/fleet.log" 2>&1 &
fleet_pid=$!
setsid bash -c 'cd bench && $GO test -race -count=1 -timeout 5m ./interop/ ./telemetry/' >"$logs/bench.log" 2>&1 &
bench_pid=$!

# run_split PKG N: builds PKG's race test binary, runs its tests in N
# processes, prints a line per part as go test does for a package, the
# part's output when it failed. The tests of the local servers (by name:
# $live) all go to part 1, one after another as under go test, with local
# servers of their own (scripts/with-servers.sh), so that no server is asked
# more at once than before; the others are dealt to the other parts by
# their measured time (scripts/test-weights.txt).
run_split() {
	local pkg=$1 n=$2 dir bin i status=0
	dir="$root/$pkg"
	bin="$logs/${pkg//\//_}.test"
	if ! $GO test -race -c -o "$bin" "./$pkg/" >"$logs/failed.${pkg//\//_}.build" 2>&1; then
		echo "FAIL	$mod/$pkg [build failed] (the errors at the end)"
		return 1
	fi
	rm "$logs/failed.${pkg//\//_}.build"
	local -a names parts pids
	local name
	mapfile -t names < <(cd "$dir" && "$bin" -test.list '.*' | grep -E '^(Test|Example|Fuzz)')
	# The others by measured weight (scripts/split-tests.awk), so that the
	# parts end about together.
	while read -r i name; do
		parts[i]+="${parts[i]:+|}$name"
	done < <(printf '%s\n' "${names[@]}" |
		awk -v pkg="$pkg" -v n="$n" -v live="$live" -f "$root/scripts/split-tests.awk" "$root/scripts/test-weights.txt" -)
	for ((i = 0; i < n; i++)); do
		[ -n "${parts[i]:-}" ] || continue
		(
			cd "$dir" || exit 1
			t0=$(date +%s.%N)
			local -a servers=()
			# The part of the live tests gets local servers of its own.
			[ "$n" -gt 1 ] && [ "$i" -eq 0 ] && servers=(bash "$root/scripts/with-servers.sh")
			"${servers[@]}" "$bin" -test.paniconexit0 -test.count=1 -test.timeout=30m -test.run "^(${parts[i]})\$" >"$logs/part.$$.${pkg//\//_}.$i" 2>&1
			st=$?
			took=$(awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN { print b - a }')
			if [ "$st" -eq 0 ]; then
				printf 'ok  \t%s(%d/%d)\t%.3fs\n' "$mod/$pkg" $((i + 1)) "$n" "$took"
			else
				mv "$logs/part.$$.${pkg//\//_}.$i" "$logs/failed.${pkg//\//_}.$i"
				printf 'FAIL\t%s(%d/%d)\t%.3fs (its output below, at the end)\n' "$mod/$pkg" $((i + 1)) "$n" "$took"
			fi | tee -a "$logs/split.log"
			exit "$st"
		) &
		pids+=($!)
	done
	for i in "${pids[@]}"; do wait "$i" || status=1; done
	return "$status"
}
split_pids=()
for p in "${!split[@]}"; do
	setsid bash -c "$(declare -f run_split); $(declare -p logs root mod GO live); run_split $p ${split[$p]}" &
	split_pids+=($!)
done
export P
setsid bash -c '$GO test -race -count=1 -timeout 30m -p "$P" "$@" 2>&1 | tee "'"$logs"'/race.log"; exit "${PIPESTATUS[0]}"' race "${pkgs[@]}" &
race_pid=$!
trap 'kill -- -"$race_pid" -"$norace_pid" -"$fleet_pid" -"$bench_pid" ${split_pids[*]/#/-} 2>/dev/null; exit 130' INT TERM HUP
wait "$race_pid"
race=$?
wait "$norace_pid"
norace=$?
echo "--- fleettest/sim, fleettest/dst, lease pass linearity (no -race)"
cat "$logs/norace.log"
wait "$fleet_pid"
fleet=$?
echo "--- fleettest"
cat "$logs/fleet.log"
wait "$bench_pid"
bench=$?
echo "--- bench/interop, bench/telemetry"
cat "$logs/bench.log"
splits=0
for i in "${!split_pids[@]}"; do
	wait "${split_pids[i]}" || splits=1
done
for f in "$logs"/failed.*; do
	[ -e "$f" ] || continue
	echo "--- output of the failed part ${f#"$logs"/failed.}"
	cat "$f"
done

echo "--- test time per package (slowest first; build time not included), wall time $((SECONDS - began))s"
cat "$logs"/*.log | sed -n -E 's#^(ok|FAIL)[[:space:]]+([^[:space:]]+)[[:space:]]+([0-9.]+)s.*#\3 \1 \2#p' | sed "s# $mod/# #" |
	sort -rn | awk '{ printf "%8.1fs  %-4s %s\n", $1, $2, $3 }'
status=0
for s in "$race" "$norace" "$fleet" "$bench" "$splits"; do [ "$s" -eq 0 ] || status=1; done
[ "$status" -eq 0 ] || echo "FAIL: race group $race, no-race group $norace, fleettest $fleet, bench group $bench, split packages $splits (exit statuses)"
exit "$status"
