package lease_test

import (
	"context"
	"errors"
	"strconv"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/google/go-cmp/cmp"

	"github.com/kinesisgen/kinesisgen/runtime/lease"
	"github.com/kinesisgen/kinesisgen/runtime/lease/leasetest"
)

// The KCL item shapes these tests use, and where in the KCL's source each
// comes from, are described in leasetest/kcl.go.

const kclNS = "orders-app/orders"

var kclStream = lease.KCLStream{AccountID: "123456789012", Name: "orders", CreationEpoch: 1700000000}

// kclTables are the four shapes of KCL table: single- and multi-stream,
// as KCL 2.x and 3.x write them.
func kclTables() map[string]leasetest.KCLTable {
	single := lease.KCLStream{Name: "orders"}
	return map[string]leasetest.KCLTable{
		"single-v2": {Stream: single, Version: leasetest.KCLv2},
		"single-v3": {Stream: single, Version: leasetest.KCLv3},
		"multi-v2":  {Multi: true, Stream: kclStream, Version: leasetest.KCLv2},
		"multi-v3":  {Multi: true, Stream: kclStream, Version: leasetest.KCLv3},
	}
}

const (
	hashLow  = "0"
	hashMid  = "170141183460469231731687303715884105727"
	hashHigh = "340282366920938463463374607431768211455"
)

// kclFixtures are leases as a KCL application leaves them: a split parent
// read to its end, its children (one not started, one checkpointed inside
// a KPL aggregate and held by a worker, with a prepared checkpoint), and a
// shard that no record has reached since it was opened at LATEST.
func kclFixtures() []leasetest.KCLLease {
	return []leasetest.KCLLease{
		{ShardID: "shardId-000000000000", Counter: 41, Checkpoint: lease.CheckpointShardEnd, OwnerSwitches: 0,
			Children: []string{"shardId-000000000002", "shardId-000000000003"}, StartingHashKey: hashLow, EndingHashKey: hashHigh},
		{ShardID: "shardId-000000000001", Counter: 7, Checkpoint: lease.CheckpointLatest, StartingHashKey: hashLow, EndingHashKey: hashHigh},
		{ShardID: "shardId-000000000002", Counter: 3, Checkpoint: lease.CheckpointTrimHorizon,
			Parents: []string{"shardId-000000000000"}, StartingHashKey: hashLow, EndingHashKey: hashMid},
		{ShardID: "shardId-000000000003", Owner: "ip-10-0-0-7.ec2.internal:5b1e", Counter: 1234,
			Checkpoint: "49590338271490256608559692538361571095921575989136588898", SubSequence: 3, OwnerSwitches: 2,
			Parents: []string{"shardId-000000000000"}, StartingHashKey: "170141183460469231731687303715884105728", EndingHashKey: hashHigh,
			PendingCheckpoint: "49590338271490256608559692538361571095921575989136588999", PendingSubSequence: 0,
			CheckpointOwner: "ip-10-0-0-8.ec2.internal:77aa"},
	}
}

func TestKCLLayoutReadsKCLLeases(t *testing.T) {
	for name, tbl := range kclTables() {
		t.Run(name, func(t *testing.T) {
			layout := tbl.Layout()
			for _, f := range kclFixtures() {
				got, err := layout.Lease(tbl.Item(f), kclNS)
				if err != nil {
					t.Fatalf("%s: %v", f.ShardID, err)
				}
				want := lease.Lease{
					Key: lease.KeyFor(kclNS, f.ShardID), ShardID: f.ShardID, Owner: f.Owner, Counter: f.Counter,
					Checkpoint: f.Checkpoint, SubSequence: f.SubSequence, OwnerSwitchesSinceCheckpoint: f.OwnerSwitches,
					ParentShardIDs: f.Parents, ChildShardIDs: f.Children,
					StartingHashKey: f.StartingHashKey, EndingHashKey: f.EndingHashKey,
					// A KCL worker never answers a handoff request.
					ForeignOwner: f.Owner != "",
				}
				if diff := cmp.Diff(want, got); diff != "" {
					t.Errorf("%s read as (-want +got):\n%s", f.ShardID, diff)
				}
			}
		})
	}
}

