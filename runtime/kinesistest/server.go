package kinesistest

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/kinesis"
	"github.com/aws/aws-sdk-go-v2/service/kinesis/types"

	"github.com/kinesisgen/kinesisgen/runtime/kinesisapi"
)

// Server is an in-process Kinesis Data Streams service. It implements
// kinesisapi.API with the SDK's own input, output and error types. The zero
// value is not usable; call New. All methods are safe for concurrent use.
type Server struct {
	cfg config

	mu      sync.RWMutex
	streams map[string]*stream
	queues  map[string]*queue // by ARN

	epochs atomic.Uint64 // distinguishes a stream from a later one of the same name

	putFault  atomic.Pointer[func(stream, partitionKey string) error]
	callFault atomic.Pointer[func(Call) error]
	calls     [opCount]atomic.Int64

	sdkOnce sync.Once
	sdk     *kinesis.Client // decodes in-process event streams (SubscribeToShard)
}

var _ kinesisapi.API = (*Server)(nil)

type config struct {
	now         func() time.Time
	retention   time.Duration
	iteratorTTL time.Duration
	longPoll    time.Duration
	shardLimit  int
	throttle    bool
	account     string
	region      string

	consumerLimit      int
	consumerActivation time.Duration
	consumerDeletion   time.Duration
	queueActivation    time.Duration
	subLifetime        time.Duration
	subscribeInterval  time.Duration
	takeover           time.Duration
	heartbeat          time.Duration
	ignoreShardEnd     bool
}

// Option configures a Server.
type Option func(*config)

// WithClock sets the clock used for arrival timestamps, retention, iterator
// expiry and timestamp positions. Tests move it forward to trim records or
// expire iterators without waiting.
func WithClock(now func() time.Time) Option { return func(c *config) { c.now = now } }

// WithRetention sets how long records are kept (default 24 h, the service's
// default). Closed shards disappear from ListShards once they are older.
func WithRetention(d time.Duration) Option { return func(c *config) { c.retention = d } }

// WithIteratorTTL sets how long a shard iterator stays valid (default 5 min,
// as in the service).
func WithIteratorTTL(d time.Duration) Option { return func(c *config) { c.iteratorTTL = d } }

// WithLongPoll makes GetRecords on an open shard with nothing to read wait up
// to d (bounded by its context) for a record to arrive before answering
// empty. The default 0 answers at once, like the service.
func WithLongPoll(d time.Duration) Option { return func(c *config) { c.longPoll = d } }

// WithShardLimit sets the account's open-shard limit per stream (default
// 1000); CreateStream and SplitShard beyond it fail with
// LimitExceededException.
func WithShardLimit(n int) Option { return func(c *config) { c.shardLimit = n } }

// WithThrottling enforces the service's per-shard limits: 1,000 records and
// 1 MiB (data plus partition keys) written per second, 5 GetRecords calls
// per second. Over them, PutRecords fails the entry, and PutRecord and
// GetRecords fail, with ProvisionedThroughputExceededException. Seconds are
// those of the server's clock. It also holds each SubscribeToShard
// subscription to 2 MiB of data a second (a token bucket on the wall
// clock), as the service pushes no faster to one consumer. Off by default: tests and benchmarks should
// not be throttled unless they are about throttling.
func WithThrottling() Option { return func(c *config) { c.throttle = true } }

// WithConsumerLimit sets how many consumers a stream may have registered at
// once (default 20, the service's); RegisterStreamConsumer beyond it fails
// with LimitExceededException.
func WithConsumerLimit(n int) Option { return func(c *config) { c.consumerLimit = n } }

// WithConsumerActivation sets how long a newly registered stream consumer
// stays CREATING before it is ACTIVE (default 0: RegisterStreamConsumer
// answers CREATING, as the service does, and the next DescribeStreamConsumer
// already sees ACTIVE). The service takes seconds; set a delay to test code
// that waits for ACTIVE. It is measured on the server's clock (WithClock).
// SubscribeToShard for a consumer that is not ACTIVE yet fails with
// ResourceInUseException.
func WithConsumerActivation(d time.Duration) Option {
	return func(c *config) { c.consumerActivation = d }
}

