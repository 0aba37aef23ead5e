package shard

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/kinesisgen/kinesisgen/runtime/lease"
)

// A lease pass that takes a lease this owner asked for, released by its
// owner, wakes no pass more: the pass goes on to open it itself (the
// renewal loop's look wakes one, to open what it took). Before, each
// such take ran a whole pass more at once (the members read, every lease
// still asked for read by key again, the leases listed): at a heal of
// 1,000 shards on 4 instances, a second pass at the same instant, with a
// listing of 83 read units and a read by key of each lease not yet
// released (fleettest/sim).
func TestFollowInAPassWakesNoPassMore(t *testing.T) {
	ctx := context.Background()
	st := lease.NewMemory()
	const ns = "test/follow"
	c, err := New(Config{
		Stream: "follow", Namespace: ns, Client: noKinesis{}, Leases: st, Owner: "a",
		Sink:     func(context.Context, []Record) (int, error) { return 0, nil },
		Liveness: LivenessPerInstance,
	})
	if err != nil {
		t.Fatal(err)
	}
	c.beatUntil.Store(int64(time.Hour)) // a confirmed heartbeat: not past its fence
	for i, inPass := range []bool{true, false} {
		id := fmt.Sprintf("shardId-%012d", i)
		key := lease.KeyFor(ns, id)
		if _, err := st.Create(ctx, lease.Lease{Key: key, ShardID: id, Owner: "b"}); err != nil {
			t.Fatal(err)
		}
		l, err := st.Get(ctx, key)
		if err == nil {
			l, err = st.RequestHandoff(ctx, l, "a")
		}
		if err == nil {
			_, err = st.Release(ctx, l) // b handed it over
		}
		if err != nil {
			t.Fatal(err)
		}
		c.mu.Lock()
		c.pending[key] = time.Now()
		c.mu.Unlock()

		c.followHandoffs(ctx, inPass)
		c.mu.Lock()
		o := c.owned[id]
		c.mu.Unlock()
		if o == nil {
			t.Fatalf("%s: the released lease asked for is not taken", id)
		}
		o.timer.Stop()
		woke := false
		select {
		case <-c.kick:
			woke = true
		default:
		}
		switch {
		case inPass && woke:
			t.Errorf("a pass that took a lease it asked for woke a pass more")
		case !inPass && !woke:
			t.Errorf("the renewal loop took a lease it asked for and woke no pass to open it")
		}
	}
}
