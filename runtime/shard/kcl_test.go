package shard_test

import (
	"context"
	"errors"
	"fmt"
	"math/big"
	"slices"
	"sort"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	ddbtypes "github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/aws/aws-sdk-go-v2/service/kinesis"

	"github.com/kinesisgen/kinesisgen/internal/livetest"
	"github.com/kinesisgen/kinesisgen/runtime/kinesistest"
	"github.com/kinesisgen/kinesisgen/runtime/kpl"
	"github.com/kinesisgen/kinesisgen/runtime/lease"
	"github.com/kinesisgen/kinesisgen/runtime/lease/leasetest"
	"github.com/kinesisgen/kinesisgen/runtime/shard"
)

// Taking over a Java KCL application's lease table, and handing it back.
//
// The table holds what a KCL application cutting over leaves behind (item
// shapes from the KCL's DynamoDBLeaseSerializer and
// DynamoDBMultiStreamLeaseSerializer: see leasetest/kcl.go for the source
// of every attribute), over a stream of four shards, the first split in
// two:
//
//	shardId-000000000000  split parent, read to its end: SHARD_END, childShardIds
//	shardId-000000000001  checkpointed inside a KPL aggregate (sub-sequence 2),
//	                      held by a KCL worker that died, with a prepared
//	                      checkpoint (and, from 3.x, a checkpointOwner)
//	shardId-000000000002  LATEST (the application starts at LATEST, no record read yet)
//	shardId-000000000003  AT_TIMESTAMP (the application's start timestamp)
//	shardId-000000000004  child, not started: TRIM_HORIZON
//	shardId-000000000005  child, checkpointed at its second record, held by
//	                      a KCL worker still renewing it for a while
//
// kinesisgen must deliver exactly what the KCL would have delivered next:
// nothing of the parent, the aggregate from sub-record 3 on, the LATEST
// shard from when it opened it, the AT_TIMESTAMP shard from the
// application's timestamp, every record of the new child, and the held
// child only once its worker stopped renewing and the failover time
// passed. After it stops, every item must read as a KCL lease of the same
// layout, released, checkpointed at the last record it delivered.
func TestKCLTakeOverAndRollBack(t *testing.T) {
	single := lease.KCLStream{Name: "orders"}
	multi := lease.KCLStream{AccountID: "123456789012", Name: "orders", CreationEpoch: 1700000000}
	tables := []struct {
		name string
		tbl  leasetest.KCLTable
	}{
		{"single-v2", leasetest.KCLTable{Stream: single, Version: leasetest.KCLv2}},
		{"single-v3", leasetest.KCLTable{Stream: single, Version: leasetest.KCLv3}},
		{"multi-v2", leasetest.KCLTable{Multi: true, Stream: multi, Version: leasetest.KCLv2}},
		{"multi-v3", leasetest.KCLTable{Multi: true, Stream: multi, Version: leasetest.KCLv3}},
	}
	for _, store := range []string{"memory", "dynamodb"} {
		for _, tc := range tables {
			if store == "dynamodb" && (tc.name == "single-v3" || tc.name == "multi-v2") {
				continue // the store's part is the layout: single and multi suffice (seconds each)
			}
			t.Run(store+"/"+tc.name, func(t *testing.T) {
				t.Parallel()
				var ddb *dynamodb.Client
				if store == "dynamodb" {
					ddb = dynamoClient(t)
				}
				runKCLTakeOver(t, tc.tbl, ddb, false)
			})
		}
	}
}

// The KCL deletes a split parent's lease once its children have started
// (LeaseCleanupManager), while the stream still lists the parent: the
// parent counts as read to its end, gets no new lease and is not read
// again, and its children start. The application starts at TRIM_HORIZON
// here, so reading the parent again would show.
func TestKCLTakeOverAfterLeaseCleanup(t *testing.T) {
	for _, tc := range []struct {
		name string
		tbl  leasetest.KCLTable
	}{
		{"memory/single-v2", leasetest.KCLTable{Stream: lease.KCLStream{Name: "orders"}, Version: leasetest.KCLv2}},
		{"memory/multi-v3", leasetest.KCLTable{Multi: true, Stream: lease.KCLStream{AccountID: "123456789012", Name: "orders", CreationEpoch: 1700000000}, Version: leasetest.KCLv3}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			runKCLTakeOver(t, tc.tbl, nil, true)
		})
	}
}

