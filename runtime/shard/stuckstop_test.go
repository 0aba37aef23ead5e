package shard_test

import (
	"context"
	"errors"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/kinesisgen/kinesisgen/runtime/lease"
	"github.com/kinesisgen/kinesisgen/runtime/shard"
)

// A Stop whose time runs out while a handler still runs a record must not
// hand that record's shard to the next owner at once: the next owner would
// handle the record again while the stuck handler still runs it. The lease
// is left to expire, as after a crash: the handler's context
// (Record.Lease) ends at Stop, the shard's settled prefix is checkpointed,
// Stop's error names the shard (LeftToExpireError), and the next owner
// takes the lease only a failover time later. The other shard, whose
// records all settled, is released at once. (Before the fix, Stop
// checkpointed before the stuck record and released the lease: the next
// owner handled the record 8 to 99 ms after Stop returned.)
func TestStopWithAStuckHandlerLeavesItsLeaseToExpire(t *testing.T) {
	eachLiveness(t, func(t *testing.T, l shard.Liveness) {
		testStopWithAStuckHandler(t, l, false)
	})
	// A Stop that runs out of time while a handoff of the stuck shard
	// waits for its records to settle: the handoff leaves the lease to
	// Stop, which leaves it to expire.
	t.Run("during a handoff", func(t *testing.T) {
		eachLiveness(t, func(t *testing.T, l shard.Liveness) {
			testStopWithAStuckHandler(t, l, true)
		})
	})
}

func testStopWithAStuckHandler(t *testing.T, l shard.Liveness, handing bool) {
	const failover = 2 * time.Second
	e, _ := memEnvIn(t, 2, l)
	ids := e.shards()
	cols := newCollectors(2)
	var mu sync.Mutex
	var stuck *shard.Record // a's first record: never settled
	stuckOn := map[string]bool{}
	cols[0].hold = func(r *shard.Record) bool {
		mu.Lock()
		defer mu.Unlock()
		if stuck == nil {
			stuck = r
		} else if !handing || stuckOn[r.ShardID] {
			// During a handoff, whichever shard b asks for has a
			// stuck record.
			return false
		}
		stuckOn[r.ShardID] = true
		return true
	}
	countersA := new(shard.LeaseCounters)
	cfgA, cfgB := e.config("a", cols[0].sink), e.config("b", cols[1].sink)
	cfgA.Counters = countersA
	clock := &writeClock{Memory: e.store.(*lease.Memory), wrote: map[string]time.Time{}}
	cfgA.Leases = clock
	for _, c := range []*shard.Config{&cfgA, &cfgB} {
		c.Renew, c.Failover = 100*time.Millisecond, failover
		if handing {
			c.Handoff = 20 * time.Second // the drain outlasts a's Stop
		}
	}
	a := e.startStopped(cfgA)
	eventually(t, 5*time.Second, "a reads both shards", func() bool { return slices.Equal(a.Reading(), ids) })
	want := map[string]int{}
	e.publish(want, 10, 5)
	cols[0].waitN(t, 10)
	mu.Lock()
	stuckID := idOf(stuck)
	stuckLease := stuck.Lease()
	mu.Unlock()
	other := ids[0]
	if other == stuckID.shard {
		other = ids[1]
	}

	b := e.start(cfgB)
	wantLeft := []string{stuckID.shard}
	if handing {
		eventually(t, 5*time.Second, "a hands a shard over", func() bool { return handingOver(a) != "" })
		stuckID.shard = handingOver(a) // b asked for it; its first record is stuck
		mu.Lock()
		for _, r := range cols[0].records() {
			if r.ShardID == stuckID.shard {
				stuckID, stuckLease = idOf(r), r.Lease()
				break
			}
		}
		mu.Unlock()
		wantLeft = ids
	}
	err := a.Stop(e.ctx(600 * time.Millisecond))
	stopped := time.Now()
	t.Logf("a's Stop: %v", err)
	var left *shard.LeftToExpireError
	if !errors.Is(err, shard.ErrLeftToExpire) || !errors.As(err, &left) || !slices.Equal(left.Shards, wantLeft) {
		t.Errorf("a's Stop = %v; want a LeftToExpireError naming %v", err, wantLeft)
	}
	if n := countersA.LeftToExpire.Load(); n != uint64(len(wantLeft)) {
		t.Errorf("a's counters: %d leases left to expire, want %d", n, len(wantLeft))
	}
	if stuckLease.Err() == nil {
		t.Errorf("the stuck handler's context (Record.Lease) still runs after Stop returned")
	}
	if !handing {
		// Released: free at once. With liveness per instance a's entry
		// stays (it must not vanish while a lease of a's is left), but
		// says a is leaving (lease.Member.Leaving): no plan gives a the
		// free lease (TestStoppingInstanceIsGivenNoLease).
		within := failover / 2
		eventually(t, within, "b reads the shard a released ("+other+")", func() bool { return slices.Contains(b.Reading(), other) })
	}
	var first time.Time // b's first delivery of the stuck record
	cols[1].wait(t, 3*failover, "b handles the stuck record", func(rs []*shard.Record) bool {
		for _, r := range rs {
			if idOf(r) == stuckID {
				first = time.Now()
				return true
			}
		}
		return false
	})
	// The lease expires a failover time after a's last write that shows
	// a alive: its last heartbeat (liveness per instance) or its last
	// write of the lease (per lease), as the store saw them sent (they
	// landed, and the others saw them, no sooner). Stop's return is no
	// measure of it: under load Stop returned up to 0.6 s after a's last
	// write, and b's take looked early against it.
	last := clock.last(l, lease.KeyFor("test/"+e.stream, stuckID.shard))
	t.Logf("b handled the stuck record %v after a's last write, %v after a's Stop returned",
		first.Sub(last).Round(time.Millisecond), first.Sub(stopped).Round(time.Millisecond))
	if after := first.Sub(last); after < failover {
		t.Fatalf("b handled record %s/%s %v after a's last write, while a's handler still runs it; want no sooner than the failover time (%v)",
			stuckID.shard, stuckID.seq, after.Round(time.Millisecond), failover)
	}
}