// WithConsumerDeletion sets how long a deregistered stream consumer stays
// DELETING before it is gone (default 0: gone at once; the service takes
// seconds). While DELETING it is described and listed as such, its name
// cannot be registered again (ResourceInUseException) and it cannot be
// subscribed (ResourceInUseException). Measured on the server's clock
// (WithClock).
func WithConsumerDeletion(d time.Duration) Option {
	return func(c *config) { c.consumerDeletion = d }
}

// WithQueueActivation sets how long a new queue stays CREATING before it
// is ACTIVE (default 0: CreateQueue answers CREATING, as the service does,
// and the next DescribeQueue already sees ACTIVE). Receiving from a queue
// that is not ACTIVE fails with ResourceInUseException. Measured on the
// server's clock (WithClock).
func WithQueueActivation(d time.Duration) Option {
	return func(c *config) { c.queueActivation = d }
}

// WithSubscriptionLifetime sets how long a SubscribeToShard subscription
// lasts before its event stream ends cleanly (default 5 min, as on the
// service; tests use a second or two to exercise renewal). Wall-clock time.
func WithSubscriptionLifetime(d time.Duration) Option {
	return func(c *config) { c.subLifetime = d }
}

// WithSubscribeInterval sets the least time between two SubscribeToShard
// calls of one consumer for one shard (default 1 s, the service's limit of
// one call per second per shard per consumer); a call sooner fails with
// LimitExceededException. 0 lifts the limit. Wall-clock time.
func WithSubscribeInterval(d time.Duration) Option {
	return func(c *config) { c.subscribeInterval = d }
}

// WithSubscriptionTakeover sets how old a consumer's active subscription to
// a shard must be before a new SubscribeToShard for the same consumer and
// shard takes it over (default 5 s, as on the service): a call while the
// active one is younger fails with ResourceInUseException; an older one is
// ended with a ResourceInUseException event and the new call succeeds. 0
// never takes over: the active subscription must end first. Wall-clock time.
func WithSubscriptionTakeover(d time.Duration) Option {
	return func(c *config) { c.takeover = d }
}

// WithSubscriptionIgnoringShardEnd makes SubscribeToShard deviate from the
// service as kinesis-mock (LocalStack's Kinesis engine) does
// (conformance.KinesisMock.SubscriptionIgnoresShardEnd): a subscription of
// a closed shard never ends; after the shard's last records its events go
// on, empty, each with a ContinuationSequenceNumber and without
// ChildShards. As on kinesis-mock, an idle subscription sends an event
// every second, not every 5 s. For tests of readers that must finish such
// a shard all the same.
func WithSubscriptionIgnoringShardEnd() Option {
	return func(c *config) { c.ignoreShardEnd, c.heartbeat = true, time.Second }
}

// New returns an empty server.
func New(opts ...Option) *Server {
	cfg := config{
		now:         time.Now,
		retention:   24 * time.Hour,
		iteratorTTL: 5 * time.Minute,
		shardLimit:  1000,
		account:     "000000000000",
		region:      "us-east-1",

		consumerLimit:     20,
		subLifetime:       5 * time.Minute,
		subscribeInterval: time.Second,
		takeover:          5 * time.Second,
		heartbeat:         heartbeatEvery,
	}
	for _, o := range opts {
		o(&cfg)
	}
	return &Server{cfg: cfg, streams: map[string]*stream{}, queues: map[string]*queue{}}
}

func (s *Server) now() time.Time { return s.cfg.now().UTC() }

// stream is one stream's lineage. Shards are only ever added; the routing
// table and the shard list are immutable snapshots swapped under mu, so the
// record paths never take a stream-wide lock.
type stream struct {
	name    string
	account string
	key     string // in Server.streams: see streamKey
	epoch   uint64
	created time.Time
	mode    types.StreamMode

	mu   sync.Mutex // serializes resharding
	all  atomic.Pointer[[]*shard]
	open atomic.Pointer[[]*shard] // sorted by hash range: the routing table

	counter atomic.Uint64 // source of sequence numbers

	cmu        sync.Mutex // guards the consumers and their subscriptions
	consumers  map[string]*consumer
	lastEpoch  map[string]int64 // the last consumer ARN epoch of each name
	queueCount int              // queues on the stream; they share the consumer limit

	maxRecordKiB atomic.Int32 // the largest record the stream takes
	auto         atomic.Bool  // record distribution strategy AUTO
	spread       atomic.Uint64

	qmu      sync.Mutex
	qwake    chan struct{} // made by a waiting queue receive, closed by the next append
	qwaiting atomic.Bool   // qwake is set: appends must wake it
}

