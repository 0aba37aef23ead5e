package leasetest

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/kinesisgen/kinesisgen/runtime/lease"
)

// RunMembers runs the member subtests (lease.MemberStore) against stores
// made by newStore: one liveness entry per instance and namespace, read all
// at once, each instance writing only its own.
func RunMembers(t *testing.T, newStore func(t *testing.T) lease.MemberStore) {
	for _, tc := range memberCases {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), timeout)
			defer cancel()
			tc.run(ctx, t, newStore(t))
		})
	}
}

var memberCases = []struct {
	name string
	run  func(ctx context.Context, t *testing.T, s lease.MemberStore)
}{
	{"NoMembersIsEmpty", testNoMembers},
	{"HeartbeatsReadBackSortedAndScoped", testHeartbeatsScoped},
	{"HeartbeatReplacesTheEntry", testHeartbeatReplaces},
	{"FencedIsKeptAndCleared", testFenced},
	{"LeavingIsKept", testLeaving},
	{"LeaveRemovesOnlyThatEntry", testLeave},
	{"LeaveOfADeadEntryIsConditionalOnItsBeat", testLeaveStaleBeat},
	{"ConcurrentHeartbeatsOfManyOwnersAllLand", testConcurrentHeartbeats},
	{"MembersAreOutsideTheNamespaceList", testMembersNotListed},
}

func mustMembers(ctx context.Context, t *testing.T, s lease.MemberStore, namespace string) []lease.Member {
	t.Helper()
	ms, err := s.Members(ctx, namespace)
	if err != nil {
		t.Fatalf("Members(%s): %v", namespace, err)
	}
	return ms
}

func beat(ctx context.Context, t *testing.T, s lease.MemberStore, namespace string, m lease.Member) {
	t.Helper()
	if err := s.Heartbeat(ctx, namespace, m); err != nil {
		t.Fatalf("Heartbeat(%s, %s): %v", namespace, m.Owner, err)
	}
}

func testNoMembers(ctx context.Context, t *testing.T, s lease.MemberStore) {
	if ms := mustMembers(ctx, t, s, ns(t, "stream")); len(ms) != 0 {
		t.Fatalf("Members of a fresh namespace = %v; want none", ms)
	}
}

func testHeartbeatsScoped(ctx context.Context, t *testing.T, s lease.MemberStore) {
	base := ns(t, "")
	a, b := base+"app/orders", base+"app/orders-v2"
	beat(ctx, t, s, a, lease.Member{Owner: "worker-b", Beat: 7, Held: 3})
	beat(ctx, t, s, a, lease.Member{Owner: "worker-a", Beat: 1, Held: 2, Asks: []string{"shard-9", "shard-1", "shard-9"}, Starting: true})
	beat(ctx, t, s, b, lease.Member{Owner: "worker-c", Beat: 5})
	want := []lease.Member{
		{Owner: "worker-a", Beat: 1, Held: 2, Asks: []string{"shard-1", "shard-9"}, Starting: true},
		{Owner: "worker-b", Beat: 7, Held: 3},
	}
	if diff := cmp.Diff(want, mustMembers(ctx, t, s, a), cmpopts.EquateEmpty()); diff != "" {
		t.Fatalf("Members(%s) (-want +got):\n%s", a, diff)
	}
	if diff := cmp.Diff([]lease.Member{{Owner: "worker-c", Beat: 5}}, mustMembers(ctx, t, s, b), cmpopts.EquateEmpty()); diff != "" {
		t.Fatalf("Members(%s) (-want +got):\n%s", b, diff)
	}
}

func testHeartbeatReplaces(ctx context.Context, t *testing.T, s lease.MemberStore) {
	n := ns(t, "stream")
	beat(ctx, t, s, n, lease.Member{Owner: "worker-a", Beat: 1, Held: 2, Asks: []string{"shard-1"}, Starting: true})
	beat(ctx, t, s, n, lease.Member{Owner: "worker-a", Beat: 2, Held: 3})
	want := []lease.Member{{Owner: "worker-a", Beat: 2, Held: 3}}
	if diff := cmp.Diff(want, mustMembers(ctx, t, s, n), cmpopts.EquateEmpty()); diff != "" {
		t.Fatalf("Members after a second heartbeat (-want +got):\n%s", diff)
	}
}

