package leasetest

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/kinesisgen/kinesisgen/runtime/lease"
)

// RunRoster runs the roster subtests (lease.RosterStore) against stores
// made by newStore; the notices' (lease.RosterNotices) when the store
// implements them, else that subtest is skipped.
func RunRoster(t *testing.T, newStore func(t *testing.T) lease.RosterStore) {
	for _, tc := range []struct {
		name string
		run  func(ctx context.Context, t *testing.T, s lease.RosterStore)
	}{
		{"VersionStartsAtZeroAndBumps", testRosterVersion},
		{"MembersByOwnerReadsOnlyThose", testMembersByOwner},
		{"DeclaredDeadRefusesRosterHeartbeats", testDeclareDead},
		{"NoticesRideOnTheVersion", testNotices},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), timeout)
			defer cancel()
			tc.run(ctx, t, newStore(t))
		})
	}
}

func testRosterVersion(ctx context.Context, t *testing.T, s lease.RosterStore) {
	a, b := ns(t, "a"), ns(t, "b")
	if v, err := s.RosterVersion(ctx, a); err != nil || v != 0 {
		t.Fatalf("RosterVersion of a fresh namespace = %d, %v; want 0", v, err)
	}
	for want := int64(1); want <= 2; want++ {
		if v, err := s.BumpRoster(ctx, a); err != nil || v != want {
			t.Fatalf("BumpRoster = %d, %v; want %d", v, err, want)
		}
	}
	if v, err := s.RosterVersion(ctx, a); err != nil || v != 2 {
		t.Fatalf("RosterVersion = %d, %v; want 2", v, err)
	}
	if v, err := s.RosterVersion(ctx, b); err != nil || v != 0 {
		t.Fatalf("RosterVersion of another namespace = %d, %v; want 0", v, err)
	}
	if ls, err := s.List(ctx, a); err != nil || len(ls) != 0 {
		t.Fatalf("List = %v, %v; want the version item outside the namespace's leases", ls, err)
	}
}

func testMembersByOwner(ctx context.Context, t *testing.T, s lease.RosterStore) {
	n := ns(t, "stream")
	for i, o := range []string{"w-a", "w-b", "w-c", "w-d"} {
		beat(ctx, t, s, n, lease.Member{Owner: o, Beat: int64(i + 1), Roster: i%2 == 0})
	}
	if _, err := s.BumpRoster(ctx, n); err != nil {
		t.Fatal(err)
	}
	v, got, err := s.MembersByOwner(ctx, n, []string{"w-d", "w-a", "w-x", "w-a"})
	if err != nil {
		t.Fatal(err)
	}
	want := []lease.Member{{Owner: "w-a", Beat: 1, Roster: true}, {Owner: "w-d", Beat: 4}}
	if diff := cmp.Diff(want, got, cmpopts.EquateEmpty()); diff != "" {
		t.Fatalf("MembersByOwner (-want +got):\n%s", diff)
	}
	if v != 1 {
		t.Fatalf("MembersByOwner's version = %d; want 1", v)
	}
	if v, got, err := s.MembersByOwner(ctx, n, nil); err != nil || len(got) != 0 || v != 1 {
		t.Fatalf("MembersByOwner of nobody = %d, %v, %v; want version 1 and nobody", v, got, err)
	}
}

func testDeclareDead(ctx context.Context, t *testing.T, s lease.RosterStore) {
	n := ns(t, "stream")
	beat(ctx, t, s, n, lease.Member{Owner: "w-a", Beat: 5, Held: 2, Roster: true})
	if err := s.DeclareDead(ctx, n, "w-a", 4); !errors.Is(err, lease.ErrLeaseLost) {
		t.Fatalf("DeclareDead at a stale beat = %v; want ErrLeaseLost", err)
	}
	if err := s.DeclareDead(ctx, n, "w-z", 1); !errors.Is(err, lease.ErrLeaseLost) {
		t.Fatalf("DeclareDead of an absent entry = %v; want ErrLeaseLost", err)
	}
	if err := s.DeclareDead(ctx, n, "w-a", 5); err != nil {
		t.Fatalf("DeclareDead: %v", err)
	}
	want := []lease.Member{{Owner: "w-a", Beat: 5, Held: 2, Roster: true, Dead: true}}
	if diff := cmp.Diff(want, mustMembers(ctx, t, s, n), cmpopts.EquateEmpty()); diff != "" {
		t.Fatalf("Members after DeclareDead (-want +got):\n%s", diff)
	}
	err := s.Heartbeat(ctx, n, lease.Member{Owner: "w-a", Beat: 6, Roster: true})
	if !errors.Is(err, lease.ErrDeclaredDead) {
		t.Fatalf("roster heartbeat over a declaration = %v; want ErrDeclaredDead", err)
	}
	// Rejoin: a new entry.
	if err := s.Leave(ctx, n, "w-a", 0); err != nil {
		t.Fatal(err)
	}
	beat(ctx, t, s, n, lease.Member{Owner: "w-a", Beat: 7, Roster: true})
	want = []lease.Member{{Owner: "w-a", Beat: 7, Roster: true}}
	if diff := cmp.Diff(want, mustMembers(ctx, t, s, n), cmpopts.EquateEmpty()); diff != "" {
		t.Fatalf("Members after the rejoin (-want +got):\n%s", diff)
	}
}

