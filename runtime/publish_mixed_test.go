package runtime_test

import (
	"testing"
	"time"

	"github.com/kinesisgen/kinesisgen/runtime"
	"github.com/kinesisgen/kinesisgen/runtime/kinesistest"
)

// TestSendAllMixingPublishersKeepsEachKeysOrder: SendAll says its messages
// may come from different publishers and that records of one key keep
// their slice order. Here each key's messages alternate between two
// publishers of one stream (an aggregating and a plain one, or two
// aggregating ones with different bounds) in one SendAll: each key's
// messages must be stored once each, in slice order, and each receipt must
// name where its message is.
func TestSendAllMixingPublishersKeepsEachKeysOrder(t *testing.T) {
	for _, tc := range []struct {
		name   string
		first  []runtime.PublishOption
		second []runtime.PublishOption
	}{
		{"aggregated and plain", []runtime.PublishOption{runtime.WithAggregation(runtime.Aggregation{})}, nil},
		{"two aggregations", []runtime.PublishOption{runtime.WithAggregation(runtime.Aggregation{})},
			[]runtime.PublishOption{runtime.WithAggregation(runtime.Aggregation{MaxBytes: 4 << 10})}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := testContext(t, 30*time.Second)
			s := kinesistest.New()
			stream := createStream(ctx, t, s, 2)
			b := connect(ctx, t, runtime.NewBroker(runtime.WithKinesisClient(s)))
			pubs := [2]runtime.Publisher[aggMsg]{
				runtime.NewPublisher[aggMsg](b, runtime.PublisherSpec{Stream: stream}, tc.first...),
				runtime.NewPublisher[aggMsg](b, runtime.PublisherSpec{Stream: stream}, tc.second...),
			}
			keys := aggKeys(8)
			var msgs []*runtime.Message[aggMsg]
			for n := range 5 {
				for _, k := range keys {
					msgs = append(msgs, pubs[n%2].Message(aggMsg{Key: k, N: n}).PartitionKey(k))
				}
			}
			receipts, err := runtime.SendAll(ctx, msgs)
			if err != nil {
				t.Fatalf("SendAll: %v", err)
			}
			checkRounds(ctx, t, s, stream, keys, receipts)
		})
	}
}
