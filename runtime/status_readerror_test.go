package runtime_test

import (
	"context"
	"encoding/json"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/kinesis/types"
	"github.com/aws/smithy-go"

	"github.com/kinesisgen/kinesisgen/runtime"
	"github.com/kinesisgen/kinesisgen/runtime/kinesistest"
)

// handledIDs is a handler that records the orders it handles, in order.
type handledIDs struct {
	mu  sync.Mutex
	ids []int
}

func (h *handledIDs) handle(_ context.Context, o order, _ runtime.Delivery) runtime.Outcome {
	h.mu.Lock()
	h.ids = append(h.ids, o.ID)
	h.mu.Unlock()
	return runtime.Ack()
}

// check fails the test unless exactly 0..n-1 were handled, in order.
func (h *handledIDs) check(t *testing.T, n int) {
	t.Helper()
	h.mu.Lock()
	defer h.mu.Unlock()
	want := make([]int, n)
	for i := range want {
		want[i] = i
	}
	if !slices.Equal(h.ids, want) {
		t.Errorf("handled %v; want 0..%d once each, in order", h.ids, n-1)
	}
}

// startHandling connects a broker whose by-key subscription to stream,
// from its horizon, hands every order to h.
func startHandling(e *env, stream string, h *handledIDs) *runtime.Broker {
	e.t.Helper()
	b := e.broker()
	mustSubscribe(e, b, stream, h.handle, runtime.StartAt(runtime.Horizon()), runtime.ByKey())
	e.connect(b)
	return b
}

// accessDenied is the service's refusal of op to a role whose permission
// was withdrawn.
func accessDenied(op string) error {
	return &smithy.GenericAPIError{Code: "AccessDeniedException",
		Message: "User: arn:aws:sts::123456789012:assumed-role/app is not authorized to perform: kinesis:" + op, Fault: smithy.FaultClient}
}

// oneShard returns the subscription's only shard, if it holds one.
func oneShard(s runtime.SubscriptionStatus) (runtime.ShardStatus, bool) {
	if len(s.Shards) != 1 {
		return runtime.ShardStatus{}, false
	}
	return s.Shards[0], true
}

// checkFailing checks what the status says about a shard whose reads fail
// with an error whose text holds code: the error, a time since since, a
// count that grows while the failures go on; and that the JSON served as
// the status shows them.
func checkFailing(e *env, b *runtime.Broker, stream, code string, since time.Time) {
	t := e.t
	t.Helper()
	_, sub := waitStatus(e, b, stream, "the failed read's "+code+" in the status", func(_ runtime.Status, s runtime.SubscriptionStatus) bool {
		sh, ok := oneShard(s)
		return ok && sh.ReadFailures > 0 && strings.Contains(sh.ReadError, code)
	})
	first := sub.Shards[0]
	if first.ReadErrorAt.Before(since) || time.Since(first.ReadErrorAt) > 10*time.Second {
		t.Errorf("ReadErrorAt %v; want after %v, just now", first.ReadErrorAt, since)
	}
	js, err := json.Marshal(first)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("while failing: %s", js)
	for _, key := range []string{`"read_error":`, `"read_error_at":`, `"read_failures":`} {
		if !strings.Contains(string(js), key) {
			t.Errorf("status JSON %s lacks %s", js, key)
		}
	}
	_, sub = waitStatus(e, b, stream, "the failures counted as they go on", func(_ runtime.Status, s runtime.SubscriptionStatus) bool {
		sh, ok := oneShard(s)
		return ok && sh.ReadFailures > first.ReadFailures
	})
	if sh := sub.Shards[0]; !strings.Contains(sh.ReadError, code) || !sh.ReadErrorAt.After(first.ReadErrorAt) {
		t.Errorf("later: ReadError %q at %v; want the %s, after %v", sh.ReadError, sh.ReadErrorAt, code, first.ReadErrorAt)
	}
}

// waitRecovered waits until n records are handled and the status shows no
// read failure, in the struct or its JSON.
func waitRecovered(e *env, b *runtime.Broker, stream string, n uint64) {
	t := e.t
	t.Helper()
	_, sub := waitStatus(e, b, stream, "every record handled and the failures cleared", func(_ runtime.Status, s runtime.SubscriptionStatus) bool {
		sh, ok := oneShard(s)
		return ok && s.Handled == n && sh.ReadFailures == 0
	})
	sh := sub.Shards[0]
	if sh.ReadError != "" || !sh.ReadErrorAt.IsZero() {
		t.Errorf("after a read answered: ReadError %q at %v; want none", sh.ReadError, sh.ReadErrorAt)
	}
	js, err := json.Marshal(sh)
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(js), `"read_`) {
		t.Errorf("status JSON %s still shows a read failure", js)
	}
}