// writeClock is the in-memory store that notes when its owner's writes
// that landed were sent: the last heartbeat, and the last write of each
// lease.
type writeClock struct {
	*lease.Memory
	mu    sync.Mutex
	beat  time.Time
	wrote map[string]time.Time
}

// last is when the last write that shows the owner alive to the others
// was sent: its heartbeat (liveness per instance) or its write of the
// lease key (per lease).
func (w *writeClock) last(l shard.Liveness, key string) time.Time {
	w.mu.Lock()
	defer w.mu.Unlock()
	if l == shard.LivenessPerInstance {
		return w.beat
	}
	return w.wrote[key]
}

func (w *writeClock) write(key string, sent time.Time, nl lease.Lease, err error) (lease.Lease, error) {
	if err == nil {
		w.mu.Lock()
		w.wrote[key] = sent
		w.mu.Unlock()
	}
	return nl, err
}

func (w *writeClock) Take(ctx context.Context, l lease.Lease, owner string) (lease.Lease, error) {
	sent := time.Now()
	nl, err := w.Memory.Take(ctx, l, owner)
	return w.write(l.Key, sent, nl, err)
}

func (w *writeClock) Renew(ctx context.Context, l lease.Lease) (lease.Lease, error) {
	sent := time.Now()
	nl, err := w.Memory.Renew(ctx, l)
	return w.write(l.Key, sent, nl, err)
}

func (w *writeClock) Checkpoint(ctx context.Context, l lease.Lease, cp string, sub int64) (lease.Lease, error) {
	sent := time.Now()
	nl, err := w.Memory.Checkpoint(ctx, l, cp, sub)
	return w.write(l.Key, sent, nl, err)
}

func (w *writeClock) Release(ctx context.Context, l lease.Lease) (lease.Lease, error) {
	sent := time.Now()
	nl, err := w.Memory.Release(ctx, l)
	return w.write(l.Key, sent, nl, err)
}

func (w *writeClock) RequestHandoff(ctx context.Context, l lease.Lease, to string) (lease.Lease, error) {
	sent := time.Now()
	nl, err := w.Memory.RequestHandoff(ctx, l, to)
	return w.write(l.Key, sent, nl, err)
}

func (w *writeClock) SetChildren(ctx context.Context, l lease.Lease, children []string) (lease.Lease, error) {
	sent := time.Now()
	nl, err := w.Memory.SetChildren(ctx, l, children)
	return w.write(l.Key, sent, nl, err)
}

func (w *writeClock) Heartbeat(ctx context.Context, ns string, m lease.Member) error {
	sent := time.Now()
	err := w.Memory.Heartbeat(ctx, ns, m)
	if err == nil {
		w.mu.Lock()
		w.beat = sent
		w.mu.Unlock()
	}
	return err
}

