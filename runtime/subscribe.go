package runtime

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"strings"
	"sync"
	"time"

	"github.com/kinesisgen/kinesisgen/internal/rules"
	"github.com/kinesisgen/kinesisgen/runtime/shard"
)

// Position is where a subscription starts or seeks to.
type Position = shard.Position

// Horizon is the oldest record the stream retains, on every shard.
func Horizon() Position { return Position{Kind: shard.Horizon} }

// Latest is the tip of every shard at the moment its reader opens (the default).
func Latest() Position { return Position{Kind: shard.Latest} }

// AtTime is the first record at or after t, on every shard, also on shards found later.
func AtTime(t time.Time) Position { return Position{Kind: shard.AtTimestamp, Time: t} }

// AtSequence is the record with sequence number seq on shardID; other shards start at Latest.
func AtSequence(shardID, seq string) Position {
	return Position{Kind: shard.AtSequence, ShardID: shardID, Sequence: seq}
}

// validatePosition reports what is wrong with p, or "".
func validatePosition(p Position) string {
	switch p.Kind {
	case shard.Latest, shard.Horizon:
		return ""
	case shard.AtTimestamp:
		if p.Time.IsZero() {
			return "start position AtTime needs a time"
		}
		return ""
	case shard.AtSequence:
		if p.ShardID == "" || p.Sequence == "" {
			return "start position AtSequence needs a shard id and a sequence number"
		}
		return ""
	default:
		return fmt.Sprintf("unknown position kind %d", p.Kind)
	}
}

// Delivery describes the record a handler is given.
type Delivery struct {
	Stream         string
	ShardID        string
	SequenceNumber string
	PartitionKey   string
	ArrivalTime    time.Time
	Attempt        int // 1 on first delivery; this application's retry copies count up (another's are not delivered); on a queue, the record's receive count

	// Queue and RecordID are set for a queue subscriber (Queue): the
	// queue's name and the record's RecordId (the same on every delivery);
	// ShardID and SequenceNumber are then empty.
	Queue    string
	RecordID string

	// headers are the record's user headers as decoded (nil when it has
	// none). They are shared with the runtime's retry and dead-letter
	// paths, so they are only ever handed out as copies: a delivery with
	// no use for its headers costs no map of its own.
	headers Headers
}

// Header returns one header of the record: the partition key under
// PartitionKeyHeader, a user header under its own name.
func (d Delivery) Header(name string) (string, bool) {
	if name == PartitionKeyHeader {
		return d.PartitionKey, true
	}
	v, ok := d.headers[name]
	return v, ok
}

// Headers returns a copy of the record's user headers plus the partition
// key under PartitionKeyHeader; the handler may keep or change it.
func (d Delivery) Headers() Headers {
	out := make(Headers, len(d.headers)+1)
	maps.Copy(out, d.headers)
	out[PartitionKeyHeader] = d.PartitionKey
	return out
}

// Outcome is what a handler decided about a delivery. The zero Outcome is
// Ack: a middleware that returns Outcome{} instead of next's outcome acks
// the record.
type Outcome struct {
	kind outcomeKind
	err  error
}

type outcomeKind uint8

const (
	outcomeAck outcomeKind = iota
	outcomeRetry
	outcomeReject
)

// Ack settles the record: its shard's checkpoint may move past it.
func Ack() Outcome { return Outcome{kind: outcomeAck} }

// Retry asks for the record to be handled again. By default (RetryAtTip) a
// copy of it is published at the tip of its stream with the attempt count
// raised and the original settled: the copy loses its place among the
// records of its key. With RetryInPlace the record backs off in its lane
// and is handled again there, its key's later records waiting. After the
// subscription's MaxRetries (default 3) the record is rejected instead,
// and so is a record whose key could not be published (a KPL sub-record's
// empty, too long or invalid UTF-8 key).
func Retry() Outcome { return Outcome{kind: outcomeRetry} }

