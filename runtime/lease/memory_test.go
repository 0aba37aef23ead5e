package lease_test

import (
	"context"
	"testing"

	"github.com/kinesisgen/kinesisgen/runtime/lease"
	"github.com/kinesisgen/kinesisgen/runtime/lease/leasetest"
)

func TestMemoryConformance(t *testing.T) {
	leasetest.Run(t, func(*testing.T) lease.Store { return lease.NewMemory() })
}

func TestMemoryLeader(t *testing.T) {
	leasetest.RunLeader(t, func(*testing.T) lease.Store { return lease.NewMemory() })
}

// BenchmarkMemoryRenew measures one renewal of a held lease.
func BenchmarkMemoryRenew(b *testing.B) {
	ctx := context.Background()
	s := lease.NewMemory()
	l := benchLease(ctx, b, s)
	for b.Loop() {
		var err error
		if l, err = s.Renew(ctx, l); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkMemoryCheckpoint measures one checkpoint of a held lease.
func BenchmarkMemoryCheckpoint(b *testing.B) {
	ctx := context.Background()
	s := lease.NewMemory()
	l := benchLease(ctx, b, s)
	for b.Loop() {
		var err error
		if l, err = s.Checkpoint(ctx, l, "49590338271490256608559692538361571095921575989136588898", 0); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkMemoryRenewParallel renews 64 leases from all Ps at once, as one
// process renewing many shards does.
func BenchmarkMemoryRenewParallel(b *testing.B) {
	ctx := context.Background()
	s := lease.NewMemory()
	for i := range 64 {
		l := lease.Lease{Key: lease.KeyFor("bench/stream", string(rune('a'+i%26))+string(rune('a'+i/26))), ShardID: "x"}
		if _, err := s.Create(ctx, l); err != nil {
			b.Fatal(err)
		}
	}
	ls, _ := s.List(ctx, "bench/stream")
	next := make(chan lease.Lease, len(ls))
	for _, l := range ls {
		l, err := s.Take(ctx, l, "bench")
		if err != nil {
			b.Fatal(err)
		}
		next <- l
	}
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			l := <-next
			l, err := s.Renew(ctx, l)
			if err != nil {
				b.Error(err)
				return
			}
			next <- l
		}
	})
}

func benchLease(ctx context.Context, b *testing.B, s lease.Store) lease.Lease {
	b.Helper()
	l := lease.Lease{Key: lease.KeyFor("bench/stream", "shardId-000000000000"), ShardID: "shardId-000000000000",
		ParentShardIDs: []string{"shardId-000000000001"}}
	if _, err := s.Create(ctx, l); err != nil {
		b.Fatal(err)
	}
	l, err := s.Take(ctx, l, "bench")
	if err != nil {
		b.Fatal(err)
	}
	return l
}

func TestMemoryMembers(t *testing.T) {
	leasetest.RunMembers(t, func(*testing.T) lease.MemberStore { return lease.NewMemory() })
}

func TestMemoryLookup(t *testing.T) {
	leasetest.RunLookup(t, func(*testing.T) lease.Store { return lease.NewMemory() })
}

func TestMemoryRoster(t *testing.T) {
	leasetest.RunRoster(t, func(*testing.T) lease.RosterStore { return lease.NewMemory() })
}
