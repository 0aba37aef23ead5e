package shard_test

import (
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/kinesisgen/kinesisgen/runtime/lease"
	"github.com/kinesisgen/kinesisgen/runtime/shard"
)

// An owner cut off from the lease store stops handing out its shards'
// records before another instance can take their leases: no record
// published after the other instance took over is delivered by it. Once
// the store answers again it wins a lease back and reads on, with no
// duplicate. (Before the fix the cut-off owner read on for ever beside the
// new owner: every new record was delivered twice.)
func TestCutOffOwnerFencesItself(t *testing.T) {
	eachLiveness(t, func(t *testing.T, l shard.Liveness) {
		for _, mode := range []struct {
			name string
			fail bool
		}{{"throttled", true}, {"black-hole", false}} {
			t.Run(mode.name, func(t *testing.T) {
				e, _ := memEnvIn(t, 2, l)
				hole := &holeStore{Store: e.store, fail: mode.fail}
				testCutOffOwnerFencesItself(t, e, hole, func(open bool) { hole.open.Store(open) }, hole.writes.Load)
			})
		}
	})
}

// testCutOffOwnerFencesItself runs the test above on e; storeA is the
// store of the owner that is cut off, cut cuts it off and heals it, writes
// counts the lease writes (renewals, checkpoints) it has been sent.
func testCutOffOwnerFencesItself(t *testing.T, e *env, storeA lease.Store, cut func(bool), writes func() int64) {
	ids := e.shards()
	cols := newCollectors(2)
	colA, colB := cols[0], cols[1]
	cfgA, cfgB := e.config("a", colA.sink), e.config("b", colB.sink)
	cfgA.Leases = storeA
	for _, c := range []*shard.Config{&cfgA, &cfgB} {
		c.Renew, c.Failover = 100*time.Millisecond, time.Second
	}
	a := e.start(cfgA)
	eventually(t, 5*time.Second, "a reads both shards", func() bool { return slices.Equal(a.Reading(), ids) })

	cut(true)
	cutAt := time.Now()
	b := e.start(cfgB)
	eventually(t, 5*cfgB.Failover, "b reads both shards", func() bool { return slices.Equal(b.Reading(), ids) })
	t.Logf("b took both shards %v after a was cut off (failover %v)", time.Since(cutAt).Round(time.Millisecond), cfgB.Failover)
	if got := a.Reading(); len(got) != 0 {
		t.Errorf("a still reads %v after b took them", got)
	}
	e.publish(map[string]int{}, 20, 20) // keys k0..k19
	colB.wait(t, 10*time.Second, "b to read the 20 new records", func(r []*shard.Record) bool {
		return countKeys(r, "k") >= 20
	})
	time.Sleep(200 * time.Millisecond) // a poll or two: a, if it still read, would have them too
	if n := countKeys(colA.records(), "k"); n != 0 {
		t.Fatalf("a, cut off from the lease store, delivered %d of the records published after b took its shards over", n)
	}
	// Fenced, a writes nothing more for the shards: no renewal, no
	// checkpoint of what it had handed out.
	w := writes()
	time.Sleep(3 * cfgA.Renew)
	if n := writes() - w; n != 0 {
		t.Fatalf("a, fenced, sent %d lease writes in %v", n, 3*cfgA.Renew)
	}

	// Healed: a asks for its share, b hands it over, and nothing published
	// from then on is delivered twice.
	cut(false)
	eventually(t, 10*time.Second, "a 1/1 split after the store healed", func() bool {
		return len(a.Reading()) == 1 && len(b.Reading()) == 1
	})
	before := len(colA.records()) + len(colB.records())
	more := map[string]int{}
	for i := range 20 {
		key := fmt.Sprintf("m%d", i)
		e.put(key, 0)
		more[key] = 1
	}
	colB.wait(t, 10*time.Second, "the records published after the split", func([]*shard.Record) bool {
		return countKeys(append(colA.records(), colB.records()...), "m") >= 20
	})
	all := append(colA.records(), colB.records()...)
	var after []*shard.Record
	for _, r := range all {
		if len(r.Data) > 0 && r.Data[0] == 'm' {
			after = append(after, r)
		}
	}
	checkKeyOrder(t, after, more)
	if n := countKeys(colA.records(), "m"); n == 0 {
		t.Errorf("a read nothing after winning a lease back (%d deliveries before)", before)
	}
}

// countKeys counts the records whose key starts with prefix.
func countKeys(recs []*shard.Record, prefix string) int {
	n := 0
	for _, r := range recs {
		if len(r.PartitionKey) >= len(prefix) && r.PartitionKey[:len(prefix)] == prefix {
			n++
		}
	}
	return n
}
