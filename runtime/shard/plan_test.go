package shard

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/kinesis/types"
	"github.com/google/go-cmp/cmp"

	"github.com/kinesisgen/kinesisgen/runtime/lease"
)

// The pure decisions of a pass, table-driven: no store, no stream, no clock.

func TestHeldStep(t *testing.T) {
	for _, tc := range []struct {
		st         leaseState
		readerDone bool
		want       heldAction
	}{
		{stWaiting, true, heldOpen},
		{stReading, false, heldNothing},
		{stReading, true, heldNothing}, // its reader ends it (finish) or resets it
		{stSettling, true, heldNothing},
		{stCheckpointing, true, heldNothing},
		{stReleasing, true, heldNothing},
		{stEnded, false, heldNothing}, // its reader is still recording the children
		{stEnded, true, heldRelease},
		{stFenced, true, heldNothing}, // only a new take reads it again
		{stGone, true, heldNothing},
	} {
		if got := heldStep(tc.st, tc.readerDone); got != tc.want {
			t.Errorf("heldStep(%v, %v) = %v, want %v", tc.st, tc.readerDone, got, tc.want)
		}
	}
}

// Stop's two decisions: a lease whose record a handler still runs at the
// end is never released (the next owner would handle the record beside
// it), and an entry stays beating no more while such a lease is left, so
// the others wait out its failover time instead of taking it at once.
func TestStopSteps(t *testing.T) {
	if got := finalStep(false); got != finalRelease {
		t.Errorf("finalStep(no handler runs) = %v, want finalRelease", got)
	}
	if got := finalStep(true); got != finalLeaveToExpire {
		t.Errorf("finalStep(a handler runs) = %v, want finalLeaveToExpire", got)
	}
	for _, tc := range []struct {
		perInstance bool
		left        int
		want        exitAction
	}{
		{false, 0, exitNone},
		{false, 2, exitNone}, // per lease: the leases expire by their counters
		{true, 0, exitRemove},
		{true, 1, exitLastBeat},
	} {
		if got := exitStep(tc.perInstance, tc.left); got != tc.want {
			t.Errorf("exitStep(%v, %d) = %v, want %v", tc.perInstance, tc.left, got, tc.want)
		}
	}
}

func TestDeletable(t *testing.T) {
	lin, err := NewLineage([]types.Shard{shardOf("listed", "", "", "0", maxKey, false)})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		l    lease.Lease
		want bool
	}{
		{"ended, released, unlisted", lease.Lease{ShardID: "old", Checkpoint: lease.CheckpointShardEnd}, true},
		{"ended, released, listed", lease.Lease{ShardID: "listed", Checkpoint: lease.CheckpointShardEnd}, false},
		{"ended, held", lease.Lease{ShardID: "old", Checkpoint: lease.CheckpointShardEnd, Owner: "a"}, false},
		{"not ended", lease.Lease{ShardID: "old", Checkpoint: "123"}, false},
	} {
		if got := deletable(tc.l, lin); got != tc.want {
			t.Errorf("%s: deletable = %v, want %v", tc.name, got, tc.want)
		}
	}
}

func TestLeftover(t *testing.T) {
	held := map[string]bool{"h": true}
	planned := map[string]bool{"p": true}
	for _, tc := range []struct {
		name string
		l    lease.Lease
		want bool
	}{
		{"mine, neither held nor planned", lease.Lease{Key: "x", Owner: "me"}, true},
		{"mine, held", lease.Lease{Key: "h", Owner: "me"}, false},
		{"mine, planned", lease.Lease{Key: "p", Owner: "me"}, false},
		{"another's", lease.Lease{Key: "x", Owner: "b"}, false},
		{"a KCL worker's of the same name", lease.Lease{Key: "x", Owner: "me", ForeignOwner: true}, false},
	} {
		if got := leftover("me", tc.l, held, planned); got != tc.want {
			t.Errorf("%s: leftover = %v, want %v", tc.name, got, tc.want)
		}
	}
}