// A subscription whose reads keep failing shows it in the status: the
// error (access denied after a permission change, a KMS key it may not
// use, a throttle), when, and how many reads failed in a row, growing
// while it lasts; what was published meanwhile is handled once the reads
// answer again, in order, nothing lost, and the failure leaves the status.
func TestStatusShowsFailingReads(t *testing.T) {
	for _, tc := range []struct {
		name string
		err  error
		code string
		// renewal: only GetShardIterator fails, and the reader's iterator
		// has expired by the time records come (renewing it fails);
		// otherwise GetRecords and GetShardIterator fail.
		renewal bool
	}{
		{"access denied", accessDenied("GetRecords"), "AccessDeniedException", false},
		{"KMS access denied", &types.KMSAccessDeniedException{Message: aws.String("the stream's key may not be used")}, "KMSAccessDeniedException", false},
		{"throttled", &types.ProvisionedThroughputExceededException{Message: aws.String("rate exceeded for shard")}, "ProvisionedThroughputExceededException", false},
		{"iterator renewal denied", accessDenied("GetShardIterator"), "GetShardIterator, api error AccessDeniedException", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			const ttl = 300 * time.Millisecond
			opts := []kinesistest.Option{kinesistest.WithLongPoll(time.Second)}
			if tc.renewal {
				opts = append(opts, kinesistest.WithIteratorTTL(ttl))
			}
			srv := kinesistest.New(opts...)
			e := newEnvWith(t, srv)
			orders := e.newStream("orders", 1)
			var failing atomic.Bool
			srv.InjectCallFault(func(c kinesistest.Call) error {
				if failing.Load() && c.Stream == orders && (c.Op == kinesistest.OpGetRecords && !tc.renewal || c.Op == kinesistest.OpGetShardIterator) {
					return tc.err
				}
				return nil
			})
			var h handledIDs
			b := startHandling(e, orders, &h)
			e.putOrders(orders, 0, 5, 1)
			_, sub := waitStatus(e, b, orders, "5 handled", func(_ runtime.Status, s runtime.SubscriptionStatus) bool { return s.Handled == 5 })
			if sh, _ := oneShard(sub); sh.ReadFailures != 0 || sh.ReadError != "" {
				t.Errorf("while reads answer: ReadError %q, %d failures; want none", sh.ReadError, sh.ReadFailures)
			}

			since := time.Now()
			failing.Store(true)
			if tc.renewal {
				time.Sleep(2 * ttl) // the reader waits for records with an iterator that expires
			}
			e.putOrders(orders, 5, 10, 1)
			checkFailing(e, b, orders, tc.code, since)

			failing.Store(false)
			waitRecovered(e, b, orders, 15)
			h.check(t, 15)
		})
	}
}

