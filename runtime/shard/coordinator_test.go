package shard_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/kinesis"
	"github.com/aws/aws-sdk-go-v2/service/kinesis/types"
	"github.com/google/go-cmp/cmp"

	"github.com/kinesisgen/kinesisgen/runtime/kinesisapi"
	"github.com/kinesisgen/kinesisgen/runtime/kinesistest"
	"github.com/kinesisgen/kinesisgen/runtime/kpl"
	"github.com/kinesisgen/kinesisgen/runtime/lease"
	"github.com/kinesisgen/kinesisgen/runtime/shard"
)

func TestNewRejectsBadConfig(t *testing.T) {
	e, _ := memEnv(t, 1)
	good := e.config("a", newCollector().sink)
	for name, mut := range map[string]func(*shard.Config){
		"no stream":        func(c *shard.Config) { c.Stream = "" },
		"no client":        func(c *shard.Config) { c.Client = nil },
		"no store":         func(c *shard.Config) { c.Leases = nil },
		"no owner":         func(c *shard.Config) { c.Owner = "" },
		"no sink":          func(c *shard.Config) { c.Sink = nil },
		"batch too large":  func(c *shard.Config) { c.BatchSize = 10001 },
		"negative poll":    func(c *shard.Config) { c.Poll = -1 },
		"renew > failover": func(c *shard.Config) { c.Renew, c.Failover = time.Second, time.Second },
		"timestamp zero":   func(c *shard.Config) { c.Start = shard.Position{Kind: shard.AtTimestamp} },
		"sequence no shard": func(c *shard.Config) {
			c.Start = shard.Position{Kind: shard.AtSequence, Sequence: "1"}
		},
	} {
		cfg := good
		mut(&cfg)
		if _, err := shard.New(cfg); !errors.Is(err, shard.ErrConfig) {
			t.Errorf("%s: err = %v, want ErrConfig", name, err)
		}
	}
}

// Start returns once every shard has its first iterator, so a record
// published right after Start (at the default start, Latest) is read.
func TestReadsRecordPublishedRightAfterStart(t *testing.T) {
	e, srv := memEnv(t, 4)
	e.put("before", 0) // before Start: Latest skips it
	col := newCollector()
	c := e.start(e.config("a", col.sink))
	if got := c.Owned(); len(got) != 4 {
		t.Fatalf("owned %v after Start, want all 4 shards", got)
	}
	want := map[string]int{}
	e.publish(want, 16, 16)
	recs := col.waitN(t, 16)
	checkKeyOrder(t, recs, want)
	for _, s := range e.shards() {
		if st, _ := srv.ShardStats(e.stream, s); st.GetRecords == 0 {
			t.Errorf("shard %s never read", s)
		}
	}
	// Settled records reach the lease store as checkpoints.
	last := recs[len(recs)-1]
	eventually(t, 5*time.Second, "checkpoint of the last record", func() bool {
		return e.lease(last.ShardID).Checkpoint == last.SequenceNumber
	})
}

func TestFirstPassErrorIsReturned(t *testing.T) {
	e, srv := memEnv(t, 2)
	srv.InjectCallFault(func(c kinesistest.Call) error {
		if c.Op == kinesistest.OpListShards {
			return &types.ResourceNotFoundException{Message: aws.String("gone")}
		}
		return nil
	})
	c := e.newCoordinator(e.config("a", newCollector().sink))
	err := c.Start(e.ctx(10 * time.Second))
	var se *shard.Error
	if !errors.As(err, &se) || se.Op != "ListShards" || !errors.As(err, new(*types.ResourceNotFoundException)) {
		t.Fatalf("Start err = %v, want a ListShards *shard.Error wrapping ResourceNotFound", err)
	}
	if err := c.Seek(context.Background(), shard.Position{Kind: shard.Horizon}); !errors.Is(err, shard.ErrStopped) {
		t.Fatalf("Seek after a failed Start: %v, want ErrStopped", err)
	}
}

// Stop writes the final checkpoint and releases; a new coordinator on the
// same store resumes after the last settled record: nothing lost, nothing
// settled delivered twice (its Latest start does not apply to checkpointed shards).
func TestResumeFromCheckpointAfterRestart(t *testing.T) {
	e, _ := memEnv(t, 2)
	col := newCollector()
	cfg := e.config("a", col.sink)
	cfg.Start = shard.Position{Kind: shard.Horizon}
	cfg.Checkpoint = time.Hour // only Stop writes: the final checkpoint is what counts
	c := e.start(cfg)
	want := map[string]int{}
	e.publish(want, 20, 5)
	col.waitN(t, 20)
	if err := c.Stop(e.ctx(5 * time.Second)); err != nil {
		t.Fatalf("Stop: %v", err)
	}
	for _, s := range e.shards() {
		if l := e.lease(s); l.Owner != "" || l.Checkpoint == "" {
			t.Fatalf("after Stop lease %s: owner %q checkpoint %q; want released with a checkpoint", s, l.Owner, l.Checkpoint)
		}
	}
	e.publish(want, 10, 5)
	col2 := newCollector()
	cfg2 := e.config("b", col2.sink) // Latest: must not skip the 10 published while down
	e.start(cfg2)
	recs := col2.waitN(t, 10)
	all := append(col.records(), recs...)
	checkKeyOrder(t, all, want)
	if extra := len(col2.records()); extra != 10 {
		t.Fatalf("second run delivered %d, want exactly the 10 new records", extra)
	}
}

// An unsettled record holds the watermark: after a restart it and every
// record after it are delivered again; the settled prefix is not. (Its
// handler still runs it at the end of Stop: the lease is left to expire,
// and the next owner takes it after the failover time.)
func TestUnsettledRecordRedeliveredAfterRestart(t *testing.T) {
	// On a virtual clock: its margins are a fence time or a pass interval,
	// which a loaded machine took on the real clock (CI, load average 8-16).
	synctest.Test(t, func(t *testing.T) {
		e, _ := memEnv(t, 1)
		col := newCollector()
		col.hold = func(r *shard.Record) bool { return string(r.Data) == "k:2" }
		cfg := e.config("a", col.sink)
		cfg.Start = shard.Position{Kind: shard.Horizon}
		c := e.start(cfg)
		for i := range 5 {
			e.put("k", i)
		}
		col.waitN(t, 5)
		ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
		defer cancel()
		if err := c.Stop(ctx); !errors.Is(err, shard.ErrLeftToExpire) {
			t.Fatalf("Stop with a handler running past its deadline = %v, want ErrLeftToExpire", err)
		}
		col2 := newCollector()
		e.start(e.config("b", col2.sink))
		recs := col2.waitN(t, 3)
		if got := dataOf(recs); got != " k:2 k:3 k:4" {
			t.Fatalf("redelivered%s; want k:2 k:3 k:4 (from the unsettled record on)", got)
		}
	})
}

