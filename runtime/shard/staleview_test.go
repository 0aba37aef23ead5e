package shard_test

import (
	"context"
	"slices"
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
}

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
	close(sa.release)

	deadline := time.Now().Add(2 * time.Second)
	for time.Now().Before(deadline) {
		if n := cfgB.Counters.Lost.Load() - lost; n != 0 {
			t.Fatalf("b lost %d leases (%s now %q's), live (its heartbeats confirmed) since before a acted on a members answer read before its pause", n, bShard, e.lease(bShard).Owner)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