// The same through enhanced fan-out: a subscription that breaks off with
// an error and subscriptions refused (AccessDenied) count as failed reads;
// the next event clears them, and what was published meanwhile is
// handled in order. A subscription that ends cleanly at its lifetime is
// not a failure.
func TestStatusShowsFailingFanOutReads(t *testing.T) {
	srv := kinesistest.New()
	e := newEnvWith(t, srv)
	orders := e.newStream("orders", 1)
	var failing atomic.Bool
	var refused atomic.Int64
	srv.InjectCallFault(func(c kinesistest.Call) error {
		if failing.Load() && c.Stream == orders && c.Op == kinesistest.OpSubscribeToShard {
			refused.Add(1)
			return accessDenied("SubscribeToShard")
		}
		return nil
	})
	var h handledIDs
	b := e.broker()
	if _, err := runtime.Subscribe(b, orders, h.handle, runtime.FanOut("billing"), runtime.CreateIfMissing(1),
		runtime.StartAt(runtime.Horizon()), runtime.ByKey()); err != nil {
		t.Fatal(err)
	}
	e.connect(b)
	e.putOrders(orders, 0, 5, 1)
	waitStatus(e, b, orders, "5 handled", func(_ runtime.Status, s runtime.SubscriptionStatus) bool { return s.Handled == 5 })

	// failures is the shard's count once it is at least 1 and no
	// subscription was refused while the status was read.
	failures := func() (shown, refusals int64) {
		for {
			r := refused.Load()
			_, sub := waitStatus(e, b, orders, "a failed read", func(_ runtime.Status, s runtime.SubscriptionStatus) bool {
				sh, ok := oneShard(s)
				return ok && sh.ReadFailures > 0
			})
			if refused.Load() == r {
				return int64(sub.Shards[0].ReadFailures), r
			}
		}
	}

	// The subscription is reset mid-event, then refused: both count.
	since := time.Now()
	failing.Store(true)
	if srv.ResetSubscriptions(orders, "") != 1 {
		t.Fatal("no subscription to reset")
	}
	if shown, r := failures(); shown != r+1 {
		t.Errorf("%d failed reads shown after a broken subscription and %d refused; want %d", shown, r, r+1)
	}
	e.putOrders(orders, 5, 10, 1)
	checkFailing(e, b, orders, "AccessDeniedException", since)
	failing.Store(false)
	waitRecovered(e, b, orders, 15)

	// A subscription that ends at its lifetime, then is refused: only the
	// refusals count.
	refused.Store(0)
	failing.Store(true)
	if srv.EndSubscriptions(orders, "") != 1 {
		t.Fatal("no subscription to end")
	}
	if shown, r := failures(); shown != r {
		t.Errorf("%d failed reads shown after a clean end and %d refused; want %d", shown, r, r)
	}
	e.putOrders(orders, 15, 5, 1)
	failing.Store(false)
	waitRecovered(e, b, orders, 20)
	h.check(t, 20)
}

// Children of a split taken while their iterators cannot be had (the
// permission was withdrawn) wait unread: the status says why, for each,
// counting the failed openings (each a few GetShardIterator calls) as the
// lease passes retry them. Once an opening succeeds they read what was
// published meanwhile, in order.
func TestStatusShowsShardsThatCannotBeOpened(t *testing.T) {
	srv := kinesistest.New(kinesistest.WithLongPoll(time.Second))
	e := newEnvWith(t, srv)
	orders := e.newStream("orders", 1)
	var failing atomic.Bool
	srv.InjectCallFault(func(c kinesistest.Call) error {
		if failing.Load() && c.Stream == orders && c.Op == kinesistest.OpGetShardIterator {
			return accessDenied("GetShardIterator")
		}
		return nil
	})
	var h handledIDs
	b := startHandling(e, orders, &h)
	_, last := e.putOrders(orders, 0, 5, 1)
	waitStatus(e, b, orders, "5 handled", func(_ runtime.Status, s runtime.SubscriptionStatus) bool { return s.Handled == 5 })
	var parent string
	for id := range last {
		parent = id
	}

	since := time.Now()
	failing.Store(true)
	splitInHalf(e.ctx, t, e.api, orders, parent)
	e.putOrders(orders, 5, 10, 1)
	children := func(s runtime.SubscriptionStatus, cond func(runtime.ShardStatus) bool) bool {
		n := 0
		for _, sh := range s.Shards {
			if sh.ShardID != parent && cond(sh) {
				n++
			}
		}
		return n == 2
	}
	_, sub := waitStatus(e, b, orders, "both children failing to open", func(_ runtime.Status, s runtime.SubscriptionStatus) bool {
		return children(s, func(sh runtime.ShardStatus) bool { return sh.ReadFailures > 0 })
	})
	for _, sh := range sub.Shards {
		if sh.ShardID == parent {
			continue
		}
		if sh.Lease != runtime.LeaseWaiting || !strings.Contains(sh.ReadError, "AccessDeniedException") || sh.ReadErrorAt.Before(since) {
			t.Errorf("child %s: lease %s, ReadError %q at %v; want waiting, AccessDeniedException, after %v", sh.ShardID, sh.Lease, sh.ReadError, sh.ReadErrorAt, since)
		}
	}

	failing.Store(false)
	waitStatus(e, b, orders, "every record handled and no failure shown", func(_ runtime.Status, s runtime.SubscriptionStatus) bool {
		return s.Handled == 15 && children(s, func(sh runtime.ShardStatus) bool {
			return sh.Lease == runtime.LeaseReading && sh.ReadFailures == 0 && sh.ReadError == "" && sh.ReadErrorAt.IsZero()
		})
	})
	h.check(t, 15)
}