// Reject gives the record up: it goes to the dead-letter stream when one is
// set (err is its reason), and is logged and settled otherwise. A dead
// letter always goes out: under a key derived from the record's when that
// one cannot be published (OriginPartitionKeyHeader), with its payload cut
// when it would not fit the service's limit (TruncatedFromHeader).
func Reject(err error) Outcome { return Outcome{kind: outcomeReject, err: err} }

// OutcomeOf maps a handler's error to an outcome: nil acks, an error marked
// Permanent (errors.As finds a *PermanentError) rejects, any other retries.
func OutcomeOf(err error) Outcome {
	if err == nil {
		return Ack()
	}
	if perm := (*PermanentError)(nil); errors.As(err, &perm) {
		return Reject(err)
	}
	return Outcome{kind: outcomeRetry, err: err}
}

// Err is the error the outcome carries (the reason of a Reject, the cause of
// a Retry made by OutcomeOf or ReplyOutcome), or nil.
func (o Outcome) Err() error { return o.err }

func (o Outcome) String() string {
	switch o.kind {
	case outcomeAck:
		return "ack"
	case outcomeRetry:
		return "retry"
	default:
		return "reject"
	}
}

// Handler handles one decoded message.
type Handler[M any] func(ctx context.Context, msg M, d Delivery) Outcome

// SubscribeOption sets one subscriber setting (the keys of //kinesis:subscriber).
type SubscribeOption func(*subscribeSettings)

// Limits of the settings. The poll floor is the service's read budget: five
// GetRecords calls per shard per second.
const (
	MaxWorkers      = 1024
	MaxBatchSize    = 10000
	MinPollInterval = 200 * time.Millisecond
	DefaultRetries  = 3
)

type subscribeSettings struct {
	create     creation // zero: the stream must exist
	maxRecord  int32    // MaxRecordSizeInKiB of the streams create makes; 0: the service's default
	workers    int
	byKey      bool
	start      Position
	batch      int32         // 0: the coordinator's default (10000)
	poll       time.Duration // 0: the coordinator's default (1 s)
	fanout     string        // the stream consumer of enhanced fan-out; "": polling
	retries    int
	inPlace    bool // retry=in_place: a retry backs off in the lane (RetryInPlace)
	deadLetter string
	name       string
	// A queue subscription (queuesub.go): the queue, the visibility
	// timeout of its receives and the MaxReceiveCount of a queue created.
	queue       string
	visibility  time.Duration
	maxReceives int
	middleware  []Middleware // Use
	problems    []string     // what the options found wrong, reported by Subscribe
}

func defaultSettings() subscribeSettings {
	return subscribeSettings{workers: 1, retries: DefaultRetries, start: Latest()}
}

func (s *subscribeSettings) invalid(format string, args ...any) {
	s.problems = append(s.problems, fmt.Sprintf(format, args...))
}

// The options below mirror the keys of //kinesis:subscriber one to one;
// generated Mount functions call them. A bad value is reported by Subscribe
// as an ErrInvalid error, before any I/O.

// CreateIfMissing creates the stream with shards shards when it does not
// exist, and a missing dead-letter stream (DeadLetter) with one shard, and
// waits (up to a minute) for them to become active.
func CreateIfMissing(shards int32) SubscribeOption { // create_if_missing=SHARDS
	return func(s *subscribeSettings) {
		if shards < 1 {
			s.invalid("create_if_missing=%d: a stream needs at least one shard", shards)
			return
		}
		s.create = creation{shards: shards}
	}
}

// CreateOnDemandIfMissing creates the stream in on-demand capacity mode (no
// shard count: the service scales it) when it does not exist, and a missing
// dead-letter stream (DeadLetter) likewise, and waits (up to a minute) for
// them to become active.
func CreateOnDemandIfMissing() SubscribeOption { // create_if_missing=on_demand
	return func(s *subscribeSettings) { s.create = creation{onDemand: true} }
}

