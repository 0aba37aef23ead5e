package runtime_test

import (
	"context"
	"testing"
	"testing/synctest"

	"github.com/kinesisgen/kinesisgen/runtime"
	"github.com/kinesisgen/kinesisgen/runtime/kinesistest"
)

// Publishers in two synctest bubbles of one process, one after the other,
// with no garbage collection between (the simulator runs a bubble per
// seed): the publish entries a batcher reuses, and their done channels,
// must not reach the second bubble. Before they were pooled per batcher,
// a process-wide sync.Pool handed the second bubble's publisher an entry
// whose channel the first bubble made: "fatal error: receive on synctest
// channel from outside bubble" (the simulator's tests ran two collections
// between bubbles to empty the pool).
func TestPublishersInTwoBubbles(t *testing.T) {
	for i := range 2 {
		synctest.Test(t, func(t *testing.T) {
			ctx := context.Background()
			s := kinesistest.New()
			stream := createStream(ctx, t, s, 1)
			br := runtime.NewBroker(runtime.WithKinesisClient(s))
			if err := br.Connect(ctx); err != nil {
				t.Fatal(err)
			}
			defer func() { _ = br.Shutdown(ctx) }()
			for _, agg := range []bool{false, true} {
				p := runtime.NewPublisher[benchEvent](br, runtime.PublisherSpec{Stream: stream, Aggregate: agg})
				for n := range 20 {
					if err := p.Message(benchEvent{ID: n, Kind: "k"}).PartitionKey("k").Publish(ctx); err != nil {
						t.Fatalf("bubble %d, aggregated %v, message %d: %v", i, agg, n, err)
					}
				}
			}
		})
	}
}
