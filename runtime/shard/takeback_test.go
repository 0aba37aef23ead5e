package shard_test

import (
	"slices"
	"testing"
	"time"

	"github.com/kinesisgen/kinesisgen/runtime/shard"
)

// Issue 29, "one owner at a time", as the simulator found it (mix all,
// seed 269): b, its heartbeats failing for longer than the failover time,
// comes back, beats and takes its own lease back (takeBack); a, whose
// members read was sent before b's beat landed, lists the leases after
// b's take-back and takes b's lease "from a dead owner" on that view. The
// view was fresh (younger than a lease call's deadline), so the re-read
// of a stale view did not apply; b holds the lease to its fence and
// handles records while a reads the shard too. A lease written by its
// owner after the view was sent is proof of life: a reads the members
// again before taking it.
func TestTakeBackAfterStaleViewNotTaken(t *testing.T) {
	e, _ := memEnv(t, 2)
	ids := e.shards()
	sa := &frozenAfterMembers{noBeatStore: newNoBeatStore(e), frozen: make(chan struct{}), release: make(chan struct{})}
	sb := newNoBeatStore(e)
	cfgA, cfgB := e.config("a", newCollector().sink), e.config("b", newCollector().sink)
	cfgA.Leases, cfgB.Leases = sa, sb
	cfgB.Counters = new(shard.LeaseCounters)
	for _, c := range []*shard.Config{&cfgA, &cfgB} {
		// The re-read of a view older than a lease call's deadline
		// (Failover/3, 1 s) must not cover the crossing.
		c.Renew, c.Failover = 100*time.Millisecond, 3*time.Second
	}
	a := e.start(cfgA)
	t.Cleanup(sa.thaw) // before a's Stop (cleanups run last first)
	eventually(t, 5*time.Second, "a reads both shards", func() bool { return slices.Equal(a.Reading(), ids) })
	b := e.start(cfgB)
	eventually(t, 10*time.Second, "a 1/1 split", func() bool { return len(a.Reading()) == 1 && len(b.Reading()) == 1 })
	bShard := b.Reading()[0]
	before := e.lease(bShard)

	// Both stop confirming heartbeats: b's beat stands still for longer
	// than a's failover time, and a, its own beat stale, takes nothing.
	sa.off.Store(true)
	sb.off.Store(true)
	time.Sleep(cfgA.Failover + 500*time.Millisecond)
	sa.armed.Store(true)
	select {
	case <-sa.frozen:
	case <-time.After(5 * time.Second):
		t.Fatal("a read no members")
	}
	held := time.Now()
	// a's pass holds a members answer that shows b dead. b comes back,
	// beats and takes its lease back; a's beats are confirmed again.
	sa.off.Store(false)
	sb.off.Store(false)
	eventually(t, 2*time.Second, "b takes "+bShard+" back", func() bool {
		l := e.lease(bShard)
		return l.Owner == "b" && l.Counter != before.Counter
	})
	time.Sleep(3 * cfgA.Renew)
	if age := time.Since(held); age > cfgA.Failover/3-200*time.Millisecond {
		t.Skipf("b took its lease back %v after a's members read (a slow machine): a re-reads a view that old anyway", age)
	}
	// b may hand a lease to a when a asks for its share: only a take from
	// b (b did not hand it over, or finds it lost) is the defect.
	lost, handed := cfgB.Counters.Lost.Load(), cfgB.Counters.HandedOver.Load()
	taken := func() bool {
		if cfgB.Counters.Lost.Load() != lost {
			return true
		}
		if e.lease(bShard).Owner != "a" {
			return false
		}
		time.Sleep(200 * time.Millisecond) // a handoff's count follows its release
		return cfgB.Counters.HandedOver.Load() == handed
	}
	sa.thaw()

	deadline := time.Now().Add(2 * time.Second)
	for time.Now().Before(deadline) {
		if taken() {
			t.Fatalf("%s taken by a from b, which had beaten and taken it back after a's members read was sent (b lost %d, handed over %d)",
				bShard, cfgB.Counters.Lost.Load()-lost, cfgB.Counters.HandedOver.Load()-handed)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