// MaxRecordSizeKiB makes the streams CreateIfMissing or
// CreateOnDemandIfMissing creates (the stream and its dead-letter stream)
// take records of up to kib KiB, 1024 to 10240 (MaxRecordSizeInKiB); the
// service's default is 1024. It needs one of them: an existing stream's
// size is its own (UpdateMaxRecordSize), which publishers learn.
func MaxRecordSizeKiB(kib int32) SubscribeOption { // max_record_size=KiB
	return func(s *subscribeSettings) {
		if kib < MaxRecordSize>>10 || kib > MaxLargeRecordSize>>10 {
			s.invalid("max_record_size=%d: want %d..%d KiB", kib, MaxRecordSize>>10, MaxLargeRecordSize>>10)
			return
		}
		s.maxRecord = kib
	}
}

// creation is how a missing stream is created; the zero value creates none.
type creation struct {
	shards   int32
	onDemand bool
	maxKiB   int32 // MaxRecordSizeInKiB; 0: the service's default
}

func (c creation) enabled() bool { return c.shards > 0 || c.onDemand }

// Workers runs n deliveries at once (default 1).
func Workers(n int) SubscribeOption { // workers=N
	return func(s *subscribeSettings) {
		if n < 1 || n > MaxWorkers {
			s.invalid("workers=%d: want 1..%d", n, MaxWorkers)
			return
		}
		s.workers = n
	}
}

// ByKey makes the workers lanes: deliveries of one partition key run one
// after another, on the lane the key hashes to.
func ByKey() SubscribeOption { // by_key
	return func(s *subscribeSettings) { s.byKey = true }
}

// StartAt is where shards without a checkpoint start (default Latest).
func StartAt(p Position) SubscribeOption { // start_at=
	return func(s *subscribeSettings) {
		if msg := validatePosition(p); msg != "" {
			s.invalid("start_at: %s", msg)
			return
		}
		s.start = p
	}
}

// BatchSize bounds one GetRecords read (1..10000, default 10000): that many
// Kinesis records on a plain stream; on a stream of KPL aggregates, as many
// aggregates as hold about that many messages, by the last read's messages
// per record. A session's first read takes at most 10 records, so that
// handling starts before a backlog of aggregates has all arrived.
func BatchSize(n int32) SubscribeOption { // batch=N
	return func(s *subscribeSettings) {
		if n < 1 || n > MaxBatchSize {
			s.invalid("batch=%d: want 1..%d", n, MaxBatchSize)
			return
		}
		s.batch = n
	}
}

// PollInterval is the wait after an empty read (at least 200 ms, the
// service's per-shard read budget; default 1 s).
func PollInterval(d time.Duration) SubscribeOption { // poll=DURATION
	return func(s *subscribeSettings) {
		if d < MinPollInterval {
			s.invalid("poll=%s: want at least %s (five reads per shard per second)", d, MinPollInterval)
			return
		}
		s.poll = d
	}
}

// FanOut reads the stream by enhanced fan-out through the stream consumer
// named consumer (1–128 of [a-zA-Z0-9_.-]): Kinesis pushes each owned
// shard's records to the subscription over HTTP/2 (SubscribeToShard), at
// about 70 ms and with 2 MB/s per shard of its own, instead of the
// subscription polling GetRecords. Leases, checkpoints, lanes, outcomes,
// resharding and shutdown are those of polling (where a subscription of a
// closed shard never ends, as on kinesis-mock and LocalStack, the shard's
// end is confirmed with GetRecords). The consumer must be
// registered on the stream (an ErrStream error otherwise, before anything
// is read), unless CreateIfMissing (or CreateOnDemandIfMissing) is set:
// then a missing one is registered and waited for. The runtime never
// deregisters a consumer. Excludes PollInterval and BatchSize.
func FanOut(consumer string) SubscribeOption { // fanout=NAME
	return func(s *subscribeSettings) {
		if msg := validateName("stream consumer", consumer); msg != "" {
			s.invalid("fanout: %s", msg)
			return
		}
		s.fanout = consumer
	}
}

// MaxRetries bounds the retries of one record (default 3, DefaultRetries);
// 0 sends a record that asks for a retry straight to its rejection. It
// bounds both kinds of retry (RetryAtTip, RetryInPlace).
func MaxRetries(n int) SubscribeOption { // retries=N
	return func(s *subscribeSettings) {
		if n < 0 {
			s.invalid("retries=%d: want 0 or more", n)
			return
		}
		s.retries = n
	}
}

