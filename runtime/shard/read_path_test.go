package shard_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/kinesis"
	"github.com/aws/aws-sdk-go-v2/service/kinesis/types"

	"github.com/kinesisgen/kinesisgen/runtime/kinesisapi"
	"github.com/kinesisgen/kinesisgen/runtime/kpl"
	"github.com/kinesisgen/kinesisgen/runtime/lease"
	"github.com/kinesisgen/kinesisgen/runtime/shard"
)

// Issue 9, scenario 13: one GetRecords answer without NextShardIterator
// (and without ChildShards) on a shard the stream lists open does not end
// the shard: the reader reopens after its last record and reads on.
func TestNilNextIteratorOnOpenShardReadsOn(t *testing.T) {
	e, _ := memEnv(t, 1)
	testNilNextIteratorOnOpenShard(t, e)
}

func testNilNextIteratorOnOpenShard(t *testing.T, e *env) {
	cut := &cutIteratorClient{API: e.client}
	col := newCollector()
	cfg := e.config("a", col.sink)
	cfg.Client = cut
	cfg.Start = shard.Position{Kind: shard.Horizon}
	want := map[string]int{}
	e.publish(want, 5, 1)
	e.start(cfg)
	col.waitN(t, 5)
	if cut.cut.Load() != 1 {
		t.Fatalf("the first read with records was not answered without a next iterator (cut %d)", cut.cut.Load())
	}
	e.publish(want, 5, 1)
	checkKeyOrder(t, col.waitN(t, 10), want)
	if l := e.lease(e.shards()[0]); l.Checkpoint == lease.CheckpointShardEnd {
		t.Fatalf("an open shard was checkpointed SHARD_END after one answer without a next iterator")
	}
}

// cutIteratorClient drops NextShardIterator from the first GetRecords answer
// that carries records, as a faulty server or proxy might.
type cutIteratorClient struct {
	kinesisapi.API
	cut atomic.Int32
}

func (c *cutIteratorClient) GetRecords(ctx context.Context, in *kinesis.GetRecordsInput, o ...func(*kinesis.Options)) (*kinesis.GetRecordsOutput, error) {
	out, err := c.API.GetRecords(ctx, in, o...)
	if err == nil && len(out.Records) > 0 && c.cut.CompareAndSwap(0, 1) {
		cp := *out
		cp.NextShardIterator, cp.ChildShards = nil, nil
		return &cp, nil
	}
	return out, err
}

// Issue 9, scenario 7: a parent shard that no longer exists (past the
// stream's retention: not listed, and ResourceNotFound when read) whose
// lease was never checkpointed SHARD_END counts as read to its end: Start
// succeeds, the child is read, the parent's lease is finished, and it is
// logged.
func TestParentPastRetentionCountsAsFinished(t *testing.T) {
	e, _ := memEnv(t, 1)
	testParentPastRetention(t, e)
}

func testParentPastRetention(t *testing.T, e *env) {
	ctx := e.ctx(10 * time.Second)
	ns := "test/" + e.stream
	child := e.shards()[0]
	const gone = "shardId-000000000042" // on no backend's stream
	for _, l := range []lease.Lease{
		{Key: lease.KeyFor(ns, gone), ShardID: gone, Checkpoint: ""},
		{Key: lease.KeyFor(ns, child), ShardID: child, ParentShardIDs: []string{gone}},
	} {
		if _, err := e.store.Create(ctx, l); err != nil {
			t.Fatal(err)
		}
	}
	want := map[string]int{}
	e.publish(want, 5, 5) // before Start: the child is read from its horizon
	col := newCollector()
	logs := &syncBuffer{}
	cfg := e.config("a", col.sink)
	cfg.Logger = slog.New(slog.NewTextHandler(logs, nil))
	c := e.newCoordinator(cfg)
	if err := c.Start(ctx); err != nil {
		t.Fatalf("Start failed for a parent past retention: %v", err)
	}
	t.Cleanup(func() { _ = c.Stop(context.Background()) })
	e.publish(want, 5, 5)
	checkKeyOrder(t, col.waitN(t, 10), want)
	eventually(t, 5*time.Second, "the gone parent's lease finished or deleted", func() bool {
		l, err := e.store.Get(context.Background(), lease.KeyFor(ns, gone))
		return errors.Is(err, lease.ErrNotFound) || (err == nil && l.Checkpoint == lease.CheckpointShardEnd)
	})
	if !strings.Contains(logs.String(), gone) {
		t.Errorf("nothing logged about the gone parent %s; log:\n%s", gone, logs.String())
	}
}

