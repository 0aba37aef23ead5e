package shard_test

import (
	"context"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/kinesisgen/kinesisgen/runtime/lease"
	"github.com/kinesisgen/kinesisgen/runtime/shard"
)

// deliveries logs the records every owner's sink is handed, in one order
// across the owners.
type deliveries struct {
	mu  sync.Mutex
	log []delivery
}

type delivery struct {
	owner string
	id    recordID
	data  string
}

// wrap returns sink, logging what it is handed as owner's.
func (d *deliveries) wrap(owner string, sink shard.Sink) shard.Sink {
	return func(ctx context.Context, rs []shard.Record) (int, error) {
		d.mu.Lock()
		for i := range rs {
			d.log = append(d.log, delivery{owner: owner, id: idOf(&rs[i]), data: string(rs[i].Data)})
		}
		d.mu.Unlock()
		return sink(ctx, rs)
	}
}

func (d *deliveries) all() []delivery {
	d.mu.Lock()
	defer d.mu.Unlock()
	return append([]delivery(nil), d.log...)
}

// checkpoints is a lease store that logs the checkpoints that were stored,
// per shard and owner, each with how many deliveries d had logged by then.
type checkpoints struct {
	lease.Store
	d     *deliveries
	mu    sync.Mutex
	by    map[[2]string][]storedCheckpoint // {shard, owner} -> checkpoints stored
	taken map[string][]int                 // shard -> deliveries logged before each take
}

type storedCheckpoint struct {
	cp    string
	after int // deliveries logged before it was stored
}

func newCheckpoints(inner lease.Store, d *deliveries) (*checkpoints, lease.Store) {
	c := &checkpoints{Store: inner, d: d, by: map[[2]string][]storedCheckpoint{}, taken: map[string][]int{}}
	return c, withMembers(c, inner)
}

func (c *checkpoints) Take(ctx context.Context, l lease.Lease, owner string) (lease.Lease, error) {
	nl, err := c.Store.Take(ctx, l, owner)
	if err == nil {
		c.d.mu.Lock()
		n := len(c.d.log)
		c.d.mu.Unlock()
		c.mu.Lock()
		c.taken[l.ShardID] = append(c.taken[l.ShardID], n)
		c.mu.Unlock()
	}
	return nl, err
}

// takenBetween reports whether the lease of shardID was taken (by any
// owner) after the delivery at index from of the log and before the one
// at index to.
func (c *checkpoints) takenBetween(shardID string, from, to int) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, n := range c.taken[shardID] {
		if n > from && n <= to {
			return true
		}
	}
	return false
}

func (c *checkpoints) Checkpoint(ctx context.Context, l lease.Lease, cp string, sub int64) (lease.Lease, error) {
	nl, err := c.Store.Checkpoint(ctx, l, cp, sub)
	if err == nil {
		c.d.mu.Lock()
		n := len(c.d.log)
		c.d.mu.Unlock()
		c.mu.Lock()
		k := [2]string{l.ShardID, l.Owner}
		c.by[k] = append(c.by[k], storedCheckpoint{cp, n})
		c.mu.Unlock()
	}
	return nl, err
}

// covered reports whether an owner had stored a checkpoint of shardID at
// or past seq (or SHARD_END) before the delivery at index i of the log: no
// owner reads the shard from before it after that (a take is conditional
// on the lease as last written).
func (c *checkpoints) covered(shardID, seq string, i int) (string, string, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for k, list := range c.by {
		if k[0] != shardID {
			continue
		}
		for _, s := range list {
			if s.after <= i && (s.cp == lease.CheckpointShardEnd || isDecimal(s.cp) && seqCmp(s.cp, seq) >= 0) {
				return k[1], s.cp, true
			}
		}
	}
	return "", "", false
}

func isDecimal(s string) bool {
	for _, r := range s {
		if r < '0' || r > '9' {
			return false
		}
	}
	return s != ""
}

// seqCmp compares two sequence numbers (decimal strings) by value.
func seqCmp(a, b string) int {
	a, b = strings.TrimLeft(a, "0"), strings.TrimLeft(b, "0")
	if len(a) != len(b) {
		return len(a) - len(b)
	}
	return strings.Compare(a, b)
}