// A handler that honours its context returns once Stop, out of time,
// cancels it (Record.Lease): the lease is then released as ever, and the
// next owner reads the record at once, not a failover time later, and
// never while the first handler still runs it.
func TestStopReleasesALeaseWhoseHandlerHonoursItsContext(t *testing.T) {
	eachLiveness(t, virtual(func(t *testing.T, l shard.Liveness) {
		const failover = 5 * time.Second
		e, _ := memEnvIn(t, 1, l)
		cols := newCollectors(2)
		var mu sync.Mutex
		var stuck *shard.Record
		returned := make(chan time.Time, 1)
		cols[0].hold = func(r *shard.Record) bool {
			mu.Lock()
			defer mu.Unlock()
			if stuck != nil {
				return false
			}
			stuck = r
			go func() {
				<-r.Lease().Done()
				// As the runtime's lanes do with a handling its context
				// cut short: not settled, and stale from now on.
				r.Stale()
				returned <- time.Now()
			}()
			return true
		}
		countersA := new(shard.LeaseCounters)
		cfgA, cfgB := e.config("a", cols[0].sink), e.config("b", cols[1].sink)
		cfgA.Counters = countersA
		for _, c := range []*shard.Config{&cfgA, &cfgB} {
			c.Renew, c.Failover = 100*time.Millisecond, failover
		}
		a := e.startStopped(cfgA)
		eventually(t, 5*time.Second, "a reads the shard", func() bool { return len(a.Reading()) == 1 })
		want := map[string]int{}
		e.publish(want, 5, 5)
		cols[0].waitN(t, 5)
		mu.Lock()
		stuckID := idOf(stuck)
		mu.Unlock()
		e.start(cfgB)
		err := a.Stop(e.ctx(600 * time.Millisecond))
		stopped := time.Now()
		t.Logf("a's Stop: %v", err)
		if errors.Is(err, shard.ErrLeftToExpire) || countersA.LeftToExpire.Load() != 0 {
			t.Errorf("a's Stop = %v, %d leases left to expire; want the lease released", err, countersA.LeftToExpire.Load())
		}
		var back time.Time
		select {
		case back = <-returned:
		default:
			t.Fatalf("a's handler had not returned when Stop did")
		}
		var first time.Time
		cols[1].wait(t, failover, "b handles the record a's handler gave up", func(rs []*shard.Record) bool {
			for _, r := range rs {
				if idOf(r) == stuckID {
					first = time.Now()
					return true
				}
			}
			return false
		})
		if first.Before(back) {
			t.Fatalf("b handled %s/%s before a's handler returned", stuckID.shard, stuckID.seq)
		}
		if d := first.Sub(stopped); d > failover/2 {
			t.Errorf("b handled the record %v after a's Stop; want it released at once", d.Round(time.Millisecond))
		}
	}))
}

// A lane that stops while it holds a record back (an in-place retry
// backing off when the shutdown begins) abandons that record
// (Record.Abandon); another handler of the same shard still runs a record
// when Stop's time is up. The abandoned record must not make Stop forget
// the running one: the lease is left to expire, not released. (Before the
// fix Abandon discarded the whole reader generation: Stop waited for
// nothing, checkpointed nothing and released the lease, and the next owner
// handled the running record at once, beside its handler.)
func TestStopAfterAnAbandonedRecordStillWaitsForTheRunningOnes(t *testing.T) {
	const failover = 2 * time.Second
	e, _ := memEnvIn(t, 1, shard.LivenessPerLease)
	cols := newCollectors(2)
	var mu sync.Mutex
	var held []*shard.Record // the first two records: abandoned, stuck
	cols[0].hold = func(r *shard.Record) bool {
		mu.Lock()
		defer mu.Unlock()
		if len(held) < 2 {
			held = append(held, r)
			return true
		}
		return false
	}
	cfgA, cfgB := e.config("a", cols[0].sink), e.config("b", cols[1].sink)
	for _, c := range []*shard.Config{&cfgA, &cfgB} {
		c.Renew, c.Failover = 100*time.Millisecond, failover
	}
	a := e.startStopped(cfgA)
	eventually(t, 5*time.Second, "a reads the shard", func() bool { return len(a.Reading()) == 1 })
	want := map[string]int{}
	e.publish(want, 4, 4)
	cols[0].waitN(t, 4)
	mu.Lock()
	abandoned, stuck := held[0], held[1]
	mu.Unlock()
	stuckID := idOf(stuck)

	e.start(cfgB)
	abandoned.Abandon() // the lane holding it back stops as the shutdown begins
	err := a.Stop(e.ctx(600 * time.Millisecond))
	stopped := time.Now()
	t.Logf("a's Stop: %v", err)
	if !errors.Is(err, shard.ErrLeftToExpire) {
		t.Errorf("a's Stop = %v; want ErrLeftToExpire (a handler still runs %s/%s)", err, stuckID.shard, stuckID.seq)
	}
	var first time.Time
	cols[1].wait(t, 3*failover, "b handles the stuck record", func(rs []*shard.Record) bool {
		for _, r := range rs {
			if idOf(r) == stuckID {
				first = time.Now()
				return true
			}
		}
		return false
	})
	if after := first.Sub(stopped); after < failover-2*cfgA.Renew {
		t.Fatalf("b handled record %s/%s %v after a's Stop returned, while a's handler still runs it",
			stuckID.shard, stuckID.seq, after.Round(time.Millisecond))
	}
}