func (st *stream) arn(c config) string {
	return fmt.Sprintf("arn:aws:kinesis:%s:%s:stream/%s", c.region, st.account, st.name)
}

func (st *stream) shard(index int) *shard {
	all := *st.all.Load()
	if index < 0 || index >= len(all) {
		return nil
	}
	return all[index]
}

func (st *stream) shardByID(id string) *shard {
	idx, ok := parseShardID(id)
	if !ok {
		return nil
	}
	return st.shard(idx)
}

// validStreamName is the service's pattern [a-zA-Z0-9_.-]{1,128}, by hand:
// it runs on every call.
func validStreamName(s string) bool {
	if len(s) < 1 || len(s) > 128 {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '_' || c == '.' || c == '-') {
			return false
		}
	}
	return true
}

// lookup finds a stream by its key (streamKey).
func (s *Server) lookup(key string) (*stream, error) {
	s.mu.RLock()
	st := s.streams[key]
	s.mu.RUnlock()
	if st == nil {
		account, name, ok := strings.Cut(key, "/")
		if !ok {
			account, name = s.cfg.account, key
		}
		return nil, notFound("Stream %s under account %s not found.", name, account)
	}
	return st, nil
}

// begin runs what every operation does first: honour ctx, count the call
// and consult the injected call fault.
func (s *Server) begin(ctx context.Context, op Op, streamName, shardID string) error {
	s.calls[op].Add(1)
	if err := ctx.Err(); err != nil {
		return err
	}
	if f := s.callFault.Load(); f != nil {
		if err := (*f)(Call{Op: op, Stream: streamName, Shard: shardID}); err != nil {
			return opError(op.String(), err)
		}
	}
	return nil
}

// beginStream resolves the stream a request names by StreamName or
// StreamARN and runs begin with it; a bad name fails the call only after
// begin has counted it and consulted the call fault.
func (s *Server) beginStream(ctx context.Context, op Op, name, arn *string, shardID string) (string, error) {
	resolved, nameErr := s.resolve(ctx, name, arn)
	if err := s.begin(ctx, op, resolved, shardID); err != nil {
		return "", err
	}
	if nameErr != nil {
		return "", opError(op.String(), nameErr)
	}
	return resolved, nil
}

// CreateStream creates an ACTIVE stream with ShardCount shards (4 when
// absent, as an on-demand stream starts) splitting the hash-key space
// evenly. An on-demand stream (StreamModeDetails) takes no ShardCount.
func (s *Server) CreateStream(ctx context.Context, in *kinesis.CreateStreamInput, _ ...func(*kinesis.Options)) (*kinesis.CreateStreamOutput, error) {
	const op = OpCreateStream
	name, err := s.beginStream(ctx, op, in.StreamName, nil, "")
	if err != nil {
		return nil, err
	}
	n := 4
	mode := types.StreamModeProvisioned
	if in.StreamModeDetails != nil && in.StreamModeDetails.StreamMode == types.StreamModeOnDemand {
		mode = types.StreamModeOnDemand
		if in.ShardCount != nil {
			return nil, opError(op.String(), validation("ShardCount is not allowed for a stream in ON_DEMAND mode"))
		}
	}
	if in.ShardCount != nil {
		n = int(*in.ShardCount)
	}
	if n < 1 {
		return nil, opError(op.String(), validation("1 validation error detected: Value '%d' at 'shardCount' failed to satisfy constraint: Member must have value greater than or equal to 1", n))
	}
	if n > s.cfg.shardLimit {
		return nil, opError(op.String(), limitExceeded("This request would exceed the shard limit for the account %s in %s. Current shard count for the account: 0. Limit: %d.", s.cfg.account, s.cfg.region, s.cfg.shardLimit))
	}
	if err := validRecordKiB(in.MaxRecordSizeInKiB); err != nil {
		return nil, opError(op.String(), err)
	}
	if err := validStrategy(in.RecordDistributionStrategy, mode); err != nil {
		return nil, opError(op.String(), err)
	}
	now := s.now()
	st := &stream{name: aws.ToString(in.StreamName), account: s.caller(ctx), key: name, epoch: s.epochs.Add(1), created: now, mode: mode, consumers: map[string]*consumer{}, lastEpoch: map[string]int64{}}
	st.maxRecordKiB.Store(aws.ToInt32(in.MaxRecordSizeInKiB))
	if in.MaxRecordSizeInKiB == nil {
		st.maxRecordKiB.Store(defaultRecordKiB)
	}
	st.auto.Store(in.RecordDistributionStrategy == types.RecordDistributionStrategyAuto)
	shards := make([]*shard, n)
	for i, r := range evenRanges(n) {
		shards[i] = newShard(i, r[0], r[1], formatSeq(0, i), time.Time{})
	}
	open := append([]*shard(nil), shards...)
	st.all.Store(&shards)
	st.open.Store(&open)

	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := s.streams[name]; ok {
		return nil, opError(op.String(), inUse("Stream %s under account %s already exists.", name, s.cfg.account))
	}
	s.streams[name] = st
	return &kinesis.CreateStreamOutput{}, nil
}