func TestFollowStep(t *testing.T) {
	for _, tc := range []struct {
		name string
		l    lease.Lease
		dead bool
		want followAction
	}{
		{"taken by me", lease.Lease{Owner: "me"}, false, followDrop},
		{"ended", lease.Lease{Owner: "b", PendingOwner: "me", Checkpoint: lease.CheckpointShardEnd}, false, followDrop},
		{"a KCL worker took it", lease.Lease{Owner: "k", ForeignOwner: true}, false, followDrop},
		{"owner died mid-handoff", lease.Lease{Owner: "b", PendingOwner: "me"}, true, followTakeDead},
		{"released to me", lease.Lease{PendingOwner: "me"}, false, followTake},
		{"released, nobody asked since", lease.Lease{}, false, followTake},
		{"live owner handing over", lease.Lease{Owner: "b", PendingOwner: "me"}, false, followWait},
		{"someone else asked since", lease.Lease{Owner: "b", PendingOwner: "c"}, true, followDrop},
		{"owner kept it", lease.Lease{Owner: "b"}, false, followDrop},
		// Taken back by its owner after its fence (Take clears the
		// request): dropped, even on a view older than the take that
		// still judges the owner dead.
		{"owner took it back, judged on an older view", lease.Lease{Owner: "b"}, true, followDrop},
	} {
		asked := false
		got := followStep("me", tc.l, func() bool { asked = true; return tc.dead })
		if got != tc.want {
			t.Errorf("%s: followStep = %v, want %v", tc.name, got, tc.want)
		}
		if asked && (tc.l.PendingOwner != "me" || tc.l.Owner == "") {
			t.Errorf("%s: asked whether the owner is dead, which does not decide it", tc.name)
		}
	}
}

func TestBelowShare(t *testing.T) {
	known := func(n int) map[string]lease.Lease {
		m := map[string]lease.Lease{}
		for i := range n {
			id := string(rune('a' + i))
			m[id] = lease.Lease{ShardID: id, Owner: "x"}
		}
		m["ended"] = lease.Lease{ShardID: "ended", Checkpoint: lease.CheckpointShardEnd} // not counted
		return m
	}
	view := func(held map[string]int, dead ...string) memberView {
		v := memberView{all: map[string]lease.Member{}, live: map[string]bool{}}
		for o, h := range held {
			v.all[o] = lease.Member{Held: h}
			v.live[o] = true
		}
		for _, o := range dead {
			v.live[o] = false
		}
		return v
	}
	for _, tc := range []struct {
		name  string
		held  int
		view  memberView
		known map[string]lease.Lease
		want  bool
	}{
		{"a joiner", 0, view(map[string]int{"b": 4}), known(4), true},
		{"at its share", 2, view(map[string]int{"b": 2}), known(4), false},
		{"above its share", 3, view(map[string]int{"b": 1}), known(4), false},
		{"a survivor of a dead owner", 2, view(map[string]int{"b": 2, "c": 2}, "c"), known(6), true},
		{"alone with all", 4, view(nil), known(4), false},
		// A leaving member (lease.Member.Leaving) has no share; the
		// leases it still holds are no one else's to share either.
		{"beside a leaving owner that released some", 2, leavingView(view(map[string]int{"b": 1}), "b"), known(4), true},
		{"with all but a leaving owner's", 3, leavingView(view(map[string]int{"b": 1}), "b"), known(4), false},
	} {
		if got := belowShare("me", tc.held, tc.view, tc.known); got != tc.want {
			t.Errorf("%s: belowShare = %v, want %v", tc.name, got, tc.want)
		}
	}
}

func TestPace(t *testing.T) {
	for _, tc := range []struct {
		name    string
		full    bool
		n       int
		behind  int64
		closed  bool
		canWait bool
		woken   bool
		want    pacing
		wokenTo bool
	}{
		{"full read", true, 10, 0, false, true, true, paceAgain, false},
		{"catching up", false, 3, 500, true, true, true, paceShardRate, false},
		{"draining a closed shard", false, 0, 0, true, true, true, paceDrain, true},
		{"draining, not woken", false, 0, 0, true, true, false, paceDrain, false},
		{"at the tip, a waiter", false, 2, 0, false, true, false, paceWaiter, true},
		{"woken to an empty read", false, 0, 0, false, true, true, pacePoll, false},
		{"woken to records", false, 1, 0, false, true, true, paceWaiter, true},
		{"no waiter", false, 0, 0, false, false, false, pacePoll, false},
	} {
		asked := false
		got := pace(tc.full, tc.n, tc.behind, func() bool { asked = true; return tc.closed }, tc.canWait, tc.woken)
		if got != tc.want {
			t.Errorf("%s: pace = %v, want %v", tc.name, got, tc.want)
		}
		if w := got.woken(tc.woken); w != tc.wokenTo {
			t.Errorf("%s: woken after = %v, want %v", tc.name, w, tc.wokenTo)
		}
		if asked && (tc.full || tc.n > 0 && tc.behind > 0) {
			t.Errorf("%s: asked whether the shard is closed, which does not decide it", tc.name)
		}
	}
}

