package runtime_test

import (
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/kinesis"

	"github.com/kinesisgen/kinesisgen/internal/livetest"
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
