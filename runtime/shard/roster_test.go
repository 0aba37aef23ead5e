package shard_test

import (
	"context"
	"log/slog"
	"maps"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/smithy-go"

	"github.com/kinesisgen/kinesisgen/runtime/lease"
	"github.com/kinesisgen/kinesisgen/runtime/shard"
)

// rosterWrap is a store that keeps the roster of the memory store under
// it, counts its member reads, and fails its heartbeats while off (a
// process cut off from the lease store for its heartbeats: it fences).
type rosterWrap struct {
	lease.Store
	r                    lease.RosterNotices
	off                  atomic.Bool
	full, byOwner, beats atomic.Int64
	posted               atomic.Int64 // notices posted
	bumps                atomic.Int64 // roster bumps
	// beatMu guards lastBeat, when the last heartbeat that landed was
	// sent, and beatGap, the longest time between two sent since
	// beatGaps was last called.
	beatMu   sync.Mutex
	lastBeat time.Time
	beatGap  time.Duration
	// blind: its whole-list reads fail (an instance that does not learn
	// of a declaration for a while).
	blind atomic.Bool
	// deaf: its reads of the version item return no notice; noDeclare:
	// its declarations are refused (as if the beat had moved).
	deaf, noDeclare atomic.Bool
	// denied: the calls only the roster makes (its reads by key and its
	// declarations) are refused for want of permission, as DynamoDB
	// refuses them to a role granted the members table before the roster.
	denied atomic.Bool
}

// errDenied is DynamoDB's refusal of a call the caller's role lacks.
var errDenied = &smithy.GenericAPIError{Code: "AccessDeniedException", Message: "not authorized to perform dynamodb:BatchGetItem", Fault: smithy.FaultClient}

func newRosterWrap(s lease.Store) *rosterWrap {
	r, _ := lease.RosterOf(s)
	return &rosterWrap{Store: s, r: r.(lease.RosterNotices)}
}

func (w *rosterWrap) Heartbeat(ctx context.Context, ns string, m lease.Member) error {
	if w.off.Load() {
		return &lease.Error{Op: "heartbeat", Err: errThrottled}
	}
	w.beats.Add(1)
	sent := time.Now()
	err := w.r.Heartbeat(ctx, ns, m)
	if err == nil {
		w.beatMu.Lock()
		if !w.lastBeat.IsZero() {
			w.beatGap = max(w.beatGap, sent.Sub(w.lastBeat))
		}
		w.lastBeat = sent
		w.beatMu.Unlock()
	}
	return err
}

// beatGaps returns the longest time, since its last call, between two
// heartbeats that landed (from when each was sent), or from the last one
// to now: how long this instance's beat stood still in the store.
func (w *rosterWrap) beatGaps() time.Duration {
	w.beatMu.Lock()
	defer w.beatMu.Unlock()
	g := w.beatGap
	if !w.lastBeat.IsZero() {
		g = max(g, time.Since(w.lastBeat))
	}
	w.beatGap = 0
	return g
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
	w.bumps.Add(1)
	return w.r.BumpRoster(ctx, ns)
}

func (w *rosterWrap) MembersByOwner(ctx context.Context, ns string, owners []string) (int64, []lease.Member, error) {
	if w.denied.Load() {
		return 0, nil, &lease.Error{Op: "members", Err: errDenied}
	}
	w.byOwner.Add(1)
	return w.r.MembersByOwner(ctx, ns, owners)
}

func (w *rosterWrap) DeclareDead(ctx context.Context, ns, owner string, beat int64) error {
	if w.denied.Load() {
		return &lease.Error{Op: "declare dead", Err: errDenied}
	}
	if w.noDeclare.Load() {
		return &lease.Error{Op: "declare dead", Err: lease.ErrLeaseLost}
	}
	return w.r.DeclareDead(ctx, ns, owner, beat)
}

func (w *rosterWrap) WatchRoster(ctx context.Context, ns string, owners []string) (int64, []lease.Member, []lease.RosterNotice, error) {
	if w.denied.Load() {
		return 0, nil, nil, &lease.Error{Op: "members", Err: errDenied}
	}
	w.byOwner.Add(1)
	v, ms, notices, err := w.r.WatchRoster(ctx, ns, owners)
	if w.deaf.Load() {
		notices = nil
	}
	return v, ms, notices, err
}

