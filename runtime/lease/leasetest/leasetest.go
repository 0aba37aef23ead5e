// Package leasetest is the conformance kit every lease.Store must pass: one
// named subtest per sentence of the lease.Store contract, so the memory store
// and the DynamoDB store cannot drift apart.
//
// A store's test calls Run (and RunLeader, for the lease.Leader built on
// it) with a constructor; each subtest gets a fresh store and its own
// namespaces:
//
//	func TestMyStore(t *testing.T) {
//		leasetest.Run(t, func(t *testing.T) lease.Store { return newMyStore(t) })
//	}
package leasetest

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/kinesisgen/kinesisgen/runtime/lease"
)

// timeout bounds every subtest, so a store that hangs fails instead of
// stalling the suite.
const timeout = 30 * time.Second

// Run runs the conformance subtests against stores made by newStore. It is
// called once per subtest; the store it returns may be shared with other
// subtests (each uses its own namespaces) but must start without leases in
// them.
func Run(t *testing.T, newStore func(t *testing.T) lease.Store) {
	runCases(t, cases, newStore)
}

// kitCase is one named subtest of a kit, run on a fresh store with a bounded context.
type kitCase struct {
	name string
	run  func(ctx context.Context, t *testing.T, s lease.Store)
}

func runCases(t *testing.T, cs []kitCase, newStore func(t *testing.T) lease.Store) {
	for _, tc := range cs {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), timeout)
			defer cancel()
			tc.run(ctx, t, newStore(t))
		})
	}
}

var cases = []kitCase{
	{"CreateIfAbsent", testCreateIfAbsent},
	{"CreateRoundTripsEveryField", testCreateRoundTrip},
	{"CreateOrGetReturnsTheStoredLease", testCreateOrGet},
	{"GetMissingIsNotFound", testGetMissing},
	{"ListScopedByNamespaceAndSorted", testListScoping},
	{"ListEmptyNamespace", testListEmpty},
	{"TakeBumpsCounterAndCountsOwnerSwitches", testTake},
	{"TakeWithStaleCounterIsLost", testTakeStale},
	{"RenewKeepsLeaseAndBumpsCounter", testRenew},
	{"RenewByStaleOwnerIsLost", testRenewStaleOwner},
	{"RenewWithStaleCounterIsLost", testRenewStaleCounter},
	{"CheckpointWhileHolding", testCheckpoint},
	{"CheckpointByStaleOwnerIsFenced", testCheckpointFenced},
	{"CheckpointResetsOwnerSwitches", testCheckpointResetsSwitches},
	{"ReleaseClearsOwner", testRelease},
	{"ReleaseByStaleOwnerIsLost", testReleaseStale},
	{"HandoffRequestThenTakeByPendingOwner", testHandoff},
	{"SetChildren", testSetChildren},
	{"ShardIDSetsSortedWithoutDuplicates", testShardSets},
	{"SetChildrenByStaleOwnerIsLost", testSetChildrenStale},
	{"Delete", testDelete},
	{"DeleteWithStaleCounterIsLost", testDeleteStale},
	{"MutatingMissingLeaseIsNotFound", testMutateMissing},
	{"CallerCannotAliasStoredSlices", testNoAliasing},
	{"InvalidCallsWriteNothing", testInvalid},
	{"CanceledContext", testCanceled},
	{"ConcurrentTakersExactlyOneWins", testConcurrentTake},
	{"ConcurrentCheckpointsOfOneOwnerAreSerialised", testConcurrentCheckpoint},
}

// ns returns a namespace unique to the running subtest, so subtests can share
// one store (one DynamoDB table) without seeing each other's leases.
func ns(t *testing.T, suffix string) string {
	return fmt.Sprintf("leasetest-%s-%d/%s", t.Name(), time.Now().UnixNano(), suffix)
}

// seed creates a fresh lease of shard in namespace and returns it as stored.
func seed(ctx context.Context, t *testing.T, s lease.Store, namespace, shard string) lease.Lease {
	t.Helper()
	l := lease.Lease{Key: lease.KeyFor(namespace, shard), ShardID: shard, Checkpoint: lease.CheckpointTrimHorizon}
	created, err := s.Create(ctx, l)
	if err != nil || !created {
		t.Fatalf("Create(%s) = %v, %v; want true, nil", l.Key, created, err)
	}
	got, err := s.Get(ctx, l.Key)
	if err != nil {
		t.Fatalf("Get(%s): %v", l.Key, err)
	}
	return got
}