func split(t *testing.T, e *env, shardID string) {
	t.Helper()
	// The middle of the hash-key space of a stream's single first shard.
	_, err := e.client.SplitShard(e.ctx(10*time.Second), &kinesis.SplitShardInput{
		StreamName: aws.String(e.stream), ShardToSplit: aws.String(shardID),
		NewStartingHashKey: aws.String("170141183460469231731687303715884105728"),
	})
	if err != nil {
		t.Fatalf("SplitShard %s: %v", shardID, err)
	}
}

func merge(t *testing.T, e *env, a, b string) {
	t.Helper()
	_, err := e.client.MergeShards(e.ctx(10*time.Second), &kinesis.MergeShardsInput{
		StreamName: aws.String(e.stream), ShardToMerge: aws.String(a), AdjacentShardToMerge: aws.String(b),
	})
	if err != nil {
		t.Fatalf("MergeShards %s %s: %v", a, b, err)
	}
}

// waitOpen waits for the stream to list n open shards (kinesalite applies
// a reshard asynchronously) and returns them.
func waitOpen(t *testing.T, e *env, n int) []string {
	t.Helper()
	var ids []string
	eventually(t, 10*time.Second, fmt.Sprintf("%d open shards", n), func() bool {
		ids = e.shards()
		return len(ids) == n
	})
	return ids
}

// A split and then a merge while records flow: children start only after
// their parents are read to the end (SHARD_END), so every key stays in
// order across parent and child, and nothing is lost.
func testSplitMergeKeepsKeyOrder(t *testing.T, e *env) {
	col := newCollector()
	c := e.start(e.config("a", col.sink))
	want := map[string]int{}
	publish := func(n int) {
		for i := range n {
			key := fmt.Sprintf("cust-%d", i%10)
			e.put(key, want[key])
			want[key]++
		}
	}
	total := func() int {
		n := 0
		for _, v := range want {
			n += v
		}
		return n
	}
	publish(30)
	parent := e.shards()[0]
	split(t, e, parent)
	children := waitOpen(t, e, 2)
	publish(30)
	col.waitN(t, total())
	merge(t, e, children[0], children[1])
	waitOpen(t, e, 1)
	publish(30)
	recs := col.waitN(t, total())
	checkKeyOrder(t, recs, want)
	for _, id := range append([]string{parent}, children...) {
		id := id
		eventually(t, 10*time.Second, "SHARD_END of "+id, func() bool { return e.lease(id).Checkpoint == lease.CheckpointShardEnd })
	}
	if got := e.lease(parent).ChildShardIDs; !slices.Equal(got, children) {
		t.Errorf("children recorded on the parent lease = %v, want %v", got, children)
	}
	// A parent's reader lets go of its shard after the SHARD_END
	// checkpoint, once its children's leases are written and its own is
	// released: wait for that, not just for the checkpoint.
	eventually(t, 5*time.Second, "only the merged child read", func() bool { return len(c.Reading()) == 1 })
	// Deliveries per shard: no child record came before its parent's last.
	lastOf := map[string]int{}
	for i, r := range recs {
		lastOf[r.ShardID] = i
	}
	firstOf := map[string]int{}
	for i := len(recs) - 1; i >= 0; i-- {
		firstOf[recs[i].ShardID] = i
	}
	for _, ch := range children {
		if first, ok := firstOf[ch]; ok && first < lastOf[parent] {
			t.Errorf("child %s delivered (at %d) before its parent's last record (at %d)", ch, first, lastOf[parent])
		}
	}
}

func TestSplitMergeKeepsKeyOrder(t *testing.T) {
	e, _ := memEnv(t, 1)
	testSplitMergeKeepsKeyOrder(t, e)
}

// A child without a checkpoint opens at its trim horizon, whatever the
// subscription's start: records written to it before its reader started
// are read.
func TestChildWithoutCheckpointStartsAtHorizon(t *testing.T) {
	e, _ := memEnv(t, 1)
	col := newCollector()
	cfg := e.config("a", col.sink)
	cfg.Sync = time.Hour // the child must start because the parent ended, not by a timer
	cfg.Failover = 2 * time.Hour
	e.start(cfg)
	split(t, e, e.shards()[0])
	want := map[string]int{}
	e.publish(want, 20, 20)
	checkKeyOrder(t, col.waitN(t, 20), want)
}

func TestTwoCoordinatorsBalanceAndRelease(t *testing.T) {
	e, _ := memEnv(t, 4)
	colA, colB := newCollector(), newCollector()
	a := e.start(e.config("a", colA.sink))
	if n := len(a.Owned()); n != 4 {
		t.Fatalf("first coordinator owns %d shards, want 4", n)
	}
	b := e.start(e.config("b", colB.sink))
	eventually(t, 10*time.Second, "a 2/2 split", func() bool {
		return len(a.Owned()) == 2 && len(b.Owned()) == 2 && len(b.Reading()) == 2
	})
	// Stop releases: b takes a's shards on its next pass, long before the
	// failover time would let it take expired leases.
	stopped := time.Now()
	if err := a.Stop(e.ctx(5 * time.Second)); err != nil {
		t.Fatalf("Stop: %v", err)
	}
	eventually(t, 10*time.Second, "b owns all 4", func() bool { return len(b.Reading()) == 4 })
	if took := time.Since(stopped); took >= 500*time.Millisecond {
		t.Errorf("b took %v to take the released shards, not less than the failover time", took)
	}
	want := map[string]int{}
	e.publish(want, 20, 20)
	recs := colB.wait(t, 10*time.Second, "20 records on b", func(r []*shard.Record) bool {
		n := 0
		for _, x := range r {
			if x.ArrivalTime.After(stopped) {
				n++
			}
		}
		return n >= 20
	})
	_ = recs
}