func (w *rosterWrap) PostNotice(ctx context.Context, ns string, n lease.RosterNotice) error {
	w.posted.Add(1)
	return w.r.PostNotice(ctx, ns, n)
}

func (w *rosterWrap) WithdrawNotice(ctx context.Context, ns string, n lease.RosterNotice) error {
	return w.r.WithdrawNotice(ctx, ns, n)
}

var _ lease.RosterNotices = (*rosterWrap)(nil)

// oldRoster is a roster store written before notices
// (lease.RosterNotices): it exposes the methods of lease.RosterStore
// only, of w.
type oldRoster struct {
	lease.Store
	w *rosterWrap
}

func (o oldRoster) Heartbeat(ctx context.Context, ns string, m lease.Member) error {
	return o.w.Heartbeat(ctx, ns, m)
}

func (o oldRoster) Members(ctx context.Context, ns string) ([]lease.Member, error) {
	return o.w.Members(ctx, ns)
}

func (o oldRoster) Leave(ctx context.Context, ns, owner string, beat int64) error {
	return o.w.Leave(ctx, ns, owner, beat)
}

func (o oldRoster) RosterVersion(ctx context.Context, ns string) (int64, error) {
	return o.w.RosterVersion(ctx, ns)
}

func (o oldRoster) BumpRoster(ctx context.Context, ns string) (int64, error) {
	return o.w.BumpRoster(ctx, ns)
}

func (o oldRoster) MembersByOwner(ctx context.Context, ns string, owners []string) (int64, []lease.Member, error) {
	return o.w.MembersByOwner(ctx, ns, owners)
}

func (o oldRoster) DeclareDead(ctx context.Context, ns, owner string, beat int64) error {
	return o.w.DeclareDead(ctx, ns, owner, beat)
}

var _ lease.RosterStore = oldRoster{}

// noOverlap fails t when two coordinators read one shard.
func noOverlap(t *testing.T, cs map[string]*shard.Coordinator) {
	t.Helper()
	names := slices.Sorted(maps.Keys(cs))
	samples := make([][][]string, 2)
	for k := range samples {
		for _, name := range names {
			samples[k] = append(samples[k], cs[name].Reading())
		}
	}
	if x, y, id, ok := overlap(samples); ok {
		t.Fatalf("%s and %s both read %s", names[x], names[y], id)
	}
}

// overlap finds a shard read by two instances at once in two samples of
// each instance's Reading taken one after the other in a fixed order
// (samples[k][i]: instance i's k-th): between any two samples of one
// instance lies a sample of each other one. A shard in both samples of x
// and in that sample of y was read by both at once; one seen by x and
// then by y alone may have been handed over between the looks (they are
// not atomic across instances, and a loaded machine stretches the gap).
func overlap(samples [][][]string) (x, y int, id string, ok bool) {
	n := len(samples[0])
	for x := range n {
		for y := range n {
			if x == y {
				continue
			}
			between := samples[0][y] // y after x: its first sample
			if y < x {
				between = samples[1][y] // y before x: its second
			}
			for _, id := range samples[0][x] {
				if slices.Contains(samples[1][x], id) && slices.Contains(between, id) {
					return x, y, id, true
				}
			}
		}
	}
	return 0, 0, "", false
}