// held seeds a lease and has owner take it.
func held(ctx context.Context, t *testing.T, s lease.Store, owner string) lease.Lease {
	t.Helper()
	l := seed(ctx, t, s, ns(t, "stream"), "shardId-000000000000")
	taken, err := s.Take(ctx, l, owner)
	if err != nil {
		t.Fatalf("Take(%s, %s): %v", l.Key, owner, err)
	}
	return taken
}

func mustGet(ctx context.Context, t *testing.T, s lease.Store, key string) lease.Lease {
	t.Helper()
	l, err := s.Get(ctx, key)
	if err != nil {
		t.Fatalf("Get(%s): %v", key, err)
	}
	return l
}

// wantErr checks that err matches target and is a *lease.Error naming op and key.
func wantErr(t *testing.T, err, target error, op, key string) {
	t.Helper()
	if !errors.Is(err, target) {
		t.Fatalf("%s(%s) error = %v; want %v", op, key, err, target)
	}
	var le *lease.Error
	if !errors.As(err, &le) {
		t.Fatalf("%s(%s) error %T (%v) is not a *lease.Error", op, key, err, err)
	}
	if le.Op == "" || le.Key != key {
		t.Fatalf("%s error names op %q key %q; want a non-empty op and key %q", op, le.Op, le.Key, key)
	}
}

// unchanged checks that a failed call wrote nothing.
func unchanged(ctx context.Context, t *testing.T, s lease.Store, want lease.Lease) {
	t.Helper()
	if diff := cmp.Diff(want, mustGet(ctx, t, s, want.Key)); diff != "" {
		t.Fatalf("a failed call changed the stored lease (-want +got):\n%s", diff)
	}
}

func testCreateIfAbsent(ctx context.Context, t *testing.T, s lease.Store) {
	l := lease.Lease{Key: lease.KeyFor(ns(t, "s"), "shard-0"), ShardID: "shard-0", Checkpoint: lease.CheckpointLatest}
	created, err := s.Create(ctx, l)
	if err != nil || !created {
		t.Fatalf("first Create = %v, %v; want true, nil", created, err)
	}
	other := l
	other.Checkpoint = "49590338271490256608559692538361571095921575989136588898"
	other.Owner = "intruder"
	created, err = s.Create(ctx, other)
	if err != nil || created {
		t.Fatalf("second Create = %v, %v; want false, nil", created, err)
	}
	if got := mustGet(ctx, t, s, l.Key); got.Checkpoint != lease.CheckpointLatest || got.Owner != "" {
		t.Fatalf("second Create overwrote the lease: %+v", got)
	}
}

// testCreateOrGet: a store that implements lease.CreateOrGetter returns
// the lease it stored, and with a refusal the lease that exists as it is
// now (not the one the caller would have stored), its counter included.
func testCreateOrGet(ctx context.Context, t *testing.T, s lease.Store) {
	cg, ok := s.(lease.CreateOrGetter)
	if !ok {
		t.Skipf("%T does not implement lease.CreateOrGetter", s)
	}
	l := lease.Lease{Key: lease.KeyFor(ns(t, "s"), "shard-0"), ShardID: "shard-0", Checkpoint: lease.CheckpointTrimHorizon, ParentShardIDs: []string{"p2", "p1"}}
	got, created, err := cg.CreateOrGet(ctx, l)
	if err != nil || !created {
		t.Fatalf("first CreateOrGet = %v, %v; want true, nil", created, err)
	}
	if diff := cmp.Diff(mustGet(ctx, t, s, l.Key), got); diff != "" {
		t.Fatalf("first CreateOrGet returned another lease than Get (-get +returned):\n%s", diff)
	}
	taken, err := s.Take(ctx, mustGet(ctx, t, s, l.Key), "worker-a")
	if err != nil {
		t.Fatalf("Take: %v", err)
	}
	other := l
	other.Checkpoint = lease.CheckpointLatest
	got, created, err = cg.CreateOrGet(ctx, other)
	if err != nil || created {
		t.Fatalf("second CreateOrGet = %v, %v; want false, nil", created, err)
	}
	if diff := cmp.Diff(taken, got); diff != "" {
		t.Fatalf("refused CreateOrGet returned another lease than the stored one (-stored +returned):\n%s", diff)
	}
	unchanged(ctx, t, s, taken)
}