// RetryAtTip makes a retry copy the record to the tip of its stream, with
// its attempt count raised, and settle the original: the lane goes on at
// once, but the copy loses its place among its key's records. It is the
// default. Pick it when records of one key do not depend on each other.
func RetryAtTip() SubscribeOption { // retry=tip
	return func(s *subscribeSettings) { s.inPlace = false }
}

// RetryInPlace makes a retry keep the record's place: it backs off in its
// lane and is handled again, Delivery.Attempt counting up, up to
// MaxRetries times; then it is rejected (dead-lettered when DeadLetter is
// set). The key's later records wait behind it, so its order holds: pick
// it with ByKey when a key's records must be handled in order (the choice
// Lambda's event source mappings and KCL consumers make).
//
// The backoff before attempt n+1 is exponential with jitter: a random
// wait between half and all of min(InPlaceRetryBase·2^(n-1),
// InPlaceRetryMax). With ByKey, other lanes run on meanwhile, and the
// waiting lane holds only its keys; without it, the record holds its
// worker. A shutdown ends a backoff at once and leaves the record (and
// the rest of its shard's unsettled records) unsettled, as does a lost
// lease: the shard's next owner reads them again. In a Lambda invocation
// (runtime/kinesislambda) a backoff that would end after the invocation's
// deadline less the margin does not start: the record is reported failed,
// unsettled, and the event source mapping delivers it again.
func RetryInPlace() SubscribeOption { // retry=in_place
	return func(s *subscribeSettings) { s.inPlace = true }
}

// The bounds of RetryInPlace's backoff.
const (
	InPlaceRetryBase = 200 * time.Millisecond
	InPlaceRetryMax  = 10 * time.Second
)

// DeadLetter names the stream that receives rejected records, with their
// reason and origin in headers. It must exist when the subscription starts
// (an ErrStream error otherwise), unless CreateIfMissing is set: then a
// missing one is created with one shard.
func DeadLetter(stream string) SubscribeOption { // dead_letter=STREAM
	return func(s *subscribeSettings) {
		if msg := validateStreamName(stream); msg != "" {
			s.invalid("dead_letter: %s", msg)
			return
		}
		s.deadLetter = stream
	}
}

// HandlerName names the handler in logs, for example "orders.Post"; the
// generated Mount names each handler so.
func HandlerName(name string) SubscribeOption { // for logs: "pkg.Func"
	return func(s *subscribeSettings) { s.name = name }
}

// validateStreamName checks the service's rule, 1–128 of [a-zA-Z0-9_.-],
// or, for a stream named by ARN, the ARN's form.
func validateStreamName(name string) string {
	if rules.IsARN(name) {
		if _, err := rules.ParseStreamARN(name); err != nil {
			return err.Error()
		}
		return ""
	}
	return validateName("stream", name)
}

// validateName checks name, a what name, against the stream-name rule.
func validateName(what, name string) string {
	if name == "" {
		return "empty " + what + " name"
	}
	if len(name) > 128 {
		return fmt.Sprintf("%s name of %d characters: at most 128", what, len(name))
	}
	for _, c := range name {
		ok := c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '.' || c == '-'
		if !ok {
			return fmt.Sprintf("%s name %q: only letters, digits, '_', '.' and '-'", what, name)
		}
	}
	return ""
}

// ReplyOutcome publishes a handler's reply (when err is nil) and maps the
// result to an outcome: a failed handler or a failed publish retries, a
// handler's error marked Permanent rejects. The
// generated Mount calls it for a reply handler. The reply's key follows p's
// key ladder: the mount-site key set with WithPartitionKey on p (a
// subscriber's partition_key=) when there is one, else, ctx being the
// handler's, the key of the record being handled.
func ReplyOutcome[Y any](ctx context.Context, p Publisher[Y], reply Y, err error) Outcome {
	if err != nil {
		return OutcomeOf(err)
	}
	if err := p.Publish(ctx, reply); err != nil {
		return OutcomeOf(fmt.Errorf("publish reply: %w", err))
	}
	return Ack()
}

