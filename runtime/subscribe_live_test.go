package runtime_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/aws/retry"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/kinesis"
	"github.com/aws/aws-sdk-go-v2/service/kinesis/types"

	"github.com/kinesisgen/kinesisgen/internal/livetest"
	"github.com/kinesisgen/kinesisgen/runtime"
	"github.com/kinesisgen/kinesisgen/runtime/kinesisapi"
	"github.com/kinesisgen/kinesisgen/runtime/kinesistest/kinesismock"
	"github.com/kinesisgen/kinesisgen/runtime/lease"
)

// The subscription flows again, on kinesalite: no long poll, asynchronous
// stream creation, real iterators and sequence numbers.
func TestSubscriptionFlowsOnKinesalite(t *testing.T) {
	testSubscriptionFlowsLive(t, livetest.KinesisEndpoint(t), testTimeout)
}

// And on kinesis-mock: ChildShards at a shard's end, paginated ListShards,
// sequence numbers that differ from kinesalite's. It answers a PutRecord in
// tens to hundreds of milliseconds on a loaded machine (kinesalite in a
// few), so each flow gets three times as long.
func TestSubscriptionFlowsOnKinesisMock(t *testing.T) {
	testSubscriptionFlowsLive(t, livetest.KinesisMockEndpoint(t), 3*testTimeout)
}

// kinesisMockStream is a client of the kinesis-mock at url whose calls go
// through transport, and a stream name of its own (prefix and a unique
// suffix), deleted with its consumers when the test ends.
func kinesisMockStream(t *testing.T, url string, transport http.RoundTripper, prefix string) (*kinesis.Client, string) {
	client := kinesis.NewFromConfig(aws.Config{
		Region:      "us-east-1",
		Credentials: credentials.NewStaticCredentialsProvider("x", "x", ""),
		HTTPClient:  &http.Client{Transport: transport},
		Retryer:     func() aws.Retryer { return retry.NewStandard() },
	}, func(o *kinesis.Options) { o.BaseEndpoint = aws.String(url) })
	stream := uniqueName(prefix)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_, _ = client.DeleteStream(ctx, &kinesis.DeleteStreamInput{StreamName: &stream, EnforceConsumerDeletion: aws.Bool(true)})
	})
	return client, stream
}

// Enhanced fan-out on kinesis-mock, an implementation of stream consumers
// and SubscribeToShard that is not ours: the handoff scenario of
// TestFanOutHandoffBetweenInstancesOverHTTP2 (a consumer registered by
// create_if_missing, a second instance taking its share, the first handing
// over the rest, a restart at the checkpoints; every record once, in its
// key's order). Before the second instance joins, two of the first one's
// subscriptions are cut off mid-stream (as a dropped connection ends one),
// and it must subscribe to both shards again after the last event it had
// and handle what follows. The client mends the two ways kinesis-mock's
// subscriptions differ on the wire (kinesismock.Transport). A
// reshard is TestFanOutAcrossAReshardOnKinesisMock's.
func TestFanOutOnKinesisMock(t *testing.T) {
	url := livetest.KinesisMockEndpoint(t)
	// A subscription's first event comes with its call; the cut comes at the
	// next, a second later.
	calls := &cutSubscriptions{next: kinesismock.Transport(nil), cut: 2, after: 500 * time.Millisecond}
	client, stream := kinesisMockStream(t, url, calls, "fanout-")
	// a's 4 subscriptions, and 2 more after the cuts.
	resubscribed := func() bool {
		calls.mu.Lock()
		defer calls.mu.Unlock()
		return calls.cuts == calls.cut && calls.opened >= 4+calls.cut
	}
	testFanOutHandoff(t, func() kinesisapi.API { return client }, stream, livetest.KinesisMock.Slow, resubscribed)
	calls.mu.Lock()
	defer calls.mu.Unlock()
	if n := calls.ops["GetRecords"]; n != 0 {
		t.Errorf("%d GetRecords calls; a fan-out subscription makes none", n)
	}
	t.Logf("calls %v; %d subscriptions opened, %d cut off", calls.ops, calls.opened, calls.cuts)
}

// cutSubscriptions counts the calls by operation and cuts off the first cut
// subscriptions to read on after running for after: their event stream
// ends as a dropped connection ends it (io.ErrUnexpectedEOF).
type cutSubscriptions struct {
	next  http.RoundTripper
	cut   int
	after time.Duration

	mu     sync.Mutex
	ops    map[string]int
	opened int
	cuts   int
}

func (c *cutSubscriptions) RoundTrip(req *http.Request) (*http.Response, error) {
	op := req.Header.Get("X-Amz-Target")
	op = op[strings.LastIndexByte(op, '.')+1:]
	resp, err := c.next.RoundTrip(req)
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.ops == nil {
		c.ops = map[string]int{}
	}
	c.ops[op]++
	if err != nil || op != "SubscribeToShard" || resp.StatusCode != http.StatusOK {
		return resp, err
	}
	c.opened++
	resp.Body = &cutBody{ReadCloser: resp.Body, at: time.Now().Add(c.after), cut: func() bool {
		c.mu.Lock()
		defer c.mu.Unlock()
		if c.cuts == c.cut {
			return false
		}
		c.cuts++
		return true
	}}
	return resp, nil
}

