package lease

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/aws/smithy-go"

	"github.com/kinesisgen/kinesisgen/internal/randsrc"
)

// DynamoDBAPI is the part of *dynamodb.Client the DynamoDB store uses, so
// tests can wrap a client and inject faults.
type DynamoDBAPI interface {
	GetItem(ctx context.Context, in *dynamodb.GetItemInput, optFns ...func(*dynamodb.Options)) (*dynamodb.GetItemOutput, error)
	PutItem(ctx context.Context, in *dynamodb.PutItemInput, optFns ...func(*dynamodb.Options)) (*dynamodb.PutItemOutput, error)
	UpdateItem(ctx context.Context, in *dynamodb.UpdateItemInput, optFns ...func(*dynamodb.Options)) (*dynamodb.UpdateItemOutput, error)
	DeleteItem(ctx context.Context, in *dynamodb.DeleteItemInput, optFns ...func(*dynamodb.Options)) (*dynamodb.DeleteItemOutput, error)
	Scan(ctx context.Context, in *dynamodb.ScanInput, optFns ...func(*dynamodb.Options)) (*dynamodb.ScanOutput, error)
	DescribeTable(ctx context.Context, in *dynamodb.DescribeTableInput, optFns ...func(*dynamodb.Options)) (*dynamodb.DescribeTableOutput, error)
	CreateTable(ctx context.Context, in *dynamodb.CreateTableInput, optFns ...func(*dynamodb.Options)) (*dynamodb.CreateTableOutput, error)
}

var _ DynamoDBAPI = (*dynamodb.Client)(nil)

// ErrNoTable: the lease table does not exist (or is not usable as one) and
// the store was not asked to create it.
var ErrNoTable = errors.New("lease table missing")

// Attribute names of the KCL lease table, so operators can read the table
// with the tools they know. pendingOwner is ours: the KCL 2.x/3.x
// checkpointOwner means "the old owner still checkpointing" with leaseOwner
// already set to the new one, which is not our handoff protocol, so reusing
// its name would mislead anyone reading the table.
const (
	attrKey           = "leaseKey"
	attrOwner         = "leaseOwner"
	attrCounter       = "leaseCounter"
	attrCheckpoint    = "checkpoint"
	attrSubSequence   = "checkpointSubSequenceNumber"
	attrOwnerSwitches = "ownerSwitchesSinceCheckpoint"
	attrParents       = "parentShardId"
	attrChildren      = "childShardIds"
	attrStartingHash  = "startingHashKey"
	attrEndingHash    = "endingHashKey"
	attrShardID       = "shardId"
	attrPendingOwner  = "pendingOwner"
	// writeToken is a random token set by every write, so a retried write
	// can recognise its own landed first attempt.
	attrToken          = "writeToken"
	defaultWaitTimeout = time.Minute
)

// DynamoDBOption configures a DynamoDB store.
type DynamoDBOption func(*dynamoConfig)

type dynamoConfig struct {
	create       bool
	waitTimeout  time.Duration
	log          *slog.Logger
	codec        itemCodec     // how leases map to items: ownCodec unless WithKCLLayout
	members      MembersLayout // where member entries live (dynamomembers.go)
	membersTable string        // the members table; "" for the lease table's name + "-members"
}

// CreateTableIfMissing creates the lease table (on-demand billing, leaseKey
// as hash key) on first use when it does not exist, and waits until it is
// ACTIVE, at most one minute unless TableWaitTimeout says otherwise.
func CreateTableIfMissing() DynamoDBOption { return func(c *dynamoConfig) { c.create = true } }

// TableWaitTimeout bounds the wait for a table being created to become ACTIVE.
func TableWaitTimeout(d time.Duration) DynamoDBOption {
	return func(c *dynamoConfig) {
		if d > 0 {
			c.waitTimeout = d
		}
	}
}

// WithLogger sets the store's logger (discarded by default).
func WithLogger(l *slog.Logger) DynamoDBOption {
	return func(c *dynamoConfig) {
		if l != nil {
			c.log = l
		}
	}
}

// DynamoDB is a Store in a DynamoDB table laid out like the KCL lease table.
// One table can hold the leases of many namespaces; keys are namespace/shard.
//
// Every mutation is one conditional write on leaseCounter (and leaseOwner)
// that sets leaseCounter to the next value. Transient failures are retried by
// the client's retryer; when a retried conditional write fails its condition,
// the store looks at the item (sent with the refusal, or read again where
// the server does not send it) and reports success if it carries this
// call's write token (the first attempt landed), ErrLeaseLost otherwise. Besides the
// KCL attributes an item holds shardId, pendingOwner (the handoff request)
// and writeToken.
type DynamoDB struct {
	client DynamoDBAPI
	table  string
	cfg    dynamoConfig

	mu    sync.Mutex  // serialises the table check
	ready atomic.Bool // the table was seen usable: skip the check

	units sync.Map // namespace -> float64: the read units its last List consumed (ListUnits)

	membersFields
}

var _ Store = (*DynamoDB)(nil)

// NewDynamoDB returns a store over table. It does no I/O: the table is
// checked (and created, with CreateTableIfMissing) on first use, or by
// EnsureTable.
func NewDynamoDB(client DynamoDBAPI, table string, opts ...DynamoDBOption) *DynamoDB {
	cfg := dynamoConfig{waitTimeout: defaultWaitTimeout, log: slog.New(slog.NewTextHandler(io.Discard, nil)), codec: ownCodec{}}
	for _, o := range opts {
		o(&cfg)
	}
	return &DynamoDB{client: client, table: table, cfg: cfg}
}