func TestKCLLayoutRefusesOtherLayouts(t *testing.T) {
	single := kclTables()["single-v2"]
	multi := kclTables()["multi-v2"]
	f := kclFixtures()[1]
	if _, err := single.Layout().Lease(multi.Item(f), kclNS); err == nil {
		t.Error("a multi-stream lease read in the single-stream layout")
	}
	if _, err := single.Layout().Lease(single.Item(f), "orders-app/payments"); !errors.Is(err, lease.ErrInvalid) {
		t.Errorf("the single-stream table of orders read for stream payments: %v, want ErrInvalid", err)
	}
	other := lease.KCLStream{AccountID: "123456789012", Name: "orders", CreationEpoch: 1600000000} // recreated stream
	if _, err := lease.KCLMultiStream(other).Lease(multi.Item(f), kclNS); err == nil {
		t.Error("a lease of an older stream of the same name read as the new one's")
	}
	bad := single.Item(f)
	bad["leaseCounter"] = &types.AttributeValueMemberS{Value: "7"}
	if _, err := single.Layout().Lease(bad, kclNS); err == nil {
		t.Error("leaseCounter of type S accepted")
	}
}

// Every lease kinesisgen writes in the KCL layout reads back as a KCL lease
// with the KCL's meaning, and as the same lease in kinesisgen.
func TestKCLLayoutWritesKCLLeases(t *testing.T) {
	const seq = "49590338271490256608559692538361571095921575989136588898"
	cases := []struct {
		name   string
		l      lease.Lease
		kclCP  string // the checkpoint a KCL worker reads
		kclSub int64
	}{
		{"not read yet", lease.Lease{}, lease.CheckpointTrimHorizon, 0},
		{"pinned at an opening at Latest", lease.Lease{Checkpoint: lease.CheckpointAtTimestamp, SubSequence: 1764825600123}, lease.CheckpointLatest, 0},
		{"KCL AT_TIMESTAMP sentinel", lease.Lease{Checkpoint: lease.CheckpointAtTimestamp}, lease.CheckpointAtTimestamp, 0},
		{"record", lease.Lease{Checkpoint: seq}, seq, 0},
		{"inside an aggregate", lease.Lease{Checkpoint: seq, SubSequence: 4}, seq, 4},
		{"sought to", lease.Lease{Checkpoint: seq, SubSequence: -1}, seq, -1},
		{"held", lease.Lease{Checkpoint: seq, Owner: "svc-1", OwnerSwitchesSinceCheckpoint: 1, PendingOwner: "svc-2"}, seq, 0},
		{"read to its end", lease.Lease{Checkpoint: lease.CheckpointShardEnd, ChildShardIDs: []string{"shardId-000000000002", "shardId-000000000003"}}, lease.CheckpointShardEnd, 0},
	}
	for name, tbl := range kclTables() {
		for _, c := range cases {
			t.Run(name+"/"+c.name, func(t *testing.T) {
				l := c.l
				l.Key, l.ShardID, l.Counter = lease.KeyFor(kclNS, "shardId-000000000002"), "shardId-000000000002", 9
				l.ParentShardIDs, l.StartingHashKey, l.EndingHashKey = []string{"shardId-000000000000"}, hashLow, hashMid
				item, err := tbl.Layout().Item(l)
				if err != nil {
					t.Fatal(err)
				}
				kcl, err := tbl.ReadAsKCL(item)
				if err != nil {
					t.Fatalf("the KCL cannot read %v: %v", item, err)
				}
				if kcl.Checkpoint != c.kclCP || kcl.SubSequence != c.kclSub || kcl.ShardID != l.ShardID || kcl.Owner != l.Owner || kcl.Counter != l.Counter {
					t.Errorf("the KCL reads %+v, want checkpoint %s/%d of %s owned by %q at %d", kcl, c.kclCP, c.kclSub, l.ShardID, l.Owner, l.Counter)
				}
				back, err := tbl.Layout().Lease(item, kclNS)
				if err != nil {
					t.Fatal(err)
				}
				if diff := cmp.Diff(l, back); diff != "" {
					t.Errorf("read back (-wrote +read):\n%s", diff)
				}
			})
		}
	}
}

