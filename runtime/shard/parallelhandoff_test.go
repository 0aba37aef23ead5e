package shard_test

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/kinesisgen/kinesisgen/runtime/lease"
	"github.com/kinesisgen/kinesisgen/runtime/shard"
)

// releaseClock records when each release it passes on landed.
type releaseClock struct {
	*opStore
	mu sync.Mutex
	at []time.Time
}

func (s *releaseClock) Release(ctx context.Context, l lease.Lease) (lease.Lease, error) {
	nl, err := s.opStore.Release(ctx, l)
	if err == nil {
		s.mu.Lock()
		s.at = append(s.at, time.Now())
		s.mu.Unlock()
	}
	return nl, err
}

func (s *releaseClock) times() []time.Time {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.at)
}

// The leases a joiner asks for are handed over in parallel: each owner
// lets the records in flight settle before it checkpoints and releases,
// and with handlers that take 500 ms the 8 releases to a joiner on 16
// busy shards land within 1.5 s of each other (120–230 ms here), not one
// settle after another (3 s with the handoffs made one at a time, which
// the joiner tests, whose records settle at once, do not notice), and no
// record is handled twice.
func TestJoinerLeasesAreHandedOverInParallel(t *testing.T) {
	const shards, handle = 16, 500 * time.Millisecond
	e, _ := memEnv(t, shards)
	cols := newCollectors(2)
	for _, c := range cols {
		c.hold = func(r *shard.Record) bool {
			go func() {
				time.Sleep(handle)
				r.Settle()
			}()
			return true
		}
	}
	rel := &releaseClock{opStore: newOpStore(e.store)}
	cfgA, cfgB := e.config("a", cols[0].sink), e.config("b", cols[1].sink)
	cfgA.Leases = rel
	for _, c := range []*shard.Config{&cfgA, &cfgB} {
		// The handoff waits up to Handoff/2 (1 s) for the records to settle.
		c.Renew, c.Failover, c.Sync = 200*time.Millisecond, 2*time.Second, 250*time.Millisecond
	}
	a := e.start(cfgA)
	eventually(t, 10*time.Second, "a reads every shard", func() bool { return len(a.Reading()) == shards })

	want := map[string]int{}
	stop := make(chan struct{})
	published := make(chan struct{})
	go func() { // every shard busy: records in flight whenever a handoff starts
		defer close(published)
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			case <-time.After(5 * time.Millisecond):
				key := fmt.Sprintf("k%d", i%64)
				e.put(key, want[key])
				want[key]++
			}
		}
	}()
	time.Sleep(handle) // records in flight on every shard
	b := e.start(cfgB)
	eventually(t, 20*time.Second, "an 8/8 split", func() bool { return len(a.Owned()) == shards/2 && len(b.Owned()) == shards/2 })
	close(stop)
	<-published

	at := rel.times()
	if len(at) != shards/2 {
		t.Fatalf("a released %d leases, want the %d b asked for", len(at), shards/2)
	}
	spread := at[len(at)-1].Sub(at[0])
	t.Logf("a's %d releases landed within %v of each other (handlers take %v)", len(at), spread.Round(time.Millisecond), handle)
	if spread > 3*handle {
		t.Errorf("a's releases landed over %v, more than 3 handler times (%v): the handoffs waited for each other", spread, 3*handle)
	}

	total := 0
	for _, n := range want {
		total += n
	}
	all := func() []*shard.Record { return append(cols[0].records(), cols[1].records()...) }
	cols[0].wait(t, 20*time.Second, fmt.Sprintf("all %d records", total), func([]*shard.Record) bool { return len(all()) >= total })
	time.Sleep(2 * handle) // a duplicate would arrive by now
	seen := map[[2]string]bool{}
	for _, r := range all() {
		id := [2]string{r.ShardID, r.SequenceNumber}
		if seen[id] {
			t.Errorf("record %s/%s handled twice across a graceful handoff", r.ShardID, r.SequenceNumber)
		}
		seen[id] = true
	}
	checkKeyOrder(t, all(), want)
}
