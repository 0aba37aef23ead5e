package kinesislambda_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"

	"github.com/kinesisgen/kinesisgen/runtime"
	"github.com/kinesisgen/kinesisgen/runtime/kinesislambda"
	"github.com/kinesisgen/kinesisgen/runtime/kinesistest"
)

// producer is a second broker on the server, connected, with no
// subscriber: it publishes as another service would.
func (e *env) producer() *runtime.Broker {
	e.t.Helper()
	p := e.srv.NewBroker()
	if err := p.Connect(e.ctx); err != nil {
		e.t.Fatal(err)
	}
	e.t.Cleanup(func() { _ = p.Shutdown(context.Background()) })
	return p
}

// End to end: kinesisgen publishers (plain, with headers, aggregated) and
// a foreign producer write 20 keys x 24 orders, each key's orders in turn
// through each of the four; the mapping stand-in reads both shards into
// workers=8 by_key, and every order is handled once, each key in order.
//
// With ParallelizationFactor 3 a shard's records go to three batch
// streams by their record's partition key, and an aggregate's record key
// is its first message's: a key's plain orders stay in order, its
// aggregated ones do not (they are all handled). The service does the
// same; docs/lambda.md says so.
func TestMappingEndToEnd(t *testing.T) {
	for _, factor := range []int{1, 3} {
		t.Run(fmt.Sprintf("factor%d", factor), func(t *testing.T) { testEndToEnd(t, factor) })
	}
}

