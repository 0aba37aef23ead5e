package shard_test

import (
	"context"
	"errors"
	"slices"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/kinesis"

	"github.com/kinesisgen/kinesisgen/runtime/kinesisapi"
	"github.com/kinesisgen/kinesisgen/runtime/lease"
	"github.com/kinesisgen/kinesisgen/runtime/shard"
)

// holeStore is a lease store whose calls, while the hole is open, are held
// until their caller gives up (an endpoint that takes a request and never
// answers).
type holeStore struct {
	lease.Store
	open atomic.Bool
	held atomic.Int64 // calls that went into the hole
	// fail answers at once with errThrottled instead of holding the call.
	fail bool
	// writes counts the lease writes tried (renewals and checkpoints),
	// held or not.
	writes atomic.Int64
}

var errThrottled = errors.New("throttled (injected)")

func (s *holeStore) swallow(ctx context.Context, op string) error {
	if !s.open.Load() {
		return nil
	}
	s.held.Add(1)
	if s.fail {
		return &lease.Error{Op: op, Err: errThrottled}
	}
	<-ctx.Done()
	return &lease.Error{Op: op, Err: ctx.Err()}
}

func (s *holeStore) List(ctx context.Context, ns string) ([]lease.Lease, error) {
	if err := s.swallow(ctx, "list"); err != nil {
		return nil, err
	}
	return s.Store.List(ctx, ns)
}

func (s *holeStore) Get(ctx context.Context, key string) (lease.Lease, error) {
	if err := s.swallow(ctx, "get"); err != nil {
		return lease.Lease{}, err
	}
	return s.Store.Get(ctx, key)
}

func (s *holeStore) Create(ctx context.Context, l lease.Lease) (bool, error) {
	if err := s.swallow(ctx, "create"); err != nil {
		return false, err
	}
	return s.Store.Create(ctx, l)
}

func (s *holeStore) Take(ctx context.Context, l lease.Lease, owner string) (lease.Lease, error) {
	if err := s.swallow(ctx, "take"); err != nil {
		return lease.Lease{}, err
	}
	return s.Store.Take(ctx, l, owner)
}

func (s *holeStore) Renew(ctx context.Context, l lease.Lease) (lease.Lease, error) {
	s.writes.Add(1)
	if err := s.swallow(ctx, "renew"); err != nil {
		return lease.Lease{}, err
	}
	return s.Store.Renew(ctx, l)
}

func (s *holeStore) Checkpoint(ctx context.Context, l lease.Lease, cp string, sub int64) (lease.Lease, error) {
	s.writes.Add(1)
	if err := s.swallow(ctx, "checkpoint"); err != nil {
		return lease.Lease{}, err
	}
	return s.Store.Checkpoint(ctx, l, cp, sub)
}

func (s *holeStore) Release(ctx context.Context, l lease.Lease) (lease.Lease, error) {
	if err := s.swallow(ctx, "release"); err != nil {
		return lease.Lease{}, err
	}
	return s.Store.Release(ctx, l)
}

func (s *holeStore) RequestHandoff(ctx context.Context, l lease.Lease, to string) (lease.Lease, error) {
	if err := s.swallow(ctx, "handoff"); err != nil {
		return lease.Lease{}, err
	}
	return s.Store.RequestHandoff(ctx, l, to)
}

func (s *holeStore) SetChildren(ctx context.Context, l lease.Lease, ids []string) (lease.Lease, error) {
	if err := s.swallow(ctx, "set-children"); err != nil {
		return lease.Lease{}, err
	}
	return s.Store.SetChildren(ctx, l, ids)
}

func (s *holeStore) Delete(ctx context.Context, l lease.Lease) error {
	if err := s.swallow(ctx, "delete"); err != nil {
		return err
	}
	return s.Store.Delete(ctx, l)
}

// holeClient holds the listing and iterator calls of Kinesis while its hole
// is open.
type holeClient struct {
	kinesisapi.API
	open atomic.Bool
	held atomic.Int64
}

func (c *holeClient) swallow(ctx context.Context) error {
	if !c.open.Load() {
		return nil
	}
	c.held.Add(1)
	<-ctx.Done()
	return ctx.Err()
}

func (c *holeClient) ListShards(ctx context.Context, in *kinesis.ListShardsInput, o ...func(*kinesis.Options)) (*kinesis.ListShardsOutput, error) {
	if err := c.swallow(ctx); err != nil {
		return nil, err
	}
	return c.API.ListShards(ctx, in, o...)
}

func (c *holeClient) GetShardIterator(ctx context.Context, in *kinesis.GetShardIteratorInput, o ...func(*kinesis.Options)) (*kinesis.GetShardIteratorOutput, error) {
	if err := c.swallow(ctx); err != nil {
		return nil, err
	}
	return c.API.GetShardIterator(ctx, in, o...)
}

