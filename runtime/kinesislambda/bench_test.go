package kinesislambda_test

import (
	"context"
	"encoding/json"
	"fmt"
	goruntime "runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"

	"github.com/kinesisgen/kinesisgen/runtime"
	"github.com/kinesisgen/kinesisgen/runtime/kinesislambda"
	"github.com/kinesisgen/kinesisgen/runtime/kinesistest"
)

// benchOrder is about 200 bytes of JSON.
type benchOrder struct {
	ID       int    `json:"id"`
	Customer string `json:"customer"`
	Item     string `json:"item"`
	Note     string `json:"note"`
	Amount   int    `json:"amount"`
}

// benchEvent is the JSON of an event of n foreign records of about 200 B
// each, over keys keys, as the Lambda runtime receives it.
func benchEvent(b *testing.B, n, keys int) []byte {
	var ev events.KinesisEvent
	for i := range n {
		o := benchOrder{ID: i, Customer: fmt.Sprintf("customer-%d", i%keys), Item: "item-0123456789", Note: strings.Repeat("n", 120), Amount: i}
		data, _ := json.Marshal(o)
		r := record("orders", i, o.Customer, data)
		ev.Records = append(ev.Records, r)
	}
	payload, err := json.Marshal(ev)
	if err != nil {
		b.Fatal(err)
	}
	return payload
}

// The adapter against a hand-written loop over the same event: both
// unmarshal the event (aws-lambda-go does, base64 included), then decode
// each record into the struct and call an empty handler.
func BenchmarkBatch10k(b *testing.B) {
	payload := benchEvent(b, 10000, 100)
	b.Run("hand", func(b *testing.B) {
		var sink int
		handler := func(o benchOrder) { sink += o.ID }
		fn := func(_ context.Context, ev events.KinesisEvent) (events.KinesisEventResponse, error) {
			for _, r := range ev.Records {
				var o benchOrder
				if err := json.Unmarshal(r.Kinesis.Data, &o); err != nil {
					return events.KinesisEventResponse{BatchItemFailures: []events.KinesisBatchItemFailure{{ItemIdentifier: r.Kinesis.SequenceNumber}}}, nil
				}
				handler(o)
			}
			return events.KinesisEventResponse{}, nil
		}
		runBatch(b, payload, fn)
	})
	b.Run("adapter", func(b *testing.B) {
		br := kinesistest.NewBroker()
		var sink int
		if _, err := runtime.Subscribe(br, "orders", func(_ context.Context, o benchOrder, _ runtime.Delivery) runtime.Outcome {
			sink += o.ID
			return runtime.Ack()
		}); err != nil {
			b.Fatal(err)
		}
		runBatch(b, payload, kinesislambda.Handler(br))
	})
}

func runBatch(b *testing.B, payload []byte, fn func(context.Context, events.KinesisEvent) (events.KinesisEventResponse, error)) {
	ctx := context.Background()
	b.ReportAllocs()
	b.SetBytes(int64(len(payload)))
	for b.Loop() {
		var ev events.KinesisEvent
		if err := json.Unmarshal(payload, &ev); err != nil {
			b.Fatal(err)
		}
		resp, err := fn(ctx, ev)
		if err != nil || len(resp.BatchItemFailures) > 0 {
			b.Fatalf("resp %+v, err %v", resp, err)
		}
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/10000, "ns/record")
}

