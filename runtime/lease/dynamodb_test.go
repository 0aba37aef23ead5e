package lease_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/kinesisgen/kinesisgen/internal/livetest"
	"github.com/kinesisgen/kinesisgen/runtime/lease"
	"github.com/kinesisgen/kinesisgen/runtime/lease/leasetest"
)

var tableSeq atomic.Int64

// dynaliteClient returns a client for the local dynalite (skips without it).
func dynaliteClient(t testing.TB) *dynamodb.Client {
	url := livetest.DynamoDBEndpoint(t)
	return dynamodb.NewFromConfig(aws.Config{
		Region:      "us-east-1",
		Credentials: credentials.NewStaticCredentialsProvider("x", "x", ""),
	}, func(o *dynamodb.Options) { o.BaseEndpoint = aws.String(url) })
}

// freshTable returns a table name no other test uses.
func freshTable(t testing.TB) string {
	return fmt.Sprintf("leases-%d-%d", time.Now().UnixNano(), tableSeq.Add(1))
}

// newDynamo returns a store on a fresh table, created (and waited for) now.
func newDynamo(t testing.TB, api lease.DynamoDBAPI) *lease.DynamoDB {
	t.Helper()
	s := lease.NewDynamoDB(api, freshTable(t), lease.CreateTableIfMissing(), lease.TableWaitTimeout(30*time.Second))
	ctx, cancel := context.WithTimeout(context.Background(), 40*time.Second)
	defer cancel()
	if err := s.EnsureTable(ctx); err != nil {
		t.Fatalf("EnsureTable: %v", err)
	}
	return s
}

func TestDynamoDBConformance(t *testing.T) {
	client := dynaliteClient(t)
	leasetest.Run(t, func(t *testing.T) lease.Store { return newDynamo(t, client) })
}

func TestDynamoDBMembers(t *testing.T) {
	client := dynaliteClient(t)
	leasetest.RunMembers(t, func(t *testing.T) lease.MemberStore { return newDynamo(t, client) })
}

func TestDynamoDBLookup(t *testing.T) {
	client := dynaliteClient(t)
	leasetest.RunLookup(t, func(t *testing.T) lease.Store { return newDynamo(t, client) })
}

func TestDynamoDBLeader(t *testing.T) {
	client := dynaliteClient(t)
	leasetest.RunLeader(t, func(t *testing.T) lease.Store { return newDynamo(t, client) })
}

// landTwice sends every UpdateItem twice and answers with the second reply:
// what the client sees when a write lands but its reply is lost and the
// retryer sends it again.
type landTwice struct {
	lease.DynamoDBAPI
	between func() // runs between the two attempts, if set
}

func (f landTwice) UpdateItem(ctx context.Context, in *dynamodb.UpdateItemInput, opts ...func(*dynamodb.Options)) (*dynamodb.UpdateItemOutput, error) {
	if _, err := f.DynamoDBAPI.UpdateItem(ctx, in, opts...); err != nil {
		return nil, err
	}
	if f.between != nil {
		f.between()
	}
	return f.DynamoDBAPI.UpdateItem(ctx, in, opts...)
}

func (f landTwice) PutItem(ctx context.Context, in *dynamodb.PutItemInput, opts ...func(*dynamodb.Options)) (*dynamodb.PutItemOutput, error) {
	if _, err := f.DynamoDBAPI.PutItem(ctx, in, opts...); err != nil {
		return nil, err
	}
	return f.DynamoDBAPI.PutItem(ctx, in, opts...)
}

