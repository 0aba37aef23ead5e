// Package conformance is one behavioural test suite for every Kinesis
// backend the project runs on (the in-process server, kinesalite, the real
// service), so that the in-process stand-in cannot drift from the real thing.
// Known deviations of a backend are declared once, in its Deviations value,
// and the cases respect them.
package conformance

import (
	"bytes"
	"context"
	"crypto/md5"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"math/big"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/kinesis"
	"github.com/aws/aws-sdk-go-v2/service/kinesis/types"
	"github.com/aws/smithy-go"

	"github.com/kinesisgen/kinesisgen/runtime/kinesisapi"
)

// Deviations lists the ways a backend knowingly differs from the service.
// A case that meets a declared deviation checks the deviating behaviour
// instead, so a deviation that a new version of the server no longer has
// fails the suite ("declared ... but ...") until it is taken out.
type Deviations struct {
	// ListShardsIgnoresMaxResults: ListShards returns every shard in one
	// page and never a NextToken.
	ListShardsIgnoresMaxResults bool
	// NoChildShards: GetRecords never returns ChildShards at a closed
	// shard's end.
	NoChildShards bool
	// ExtraReadAtShardEnd: the read that returns a closed shard's last
	// records still hands out a NextShardIterator; a further (empty) read
	// ends the shard.
	ExtraReadAtShardEnd bool
	// AtTimestampPastEndHangs: GetShardIterator AT_TIMESTAMP later than a
	// shard's last record never answers (only the context deadline ends it).
	AtTimestampPastEndHangs bool
	// NoThrottling: the backend never answers
	// ProvisionedThroughputExceededException.
	NoThrottling bool
	// IgnoresShardFilter: ListShards lists every shard whatever its
	// ShardFilter says.
	IgnoresShardFilter bool
	// ShardFilterAtTrimHorizonListsAll: ListShards with ShardFilter
	// AT_TRIM_HORIZON lists every shard, as FROM_TRIM_HORIZON does, instead
	// of only the shards open at the trim horizon.
	ShardFilterAtTrimHorizonListsAll bool
	// ReshardsClosedShards: SplitShard accepts a shard that is already
	// closed instead of answering InvalidArgumentException.
	ReshardsClosedShards bool
	// SplitsAtOwnStartingHashKey: SplitShard accepts a NewStartingHashKey
	// equal to the shard's own StartingHashKey (a child with an empty
	// range) instead of answering InvalidArgumentException.
	SplitsAtOwnStartingHashKey bool
	// AcceptsOtherShardsSequenceNumber: GetShardIterator AT_SEQUENCE_NUMBER
	// hands out an iterator for a sequence number of another shard instead
	// of answering InvalidArgumentException.
	AcceptsOtherShardsSequenceNumber bool
	// ClosedShardEndsAtMaxLong: a closed shard's EndingSequenceNumber is
	// 9223372036854775807 (the largest int64), not a number at or above its
	// last record's and below its children's.
	ClosedShardEndsAtMaxLong bool
	// ReshardClosedShardIsResourceInUse: SplitShard and MergeShards of a
	// closed shard answer ResourceInUseException, not
	// InvalidArgumentException.
	ReshardClosedShardIsResourceInUse bool
	// UnknownSequenceNumberIsNotFound: GetShardIterator AT_SEQUENCE_NUMBER
	// with a sequence number no record has answers
	// ResourceNotFoundException, not InvalidArgumentException.
	UnknownSequenceNumberIsNotFound bool
	// IgnoresNeedlessSequenceNumber: GetShardIterator TRIM_HORIZON with a
	// StartingSequenceNumber ignores it and hands out an iterator instead
	// of answering InvalidArgumentException.
	IgnoresNeedlessSequenceNumber bool
	// MadeUpIteratorIsServerError: GetRecords with an iterator the server
	// never handed out fails with HTTP 500 instead of
	// InvalidArgumentException.
	MadeUpIteratorIsServerError bool
	// HashRangesDivideMaxHash: a new stream's n shards split the key space
	// in steps of (2^128-1)/n instead of 2^128/n, so where n divides 2^128
	// every shard but the last ends one lower than on the service (2
	// shards: shard 0 ends at ...105726, not ...105727).
	HashRangesDivideMaxHash bool
	// KeyLengthIsInvalidArgument: a partition key of 0 or more than 256
	// units is answered InvalidArgumentException, not ValidationException.
	KeyLengthIsInvalidArgument bool
	// NoEnhancedFanOut: the backend serves no stream consumers and no
	// SubscribeToShard (RegisterStreamConsumer fails), so the fan-out
	// cases check only that.
	NoEnhancedFanOut bool
	// NoInitialResponse: SubscribeToShard's event stream does not start
	// with the initial-response event the service sends, and the SDK
	// (v1.57.0) refuses such a stream ("expected initial-response"). The
	// suite checks that on Harness.Unmended; without one, the subscription
	// cases check only that.
	NoInitialResponse bool
	// RefusesSubscriptionInEventStream: a SubscribeToShard the backend
	// refuses (an unknown consumer, a shard already subscribed) is answered
	// HTTP 200 with an event stream holding one exception message, not an
	// error answer, and the SDK (v1.57.0) cannot read it (it fails looking
	// for the initial response instead of returning the exception). The
	// suite checks that on Harness.Unmended; without one, the subscription
	// cases check only that.
	RefusesSubscriptionInEventStream bool
	// NoSubscribeRateLimit: a second SubscribeToShard of one consumer and
	// shard within a second is not LimitExceededException; while the first
	// subscription is open it is ResourceInUseException.
	NoSubscribeRateLimit bool
	// SubscriptionIgnoresShardEnd: a subscription of a closed shard never
	// ends: after the shard's last records its events go on, empty, each
	// with a ContinuationSequenceNumber and without ChildShards. (The
	// runtime's fan-out reader then confirms the end with GetRecords;
	// kinesistest.WithSubscriptionIgnoringShardEnd deviates the same way.)
	SubscriptionIgnoresShardEnd bool
	// SubscriptionOutlivesConsumer: a subscription goes on sending events
	// after its consumer was deregistered, instead of ending with
	// ResourceNotFoundException.
	SubscriptionOutlivesConsumer bool

	// The service's features of SDK v1.57.0 (queues, record size per
	// stream, AUTO placement, StreamARN everywhere); see queues.go and
	// streams.go for the behaviour the suite expects where the SDK's
	// documentation is silent.

	// NoOnDemand: CreateStream without ShardCount is a ValidationException:
	// there are no on-demand streams, so the queue and AUTO cases check
	// only that.
	NoOnDemand bool
	// NoQueues: the queue operations are unknown (CreateQueue fails).
	NoQueues bool
	// NoRecordDistributionStrategy: AUTO is not implemented:
	// UpdateStreamRecordDistributionStrategy fails and records of one key
	// all land on one shard of an on-demand stream created AUTO.
	NoRecordDistributionStrategy bool
	// NoMaxRecordSize: a record is limited to 1 MiB whatever
	// MaxRecordSizeInKiB says, and UpdateMaxRecordSize fails.
	NoMaxRecordSize bool
	// RecordSizeExcludesKey: the record size limit counts the data alone,
	// not data plus partition key as the SDK documents.
	RecordSizeExcludesKey bool
	// DefaultMaxRecordSizeUnreported: DescribeStreamSummary leaves out
	// MaxRecordSizeInKiB for a stream created without one.
	DefaultMaxRecordSizeUnreported bool
	// MaxRecordSizeRangeIsInvalidArgument: UpdateMaxRecordSize out of 1024
	// to 10240 answers InvalidArgumentException, not the
	// ValidationException the SDK documents.
	MaxRecordSizeRangeIsInvalidArgument bool
	// PutRecordsUncheckedSizes: PutRecords stores a record over the
	// stream's limit instead of refusing the request.
	PutRecordsUncheckedSizes bool
	// PutRecordsLimit5MiB: a PutRecords request over about 5 MiB is
	// refused (HTTP 413, the server's body limit) instead of taken up to
	// 10 MiB.
	PutRecordsLimit5MiB bool
	// NoStreamARN: a call naming its stream by StreamARN alone is refused
	// (StreamName is required), so the ARN cases check only that.
	NoStreamARN bool
	// MalformedARNIsNotFound: a malformed StreamARN is
	// ResourceNotFoundException, not ValidationException.
	MalformedARNIsNotFound bool
}