// Table returns the name of the lease table.
func (d *DynamoDB) Table() string { return d.table }

// EnsureTable checks that the lease table exists with leaseKey as its hash
// key, creating it when the store was made with CreateTableIfMissing. Every
// other method calls it until it has succeeded once.
func (d *DynamoDB) EnsureTable(ctx context.Context) error {
	if d.ready.Load() {
		return nil
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.ready.Load() {
		return nil
	}
	if err := d.ensureTable(ctx); err != nil {
		return &Error{Op: "ensure-table", Key: d.table, Err: err}
	}
	d.ready.Store(true)
	return nil
}

func (d *DynamoDB) ensureTable(ctx context.Context) error {
	if d.table == "" {
		return fmt.Errorf("%w: empty table name", ErrInvalid)
	}
	out, err := d.client.DescribeTable(ctx, &dynamodb.DescribeTableInput{TableName: &d.table})
	var missing *types.ResourceNotFoundException
	switch {
	case errors.As(err, &missing):
		if !d.cfg.create {
			return fmt.Errorf("%w: table %q does not exist (create it with hash key %s of type S, or use CreateTableIfMissing)", ErrNoTable, d.table, attrKey)
		}
		if err := d.createTable(ctx); err != nil {
			return err
		}
		if err := d.cfg.codec.check(ctx, d); err != nil {
			return err
		}
		return d.ensureMembersTable(ctx)
	case err != nil:
		return err
	}
	if err := checkSchema(out.Table); err != nil {
		return fmt.Errorf("%w: table %q: %v", ErrNoTable, d.table, err)
	}
	if out.Table.TableStatus == types.TableStatusCreating {
		if err := d.waitActive(ctx); err != nil {
			return err
		}
	}
	if err := d.cfg.codec.check(ctx, d); err != nil {
		return err
	}
	return d.ensureMembersTable(ctx)
}

// checkSchema refuses a table whose key is not the KCL's: writes to it would
// fail item by item with validation errors far from the cause.
func checkSchema(t *types.TableDescription) error {
	if t == nil || len(t.KeySchema) != 1 || aws.ToString(t.KeySchema[0].AttributeName) != attrKey || t.KeySchema[0].KeyType != types.KeyTypeHash {
		return fmt.Errorf("key schema must be exactly %s (HASH)", attrKey)
	}
	for _, a := range t.AttributeDefinitions {
		if aws.ToString(a.AttributeName) == attrKey && a.AttributeType != types.ScalarAttributeTypeS {
			return fmt.Errorf("%s must be of type S, not %s", attrKey, a.AttributeType)
		}
	}
	return nil
}

func (d *DynamoDB) createTable(ctx context.Context) error {
	_, err := d.client.CreateTable(ctx, &dynamodb.CreateTableInput{
		TableName:            &d.table,
		BillingMode:          types.BillingModePayPerRequest,
		AttributeDefinitions: []types.AttributeDefinition{{AttributeName: aws.String(attrKey), AttributeType: types.ScalarAttributeTypeS}},
		KeySchema:            []types.KeySchemaElement{{AttributeName: aws.String(attrKey), KeyType: types.KeyTypeHash}},
	})
	var inUse *types.ResourceInUseException
	switch {
	case errors.As(err, &inUse):
		// Another instance is creating it: wait for it like for ours.
	case err != nil:
		return fmt.Errorf("create table %q: %w", d.table, err)
	default:
		d.cfg.log.Info("creating lease table", "table", d.table)
	}
	return d.waitActive(ctx)
}

func (d *DynamoDB) waitActive(ctx context.Context) error { return d.waitActiveTable(ctx, d.table) }

func (d *DynamoDB) waitActiveTable(ctx context.Context, table string) error {
	w := dynamodb.NewTableExistsWaiter(d.client, func(o *dynamodb.TableExistsWaiterOptions) {
		o.MinDelay = 100 * time.Millisecond
		o.MaxDelay = 2 * time.Second
	})
	if err := w.Wait(ctx, &dynamodb.DescribeTableInput{TableName: &table}, d.cfg.waitTimeout); err != nil {
		return fmt.Errorf("table %q not ACTIVE within %v: %w", table, d.cfg.waitTimeout, err)
	}
	return nil
}

// fail wraps err for op and key, mapping the SDK's missing-table error to
// ErrNoTable (and forgetting that the table was seen, in case it comes back).
func (d *DynamoDB) fail(op, key string, err error) error {
	var missing *types.ResourceNotFoundException
	if errors.As(err, &missing) {
		d.ready.Store(false)
		err = fmt.Errorf("%w: table %q: %w", ErrNoTable, d.table, err)
	}
	return &Error{Op: op, Key: key, Err: err}
}

func (d *DynamoDB) begin(ctx context.Context, op, key string) error {
	if err := ctx.Err(); err != nil {
		return &Error{Op: op, Key: key, Err: err}
	}
	if err := d.EnsureTable(ctx); err != nil {
		var le *Error
		if errors.As(err, &le) {
			return &Error{Op: op, Key: key, Err: le.Err}
		}
		return &Error{Op: op, Key: key, Err: err}
	}
	return nil
}

// List scans the table for keys starting with namespace + "/". The KCL's
// schema (leaseKey alone as hash key) allows no Query by prefix, and keeping
// that schema is what lets operators use KCL tooling, so this is a paginated,
// strongly consistent Scan with a begins_with filter. Lease tables are small
// (one item per shard) and List runs once per shard-sync pass. The read
// units the Scan consumed, as DynamoDB reports them, are kept for
// ListUnits.
func (d *DynamoDB) List(ctx context.Context, namespace string) ([]Lease, error) {
	if err := d.begin(ctx, "list", namespace); err != nil {
		return nil, err
	}
	filter, err := d.cfg.codec.listFilter(namespace)
	if err != nil {
		return nil, &Error{Op: "list", Key: namespace, Err: err}
	}
	in := &dynamodb.ScanInput{
		TableName:                 &d.table,
		ConsistentRead:            aws.Bool(true),
		FilterExpression:          aws.String(filter.expr),
		ExpressionAttributeNames:  filter.names,
		ExpressionAttributeValues: filter.values,
		ReturnConsumedCapacity:    types.ReturnConsumedCapacityTotal,
	}
	var out []Lease
	units, measured := 0.0, true
	for p := dynamodb.NewScanPaginator(d.client, in); p.HasMorePages(); {
		page, err := p.NextPage(ctx)
		if err != nil {
			return nil, d.fail("list", namespace, err)
		}
		if c := page.ConsumedCapacity; c != nil && c.CapacityUnits != nil {
			units += *c.CapacityUnits
		} else {
			measured = false
		}
		for _, item := range page.Items {
			l, _, err := d.cfg.codec.fromItem(item, namespace)
			if err != nil {
				return nil, &Error{Op: "list", Key: namespace, Err: err}
			}
			out = append(out, l)
		}
	}
	if measured {
		d.units.Store(namespace, units)
	} else {
		d.units.Delete(namespace)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Key < out[j].Key })
	return out, nil
}

