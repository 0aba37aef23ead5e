package runtime_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/kinesis"
	"github.com/aws/aws-sdk-go-v2/service/kinesis/types"

	"github.com/kinesisgen/kinesisgen/runtime"
)

// putOrders puts n orders on stream straight through the API, keys c0..c(keys-1),
// and returns how many went to each shard and each shard's last sequence number.
func (e *env) putOrders(stream string, from, n, keys int) (count map[string]int, last map[string]string) {
	e.t.Helper()
	count, last = map[string]int{}, map[string]string{}
	var entries []types.PutRecordsRequestEntry
	for i := from; i < from+n; i++ {
		c := fmt.Sprintf("c%d", i%keys)
		entries = append(entries, types.PutRecordsRequestEntry{Data: fmt.Appendf(nil, `{"id":%d,"customer":%q}`, i, c), PartitionKey: aws.String(c)})
	}
	out, err := e.api.PutRecords(e.ctx, &kinesis.PutRecordsInput{StreamName: aws.String(stream), Records: entries})
	if err != nil || aws.ToInt32(out.FailedRecordCount) != 0 {
		e.t.Fatalf("PutRecords: %v", err)
	}
	for _, r := range out.Records {
		count[aws.ToString(r.ShardId)]++
		last[aws.ToString(r.ShardId)] = aws.ToString(r.SequenceNumber)
	}
	return count, last
}

// waitStatus polls b.Status until cond holds for the subscription of stream.
func waitStatus(e *env, b *runtime.Broker, stream, what string, cond func(runtime.Status, runtime.SubscriptionStatus) bool) (runtime.Status, runtime.SubscriptionStatus) {
	e.t.Helper()
	for {
		st := b.Status()
		for _, s := range st.Subscriptions {
			if s.Stream == stream && cond(st, s) {
				return st, s
			}
		}
		select {
		case <-e.ctx.Done():
			e.t.Fatalf("%s: not within the time: last status %+v", what, st)
		case <-time.After(10 * time.Millisecond):
		}
	}
}

// After a known workload the status says what a person relies on: every
// record handled and acked, per shard as many as were put there, the
// checkpoint at each shard's last record, nothing behind, nothing in
// flight, both leases held by this instance.
func TestStatusAfterDrainingAKnownWorkload(t *testing.T) {
	testStatusAfterDrainingAKnownWorkload(newEnv(t))
}