func TestDynamoDBRetriedWriteThatLandedSucceeds(t *testing.T) {
	client := dynaliteClient(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	direct := newDynamo(t, client)
	table := direct.Table()
	s := lease.NewDynamoDB(landTwice{DynamoDBAPI: client}, table)

	l := lease.Lease{Key: lease.KeyFor("app/stream", "shard-0"), ShardID: "shard-0"}
	if created, err := s.Create(ctx, l); err != nil || !created {
		t.Fatalf("Create whose retry found the item = %v, %v; want true (the first attempt created it)", created, err)
	}
	if created, err := s.Create(ctx, l); err != nil || created {
		t.Fatalf("second Create = %v, %v; want false", created, err)
	}
	a, err := s.Take(ctx, l, "worker-a")
	if err != nil {
		t.Fatalf("Take whose retry failed its condition: %v; want success (the first attempt landed)", err)
	}
	if a.Owner != "worker-a" || a.Counter != 1 || a.OwnerSwitchesSinceCheckpoint != 1 {
		t.Fatalf("Take = %+v; want owner worker-a, counter 1, one switch", a)
	}
	r, err := s.Renew(ctx, a)
	if err != nil || r.Counter != 2 {
		t.Fatalf("Renew = %+v, %v; want counter 2", r, err)
	}
	c, err := s.Checkpoint(ctx, r, "123", 1)
	if err != nil || c.Checkpoint != "123" || c.Counter != 3 {
		t.Fatalf("Checkpoint = %+v, %v; want checkpoint 123 at counter 3", c, err)
	}
	got, err := direct.Get(ctx, l.Key)
	if err != nil || got.Counter != 3 {
		t.Fatalf("stored = %+v, %v; want counter 3 (each write landed once)", got, err)
	}
}

func TestDynamoDBRetriedWriteOvertakenIsLost(t *testing.T) {
	client := dynaliteClient(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	direct := newDynamo(t, client)
	key := lease.KeyFor("app/stream", "shard-0")
	// worker-b steals the lease between worker-a's landed renewal and its
	// retry: worker-a must learn it lost the lease, not that it renewed.
	steal := func() {
		cur, err := direct.Get(ctx, key)
		if err == nil {
			_, err = direct.Take(ctx, cur, "worker-b")
		}
		if err != nil {
			t.Errorf("steal: %v", err)
		}
	}
	s := lease.NewDynamoDB(landTwice{DynamoDBAPI: client, between: steal}, direct.Table())
	l := lease.Lease{Key: key, ShardID: "shard-0", Owner: "worker-a"}
	if _, err := direct.Create(ctx, l); err != nil {
		t.Fatal(err)
	}
	_, err := s.Renew(ctx, l)
	if !errors.Is(err, lease.ErrLeaseLost) {
		t.Fatalf("Renew overtaken by a steal: %v; want ErrLeaseLost", err)
	}
	if got, _ := direct.Get(ctx, key); got.Owner != "worker-b" {
		t.Fatalf("owner %q; want worker-b", got.Owner)
	}
}

// failGet makes every GetItem fail.
type failGet struct{ lease.DynamoDBAPI }

func (failGet) GetItem(context.Context, *dynamodb.GetItemInput, ...func(*dynamodb.Options)) (*dynamodb.GetItemOutput, error) {
	return nil, errors.New("connection reset")
}

func TestDynamoDBConditionFailureWithoutReReadIsLost(t *testing.T) {
	client := dynaliteClient(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	direct := newDynamo(t, client)
	l := lease.Lease{Key: lease.KeyFor("app/stream", "shard-0"), ShardID: "shard-0", Owner: "worker-a", Counter: 5}
	if _, err := direct.Create(ctx, l); err != nil {
		t.Fatal(err)
	}
	stale := l
	stale.Counter = 4
	s := lease.NewDynamoDB(failGet{client}, direct.Table())
	_, err := s.Checkpoint(ctx, stale, "9", 0)
	if !errors.Is(err, lease.ErrLeaseLost) {
		t.Fatalf("Checkpoint with a stale counter and a failing re-read: %v; want ErrLeaseLost", err)
	}
}

func TestDynamoDBItemUsesKCLAttributeNames(t *testing.T) {
	client := dynaliteClient(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	s := newDynamo(t, client)
	l := lease.Lease{
		Key: lease.KeyFor("app/stream", "shardId-000000000002"), ShardID: "shardId-000000000002",
		ParentShardIDs:  []string{"shardId-000000000000", "shardId-000000000001"},
		StartingHashKey: "0", EndingHashKey: "99",
	}
	if _, err := s.Create(ctx, l); err != nil {
		t.Fatal(err)
	}
	l, err := s.Take(ctx, l, "worker-a")
	if err != nil {
		t.Fatal(err)
	}
	if _, err = s.Checkpoint(ctx, l, "4959", 2); err != nil {
		t.Fatal(err)
	}
	out, err := client.GetItem(ctx, &dynamodb.GetItemInput{
		TableName: aws.String(s.Table()),
		Key:       map[string]types.AttributeValue{"leaseKey": &types.AttributeValueMemberS{Value: l.Key}},
	})
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{
		"leaseOwner": "worker-a", "leaseCounter": "2", "checkpoint": "4959",
		"checkpointSubSequenceNumber": "2", "ownerSwitchesSinceCheckpoint": "0",
		"startingHashKey": "0", "endingHashKey": "99",
	}
	for name, v := range want {
		var got string
		switch a := out.Item[name].(type) {
		case *types.AttributeValueMemberS:
			got = a.Value
		case *types.AttributeValueMemberN:
			got = a.Value
		}
		if got != v {
			t.Errorf("attribute %s = %q; want %q", name, got, v)
		}
	}
	if ss, ok := out.Item["parentShardId"].(*types.AttributeValueMemberSS); !ok || len(ss.Value) != 2 {
		t.Errorf("parentShardId = %#v; want a string set of 2", out.Item["parentShardId"])
	}
}

func TestDynamoDBMissingTable(t *testing.T) {
	client := dynaliteClient(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	table := freshTable(t)
	s := lease.NewDynamoDB(client, table)
	_, err := s.Get(ctx, "app/stream/shard-0")
	if !errors.Is(err, lease.ErrNoTable) {
		t.Fatalf("Get on a missing table: %v; want ErrNoTable", err)
	}
	var le *lease.Error
	if !errors.As(err, &le) || le.Op != "get" || !strings.Contains(err.Error(), table) {
		t.Fatalf("error %q does not name the op and the table", err)
	}
	// Nothing was created behind the user's back.
	if _, err := client.DescribeTable(ctx, &dynamodb.DescribeTableInput{TableName: &table}); err == nil {
		t.Fatalf("table %s exists; a store without CreateTableIfMissing created it", table)
	}
}

func TestDynamoDBWrongSchemaRefused(t *testing.T) {
	client := dynaliteClient(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	table := freshTable(t)
	_, err := client.CreateTable(ctx, &dynamodb.CreateTableInput{
		TableName:            &table,
		BillingMode:          types.BillingModePayPerRequest,
		AttributeDefinitions: []types.AttributeDefinition{{AttributeName: aws.String("id"), AttributeType: types.ScalarAttributeTypeS}},
		KeySchema:            []types.KeySchemaElement{{AttributeName: aws.String("id"), KeyType: types.KeyTypeHash}},
	})
	if err != nil {
		t.Fatal(err)
	}
	s := lease.NewDynamoDB(client, table, lease.CreateTableIfMissing())
	if err := s.EnsureTable(ctx); !errors.Is(err, lease.ErrNoTable) || !strings.Contains(err.Error(), "leaseKey") {
		t.Fatalf("EnsureTable on a table keyed by id: %v; want ErrNoTable naming leaseKey", err)
	}
}

// smallPages makes every Scan return at most two items per page.
type smallPages struct{ lease.DynamoDBAPI }

func (f smallPages) Scan(ctx context.Context, in *dynamodb.ScanInput, opts ...func(*dynamodb.Options)) (*dynamodb.ScanOutput, error) {
	in.Limit = aws.Int32(2)
	return f.DynamoDBAPI.Scan(ctx, in, opts...)
}

func TestDynamoDBListFollowsPages(t *testing.T) {
	client := dynaliteClient(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	direct := newDynamo(t, client)
	for i := range 5 {
		if _, err := direct.Create(ctx, lease.Lease{Key: lease.KeyFor("app/orders", fmt.Sprint("shard-", i)), ShardID: fmt.Sprint("shard-", i)}); err != nil {
			t.Fatal(err)
		}
	}
	for i := range 4 {
		if _, err := direct.Create(ctx, lease.Lease{Key: lease.KeyFor("app/payments", fmt.Sprint("shard-", i)), ShardID: fmt.Sprint("shard-", i)}); err != nil {
			t.Fatal(err)
		}
	}
	s := lease.NewDynamoDB(smallPages{client}, direct.Table())
	ls, err := s.List(ctx, "app/orders")
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, l := range ls {
		got = append(got, l.ShardID)
	}
	if want := "[shard-0 shard-1 shard-2 shard-3 shard-4]"; fmt.Sprint(got) != want {
		t.Fatalf("List over 2-item pages = %v; want %s", got, want)
	}
}

func TestDynamoDBConcurrentTableCreation(t *testing.T) {
	client := dynaliteClient(t)
	ctx, cancel := context.WithTimeout(context.Background(), 40*time.Second)
	defer cancel()
	table := freshTable(t)
	errs := make(chan error, 3)
	for range 3 {
		go func() {
			errs <- lease.NewDynamoDB(client, table, lease.CreateTableIfMissing(), lease.TableWaitTimeout(30*time.Second)).EnsureTable(ctx)
		}()
	}
	for range 3 {
		if err := <-errs; err != nil {
			t.Fatalf("instances creating the table at once: %v", err)
		}
	}
}

// counting counts the calls a store makes, by operation.
type counting struct {
	lease.DynamoDBAPI
	mu    sync.Mutex
	calls map[string]int
}

func (c *counting) count(op string) {
	c.mu.Lock()
	c.calls[op]++
	c.mu.Unlock()
}

func (c *counting) take() map[string]int {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := c.calls
	c.calls = map[string]int{}
	return out
}

func (c *counting) UpdateItem(ctx context.Context, in *dynamodb.UpdateItemInput, opts ...func(*dynamodb.Options)) (*dynamodb.UpdateItemOutput, error) {
	c.count("UpdateItem")
	return c.DynamoDBAPI.UpdateItem(ctx, in, opts...)
}

func (c *counting) GetItem(ctx context.Context, in *dynamodb.GetItemInput, opts ...func(*dynamodb.Options)) (*dynamodb.GetItemOutput, error) {
	c.count("GetItem")
	return c.DynamoDBAPI.GetItem(ctx, in, opts...)
}

func (c *counting) Scan(ctx context.Context, in *dynamodb.ScanInput, opts ...func(*dynamodb.Options)) (*dynamodb.ScanOutput, error) {
	c.count("Scan")
	return c.DynamoDBAPI.Scan(ctx, in, opts...)
}

func (c *counting) DescribeTable(ctx context.Context, in *dynamodb.DescribeTableInput, opts ...func(*dynamodb.Options)) (*dynamodb.DescribeTableOutput, error) {
	c.count("DescribeTable")
	return c.DynamoDBAPI.DescribeTable(ctx, in, opts...)
}

// TestDynamoDBOneWritePerRenewal pins the cost of a renewal pass: one
// UpdateItem per held lease, no reads, no table check after the first call.
func TestDynamoDBOneWritePerRenewal(t *testing.T) {
	client := dynaliteClient(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	direct := newDynamo(t, client)
	const held = 8
	api := &counting{DynamoDBAPI: client, calls: map[string]int{}}
	s := lease.NewDynamoDB(api, direct.Table())
	var leases []lease.Lease
	for i := range held {
		l := lease.Lease{Key: lease.KeyFor("app/orders", fmt.Sprint("shard-", i)), ShardID: fmt.Sprint("shard-", i), Owner: "worker-a"}
		if _, err := direct.Create(ctx, l); err != nil {
			t.Fatal(err)
		}
		leases = append(leases, l)
	}
	if err := s.EnsureTable(ctx); err != nil {
		t.Fatal(err)
	}
	api.take()
	for pass := range 3 {
		for i, l := range leases {
			r, err := s.Renew(ctx, l)
			if err != nil {
				t.Fatal(err)
			}
			leases[i] = r
		}
		got := api.take()
		if fmt.Sprint(got) != fmt.Sprintf("map[UpdateItem:%d]", held) {
			t.Fatalf("renewal pass %d over %d leases made calls %v; want exactly %d UpdateItem", pass, held, got, held)
		}
	}
}

// fakeAPI answers from its functions; a call it has no function for panics.
type fakeAPI struct {
	lease.DynamoDBAPI // nil: the calls not overridden below
	describe          func() (*dynamodb.DescribeTableOutput, error)
	update            func() (*dynamodb.UpdateItemOutput, error)
	get               func() (*dynamodb.GetItemOutput, error)
	describes         atomic.Int32
}

func (f *fakeAPI) DescribeTable(context.Context, *dynamodb.DescribeTableInput, ...func(*dynamodb.Options)) (*dynamodb.DescribeTableOutput, error) {
	f.describes.Add(1)
	return f.describe()
}

func (f *fakeAPI) UpdateItem(context.Context, *dynamodb.UpdateItemInput, ...func(*dynamodb.Options)) (*dynamodb.UpdateItemOutput, error) {
	return f.update()
}

func (f *fakeAPI) GetItem(context.Context, *dynamodb.GetItemInput, ...func(*dynamodb.Options)) (*dynamodb.GetItemOutput, error) {
	return f.get()
}

func leaseTableDescription() (*dynamodb.DescribeTableOutput, error) {
	return &dynamodb.DescribeTableOutput{Table: &types.TableDescription{
		TableStatus:          types.TableStatusActive,
		KeySchema:            []types.KeySchemaElement{{AttributeName: aws.String("leaseKey"), KeyType: types.KeyTypeHash}},
		AttributeDefinitions: []types.AttributeDefinition{{AttributeName: aws.String("leaseKey"), AttributeType: types.ScalarAttributeTypeS}},
	}}, nil
}

func TestDynamoDBThrottlingIsNotLeaseLost(t *testing.T) {
	throttled := &types.ProvisionedThroughputExceededException{Message: aws.String("slow down")}
	api := &fakeAPI{
		describe: leaseTableDescription,
		update:   func() (*dynamodb.UpdateItemOutput, error) { return nil, throttled },
	}
	s := lease.NewDynamoDB(api, "leases")
	_, err := s.Renew(context.Background(), lease.Lease{Key: "app/s/shard-0", Owner: "worker-a", Counter: 3})
	if errors.Is(err, lease.ErrLeaseLost) {
		t.Fatalf("throttled renewal reported as lost: %v (the caller would stop a reader it still owns)", err)
	}
	var pt *types.ProvisionedThroughputExceededException
	var le *lease.Error
	if !errors.As(err, &pt) || !errors.As(err, &le) || le.Op != "renew" {
		t.Fatalf("error %v: want a *lease.Error for renew wrapping the SDK's throttling error", err)
	}
}

func TestDynamoDBTableDeletedWhileRunning(t *testing.T) {
	gone := &types.ResourceNotFoundException{Message: aws.String("Requested resource not found")}
	api := &fakeAPI{
		describe: leaseTableDescription,
		get:      func() (*dynamodb.GetItemOutput, error) { return nil, gone },
	}
	s := lease.NewDynamoDB(api, "leases")
	for range 2 {
		_, err := s.Get(context.Background(), "app/s/shard-0")
		if !errors.Is(err, lease.ErrNoTable) {
			t.Fatalf("Get on a deleted table: %v; want ErrNoTable", err)
		}
	}
	// The table is checked again after it went missing, not assumed.
	if n := api.describes.Load(); n != 2 {
		t.Fatalf("DescribeTable called %d times; want 2 (once per call after the table went missing)", n)
	}
}

func TestDynamoDBMissingTableUnit(t *testing.T) {
	api := &fakeAPI{describe: func() (*dynamodb.DescribeTableOutput, error) {
		return nil, &types.ResourceNotFoundException{Message: aws.String("not found")}
	}}
	s := lease.NewDynamoDB(api, "leases")
	_, err := s.List(context.Background(), "app/s")
	if !errors.Is(err, lease.ErrNoTable) || !strings.Contains(err.Error(), `"leases"`) || !strings.Contains(err.Error(), "CreateTableIfMissing") {
		t.Fatalf("List without a table: %v; want ErrNoTable naming the table and the option", err)
	}
}

// BenchmarkDynamoDBRenew measures one renewal (one conditional UpdateItem)
// against dynalite.
func BenchmarkDynamoDBRenew(b *testing.B) {
	client := dynaliteClient(b)
	s := newDynamo(b, client)
	ctx := context.Background()
	l := lease.Lease{Key: lease.KeyFor("bench/stream", "shard-0"), ShardID: "shard-0", Owner: "bench"}
	if _, err := s.Create(ctx, l); err != nil {
		b.Fatal(err)
	}
	for b.Loop() {
		var err error
		if l, err = s.Renew(ctx, l); err != nil {
			b.Fatal(err)
		}
	}
}

// noCapacity answers Scans without the consumed capacity (a server that
// does not report it).
type noCapacity struct{ lease.DynamoDBAPI }

func (n noCapacity) Scan(ctx context.Context, in *dynamodb.ScanInput, opts ...func(*dynamodb.Options)) (*dynamodb.ScanOutput, error) {
	out, err := n.DynamoDBAPI.Scan(ctx, in, opts...)
	if out != nil {
		out.ConsumedCapacity = nil
	}
	return out, err
}

// ListUnits reports what the last List of a namespace cost, as DynamoDB
// billed the Scan: a read unit per 4 KB of every item the Scan read, so a
// namespace's 100 leases cost a few units (against 100 read by key), and
// the items of another namespace in the table are paid for too. A coordinator
// chooses between List and GetMany by it; without a measure (no List yet,
// or a server that reports no capacity) it says so.
func TestDynamoDBListUnits(t *testing.T) {
	client := dynaliteClient(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	s := newDynamo(t, client)
	a, b := "app/orders", "app/other"
	if _, ok := s.ListUnits(a); ok {
		t.Fatal("ListUnits before any List reports a measure")
	}
	seed := func(ns string, n int) {
		for i := range n {
			id := fmt.Sprintf("shardId-%012d", i)
			l := lease.Lease{Key: lease.KeyFor(ns, id), ShardID: id, StartingHashKey: "0", EndingHashKey: "340282366920938463463374607431768211455"}
			if _, err := s.Create(ctx, l); err != nil {
				t.Fatalf("Create: %v", err)
			}
		}
	}
	seed(a, 100)
	if ls, err := s.List(ctx, a); err != nil || len(ls) != 100 {
		t.Fatalf("List = %d leases, %v; want 100", len(ls), err)
	}
	alone, ok := s.ListUnits(a)
	if !ok || alone <= 0 || alone >= 100/4 {
		t.Fatalf("ListUnits after a List of 100 leases = %v, %v; want a few units (packed), fewer than a quarter of one a lease", alone, ok)
	}
	if _, ok := s.ListUnits(b); ok {
		t.Fatal("ListUnits of a namespace never listed reports a measure")
	}
	seed(b, 300)
	if ls, err := s.List(ctx, a); err != nil || len(ls) != 100 {
		t.Fatalf("List = %d leases, %v; want 100", len(ls), err)
	}
	shared, ok := s.ListUnits(a)
	if !ok || shared < 3*alone {
		t.Fatalf("ListUnits with 300 leases of another namespace in the table = %v, %v; want at least %v (the Scan reads them too)", shared, ok, 3*alone)
	}
	t.Logf("a Scan of 100 leases: %v RCU; with 300 of another namespace: %v RCU", alone, shared)

	blind := lease.NewDynamoDB(noCapacity{client}, s.Table())
	if _, err := blind.List(ctx, a); err != nil {
		t.Fatalf("List: %v", err)
	}
	if u, ok := blind.ListUnits(a); ok {
		t.Fatalf("ListUnits from a server that reports no capacity = %v, true; want no measure", u)
	}
}

// sendsItem answers as DynamoDB does and dynalite does not: a write
// refused by its condition that asked for ReturnValuesOnConditionCheckFailure
// ALL_OLD carries the item it found. The store's own GetItem fails, so a
// refusal the store decides without it read nothing.
type sendsItem struct {
	lease.DynamoDBAPI
	gets atomic.Int64
}

func (s *sendsItem) GetItem(context.Context, *dynamodb.GetItemInput, ...func(*dynamodb.Options)) (*dynamodb.GetItemOutput, error) {
	s.gets.Add(1)
	return nil, errors.New("connection reset")
}

func (s *sendsItem) withItem(ctx context.Context, err error, table *string, key map[string]types.AttributeValue, asked types.ReturnValuesOnConditionCheckFailure) error {
	var ccf *types.ConditionalCheckFailedException
	if !errors.As(err, &ccf) || asked != types.ReturnValuesOnConditionCheckFailureAllOld {
		return err
	}
	out, gerr := s.DynamoDBAPI.GetItem(ctx, &dynamodb.GetItemInput{TableName: table, Key: key, ConsistentRead: aws.Bool(true)})
	if gerr != nil {
		return gerr
	}
	ccf.Item = out.Item
	return err
}

func (s *sendsItem) PutItem(ctx context.Context, in *dynamodb.PutItemInput, opts ...func(*dynamodb.Options)) (*dynamodb.PutItemOutput, error) {
	out, err := s.DynamoDBAPI.PutItem(ctx, in, opts...)
	return out, s.withItem(ctx, err, in.TableName, map[string]types.AttributeValue{"leaseKey": in.Item["leaseKey"]}, in.ReturnValuesOnConditionCheckFailure)
}

func (s *sendsItem) UpdateItem(ctx context.Context, in *dynamodb.UpdateItemInput, opts ...func(*dynamodb.Options)) (*dynamodb.UpdateItemOutput, error) {
	out, err := s.DynamoDBAPI.UpdateItem(ctx, in, opts...)
	return out, s.withItem(ctx, err, in.TableName, in.Key, in.ReturnValuesOnConditionCheckFailure)
}

// A refused create or write takes the item from the refusal where the
// service sends it (ReturnValuesOnConditionCheckFailure ALL_OLD, no read
// unit) instead of reading it again: CreateOrGet returns the stored lease,
// a stale take is lost, and a retried write whose first attempt landed
// still succeeds, all without a GetItem. (Before, each refusal cost a
// strongly consistent GetItem, and a refused create one more in the
// coordinator.)
func TestDynamoDBRefusalCarriesTheItem(t *testing.T) {
	client := dynaliteClient(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	direct := newDynamo(t, client)
	srv := &sendsItem{DynamoDBAPI: client}
	s := lease.NewDynamoDB(srv, direct.Table())
	if err := s.EnsureTable(ctx); err != nil {
		t.Fatal(err)
	}

	l := lease.Lease{Key: lease.KeyFor("app/stream", "shard-0"), ShardID: "shard-0", Checkpoint: lease.CheckpointTrimHorizon}
	if _, err := direct.Create(ctx, l); err != nil {
		t.Fatal(err)
	}
	taken, err := direct.Take(ctx, l, "worker-a")
	if err != nil {
		t.Fatal(err)
	}
	other := l
	other.Checkpoint = lease.CheckpointLatest
	got, created, err := s.CreateOrGet(ctx, other)
	if err != nil || created {
		t.Fatalf("refused CreateOrGet = %v, %v; want false, nil", created, err)
	}
	if got.Owner != "worker-a" || got.Counter != taken.Counter || got.Checkpoint != lease.CheckpointTrimHorizon {
		t.Fatalf("refused CreateOrGet returned %+v; want the stored lease %+v", got, taken)
	}
	if _, err := s.Take(ctx, l, "worker-b"); !errors.Is(err, lease.ErrLeaseLost) {
		t.Fatalf("Take with a stale counter: %v; want ErrLeaseLost", err)
	}
	twice := lease.NewDynamoDB(landTwice{DynamoDBAPI: srv}, direct.Table())
	if r, err := twice.Renew(ctx, taken); err != nil || r.Counter != taken.Counter+1 {
		t.Fatalf("Renew whose retry failed its condition = %+v, %v; want success at counter %d (the first attempt landed)", r, err, taken.Counter+1)
	}
	if n := srv.gets.Load(); n != 0 {
		t.Fatalf("%d GetItem calls after refusals that carried the item; want 0", n)
	}
}