var _ ListCost = (*DynamoDB)(nil)

// ListUnits returns the read units the last List of namespace consumed, as
// DynamoDB reported them (a server that reports none leaves ok false).
func (d *DynamoDB) ListUnits(namespace string) (float64, bool) {
	v, ok := d.units.Load(namespace)
	if !ok {
		return 0, false
	}
	return v.(float64), true
}

// Get reads one lease with a strongly consistent read.
func (d *DynamoDB) Get(ctx context.Context, key string) (Lease, error) {
	if err := d.begin(ctx, "get", key); err != nil {
		return Lease{}, err
	}
	l, _, found, err := d.get(ctx, key)
	if err != nil {
		return Lease{}, d.fail("get", key, err)
	}
	if !found {
		return Lease{}, &Error{Op: "get", Key: key, Err: ErrNotFound}
	}
	return l, nil
}

// get reads a lease and the token of the write that stored it.
func (d *DynamoDB) get(ctx context.Context, key string) (Lease, string, bool, error) {
	itemKey, err := d.cfg.codec.itemKey(key)
	if err != nil {
		return Lease{}, "", false, err
	}
	out, err := d.client.GetItem(ctx, &dynamodb.GetItemInput{
		TableName:      &d.table,
		Key:            map[string]types.AttributeValue{attrKey: str(itemKey)},
		ConsistentRead: aws.Bool(true),
	})
	if err != nil {
		return Lease{}, "", false, err
	}
	if out.Item == nil {
		return Lease{}, "", false, nil
	}
	l, token, err := d.cfg.codec.fromItem(out.Item, namespaceOf(key))
	return l, token, err == nil, err
}

// Create puts l unless an item has its key.
func (d *DynamoDB) Create(ctx context.Context, l Lease) (bool, error) {
	_, created, err := d.create(ctx, l, false)
	return created, err
}

var _ CreateOrGetter = (*DynamoDB)(nil)

// CreateOrGet puts l unless an item has its key, and returns the lease
// stored. A refused PutItem asks for the item it found
// (ReturnValuesOnConditionCheckFailure ALL_OLD), which DynamoDB returns
// with the refusal and bills no read unit for; a server that does not
// return it (dynalite) costs a strongly consistent GetItem instead.
func (d *DynamoDB) CreateOrGet(ctx context.Context, l Lease) (Lease, bool, error) {
	return d.create(ctx, l, true)
}

// create is Create and CreateOrGet; want says whether the caller needs the
// lease stored when the put is refused (Create needs only its token).
func (d *DynamoDB) create(ctx context.Context, l Lease, want bool) (Lease, bool, error) {
	if err := validate("create", l, false); err != nil {
		return Lease{}, false, err
	}
	if err := d.begin(ctx, "create", l.Key); err != nil {
		return Lease{}, false, err
	}
	token := newToken()
	item, err := d.cfg.codec.toItem(l)
	if err != nil {
		return Lease{}, false, &Error{Op: "create", Key: l.Key, Err: err}
	}
	item[attrToken] = str(token)
	_, err = d.client.PutItem(ctx, &dynamodb.PutItemInput{
		TableName:                           &d.table,
		Item:                                item,
		ConditionExpression:                 aws.String("attribute_not_exists(#k)"),
		ExpressionAttributeNames:            map[string]string{"#k": attrKey},
		ReturnValuesOnConditionCheckFailure: types.ReturnValuesOnConditionCheckFailureAllOld,
	})
	var ccf *types.ConditionalCheckFailedException
	switch {
	case errors.As(err, &ccf):
		// It exists; it was created by this call if an earlier attempt of
		// it landed before the retry.
		stored, storedToken, found, gerr := d.refused(ctx, l.Key, ccf)
		switch {
		case gerr != nil:
			return Lease{}, false, d.fail("create", l.Key, gerr)
		case !found && want:
			// Deleted since the refusal.
			return Lease{}, false, &Error{Op: "create", Key: l.Key, Err: ErrNotFound}
		}
		return stored, found && storedToken == token, nil
	case err != nil:
		return Lease{}, false, d.fail("create", l.Key, err)
	}
	stored := l
	stored.ParentShardIDs = normSet(l.ParentShardIDs)
	stored.ChildShardIDs = normSet(l.ChildShardIDs)
	return stored, true, nil
}