func testCreateRoundTrip(ctx context.Context, t *testing.T, s lease.Store) {
	want := lease.Lease{
		Key:                          lease.KeyFor(ns(t, "s"), "shardId-000000000003"),
		ShardID:                      "shardId-000000000003",
		Owner:                        "worker-a",
		Counter:                      7,
		Checkpoint:                   "49590338271490256608559692538361571095921575989136588898",
		SubSequence:                  4,
		OwnerSwitchesSinceCheckpoint: 2,
		ParentShardIDs:               []string{"shardId-000000000000", "shardId-000000000001"},
		ChildShardIDs:                []string{"shardId-000000000005"},
		StartingHashKey:              "0",
		EndingHashKey:                "170141183460469231731687303715884105727",
		PendingOwner:                 "worker-b",
	}
	if created, err := s.Create(ctx, want); err != nil || !created {
		t.Fatalf("Create = %v, %v", created, err)
	}
	if diff := cmp.Diff(want, mustGet(ctx, t, s, want.Key)); diff != "" {
		t.Fatalf("Get after Create (-want +got):\n%s", diff)
	}
}

func testGetMissing(ctx context.Context, t *testing.T, s lease.Store) {
	key := lease.KeyFor(ns(t, "s"), "nope")
	_, err := s.Get(ctx, key)
	wantErr(t, err, lease.ErrNotFound, "get", key)
}

func testListScoping(ctx context.Context, t *testing.T, s lease.Store) {
	// Two applications reading the same stream, and a stream whose name
	// extends another's ("orders" is a string prefix of "orders-v2"): List
	// scopes by the namespace plus its separator, not by the bare string.
	base := ns(t, "")
	a, b, c := base+"app-a/orders", base+"app-a/orders-v2", base+"app-b/orders"
	for _, shard := range []string{"shard-2", "shard-0", "shard-1"} {
		seed(ctx, t, s, a, shard)
	}
	seed(ctx, t, s, b, "shard-0")
	seed(ctx, t, s, b, "shard-9")
	seed(ctx, t, s, c, "shard-0")

	keys := func(namespace string) []string {
		ls, err := s.List(ctx, namespace)
		if err != nil {
			t.Fatalf("List(%s): %v", namespace, err)
		}
		var out []string
		for _, l := range ls {
			out = append(out, l.Key)
		}
		return out
	}
	for _, tc := range []struct {
		namespace string
		want      []string
	}{
		{a, []string{lease.KeyFor(a, "shard-0"), lease.KeyFor(a, "shard-1"), lease.KeyFor(a, "shard-2")}},
		{b, []string{lease.KeyFor(b, "shard-0"), lease.KeyFor(b, "shard-9")}},
		{c, []string{lease.KeyFor(c, "shard-0")}},
	} {
		if diff := cmp.Diff(tc.want, keys(tc.namespace)); diff != "" {
			t.Fatalf("List(%s) (-want +got):\n%s", tc.namespace, diff)
		}
	}
}

func testListEmpty(ctx context.Context, t *testing.T, s lease.Store) {
	ls, err := s.List(ctx, ns(t, "nothing-here"))
	if err != nil || len(ls) != 0 {
		t.Fatalf("List of an empty namespace = %v, %v; want none, nil", ls, err)
	}
}