// The overlap check flags two readers at once, not a handoff seen half
// before and half after.
func TestOverlapNeedsAReaderOnBothSides(t *testing.T) {
	for _, tc := range []struct {
		name    string
		samples [][][]string
		want    bool
	}{
		{"both read throughout", [][][]string{{{"s"}, {"s"}}, {{"s"}, {"s"}}}, true},
		{"handed from the first to the second between the looks", [][][]string{{{"s"}, {"s"}}, {nil, {"s"}}}, false},
		{"handed from the second to the first between the looks", [][][]string{{nil, {"s"}}, {{"s"}, nil}}, false},
		{"the first in both its samples, the second between them", [][][]string{{{"s"}, {"s"}}, {{"s"}, nil}}, true},
		{"the second seen reading only after the first's last look", [][][]string{{{"s"}, nil}, {{"s"}, {"s"}}}, false},
		{"the second in both its samples, the first between them", [][][]string{{nil, {"s"}}, {{"s"}, {"s"}}}, true},
		{"one reader", [][][]string{{{"s"}, nil}, {{"s"}, nil}}, false},
	} {
		if _, _, _, got := overlap(tc.samples); got != tc.want {
			t.Errorf("%s: overlap = %v, want %v", tc.name, got, tc.want)
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
	rosterDeclaresTheDead(t, func(w *rosterWrap) lease.Store { return w })
}

// A roster store written outside this repo before the notices
// (lease.RosterNotices) still keeps the roster: the instances read
// linearly and declare the dead, as with declarations only.
func TestRosterWithoutNoticesDeclaresTheDeadAndReadsLinearly(t *testing.T) {
	rosterDeclaresTheDead(t, func(w *rosterWrap) lease.Store {
		o := oldRoster{Store: w.Store, w: w}
		if _, ok := lease.RosterOf(o); !ok {
			t.Fatal("lease.RosterOf refuses a roster store without notices")
		}
		return o
	})
}

// lateBeat is how long a beat (every 100 ms) stands still in the store
// before the roster may act on it: a watcher posts a notice when it has
// stood still for half the failover time (1 s) on its clock, the owner
// bumps coming back from its fence (0.8 s), a watcher declares it after
// the failover time.
const lateBeat = 400 * time.Millisecond

// rosterDeclaresTheDead runs TestRosterDeclaresTheDeadAndReadsLinearly's
// story over the stores store makes of each instance's wrap.
func rosterDeclaresTheDead(t *testing.T, store func(*rosterWrap) lease.Store) {
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
			cfg.Leases, cfg.Roster, cfg.RosterWhole = store(w), true, -1
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

	// At rest (every entry says what its owner reads, asks nothing, and no
	// bump for a second: the moves after old left have settled), a reads the
	// version and its successors' entries only, and nobody posts a notice,
	// while every beat lands in time. A beat that stands still for lateBeat
	// on a starved machine may be suspected, declared and bumped (the roster
	// doing its work): then whole reads are allowed, and logged.
	sum := func(f func(*rosterWrap) int64) (n int64) {
		for _, w := range wraps {
			n += f(w)
		}
		return n
	}
	bumps := func() int64 { return sum(func(w *rosterWrap) int64 { return w.bumps.Load() }) }
	beatGaps := func() map[string]time.Duration {
		gs := map[string]time.Duration{}
		for name, w := range wraps {
			gs[name] = w.beatGaps()
		}
		return gs
	}
	settled := func() bool {
		ms, err := e.store.(lease.MemberStore).Members(context.Background(), "test/"+e.stream)
		if err != nil || len(ms) != len(cs) {
			return false
		}
		for _, m := range ms {
			if c := cs[m.Owner]; c == nil || m.Held != len(c.Reading()) || len(m.Asks) != 0 || m.Starting || m.Fenced || m.Dead {
				return false
			}
		}
		return true
	}
	bumped, quiet := bumps(), time.Now()
	beatGaps()
	eventually(t, 20*time.Second, "the entries settled and no roster bump for 1 s", func() bool {
		if n := bumps(); n != bumped || !settled() {
			bumped, quiet = n, time.Now()
			beatGaps() // a late beat before the bump does not excuse a read after it
		}
		return time.Since(quiet) >= time.Second
	})
	full, byOwner := wraps["a"].full.Load(), wraps["a"].byOwner.Load()
	posted := sum(func(w *rosterWrap) int64 { return w.posted.Load() })
	time.Sleep(time.Second)
	f, b := wraps["a"].full.Load()-full, wraps["a"].byOwner.Load()-byOwner
	p, n := sum(func(w *rosterWrap) int64 { return w.posted.Load() })-posted, bumps()-bumped
	late := map[string]time.Duration{}
	for name, g := range beatGaps() {
		if g >= lateBeat {
			late[name] = g
		}
	}
	switch {
	case len(late) == 0 && (f != 0 || p != 0 || n != 0):
		t.Errorf("at rest, every beat landing within %v of the one before, in 1 s a read the whole member list %d times, %d notices were posted, the roster was bumped %d times; want none", lateBeat, f, p, n)
	case len(late) != 0:
		t.Logf("at rest, beats stood still %v (a loaded machine): in 1 s a read the whole member list %d times, %d notices were posted, %d bumps", late, f, p, n)
	}
	if b == 0 {
		t.Errorf("at rest a read its successors' entries 0 times in 1 s; want some")
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
// read the whole member list (it never learns of the declaration) nor
// hears the watchers' notices while d is cut off: d's shard is read again
// all the same, by its declarer.
func TestRosterDeclarerTakesTheDeadsLeases(t *testing.T) {
	_, cs, wraps, one := rosterFour(t)
	wraps["a"].blind.Store(true)
	wraps["a"].deaf.Store(true)
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
	wraps["a"].deaf.Store(false)
	wraps["d"].off.Store(false)
	eventually(t, 10*time.Second, "balanced again, d back", one)
}

// rosterFour starts a, b, c and d with the roster on four shards (each
// reads the watched entries only whenever it can) and waits until each
// reads one and no bump is in flight. On the ring a, b, c, d, d's watchers
// are b and c.
func rosterFour(t *testing.T) (e *env, cs map[string]*shard.Coordinator, wraps map[string]*rosterWrap, one func() bool) {
	e, _ = memEnv(t, 4)
	ids := e.shards()
	cs = map[string]*shard.Coordinator{}
	wraps = map[string]*rosterWrap{}
	for _, name := range []string{"a", "b", "c", "d"} {
		cfg := e.config(name, newCollector().sink)
		cfg.Renew, cfg.Failover = 100*time.Millisecond, time.Second
		w := newRosterWrap(e.store)
		wraps[name] = w
		cfg.Leases, cfg.Roster, cfg.RosterWhole = w, true, -1
		cs[name] = e.start(cfg)
	}
	one = func() bool {
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
	return e, cs, wraps, one
}

// notices returns the notices on the version item of e's namespace.
func notices(t *testing.T, e *env) []lease.RosterNotice {
	t.Helper()
	r, _ := lease.RosterOf(e.store)
	_, _, ns, err := r.(lease.RosterNotices).WatchRoster(context.Background(), "test/"+e.stream, nil)
	if err != nil {
		t.Fatal(err)
	}
	return ns
}

// Issue 34 item 3: a watcher's notice lets an instance that does not
// watch a dead member act on its death when it falls due, without the
// declaration. d's watchers (b and c) can declare nothing here (their
// declarations are refused), so only their notices tell a of d's death;
// the fair share gives d's shard to a (the ceiling's one extra goes to
// the first by id), which reads it again about the failover time after
// d's last beat (the test allows 5 s on a loaded machine; without notices
// a never does: nobody declares d, and a does not watch it). d back, its
// watchers withdraw their notices: none lingers.
func TestRosterNoticeLetsTheOthersActWhenADeathFallsDue(t *testing.T) {
	e, cs, wraps, one := rosterFour(t)
	for _, w := range wraps {
		w.noDeclare.Store(true)
	}
	wraps["d"].off.Store(true)
	cut := time.Now()
	dHeld := cs["d"].Reading()
	eventually(t, 5*time.Second, "d's shard read by a", func() bool {
		noOverlap(t, cs)
		return slices.Contains(cs["a"].Reading(), dHeld[0])
	})
	t.Logf("d's shard read again by a %v after d's heartbeats began to fail (failover 1s)", time.Since(cut).Round(time.Millisecond))
	if n := wraps["b"].posted.Load() + wraps["c"].posted.Load(); n == 0 {
		t.Error("d's watchers posted no notice")
	}

	wraps["d"].off.Store(false)
	eventually(t, 10*time.Second, "balanced again, d back, no notice left", func() bool {
		return one() && len(notices(t, e)) == 0
	})
}

// Issue 34 item 3: a notice whose poster is gone (it never declares nor
// withdraws), of a member whose beat moves on: the instances that read it
// read the member's entry by key when it falls due, see the beat moved
// and count it alive (it keeps its shard, read by nobody else); its
// watchers withdraw the notice within a few passes.
func TestRosterNoticeOfALiveMemberIsWithdrawn(t *testing.T) {
	e, cs, _, _ := rosterFour(t)
	ns := "test/" + e.stream
	owners := func() map[string]string {
		ls, err := e.store.List(context.Background(), ns)
		if err != nil {
			t.Fatal(err)
		}
		out := map[string]string{}
		for _, l := range ls {
			out[l.ShardID] = l.Owner
		}
		return out
	}
	before := owners()
	r, _ := lease.RosterOf(e.store)
	rn := r.(lease.RosterNotices)
	_, ms, _, err := rn.WatchRoster(context.Background(), ns, []string{"d"})
	if err != nil || len(ms) != 1 {
		t.Fatalf("d's entry: %v, %v", ms, err)
	}
	n := lease.RosterNotice{Owner: "d", By: "ghost", Beat: ms[0].Beat, Due: 300 * time.Millisecond}
	if err := rn.PostNotice(context.Background(), ns, n); err != nil {
		t.Fatal(err)
	}
	posted := time.Now()
	eventually(t, 2*time.Second, "the ghost's notice withdrawn", func() bool {
		noOverlap(t, cs)
		return len(notices(t, e)) == 0
	})
	t.Logf("withdrawn %v after it was posted (a lease pass is 250ms)", time.Since(posted).Round(time.Millisecond))
	for end := posted.Add(2 * time.Second); time.Now().Before(end); time.Sleep(50 * time.Millisecond) {
		noOverlap(t, cs)
		if now := owners(); !maps.Equal(now, before) {
			t.Fatalf("lease owners %v, want %v throughout: a live member's lease moved", now, before)
		}
	}
}

// A role whose policy predates the roster (no dynamodb:BatchGetItem or
// dynamodb:UpdateItem on the members table) must not turn the roster's
// default into an outage: Start finds the refusal before the first
// heartbeat and runs that instance without the roster (it reads the whole
// member list, as before), beside instances with it. No instance fences,
// and a crash's shards are read again within twice the failover time.
func TestRosterRefusedForWantOfPermissionIsTurnedOff(t *testing.T) {
	e, _ := memEnv(t, 6)
	ids := e.shards()
	cs := map[string]*shard.Coordinator{}
	wraps := map[string]*rosterWrap{}
	var logs syncBuffer
	var counters shard.LeaseCounters
	for _, name := range []string{"a", "b", "denied"} {
		cfg := e.config(name, newCollector().sink)
		cfg.Renew, cfg.Failover = 100*time.Millisecond, time.Second
		w := newRosterWrap(e.store)
		w.denied.Store(name == "denied")
		wraps[name] = w
		cfg.Leases, cfg.Roster, cfg.RosterWhole = w, true, -1
		if name == "denied" {
			cfg.Logger = slog.New(slog.NewTextHandler(&logs, nil))
			cfg.Counters = &counters
		}
		cs[name] = e.start(cfg)
	}
	eventually(t, 10*time.Second, "every shard read, two by each", func() bool {
		noOverlap(t, cs)
		return readingAll(cs, ids) && len(cs["denied"].Reading()) == 2
	})
	full := wraps["denied"].full.Load()
	time.Sleep(time.Second) // ten renewals
	noOverlap(t, cs)
	if lost := counters.Lost.Load(); lost != 0 || len(cs["denied"].Reading()) != 2 {
		t.Errorf("the instance refused the roster: %d leases lost, reads %v; want none lost and its two", lost, cs["denied"].Reading())
	}
	if wraps["denied"].full.Load() == full {
		t.Error("the instance refused the roster read no whole member list in 1 s: it is not reading without the roster")
	}
	if !strings.Contains(logs.String(), "members roster off") || !strings.Contains(logs.String(), "dynamodb:BatchGetItem") {
		t.Errorf("no warning that says the roster is off and which permission it needs:\n%s", logs.String())
	}
	// The instances with the roster judge the one without it as before.
	dHeld := cs["denied"].Reading()
	wraps["denied"].off.Store(true)
	cut := time.Now()
	eventually(t, 5*time.Second, "denied's shards read by the others", func() bool {
		noOverlap(t, cs)
		for _, id := range dHeld {
			if !slices.Contains(cs["a"].Reading(), id) && !slices.Contains(cs["b"].Reading(), id) {
				return false
			}
		}
		return true
	})
	if took := time.Since(cut); took > 2*time.Second {
		t.Errorf("its shards read again %v after its heartbeats failed; want within twice the failover time", took)
	}
}