// refused returns the item a conditional write was refused on, with the
// token of the write that stored it: from the refusal when the service sent
// it (ReturnValuesOnConditionCheckFailure ALL_OLD: no read unit), else
// read again, strongly consistent (dynalite sends none, and no service
// sends one for an item that does not exist).
func (d *DynamoDB) refused(ctx context.Context, key string, ccf *types.ConditionalCheckFailedException) (Lease, string, bool, error) {
	if len(ccf.Item) > 0 {
		l, token, err := d.cfg.codec.fromItem(ccf.Item, namespaceOf(key))
		return l, token, err == nil, err
	}
	return d.get(ctx, key)
}

// Take sets the owner. Besides the counter it is conditional on the owner
// the caller read, so ownerSwitchesSinceCheckpoint is counted against the
// owner actually replaced.
func (d *DynamoDB) Take(ctx context.Context, l Lease, owner string) (Lease, error) {
	if owner == "" {
		return Lease{}, invalid("take", l.Key, "empty owner (use Release)")
	}
	return d.mutate(ctx, "take", l, false, d.cfg.codec.take(l, owner))
}

// Renew bumps the counter of a held lease.
func (d *DynamoDB) Renew(ctx context.Context, l Lease) (Lease, error) {
	return d.mutate(ctx, "renew", l, true, update{})
}

// Checkpoint records progress and resets ownerSwitchesSinceCheckpoint.
func (d *DynamoDB) Checkpoint(ctx context.Context, l Lease, checkpoint string, subSequence int64) (Lease, error) {
	if checkpoint == "" {
		return Lease{}, invalid("checkpoint", l.Key, "empty checkpoint")
	}
	return d.mutate(ctx, "checkpoint", l, true, d.cfg.codec.checkpoint(checkpoint, subSequence))
}

// Release removes leaseOwner.
func (d *DynamoDB) Release(ctx context.Context, l Lease) (Lease, error) {
	return d.mutate(ctx, "release", l, true, d.cfg.codec.release())
}

// RequestHandoff sets pendingOwner.
func (d *DynamoDB) RequestHandoff(ctx context.Context, l Lease, to string) (Lease, error) {
	if to == "" {
		return Lease{}, invalid("handoff", l.Key, "empty pending owner")
	}
	u := update{set: map[string]types.AttributeValue{attrPendingOwner: str(to)}}
	return d.mutate(ctx, "handoff", l, false, u)
}

// SetChildren records childShardIds. A string set has no order: they read
// back sorted.
func (d *DynamoDB) SetChildren(ctx context.Context, l Lease, children []string) (Lease, error) {
	set := normSet(children)
	u := update{}
	if len(set) == 0 {
		u.remove = []string{attrChildren}
	} else {
		u.set = map[string]types.AttributeValue{attrChildren: &types.AttributeValueMemberSS{Value: set}}
	}
	return d.mutate(ctx, "set-children", l, true, u)
}

// Delete removes the item, conditional on the counter. A retried delete whose
// first attempt landed reports ErrNotFound: the lease is gone either way.
func (d *DynamoDB) Delete(ctx context.Context, l Lease) error {
	if err := validate("delete", l, false); err != nil {
		return err
	}
	if err := d.begin(ctx, "delete", l.Key); err != nil {
		return err
	}
	itemKey, err := d.cfg.codec.itemKey(l.Key)
	if err != nil {
		return &Error{Op: "delete", Key: l.Key, Err: err}
	}
	_, err = d.client.DeleteItem(ctx, &dynamodb.DeleteItemInput{
		TableName:                 &d.table,
		Key:                       map[string]types.AttributeValue{attrKey: str(itemKey)},
		ConditionExpression:       aws.String("#c = :expect"),
		ExpressionAttributeNames:  map[string]string{"#c": attrCounter},
		ExpressionAttributeValues: map[string]types.AttributeValue{":expect": num(l.Counter)},
	})
	var ccf *types.ConditionalCheckFailedException
	switch {
	case errors.As(err, &ccf):
		_, _, found, gerr := d.get(ctx, l.Key)
		switch {
		case gerr != nil:
			return d.fail("delete", l.Key, fmt.Errorf("%w (and re-reading failed: %v)", ErrLeaseLost, gerr))
		case !found:
			return &Error{Op: "delete", Key: l.Key, Err: ErrNotFound}
		}
		return &Error{Op: "delete", Key: l.Key, Err: ErrLeaseLost}
	case err != nil:
		return d.fail("delete", l.Key, err)
	}
	return nil
}

// update is one UpdateItem's changes besides the counter.
type update struct {
	set         map[string]types.AttributeValue
	remove      []string
	incSwitches bool // ownerSwitchesSinceCheckpoint += 1
}