func testTake(ctx context.Context, t *testing.T, s lease.Store) {
	l := seed(ctx, t, s, ns(t, "s"), "shard-0")
	a, err := s.Take(ctx, l, "worker-a")
	if err != nil {
		t.Fatalf("Take by worker-a: %v", err)
	}
	if a.Owner != "worker-a" || a.Counter != l.Counter+1 || a.OwnerSwitchesSinceCheckpoint != 1 {
		t.Fatalf("after first Take: owner %q counter %d switches %d; want worker-a, %d, 1",
			a.Owner, a.Counter, a.OwnerSwitchesSinceCheckpoint, l.Counter+1)
	}
	// Taking a lease one already holds is not a switch.
	again, err := s.Take(ctx, a, "worker-a")
	if err != nil {
		t.Fatalf("Take again by worker-a: %v", err)
	}
	if again.Counter != a.Counter+1 || again.OwnerSwitchesSinceCheckpoint != 1 {
		t.Fatalf("re-take by the same owner: counter %d switches %d; want %d, 1", again.Counter, again.OwnerSwitchesSinceCheckpoint, a.Counter+1)
	}
	b, err := s.Take(ctx, again, "worker-b")
	if err != nil {
		t.Fatalf("Take by worker-b: %v", err)
	}
	if b.Owner != "worker-b" || b.OwnerSwitchesSinceCheckpoint != 2 || b.Checkpoint != l.Checkpoint {
		t.Fatalf("after steal: owner %q switches %d checkpoint %q; want worker-b, 2, %q",
			b.Owner, b.OwnerSwitchesSinceCheckpoint, b.Checkpoint, l.Checkpoint)
	}
	if diff := cmp.Diff(b, mustGet(ctx, t, s, l.Key)); diff != "" {
		t.Fatalf("Take's result differs from the stored lease (-returned +stored):\n%s", diff)
	}
}

func testTakeStale(ctx context.Context, t *testing.T, s lease.Store) {
	l := seed(ctx, t, s, ns(t, "s"), "shard-0")
	a, err := s.Take(ctx, l, "worker-a")
	if err != nil {
		t.Fatal(err)
	}
	_, err = s.Take(ctx, l, "worker-b") // l's counter is stale now
	wantErr(t, err, lease.ErrLeaseLost, "take", l.Key)
	unchanged(ctx, t, s, a)
}

func testRenew(ctx context.Context, t *testing.T, s lease.Store) {
	a := held(ctx, t, s, "worker-a")
	r, err := s.Renew(ctx, a)
	if err != nil {
		t.Fatalf("Renew: %v", err)
	}
	want := a
	want.Counter++
	if diff := cmp.Diff(want, r); diff != "" {
		t.Fatalf("Renew changed more than the counter (-want +got):\n%s", diff)
	}
	if _, err := s.Renew(ctx, r); err != nil {
		t.Fatalf("Renew with the renewed lease: %v", err)
	}
}

func testRenewStaleOwner(ctx context.Context, t *testing.T, s lease.Store) {
	a := held(ctx, t, s, "worker-a")
	b, err := s.Take(ctx, a, "worker-b") // worker-b steals (e.g. a looked expired)
	if err != nil {
		t.Fatal(err)
	}
	_, err = s.Renew(ctx, a)
	wantErr(t, err, lease.ErrLeaseLost, "renew", a.Key)
	// Even with the current counter, a lease held by someone else cannot be renewed.
	forged := b
	forged.Owner = "worker-a"
	_, err = s.Renew(ctx, forged)
	wantErr(t, err, lease.ErrLeaseLost, "renew", a.Key)
	unchanged(ctx, t, s, b)
}

func testRenewStaleCounter(ctx context.Context, t *testing.T, s lease.Store) {
	a := held(ctx, t, s, "worker-a")
	r, err := s.Renew(ctx, a)
	if err != nil {
		t.Fatal(err)
	}
	_, err = s.Renew(ctx, a)
	wantErr(t, err, lease.ErrLeaseLost, "renew", a.Key)
	unchanged(ctx, t, s, r)
}

func testCheckpoint(ctx context.Context, t *testing.T, s lease.Store) {
	a := held(ctx, t, s, "worker-a")
	const seq = "49590338271490256608559692538361571095921575989136588898"
	c, err := s.Checkpoint(ctx, a, seq, 3)
	if err != nil {
		t.Fatalf("Checkpoint: %v", err)
	}
	if c.Checkpoint != seq || c.SubSequence != 3 || c.Counter != a.Counter+1 || c.Owner != "worker-a" {
		t.Fatalf("after Checkpoint: %+v", c)
	}
	c, err = s.Checkpoint(ctx, c, lease.CheckpointShardEnd, 0)
	if err != nil {
		t.Fatalf("Checkpoint SHARD_END: %v", err)
	}
	if diff := cmp.Diff(c, mustGet(ctx, t, s, a.Key)); diff != "" {
		t.Fatalf("Checkpoint's result differs from the stored lease (-returned +stored):\n%s", diff)
	}
}

