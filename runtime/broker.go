package runtime

import (
	"context"
	"encoding/hex"
	"errors"
	"log/slog"
	"maps"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	awsconfig "github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/kinesis"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"

	"github.com/kinesisgen/kinesisgen/internal/randsrc"
	"github.com/kinesisgen/kinesisgen/runtime/kinesisapi"
	"github.com/kinesisgen/kinesisgen/runtime/lease"
	"github.com/kinesisgen/kinesisgen/runtime/shard"
)

// Broker owns the connection to Kinesis. Constructors and options do no I/O;
// a copy of a Broker shares its connection.
//
// A Broker goes through three states: configured (after NewBroker),
// connected (after Connect) and closed (after Shutdown). Closed is final:
// Connect on a closed broker is an ErrInvalid error, and every publisher
// made from it answers ErrNotConnected. Connect on a connected broker is an
// ErrInvalid error too, so two callers cannot both believe they own the
// connection's lifetime.
type Broker struct{ s *state }

type config struct {
	endpoint        string
	region          string
	testCredentials bool
	awsConfig       *aws.Config    // NewBrokerFromConfig
	client          kinesisapi.API // WithKinesisClient (kinesistest)
	leases          lease.Store    // default: lease.NewMemory()
	owner           string         // default: unique per broker
	app             string         // lease namespace prefix, default "kinesisgen"
	logger          *slog.Logger   // default: slog.Default(), Warn and above
	codec           Codec          // default: JSON
	shardSync       time.Duration  // 10 s
	leaseRenew      time.Duration  // 3 s
	failover        time.Duration  // 10 s
	checkpointEvery time.Duration  // how often settled progress is persisted
	shutdownTimeout time.Duration  // bound on letting lanes finish
	perLease        bool           // WithPerLeaseRenewal
	roster          bool           // on by default; WithoutMembersRoster
	rosterWhole     int            // WithMembersRoster

	batch batchConfig // publish batching; tests tune it

	middleware       []Middleware            // WithMiddleware, outermost first
	streamMiddleware map[string][]Middleware // WithStreamMiddleware

	tracerProvider trace.TracerProvider // WithTracerProvider
	meterProvider  metric.MeterProvider // WithMeterProvider
	tel            *telemetry           // made by NewBroker; nil without providers
}

type phase uint8

const (
	phaseNew phase = iota
	phaseConnecting
	phaseConnected
	phaseClosing // Shutdown is stopping the subscriptions: no new ones start
	phaseClosed
)

type state struct {
	cfg   config
	mu    sync.Mutex
	phase phase
	conn  *conn           // nil before Connect
	subs  []*Subscription // registered (Mount) or running
	ready chan struct{}   // closed when a Connect has succeeded
	// failed is closed when a subscription ended on its own (its stream
	// was deleted); failErr is its error. Run returns it.
	failed  chan struct{}
	failErr error
	failing sync.WaitGroup // subscriptions stopping themselves (startFail)

	// inline: connected by runtime/kinesislambda, whose event source
	// mapping reads the streams; a subscription mounted later is not
	// started either.
	inline bool

	// live mirrors conn while connected, so that publishes, which all ask
	// for it, need no lock.
	live atomic.Pointer[conn]

	// leaseCounts count the lease changes of every subscription's
	// coordinator, for Status.
	leaseCounts shard.LeaseCounters

	// ended holds, by stream, the measurement options of subscriptions
	// that stopped, so that their gauges read their final values (nothing
	// queued, no lease held) until the meter provider shuts down; under mu.
	ended map[string]runObs
}

// conn is one Connect's worth of live state.
type conn struct {
	client kinesisapi.API
	leases lease.Store
	// privateLeases: leases is the store dial made, which no other broker
	// can reach, so each of this broker's coordinators is alone in it.
	privateLeases bool
	owner         string
	logger        *slog.Logger
	batch         batchConfig
	tel           *telemetry // nil: no telemetry

	mu       sync.Mutex // serialises adding batchers and closing
	closed   bool
	batchers atomic.Pointer[map[string]*batcher]    // one per stream, made on first publish; copied on write
	aggs     atomic.Pointer[map[aggKey]*aggregator] // one per stream and Aggregation; copied on write
	limits   sync.Map                               // stream name -> *recordLimit: record sizes learned
	region   string                                 // the client's region; "": unknown (a custom client without WithRegion)
}

