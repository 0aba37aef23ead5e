package kinesislambda_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"

	"github.com/kinesisgen/kinesisgen/runtime"
	"github.com/kinesisgen/kinesisgen/runtime/kinesislambda"
	"github.com/kinesisgen/kinesisgen/runtime/kinesistest"
)

// handlings records, per key, the orders handled and, per order, the
// attempts it was handled with.
type handlings struct {
	mu       sync.Mutex
	keys     map[string][]int
	attempts map[int][]int
}

func (h *handlings) add(o order, d runtime.Delivery) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.keys == nil {
		h.keys, h.attempts = map[string][]int{}, map[int][]int{}
	}
	h.keys[o.Key] = append(h.keys[o.Key], o.N)
	h.attempts[o.N] = append(h.attempts[o.N], d.Attempt)
}

func (h *handlings) key(k string) string {
	h.mu.Lock()
	defer h.mu.Unlock()
	return fmt.Sprint(h.keys[k])
}

func (h *handlings) of(n int) string {
	h.mu.Lock()
	defer h.mu.Unlock()
	return fmt.Sprint(h.attempts[n])
}

// retry=in_place in one invocation: order 0 fails twice and then succeeds,
// handled with Attempt 1, 2, 3 in its lane; its key's later records wait
// for it, in order; the other key goes on meanwhile. Nothing is reported
// failed, nothing is published.
func TestInPlaceRetry(t *testing.T) {
	e := newEnv(t)
	var h handlings
	e.subscribe(func(_ context.Context, o order, d runtime.Delivery) runtime.Outcome {
		h.add(o, d)
		if o.N == 0 && d.Attempt < 3 {
			return runtime.Retry()
		}
		return runtime.Ack()
	}, runtime.Workers(2), runtime.ByKey(), runtime.RetryInPlace(), runtime.MaxRetries(3), runtime.DeadLetter("dl"))
	keys := []string{"a", "b", "a", "b", "a"}
	var recs []events.KinesisEventRecord
	for i, k := range keys {
		recs = append(recs, orderRecord(i, k))
	}
	resp, err := kinesislambda.Handler(e.b)(e.ctx, events.KinesisEvent{Records: recs})
	if err != nil || failed(resp) != "" || resp.BatchItemFailures == nil {
		t.Fatalf("resp %+v, err %v", resp, err)
	}
	if got := h.of(0); got != "[1 2 3]" {
		t.Errorf("order 0 attempts %s, want [1 2 3]", got)
	}
	if got := h.key("a"); got != "[0 0 0 2 4]" {
		t.Errorf("key a handled %s, want [0 0 0 2 4]", got)
	}
	if got := h.key("b"); got != "[1 3]" {
		t.Errorf("key b handled %s, want [1 3]", got)
	}
	if dls := e.deadLetters(); len(dls) != 0 {
		t.Errorf("dead letters %+v", dls)
	}
	if recs, _ := e.srv.Records("orders"); len(recs) != 0 {
		t.Errorf("%d records published to orders: in-place retries publish no copy", len(recs))
	}
}

// retry=in_place past retries=: the record goes to the dead letter within
// the invocation, after 1+retries attempts, and its key goes on.
func TestInPlaceRetryExhausted(t *testing.T) {
	e := newEnv(t)
	var h handlings
	e.subscribe(func(_ context.Context, o order, d runtime.Delivery) runtime.Outcome {
		h.add(o, d)
		if o.N == 1 {
			return runtime.Retry()
		}
		return runtime.Ack()
	}, runtime.Workers(2), runtime.ByKey(), runtime.RetryInPlace(), runtime.MaxRetries(2), runtime.DeadLetter("dl"))
	recs := []events.KinesisEventRecord{orderRecord(0, "a"), orderRecord(1, "a"), orderRecord(2, "a")}
	resp, err := kinesislambda.Handler(e.b)(e.ctx, events.KinesisEvent{Records: recs})
	if err != nil || failed(resp) != "" {
		t.Fatalf("resp %+v, err %v", resp, err)
	}
	if got := h.of(1); got != "[1 2 3]" {
		t.Errorf("order 1 attempts %s, want [1 2 3]", got)
	}
	if got := h.key("a"); got != "[0 1 1 1 2]" {
		t.Errorf("key a handled %s, want [0 1 1 1 2]", got)
	}
	dls := e.deadLetters()
	if len(dls) != 1 || dls[0].Attempts != 3 || !strings.Contains(dls[0].Reason, "gave up after 3 attempts") ||
		dls[0].SequenceNumber != recs[1].Kinesis.SequenceNumber {
		t.Fatalf("dead letters %+v", dls)
	}
}