// A graceful handoff (a second instance asks for its share while records
// flow, each settled at once) moves shards with no record delivered twice.
func TestHandoffWhileConsumingHasNoDuplicates(t *testing.T) {
	e, _ := memEnv(t, 4)
	testHandoffWhileConsuming(t, e)
}

func testHandoffWhileConsuming(t *testing.T, e *env) {
	cols := newCollectors(2)
	colA, colB := cols[0], cols[1]
	var lost shard.LeaseCounters // both instances'
	cfgA, cfgB := e.config("a", colA.sink), e.config("b", colB.sink)
	cfgA.Counters, cfgB.Counters = &lost, &lost
	a := e.start(cfgA)
	stop := make(chan struct{})
	done := make(chan int)
	go func() {
		n := 0
		defer func() { done <- n }()
		for {
			select {
			case <-stop:
				return
			default:
			}
			e.put(fmt.Sprintf("k%d", n%40), n)
			n++
			time.Sleep(time.Millisecond)
		}
	}()
	// The publisher ends before the test does, also when the test fails on
	// the way: a put after the test ended would fail a finished test (a
	// panic that ends the whole run).
	published := 0
	stopPublishing := sync.OnceFunc(func() {
		close(stop)
		published = <-done
	})
	t.Cleanup(stopPublishing)
	b := e.start(cfgB)
	eventually(t, 10*time.Second, "a 2/2 split", func() bool {
		return len(a.Reading()) == 2 && len(b.Reading()) == 2
	})
	time.Sleep(100 * time.Millisecond)
	stopPublishing()
	all := func() []*shard.Record { return append(colA.records(), colB.records()...) }
	colB.wait(t, 10*time.Second, "every record", func([]*shard.Record) bool { return len(all()) >= published })
	seen := map[recordID]bool{}
	dups := 0
	for _, r := range all() {
		if seen[idOf(r)] {
			dups++
		}
		seen[idOf(r)] = true
	}
	if len(seen) != published {
		t.Fatalf("published %d, delivered %d distinct; want all", published, len(seen))
	}
	// Once each, unless a lease was lost (a pause past the fence time on a
	// loaded machine): then at least once allows it, and it is no handoff's.
	if n := lost.Lost.Load(); dups != 0 && n == 0 {
		t.Fatalf("%d records delivered twice, and no lease lost: the graceful handoff delivered them again", dups)
	} else if dups != 0 {
		t.Logf("%d records delivered twice after %d leases lost", dups, n)
	}
}

// A shard opened at Latest is handed over before its first record, and
// records arrive after the owner released it and before the asker opens
// it: the owner's pin of its opening (a time, in the lease since it opened)
// makes the asker, which would open at its own Latest, read them all.
func TestHandoffBeforeFirstRecordLosesNothing(t *testing.T) {
	eachLiveness(t, testHandoffBeforeFirstRecord)
}

func testHandoffBeforeFirstRecord(t *testing.T, l shard.Liveness) {
	e, _ := memEnvIn(t, 2, l)
	cols := newCollectors(2)
	probe := &releaseProbeStore{Store: e.store, put: func() []string { return putProbes(t, e) }, fired: make(chan struct{})}
	cfgA := e.config("a", cols[0].sink)
	cfgA.Leases = withMembers(probe, e.store)
	a := e.start(cfgA)
	b := e.start(e.config("b", cols[1].sink))
	select {
	case <-probe.fired:
	case <-e.ctx(10 * time.Second).Done():
		t.Fatal("no lease was handed over")
	}
	eventually(t, 10*time.Second, "a 1/1 split", func() bool { return len(a.Reading()) == 1 && len(b.Reading()) == 1 })
	handed := b.Reading()[0]
	if !slices.Contains(probe.landed, handed) {
		t.Fatalf("no probe record landed on the handed shard %s (landed on %v)", handed, probe.landed)
	}
	all := func() []*shard.Record { return append(cols[0].records(), cols[1].records()...) }
	cols[1].wait(t, 10*time.Second, "every probe record (a and b)", func([]*shard.Record) bool { return len(all()) >= probeKeys })
	want := map[string]int{}
	for i := range probeKeys {
		want[fmt.Sprintf("probe%d", i)] = 1
	}
	checkKeyOrder(t, all(), want)
}

const probeKeys = 10

// putProbes publishes probeKeys records, one per key, and returns the
// shards they landed on.
func putProbes(t *testing.T, e *env) []string {
	var landed []string
	for i := range probeKeys {
		sh, _ := e.put(fmt.Sprintf("probe%d", i), 0)
		landed = append(landed, sh)
	}
	return landed
}

// releaseProbeStore runs put right after the first Release it makes: in
// the gap between a handoff's release and the asker's opening.
type releaseProbeStore struct {
	lease.Store
	put    func() []string
	once   sync.Once
	fired  chan struct{}
	landed []string // written before fired is closed
}

func (s *releaseProbeStore) Release(ctx context.Context, l lease.Lease) (lease.Lease, error) {
	nl, err := s.Store.Release(ctx, l)
	if err == nil {
		s.once.Do(func() {
			s.landed = s.put()
			close(s.fired)
		})
	}
	return nl, err
}

// A lease taken by another owner through the store fences the reader: it
// stops at once and delivers nothing more from that shard.
func TestLostLeaseStopsReader(t *testing.T) {
	eachLiveness(t, testLostLeaseStopsReader)
}

func testLostLeaseStopsReader(t *testing.T, mode shard.Liveness) {
	e, _ := memEnvIn(t, 2, mode)
	col := newCollector()
	cfg := e.config("a", col.sink)
	cfg.Failover = time.Hour // the intruder's lease never looks expired to a
	c := e.start(cfg)
	victim := e.shards()[0]
	l := e.lease(victim)
	if _, err := e.store.Take(context.Background(), l, "intruder"); err != nil {
		t.Fatal(err)
	}
	eventually(t, 5*time.Second, "the reader of the lost shard to stop", func() bool {
		return !slices.Contains(c.Owned(), victim) && !slices.Contains(c.Reading(), victim)
	})
	sent := 0
	for i := 0; sent < 10; i++ {
		if sh, _ := e.put(fmt.Sprintf("k%d", i), 0); sh == victim {
			sent++
		}
	}
	other := e.shards()[1]
	for i := 0; ; i++ {
		if sh, _ := e.put(fmt.Sprintf("z%d", i), 0); sh == other {
			break
		}
	}
	col.wait(t, 5*time.Second, "the record on the kept shard", func(r []*shard.Record) bool { return len(r) >= 1 })
	for _, r := range col.records() {
		if r.ShardID == victim {
			t.Fatalf("record %s delivered from the lost shard", r.Data)
		}
	}
	if got := e.lease(victim); got.Owner != "intruder" {
		t.Fatalf("lease owner %q, want the intruder untouched", got.Owner)
	}
}