// testNotices: a notice is read with the version and the watched entries
// (WatchRoster) and bumps nothing; each watcher's is its own; a second one
// of a watcher at the same or a later beat replaces it (a refresh), one at
// an earlier beat is refused; a withdrawal removes a
// watcher's notice only while it names that beat or an earlier one. Owner
// ids may hold any character.
func testNotices(ctx context.Context, t *testing.T, r lease.RosterStore) {
	s, ok := r.(lease.RosterNotices)
	if !ok {
		t.Skipf("%T keeps no notices (lease.RosterNotices)", r)
	}
	n, other := ns(t, "stream"), ns(t, "other")
	// A notice that names nobody is refused as invalid, and leaves nothing.
	if err := s.PostNotice(ctx, n, lease.RosterNotice{By: "w-b", Beat: 1}); !errors.Is(err, lease.ErrInvalid) {
		t.Fatalf("PostNotice without an owner: %v, want lease.ErrInvalid", err)
	}
	beat(ctx, t, s, n, lease.Member{Owner: "w-a", Beat: 3, Roster: true})
	if _, err := s.BumpRoster(ctx, n); err != nil {
		t.Fatal(err)
	}
	watch := func(want ...lease.RosterNotice) {
		t.Helper()
		v, ms, got, err := s.WatchRoster(ctx, n, []string{"w-a"})
		if err != nil {
			t.Fatalf("WatchRoster: %v", err)
		}
		if v != 1 || len(ms) != 1 || ms[0].Owner != "w-a" {
			t.Fatalf("WatchRoster = version %d, %v; want version 1 (a notice bumps nothing) and w-a", v, ms)
		}
		if diff := cmp.Diff(want, got, cmpopts.EquateEmpty()); diff != "" {
			t.Fatalf("WatchRoster's notices (-want +got):\n%s", diff)
		}
	}
	notice := func(o, by string, b int64, due time.Duration) lease.RosterNotice {
		return lease.RosterNotice{Owner: o, By: by, Beat: b, Due: due}
	}
	post := func(n2 lease.RosterNotice) {
		t.Helper()
		if err := s.PostNotice(ctx, n, n2); err != nil {
			t.Fatalf("PostNotice(%+v): %v", n2, err)
		}
	}
	withdraw := func(n2 lease.RosterNotice) {
		t.Helper()
		if err := s.WithdrawNotice(ctx, n, n2); err != nil {
			t.Fatalf("WithdrawNotice(%+v): %v", n2, err)
		}
	}
	const odd = `w~"b":"x"` // sorts after "w-…"
	watch()
	post(notice("w-a", "w-y", 3, 2500*time.Millisecond))
	post(notice("w-a", "w-y", 3, 900*time.Millisecond)) // the same beat: a refresh
	post(notice("w-a", "w-y", 2, time.Second))          // an earlier beat: refused
	post(notice("w-a", "w-z", 3, 1200*time.Millisecond))
	post(notice(odd, "w-z", 8, 1200*time.Millisecond))
	watch(notice("w-a", "w-y", 3, 900*time.Millisecond), notice("w-a", "w-z", 3, 1200*time.Millisecond), notice(odd, "w-z", 8, 1200*time.Millisecond))
	if _, _, got, err := s.WatchRoster(ctx, other, nil); err != nil || len(got) != 0 {
		t.Fatalf("another namespace's notices = %v, %v; want none", got, err)
	}
	withdraw(notice("w-a", "w-y", 2, 0))       // an earlier beat: stays
	withdraw(notice("w-a", "w-x", 9, 0))       // no such watcher's
	post(notice(odd, "w-z", 9, 3*time.Second)) // a later beat replaces it
	watch(notice("w-a", "w-y", 3, 900*time.Millisecond), notice("w-a", "w-z", 3, 1200*time.Millisecond), notice(odd, "w-z", 9, 3*time.Second))
	withdraw(notice("w-a", "w-y", 4, 0))
	withdraw(notice(odd, "w-z", 8, 0)) // names an earlier beat than the notice's: stays
	withdraw(notice("w-q", "w-z", 1, 0))
	watch(notice("w-a", "w-z", 3, 1200*time.Millisecond), notice(odd, "w-z", 9, 3*time.Second))
	if err := s.PostNotice(ctx, n, lease.RosterNotice{By: "w-z", Beat: 1}); err == nil {
		t.Fatal("PostNotice without an owner: no error")
	}
}
