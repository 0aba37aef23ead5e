package runtime_test

import (
	"context"
	"crypto/md5"
	"fmt"
	"log/slog"
	"testing"
	"testing/synctest"
	"time"

	"github.com/kinesisgen/kinesisgen/runtime"
	"github.com/kinesisgen/kinesisgen/runtime/kinesistest"
	"github.com/kinesisgen/kinesisgen/runtime/lease"
)

// keyInHalf returns a partition key whose hash lands in the lower (0) or
// upper (1) half of the hash-key space: on one shard of a two-shard stream.
func keyInHalf(half byte) string {
	for i := 0; ; i++ {
		k := fmt.Sprintf("key-%d", i)
		if sum := md5.Sum([]byte(k)); sum[0]>>7 == half {
			return k
		}
	}
}

// A by-key worker that handled a record of one shard settles it before it
// starts a record of another shard in the same take. Before, a take's
// records were settled together when the take was done: a closed shard
// whose records were all handled waited for another shard's slow handler
// to checkpoint its end (and so to start its children), and a graceful
// handoff of it was postponed as "records still being handled" (the
// simulator, mix all, seeds 1796542343639165273 and 1796542305414195072:
// 19 s each, against a handling of 35 ms).
func TestLaneSettlesAShardBeforeAnotherShardsSlowRecord(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		const stream, app = "settle", "app"
		srv := kinesistest.New()
		if err := srv.AddStream(stream, 2); err != nil {
			t.Fatal(err)
		}
		store := lease.NewMemory()
		br := srv.NewBroker(runtime.WithLeaseStore(store), runtime.WithApplication(app), runtime.WithLogger(slog.New(slog.DiscardHandler)))
		hold1, hold2 := make(chan struct{}), make(chan struct{})
		handled := make(chan string, 8)
		h := func(ctx context.Context, m benchEvent, d runtime.Delivery) runtime.Outcome {
			switch m.Kind {
			case "hold1":
				<-hold1
			case "hold2":
				<-hold2
			}
			handled <- m.Kind
			return runtime.Ack()
		}
		// One worker, so one lane: every record goes through one take at a time.
		if _, err := runtime.Subscribe(br, stream, h, runtime.Workers(1), runtime.ByKey(), runtime.StartAt(runtime.Horizon())); err != nil {
			t.Fatal(err)
		}
		if err := br.Connect(ctx); err != nil {
			t.Fatal(err)
		}
		defer func() { _ = br.Shutdown(ctx) }()
		time.Sleep(15 * time.Second) // both leases taken, both shards read
		p := runtime.NewPublisher[benchEvent](br, runtime.PublisherSpec{Stream: stream})
		const shardA = "shardId-000000000000"
		keyA, keyB := keyInHalf(0), keyInHalf(1)
		publish := func(key, kind string) {
			t.Helper()
			if err := p.Message(benchEvent{Kind: kind}).PartitionKey(key).Publish(ctx); err != nil {
				t.Fatal(err)
			}
			time.Sleep(2 * time.Second) // read and queued in the lane
		}
		publish(keyB, "hold1") // the worker's take: held
		publish(keyA, "a")     // queued behind it
		publish(keyB, "hold2") // queued behind A's record: one take with it
		if err := srv.SplitInHalf(stream, shardA); err != nil {
			t.Fatal(err)
		}
		time.Sleep(2 * time.Second) // A read to its end: its reader waits for "a" to settle
		close(hold1)
		for _, want := range []string{"hold1", "a"} {
			if got := <-handled; got != want {
				t.Fatalf("handled %q, want %q", got, want)
			}
		}
		time.Sleep(5 * time.Second) // "hold2" still runs
		l, err := store.Get(ctx, lease.KeyFor(app+"/"+stream, shardA))
		if err != nil {
			t.Fatal(err)
		}
		if l.Checkpoint != lease.CheckpointShardEnd {
			t.Errorf("shard %s: every record handled 5 s ago, checkpoint %q, want %s: its end waits for another shard's record in the same take",
				shardA, l.Checkpoint, lease.CheckpointShardEnd)
		}
		close(hold2)
		<-handled
	})
}