// Kinesalite is how kinesalite 3.3.3 deviates from the service.
var Kinesalite = Deviations{
	ListShardsIgnoresMaxResults: true,
	NoChildShards:               true,
	ExtraReadAtShardEnd:         true,
	AtTimestampPastEndHangs:     true,
	NoThrottling:                true,
	ReshardsClosedShards:        true,
	IgnoresShardFilter:          true,
	NoEnhancedFanOut:            true,

	NoOnDemand:                   true,
	NoQueues:                     true,
	NoRecordDistributionStrategy: true,
	NoMaxRecordSize:              true,
	RecordSizeExcludesKey:        true,
	PutRecordsLimit5MiB:          true,
	NoStreamARN:                  true,
}

// KinesisMock is how kinesis-mock (npm kinesis-local 0.6.2) deviates from
// the service. It sends ChildShards at a shard's end, ends a closed shard on
// the read that returns its last records and paginates ListShards. It
// serves stream consumers, and SubscribeToShard, in a form the SDK cannot
// read (no initial-response event, refusals inside the event stream) until
// a test mends it (kinesismock.Transport), and pushes events once
// a second.
var KinesisMock = Deviations{
	NoThrottling:                      true,
	ShardFilterAtTrimHorizonListsAll:  true,
	SplitsAtOwnStartingHashKey:        true,
	AcceptsOtherShardsSequenceNumber:  true,
	ClosedShardEndsAtMaxLong:          true,
	ReshardClosedShardIsResourceInUse: true,
	UnknownSequenceNumberIsNotFound:   true,
	IgnoresNeedlessSequenceNumber:     true,
	MadeUpIteratorIsServerError:       true,
	HashRangesDivideMaxHash:           true,
	KeyLengthIsInvalidArgument:        true,
	NoInitialResponse:                 true,
	RefusesSubscriptionInEventStream:  true,
	NoSubscribeRateLimit:              true,
	SubscriptionIgnoresShardEnd:       true,
	SubscriptionOutlivesConsumer:      true,

	NoQueues:                            true,
	NoRecordDistributionStrategy:        true,
	RecordSizeExcludesKey:               true,
	DefaultMaxRecordSizeUnreported:      true,
	MaxRecordSizeRangeIsInvalidArgument: true,
	PutRecordsUncheckedSizes:            true,
	MalformedARNIsNotFound:              true,
}

