package runtime_test

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/kinesis"
	"github.com/aws/aws-sdk-go-v2/service/kinesis/types"

	"github.com/kinesisgen/kinesisgen/runtime"
	"github.com/kinesisgen/kinesisgen/runtime/kinesisapi"
	"github.com/kinesisgen/kinesisgen/runtime/kinesistest"
)

// concurrency tracks how many handlings of each record run at once.
type concurrency struct {
	mu      sync.Mutex
	now     map[string]int
	most    int
	handled int
}

func (c *concurrency) begin(id string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.now == nil {
		c.now = map[string]int{}
	}
	c.now[id]++
	c.handled++
	c.most = max(c.most, c.now[id])
}

func (c *concurrency) end(id string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now[id]--
}

// idle tells whether no handling runs now.
func (c *concurrency) idle() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, n := range c.now {
		if n > 0 {
			return false
		}
	}
	return true
}

func (c *concurrency) counts() (most, handled int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.most, c.handled
}

// longHandlerVisibility is the visibility timeout of the tests that keep a
// record hidden for several of them. The keeper extends it every quarter
// and tolerates a stall of about half: under make test's load a 1 s
// timeout was lost now and then (the subscriber said so: Status counted it).
const longHandlerVisibility = 2 * time.Second

// A handler that runs past the visibility timeout keeps its record: the
// subscriber extends its visibility while it runs, so no other worker
// (or instance) receives it meanwhile, and it is handled once.
func TestQueueSubscriberExtendsVisibilityOfLongHandlers(t *testing.T) {
	for _, be := range queueBackends {
		t.Run(be.name, func(t *testing.T) {
			_, api := be.make(t)
			b := queueBroker(t, api)
			var c concurrency
			_, err := runtime.Subscribe(b, "orders", func(ctx context.Context, o order, d runtime.Delivery) runtime.Outcome {
				c.begin(d.RecordID)
				defer c.end(d.RecordID)
				time.Sleep(5 * time.Second) // 2.5 visibility timeouts
				return runtime.Ack()
			}, runtime.CreateOnDemandIfMissing(), runtime.Queue("work"), runtime.Visibility(longHandlerVisibility), runtime.Workers(2))
			if err != nil {
				t.Fatal(err)
			}
			putQueueOrders(t, api, "orders", 0, 1)
			waitFor(t, "the handling", 10*time.Second, func() bool { _, n := c.counts(); return n > 0 })
			// Done, acknowledged, and past another visibility timeout.
			time.Sleep(8 * time.Second)
			most, handled := c.counts()
			if most > 1 || handled != 1 {
				t.Errorf("one record handled %d times, %d at once: want once", handled, most)
			}
			st := b.Status().Subscriptions[0]
			if st.VisibilityExtended == 0 || st.VisibilityLost != 0 {
				t.Errorf("status: %d extensions, %d lost, want some and none", st.VisibilityExtended, st.VisibilityLost)
			}
		})
	}
}

// A handled record stays hidden until its acknowledgement lands: the
// visibility is extended while a slow AcknowledgeQueueRecords (a loaded
// server, retries) is under way, so the record is not received and
// handled again meanwhile.
func TestQueueSubscriberKeepsARecordHiddenUntilItsAckLands(t *testing.T) {
	// 2.5 visibility timeouts, then it lands.
	_, b, _, c := slowFirstAck(t, 5*time.Second, longHandlerVisibility)
	// The acknowledgement lands and another visibility timeout passes.
	time.Sleep(8 * time.Second)
	if most, handled := c.counts(); handled != 1 {
		t.Errorf("one record handled %d times (%d at once) while its acknowledgement was slow: want once", handled, most)
	}
	st := b.Status().Subscriptions[0]
	if st.VisibilityLost != 0 {
		t.Errorf("status: %d visibilities lost, want none (the acknowledgement landed)", st.VisibilityLost)
	}
}