// retry=in_place when the backoff would outlast the invocation's deadline
// less the margin: the retry stops at once (no billed wait for nothing),
// the record is left unsettled and reported as the earliest failure, and
// its key's later records are not handled; the mapping delivers it again
// from there, the key in order.
func TestInPlaceRetryDeadline(t *testing.T) {
	e := newEnv(t)
	var h handlings
	var fail atomic.Bool
	fail.Store(true)
	e.subscribe(func(_ context.Context, o order, d runtime.Delivery) runtime.Outcome {
		h.add(o, d)
		if o.N == 1 && fail.Load() {
			return runtime.Retry()
		}
		return runtime.Ack()
	}, runtime.Workers(2), runtime.ByKey(), runtime.RetryInPlace(), runtime.MaxRetries(5), runtime.DeadLetter("dl"))
	keys := []string{"a", "a", "b", "a", "b"}
	var recs []events.KinesisEventRecord
	for i, k := range keys {
		recs = append(recs, orderRecord(i, k))
	}
	hd := kinesislambda.Handler(e.b, kinesislambda.WithMargin(time.Second))
	// 90ms before the deadline less the margin: the first backoff
	// (InPlaceRetryBase/2 = 100ms at least) cannot end before it.
	const left = 90 * time.Millisecond
	ctx, cancel := context.WithTimeout(e.ctx, time.Second+left)
	began := time.Now()
	resp, err := hd(ctx, events.KinesisEvent{Records: recs})
	took := time.Since(began)
	cancel()
	if err != nil {
		t.Fatal(err)
	}
	if got, want := failed(resp), recs[1].Kinesis.SequenceNumber; got != want || len(resp.BatchItemFailures) != 1 {
		t.Fatalf("failures %+v, want only %s", resp.BatchItemFailures, want)
	}
	if took >= left {
		t.Errorf("took %v: the backoff waited for the deadline instead of stopping", took)
	}
	if got := h.of(1); got != "[1]" {
		t.Errorf("order 1 attempts %s, want [1]", got)
	}
	if got := h.key("a"); got != "[0 1]" {
		t.Errorf("key a handled %s, want [0 1]: its later records wait", got)
	}
	if dls := e.deadLetters(); len(dls) != 0 {
		t.Errorf("dead letters %+v: an unsettled record is not given up", dls)
	}
	// The mapping resumes at record 1 with a new invocation: attempts
	// count from 1 again (they are not kept between invocations).
	fail.Store(false)
	resp, err = hd(e.ctx, events.KinesisEvent{Records: recs[1:]})
	if err != nil || failed(resp) != "" {
		t.Fatalf("resp %+v, err %v", resp, err)
	}
	if got := h.key("a"); got != "[0 1 1 3]" {
		t.Errorf("key a handled %s, want [0 1 1 3]", got)
	}
	if got := h.of(1); got != "[1 1]" {
		t.Errorf("order 1 attempts %s, want [1 1]", got)
	}
}

// Through the mapping stand-in, 3 keys x 10 orders, workers=3 by_key,
// retries=10 in place, the invocation's deadline less the margin 1.5s:
//   - order 4 fails twice, then succeeds: handled with Attempt 1, 2, 3 in
//     one invocation, its key's later orders after it;
//   - order 8 fails its first 5 handlings: the backoffs of one invocation
//     (100-200ms, 200-400ms, 400-800ms, 800-1600ms) cannot reach a 5th
//     attempt in 1.5s, so the retry stops before the deadline, the record
//     is reported, and the mapping delivers it again from there: the next
//     invocation handles it from Attempt 1 until it succeeds.
//
// Each key's orders end up handled in order, order 8's key without a gap
// or repeat but order 8's own handlings; nothing is dead-lettered.
func TestMappingInPlaceRetry(t *testing.T) {
	e := newEnv(t)
	p := e.producer()
	pub := runtime.NewPublisher[order](p, runtime.PublisherSpec{Stream: "orders"})
	for n := range 30 {
		k := fmt.Sprint(n % 3)
		if err := pub.Message(order{Key: k, N: n}).PartitionKey(k).Publish(e.ctx); err != nil {
			t.Fatal(err)
		}
	}
	var h handlings
	var eights atomic.Int64
	e.subscribe(func(_ context.Context, o order, d runtime.Delivery) runtime.Outcome {
		h.add(o, d)
		switch {
		case o.N == 4 && d.Attempt < 3:
			return runtime.Retry()
		case o.N == 8 && eights.Add(1) <= 5:
			return runtime.Retry()
		}
		return runtime.Ack()
	}, runtime.Workers(3), runtime.ByKey(), runtime.RetryInPlace(), runtime.MaxRetries(10), runtime.DeadLetter("dl"))
	stats, err := e.srv.Drain(e.ctx, kinesistest.EventSourceMapping{
		Stream: "orders", Function: kinesislambda.Handler(e.b, kinesislambda.WithMargin(time.Second)),
		BatchSize: 100, ReportBatchItemFailures: true, MaximumRetryAttempts: -1, Timeout: 2500 * time.Millisecond,
	})
	if err != nil || stats.Failed != 0 || stats.Partial == 0 {
		t.Fatalf("stats %+v, err %v", stats, err)
	}
	if got := h.of(4); got != "[1 2 3]" {
		t.Errorf("order 4 attempts %s, want [1 2 3]", got)
	}
	// 3 or 4 attempts in the first invocation, the rest from 1 in the next.
	if got := h.of(8); got != "[1 2 3 1 2 3]" && got != "[1 2 3 4 1 2]" {
		t.Errorf("order 8 attempts %s", got)
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	for k, ns := range h.keys {
		// The last handling of each order: all of the key's, in order.
		var last []int
		seen := map[int]bool{}
		for i := len(ns) - 1; i >= 0; i-- {
			if !seen[ns[i]] {
				seen[ns[i]] = true
				last = append([]int{ns[i]}, last...)
			}
		}
		if len(last) != 10 || !slices.IsSorted(last) {
			t.Errorf("key %s handled %v", k, ns)
		}
		if k == "2" {
			// Nothing of order 8's key ran past it before it succeeded:
			// its handlings are its orders in turn, order 8 repeated.
			if got := fmt.Sprint(slices.Compact(slices.Clone(ns))); got != fmt.Sprint(last) {
				t.Errorf("key 2 handled %v", ns)
			}
		}
	}
	if dls := e.deadLetters(); len(dls) != 0 {
		t.Errorf("dead letters %+v", dls)
	}
}
