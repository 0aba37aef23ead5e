package shard_test

import (
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/kinesisgen/kinesisgen/runtime/shard"
)

// handling tracks which records are being handled, by any instance, and
// reports a record handled by two at the same time.
type handling struct {
	t      *testing.T
	mu     sync.Mutex
	active map[recordID]string // record -> the instance handling it
	twice  int
}

// hold returns a collector's hold that handles each record for d in its own
// goroutine, as instance owner.
func (h *handling) hold(owner string, d func() time.Duration) func(*shard.Record) bool {
	return func(r *shard.Record) bool {
		id := idOf(r)
		h.mu.Lock()
		if other, ok := h.active[id]; ok {
			h.twice++
			h.t.Errorf("record %s/%s (%s) handled by %s while %s still handles it", id.shard, id.seq, r.Data, owner, other)
		} else {
			h.active[id] = owner
		}
		h.mu.Unlock()
		wait := d()
		go func() {
			time.Sleep(wait)
			h.mu.Lock()
			if h.active[id] == owner {
				delete(h.active, id)
			}
			h.mu.Unlock()
			r.Settle()
		}()
		return true
	}
}

// A joiner asks for a lease while the owner's handlers run records longer
// than the owner may wait for them (Handoff/2): the handoff is postponed,
// never cut short. The owner keeps the lease and reads on; the joiner
// asks again and gets the shard once the records settled. No record is
// handled by two instances at once, none twice, and every key's records
// are handled in publish order. (Before the fix the owner checkpointed
// before the first unsettled record after Handoff/2 and released: the
// joiner handled those records again while the owner's handlers still
// ran them.)
func TestJoinDuringSlowHandlerPostponesTheHandoff(t *testing.T) {
	eachLiveness(t, func(t *testing.T, l shard.Liveness) {
		e, _ := memEnvIn(t, 2, l)
		testJoinDuringSlowHandler(t, e)
	})
	// By enhanced fan-out: the reader that goes on after a postponement
	// subscribes again after the last record it handed out.
	t.Run("fan-out", func(t *testing.T) {
		e, _ := fanEnv(t, 2)
		testJoinDuringSlowHandler(t, e)
	})
}

func testJoinDuringSlowHandler(t *testing.T, e *env) {
	const slow = 3 * time.Second // handlers run this long; Handoff/2 is 1 s
	ids := e.shards()
	h := &handling{t: t, active: map[recordID]string{}}
	cols := newCollectors(2)
	var mu sync.Mutex
	slowA := true
	cols[0].hold = h.hold("a", func() time.Duration {
		mu.Lock()
		defer mu.Unlock()
		if slowA {
			return slow
		}
		return 0
	})
	cols[1].hold = h.hold("b", func() time.Duration { return 0 })
	countersA := new(shard.LeaseCounters)
	cfgA, cfgB := e.config("a", cols[0].sink), e.config("b", cols[1].sink)
	cfgA.Counters = countersA
	for _, c := range []*shard.Config{&cfgA, &cfgB} {
		c.Renew, c.Failover = 100*time.Millisecond, 2*time.Second // Handoff: 2 s
	}
	a := e.start(cfgA)
	eventually(t, 5*time.Second, "a reads both shards", func() bool { return slices.Equal(a.Reading(), ids) })
	want := map[string]int{}
	e.publish(want, 10, 5)
	cols[0].waitN(t, 10) // a handles all 10, each for 3 s

	b := e.start(cfgB)
	eventually(t, 5*time.Second, "a begins a handoff", func() bool { return handingOver(a) != "" })
	for _, s := range a.Status().Held {
		// Its records run 3 s, the drain waits 1 s: it shows settling.
		if s.State == shard.LeaseHandingOver && s.Handoff != shard.HandoffSettling {
			t.Errorf("a's status of %s, being handed over: step %q, want %q", s.ShardID, s.Handoff, shard.HandoffSettling)
		}
	}
	mu.Lock()
	slowA = false // records a handles from now on settle at once
	mu.Unlock()
	eventually(t, 3*slow, "a 1/1 split", func() bool { return len(a.Owned()) == 1 && len(b.Reading()) == 1 })
	e.publish(want, 10, 5)
	all := func() []*shard.Record { return append(cols[0].records(), cols[1].records()...) }
	cols[0].wait(t, 10*time.Second, "all 20 records", func([]*shard.Record) bool { return len(all()) >= 20 })
	time.Sleep(500 * time.Millisecond) // a duplicate would arrive by now
	checkKeyOrder(t, all(), want)
	h.mu.Lock()
	twice := h.twice
	h.mu.Unlock()
	if twice > 0 {
		t.Fatalf("%d records handled by two instances at the same time", twice)
	}
	if n, p := countersA.HandedOver.Load(), countersA.Postponed.Load(); n != 1 || p == 0 {
		t.Errorf("a handed over %d leases after postponing %d handoffs, want 1 after at least 1", n, p)
	}
	t.Logf("a postponed %d handoffs, then handed 1 lease over", countersA.Postponed.Load())
}

