package runtime

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/aws/smithy-go"
)

// TestShutdownWhileARefusedRequestIsSplit: a request the service refuses
// whole (a ValidationException, which may be one entry's fault) returns
// while a Shutdown waits for it. Its entries, queued again in halves (see
// isolate), are failed by the shutdown like any queued record: every
// publish returns an ErrPublish or ErrNotConnected error, nothing is
// stored, and the batcher does not crash (the halves carry no retry
// history, which the shutdown's failure must not rely on).
func TestShutdownWhileARefusedRequestIsSplit(t *testing.T) {
	f := newFake()
	f.gate = make(chan struct{}) // every call is held until the shutdown has begun
	f.callFault = func(int) error {
		return &smithy.OperationError{ServiceID: "Kinesis", OperationName: "PutRecords", Err: &smithy.GenericAPIError{
			Code: "ValidationException", Message: "1 validation error detected",
		}}
	}
	b := NewBroker(WithKinesisClient(f))
	if err := b.Connect(testCtx(t)); err != nil {
		t.Fatal(err)
	}
	p := NewPublisher[order](b, PublisherSpec{Stream: "orders"})
	const n = 10
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			errs[i] = p.Message(order{ID: i}).PartitionKey(fmt.Sprint("k", i)).Publish(context.Background())
		})
	}
	// Every record in a held call, one call at least holding several.
	waitFor(t, func() bool {
		sizes, sum, most := f.callSizes(), 0, 0
		for _, s := range sizes {
			sum, most = sum+s, max(most, s)
		}
		return sum == n && most > 1
	})
	bt := batcherOf(t, b, "orders")
	shut := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		shut <- b.Shutdown(ctx)
	}()
	waitFor(t, func() bool {
		bt.mu.Lock()
		defer bt.mu.Unlock()
		return bt.closing
	})
	close(f.gate)
	if err := <-shut; err != nil {
		t.Fatalf("Shutdown: %v", err)
	}
	wg.Wait()
	for i, err := range errs {
		if !errors.Is(err, ErrPublish) && !errors.Is(err, ErrNotConnected) {
			t.Errorf("record %d: %v, want ErrPublish (refused) or ErrNotConnected (not sent again)", i, err)
		}
	}
	if got := len(f.records()); got != 0 {
		t.Errorf("%d records stored, want none: every request was refused", got)
	}
}
