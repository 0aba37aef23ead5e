package runtime_test

import (
	"context"
	"encoding/json"
	"slices"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/kinesis"

	"github.com/kinesisgen/kinesisgen/runtime"
)

// Issue 29, defect 4: a retry copy is published at the tip of the stream,
// where every application reading the stream finds it. Two applications
// read one stream and both retry: billing retries order 1 twice (handles
// it at attempts 1, 2, 3), audit retries order 3 once (attempts 1, 2).
// Each must handle every order once at attempt 1 and only its own copies
// after that, and count the other's copies as skipped in its Status.
func TestRetryCopyIsHandledOnlyByItsApplication(t *testing.T) {
	testRetryCopyIsHandledOnlyByItsApplication(newEnv(t))
}

func TestRetryCopyIsHandledOnlyByItsApplicationOnDynalite(t *testing.T) {
	testRetryCopyIsHandledOnlyByItsApplication(liveEnv(t))
}

func testRetryCopyIsHandledOnlyByItsApplication(e *env) {
	t := e.t
	stream := e.newStream("two-apps", 1)
	apps := []struct {
		name     string
		retry    int // the order it retries
		attempts int // until it acks it
		skips    int // the other's copies
		b        *runtime.Broker
		ch       chan delivered
	}{
		{name: "billing", retry: 1, attempts: 3, skips: 1},
		{name: "audit", retry: 3, attempts: 2, skips: 2},
	}
	for i := range apps {
		a := &apps[i]
		a.ch = make(chan delivered, 64)
		a.b = e.broker(runtime.WithApplication(a.name), runtime.WithOwnerID(a.name))
		mustSubscribe(e, a.b, stream, func(_ context.Context, o order, d runtime.Delivery) runtime.Outcome {
			a.ch <- delivered{o, d}
			if o.ID == a.retry && d.Attempt < a.attempts {
				return runtime.Retry()
			}
			return runtime.Ack()
		}, runtime.StartAt(runtime.Horizon()), runtime.MaxRetries(5))
		e.connect(a.b)
	}

	e.publishRange(e.publisher(stream), 0, 5)

	skipped := func(b *runtime.Broker) (n, handled uint64) {
		for _, s := range b.Status().Subscriptions {
			n += s.Outcomes.Skipped
			handled += s.Handled
		}
		return n, handled
	}
	for _, a := range apps {
		want := 5 + a.attempts - 1
		got := receive(e, a.ch, want)
		// The other's copies are read too: wait until they are counted
		// skipped (bounded), then nothing more may come.
		for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
			if n, _ := skipped(a.b); n >= uint64(a.skips) {
				break
			}
		}
		time.Sleep(200 * time.Millisecond)
		for extra := len(a.ch); extra > 0; extra-- {
			got = append(got, <-a.ch)
		}
		var firsts, again []int
		for _, d := range got {
			if d.d.Attempt == 1 {
				firsts = append(firsts, d.order.ID)
				continue
			}
			again = append(again, d.order.ID)
			if d.order.ID != a.retry {
				t.Errorf("%s handled order %d at attempt %d: another application's retry copy reached it", a.name, d.order.ID, d.d.Attempt)
			}
		}
		slices.Sort(firsts)
		if !slices.Equal(firsts, []int{0, 1, 2, 3, 4}) {
			t.Errorf("%s handled %v at attempt 1, want each of 0..4 once", a.name, firsts)
		}
		if len(again) != a.attempts-1 {
			t.Errorf("%s handled copies of %v, want its order %d %d more times", a.name, again, a.retry, a.attempts-1)
		}
		if n, handled := skipped(a.b); n != uint64(a.skips) || handled != uint64(want) {
			t.Errorf("%s's Status: %d skipped, %d handled; want the other's %d retry copies skipped and %d handled", a.name, n, handled, a.skips, want)
		}
	}
}

// A retry copy written by a version before the application header (an
// attempt header and no application) cannot say whose it is: every
// application handles it, as every one did then, so that a rolling
// upgrade loses no retry of the application that made it.
func TestRetryCopyWithoutApplicationIsHandledByEveryApplication(t *testing.T) {
	e := newEnv(t)
	stream := e.newStream("old-copy", 1)
	var chans []<-chan delivered
	for _, app := range []string{"billing", "audit"} {
		b := e.broker(runtime.WithApplication(app), runtime.WithOwnerID(app))
		h, ch := collect()
		chans = append(chans, ch)
		mustSubscribe(e, b, stream, h, runtime.StartAt(runtime.Horizon()))
		e.connect(b)
	}
	payload, _ := json.Marshal(order{ID: 7, Customer: "c7"})
	data := append([]byte{0xFE, 'k', 'g', 'E', 1, 1}, byte(len(runtime.AttemptHeader)))
	data = append(data, runtime.AttemptHeader...)
	data = append(append(data, 1, '2'), payload...) // value length 1, "2"
	if h, _, err := runtime.DecodeRecord(data); err != nil || h[runtime.AttemptHeader] != "2" {
		t.Fatalf("the old copy decodes to %v, %v", h, err)
	}
	if _, err := e.api.PutRecord(e.ctx, &kinesis.PutRecordInput{StreamName: aws.String(stream), PartitionKey: aws.String("c7"), Data: data}); err != nil {
		t.Fatal(err)
	}
	for i, ch := range chans {
		d := receive(e, ch, 1)[0]
		if d.order.ID != 7 || d.d.Attempt != 2 {
			t.Errorf("application %d handled %+v at attempt %d, want order 7 at attempt 2", i, d.order, d.d.Attempt)
		}
	}
}
