package shard_test

import (
	"context"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/kinesisgen/kinesisgen/runtime/lease"
	"github.com/kinesisgen/kinesisgen/runtime/shard"
)

// frozenAfterMembers is a noBeatStore whose next Members call, once armed,
// returns its answer only when release is closed: the process froze just
// after the store answered (GC, SIGSTOP, a frozen VM).
type frozenAfterMembers struct {
	*noBeatStore
	armed   atomic.Bool
	frozen  chan struct{} // closed when the armed call has its answer
	release chan struct{}
	thawed  sync.Once
}

// thaw lets the frozen call return. The frozen call ignores its context,
// as a frozen process does, so a test that ends before thawing it (a
// Skip) must thaw it before its coordinator's Stop, which waits for the
// pass: register thaw as a cleanup after starting the coordinator.
func (s *frozenAfterMembers) thaw() { s.thawed.Do(func() { close(s.release) }) }

func (s *frozenAfterMembers) Members(ctx context.Context, ns string) ([]lease.Member, error) {
	ms, err := s.noBeatStore.Members(ctx, ns)
	if s.armed.CompareAndSwap(true, false) {
		close(s.frozen)
		<-s.release
	}
	return ms, err
}

// Issue 29, defect 6, as the simulator found it (mix pausemem, seed 281 of
// a hunt): a members answer that judged b dead when it was sent, processed
// after a pause during which b came back (its heartbeats confirmed, its
// lease taken back and read), must not make a take b's lease. b looked
// dead at the send (its heartbeats had failed for longer than the
// failover time); a's own heartbeats had failed too, so a took nothing
// then. The answer is stale by the time a acts on it: a reads the members
// again (or takes nothing) before taking a lease from a member it judges
// dead on an answer older than a lease call's deadline.
func TestStaleMembersAnswerTakesNothingFromLiveOwner(t *testing.T) {
	e, _ := memEnv(t, 2)
	ids := e.shards()
	sa := &frozenAfterMembers{noBeatStore: newNoBeatStore(e), frozen: make(chan struct{}), release: make(chan struct{})}
	sb := newNoBeatStore(e)
	cfgA, cfgB := e.config("a", newCollector().sink), e.config("b", newCollector().sink)
	cfgA.Leases, cfgB.Leases = sa, sb
	cfgB.Counters = new(shard.LeaseCounters)
	for _, c := range []*shard.Config{&cfgA, &cfgB} {
		c.Renew, c.Failover = 100*time.Millisecond, time.Second
	}
	a := e.start(cfgA)
	t.Cleanup(sa.thaw) // before a's Stop (cleanups run last first)
	eventually(t, 5*time.Second, "a reads both shards", func() bool { return slices.Equal(a.Reading(), ids) })
	b := e.start(cfgB)
	eventually(t, 10*time.Second, "a 1/1 split", func() bool { return len(a.Reading()) == 1 && len(b.Reading()) == 1 })
	bShard := b.Reading()[0]

	// Both stop confirming heartbeats: each fences itself, and a, its own
	// beat stale, takes nothing while b's beat stands still.
	sa.off.Store(true)
	sb.off.Store(true)
	time.Sleep(cfgA.Failover + 500*time.Millisecond) // b's beat older than a's failover time
	sa.armed.Store(true)
	select {
	case <-sa.frozen:
	case <-time.After(5 * time.Second):
		t.Fatal("a read no members")
	}
	// a is frozen with an answer showing b's beat a failover time old.
	// Meanwhile both come back: b takes its lease back and reads it.
	sa.off.Store(false)
	sb.off.Store(false)
	eventually(t, 5*time.Second, "b reads "+bShard+" again", func() bool { return slices.Contains(b.Reading(), bShard) })
	time.Sleep(3 * cfgA.Renew) // a's beats confirmed again too
	// b may hand a lease to a when a asks for its share (b may have taken
	// a's while a said it was fenced): only a take from b, which b finds
	// at its next write of the lease, is the defect.
	lost := cfgB.Counters.Lost.Load()
	sa.thaw()

	deadline := time.Now().Add(2 * time.Second)
	for time.Now().Before(deadline) {
		if n := cfgB.Counters.Lost.Load() - lost; n != 0 {
			t.Fatalf("b lost %d leases (%s now %q's), live (its heartbeats confirmed) since before a acted on a members answer read before its pause", n, bShard, e.lease(bShard).Owner)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// Issue 29: followHandoffs judges the owner it asked on the last members
// view of a pass (askedOwnerDead), which may be older than the owner's
// return from its fence. b asked a for a lease; a's handlers hold every
// record, so a drains it for half its handoff time; both stop confirming
// heartbeats, and a fences itself. b's next members answer, showing a
// dead, is held (a pause). a comes back first and takes its lease back
// (b looks dead to it) and reads it; then b's heartbeats are confirmed
// again and its keeper follows its request on the view of before, which
// judges a dead. Safe: a reads a fenced lease again only after a take,
// which clears the request (lease.Store.Take), and b follows only a lease
// whose request is still its own (followStep); a take of b's on an older
// read would be conditional on an older counter. a keeps the lease it
// took back, and b never reads the shard beside it.
func TestFollowedRequestTakesNothingFromOwnerBackFromItsFence(t *testing.T) {
	e, _ := memEnv(t, 2)
	ids := e.shards()
	cols := newCollectors(2)
	cols[0].hold = func(*shard.Record) bool { return true }
	sa := newNoBeatStore(e)
	sb := &frozenAfterMembers{noBeatStore: newNoBeatStore(e), frozen: make(chan struct{}), release: make(chan struct{})}
	cfgA, cfgB := e.config("a", cols[0].sink), e.config("b", cols[1].sink)
	cfgA.Leases, cfgB.Leases = sa, sb
	cfgA.Counters = new(shard.LeaseCounters)
	for _, c := range []*shard.Config{&cfgA, &cfgB} {
		c.Renew, c.Failover, c.Handoff = 100*time.Millisecond, time.Second, 20*time.Second
	}
	a := e.start(cfgA)
	e.feed(a, ids, cols[0], 10, 10)
	b := e.start(cfgB)
	t.Cleanup(sb.thaw) // before b's Stop (cleanups run last first)
	var handed string
	eventually(t, 5*time.Second, "a hands a lease over", func() bool { handed = handingOver(a); return handed != "" })
	if l := e.lease(handed); l.PendingOwner != "b" {
		t.Fatalf("lease of %s: %+v; want b's request on it", handed, l)
	}

	sa.off.Store(true)
	sb.off.Store(true)
	time.Sleep(cfgA.Failover + 500*time.Millisecond) // a's beat older than b's failover time
	// a's handlers return, given up on their context that the fence
	// ended (a lane finds each record stale): a fenced lease whose record
	// a handler still ran would not be taken back.
	for _, r := range cols[0].records() {
		r.Stale()
	}
	sb.armed.Store(true)
	select {
	case <-sb.frozen:
	case <-time.After(5 * time.Second):
		t.Fatal("b read no members")
	}
	sa.off.Store(false)
	eventually(t, 5*time.Second, "a takes "+handed+" back", func() bool { return slices.Contains(a.Reading(), handed) })
	lost := cfgA.Counters.Lost.Load()
	sb.off.Store(false) // b's keeper follows its request, on its view of before
	check := func(d time.Duration) {
		t.Helper()
		for deadline := time.Now().Add(d); time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
			if slices.Contains(b.Reading(), handed) || cfgA.Counters.Lost.Load() != lost {
				t.Fatalf("b took %s from a, which took it back and reads it (lease now %q's; b reads %v)", handed, e.lease(handed).Owner, b.Reading())
			}
		}
	}
	check(time.Second)
	sb.thaw()
	check(time.Second)
}
