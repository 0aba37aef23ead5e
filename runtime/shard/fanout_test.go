package shard_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/aws/retry"
	"github.com/aws/aws-sdk-go-v2/service/kinesis"
	"github.com/aws/aws-sdk-go-v2/service/kinesis/types"

	"github.com/kinesisgen/kinesisgen/runtime/kinesistest"
	"github.com/kinesisgen/kinesisgen/runtime/lease"
	"github.com/kinesisgen/kinesisgen/runtime/shard"
)

// fanEnv is memEnv with a registered stream consumer: its config reads
// every shard by enhanced fan-out through it.
func fanEnv(t *testing.T, shards int32, opts ...kinesistest.Option) (*env, *kinesistest.Server) {
	srv := kinesistest.New(opts...)
	e := &env{t: t, client: srv, store: lease.NewMemory()}
	e.create(shards)
	e.consumerARN = e.register("app")
	return e, srv
}

// fanHTTPEnv is fanEnv through the HTTP/2 test server: the coordinators
// use a real *kinesis.Client (TLS, HTTP/2, the SDK's event-stream reader
// on the network) with its own connection, and the test another.
func fanHTTPEnv(t *testing.T, shards int32, opts ...kinesistest.Option) (*env, *kinesistest.Server) {
	srv := kinesistest.New(opts...)
	h := kinesistest.NewHTTPServer(srv)
	t.Cleanup(h.Close)
	retries := func(o *kinesis.Options) { o.Retryer = retry.NewStandard() }
	e := &env{t: t, client: h.Client(retries), coordClient: h.Client(retries), store: lease.NewMemory()}
	e.create(shards)
	e.consumerARN = e.register("app")
	return e, srv
}

type newFanEnv = func(*testing.T, int32, ...kinesistest.Option) (*env, *kinesistest.Server)

// fanBackends runs a fan-out test in process and through the HTTP/2
// test server.
func fanBackends(t *testing.T, test func(t *testing.T, newEnv newFanEnv)) {
	t.Run("in-process", func(t *testing.T) { test(t, fanEnv) })
	t.Run("http2", func(t *testing.T) { test(t, fanHTTPEnv) })
}

// register registers a stream consumer on e's stream and returns its ARN
// once it is ACTIVE.
func (e *env) register(name string) string {
	e.t.Helper()
	ctx := e.ctx(10 * time.Second)
	sum, err := e.client.DescribeStreamSummary(ctx, &kinesis.DescribeStreamSummaryInput{StreamName: aws.String(e.stream)})
	if err != nil {
		e.t.Fatal(err)
	}
	out, err := e.client.RegisterStreamConsumer(ctx, &kinesis.RegisterStreamConsumerInput{StreamARN: sum.StreamDescriptionSummary.StreamARN, ConsumerName: aws.String(name)})
	if err != nil {
		e.t.Fatalf("RegisterStreamConsumer: %v", err)
	}
	arn := aws.ToString(out.Consumer.ConsumerARN)
	eventually(e.t, 10*time.Second, "consumer ACTIVE", func() bool {
		d, err := e.client.DescribeStreamConsumer(ctx, &kinesis.DescribeStreamConsumerInput{ConsumerARN: aws.String(arn)})
		return err == nil && d.ConsumerDescription.ConsumerStatus == types.ConsumerStatusActive
	})
	return arn
}

// Records published in bursts over several subscription lifetimes (and
// connection cuts in between) arrive once each, in each key's order, with
// no GetRecords call: the reader subscribes again after the last event's
// continuation every time a subscription ends.
func TestFanOutKeepsKeyOrderAcrossRenewalsAndCuts(t *testing.T) {
	fanBackends(t, testFanOutKeepsKeyOrderAcrossRenewalsAndCuts)
}