// Seek to the horizon delivers the shard again from its first record; a
// record of the old generation settled after the seek does not move the
// checkpoint.
func TestSeekHorizonRedeliversAndStaleSettlesDoNotCount(t *testing.T) {
	e, _ := memEnv(t, 1)
	col := newCollector()
	col.hold = func(r *shard.Record) bool { return string(r.Data) == "k:4" }
	cfg := e.config("a", col.sink)
	cfg.Start = shard.Position{Kind: shard.Horizon}
	c := e.start(cfg)
	for i := range 5 {
		e.put("k", i)
	}
	first := col.waitN(t, 5)
	sh := first[0].ShardID
	eventually(t, 5*time.Second, "checkpoint at k:3", func() bool { return e.lease(sh).Checkpoint == first[3].SequenceNumber })
	col.mu.Lock()
	col.hold = func(r *shard.Record) bool { return true } // new generation: hold everything
	col.mu.Unlock()
	if err := c.Seek(e.ctx(5*time.Second), shard.Position{Kind: shard.Horizon}); err != nil {
		t.Fatalf("Seek: %v", err)
	}
	recs := col.waitN(t, 10)
	if got := dataOf(recs[5:]); got != " k:0 k:1 k:2 k:3 k:4" {
		t.Fatalf("after Seek delivered%s, want k:0..k:4 again", got)
	}
	if !first[4].Stale() || recs[5].Stale() {
		t.Fatal("Stale: the old generation's record must be stale, the new one not")
	}
	first[4].Settle() // stale: must not move the checkpoint to k:4
	recs[5].Settle()  // new generation: k:0 is now the checkpoint (the seek moved it back)
	eventually(t, 5*time.Second, "checkpoint at the new generation's k:0", func() bool {
		return e.lease(sh).Checkpoint == recs[5].SequenceNumber
	})
	time.Sleep(100 * time.Millisecond) // several checkpoint intervals
	if got := e.lease(sh).Checkpoint; got != recs[5].SequenceNumber {
		t.Fatalf("checkpoint moved to %s by a stale settle", got)
	}
}

// A seek is written to the lease at once: a restart before any record after
// the seek has settled resumes where the seek pointed, not at the checkpoint
// from before it.
func TestSeekIsPersistedBeforeAnyRecordSettles(t *testing.T) {
	testSeekIsPersisted(t, func(t *testing.T) *env { e, _ := memEnv(t, 1); return e })
}

func testSeekIsPersisted(t *testing.T, newEnv func(*testing.T) *env) {
	for _, tc := range []struct {
		name string
		to   func(recs []*shard.Record, between time.Time) shard.Position
		want string // what the restarted coordinator delivers first
	}{
		{"horizon", func([]*shard.Record, time.Time) shard.Position { return shard.Position{Kind: shard.Horizon} }, "k:0"},
		{"sequence", func(recs []*shard.Record, _ time.Time) shard.Position {
			return shard.Position{Kind: shard.AtSequence, ShardID: recs[2].ShardID, Sequence: recs[2].SequenceNumber}
		}, "k:2"},
		{"timestamp", func(_ []*shard.Record, between time.Time) shard.Position {
			return shard.Position{Kind: shard.AtTimestamp, Time: between}
		}, "k:3"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t)
			col := newCollector()
			cfg := e.config("a", col.sink)
			cfg.Start = shard.Position{Kind: shard.Horizon}
			c := e.start(cfg)
			for i := range 3 {
				e.put("k", i)
			}
			col.waitN(t, 3)
			time.Sleep(5 * time.Millisecond) // arrival times either side of between
			between := time.Now()
			time.Sleep(5 * time.Millisecond)
			for i := 3; i < 5; i++ {
				e.put("k", i)
			}
			first := col.waitN(t, 5)
			sh := first[0].ShardID
			eventually(t, 5*time.Second, "checkpoint at k:4", func() bool { return e.lease(sh).Checkpoint == first[4].SequenceNumber })

			col.mu.Lock()
			col.hold = func(*shard.Record) bool { return true } // nothing after the seek settles
			col.mu.Unlock()
			if err := c.Seek(e.ctx(5*time.Second), tc.to(first, between)); err != nil {
				t.Fatalf("Seek: %v", err)
			}
			if got := e.lease(sh).Checkpoint; got == first[4].SequenceNumber {
				t.Fatal("the lease still holds the checkpoint from before the seek")
			}
			stop, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
			defer cancel()
			_ = c.Stop(stop) // held records: the stop times out, as a crash would leave it

			col2 := newCollector()
			e.start(e.config("b", col2.sink)) // Latest: only the lease says where to go
			recs := col2.waitN(t, 1)
			if got := string(recs[0].Data); got != tc.want {
				t.Fatalf("after a restart the first record is %s, want %s (where the seek pointed)", got, tc.want)
			}
		})
	}
}

func TestSeekAtSequenceOfAShardNotOwned(t *testing.T) {
	e, _ := memEnv(t, 1)
	c := e.start(e.config("a", newCollector().sink))
	err := c.Seek(e.ctx(5*time.Second), shard.Position{Kind: shard.AtSequence, ShardID: "shardId-999", Sequence: "1"})
	if !errors.Is(err, shard.ErrNotOwned) {
		t.Fatalf("err = %v, want ErrNotOwned", err)
	}
}

