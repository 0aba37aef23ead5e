package lease_test

import (
	"context"
	"errors"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/aws/smithy-go"
	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/kinesisgen/kinesisgen/runtime/lease"
	"github.com/kinesisgen/kinesisgen/runtime/lease/leasetest"
)

// newDynamoOn returns a store on table with opts, its tables created now.
func newDynamoOn(t testing.TB, api lease.DynamoDBAPI, table string, opts ...lease.DynamoDBOption) *lease.DynamoDB {
	t.Helper()
	opts = append([]lease.DynamoDBOption{lease.CreateTableIfMissing(), lease.TableWaitTimeout(30 * time.Second)}, opts...)
	s := lease.NewDynamoDB(api, table, opts...)
	ctx, cancel := context.WithTimeout(context.Background(), 40*time.Second)
	defer cancel()
	if err := s.EnsureTable(ctx); err != nil {
		t.Fatalf("EnsureTable: %v", err)
	}
	return s
}

// TestDynamoDBMembersLayouts runs the member conformance cases on each
// layout (the default, MembersMigrating, runs in TestDynamoDBMembers).
func TestDynamoDBMembersLayouts(t *testing.T) {
	client := dynaliteClient(t)
	for _, layout := range []lease.MembersLayout{lease.MembersTable, lease.MembersItem} {
		t.Run(layout.String(), func(t *testing.T) {
			leasetest.RunMembers(t, func(t *testing.T) lease.MemberStore {
				s := newDynamoOn(t, client, freshTable(t), lease.WithMembers(layout))
				if got := s.MembersLayout(); got != layout {
					t.Fatalf("MembersLayout() = %v; want %v", got, layout)
				}
				return s
			})
		})
	}
}