func TestHandoffStep(t *testing.T) {
	for _, tc := range []struct {
		name          string
		handing, gone bool
		stuck         bool
		want          handoffAction
	}{
		{"reading, nothing stuck", false, false, false, handoffDrain},
		{"the last handoff's record still first", false, false, true, handoffPostpone},
		{"a handoff under way", true, false, true, handoffIgnore},
		{"gone", false, true, false, handoffIgnore},
	} {
		asked := false
		got := handoffStep(tc.handing, tc.gone, func() bool { asked = true; return tc.stuck })
		if got != tc.want {
			t.Errorf("%s: handoffStep = %v, want %v", tc.name, got, tc.want)
		}
		if asked && (tc.handing || tc.gone) {
			t.Errorf("%s: asked whether a record is stuck of a lease that ignores the request", tc.name)
		}
	}
}

func TestDrainedStep(t *testing.T) {
	for _, tc := range []struct {
		settled, ending bool
		want            drainedAction
	}{
		{true, false, drainedRelease},
		{false, false, drainedPostpone}, // never cut short
		{false, true, drainedStop},      // Stop's final writes release it, or leave it to expire
		{true, true, drainedRelease},
	} {
		if got := drainedStep(tc.settled, tc.ending); got != tc.want {
			t.Errorf("drainedStep(settled %v, ending %v) = %v, want %v", tc.settled, tc.ending, got, tc.want)
		}
	}
}

func TestAskedOfMe(t *testing.T) {
	for _, tc := range []struct {
		l    lease.Lease
		want bool
	}{
		{lease.Lease{Owner: "a", PendingOwner: "b"}, true},
		{lease.Lease{Owner: "a"}, false},
		{lease.Lease{Owner: "a", PendingOwner: "a"}, false}, // its own request, taken back
		{lease.Lease{Owner: "b", PendingOwner: "c"}, false},
	} {
		if got := askedOfMe("a", tc.l); got != tc.want {
			t.Errorf("askedOfMe(a, %+v) = %v, want %v", tc.l, got, tc.want)
		}
	}
}

func TestNeedsCompat(t *testing.T) {
	view := memberView{all: map[string]lease.Member{"a": {}, "b": {}}, live: map[string]bool{"a": true, "b": true}}
	for _, tc := range []struct {
		name   string
		leases []lease.Lease
		stale  bool
		want   bool
	}{
		{"members only", []lease.Lease{{Key: "1", Owner: "a"}, {Key: "2", Owner: "b", PendingOwner: "a"}}, false, false},
		{"free leases", []lease.Lease{{Key: "1"}}, false, false},
		{"a non-member renewing a lease", []lease.Lease{{Key: "1", Owner: "kcl"}}, false, true},
		{"a non-member's lease standing still", []lease.Lease{{Key: "1", Owner: "kcl"}}, true, false},
		{"a non-member asking", []lease.Lease{{Key: "1", Owner: "b", PendingOwner: "kcl"}}, false, true},
		{"this owner without an entry yet", []lease.Lease{{Key: "1", Owner: "me", PendingOwner: "me"}}, false, false},
	} {
		got := needsCompat("me", tc.leases, view, func(lease.Lease) bool { return tc.stale })
		if got != tc.want {
			t.Errorf("%s: needsCompat = %v, want %v", tc.name, got, tc.want)
		}
	}
}