// Throttling and an expired iterator cost retries, never records.
func TestThrottlingAndExpiredIteratorLoseNothing(t *testing.T) {
	e, srv := memEnv(t, 1)
	var calls int
	srv.InjectCallFault(func(c kinesistest.Call) error {
		if c.Op != kinesistest.OpGetRecords {
			return nil
		}
		calls++
		switch calls % 4 {
		case 1:
			return &types.ProvisionedThroughputExceededException{Message: aws.String("slow down")}
		case 2:
			return &types.ExpiredIteratorException{Message: aws.String("expired")}
		}
		return nil
	})
	col := newCollector()
	cfg := e.config("a", col.sink)
	cfg.BatchSize = 3
	cfg.Start = shard.Position{Kind: shard.Horizon}
	e.start(cfg)
	want := map[string]int{}
	e.publish(want, 30, 3)
	checkKeyOrder(t, col.waitN(t, 30), want)
	time.Sleep(50 * time.Millisecond)
	if n := len(col.records()); n != 30 {
		t.Fatalf("%d deliveries, want exactly 30", n)
	}
}

// countingClient counts GetRecords and, by embedding only the API, hides the
// in-process server's wake-up hook, so the reader paces itself exactly as it
// does against the service.
type countingClient struct {
	kinesisapi.API
	gets  atomic.Int64
	spent atomic.Int64 // nanoseconds in GetRecords calls
}

func (c *countingClient) GetRecords(ctx context.Context, in *kinesis.GetRecordsInput, o ...func(*kinesis.Options)) (*kinesis.GetRecordsOutput, error) {
	c.gets.Add(1)
	began := time.Now()
	defer func() { c.spent.Add(int64(time.Since(began))) }()
	return c.API.GetRecords(ctx, in, o...)
}

// idleRate runs a coordinator on an idle 4-shard stream and returns
// GetRecords calls per shard per second over d from the first read of the
// last shard (a window begun at an arbitrary phase of the polls can hold
// one poll fewer), and how long a call took on average.
func idleRate(t *testing.T, e *env, poll time.Duration, d time.Duration) (float64, time.Duration) {
	cc := &countingClient{API: e.client}
	cfg := e.config("a", newCollector().sink)
	cfg.Client = cc
	cfg.Poll = poll
	c := e.start(cfg)
	eventually(t, 10*time.Second, "every shard read once", func() bool { return cc.gets.Load() >= 4 })
	base, spent := cc.gets.Load(), cc.spent.Load()
	began := time.Now()
	time.Sleep(d)
	n := cc.gets.Load() - base
	rate := float64(n) / time.Since(began).Seconds() / 4
	var latency time.Duration
	if n > 0 {
		latency = time.Duration((cc.spent.Load() - spent) / n)
	}
	if err := c.Stop(e.ctx(5 * time.Second)); err != nil {
		t.Fatal(err)
	}
	return rate, latency
}

// Idle polling stays within the service's budget of 5 GetRecords per shard
// per second, even at the smallest poll interval.
func TestIdlePollingWithinReadBudget(t *testing.T) {
	e, _ := memEnv(t, 4)
	for _, poll := range []time.Duration{time.Millisecond /* clamped to 200 ms */, time.Second} {
		// 2.5 s: two polls at 1 s whatever their phase against the window.
		rate, latency := idleRate(t, e, poll, 2500*time.Millisecond)
		t.Logf("poll %v: %.2f GetRecords/shard/s idle", poll, rate)
		checkIdleRate(t, poll, rate, latency)
		if poll == time.Second && rate > 1.5 {
			t.Errorf("poll 1s: %.2f GetRecords/shard/s, want about 1", rate)
		}
	}
}

// checkIdleRate bounds an idle shard's GetRecords rate at a poll interval
// (clamped to at least 200 ms) from above by the service's budget of 5 a
// second, and from below by half the rate that interval and the calls'
// latency allow (a reader reads, waits the interval, reads), so a reader
// that stopped polling fails too.
func checkIdleRate(t *testing.T, poll time.Duration, rate float64, latency time.Duration) {
	t.Helper()
	if rate > 5 {
		t.Errorf("poll %v: %.2f GetRecords/shard/s idle, over the budget of 5", poll, rate)
	}
	if floor := 0.5 * float64(time.Second) / float64(max(poll, 200*time.Millisecond)+latency); rate < floor {
		t.Errorf("poll %v: %.2f GetRecords/shard/s idle (%v a call), under %.2f: the readers stopped polling", poll, rate, latency, floor)
	}
}

// KPL aggregates are expanded; a checkpoint inside an aggregate resumes at
// the next sub-record, not after the whole aggregate.
func TestKPLAggregateResumesInsideTheAggregate(t *testing.T) {
	e, _ := memEnv(t, 1)
	testKPLAggregateResumesInside(t, e)
}

func testKPLAggregateResumesInside(t *testing.T, e *env) {
	col := newCollector()
	col.hold = func(r *shard.Record) bool { return string(r.Data) == "b:0" }
	cfg := e.config("a", col.sink)
	cfg.Start = shard.Position{Kind: shard.Horizon}
	c := e.start(cfg)
	agg := kpl.Aggregate([]kpl.Record{{PartitionKey: "a", Data: []byte("a:0")}, {PartitionKey: "b", Data: []byte("b:0")}, {PartitionKey: "c", Data: []byte("c:0")}})
	if _, err := e.client.PutRecord(e.ctx(5*time.Second), &kinesis.PutRecordInput{StreamName: aws.String(e.stream), PartitionKey: aws.String("agg"), Data: agg}); err != nil {
		t.Fatal(err)
	}
	e.put("d", 0)
	recs := col.waitN(t, 4)
	if got := dataOf(recs); got != " a:0 b:0 c:0 d:0" {
		t.Fatalf("delivered%s, want the three sub-records then d:0", got)
	}
	for i, r := range recs[:3] {
		if r.SubSequence != int64(i) || r.PartitionKey != string(r.Data[:1]) || r.SequenceNumber != recs[0].SequenceNumber {
			t.Fatalf("sub-record %d: sub %d key %q seq %s", i, r.SubSequence, r.PartitionKey, r.SequenceNumber)
		}
	}
	eventually(t, 5*time.Second, "checkpoint at sub-record 0", func() bool {
		l := e.lease(recs[0].ShardID)
		return l.Checkpoint == recs[0].SequenceNumber && l.SubSequence == 0
	})
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	_ = c.Stop(ctx) // b:0 stays unsettled
	col2 := newCollector()
	e.start(e.config("b", col2.sink))
	if got := dataOf(col2.waitN(t, 3)); got != " b:0 c:0 d:0" {
		t.Fatalf("after restart delivered%s, want b:0 c:0 d:0", got)
	}
}