// A fenced member's entry says so until a heartbeat without it (a new beat)
// replaces it (lease.Member.Fenced).
func testFenced(ctx context.Context, t *testing.T, s lease.MemberStore) {
	n := ns(t, "stream")
	beat(ctx, t, s, n, lease.Member{Owner: "worker-a", Beat: 1, Held: 2})
	beat(ctx, t, s, n, lease.Member{Owner: "worker-b", Beat: 4, Held: 1})
	beat(ctx, t, s, n, lease.Member{Owner: "worker-a", Beat: 1, Held: 2, Fenced: true})
	want := []lease.Member{{Owner: "worker-a", Beat: 1, Held: 2, Fenced: true}, {Owner: "worker-b", Beat: 4, Held: 1}}
	if diff := cmp.Diff(want, mustMembers(ctx, t, s, n), cmpopts.EquateEmpty()); diff != "" {
		t.Fatalf("Members after a fenced heartbeat (-want +got):\n%s", diff)
	}
	beat(ctx, t, s, n, lease.Member{Owner: "worker-a", Beat: 2})
	want[0] = lease.Member{Owner: "worker-a", Beat: 2}
	if diff := cmp.Diff(want, mustMembers(ctx, t, s, n), cmpopts.EquateEmpty()); diff != "" {
		t.Fatalf("Members after the fence ended (-want +got):\n%s", diff)
	}
}

// A leaving member's entry says so (lease.Member.Leaving), beside its beat
// and what it holds, until it leaves.
func testLeaving(ctx context.Context, t *testing.T, s lease.MemberStore) {
	n := ns(t, "stream")
	beat(ctx, t, s, n, lease.Member{Owner: "worker-a", Beat: 1, Held: 2, Asks: []string{"shard-1"}})
	beat(ctx, t, s, n, lease.Member{Owner: "worker-b", Beat: 4, Held: 1})
	beat(ctx, t, s, n, lease.Member{Owner: "worker-a", Beat: 2, Held: 1, Leaving: true})
	want := []lease.Member{{Owner: "worker-a", Beat: 2, Held: 1, Leaving: true}, {Owner: "worker-b", Beat: 4, Held: 1}}
	if diff := cmp.Diff(want, mustMembers(ctx, t, s, n), cmpopts.EquateEmpty()); diff != "" {
		t.Fatalf("Members after a leaving heartbeat (-want +got):\n%s", diff)
	}
	beat(ctx, t, s, n, lease.Member{Owner: "worker-a", Beat: 2, Leaving: true})
	want[0].Held = 0
	if diff := cmp.Diff(want, mustMembers(ctx, t, s, n), cmpopts.EquateEmpty()); diff != "" {
		t.Fatalf("Members after a second leaving heartbeat of the same beat (-want +got):\n%s", diff)
	}
}

func testLeave(ctx context.Context, t *testing.T, s lease.MemberStore) {
	n := ns(t, "stream")
	beat(ctx, t, s, n, lease.Member{Owner: "worker-a", Beat: 1})
	beat(ctx, t, s, n, lease.Member{Owner: "worker-b", Beat: 1})
	if err := s.Leave(ctx, n, "worker-a", 0); err != nil {
		t.Fatalf("Leave: %v", err)
	}
	if err := s.Leave(ctx, n, "worker-a", 0); err != nil {
		t.Fatalf("Leave of an absent entry: %v; want nil", err)
	}
	if err := s.Leave(ctx, ns(t, "other"), "worker-a", 0); err != nil {
		t.Fatalf("Leave in a namespace without members: %v; want nil", err)
	}
	if diff := cmp.Diff([]lease.Member{{Owner: "worker-b", Beat: 1}}, mustMembers(ctx, t, s, n), cmpopts.EquateEmpty()); diff != "" {
		t.Fatalf("Members after Leave (-want +got):\n%s", diff)
	}
}