// TestDynamoDBMemberItemPerOwner: with the members table a heartbeat
// writes one small item of its own (one write unit, whatever the number of
// members), not an item holding every entry.
func TestDynamoDBMemberItemPerOwner(t *testing.T) {
	client := dynaliteClient(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	table := freshTable(t)
	s := newDynamoOn(t, client, table, lease.WithMembers(lease.MembersTable))
	const n = 60 // ~45 bytes an entry: the members item would pass 2 KB
	for i := range n {
		if err := s.Heartbeat(ctx, "app/orders", lease.Member{Owner: ownerName(i), Beat: 1, Held: 16}); err != nil {
			t.Fatal(err)
		}
	}
	out, err := client.PutItem(ctx, &dynamodb.PutItemInput{
		TableName: aws.String(s.MembersTable()),
		Item: map[string]types.AttributeValue{
			"ns": &types.AttributeValueMemberS{Value: "app/orders"}, "owner": &types.AttributeValueMemberS{Value: ownerName(0)},
			"beat": &types.AttributeValueMemberN{Value: "2"}, "held": &types.AttributeValueMemberN{Value: "16"},
		},
		ReturnConsumedCapacity: types.ReturnConsumedCapacityTotal,
	})
	if err != nil {
		t.Fatal(err)
	}
	if out.ConsumedCapacity == nil {
		t.Fatal("no consumed capacity reported")
	}
	if c := out.ConsumedCapacity; aws.ToFloat64(c.CapacityUnits) > 1 {
		t.Errorf("a heartbeat among %d members cost %v write units; want 1", n, aws.ToFloat64(c.CapacityUnits))
	}
	ms, err := s.Members(ctx, "app/orders")
	if err != nil {
		t.Fatal(err)
	}
	if len(ms) != n || ms[0].Beat != 2 {
		t.Fatalf("Members: %d entries, first %+v; want %d, the first at beat 2", len(ms), ms[0], n)
	}
	// Nothing in the lease table: the members item is not written.
	got, err := client.GetItem(ctx, &dynamodb.GetItemInput{TableName: &table, Key: map[string]types.AttributeValue{"leaseKey": &types.AttributeValueMemberS{Value: lease.MembersKey("app/orders")}}})
	if err != nil {
		t.Fatal(err)
	}
	if got.Item != nil {
		t.Errorf("the members item was written: %v", got.Item)
	}
}

func ownerName(i int) string { return "worker-" + string(rune('a'+i/26)) + string(rune('a'+i%26)) }

// TestDynamoDBMembersMigrating: an instance of the earlier layout
// (MembersItem) and one of the default (MembersMigrating) on one table see
// each other for as long as both run; once the old one has left, the new
// one writes its own item alone and takes its entry out of the members
// item; an old one started again is seen at once and seen back.
func TestDynamoDBMembersMigrating(t *testing.T) {
	client := dynaliteClient(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	table := freshTable(t)
	oldS := newDynamoOn(t, client, table, lease.WithMembers(lease.MembersItem))
	newS := newDynamoOn(t, client, table)
	if got := newS.MembersLayout(); got != lease.MembersMigrating {
		t.Fatalf("default layout %v; want migrating", got)
	}
	const ns = "app/orders"
	owners := func(s lease.MemberStore) map[string]int64 {
		t.Helper()
		ms, err := s.Members(ctx, ns)
		if err != nil {
			t.Fatal(err)
		}
		out := map[string]int64{}
		for _, m := range ms {
			out[m.Owner] = m.Beat
		}
		return out
	}
	beat := func(s lease.MemberStore, owner string, b int64) {
		t.Helper()
		if err := s.Heartbeat(ctx, ns, lease.Member{Owner: owner, Beat: b}); err != nil {
			t.Fatal(err)
		}
	}
	beat(oldS, "old", 1)
	beat(newS, "new", 1) // reads the item first: an old owner is in it
	if diff := cmp.Diff(map[string]int64{"old": 1, "new": 1}, owners(oldS)); diff != "" {
		t.Fatalf("the old instance's view (-want +got):\n%s", diff)
	}
	beat(newS, "new", 2)
	if diff := cmp.Diff(map[string]int64{"old": 1, "new": 2}, owners(newS)); diff != "" {
		t.Fatalf("the new instance's view (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(map[string]int64{"old": 1, "new": 2}, owners(oldS)); diff != "" {
		t.Fatalf("the old instance does not see the new one's beats (-want +got):\n%s", diff)
	}

	// The old instance stops: the new one stops writing the item.
	if err := oldS.Leave(ctx, ns, "old", 0); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(map[string]int64{"new": 2}, owners(newS)); diff != "" {
		t.Fatalf("after the old one left (-want +got):\n%s", diff)
	}
	beat(newS, "new", 3)
	if got := owners(oldS); len(got) != 0 {
		t.Fatalf("the members item still holds %v; want the new owner's entry taken out", got)
	}
	beat(newS, "new", 4)
	if diff := cmp.Diff(map[string]int64{"new": 4}, owners(newS)); diff != "" {
		t.Fatalf("(-want +got):\n%s", diff)
	}

	// An old instance comes back (a rollback, a late start): the next read
	// shows it, and the new one writes the item again.
	beat(oldS, "old2", 1)
	if diff := cmp.Diff(map[string]int64{"new": 4, "old2": 1}, owners(newS)); diff != "" {
		t.Fatalf("(-want +got):\n%s", diff)
	}
	beat(newS, "new", 5)
	if diff := cmp.Diff(map[string]int64{"new": 5, "old2": 1}, owners(oldS)); diff != "" {
		t.Fatalf("the returning old instance's view (-want +got):\n%s", diff)
	}

	// Removing a dead owner's entry is conditional on its beat in both
	// places; a stale beat is refused.
	if err := newS.Leave(ctx, ns, "new", 4); !errors.Is(err, lease.ErrLeaseLost) {
		t.Fatalf("Leave at a stale beat: %v; want ErrLeaseLost", err)
	}
	if err := newS.Leave(ctx, ns, "new", 5); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(map[string]int64{"old2": 1}, owners(newS), cmpopts.EquateEmpty()); diff != "" {
		t.Fatalf("after Leave (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(map[string]int64{"old2": 1}, owners(oldS), cmpopts.EquateEmpty()); diff != "" {
		t.Fatalf("the old view after Leave (-want +got):\n%s", diff)
	}
}

// TestDynamoDBMembersTableMissing: without CreateTableIfMissing a missing
// members table makes the default layout keep the members item (an upgrade
// that did not create it keeps working), and MembersTable an error.
func TestDynamoDBMembersTableMissing(t *testing.T) {
	client := dynaliteClient(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	table := freshTable(t)
	newDynamoOn(t, client, table, lease.WithMembers(lease.MembersItem)) // the lease table only
	s := lease.NewDynamoDB(client, table)
	if err := s.EnsureTable(ctx); err != nil {
		t.Fatal(err)
	}
	if got := s.MembersLayout(); got != lease.MembersItem {
		t.Fatalf("layout without a members table %v; want item", got)
	}
	if err := s.Heartbeat(ctx, "app/orders", lease.Member{Owner: "a", Beat: 1}); err != nil {
		t.Fatal(err)
	}
	strict := lease.NewDynamoDB(client, table, lease.WithMembers(lease.MembersTable))
	if err := strict.EnsureTable(ctx); !errors.Is(err, lease.ErrNoTable) {
		t.Fatalf("MembersTable without its table: %v; want ErrNoTable", err)
	}
}

// queryFake is fakeAPI with Query, so the store tries the members table.
type queryFake struct {
	*fakeAPI
}

func (queryFake) Query(context.Context, *dynamodb.QueryInput, ...func(*dynamodb.Options)) (*dynamodb.QueryOutput, error) {
	return &dynamodb.QueryOutput{}, nil
}

// TestDynamoDBMembersTableDenied: a role that may use the lease table but
// not the members table (an upgrade that has not granted it yet) keeps the
// members item with the default layout, and is an error with MembersTable.
func TestDynamoDBMembersTableDenied(t *testing.T) {
	denied := &smithy.GenericAPIError{Code: "AccessDeniedException", Message: "not authorized"}
	api := queryFake{&fakeAPI{describe: func() (*dynamodb.DescribeTableOutput, error) { return leaseTableDescription() }}}
	var n atomic.Int32
	api.describe = func() (*dynamodb.DescribeTableOutput, error) {
		if n.Add(1)%2 == 0 { // every second call: the members table
			return nil, denied
		}
		return leaseTableDescription()
	}
	ctx := context.Background()
	s := lease.NewDynamoDB(api, "leases")
	if err := s.EnsureTable(ctx); err != nil {
		t.Fatalf("EnsureTable with the members table denied: %v", err)
	}
	if got := s.MembersLayout(); got != lease.MembersItem {
		t.Fatalf("layout %v; want item", got)
	}
	strict := lease.NewDynamoDB(api, "leases", lease.WithMembers(lease.MembersTable))
	if err := strict.EnsureTable(ctx); err == nil {
		t.Fatal("MembersTable with its table denied: no error")
	}
}

// TestDynamoDBMembersFencedInBothPlaces: with MembersMigrating and an
// owner of the earlier layout present, a fenced heartbeat is written to
// the members table and the members item alike, so that readers of either
// layout see it, and the next heartbeat (a new beat) clears it in both.
// In the item the flag is one more attribute of the owner's entry, which
// a reader that does not know it skips (it reads the beat, as before).
func TestDynamoDBMembersFencedInBothPlaces(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	const ns = "app/orders"
	client, table := dynaliteClient(t), freshTable(t)
	oldS, newS, tabS := beside(ctx, t, client, table, ns, lease.Member{Owner: "new", Beat: 1}, lease.Member{Owner: "new", Beat: 1, Fenced: true})
	fenced := func(s lease.MemberStore) map[string]bool {
		t.Helper()
		ms, err := s.Members(ctx, ns)
		if err != nil {
			t.Fatal(err)
		}
		out := map[string]bool{}
		for _, m := range ms {
			out[m.Owner] = m.Fenced
		}
		return out
	}
	want := map[string]bool{"old": false, "new": true}
	for name, s := range map[string]lease.MemberStore{"item": oldS, "migrating": newS} {
		if diff := cmp.Diff(want, fenced(s)); diff != "" {
			t.Errorf("%s reader (-want +got):\n%s", name, diff)
		}
	}
	if diff := cmp.Diff(map[string]bool{"new": true}, fenced(tabS)); diff != "" {
		t.Errorf("table reader (-want +got):\n%s", diff)
	}
	got, err := client.GetItem(ctx, &dynamodb.GetItemInput{TableName: &table, ConsistentRead: aws.Bool(true),
		Key: map[string]types.AttributeValue{"leaseKey": &types.AttributeValueMemberS{Value: lease.MembersKey(ns)}}})
	if err != nil {
		t.Fatal(err)
	}
	entry := got.Item["members"].(*types.AttributeValueMemberM).Value["new"].(*types.AttributeValueMemberM).Value
	if b, ok := entry["fenced"].(*types.AttributeValueMemberBOOL); !ok || !b.Value || entry["beat"].(*types.AttributeValueMemberN).Value != "1" {
		t.Errorf("the members item's entry %v; want beat 1 and fenced true beside it", entry)
	}

	if err := newS.Heartbeat(ctx, ns, lease.Member{Owner: "new", Beat: 2}); err != nil {
		t.Fatal(err)
	}
	want["new"] = false
	for name, s := range map[string]lease.MemberStore{"item": oldS, "migrating": newS} {
		if diff := cmp.Diff(want, fenced(s)); diff != "" {
			t.Errorf("%s reader after the fence ended (-want +got):\n%s", name, diff)
		}
	}
	if diff := cmp.Diff(map[string]bool{"new": false}, fenced(tabS)); diff != "" {
		t.Errorf("table reader after the fence ended (-want +got):\n%s", diff)
	}
}

// TestDynamoDBRoster runs the roster conformance cases in the layouts
// that keep it (the members table).
func TestDynamoDBRoster(t *testing.T) {
	client := dynaliteClient(t)
	for _, layout := range []lease.MembersLayout{lease.MembersMigrating, lease.MembersTable} {
		t.Run(layout.String(), func(t *testing.T) {
			leasetest.RunRoster(t, func(t *testing.T) lease.RosterStore {
				s := newDynamoOn(t, client, freshTable(t), lease.WithMembers(layout))
				r, ok := lease.RosterOf(s)
				if !ok {
					t.Fatalf("layout %v: no roster", layout)
				}
				return r
			})
		})
	}
	if _, ok := lease.RosterOf(newDynamoOn(t, client, freshTable(t), lease.WithMembers(lease.MembersItem))); ok {
		t.Errorf("the members item layout says it keeps the roster")
	}
}

// TestDynamoDBMembersLeavingInBothPlaces: with MembersMigrating and an
// owner of the earlier layout present, a leaving heartbeat is written to
// the members table and the members item alike (lease.Member.Leaving),
// an attribute beside the beat that an earlier reader skips.
func TestDynamoDBMembersLeavingInBothPlaces(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	const ns = "app/orders"
	oldS, newS, tabS := beside(ctx, t, dynaliteClient(t), freshTable(t), ns, lease.Member{Owner: "new", Beat: 1, Held: 2}, lease.Member{Owner: "new", Beat: 2, Held: 1, Leaving: true})
	want := []lease.Member{{Owner: "new", Beat: 2, Held: 1, Leaving: true}}
	for name, s := range map[string]lease.MemberStore{"item": oldS, "migrating": newS, "table": tabS} {
		ms, err := s.Members(ctx, ns)
		if err != nil {
			t.Fatal(err)
		}
		got := slices.DeleteFunc(ms, func(m lease.Member) bool { return m.Owner != "new" })
		if diff := cmp.Diff(want, got, cmpopts.EquateEmpty()); diff != "" {
			t.Errorf("%s reader (-want +got):\n%s", name, diff)
		}
	}
}

// beside returns stores of the three members layouts on table: the
// members item (an owner of the earlier layout, "old", has written beat
// 1), the default MembersMigrating (it has written news, in order) and the
// members table.
func beside(ctx context.Context, t *testing.T, client *dynamodb.Client, table, ns string, news ...lease.Member) (oldS, newS, tabS *lease.DynamoDB) {
	t.Helper()
	oldS = newDynamoOn(t, client, table, lease.WithMembers(lease.MembersItem))
	newS = newDynamoOn(t, client, table)
	tabS = newDynamoOn(t, client, table, lease.WithMembers(lease.MembersTable))
	if err := oldS.Heartbeat(ctx, ns, lease.Member{Owner: "old", Beat: 1}); err != nil {
		t.Fatal(err)
	}
	for _, m := range news {
		if err := newS.Heartbeat(ctx, ns, m); err != nil {
			t.Fatal(err)
		}
	}
	return oldS, newS, tabS
}
