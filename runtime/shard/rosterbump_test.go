package shard

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/kinesis"

	"github.com/kinesisgen/kinesisgen/runtime/lease"
)

// emptyStream is a stream without shards: a coordinator on it runs its
// passes and heartbeats and reads nothing.
type emptyStream struct{ noKinesis }

func (emptyStream) ListShards(context.Context, *kinesis.ListShardsInput, ...func(*kinesis.Options)) (*kinesis.ListShardsOutput, error) {
	return &kinesis.ListShardsOutput{}, nil
}

func (emptyStream) DescribeStreamSummary(context.Context, *kinesis.DescribeStreamSummaryInput, ...func(*kinesis.Options)) (*kinesis.DescribeStreamSummaryOutput, error) {
	return nil, errors.New("not described")
}

// bumpCount is a memory store that keeps the roster and counts the
// whole-list member reads (with one member, one a lease pass) and the
// roster's bumps.
type bumpCount struct {
	*lease.Memory
	reads, bumps atomic.Int64
}

func (s *bumpCount) Members(ctx context.Context, ns string) ([]lease.Member, error) {
	s.reads.Add(1)
	return s.Memory.Members(ctx, ns)
}

func (s *bumpCount) BumpRoster(ctx context.Context, ns string) (int64, error) {
	s.bumps.Add(1)
	return s.Memory.BumpRoster(ctx, ns)
}

// With the roster, a heartbeat whose entry changed (Held or Asks, as
// every step of a handoff changes them) has the roster bumped without a
// lease pass. Before, it woke a pass for the bump: during a heal's
// handoffs each change ran a whole pass more on the asker and on each
// owner asked (the members read, every asked lease read again by key,
// the leases listed), 1.3 to 1.8 times the read units of liveness per
// instance (fleettest/sim, heal at 64 × 4 and 1,000 × 4).
func TestRosterChangedEntryBumpsWithoutAPass(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		st := &bumpCount{Memory: lease.NewMemory()}
		c, err := New(Config{
			Stream: "s", Client: emptyStream{}, Leases: st, Owner: "a",
			Sink:     func(context.Context, []Record) (int, error) { return 0, nil },
			Liveness: LivenessPerInstance, Balance: BalanceBulk, Roster: true,
			Renew: time.Second, Failover: 10 * time.Second, Sync: time.Minute,
		})
		if err != nil {
			t.Fatal(err)
		}
		if err := c.Start(t.Context()); err != nil {
			t.Fatal(err)
		}
		defer func() {
			if err := c.Stop(context.Background()); err != nil {
				t.Error(err)
			}
		}()
		if c.roster == nil {
			t.Fatal("the roster is off")
		}
		time.Sleep(5*time.Second + 500*time.Millisecond) // at rest, between two heartbeats
		synctest.Wait()
		reads, bumps := st.reads.Load(), st.bumps.Load()

		// The entry's Held changes before each heartbeat (a heartbeat
		// every second); a lease pass runs every 2.5 s.
		const changes = 10
		for i := range changes {
			c.leftHeld.Store(int32(1 - i%2))
			time.Sleep(time.Second)
			synctest.Wait()
		}
		c.leftHeld.Store(0)
		passes := st.reads.Load() - reads
		bumped := st.bumps.Load() - bumps
		every := c.cfg.leaseEvery()
		if most := int64(changes*time.Second/every) + 1; passes > most {
			t.Errorf("%d lease passes in %d s with the entry changed at each heartbeat, want at most %d (one every %v): a change woke a pass", passes, changes, most, every)
		}
		if bumped < changes-1 {
			t.Errorf("the roster bumped %d times for %d changes of the entry, want one each", bumped, changes)
		}
	})
}
