package runtime_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/kinesisgen/kinesisgen/runtime"
)

// deadLetters creates the dead-letter stream dl (one shard), subscribes a
// raw reader to it and reports what each dead letter says.
func deadLetters(e *env, dl string) <-chan runtime.DeadLetterInfo {
	e.t.Helper()
	e.createStream(dl, 1)
	ch := make(chan runtime.DeadLetterInfo, 16)
	b := e.broker()
	mustSubscribe(e, b, dl, func(_ context.Context, rec runtime.RawRecord, _ runtime.Delivery) runtime.Outcome {
		info, _ := rec.DeadLetter()
		ch <- info
		return runtime.Ack()
	}, runtime.StartAt(runtime.Horizon()))
	e.connect(b)
	return ch
}

// Middleware of the broker runs outside the stream's, which runs outside
// the subscription's own; within each the first added is outermost. Each
// sees the decoded message, and the handler's outcome on the way back.
func TestMiddlewareRunsInOrderFirstAddedOutermost(t *testing.T) {
	e := newEnv(t)
	stream := e.newStream("mw-order", 1)
	var mu sync.Mutex
	var trail []string
	note := func(s string) { mu.Lock(); trail = append(trail, s); mu.Unlock() }
	mw := func(name string) runtime.Middleware {
		return func(next runtime.HandleFunc) runtime.HandleFunc {
			return func(ctx context.Context, d runtime.Delivery, msg any) runtime.Outcome {
				note(fmt.Sprintf("%s> %+v", name, msg))
				out := next(ctx, d, msg)
				note(fmt.Sprintf("<%s %s", name, out))
				return out
			}
		}
	}
	done := make(chan struct{})
	b := e.broker(runtime.WithMiddleware(mw("broker1"), mw("broker2")),
		runtime.WithStreamMiddleware(stream, mw("stream")),
		runtime.WithStreamMiddleware("another-stream", mw("other")))
	mustSubscribe(e, b, stream, func(_ context.Context, o order, _ runtime.Delivery) runtime.Outcome {
		note("handler")
		close(done)
		return runtime.Ack()
	}, runtime.StartAt(runtime.Horizon()), runtime.Use(mw("sub1"), nil, mw("sub2")))
	e.connect(b)
	e.publish(e.publisher(stream), order{ID: 7, Customer: "c"})
	<-done
	eventually(t, func() bool { mu.Lock(); defer mu.Unlock(); return len(trail) == 11 })
	want := []string{
		"broker1> {ID:7 Customer:c}", "broker2> {ID:7 Customer:c}", "stream> {ID:7 Customer:c}",
		"sub1> {ID:7 Customer:c}", "sub2> {ID:7 Customer:c}", "handler",
		"<sub2 ack", "<sub1 ack", "<stream ack", "<broker2 ack", "<broker1 ack",
	}
	mu.Lock()
	defer mu.Unlock()
	if !slices.Equal(trail, want) {
		t.Errorf("trail:\n%s\nwant:\n%s", strings.Join(trail, "\n"), strings.Join(want, "\n"))
	}
}

// A middleware that changes the handler's outcome decides the record's
// fate: a handler's Retry made a Reject goes to the dead-letter stream at
// once, with the middleware's reason.
func TestMiddlewareChangesTheOutcome(t *testing.T) {
	e := newEnv(t)
	stream, dl := e.stream("mw-change"), e.stream("mw-change-dl")
	e.createStream(stream, 1)
	letters := deadLetters(e, dl)
	permanent := func(next runtime.HandleFunc) runtime.HandleFunc {
		return func(ctx context.Context, d runtime.Delivery, msg any) runtime.Outcome {
			out := next(ctx, d, msg)
			if out.String() == "retry" && strings.Contains(fmt.Sprint(out.Err()), "schema") {
				return runtime.Reject(fmt.Errorf("permanent: %w", out.Err()))
			}
			return out
		}
	}
	calls := make(chan int, 8)
	b := e.broker()
	mustSubscribe(e, b, stream, func(_ context.Context, o order, d runtime.Delivery) runtime.Outcome {
		calls <- d.Attempt
		return runtime.OutcomeOf(errors.New("schema mismatch"))
	}, runtime.StartAt(runtime.Horizon()), runtime.DeadLetter(dl), runtime.Use(permanent))
	e.connect(b)
	e.publish(e.publisher(stream), order{ID: 1, Customer: "c"})
	got := receive(e, letters, 1)[0]
	if got.Reason != "permanent: schema mismatch" || got.Attempts != 1 {
		t.Errorf("dead letter: reason %q after %d attempts, want the middleware's reason after 1", got.Reason, got.Attempts)
	}
	if n := len(calls); n != 1 {
		t.Errorf("handler called %d times, want 1 (no retry)", n)
	}
}