// syncBuffer is a log destination safe for concurrent writers.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// Issue 9, scenario 4: a KPL sub-record whose explicit hash key (or, without
// one, the MD5 of its partition key) lies outside the hash-key range of the
// shard it was read from is not delivered, as the KCL does: after a reshard
// the KPL sends it again to the shard that owns its key.
func TestKPLSubRecordsOutsideTheShardAreFiltered(t *testing.T) {
	e, _ := memEnv(t, 2)
	testKPLSubRecordsOutsideTheShard(t, e)
}

func testKPLSubRecordsOutsideTheShard(t *testing.T, e *env) {
	out, err := e.client.ListShards(e.ctx(10*time.Second), &kinesis.ListShardsInput{StreamName: aws.String(e.stream)})
	if err != nil || len(out.Shards) != 2 {
		t.Fatalf("ListShards: %v (%d shards)", err, len(out.Shards))
	}
	ranges := make([]shard.HashRange, 2)
	for i, s := range out.Shards {
		start, _ := shard.ParseHashKey(aws.ToString(s.HashKeyRange.StartingHashKey))
		end, _ := shard.ParseHashKey(aws.ToString(s.HashKeyRange.EndingHashKey))
		ranges[i] = shard.HashRange{Start: start, End: end}
	}
	home, away := out.Shards[0], out.Shards[1]
	keyIn := func(r shard.HashRange, prefix string) string {
		for i := 0; ; i++ {
			if k := fmt.Sprintf("%s%d", prefix, i); r.Contains(shard.HashKeyOf(k)) {
				return k
			}
		}
	}
	agg := kpl.Aggregate([]kpl.Record{
		{PartitionKey: "ehk-home", ExplicitHashKey: aws.ToString(home.HashKeyRange.EndingHashKey), Data: []byte("ehk-home")},
		{PartitionKey: keyIn(ranges[0], "ehk-away"), ExplicitHashKey: aws.ToString(away.HashKeyRange.StartingHashKey), Data: []byte("ehk-away")},
		{PartitionKey: keyIn(ranges[0], "pk-home"), Data: []byte("pk-home")},
		{PartitionKey: keyIn(ranges[1], "pk-away"), Data: []byte("pk-away")},
	})
	col := newCollector()
	cfg := e.config("a", col.sink)
	cfg.Start = shard.Position{Kind: shard.Horizon}
	e.start(cfg)
	for _, data := range [][]byte{agg, []byte("last")} {
		if _, err := e.client.PutRecord(e.ctx(10*time.Second), &kinesis.PutRecordInput{
			StreamName: aws.String(e.stream), PartitionKey: aws.String("agg"), Data: data,
			ExplicitHashKey: home.HashKeyRange.StartingHashKey,
		}); err != nil {
			t.Fatal(err)
		}
	}
	recs := col.wait(t, 20*time.Second, "the record after the aggregate", func(r []*shard.Record) bool {
		return len(r) > 0 && string(r[len(r)-1].Data) == "last"
	})
	if got := dataOf(recs); got != " ehk-home pk-home last" {
		t.Fatalf("delivered%s; want ehk-home pk-home last (sub-records hashed outside shard %s filtered out)", got, aws.ToString(home.ShardId))
	}
}