// deadOwner stores the lease of shardID as held by an owner that never
// renews it again.
func deadOwner(t *testing.T, e *env, shardID string) {
	t.Helper()
	l := lease.Lease{Key: lease.KeyFor("test/"+e.stream, shardID), ShardID: shardID, Owner: "dead"}
	if _, err := e.store.Create(context.Background(), l); err != nil {
		t.Fatal(err)
	}
}

// stopWithin stops c and fails the test when Stop has not returned within d.
func stopWithin(t *testing.T, c *shard.Coordinator, d time.Duration) {
	t.Helper()
	done := make(chan error, 1)
	began := time.Now()
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		done <- c.Stop(ctx)
	}()
	select {
	case <-done:
		t.Logf("Stop returned after %v", time.Since(began).Round(time.Millisecond))
	case <-time.After(d):
		t.Fatalf("Stop has not returned after %v: it waits on a call that never answers", d)
	}
}

// A lease store that takes requests and never answers (for twice the
// failover time) costs the coordinator nothing once it answers again:
// renewal resumes, a dead owner's lease is taken, every shard is read, and
// Stop returns in bounded time while calls hang. (Before the fix every
// lease-store call ran without a deadline: the first held call stopped
// renewal, taking and shard sync for good, and Stop waited on the pass
// stuck in it for ever.)
func TestLeaseStoreBlackHole(t *testing.T) {
	eachLiveness(t, func(t *testing.T, l shard.Liveness) {
		e, _ := memEnvIn(t, 2, l)
		hole := &holeStore{Store: e.store}
		testLeaseStoreBlackHole(t, e, hole, func(open bool) { hole.open.Store(open) }, hole.held.Load)
	})
}

// testLeaseStoreBlackHole runs the test above on e, whose coordinator uses
// store; setHole opens and closes the hole, held counts the calls held.
func testLeaseStoreBlackHole(t *testing.T, e *env, store lease.Store, setHole func(bool), held func() int64) {
	ids := e.shards()
	deadOwner(t, e, ids[1])
	col := newCollector()
	cfg := e.config("a", col.sink)
	cfg.Leases = store
	cfg.Renew, cfg.Failover = 100*time.Millisecond, time.Second
	cfg.Start = shard.Position{Kind: shard.Horizon} // whenever a shard opens, it reads what was published
	c := e.start(cfg)
	if got := c.Owned(); !slices.Equal(got, ids[:1]) {
		t.Fatalf("owned %v at start, want %v (the other lease is the dead owner's, not expired yet)", got, ids[:1])
	}

	setHole(true)
	eventually(t, 5*time.Second, "a call held in the hole", func() bool { return held() > 0 })
	time.Sleep(2 * cfg.Failover)
	setHole(false)
	healed := time.Now()
	before := e.lease(ids[0]).Counter

	// Records on both shards: the dead owner's must have been taken.
	want := map[string]int{}
	e.publish(want, 20, 20)
	checkKeyOrder(t, col.wait(t, 4*cfg.Failover, "20 records on both shards after the store healed", func(r []*shard.Record) bool {
		return len(r) >= 20
	}), want)
	eventually(t, 4*cfg.Failover, "a renewal after the store healed", func() bool {
		l := e.lease(ids[0])
		return l.Owner == "a" && l.Counter > before
	})
	t.Logf("renewing and reading both shards %v after the store healed", time.Since(healed).Round(time.Millisecond))

	setHole(true)
	n := held()
	eventually(t, 5*time.Second, "a call held in the hole", func() bool { return held() > n })
	// Stop: one second to settle, then its final writes, each bounded.
	stopWithin(t, c, 5*time.Second)
}

// Kinesis holding ListShards and GetShardIterator does not keep a dead
// owner's lease from being taken (a pass goes on with the last listing),
// the shard is read once Kinesis answers again, and Stop returns while
// calls hang. (Before the fix ListShards had no deadline: the pass stuck in
// it took nothing and Stop waited on it for ever.)
func TestKinesisBlackHoleDuringPass(t *testing.T) {
	eachLiveness(t, testKinesisBlackHoleDuringPass)
}

func testKinesisBlackHoleDuringPass(t *testing.T, l shard.Liveness) {
	e, _ := memEnvIn(t, 2, l)
	ids := e.shards()
	deadOwner(t, e, ids[1])
	hole := &holeClient{API: e.client}
	col := newCollector()
	cfg := e.config("a", col.sink)
	cfg.Client = hole
	cfg.Start = shard.Position{Kind: shard.Horizon}
	c := e.start(cfg)

	hole.open.Store(true)
	eventually(t, 5*time.Second, "a call held in the hole", func() bool { return hole.held.Load() > 0 })
	eventually(t, 3*time.Second+4*cfg.Failover, "the dead owner's lease taken while Kinesis hangs", func() bool {
		return slices.Contains(c.Owned(), ids[1])
	})
	hole.open.Store(false)
	eventually(t, 5*time.Second, "both shards read after Kinesis healed", func() bool {
		return slices.Equal(c.Reading(), ids)
	})
	want := map[string]int{}
	e.publish(want, 20, 20)
	checkKeyOrder(t, col.waitN(t, 20), want)

	hole.open.Store(true)
	e.put("after", 0) // the readers go on; a re-listing is due
	held := hole.held.Load()
	eventually(t, 5*time.Second, "a call held in the hole", func() bool { return hole.held.Load() > held })
	stopWithin(t, c, 5*time.Second)
}