// mutate writes u conditional on l's counter (and owner when checkOwner),
// setting leaseCounter to l.Counter+1 and writeToken to a fresh random
// token, by which a failed condition after a transparent retry is told
// apart from a lost lease.
func (d *DynamoDB) mutate(ctx context.Context, op string, l Lease, checkOwner bool, u update) (Lease, error) {
	if err := validate(op, l, checkOwner); err != nil {
		return Lease{}, err
	}
	if err := d.begin(ctx, op, l.Key); err != nil {
		return Lease{}, err
	}
	itemKey, err := d.cfg.codec.itemKey(l.Key)
	if err != nil {
		return Lease{}, &Error{Op: op, Key: l.Key, Err: err}
	}
	token := newToken()
	names := map[string]string{"#c": attrCounter, "#t": attrToken}
	values := map[string]types.AttributeValue{":expect": num(l.Counter), ":next": num(l.Counter + 1), ":token": str(token)}
	sets := []string{"#c = :next", "#t = :token"}
	// Sorted so the request is the same for the same call (readable in logs).
	attrs := make([]string, 0, len(u.set))
	for a := range u.set {
		attrs = append(attrs, a)
	}
	sort.Strings(attrs)
	for i, a := range attrs {
		n, v := fmt.Sprintf("#s%d", i), fmt.Sprintf(":s%d", i)
		names[n], values[v] = a, u.set[a]
		sets = append(sets, n+" = "+v)
	}
	if u.incSwitches {
		names["#sw"] = attrOwnerSwitches
		values[":zero"], values[":one"] = num(0), num(1)
		sets = append(sets, "#sw = if_not_exists(#sw, :zero) + :one")
	}
	expr := "SET " + strings.Join(sets, ", ")
	if len(u.remove) > 0 {
		var rm []string
		for i, a := range u.remove {
			n := fmt.Sprintf("#r%d", i)
			names[n] = a
			rm = append(rm, n)
		}
		expr += " REMOVE " + strings.Join(rm, ", ")
	}
	cond := "#c = :expect"
	// Take is conditional on the owner too: see Take.
	if checkOwner || op == "take" {
		names["#o"] = attrOwner
		if l.Owner == "" {
			cond += " AND attribute_not_exists(#o)"
		} else {
			values[":owner"] = str(l.Owner)
			cond += " AND #o = :owner"
		}
	}
	out, err := d.client.UpdateItem(ctx, &dynamodb.UpdateItemInput{
		TableName:                 &d.table,
		Key:                       map[string]types.AttributeValue{attrKey: str(itemKey)},
		UpdateExpression:          &expr,
		ConditionExpression:       &cond,
		ExpressionAttributeNames:  names,
		ExpressionAttributeValues: values,
		ReturnValues:              types.ReturnValueAllNew,
		// A refusal carries the item, so recheck need not read it again.
		ReturnValuesOnConditionCheckFailure: types.ReturnValuesOnConditionCheckFailureAllOld,
	})
	var ccf *types.ConditionalCheckFailedException
	switch {
	case errors.As(err, &ccf):
		return d.recheck(ctx, op, l, token, ccf)
	case err != nil:
		return Lease{}, d.fail(op, l.Key, err)
	}
	stored, _, err := d.cfg.codec.fromItem(out.Attributes, namespaceOf(l.Key))
	if err != nil {
		return Lease{}, &Error{Op: op, Key: l.Key, Err: err}
	}
	d.cfg.log.Debug("lease written", "op", op, "key", l.Key, "shard", stored.ShardID, "owner", stored.Owner, "counter", stored.Counter)
	return stored, nil
}

// recheck decides a failed condition: no item is ErrNotFound; an item
// holding this call's token at the counter it wrote means an earlier attempt
// of this call landed (the SDK retried after a lost reply); anything else is
// ErrLeaseLost. The item comes with the refusal where the service sends it.
func (d *DynamoDB) recheck(ctx context.Context, op string, l Lease, token string, ccf *types.ConditionalCheckFailedException) (Lease, error) {
	stored, storedToken, found, err := d.refused(ctx, l.Key, ccf)
	switch {
	case err != nil:
		// Without the re-read the outcome is unknown; lost is the safe answer.
		return Lease{}, d.fail(op, l.Key, fmt.Errorf("%w (and re-reading failed: %v)", ErrLeaseLost, err))
	case !found:
		return Lease{}, &Error{Op: op, Key: l.Key, Err: ErrNotFound}
	case storedToken == token && stored.Counter == l.Counter+1:
		d.cfg.log.Debug("retried lease write had landed", "op", op, "key", l.Key, "shard", stored.ShardID, "owner", stored.Owner)
		return stored, nil
	}
	return Lease{}, &Error{Op: op, Key: l.Key, Err: ErrLeaseLost}
}

func newToken() string { return strconv.FormatUint(randsrc.Uint64("lease token"), 36) }

func str(s string) types.AttributeValue { return &types.AttributeValueMemberS{Value: s} }
func num(n int64) types.AttributeValue {
	return &types.AttributeValueMemberN{Value: strconv.FormatInt(n, 10)}
}

// normSet returns a sorted copy of ids without duplicates, as a DynamoDB
// string set holds them; nil for none.
func normSet(ids []string) []string {
	if len(ids) == 0 {
		return nil
	}
	out := slices.Clone(ids)
	slices.Sort(out)
	return slices.Compact(out)
}