// Issue 9, scenario 1: a shard opened at Latest whose records were handed
// out but none settled is stopped (a slow handler at shutdown). The
// lease, left to expire while the handler runs (issue 29), keeps a position
// at or before the first unsettled record, so the next owner, although it
// starts at Latest too, reads them again.
func TestStopWithUnsettledRecordsAtLatestLosesNothing(t *testing.T) {
	eachLiveness(t, func(t *testing.T, l shard.Liveness) {
		e, _ := memEnvIn(t, 1, l)
		testStopWithUnsettledAtLatest(t, e)
	})
}

func testStopWithUnsettledAtLatest(t *testing.T, e *env) {
	col := newCollector()
	col.hold = func(*shard.Record) bool { return true } // a stuck handler
	a := e.start(e.config("a", col.sink))
	want := map[string]int{}
	e.publish(want, 3, 1)
	first := col.waitN(t, 3)[0].SequenceNumber
	stop, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	if err := a.Stop(stop); !errors.Is(err, shard.ErrLeftToExpire) {
		t.Fatalf("Stop with a handler running past its deadline = %v, want ErrLeftToExpire", err)
	}
	if l := e.lease(e.shards()[0]); l.Checkpoint != first {
		t.Fatalf("lease checkpoint %q after Stop, want the first unsettled record's %s", l.Checkpoint, first)
	}
	col2 := newCollector()
	e.start(e.config("b", col2.sink))
	e.publish(want, 1, 1)
	checkKeyOrder(t, col2.waitN(t, 4), want)
}

// Issue 9, scenario 1, by a graceful handoff: an owner asked for a shard
// opened at Latest whose delivered records have not settled keeps it
// (issue 29: the handoff is postponed, never cut short) and reads on; once
// they settle, it hands the shard over at a checkpoint past them, and the
// asker reads what comes after. Nothing is lost, and nothing handled twice.
func TestHandoffWithUnsettledRecordsAtLatestLosesNothing(t *testing.T) {
	eachLiveness(t, func(t *testing.T, l shard.Liveness) {
		e, _ := memEnvIn(t, 2, l)
		testHandoffWithUnsettledAtLatest(t, e)
	})
}

func testHandoffWithUnsettledAtLatest(t *testing.T, e *env) {
	cols := newCollectors(2)
	cols[0].hold = func(*shard.Record) bool { return true } // a's handler is stuck
	log := &deliveries{}
	cps, leases := newCheckpoints(e.store, log)
	cfgA, cfgB := e.config("a", log.wrap("a", cols[0].sink)), e.config("b", log.wrap("b", cols[1].sink))
	cfgA.Leases, cfgB.Leases = leases, leases
	var counters [2]shard.LeaseCounters
	cfgA.Counters, cfgB.Counters = &counters[0], &counters[1]
	a := e.start(cfgA)
	want := map[string]int{}
	e.publish(want, 20, 20)
	cols[0].waitN(t, 20)
	b := e.start(cfgB)
	// (A lease a lost on the way, fenced on a loaded machine, is taken as a
	// crash failover takes it: no handoff to postpone.)
	eventually(t, 20*time.Second, "a postpones the handoff", func() bool {
		return counters[0].Postponed.Load() > 0 || counters[0].Lost.Load() > 0
	})
	if got := b.Reading(); len(got) != 0 && counters[0].Lost.Load() == 0 {
		t.Fatalf("b reads %v while a's handlers still run their records", got)
	}
	cols[0].mu.Lock()
	for _, r := range cols[0].got {
		r.Settle()
	}
	cols[0].hold = nil
	cols[0].mu.Unlock()
	eventually(t, 20*time.Second, "a 1/1 split", func() bool { return len(a.Reading()) == 1 && len(b.Reading()) == 1 })
	e.publish(want, 20, 20)
	all := func() []*shard.Record { return append(cols[0].records(), cols[1].records()...) }
	cols[1].wait(t, 20*time.Second, "all 40 records", func([]*shard.Record) bool {
		seen := map[recordID]bool{}
		for _, r := range all() {
			seen[idOf(r)] = true
		}
		return len(seen) >= 40
	})
	// Graceful: nothing twice, unless a lease was lost on the way (a fence
	// on a loaded machine, with the short failover time of these tests).
	lost := counters[0].Lost.Load() + counters[1].Lost.Load()
	if dups := checkUnderFences(t, log, cps, want, lost); lost > 0 {
		t.Logf("%d leases lost: %d records delivered again, none checkpointed before", lost, dups)
	}
}