// maxLong is the EndingSequenceNumber of a closed shard on a backend with
// ClosedShardEndsAtMaxLong.
const maxLong = "9223372036854775807"

// Harness describes a backend under test.
type Harness struct {
	// New returns the API to test; it is called once per case. A backend
	// that is shared between cases is fine: every case uses fresh streams.
	New func(t *testing.T) kinesisapi.API
	// Throttled, when set, returns a backend that enforces the service's
	// per-shard limits, for the throttling case (New is used otherwise).
	// The in-process server throttles only when asked to.
	Throttled func(t *testing.T) kinesisapi.API
	// Deviations are the backend's known differences from the service.
	Deviations Deviations
	// Timeout bounds each case (default 90 s: a 10 MiB PutRecords over TLS
	// under the race detector took over 30 s on a loaded 2-core machine).
	Timeout time.Duration
	// Unmended, when set, returns the backend without what New's API
	// mends of its declared wire deviations (NoInitialResponse,
	// RefusesSubscriptionInEventStream), for the suite to check they are
	// still there; the subscription cases then run on New's API.
	Unmended func(t *testing.T) kinesisapi.API
	// SubscribeInterval is the backend's least time between two
	// SubscribeToShard calls of one consumer for one shard (default 1 s,
	// the service's); the in-process server's is configurable, so its
	// harness can set it lower and wait less.
	SubscribeInterval time.Duration
	// OtherAccount, when set, returns api's backend acting for another
	// account, for the cross-account ARN case (nil: the case checks only
	// that another account's ARN is not found).
	OtherAccount func(t *testing.T, api kinesisapi.API) kinesisapi.API
}