// A handler that waits 1 ms: workers=8 by_key over 100 keys against the
// serial loop, records/s, each key's order checked.
func BenchmarkSlowHandler(b *testing.B) {
	const n, keys = 1000, 100
	payload := benchEvent(b, n, keys)
	var ev events.KinesisEvent
	if err := json.Unmarshal(payload, &ev); err != nil {
		b.Fatal(err)
	}
	b.Run("hand-serial", func(b *testing.B) {
		for b.Loop() {
			for _, r := range ev.Records {
				var o benchOrder
				if err := json.Unmarshal(r.Kinesis.Data, &o); err != nil {
					b.Fatal(err)
				}
				time.Sleep(time.Millisecond)
			}
		}
		b.ReportMetric(float64(n*b.N)/b.Elapsed().Seconds(), "records/s")
	})
	for _, workers := range []int{1, 8} {
		b.Run(fmt.Sprintf("workers=%d", workers), func(b *testing.B) {
			br := kinesistest.NewBroker()
			var mu sync.Mutex
			last := map[string]int{}
			if _, err := runtime.Subscribe(br, "orders", func(_ context.Context, o benchOrder, _ runtime.Delivery) runtime.Outcome {
				time.Sleep(time.Millisecond)
				mu.Lock()
				if p, ok := last[o.Customer]; ok && p >= o.ID {
					b.Errorf("%s: %d after %d", o.Customer, o.ID, p)
				}
				last[o.Customer] = o.ID
				mu.Unlock()
				return runtime.Ack()
			}, runtime.Workers(workers), runtime.ByKey()); err != nil {
				b.Fatal(err)
			}
			h := kinesislambda.Handler(br)
			for b.Loop() {
				clear(last)
				if _, err := h(context.Background(), ev); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(n*b.N)/b.Elapsed().Seconds(), "records/s")
		})
	}
}

// BenchmarkBatch10kCPU runs the hand loop and the adapter in turn, each
// round one event of 10k records for each, and reports the least CPU time
// each took per record (the least is the one others' load on a shared
// machine disturbed least) and their ratio.
func BenchmarkBatch10kCPU(b *testing.B) {
	if cpuTime() == 0 {
		b.Skip("no process CPU time here")
	}
	payload := benchEvent(b, 10000, 100)
	var sink int
	hand := func(_ context.Context, ev events.KinesisEvent) (events.KinesisEventResponse, error) {
		for _, r := range ev.Records {
			var o benchOrder
			if err := json.Unmarshal(r.Kinesis.Data, &o); err != nil {
				return events.KinesisEventResponse{BatchItemFailures: []events.KinesisBatchItemFailure{{ItemIdentifier: r.Kinesis.SequenceNumber}}}, nil
			}
			sink += o.ID
		}
		return events.KinesisEventResponse{}, nil
	}
	br := kinesistest.NewBroker()
	if _, err := runtime.Subscribe(br, "orders", func(_ context.Context, o benchOrder, _ runtime.Delivery) runtime.Outcome {
		sink += o.ID
		return runtime.Ack()
	}); err != nil {
		b.Fatal(err)
	}
	adapter := kinesislambda.Handler(br)
	measure := func(fn func(context.Context, events.KinesisEvent) (events.KinesisEventResponse, error), withEvent bool) time.Duration {
		var ev events.KinesisEvent
		if !withEvent {
			_ = json.Unmarshal(payload, &ev)
		}
		goruntime.GC()
		began := cpuTime()
		if withEvent {
			_ = json.Unmarshal(payload, &ev)
		}
		if _, err := fn(context.Background(), ev); err != nil {
			b.Fatal(err)
		}
		goruntime.GC() // each pays for its own garbage
		return cpuTime() - began
	}
	for _, withEvent := range []bool{false, true} {
		name := "records"
		if withEvent {
			name = "event+records"
		}
		b.Run(name, func(b *testing.B) {
			bestHand, bestAdapter := time.Duration(1<<62), time.Duration(1<<62)
			for b.Loop() {
				bestHand = min(bestHand, measure(hand, withEvent))
				bestAdapter = min(bestAdapter, measure(adapter, withEvent))
			}
			b.ReportMetric(float64(bestHand.Nanoseconds())/10000, "hand-cpu-ns/record")
			b.ReportMetric(float64(bestAdapter.Nanoseconds())/10000, "adapter-cpu-ns/record")
			b.ReportMetric(float64(bestAdapter)/float64(bestHand), "ratio")
		})
	}
}