func TestNextBeat(t *testing.T) {
	const s = time.Second
	p := beatPacing{every: 3 * s, renew: 3 * s, call: s}
	for _, tc := range []struct {
		name              string
		failed            bool
		retry, took, left time.Duration
		next, nextRetry   time.Duration
	}{
		{"landed: every from its send", false, 0, 800 * time.Millisecond, 8 * s, 2200 * time.Millisecond, 0},
		{"landed slowly: at once", false, 0, 4 * s, 8 * s, 0, 0},
		{"first failure: a quarter of Renew", true, 0, s, 8 * s, 750 * time.Millisecond, 750 * time.Millisecond},
		{"second failure: doubled", true, 750 * time.Millisecond, s, 8 * s, 1500 * time.Millisecond, 1500 * time.Millisecond},
		{"backoff capped at Renew", true, 2 * s, s, 8 * s, 3 * s, 3 * s},
		{"a success resets the backoff", false, 2 * s, 0, 8 * s, 3 * s, 0},
		{"confirmed a call's deadline before the fence", false, 0, 0, 2500 * time.Millisecond, 1500 * time.Millisecond, 0},
		{"close to the fence: a tenth of Renew at least", true, 2 * s, 0, 1100 * time.Millisecond, 300 * time.Millisecond, 3 * s},
		{"past the fence: the backoff stands", true, 2 * s, 0, -s, 3 * s, 3 * s},
	} {
		next, retry := nextBeat(p, tc.failed, tc.retry, tc.took, tc.left)
		if next != tc.next || retry != tc.nextRetry {
			t.Errorf("%s: nextBeat = %v, retry %v; want %v, retry %v", tc.name, next, retry, tc.next, tc.nextRetry)
		}
	}
}

func TestOwnerStopped(t *testing.T) {
	view := memberView{all: map[string]lease.Member{"live": {}, "dead": {}}, live: map[string]bool{"live": true}}
	for _, tc := range []struct {
		name    string
		l       lease.Lease
		members bool
		stale   bool
		want    bool
	}{
		{"a live member's lease, counter still", lease.Lease{Owner: "live"}, true, true, false},
		{"a dead member's lease, counter moving", lease.Lease{Owner: "dead"}, true, false, true},
		{"a non-member's lease, counter still", lease.Lease{Owner: "kcl"}, true, true, true},
		{"a non-member's lease, counter moving", lease.Lease{Owner: "kcl"}, true, false, false},
		{"released, reserved for a live member, still", lease.Lease{PendingOwner: "live"}, true, true, true},
		{"released, reserved for a dead member", lease.Lease{PendingOwner: "dead"}, true, false, true},
		{"without members: the counter alone", lease.Lease{Owner: "live"}, false, true, true},
		{"without members, counter moving", lease.Lease{Owner: "dead"}, false, false, false},
	} {
		if got := ownerStopped(tc.l, tc.members, view, func() bool { return tc.stale }); got != tc.want {
			t.Errorf("%s: ownerStopped = %v, want %v", tc.name, got, tc.want)
		}
	}
}

func TestRenewedRecently(t *testing.T) {
	const s = time.Second
	for _, tc := range []struct {
		name                           string
		since, every, call, fenceAfter time.Duration
		want                           bool
	}{
		{"a checkpoint just renewed it", 100 * time.Millisecond, 3 * s, s, 8 * s, true},
		{"written half an interval ago", 1500 * time.Millisecond, 3 * s, s, 8 * s, false},
		{"no room before the fence to skip", 100 * time.Millisecond, 3 * s, 3 * s, 7 * s, false},
	} {
		if got := renewedRecently(tc.since, tc.every, tc.call, tc.fenceAfter); got != tc.want {
			t.Errorf("%s: renewedRecently = %v, want %v", tc.name, got, tc.want)
		}
	}
}