// itemCodec is how a layout maps leases to items: the seam between the
// store's conditional-write machinery (this file) and a table layout
// (ownCodec below; the KCL's in kcl.go).
type itemCodec interface {
	// check runs once the table is known to exist (EnsureTable).
	check(ctx context.Context, d *DynamoDB) error
	// itemKey returns the leaseKey attribute of the lease with key.
	itemKey(key string) (string, error)
	// listFilter selects the lease items of namespace in a Scan.
	listFilter(namespace string) (scanFilter, error)
	// toItem lays l out as an item (Create).
	toItem(l Lease) (map[string]types.AttributeValue, error)
	// fromItem reads an item of namespace, and the token of the write that
	// stored it.
	fromItem(item map[string]types.AttributeValue, namespace string) (Lease, string, error)
	// take, checkpoint and release are the changes of those writes,
	// besides the counter and write token that every write sets.
	take(l Lease, owner string) update
	checkpoint(checkpoint string, subSequence int64) update
	release() update
}

type scanFilter struct {
	expr   string
	names  map[string]string
	values map[string]types.AttributeValue
}

// namespaceOf returns the namespace part of a lease key (see KeyFor).
func namespaceOf(key string) string {
	if i := strings.LastIndex(key, "/"); i >= 0 {
		return key[:i]
	}
	return ""
}

// ownCodec is kinesisgen's own layout: leaseKey is namespace/shardId, so
// one table holds many applications and streams.
type ownCodec struct{}

func (ownCodec) check(context.Context, *DynamoDB) error { return nil }
func (ownCodec) itemKey(key string) (string, error)     { return key, nil }

func (ownCodec) listFilter(namespace string) (scanFilter, error) {
	// Lease items always carry leaseCounter; this skips anything else
	// someone keeps in the table under the same prefix.
	return scanFilter{
		expr:   "begins_with(#k, :p) AND attribute_exists(#c)",
		names:  map[string]string{"#k": attrKey, "#c": attrCounter},
		values: map[string]types.AttributeValue{":p": str(namespace + "/")},
	}, nil
}

func (ownCodec) take(l Lease, owner string) update {
	return update{
		set:         map[string]types.AttributeValue{attrOwner: str(owner)},
		remove:      []string{attrPendingOwner},
		incSwitches: l.Owner != owner,
	}
}

func (ownCodec) checkpoint(checkpoint string, subSequence int64) update {
	return update{set: map[string]types.AttributeValue{
		attrCheckpoint:    str(checkpoint),
		attrSubSequence:   num(subSequence),
		attrOwnerSwitches: num(0),
	}}
}

func (ownCodec) release() update { return update{remove: []string{attrOwner}} }

func (ownCodec) toItem(l Lease) (map[string]types.AttributeValue, error) { return toItem(l), nil }

func (ownCodec) fromItem(item map[string]types.AttributeValue, _ string) (Lease, string, error) {
	return fromItem(item)
}

// toItem lays l out as a KCL lease item. Empty strings and sets are left out:
// DynamoDB rejects empty sets, and an absent leaseOwner is how the KCL marks
// a lease nobody holds.
func toItem(l Lease) map[string]types.AttributeValue {
	item := map[string]types.AttributeValue{
		attrKey:           str(l.Key),
		attrCounter:       num(l.Counter),
		attrSubSequence:   num(l.SubSequence),
		attrOwnerSwitches: num(l.OwnerSwitchesSinceCheckpoint),
	}
	for a, v := range map[string]string{
		attrShardID:      l.ShardID,
		attrOwner:        l.Owner,
		attrCheckpoint:   l.Checkpoint,
		attrStartingHash: l.StartingHashKey,
		attrEndingHash:   l.EndingHashKey,
		attrPendingOwner: l.PendingOwner,
	} {
		if v != "" {
			item[a] = str(v)
		}
	}
	if s := normSet(l.ParentShardIDs); len(s) > 0 {
		item[attrParents] = &types.AttributeValueMemberSS{Value: s}
	}
	if s := normSet(l.ChildShardIDs); len(s) > 0 {
		item[attrChildren] = &types.AttributeValueMemberSS{Value: s}
	}
	return item
}

// fromItem reads a lease item, including ones the KCL wrote (no shardId
// attribute: the shard is the key's last segment).
func fromItem(item map[string]types.AttributeValue) (Lease, string, error) {
	var l Lease
	var errs []error
	s := func(a string) string {
		switch v := item[a].(type) {
		case nil:
		case *types.AttributeValueMemberS:
			return v.Value
		default:
			errs = append(errs, fmt.Errorf("%s is %T, want S", a, v))
		}
		return ""
	}
	n := func(a string) int64 {
		switch v := item[a].(type) {
		case nil:
		case *types.AttributeValueMemberN:
			x, err := strconv.ParseInt(v.Value, 10, 64)
			if err != nil {
				errs = append(errs, fmt.Errorf("%s: %w", a, err))
			}
			return x
		default:
			errs = append(errs, fmt.Errorf("%s is %T, want N", a, v))
		}
		return 0
	}
	ss := func(a string) []string {
		switch v := item[a].(type) {
		case nil:
		case *types.AttributeValueMemberSS:
			return normSet(v.Value)
		default:
			errs = append(errs, fmt.Errorf("%s is %T, want SS", a, v))
		}
		return nil
	}
	l.Key = s(attrKey)
	l.ShardID = s(attrShardID)
	if l.ShardID == "" {
		l.ShardID = l.Key[strings.LastIndex(l.Key, "/")+1:]
	}
	l.Owner = s(attrOwner)
	l.Counter = n(attrCounter)
	l.Checkpoint = s(attrCheckpoint)
	l.SubSequence = n(attrSubSequence)
	l.OwnerSwitchesSinceCheckpoint = n(attrOwnerSwitches)
	l.ParentShardIDs = ss(attrParents)
	l.ChildShardIDs = ss(attrChildren)
	l.StartingHashKey = s(attrStartingHash)
	l.EndingHashKey = s(attrEndingHash)
	l.PendingOwner = s(attrPendingOwner)
	if l.Key == "" {
		errs = append(errs, fmt.Errorf("item has no %s", attrKey))
	}
	token := s(attrToken)
	if len(errs) > 0 {
		return Lease{}, "", fmt.Errorf("malformed lease item %q: %w", l.Key, errors.Join(errs...))
	}
	return l, token, nil
}

