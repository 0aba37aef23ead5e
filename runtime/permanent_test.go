package runtime_test

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/kinesisgen/kinesisgen/runtime"
)

// Issue 32 item 5: a handler's error wrapped in runtime.Permanent rejects
// the record at once, without spending its retries, in every result
// shape: error (OutcomeOf, as the generated Mount calls it) and (Y, error)
// (ReplyOutcome).
func TestPermanentErrorRejectsWithoutRetries(t *testing.T) {
	for _, shape := range []string{"error", "reply"} {
		t.Run(shape, func(t *testing.T) {
			e := newEnv(t)
			orders, dlq, replies := e.newStream("orders", 1), e.newStream("orders-dlq", 1), e.newStream("replies", 1)
			seen := make(chan runtime.Delivery, 8)
			b := e.broker()
			p := runtime.NewPublisher[order](b, runtime.PublisherSpec{Stream: replies})
			mustSubscribe(e, b, orders, func(ctx context.Context, o order, d runtime.Delivery) runtime.Outcome {
				seen <- d
				err := fmt.Errorf("order %d: %w", o.ID, runtime.Permanent(errors.New("no such customer")))
				if shape == "reply" {
					return runtime.ReplyOutcome(ctx, p, order{}, err)
				}
				return runtime.OutcomeOf(err)
			}, runtime.MaxRetries(3), runtime.DeadLetter(dlq))
			dead := readRaw(e, b, dlq, 1)
			e.connect(b)
			pub := e.publisher(orders)
			e.publish(pub, order{ID: 1, Customer: "alice"})
			r := receive(e, dead, 1)[0]
			dl, ok := r.DeadLetter()
			if !ok || dl.Attempts != 1 || dl.Reason != "order 1: no such customer" {
				t.Fatalf("dead letter %+v (ok %v), want reason %q after 1 attempt", dl, ok, "order 1: no such customer")
			}
			if n := len(seen); n != 1 {
				t.Fatalf("handled %d times, want once", n)
			}
		})
	}
	if o := runtime.OutcomeOf(runtime.Permanent(errors.New("x"))); o.String() != "reject" {
		t.Errorf("OutcomeOf(Permanent(x)) = %s, want reject", o)
	}
	if runtime.Permanent(nil) != nil {
		t.Error("Permanent(nil) is not nil")
	}
}