// viewBehind: a dead member's lease is judged by the view only when the
// listing that first showed its counter came before the view was sent; a
// member back from its fence takes its leases back at once, and a view
// sent before its new beat landed still says it is dead.
func TestViewBehind(t *testing.T) {
	t0 := time.Unix(1000, 0)
	view := memberView{all: map[string]lease.Member{"me": {}, "live": {}, "dead": {}}, live: map[string]bool{"me": true, "live": true}, sent: t0}
	dead := lease.Lease{Key: "ns/s1", ShardID: "s1", Owner: "dead", Counter: 5}
	obs := newObserver()
	obs.observe([]lease.Lease{dead}, t0.Add(-time.Second))
	for _, tc := range []struct {
		name string
		l    lease.Lease
		want bool
	}{
		{"a dead member's lease seen before the view", dead, false},
		{"written since (taken back)", lease.Lease{Key: "ns/s1", ShardID: "s1", Owner: "dead", Counter: 6}, true},
		{"never seen", lease.Lease{Key: "ns/s2", ShardID: "s2", Owner: "dead", Counter: 1}, true},
		{"a live member's lease", lease.Lease{Key: "ns/s3", ShardID: "s3", Owner: "live", Counter: 1}, false},
		{"one of mine", lease.Lease{Key: "ns/s4", ShardID: "s4", Owner: "me", Counter: 1}, false},
		{"an owner without an entry (judged by its counter)", lease.Lease{Key: "ns/s5", ShardID: "s5", Owner: "kcl", Counter: 1}, false},
		{"finished", lease.Lease{Key: "ns/s6", ShardID: "s6", Owner: "dead", Counter: 9, Checkpoint: lease.CheckpointShardEnd}, false},
	} {
		if got := viewBehind("me", []lease.Lease{tc.l}, view, obs); got != tc.want {
			t.Errorf("%s: viewBehind = %v; want %v", tc.name, got, tc.want)
		}
	}
	late := newObserver()
	late.observe([]lease.Lease{dead}, t0.Add(time.Millisecond))
	if !viewBehind("me", []lease.Lease{dead}, view, late) {
		t.Errorf("a counter first seen after the view was sent: viewBehind = false; want true")
	}
}

// leavingView marks the members owners of v as leaving.
func leavingView(v memberView, owners ...string) memberView {
	for _, o := range owners {
		m := v.all[o]
		m.Leaving = true
		v.all[o] = m
	}
	return v
}

// fencedView marks owners of v fenced (lease.Member.Fenced).
func fencedView(v memberView, owners ...string) memberView {
	for _, o := range owners {
		m := v.all[o]
		m.Fenced = true
		v.all[o] = m
	}
	return v
}

// The plans see no lease of a live leaving member and no request of one;
// a dead one's leases are expired as ever.
func TestWithoutLeaving(t *testing.T) {
	v := leavingView(memberView{all: map[string]lease.Member{"me": {}, "b": {}, "c": {}, "d": {}}, live: map[string]bool{"me": true, "b": true, "c": true}}, "b", "d")
	leases := []lease.Lease{
		{ShardID: "s1", Owner: "b"},                     // the leaver's: left out
		{ShardID: "s2", PendingOwner: "b"},              // released to the leaver: free
		{ShardID: "s3", Owner: "c", PendingOwner: "b"},  // asked for by the leaver: c's
		{ShardID: "s4", Owner: "c"},                     // a live member's
		{ShardID: "s5", Owner: "d"},                     // a dead leaver's: expired, as any dead member's
		{ShardID: "s6", Owner: "me", PendingOwner: "c"}, // asked for by a live member
	}
	want := []lease.Lease{{ShardID: "s2"}, {ShardID: "s3", Owner: "c"}, {ShardID: "s4", Owner: "c"}, {ShardID: "s5", Owner: "d"}, {ShardID: "s6", Owner: "me", PendingOwner: "c"}}
	if diff := cmp.Diff(want, withoutLeaving(leases, v)); diff != "" {
		t.Errorf("withoutLeaving (-want +got):\n%s", diff)
	}
	if got := v.planOwners(); !slices.Equal(got, []string{"c", "me"}) {
		t.Errorf("planOwners = %v; want [c me]", got)
	}
	none := memberView{all: map[string]lease.Member{"b": {}}, live: map[string]bool{"b": true}}
	if got := withoutLeaving(leases, none); len(got) != len(leases) {
		t.Errorf("withoutLeaving with nobody leaving dropped leases: %v", got)
	}
}

// effectsOf is what a test compares of balanceEffects: shard ids.
type effectsOf struct {
	Expired, Take, Spare, Ask, Adopt, Release, Drop []string
	Target                                          int
	Compat                                          bool
}