// A KCL worker that took a lease back and checkpointed it overrides what
// kinesisgen kept beside the KCL's checkpoint.
func TestKCLLayoutKCLCheckpointWins(t *testing.T) {
	tbl := kclTables()["single-v3"]
	l := lease.Lease{Key: lease.KeyFor(kclNS, "shardId-000000000001"), ShardID: "shardId-000000000001", Counter: 3,
		Checkpoint: lease.CheckpointAtTimestamp, SubSequence: 1764825600123, Owner: "svc-1"}
	item, err := tbl.Layout().Item(l)
	if err != nil {
		t.Fatal(err)
	}
	// The KCL takes it (leaseOwner only) and checkpoints a record.
	item["leaseOwner"] = &types.AttributeValueMemberS{Value: "kcl-worker"}
	item["checkpoint"] = &types.AttributeValueMemberS{Value: "4959"}
	got, err := tbl.Layout().Lease(item, kclNS)
	if err != nil {
		t.Fatal(err)
	}
	if got.Checkpoint != "4959" || got.SubSequence != 0 || !got.ForeignOwner {
		t.Errorf("read %+v, want the KCL's checkpoint 4959/0 and a foreign owner", got)
	}
}

// newKCLTable creates a lease table and puts items into it as the KCL wrote them.
func newKCLTable(t *testing.T, client *dynamodb.Client, tbl leasetest.KCLTable, items []map[string]types.AttributeValue, opts ...lease.DynamoDBOption) *lease.DynamoDB {
	t.Helper()
	name := freshTable(t)
	s := lease.NewDynamoDB(client, name, append([]lease.DynamoDBOption{lease.CreateTableIfMissing(), lease.TableWaitTimeout(30 * time.Second), lease.WithKCLLayout(tbl.Layout())}, opts...)...)
	ctx, cancel := context.WithTimeout(context.Background(), 40*time.Second)
	defer cancel()
	if err := s.EnsureTable(ctx); err != nil {
		t.Fatalf("EnsureTable: %v", err)
	}
	for _, item := range items {
		if _, err := client.PutItem(ctx, &dynamodb.PutItemInput{TableName: aws.String(name), Item: item}); err != nil {
			t.Fatalf("PutItem: %v", err)
		}
	}
	return s
}

func scanItems(t *testing.T, client *dynamodb.Client, table string) map[string]map[string]types.AttributeValue {
	t.Helper()
	out, err := client.Scan(context.Background(), &dynamodb.ScanInput{TableName: aws.String(table), ConsistentRead: aws.Bool(true)})
	if err != nil {
		t.Fatalf("Scan: %v", err)
	}
	items := map[string]map[string]types.AttributeValue{}
	for _, it := range out.Items {
		items[it["leaseKey"].(*types.AttributeValueMemberS).Value] = it
	}
	return items
}