// When the extensions fail, the subscriber says so (log and Status) and
// loses nothing: the record is delivered again once its visibility is
// over, and handled to the end.
func TestQueueSubscriberFailingExtensionLosesNothing(t *testing.T) {
	s := kinesistest.New()
	var refused atomic.Int64
	s.InjectCallFault(func(c kinesistest.Call) error {
		if c.Op == kinesistest.OpUpdateQueueRecordsVisibility {
			refused.Add(1)
			return errors.New("injected: visibility not updated")
		}
		return nil
	})
	var logs syncBuffer
	b := queueBroker(t, s, runtime.WithLogger(slog.New(slog.NewTextHandler(&logs, nil))))
	var c concurrency
	var acked sync.Map
	_, err := runtime.Subscribe(b, "orders", func(ctx context.Context, o order, d runtime.Delivery) runtime.Outcome {
		c.begin(d.RecordID)
		defer c.end(d.RecordID)
		if d.Attempt == 1 {
			time.Sleep(2500 * time.Millisecond)
		}
		acked.Store(o.ID, true)
		return runtime.Ack()
	}, runtime.CreateOnDemandIfMissing(), runtime.Queue("work"), runtime.Visibility(time.Second), runtime.Workers(2))
	if err != nil {
		t.Fatal(err)
	}
	putQueueOrders(t, s, "orders", 0, 1)
	waitFor(t, "a second delivery", 10*time.Second, func() bool { _, n := c.counts(); return n >= 2 })
	waitFor(t, "the handling", 10*time.Second, func() bool { _, ok := acked.Load(0); return ok })
	if refused.Load() == 0 {
		t.Error("no extension was tried")
	}
	waitFor(t, "the failure in Status", 5*time.Second, func() bool { return b.Status().Subscriptions[0].VisibilityLost > 0 })
	if !strings.Contains(logs.String(), "UpdateQueueRecordsVisibility failed") || !strings.Contains(logs.String(), "it may be handled twice") {
		t.Errorf("the failed extension is not in the log:\n%s", logs.String())
	}
	// Nothing left: the second delivery was acknowledged, so the queue
	// hands the record out no more.
	s.InjectCallFault(nil)
	time.Sleep(2 * time.Second)
	if _, n := c.counts(); n != 2 {
		t.Errorf("handled %d times, want twice", n)
	}
}

// Extensions end after the longest a queue keeps one record hidden: a
// handler still running then is taken as stuck, and its record goes to
// another receiver.
func TestQueueSubscriberStopsExtendingAtMaxHold(t *testing.T) {
	runtime.ShortenQueueMaxHold(t, 1500*time.Millisecond)
	s := kinesistest.New()
	b := queueBroker(t, s)
	var c concurrency
	release := make(chan struct{})
	defer close(release)
	if _, err := runtime.Subscribe(b, "orders", func(ctx context.Context, o order, d runtime.Delivery) runtime.Outcome {
		c.begin(d.RecordID)
		defer c.end(d.RecordID)
		if d.Attempt == 1 {
			<-release // stuck
		}
		return runtime.Ack()
	}, runtime.CreateOnDemandIfMissing(), runtime.Queue("work"), runtime.Visibility(time.Second), runtime.Workers(2)); err != nil {
		t.Fatal(err)
	}
	putQueueOrders(t, s, "orders", 0, 1)
	waitFor(t, "the record handled again", 10*time.Second, func() bool { _, n := c.counts(); return n == 2 })
	if st := b.Status().Subscriptions[0]; st.VisibilityExtended == 0 || st.VisibilityLost != 1 {
		t.Errorf("status: %d extensions before the bound, %d lost; want some and 1", st.VisibilityExtended, st.VisibilityLost)
	}
}

// The records a subscriber rejected (without dead_letter) are remembered
// so that, received again, they are not handled again; the memory is
// bounded even when another instance takes them and they never come back.
func TestQueueSubscriberRejectedSetIsBounded(t *testing.T) {
	runtime.CapQueueRejected(t, 10)
	s := kinesistest.New()
	a := queueBroker(t, s)
	var rejected atomic.Int64
	sub, err := runtime.Subscribe(a, "orders", func(ctx context.Context, o order, d runtime.Delivery) runtime.Outcome {
		rejected.Add(1)
		return runtime.Reject(errors.New("not here"))
	}, runtime.CreateOnDemandIfMissing(), runtime.Queue("work"), runtime.MaxReceives(1000), runtime.Workers(2))
	if err != nil {
		t.Fatal(err)
	}
	putQueueOrders(t, s, "orders", 0, 50)
	waitFor(t, "50 rejections", 10*time.Second, func() bool { return rejected.Load() >= 50 })
	// Another instance takes them all: they never come back to a.
	b := queueBroker(t, s)
	got := newSeen()
	if _, err := runtime.Subscribe(b, "orders", func(ctx context.Context, o order, d runtime.Delivery) runtime.Outcome {
		got.add(o, d)
		return runtime.Ack()
	}, runtime.Queue("work"), runtime.Workers(2)); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "50 orders acknowledged elsewhere", 20*time.Second, func() bool { return got.distinct() == 50 })
	if n := runtime.QueueRejectedRemembered(sub); n > 10 {
		t.Errorf("%d rejected records remembered, want at most 10", n)
	}
}

