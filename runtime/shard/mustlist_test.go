package shard

import (
	"context"
	"testing"
	"testing/synctest"
	"time"

	"github.com/kinesisgen/kinesisgen/runtime/lease"
)

// A shortfall in the members' counts lists the leases only once it has
// lasted Failover/2, measured from when it began: a shortfall that ended
// while another reason was listing does not count toward the next one.
// (Before, a pass that listed for another reason left the old start in
// place, and the next shortfall listed at once.)
func TestMustListTimesEachShortfallFromItsStart(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		known := map[string]lease.Lease{}
		for i, id := range []string{"s0", "s1", "s2", "s3"} {
			known[id] = lease.Lease{Key: id, ShardID: id, Owner: []string{"a", "b"}[i/2]}
		}
		c := &Coordinator{
			cfg:   Config{Owner: "a", Failover: 2 * time.Second},
			known: known,
			owned: map[string]*owned{"s0": {fctx: context.Background()}, "s1": {fctx: context.Background()}},
		}
		view := func(bHeld int) memberView {
			return memberView{
				all:  map[string]lease.Member{"a": {Owner: "a", Held: 2}, "b": {Owner: "b", Held: bHeld}},
				live: map[string]bool{"a": true, "b": true},
			}
		}
		short, caughtUp := view(1), view(2) // 3 of 4 leases counted, then 4

		if c.mustList(short) {
			t.Fatal("a, at its share, lists at the first sight of a shortfall; want after Failover/2")
		}
		time.Sleep(c.cfg.overdueAfter() / 2)
		c.pending = map[string]time.Time{"s9": time.Now()} // listing for an ask of its own
		if !c.mustList(caughtUp) {
			t.Fatal("a, with an ask pending, does not list")
		}
		c.pending = nil
		time.Sleep(c.cfg.overdueAfter())
		if c.mustList(short) {
			t.Errorf("a new shortfall listed at once: the one that ended %v ago still counted", c.cfg.overdueAfter())
		}
		time.Sleep(c.cfg.overdueAfter())
		if !c.mustList(short) {
			t.Errorf("a shortfall that lasted %v does not list", c.cfg.overdueAfter())
		}
	})
}