func testStatusAfterDrainingAKnownWorkload(e *env) {
	t := e.t
	orders := e.newStream("orders", 2)
	count, last := e.putOrders(orders, 0, 60, 12)
	if len(count) != 2 {
		t.Fatalf("records landed on %d shards; the test needs both", len(count))
	}

	b := e.broker(runtime.WithOwnerID("alpha"))
	if st := b.Status(); st.Owner != "" || len(st.Subscriptions) != 0 {
		t.Fatalf("status of a new broker: %+v", st)
	}
	mustSubscribe(e, b, orders, func(context.Context, order, runtime.Delivery) runtime.Outcome { return runtime.Ack() },
		runtime.StartAt(runtime.Horizon()), runtime.Workers(3), runtime.ByKey(), runtime.HandlerName("orders.Post"))
	if st := b.Status(); len(st.Subscriptions) != 1 || st.Subscriptions[0].State != "registered" {
		t.Fatalf("before Connect: %+v", st.Subscriptions)
	}

	// Status is read all along, from several goroutines (the race detector
	// watches).
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for range 3 {
		wg.Go(func() {
			for {
				select {
				case <-stop:
					return
				default:
					_ = b.Status()
				}
			}
		})
	}
	e.connect(b)

	st, sub := waitStatus(e, b, orders, "60 records handled and checkpointed", func(_ runtime.Status, s runtime.SubscriptionStatus) bool {
		if s.Handled != 60 || len(s.Shards) != 2 {
			return false
		}
		for _, sh := range s.Shards {
			if sh.Checkpoint != last[sh.ShardID] || sh.BehindAt.IsZero() {
				return false
			}
		}
		return true
	})
	close(stop)
	wg.Wait()

	if st.Owner != "alpha" || st.Leases.Held != 2 || st.Leases.Taken != 2 || st.Leases.Lost != 0 || st.Leases.HandedOver != 0 {
		t.Errorf("instance: owner %q, leases %+v; want alpha holding and having taken 2", st.Owner, st.Leases)
	}
	if sub.State != "running" || sub.Handler != "orders.Post" || sub.Workers != 3 || !sub.ByKey {
		t.Errorf("subscription: %+v", sub)
	}
	if sub.Outcomes != (runtime.Outcomes{Acked: 60}) || sub.QueueDepth != 0 || sub.InFlight != 0 || len(sub.Others) != 0 {
		t.Errorf("subscription: outcomes %+v, queue %d, in flight %d, others %v; want 60 acked and nothing waiting",
			sub.Outcomes, sub.QueueDepth, sub.InFlight, sub.Others)
	}
	if sub.PerSecond <= 0 {
		t.Errorf("handled per second %v after 60 records", sub.PerSecond)
	}
	for _, sh := range sub.Shards {
		want := uint64(count[sh.ShardID])
		if sh.Owner != "alpha" || sh.Lease != runtime.LeaseReading || sh.Handled != want || sh.Outcomes.Acked != want {
			t.Errorf("shard %s: owner %q, lease %s, handled %d (%+v); want alpha reading, %d acked", sh.ShardID, sh.Owner, sh.Lease, sh.Handled, sh.Outcomes, want)
		}
		if sh.MillisBehindLatest != 0 || sh.InFlight != 0 || sh.CheckpointAt.IsZero() || time.Since(sh.CheckpointAt) > time.Minute {
			t.Errorf("shard %s: %d ms behind, %d in flight, checkpointed at %v; want 0, 0, just now", sh.ShardID, sh.MillisBehindLatest, sh.InFlight, sh.CheckpointAt)
		}
	}

	// Shutdown releases the leases; the subscription leaves the status.
	if err := b.Shutdown(e.ctx); err != nil {
		t.Fatal(err)
	}
	if st := b.Status(); len(st.Subscriptions) != 0 || st.Leases.Held != 0 {
		t.Fatalf("after Shutdown: %+v", st)
	}
}

// Each way a handling ends is counted under its own outcome.
func TestStatusCountsOutcomes(t *testing.T) { testStatusCountsOutcomes(newEnv(t)) }

func testStatusCountsOutcomes(e *env) {
	t := e.t
	orders, dlq, plain := e.stream("orders"), e.stream("orders-dlq"), e.stream("plain")
	e.createStream(orders, 1)
	e.createStream(dlq, 1)
	e.createStream(plain, 1)
	// 0..4 ack; 5 and 6 ask for a retry once, then ack; 7 is rejected; 8
	// asks for a retry every time (retries=1: once retried, then given up).
	h := func(_ context.Context, o order, d runtime.Delivery) runtime.Outcome {
		switch {
		case o.ID == 5 || o.ID == 6:
			if d.Attempt == 1 {
				return runtime.Retry()
			}
		case o.ID == 7:
			return runtime.Reject(errors.New("unknown customer"))
		case o.ID == 8:
			return runtime.Retry()
		}
		return runtime.Ack()
	}
	b := e.broker()
	for _, s := range []struct {
		stream string
		opts   []runtime.SubscribeOption
	}{
		{orders, []runtime.SubscribeOption{runtime.DeadLetter(dlq)}},
		{plain, nil},
	} {
		mustSubscribe(e, b, s.stream, h, append(s.opts, runtime.StartAt(runtime.Horizon()), runtime.MaxRetries(1))...)
	}
	e.connect(b)
	e.putOrders(orders, 0, 9, 3)
	e.putOrders(plain, 0, 9, 3)

	// 9 records, plus 3 retry copies (of 5, 6 and 8).
	_, sub := waitStatus(e, b, orders, "12 handlings", func(_ runtime.Status, s runtime.SubscriptionStatus) bool { return s.Handled == 12 })
	if want := (runtime.Outcomes{Acked: 7, Retried: 3, DeadLettered: 2}); sub.Outcomes != want {
		t.Errorf("with a dead-letter stream: outcomes %+v, want %+v", sub.Outcomes, want)
	}
	_, sub = waitStatus(e, b, plain, "12 handlings", func(_ runtime.Status, s runtime.SubscriptionStatus) bool { return s.Handled == 12 })
	if want := (runtime.Outcomes{Acked: 7, Retried: 3, Rejected: 2}); sub.Outcomes != want {
		t.Errorf("without a dead-letter stream: outcomes %+v, want %+v", sub.Outcomes, want)
	}
	if len(sub.Shards) != 1 || sub.Shards[0].Outcomes != sub.Outcomes {
		t.Errorf("the shard's outcomes differ from the subscription's: %+v", sub.Shards)
	}
}