// A corrupt aggregate is delivered whole, so the subscriber can reject it.
func TestCorruptAggregateDeliveredWhole(t *testing.T) {
	e, _ := memEnv(t, 1)
	col := newCollector()
	cfg := e.config("a", col.sink)
	e.start(cfg)
	agg := kpl.Aggregate([]kpl.Record{{PartitionKey: "a", Data: []byte("a:0")}})
	agg[len(agg)-1] ^= 0xff // break the MD5
	if _, err := e.client.PutRecord(e.ctx(5*time.Second), &kinesis.PutRecordInput{StreamName: aws.String(e.stream), PartitionKey: aws.String("agg"), Data: agg}); err != nil {
		t.Fatal(err)
	}
	r := col.waitN(t, 1)[0]
	if r.PartitionKey != "agg" || string(r.Data) != string(agg) {
		t.Fatalf("got key %q data %q, want the corrupt record as it was", r.PartitionKey, r.Data)
	}
}

// A read's aggregates have their MD5s checked together (side by side): a
// corrupt one among good ones is still delivered whole, in its place, and
// the good ones around it expanded.
func TestCorruptAggregateAmongOthersDeliveredWhole(t *testing.T) {
	e, _ := memEnv(t, 1)
	col := newCollector()
	e.start(e.config("a", col.sink))
	aggOf := func(data ...string) []byte {
		var recs []kpl.Record
		for _, d := range data {
			recs = append(recs, kpl.Record{PartitionKey: d[:1], Data: []byte(d)})
		}
		return kpl.Aggregate(recs)
	}
	bad := aggOf("c:0")
	bad[len(kpl.Magic)+2] ^= 0xff // break the body under its MD5
	// The corrupt one is the 19th record: the reader checks sixteen at a
	// time, so it is in the second sixteen.
	datas := [][]byte{aggOf("a:0", "a:1"), aggOf("b:0")}
	want := []string{"a:0", "a:1", "b:0"}
	for i := range 16 {
		g := fmt.Sprintf("g:%d", i)
		datas, want = append(datas, aggOf(g)), append(want, g)
	}
	datas = append(datas, bad, aggOf("d:0", "e:0"), []byte("f:0"))
	want = append(want, string(bad), "d:0", "e:0", "f:0")
	var entries []types.PutRecordsRequestEntry
	for _, data := range datas {
		entries = append(entries, types.PutRecordsRequestEntry{PartitionKey: aws.String("agg"), Data: data})
	}
	if _, err := e.client.PutRecords(e.ctx(5*time.Second), &kinesis.PutRecordsInput{StreamName: aws.String(e.stream), Records: entries}); err != nil {
		t.Fatal(err)
	}
	recs := col.waitN(t, len(want))
	var got []string
	for _, r := range recs {
		got = append(got, string(r.Data))
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Fatalf("delivered (-want +got):\n%s", diff)
	}
	if r := recs[len(want)-4]; r.PartitionKey != "agg" {
		t.Fatalf("the corrupt aggregate came under key %q, want its record's, agg", r.PartitionKey)
	}
}

// An owner that died (its counters stand still) loses its leases after the
// failover time as observed locally, and well within twice that.
func TestExpiredLeasesTakenAfterFailover(t *testing.T) {
	e, _ := memEnv(t, 2)
	for _, id := range e.shards() {
		l := lease.Lease{Key: lease.KeyFor("test/"+e.stream, id), ShardID: id, Owner: "dead"}
		if _, err := e.store.Create(context.Background(), l); err != nil {
			t.Fatal(err)
		}
	}
	cfg := e.config("a", newCollector().sink)
	began := time.Now()
	c := e.start(cfg)
	if n := len(c.Owned()); n != 0 {
		t.Fatalf("took %d live-looking leases at once, want none before the failover time", n)
	}
	eventually(t, 5*time.Second, "both expired leases taken", func() bool { return len(c.Reading()) == 2 })
	took := time.Since(began)
	if took < cfg.Failover || took > 2*cfg.Failover {
		t.Fatalf("took the leases after %v, want between the failover time %v and twice it", took, cfg.Failover)
	}
	t.Logf("failover after %v (failover time %v)", took, cfg.Failover)
}

// Two survivors of a dead owner walk its expired leases in the same order;
// the one that loses the race for the first takes the next in the same pass
// (not one lease interval later), so failover does not grow by a pass.
func TestLostRaceForExpiredLeaseTakesTheNext(t *testing.T) {
	e, _ := memEnv(t, 4)
	ids := e.shards()
	for i, owner := range []string{"dead", "dead", "c", "b"} {
		l := lease.Lease{Key: lease.KeyFor("test/"+e.stream, ids[i]), ShardID: ids[i], Owner: owner}
		if _, err := e.store.Create(context.Background(), l); err != nil {
			t.Fatal(err)
		}
	}
	rb := &rivalStore{Store: e.store, rival: "c", took: make(chan int64, 1)}
	cfgB := e.config("b", newCollector().sink)
	cfgB.Leases = withMembers(rb, e.store)
	cfgC := e.config("c", newCollector().sink)
	cfgC.Failover = 4 * cfgB.Failover // c notices the dead owner later: b walks both expired leases
	b := e.start(cfgB)
	c := e.start(cfgC)
	eventually(t, 10*time.Second, "b and c hold their own lease", func() bool {
		return slices.Equal(b.Owned(), ids[3:]) && slices.Equal(c.Owned(), ids[2:3])
	})
	var lostAt int64
	select {
	case lostAt = <-rb.took:
	case <-e.ctx(10 * time.Second).Done():
		t.Fatal("b never raced for an expired lease")
	}
	eventually(t, 10*time.Second, "b holds the second expired lease", func() bool { return slices.Contains(b.Owned(), ids[1]) })
	if at := rb.tookAt(ids[1]); at != lostAt {
		t.Fatalf("b took the next expired lease %d lease passes after losing the race, want in the same pass", at-lostAt)
	}
	eventually(t, 10*time.Second, "a 2/2 split", func() bool { return len(b.Owned()) == 2 && len(c.Owned()) == 2 })
}