func summarize(e balanceEffects) effectsOf {
	ids := func(ls []lease.Lease) []string {
		var out []string
		for _, l := range ls {
			out = append(out, l.ShardID)
		}
		return out
	}
	s := effectsOf{Take: ids(e.take), Spare: ids(e.spare), Ask: ids(e.ask), Adopt: ids(e.adopt), Release: ids(e.release), Target: e.target, Compat: e.compat}
	for _, l := range e.status {
		if l.expired {
			s.Expired = append(s.Expired, l.l.ShardID)
		}
	}
	for _, m := range e.drop {
		s.Drop = append(s.Drop, m.Owner)
	}
	return s
}

// balance's decision on an observed view, without a store or a clock:
// which leases the pass takes (and tries instead of one lost), asks for,
// answers, releases, which entries it removes, and when it renews every
// lease. A lease in old was first seen a failover (10 s) before the
// listing returned; the others when it did.
func TestPlanBalanceEffects(t *testing.T) {
	t0 := time.Unix(1000, 0)
	const failover = 10 * time.Second
	ls := func(specs ...string) []lease.Lease { // "id:owner[:pending]"
		var out []lease.Lease
		for _, s := range specs {
			f := strings.Split(s+"::", ":")
			out = append(out, lease.Lease{Key: "ns/" + f[0], ShardID: f[0], Owner: f[1], PendingOwner: f[2], Counter: 1})
		}
		return out
	}
	view := func(live []string, dead ...string) memberView {
		v := memberView{all: map[string]lease.Member{}, live: map[string]bool{}, sent: t0}
		for _, o := range live {
			v.all[o], v.live[o] = lease.Member{Owner: o, Beat: 1}, true
		}
		for _, o := range dead {
			v.all[o] = lease.Member{Owner: o, Beat: 7}
		}
		return v
	}
	for _, tc := range []struct {
		name     string
		mode     Balance
		members  bool
		leases   []lease.Lease
		view     memberView
		held     []string
		old      []string
		asOf     time.Duration // before the listing returned
		reserve  map[string]string
		declared map[string]int64
		joined   []string // members first seen here half a failover before the listing
		want     effectsOf
	}{
		{
			name:   "per lease: free and stale leases taken, the one meant for another spare, one left in my name released",
			leases: ls("s1", "s2:b", "s3:c", "s4:c", "s5:me"), old: []string{"s2"},
			want: effectsOf{Expired: []string{"s2"}, Take: []string{"s2", "s5"}, Spare: []string{"s1"}, Release: []string{"s5"}, Target: 2},
		},
		{
			name:   "per lease: the age is judged when the listing was sent",
			leases: ls("s1:b"), old: []string{"s1"}, asOf: time.Second,
			want: effectsOf{},
		},
		{
			name: "per lease, one steal: the most loaded owner is asked for one lease", mode: BalanceOneSteal,
			leases: ls("s1:b", "s2:b", "s3:b", "s4:b"),
			want:   effectsOf{Ask: []string{"s1"}, Target: 2},
		},
		{
			name: "members: a joiner asks for its whole share", members: true,
			leases: ls("s1:b", "s2:b", "s3:b", "s4:b"), view: view([]string{"me", "b"}),
			want: effectsOf{Ask: []string{"s1", "s2"}, Target: 2},
		},
		{
			name: "members: a dead member's lease taken; a dead member holding none dropped; a live asker answered, a leaving one not", members: true,
			leases: ls("s1:b", "s2:d", "s3:me:b", "s4:me:l", "s5:l"), held: []string{"s3", "s4"},
			view: leavingView(view([]string{"me", "b", "l"}, "d", "e"), "l"),
			want: effectsOf{Expired: []string{"s2"}, Take: []string{"s2"}, Adopt: []string{"s3"}, Drop: []string{"e"}, Target: 2},
		},
		{
			name: "members: an owner without an entry renewing its lease: renew every lease too", members: true,
			leases: ls("s1:kcl", "s2:b"), view: view([]string{"me", "b"}),
			want: effectsOf{Compat: true},
		},
		{
			name: "members: an owner without an entry that stopped: its lease taken", members: true,
			leases: ls("s1:kcl", "s2:b"), view: view([]string{"me", "b"}), old: []string{"s1"},
			want: effectsOf{Expired: []string{"s1"}, Take: []string{"s1"}, Target: 1},
		},
		{
			name: "members: a dead member's free leases go by the plan", members: true,
			leases: ls("s1:d", "s2:d", "s3:d", "s4:b", "s5:b", "s6:c", "s7:c"), view: view([]string{"me", "b", "c"}, "d"),
			want: effectsOf{Expired: []string{"s1", "s2", "s3"}, Take: []string{"s2", "s3"}, Spare: []string{"s1"}, Target: 2},
		},
		{
			name: "members: declared dead here: its free leases taken up to the ceiling", members: true,
			leases: ls("s1:d", "s2:d", "s3:d", "s4:b", "s5:b", "s6:c", "s7:c"), view: view([]string{"me", "b", "c"}, "d"),
			declared: map[string]int64{"d": 7},
			want:     effectsOf{Expired: []string{"s1", "s2", "s3"}, Take: []string{"s2", "s3", "s1"}, Target: 2},
		},
		{
			// Issue 29, dst mix churn seed 1796567417450576642: the
			// joiner j, below its share, first saw d's entry when it
			// joined and cannot judge d dead for half a failover more.
			name: "members: a dead member's lease not left to a joiner that cannot judge it dead yet", members: true,
			leases: ls("s1:d", "s2:me"), held: []string{"s2"}, view: view([]string{"me", "j"}, "d"), joined: []string{"j"},
			want: effectsOf{Expired: []string{"s1"}, Take: []string{"s1"}, Target: 1},
		},
		{
			name: "members: a dead member's lease left to a member that can judge it dead, below its share", members: true,
			leases: ls("s1:d", "s2:me"), held: []string{"s2"}, view: view([]string{"me", "j"}, "d"),
			want: effectsOf{Expired: []string{"s1"}, Spare: []string{"s1"}, Target: 1},
		},
		{
			name: "members: a fenced member's lease left to a joiner: it reads the flag at once", members: true,
			leases: ls("s1:d", "s2:me"), held: []string{"s2"}, view: fencedView(view([]string{"me", "j"}, "d"), "d"), joined: []string{"j"},
			want: effectsOf{Expired: []string{"s1"}, Spare: []string{"s1"}, Target: 1},
		},
		{
			// j takes the free s1; s2 goes to me, below my share; s3,
			// which j would have had, to the least loaded member that
			// can judge d dead (b, by id among b, c and me).
			name: "members: a joiner takes a free lease, the others a dead member's, beyond their share if need be", members: true,
			leases: ls("s1", "s2:d", "s3:d", "s4:me", "s5:c", "s6:b", "s7:c", "s8:b"), held: []string{"s4"},
			view: view([]string{"me", "b", "c", "j"}, "d"), joined: []string{"j"},
			want: effectsOf{Expired: []string{"s2", "s3"}, Take: []string{"s2"}, Spare: []string{"s1", "s3"}, Target: 2},
		},
		{
			name: "members: a fleet's start takes what it reserves for me", members: true,
			leases: ls("s1", "s2"), view: view([]string{"me", "b"}), reserve: map[string]string{"s1": "b", "s2": "me"},
			want: effectsOf{Take: []string{"s2"}, Target: 1},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			now := t0.Add(2 * failover)
			obs := newObserver()
			var old []lease.Lease
			for _, l := range tc.leases {
				if slices.Contains(tc.old, l.ShardID) {
					old = append(old, l)
				}
			}
			obs.observe(old, now.Add(-failover))
			obs.observe(tc.leases, now)
			held := map[string]bool{}
			for _, id := range tc.held {
				held["ns/"+id] = true
			}
			v := tc.view
			if v.all == nil {
				v = memberView{all: map[string]lease.Member{}, live: map[string]bool{}}
			}
			if tc.joined != nil {
				v.first = map[string]time.Time{}
				for _, o := range tc.joined {
					v.first[o] = now.Add(-failover / 2)
				}
			}
			e := planBalanceEffects(balanceView{
				me: "me", namespace: "ns", mode: tc.mode, members: tc.members, failover: failover,
				leases: tc.leases, view: v, held: held, reserve: tc.reserve, declared: tc.declared,
				now: now, asOf: now.Add(-tc.asOf), obs: obs, overdue: failover / 2,
			})
			if diff := cmp.Diff(tc.want, summarize(e)); diff != "" {
				t.Errorf("planBalanceEffects (-want +got):\n%s", diff)
			}
		})
	}
}

