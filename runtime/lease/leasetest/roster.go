package leasetest

import (
	"context"
	"errors"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/kinesisgen/kinesisgen/runtime/lease"
)

// RunRoster runs the roster subtests (lease.RosterStore) against stores
// made by newStore.
func RunRoster(t *testing.T, newStore func(t *testing.T) lease.RosterStore) {
	for _, tc := range []struct {
		name string
		run  func(ctx context.Context, t *testing.T, s lease.RosterStore)
	}{
		{"VersionStartsAtZeroAndBumps", testRosterVersion},
		{"MembersByOwnerReadsOnlyThose", testMembersByOwner},
		{"DeclaredDeadRefusesRosterHeartbeats", testDeclareDead},
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