// The store's writes in the KCL layout, on dynalite: what it sets and
// removes is what the KCL's own take, checkpoint and evict set and remove.
func TestKCLLayoutWritesOnDynamoDB(t *testing.T) {
	client := dynaliteClient(t)
	for _, name := range []string{"single-v2", "multi-v3"} {
		tbl := kclTables()[name]
		t.Run(name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			var items []map[string]types.AttributeValue
			for _, f := range kclFixtures() {
				items = append(items, tbl.Item(f))
			}
			// Not leases: a newer KCL's coordinator state in the lease table.
			items = append(items, map[string]types.AttributeValue{
				"leaseKey": &types.AttributeValueMemberS{Value: "Leader"}, "ownerName": &types.AttributeValueMemberS{Value: "w"},
				"leaseDuration": &types.AttributeValueMemberS{Value: "10000"}, "recordVersionNumber": &types.AttributeValueMemberS{Value: "r"},
			})
			s := newKCLTable(t, client, tbl, items)
			ls, err := s.List(ctx, kclNS)
			if err != nil {
				t.Fatal(err)
			}
			if len(ls) != len(kclFixtures()) {
				t.Fatalf("listed %d leases, want %d: %+v", len(ls), len(kclFixtures()), ls)
			}
			held := ls[3] // owned by a KCL worker, checkpoint owner set, a pending checkpoint
			if !held.ForeignOwner {
				t.Fatalf("%s: not a foreign owner", held.ShardID)
			}
			took, err := s.Take(ctx, held, "svc-1")
			if err != nil {
				t.Fatal(err)
			}
			if took.ForeignOwner || took.OwnerSwitchesSinceCheckpoint != 3 {
				t.Errorf("after take: %+v, want own and 3 owner switches (the KCL's +1)", took)
			}
			free, err := s.Take(ctx, ls[2], "svc-1")
			if err != nil {
				t.Fatal(err)
			}
			if free.OwnerSwitchesSinceCheckpoint != 0 {
				t.Errorf("taking an unowned lease counted an owner switch (the KCL does not): %d", free.OwnerSwitchesSinceCheckpoint)
			}
			cp, err := s.Checkpoint(ctx, took, "49590338271490256608559692538361571095921575989136589000", 2)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := s.Release(ctx, cp); err != nil {
				t.Fatal(err)
			}
			pin, err := s.Checkpoint(ctx, free, lease.CheckpointAtTimestamp, 1764825600123)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := s.Release(ctx, pin); err != nil {
				t.Fatal(err)
			}
			// A shard found after the take-over (a reshard) gets a lease the
			// KCL reads: not read yet is TRIM_HORIZON to it.
			child := lease.Lease{Key: lease.KeyFor(kclNS, "shardId-000000000009"), ShardID: "shardId-000000000009",
				ParentShardIDs: []string{"shardId-000000000003"}, StartingHashKey: hashMid, EndingHashKey: hashHigh}
			if created, err := s.Create(ctx, child); err != nil || !created {
				t.Fatalf("Create: %v, %v", created, err)
			}
			got := scanItems(t, client, s.Table())
			if kcl, err := tbl.ReadAsKCL(got[tbl.LeaseKey(child.ShardID)]); err != nil || kcl.Checkpoint != lease.CheckpointTrimHorizon || kcl.Owner != "" {
				t.Errorf("a created lease reads to the KCL as %+v, %v; want unowned at TRIM_HORIZON", kcl, err)
			}
			if back, err := s.Get(ctx, child.Key); err != nil || back.Checkpoint != "" {
				t.Errorf("a created lease reads back as %+v, %v; want no checkpoint", back, err)
			}
			heldItem := got[tbl.LeaseKey(held.ShardID)]
			for _, a := range []string{"leaseOwner", "checkpointOwner", "pendingCheckpoint", "pendingCheckpointSubSequenceNumber", "pendingCheckpointState"} {
				if _, ok := heldItem[a]; ok {
					t.Errorf("%s still set after take, checkpoint and release: %v", a, heldItem[a])
				}
			}
			if tbl.Version >= leasetest.KCLv3 {
				if _, ok := heldItem["throughputKBps"]; !ok {
					t.Error("throughputKBps dropped")
				}
			}
			for key, item := range got {
				if key == "Leader" {
					continue
				}
				kcl, err := tbl.ReadAsKCL(item)
				if err != nil {
					t.Errorf("%s: the KCL cannot read it: %v", key, err)
				}
				if kcl.Owner != "" && key != tbl.LeaseKey("shardId-000000000003") {
					t.Errorf("%s: owned by %s", key, kcl.Owner)
				}
			}
			if kcl, _ := tbl.ReadAsKCL(got[tbl.LeaseKey(free.ShardID)]); kcl.Checkpoint != lease.CheckpointLatest {
				t.Errorf("a pinned lease reads to the KCL as %s, want LATEST", kcl.Checkpoint)
			}
			if kcl, _ := tbl.ReadAsKCL(heldItem); kcl.Checkpoint != "49590338271490256608559692538361571095921575989136589000" || kcl.SubSequence != 2 {
				t.Errorf("the KCL reads checkpoint %s/%d", kcl.Checkpoint, kcl.SubSequence)
			}
			if _, err := s.List(ctx, "orders-app/payments"); !errors.Is(err, lease.ErrInvalid) {
				t.Errorf("List of another stream: %v, want ErrInvalid", err)
			}
			if _, err := s.Get(ctx, lease.LeaderKey(kclNS)); !errors.Is(err, lease.ErrInvalid) {
				t.Errorf("Get of a leader lock in a KCL table: %v, want ErrInvalid", err)
			}
			// KCL workers judge liveness by each lease's counter and would
			// read a members item as a lease: per-lease renewal only.
			if _, ok := lease.MembersOf(s); ok || !s.PerLeaseOnly() {
				t.Error("a KCL table offers liveness per instance")
			}
			if err := s.Heartbeat(ctx, kclNS, lease.Member{Owner: "svc-1", Beat: 1}); !errors.Is(err, lease.ErrInvalid) {
				t.Errorf("Heartbeat in a KCL table: %v, want ErrInvalid", err)
			}
		})
	}
}