// holdingOrder acks every order, holding order id until release is closed
// or its delivery's ctx ends.
func holdingOrder(id int, release <-chan struct{}) runtime.Handler[order] {
	return func(ctx context.Context, o order, _ runtime.Delivery) runtime.Outcome {
		if o.ID == id {
			select {
			case <-release:
			case <-ctx.Done():
			}
		}
		return runtime.Ack()
	}
}

// A stuck handler shows: its record in flight, the records behind it in
// the lane queue, the checkpoint before it.
func TestStatusShowsAStuckHandler(t *testing.T) { testStatusShowsAStuckHandler(newEnv(t)) }

func testStatusShowsAStuckHandler(e *env) {
	t := e.t
	orders := e.newStream("orders", 1)
	_, last := e.putOrders(orders, 0, 1, 1)
	first := last

	release := make(chan struct{})
	b := e.broker()
	mustSubscribe(e, b, orders, holdingOrder(1, release), runtime.StartAt(runtime.Horizon()))
	e.connect(b)
	waitStatus(e, b, orders, "the first record checkpointed", func(_ runtime.Status, s runtime.SubscriptionStatus) bool {
		return len(s.Shards) == 1 && s.Shards[0].Checkpoint != "" && s.Shards[0].Checkpoint == first[s.Shards[0].ShardID]
	})
	e.putOrders(orders, 1, 5, 1) // 1 sticks; 2..5 wait behind it
	_, sub := waitStatus(e, b, orders, "four records queued behind a stuck one", func(_ runtime.Status, s runtime.SubscriptionStatus) bool {
		return s.QueueDepth == 4 && s.InFlight == 5
	})
	sh := sub.Shards[0]
	if sub.Handled != 1 || sh.InFlight != 5 || sub.InFlight != 5 || sh.Checkpoint != first[sh.ShardID] {
		t.Errorf("stuck: handled %d, in flight %d (subscription %d), checkpoint %s; want 1, 5, 5, %s", sub.Handled, sh.InFlight, sub.InFlight, sh.Checkpoint, first[sh.ShardID])
	}
	close(release)
	waitStatus(e, b, orders, "all handled", func(_ runtime.Status, s runtime.SubscriptionStatus) bool {
		return s.Handled == 6 && s.QueueDepth == 0 && s.InFlight == 0
	})
}

// After a handoff the shard leaves the giver's view of its own shards and
// shows among its others under the taker; the taker holds it and counts
// what it handles there. Each instance counts its own lease changes.
func TestStatusAfterAHandoff(t *testing.T) { testStatusAfterAHandoff(newEnv(t)) }

