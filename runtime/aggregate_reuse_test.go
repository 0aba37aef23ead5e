package runtime_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/kinesisgen/kinesisgen/runtime"
	"github.com/kinesisgen/kinesisgen/runtime/kinesistest"
)

// TestAggregatedBuffersReusedOverHTTP publishes through the SDK's own
// client over HTTP, the client with which an aggregating publisher writes
// each aggregate into a buffer that a finished call has given back: every
// message is read back once, intact (its padding is its own), under its
// own key and in its key's order, and the buffers were reused. A buffer
// taken back before its call had written the request would show as
// corrupt aggregates or other messages' bytes.
func TestAggregatedBuffersReusedOverHTTP(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	h := kinesistest.NewHTTPServer(kinesistest.New())
	defer h.Close()
	client := h.Client()
	stream := createStream(ctx, t, client, 4)
	b := runtime.NewBroker(runtime.WithKinesisClient(client))
	if err := b.Connect(ctx); err != nil {
		t.Fatal(err)
	}
	spare := runtime.SpareAggregateBuffers(b)
	p := runtime.NewPublisher[aggMsg](b, runtime.PublisherSpec{Stream: stream, Aggregate: true})

	// 4 callers × 5 SendAll of 400 messages of ~400 bytes, each caller
	// over its own 25 keys: aggregates of about 50 KiB.
	const callers, rounds, perKey = 4, 5, 80
	pad := func(k string, n int) string { return strings.Repeat(fmt.Sprintf("%s/%d;", k, n), 30)[:380] }
	keys := aggKeys(callers * 25)
	var wg sync.WaitGroup
	for c := range callers {
		mine := keys[c*25 : (c+1)*25]
		wg.Go(func() {
			for r := range rounds {
				var msgs []*runtime.Message[aggMsg]
				for n := r * perKey / rounds; n < (r+1)*perKey/rounds; n++ {
					for _, k := range mine {
						msgs = append(msgs, p.Message(aggMsg{Key: k, N: n, Pad: pad(k, n)}).PartitionKey(k))
					}
				}
				if _, err := runtime.SendAll(ctx, msgs); err != nil {
					t.Errorf("SendAll: %v", err)
					return
				}
			}
		})
	}
	wg.Wait()
	if err := b.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}

	msgs, records := readMessages(ctx, t, h.Backend(), stream)
	want := eachKey(keys, perKey)
	checkKeyed(t, msgs, want)
	bad := 0
	for _, m := range msgs {
		if m.Pad != pad(m.Key, m.N) {
			if bad++; bad <= 3 {
				t.Errorf("message %s/%d read with another's bytes: %.40q", m.Key, m.N, m.Pad)
			}
		}
	}
	if len(msgs) != len(keys)*perKey {
		t.Errorf("read %d messages, want %d", len(msgs), len(keys)*perKey)
	}
	if n := spare(); n == 0 {
		t.Errorf("no aggregate buffer kept for reuse (%d Kinesis records for %d messages): reuse not exercised", records, len(msgs))
	}
}
