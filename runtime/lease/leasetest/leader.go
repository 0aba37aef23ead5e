package leasetest

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/kinesisgen/kinesisgen/runtime/lease"
)

// failover is the leader failover time the leader subtests use; time is
// stepped by hand, so it costs no waiting.
const failover = 10 * time.Second

// Clock is a hand-stepped clock for lease.LeaderClock.
type Clock struct {
	mu  sync.Mutex
	now time.Time
}

// NewClock returns a clock at an arbitrary fixed instant.
func NewClock() *Clock { return &Clock{now: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)} }

// Now returns the clock's time.
func (c *Clock) Now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.now }

// Advance moves the clock forward by d.
func (c *Clock) Advance(d time.Duration) { c.mu.Lock(); c.now = c.now.Add(d); c.mu.Unlock() }

// RunLeader runs the leader-lock subtests against stores made by newStore:
// the lease.Leader built on a store must elect exactly one leader and fail
// over only after the failover time.
func RunLeader(t *testing.T, newStore func(t *testing.T) lease.Store) {
	runCases(t, leaderCases, newStore)
}

var leaderCases = []kitCase{
	{"TwoContendersOneLeader", testTwoContenders},
	{"DeadLeaderTakenOverAfterFailover", testTakeover},
	{"LeaderThatMissesHeartbeatsStepsDown", testStepDown},
	{"ReleaseLetsAnotherLeadAtOnce", testLeaderRelease},
	{"ConcurrentContendersExactlyOneWins", testConcurrentContenders},
	{"LockIsOutsideTheNamespaceList", testLockNotListed},
}

type contenders struct {
	clock *Clock
	a, b  *lease.Leader
}

func newContenders(t *testing.T, s lease.Store) contenders {
	c := NewClock()
	namespace := ns(t, "stream")
	return contenders{
		clock: c,
		a:     lease.NewLeader(s, namespace, "worker-a", failover, lease.LeaderClock(c.Now)),
		b:     lease.NewLeader(s, namespace, "worker-b", failover, lease.LeaderClock(c.Now)),
	}
}

func try(ctx context.Context, t *testing.T, l *lease.Leader, name string, want bool) {
	t.Helper()
	got, err := l.TryAcquire(ctx)
	if err != nil {
		t.Fatalf("%s TryAcquire: %v", name, err)
	}
	if got != want {
		t.Fatalf("%s TryAcquire = %v; want %v", name, got, want)
	}
	if l.IsLeader() != want {
		t.Fatalf("%s IsLeader = %v right after TryAcquire said %v", name, l.IsLeader(), want)
	}
}

func testTwoContenders(ctx context.Context, t *testing.T, s lease.Store) {
	c := newContenders(t, s)
	try(ctx, t, c.a, "worker-a", true)
	// worker-a keeps heartbeating every third of the failover time; worker-b
	// watches for many failover times and never takes over.
	for range 12 {
		try(ctx, t, c.b, "worker-b", false)
		c.clock.Advance(failover / 3)
		try(ctx, t, c.a, "worker-a", true)
	}
}

func testTakeover(ctx context.Context, t *testing.T, s lease.Store) {
	c := newContenders(t, s)
	try(ctx, t, c.a, "worker-a", true)
	try(ctx, t, c.b, "worker-b", false) // first sight of worker-a's counter
	// worker-a dies: no more heartbeats.
	c.clock.Advance(failover - time.Millisecond)
	try(ctx, t, c.b, "worker-b", false) // not yet: the counter has stood still for less than the failover time
	c.clock.Advance(time.Millisecond)
	try(ctx, t, c.b, "worker-b", true)

	// worker-a comes back (a long GC pause): its heartbeat fails and it knows it.
	err := c.a.Heartbeat(ctx)
	if !errors.Is(err, lease.ErrLeaseLost) {
		t.Fatalf("old leader's Heartbeat: %v; want ErrLeaseLost", err)
	}
	if c.a.IsLeader() {
		t.Fatal("old leader still calls itself leader after a failed heartbeat")
	}
	// And it now waits its turn like anyone else.
	try(ctx, t, c.a, "worker-a", false)
	try(ctx, t, c.b, "worker-b", true)
}

func testStepDown(ctx context.Context, t *testing.T, s lease.Store) {
	c := newContenders(t, s)
	try(ctx, t, c.a, "worker-a", true)
	c.clock.Advance(failover / 2)
	if !c.a.IsLeader() {
		t.Fatal("leader stepped down before the failover time")
	}
	// A leader cut off from the store for the failover time must assume a
	// contender has taken over, before it knows.
	c.clock.Advance(failover / 2)
	if c.a.IsLeader() {
		t.Fatal("leader without a heartbeat for the failover time still calls itself leader")
	}
}

func testLeaderRelease(ctx context.Context, t *testing.T, s lease.Store) {
	c := newContenders(t, s)
	try(ctx, t, c.a, "worker-a", true)
	try(ctx, t, c.b, "worker-b", false)
	if err := c.a.Release(ctx); err != nil {
		t.Fatalf("Release: %v", err)
	}
	if c.a.IsLeader() {
		t.Fatal("IsLeader after Release")
	}
	try(ctx, t, c.b, "worker-b", true) // no failover wait after a release
	if err := c.a.Release(ctx); err != nil {
		t.Fatalf("second Release by a non-leader: %v", err)
	}
	try(ctx, t, c.b, "worker-b", true)
}

func testConcurrentContenders(ctx context.Context, t *testing.T, s lease.Store) {
	const n = 6
	clock := NewClock()
	namespace := ns(t, "stream")
	var (
		wg    sync.WaitGroup
		mu    sync.Mutex
		wins  int
		start = make(chan struct{})
	)
	leaders := make([]*lease.Leader, n)
	for i := range n {
		leaders[i] = lease.NewLeader(s, namespace, fmt.Sprintf("worker-%d", i), failover, lease.LeaderClock(clock.Now))
		wg.Go(func() {
			<-start
			won, err := leaders[i].TryAcquire(ctx)
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				t.Errorf("worker-%d: %v", i, err)
			}
			if won {
				wins++
			}
		})
	}
	close(start)
	wg.Wait()
	if wins != 1 {
		t.Fatalf("%d of %d concurrent contenders became leader; want 1", wins, n)
	}
	leadersNow := 0
	for _, l := range leaders {
		if l.IsLeader() {
			leadersNow++
		}
	}
	if leadersNow != 1 {
		t.Fatalf("%d contenders call themselves leader; want 1", leadersNow)
	}
}

func testLockNotListed(ctx context.Context, t *testing.T, s lease.Store) {
	c := newContenders(t, s)
	try(ctx, t, c.a, "worker-a", true)
	namespace := ns(t, "stream")
	seed(ctx, t, s, namespace, "shard-0")
	other := lease.NewLeader(s, namespace, "worker-b", failover, lease.LeaderClock(c.clock.Now))
	try(ctx, t, other, "worker-b in another namespace", true)
	ls, err := s.List(ctx, namespace)
	if err != nil {
		t.Fatal(err)
	}
	if len(ls) != 1 || ls[0].ShardID != "shard-0" {
		t.Fatalf("List(%s) = %+v; want only shard-0 (the leader lock is not a shard)", namespace, ls)
	}
}
