package runtime

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/kinesisgen/kinesisgen/runtime/kpl"
	"github.com/kinesisgen/kinesisgen/runtime/shard"
)

// TestAggregatorKeysOfOneHashKey: the aggregator keeps its keys' lines by
// hash key, so two partition keys of one hash key (MD5 collisions exist;
// here the hash key is set by hand) share a line and are ordered as one
// key; each message is still filed under its own key in the aggregate.
func TestAggregatorKeysOfOneHashKey(t *testing.T) {
	a := testAggregator(1)
	sh := a.shards[0]
	hk := shard.HashKeyOf("a")
	msg := func(key, data string) *entry {
		e := testEntries.get()
		e.ctx, e.key, e.data, e.ordered, e.hk = context.Background(), key, []byte(data), true, hk
		e.state.Store(entryQueued)
		return e
	}
	now := time.Now()
	send := func() *aggUnit {
		t.Helper()
		u := sh.open
		if u == nil || len(sh.sealed) != 0 {
			t.Fatalf("open unit %v, %d sealed; want one open unit", u, len(sh.sealed))
		}
		sh.open = nil
		if !a.claim(u, now) {
			t.Fatal("claim: nothing to send")
		}
		a.seal([]*aggUnit{u})
		return u
	}
	read := func(u *aggUnit) string {
		t.Helper()
		recs, ok, err := kpl.Deaggregate(u.rec.data)
		if err != nil || !ok {
			t.Fatalf("Deaggregate: %v %v", ok, err)
		}
		s := ""
		for _, r := range recs {
			s += fmt.Sprintf("%s:%s ", r.PartitionKey, r.Data)
		}
		return s
	}
	settle := func(u *aggUnit) {
		a.back(u)
		a.release(u, now)
		a.stored(u, Receipt{ShardID: sh.id})
		for _, e := range u.items {
			<-e.done
			e.recycle()
		}
	}

	a.unrouted = append(a.unrouted, msg("a", "a1"), msg("b", "b1"), msg("a", "a2"), msg("b", "b2"))
	a.routeAll(now)
	first := send()
	if got, want := read(first), "a:a1 b:b1 a:a2 b:b2 "; got != want {
		t.Errorf("first aggregate holds %q, want %q", got, want)
	}
	// While it is in flight, b3 and a3 wait in the one line, in order.
	a.unrouted = append(a.unrouted, msg("b", "b3"), msg("a", "a3"))
	a.routeAll(now)
	if sh.open != nil || sh.waiting != 2 {
		t.Fatalf("while the first aggregate is in flight: open unit %v, %d waiting; want none open, 2 waiting", sh.open, sh.waiting)
	}
	settle(first)
	second := send()
	if got, want := read(second), "b:b3 a:a3 "; got != want {
		t.Errorf("second aggregate holds %q, want %q", got, want)
	}
	settle(second)
	if len(sh.keys) != 0 || sh.waiting != 0 {
		t.Errorf("after both: %d keys tracked, %d waiting; want none", len(sh.keys), sh.waiting)
	}
}

// TestAggregationInFlightWait: a shard's open unit with another of the
// shard's in flight goes after InFlightWait (default 100 ms), at once when
// it is negative, and never before Linger.
func TestAggregationInFlightWait(t *testing.T) {
	now := time.Now()
	for _, tc := range []struct {
		cfg  Aggregation
		age  time.Duration
		want bool
	}{
		{Aggregation{}, 0, false},
		{Aggregation{}, 99 * time.Millisecond, false},
		{Aggregation{}, 100 * time.Millisecond, true},
		{Aggregation{InFlightWait: -1}, 0, true},
		{Aggregation{InFlightWait: -1, Linger: 5 * time.Millisecond}, time.Millisecond, false},
		{Aggregation{InFlightWait: -1, Linger: 5 * time.Millisecond}, 5 * time.Millisecond, true},
		{Aggregation{InFlightWait: time.Second}, 500 * time.Millisecond, false},
		{Aggregation{InFlightWait: time.Second}, time.Second, true},
	} {
		sh := &aggShard{inFlight: 1, open: &aggUnit{}, openedAt: now.Add(-tc.age)}
		a := &aggregator{cfg: tc.cfg.withDefaults(), shards: []*aggShard{sh}, trust: aggMapTrust, confirmedAt: now} // not idle
		if got := a.openDue(sh, now); got != tc.want {
			t.Errorf("%+v, open for %v with one in flight: due %v, want %v", tc.cfg, tc.age, got, tc.want)
		}
		// The run loop's timer agrees: it wakes when the unit is due.
		if at, ok := a.nextWake(); !ok || tc.want == now.Before(at) {
			t.Errorf("%+v, open for %v: wakes %v from now (%v), but due is %v", tc.cfg, tc.age, at.Sub(now), ok, tc.want)
		}
	}
}

// TestAggregationRefilling: with nothing of its shard in flight, an open
// unit waits for the callers its shard's last answer woke (up to
// aggRefill, while it holds fewer messages than that unit did); one that
// holds as many, or a shard last answered longer ago (a lone caller's
// next message after a pause), goes at once. The run loop's timer agrees.
func TestAggregationRefilling(t *testing.T) {
	now := time.Now()
	for _, tc := range []struct {
		name   string
		ago    time.Duration // since the shard's last unit came back
		backN  int           // messages in it
		queued int           // messages in the open unit
		want   bool
	}{
		{"just back, fewer", 0, 100, 40, false},
		{"back 1ms ago, fewer", time.Millisecond, 100, 99, false},
		{"as many", 0, 100, 100, true},
		{"refill over", aggRefill, 100, 40, true},
		{"lone caller", 0, 1, 1, true},
		{"never sent", 0, 0, 1, true},
	} {
		u := &aggUnit{items: make([]*entry, tc.queued)}
		sh := &aggShard{open: u, openedAt: now, backAt: now.Add(-tc.ago), backN: tc.backN}
		a := &aggregator{cfg: Aggregation{}.withDefaults(), shards: []*aggShard{sh}, trust: aggMapTrust, confirmedAt: now} // not idle
		if got := a.openDue(sh, now); got != tc.want {
			t.Errorf("%s: due %v, want %v", tc.name, got, tc.want)
		}
		if at, ok := a.nextWake(); !ok || tc.want == now.Before(at) {
			t.Errorf("%s: wakes %v from now (%v), but due is %v", tc.name, at.Sub(now), ok, tc.want)
		}
	}
}