// Issue 9, scenario 2: a shard opened at Latest whose GetRecords fail long
// enough for its iterator to expire before any record was handed out
// reopens where it first opened, not at a new Latest: the records written
// meanwhile are read.
func TestExpiredIteratorBeforeFirstRecordAtLatestLosesNothing(t *testing.T) {
	eachLiveness(t, func(t *testing.T, l shard.Liveness) {
		e, _ := memEnvIn(t, 1, l)
		testExpiredIteratorBeforeFirstRecord(t, e)
	})
}

func testExpiredIteratorBeforeFirstRecord(t *testing.T, e *env) {
	fc := &faultyReads{API: e.client}
	col := newCollector()
	cfg := e.config("a", col.sink)
	cfg.Client = fc
	e.start(cfg)
	eventually(t, 5*time.Second, "a first read", func() bool { return fc.reads.Load() > 0 })
	fc.mode.Store(readsFail)
	base := fc.reads.Load()
	want := map[string]int{}
	e.publish(want, 5, 5)
	eventually(t, 5*time.Second, "reads failing after the publish", func() bool { return fc.reads.Load() > base+1 })
	fc.mode.Store(readsExpire)
	checkKeyOrder(t, col.waitN(t, 5), want)
}

// Issue 9, scenario 2, then a stop: GetRecords fail from the first read on,
// records are written, the owner stops; the next owner reads them.
func TestStopBeforeFirstRecordAtLatestLosesNothing(t *testing.T) {
	eachLiveness(t, func(t *testing.T, l shard.Liveness) {
		e, _ := memEnvIn(t, 1, l)
		testStopBeforeFirstRecord(t, e)
	})
}

func testStopBeforeFirstRecord(t *testing.T, e *env) {
	fc := &faultyReads{API: e.client}
	fc.mode.Store(readsFail)
	cfg := e.config("a", newCollector().sink)
	cfg.Client = fc
	a := e.start(cfg)
	want := map[string]int{}
	e.publish(want, 5, 5)
	eventually(t, 5*time.Second, "a failed read", func() bool { return fc.reads.Load() > 0 })
	if err := a.Stop(e.ctx(5 * time.Second)); err != nil {
		t.Fatal(err)
	}
	col := newCollector()
	e.start(e.config("b", col.sink))
	checkKeyOrder(t, col.waitN(t, 5), want)
}

const (
	readsPass = iota
	readsFail
	readsExpire // one ExpiredIteratorException, then pass
)

// faultyReads fails GetRecords as told (and hides the in-process server's
// wake-up hook: its reader polls).
type faultyReads struct {
	kinesisapi.API
	mode  atomic.Int32
	reads atomic.Int64
}

func (c *faultyReads) GetRecords(ctx context.Context, in *kinesis.GetRecordsInput, o ...func(*kinesis.Options)) (*kinesis.GetRecordsOutput, error) {
	c.reads.Add(1)
	switch c.mode.Load() {
	case readsFail:
		return nil, &types.ProvisionedThroughputExceededException{Message: aws.String("injected")}
	case readsExpire:
		c.mode.Store(readsPass)
		return nil, &types.ExpiredIteratorException{Message: aws.String("injected")}
	}
	return c.API.GetRecords(ctx, in, o...)
}

// Issues 9, scenarios 1 and 2, with a reshard: a shard opened at Latest is
// released before its first record, then split. The next owner resumes the
// closed parent at its pin, reads it to its end and starts the children:
// records written to the parent after the pin and to the children are read.
// With no record on the parent after the pin, the parent is read to its
// end all the same (kinesalite never answers AT_TIMESTAMP there).
func TestPinnedShardSplitWhileReleasedIsReadToItsEnd(t *testing.T) {
	eachLiveness(t, func(t *testing.T, l shard.Liveness) {
		for _, n := range []int{3, 0} {
			t.Run(fmt.Sprintf("%d on the parent", n), func(t *testing.T) {
				e, _ := memEnvIn(t, 1, l)
				testPinnedShardSplitWhileReleased(t, e, n)
			})
		}
	})
}

