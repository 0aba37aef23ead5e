package shard_test

import (
	"context"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/kinesisgen/kinesisgen/runtime/lease"
	"github.com/kinesisgen/kinesisgen/runtime/shard"
)

// createCounter is a memory store that counts the lease creates that
// landed and those refused because the lease existed (each a billed write
// unit on DynamoDB), and the takes; each create takes d, as on a lease
// table busy with a fleet's start.
type createCounter struct {
	*lease.Memory
	d                       time.Duration
	created, refused, takes atomic.Int64
}

func (s *createCounter) CreateOrGet(ctx context.Context, l lease.Lease) (lease.Lease, bool, error) {
	time.Sleep(s.d)
	got, created, err := s.Memory.CreateOrGet(ctx, l)
	if err == nil && created {
		s.created.Add(1)
	} else if err == nil {
		s.refused.Add(1)
	}
	return got, created, err
}

func (s *createCounter) Create(ctx context.Context, l lease.Lease) (bool, error) {
	_, created, err := s.CreateOrGet(ctx, l)
	return created, err
}

func (s *createCounter) Take(ctx context.Context, l lease.Lease, owner string) (lease.Lease, error) {
	nl, err := s.Memory.Take(ctx, l, owner)
	if err == nil {
		s.takes.Add(1)
	}
	return nl, err
}

// startTogether starts a coordinator per config at once and waits for
// every Start.
func startTogether(t *testing.T, e *env, cfgs []shard.Config) []*shard.Coordinator {
	t.Helper()
	cs := make([]*shard.Coordinator, len(cfgs))
	errs := make([]error, len(cfgs))
	var wg sync.WaitGroup
	for i, cfg := range cfgs {
		c, err := shard.New(cfg)
		if err != nil {
			t.Fatalf("New: %v", err)
		}
		cs[i] = c
		t.Cleanup(func() {
			ctx, cancel := context.WithTimeout(context.Background(), time.Second)
			defer cancel()
			_ = c.Stop(ctx)
		})
		wg.Go(func() { errs[i] = c.Start(e.ctx(30 * time.Second)) })
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			t.Fatalf("Start: %v", err)
		}
	}
	return cs
}

// Instances that start together on a stream without leases create each
// lease once: after the start settle, the members known, each creates the
// leases the start gives it, which it then takes, and none of the
// others'. (Before, each created every lease it found missing in its
// first pass, before the settle: here 64 creates for 16 leases, 48 of
// them refused, each a write unit on DynamoDB; at 1,000 shards and 20
// instances up to 2,171 refused.) The start stays as good: each lease
// taken once, 4 each, read from the first pass.
func TestFleetStartCreatesEachLeaseOnce(t *testing.T) {
	// On a virtual clock: its margins are a fence time or a pass interval,
	// which a loaded machine took on the real clock (CI, load average 8-16).
	synctest.Test(t, func(t *testing.T) {
		e, _ := memEnv(t, 16)
		ids := e.shards()
		store := &createCounter{Memory: e.store.(*lease.Memory), d: 5 * time.Millisecond}
		var cfgs []shard.Config
		for _, o := range []string{"a", "b", "c", "d"} {
			cfg := e.config(o, newCollector().sink)
			cfg.Leases = store
			cfg.Liveness, cfg.Balance = shard.LivenessPerInstance, shard.BalanceBulk
			cfg.Renew, cfg.Failover = 2*time.Second, 6*time.Second // a start settle of 200 ms
			cfgs = append(cfgs, cfg)
		}
		cs := startTogether(t, e, cfgs)
		var reading []string
		for i, c := range cs {
			if n := len(c.Reading()); n != 4 {
				t.Errorf("%s reads %d shards after Start, want 4", cfgs[i].Owner, n)
			}
			reading = append(reading, c.Reading()...)
		}
		slices.Sort(reading)
		if !slices.Equal(reading, ids) {
			t.Errorf("the fleet reads %v, want every shard once: %v", reading, ids)
		}
		if n, r := store.created.Load(), store.refused.Load(); n != 16 || r != 0 {
			t.Errorf("%d leases created and %d creates refused for 16 shards, want 16 and 0: each lease created by one instance", n, r)
		}
		if n := store.takes.Load(); n != 16 {
			t.Errorf("%d takes for 16 leases, want each taken once", n)
		}
	})
}

