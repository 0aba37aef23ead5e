package runtime

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"slices"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/kinesis/types"
)

// fastRetries makes failed entries come back within milliseconds.
func fastRetries(c *config) {
	c.batch.retryBase = time.Millisecond
	c.batch.retryMax = 5 * time.Millisecond
}

func TestConcurrentPublishesCoalesce(t *testing.T) {
	f := newFake()
	f.gate = make(chan struct{})
	p := NewPublisher[order](connected(t, f, oneCallAtATime), PublisherSpec{Stream: "orders"})

	const n = 1200
	receipts := make([]Receipt, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	wg.Go(func() {
		receipts[0], errs[0] = p.Message(order{ID: 0}).Send(testCtx(t))
	})
	<-f.entered // the first call is in flight: everything else must queue
	for i := 1; i < n; i++ {
		wg.Go(func() { receipts[i], errs[i] = p.Message(order{ID: i}).Send(testCtx(t)) })
	}
	// Let the publishers queue up behind the held call, then release it.
	waitFor(t, func() bool { return unresolved(t, connOf(t, p), "orders") == n })
	close(f.gate)
	wg.Wait()

	seqs := map[[2]string]bool{} // a record is its shard and sequence number
	for i, err := range errs {
		if err != nil {
			t.Fatalf("publish %d: %v", i, err)
		}
		id := [2]string{receipts[i].ShardID, receipts[i].SequenceNumber}
		if receipts[i].SequenceNumber == "" || seqs[id] {
			t.Fatalf("publish %d: receipt %+v is empty or shared", i, receipts[i])
		}
		seqs[id] = true
	}
	calls := f.callSizes()
	// One held call of 1 record; the 1199 queued fit in three calls of ≤ 500.
	if len(calls) > 4 {
		t.Errorf("%d PutRecords calls for %d records (%v): publishes did not coalesce", len(calls), n, calls)
	}
	for _, c := range calls {
		if c > maxBatchRecords {
			t.Errorf("a call carried %d records, over the service limit", c)
		}
	}
}

func TestBatchByteLimit(t *testing.T) {
	f := newFake()
	f.gate = make(chan struct{})
	p := NewPublisher[[]byte](connected(t, f, WithCodec(rawCodec{}), oneCallAtATime), PublisherSpec{Stream: "blobs"})
	var wg sync.WaitGroup
	wg.Go(func() { _ = p.Publish(testCtx(t), []byte("x")) })
	<-f.entered
	for range 12 { // 12 × ~1 MiB: at most 4 per 5 MiB request
		wg.Go(func() {
			if err := p.Publish(testCtx(t), make([]byte, MaxRecordSize-20)); err != nil {
				t.Error(err)
			}
		})
	}
	waitFor(t, func() bool { return unresolved(t, connOf(t, p), "blobs") == 13 })
	close(f.gate)
	wg.Wait()
	for _, c := range f.callSizes()[1:] {
		if c > 5 {
			t.Errorf("a call carried %d records of ~1 MiB, over the 5 MiB request limit", c)
		}
	}
}

// TestPartialFailureRetriedInOrder fails chosen entries of PutRecords
// answers and checks that nothing is lost or duplicated and that every key's
// records are stored in the order they were submitted.
func TestPartialFailureRetriedInOrder(t *testing.T) {
	f := newFake()
	failed := map[string]int{}
	f.entryFault = func(call int, e types.PutRecordsRequestEntry) *string {
		// Fail every third entry's first two attempts, alternating the code.
		d := string(e.Data)
		var i int
		fmt.Sscanf(d[len(d)-4:], "%04d", &i)
		if i%3 == 0 && failed[d] < 2 {
			failed[d]++
			if failed[d] == 1 {
				return aws.String("ProvisionedThroughputExceededException")
			}
			return aws.String("InternalFailure")
		}
		return nil
	}
	b := connected(t, f, fastRetries)
	bt := batcherOf(t, b, "orders")

	// Submit in a known order without waiting, so many records of one key
	// are unresolved at once.
	const perKey = 60
	keys := []string{"alice", "bob", "carol"}
	var entries []*entry
	for i := range perKey {
		for _, k := range keys {
			e, err := bt.submit(testCtx(t), k, "", fmt.Appendf(nil, "%s-%04d", k, i), true, nil)
			if err != nil {
				t.Fatal(err)
			}
			entries = append(entries, e)
		}
		e, err := bt.submit(testCtx(t), uniqueKey(), "", fmt.Appendf(nil, "u-%04d", i), false, nil)
		if err != nil {
			t.Fatal(err)
		}
		entries = append(entries, e)
	}
	for _, e := range entries {
		if _, err := bt.await(e); err != nil {
			t.Fatalf("record %s: %v", e.data, err)
		}
	}
	if len(failed) == 0 {
		t.Fatal("the fault hook never fired")
	}

	stored := map[string][]string{}
	for _, r := range f.records() {
		stored[r.Key] = append(stored[r.Key], string(r.Data))
	}
	for _, k := range keys {
		var want []string
		for i := range perKey {
			want = append(want, fmt.Sprintf("%s-%04d", k, i))
		}
		if !slices.Equal(stored[k], want) {
			t.Errorf("key %s stored %v,\nwant %v", k, stored[k], want)
		}
	}
	if got, want := len(f.records()), perKey*(len(keys)+1); got != want {
		t.Errorf("stored %d records, want %d (lost or duplicated)", got, want)
	}
}

// A whole PutRecords call that fails (throttled, or lost in the transport)
// is sent again while later records of its keys wait: each key's records
// are stored in submit order, none lost, none twice.
func TestWholeCallFailureRetriedInOrder(t *testing.T) {
	for _, tc := range []struct {
		name string
		err  error
	}{
		{"throttled call", &types.ProvisionedThroughputExceededException{Message: aws.String("Rate exceeded for stream orders")}},
		{"transport error", fmt.Errorf("send request: %w", syscall.ECONNRESET)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFake()
			failedCalls := 0
			f.callFault = func(call int) error {
				// Two of every three of the first 30 calls fail whole.
				if call < 30 && call%3 != 2 {
					failedCalls++
					return tc.err
				}
				return nil
			}
			b := connected(t, f, fastRetries, WithPublishLinger(time.Millisecond))
			bt := batcherOf(t, b, "orders")
			// Submit without waiting, so each key has records queued behind
			// the one in a failing call.
			const perKey = 40
			keys := []string{"alice", "bob", "carol"}
			var entries []*entry
			for i := range perKey {
				for _, k := range keys {
					e, err := bt.submit(testCtx(t), k, "", fmt.Appendf(nil, "%s-%04d", k, i), true, nil)
					if err != nil {
						t.Fatal(err)
					}
					entries = append(entries, e)
				}
			}
			for _, e := range entries {
				if _, err := bt.await(e); err != nil {
					t.Fatalf("record %s: %v", e.data, err)
				}
			}
			f.mu.Lock()
			fails := failedCalls
			f.mu.Unlock()
			if fails < 5 {
				t.Fatalf("only %d calls failed: the test did not exercise whole-call retries", fails)
			}
			stored := map[string][]string{}
			for _, r := range f.records() {
				stored[r.Key] = append(stored[r.Key], string(r.Data))
			}
			for _, k := range keys {
				var want []string
				for i := range perKey {
					want = append(want, fmt.Sprintf("%s-%04d", k, i))
				}
				if !slices.Equal(stored[k], want) {
					t.Errorf("key %s stored %v,\nwant %v", k, stored[k], want)
				}
			}
		})
	}
}