// Option configures a Broker.
type Option func(*config)

// NewBroker records its options; it does no I/O.
func NewBroker(opts ...Option) *Broker {
	cfg := defaultConfig()
	for _, o := range opts {
		o(&cfg)
	}
	s := &state{cfg: cfg, ready: make(chan struct{}), failed: make(chan struct{})}
	s.cfg.tel = newTelemetry(&s.cfg, s)
	return &Broker{s: s}
}

// Ready is closed once Connect (or Run's connect) has succeeded: every
// subscription registered before it then reads its shards, so a record
// published after Ready is delivered to them. A service that runs
// go b.Run(ctx) and then publishes waits for it first:
//
//	errc := make(chan error, 1)
//	go func() { errc <- b.Run(ctx) }()
//	select {
//	case <-b.Ready():
//	case err := <-errc: // Connect failed; Ready stays open
//		return err
//	}
//
// Ready stays open while Connect fails; it is closed for good once a
// Connect succeeds (Shutdown does not reopen it).
func (b *Broker) Ready() <-chan struct{} { return b.s.ready }

// NewBrokerFromConfig uses cfg as it is instead of the SDK's default chain;
// WithEndpoint, WithRegion and WithTestCredentials still apply on top. It
// does no I/O.
func NewBrokerFromConfig(cfg aws.Config, opts ...Option) *Broker {
	b := NewBroker(opts...)
	c := cfg.Copy()
	b.s.cfg.awsConfig = &c
	return b
}

// Logger returns the broker's logger: WithLogger's, or by default one that
// sends warnings and errors to slog.Default().
func (b *Broker) Logger() *slog.Logger { return b.s.cfg.logger }

// connection returns the live connection, or ErrNotConnected.
func (b *Broker) connection() (*conn, error) {
	if c := b.s.live.Load(); c != nil {
		return c, nil
	}
	return nil, ErrNotConnected
}

// Connect loads the AWS configuration (the default chain with the named
// endpoint and region, or the aws.Config of NewBrokerFromConfig), builds the
// Kinesis client, and starts every registered subscription. Credentials are
// fetched lazily by the SDK, so a bad credential shows on the first call.
// If a subscription fails to start, the ones already started are stopped and
// the broker returns to its configured state, so Connect may be retried. An
// invalid application name (see WithApplication) is an ErrInvalid error,
// before any I/O.
func (b *Broker) Connect(ctx context.Context) error {
	s := b.s
	if err := checkApplication(s.cfg.app, "connect"); err != nil {
		return err
	}
	s.mu.Lock()
	switch s.phase {
	case phaseConnecting, phaseConnected:
		s.mu.Unlock()
		return &Error{Kind: ErrInvalid, Op: "connect", Err: errors.New("broker is already connected")}
	case phaseClosing, phaseClosed:
		s.mu.Unlock()
		return &Error{Kind: ErrInvalid, Op: "connect", Err: errors.New("broker was shut down; make a new one")}
	}
	s.phase = phaseConnecting
	cfg := s.cfg
	s.mu.Unlock()

	c, err := dial(ctx, cfg)
	if err != nil {
		s.mu.Lock()
		if s.phase == phaseConnecting {
			s.phase = phaseNew
		}
		s.mu.Unlock()
		return err
	}
	s.mu.Lock()
	if s.phase != phaseConnecting { // Shutdown ran meanwhile: it is final
		s.mu.Unlock()
		c.close(ctx)
		return &Error{Kind: ErrNotConnected, Op: "connect", Err: errors.New("broker was shut down while connecting")}
	}
	s.conn = c
	s.live.Store(c)
	s.phase = phaseConnected
	s.mu.Unlock()
	c.logger.Debug("kinesis broker connected")

	if err := b.startRegistered(ctx, c); err != nil {
		stopCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), cfg.shutdownTimeout)
		defer cancel()
		if serr := b.stopSubscriptions(stopCtx); serr != nil {
			c.logger.Warn("stopping subscriptions after a failed connect", "err", serr)
		}
		s.mu.Lock()
		s.conn = nil
		s.live.Store(nil)
		if s.phase == phaseConnected {
			s.phase = phaseNew
		}
		s.mu.Unlock()
		c.close(stopCtx)
		return err
	}
	s.mu.Lock()
	select {
	case <-s.ready:
	default:
		close(s.ready)
	}
	s.mu.Unlock()
	return nil
}