// A lease that the start gives an instance which never creates it (it
// started beside the others, its entry saying so, and died before it
// created its leases: it looks alive to the others until the failover
// time) is created a pass later by an instance that finds it missing, and
// read once that member counts as dead: no shard is left without a lease,
// nor unread.
func TestFleetStartCreatesTheLeasesOfADeadMember(t *testing.T) {
	e, _ := memEnv(t, 12)
	ids := e.shards()
	mem := e.store.(*lease.Memory)
	store := &createCounter{Memory: mem}
	ns := "test/" + e.stream
	// z-dead started just before, and died in its first pass.
	if err := mem.Heartbeat(e.ctx(time.Second), ns, lease.Member{Owner: "z-dead", Beat: 1, Starting: true}); err != nil {
		t.Fatal(err)
	}
	var cfgs []shard.Config
	for _, o := range []string{"a", "b"} {
		cfg := e.config(o, newCollector().sink)
		cfg.Leases = store
		cfg.Liveness, cfg.Balance = shard.LivenessPerInstance, shard.BalanceBulk
		cfg.Renew, cfg.Failover = 300*time.Millisecond, 1500*time.Millisecond
		cfgs = append(cfgs, cfg)
	}
	cs := startTogether(t, e, cfgs)
	if n := store.created.Load(); n >= 12 {
		t.Fatalf("%d leases created at the start; the test meant 4 of them left to z-dead", n)
	}
	eventually(t, 3*cfgs[0].Failover, "every shard's lease created", func() bool {
		ls, err := mem.List(context.Background(), ns)
		return err == nil && len(ls) == len(ids)
	})
	eventually(t, 10*time.Second, "a and b read every shard", func() bool {
		all := append(cs[0].Reading(), cs[1].Reading()...)
		slices.Sort(all)
		return slices.Equal(all, ids)
	})
	t.Logf("%d creates refused", store.refused.Load())
	for _, id := range ids {
		if l := e.lease(id); l.Owner != "a" && l.Owner != "b" {
			t.Errorf("%s: lease held by %q", id, l.Owner)
		}
	}
}

// A member entry left by a dead instance (its beat stands still; it does
// not say it is starting) gets no share of a fleet's start: the instances
// starting together create and take every lease between them in their
// first pass, each lease once, and read every shard when Start returns.
// (Before, the start gave the dead entry a share as if it were alive,
// since it looks alive until the failover time: 4 of the 12 leases here
// were created a pass later and read only once it counted as dead, 5.8 s
// after Start returned, here and on dynalite:
// TestLiveFleetStartGivesADeadMemberNoCreates.)
func TestFleetStartGivesADeadMemberNoCreates(t *testing.T) {
	e, _ := memEnv(t, 12)
	store := &createCounter{Memory: e.store.(*lease.Memory)}
	testFleetStartDeadMember(t, e, store, func() {
		if n, r := store.created.Load(), store.refused.Load(); n != 12 || r != 0 {
			t.Errorf("%d leases created and %d creates refused at the start, want 12 and 0: none left to the dead member", n, r)
		}
	})
}

// testFleetStartDeadMember starts a and b together on e's 12 shards, with
// their leases in store and a dead instance's member entry beside them,
// and checks that they split every shard at once; atStart, when set,
// checks more when Start has returned.
func testFleetStartDeadMember(t *testing.T, e *env, store lease.Store, atStart func()) {
	ids := e.shards()
	ns := "test/" + e.stream
	if err := e.store.(lease.MemberStore).Heartbeat(e.ctx(10*time.Second), ns, lease.Member{Owner: "z-dead", Beat: 7}); err != nil {
		t.Fatal(err)
	}
	var cfgs []shard.Config
	for _, o := range []string{"a", "b"} {
		cfg := e.config(o, newCollector().sink)
		cfg.Leases = store
		cfg.Liveness, cfg.Balance = shard.LivenessPerInstance, shard.BalanceBulk
		cfg.Renew, cfg.Failover = 2*time.Second, 6*time.Second // a start settle of 200 ms
		cfgs = append(cfgs, cfg)
	}
	cs := startTogether(t, e, cfgs)
	started := time.Now()
	for i, c := range cs {
		if n := len(c.Reading()); n != 6 {
			t.Errorf("%s reads %d shards when Start returns, want 6", cfgs[i].Owner, n)
		}
	}
	if atStart != nil {
		atStart()
	}
	eventually(t, 2*cfgs[0].Failover, "a and b read every shard", func() bool {
		all := append(cs[0].Reading(), cs[1].Reading()...)
		slices.Sort(all)
		return slices.Equal(all, ids)
	})
	if took := time.Since(started); took > cfgs[0].Renew {
		t.Errorf("every shard read %v after Start returned, want at once (the dead member counts as dead only after the failover time %v)", took.Round(time.Millisecond), cfgs[0].Failover)
	} else {
		t.Logf("every shard read %v after Start returned", took.Round(time.Millisecond))
	}
}