func TestRetryGivesUpWhenContextEnds(t *testing.T) {
	f := newFake()
	throttle := true
	f.entryFault = func(int, types.PutRecordsRequestEntry) *string {
		if throttle {
			return aws.String("ProvisionedThroughputExceededException")
		}
		return nil
	}
	p := NewPublisher[order](connected(t, f, fastRetries), PublisherSpec{Stream: "orders"})
	// Long enough for several throttled calls even on a loaded machine.
	ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
	defer cancel()
	err := p.Message(order{ID: 1}).PartitionKey("c1").Publish(ctx)
	wantKind(t, err, ErrPublish, "orders")
	var ee *EntryError
	if !errors.As(err, &ee) || ee.Code != "ProvisionedThroughputExceededException" {
		t.Errorf("error %v does not carry the last cause", err)
	}
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("error %v does not say the context ended", err)
	}
	if len(f.callSizes()) < 2 {
		t.Errorf("made %d calls: the entry was not retried", len(f.callSizes()))
	}

	// The key is free again once its caller gave up.
	f.mu.Lock()
	throttle = false
	f.mu.Unlock()
	if err := p.Message(order{ID: 2}).PartitionKey("c1").Publish(testCtx(t)); err != nil {
		t.Fatalf("next publish of the key: %v", err)
	}
}

func TestCallErrors(t *testing.T) {
	tests := []struct {
		name  string
		err   error
		code  *string
		kind  error
		retry bool
	}{
		{name: "missing stream", err: &types.ResourceNotFoundException{Message: aws.String("no stream")}, kind: ErrStream},
		{name: "invalid argument", err: &types.InvalidArgumentException{Message: aws.String("bad")}, kind: ErrPublish},
		{name: "KMS disabled entry", code: aws.String("KMSDisabledException"), kind: ErrPublish},
		{name: "throttled call is retried", err: &types.ProvisionedThroughputExceededException{Message: aws.String("slow down")}, retry: true},
		{name: "transport failure is retried", err: errors.New("connection reset"), retry: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newFake()
			f.callFault = func(call int) error {
				if call == 0 {
					return tt.err
				}
				return nil
			}
			f.entryFault = func(call int, _ types.PutRecordsRequestEntry) *string {
				if call == 0 {
					return tt.code
				}
				return nil
			}
			p := NewPublisher[order](connected(t, f, fastRetries), PublisherSpec{Stream: "orders"})
			err := p.Publish(testCtx(t), order{ID: 1})
			if tt.retry {
				if err != nil || len(f.records()) != 1 {
					t.Fatalf("retryable failure: err %v, %d records stored", err, len(f.records()))
				}
				return
			}
			wantKind(t, err, tt.kind, "orders")
			if tt.err != nil && !errors.Is(err, tt.err) {
				t.Errorf("error %v does not wrap the cause", err)
			}
			if len(f.callSizes()) != 1 {
				t.Errorf("a non-retryable failure was retried (%d calls)", len(f.callSizes()))
			}
		})
	}
}