// dial builds one connection from cfg.
func dial(ctx context.Context, cfg config) (*conn, error) {
	c := &conn{
		client: cfg.client,
		leases: cfg.leases,
		owner:  cfg.owner,
		batch:  cfg.batch.withDefaults(),
	}
	if c.client == nil {
		awsCfg, err := loadAWSConfig(ctx, cfg)
		if err != nil {
			return nil, &Error{Kind: ErrInvalid, Op: "connect", Err: err}
		}
		c.client = kinesis.NewFromConfig(awsCfg, func(o *kinesis.Options) {
			if cfg.endpoint != "" {
				o.BaseEndpoint = aws.String(cfg.endpoint)
			}
		})
	}
	c.region = cfg.region
	if kc, ok := c.client.(*kinesis.Client); ok {
		c.region = kc.Options().Region
	}
	if c.leases == nil {
		c.leases = lease.NewMemory()
		c.privateLeases = true
	}
	if c.owner == "" {
		c.owner = uniqueOwner()
	}
	// Every line of this connection (publishers, subscriptions, their
	// shard coordinators) names this instance.
	c.logger = cfg.logger.With("owner", c.owner)
	c.tel, c.batch.tel = cfg.tel, cfg.tel
	return c, nil
}

func loadAWSConfig(ctx context.Context, cfg config) (aws.Config, error) {
	var awsCfg aws.Config
	if cfg.awsConfig != nil {
		awsCfg = cfg.awsConfig.Copy()
		if cfg.region != "" {
			awsCfg.Region = cfg.region
		}
		if cfg.testCredentials {
			awsCfg.Credentials = testCredentials()
		}
	} else {
		var lo []func(*awsconfig.LoadOptions) error
		if cfg.region != "" {
			lo = append(lo, awsconfig.WithRegion(cfg.region))
		}
		if cfg.testCredentials {
			lo = append(lo, awsconfig.WithCredentialsProvider(testCredentials()))
		}
		var err error
		if awsCfg, err = awsconfig.LoadDefaultConfig(ctx, lo...); err != nil {
			return aws.Config{}, err
		}
	}
	// A local server ignores the region, but the SDK refuses to sign without one.
	if awsCfg.Region == "" && cfg.endpoint != "" {
		awsCfg.Region = "us-east-1"
	}
	return awsCfg, nil
}

func testCredentials() aws.CredentialsProvider {
	return credentials.NewStaticCredentialsProvider("test", "test", "")
}

// uniqueOwner is the host name plus a random suffix: two brokers in one
// process, or on one host, never share a lease-owner id.
func uniqueOwner() string {
	host, err := os.Hostname()
	if err != nil || host == "" {
		host = "kinesisgen"
	}
	var r [6]byte
	randsrc.Read(r[:], "owner")
	return host + "-" + hex.EncodeToString(r[:])
}

// Shutdown stops every subscription (it stops fetching, lets lanes finish
// within ctx, checkpoints and releases leases), then marks the connection
// closed: publishes still queued fail with ErrNotConnected, and every
// publisher answers ErrNotConnected from then on. Once Shutdown has begun,
// Subscribe answers ErrNotConnected, and a subscription still starting is
// stopped before Shutdown returns. Shutdown of a broker that never connected
// closes it too; a second Shutdown returns nil.
func (b *Broker) Shutdown(ctx context.Context) error {
	s := b.s
	s.mu.Lock()
	if s.phase == phaseClosed {
		s.mu.Unlock()
		return nil
	}
	c := s.conn
	if c == nil { // never connected, or still connecting: Connect sees the close
		s.phase = phaseClosed
		s.mu.Unlock()
		s.cfg.tel.close()
		return nil
	}
	s.phase = phaseClosing
	s.mu.Unlock()
	c.logger.Debug("kinesis broker shutting down")

	// Subscriptions stop first: their handlers may still publish replies.
	// One that is stopping itself (its stream deleted) is waited for too.
	err := b.stopSubscriptions(ctx)
	s.failing.Wait()

	s.mu.Lock()
	s.phase = phaseClosed
	s.conn = nil
	s.live.Store(nil)
	s.mu.Unlock()
	c.close(ctx)
	s.cfg.tel.close()
	c.logger.Debug("kinesis broker shut down")
	return err
}