// Attributes of a namespace's members item (MembersKey): one map entry per
// instance, {beat, held, asks, starting, fenced, leaving}.
const (
	attrMembers  = "members"
	attrBeat     = "beat"
	attrHeld     = "held"
	attrAsks     = "asks"
	attrStarting = "starting"
	attrFenced   = "fenced"  // written only when true: earlier versions ignore it (Member.Fenced)
	attrLeaving  = "leaving" // the same (Member.Leaving)
)

var _ MemberStore = (*DynamoDB)(nil)

// PerLeaseOnly reports whether the table's layout needs every lease renewed
// (see PerLeaseOnly): false for this store's own layout, true for the KCL's
// (WithKCLLayout), whose Java workers expire a lease whose counter stands
// still and would never read a members item.
func (d *DynamoDB) PerLeaseOnly() bool {
	_, kcl := d.cfg.codec.(KCLLayout)
	return kcl
}

// noMembers refuses the members item in a KCL table: the KCL would read it
// as a lease.
func (d *DynamoDB) noMembers(op, key string) error {
	if d.PerLeaseOnly() {
		return invalid(op, key, "a KCL table holds only shard leases (liveness is per lease)")
	}
	return nil
}

// itemHeartbeat writes m as its owner's entry of the namespace's members
// item (MembersItem): one unconditional UpdateItem of one map entry (the
// item is created, empty, the first time).
func (d *DynamoDB) itemHeartbeat(ctx context.Context, namespace string, m Member) error {
	key := MembersKey(namespace)
	entry := map[string]types.AttributeValue{attrBeat: num(m.Beat), attrHeld: num(int64(m.Held))}
	if asks := normSet(m.Asks); len(asks) > 0 {
		entry[attrAsks] = &types.AttributeValueMemberSS{Value: asks}
	}
	if m.Starting {
		entry[attrStarting] = &types.AttributeValueMemberBOOL{Value: true}
	}
	if m.Fenced {
		entry[attrFenced] = &types.AttributeValueMemberBOOL{Value: true}
	}
	if m.Leaving {
		entry[attrLeaving] = &types.AttributeValueMemberBOOL{Value: true}
	}
	in := &dynamodb.UpdateItemInput{
		TableName:                 &d.table,
		Key:                       map[string]types.AttributeValue{attrKey: str(key)},
		UpdateExpression:          aws.String("SET #m.#o = :v"),
		ExpressionAttributeNames:  map[string]string{"#m": attrMembers, "#o": m.Owner},
		ExpressionAttributeValues: map[string]types.AttributeValue{":v": &types.AttributeValueMemberM{Value: entry}},
	}
	_, err := d.client.UpdateItem(ctx, in)
	if isValidation(err) {
		// No item (or no map) yet: a nested path needs its map. Create it
		// empty unless another instance just did, and write again.
		_, perr := d.client.PutItem(ctx, &dynamodb.PutItemInput{
			TableName:                &d.table,
			Item:                     map[string]types.AttributeValue{attrKey: str(key), attrMembers: &types.AttributeValueMemberM{Value: map[string]types.AttributeValue{}}},
			ConditionExpression:      aws.String("attribute_not_exists(#k)"),
			ExpressionAttributeNames: map[string]string{"#k": attrKey},
		})
		var ccf *types.ConditionalCheckFailedException
		if perr != nil && !errors.As(perr, &ccf) {
			return d.fail("heartbeat", key, perr)
		}
		_, err = d.client.UpdateItem(ctx, in)
	}
	if err != nil {
		return d.fail("heartbeat", key, err)
	}
	return nil
}

// isValidation reports a ValidationException: the service's answer to a
// nested path whose map does not exist.
func isValidation(err error) bool {
	var api smithy.APIError
	return errors.As(err, &api) && api.ErrorCode() == "ValidationException"
}