func testPinnedShardSplitWhileReleased(t *testing.T, e *env, onParent int) {
	a := e.start(e.config("a", newCollector().sink))
	parent := e.shards()[0]
	if err := a.Stop(e.ctx(5 * time.Second)); err != nil {
		t.Fatal(err)
	}
	want := map[string]int{}
	e.publish(want, onParent, 3) // on the parent, after a's opening
	split(t, e, parent)
	waitOpen(t, e, 2)
	e.publish(want, 10, 10) // on the children
	col := newCollector()
	e.start(e.config("b", col.sink))
	checkKeyOrder(t, col.waitN(t, onParent+10), want)
}

// Issue 9, scenario 2, at Start: the first owner of a shard at Latest is
// slow to open it (its GetShardIterator answers after twice the failover
// time). Whatever that does to it (Start failing after its retries, a fence,
// or a late opening), a record published after Start returns must be
// handled by someone: read by the slow owner if it opened, or by whoever
// opens the shard next from the lease's pin, which the listing that found
// the shard wrote, never from a later Latest.
func TestFirstOpeningThatNeverHappensLosesNothing(t *testing.T) {
	eachLiveness(t, testFirstOpeningThatNeverHappens)
}

func testFirstOpeningThatNeverHappens(t *testing.T, l shard.Liveness) {
	e, _ := memEnvIn(t, 1, l)
	colA := newCollector()
	cfg := e.config("a", colA.sink)
	cfg.Client = slowIterators{API: e.client, d: 2 * cfg.Failover}
	var a *shard.Coordinator
	for try := 1; a == nil; try++ {
		c, err := shard.New(cfg)
		if err != nil {
			t.Fatal(err)
		}
		switch err := c.Start(e.ctx(30 * time.Second)); {
		case err == nil:
			a = c
		case try == 3:
			t.Fatalf("Start failed %d times: %v", try, err)
		default:
			// A failed Start releases what it took; the app starts again.
			t.Logf("Start %d: %v", try, err)
		}
	}
	want := map[string]int{}
	e.publish(want, 3, 3)
	if err := a.Stop(e.ctx(5 * time.Second)); err != nil {
		t.Fatal(err)
	}
	colB := newCollector()
	e.start(e.config("b", colB.sink))
	// Every record handled by a before it stopped, or by b after.
	handled := map[string]bool{}
	for _, r := range colA.records() {
		handled[string(r.Data)] = true
	}
	missing := func(r []*shard.Record) int {
		seen := maps.Clone(handled)
		for _, x := range r {
			seen[string(x.Data)] = true
		}
		n := 0
		for key := range want {
			if !seen[key+":0"] {
				n++
			}
		}
		return n
	}
	recs := colB.wait(t, 10*time.Second, "every record handled by a or b", func(r []*shard.Record) bool { return missing(r) == 0 })
	t.Logf("a handled %d, b %d", len(colA.records()), len(recs))
}

// slowIterators answers GetShardIterator after d.
type slowIterators struct {
	kinesisapi.API
	d time.Duration
}

func (c slowIterators) GetShardIterator(ctx context.Context, in *kinesis.GetShardIteratorInput, o ...func(*kinesis.Options)) (*kinesis.GetShardIteratorOutput, error) {
	time.Sleep(c.d)
	return c.API.GetShardIterator(ctx, in, o...)
}

// renewalHangs is faultyReads whose GetShardIterator, once hang is set,
// closes renewing and hangs until its context ends.
type renewalHangs struct {
	*faultyReads
	hang     atomic.Bool
	renewing chan struct{}
}