// Run connects, serves until ctx ends or a subscription ends on its own
// (its stream was deleted), then shuts down within the shutdown timeout. It
// returns Connect's error, or the subscription's (an ErrStream error)
// joined with Shutdown's. Ready is closed once it has connected and every
// registered subscription reads.
func (b *Broker) Run(ctx context.Context) error {
	if err := b.Connect(ctx); err != nil {
		return err
	}
	var failErr error
	select {
	case <-ctx.Done():
	case <-b.s.failed:
		b.s.mu.Lock()
		failErr = b.s.failErr
		b.s.mu.Unlock()
	}
	stopCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), b.s.cfg.shutdownTimeout)
	defer cancel()
	return errors.Join(failErr, b.Shutdown(stopCtx))
}

// failed records the first subscription that ended on its own.
func (b *Broker) failed(err error) {
	b.s.mu.Lock()
	defer b.s.mu.Unlock()
	if b.s.failErr == nil {
		b.s.failErr = err
		close(b.s.failed)
	}
}

// Outgoing is one record on its way to a stream, its key already resolved.
type Outgoing struct {
	Stream       string
	PartitionKey string
	Headers      Headers // without partition-key; encoded in the envelope when non-empty
	Payload      []byte

	// uniqueKey marks a process-unique key (rung 4): no other record shares
	// it, so the batcher has no order to keep for it.
	uniqueKey bool
	// aggregate, when set (with defaults), packs the record into a KPL
	// aggregate of its shard.
	aggregate *Aggregation
	// value, when encode is set, is the message not yet encoded in JSON
	// (Payload is nil): an aggregated Publish's, which its aggregator
	// encodes (see aggregator.encode).
	value  any
	encode bool
	// wait, when set, is the batch the record is one of (StartAll): its
	// result is told by counting the batch down, not on its own channel.
	wait *batchWait
}

// put sends one record through the batcher and waits for its own result.
// The record is validated (stream name, key, size) before any I/O.
func (c *conn) put(ctx context.Context, rec Outgoing) (Receipt, error) {
	if rec.Stream == "" {
		return Receipt{}, &Error{Kind: ErrInvalid, Op: "publish", Err: errors.New("empty stream name")}
	}
	if err := checkKey(rec.PartitionKey); err != nil {
		return Receipt{}, &Error{Kind: ErrPublish, Op: "publish", Stream: rec.Stream, Err: err}
	}
	if _, ok := rec.Headers[PartitionKeyHeader]; ok { // the key travels as the record's key only
		rec.Headers = maps.Clone(rec.Headers)
		delete(rec.Headers, PartitionKeyHeader)
	}
	bt, e, err := c.submit(ctx, rec)
	if err == nil {
		var r Receipt
		r, err = bt.await(e)
		if err == nil {
			c.countPut(rec.Stream, nil)
			return r, nil
		}
	}
	c.countPut(rec.Stream, err)
	return Receipt{}, err
}

// countPut counts a record the runtime published itself (a retry copy, a
// dead letter) among the published messages.
func (c *conn) countPut(stream string, err error) {
	if t := c.tel; t != nil && t.metrics {
		t.endSend(nil, t.publishObs(stream), Receipt{}, err)
	}
}

// submit encodes rec, checks its size and queues it on its stream's
// batcher; records of one key are sent in submit order. rec is checked
// already, as put and a publisher's outgoing check it: a stream name, a
// valid key, no partition-key header.
func (c *conn) submit(ctx context.Context, rec Outgoing) (*batcher, *entry, error) {
	return c.submitVia(ctx, rec, nil)
}

// route is where a publisher's records go on one connection: its
// stream's batcher and, when it aggregates, its aggregator. A publisher
// keeps the last one it used (publisher.route), so that a publish looks
// neither up: each lookup hashes the stream name (and the aggregator's
// key, the Aggregation with it), which costs a publish from one of
// thousands of goroutines, its cache cold, more than the rest of submit.
// A connection only ever adds batchers and aggregators, and a closed one
// refuses records itself, so a route stays right for its connection.
type route struct {
	c   *conn
	bt  *batcher
	ag  *aggregator // nil for plain records
	agg *Aggregation
	// stream is the records' stream (a publisher's is fixed; checked
	// anyway).
	stream string
}