// itemMembers reads the namespace's members item (MembersItem) with one
// strongly consistent GetItem.
func (d *DynamoDB) itemMembers(ctx context.Context, namespace string) ([]Member, error) {
	key := MembersKey(namespace)
	out, err := d.client.GetItem(ctx, &dynamodb.GetItemInput{
		TableName:      &d.table,
		Key:            map[string]types.AttributeValue{attrKey: str(key)},
		ConsistentRead: aws.Bool(true),
	})
	if err != nil {
		return nil, d.fail("members", key, err)
	}
	m, _ := out.Item[attrMembers].(*types.AttributeValueMemberM)
	if m == nil {
		return []Member{}, nil
	}
	ms := make([]Member, 0, len(m.Value))
	for owner, v := range m.Value {
		e, ok := v.(*types.AttributeValueMemberM)
		if !ok {
			return nil, &Error{Op: "members", Key: key, Err: fmt.Errorf("malformed entry of %q: %T", owner, v)}
		}
		mb, err := memberFromValues(e.Value, owner)
		if err != nil {
			return nil, &Error{Op: "members", Key: key, Err: err}
		}
		ms = append(ms, mb)
	}
	sortMembers(ms)
	return ms, nil
}

// itemLeave removes owner's entry of the members item (MembersItem); with
// beat non-zero, only while it holds that beat (upTo: at most that beat).
func (d *DynamoDB) itemLeave(ctx context.Context, namespace, owner string, beat int64, upTo bool) error {
	key := MembersKey(namespace)
	names := map[string]string{"#m": attrMembers, "#o": owner}
	cond := "attribute_exists(#m.#o)"
	var values map[string]types.AttributeValue
	if beat != 0 {
		names["#b"] = attrBeat
		if upTo {
			cond += " AND #m.#o.#b <= :beat"
		} else {
			cond += " AND #m.#o.#b = :beat"
		}
		values = map[string]types.AttributeValue{":beat": num(beat)}
	}
	_, err := d.client.UpdateItem(ctx, &dynamodb.UpdateItemInput{
		TableName:                 &d.table,
		Key:                       map[string]types.AttributeValue{attrKey: str(key)},
		UpdateExpression:          aws.String("REMOVE #m.#o"),
		ConditionExpression:       &cond,
		ExpressionAttributeNames:  names,
		ExpressionAttributeValues: values,
	})
	var ccf *types.ConditionalCheckFailedException
	switch {
	case errors.As(err, &ccf):
		if beat == 0 {
			return nil // not there: nothing to remove
		}
		ms, rerr := d.itemMembers(ctx, namespace)
		if rerr != nil {
			return rerr
		}
		for _, m := range ms {
			if m.Owner == owner {
				return &Error{Op: "leave", Key: key, Err: ErrLeaseLost}
			}
		}
		return nil
	case err != nil:
		return d.fail("leave", key, err)
	}
	return nil
}

// batchGetter is a client that can read many items in one call
// (*dynamodb.Client can; a test's wrapper may not).
type batchGetter interface {
	BatchGetItem(ctx context.Context, in *dynamodb.BatchGetItemInput, optFns ...func(*dynamodb.Options)) (*dynamodb.BatchGetItemOutput, error)
}

var _ Lookup = (*DynamoDB)(nil)

// GetMany reads the leases of keys with strongly consistent BatchGetItem
// calls (100 keys each, unprocessed keys retried), or GetItem calls when
// the client has no BatchGetItem. It reads no other item.
func (d *DynamoDB) GetMany(ctx context.Context, keys []string) ([]Lease, error) {
	if err := d.begin(ctx, "get-many", ""); err != nil {
		return nil, err
	}
	keys = normSet(keys)
	out := make([]Lease, 0, len(keys))
	bg, ok := d.client.(batchGetter)
	if !ok {
		for _, k := range keys {
			l, _, found, err := d.get(ctx, k)
			if err != nil {
				return nil, d.fail("get-many", k, err)
			}
			if found {
				out = append(out, l)
			}
		}
		return out, nil
	}
	// The table's key of each lease key (the layout's), and the namespace
	// its item is read in.
	nsOf := make(map[string]string, len(keys))
	for len(keys) > 0 {
		n := min(len(keys), 100)
		req := make([]map[string]types.AttributeValue, n)
		for i, k := range keys[:n] {
			ik, err := d.cfg.codec.itemKey(k)
			if err != nil {
				return nil, &Error{Op: "get-many", Key: k, Err: err}
			}
			nsOf[ik] = namespaceOf(k)
			req[i] = map[string]types.AttributeValue{attrKey: str(ik)}
		}
		keys = keys[n:]
		wait := 20 * time.Millisecond
		for len(req) > 0 {
			res, err := bg.BatchGetItem(ctx, &dynamodb.BatchGetItemInput{RequestItems: map[string]types.KeysAndAttributes{
				d.table: {Keys: req, ConsistentRead: aws.Bool(true)},
			}})
			if err != nil {
				return nil, d.fail("get-many", "", err)
			}
			for _, item := range res.Responses[d.table] {
				ik, _ := item[attrKey].(*types.AttributeValueMemberS)
				if ik == nil {
					return nil, &Error{Op: "get-many", Err: fmt.Errorf("item without %s", attrKey)}
				}
				l, _, err := d.cfg.codec.fromItem(item, nsOf[ik.Value])
				if err != nil {
					return nil, &Error{Op: "get-many", Err: err}
				}
				out = append(out, l)
			}
			req = res.UnprocessedKeys[d.table].Keys
			if len(req) > 0 {
				// Throttled in part: back off before asking for the rest.
				select {
				case <-ctx.Done():
					return nil, &Error{Op: "get-many", Err: ctx.Err()}
				case <-time.After(wait):
				}
				wait = min(2*wait, time.Second)
			}
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Key < out[j].Key })
	return out, nil
}
