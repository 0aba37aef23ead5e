package shard_test

import (
	"errors"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/kinesisgen/kinesisgen/runtime/shard"
)

// Issue 29: a stopping instance must not be given the leases it releases.
// a holds two of four shards beside b; a's handler never returns a record
// of one of them, so a's Stop leaves that lease to expire and keeps its
// member entry (LeftToExpireError), and releases the other. Before the
// fix a's entry looked live until its beat stood still for the failover
// time, so b's plan gave a its fair share (two): b did not even list
// (by the members' counts it was at its share), and the shard a released
// went unread for a failover time. Now a's last heartbeats say it is
// leaving (lease.Member.Leaving): b gives it no share and takes the
// released shard within about a pass, but still does not take the lease
// a left to expire before a failover time, as after a crash (the stuck
// handler may still run its record). An ordinary Stop (nothing stuck)
// leaves the fleet at once: b takes both released shards within a pass.
func TestStoppingInstanceIsGivenNoLease(t *testing.T) {
	for _, stuck := range []bool{true, false} {
		name := "ordinary stop"
		if stuck {
			name = "stuck handler"
		}
		t.Run(name, func(t *testing.T) { testStoppingInstanceIsGivenNoLease(t, stuck, false) })
	}
	// With the roster the others read a's entry only after a bump: the
	// heartbeat that first says a is leaving bumps at once.
	t.Run("stuck handler/roster", func(t *testing.T) { testStoppingInstanceIsGivenNoLease(t, true, true) })
}

func testStoppingInstanceIsGivenNoLease(t *testing.T, stuck, roster bool) {
	const failover = 3 * time.Second
	e, _ := memEnvIn(t, 4, shard.LivenessPerInstance)
	ids := e.shards()
	cols := newCollectors(2)
	var stuckOne oneHeld // a's record that never settles
	cols[0].hold = stuckOne.hold
	cfgA, cfgB := e.config("a", cols[0].sink), e.config("b", cols[1].sink)
	for _, c := range []*shard.Config{&cfgA, &cfgB} {
		c.Renew, c.Failover = 100*time.Millisecond, failover
		c.Roster = roster
		if roster {
			c.RosterWhole = -1 // read the version and the watched entries, not the whole list, every pass
		}
	}
	a := e.startStopped(cfgA)
	eventually(t, 5*time.Second, "a reads every shard", func() bool { return slices.Equal(a.Reading(), ids) })
	b := e.start(cfgB)
	eventually(t, 10*time.Second, "a 2/2 split", func() bool { return len(a.Reading()) == 2 && len(b.Reading()) == 2 })
	aShards := a.Reading()
	var stuckShard string
	if stuck {
		stuckShard = stuckOne.armAndWait(t, e, 40)
	}
	var released []string
	for _, id := range aShards {
		if id != stuckShard {
			released = append(released, id)
		}
	}

	err := a.Stop(e.ctx(600 * time.Millisecond))
	stopped := time.Now()
	if stuck {
		var left *shard.LeftToExpireError
		if !errors.As(err, &left) || !slices.Equal(left.Shards, []string{stuckShard}) {
			t.Fatalf("a's Stop = %v; want a LeftToExpireError naming %s", err, stuckShard)
		}
	} else if err != nil {
		t.Fatalf("a's Stop: %v", err)
	}
	// About a pass (a pass runs every Failover/4 at most here, Sync 100
	// ms): well under the failover time.
	const within = time.Second
	deadline := stopped.Add(failover + time.Second)
	for {
		reading := b.Reading()
		if stuck && slices.Contains(reading, stuckShard) && time.Since(stopped) < failover-2*cfgA.Renew {
			t.Fatalf("b reads %s, the lease a left to expire, %v after a's Stop returned; want no sooner than the failover time (%v): a's handler may still run its record",
				stuckShard, time.Since(stopped).Round(time.Millisecond), failover)
		}
		all := true
		for _, id := range released {
			all = all && slices.Contains(reading, id)
		}
		if all {
			if took := time.Since(stopped); took > within {
				t.Fatalf("b read the shards a released (%v) %v after a's Stop returned; want within %v (a pass), not a failover time (%v)",
					released, took.Round(time.Millisecond), within, failover)
			}
			t.Logf("b read the shards a released %v after a's Stop returned", time.Since(stopped).Round(time.Millisecond))
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("b does not read the shards a released (%v) %v after a's Stop returned; reads %v", released, time.Since(stopped).Round(time.Millisecond), reading)
		}
		time.Sleep(5 * time.Millisecond)
	}
	if stuck {
		eventually(t, failover+2*time.Second, "b reads the lease a left to expire", func() bool { return slices.Contains(b.Reading(), stuckShard) })
		if took := time.Since(stopped); took < failover-2*cfgA.Renew {
			t.Fatalf("b took %s %v after a's Stop; want no sooner than the failover time", stuckShard, took)
		}
	}
}