// A KCL 3.x application's coordinator state: a migration from 2.x still in
// progress stops the take-over with a KCLMigrationError; a finished or
// rolled-back one does not. Items as the KCL writes them:
// coordinator/CoordinatorState.java (table hash key "key", leader item
// "Leader" with the DynamoDB lock client's ownerName, leaseDuration and
// recordVersionNumber), coordinator/migration/MigrationState.java (item
// "Migration3.0": cv, mb, mts (N, Unix ms), h (a list of past states)) and
// coordinator/migration/ClientVersion.java (the cv values).
func TestKCLCoordinatorState(t *testing.T) {
	client := dynaliteClient(t)
	s := func(v string) types.AttributeValue { return &types.AttributeValueMemberS{Value: v} }
	migration := func(key, cv string) map[string]types.AttributeValue {
		return map[string]types.AttributeValue{
			key: s("Migration3.0"), "cv": s(cv), "mb": s("ip-10-0-0-7.ec2.internal:5b1e"),
			"mts": &types.AttributeValueMemberN{Value: "1764825600000"},
			"h": &types.AttributeValueMemberL{Value: []types.AttributeValue{&types.AttributeValueMemberM{Value: map[string]types.AttributeValue{
				"cv": s("CLIENT_VERSION_INIT"), "mb": s("ip-10-0-0-7.ec2.internal:5b1e"), "mts": &types.AttributeValueMemberN{Value: "1764825500000"},
			}}}},
		}
	}
	leader := map[string]types.AttributeValue{
		"key": s("Leader"), "ownerName": s("ip-10-0-0-7.ec2.internal:5b1e"), "leaseDuration": s("20000"), "recordVersionNumber": s("9f1c"),
	}
	tbl := kclTables()["single-v3"]
	cases := []struct {
		cv         string
		inLease    bool // a newer KCL keeps it in the lease table
		inProgress bool
	}{
		{"CLIENT_VERSION_UPGRADE_FROM_2X", false, true},
		{"CLIENT_VERSION_3X_WITH_ROLLBACK", false, true},
		{"CLIENT_VERSION_INIT", false, true},
		{"CLIENT_VERSION_3X_WITH_ROLLBACK", true, true},
		{"CLIENT_VERSION_3X", false, false},
		{"CLIENT_VERSION_3X", true, false}, // the item in the lease table is no lease
		{"CLIENT_VERSION_2X", false, false},
		{"", false, false}, // no coordinator state table: a KCL 2.x application
	}
	for _, c := range cases {
		t.Run(c.cv+"/lease-table="+strconv.FormatBool(c.inLease), func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 40*time.Second)
			defer cancel()
			table := freshTable(t)
			var leaseItems []map[string]types.AttributeValue
			if c.cv != "" && c.inLease {
				leaseItems = append(leaseItems, migration("leaseKey", c.cv))
			}
			if c.cv != "" && !c.inLease {
				coord := table + "-CoordinatorState"
				if err := leasetest.CreateKCLTable(ctx, client, coord, "key"); err != nil {
					t.Fatal(err)
				}
				for _, it := range []map[string]types.AttributeValue{migration("key", c.cv), leader} {
					if _, err := client.PutItem(ctx, &dynamodb.PutItemInput{TableName: aws.String(coord), Item: it}); err != nil {
						t.Fatal(err)
					}
				}
			}
			// The lease table first, as the KCL left it.
			if err := leasetest.CreateKCLTable(ctx, client, table, "leaseKey"); err != nil {
				t.Fatal(err)
			}
			for _, it := range append(leaseItems, tbl.Item(kclFixtures()[2])) {
				if _, err := client.PutItem(ctx, &dynamodb.PutItemInput{TableName: aws.String(table), Item: it}); err != nil {
					t.Fatal(err)
				}
			}
			st := lease.NewDynamoDB(client, table, lease.WithKCLLayout(tbl.Layout()))
			ls, err := st.List(ctx, kclNS)
			if !c.inProgress {
				if err != nil || len(ls) != 1 {
					t.Fatalf("List: %d leases, %v; want the one lease", len(ls), err)
				}
				return
			}
			var me *lease.KCLMigrationError
			if !errors.Is(err, lease.ErrKCLMigration) || !errors.As(err, &me) {
				t.Fatalf("List: %v, want a KCLMigrationError", err)
			}
			if me.ClientVersion != c.cv || me.ModifiedBy != "ip-10-0-0-7.ec2.internal:5b1e" || me.ModifiedAt.UnixMilli() != 1764825600000 {
				t.Errorf("error says %+v", me)
			}
			state, err := lease.ReadKCLCoordinatorState(ctx, client, table, "")
			if err != nil {
				t.Fatal(err)
			}
			if !c.inLease && (state.Leader != "ip-10-0-0-7.ec2.internal:5b1e" || state.LeaderDuration != 20*time.Second) {
				t.Errorf("leader lock read as %+v", state)
			}
		})
	}
}