// A handler that never returns holds its own shard: the owner postpones
// every handoff of it (counted in its Status), goes on reading it, and the
// asker never reads it beside the owner.
func TestStuckHandlerHoldsItsShard(t *testing.T) {
	eachLiveness(t, func(t *testing.T, l shard.Liveness) {
		e, _ := memEnvIn(t, 2, l)
		ids := e.shards()
		cols := newCollectors(2)
		var mu sync.Mutex
		stuck := map[string]bool{} // shards with a record that never settles
		cols[0].hold = func(r *shard.Record) bool {
			mu.Lock()
			defer mu.Unlock()
			if !stuck[r.ShardID] {
				stuck[r.ShardID] = true // the first record of each shard
				return true
			}
			return false
		}
		countersA := new(shard.LeaseCounters)
		cfgA, cfgB := e.config("a", cols[0].sink), e.config("b", cols[1].sink)
		cfgA.Counters = countersA
		for _, c := range []*shard.Config{&cfgA, &cfgB} {
			c.Renew, c.Failover, c.Handoff = 100*time.Millisecond, time.Second, time.Second
		}
		a := e.start(cfgA)
		eventually(t, 5*time.Second, "a reads both shards", func() bool { return slices.Equal(a.Reading(), ids) })
		want := map[string]int{}
		on := map[string]bool{}
		for i := 0; len(on) < 2; i++ { // a stuck record on each shard
			key := fmt.Sprintf("k%d", i)
			id, _ := e.put(key, 0)
			want[key] = 1
			on[id] = true
		}
		cols[0].waitN(t, len(want))

		b := e.start(cfgB)
		eventually(t, 10*time.Second, "a postpones b's asks twice", func() bool { return countersA.Postponed.Load() >= 2 })
		var postponed uint64
		for _, s := range a.Status().Held {
			postponed += s.HandoffsPostponed
			if s.InFlight == 0 {
				t.Errorf("a's status of %s: nothing in flight, want its stuck record", s.ShardID)
			}
		}
		if postponed == 0 {
			t.Errorf("a's status counts no postponed handoff")
		}
		// a goes on reading both shards: the keys' later records are
		// handled, by a alone.
		n := len(want)
		e.publish(want, 20, len(want))
		cols[0].wait(t, 10*time.Second, "a handles the later records", func(rs []*shard.Record) bool { return len(rs) >= n+20 })
		if got := b.Reading(); len(got) > 0 || len(cols[1].records()) > 0 {
			t.Fatalf("b reads %v and handled %d records while a's handlers still run a record of each shard", got, len(cols[1].records()))
		}
		checkKeyOrder(t, cols[0].records(), want)
		if n := countersA.HandedOver.Load(); n != 0 {
			t.Errorf("a handed over %d leases with a record of each in flight", n)
		}
		t.Logf("a postponed %d handoffs", countersA.Postponed.Load())
	})
}