// submitVia is submit through the route that last holds, when it is this
// connection's for rec's stream and aggregation, and stores the route it
// took there otherwise (last may be nil: no caching).
func (c *conn) submitVia(ctx context.Context, rec Outgoing, last *atomic.Pointer[route]) (*batcher, *entry, error) {
	if rec.encode && rec.aggregate == nil { // only an aggregator encodes
		payload, err := JSON.Marshal(rec.value)
		if err != nil {
			return nil, nil, &Error{Kind: ErrPublish, Op: "encode", Stream: rec.Stream, Err: err}
		}
		rec.Payload, rec.value, rec.encode = payload, nil, false
	}
	var data []byte
	if !rec.encode {
		data = encodeRecord(rec.Headers, rec.Payload)
		if err := c.checkRecordSize(ctx, rec.Stream, len(data)+len(rec.PartitionKey)); err != nil {
			return nil, nil, &Error{Kind: ErrPublish, Op: "publish", Stream: rec.Stream, Err: err}
		}
	}
	var r *route
	if last != nil {
		r = last.Load()
	}
	if r == nil || r.c != c || r.stream != rec.Stream || r.agg != rec.aggregate {
		bt, err := c.batcher(rec.Stream)
		if err != nil {
			return nil, nil, err
		}
		r = &route{c: c, bt: bt, agg: rec.aggregate, stream: rec.Stream}
		if rec.aggregate != nil {
			if r.ag, err = c.aggregator(bt, *rec.aggregate); err != nil {
				return nil, nil, err
			}
		}
		if last != nil {
			last.Store(r)
		}
	}
	if r.ag != nil {
		if rec.encode {
			e, err := r.ag.submitValue(ctx, rec)
			return r.bt, e, err
		}
		e, err := r.ag.submit(ctx, rec.PartitionKey, data, rec.wait)
		return r.bt, e, err
	}
	e, err := r.bt.submit(ctx, rec.PartitionKey, "", data, !rec.uniqueKey, rec.wait)
	return r.bt, e, err
}

// aggregator returns the aggregator of bt's stream with cfg, starting it on
// first use.
func (c *conn) aggregator(bt *batcher, cfg Aggregation) (*aggregator, error) {
	k := aggKey{stream: bt.stream, cfg: cfg}
	if m := c.aggs.Load(); m != nil {
		if ag := (*m)[k]; ag != nil {
			return ag, nil
		}
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return nil, &Error{Kind: ErrNotConnected, Op: "publish", Stream: bt.stream}
	}
	old := c.aggs.Load()
	if old != nil && (*old)[k] != nil {
		return (*old)[k], nil
	}
	m := make(map[aggKey]*aggregator, 1)
	if old != nil {
		maps.Copy(m, *old)
	}
	ag := newAggregator(bt, c.client, bt.stream, cfg, c.logger)
	m[k] = ag
	c.aggs.Store(&m)
	return ag, nil
}

// batcher returns the stream's batcher, starting it on first use.
func (c *conn) batcher(stream string) (*batcher, error) {
	if m := c.batchers.Load(); m != nil {
		if bt := (*m)[stream]; bt != nil {
			return bt, nil // a closed batcher refuses the record itself
		}
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return nil, &Error{Kind: ErrNotConnected, Op: "publish", Stream: stream}
	}
	old := c.batchers.Load()
	if old != nil && (*old)[stream] != nil {
		return (*old)[stream], nil
	}
	m := make(map[string]*batcher, 1)
	if old != nil {
		maps.Copy(m, *old)
	}
	bt := newBatcher(c.client, stream, c.batch, c.logger)
	bt.limit = c.limitOf(stream)
	m[stream] = bt
	c.batchers.Store(&m)
	return bt, nil
}

// close fails every queued publish with ErrNotConnected and waits (within
// ctx) for the calls in flight to return.
func (c *conn) close(ctx context.Context) {
	c.mu.Lock()
	c.closed = true
	m := c.batchers.Load()
	aggs := c.aggs.Load()
	c.mu.Unlock()
	if aggs != nil {
		// Aggregators first: they fail what they hold, and what they have
		// handed to a batcher comes back from it.
		for _, ag := range *aggs {
			ag.close()
		}
	}
	if m == nil {
		return
	}
	for _, bt := range *m {
		bt.close()
	}
	for _, bt := range *m {
		bt.wait(ctx)
	}
	if aggs != nil {
		for _, ag := range *aggs {
			ag.wait(ctx)
		}
	}
}