// rivalStore makes its coordinator lose the race for the first expired
// lease it takes (the rival takes it just before) and notes, for every
// lease it takes, how many listings it had made by then.
type rivalStore struct {
	lease.Store
	rival string
	lists atomic.Int64
	raced atomic.Bool
	took  chan int64 // the listing count when the race was lost
	mu    sync.Mutex
	at    map[string]int64
}

func (s *rivalStore) List(ctx context.Context, ns string) ([]lease.Lease, error) {
	s.lists.Add(1)
	return s.Store.List(ctx, ns)
}

func (s *rivalStore) Take(ctx context.Context, l lease.Lease, owner string) (lease.Lease, error) {
	if l.Owner == "dead" && s.raced.CompareAndSwap(false, true) {
		if _, err := s.Store.Take(ctx, l, s.rival); err != nil {
			return lease.Lease{}, err
		}
		s.took <- s.lists.Load()
		return lease.Lease{}, fmt.Errorf("raced: %w", lease.ErrLeaseLost)
	}
	nl, err := s.Store.Take(ctx, l, owner)
	if err == nil {
		s.mu.Lock()
		if s.at == nil {
			s.at = map[string]int64{}
		}
		s.at[l.ShardID] = s.lists.Load()
		s.mu.Unlock()
	}
	return nl, err
}

func (s *rivalStore) tookAt(shardID string) int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.at[shardID]
}

// A new subscription at Latest on a stream that was resharded before starts
// at today's tip: neither the closed parent nor the open children replay
// their history, and what is published after Start is read.
func TestLatestOnResplitStreamStartsAtTheTip(t *testing.T) {
	e, _ := memEnv(t, 1)
	for i := range 5 {
		e.put(fmt.Sprintf("old%d", i), 0)
	}
	parent := e.shards()[0]
	split(t, e, parent)
	for i := range 5 {
		e.put(fmt.Sprintf("old-child%d", i), 0)
	}
	col := newCollector()
	e.start(e.config("a", col.sink))
	want := map[string]int{}
	for i := range 10 {
		key := fmt.Sprintf("new%d", i)
		e.put(key, 0)
		want[key] = 1
	}
	checkKeyOrder(t, col.waitN(t, 10), want)
	if got := e.lease(parent).Checkpoint; got != lease.CheckpointShardEnd {
		t.Fatalf("closed parent's lease checkpoint %q, want SHARD_END", got)
	}
}

// countingStore counts lease-store writes.
type countingStore struct {
	lease.Store
	writes atomic.Int64
}

func (s *countingStore) Renew(ctx context.Context, l lease.Lease) (lease.Lease, error) {
	s.writes.Add(1)
	return s.Store.Renew(ctx, l)
}

func (s *countingStore) Checkpoint(ctx context.Context, l lease.Lease, cp string, sub int64) (lease.Lease, error) {
	s.writes.Add(1)
	return s.Store.Checkpoint(ctx, l, cp, sub)
}

// Steady-state lease writes: an idle shard costs one renewal per Renew, a
// busy one a checkpoint per Checkpoint interval and no renewal on top.
func TestLeaseWritesPerShard(t *testing.T) {
	e, _ := memEnv(t, 2)
	cs := &countingStore{Store: e.store}
	cfg := e.config("a", newCollector().sink)
	cfg.Leases = cs
	cfg.Renew, cfg.Checkpoint, cfg.Failover = 150*time.Millisecond, 50*time.Millisecond, time.Second
	c := e.start(cfg)
	// measure gives the writes per shard per second, and how many rounds
	// of records per second reached the shards (busy).
	measure := func(d time.Duration, busy bool) (float64, float64) {
		base, began, rounds := cs.writes.Load(), time.Now(), 0
		for time.Since(began) < d {
			if busy {
				for i := range 4 {
					e.put(fmt.Sprintf("k%d", i), 0) // both shards get records
				}
				rounds++
			}
			time.Sleep(5 * time.Millisecond)
		}
		secs := time.Since(began).Seconds()
		return float64(cs.writes.Load()-base) / secs / 2, float64(rounds) / secs
	}
	idle, _ := measure(time.Second, false)
	busy, arrivals := measure(time.Second, true)
	t.Logf("lease writes per shard per second: idle %.1f (Renew %v), busy %.1f (Checkpoint %v)", idle, cfg.Renew, busy, cfg.Checkpoint)
	// Bounded on both sides: too many writes cost money, too few mean
	// leases expire (idle) or progress is not saved (busy). The busy floor
	// is above the renewal rate, so renewals alone do not reach it.
	if want := float64(time.Second) / float64(cfg.Renew); idle > want*1.3 || idle < want*0.5 {
		t.Errorf("idle: %.1f writes/shard/s, want about %.1f (one renewal per Renew)", idle, want)
	}
	// A checkpoint saves progress, so there is none more often than
	// records arrive: a loaded -race run may put fewer rounds a second
	// than there are Checkpoint intervals (the floor then follows them).
	if want := float64(time.Second) / float64(cfg.Checkpoint); busy > want*1.3 || busy < min(want, arrivals)*0.5 {
		t.Errorf("busy: %.1f writes/shard/s with %.1f rounds of records a second, want about %.1f (a checkpoint per Checkpoint interval, replacing renewals)", busy, arrivals, want)
	}
	_ = c
}

// Three instances on four shards settle at 2/1/1 (the ceil of the fair
// share leaves nobody idle) and then stop moving leases; every lease handed
// over goes to the instance that asked for it (no third instance or the
// releaser grabs it first: no ping-pong).
func TestThreeCoordinatorsSettleWithoutPingPong(t *testing.T) {
	e, _ := memEnv(t, 4)
	rs := &recordingStore{Store: e.store}
	e.store = rs
	var cs []*shard.Coordinator
	for _, o := range []string{"a", "b", "c"} {
		cs = append(cs, e.start(e.config(o, newCollector().sink)))
	}
	counts := func() []int {
		var n []int
		for _, c := range cs {
			n = append(n, len(c.Reading()))
		}
		slices.Sort(n)
		return n
	}
	eventually(t, 10*time.Second, "a 1/1/2 split", func() bool { return slices.Equal(counts(), []int{1, 1, 2}) })
	takes := len(rs.events("take"))
	// Thirty more lease passes (ten per instance): any move would show.
	lists := rs.lists.Load()
	eventually(t, 10*time.Second, "thirty lease passes", func() bool { return rs.lists.Load() >= lists+30 })
	if moved := rs.events("take")[takes:]; len(moved) != 0 || !slices.Equal(counts(), []int{1, 1, 2}) {
		t.Fatalf("leases kept moving after balance: %v, counts %v", moved, counts())
	}
	asked := map[string]string{} // lease key -> asker of the open request
	handoffs := 0
	for _, ev := range rs.events("") {
		switch ev.op {
		case "ask":
			asked[ev.key] = ev.owner
		case "take":
			if to, ok := asked[ev.key]; ok {
				handoffs++
				if ev.owner != to {
					t.Errorf("lease %s asked for by %s was taken by %s", ev.key, to, ev.owner)
				}
				delete(asked, ev.key)
			}
		}
	}
	if handoffs < 2 {
		t.Fatalf("%d handoffs seen; the test needs the later instances to ask the first for leases", handoffs)
	}
}

