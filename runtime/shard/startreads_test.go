package shard_test

import (
	"context"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/kinesisgen/kinesisgen/runtime/lease"
	"github.com/kinesisgen/kinesisgen/runtime/shard"
)

// lateListing is a memory store whose first List comes before the leases
// another instance creates meanwhile (it shows none), and which counts
// the leases read by key.
type lateListing struct {
	*lease.Memory
	listed atomic.Bool
	gets   atomic.Int64
}

func (s *lateListing) List(ctx context.Context, ns string) ([]lease.Lease, error) {
	if s.listed.CompareAndSwap(false, true) {
		return nil, nil
	}
	return s.Memory.List(ctx, ns)
}

func (s *lateListing) Get(ctx context.Context, key string) (lease.Lease, error) {
	s.gets.Add(1)
	return s.Memory.Get(ctx, key)
}

func (s *lateListing) GetMany(ctx context.Context, keys []string) ([]lease.Lease, error) {
	s.gets.Add(int64(len(keys)))
	return s.Memory.GetMany(ctx, keys)
}

// A create is refused when another instance made the lease first (with
// liveness per lease instances starting together each create every
// lease; with liveness per instance, see TestFleetStartCreatesEachLeaseOnce,
// an instance that finds a lease missing after a fleet's start). A
// refused create costs no read of the lease by key (on DynamoDB the
// refused write returns the item; before, each was followed by a GetItem:
// up to 19,000 reads when 20 instances started on 1,000 shards), and the
// lease it returns is the stored one: here another
// instance created the leases, a few writes on, between this one's
// listing and its creates, and this one takes and reads every shard in
// its first pass, its takes conditional on the stored counters. (Before,
// 8 reads by key.)
func TestRefusedCreatesReadNothing(t *testing.T) {
	for _, mode := range []struct {
		name     string
		liveness shard.Liveness
		balance  shard.Balance
	}{{"per-instance", shard.LivenessPerInstance, shard.BalanceBulk}, {"per-lease", shard.LivenessPerLease, shard.BalanceOneSteal}} {
		t.Run(mode.name, func(t *testing.T) {
			e, _ := memEnv(t, 8)
			ids := e.shards()
			mem := lease.NewMemory()
			ns := "test/" + e.stream
			ctx := e.ctx(10 * time.Second)
			for _, id := range ids {
				l := lease.Lease{Key: lease.KeyFor(ns, id), ShardID: id, Checkpoint: lease.CheckpointTrimHorizon}
				if _, err := mem.Create(ctx, l); err != nil {
					t.Fatal(err)
				}
				// Taken and released by an instance that stopped since:
				// the counter moved twice.
				tl, err := mem.Take(ctx, l, "gone")
				if err == nil {
					_, err = mem.Release(ctx, tl)
				}
				if err != nil {
					t.Fatal(err)
				}
			}
			store := &lateListing{Memory: mem}
			cfg := e.config("a", newCollector().sink)
			cfg.Leases = store
			cfg.Liveness, cfg.Balance = mode.liveness, mode.balance
			c := e.start(cfg)
			if got := c.Reading(); !slices.Equal(got, ids) {
				t.Errorf("after Start a reads %v, want every shard %v", got, ids)
			}
			if n := store.gets.Load(); n != 0 {
				t.Errorf("%d leases read by key at the start, want 0: a refused create returns the lease", n)
			}
		})
	}
}
