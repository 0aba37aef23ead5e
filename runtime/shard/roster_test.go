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

// rosterWrap is a store that keeps the roster of the memory store under
// it, counts its member reads, and fails its heartbeats while off (a
// process cut off from the lease store for its heartbeats: it fences).
type rosterWrap struct {
	lease.Store
	r                    lease.RosterStore
	off                  atomic.Bool
	full, byOwner, beats atomic.Int64
	posted               atomic.Int64 // notices posted
	// blind: its whole-list reads fail (an instance that does not learn
	// of a declaration for a while).
	blind atomic.Bool
}

func newRosterWrap(s lease.Store) *rosterWrap {
	r, _ := lease.RosterOf(s)
	return &rosterWrap{Store: s, r: r}
}

func (w *rosterWrap) Heartbeat(ctx context.Context, ns string, m lease.Member) error {
	if w.off.Load() {
		return &lease.Error{Op: "heartbeat", Err: errThrottled}
	}
	w.beats.Add(1)
	return w.r.Heartbeat(ctx, ns, m)
}

func (w *rosterWrap) Members(ctx context.Context, ns string) ([]lease.Member, error) {
	if w.blind.Load() {
		return nil, &lease.Error{Op: "members", Err: errThrottled}
	}
	w.full.Add(1)
	return w.r.Members(ctx, ns)
}

func (w *rosterWrap) Leave(ctx context.Context, ns, owner string, beat int64) error {
	return w.r.Leave(ctx, ns, owner, beat)
}

func (w *rosterWrap) RosterVersion(ctx context.Context, ns string) (int64, error) {
	return w.r.RosterVersion(ctx, ns)
}

func (w *rosterWrap) BumpRoster(ctx context.Context, ns string) (int64, error) {
	return w.r.BumpRoster(ctx, ns)
}

func (w *rosterWrap) MembersByOwner(ctx context.Context, ns string, owners []string) (int64, []lease.Member, error) {
	w.byOwner.Add(1)
	return w.r.MembersByOwner(ctx, ns, owners)
}

func (w *rosterWrap) DeclareDead(ctx context.Context, ns, owner string, beat int64) error {
	return w.r.DeclareDead(ctx, ns, owner, beat)
}

func (w *rosterWrap) WatchRoster(ctx context.Context, ns string, owners []string) (int64, []lease.Member, []lease.RosterNotice, error) {
	w.byOwner.Add(1)
	return w.r.WatchRoster(ctx, ns, owners)
}

func (w *rosterWrap) PostNotice(ctx context.Context, ns string, n lease.RosterNotice) error {
	w.posted.Add(1)
	return w.r.PostNotice(ctx, ns, n)
}

func (w *rosterWrap) WithdrawNotice(ctx context.Context, ns string, n lease.RosterNotice) error {
	return w.r.WithdrawNotice(ctx, ns, n)
}

var _ lease.RosterStore = (*rosterWrap)(nil)

// noOverlap fails t when two coordinators read one shard.
func noOverlap(t *testing.T, cs map[string]*shard.Coordinator) {
	t.Helper()
	seen := map[string]string{}
	for name, c := range cs {
		for _, id := range c.Reading() {
			if other, ok := seen[id]; ok {
				t.Fatalf("%s and %s both read %s", other, name, id)
			}
			seen[id] = name
		}
	}
}

func readingAll(cs map[string]*shard.Coordinator, ids []string) bool {
	var all []string
	for _, c := range cs {
		all = append(all, c.Reading()...)
	}
	slices.Sort(all)
	return slices.Equal(all, ids)
}