// Run runs every case against the harness's backend.
func Run(t *testing.T, h Harness) {
	if h.Timeout == 0 {
		h.Timeout = 90 * time.Second
	}
	if h.SubscribeInterval == 0 {
		h.SubscribeInterval = time.Second
	}
	cases := []struct {
		name      string
		run       func(*testing.T, *env)
		throttled bool
	}{
		{"StreamLifecycle", testStreamLifecycle, false},
		{"EvenHashRanges", testEvenHashRanges, false},
		{"KeyRouting", testKeyRouting, false},
		{"PartitionKeyLength", testPartitionKeyLength, false},
		{"ExplicitHashKey", testExplicitHashKey, false},
		{"PerShardOrder", testPerShardOrder, false},
		{"IteratorTypes", testIteratorTypes, false},
		{"AtTimestamp", testAtTimestamp, false},
		{"IteratorErrors", testIteratorErrors, false},
		{"GetRecordsLimit", testGetRecordsLimit, false},
		{"ListShardsPages", testListShardsPages, false},
		{"Split", testSplit, false},
		{"Merge", testMerge, false},
		{"ReshardErrors", testReshardErrors, false},
		{"ShardFilter", testShardFilter, false},
		{"Throttling", testThrottling, true},
		{"StreamConsumers", testStreamConsumers, false},
		{"SubscribeToShard", testSubscribeToShard, false},
		{"SubscribeAtShardEnd", testSubscribeAtShardEnd, false},
		{"SubscribeLimits", testSubscribeLimits, false},
		{"SubscribeDeregistered", testSubscribeDeregistered, false},
		{"MaxRecordSize", testMaxRecordSize, false},
		{"PutRecordsRequestSize", testPutRecordsRequestSize, false},
		{"AutoDistribution", testAutoDistribution, false},
		{"StreamARN", testStreamARN, false},
		{"Queues", testQueues, false},
		{"QueueVisibility", testQueueVisibility, false},
		{"QueueDeadLetters", testQueueDeadLetters, false},
		{"QueueErrors", testQueueErrors, false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), h.Timeout)
			defer cancel()
			newAPI := h.New
			if c.throttled && h.Throttled != nil {
				newAPI = h.Throttled
			}
			e := &env{t: t, ctx: ctx, api: newAPI(t), dev: h.Deviations, subscribeInterval: h.SubscribeInterval}
			if h.OtherAccount != nil {
				e.other = h.OtherAccount(t, e.api)
			}
			if h.Unmended != nil {
				e.unmended = h.Unmended(t)
			}
			c.run(t, e)
		})
	}
}

type env struct {
	t                 *testing.T
	ctx               context.Context
	api               kinesisapi.API
	dev               Deviations
	subscribeInterval time.Duration
	unmended          kinesisapi.API // nil: api is the backend as it answers
	other             kinesisapi.API // the backend acting for another account, or nil
}

// stream creates a stream with a name unique to this run and waits until it
// is ACTIVE; it is deleted when the test ends.
func (e *env) stream(shards int32) string {
	e.t.Helper()
	var rnd [4]byte
	_, _ = rand.Read(rnd[:])
	name := fmt.Sprintf("conf-%s-%s", strings.NewReplacer("/", "-", "_", "-").Replace(e.t.Name()), hex.EncodeToString(rnd[:]))
	if len(name) > 128 {
		name = name[len(name)-128:]
	}
	if _, err := e.api.CreateStream(e.ctx, &kinesis.CreateStreamInput{StreamName: &name, ShardCount: &shards}); err != nil {
		e.t.Fatalf("CreateStream %s: %v", name, err)
	}
	e.waitActive(name)
	e.t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_, _ = e.api.DeleteStream(ctx, &kinesis.DeleteStreamInput{StreamName: &name})
	})
	return name
}

// waitActive waits for a stream to leave CREATING/UPDATING. Servers that
// change state asynchronously offer no event to await, so this polls
// briefly; an in-process server is ACTIVE at once and never sleeps here.
func (e *env) waitActive(name string) {
	e.t.Helper()
	for {
		out, err := e.api.DescribeStreamSummary(e.ctx, &kinesis.DescribeStreamSummaryInput{StreamName: &name})
		if err != nil {
			e.t.Fatalf("DescribeStreamSummary %s: %v", name, err)
		}
		if out.StreamDescriptionSummary.StreamStatus == types.StreamStatusActive {
			return
		}
		select {
		case <-e.ctx.Done():
			e.t.Fatalf("stream %s not ACTIVE before the deadline (status %s)", name, out.StreamDescriptionSummary.StreamStatus)
		case <-time.After(5 * time.Millisecond):
		}
	}
}

