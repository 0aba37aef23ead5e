package shard_test

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/kinesisgen/kinesisgen/runtime/lease"
	"github.com/kinesisgen/kinesisgen/runtime/shard"
)

// slowRoster is slowStore keeping the roster too: its roster calls take
// the same time as the others.
type slowRoster struct {
	*slowStore
	r lease.RosterNotices
}

func newSlowRoster(s lease.Store) *slowRoster {
	r, _ := lease.RosterOf(s)
	return &slowRoster{slowStore: newSlowStore(s), r: r.(lease.RosterNotices)}
}

func (s *slowRoster) RosterVersion(ctx context.Context, ns string) (v int64, err error) {
	err = s.call(ctx, func() (err error) { v, err = s.r.RosterVersion(ctx, ns); return err })
	return v, err
}

func (s *slowRoster) BumpRoster(ctx context.Context, ns string) (v int64, err error) {
	err = s.call(ctx, func() (err error) { v, err = s.r.BumpRoster(ctx, ns); return err })
	return v, err
}

func (s *slowRoster) MembersByOwner(ctx context.Context, ns string, owners []string) (v int64, ms []lease.Member, err error) {
	err = s.call(ctx, func() (err error) { v, ms, err = s.r.MembersByOwner(ctx, ns, owners); return err })
	return v, ms, err
}

func (s *slowRoster) DeclareDead(ctx context.Context, ns, owner string, beat int64) error {
	return s.call(ctx, func() error { return s.r.DeclareDead(ctx, ns, owner, beat) })
}

func (s *slowRoster) WatchRoster(ctx context.Context, ns string, owners []string) (v int64, ms []lease.Member, ns2 []lease.RosterNotice, err error) {
	err = s.call(ctx, func() (err error) { v, ms, ns2, err = s.r.WatchRoster(ctx, ns, owners); return err })
	return v, ms, ns2, err
}

func (s *slowRoster) PostNotice(ctx context.Context, ns string, n lease.RosterNotice) error {
	return s.call(ctx, func() error { return s.r.PostNotice(ctx, ns, n) })
}

func (s *slowRoster) WithdrawNotice(ctx context.Context, ns string, n lease.RosterNotice) error {
	return s.call(ctx, func() error { return s.r.WithdrawNotice(ctx, ns, n) })
}

var _ lease.RosterNotices = (*slowRoster)(nil)

// Issue 29, defect 7, with the roster (the runtime's default): an owner
// fenced by a lease-store outage comes back once the store answers again,
// however slowly within the call deadline. The way back writes a new beat
// and bumps the roster before the pass takes the leases; the beat's
// validity counts from the write, so with calls near their deadline the
// takes landed past the fence, and the owner fenced them at once, every
// time, for as long as the store stayed slow (fleettest/dst mix all, seed
// 1796587923443683974: 19.7 s unread).
func TestRosterWayBackOverASlowStore(t *testing.T) {
	// Rerun when a loaded machine made the store's waits late (see
	// untilOnTime): calls at 80 % of their deadline then ran past it.
	untilOnTime(t, func() (string, int64) { return rosterWayBackOnce(t) })
}

func rosterWayBackOnce(t *testing.T) (failure string, late int64) {
	e, _ := memEnv(t, 2)
	ids := e.shards()
	store := newSlowRoster(e.store)
	cfg := e.config("a", newCollector().sink)
	cfg.Leases, cfg.Roster = store, true
	// A 1.5 s failover: a call deadline of 0.5 s.
	cfg.Renew, cfg.Failover = 500*time.Millisecond, 1500*time.Millisecond
	cfg.Counters = new(shard.LeaseCounters)
	c := e.start(cfg)
	eventually(t, 5*time.Second, "a reads both shards", func() bool { return slices.Equal(c.Reading(), ids) })
	store.set(time.Second, 0) // every call past its deadline: a fences
	eventually(t, 5*time.Second, "a fenced", func() bool { return cfg.Counters.Lost.Load() > 0 })
	store.set(200*time.Millisecond, 200*time.Millisecond) // 0.4 s a call: 80% of the deadline
	back := time.Now()
	store.late.Store(0)
	for !slices.Equal(c.Reading(), ids) {
		if time.Since(back) > 10*time.Second {
			return fmt.Sprintf("a did not read both shards again within 10s of the store answering within the deadline (reads %v)", c.Reading()), store.late.Load()
		}
		time.Sleep(5 * time.Millisecond)
	}
	t.Logf("a back %v after the store answered within the deadline", time.Since(back).Round(10*time.Millisecond))
	lost := cfg.Counters.Lost.Load()
	for end := time.Now().Add(3 * time.Second); time.Now().Before(end); time.Sleep(5 * time.Millisecond) {
		if n := cfg.Counters.Lost.Load(); n != lost {
			return fmt.Sprintf("back, a fenced %d leases again with every call answered within its deadline (reads %v)", n-lost, c.Reading()), store.late.Load()
		}
	}
	return "", store.late.Load()
}