func testFanOutKeepsKeyOrderAcrossRenewalsAndCuts(t *testing.T, newEnv newFanEnv) {
	e, srv := newEnv(t, 4, kinesistest.WithSubscriptionLifetime(700*time.Millisecond))
	col := newCollector()
	log := &deliveries{}
	cfg := e.config("a", log.wrap("a", col.sink))
	var cps *checkpoints
	cps, cfg.Leases = newCheckpoints(e.store, log)
	cfg.Start = shard.Position{Kind: shard.Horizon}
	var lost shard.LeaseCounters
	cfg.Counters = &lost
	c := e.start(cfg)
	want := map[string]int{}
	total := 0
	distinct := func(recs []*shard.Record) int {
		seen := map[recordID]bool{}
		for _, r := range recs {
			seen[idOf(r)] = true
		}
		return len(seen)
	}
	for round := range 6 {
		e.publish(want, 40, 20)
		total += 40
		col.wait(t, 10*time.Second, fmt.Sprint(total, " records"), func(r []*shard.Record) bool { return distinct(r) >= total })
		if round%2 == 1 {
			if n := srv.CutSubscriptions(e.stream, ""); n == 0 {
				t.Fatalf("round %d: no subscription to cut", round)
			}
		}
		time.Sleep(300 * time.Millisecond)
	}
	e.publish(want, 40, 20)
	total += 40
	col.wait(t, 10*time.Second, fmt.Sprint(total, " records"), func(r []*shard.Record) bool { return distinct(r) >= total })
	time.Sleep(200 * time.Millisecond) // a duplicate would come now
	recs := col.records()
	// A lease the owner did not renew within the failover time (a machine
	// too loaded to run its renewals) is fenced, and its shard is read
	// again from the checkpoint, as at least once allows: then records
	// come twice, but only those past the checkpoint the owner had
	// stored; none is lost, each key's first deliveries stay in order.
	n := lost.Lost.Load()
	if dups := checkUnderFences(t, log, cps, want, n); n > 0 {
		t.Logf("%d leases fenced (not renewed in time): %d records delivered again of %d, none checkpointed before", n, dups, total)
	} else if len(recs) != total {
		t.Fatalf("%d deliveries, want %d", len(recs), total)
	}
	if n := srv.Calls(kinesistest.OpGetRecords); n != 0 {
		t.Errorf("%d GetRecords calls by a fan-out reader, want 0", n)
	}
	// Four shards over ~2.5 s of 0.7 s lifetimes, plus the cuts.
	if n := srv.Calls(kinesistest.OpSubscribeToShard); n < 12 {
		t.Errorf("%d SubscribeToShard calls, want renewals (at least 12)", n)
	}
	for _, sh := range c.Status().Held {
		if sh.BehindAt.IsZero() {
			t.Errorf("no MillisBehindLatest kept for shard %s", sh.ShardID)
		}
	}
}

// A cut in the middle of an event loses none of its records and repeats
// none that were delivered: the SDK hands over whole events only, and the
// reader subscribes again after the last whole one's continuation.
func TestFanOutCutMidEventLosesAndRepeatsNothing(t *testing.T) {
	fanBackends(t, testFanOutCutMidEventLosesAndRepeatsNothing)
}

func testFanOutCutMidEventLosesAndRepeatsNothing(t *testing.T, newEnv newFanEnv) {
	e, srv := newEnv(t, 1)
	col := newCollector()
	cfg := e.config("a", col.sink)
	cfg.Start = shard.Position{Kind: shard.Horizon}
	e.start(cfg)
	want := map[string]int{}
	e.publish(want, 10, 3)
	col.waitN(t, 10)
	for range 3 {
		// The cut event carries the records published now.
		stop := make(chan struct{})
		go func() {
			defer close(stop)
			for range 5 {
				srv.CutSubscriptions(e.stream, "")
				time.Sleep(20 * time.Millisecond)
			}
		}()
		e.publish(want, 30, 3)
		<-stop
	}
	recs := col.waitN(t, 100)
	time.Sleep(1500 * time.Millisecond) // a repeat would come with the next subscription
	checkKeyOrder(t, col.records(), want)
	if len(col.records()) != len(recs) {
		t.Fatalf("%d deliveries after settling down, want %d", len(col.records()), len(recs))
	}
}