func testCheckpointFenced(ctx context.Context, t *testing.T, s lease.Store) {
	a := held(ctx, t, s, "worker-a")
	b, err := s.Take(ctx, a, "worker-b")
	if err != nil {
		t.Fatal(err)
	}
	// worker-a has not noticed yet and checkpoints records it delivered late.
	_, err = s.Checkpoint(ctx, a, "49590338271490256608559692538361571095921575989136588898", 0)
	wantErr(t, err, lease.ErrLeaseLost, "checkpoint", a.Key)
	unchanged(ctx, t, s, b)
	// Re-reading does not help a non-owner either.
	cur := mustGet(ctx, t, s, a.Key)
	cur.Owner = "worker-a"
	_, err = s.Checkpoint(ctx, cur, "49590338271490256608559692538361571095921575989136588898", 0)
	wantErr(t, err, lease.ErrLeaseLost, "checkpoint", a.Key)
	unchanged(ctx, t, s, b)
}

func testCheckpointResetsSwitches(ctx context.Context, t *testing.T, s lease.Store) {
	a := held(ctx, t, s, "worker-a")
	b, err := s.Take(ctx, a, "worker-b")
	if err != nil {
		t.Fatal(err)
	}
	if b.OwnerSwitchesSinceCheckpoint != 2 {
		t.Fatalf("switches after two takes = %d; want 2", b.OwnerSwitchesSinceCheckpoint)
	}
	c, err := s.Checkpoint(ctx, b, "100", 0)
	if err != nil {
		t.Fatal(err)
	}
	if c.OwnerSwitchesSinceCheckpoint != 0 || mustGet(ctx, t, s, a.Key).OwnerSwitchesSinceCheckpoint != 0 {
		t.Fatalf("Checkpoint left ownerSwitchesSinceCheckpoint at %d", c.OwnerSwitchesSinceCheckpoint)
	}
}

func testRelease(ctx context.Context, t *testing.T, s lease.Store) {
	a := held(ctx, t, s, "worker-a")
	c, err := s.Checkpoint(ctx, a, "100", 0)
	if err != nil {
		t.Fatal(err)
	}
	r, err := s.Release(ctx, c)
	if err != nil {
		t.Fatalf("Release: %v", err)
	}
	if r.Owner != "" || r.Counter != c.Counter+1 || r.Checkpoint != "100" {
		t.Fatalf("after Release: owner %q counter %d checkpoint %q; want \"\", %d, 100", r.Owner, r.Counter, r.Checkpoint, c.Counter+1)
	}
	if diff := cmp.Diff(r, mustGet(ctx, t, s, a.Key)); diff != "" {
		t.Fatalf("Release's result differs from the stored lease (-returned +stored):\n%s", diff)
	}
	// A released lease can be taken at once by anyone who read it.
	b, err := s.Take(ctx, r, "worker-b")
	if err != nil || b.Owner != "worker-b" {
		t.Fatalf("Take after Release = %+v, %v", b, err)
	}
}

func testReleaseStale(ctx context.Context, t *testing.T, s lease.Store) {
	a := held(ctx, t, s, "worker-a")
	b, err := s.Take(ctx, a, "worker-b")
	if err != nil {
		t.Fatal(err)
	}
	_, err = s.Release(ctx, a)
	wantErr(t, err, lease.ErrLeaseLost, "release", a.Key)
	unchanged(ctx, t, s, b)
}