// refusingVisibility answers every extension with each entry failed, as
// the service does for a receipt handle that expired.
type refusingVisibility struct {
	kinesisapi.API
	calls atomic.Int64
}

func (r *refusingVisibility) UpdateQueueRecordsVisibility(ctx context.Context, in *kinesis.UpdateQueueRecordsVisibilityInput, _ ...func(*kinesis.Options)) (*kinesis.UpdateQueueRecordsVisibilityOutput, error) {
	r.calls.Add(1)
	out := &kinesis.UpdateQueueRecordsVisibilityOutput{Successful: []types.UpdateQueueRecordsVisibilityResultEntry{}}
	for _, e := range in.Entries {
		if aws.ToInt32(e.VisibilityTimeoutSeconds) == 0 {
			return r.API.UpdateQueueRecordsVisibility(ctx, in) // a release, not an extension
		}
		out.Failed = append(out.Failed, types.UpdateQueueRecordsVisibilityErrorEntry{
			ReceiptHandle: e.ReceiptHandle, ErrorCode: aws.String("InvalidArgumentException"), ErrorMessage: aws.String("The receipt handle has expired."),
		})
	}
	return out, nil
}

// An entry the queue refuses (its receipt handle expired) is given up at
// once: logged, counted, not tried again; the record comes back and is
// handled, nothing lost.
func TestQueueSubscriberRefusedExtensionGivenUp(t *testing.T) {
	s := kinesistest.New()
	api := &refusingVisibility{API: s}
	var logs syncBuffer
	b := queueBroker(t, api, runtime.WithLogger(slog.New(slog.NewTextHandler(&logs, nil))))
	var c concurrency
	var acked atomic.Bool
	if _, err := runtime.Subscribe(b, "orders", func(ctx context.Context, o order, d runtime.Delivery) runtime.Outcome {
		c.begin(d.RecordID)
		defer c.end(d.RecordID)
		if d.Attempt == 1 {
			time.Sleep(2500 * time.Millisecond)
		} else {
			acked.Store(true)
		}
		return runtime.Ack()
	}, runtime.CreateOnDemandIfMissing(), runtime.Queue("work"), runtime.Visibility(time.Second), runtime.Workers(2)); err != nil {
		t.Fatal(err)
	}
	putQueueOrders(t, s, "orders", 0, 1)
	waitFor(t, "the second delivery handled", 10*time.Second, acked.Load)
	waitFor(t, "the first handling's end", 5*time.Second, func() bool { most, _ := c.counts(); return most >= 1 && c.idle() })
	st := b.Status().Subscriptions[0]
	if st.VisibilityLost != 1 || st.VisibilityExtended != 0 {
		t.Errorf("status: %d lost, %d extended; want 1 and 0", st.VisibilityLost, st.VisibilityExtended)
	}
	if n := api.calls.Load(); n != 1 {
		t.Errorf("%d extension calls, want 1: a refused entry is not tried again", n)
	}
	if !strings.Contains(logs.String(), "the queue refused to extend its visibility") {
		t.Errorf("the refusal is not in the log:\n%s", logs.String())
	}
}

// Shutdown waits for a long handler with its record still extended: no
// other instance receives it meanwhile, and once handled it is
// acknowledged, not delivered again.
func TestQueueSubscriberShutdownExtendsUntilHandlersFinish(t *testing.T) {
	// On a virtual clock: a 1 s visibility, extended with half of it left,
	// gave a loaded machine's scheduling the margin on a real one (CI:
	// handled twice at once, an extension late).
	synctest.Test(t, func(t *testing.T) {
		s := kinesistest.New()
		a := runtime.NewBroker(runtime.WithKinesisClient(s), runtime.WithShutdownTimeout(10*time.Second), runtime.WithLogger(slog.New(slog.DiscardHandler)))
		if err := a.Connect(context.Background()); err != nil {
			t.Fatal(err)
		}
		var c concurrency
		started := make(chan struct{}, 1)
		if _, err := runtime.Subscribe(a, "orders", func(ctx context.Context, o order, d runtime.Delivery) runtime.Outcome {
			c.begin(d.RecordID)
			defer c.end(d.RecordID)
			started <- struct{}{}
			time.Sleep(2500 * time.Millisecond) // ignores ctx: finishes within Shutdown's timeout
			return runtime.Ack()
		}, runtime.CreateOnDemandIfMissing(), runtime.Queue("work"), runtime.Visibility(time.Second)); err != nil {
			t.Fatal(err)
		}
		putQueueOrders(t, s, "orders", 0, 1)
		select {
		case <-started:
		case <-time.After(10 * time.Second):
			t.Fatal("the record was not handled")
		}
		// Another instance, once a has the record.
		other := queueBroker(t, s)
		if _, err := runtime.Subscribe(other, "orders", func(ctx context.Context, o order, d runtime.Delivery) runtime.Outcome {
			c.begin(d.RecordID)
			defer c.end(d.RecordID)
			return runtime.Ack()
		}, runtime.Queue("work")); err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := a.Shutdown(ctx); err != nil {
			t.Fatal(err)
		}
		time.Sleep(2 * time.Second) // past another visibility timeout
		if most, n := c.counts(); n != 1 {
			t.Errorf("handled %d times (%d at once), want once", n, most)
		}
	})
}