func testLeaveStaleBeat(ctx context.Context, t *testing.T, s lease.MemberStore) {
	n := ns(t, "stream")
	beat(ctx, t, s, n, lease.Member{Owner: "worker-a", Beat: 1})
	beat(ctx, t, s, n, lease.Member{Owner: "worker-a", Beat: 2}) // alive after all
	err := s.Leave(ctx, n, "worker-a", 1)
	if !errors.Is(err, lease.ErrLeaseLost) {
		t.Fatalf("Leave at a stale beat = %v; want ErrLeaseLost", err)
	}
	if ms := mustMembers(ctx, t, s, n); len(ms) != 1 {
		t.Fatalf("a refused Leave removed the entry: %v", ms)
	}
	if err := s.Leave(ctx, n, "worker-a", 2); err != nil {
		t.Fatalf("Leave at the current beat: %v", err)
	}
	if ms := mustMembers(ctx, t, s, n); len(ms) != 0 {
		t.Fatalf("Members after Leave = %v; want none", ms)
	}
}

func testConcurrentHeartbeats(ctx context.Context, t *testing.T, s lease.MemberStore) {
	n := ns(t, "stream")
	const owners = 8
	var wg sync.WaitGroup
	errs := make(chan error, owners*3)
	for i := range owners {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for b := range 3 {
				errs <- s.Heartbeat(ctx, n, lease.Member{Owner: string(rune('a' + i)), Beat: int64(b + 1), Held: i})
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatalf("Heartbeat: %v", err)
		}
	}
	ms := mustMembers(ctx, t, s, n)
	if len(ms) != owners {
		t.Fatalf("%d members after %d owners' heartbeats: %v", len(ms), owners, ms)
	}
	for i, m := range ms {
		if m.Beat != 3 || m.Held != i {
			t.Fatalf("member %s = %+v; want its last heartbeat (beat 3, held %d)", m.Owner, m, i)
		}
	}
}

func testMembersNotListed(ctx context.Context, t *testing.T, s lease.MemberStore) {
	n := ns(t, "stream")
	seed(ctx, t, s, n, "shard-0")
	beat(ctx, t, s, n, lease.Member{Owner: "worker-a", Beat: 1})
	ls, err := s.List(ctx, n)
	if err != nil {
		t.Fatalf("List: %v", err)
	}
	if len(ls) != 1 || ls[0].ShardID != "shard-0" {
		t.Fatalf("List = %v; want the one lease, not the members item", ls)
	}
}

// RunLookup runs the lease.Lookup subtests against stores made by
// newStore.
func RunLookup(t *testing.T, newStore func(t *testing.T) lease.Store) {
	t.Run("GetManyReadsTheGivenKeysOnly", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(context.Background(), timeout)
		defer cancel()
		s := newStore(t)
		look, ok := s.(lease.Lookup)
		if !ok {
			t.Fatalf("%T is not a lease.Lookup", s)
		}
		a, b := ns(t, "app/orders"), ns(t, "app/orders-v2")
		var keys []string
		for i := range 150 { // more than one BatchGetItem holds
			l := seed(ctx, t, s, a, fmt.Sprintf("shardId-%012d", i))
			if i%2 == 0 {
				keys = append(keys, l.Key)
			}
		}
		other := seed(ctx, t, s, b, "shardId-000000000000")
		keys = append(keys, lease.KeyFor(a, "shardId-999999999999")) // no such lease
		got, err := look.GetMany(ctx, append(keys, keys[0]))
		if err != nil {
			t.Fatalf("GetMany: %v", err)
		}
		if len(got) != 75 {
			t.Fatalf("GetMany returned %d leases, want the 75 asked for that exist", len(got))
		}
		for i, l := range got {
			if l.Key != keys[i] || l.Key == other.Key {
				t.Fatalf("lease %d is %s, want %s (sorted, only the keys asked for)", i, l.Key, keys[i])
			}
		}
		if diff := cmp.Diff(mustGet(ctx, t, s, keys[3]), got[3]); diff != "" {
			t.Fatalf("GetMany's lease differs from Get's (-get +getmany):\n%s", diff)
		}
		if got, err := look.GetMany(ctx, nil); err != nil || len(got) != 0 {
			t.Fatalf("GetMany(nil) = %v, %v; want none, nil", got, err)
		}
	})
}
