package runtime_test

import (
	"context"
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

	"github.com/kinesisgen/kinesisgen/internal/livetest"
	"github.com/kinesisgen/kinesisgen/runtime/kinesisapi"
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

// Enhanced fan-out on kinesis-mock, an implementation of stream consumers
// and SubscribeToShard that is not ours: the handoff scenario of
// TestFanOutHandoffBetweenInstancesOverHTTP2 (a consumer registered by
// create_if_missing, a second instance taking its share, the first handing
// over the rest, a restart at the checkpoints; every record once, in its
// key's order). Before the second instance joins, two of the first one's
// subscriptions are cut off mid-stream (as a dropped connection ends one),
// and it must subscribe to both shards again after the last event it had
// and handle what follows. The client mends the two ways kinesis-mock's
// subscriptions differ on the wire (livetest.KinesisMockTransport); the
// scenario does not reshard, since a kinesis-mock subscription never ends
// at a shard's end (conformance.KinesisMock.SubscriptionIgnoresShardEnd).
func TestFanOutOnKinesisMock(t *testing.T) {
	url := livetest.KinesisMockEndpoint(t)
	// A subscription's first event comes with its call; the cut comes at the
	// next, a second later.
	calls := &cutSubscriptions{next: livetest.KinesisMockTransport(nil), cut: 2, after: 500 * time.Millisecond}
	client := kinesis.NewFromConfig(aws.Config{
		Region:      "us-east-1",
		Credentials: credentials.NewStaticCredentialsProvider("x", "x", ""),
		HTTPClient:  &http.Client{Transport: calls},
		Retryer:     func() aws.Retryer { return retry.NewStandard() },
	}, func(o *kinesis.Options) { o.BaseEndpoint = aws.String(url) })
	stream := uniqueName("fanout-")
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_, _ = client.DeleteStream(ctx, &kinesis.DeleteStreamInput{StreamName: &stream, EnforceConsumerDeletion: aws.Bool(true)})
	})
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
