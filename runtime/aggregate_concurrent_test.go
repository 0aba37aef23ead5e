package runtime_test

import (
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/kinesisgen/kinesisgen/runtime"
	"github.com/kinesisgen/kinesisgen/runtime/kinesistest"
)

// TestAggregatedConcurrentPublish drives an aggregating publisher the way
// services do and bench/cmd/aggregate's agg mode does: many goroutines,
// each owning a set of keys and publishing their messages one Publish at
// a time, while two of every three puts of an aggregate are refused as
// throttled. Some callers' messages are too large for any record (each
// fails alone with ErrPublish and is never stored, its key going on), some
// too large to share a record (sent plain, in their key's order). Every
// other message is stored once, on the shard its own key hashes to, under
// its own key, each key's in publish order; the aggregates are shared
// across callers (far fewer records than messages).
func TestAggregatedConcurrentPublish(t *testing.T) {
	ctx := testContext(t, 90*time.Second)
	s := kinesistest.New()
	stream := createStream(ctx, t, s, 4)
	throttleTwoOfThree(s)
	b := connect(ctx, t, runtime.NewBroker(runtime.WithKinesisClient(s), runtime.FastRetries()))
	p := runtime.NewPublisher[aggMsg](b, runtime.PublisherSpec{Stream: stream}, runtime.WithAggregation(runtime.Aggregation{MaxBytes: 8 << 10}))

	const callers, keysEach, perKey = 128, 3, 6
	keys := aggKeys(callers * keysEach)
	oversize := strings.Repeat("o", runtime.MaxRecordSize)
	plain := strings.Repeat("p", 10<<10) // over MaxBytes: a record of its own
	var refused sync.Map                 // key → message numbers refused
	var wg sync.WaitGroup
	for c := range callers {
		wg.Go(func() {
			mine := keys[c*keysEach : (c+1)*keysEach]
			stored := make(map[string]int, len(mine)) // each key's next message number
			for i := range perKey * len(mine) {
				k := mine[i%len(mine)]
				m := aggMsg{Key: k, N: stored[k]}
				switch {
				case c%16 == 0 && i == 4:
					m.Pad = oversize
				case c%16 == 1 && i%5 == 2:
					m.Pad = plain
				}
				err := p.Message(m).PartitionKey(k).Publish(ctx)
				if m.Pad == oversize {
					var re *runtime.Error
					if !errors.Is(err, runtime.ErrPublish) || !errors.As(err, &re) || re.Stream != stream {
						t.Errorf("a message over the record size, key %s: %v, want ErrPublish naming the stream", k, err)
					}
					refused.Store(k, true)
					continue // not stored: the key's next message takes its number
				}
				if err != nil {
					t.Errorf("publish %s/%d: %v", k, m.N, err)
					return
				}
				stored[k]++
			}
		})
	}
	wg.Wait()
	s.InjectPutFault(nil)

	msgs, records := readMessages(ctx, t, s, stream)
	want := eachKey(keys, perKey)
	n := 0
	refused.Range(func(k, _ any) bool { want[k.(string)]--; n++; return true })
	if n != callers/16 {
		t.Errorf("%d oversize messages refused, want %d", n, callers/16)
	}
	if m := checkKeyed(t, msgs, want); m != 0 {
		t.Errorf("%d messages on a shard their key does not hash to", m)
	}
	total := len(keys)*perKey - n
	if len(msgs) != total {
		t.Errorf("read %d messages, want %d", len(msgs), total)
	}
	if records*3 > total {
		t.Errorf("%d Kinesis records for %d messages: the callers' messages did not share aggregates", records, total)
	}
	for _, m := range msgs {
		if m.Pad != "" && m.aggregated {
			t.Errorf("message %s/%d of %d bytes shared an aggregate", m.Key, m.N, len(m.Pad))
		}
	}
}
