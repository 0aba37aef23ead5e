package runtime

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/kinesis"
	"github.com/aws/smithy-go"
)

// refusingKinesis refuses a whole PutRecords request, as the service does,
// when any entry's key is the refused one: a rule the runtime does not know
// (the 256-emoji key of the interop run was one, before the runtime counted
// UTF-16 units). It holds the first call until gate is closed.
type refusingKinesis struct {
	*fakeKinesis
	refuse string
	gate   chan struct{}

	mu      sync.Mutex
	calls   int
	refused int
}

func (r *refusingKinesis) PutRecords(ctx context.Context, in *kinesis.PutRecordsInput, opts ...func(*kinesis.Options)) (*kinesis.PutRecordsOutput, error) {
	r.mu.Lock()
	first := r.calls == 0
	r.calls++
	r.mu.Unlock()
	if first {
		r.fakeKinesis.entered <- 0
		<-r.gate
	}
	for _, e := range in.Records {
		if aws.ToString(e.PartitionKey) == r.refuse {
			r.mu.Lock()
			r.refused++
			r.mu.Unlock()
			return nil, &smithy.OperationError{ServiceID: "Kinesis", OperationName: "PutRecords", Err: &smithy.GenericAPIError{
				Code: "ValidationException", Message: "1 validation error detected: Value at 'records.member.partitionKey' failed to satisfy constraint",
			}}
		}
	}
	return r.fakeKinesis.PutRecords(ctx, in, opts...)
}

// TestOneRefusedEntryFailsAlone (issue 9, scenario 12): a request the
// service refuses whole because of one entry is split until that entry is
// alone; it fails with the service's error, and the 49 records that shared
// its request are stored.
func TestOneRefusedEntryFailsAlone(t *testing.T) {
	r := &refusingKinesis{fakeKinesis: newFake(), refuse: "refused", gate: make(chan struct{})}
	b := NewBroker(WithKinesisClient(r), oneCallAtATime, fastRetries)
	if err := b.Connect(testCtx(t)); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = b.Shutdown(context.Background()) })
	p := NewPublisher[order](b, PublisherSpec{Stream: "orders"})

	const n = 50 // one held, then 48 valid and one refused in one request
	errs := make([]error, n)
	key := func(i int) string {
		if i == 17 {
			return "refused"
		}
		return fmt.Sprintf("k%d", i)
	}
	var wg sync.WaitGroup
	wg.Go(func() { errs[0] = p.Message(order{ID: 0}).PartitionKey(key(0)).Publish(testCtx(t)) })
	<-r.fakeKinesis.entered
	for i := 1; i < n; i++ {
		wg.Go(func() { errs[i] = p.Message(order{ID: i}).PartitionKey(key(i)).Publish(testCtx(t)) })
	}
	waitFor(t, func() bool { return unresolved(t, connOf(t, p), "orders") == n })
	close(r.gate)
	wg.Wait()

	for i, err := range errs {
		if key(i) == "refused" {
			wantKind(t, err, ErrPublish, "orders")
			if api, ok := errors.AsType[smithy.APIError](err); !ok || api.ErrorCode() != "ValidationException" {
				t.Errorf("the refused record's error %v does not carry the service's ValidationException", err)
			}
			continue
		}
		if err != nil {
			t.Errorf("record %d shared a request with the refused one and failed: %v", i, err)
		}
	}
	if got := len(r.fakeKinesis.records()); got != n-1 {
		t.Errorf("%d records stored, want %d", got, n-1)
	}
	// 49 records: the refused one is alone after log2(49) < 6 splits, each
	// costing one refused call and at most one stored half.
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.calls > 2+2*6 || r.refused > 1+6 {
		t.Errorf("%d calls (%d refused) to isolate one entry among 49", r.calls, r.refused)
	}
}