// recordingStore records successful takes and handoff requests in order,
// and counts listings (one per lease pass).
type recordingStore struct {
	lease.Store
	lists atomic.Int64
	mu    sync.Mutex
	log   []storeEvent
}

type storeEvent struct{ op, key, owner string }

func (s *recordingStore) add(op, key, owner string) {
	s.mu.Lock()
	s.log = append(s.log, storeEvent{op, key, owner})
	s.mu.Unlock()
}

// events returns the events of op so far ("" for all).
func (s *recordingStore) events(op string) []storeEvent {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []storeEvent
	for _, ev := range s.log {
		if op == "" || ev.op == op {
			out = append(out, ev)
		}
	}
	return out
}

func (s *recordingStore) List(ctx context.Context, ns string) ([]lease.Lease, error) {
	s.lists.Add(1)
	return s.Store.List(ctx, ns)
}

func (s *recordingStore) Take(ctx context.Context, l lease.Lease, owner string) (lease.Lease, error) {
	nl, err := s.Store.Take(ctx, l, owner)
	if err == nil {
		s.add("take", l.Key, owner)
	}
	return nl, err
}

func (s *recordingStore) RequestHandoff(ctx context.Context, l lease.Lease, to string) (lease.Lease, error) {
	nl, err := s.Store.RequestHandoff(ctx, l, to)
	if err == nil {
		s.add("ask", l.Key, to)
	}
	return nl, err
}

// A shard opened at Latest that delivered nothing keeps its place across a
// release: a record that arrived while its reader slept is read by the next
// owner, although that one starts at Latest too.
func TestReleaseBeforeFirstRecordKeepsThePlace(t *testing.T) {
	eachLiveness(t, testReleaseBeforeFirstRecordKeepsThePlace)
}

func testReleaseBeforeFirstRecordKeepsThePlace(t *testing.T, l shard.Liveness) {
	e, _ := memEnvIn(t, 1, l)
	colA := newCollector()
	cfgA := e.config("a", colA.sink)
	read := &firstReadClient{API: e.client, done: make(chan struct{})} // no wake-up hook: A sleeps its poll
	cfgA.Client = read
	cfgA.Poll = time.Hour
	a := e.start(cfgA)
	select {
	case <-read.done:
	case <-e.ctx(5 * time.Second).Done():
		t.Fatal("A's reader made no first read")
	}
	e.put("k", 0) // after A's first (empty) read, before its next
	if err := a.Stop(e.ctx(5 * time.Second)); err != nil {
		t.Fatal(err)
	}
	if n := len(colA.records()); n != 0 {
		t.Fatalf("A delivered %d records; the test needs it to have read none", n)
	}
	colB := newCollector()
	e.start(e.config("b", colB.sink))
	e.put("k", 1)
	checkKeyOrder(t, colB.waitN(t, 2), map[string]int{"k": 2})
}

// firstReadClient closes done when its first GetRecords has returned.
type firstReadClient struct {
	kinesisapi.API
	once sync.Once
	done chan struct{}
}

func (c *firstReadClient) GetRecords(ctx context.Context, in *kinesis.GetRecordsInput, o ...func(*kinesis.Options)) (*kinesis.GetRecordsOutput, error) {
	out, err := c.API.GetRecords(ctx, in, o...)
	c.once.Do(func() { close(c.done) })
	return out, err
}

// Once a finished parent is past retention (no longer listed), its lease is
// deleted; its children keep reading.
func TestLeasesOfExpiredShardsAreDeleted(t *testing.T) {
	now := time.Now()
	var mu sync.Mutex
	clock := func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
	srv := kinesistest.New(kinesistest.WithClock(clock), kinesistest.WithRetention(time.Hour))
	e := &env{t: t, client: srv, store: lease.NewMemory()}
	e.create(1)
	col := newCollector()
	e.start(e.config("a", col.sink))
	parent := e.shards()[0]
	split(t, e, parent)
	eventually(t, 5*time.Second, "the parent read to its end", func() bool { return e.lease(parent).Checkpoint == lease.CheckpointShardEnd })
	mu.Lock()
	now = now.Add(2 * time.Hour) // the parent leaves ListShards
	mu.Unlock()
	eventually(t, 5*time.Second, "the parent's lease deleted", func() bool {
		_, err := e.store.Get(context.Background(), lease.KeyFor("test/"+e.stream, parent))
		return errors.Is(err, lease.ErrNotFound)
	})
	want := map[string]int{}
	e.publish(want, 10, 10)
	checkKeyOrder(t, col.waitN(t, 10), want)
}

// A sink that breaks its contract, failing after taking a whole run, must
// not crash the reader: the shard is reopened at its checkpoint and the
// run delivered again.
func TestSinkFailingAfterTakingAllIsSurvived(t *testing.T) {
	e, _ := memEnv(t, 1)
	col := newCollector()
	var failed atomic.Bool
	cfg := e.config("a", func(ctx context.Context, rs []shard.Record) (int, error) {
		if failed.CompareAndSwap(false, true) {
			return len(rs), errors.New("sink broke")
		}
		return col.sink(ctx, rs)
	})
	cfg.Start = shard.Position{Kind: shard.Horizon}
	for i := range 3 {
		e.put("k", i)
	}
	e.start(cfg)
	if got := dataOf(col.waitN(t, 3)); got != " k:0 k:1 k:2" {
		t.Fatalf("after the sink failed, delivered%s; want k:0 k:1 k:2 again", got)
	}
}