// Extensions go out with at least half of the timeout left, so a
// visibility call answering within half the timeout keeps the record,
// however the keeper's rounds fall (with a quarter to spare, such calls
// lost it: handled 6 times, 2 at once). An extension refused because the
// record's acknowledgement landed first is not a loss (it was counted
// one, and warned "it may be handled twice": CI failed on that).
func TestQueueVisibilityKeptThroughSlowExtensions(t *testing.T) {
	// On a virtual clock: the margin is a fraction of the timeout, which a
	// loaded machine's scheduling took on a real one (CI: handled twice,
	// one extension lost).
	synctest.Test(t, func(t *testing.T) {
		s := kinesistest.New()
		s.InjectCallFault(func(c kinesistest.Call) error {
			if c.Op == kinesistest.OpUpdateQueueRecordsVisibility {
				time.Sleep(450 * time.Millisecond) // within the half the keeper leaves
			}
			return nil
		})
		b := queueBroker(t, s)
		var c concurrency
		_, err := runtime.Subscribe(b, "orders", func(ctx context.Context, o order, d runtime.Delivery) runtime.Outcome {
			c.begin(d.RecordID)
			defer c.end(d.RecordID)
			time.Sleep(3 * time.Second)
			return runtime.Ack()
		}, runtime.CreateOnDemandIfMissing(), runtime.Queue("work"), runtime.Visibility(time.Second), runtime.Workers(2))
		if err != nil {
			t.Fatal(err)
		}
		// Off the keeper's rounds (a virtual clock keeps their phase): the
		// record's timeout ends between two of them.
		time.Sleep(100 * time.Millisecond)
		putQueueOrders(t, s, "orders", 0, 1)
		waitFor(t, "the handling", 10*time.Second, func() bool { _, n := c.counts(); return n > 0 })
		waitFor(t, "the end of the handling", 10*time.Second, c.idle)
		time.Sleep(1500 * time.Millisecond) // past another timeout: a lost record would come back
		most, handled := c.counts()
		st := b.Status().Subscriptions[0]
		if most > 1 || handled != 1 || st.VisibilityLost != 0 {
			t.Errorf("handled %d times, %d at once, %d extensions lost: want once and none lost", handled, most, st.VisibilityLost)
		}
	})
}

// A Stop whose final acknowledgement is slow keeps the record hidden until
// the call is over: nobody else receives a record that was handled and is
// being acknowledged. (Before the fix Stop ended the visibility keeper
// before it flushed the acknowledgements: a call slower than the record's
// remaining timeout let another consumer receive it, and its
// acknowledgement was then refused: the record stayed, to be handled
// again.)
func TestQueueStopKeepsARecordHiddenUntilItsAckLands(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		// Three visibility timeouts, then it lands.
		s, _, sub, c := slowFirstAck(t, 3*time.Second, time.Second)
		stopped := make(chan error, 1)
		go func() {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			stopped <- sub.Stop(ctx)
		}()
		// Another consumer of the queue, past two timeouts while the
		// acknowledgement is on its way.
		time.Sleep(2 * time.Second)
		if n := queueVisibleAfter(t, s, "orders", "work", 0); n != 0 {
			t.Errorf("%d records received by another consumer while Stop acknowledged them", n)
		}
		if err := <-stopped; err != nil {
			t.Fatalf("Stop: %v", err)
		}
		if n := queueVisibleAfter(t, s, "orders", "work", 1500*time.Millisecond); n != 0 {
			t.Errorf("%d records in the queue after their acknowledgement landed", n)
		}
		if _, handled := c.counts(); handled != 1 {
			t.Errorf("handled %d times, want once", handled)
		}
	})
}