func (e *env) shards(name string) []types.Shard {
	e.t.Helper()
	var all []types.Shard
	in := &kinesis.ListShardsInput{StreamName: &name}
	for {
		out, err := e.api.ListShards(e.ctx, in)
		if err != nil {
			e.t.Fatalf("ListShards %s: %v", name, err)
		}
		all = append(all, out.Shards...)
		if out.NextToken == nil {
			return all
		}
		in = &kinesis.ListShardsInput{NextToken: out.NextToken}
	}
}

type put struct {
	key   string
	data  []byte
	shard string
	seq   string
}

// putAll writes records with PutRecords (in chunks of 500) and returns
// them with their shard and sequence number.
func (e *env) putAll(name string, keys []string, data func(i int) []byte) []put {
	e.t.Helper()
	out := make([]put, len(keys))
	for start := 0; start < len(keys); start += 500 {
		end := min(start+500, len(keys))
		entries := make([]types.PutRecordsRequestEntry, 0, end-start)
		for i := start; i < end; i++ {
			out[i] = put{key: keys[i], data: data(i)}
			entries = append(entries, types.PutRecordsRequestEntry{PartitionKey: aws.String(keys[i]), Data: out[i].data})
		}
		res, err := e.api.PutRecords(e.ctx, &kinesis.PutRecordsInput{StreamName: &name, Records: entries})
		if err != nil {
			e.t.Fatalf("PutRecords: %v", err)
		}
		if aws.ToInt32(res.FailedRecordCount) != 0 || len(res.Records) != len(entries) {
			e.t.Fatalf("PutRecords: %d failed of %d, %d results", aws.ToInt32(res.FailedRecordCount), len(entries), len(res.Records))
		}
		for j, r := range res.Records {
			if r.ShardId == nil || r.SequenceNumber == nil {
				e.t.Fatalf("PutRecords entry %d: no shard or sequence number: %+v", j, r)
			}
			out[start+j].shard, out[start+j].seq = *r.ShardId, *r.SequenceNumber
		}
	}
	return out
}

func (e *env) putOne(name, key string, data []byte) put {
	e.t.Helper()
	out, err := e.api.PutRecord(e.ctx, &kinesis.PutRecordInput{StreamName: &name, PartitionKey: &key, Data: data})
	if err != nil {
		e.t.Fatalf("PutRecord: %v", err)
	}
	return put{key: key, data: data, shard: aws.ToString(out.ShardId), seq: aws.ToString(out.SequenceNumber)}
}

func (e *env) iterator(name, shard string, typ types.ShardIteratorType, seq string, ts *time.Time) string {
	e.t.Helper()
	in := &kinesis.GetShardIteratorInput{StreamName: &name, ShardId: &shard, ShardIteratorType: typ, Timestamp: ts}
	if seq != "" {
		in.StartingSequenceNumber = &seq
	}
	out, err := e.api.GetShardIterator(e.ctx, in)
	if err != nil {
		e.t.Fatalf("GetShardIterator %s %s: %v", shard, typ, err)
	}
	return aws.ToString(out.ShardIterator)
}

// readN reads from it until n records arrived (or the context ends) and
// returns them with the iterator to continue from.
func (e *env) readN(it string, n int) ([]types.Record, string) {
	e.t.Helper()
	var got []types.Record
	for len(got) < n {
		out, err := e.api.GetRecords(e.ctx, &kinesis.GetRecordsInput{ShardIterator: &it})
		if err != nil {
			e.t.Fatalf("GetRecords after %d of %d records: %v", len(got), n, err)
		}
		got = append(got, out.Records...)
		if out.NextShardIterator == nil {
			e.t.Fatalf("shard ended after %d of %d records", len(got), n)
		}
		it = *out.NextShardIterator
	}
	return got, it
}