// A middleware may reject a delivery without calling the handler: here one
// that lacks a tenant header.
func TestMiddlewareRejectsWithoutCallingTheHandler(t *testing.T) {
	e := newEnv(t)
	stream, dl := e.stream("mw-reject"), e.stream("mw-reject-dl")
	e.createStream(stream, 1)
	letters := deadLetters(e, dl)
	needTenant := func(next runtime.HandleFunc) runtime.HandleFunc {
		return func(ctx context.Context, d runtime.Delivery, msg any) runtime.Outcome {
			if _, ok := d.Header("tenant"); !ok {
				return runtime.Reject(errors.New("no tenant header"))
			}
			return next(ctx, d, msg)
		}
	}
	handled := make(chan order, 8)
	b := e.broker(runtime.WithStreamMiddleware(stream, needTenant))
	mustSubscribe(e, b, stream, func(_ context.Context, o order, _ runtime.Delivery) runtime.Outcome {
		handled <- o
		return runtime.Ack()
	}, runtime.StartAt(runtime.Horizon()), runtime.DeadLetter(dl))
	e.connect(b)
	p := e.publisher(stream)
	e.publish(p, order{ID: 1, Customer: "c"})
	if err := p.Message(order{ID: 2, Customer: "c"}).Header("tenant", "t1").Publish(e.ctx); err != nil {
		t.Fatal(err)
	}
	if got := receive(e, handled, 1)[0]; got.ID != 2 {
		t.Errorf("handler got order %d, want only 2", got.ID)
	}
	if got := receive(e, letters, 1)[0]; got.Reason != "no tenant header" {
		t.Errorf("dead letter reason %q", got.Reason)
	}
	if len(handled) != 0 {
		t.Errorf("the handler saw the rejected record too")
	}
}

// Timeout cancels the handler's context after its limit and counts the
// delivery as a retry: a handler that always hangs is delivered again
// (attempt 2) and then given up, its reason naming the timeout.
func TestTimeoutCancelsTheHandlerAndRetries(t *testing.T) {
	e := newEnv(t)
	stream, dl := e.stream("mw-timeout"), e.stream("mw-timeout-dl")
	e.createStream(stream, 1)
	letters := deadLetters(e, dl)
	type call struct {
		attempt int
		err     error
		waited  time.Duration
	}
	calls := make(chan call, 8)
	b := e.broker()
	mustSubscribe(e, b, stream, func(ctx context.Context, o order, d runtime.Delivery) runtime.Outcome {
		began := time.Now()
		<-ctx.Done()
		calls <- call{d.Attempt, ctx.Err(), time.Since(began)}
		return runtime.Ack() // too late: the timeout decides
	}, runtime.StartAt(runtime.Horizon()), runtime.DeadLetter(dl), runtime.MaxRetries(1),
		runtime.Use(runtime.Timeout(50*time.Millisecond)))
	e.connect(b)
	e.publish(e.publisher(stream), order{ID: 1, Customer: "c"})
	got := receive(e, calls, 2)
	for i, c := range got {
		if c.attempt != i+1 || !errors.Is(c.err, context.DeadlineExceeded) || c.waited > 5*time.Second {
			t.Errorf("call %d: attempt %d, ctx %v after %v; want attempt %d cancelled by its deadline", i, c.attempt, c.err, c.waited, i+1)
		}
	}
	letter := receive(e, letters, 1)[0]
	if !strings.Contains(letter.Reason, "handler timed out after 50ms") || letter.Attempts != 2 {
		t.Errorf("dead letter: reason %q after %d attempts", letter.Reason, letter.Attempts)
	}
}

// LogOutcomes logs each outcome as the handler returned it: a panic the
// runtime recovered below it shows as a retry at Warn, the redelivery's ack
// at Debug, both naming the record.
func TestLogOutcomesSeesARecoveredPanicAsARetry(t *testing.T) {
	e := newEnv(t)
	stream := e.newStream("mw-log", 1)
	acked := make(chan struct{})
	b := e.broker(runtime.WithMiddleware(runtime.LogOutcomes(nil)))
	mustSubscribe(e, b, stream, func(_ context.Context, o order, d runtime.Delivery) runtime.Outcome {
		if d.Attempt == 1 {
			panic("first attempt fails")
		}
		close(acked)
		return runtime.Ack()
	}, runtime.StartAt(runtime.Horizon()), runtime.HandlerName("test.Handler"))
	e.connect(b)
	e.publish(e.publisher(stream), order{ID: 1, Customer: "c"})
	<-acked
	eventually(t, func() bool { return strings.Contains(e.logs.String(), `"outcome":"ack"`) })
	var retry, ack string
	for l := range strings.SplitSeq(e.logs.String(), "\n") {
		if strings.Contains(l, `"msg":"handled"`) && strings.Contains(l, `"outcome":"retry"`) {
			retry = l
		}
		if strings.Contains(l, `"msg":"handled"`) && strings.Contains(l, `"outcome":"ack"`) {
			ack = l
		}
	}
	for _, want := range []string{`"level":"WARN"`, `"attempt":1`, `handler panicked: first attempt fails`, `"stream":"` + stream, `"handler":"test.Handler"`, `"shard":"shardId-`, `"sequence":"`} {
		if !strings.Contains(retry, want) {
			t.Errorf("retry line lacks %s: %s", want, retry)
		}
	}
	if !strings.Contains(ack, `"level":"DEBUG"`) || !strings.Contains(ack, `"attempt":2`) {
		t.Errorf("ack line: %s", ack)
	}
}

// eventually polls cond for up to testTimeout.
func eventually(t *testing.T, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(testTimeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal("condition not reached")
		}
		time.Sleep(5 * time.Millisecond)
	}
}