type cutBody struct {
	io.ReadCloser
	at   time.Time
	cut  func() bool // reports whether to cut off this stream
	done bool
}

func (b *cutBody) Read(p []byte) (int, error) {
	if b.done {
		return 0, io.ErrUnexpectedEOF
	}
	n, err := b.ReadCloser.Read(p)
	if err == nil && time.Now().After(b.at) && b.cut() {
		b.done = true
		_ = b.ReadCloser.Close()
		return n, io.ErrUnexpectedEOF
	}
	return n, err
}

func testSubscriptionFlowsLive(t *testing.T, url string, timeout time.Duration) {
	client := kinesis.NewFromConfig(aws.Config{
		Region:      "us-east-1",
		Credentials: credentials.NewStaticCredentialsProvider("x", "x", ""),
	}, func(o *kinesis.Options) { o.BaseEndpoint = aws.String(url) })

	for _, f := range []struct {
		name string
		run  func(*env)
	}{
		{"OrderService", testOrderServiceKeepsEachCustomersOrderAcrossParallelLanes},
		{"PlainWorkersReorder", testPlainWorkersCanReorderOneKey},
		{"ResumeAfterRestart", testResumeFromCheckpointAfterRestart},
		{"UnacknowledgedRedelivered", testUnacknowledgedRecordIsRedelivered},
		{"RetryCopies", testRetryPublishesCopiesWithAttemptCount},
		{"DeadLetter", testDeadLetterCarriesReasonAndOrigin},
		{"RejectLogged", testRejectWithoutDeadLetterLogsAndCheckpoints},
		{"Undecodable", testUndecodableRecordsAreRejected},
		{"Panic", testPanickingHandlerIsRetried},
		{"SeekToHorizon", testSeekToHorizonReplaysAndSeekAfterShutdownFails},
		{"ShutdownReleasesLeases", testShutdownReleasesLeasesForTheNextBroker},
		{"StopReleasesLeases", testStopReleasesLeasesForAnotherInstance},
		{"OpensAtTheStart", testSubscribeOpensAtTheMomentItStarts},
		{"SubscribedTwice", testSubscribeTwiceAfterConnectIsRefused},
		{"CreateIfMissing", testCreateIfMissingAfterConnect},
		{"MissingDeadLetter", testMissingDeadLetterStream},
		{"Reply", testReplyOutcomePublishesTheReply},
		{"SplitAndMerge", testSplitAndMerge},
		{"Aggregated", testAggregatedRecords},
		{"CorruptAggregateDeadLettered", testCorruptAggregateIsDeadLettered},
		{"FailedConnectRetried", testFailedConnectCanBeRetried},
		{"StartAtTimeSeekToSequence", testStartAtTimeAndSeekToSequence},
		{"KeyOrderThroughTwoHops", testKeyOrderCarriesThroughTwoHops},
		{"OneBadKeyFailsAlone", testOneBadKeyFailsAlone},
		{"UnpublishableKeysDeadLettered", testUnpublishableKeysAreDeadLettered},
		{"LargestPoisonDeadLettered", testLargestPoisonRecordIsDeadLetteredTruncated},
		{"StatusAfterKnownWorkload", testStatusAfterDrainingAKnownWorkload},
		{"StatusOutcomes", testStatusCountsOutcomes},
		{"StatusStuckHandler", testStatusShowsAStuckHandler},
		{"StatusHandoff", testStatusAfterAHandoff},
		{"StatusSplit", testStatusAcrossASplit},
		{"StatusLostLease", testStatusAfterALostLease},
	} {
		t.Run(f.name, func(t *testing.T) {
			t.Parallel() // unique stream names: the flows share the server
			f.run(newEnvWithin(t, client, timeout))
		})
	}
}

