package shard_test

import (
	"testing"
	"time"
)

// perLeaseOnlyStore is a store whose layout needs every lease renewed by
// its holder (lease.PerLeaseOnly), as a table in the Java KCL's layout
// does (lease.DynamoDB with WithKCLLayout; TestKCLLayoutWritesKCLLeases
// shows it says so), although it keeps members.
type perLeaseOnlyStore struct{ *opStore }

func (perLeaseOnlyStore) PerLeaseOnly() bool { return true }

// On a store in the KCL's layout a coordinator left to choose its
// liveness (LivenessAuto, what the broker passes) renews every lease it
// holds every renewal interval, as the Java KCL workers sharing the table
// expect (they take a lease whose counter stood still for their failover
// time), and writes no member entry, which a KCL worker would read as a
// lease. (Making lease.MembersOf ignore PerLeaseOnly fails this test: 0
// lease writes, a heartbeat every renewal interval.)
func TestKCLLayoutKeepsPerLeaseRenewal(t *testing.T) {
	const shards = 8
	e, _ := memEnv(t, shards)
	s := newOpStore(e.store)
	cfg := e.config("a", newCollector().sink)
	cfg.Leases = perLeaseOnlyStore{s}
	cfg.Poll = time.Second
	c := e.start(cfg)
	eventually(t, 5*time.Second, "a reads every shard", func() bool { return len(c.Reading()) == shards })
	time.Sleep(5 * cfg.Sync)
	const window = time.Second
	w, l := s.writes.Load(), s.lists.Load()
	time.Sleep(window)
	writes, lists := s.writes.Load()-w, s.lists.Load()-l
	renewals := int64(window / cfg.Renew)
	t.Logf("in %v: %d lease writes (%d renewal intervals, %d leases), %d lists, %d heartbeats in all", window, writes, renewals, shards, lists, s.beats.Load())
	if writes < shards*renewals/2 {
		t.Errorf("%d lease writes at rest, want about %d: every lease renewed every renewal interval", writes, shards*renewals)
	}
	if n := s.beats.Load(); n != 0 {
		t.Errorf("%d member entries written to a table in the KCL's layout, want none", n)
	}
	if lists == 0 {
		t.Error("no listing at rest: with per-lease liveness a pass lists the leases to see their counters")
	}
}