// checkUnderFences asserts what holds of the deliveries of records
// published as "key:n" (want: how many per key) even when leases were lost
// on the way (lost: how many; a fence on a loaded machine): nothing is
// lost; each key's records are first delivered in publish order; and a
// record is delivered again only after a lease was lost, and only one no
// owner had checkpointed (every checkpoint of its shard stored by then is
// before it: its settlement never counted). It returns how many records
// were delivered more than once.
func checkUnderFences(t *testing.T, d *deliveries, cps *checkpoints, want map[string]int, lost uint64) (dups int) {
	t.Helper()
	first := map[recordID]delivery{}
	next := map[string]int{} // per key: the record whose first delivery is due
	again := map[recordID]bool{}
	for i, x := range d.all() {
		key, nstr, _ := strings.Cut(x.data, ":")
		n, _ := strconv.Atoi(nstr)
		if _, ok := want[key]; !ok {
			t.Fatalf("record %s of an unexpected key delivered (shard %s)", x.data, x.id.shard)
		}
		f, seen := first[x.id]
		if !seen {
			first[x.id] = x
			if n != next[key] {
				t.Errorf("key %s: record %d first delivered (by %s) when %d was due: order broken or a record skipped", key, n, x.owner, next[key])
			}
			next[key] = max(next[key], n+1)
			continue
		}
		if !again[x.id] {
			dups++
		}
		again[x.id] = true
		if lost == 0 {
			t.Errorf("record %s/%s (%s) delivered again (by %s, first by %s) while no lease was lost: a graceful handoff or stop repeated it",
				x.id.shard, x.id.seq, x.data, x.owner, f.owner)
			continue
		}
		if by, cp, ok := cps.covered(x.id.shard, x.id.seq, i); ok {
			t.Errorf("record %s/%s (%s) delivered again (by %s; first by %s), though %s had checkpointed it (%s) before",
				x.id.shard, x.id.seq, x.data, x.owner, f.owner, by, cp)
		}
	}
	for k, n := range want {
		if next[k] != n {
			t.Errorf("key %s: %d records delivered, want %d (lost)", k, next[k], n)
		}
	}
	return dups
}

// checkAfterFences is checkUnderFences, and also: a record comes again
// only from a reader of its shard opened on a take of the shard's lease
// made after the record's first delivery (a take-back or a take-over
// after the loss), so a lease lost on one shard repeats no record of
// another, and no reader of a lease held throughout repeats one.
func checkAfterFences(t *testing.T, d *deliveries, cps *checkpoints, want map[string]int, lost uint64) (dups int) {
	t.Helper()
	dups = checkUnderFences(t, d, cps, want, lost)
	first := map[recordID]int{}
	for i, x := range d.all() {
		f, seen := first[x.id]
		if !seen {
			first[x.id] = i
			continue
		}
		if !cps.takenBetween(x.id.shard, f, i) {
			t.Errorf("record %s/%s (%s) delivered again (by %s, at %d; first at %d) though its shard's lease was not taken again in between",
				x.id.shard, x.id.seq, x.data, x.owner, i, f)
		}
	}
	return dups
}

// withLookups gives wrapper (a lease.MemberStore wrapping inner) inner's
// lease.Lookup and lease.CreateOrGetter, which the wrapping hides: a
// coordinator on it reads the store as one on inner does.
func withLookups(wrapper, inner lease.Store) lease.Store {
	m, ok := wrapper.(lease.MemberStore)
	l, okL := inner.(lease.Lookup)
	cg, okC := inner.(lease.CreateOrGetter)
	if !ok || !okL || !okC {
		return wrapper
	}
	return lookupWrap{MemberStore: m, l: l, cg: cg}
}

type lookupWrap struct {
	lease.MemberStore
	l  lease.Lookup
	cg lease.CreateOrGetter
}

func (w lookupWrap) GetMany(ctx context.Context, keys []string) ([]lease.Lease, error) {
	return w.l.GetMany(ctx, keys)
}

func (w lookupWrap) CreateOrGet(ctx context.Context, l lease.Lease) (lease.Lease, bool, error) {
	return w.cg.CreateOrGet(ctx, l)
}