func dynamoClient(t *testing.T) *dynamodb.Client {
	url := livetest.DynamoDBEndpoint(t)
	return dynamodb.NewFromConfig(aws.Config{
		Region:      "us-east-1",
		Credentials: credentials.NewStaticCredentialsProvider("x", "x", ""),
	}, func(o *dynamodb.Options) { o.BaseEndpoint = aws.String(url) })
}

const (
	kclParent    = "shardId-000000000000"
	kclAggregate = "shardId-000000000001"
	kclLatest    = "shardId-000000000002"
	kclTimestamp = "shardId-000000000003"
	kclNewChild  = "shardId-000000000004"
	kclHeldChild = "shardId-000000000005"
	kclLiveOwner = "ip-10-0-0-7.ec2.internal:5b1e0f52-0c5e-4a4e-9d6b-8a3e0c1f2a77"
	kclDeadOwner = "ip-10-0-0-9.ec2.internal:0d9c2f13-7e41-4b8a-a1c5-3f9e6b2d4c10"
)

// kclStream is the stream the KCL application read, on the in-process
// Kinesis, with the records it holds and where they landed.
type kclStream struct {
	srv    *kinesistest.Server
	starts map[string]string    // shard -> starting hash key
	ranges map[string][2]string // shard -> hash key range
	seqs   map[string]string    // record data -> sequence number
	mu     sync.Mutex
	// latestAt is when l:0 was written: kinesisgen pins an opening at
	// Latest a second before it (records just before may be read again),
	// so the take-over starts more than that after.
	latestAt time.Time
}

