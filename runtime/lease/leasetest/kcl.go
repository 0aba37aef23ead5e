package leasetest

import (
	"context"
	"errors"
	"fmt"
	"math/big"
	"strconv"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/kinesisgen/kinesisgen/runtime/lease"
)

// KCL lease items as the Java Kinesis Client Library writes them, and a
// check that an item reads back as a KCL lease, for the take-over and
// roll-back tests of the KCL layout (lease.WithKCLLayout). Every shape
// below is taken from the KCL's own source (awslabs/amazon-kinesis-client,
// amazon-kinesis-client/src/main/java/software/amazon/kinesis/...):
//
//   - leases/dynamodb/DynamoDBLeaseSerializer.java, toDynamoRecord and
//     fromDynamoRecord: leaseKey (S), leaseCounter (N), leaseOwner (S, absent
//     when unowned), ownerSwitchesSinceCheckpoint (N), checkpoint (S),
//     checkpointSubSequenceNumber (N), parentShardId (SS, absent when none),
//     childShardIds (SS, absent when none), pendingCheckpoint (S) and
//     pendingCheckpointSubSequenceNumber (N) while a two-phase checkpoint is
//     prepared, pendingCheckpointState (B), startingHashKey and
//     endingHashKey (S, decimal); from 3.x throughputKBps (N, a double, set
//     by the lease renewer) and checkpointOwner (S, the old owner while the
//     3.x leader hands a lease over gracefully).
//   - leases/dynamodb/DynamoDBMultiStreamLeaseSerializer.java and
//     leases/MultiStreamLease.java: a multi-stream lease adds streamName (S,
//     the serialized StreamIdentifier account:stream:creationEpoch, "for
//     legacy reasons") and shardId (S); its leaseKey is
//     streamIdentifier + ":" + shardId (MultiStreamLease.getLeaseKey).
//   - common/StreamIdentifier.java: the identifier's pattern
//     [0-9]+:[^:]+:[0-9]+, creation epoch > 0.
//   - retrieval/kpl/ExtendedSequenceNumber.java and
//     checkpoint/SentinelCheckpoint.java: a checkpoint is a string of digits
//     or TRIM_HORIZON, LATEST, SHARD_END, AT_TIMESTAMP; the sub-sequence
//     number is the index of the last processed user record in a KPL
//     aggregate (0 for a record that is not one).
//   - common/HashKeyRangeForLease.java: both hash keys decimal in [0, 2^128).
//
// A KCL worker's leaseOwner is its worker id; kcl fixture owners below look
// like the KCL's default (a host name and a UUID).

// KCLVersion is the KCL major version whose item shape a fixture takes.
type KCLVersion int

const (
	KCLv2 KCLVersion = 2
	KCLv3 KCLVersion = 3
)

// KCLTable is a KCL application's lease table: single-stream (Stream.Name
// only) or multi-stream.
type KCLTable struct {
	Multi   bool
	Stream  lease.KCLStream
	Version KCLVersion
}

// Layout is the table's lease.KCLLayout.
func (t KCLTable) Layout() lease.KCLLayout {
	if t.Multi {
		return lease.KCLMultiStream(t.Stream)
	}
	return lease.KCLSingleStream(t.Stream.Name)
}

// LeaseKey is the KCL's leaseKey of a shard.
func (t KCLTable) LeaseKey(shardID string) string {
	if t.Multi {
		return t.Stream.Identifier() + ":" + shardID
	}
	return shardID
}

// KCLLease is one shard's lease as a KCL worker left it.
type KCLLease struct {
	ShardID         string
	Owner           string // "" unowned
	Counter         int64
	Checkpoint      string
	SubSequence     int64
	OwnerSwitches   int64
	Parents         []string
	Children        []string
	StartingHashKey string
	EndingHashKey   string
	// PendingCheckpoint: a prepared (two-phase) checkpoint not yet committed.
	PendingCheckpoint  string
	PendingSubSequence int64
	// CheckpointOwner (3.x): the worker still checkpointing while the
	// leader hands the lease to Owner.
	CheckpointOwner string
}