// slowFirstAck starts a queue subscriber (two workers, visibility vis)
// whose handler acknowledges every record, on an in-process server whose
// first AcknowledgeQueueRecords call takes hold before it lands; it puts
// one record and returns once that call is under way.
func slowFirstAck(t *testing.T, hold, vis time.Duration) (*kinesistest.Server, *runtime.Broker, *runtime.Subscription, *concurrency) {
	t.Helper()
	s := kinesistest.New()
	var slowed atomic.Bool
	s.InjectCallFault(func(c kinesistest.Call) error {
		if c.Op == kinesistest.OpAcknowledgeQueueRecords && slowed.CompareAndSwap(false, true) {
			time.Sleep(hold)
		}
		return nil
	})
	b, sub, c, _ := ackingSubscriber(t, s, s, vis)
	waitFor(t, "the slow acknowledgement", 10*time.Second, slowed.Load)
	return s, b, sub, c
}

// receivedAgainBeforeAck is a queue whose record is received again while
// its first acknowledgement is on its way, as when its visibility ran out
// (a loaded machine, a stalled keeper) and another receiver got it: that
// acknowledgement is refused (its receipt handle expired).
type receivedAgainBeforeAck struct {
	kinesisapi.API
	once sync.Once
}

func (a *receivedAgainBeforeAck) AcknowledgeQueueRecords(ctx context.Context, in *kinesis.AcknowledgeQueueRecordsInput, opts ...func(*kinesis.Options)) (*kinesis.AcknowledgeQueueRecordsOutput, error) {
	a.once.Do(func() {
		for _, e := range in.Entries {
			_, _ = a.API.UpdateQueueRecordsVisibility(ctx, &kinesis.UpdateQueueRecordsVisibilityInput{QueueARN: in.QueueARN,
				Entries: []types.UpdateQueueRecordsVisibilityRequestEntry{{ReceiptHandle: e.ReceiptHandle, VisibilityTimeoutSeconds: aws.Int32(0)}}})
		}
		// Received elsewhere, and left visible (visibility 0): this
		// subscriber's receivers get it again, if they have not already.
		_, _ = a.API.ReceiveQueueRecords(ctx, &kinesis.ReceiveQueueRecordsInput{QueueARN: in.QueueARN, Limit: aws.Int32(10), VisibilityTimeoutSeconds: aws.Int32(0), WaitTimeSeconds: aws.Int32(0)})
	})
	return a.API.AcknowledgeQueueRecords(ctx, in, opts...)
}

// An acknowledgement the queue refuses because the record was received
// again meanwhile is a visibility lost: Status counts it and the log says
// so (make test's loaded machine once left records in the queue with none
// counted), and nothing is lost: the record is handled again and that
// delivery's acknowledgement lands.
func TestQueueSubscriberCountsARefusedAckAsVisibilityLost(t *testing.T) {
	for _, be := range queueBackends {
		t.Run(be.name, func(t *testing.T) {
			_, inner := be.make(t)
			api := &receivedAgainBeforeAck{API: inner}
			b, sub, c, logs := ackingSubscriber(t, api, inner, longHandlerVisibility)
			waitFor(t, "a second delivery", 10*time.Second, func() bool { _, n := c.counts(); return n >= 2 })
			waitFor(t, "the refusal in Status", 5*time.Second, func() bool { return b.Status().Subscriptions[0].VisibilityLost == 1 })
			if !strings.Contains(logs.String(), "it may be handled twice") {
				t.Errorf("the refused acknowledgement is not in the log:\n%s", logs.String())
			}
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			if err := sub.Stop(ctx); err != nil {
				t.Fatal(err)
			}
			if left := queueRecordsAfter(t, inner, "orders", "work", 0); len(left) != 0 {
				t.Errorf("%d records in the queue after the second delivery was acknowledged", len(left))
			}
			if _, n := c.counts(); n != 2 {
				t.Errorf("handled %d times, want twice", n)
			}
		})
	}
}

// failedOnceAck is a queue whose first acknowledgement fails every entry
// for a passing cause (an internal error), acknowledging none.
type failedOnceAck struct {
	kinesisapi.API
	calls  atomic.Int64
	landed atomic.Int64 // entries acknowledged by the calls after the first
}