// A connection cut mid-event is a subscription that broke off (logged at
// Warn with the cut), not one that ended normally: the SDK alone takes the
// cut for a clean end (wire.SubscribeToShardOptions).
func TestFanOutCutIsReportedAsBrokenOff(t *testing.T) {
	e, srv := fanEnv(t, 1)
	var logs syncBuffer
	col := newCollector()
	cfg := e.config("a", col.sink)
	cfg.Start = shard.Position{Kind: shard.Horizon}
	cfg.Logger = slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelWarn}))
	e.start(cfg)
	want := map[string]int{}
	e.publish(want, 5, 1)
	col.waitN(t, 5)
	if n := srv.CutSubscriptions(e.stream, ""); n != 1 {
		t.Fatalf("cut %d subscriptions, want 1", n)
	}
	eventually(t, 5*time.Second, "the cut logged", func() bool {
		return strings.Contains(logs.String(), "subscription broke off") && strings.Contains(logs.String(), "cut off")
	})
	e.publish(want, 5, 1)
	col.waitN(t, 10)
}

// A split and a merge while records flow: children start after their
// parents ended (ChildShards in the last event), as with polling.
func TestFanOutSplitMergeKeepsKeyOrder(t *testing.T) {
	fanBackends(t, testFanOutSplitMergeKeepsKeyOrder)
}

func testFanOutSplitMergeKeepsKeyOrder(t *testing.T, newEnv newFanEnv) {
	e, srv := newEnv(t, 1)
	testSplitMergeKeepsKeyOrder(t, e)
	if n := srv.Calls(kinesistest.OpGetRecords); n != 0 {
		t.Errorf("%d GetRecords calls by a fan-out reader, want 0", n)
	}
}

// The same on a server whose subscription of a closed shard never ends
// (kinesis-mock, LocalStack's Kinesis engine: no ChildShards, empty events
// after the last records): each parent is finished all the same, its
// reader confirming the end with GetRecords, and its children are read.
// Without that check the children never start.
func TestFanOutSplitMergeWhenSubscriptionsIgnoreShardEnd(t *testing.T) {
	fanBackends(t, testFanOutSplitMergeWhenSubscriptionsIgnoreShardEnd)
}

func testFanOutSplitMergeWhenSubscriptionsIgnoreShardEnd(t *testing.T, newEnv newFanEnv) {
	e, srv := newEnv(t, 1, kinesistest.WithSubscriptionIgnoringShardEnd())
	testSplitMergeKeepsKeyOrder(t, e)
	// Three closed shards (the parent, then both children at the merge),
	// each ended in one check or two: a GetRecords or a few each.
	if n := srv.Calls(kinesistest.OpGetRecords); n == 0 || n > 12 {
		t.Errorf("%d GetRecords calls, want a few to confirm the three closed shards' ends", n)
	}
}

// A graceful handoff between two fan-out instances delivers no record
// twice; the taker's subscription starts after the giver's checkpoint
// (its own subscription of the shard ended with the release).
func TestFanOutHandoffWhileConsumingHasNoDuplicates(t *testing.T) {
	fanBackends(t, testFanOutHandoffWhileConsumingHasNoDuplicates)
}

func testFanOutHandoffWhileConsumingHasNoDuplicates(t *testing.T, newEnv newFanEnv) {
	e, srv := newEnv(t, 4)
	testHandoffWhileConsuming(t, e)
	if n := srv.Calls(kinesistest.OpGetRecords); n != 0 {
		t.Errorf("%d GetRecords calls by a fan-out reader, want 0", n)
	}
}

// A checkpoint inside a KPL aggregate resumes after the settled
// sub-record: the subscription opens at the aggregate and skips what
// settled.
func TestFanOutKPLAggregateResumesInsideTheAggregate(t *testing.T) {
	fanBackends(t, testFanOutKPLAggregateResumesInsideTheAggregate)
}