// Item is l as the KCL of the table's version writes it.
func (t KCLTable) Item(l KCLLease) map[string]types.AttributeValue {
	s := func(v string) types.AttributeValue { return &types.AttributeValueMemberS{Value: v} }
	n := func(v int64) types.AttributeValue {
		return &types.AttributeValueMemberN{Value: strconv.FormatInt(v, 10)}
	}
	item := map[string]types.AttributeValue{
		"leaseKey":                     s(t.LeaseKey(l.ShardID)),
		"leaseCounter":                 n(l.Counter),
		"ownerSwitchesSinceCheckpoint": n(l.OwnerSwitches),
		"checkpoint":                   s(l.Checkpoint),
		"checkpointSubSequenceNumber":  n(l.SubSequence),
	}
	if l.Owner != "" {
		item["leaseOwner"] = s(l.Owner)
	}
	if len(l.Parents) > 0 {
		item["parentShardId"] = &types.AttributeValueMemberSS{Value: l.Parents}
	}
	if len(l.Children) > 0 {
		item["childShardIds"] = &types.AttributeValueMemberSS{Value: l.Children}
	}
	if l.PendingCheckpoint != "" {
		item["pendingCheckpoint"] = s(l.PendingCheckpoint)
		item["pendingCheckpointSubSequenceNumber"] = n(l.PendingSubSequence)
		item["pendingCheckpointState"] = &types.AttributeValueMemberB{Value: []byte("app state")}
	}
	if l.StartingHashKey != "" {
		item["startingHashKey"], item["endingHashKey"] = s(l.StartingHashKey), s(l.EndingHashKey)
	}
	if t.Version >= KCLv3 {
		item["throughputKBps"] = &types.AttributeValueMemberN{Value: "12.5"}
		if l.CheckpointOwner != "" {
			item["checkpointOwner"] = s(l.CheckpointOwner)
		}
	}
	if t.Multi {
		item["streamName"], item["shardId"] = s(t.Stream.Identifier()), s(l.ShardID)
	}
	return item
}

// KCLRead is what a KCL worker reads from an item: the fields its lease
// taker and record processor act on.
type KCLRead struct {
	LeaseKey        string
	ShardID         string
	Owner           string
	Counter         int64
	Checkpoint      string
	SubSequence     int64
	CheckpointOwner string
	Pending         bool
}