// A take another instance won is replaced by the next spare, unless the
// lease was handed to this owner (released to it after it asked).
func TestNextSpare(t *testing.T) {
	spare := []lease.Lease{{ShardID: "s2"}, {ShardID: "s3"}}
	if next, rest, ok := nextSpare("me", lease.Lease{ShardID: "s1"}, spare); !ok || next.ShardID != "s2" || len(rest) != 1 {
		t.Errorf("nextSpare after a lost free lease = %v, %v, %v; want s2, [s3], true", next.ShardID, rest, ok)
	}
	if _, rest, ok := nextSpare("me", lease.Lease{ShardID: "s1", PendingOwner: "me"}, spare); ok || len(rest) != 2 {
		t.Errorf("nextSpare after a lost lease handed to me = %v, %v; want none", rest, ok)
	}
	if _, _, ok := nextSpare("me", lease.Lease{ShardID: "s1"}, nil); ok {
		t.Error("nextSpare without spares found one")
	}
}

// A lease left in this owner's name that it does not hold is taken back,
// or released to a live member that asked for it.
func TestTakeBackStep(t *testing.T) {
	v := memberView{all: map[string]lease.Member{"me": {}, "b": {}, "d": {}}, live: map[string]bool{"me": true, "b": true}}
	held := map[string]bool{"held": true}
	for _, tc := range []struct {
		name string
		l    lease.Lease
		want takeBackAction
	}{
		{"another's", lease.Lease{Key: "x", Owner: "b"}, leftAlone},
		{"mine, held", lease.Lease{Key: "held", Owner: "me"}, leftAlone},
		{"mine, ended", lease.Lease{Key: "x", Owner: "me", Checkpoint: lease.CheckpointShardEnd}, leftAlone},
		{"mine, not held", lease.Lease{Key: "x", Owner: "me"}, takeItBack},
		{"mine, asked for by a live member", lease.Lease{Key: "x", Owner: "me", PendingOwner: "b"}, releaseToAsker},
		{"mine, asked for by a dead member", lease.Lease{Key: "x", Owner: "me", PendingOwner: "d"}, takeItBack},
		{"mine, asked for by me", lease.Lease{Key: "x", Owner: "me", PendingOwner: "me"}, takeItBack},
	} {
		if got := takeBackStep("me", tc.l, held, v); got != tc.want {
			t.Errorf("%s: takeBackStep = %v, want %v", tc.name, got, tc.want)
		}
	}
}