func connOf[T any](t *testing.T, p Publisher[T]) *conn {
	t.Helper()
	c, err := p.(*publisher[T]).b.connection()
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// batcherOf is the batcher of stream on b's connection.
func batcherOf(t *testing.T, b *Broker, stream string) *batcher {
	t.Helper()
	c, err := b.connection()
	if err != nil {
		t.Fatal(err)
	}
	bt, err := c.batcher(stream)
	if err != nil {
		t.Fatal(err)
	}
	return bt
}

// unresolved counts the records a stream's batcher holds.
func unresolved(t *testing.T, c *conn, stream string) int {
	t.Helper()
	bt, err := c.batcher(stream)
	if err != nil {
		t.Fatal(err)
	}
	return int(bt.unresolved.Load())
}

// oneCallAtATime makes the batching observable: one call in flight per stream.
func oneCallAtATime(c *config) { c.batch.maxInFlight = 1 }

// waitFor polls cond: the publishers being waited for expose no event.
func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal("condition not reached in 5s")
		}
		time.Sleep(time.Millisecond)
	}
}

func TestPartialBatchGoesAfterTheLingerWhileACallIsHeld(t *testing.T) {
	f := newFake()
	f.gate = make(chan struct{})
	defer close(f.gate)
	p := NewPublisher[order](connected(t, f, WithPublishLinger(time.Millisecond)), PublisherSpec{Stream: "orders"})
	go func() { _ = p.Publish(testCtx(t), order{ID: 1}) }()
	<-f.entered // an idle stream sends its first record at once
	go func() { _ = p.Publish(testCtx(t), order{ID: 2}) }()
	select {
	case <-f.entered: // a second call, without waiting for the first to return
	case <-time.After(5 * time.Second):
		t.Fatal("a partial batch waited for the call in flight instead of its linger")
	}
}

func TestCancelledContextPublishesNothing(t *testing.T) {
	f := newFake()
	p := NewPublisher[order](connected(t, f), PublisherSpec{Stream: "orders"})
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	err := p.Publish(ctx, order{ID: 1})
	wantKind(t, err, ErrPublish, "orders")
	if !errors.Is(err, context.Canceled) {
		t.Errorf("error %v does not say the context was cancelled", err)
	}
	if len(f.callSizes()) != 0 {
		t.Error("a publish with a cancelled context reached the service")
	}
}

// BenchmarkGCWithWaitingPublishers times a garbage collection while 2048
// callers wait in Publish for their results: the collector scans every
// waiting caller's stack at each cycle, so the depth and the live pointers
// of the waiting frames are a per-cycle cost that batching cannot amortise.
func BenchmarkGCWithWaitingPublishers(b *testing.B) {
	const callers = 2048
	f := newFake()
	f.gate = make(chan struct{})
	br := NewBroker(WithKinesisClient(f))
	ctx := context.Background()
	if err := br.Connect(ctx); err != nil {
		b.Fatal(err)
	}
	p := NewPublisher[order](br, PublisherSpec{Stream: "orders"})
	var wg sync.WaitGroup
	for i := range callers {
		wg.Go(func() {
			if err := p.Publish(ctx, order{ID: i, Customer: "c"}); err != nil {
				b.Error(err)
			}
		})
	}
	c, err := br.connection()
	if err != nil {
		b.Fatal(err)
	}
	bt, err := c.batcher("orders")
	if err != nil {
		b.Fatal(err)
	}
	for bt.unresolved.Load() < callers { // the callers expose no event before they wait
		time.Sleep(time.Millisecond)
	}
	runtime.GC()
	cpu0 := processCPU()
	b.ResetTimer()
	for b.Loop() {
		runtime.GC()
	}
	b.StopTimer()
	// CPU time, not wall time: the machine is shared and the collector's
	// workers run beside the benchmark goroutine.
	b.ReportMetric(float64(processCPU()-cpu0)/float64(b.N), "cpu-ns/gc")
	close(f.gate)
	wg.Wait()
	_ = br.Shutdown(ctx)
}

// processCPU is the user plus system CPU time of this process.
func processCPU() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