// ReadAsKCL reads item as the KCL's serializer of table t does, failing
// where the KCL would fail (a missing required attribute, a wrong DynamoDB
// type, a checkpoint that is neither digits nor a sentinel, a malformed
// multi-stream key or hash key range).
func (t KCLTable) ReadAsKCL(item map[string]types.AttributeValue) (KCLRead, error) {
	var errs []error
	fail := func(f string, a ...any) { errs = append(errs, fmt.Errorf(f, a...)) }
	str := func(a string, required bool) string {
		switch v := item[a].(type) {
		case nil:
			if required {
				fail("%s missing", a)
			}
		case *types.AttributeValueMemberS:
			return v.Value
		default:
			fail("%s is %T, the KCL reads S", a, v)
		}
		return ""
	}
	num := func(a string, required bool) int64 {
		switch v := item[a].(type) {
		case nil:
			if required {
				fail("%s missing", a)
			}
		case *types.AttributeValueMemberN:
			x, err := strconv.ParseInt(v.Value, 10, 64)
			if err != nil {
				fail("%s %q is not a long", a, v.Value)
			}
			return x
		default:
			fail("%s is %T, the KCL reads N", a, v)
		}
		return 0
	}
	ss := func(a string) {
		switch v := item[a].(type) {
		case nil, *types.AttributeValueMemberSS:
		default:
			fail("%s is %T, the KCL reads SS", a, v)
		}
	}
	r := KCLRead{
		LeaseKey:        str("leaseKey", true),
		Owner:           str("leaseOwner", false),
		Counter:         num("leaseCounter", true),
		Checkpoint:      str("checkpoint", true),
		SubSequence:     num("checkpointSubSequenceNumber", true),
		CheckpointOwner: str("checkpointOwner", false),
	}
	num("ownerSwitchesSinceCheckpoint", true)
	ss("parentShardId")
	ss("childShardIds")
	if p := str("pendingCheckpoint", false); p != "" {
		r.Pending = true
		if !digitsOrSentinel(p) {
			fail("pendingCheckpoint %q is neither digits nor a sentinel", p)
		}
		num("pendingCheckpointSubSequenceNumber", false)
	}
	if v, ok := item["pendingCheckpointState"]; ok {
		if _, isB := v.(*types.AttributeValueMemberB); !isB {
			fail("pendingCheckpointState is %T, the KCL reads B", v)
		}
	}
	if v, ok := item["throughputKBps"]; ok {
		if nv, isN := v.(*types.AttributeValueMemberN); !isN {
			fail("throughputKBps is %T, the KCL reads N", v)
		} else if _, err := strconv.ParseFloat(nv.Value, 64); err != nil {
			fail("throughputKBps %q is not a double", nv.Value)
		}
	}
	if !digitsOrSentinel(r.Checkpoint) {
		fail("checkpoint %q is neither digits nor a sentinel", r.Checkpoint)
	}
	start, end := str("startingHashKey", false), str("endingHashKey", false)
	if start != "" && end != "" {
		a, okA := new(big.Int).SetString(start, 10)
		b, okB := new(big.Int).SetString(end, 10)
		if !okA || !okB || a.Sign() < 0 || b.BitLen() > 128 || a.Cmp(b) > 0 {
			fail("hash key range %s..%s is not valid", start, end)
		}
	}
	if t.Multi {
		id, shard := str("streamName", true), str("shardId", true)
		parts := strings.Split(id, ":")
		if len(parts) != 3 || strings.Trim(parts[0], "0123456789") != "" || parts[0] == "" || parts[1] == "" || strings.Trim(parts[2], "0123456789") != "" || parts[2] == "" || parts[2] == "0" {
			fail("streamName %q is not account:stream:creationEpoch", id)
		}
		if r.LeaseKey != id+":"+shard {
			fail("leaseKey %q is not streamName:shardId (%s:%s)", r.LeaseKey, id, shard)
		}
		r.ShardID = shard
	} else {
		if strings.Contains(r.LeaseKey, ":") {
			fail("leaseKey %q is not a bare shard id", r.LeaseKey)
		}
		r.ShardID = r.LeaseKey
	}
	return r, errors.Join(errs...)
}

func digitsOrSentinel(s string) bool {
	switch s {
	case lease.CheckpointTrimHorizon, lease.CheckpointLatest, lease.CheckpointAtTimestamp, lease.CheckpointShardEnd:
		return true
	}
	return s != "" && strings.Trim(s, "0123456789") == ""
}

// CreateKCLTable creates an on-demand table keyed by hashKey (S), as the KCL
// creates its lease and coordinator-state tables, and waits until it is
// ACTIVE. The waiter polls often: its default first delay (20 s) is longer
// than a test waits, and a table dynalite still creates under load would
// fail the wait at its first look.
func CreateKCLTable(ctx context.Context, client *dynamodb.Client, table, hashKey string) error {
	if _, err := client.CreateTable(ctx, &dynamodb.CreateTableInput{
		TableName: aws.String(table), BillingMode: types.BillingModePayPerRequest,
		AttributeDefinitions: []types.AttributeDefinition{{AttributeName: aws.String(hashKey), AttributeType: types.ScalarAttributeTypeS}},
		KeySchema:            []types.KeySchemaElement{{AttributeName: aws.String(hashKey), KeyType: types.KeyTypeHash}},
	}); err != nil {
		return err
	}
	w := dynamodb.NewTableExistsWaiter(client, func(o *dynamodb.TableExistsWaiterOptions) {
		o.MinDelay, o.MaxDelay = 50*time.Millisecond, time.Second
	})
	return w.Wait(ctx, &dynamodb.DescribeTableInput{TableName: aws.String(table)}, 30*time.Second)
}