// Issue 34 item 3: with the roster an instance at rest reads the roster's
// version and its ring successors' entries, never the whole member list;
// a member that stops beating is declared dead by its watchers, and every
// instance (watcher or not) counts it dead and reads its shards within
// about the failover time after its fence; back, it rejoins (its
// heartbeat is refused as declared dead, it writes a new entry) and gets
// its share again. No shard is read by two instances at any time. One
// instance of the earlier kind (no roster) runs beside them throughout.
func TestRosterDeclaresTheDeadAndReadsLinearly(t *testing.T) {
	e, _ := memEnv(t, 8)
	ids := e.shards()
	cs := map[string]*shard.Coordinator{}
	wraps := map[string]*rosterWrap{}
	for _, name := range []string{"a", "b", "c", "d", "old"} {
		cfg := e.config(name, newCollector().sink)
		cfg.Renew, cfg.Failover = 100*time.Millisecond, time.Second
		if name != "old" {
			w := newRosterWrap(e.store)
			wraps[name] = w
			cfg.Leases, cfg.Roster, cfg.RosterWhole = w, true, -1
		}
		cs[name] = e.start(cfg)
	}
	eventually(t, 10*time.Second, "every shard read, by one instance each", func() bool {
		noOverlap(t, cs)
		return readingAll(cs, ids)
	})
	// The old instance leaves: the roster instances read the whole list
	// every pass only while one of the earlier kind is a member.
	if err := cs["old"].Stop(e.ctx(5 * time.Second)); err != nil {
		t.Fatal(err)
	}
	delete(cs, "old")
	eventually(t, 10*time.Second, "every shard read once old left", func() bool {
		noOverlap(t, cs)
		return readingAll(cs, ids) && len(cs["a"].Reading()) == 2 && len(cs["d"].Reading()) == 2
	})
	time.Sleep(time.Second) // settled: no more bumps
	full, byOwner := wraps["a"].full.Load(), wraps["a"].byOwner.Load()
	time.Sleep(time.Second)
	if f, b := wraps["a"].full.Load()-full, wraps["a"].byOwner.Load()-byOwner; f != 0 || b == 0 {
		t.Errorf("at rest a read the whole member list %d times and its successors %d times in 1 s; want 0 and some", f, b)
	}

	// c's heartbeats fail: it fences, its watchers (a and b) declare it
	// dead, and d, which does not watch it, counts it dead too.
	wraps["c"].off.Store(true)
	cut := time.Now()
	cHeld := cs["c"].Reading()
	eventually(t, 5*time.Second, "c's shards read by the others", func() bool {
		noOverlap(t, cs)
		for _, id := range cHeld {
			read := false
			for name, c := range cs {
				if name != "c" && slices.Contains(c.Reading(), id) {
					read = true
				}
			}
			if !read {
				return false
			}
		}
		return true
	})
	took := time.Since(cut)
	t.Logf("c's shards read again %v after its heartbeats began to fail (failover 1s)", took.Round(time.Millisecond))
	if took > 2*time.Second {
		t.Errorf("c's shards read again %v after its heartbeats failed; want within twice the failover time", took)
	}
	ms, _ := e.store.(lease.MemberStore).Members(context.Background(), "test/"+e.stream)
	for _, m := range ms {
		if m.Owner == "c" && !m.Dead {
			t.Errorf("c's entry %+v not declared dead", m)
		}
	}

	// c comes back: it rejoins and gets its share.
	wraps["c"].off.Store(false)
	eventually(t, 10*time.Second, "c reads its share again", func() bool {
		noOverlap(t, cs)
		return readingAll(cs, ids) && len(cs["c"].Reading()) == 2
	})
}

// Issue 34 item 3: with the roster the others learn of a death only at
// their next pass after the declaration, up to a lease pass after each
// would have judged it by itself; so the watcher that declares a member
// dead takes its leases at once, as many as it can keep without another
// move (up to the fair share's ceiling). Four shards on a, b, c and d;
// d's watchers are b and c; after d dies the fair share gives its shard
// to a (the ceiling's one extra goes to the first by id), which cannot
// read the whole member list (it never learns of the declaration) while
// d is cut off: d's shard is read again all the same, by its declarer.
func TestRosterDeclarerTakesTheDeadsLeases(t *testing.T) {
	e, _ := memEnv(t, 4)
	ids := e.shards()
	cs := map[string]*shard.Coordinator{}
	wraps := map[string]*rosterWrap{}
	for _, name := range []string{"a", "b", "c", "d"} {
		cfg := e.config(name, newCollector().sink)
		cfg.Renew, cfg.Failover = 100*time.Millisecond, time.Second
		w := newRosterWrap(e.store)
		wraps[name] = w
		cfg.Leases, cfg.Roster, cfg.RosterWhole = w, true, -1
		cs[name] = e.start(cfg)
	}
	one := func() bool {
		noOverlap(t, cs)
		for _, c := range cs {
			if len(c.Reading()) != 1 {
				return false
			}
		}
		return readingAll(cs, ids)
	}
	eventually(t, 10*time.Second, "every shard read, one by each instance", one)
	time.Sleep(time.Second) // settled: no more bumps

	wraps["a"].blind.Store(true)
	wraps["d"].off.Store(true)
	cut := time.Now()
	dHeld := cs["d"].Reading()
	eventually(t, 4*time.Second, "d's shard read by its watchers", func() bool {
		noOverlap(t, cs)
		for _, id := range dHeld {
			if !slices.Contains(cs["b"].Reading(), id) && !slices.Contains(cs["c"].Reading(), id) {
				return false
			}
		}
		return true
	})
	t.Logf("d's shard read again %v after its heartbeats began to fail (failover 1s)", time.Since(cut).Round(time.Millisecond))

	wraps["a"].blind.Store(false)
	wraps["d"].off.Store(false)
	eventually(t, 10*time.Second, "balanced again, d back", one)
}
