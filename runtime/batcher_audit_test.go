package runtime

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/kinesis"
	"github.com/aws/aws-sdk-go-v2/service/kinesis/types"
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

// lostAnswers is the fake Kinesis whose first call is stored and then
// answered with a transport error (the connection reset after the service
// stored the records), or, with hold, not answered until the call's
// context ends.
type lostAnswers struct {
	*fakeKinesis
	hold bool

	mu   sync.Mutex
	lost bool
}

func (l *lostAnswers) PutRecords(ctx context.Context, in *kinesis.PutRecordsInput, opts ...func(*kinesis.Options)) (*kinesis.PutRecordsOutput, error) {
	l.mu.Lock()
	first := !l.lost
	l.lost = true
	l.mu.Unlock()
	out, err := l.fakeKinesis.PutRecords(ctx, in, opts...)
	if !first || err != nil {
		return out, err
	}
	if l.hold {
		<-ctx.Done()
		return nil, ctx.Err()
	}
	return nil, fmt.Errorf("send request: %w", syscall.ECONNRESET)
}

// slowRetries makes a failed entry wait before it is sent again for
// longer than any test runs, so that whatever ends its wait (its caller,
// a shutdown) ends it first. The wait is drawn in [0, backoff) (full
// jitter): at a minute, one in 300 drew less than a caller's 200 ms.
func slowRetries(c *config) { c.batch.retryBase, c.batch.retryMax = 1000*time.Hour, 1000*time.Hour }

// A record whose first attempt was stored but whose answer was lost
// waits out a backoff; when its caller gives up, or a shutdown fails it,
// meanwhile, its error must say that it may have been written (it was),
// never only that the runtime gave up on it or was not connected. One
// whose attempt was refused (throttled) was not written and is not said
// to be.
func TestGivingUpAfterALostAnswerSaysTheRecordMayBeStored(t *testing.T) {
	for _, tc := range []struct {
		name      string
		hold      bool // the answer never comes: the shutdown cancels the call
		shutdown  bool // a shutdown ends the wait, not the caller
		throttled bool // the first attempt is refused, not lost
	}{
		{name: "caller gives up during the backoff"},
		{name: "shutdown during the backoff", shutdown: true},
		{name: "shutdown cancels the unanswered call", hold: true, shutdown: true},
		{name: "caller gives up after a refusal", throttled: true},
		{name: "shutdown after a refusal", throttled: true, shutdown: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			l := &lostAnswers{fakeKinesis: newFake(), hold: tc.hold}
			if tc.throttled {
				l.lost = true // no lost answer: the first attempt is refused instead
				l.entryFault = func(call int, _ types.PutRecordsRequestEntry) *string {
					if call == 0 {
						return aws.String("ProvisionedThroughputExceededException")
					}
					return nil
				}
			}
			b := NewBroker(WithKinesisClient(l), slowRetries)
			if err := b.Connect(testCtx(t)); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = b.Shutdown(context.Background()) })
			p := NewPublisher[order](b, PublisherSpec{Stream: "orders"})
			ctx := testCtx(t)
			if !tc.shutdown {
				var cancel context.CancelFunc
				ctx, cancel = context.WithTimeout(ctx, 200*time.Millisecond)
				defer cancel()
			}
			done := make(chan error, 1)
			go func() { done <- p.Message(order{ID: 1}).PartitionKey("alice").Publish(ctx) }()
			waitFor(t, func() bool { return len(l.callSizes()) == 1 })
			if tc.shutdown {
				if !tc.hold {
					time.Sleep(20 * time.Millisecond) // the lost answer is in: waiting out its backoff
				}
				sctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
				defer cancel()
				_ = b.Shutdown(sctx)
			}
			err := <-done
			if err == nil {
				t.Fatal("publish returned nil")
			}
			t.Logf("publish: %v", err)
			stored := len(l.records()) == 1
			if stored != strings.Contains(err.Error(), "may have been written") || stored != errors.Is(err, ErrMayBeStored) {
				t.Errorf("record stored: %v; error: %v (ErrMayBeStored: %v); want it to say the record may have been written, and match ErrMayBeStored, exactly when it was",
					stored, err, errors.Is(err, ErrMayBeStored))
			}
		})
	}
}