func (a *failedOnceAck) AcknowledgeQueueRecords(ctx context.Context, in *kinesis.AcknowledgeQueueRecordsInput, opts ...func(*kinesis.Options)) (*kinesis.AcknowledgeQueueRecordsOutput, error) {
	if a.calls.Add(1) == 1 {
		out := &kinesis.AcknowledgeQueueRecordsOutput{}
		for _, e := range in.Entries {
			out.Failed = append(out.Failed, types.AcknowledgeQueueRecordsErrorEntry{ReceiptHandle: e.ReceiptHandle, ErrorCode: aws.String("InternalFailure"), ErrorMessage: aws.String("injected")})
		}
		return out, nil
	}
	out, err := a.API.AcknowledgeQueueRecords(ctx, in, opts...)
	if err == nil {
		a.landed.Add(int64(len(out.Successful)))
	}
	return out, err
}

// An acknowledgement entry the queue fails for a passing cause is tried
// again: the handled record is acknowledged, not left to come back after
// its visibility timeout and be handled twice.
func TestQueueSubscriberRetriesAFailedAckEntry(t *testing.T) {
	for _, be := range queueBackends {
		t.Run(be.name, func(t *testing.T) {
			_, inner := be.make(t)
			api := &failedOnceAck{API: inner}
			b, _, c, logs := ackingSubscriber(t, api, inner, longHandlerVisibility)
			waitFor(t, "the acknowledgement tried again", 5*time.Second, func() bool { return api.landed.Load() == 1 })
			if strings.Contains(logs.String(), "not acknowledged") {
				t.Errorf("the entry was given up:\n%s", logs.String())
			}
			if _, n := c.counts(); n != 1 {
				t.Errorf("handled %d times, want once", n)
			}
			if st := b.Status().Subscriptions[0]; st.VisibilityLost != 0 {
				t.Errorf("%d visibilities lost, want none", st.VisibilityLost)
			}
		})
	}
}

// ackingSubscriber subscribes to queue "work" of stream "orders" through
// api (two workers, visibility vis) with a handler that acknowledges
// every record, and puts one record through inner.
func ackingSubscriber(t *testing.T, api, inner kinesisapi.API, vis time.Duration) (*runtime.Broker, *runtime.Subscription, *concurrency, *syncBuffer) {
	t.Helper()
	logs := new(syncBuffer)
	b := queueBroker(t, api, runtime.WithLogger(slog.New(slog.NewTextHandler(logs, nil))))
	c := new(concurrency)
	sub, err := runtime.Subscribe(b, "orders", func(ctx context.Context, o order, d runtime.Delivery) runtime.Outcome {
		c.begin(d.RecordID)
		defer c.end(d.RecordID)
		return runtime.Ack()
	}, runtime.CreateOnDemandIfMissing(), runtime.Queue("work"), runtime.Visibility(vis), runtime.Workers(2))
	if err != nil {
		t.Fatal(err)
	}
	putQueueOrders(t, inner, "orders", 0, 1)
	return b, sub, c, logs
}

// The keeper's extension calls of a round go side by side, a few at once:
// one after another, slow calls left the last batches of a busy
// subscription to run out (the queue fault simulation found it); all at
// once, a subscription of many workers would send dozens together.
func TestQueueKeeperCallsGoTogetherBounded(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := kinesistest.New()
		var now, most atomic.Int64
		s.InjectCallFault(func(c kinesistest.Call) error {
			if c.Op == kinesistest.OpUpdateQueueRecordsVisibility {
				n := now.Add(1)
				for m := most.Load(); n > m && !most.CompareAndSwap(m, n); m = most.Load() {
				}
				time.Sleep(300 * time.Millisecond) // within the half the keeper leaves
				now.Add(-1)
			}
			return nil
		})
		b := queueBroker(t, s)
		release := make(chan struct{})
		_, err := runtime.Subscribe(b, "orders", func(ctx context.Context, o order, d runtime.Delivery) runtime.Outcome {
			<-release
			return runtime.Ack()
		}, runtime.CreateOnDemandIfMissing(), runtime.Queue("work"), runtime.Visibility(2*time.Second), runtime.Workers(16))
		if err != nil {
			t.Fatal(err)
		}
		putQueueOrders(t, s, "orders", 0, 300) // 192 held: 20 batches a round
		time.Sleep(5 * time.Second)
		close(release)
		if m := most.Load(); m < 2 || m > 8 {
			t.Errorf("at most %d extension calls at once, want between 2 and 8", m)
		}
		if st := b.Status().Subscriptions[0]; st.VisibilityLost != 0 {
			t.Errorf("%d visibilities lost while the handlers waited", st.VisibilityLost)
		}
	})
}