// readToEnd reads a closed shard until GetRecords hands out no further
// iterator and returns its records and the last answer. The read that
// returns the shard's last records must end it, unless the backend has
// ExtraReadAtShardEnd: then exactly one empty read after them may.
func (e *env) readToEnd(it string) ([]types.Record, *kinesis.GetRecordsOutput) {
	e.t.Helper()
	var got []types.Record
	empty := 0 // empty reads after the last record so far
	for {
		out, err := e.api.GetRecords(e.ctx, &kinesis.GetRecordsInput{ShardIterator: &it})
		if err != nil {
			e.t.Fatalf("GetRecords: %v", err)
		}
		got = append(got, out.Records...)
		if len(out.Records) == 0 && len(got) > 0 {
			empty++
		} else {
			empty = 0
		}
		allowed := 0
		if e.dev.ExtraReadAtShardEnd {
			allowed = 1
		}
		if empty > allowed {
			e.t.Fatalf("closed shard: the read returning its last (%d) records did not end it; %d more empty reads were needed (allowed: %d)", len(got), empty, allowed)
		}
		if out.NextShardIterator == nil {
			return got, out
		}
		if len(out.Records) == 0 && len(got) == 0 && empty == 0 {
			// An empty closed shard must end on the first read.
			e.t.Fatalf("closed shard with no records: GetRecords answered a NextShardIterator")
		}
		it = *out.NextShardIterator
	}
}

func seqBig(t *testing.T, s string) *big.Int {
	t.Helper()
	b, ok := new(big.Int).SetString(s, 10)
	if !ok {
		t.Fatalf("sequence number %q is not a decimal integer", s)
	}
	return b
}

func hashBig(t *testing.T, s *string) *big.Int {
	t.Helper()
	if s == nil {
		t.Fatal("missing hash key")
	}
	b, ok := new(big.Int).SetString(*s, 10)
	if !ok {
		t.Fatalf("hash key %q is not a decimal integer", *s)
	}
	return b
}

func md5Key(key string) *big.Int {
	sum := md5.Sum([]byte(key))
	return new(big.Int).SetBytes(sum[:])
}

var maxHash = new(big.Int).Sub(new(big.Int).Lsh(big.NewInt(1), 128), big.NewInt(1))

// owner returns the open shard whose range holds h.
func owner(t *testing.T, shards []types.Shard, h *big.Int) string {
	t.Helper()
	for _, s := range shards {
		if s.SequenceNumberRange.EndingSequenceNumber != nil {
			continue
		}
		if hashBig(t, s.HashKeyRange.StartingHashKey).Cmp(h) <= 0 && h.Cmp(hashBig(t, s.HashKeyRange.EndingHashKey)) <= 0 {
			return *s.ShardId
		}
	}
	t.Fatalf("no open shard holds hash key %s", h)
	return ""
}

func find(shards []types.Shard, id string) *types.Shard {
	for i := range shards {
		if aws.ToString(shards[i].ShardId) == id {
			return &shards[i]
		}
	}
	return nil
}

// wantErr asserts err matches the SDK error type T.
func wantErr[T error](t *testing.T, what string, err error) {
	t.Helper()
	if _, ok := errors.AsType[T](err); !ok {
		var zero T
		t.Fatalf("%s: got error %v, want %T", what, err, zero)
	}
}

// wantCode asserts err is a service error with the given code.
func wantCode(t *testing.T, what string, err error, code string) {
	t.Helper()
	if ae, ok := errors.AsType[smithy.APIError](err); !ok || ae.ErrorCode() != code {
		t.Errorf("%s: got error %v, want %s", what, err, code)
	}
}

func keys(prefix string, n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprintf("%s-%d", prefix, i)
	}
	return out
}

func payload(i int) []byte { return []byte(fmt.Sprintf("record-%04d\x00\xff", i)) }

func sameData(t *testing.T, what string, got []types.Record, want []put) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%s: got %d records, want %d", what, len(got), len(want))
	}
	for i := range want {
		if !bytes.Equal(got[i].Data, want[i].data) || aws.ToString(got[i].SequenceNumber) != want[i].seq || aws.ToString(got[i].PartitionKey) != want[i].key {
			t.Fatalf("%s: record %d = (%q, %s, %s), want (%q, %s, %s)", what, i,
				got[i].Data, aws.ToString(got[i].SequenceNumber), aws.ToString(got[i].PartitionKey), want[i].data, want[i].seq, want[i].key)
		}
		if got[i].ApproximateArrivalTimestamp == nil || got[i].ApproximateArrivalTimestamp.IsZero() {
			t.Fatalf("%s: record %d has no ApproximateArrivalTimestamp", what, i)
		}
	}
}
