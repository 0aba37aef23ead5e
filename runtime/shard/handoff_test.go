package shard_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/kinesisgen/kinesisgen/runtime/lease"
	"github.com/kinesisgen/kinesisgen/runtime/shard"
)

// releaseFailStore fails the first failures Release calls (all of them
// when failures is negative).
type releaseFailStore struct {
	lease.Store
	failures int64
	failed   atomic.Int64
}

var errReleaseRefused = errors.New("release refused (injected)")

func (s *releaseFailStore) Release(ctx context.Context, l lease.Lease) (lease.Lease, error) {
	if s.failures < 0 || s.failed.Load() < s.failures {
		s.failed.Add(1)
		return lease.Lease{}, &lease.Error{Op: "release", Key: l.Key, Err: errReleaseRefused}
	}
	return s.Store.Release(ctx, l)
}

// askSignalStore closes asked at the first handoff request it makes.
type askSignalStore struct {
	lease.Store
	once  atomic.Bool
	asked chan struct{}
}

func (s *askSignalStore) RequestHandoff(ctx context.Context, l lease.Lease, to string) (lease.Lease, error) {
	nl, err := s.Store.RequestHandoff(ctx, l, to)
	if err == nil && s.once.CompareAndSwap(false, true) {
		close(s.asked)
	}
	return nl, err
}

// A graceful handoff whose release fails does not strand the shard: the
// owner retries the release and the asker reads the shard; when the
// release keeps failing and the asker is gone, the owner keeps the lease
// (the request is cleared) and reads the shard again. (Before the fix one
// failed release left the lease marked as being handed over and renewed
// for ever, with no reader: nobody read the shard again.)
func TestHandoffWithFailedReleaseDoesNotStrand(t *testing.T) {
	eachLiveness(t, func(t *testing.T, l shard.Liveness) {
		t.Run("release-retried", func(t *testing.T) {
			e, _ := memEnvIn(t, 2, l)
			testHandoffReleaseRetried(t, e)
		})
		t.Run("asker-gone", func(t *testing.T) {
			e, _ := memEnvIn(t, 2, l)
			testHandoffAskerGone(t, e)
		})
	})
}

// testHandoffReleaseRetried: the first releases fail; the asker, which
// never forces the take, gets the lease once a retry succeeds.
func testHandoffReleaseRetried(t *testing.T, e *env) {
	cols := newCollectors(2)
	cfgA, cfgB := e.config("a", cols[0].sink), e.config("b", cols[1].sink)
	fail := &releaseFailStore{Store: e.store, failures: 3}
	cfgA.Leases = withMembers(fail, e.store)
	cfgB.Handoff = time.Hour // b takes only a released lease
	slower(e, &cfgA, &cfgB)
	a := e.start(cfgA)
	eventually(t, 5*time.Second, "a reads both shards", func() bool { return len(a.Reading()) == 2 })
	b := e.start(cfgB)
	eventually(t, 10*time.Second, "a 1/1 split after the release was retried", func() bool {
		return len(a.Reading()) == 1 && len(b.Reading()) == 1
	})
	if n := fail.failed.Load(); n < 3 {
		t.Fatalf("%d releases failed, want the 3 injected failures first", n)
	}
	want := map[string]int{}
	for i := range 20 {
		key := fmt.Sprintf("m%d", i)
		e.put(key, 0)
		want[key] = 1
	}
	all := func() []*shard.Record { return append(cols[0].records(), cols[1].records()...) }
	cols[1].wait(t, 10*time.Second, "20 records (a and b)", func([]*shard.Record) bool { return len(all()) >= 20 })
	checkKeyOrder(t, all(), want)
}