func testStatusAfterAHandoff(e *env) {
	t := e.t
	orders := e.newStream("orders", 2)
	ack := func(context.Context, order, runtime.Delivery) runtime.Outcome { return runtime.Ack() }

	a := e.broker(runtime.WithOwnerID("a"))
	mustSubscribe(e, a, orders, ack, runtime.StartAt(runtime.Horizon()))
	e.connect(a)
	count, _ := e.putOrders(orders, 0, 40, 10)
	waitStatus(e, a, orders, "a handles all 40", func(st runtime.Status, s runtime.SubscriptionStatus) bool {
		return s.Handled == 40 && st.Leases.Held == 2
	})

	bb := e.broker(runtime.WithOwnerID("b"))
	mustSubscribe(e, bb, orders, ack, runtime.StartAt(runtime.Horizon()))
	e.connect(bb)
	stB, subB := waitStatus(e, bb, orders, "b holds one shard", func(st runtime.Status, s runtime.SubscriptionStatus) bool {
		return len(s.Shards) == 1 && s.Shards[0].Lease == runtime.LeaseReading
	})
	moved := subB.Shards[0].ShardID
	if stB.Leases.Taken != 1 || stB.Leases.Held != 1 {
		t.Errorf("b's leases: %+v; want 1 taken and held", stB.Leases)
	}
	stA, subA := waitStatus(e, a, orders, "a sees b hold the shard it handed over", func(_ runtime.Status, s runtime.SubscriptionStatus) bool {
		return len(s.Others) == 1 && s.Others[0].Owner == "b"
	})
	if len(subA.Shards) != 1 || subA.Shards[0].ShardID == moved || subA.Others[0].ShardID != moved || subA.Others[0].Lease != runtime.LeaseHeld {
		t.Errorf("a's view after handing %s over: shards %+v, others %+v", moved, subA.Shards, subA.Others)
	}
	// An owner at its share reads the lease table at rest only while its
	// status is read: what it shows is dated, and fresh.
	if age := stA.Time.Sub(subA.OthersAt); subA.OthersAt.IsZero() || age > time.Minute {
		t.Errorf("a's others listed at %v, %v before its status", subA.OthersAt, age)
	}
	if stA.Leases != (runtime.LeaseStatus{Held: 1, Taken: 2, HandedOver: 1}) {
		t.Errorf("a's leases: %+v; want 1 held, 2 taken, 1 handed over", stA.Leases)
	}
	// a still counts what it handled on the shard before handing it over.
	if subA.Handled != 40 {
		t.Errorf("a handled %d in all; want 40", subA.Handled)
	}
	// b sees a's shard among its others, and the handed-over checkpoint.
	if len(subB.Others) != 1 || subB.Others[0].Owner != "a" || subB.Shards[0].Checkpoint == "" {
		t.Errorf("b's view: shards %+v, others %+v", subB.Shards, subB.Others)
	}

	// New records on the moved shard are b's to handle, and a's counts stay.
	more, _ := e.putOrders(orders, 40, 40, 10)
	_, subB = waitStatus(e, bb, orders, "b handles the moved shard's new records", func(_ runtime.Status, s runtime.SubscriptionStatus) bool {
		return s.Handled == uint64(more[moved])
	})
	kept := subA.Shards[0].ShardID
	_, subA = waitStatus(e, a, orders, "a handles its shard's new records", func(_ runtime.Status, s runtime.SubscriptionStatus) bool {
		return s.Handled == uint64(40+more[kept])
	})
	if got, want := subA.Shards[0].Handled, uint64(count[kept]+more[kept]); got != want {
		t.Errorf("a's shard %s: handled %d, want %d", kept, got, want)
	}
}

// Across a split, the status follows the lineage: while the parent's last
// record is still being handled, the children wait; once it settles the
// parent shows read to its end and the children read.
func TestStatusAcrossASplit(t *testing.T) { testStatusAcrossASplit(newEnv(t)) }