func testEndToEnd(t *testing.T, factor int) {
	e := newEnv(t)
	const keys, per = 20, 24
	p := e.producer()
	plain := runtime.NewPublisher[order](p, runtime.PublisherSpec{Stream: "orders"})
	agg := runtime.NewPublisher[order](p, runtime.PublisherSpec{Stream: "orders", Aggregate: true})
	var wg sync.WaitGroup
	for k := range keys {
		wg.Go(func() {
			key := fmt.Sprintf("key-%d", k)
			for n := range per {
				o := order{Key: key, N: n}
				var err error
				switch n % 4 {
				case 0:
					err = plain.Message(o).PartitionKey(key).Publish(e.ctx)
				case 1:
					err = plain.Message(o).PartitionKey(key).Header("tenant", key).Publish(e.ctx)
				case 2:
					err = agg.Message(o).PartitionKey(key).Publish(e.ctx)
				case 3:
					putForeign(e, []order{o})
				}
				if err != nil {
					t.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()

	var mu sync.Mutex
	got := map[string][]int{}
	e.subscribe(func(_ context.Context, o order, d runtime.Delivery) runtime.Outcome {
		if h, ok := d.Header("tenant"); o.N%4 == 1 && (!ok || h != o.Key) {
			t.Errorf("%s/%d: header %q %v", o.Key, o.N, h, ok)
		}
		if d.PartitionKey != o.Key {
			t.Errorf("%s/%d under key %q", o.Key, o.N, d.PartitionKey)
		}
		mu.Lock()
		got[o.Key] = append(got[o.Key], o.N)
		mu.Unlock()
		return runtime.Ack()
	}, runtime.Workers(8), runtime.ByKey())
	stats, err := e.srv.Drain(e.ctx, kinesistest.EventSourceMapping{
		Stream: "orders", Function: kinesislambda.Handler(e.b),
		BatchSize: 25, ParallelizationFactor: factor, ReportBatchItemFailures: true, MaximumRetryAttempts: -1,
	})
	if err != nil {
		t.Fatal(err)
	}
	if stats.Failed+stats.Partial+stats.Discarded != 0 || stats.Invocations == 0 {
		t.Fatalf("stats %+v", stats)
	}
	seq := func(keep func(n int) bool) string {
		var ns []int
		for n := range per {
			if keep(n) {
				ns = append(ns, n)
			}
		}
		return fmt.Sprint(ns)
	}
	filter := func(ns []int, keep func(n int) bool) string {
		return fmt.Sprint(slices.DeleteFunc(slices.Clone(ns), func(n int) bool { return !keep(n) }))
	}
	all := func(int) bool { return true }
	aggregated := func(n int) bool { return n%4 == 2 }
	notAggregated := func(n int) bool { return n%4 != 2 }
	for k := range keys {
		key := fmt.Sprintf("key-%d", k)
		ns := got[key]
		if len(ns) != per {
			t.Errorf("%s handled %v", key, ns)
			continue
		}
		if factor == 1 {
			if s := filter(ns, all); s != seq(all) {
				t.Errorf("%s handled %s", key, s)
			}
			continue
		}
		if s := filter(ns, notAggregated); s != seq(notAggregated) {
			t.Errorf("%s handled %s, want %s", key, s, seq(notAggregated))
		}
		agg := slices.DeleteFunc(slices.Clone(ns), func(n int) bool { return !aggregated(n) })
		slices.Sort(agg)
		if s := fmt.Sprint(agg); s != seq(aggregated) {
			t.Errorf("%s handled aggregated %s, want %s", key, s, seq(aggregated))
		}
	}
}

// The outcomes as the consumer has them: Retry copies to the tip and is
// counted by retries=, Reject and a spent retry count dead-letter, a panic
// retries, a reply that cannot be published retries and then dead-letters.
func TestMappingOutcomes(t *testing.T) {
	e := newEnv(t)
	p := e.producer()
	pub := runtime.NewPublisher[order](p, runtime.PublisherSpec{Stream: "orders"})
	for n := range 40 {
		if err := pub.Message(order{Key: "k", N: n}).PartitionKey(fmt.Sprint(n % 7)).Publish(e.ctx); err != nil {
			t.Fatal(err)
		}
	}
	replies := runtime.NewPublisher[order](e.b, runtime.PublisherSpec{Stream: "no-such-stream"})
	var mu sync.Mutex
	attempts := map[int][]int{}
	e.subscribe(func(ctx context.Context, o order, d runtime.Delivery) runtime.Outcome {
		mu.Lock()
		attempts[o.N] = append(attempts[o.N], d.Attempt)
		mu.Unlock()
		switch o.N % 10 {
		case 1:
			return runtime.Retry()
		case 2:
			return runtime.Reject(fmt.Errorf("order %d is bad", o.N))
		case 3:
			if d.Attempt == 1 {
				panic("boom")
			}
		case 4:
			return runtime.ReplyOutcome(ctx, replies, o, nil)
		}
		return runtime.Ack()
	}, runtime.MaxRetries(2), runtime.DeadLetter("dl"), runtime.Workers(4))
	stats, err := e.srv.Drain(e.ctx, kinesistest.EventSourceMapping{
		Stream: "orders", Function: kinesislambda.Handler(e.b), BatchSize: 10, ReportBatchItemFailures: true, MaximumRetryAttempts: -1,
	})
	if err != nil || stats.Failed+stats.Partial != 0 {
		t.Fatalf("stats %+v, err %v", stats, err)
	}
	mu.Lock()
	defer mu.Unlock()
	for n := range 40 {
		want := "[1]"
		switch n % 10 {
		case 1, 4:
			want = "[1 2 3]" // retries=2: two copies, then the dead letter
		case 3:
			want = "[1 2]"
		}
		if got := fmt.Sprint(attempts[n]); got != want {
			t.Errorf("order %d: attempts %s, want %s", n, got, want)
		}
	}
	reasons := map[string]int{}
	for _, dl := range e.deadLetters() {
		switch {
		case strings.Contains(dl.Reason, "publish reply") && dl.Attempts == 3:
			reasons["reply"]++
		case strings.Contains(dl.Reason, "gave up after 3 attempts"):
			reasons["retries"]++
		case strings.Contains(dl.Reason, "is bad") && dl.Attempts == 1:
			reasons["reject"]++
		default:
			t.Errorf("dead letter %+v", dl)
		}
		if dl.Stream != "orders" || dl.SequenceNumber == "" || dl.ShardID == "" {
			t.Errorf("dead letter origin %+v", dl)
		}
	}
	if fmt.Sprint(reasons) != "map[reject:4 reply:4 retries:4]" {
		t.Fatalf("dead letters %v", reasons)
	}
}

// A record whose retry copy cannot be stored in time fails the invocation
// from it; the mapping resumes there, and in the end every order is
// handled, each key's last handlings in order.
func TestMappingResumesAfterFailure(t *testing.T) {
	e := newEnv(t)
	p := e.producer()
	pub := runtime.NewPublisher[order](p, runtime.PublisherSpec{Stream: "orders"})
	for n := range 30 {
		if err := pub.Message(order{Key: fmt.Sprint(n % 3), N: n}).PartitionKey(fmt.Sprint(n % 3)).Publish(e.ctx); err != nil {
			t.Fatal(err)
		}
	}
	until := time.Now().Add(1500 * time.Millisecond)
	e.srv.InjectPutFault(func(stream, key string) error {
		if stream == "orders" && time.Now().Before(until) {
			return fmt.Errorf("injected: put refused")
		}
		return nil
	})
	var mu sync.Mutex
	got := map[string][]int{}
	e.subscribe(func(_ context.Context, o order, d runtime.Delivery) runtime.Outcome {
		mu.Lock()
		got[o.Key] = append(got[o.Key], o.N)
		mu.Unlock()
		if o.N == 10 && d.Attempt == 1 {
			return runtime.Retry()
		}
		return runtime.Ack()
	}, runtime.Workers(3), runtime.ByKey())
	stats, err := e.srv.Drain(e.ctx, kinesistest.EventSourceMapping{
		Stream: "orders", Function: kinesislambda.Handler(e.b, kinesislambda.WithMargin(700*time.Millisecond)),
		BatchSize: 100, ReportBatchItemFailures: true, MaximumRetryAttempts: -1, Timeout: time.Second,
	})
	if err != nil || stats.Partial == 0 || stats.Failed != 0 {
		t.Fatalf("stats %+v, err %v", stats, err)
	}
	mu.Lock()
	defer mu.Unlock()
	seen := map[int]bool{}
	for key, ns := range got {
		for _, n := range ns {
			seen[n] = true
		}
		// After the last delivery of the failed record's batch stream,
		// the key's handlings are in order: the tail of ns is sorted.
		last := ns[len(ns)-1]
		if key == "1" && last != 10 && !slices.Contains(ns, 10) {
			t.Errorf("key 1 never handled 10: %v", ns)
		}
	}
	if len(seen) != 30 {
		t.Fatalf("handled %d orders, want 30: %v", len(seen), got)
	}
	// Order 10's key went on past it only after it was settled (the retry
	// copy, attempt 2, comes last).
	k1 := got["1"]
	if k1[len(k1)-1] != 10 {
		t.Errorf("key 1: %v: the retry copy of 10 should be handled last", k1)
	}
	_ = events.KinesisEvent{}
}

// The stand-in's own semantics: a function error bisects the batch down to
// the poison record, which is retried MaximumRetryAttempts times and then
// discarded to OnFailure; every other record is handled.
func TestMappingBisectAndDiscard(t *testing.T) {
	e := newEnv(t)
	putForeign(e, func() []order {
		var os []order
		for n := range 16 {
			os = append(os, order{Key: "k", N: n})
		}
		return os
	}())
	var mu sync.Mutex
	handled := map[string]bool{}
	var discarded []events.KinesisEventRecord
	poison := func(r events.KinesisEventRecord) bool { return strings.Contains(string(r.Kinesis.Data), `"n":7}`) }
	stats, err := e.srv.Drain(e.ctx, kinesistest.EventSourceMapping{
		Stream: "orders", BatchSize: 16, BisectBatchOnFunctionError: true, MaximumRetryAttempts: 2,
		Function: func(_ context.Context, ev events.KinesisEvent) (events.KinesisEventResponse, error) {
			for _, r := range ev.Records {
				if poison(r) {
					return events.KinesisEventResponse{}, fmt.Errorf("poison")
				}
			}
			mu.Lock()
			for _, r := range ev.Records {
				handled[r.Kinesis.SequenceNumber] = true
			}
			mu.Unlock()
			return events.KinesisEventResponse{}, nil
		},
		OnFailure: func(rs []events.KinesisEventRecord) { discarded = append(discarded, rs...) },
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(discarded) != 1 || !poison(discarded[0]) || len(handled) != 15 || stats.Discarded != 1 {
		t.Fatalf("discarded %d, handled %d, stats %+v", len(discarded), len(handled), stats)
	}
}