// testHandoffAskerGone: every release fails and the asker stops right
// after asking; the owner keeps the lease and reads every record.
func testHandoffAskerGone(t *testing.T, e *env) {
	ids := e.shards()
	col := newCollector()
	cfgA := e.config("a", col.sink)
	cfgA.Leases = withMembers(&releaseFailStore{Store: e.store, failures: -1}, e.store)
	cfgA.Start = shard.Position{Kind: shard.Horizon}
	cfgB := e.config("b", newCollector().sink)
	ask := &askSignalStore{Store: e.store, asked: make(chan struct{})}
	cfgB.Leases = withMembers(ask, e.store)
	cfgB.Handoff = time.Hour
	slower(e, &cfgA, &cfgB)
	a := e.start(cfgA)
	eventually(t, 5*time.Second, "a reads both shards", func() bool { return len(a.Reading()) == 2 })
	b := e.start(cfgB)
	select {
	case <-ask.asked:
	case <-time.After(10 * time.Second):
		t.Fatal("b never asked a for a lease")
	}
	if err := b.Stop(e.ctx(5 * time.Second)); err != nil {
		t.Fatalf("Stop b: %v", err)
	}
	handed := ""
	for _, id := range ids {
		if e.lease(id).PendingOwner == "b" {
			handed = id
		}
	}
	if handed == "" {
		t.Fatal("no lease asked for by b")
	}
	eventually(t, 4*cfgA.Failover, "the request cleared and a's again", func() bool {
		l := e.lease(handed)
		return l.Owner == "a" && l.PendingOwner == ""
	})
	eventually(t, 4*cfgA.Failover, "a reads both shards again", func() bool { return slices.Equal(a.Reading(), ids) })
	want := map[string]int{}
	e.publish(want, 20, 20)
	recs := col.wait(t, 10*time.Second, "the 20 records", func(r []*shard.Record) bool {
		return countKeys(r, "k") >= 20
	})
	got := map[string]int{}
	for _, r := range recs {
		got[r.PartitionKey]++
	}
	for k := range want {
		if got[k] == 0 {
			t.Errorf("record of key %s never delivered", k)
		}
	}
}

// slower gives live tests the lease timing of the other live tests: a
// DynamoDB call on a loaded machine takes longer than a third of the unit
// tests' failover time.
func slower(e *env, cfgs ...*shard.Config) {
	if !e.live {
		return
	}
	for _, c := range cfgs {
		c.Renew, c.Failover = 100*time.Millisecond, time.Second
	}
}

// Issue 9: an owner fenced on its leases (its heartbeats failed for longer
// than its fence time, not long enough for the others to judge it dead)
// leaves none of them unread once its heartbeats land again: what it does
// not take back it releases. (Before the fix the store still named it, a
// live member is never forced, and nobody read those shards while both
// instances lived: a request for one went unanswered ("asked"), or each
// planner's shares left it to the fenced owner ("share-elsewhere"). A
// loaded machine did the first at Start: the live handoff test saw the
// 2/2 split time out.)
func TestFencedLeasesAreNotStranded(t *testing.T) {
	eachLiveness(t, func(t *testing.T, l shard.Liveness) {
		t.Run("asked", func(t *testing.T) { testFencedLeaseAskedFor(t, l) })
		t.Run("share-elsewhere", func(t *testing.T) { testFencedLeaseShareElsewhere(t, l) })
	})
}

// fencedOwner starts owner on e with heartbeats that fail while the
// returned store's off is set.
func fencedOwner(e *env, owner string, col *collector) (*shard.Coordinator, *noBeatStore) {
	store := newNoBeatStore(e)
	cfg := e.config(owner, col.sink)
	cfg.Leases = store
	// The test's fence must be the only one: at the harness's 500 ms (a
	// lease call's deadline 166 ms), a stall of 2 loaded cores fenced the
	// owner before its first checkpoint, and its take-back rightly read
	// that shard's records again from the start, which the tests' counts
	// take for a duplicate (CI, TestFencedReaderHandsOutNothingReadAfterTheFence).
	cfg.Failover = fencedOwnerFailover
	cfg.Counters = &store.counters
	return e.start(cfg), store
}

// fencedOwnerFailover is the failover time of a fencedOwner.
const fencedOwnerFailover = 2 * time.Second

// patient is the config of an owner that judges the others alive
// throughout: their heartbeats fail for less than its failover time.
func patient(e *env, owner string, col *collector) shard.Config {
	cfg := e.config(owner, col.sink)
	cfg.Failover = 20 * time.Second
	return cfg
}

// fence stops the heartbeats of a (started by fencedOwner) until it has
// fenced itself on every lease.
func fence(t *testing.T, a *shard.Coordinator, store *noBeatStore) {
	t.Helper()
	if n := store.counters.Lost.Load(); n > 0 {
		t.Fatalf("%d leases lost before the test's fence (a stall longer than a lease call's deadline?): what follows cannot be told from it", n)
	}
	store.off.Store(true)
	eventually(t, fencedOwnerFailover+5*time.Second, "a fenced on every lease", func() bool { return len(a.Owned()) == 0 })
}