type subState uint8

const (
	subRegistered subState = iota // waiting for Connect
	subStarting
	subRunning
	subStopped // terminal
)

// Subscription is a running (or registered) subscription: its seek handle and stop.
type Subscription struct {
	b      *Broker
	stream string
	set    subscribeSettings
	invoke invokeFunc
	raw    bool // the handler takes RawRecord: nothing is rejected for its content
	log    *slog.Logger

	mu    sync.Mutex
	state subState
	run   *subRun       // while running
	idle  chan struct{} // closed when the last run's lanes have exited
	done  chan struct{}
	err   error // why the subscription ended on its own (Err)

	// While subStarting: abort cancels the start, started is closed once
	// it has returned (having stopped whatever it started if it was
	// aborted), so a stop never returns while a start runs on.
	abort   context.CancelFunc
	aborted context.Context
	started chan struct{}
}

// beginStart moves s to subStarting; s.mu is held. Exactly one start
// follows, which calls endStart.
func (s *Subscription) beginStart() {
	s.state = subStarting
	s.aborted, s.abort = context.WithCancel(context.Background())
	s.started = make(chan struct{})
}

// endStart marks the start begun by beginStart as returned.
func (s *Subscription) endStart() {
	s.mu.Lock()
	s.abort()
	close(s.started)
	s.abort, s.aborted, s.started = nil, nil, nil
	s.mu.Unlock()
}

// Stream is the stream the subscription reads.
func (s *Subscription) Stream() string { return s.stream }

// Done is closed when the subscription has fully stopped (Stop, the
// broker's Shutdown, or an end of its own: see Err).
func (s *Subscription) Done() <-chan struct{} { return s.done }

// Err returns why the subscription ended on its own, or nil (while it runs,
// and after Stop or Shutdown). A subscription ends on its own when its
// stream is deleted: the error matches ErrStream. The broker's Run then
// shuts down and returns it too.
func (s *Subscription) Err() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.err
}

// startFail runs s.fail on a goroutine that Shutdown waits for; once
// Shutdown has begun it stops every subscription itself.
func (b *Broker) startFail(s *Subscription, r *subRun, cause error) {
	b.s.mu.Lock()
	if b.s.phase >= phaseClosing {
		b.s.mu.Unlock()
		return
	}
	b.s.failing.Add(1)
	b.s.mu.Unlock()
	go func() {
		defer b.s.failing.Done()
		s.fail(r, cause)
	}()
}

// fail ends run r of s on its own with err (the coordinator stopped reading
// for good): s stops (leases released, lanes finished) and the broker's Run
// returns err.
func (s *Subscription) fail(r *subRun, cause error) {
	err := &Error{Kind: ErrStream, Op: "read", Stream: s.stream, Err: cause}
	s.mu.Lock()
	if s.run != r || s.state != subRunning || s.err != nil {
		s.mu.Unlock()
		return // stopped meanwhile, or reported already
	}
	s.err = err
	s.mu.Unlock()
	r.log.Error("subscription ended: its stream (or its fan-out consumer) was deleted", "err", cause)
	ctx, cancel := context.WithTimeout(context.Background(), s.b.stopBound())
	defer cancel()
	if serr := s.Stop(ctx); serr != nil {
		r.log.Warn("stopping the subscription of a deleted stream", "err", serr)
	}
	s.b.failed(err)
}