func testFanOutKPLAggregateResumesInsideTheAggregate(t *testing.T, newEnv newFanEnv) {
	e, _ := newEnv(t, 1)
	testKPLAggregateResumesInside(t, e)
}

// Refusals that the service answers while another subscription still
// holds the shard (ResourceInUseException) or a subscribe came within a
// second (LimitExceededException) are waited out: nothing is lost.
func TestFanOutRetriesInUseAndLimitExceeded(t *testing.T) {
	fanBackends(t, testFanOutRetriesInUseAndLimitExceeded)
}

func testFanOutRetriesInUseAndLimitExceeded(t *testing.T, newEnv newFanEnv) {
	e, srv := newEnv(t, 2)
	var refusals atomic.Int64
	srv.InjectCallFault(func(c kinesistest.Call) error {
		if c.Op != kinesistest.OpSubscribeToShard || refusals.Add(1) > 6 {
			return nil
		}
		if refusals.Load()%2 == 0 {
			return &types.LimitExceededException{Message: aws.String("Rate exceeded for consumer")}
		}
		return &types.ResourceInUseException{Message: aws.String("Another active subscription exists")}
	})
	col := newCollector()
	cfg := e.config("a", col.sink)
	cfg.Start = shard.Position{Kind: shard.Horizon}
	e.start(cfg)
	want := map[string]int{}
	e.publish(want, 40, 8)
	checkKeyOrder(t, col.waitN(t, 40), want)
	if refusals.Load() < 6 {
		t.Fatalf("only %d subscribe calls refused", refusals.Load())
	}
}

// A consumer deregistered while subscribed stops the reading for good,
// reported through Err and OnFail as ErrConsumerDeleted (as a deleted
// stream is), instead of subscribing in vain for ever.
func TestFanOutConsumerDeletedStopsReading(t *testing.T) {
	fanBackends(t, testFanOutConsumerDeletedStopsReading)
}