// fencedWithAStuckRecord starts a (as fencedOwner does, with failover) on a 2-shard stream with
// a store that notes its writes (writeClock), publishes 10 records, holds
// the first one a's sink takes (its handler runs on: stuck) and settles
// the rest, and fences a on both leases. The returned store's heartbeats
// (renewals, per lease) still fail: the caller lets them land again, and
// stops a.
func fencedWithAStuckRecord(t *testing.T, e *env, col *collector, failover time.Duration) (a *shard.Coordinator, store *noBeatStore, clock *writeClock, stuck *shard.Record, other string) {
	t.Helper()
	ids := e.shards()
	col.hold = func(r *shard.Record) bool {
		if stuck == nil {
			stuck = r
			return true
		}
		return false
	}
	clock = &writeClock{Memory: e.store.(*lease.Memory), wrote: map[string]time.Time{}}
	store = &noBeatStore{memberWrap: memberWrap{Store: clock, m: clock}, perLease: e.liveness == shard.LivenessPerLease}
	cfg := e.config("a", col.sink)
	cfg.Leases, cfg.Counters = store, &store.counters
	cfg.Failover = failover
	a = e.startStopped(cfg)
	eventually(t, 5*time.Second, "a reads both shards", func() bool { return slices.Equal(a.Reading(), ids) })
	e.publish(map[string]int{}, 10, 5)
	col.waitN(t, 10)
	other = ids[0]
	if other == stuck.ShardID {
		other = ids[1]
	}
	fence(t, a, store)
	return a, store, clock, stuck, other
}

// timesDelivered counts the deliveries of id in recs.
func timesDelivered(recs []*shard.Record, id recordID) int {
	n := 0
	for _, r := range recs {
		if idOf(r) == id {
			n++
		}
	}
	return n
}

// An owner fenced on its leases (its heartbeats, or its renewals per lease,
// failed for its fence time) whose writes land again reads its shards
// again at its next passes, taking back or releasing what still names it
// (issue 9) — but not a lease whose records a handler still runs, the
// fence having abandoned them, before that lease has expired to the others
// (a failover time after a's last write): reading it again would hand the
// record to a second handler beside the first, and a release would let
// another owner do so, with none of the margin the fence keeps for a
// crash. Once the handler returns (acknowledged late, or given up on its
// cancelled context, as a lane finds the record stale), the lease is read
// again at once; a handler deaf to its context holds the shard no longer
// than a crash would: the lease is read again once it has expired. (Before
// the fix the next pass took the lease back at once and delivered the
// record again beside its handler; a Stop right after released it to the
// next owner.)
func TestFencedOwnerReadsNoLeaseAgainWhileAHandlerRunsIt(t *testing.T) {
	const failover = 5 * time.Second // fenced 4 s after the last write: a margin of 1 s
	for _, ret := range []struct {
		name   string
		handed func(*shard.Record) // nil: never returns
	}{
		{"acknowledged", (*shard.Record).Settle},
		{"given-up", func(r *shard.Record) { r.Stale() }},
		{"deaf", nil},
	} {
		t.Run(ret.name, func(t *testing.T) {
			eachLiveness(t, virtual(func(t *testing.T, l shard.Liveness) {
				e, _ := memEnvIn(t, 2, l)
				col := newCollector()
				a, store, clock, stuck, other := fencedWithAStuckRecord(t, e, col, failover)
				t.Cleanup(func() { _ = a.Stop(e.ctx(time.Second)) })
				stuckID := idOf(stuck)
				expires := clock.last(l, lease.KeyFor("test/"+e.stream, stuckID.shard)).Add(failover)
				store.off.Store(false)
				eventually(t, time.Second, "a reads "+other+" again", func() bool { return slices.Contains(a.Reading(), other) })
				time.Sleep(e.config("a", nil).Sync) // one more pass
				if slices.Contains(a.Owned(), stuckID.shard) {
					t.Errorf("a took back %s while a handler still runs its record %s", stuckID.shard, stuckID.seq)
				}
				if n := timesDelivered(col.records(), stuckID); n != 1 {
					t.Errorf("record %s/%s delivered %d times while its first handler runs, want 1", stuckID.shard, stuckID.seq, n)
				}
				if o := e.lease(stuckID.shard).Owner; o != "a" {
					t.Errorf("lease of %s owned by %q while a's handler runs its record, want a's", stuckID.shard, o)
				}
				if !time.Now().Before(expires) {
					t.Fatalf("the checks ran %v after the lease expired: they prove nothing", time.Since(expires))
				}

				if ret.handed != nil {
					ret.handed(stuck)
				}
				col.wait(t, failover, "the stuck record delivered again", func(rs []*shard.Record) bool { return timesDelivered(rs, stuckID) == 2 })
				again := time.Now()
				switch {
				case ret.handed != nil && !again.Before(expires):
					t.Errorf("the record delivered again %v after the lease expired; want as soon as its handler returned", again.Sub(expires))
				case ret.handed == nil && again.Before(expires):
					t.Errorf("the record delivered again %v before the lease expired, beside its handler", expires.Sub(again))
				}
				eventually(t, time.Second, "a reads both shards again", func() bool { return slices.Equal(a.Reading(), e.shards()) })
			}))
		})
	}
}