// The KCL's CoordinatorStateDAO reads a coordinator-state entry from the
// legacy coordinator-state table first and falls back to the lease table,
// and its leader lock lives in the legacy table until the table migration
// is COMPLETE, then in the lease table; while workers cross from PENDING to
// COMPLETE either table's lock may be the one held. So a migration-state
// item in the legacy table wins over one in the lease table, and a lock
// held in the lease table is reported even when a released one is left in
// the legacy table.
func TestKCLCoordinatorStateBothTables(t *testing.T) {
	client := dynaliteClient(t)
	ctx, cancel := context.WithTimeout(context.Background(), 40*time.Second)
	defer cancel()
	s := func(v string) types.AttributeValue { return &types.AttributeValueMemberS{Value: v} }
	n := func(v string) types.AttributeValue { return &types.AttributeValueMemberN{Value: v} }
	table := freshTable(t)
	coord := table + "-CoordinatorState"
	if err := leasetest.CreateKCLTable(ctx, client, coord, "key"); err != nil {
		t.Fatal(err)
	}
	if err := leasetest.CreateKCLTable(ctx, client, table, "leaseKey"); err != nil {
		t.Fatal(err)
	}
	put := func(table string, item map[string]types.AttributeValue) {
		t.Helper()
		if _, err := client.PutItem(ctx, &dynamodb.PutItemInput{TableName: aws.String(table), Item: item}); err != nil {
			t.Fatal(err)
		}
	}
	put(coord, map[string]types.AttributeValue{"key": s("Migration3.0"), "cv": s("CLIENT_VERSION_3X"), "mb": s("w1"), "mts": n("1764825600000")})
	put(table, map[string]types.AttributeValue{"leaseKey": s("Migration3.0"), "cv": s("CLIENT_VERSION_UPGRADE_FROM_2X"), "mb": s("w0"), "mts": n("1764825500000")})
	put(coord, map[string]types.AttributeValue{"key": s("Leader"), "ownerName": s("w1"), "leaseDuration": s("20000"), "recordVersionNumber": s("a1"), "isReleased": s("1")})
	put(table, map[string]types.AttributeValue{"leaseKey": s("Leader"), "ownerName": s("w2"), "leaseDuration": s("20000"), "recordVersionNumber": s("b2")})

	st, err := lease.ReadKCLCoordinatorState(ctx, client, table, "")
	if err != nil {
		t.Fatal(err)
	}
	if st.ClientVersion != "CLIENT_VERSION_3X" || st.Table != coord || st.Err() != nil {
		t.Errorf("migration state read as %q from %s (err %v), want CLIENT_VERSION_3X from the legacy table %s", st.ClientVersion, st.Table, st.Err(), coord)
	}
	if st.Leader != "w2" || st.LeaderReleased || st.LeaderTable != table {
		t.Errorf("leader lock read as owner %q released=%v in %s, want the lock w2 holds in the lease table %s", st.Leader, st.LeaderReleased, st.LeaderTable, table)
	}
}
