//go:build !race

package shard

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/kinesisgen/kinesisgen/runtime/lease"
)

// balancedPass is a coordinator that holds its share of n leases among
// owners live members, each holding n/owners, and the listing its pass
// plans from: a balanced fleet, so the pass (balance) writes nothing.
type balancedPass struct {
	c       *Coordinator
	leases  []lease.Lease
	byShard map[string]lease.Lease
	view    memberView
}

func newBalancedPass(t *testing.T, n, owners int, liveness Liveness, bal Balance) *balancedPass {
	t.Helper()
	c, err := New(Config{
		Stream: "pass", Namespace: "app/pass", Client: noKinesis{}, Leases: lease.NewMemory(), Owner: "owner-00",
		Sink:     func(context.Context, []Record) (int, error) { return 0, nil },
		Liveness: liveness, Balance: bal,
	})
	if err != nil {
		t.Fatal(err)
	}
	c.beatUntil.Store(int64(time.Hour)) // its heartbeats land
	p := &balancedPass{c: c, byShard: make(map[string]lease.Lease, n),
		view: memberView{all: map[string]lease.Member{}, live: map[string]bool{}}}
	for i := range owners {
		o := fmt.Sprintf("owner-%02d", i)
		p.view.all[o] = lease.Member{Owner: o, Beat: 1, Held: n / owners}
		p.view.live[o] = true
	}
	for i := range n {
		id := fmt.Sprintf("shardId-%012d", i)
		l := lease.Lease{Key: lease.KeyFor("app/pass", id), ShardID: id, Owner: fmt.Sprintf("owner-%02d", i%owners), Counter: 1, Checkpoint: "49590338271490256608559692538361571095921575989136588898"}
		p.leases = append(p.leases, l)
		p.byShard[id] = l
		if l.Owner == c.cfg.Owner {
			c.owned[id] = &owned{shard: id, key: l.Key, l: l, fctx: context.Background(), st: &Stats{}}
		}
	}
	return p
}

// run is one lease pass's planning and bookkeeping over the listing, and
// what it took.
func (p *balancedPass) run(t *testing.T) time.Duration {
	began := time.Now()
	now := time.Now()
	p.view.sent = now // read just now: balance judges on it
	errs := p.c.balance(context.Background(), p.leases, p.byShard, p.view, now, now, nil)
	took := time.Since(began)
	if len(errs) > 0 {
		t.Fatalf("a balanced pass failed: %v", errs)
	}
	if p.c.wantMore {
		t.Fatal("a balanced pass took or asked for leases")
	}
	return took
}

// A lease pass is linear in the leases it involves: 16 times the leases
// (250 to 4,000, among 4 owners) take at most 2.5 × 16 times as long. A
// check of every listed lease against every held lease (the pass before
// issue 17: held × listed) takes 70–125 times as long here: replacing the
// pass's map of held keys with a scan of the held leases fails this test.
// Measured in both balancing modes, on the pass's own work (observing the
// listing, the held keys, the plan, take-backs, leftovers, the owners
// without a member entry, dead members) of a balanced fleet, which calls
// no store; the fastest of several runs of each size, interleaved, and
// the best of three tries, so that a loaded machine slows both sizes
// alike or makes the ratio smaller, not larger.
//
// Not under the race detector, whose own cost grows faster than the
// leases (80–90 times as long for 16 times the leases, map or scan alike):
// make test runs it without -race, as it runs the fleet simulation.
func TestLeasePassIsLinearInTheLeases(t *testing.T) {
	const small, large, owners, runs = 250, 4000, 4, 7
	const bound = 5 * large / small / 2 // 40: linear is 16, held × listed 70–125
	for _, mode := range []struct {
		liveness Liveness
		balance  Balance
	}{{LivenessPerInstance, BalanceBulk}, {LivenessPerLease, BalanceOneSteal}} {
		t.Run(mode.liveness.String(), func(t *testing.T) {
			s := newBalancedPass(t, small, owners, mode.liveness, mode.balance)
			l := newBalancedPass(t, large, owners, mode.liveness, mode.balance)
			var ratio float64
			for try := range 3 {
				bs, bl := time.Duration(1<<62), time.Duration(1<<62)
				for range runs {
					bs = min(bs, s.run(t))
					bl = min(bl, l.run(t))
				}
				ratio = float64(bl) / float64(max(bs, time.Microsecond))
				t.Logf("try %d: a pass over %d leases took %v, over %d %v: %.1f×", try+1, small, bs, large, bl, ratio)
				if ratio <= bound {
					return
				}
			}
			t.Errorf("a pass over %d leases took %.1f× as long as over %d, want at most %d× (linear: %d×)", large, ratio, small, bound, large/small)
		})
	}
}