// A Stop that finds leases it fenced still in its name (its heartbeats
// confirmed again, before a pass took them back) ends them as a pass
// would: it releases those none of whose records a handler runs, so the
// next owner reads them at once, and leaves to expire, as a crashed owner's, the one
// whose handler still runs a record the fence abandoned: the next owner
// takes it a failover time after a's last write that showed a alive, and
// only then handles that record again. (CI once fenced an owner on every
// lease in its first pass, just before its Stop: the next instance waited
// out the failover time for shards nothing read.)
func TestStopEndsTheLeasesItFenced(t *testing.T) {
	eachLiveness(t, virtual(func(t *testing.T, l shard.Liveness) {
		e, _ := memEnvIn(t, 2, l)
		cols := newCollectors(2)
		a, store, clock, stuck, other := fencedWithAStuckRecord(t, e, cols[0], fencedOwnerFailover)
		stuckID := idOf(stuck)
		store.off.Store(false)
		if l == shard.LivenessPerInstance {
			// Its writes land again: the first heartbeat says it is
			// fenced, the next one writes a new beat, the way back. (Still
			// fenced, Stop writes nothing for them, as a pass would:
			// TestStopWhileFencedLeavesNothingUnread.)
			for range 2 {
				if err := a.HeartbeatNow(e.ctx(time.Second)); err != nil {
					t.Fatalf("a's heartbeat: %v", err)
				}
			}
		}
		err := a.Stop(e.ctx(time.Second))
		var left *shard.LeftToExpireError
		if !errors.As(err, &left) || !slices.Equal(left.Shards, []string{stuckID.shard}) {
			t.Errorf("a's Stop = %v; want a LeftToExpireError naming %s", err, stuckID.shard)
		}
		if n := store.counters.LeftToExpire.Load(); n != 1 {
			t.Errorf("a's counters: %d leases left to expire, want 1", n)
		}
		if o := e.lease(stuckID.shard).Owner; o != "a" {
			t.Errorf("lease of %s owned by %q after a's Stop; want a's, left to expire", stuckID.shard, o)
		}
		// With liveness per lease nothing says a's writes land again (its
		// renewals were what failed): Stop writes nothing for its fenced
		// leases, and they expire (TestStopWhileFencedLeavesNothingUnread).
		within, wantOwner := fencedOwnerFailover/2, ""
		if l == shard.LivenessPerLease {
			within, wantOwner = 2*fencedOwnerFailover, "a"
		}
		if o := e.lease(other).Owner; o != wantOwner {
			t.Errorf("lease of %s owned by %q after a's Stop; want %q", other, o, wantOwner)
		}

		cfgB := e.config("b", cols[1].sink)
		cfgB.Failover = fencedOwnerFailover
		b := e.start(cfgB)
		eventually(t, within, "b reads "+other, func() bool { return slices.Contains(b.Reading(), other) })
		var first time.Time // b's first delivery of the stuck record
		cols[1].wait(t, 3*fencedOwnerFailover, "b handles the stuck record", func(rs []*shard.Record) bool {
			if timesDelivered(rs, stuckID) > 0 && first.IsZero() {
				first = time.Now()
			}
			return !first.IsZero()
		})
		last := clock.last(l, lease.KeyFor("test/"+e.stream, stuckID.shard))
		if after := first.Sub(last); after < fencedOwnerFailover {
			t.Errorf("b handled the stuck record %v after a's last write that showed it alive; want no sooner than the failover time (%v)",
				after, fencedOwnerFailover)
		}
	}))
}