// Subscribe registers h on stream. Before Connect it is started by Connect;
// after Connect it starts at once and returns when every owned shard has its
// first iterator; a start that takes more than two minutes (a lease table
// still being created, say) fails with an error saying it was not started
// within them. The settings are validated before any I/O. With M
// RawRecord the handler gets every record undecoded (a dead-letter reader).
func Subscribe[M any](b *Broker, stream string, h Handler[M], opts ...SubscribeOption) (*Subscription, error) {
	set := defaultSettings()
	for _, o := range opts {
		if o != nil {
			o(&set)
		}
	}
	if msg := validateStreamName(stream); msg != "" {
		set.invalid("%s", msg)
	}
	if h == nil {
		set.invalid("nil handler")
	}
	if set.fanout != "" && set.poll != 0 {
		set.invalid("fanout=%s with poll=%s: a fan-out subscription does not poll (Kinesis pushes its records)", set.fanout, set.poll)
	}
	if set.fanout != "" && set.batch != 0 {
		set.invalid("fanout=%s with batch=%d: a fan-out subscription makes no GetRecords calls", set.fanout, set.batch)
	}
	if set.maxRecord != 0 {
		if !set.create.enabled() {
			set.invalid("max_record_size=%d without create_if_missing: an existing stream's record size is its own (UpdateMaxRecordSize)", set.maxRecord)
		}
		set.create.maxKiB = set.maxRecord
	}
	checkQueueSettings(&set)
	if set.deadLetter != "" && set.deadLetter == stream {
		set.invalid("dead_letter=%s: the stream itself", stream)
	}
	if b == nil || b.s == nil {
		set.invalid("nil broker: make one with NewBroker")
	} else if err := checkApplication(b.s.cfg.app, "subscribe"); err != nil {
		set.invalid("%v", errors.Unwrap(err))
	}
	if len(set.problems) > 0 {
		return nil, &Error{Kind: ErrInvalid, Op: "subscribe", Stream: stream, Err: errors.New(strings.Join(set.problems, "; "))}
	}

	log := b.s.cfg.logger.With("stream", stream)
	if set.name != "" {
		log = log.With("handler", set.name)
	}
	s := &Subscription{
		b:      b,
		stream: stream,
		set:    set,
		log:    log,
		done:   make(chan struct{}),
	}
	chain := chainFor(&b.s.cfg, stream, set.middleware)
	if rh, ok := any(h).(Handler[RawRecord]); ok {
		s.invoke, s.raw = rawInvoke(rh, chain), true
	} else {
		s.invoke = typedInvoke(h, b.s.cfg.codec, chain)
	}

	b.s.mu.Lock()
	if b.s.phase >= phaseClosing {
		b.s.mu.Unlock()
		return nil, &Error{Kind: ErrNotConnected, Op: "subscribe", Stream: stream, Err: errors.New("the broker was shut down")}
	}
	for _, other := range b.s.subs {
		if other.stream == stream && other.set.queue == set.queue {
			b.s.mu.Unlock()
			if set.queue != "" {
				return nil, &Error{Kind: ErrInvalid, Op: "subscribe", Stream: stream, Err: fmt.Errorf("this broker already subscribes to queue %s of the stream (one subscription per queue per broker: mount the other handler on a second broker with its own runtime.WithApplication)", set.queue)}
			}
			return nil, &Error{Kind: ErrInvalid, Op: "subscribe", Stream: stream, Err: errSecondSubscription(other.set.name)}
		}
	}
	c := b.s.conn
	if b.s.inline {
		c = nil // a Lambda handler's broker: mounted, never started
	}
	if c != nil {
		s.mu.Lock()
		s.beginStart()
		s.mu.Unlock()
	}
	b.s.subs = append(b.s.subs, s)
	b.s.mu.Unlock()

	if c == nil {
		return s, nil // Connect starts it
	}
	ctx, cancel := context.WithTimeout(context.Background(), startTimeout)
	defer cancel()
	if err := s.start(ctx, c); err != nil {
		b.forget(s)
		s.finish()
		if e, ok := errors.AsType[*Error](err); ok && ctx.Err() != nil {
			// Cut off by the bound: the call it cut is only where the
			// start was when the time ran out.
			err = &Error{Kind: e.Kind, Op: e.Op, Stream: e.Stream, Shard: e.Shard, Err: fmt.Errorf("not started within %v: %w", startTimeout, e.Err)}
		}
		return nil, err
	}
	return s, nil
}

// startTimeout bounds a start that has no caller's context (Subscribe after
// Connect): the create wait plus the first pass (a lease table being
// created among them). A variable only so that tests can shorten it.
var startTimeout = 2 * time.Minute

