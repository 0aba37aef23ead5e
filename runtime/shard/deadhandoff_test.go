package shard_test

import (
	"slices"
	"testing"
	"time"

	"github.com/kinesisgen/kinesisgen/runtime/shard"
)

// An owner asked for a lease that dies in the middle of the handoff (its
// handlers have not finished, so it still waits for them to settle) loses
// the lease as a crash would lose it: the asker takes it once the owner
// counts as dead, within twice the failover time of the death, not after
// its handoff time, which a fleet with slow handlers sets far longer.
// (Before the fix the asker waited for the handoff time whatever became
// of the owner: 3.9 s after its death here, with a handoff time of 4 s
// and a failover time of 1 s, in both liveness modes.)
// An owner that lives and whose handlers do not finish is never forced:
// it postpones the handoff and keeps the lease (issue 29).
func TestAskedOwnerDyingMidHandoffIsTakenOverAsACrash(t *testing.T) {
	for _, tc := range []struct {
		name     string
		liveness shard.Liveness
	}{
		{"per-instance", shard.LivenessPerInstance},
		{"per-lease", shard.LivenessPerLease},
	} {
		t.Run(tc.name+"/dies", func(t *testing.T) { testAskedOwnerMidHandoff(t, tc.liveness, true) })
		t.Run(tc.name+"/slow", func(t *testing.T) { testAskedOwnerMidHandoff(t, tc.liveness, false) })
	}
}

func testAskedOwnerMidHandoff(t *testing.T, liveness shard.Liveness, dies bool) {
	e, _ := memEnv(t, 2)
	ids := e.shards()
	cols := newCollectors(2)
	cols[0].hold = func(*shard.Record) bool { return true } // a's handlers never finish
	hole := &holeStore{Store: e.store, fail: true}
	ask := &askSignalStore{Store: e.store, asked: make(chan struct{})}
	cfgA, cfgB := e.config("a", cols[0].sink), e.config("b", cols[1].sink)
	cfgA.Leases, cfgB.Leases = hole, withMembers(ask, e.store)
	countersA := new(shard.LeaseCounters)
	cfgA.Counters = countersA
	for _, c := range []*shard.Config{&cfgA, &cfgB} {
		// Handlers given long to settle: the owner waits 2 s for them
		// before it checkpoints and releases.
		c.Renew, c.Failover, c.Handoff = 100*time.Millisecond, time.Second, 4*time.Second
		c.Liveness = liveness
	}
	if !dies {
		// Not about failover: a renewal lagging under a loaded -race run
		// must not fence the live owner (which the test would take for a
		// forced handoff).
		cfgA.Failover, cfgB.Failover = 3*time.Second, 3*time.Second
	}
	a := e.start(cfgA)
	want := e.feed(a, ids, cols[0], 10, 10)

	// notYet is the start of the last look that saw no handoff under way:
	// the handoff began after it. (The look that sees it can come late
	// under load; timing from it would shorten the drain a measured.)
	notYet := time.Now()
	b := e.start(cfgB)
	select {
	case <-ask.asked:
	case <-time.After(10 * time.Second):
		t.Fatal("b never asked a for a lease")
	}
	var handed string
	eventually(t, 5*time.Second, "a hands a lease over", func() bool {
		look := time.Now()
		if handed = handingOver(a); handed == "" {
			notYet = look
		}
		return handed != ""
	})
	began := time.Now()
	if !dies {
		// Its handlers never finish: a postpones the handoff, keeps the
		// lease and reads on; b never reads the shard beside it.
		eventually(t, 2*cfgA.Handoff, "a postpones the handoff", func() bool { return countersA.Postponed.Load() > 0 })
		took := time.Since(notYet) // at least how long a drained
		if took < cfgA.Handoff/2-100*time.Millisecond {
			t.Fatalf("a postponed %v after it began handing %s over, before its handlers had the half handoff time %v", took, handed, cfgA.Handoff/2)
		}
		time.Sleep(cfgA.Handoff + 500*time.Millisecond) // past when b used to force it
		if slices.Contains(b.Reading(), handed) {
			t.Fatalf("b reads %s while a's handlers still run its records", handed)
		}
		if n, lost := countersA.HandedOver.Load(), countersA.Lost.Load(); n != 0 || lost != 0 {
			t.Fatalf("a handed over %d leases and lost %d, want none while its records are in flight", n, lost)
		}
		t.Logf("a live owner whose handlers never finish postponed %d handoffs of %s", countersA.Postponed.Load(), handed)
		return
	}
	hole.open.Store(true) // a dies: none of its calls reaches the store any more
	eventually(t, 10*time.Second, "b reads both shards", func() bool { return slices.Equal(b.Reading(), ids) })
	took := time.Since(began)
	t.Logf("a died handing %s over; b read both shards %v later (failover time %v, handoff time %v)",
		handed, took.Round(time.Millisecond), cfgB.Failover, cfgB.Handoff)
	if took > 2*cfgB.Failover {
		t.Errorf("b took the lease of a dead owner %v after its death, want within twice the failover time %v", took, 2*cfgB.Failover)
	}
	// a settled none of its records: b delivers each again, nothing lost.
	cols[1].wait(t, 10*time.Second, "a's records again, from b", func(rs []*shard.Record) bool { return len(rs) >= 10 })
	checkKeyOrder(t, cols[1].records(), want)
	if n := len(a.Reading()); n != 0 {
		t.Errorf("a still reads %d shards after b took them", n)
	}
}