// testHandoff walks the graceful handoff: the requester marks PendingOwner;
// the request bumps the counter, so the owner's next renewal with its cached
// lease fails, it re-reads, sees the request, checkpoints and releases; then
// the pending owner takes the lease.
func testHandoff(ctx context.Context, t *testing.T, s lease.Store) {
	a := held(ctx, t, s, "worker-a")
	h, err := s.RequestHandoff(ctx, a, "worker-b")
	if err != nil {
		t.Fatalf("RequestHandoff: %v", err)
	}
	if h.PendingOwner != "worker-b" || h.Owner != "worker-a" || h.Counter != a.Counter+1 {
		t.Fatalf("after RequestHandoff: owner %q pending %q counter %d; want worker-a, worker-b, %d", h.Owner, h.PendingOwner, h.Counter, a.Counter+1)
	}
	// A second request built from the stale lease loses.
	_, err = s.RequestHandoff(ctx, a, "worker-c")
	wantErr(t, err, lease.ErrLeaseLost, "handoff", a.Key)

	_, err = s.Renew(ctx, a)
	wantErr(t, err, lease.ErrLeaseLost, "renew", a.Key)
	cur := mustGet(ctx, t, s, a.Key)
	if cur.Owner != "worker-a" || cur.PendingOwner != "worker-b" {
		t.Fatalf("owner re-read %+v; want owner worker-a pending worker-b", cur)
	}
	c, err := s.Checkpoint(ctx, cur, "200", 0)
	if err != nil {
		t.Fatalf("owner's final Checkpoint: %v", err)
	}
	if c.PendingOwner != "worker-b" {
		t.Fatalf("Checkpoint cleared PendingOwner")
	}
	r, err := s.Release(ctx, c)
	if err != nil {
		t.Fatalf("owner's Release: %v", err)
	}
	if r.PendingOwner != "worker-b" {
		t.Fatalf("Release cleared PendingOwner; the pending owner could not tell the lease is for it")
	}
	b, err := s.Take(ctx, r, "worker-b")
	if err != nil {
		t.Fatalf("Take by the pending owner: %v", err)
	}
	if b.Owner != "worker-b" || b.PendingOwner != "" || b.Checkpoint != "200" || b.OwnerSwitchesSinceCheckpoint != 1 {
		t.Fatalf("after handoff: owner %q pending %q checkpoint %q switches %d; want worker-b, \"\", 200, 1",
			b.Owner, b.PendingOwner, b.Checkpoint, b.OwnerSwitchesSinceCheckpoint)
	}
}