// forget removes s from the broker's subscriptions, so its stream can be
// subscribed again.
// ended notes that s stopped, for its gauges' final values.
func (b *Broker) ended(s *Subscription) {
	if t := b.s.cfg.tel; t == nil || !t.metrics {
		return
	}
	b.s.mu.Lock()
	defer b.s.mu.Unlock()
	if b.s.ended == nil {
		b.s.ended = map[string]runObs{}
	}
	b.s.ended[s.stream] = b.s.cfg.tel.runObs(s.stream, s.set.name)
}

func (b *Broker) forget(s *Subscription) {
	b.s.mu.Lock()
	defer b.s.mu.Unlock()
	for i, other := range b.s.subs {
		if other == s {
			b.s.subs = append(b.s.subs[:i:i], b.s.subs[i+1:]...)
			return
		}
	}
}

// finish marks s stopped for good and closes Done once its lanes are idle.
func (s *Subscription) finish() {
	s.mu.Lock()
	if s.state == subStopped {
		s.mu.Unlock()
		return
	}
	s.state = subStopped
	idle := s.idle
	s.mu.Unlock()
	if idle == nil {
		close(s.done)
		return
	}
	go func() {
		<-idle
		close(s.done)
	}()
}

// Seek repositions a running subscription on every shard it owns (and, for
// a stream-wide position, on shards it takes later). Settlements of records
// delivered before the seek never drag a checkpoint back. The position is
// written to each shard's lease at once, so a restart resumes there (a
// timestamp as the first record at it, once there is one; Latest once its
// first record settles, a restart before that reads again from the old
// checkpoint). Before Connect and after Stop or Shutdown it answers
// ErrNotConnected.
func (s *Subscription) Seek(ctx context.Context, p Position) error {
	if msg := validatePosition(p); msg != "" {
		return &Error{Kind: ErrInvalid, Op: "seek", Stream: s.stream, Err: errors.New(msg)}
	}
	s.mu.Lock()
	r := s.run
	running := s.state == subRunning
	s.mu.Unlock()
	if s.set.queue != "" {
		return &Error{Kind: ErrInvalid, Op: "seek", Stream: s.stream, Err: fmt.Errorf("queue=%s: a queue subscription has no position to seek", s.set.queue)}
	}
	if !running || r == nil {
		return &Error{Kind: ErrNotConnected, Op: "seek", Stream: s.stream}
	}
	if _, err := s.b.connection(); err != nil {
		return &Error{Kind: ErrNotConnected, Op: "seek", Stream: s.stream}
	}
	if err := r.coord.Seek(ctx, p); err != nil {
		kind := readErrorKind(err)
		switch {
		case errors.Is(err, shard.ErrStopped):
			kind = ErrNotConnected
		case errors.Is(err, shard.ErrNotOwned), errors.Is(err, shard.ErrConfig):
			kind = ErrInvalid
		}
		return &Error{Kind: kind, Op: "seek", Stream: s.stream, Err: err}
	}
	return nil
}

// Stop stops the subscription: no more fetching, deliveries in flight finish
// (bounded by ctx and the broker's shutdown timeout), final checkpoints are
// written and the leases released so another instance takes the shards at
// once. The broker forgets the subscription; Done is closed.
func (s *Subscription) Stop(ctx context.Context) error {
	s.b.forget(s)
	err := s.halt(ctx)
	s.finish()
	s.b.ended(s)
	return err
}

// halt stops the current run, if any, and leaves s registered. A start in
// progress is aborted and waited for (within ctx): it stops what it started.
func (s *Subscription) halt(ctx context.Context) error {
	s.mu.Lock()
	r := s.run
	s.run = nil
	if s.state != subStopped {
		s.state = subRegistered
	}
	if r != nil {
		s.idle = r.idle
	}
	started := s.started
	if started != nil {
		s.abort()
	}
	s.mu.Unlock()
	if started != nil {
		select {
		case <-started:
		case <-ctx.Done():
			return &Error{Kind: ErrNotConnected, Op: "stop", Stream: s.stream, Err: fmt.Errorf("a start still running: %w", ctx.Err())}
		}
	}
	if r == nil {
		return nil
	}
	if d := s.b.s.cfg.shutdownTimeout; d > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, d)
		defer cancel()
	}
	return r.stop(ctx)
}