// With the roster and four members, b does not watch a (c and d do): it
// reads a's entry only on a full read, after a bump. The heartbeat that
// first says a is leaving bumps at once (no pass of a's runs any more to
// bump), so b's plan, like c's and d's, gives a nothing.
func TestStoppingInstanceIsGivenNoLeaseWithTheRoster(t *testing.T) {
	const failover = 3 * time.Second
	e, _ := memEnvIn(t, 8, shard.LivenessPerInstance)
	ids := e.shards()
	names := []string{"a", "b", "c", "d"}
	cols := newCollectors(len(names))
	var stuckOne oneHeld
	cols[0].hold = stuckOne.hold
	cs := make([]*shard.Coordinator, len(names))
	for i, n := range names {
		cfg := e.config(n, cols[i].sink)
		cfg.Renew, cfg.Failover, cfg.Roster, cfg.RosterWhole = 100*time.Millisecond, failover, true, -1
		if i == 0 {
			cs[i] = e.startStopped(cfg)
			eventually(t, 5*time.Second, "a reads every shard", func() bool { return slices.Equal(cs[0].Reading(), ids) })
		} else {
			cs[i] = e.start(cfg)
		}
	}
	eventually(t, 15*time.Second, "a 2/2/2/2 split", func() bool {
		for _, c := range cs {
			if len(c.Reading()) != 2 {
				return false
			}
		}
		return true
	})
	aShards := cs[0].Reading()
	stuckShard := stuckOne.armAndWait(t, e, 80)
	released := aShards[0]
	if released == stuckShard {
		released = aShards[1]
	}
	err := cs[0].Stop(e.ctx(600 * time.Millisecond))
	stopped := time.Now()
	if !errors.Is(err, shard.ErrLeftToExpire) {
		t.Fatalf("a's Stop = %v; want ErrLeftToExpire", err)
	}
	readBy := func() string {
		for i, c := range cs[1:] {
			if slices.Contains(c.Reading(), released) {
				return names[i+1]
			}
		}
		return ""
	}
	eventually(t, failover+2*time.Second, "someone reads "+released, func() bool { return readBy() != "" })
	if took := time.Since(stopped); took > time.Second {
		t.Fatalf("%s read %s, which a released, %v after a's Stop returned; want within 1s (a pass), not a failover time (%v)",
			readBy(), released, took.Round(time.Millisecond), failover)
	}
	t.Logf("%s read %s %v after a's Stop returned", readBy(), released, time.Since(stopped).Round(time.Millisecond))
}

// oneHeld is a collector's hold that, once armed, holds the first record
// it is given and no other: a handler that never returns.
type oneHeld struct {
	mu    sync.Mutex
	armed bool
	held  *shard.Record
}

func (h *oneHeld) hold(r *shard.Record) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	if !h.armed || h.held != nil {
		return false
	}
	h.held = r
	return true
}

// armAndWait arms h, publishes n records over n keys and returns the
// shard of the record it holds.
func (h *oneHeld) armAndWait(t *testing.T, e *env, n int) string {
	t.Helper()
	h.mu.Lock()
	h.armed = true
	h.mu.Unlock()
	e.publish(map[string]int{}, n, n)
	eventually(t, 5*time.Second, "a handler of a's holds a record", func() bool {
		h.mu.Lock()
		defer h.mu.Unlock()
		return h.held != nil
	})
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.held.ShardID
}