func (c *renewalHangs) GetShardIterator(ctx context.Context, in *kinesis.GetShardIteratorInput, o ...func(*kinesis.Options)) (*kinesis.GetShardIteratorOutput, error) {
	if !c.hang.CompareAndSwap(true, false) {
		return c.faultyReads.GetShardIterator(ctx, in, o...)
	}
	close(c.renewing)
	<-ctx.Done()
	return nil, ctx.Err()
}

// heldRelease holds the first Release until release is closed, closing
// held first.
type heldRelease struct {
	lease.Store
	once          sync.Once
	held, release chan struct{}
}

func (s *heldRelease) Release(ctx context.Context, l lease.Lease) (lease.Lease, error) {
	s.once.Do(func() {
		close(s.held)
		<-s.release
	})
	return s.Store.Release(ctx, l)
}

// An iterator that expires and whose renewal hangs when Stop begins ends
// the reader at once, as a stop and not as a failed read: Stop does not
// wait for the renewal's deadline, no read failure shows in the shard's
// status and nothing is logged about the renewal. The settled records are
// checkpointed, and the next owner reads the unsettled ones again.
func TestStopWhileRenewingAnExpiredIterator(t *testing.T) {
	e, srv := memEnv(t, 1)
	id := e.shards()[0]
	fc := &renewalHangs{faultyReads: &faultyReads{API: srv}, renewing: make(chan struct{})}
	store := &heldRelease{Store: e.store, held: make(chan struct{}), release: make(chan struct{})}
	var logs syncBuffer
	col := newCollector()
	col.hold = func(r *shard.Record) bool { // 5..9 stay unsettled
		if string(r.Data) < "k0:5" {
			return false
		}
		go func() {
			// Its handler gives up when Stop, out of time, cancels its
			// context: so Stop releases the lease.
			<-r.Lease().Done()
			r.Stale()
		}()
		return true
	}
	cfg := e.config("a", col.sink)
	cfg.Client = fc
	cfg.Leases = withMembers(store, e.store)
	cfg.Logger = slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelWarn}))
	a := e.startStopped(cfg)
	e.publish(map[string]int{}, 10, 1)
	settled := col.waitN(t, 10)[4].SequenceNumber
	eventually(t, 5*time.Second, "the checkpoint at k0:4", func() bool { return e.lease(id).Checkpoint == settled })

	fc.hang.Store(true)
	fc.mode.Store(readsExpire)
	select {
	case <-fc.renewing:
	case <-time.After(5 * time.Second):
		t.Fatal("no iterator renewal within 5s")
	}
	began := time.Now()
	stopped := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond) // 5..9 never settle
		defer cancel()
		stopped <- a.Stop(ctx)
	}()
	select {
	case <-store.held: // the reader has ended, the final checkpoint is written
	case <-time.After(5 * time.Second):
		t.Fatal("Stop did not reach its release within 5s: the renewal held it")
	}
	if took := time.Since(began); took > 2*time.Second {
		t.Errorf("Stop took %s to stop a reader renewing its iterator", took)
	}
	st := a.Status()
	if len(st.Held) != 1 {
		t.Fatalf("held %+v during the release, want the one shard", st.Held)
	}
	if f := st.Held[0].ReadFailure; f.Count != 0 {
		t.Errorf("the stop shows as a failed read: %+v", f)
	}
	close(store.release)
	select {
	case err := <-stopped:
		t.Logf("Stop: %v", err) // the unsettled records, past its deadline
	case <-time.After(5 * time.Second):
		t.Fatal("Stop did not return within 5s of its release")
	}
	if strings.Contains(logs.String(), "iterator") {
		t.Errorf("the stop logged about the renewal:\n%s", logs.String())
	}
	if cp := e.lease(id).Checkpoint; cp != settled {
		t.Errorf("checkpoint %s after Stop, want the last settled record's %s", cp, settled)
	}

	col2 := newCollector()
	e.start(e.config("b", col2.sink))
	got := col2.waitN(t, 5)
	if data := dataOf(got); data != " k0:5 k0:6 k0:7 k0:8 k0:9" {
		t.Errorf("the next owner delivered%s, want k0:5 to k0:9 (the unsettled records, not the settled)", data)
	}
}