// startRegistered starts every registered subscription; Connect calls it.
// When one fails, the ones it started are stopped again (leases released)
// and stay registered for a later Connect.
func (b *Broker) startRegistered(ctx context.Context, c *conn) error {
	b.s.mu.Lock()
	var todo []*Subscription
	for _, s := range b.s.subs {
		s.mu.Lock()
		if s.state == subRegistered {
			s.beginStart()
			todo = append(todo, s)
		}
		s.mu.Unlock()
	}
	b.s.mu.Unlock()

	for i, s := range todo {
		if err := s.start(ctx, c); err != nil {
			stopCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), b.stopBound())
			for _, started := range todo[:i] {
				_ = started.halt(stopCtx)
			}
			cancel()
			todo[i].mu.Lock()
			if todo[i].state == subStarting {
				todo[i].state = subRegistered
			}
			todo[i].mu.Unlock()
			for _, rest := range todo[i+1:] { // never started
				rest.mu.Lock()
				if rest.state == subStarting {
					rest.state = subRegistered
				}
				rest.mu.Unlock()
				rest.endStart()
			}
			return err
		}
	}
	return nil
}

// stopBound is how long stopping may take when the caller sets no deadline.
func (b *Broker) stopBound() time.Duration {
	if d := b.s.cfg.shutdownTimeout; d > 0 {
		return d + 5*time.Second
	}
	return 35 * time.Second
}

// stopSubscriptions stops fetching, lets lanes finish, checkpoints and
// releases leases; Shutdown calls it before marking the connection closed.
// The subscriptions stop in parallel, each bounded by the shutdown timeout,
// and are finished: Done closes. Subscriptions that never started (a failed
// Connect already put them back) stay registered for the next Connect.
func (b *Broker) stopSubscriptions(ctx context.Context) error {
	b.s.mu.Lock()
	var stop, keep []*Subscription
	for _, s := range b.s.subs {
		s.mu.Lock()
		if s.state == subRegistered {
			keep = append(keep, s)
		} else {
			stop = append(stop, s)
		}
		s.mu.Unlock()
	}
	b.s.subs = keep
	b.s.mu.Unlock()

	errs := make([]error, len(stop))
	var wg sync.WaitGroup
	for i, s := range stop {
		wg.Go(func() {
			errs[i] = s.halt(ctx)
			s.finish()
			b.ended(s)
		})
	}
	wg.Wait()
	return errors.Join(errs...)
}

// errSecondSubscription is the error of a second subscription to a stream
// on one broker, first naming the handler already mounted, if named.
func errSecondSubscription(handler string) error {
	already := "this broker already subscribes to the stream"
	if handler != "" {
		already += " (handler " + handler + ")"
	}
	return errors.New(already + "; there is one subscription per stream per broker, as a stream's leases and checkpoints " +
		"are the application's: to read the stream a second time, with checkpoints of its own, use another broker " +
		"with its own runtime.WithApplication name")
}

// PermanentError marks a handler's error as permanent: retrying the record
// cannot help (it is malformed, or names something that does not exist).
// Make one with Permanent; errors.As finds it through wrapping.
type PermanentError struct{ Err error }

func (e *PermanentError) Error() string { return e.Err.Error() }
func (e *PermanentError) Unwrap() error { return e.Err }

// Permanent marks err as permanent: a handler that returns it (as its
// error, alone or beside a reply, or through OutcomeOf or Retry's cause)
// has the record rejected at once, without spending its retries: it goes
// to the dead-letter stream when one is set, with err as its reason, and
// is logged and checkpointed past otherwise. Permanent(nil) is nil.
func Permanent(err error) error {
	if err == nil {
		return nil
	}
	return &PermanentError{Err: err}
}