// DeleteStream removes a stream at once; its iterators answer
// ResourceNotFoundException from then on.
func (s *Server) DeleteStream(ctx context.Context, in *kinesis.DeleteStreamInput, _ ...func(*kinesis.Options)) (*kinesis.DeleteStreamOutput, error) {
	const op = OpDeleteStream
	name, err := s.beginStream(ctx, op, in.StreamName, in.StreamARN, "")
	if err != nil {
		return nil, err
	}
	s.mu.Lock()
	st := s.streams[name]
	if st == nil {
		s.mu.Unlock()
		return nil, opError(op.String(), notFound("Stream %s under account %s not found.", name, s.cfg.account))
	}
	for _, q := range s.queues {
		if q.st == st {
			s.mu.Unlock()
			return nil, opError(op.String(), inUse("Stream %s under account %s has queues; delete them first.", name, s.cfg.account))
		}
	}
	delete(s.streams, name)
	s.mu.Unlock()
	// Wake long-polling readers so they see the stream is gone.
	for _, sh := range *st.all.Load() {
		sh.mu.Lock()
		sh.wakeLocked()
		sh.mu.Unlock()
	}
	return &kinesis.DeleteStreamOutput{}, nil
}

// DescribeStreamSummary describes an ACTIVE stream.
func (s *Server) DescribeStreamSummary(ctx context.Context, in *kinesis.DescribeStreamSummaryInput, _ ...func(*kinesis.Options)) (*kinesis.DescribeStreamSummaryOutput, error) {
	const op = OpDescribeStreamSummary
	name, err := s.beginStream(ctx, op, in.StreamName, in.StreamARN, "")
	if err != nil {
		return nil, err
	}
	st, err := s.lookup(name)
	if err != nil {
		return nil, opError(op.String(), err)
	}
	hours := int32((s.cfg.retention + time.Hour - 1) / time.Hour)
	created := st.created
	st.cmu.Lock()
	st.purgeLocked(s.now())
	consumers, queues := len(st.consumers), st.queueCount
	st.cmu.Unlock()
	return &kinesis.DescribeStreamSummaryOutput{StreamDescriptionSummary: &types.StreamDescriptionSummary{
		StreamName:                 aws.String(st.name),
		StreamARN:                  aws.String(st.arn(s.cfg)),
		StreamStatus:               types.StreamStatusActive,
		StreamModeDetails:          &types.StreamModeDetails{StreamMode: st.mode},
		OpenShardCount:             aws.Int32(int32(len(*st.open.Load()))),
		RetentionPeriodHours:       aws.Int32(hours),
		StreamCreationTimestamp:    &created,
		EncryptionType:             types.EncryptionTypeNone,
		ConsumerCount:              aws.Int32(int32(consumers)),
		EnhancedMonitoring:         []types.EnhancedMetrics{{}},
		MaxRecordSizeInKiB:         aws.Int32(st.maxRecordKiB.Load()),
		QueueCount:                 aws.Int32(int32(queues)),
		RecordDistributionStrategy: st.strategy(),
	}}, nil
}