// The hole holds member calls too (not counted as lease writes: a member
// entry is the instance's, not a shard's).
func (s *holeStore) Heartbeat(ctx context.Context, ns string, m lease.Member) error {
	if err := s.swallow(ctx, "heartbeat"); err != nil {
		return err
	}
	return s.Store.(lease.MemberStore).Heartbeat(ctx, ns, m)
}

func (s *holeStore) Members(ctx context.Context, ns string) ([]lease.Member, error) {
	if err := s.swallow(ctx, "members"); err != nil {
		return nil, err
	}
	return s.Store.(lease.MemberStore).Members(ctx, ns)
}

func (s *holeStore) Leave(ctx context.Context, ns, owner string, beat int64) error {
	if err := s.swallow(ctx, "leave"); err != nil {
		return err
	}
	return s.Store.(lease.MemberStore).Leave(ctx, ns, owner, beat)
}

// flakyStartStore holds its first listings until their deadline (a lease
// store slow to answer at a deploy), or fails every listing with err.
type flakyStartStore struct {
	lease.Store
	holdFirst int64
	held      atomic.Int64
	err       error
}

func (s *flakyStartStore) List(ctx context.Context, ns string) ([]lease.Lease, error) {
	if s.err != nil {
		return nil, &lease.Error{Op: "list", Err: s.err}
	}
	if s.held.Add(1) <= s.holdFirst {
		<-ctx.Done()
		return nil, &lease.Error{Op: "list", Err: ctx.Err()}
	}
	return s.Store.List(ctx, ns)
}

// A first pass whose lease-store calls time out for a while is run again:
// Start (Connect) succeeds once the store answers, within the failover
// time, instead of failing the process at a deploy. A store that refuses
// for good fails Start at once; one that never answers fails it after about
// the failover time. (Before the change, the first timed-out call failed
// Start.)
func TestStartRetriesALeaseStoreSlowToAnswer(t *testing.T) {
	// Per lease the store keeps no members (as it did when this test was
	// written); per instance it keeps the memory store's, and the first
	// pass's heartbeat and member read come before the listing.
	eachLiveness(t, func(t *testing.T, l shard.Liveness) {
		for _, tc := range []struct {
			name      string
			holdFirst int64
			err       error
			wantErr   bool
			within    time.Duration
		}{
			{name: "slow then answers", holdFirst: 2, within: 3 * time.Second},
			{name: "never answers", holdFirst: 1 << 40, wantErr: true, within: 4 * time.Second},
			{name: "refuses", err: errors.New("AccessDeniedException (injected)"), wantErr: true, within: 200 * time.Millisecond},
		} {
			// On a virtual clock: Start's time is the test.
			t.Run(tc.name, func(t *testing.T) {
				synctest.Test(t, func(t *testing.T) {
					e, _ := memEnvIn(t, 2, l)
					store := &flakyStartStore{Store: e.store, holdFirst: tc.holdFirst, err: tc.err}
					cfg := e.config("a", newCollector().sink)
					cfg.Leases = store
					if l == shard.LivenessPerInstance {
						cfg.Leases = withMembers(store, e.store)
					}
					cfg.Renew, cfg.Failover = 100*time.Millisecond, 1500*time.Millisecond // 500 ms per lease call
					c, err := shard.New(cfg)
					if err != nil {
						t.Fatal(err)
					}
					began := time.Now()
					err = c.Start(e.ctx(30 * time.Second))
					took := time.Since(began)
					t.Cleanup(func() {
						ctx, cancel := context.WithTimeout(context.Background(), time.Second)
						defer cancel()
						_ = c.Stop(ctx)
					})
					if (err != nil) != tc.wantErr {
						t.Fatalf("Start after %v: %v; want an error: %v", took, err, tc.wantErr)
					}
					if took > tc.within {
						t.Errorf("Start returned after %v; want within %v", took, tc.within)
					}
					if err == nil {
						if got := c.Owned(); len(got) != 2 {
							t.Errorf("owned %v after a slow start; want both shards", got)
						}
						if store.held.Load() <= tc.holdFirst {
							t.Errorf("%d listings; the test meant %d held, then one answered", store.held.Load(), tc.holdFirst)
						}
					}
				})
			})
		}
	})
}
