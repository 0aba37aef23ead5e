package shard_test

import (
	"context"
	"errors"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/kinesisgen/kinesisgen/runtime/lease"
	"github.com/kinesisgen/kinesisgen/runtime/shard"
)

// Issue 29, "no shard left unread" (dst mix churn seed
// 1796553474032713470: 11.1 s unread at a 3 s failover). The fair-share
// plan gives a free lease to the member below its share, and every other
// member, at its share, leaves it alone. A member that beats but never
// takes it (a joiner that cannot yet judge the old owner dead, one whose
// takes fail) must not leave it unread: once it has stayed free past the
// taker's grace, an instance at its share takes it (a later pass's
// balancing moves it on).
func TestFreeLeaseItsTakerLeavesIsTakenByAnother(t *testing.T) {
	const failover = 2 * time.Second
	e, _ := memEnvIn(t, 2, shard.LivenessPerInstance)
	ids := e.shards()
	cols := newCollectors(1)
	cfg := e.config("a", cols[0].sink)
	cfg.Renew, cfg.Failover = 100*time.Millisecond, failover

	a := e.start(cfg)
	eventually(t, 5*time.Second, "a reads both shards", func() bool { return slices.Equal(a.Reading(), ids) })

	// The ghost: a live member that asks a for a lease, is given it, and
	// never takes it; it goes on beating.
	ms := e.store.(lease.MemberStore)
	ask := ids[1]
	var asks []string
	var beats int64
	beat := func() error {
		beats++
		return ms.Heartbeat(e.ctx(time.Second), cfg.Namespace, lease.Member{Owner: "ghost", Beat: beats, Asks: asks})
	}
	asks = []string{ask}
	for {
		if err := beat(); err != nil {
			t.Fatal(err)
		}
		l := e.lease(ask)
		if l.Owner == "" && l.PendingOwner == "ghost" {
			break
		}
		if l.Owner == "a" && l.PendingOwner == "" {
			if _, err := e.store.RequestHandoff(e.ctx(time.Second), l, "ghost"); err != nil && !errors.Is(err, lease.ErrLeaseLost) {
				t.Fatal(err)
			}
		}
		if beats > 100 {
			t.Fatalf("a never released %s to the ghost that asked for it: %+v", ask, l)
		}
		time.Sleep(50 * time.Millisecond)
	}
	released := time.Now()
	asks = nil
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	t.Cleanup(func() { cancel(); wg.Wait() })
	wg.Go(func() {
		for ctx.Err() == nil {
			_ = beat()
			time.Sleep(50 * time.Millisecond)
		}
	})

	eventually(t, 4*failover, "a reads both shards again", func() bool { return slices.Equal(a.Reading(), ids) })
	if took := time.Since(released); took > 2*failover {
		t.Fatalf("a read %s again %v after it released it to a live member that never took it; want within 2 × failover (%v)",
			ask, took.Round(time.Millisecond), 2*failover)
	}
}