// Enhanced fan-out across a reshard on kinesis-mock (LocalStack's Kinesis
// engine), whose subscription of a closed shard never ends
// (conformance.KinesisMock.SubscriptionIgnoresShardEnd): records published
// before and after UpdateShardCount doubles the shards are each handled,
// each customer's in order, every parent's records before any of its
// children's, within a bound. The reader must learn the parents' end
// another way than from their subscriptions, or their children are never
// read.
func TestFanOutAcrossAReshardOnKinesisMock(t *testing.T) {
	url := livetest.KinesisMockEndpoint(t)
	calls := &cutSubscriptions{next: kinesismock.Transport(nil)} // counts the calls, cuts none
	client, stream := kinesisMockStream(t, url, calls, "fanout-reshard-")
	scale := time.Duration(livetest.KinesisMock.Slow)
	type handling struct {
		id    int
		shard string
	}
	var mu sync.Mutex
	byKey := map[string][]int{} // customer -> ids in the order handled
	var handlings []handling    // every handling, in order
	b := runtime.NewBroker(runtime.WithKinesisClient(client), runtime.WithLeaseStore(lease.NewMemory()),
		runtime.WithShardSyncInterval(200*time.Millisecond), runtime.WithLeaseRenewInterval(100*time.Millisecond),
		runtime.WithFailoverTime(2*time.Second*scale), runtime.WithCheckpointInterval(50*time.Millisecond))
	if _, err := runtime.Subscribe(b, stream, func(_ context.Context, o order, d runtime.Delivery) runtime.Outcome {
		mu.Lock()
		defer mu.Unlock()
		byKey[o.Customer] = append(byKey[o.Customer], o.ID)
		handlings = append(handlings, handling{o.ID, d.ShardID})
		return runtime.Ack()
	}, runtime.FanOut("billing"), runtime.CreateIfMissing(2), runtime.StartAt(runtime.Horizon()), runtime.Workers(4), runtime.ByKey()); err != nil {
		t.Fatal(err)
	}
	if err := b.Connect(t.Context()); err != nil {
		t.Fatalf("Connect: %v", err)
	}
	t.Cleanup(func() { b.Shutdown(context.Background()) })
	pb := runtime.NewBroker(runtime.WithKinesisClient(client))
	if err := pb.Connect(t.Context()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { pb.Shutdown(context.Background()) })
	pub := runtime.NewPublisher[order](pb, runtime.PublisherSpec{Stream: stream})
	const customers = 12
	n := 0
	publish := func(k int) {
		t.Helper()
		for range k {
			cust := fmt.Sprint("c", n%customers)
			if err := pub.Message(order{ID: n, Customer: cust}).PartitionKey(cust).Publish(t.Context()); err != nil {
				t.Fatal(err)
			}
			n++
		}
	}
	// handled waits until every record published so far was handled.
	handled := func(phase string, within time.Duration) {
		t.Helper()
		deadline := time.Now().Add(within)
		for {
			mu.Lock()
			seen := map[int]bool{}
			for _, h := range handlings {
				seen[h.id] = true
			}
			mu.Unlock()
			if len(seen) == n {
				return
			}
			if time.Now().After(deadline) {
				var missing []int
				for id := range n {
					if !seen[id] {
						missing = append(missing, id)
					}
				}
				calls.mu.Lock()
				defer calls.mu.Unlock()
				t.Fatalf("%s: %d of %d records handled within %v; missing %v (calls %v)", phase, len(seen), n, within, missing, calls.ops)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	publish(48)
	handled("before the reshard", 20*time.Second*scale)
	if _, err := client.UpdateShardCount(t.Context(), &kinesis.UpdateShardCountInput{StreamName: &stream, TargetShardCount: aws.Int32(4), ScalingType: types.ScalingTypeUniformScaling}); err != nil {
		t.Fatalf("UpdateShardCount: %v", err)
	}
	waitActive(t.Context(), t, client, stream, " after UpdateShardCount")
	publish(48)
	// kinesis-mock pushes an event a second: a parent's end, its
	// children's start and their records take a few seconds, not minutes.
	handled("after the reshard", 10*time.Second*scale)

	mu.Lock()
	defer mu.Unlock()
	for cust, ids := range byKey {
		// At least once: a record may come again (a lease fenced on a
		// loaded machine), but each first delivery comes in order.
		seen, last := map[int]bool{}, -1
		for _, id := range ids {
			if seen[id] {
				continue
			}
			seen[id] = true
			if id < last {
				t.Errorf("%s: handled %v, out of order", cust, ids)
				break
			}
			last = id
		}
	}
	shards, err := client.ListShards(t.Context(), &kinesis.ListShardsInput{StreamName: &stream})
	if err != nil {
		t.Fatal(err)
	}
	parentOf := map[string]string{}
	closed := 0
	for _, s := range shards.Shards {
		if s.ParentShardId != nil {
			parentOf[aws.ToString(s.ShardId)] = aws.ToString(s.ParentShardId)
		}
		if s.SequenceNumberRange.EndingSequenceNumber != nil {
			closed++
		}
	}
	if closed != 2 || len(parentOf) != 2*closed {
		t.Fatalf("after UpdateShardCount to 4: %d shards closed, %d with a parent; want 2 and 4", closed, len(parentOf))
	}
	lastOf, firstOf := map[string]int{}, map[string]int{}
	for i, h := range handlings {
		lastOf[h.shard] = i
		if _, ok := firstOf[h.shard]; !ok {
			firstOf[h.shard] = i
		}
	}
	for child, parent := range parentOf {
		if first, ok := firstOf[child]; ok && first < lastOf[parent] {
			t.Errorf("child %s handled (at %d) before its parent %s's last record (at %d)", child, first, parent, lastOf[parent])
		}
	}
	calls.mu.Lock()
	defer calls.mu.Unlock()
	t.Logf("%d records, %d handlings; calls %v", n, len(handlings), calls.ops)
}