func newKCLStream(t *testing.T) (*kclStream, time.Time) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	k := &kclStream{srv: kinesistest.New(), starts: map[string]string{}, ranges: map[string][2]string{}, seqs: map[string]string{}}
	if _, err := k.srv.CreateStream(ctx, &kinesis.CreateStreamInput{StreamName: aws.String("orders"), ShardCount: aws.Int32(4)}); err != nil {
		t.Fatal(err)
	}
	for {
		out, err := k.srv.DescribeStreamSummary(ctx, &kinesis.DescribeStreamSummaryInput{StreamName: aws.String("orders")})
		if err == nil && out.StreamDescriptionSummary.StreamStatus == "ACTIVE" {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	k.list(t)
	// Written before the application's LATEST: never read.
	k.put(t, kclLatest, "l:0")
	k.latestAt = time.Now()
	for i := range 3 {
		k.put(t, kclParent, fmt.Sprintf("a:%d", i))
	}
	subs := make([]kpl.Record, 5)
	for i := range subs {
		subs[i] = kpl.Record{PartitionKey: fmt.Sprintf("b%d", i), ExplicitHashKey: k.starts[kclAggregate], Data: fmt.Appendf(nil, "b:%d", i)}
	}
	k.putData(t, kclAggregate, "b:aggregate", kpl.Aggregate(subs))
	k.put(t, kclAggregate, "b:5")
	k.put(t, kclTimestamp, "t:0")
	time.Sleep(20 * time.Millisecond)
	at := time.Now()
	time.Sleep(20 * time.Millisecond)
	k.put(t, kclTimestamp, "t:1")
	// Split the parent in the middle of its range.
	lo, _ := new(big.Int).SetString(k.ranges[kclParent][0], 10)
	hi, _ := new(big.Int).SetString(k.ranges[kclParent][1], 10)
	mid := new(big.Int).Rsh(new(big.Int).Add(lo, hi), 1)
	if _, err := k.srv.SplitShard(ctx, &kinesis.SplitShardInput{StreamName: aws.String("orders"), ShardToSplit: aws.String(kclParent), NewStartingHashKey: aws.String(mid.String())}); err != nil {
		t.Fatal(err)
	}
	for {
		out, err := k.srv.DescribeStreamSummary(ctx, &kinesis.DescribeStreamSummaryInput{StreamName: aws.String("orders")})
		if err == nil && out.StreamDescriptionSummary.StreamStatus == "ACTIVE" {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	k.list(t)
	if _, ok := k.starts[kclHeldChild]; !ok {
		t.Fatalf("the split made no %s: %v", kclHeldChild, k.starts)
	}
	for i := range 3 {
		k.put(t, kclNewChild, fmt.Sprintf("c:%d", i))
	}
	for i := range 5 {
		k.put(t, kclHeldChild, fmt.Sprintf("h:%d", i))
	}
	return k, at
}

func (k *kclStream) list(t *testing.T) {
	t.Helper()
	out, err := k.srv.ListShards(context.Background(), &kinesis.ListShardsInput{StreamName: aws.String("orders")})
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range out.Shards {
		id := aws.ToString(s.ShardId)
		k.starts[id] = aws.ToString(s.HashKeyRange.StartingHashKey)
		k.ranges[id] = [2]string{aws.ToString(s.HashKeyRange.StartingHashKey), aws.ToString(s.HashKeyRange.EndingHashKey)}
	}
}

func (k *kclStream) put(t *testing.T, shardID, data string) {
	k.putData(t, shardID, data, []byte(data))
}

func (k *kclStream) putData(t *testing.T, shardID, name string, data []byte) {
	t.Helper()
	out, err := k.srv.PutRecord(context.Background(), &kinesis.PutRecordInput{
		StreamName: aws.String("orders"), PartitionKey: aws.String("k"), ExplicitHashKey: aws.String(k.starts[shardID]), Data: data,
	})
	if err != nil {
		t.Fatal(err)
	}
	if got := aws.ToString(out.ShardId); got != shardID {
		t.Fatalf("%s landed on %s, want %s", name, got, shardID)
	}
	k.mu.Lock()
	k.seqs[name] = aws.ToString(out.SequenceNumber)
	k.mu.Unlock()
}

func (k *kclStream) seq(name string) string {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.seqs[name]
}

// fixtures are the KCL's leases of the stream, as described above.
func (k *kclStream) fixtures() []leasetest.KCLLease {
	r := func(id string) (string, string) { return k.ranges[id][0], k.ranges[id][1] }
	var out []leasetest.KCLLease
	add := func(l leasetest.KCLLease) {
		l.StartingHashKey, l.EndingHashKey = r(l.ShardID)
		out = append(out, l)
	}
	add(leasetest.KCLLease{ShardID: kclParent, Counter: 812, Checkpoint: lease.CheckpointShardEnd, Children: []string{kclNewChild, kclHeldChild}})
	add(leasetest.KCLLease{ShardID: kclAggregate, Owner: kclDeadOwner, Counter: 5120, OwnerSwitches: 1,
		Checkpoint: k.seq("b:aggregate"), SubSequence: 2,
		PendingCheckpoint: k.seq("b:5"), CheckpointOwner: kclLiveOwner})
	add(leasetest.KCLLease{ShardID: kclLatest, Counter: 17, Checkpoint: lease.CheckpointLatest})
	add(leasetest.KCLLease{ShardID: kclTimestamp, Counter: 4, Checkpoint: lease.CheckpointAtTimestamp})
	add(leasetest.KCLLease{ShardID: kclNewChild, Counter: 2, Checkpoint: lease.CheckpointTrimHorizon, Parents: []string{kclParent}})
	add(leasetest.KCLLease{ShardID: kclHeldChild, Owner: kclLiveOwner, Counter: 300, Checkpoint: k.seq("h:1"), Parents: []string{kclParent}})
	return out
}

// kclStore is the lease table in one store: items put as the KCL wrote
// them, a KCL worker's renewal, and every item as it is now.
type kclStore struct {
	store lease.Store
	renew func(ctx context.Context) error // the live KCL worker renews its lease
	items func(t *testing.T) []map[string]ddbtypes.AttributeValue
}

const kclNS = "orders-app/orders"

func newKCLStore(t *testing.T, tbl leasetest.KCLTable, ddb *dynamodb.Client, fixtures []leasetest.KCLLease) kclStore {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 40*time.Second)
	defer cancel()
	layout := tbl.Layout()
	if ddb == nil {
		// The memory store holds leases, not items: load them as the KCL
		// layout reads the KCL's items, and lay them out again to check them.
		m := lease.NewMemory()
		for _, f := range fixtures {
			l, err := layout.Lease(tbl.Item(f), kclNS)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := m.Create(ctx, l); err != nil {
				t.Fatal(err)
			}
		}
		key := lease.KeyFor(kclNS, kclHeldChild)
		return kclStore{
			store: m,
			renew: func(ctx context.Context) error {
				l, err := m.Get(ctx, key)
				if err != nil {
					return err
				}
				_, err = m.Renew(ctx, l)
				return err
			},
			items: func(t *testing.T) []map[string]ddbtypes.AttributeValue {
				ls, err := m.List(context.Background(), kclNS)
				if err != nil {
					t.Fatal(err)
				}
				var out []map[string]ddbtypes.AttributeValue
				for _, l := range ls {
					item, err := layout.Item(l)
					if err != nil {
						t.Fatal(err)
					}
					out = append(out, item)
				}
				return out
			},
		}
	}
	table := fmt.Sprintf("kcl-%d-%d", time.Now().UnixNano(), streamSeq.Add(1))
	d := lease.NewDynamoDB(ddb, table, lease.CreateTableIfMissing(), lease.TableWaitTimeout(30*time.Second), lease.WithKCLLayout(layout))
	if err := d.EnsureTable(ctx); err != nil {
		t.Fatal(err)
	}
	for _, f := range fixtures {
		if _, err := ddb.PutItem(ctx, &dynamodb.PutItemInput{TableName: aws.String(table), Item: tbl.Item(f)}); err != nil {
			t.Fatal(err)
		}
	}
	return kclStore{
		store: d,
		// As the KCL's DynamoDBLeaseRefresher.renewLease: counter + 1,
		// conditional on the counter and owner it holds.
		renew: func(ctx context.Context) error {
			key := map[string]ddbtypes.AttributeValue{"leaseKey": &ddbtypes.AttributeValueMemberS{Value: tbl.LeaseKey(kclHeldChild)}}
			out, err := ddb.GetItem(ctx, &dynamodb.GetItemInput{TableName: aws.String(table), Key: key, ConsistentRead: aws.Bool(true)})
			if err != nil {
				return err
			}
			c := out.Item["leaseCounter"]
			_, err = ddb.UpdateItem(ctx, &dynamodb.UpdateItemInput{
				TableName: aws.String(table), Key: key,
				UpdateExpression:          aws.String("SET leaseCounter = leaseCounter + :one"),
				ConditionExpression:       aws.String("leaseCounter = :c AND leaseOwner = :o"),
				ExpressionAttributeValues: map[string]ddbtypes.AttributeValue{":one": &ddbtypes.AttributeValueMemberN{Value: "1"}, ":c": c, ":o": &ddbtypes.AttributeValueMemberS{Value: kclLiveOwner}},
			})
			return err
		},
		items: func(t *testing.T) []map[string]ddbtypes.AttributeValue {
			out, err := ddb.Scan(context.Background(), &dynamodb.ScanInput{TableName: aws.String(table), ConsistentRead: aws.Bool(true)})
			if err != nil {
				t.Fatal(err)
			}
			return out.Items
		},
	}
}

func runKCLTakeOver(t *testing.T, tbl leasetest.KCLTable, ddb *dynamodb.Client, cleaned bool) {
	k, at := newKCLStream(t)
	fixtures := k.fixtures()
	start := shard.Position{Kind: shard.AtTimestamp, Time: at} // the application started at its timestamp: AT_TIMESTAMP means it
	before := []string{"c:0", "c:1", "c:2", "l:1", "t:1"}
	if cleaned {
		fixtures = fixtures[1:] // the parent's lease is gone
		// Without a start timestamp, the KCL's AT_TIMESTAMP sentinel reads
		// from the horizon: nothing is skipped.
		start = shard.Position{Kind: shard.Horizon}
		before = append(before, "t:0")
	}
	ks := newKCLStore(t, tbl, ddb, fixtures)

	// The live KCL worker renews its lease (every 100 ms, its failover
	// time being 500 ms) until told to stop. A renewal the store refuses
	// (the counter or owner moved) means its lease was taken while it
	// renewed. One the store did not answer within the worker's deadline
	// (dynalite under CI load: 'UpdateItem ... context deadline
	// exceeded') is the store's trouble: the worker renews again at its
	// next tick, as the KCL does, and its outcome is unknown: it counts
	// as the last renewal, the later one, for the bound below.
	stopRenew := make(chan struct{})
	renewed := make(chan time.Time, 1)
	go func() {
		tick := time.NewTicker(100 * time.Millisecond)
		defer tick.Stop()
		var last time.Time // when the last renewal that may have landed was sent
		for {
			select {
			case <-stopRenew:
				renewed <- last
				return
			case <-tick.C:
				ctx, cancel := context.WithTimeout(context.Background(), time.Second)
				sent := time.Now()
				switch err := ks.renew(ctx); {
				case err == nil:
					last = sent
				case errors.Is(err, context.DeadlineExceeded):
					last = sent
					t.Logf("the KCL worker's renewal got no answer in time (retried at its next tick): %v", err)
				default:
					t.Errorf("the KCL worker's renewal failed: its lease was taken while it renewed: %v", err)
				}
				cancel()
			}
		}
	}()
	// A test that fails before it stops the worker must still stop it: an
	// Errorf after the test ended panics the whole test binary.
	stop := sync.OnceFunc(func() { close(stopRenew) })
	t.Cleanup(stop)

	col := newCollector()
	var firstMu sync.Mutex
	first := map[string]time.Time{} // shard -> when its first record was delivered
	sink := func(ctx context.Context, rs []shard.Record) (int, error) {
		now := time.Now()
		firstMu.Lock()
		for _, r := range rs {
			if _, ok := first[r.ShardID]; !ok {
				first[r.ShardID] = now
			}
		}
		firstMu.Unlock()
		return col.sink(ctx, rs)
	}
	cfg := shard.Config{
		Stream: "orders", Namespace: kclNS, Client: k.srv, Leases: ks.store, Owner: "svc-1", Sink: sink,
		Start: start,
		Poll:  200 * time.Millisecond, Sync: 100 * time.Millisecond, Renew: 50 * time.Millisecond,
		Failover: 500 * time.Millisecond, Checkpoint: 20 * time.Millisecond, Logger: testLogger(),
		// The runtime's default. A KCL table keeps no roster
		// (lease.PerLeaseOnly): nothing of it may be written there, which
		// the count of the table's items at the end checks.
		Roster: true,
	}
	if ddb == nil {
		// The KCL layout selects per-lease renewal (the DynamoDB store says
		// lease.PerLeaseOnly); the memory store stands in for it here.
		cfg.Liveness = shard.LivenessPerLease
	}
	if ddb != nil {
		// Lease calls on a loaded dynalite take longer than a 500 ms
		// failover time allows (a reader fences itself: duplicates).
		cfg.Failover, cfg.Renew = 1500*time.Millisecond, 150*time.Millisecond
	}
	time.Sleep(time.Until(k.latestAt.Add(1200 * time.Millisecond)))
	c, err := shard.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := c.Start(ctx); err != nil {
		t.Fatalf("Start: %v", err)
	}
	stopped := false
	defer func() {
		if !stopped {
			_ = c.Stop(context.Background())
		}
	}()

	// The live worker's lease is not taken while it renews, for twice the
	// failover time. (The worker counts for the fair share meanwhile: the
	// rest of the leases are shared between it and this instance.)
	time.Sleep(2 * cfg.Failover)
	if slices.Contains(c.Owned(), kclHeldChild) {
		t.Fatalf("took %s from a KCL worker that renews it", kclHeldChild)
	}
	for _, r := range col.records() {
		if r.ShardID == kclHeldChild {
			t.Fatalf("read %s (%s) while a KCL worker held it", r.Data, kclHeldChild)
		}
	}
	if len(c.Owned()) == 0 {
		t.Fatal("took no lease beside the KCL worker")
	}
	stop()
	lastRenewal := <-renewed

	// Once it has expired, every lease is this instance's. The LATEST
	// shard is read from when it was opened.
	eventually(t, 15*time.Second, "the LATEST shard opened", func() bool { return slices.Contains(c.Reading(), kclLatest) })
	k.put(t, kclLatest, "l:1")
	all := append(before, "b:3", "b:4", "b:5", "h:2", "h:3", "h:4")
	col.wait(t, 15*time.Second, "every record after the KCL's checkpoints", func(rs []*shard.Record) bool { return hasAll(rs, all) })
	firstMu.Lock()
	took := first[kclHeldChild]
	firstMu.Unlock()
	if took.Sub(lastRenewal) < cfg.Failover {
		t.Errorf("the dead KCL worker's lease was read %v after its last renewal, before the failover time %v", took.Sub(lastRenewal), cfg.Failover)
	}
	// Nothing before the KCL's checkpoints; a repeat is what at least once
	// allows (a reader that fenced itself on a slow lease table), and is
	// only logged.
	var got []string
	seen := map[string]bool{}
	for _, r := range col.records() {
		d := string(r.Data)
		if !slices.Contains(all, d) {
			t.Errorf("delivered %s of %s, which the KCL had processed (or never would have)", d, r.ShardID)
		}
		if seen[d] {
			t.Logf("delivered %s again", d)
		}
		seen[d] = true
		got = append(got, d)
	}
	sort.Strings(got)
	t.Logf("delivered %v", got)

	// Roll back: stop (checkpoint and release), then every item must be a
	// KCL lease of the same layout, released, at the last record delivered.
	sctx, scancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer scancel()
	if err := c.Stop(sctx); err != nil {
		t.Fatalf("Stop: %v", err)
	}
	stopped = true
	wantCP := map[string][2]any{
		kclParent:    {lease.CheckpointShardEnd, int64(0)},
		kclAggregate: {k.seq("b:5"), int64(0)},
		kclLatest:    {k.seq("l:1"), int64(0)},
		kclTimestamp: {k.seq("t:1"), int64(0)},
		kclNewChild:  {k.seq("c:2"), int64(0)},
		kclHeldChild: {k.seq("h:4"), int64(0)},
	}
	if cleaned {
		delete(wantCP, kclParent)
	}
	items := ks.items(t)
	if len(items) != len(wantCP) {
		t.Errorf("the table holds %d items, want the %d leases", len(items), len(wantCP))
	}
	for _, item := range items {
		kcl, err := tbl.ReadAsKCL(item)
		if err != nil {
			t.Errorf("item %v does not read as a KCL lease: %v", item["leaseKey"], err)
			continue
		}
		w, ok := wantCP[kcl.ShardID]
		if !ok {
			t.Errorf("unexpected item %s", kcl.LeaseKey)
			continue
		}
		if kcl.Owner != "" || kcl.CheckpointOwner != "" {
			t.Errorf("%s: still owned (%q, checkpoint owner %q) after the stop", kcl.ShardID, kcl.Owner, kcl.CheckpointOwner)
		}
		if kcl.Checkpoint != w[0] || kcl.SubSequence != w[1] {
			t.Errorf("%s: the KCL resumes after %s/%d, want %s/%d", kcl.ShardID, kcl.Checkpoint, kcl.SubSequence, w[0], w[1])
		}
		if kcl.ShardID == kclAggregate && kcl.Pending {
			t.Errorf("%s: the KCL's prepared checkpoint survived kinesisgen's checkpoint", kcl.ShardID)
		}
	}
}

func hasAll(rs []*shard.Record, want []string) bool {
	got := map[string]bool{}
	for _, r := range rs {
		got[string(r.Data)] = true
	}
	for _, w := range want {
		if !got[w] {
			return false
		}
	}
	return true
}

// An instance that asked a peer for a lease does not take it by force once a
// KCL worker has taken it meanwhile (in a table both fleets share for a
// while): the KCL worker would never answer the request, and its lease is
// taken only when it expires.
func TestHandoffNotForcedFromKCLWorker(t *testing.T) {
	e, _ := memEnv(t, 2)
	ctx := e.ctx(20 * time.Second)
	ns := "test/" + e.stream
	mem := e.store.(*lease.Memory)
	var keys []string
	for _, id := range e.shards() {
		l := lease.Lease{Key: lease.KeyFor(ns, id), ShardID: id, Owner: "svc-2", Checkpoint: lease.CheckpointTrimHorizon}
		if _, err := mem.Create(ctx, l); err != nil {
			t.Fatal(err)
		}
		keys = append(keys, l.Key)
	}
	// svc-2 renews both leases and never answers a handoff request; after
	// the swap below, the KCL worker renews the one it took.
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			select {
			case <-stop:
				return
			case <-time.After(50 * time.Millisecond):
			}
			for _, k := range keys {
				if l, err := mem.Get(ctx, k); err == nil {
					_, _ = mem.Renew(ctx, l)
				}
			}
		}
	}()
	defer func() { close(stop); <-done }()

	c := e.start(e.config("svc-1", newCollector().sink))
	var asked lease.Lease
	eventually(t, 10*time.Second, "svc-1 asking svc-2 for a lease", func() bool {
		for _, k := range keys {
			if l, err := mem.Get(ctx, k); err == nil && l.PendingOwner == "svc-1" {
				asked = l
				return true
			}
		}
		return false
	})
	// A KCL worker takes it (the KCL's take leaves pendingOwner alone).
	if err := mem.Delete(ctx, asked); err != nil {
		t.Fatal(err)
	}
	asked.Owner, asked.ForeignOwner, asked.Counter = kclLiveOwner, true, asked.Counter+1
	if _, err := mem.Create(ctx, asked); err != nil {
		t.Fatal(err)
	}
	time.Sleep(4 * e.config("", nil).Failover) // well past the handoff time
	if slices.Contains(c.Owned(), asked.ShardID) {
		t.Fatalf("took %s by force from a KCL worker that renews it", asked.ShardID)
	}
	if l, _ := mem.Get(ctx, asked.Key); l.Owner != kclLiveOwner {
		t.Fatalf("%s is now %s's", asked.ShardID, l.Owner)
	}
}
