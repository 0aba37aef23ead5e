package shard_test

import (
	"testing"
	"testing/synctest"

	"github.com/kinesisgen/kinesisgen/runtime/kinesistest"
	"github.com/kinesisgen/kinesisgen/runtime/shard"
)

// eachLiveness runs f once per liveness mode, as subtests named after it.
// Issue 9's scenarios that involve liveness, fencing, a handoff, a release
// or a lost lease run in both: per instance is what the memory and
// DynamoDB stores get by default, per lease is what the KCL layout and
// WithPerLeaseRenewal run, and the two take different paths through the
// fence (a member entry against each lease's own writes) and the handoff
// (a request in the asker's member entry against one on the lease). The
// issue 9 tests were written when only per-lease renewal existed; issue
// 17 moved them to the new default, which left per lease untested.
func eachLiveness(t *testing.T, f func(t *testing.T, l shard.Liveness)) {
	for _, l := range []shard.Liveness{shard.LivenessPerInstance, shard.LivenessPerLease} {
		t.Run(l.String(), func(t *testing.T) { f(t, l) })
	}
}

// virtual runs f on a virtual clock (testing/synctest), the coordinators'
// timers and the in-process servers all in its bubble: where a test's
// margins are a fence time of a few hundred milliseconds, a loaded machine's
// scheduling (CI's load average reached 16) decided it on the real clock.
func virtual(f func(t *testing.T, l shard.Liveness)) func(t *testing.T, l shard.Liveness) {
	return func(t *testing.T, l shard.Liveness) {
		synctest.Test(t, func(t *testing.T) { f(t, l) })
	}
}

// memEnvIn is memEnv whose coordinators (e.config) run in liveness mode l.
func memEnvIn(t *testing.T, shards int32, l shard.Liveness) (*env, *kinesistest.Server) {
	e, srv := memEnv(t, shards)
	e.liveness = l
	return e, srv
}