func testSetChildren(ctx context.Context, t *testing.T, s lease.Store) {
	a := held(ctx, t, s, "worker-a")
	c, err := s.SetChildren(ctx, a, []string{"shardId-000000000002", "shardId-000000000003"})
	if err != nil {
		t.Fatalf("SetChildren: %v", err)
	}
	want := []string{"shardId-000000000002", "shardId-000000000003"}
	if diff := cmp.Diff(want, c.ChildShardIDs); diff != "" {
		t.Fatalf("returned children (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(want, mustGet(ctx, t, s, a.Key).ChildShardIDs); diff != "" {
		t.Fatalf("stored children (-want +got):\n%s", diff)
	}
	if c.Counter != a.Counter+1 {
		t.Fatalf("SetChildren counter %d; want %d", c.Counter, a.Counter+1)
	}
}

func testShardSets(ctx context.Context, t *testing.T, s lease.Store) {
	l := lease.Lease{
		Key: lease.KeyFor(ns(t, "s"), "shard-9"), ShardID: "shard-9",
		ParentShardIDs: []string{"shard-7", "shard-3", "shard-7"},
	}
	if _, err := s.Create(ctx, l); err != nil {
		t.Fatal(err)
	}
	got := mustGet(ctx, t, s, l.Key)
	if diff := cmp.Diff([]string{"shard-3", "shard-7"}, got.ParentShardIDs); diff != "" {
		t.Fatalf("parents (-want +got):\n%s", diff)
	}
	got, err := s.Take(ctx, got, "worker-a")
	if err != nil {
		t.Fatal(err)
	}
	got, err = s.SetChildren(ctx, got, []string{"shard-12", "shard-11", "shard-12"})
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"shard-11", "shard-12"}
	if diff := cmp.Diff(want, got.ChildShardIDs); diff != "" {
		t.Fatalf("returned children (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(want, mustGet(ctx, t, s, l.Key).ChildShardIDs); diff != "" {
		t.Fatalf("stored children (-want +got):\n%s", diff)
	}
}

func testSetChildrenStale(ctx context.Context, t *testing.T, s lease.Store) {
	a := held(ctx, t, s, "worker-a")
	b, err := s.Take(ctx, a, "worker-b")
	if err != nil {
		t.Fatal(err)
	}
	_, err = s.SetChildren(ctx, a, []string{"shardId-000000000002"})
	wantErr(t, err, lease.ErrLeaseLost, "set-children", a.Key)
	unchanged(ctx, t, s, b)
}

func testDelete(ctx context.Context, t *testing.T, s lease.Store) {
	l := seed(ctx, t, s, ns(t, "s"), "shard-0")
	if err := s.Delete(ctx, l); err != nil {
		t.Fatalf("Delete: %v", err)
	}
	_, err := s.Get(ctx, l.Key)
	wantErr(t, err, lease.ErrNotFound, "get", l.Key)
	err = s.Delete(ctx, l)
	wantErr(t, err, lease.ErrNotFound, "delete", l.Key)
	// A deleted lease can be created again (a stream recreated under the same name).
	if created, err := s.Create(ctx, l); err != nil || !created {
		t.Fatalf("Create after Delete = %v, %v", created, err)
	}
}

func testDeleteStale(ctx context.Context, t *testing.T, s lease.Store) {
	l := seed(ctx, t, s, ns(t, "s"), "shard-0")
	a, err := s.Take(ctx, l, "worker-a")
	if err != nil {
		t.Fatal(err)
	}
	err = s.Delete(ctx, l)
	wantErr(t, err, lease.ErrLeaseLost, "delete", l.Key)
	unchanged(ctx, t, s, a)
}

func testMutateMissing(ctx context.Context, t *testing.T, s lease.Store) {
	l := lease.Lease{Key: lease.KeyFor(ns(t, "s"), "ghost"), ShardID: "ghost", Owner: "worker-a"}
	calls := []struct {
		op string
		do func() error
	}{
		{"take", func() error { _, err := s.Take(ctx, l, "worker-a"); return err }},
		{"renew", func() error { _, err := s.Renew(ctx, l); return err }},
		{"checkpoint", func() error { _, err := s.Checkpoint(ctx, l, "1", 0); return err }},
		{"release", func() error { _, err := s.Release(ctx, l); return err }},
		{"handoff", func() error { _, err := s.RequestHandoff(ctx, l, "worker-b"); return err }},
		{"set-children", func() error { _, err := s.SetChildren(ctx, l, []string{"x"}); return err }},
		{"delete", func() error { return s.Delete(ctx, l) }},
	}
	for _, c := range calls {
		wantErr(t, c.do(), lease.ErrNotFound, c.op, l.Key)
	}
	if _, err := s.Get(ctx, l.Key); !errors.Is(err, lease.ErrNotFound) {
		t.Fatalf("a failed mutation created the lease: Get error = %v", err)
	}
}

func testNoAliasing(ctx context.Context, t *testing.T, s lease.Store) {
	parents := []string{"p-0", "p-1"}
	namespace := ns(t, "s")
	l := lease.Lease{Key: lease.KeyFor(namespace, "c-0"), ShardID: "c-0", ParentShardIDs: parents}
	if _, err := s.Create(ctx, l); err != nil {
		t.Fatal(err)
	}
	parents[0] = "changed-by-caller"

	got := mustGet(ctx, t, s, l.Key)
	if got.ParentShardIDs[0] != "p-0" {
		t.Fatalf("Create kept the caller's slice: parents %v", got.ParentShardIDs)
	}
	got.ParentShardIDs[1] = "changed-after-get"
	listed, err := s.List(ctx, namespace)
	if err != nil || len(listed) != 1 {
		t.Fatalf("List = %v, %v", listed, err)
	}
	listed[0].ParentShardIDs[0] = "changed-after-list"

	a, err := s.Take(ctx, got, "worker-a")
	if err != nil {
		t.Fatal(err)
	}
	children := []string{"k-0", "k-1"}
	c, err := s.SetChildren(ctx, a, children)
	if err != nil {
		t.Fatal(err)
	}
	children[0] = "changed-by-caller"
	c.ChildShardIDs[1] = "changed-in-result"

	final := mustGet(ctx, t, s, l.Key)
	if diff := cmp.Diff([]string{"p-0", "p-1"}, final.ParentShardIDs); diff != "" {
		t.Fatalf("stored parents changed through a caller's slice (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]string{"k-0", "k-1"}, final.ChildShardIDs); diff != "" {
		t.Fatalf("stored children changed through a caller's slice (-want +got):\n%s", diff)
	}
}

func testInvalid(ctx context.Context, t *testing.T, s lease.Store) {
	a := held(ctx, t, s, "worker-a")
	released := a
	released.Owner = ""
	calls := []struct {
		name string
		key  string
		do   func() error
	}{
		{"create empty key", "", func() error { _, err := s.Create(ctx, lease.Lease{ShardID: "x"}); return err }},
		{"take by nobody", a.Key, func() error { _, err := s.Take(ctx, a, ""); return err }},
		{"empty checkpoint", a.Key, func() error { _, err := s.Checkpoint(ctx, a, "", 0); return err }},
		{"renew by nobody", a.Key, func() error { _, err := s.Renew(ctx, released); return err }},
		{"handoff to nobody", a.Key, func() error { _, err := s.RequestHandoff(ctx, a, ""); return err }},
	}
	for _, c := range calls {
		err := c.do()
		if !errors.Is(err, lease.ErrInvalid) {
			t.Fatalf("%s: error = %v; want lease.ErrInvalid", c.name, err)
		}
		var le *lease.Error
		if !errors.As(err, &le) || le.Key != c.key {
			t.Fatalf("%s: error %v is not a *lease.Error for key %q", c.name, err, c.key)
		}
	}
	unchanged(ctx, t, s, a)
}

func testCanceled(ctx context.Context, t *testing.T, s lease.Store) {
	a := held(ctx, t, s, "worker-a")
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	if _, err := s.Renew(cctx, a); !errors.Is(err, context.Canceled) {
		t.Fatalf("Renew with a canceled context: error = %v; want context.Canceled", err)
	}
	if _, err := s.Get(cctx, a.Key); !errors.Is(err, context.Canceled) {
		t.Fatalf("Get with a canceled context: error = %v; want context.Canceled", err)
	}
	unchanged(ctx, t, s, a)
}

func testConcurrentTake(ctx context.Context, t *testing.T, s lease.Store) {
	const takers = 8
	l := seed(ctx, t, s, ns(t, "s"), "shard-0")
	winners := race(t, takers, "taker", func(i int) (lease.Lease, error) {
		return s.Take(ctx, l, fmt.Sprintf("worker-%d", i))
	})
	if len(winners) != 1 {
		t.Fatalf("%d of %d concurrent takers won; want exactly 1", len(winners), takers)
	}
	stored := mustGet(ctx, t, s, l.Key)
	if stored.Owner != winners[0].Owner || stored.Counter != l.Counter+1 {
		t.Fatalf("stored owner %q counter %d; want winner %q, %d", stored.Owner, stored.Counter, winners[0].Owner, l.Counter+1)
	}
}

// testConcurrentCheckpoint has one owner race checkpoints from the same
// snapshot (two lanes settling at once): exactly one lands, the rest must
// re-read, and the counter counts exactly the successful writes.
func testConcurrentCheckpoint(ctx context.Context, t *testing.T, s lease.Store) {
	const writers = 6
	a := held(ctx, t, s, "worker-a")
	won := race(t, writers, "writer", func(i int) (string, error) {
		seq := fmt.Sprint(1000 + i)
		_, err := s.Checkpoint(ctx, a, seq, 0)
		return seq, err
	})
	if len(won) != 1 {
		t.Fatalf("%d of %d checkpoints from one snapshot landed; want 1", len(won), writers)
	}
	stored := mustGet(ctx, t, s, a.Key)
	if stored.Checkpoint != won[0] || stored.Counter != a.Counter+1 {
		t.Fatalf("stored checkpoint %q counter %d; want %q, %d", stored.Checkpoint, stored.Counter, won[0], a.Counter+1)
	}
}

// race runs do(0) .. do(n-1) at once and returns the results of the calls
// that succeeded; a call that fails other than with ErrLeaseLost fails the
// test (who names a caller in the message).
func race[T any](t *testing.T, n int, who string, do func(i int) (T, error)) []T {
	var (
		wg    sync.WaitGroup
		mu    sync.Mutex
		won   []T
		start = make(chan struct{})
	)
	for i := range n {
		wg.Go(func() {
			<-start
			got, err := do(i)
			mu.Lock()
			defer mu.Unlock()
			switch {
			case err == nil:
				won = append(won, got)
			case !errors.Is(err, lease.ErrLeaseLost):
				t.Errorf("%s %d: %v; want nil or ErrLeaseLost", who, i, err)
			}
		})
	}
	close(start)
	wg.Wait()
	return won
}