func TestTakeOverdue(t *testing.T) {
	const grace = 3 * time.Second
	t0 := time.Unix(1000, 0)
	free := lease.Lease{Key: "k/1", ShardID: "1", Counter: 4}
	dead := lease.Lease{Key: "k/2", ShardID: "2", Counter: 9, Owner: "x"}
	keys := func(ls []lease.Lease) []string {
		var out []string
		for _, l := range ls {
			out = append(out, l.ShardID)
		}
		return out
	}
	var since map[string]observation
	step := func(now time.Time, spare ...lease.Lease) (take, left []string) {
		plan := balance{spare: spare}
		since = takeOverdue(&plan, since, now, grace)
		return keys(plan.take), keys(plan.spare)
	}
	check := func(what string, take, left, wantTake, wantLeft []string) {
		t.Helper()
		if !slices.Equal(take, wantTake) || !slices.Equal(left, wantLeft) {
			t.Errorf("%s: take %v, spare %v; want take %v, spare %v", what, take, left, wantTake, wantLeft)
		}
	}
	take, left := step(t0, free, dead)
	check("first seen free", take, left, nil, []string{"1", "2"})
	take, left = step(t0.Add(grace-time.Millisecond), free, dead)
	check("within the grace", take, left, nil, []string{"1", "2"})
	moved := free
	moved.Counter++ // written meanwhile (taken and released again): its grace starts anew
	take, left = step(t0.Add(grace), moved, dead)
	check("at the grace", take, left, []string{"2"}, []string{"1"})
	take, left = step(t0.Add(2*grace), moved)
	check("the rewritten one past its grace", take, left, []string{"1"}, nil)
	if _, ok := since[dead.Key]; ok {
		t.Errorf("a lease no longer planned free is still remembered: %v", since)
	}
}