func testFanOutConsumerDeletedStopsReading(t *testing.T, newEnv newFanEnv) {
	e, _ := newEnv(t, 2)
	col := newCollector()
	cfg := e.config("a", col.sink)
	failed := make(chan error, 1)
	cfg.OnFail = func(err error) { failed <- err }
	c := e.start(cfg)
	want := map[string]int{}
	e.publish(want, 4, 4)
	col.waitN(t, 4)
	if _, err := e.client.DeregisterStreamConsumer(e.ctx(5*time.Second), &kinesis.DeregisterStreamConsumerInput{ConsumerARN: aws.String(e.consumerARN)}); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-failed:
		if !errors.Is(err, shard.ErrConsumerDeleted) {
			t.Fatalf("OnFail(%v), want ErrConsumerDeleted", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("reading went on without its consumer")
	}
	if err := c.Err(); !errors.Is(err, shard.ErrConsumerDeleted) {
		t.Fatalf("Err() = %v, want ErrConsumerDeleted", err)
	}
}

// Two stream consumers on one stream each read every record, each with
// its own leases.
func TestFanOutTwoConsumersEachSeeEveryRecord(t *testing.T) {
	fanBackends(t, testFanOutTwoConsumersEachSeeEveryRecord)
}

func testFanOutTwoConsumersEachSeeEveryRecord(t *testing.T, newEnv newFanEnv) {
	e, _ := newEnv(t, 2)
	other := *e
	other.consumerARN = e.register("other")
	cols := newCollectors(2)
	cfgA := e.config("a", cols[0].sink)
	cfgB := other.config("b", cols[1].sink)
	cfgB.Namespace = "other/" + e.stream
	for _, cfg := range []*shard.Config{&cfgA, &cfgB} {
		cfg.Start = shard.Position{Kind: shard.Horizon}
		e.start(*cfg)
	}
	want := map[string]int{}
	e.publish(want, 50, 10)
	for i, col := range cols {
		t.Run(fmt.Sprint("consumer ", i), func(t *testing.T) { checkKeyOrder(t, col.waitN(t, 50), want) })
	}
}

// cutStore fails every call once cut: its owner is, for the lease table, as
// good as crashed (it can neither renew nor checkpoint nor release).
type cutStore struct {
	lease.Store
	cut *atomic.Bool
}

var errCut = errors.New("lease store unreachable (test)")

func (s cutStore) List(ctx context.Context, ns string) ([]lease.Lease, error) {
	if s.cut.Load() {
		return nil, errCut
	}
	return s.Store.List(ctx, ns)
}

func (s cutStore) Get(ctx context.Context, key string) (lease.Lease, error) {
	if s.cut.Load() {
		return lease.Lease{}, errCut
	}
	return s.Store.Get(ctx, key)
}

func (s cutStore) Take(ctx context.Context, l lease.Lease, owner string) (lease.Lease, error) {
	if s.cut.Load() {
		return lease.Lease{}, errCut
	}
	return s.Store.Take(ctx, l, owner)
}

func (s cutStore) Renew(ctx context.Context, l lease.Lease) (lease.Lease, error) {
	if s.cut.Load() {
		return lease.Lease{}, errCut
	}
	return s.Store.Renew(ctx, l)
}

func (s cutStore) Checkpoint(ctx context.Context, l lease.Lease, cp string, sub int64) (lease.Lease, error) {
	if s.cut.Load() {
		return lease.Lease{}, errCut
	}
	return s.Store.Checkpoint(ctx, l, cp, sub)
}

func (s cutStore) Release(ctx context.Context, l lease.Lease) (lease.Lease, error) {
	if s.cut.Load() {
		return lease.Lease{}, errCut
	}
	return s.Store.Release(ctx, l)
}

// An instance that crashes (for the lease table: it stops writing at
// once) after its checkpoints covered the first records: the instance
// that takes its shards after the failover time subscribes from those
// checkpoints, so it reads again only the records past them, every one
// of them, in each key's order.
func TestFanOutCrashRereadsOnlyPastTheCheckpoint(t *testing.T) {
	fanBackends(t, testFanOutCrashRereadsOnlyPastTheCheckpoint)
}

func testFanOutCrashRereadsOnlyPastTheCheckpoint(t *testing.T, newEnv newFanEnv) {
	e, _ := newEnv(t, 2)
	cols := newCollectors(2)
	crashed := new(atomic.Bool)
	cfgA := e.config("a", cols[0].sink)
	cfgA.Start = shard.Position{Kind: shard.Horizon}
	cfgA.Leases = cutStore{Store: e.store, cut: crashed}
	e.start(cfgA)
	want := map[string]int{}
	e.publish(want, 40, 8)
	first := cols[0].waitN(t, 40)
	last := map[string]string{} // shard -> its last record's sequence number
	for _, r := range first {
		last[r.ShardID] = r.SequenceNumber
	}
	eventually(t, 5*time.Second, "checkpoints at the last records", func() bool {
		for id, seq := range last {
			if e.lease(id).Checkpoint != seq {
				return false
			}
		}
		return true
	})
	crashed.Store(true)
	before := map[string]int{}
	for k, n := range want {
		before[k] = n
	}
	e.publish(want, 20, 8)
	cfgB := e.config("b", cols[1].sink)
	e.start(cfgB)
	cols[1].wait(t, 20*time.Second, "the 20 records past the checkpoints on b", func(r []*shard.Record) bool { return len(r) >= 20 })
	time.Sleep(200 * time.Millisecond) // an extra record would come now
	recs := cols[1].records()
	if len(recs) != 20 {
		t.Fatalf("b delivered %d records (%s), want exactly the 20 past the crashed owner's checkpoints", len(recs), dataOf(recs))
	}
	// b's records are each key's records from its count before the crash on.
	next := map[string]int{}
	for k := range want {
		next[k] = before[k]
	}
	for _, r := range recs {
		key, nstr, _ := strings.Cut(string(r.Data), ":")
		n, _ := strconv.Atoi(nstr)
		if n != next[key] {
			t.Fatalf("b: key %s record %d, want %d", key, n, next[key])
		}
		next[key]++
	}
}
