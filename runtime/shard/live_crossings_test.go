package shard_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/kinesisgen/kinesisgen/internal/livetest"
	"github.com/kinesisgen/kinesisgen/runtime/shard"
)

// The crossings of crossings_test.go where the live path differs: a
// reshard and an expired iterator on each local Kinesis server (no
// ChildShards on kinesalite, resharding applied asynchronously, iterators
// of the server's own), and the final checkpoint's retries and a lease
// lost during them with the DynamoDB store on dynalite (conditional
// writes, the members item).

// On kinesalite only: it sends no ChildShards, so a parent read to its end
// finds its children by listing, unlike the in-process server and
// kinesis-mock.
func TestLiveReshardWhileFencedThenTakenBack(t *testing.T) {
	srv := livetest.KinesisServers[0]
	t.Run("split", func(t *testing.T) { testReshardWhileFenced(t, liveEnv(t, srv, 1), false, false) })
	t.Run("merge", func(t *testing.T) { testReshardWhileFenced(t, liveEnv(t, srv, 2), true, false) })
}

func TestLiveExpiredIteratorRightAfterTakeBack(t *testing.T) {
	onEachServer(t, func(t *testing.T, srv livetest.KinesisServer) {
		testExpiredIteratorAfterTakeBack(t, liveEnv(t, srv, 1))
	})
}

// liveDynamoEnv is a stream on kinesalite with its leases on dynalite.
func liveDynamoEnv(t *testing.T, shards int32) *env {
	e := liveEnv(t, livetest.KinesisServers[0], shards)
	store := liveDynamoDB(t, livetest.DynamoDBEndpoint(t), fmt.Sprintf("shard-leases-%d", time.Now().UnixNano()))
	if err := store.EnsureTable(e.ctx(30 * time.Second)); err != nil {
		t.Fatalf("EnsureTable: %v", err)
	}
	e.store = store
	return e
}

func TestLiveStuckHandlerDuringHandoffWithFailedFinalCheckpoint(t *testing.T) {
	testStuckHandlerDuringHandoff(t, liveDynamoEnv(t, 2))
}

func TestLiveStopDuringHeartbeatAndFinalCheckpointRetries(t *testing.T) {
	t.Run("checkpoint-lands", func(t *testing.T) { testStopDuringRetries(t, liveDynamoEnv(t, 2), 3, 0) })
	t.Run("checkpoint-lands-after-the-fence-time", func(t *testing.T) {
		testStopDuringRetries(t, liveDynamoEnv(t, 2), 0, 2200*time.Millisecond)
	})
	// With liveness per lease Stop's renewals are its heartbeats, on
	// DynamoDB conditional writes.
	t.Run("per-lease/checkpoint-lands-after-the-fence-time", func(t *testing.T) {
		e := liveDynamoEnv(t, 2)
		e.liveness = shard.LivenessPerLease
		testStopDuringRetries(t, e, 0, 2200*time.Millisecond)
	})
}

func TestLiveLeaseLostWhileFinalCheckpointRetries(t *testing.T) {
	t.Run("stop", func(t *testing.T) { testLeaseLostWhileFinalRetries(t, liveDynamoEnv(t, 1), false) })
	t.Run("handoff", func(t *testing.T) { testLeaseLostWhileFinalRetries(t, liveDynamoEnv(t, 2), true) })
}

func TestLiveStopWithOneFinalCheckpointFailingReleasesEveryLease(t *testing.T) {
	testStopWithOneFinalCheckpointFailing(t, liveDynamoEnv(t, 2))
}

// combos_test.go's reshards on kinesalite (no ChildShards: a parent read to
// its end finds its children by listing; a closed shard ends after an
// extra empty read) with the DynamoDB store on dynalite.

func TestLiveReshardDuringFinalCheckpointRetries(t *testing.T) {
	t.Run("stop-split", func(t *testing.T) { testReshardDuringFinalRetries(t, liveDynamoEnv(t, 1), false) })
	t.Run("stop-merge", func(t *testing.T) { testReshardDuringFinalRetries(t, liveDynamoEnv(t, 2), true) })
}

func TestLiveShardEndCheckpointFailing(t *testing.T) {
	t.Run("lands-after-3", func(t *testing.T) { testShardEndFailing(t, liveDynamoEnv(t, 1), 3, false) })
	t.Run("never-lands", func(t *testing.T) { testShardEndFailing(t, liveDynamoEnv(t, 1), -1, false) })
}

// A fleet's start beside a dead instance's member entry, with the leases
// and the members item on dynalite.
func TestLiveFleetStartGivesADeadMemberNoCreates(t *testing.T) {
	e := liveDynamoEnv(t, 12)
	testFleetStartDeadMember(t, e, e.store, nil)
}