// checkAllRead publishes n records and checks that cols deliver them all.
func checkAllRead(t *testing.T, e *env, cols []*collector, n int) {
	t.Helper()
	want := map[string]int{}
	e.publish(want, n, 10)
	all := func() []*shard.Record {
		var out []*shard.Record
		for _, c := range cols {
			out = append(out, c.records()...)
		}
		return out
	}
	cols[0].wait(t, 5*time.Second, fmt.Sprintf("the %d records", n), func([]*shard.Record) bool { return len(all()) >= n })
	checkKeyOrder(t, all(), want)
}

// testFencedLeaseAskedFor: b asks a, fenced but alive, for a lease.
func testFencedLeaseAskedFor(t *testing.T, l shard.Liveness) {
	e, _ := memEnvIn(t, 2, l)
	ids := e.shards()
	cols := newCollectors(2)
	a, store := fencedOwner(e, "a", cols[0])
	eventually(t, 5*time.Second, "a reads both shards", func() bool { return slices.Equal(a.Reading(), ids) })
	fence(t, a, store)
	b := e.start(patient(e, "b", cols[1])) // asks a for one lease
	asked := ""
	for _, id := range ids {
		if e.lease(id).PendingOwner == "b" {
			asked = id
		}
	}
	if asked == "" {
		t.Fatalf("b asked for no lease: %+v %+v", e.lease(ids[0]), e.lease(ids[1]))
	}
	store.off.Store(false)
	eventually(t, 5*time.Second, fmt.Sprintf("a 1/1 split with %s read by b", asked), func() bool {
		return len(a.Reading()) == 1 && slices.Equal(b.Reading(), []string{asked})
	})
	checkAllRead(t, e, cols, 20)
}

// testFencedLeaseShareElsewhere: 3 shards, c holds 2 and b 1 when c is
// fenced. The shares then give the rounding's extra lease to b on c's
// plan (b holds more, then the ids decide), and to c on b's (c is named on
// 2): c takes 1 back and b asks for nothing.
func testFencedLeaseShareElsewhere(t *testing.T, l shard.Liveness) {
	e, _ := memEnvIn(t, 3, l)
	cols := newCollectors(2)
	c, store := fencedOwner(e, "c", cols[0])
	eventually(t, 5*time.Second, "c reads the 3 shards", func() bool { return len(c.Reading()) == 3 })
	b := e.start(patient(e, "b", cols[1]))
	eventually(t, 5*time.Second, "a 2/1 split", func() bool { return len(c.Reading()) == 2 && len(b.Reading()) == 1 })
	fence(t, c, store)
	store.off.Store(false)
	eventually(t, 5*time.Second, "every shard read again", func() bool { return len(c.Reading())+len(b.Reading()) == 3 })
	checkAllRead(t, e, cols, 30)
}

// seqCheckpointFailStore fails the first sequence-number checkpoint it is
// asked to write (time pins pass).
type seqCheckpointFailStore struct {
	lease.Store
	failed atomic.Bool
}

func (s *seqCheckpointFailStore) Checkpoint(ctx context.Context, l lease.Lease, cp string, sub int64) (lease.Lease, error) {
	if cp != lease.CheckpointAtTimestamp && s.failed.CompareAndSwap(false, true) {
		return lease.Lease{}, &lease.Error{Op: "checkpoint", Key: l.Key, Err: errThrottled}
	}
	return s.Store.Checkpoint(ctx, l, cp, sub)
}

// Issue 9: one failed write of a graceful handoff's final checkpoint does
// not send the asker back to an older one: the owner writes it again
// before it releases, and no record is delivered twice. (Before the fix
// the owner released the lease after the one failed write: the asker read
// again everything handled since the last checkpoint.)
func TestHandoffRetriesItsFinalCheckpoint(t *testing.T) {
	eachLiveness(t, virtual(testHandoffRetriesItsFinalCheckpoint))
}