func testStatusAcrossASplit(e *env) {
	t := e.t
	orders := e.newStream("orders", 1)
	release := make(chan struct{})
	b := e.broker()
	mustSubscribe(e, b, orders, holdingOrder(0, release), runtime.StartAt(runtime.Horizon()))
	e.connect(b)
	_, last := e.putOrders(orders, 0, 1, 1)
	var parent string
	for id := range last {
		parent = id
	}
	splitInHalf(e.ctx, t, e.api, orders, parent)

	// The children may be listed before the parent's reader has handed
	// its record out: wait for both, then check that the parent stays.
	_, sub := waitStatus(e, b, orders, "two children waiting for their parent, its record in flight", func(_ runtime.Status, s runtime.SubscriptionStatus) bool {
		waiting, inFlight := 0, false
		for _, sh := range s.Shards {
			switch {
			case sh.ShardID == parent:
				inFlight = sh.InFlight == 1
			case sh.Lease == runtime.LeaseWaiting:
				waiting++
			}
		}
		return waiting == 2 && inFlight
	})
	for _, sh := range sub.Shards {
		if sh.ShardID == parent && (sh.Lease != runtime.LeaseReading || sh.Handled != 0) {
			t.Errorf("parent %s while its record is handled: %+v", parent, sh)
		}
	}

	close(release)
	// The parent's end is three writes (SHARD_END, its children, its
	// release) and the children may start after the first: a listing
	// between them shows it ended and still owned. Wait for the release.
	_, sub = waitStatus(e, b, orders, "the parent ended and released, the children reading", func(_ runtime.Status, s runtime.SubscriptionStatus) bool {
		return len(s.Shards) == 2 && s.Shards[0].Lease == runtime.LeaseReading && s.Shards[1].Lease == runtime.LeaseReading &&
			len(s.Others) == 1 && s.Others[0].Lease == runtime.LeaseEnded && s.Others[0].Owner == ""
	})
	if p := sub.Others[0]; p.ShardID != parent || p.Checkpoint != "SHARD_END" {
		t.Errorf("the parent after its end: %+v", p)
	}
	if sub.Handled != 1 {
		t.Errorf("handled %d, want the parent's 1 record", sub.Handled)
	}
	e.putOrders(orders, 1, 20, 10)
	waitStatus(e, b, orders, "the children's records handled", func(_ runtime.Status, s runtime.SubscriptionStatus) bool {
		return s.Handled == 21 && s.Shards[0].Handled+s.Shards[1].Handled == 20
	})
}

// A lease taken from under the instance counts as lost, and the shard
// shows under the owner that took it.
func TestStatusAfterALostLease(t *testing.T) { testStatusAfterALostLease(newEnv(t)) }

func testStatusAfterALostLease(e *env) {
	t := e.t
	orders := e.newStream("orders", 1)
	b := e.broker(runtime.WithOwnerID("a"))
	mustSubscribe(e, b, orders, func(context.Context, order, runtime.Delivery) runtime.Outcome { return runtime.Ack() })
	e.connect(b)
	st, _ := waitStatus(e, b, orders, "a reading its shard", func(_ runtime.Status, s runtime.SubscriptionStatus) bool {
		return len(s.Shards) == 1 && s.Shards[0].Lease == runtime.LeaseReading
	})
	if st.Leases.Held != 1 || st.Leases.Lost != 0 {
		t.Fatalf("leases %+v", st.Leases)
	}
	ls := e.leases(orders)
	if _, err := e.store.Take(e.ctx, ls[0], "thief"); err != nil {
		t.Fatal(err)
	}
	// Status reads the counters and the shards one after the other, not
	// at one instant: wait for both to show the loss.
	st, sub := waitStatus(e, b, orders, "the shard shown under the thief, the loss counted", func(st runtime.Status, s runtime.SubscriptionStatus) bool {
		return len(s.Shards) == 0 && len(s.Others) == 1 && s.Others[0].Owner == "thief" && st.Leases.Lost > 0
	})
	if st.Leases.Held != 0 || st.Leases.Lost != 1 || sub.Others[0].Lease != runtime.LeaseHeld {
		t.Errorf("after the theft: leases %+v, the shard %+v", st.Leases, sub.Others[0])
	}
}
