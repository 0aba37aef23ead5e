#!/usr/bin/env bash
# How often a seed of the deterministic simulation (fleettest/dst)
# reproduces its run: runs seeds 1..N of each mix in two processes (the
# second in reverse order, so no seed runs after the same schedules as in
# the first) and counts the seeds whose runs differ, by the sorted
# fingerprint (what happened at which virtual time) and by the ordered
# one (the order of goroutines at one instant too).
#
#   bash scripts/dst-repro.sh [N=30] [MIXES=basic,twoapps,aggregate]
#
# DIR=/tmp/x keeps each run's observations (DIR/a, DIR/b) to diff;
# BIN=/tmp/dst.test runs that test binary (of another commit, say).
set -euo pipefail
n=${1:-30}
mixes=${2:-basic,twoapps,aggregate}
cd "$(dirname "$0")/../fleettest/dst"
bin=${BIN:-}
if [ -z "$bin" ]; then
	bin=$(mktemp -d)/dst.test
	go test -c -o "$bin" .
fi
dir=${DIR:-$(mktemp -d)}
mkdir -p "$dir/a" "$dir/b"
"$bin" -test.run 'TestFingerprints$' -dst.fingerprints="$n" -dst.mix="$mixes" -dst.fpdir="$dir/a" | grep '^FP ' | sort >"$dir/a.txt"
"$bin" -test.run 'TestFingerprints$' -dst.fingerprints="$n" -dst.mix="$mixes" -dst.fpdir="$dir/b" -dst.fpreverse | grep '^FP ' | sort >"$dir/b.txt"
join -j1 <(awk '{print $2"/"$3, $4, $5}' "$dir/a.txt" | sort) <(awk '{print $2"/"$3, $4, $5}' "$dir/b.txt" | sort) |
	awk -v dir="$dir" '{
		split($1, k, "/"); m = k[1]; runs[m]++
		if ($2 != $4) { sorted[m]++; diff = diff " " $1 }
		if ($3 != $5) ordered[m]++
	}
	END {
		for (m in runs) printf "%-10s %3d seeds: %3d differ (sorted), %3d differ (ordered)\n", m, runs[m], sorted[m] + 0, ordered[m] + 0
		if (diff != "") printf "differing (sorted):%s\nobservations: %s/{a,b}/MIX-SEED.txt\n", diff, dir
	}'