func testHandoffRetriesItsFinalCheckpoint(t *testing.T, l shard.Liveness) {
	e, _ := memEnvIn(t, 2, l)
	cols := newCollectors(2)
	fail := &seqCheckpointFailStore{Store: e.store}
	cfgA, cfgB := e.config("a", cols[0].sink), e.config("b", cols[1].sink)
	cfgA.Leases = withMembers(fail, e.store)
	cfgA.Checkpoint = time.Hour // the handoff's is a's first checkpoint of a record
	a := e.start(cfgA)
	eventually(t, 5*time.Second, "a reads both shards", func() bool { return len(a.Reading()) == 2 })
	want := map[string]int{}
	e.publish(want, 20, 10)
	cols[0].waitN(t, 20)
	b := e.start(cfgB)
	eventually(t, 5*time.Second, "a 1/1 split", func() bool { return len(a.Reading()) == 1 && len(b.Reading()) == 1 })
	if !fail.failed.Load() {
		t.Fatal("no checkpoint failed: the test injected nothing")
	}
	e.publish(want, 20, 10)
	all := func() []*shard.Record { return append(cols[0].records(), cols[1].records()...) }
	cols[1].wait(t, 5*time.Second, "the 40 records", func([]*shard.Record) bool { return len(all()) >= 40 })
	time.Sleep(200 * time.Millisecond) // more than a poll: a duplicate would be here by now
	checkKeyOrder(t, all(), want)
}

// slowFirstTake holds the first take of a released lease (l.Owner empty)
// for hold after it has landed, before it returns: what a slow answer does
// to the instance that took it, which has not yet counted the lease as
// held. It counts the takes that landed.
type slowFirstTake struct {
	memberWrap
	hold  time.Duration
	once  atomic.Bool
	takes atomic.Int64
}

func (s *slowFirstTake) Take(ctx context.Context, l lease.Lease, owner string) (lease.Lease, error) {
	nl, err := s.memberWrap.Take(ctx, l, owner)
	if err == nil {
		s.takes.Add(1)
		if l.Owner == "" && s.once.CompareAndSwap(false, true) {
			time.Sleep(s.hold)
		}
	}
	return nl, err
}

// A lease asked for and released is taken once, and read by one reader,
// while the take of it is slow to return: the renewal loop's and a lease
// pass's follow-up of the request do not interleave. (Before the fix the
// pass's follow-up, reading the lease under its own name while the
// renewal loop's take of it had not returned, dropped the request; its
// listing then showed the lease under this owner's name and not held, and
// takeBack took it a second time: two owned leases, two readers of one
// shard in one instance, every record handled twice until the orphan's
// fence. The fleet simulation found it once in about 30 runs at 256 × 20.)
func TestReleasedLeaseTakenOnceWhileTheTakeIsSlow(t *testing.T) {
	e, _ := memEnv(t, 2)
	cols := newCollectors(2)
	cfgA := e.config("a", cols[0].sink)
	a := e.start(cfgA)
	eventually(t, 5*time.Second, "a reads both shards", func() bool { return len(a.Reading()) == 2 })
	bs := &slowFirstTake{memberWrap: memberWrap{Store: e.store, m: e.store.(lease.MemberStore)}, hold: 1500 * time.Millisecond}
	cfgB := e.config("b", cols[1].sink)
	cfgB.Leases = bs
	// A pass a second (the renewal loop follows the request every 50 ms,
	// so it takes the released lease first) and a failover long enough
	// for the held take.
	cfgB.Sync, cfgB.Failover = time.Second, 8*time.Second
	b := e.start(cfgB)
	eventually(t, 10*time.Second, "a 1/1 split", func() bool {
		return len(a.Reading()) == 1 && len(b.Reading()) == 1
	})
	time.Sleep(2 * cfgB.Sync) // passes after the take returned
	if n := bs.takes.Load(); n != 1 {
		t.Errorf("b took a lease %d times; want once (one lease asked for and released)", n)
	}
	want := map[string]int{}
	e.publish(want, 20, 20)
	all := func() []*shard.Record { return append(cols[0].records(), cols[1].records()...) }
	cols[1].wait(t, 10*time.Second, "the 20 records", func([]*shard.Record) bool { return len(all()) >= 20 })
	time.Sleep(300 * time.Millisecond) // a duplicate would arrive by now
	if got := len(all()); got != 20 {
		t.Errorf("%d deliveries of 20 records", got)
	}
}
