package runtime

import (
	"bytes"
	"context"
	"crypto/md5"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"strconv"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/aws/aws-sdk-go-v2/service/kinesis"

	"github.com/kinesisgen/kinesisgen/internal/randsrc"
	"github.com/kinesisgen/kinesisgen/runtime/internal/wire"
	"github.com/kinesisgen/kinesisgen/runtime/kpl"
	"github.com/kinesisgen/kinesisgen/runtime/lease"
	"github.com/kinesisgen/kinesisgen/runtime/shard"
)

// Headers the runtime writes on records it republishes. The attempt and
// application headers travel on retry copies (neither is among a
// Delivery's headers); the attempt is read back into Delivery.Attempt. The
// others travel on dead letters. Names starting with "kinesisgen-" are the
// runtime's own: a publish that sets one is refused.
const (
	AttemptHeader = "kinesisgen-attempt"
	// ApplicationHeader names the application (WithApplication) whose
	// Retry made a copy. The copy goes to the tip of the stream, where
	// every application reading it finds it: only the one named handles
	// it, the others settle it unhandled (Outcomes.Skipped). A copy
	// without it (written before it existed) is handled by every
	// application, as it was then.
	ApplicationHeader      = "kinesisgen-application"
	DeadLetterReasonHeader = "kinesisgen-reason"
	OriginStreamHeader     = "kinesisgen-origin-stream"
	OriginShardHeader      = "kinesisgen-origin-shard"
	OriginSequenceHeader   = "kinesisgen-origin-sequence"
	OriginAttemptsHeader   = "kinesisgen-origin-attempts"
	// OriginPartitionKeyHeader holds the original key of a dead letter that
	// goes under another key because its own cannot be published (empty,
	// longer than MaxPartitionKeyLength); OriginPartitionKeyBase64Header
	// holds it in standard base64 instead when it is not valid UTF-8.
	OriginPartitionKeyHeader       = "kinesisgen-origin-partition-key"
	OriginPartitionKeyBase64Header = "kinesisgen-origin-partition-key-base64"
	// TruncatedFromHeader is on a dead letter whose payload was cut to fit
	// the service's record limit with the dead-letter headers: it holds the
	// original payload's size in bytes. The whole record is in its origin
	// stream, at its origin shard and sequence number, while the stream
	// retains it.
	TruncatedFromHeader = "kinesisgen-truncated-from"
)

// stopGrace is how long a stop that ran out of time still waits for
// handlers to return after their context is cancelled.
const stopGrace = time.Second

// maxReasonLen keeps a dead letter's reason header short; an error text can
// be arbitrarily long.
const maxReasonLen = 1024

// invokeFunc decodes a payload into the handler's message type and calls the
// handler. A non-nil error means the payload did not decode.
type invokeFunc func(ctx context.Context, payload []byte, d Delivery) (Outcome, error)

// RawRecord is a record as it is stored, for a subscriber that must see
// every record whatever its payload: a dead-letter reader first of all, as
// a record dead-lettered because it could not be decoded cannot be decoded
// there either. Subscribe[RawRecord] (or a //kinesis:subscriber handler
// whose message parameter is runtime.RawRecord) hands each record over
// undecoded, so none is rejected for its content.
type RawRecord struct {
	// Data is the payload: the record's data without the envelope, or all
	// of it when it has no envelope or one that cannot be read. It is the
	// handler's to keep.
	Data []byte
	// Headers are the record's user headers (nil when none), the
	// dead-letter headers among them; the handler may keep or change them.
	Headers Headers
	// PartitionKey is the record's key.
	PartitionKey string
}

// DeadLetterInfo is what a dead letter's headers say about it.
type DeadLetterInfo struct {
	Reason         string // why it was given up
	Stream         string // where it was read
	ShardID        string
	SequenceNumber string
	Attempts       int // deliveries before it was given up
	// PartitionKey is the original record's key. It is the dead letter's
	// own key unless that one could not be published (see
	// OriginPartitionKeyHeader).
	PartitionKey string
	// TruncatedFrom is the original payload's size in bytes when the dead
	// letter carries only its first bytes (see TruncatedFromHeader); 0 when
	// it carries the whole payload.
	TruncatedFrom int
}

// DeadLetter reads the headers the runtime writes on a dead letter; ok is
// false when the record carries none.
func (r RawRecord) DeadLetter() (dl DeadLetterInfo, ok bool) {
	reason, ok := r.Headers[DeadLetterReasonHeader]
	if !ok {
		return DeadLetterInfo{}, false
	}
	attempts, _ := strconv.Atoi(r.Headers[OriginAttemptsHeader])
	truncated, _ := strconv.Atoi(r.Headers[TruncatedFromHeader])
	key := r.PartitionKey
	if k, ok := r.Headers[OriginPartitionKeyHeader]; ok {
		key = k
	} else if k, ok := r.Headers[OriginPartitionKeyBase64Header]; ok {
		if b, err := base64.StdEncoding.DecodeString(k); err == nil {
			key = string(b)
		}
	}
	return DeadLetterInfo{
		Reason:         reason,
		Stream:         r.Headers[OriginStreamHeader],
		ShardID:        r.Headers[OriginShardHeader],
		SequenceNumber: r.Headers[OriginSequenceHeader],
		Attempts:       attempts,
		PartitionKey:   key,
		TruncatedFrom:  truncated,
	}, true
}

// rawInvoke hands the record over undecoded, through chain; it never fails
// to decode.
func rawInvoke(h Handler[RawRecord], chain []Middleware) invokeFunc {
	if len(chain) > 0 {
		f := wrap(h, chain)
		return func(ctx context.Context, payload []byte, d Delivery) (Outcome, error) {
			rec := RawRecord{Data: bytes.Clone(payload), Headers: maps.Clone(d.headers), PartitionKey: d.PartitionKey}
			return f(ctx, d, rec), nil
		}
	}
	return func(ctx context.Context, payload []byte, d Delivery) (Outcome, error) {
		rec := RawRecord{Data: bytes.Clone(payload), Headers: maps.Clone(d.headers), PartitionKey: d.PartitionKey}
		return h(ctx, rec, d), nil
	}
}

// typedInvoke decodes the payload into an M and hands it to h through
// chain. Without middleware the message is never boxed into an any.
func typedInvoke[M any](h Handler[M], codec Codec, chain []Middleware) invokeFunc {
	if len(chain) > 0 {
		f := wrap(h, chain)
		return func(ctx context.Context, payload []byte, d Delivery) (Outcome, error) {
			var m M
			if err := codec.Unmarshal(payload, &m); err != nil {
				return Outcome{}, err
			}
			return f(ctx, d, m), nil
		}
	}
	return func(ctx context.Context, payload []byte, d Delivery) (Outcome, error) {
		var m M
		if err := codec.Unmarshal(payload, &m); err != nil {
			return Outcome{}, err
		}
		return h(ctx, m, d), nil
	}
}

// subRun is one start of a subscription: its coordinator, lanes and the
// context its handlers run under.
type subRun struct {
	s      *Subscription
	c      *conn
	log    *slog.Logger
	coord  *shard.Coordinator
	lanes  *lanes
	idle   chan struct{} // the lanes' workers have all exited
	ctx    context.Context
	cancel context.CancelFunc
	tel    *telemetry // nil: no telemetry
	queue  *queueRun  // a queue subscription's; coord and lanes are then nil
	obs    runObs
	began  time.Time // when the run started (checkpoint age before the first checkpoint)
	// leaseCtxs: by a lease's context (shard.Record.Lease), the handlers'
	// context for its records: ctx, also ended when the lease is lost.
	leaseCtxs sync.Map

	stopping chan struct{} // closed when stop begins: in-place retries stop backing off
	stopOnce sync.Once
}

// handlerCtx returns the context the handlers of rec run under: the run's,
// cancelled also when the lease rec was read under is lost, fenced or
// released, since another instance may then handle the record (issue 29,
// defect 5). One per lease held, not per record.
func (r *subRun) handlerCtx(rec *shard.Record) context.Context {
	lc := rec.Lease()
	if lc.Done() == nil {
		return r.ctx
	}
	if v, ok := r.leaseCtxs.Load(lc); ok {
		return v.(context.Context)
	}
	cctx, cancel := context.WithCancel(r.ctx)
	ctx := &leaseBound{Context: cctx, lease: lc, cancel: cancel}
	if v, loaded := r.leaseCtxs.LoadOrStore(lc, ctx); loaded {
		cancel()
		return v.(context.Context)
	}
	context.AfterFunc(lc, func() {
		cancel()
		r.leaseCtxs.Delete(lc)
	})
	return ctx
}

// leaseBound is a handler's context bound to its record's lease: Err looks
// at the lease itself, which reports a lease past its fence by the clock
// before the fence's timer has run (after a pause), and Deadline is the
// lease's fence when that comes first.
type leaseBound struct {
	context.Context
	lease  context.Context
	cancel context.CancelFunc
}

func (c *leaseBound) Err() error {
	if err := c.Context.Err(); err != nil {
		return err
	}
	if c.lease.Err() != nil {
		c.cancel()
		return c.Context.Err()
	}
	return nil
}

func (c *leaseBound) Deadline() (time.Time, bool) {
	d, ok := c.Context.Deadline()
	if ld, lok := c.lease.Deadline(); lok && (!ok || ld.Before(d)) {
		return ld, true
	}
	return d, ok
}

// start checks (or creates) the stream and the dead-letter stream, starts
// the lanes and the coordinator, and returns once every owned shard has its
// first iterator. s is subStarting (beginStart); a halt meanwhile aborts the
// start, which then stops what it started and answers ErrNotConnected.
func (s *Subscription) start(ctx context.Context, c *conn) error {
	defer s.endStart() // last: whatever launch started is stopped by now
	s.mu.Lock()
	aborted := s.aborted
	s.mu.Unlock()
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	defer context.AfterFunc(aborted, cancel)()
	var err error
	if s.set.queue != "" {
		err = s.launchQueue(ctx, c)
	} else {
		err = s.launch(ctx, c)
	}
	if err != nil && aborted.Err() != nil {
		return &Error{Kind: ErrNotConnected, Op: "subscribe", Stream: s.stream, Err: errors.New("stopped while starting")}
	}
	return err
}

// launch is start's work.
func (s *Subscription) launch(ctx context.Context, c *conn) error {
	log := s.log.With("owner", c.owner)
	fresh, sum, err := s.ensureSource(ctx, c, log)
	if err != nil {
		return err
	}
	if s.set.byKey && autoDistribution(sum) {
		// The service places an AUTO stream's records on any shard: one
		// key's records are on many, read by many owners, in no order.
		return &Error{Kind: ErrInvalid, Op: "subscribe", Stream: s.stream, Err: errors.New("by_key on a stream whose record distribution strategy is AUTO: the service ignores partition keys, so no key's records stay in order; subscribe without by_key, or switch the stream to USER_PARTITION_KEY")}
	}
	start := s.set.start
	if fresh && start.Kind == shard.Latest {
		// Nothing in a stream created just now predates the subscription,
		// and what is published while its shards open must not be skipped.
		start = Horizon()
	}
	var consumerARN string
	if name := s.set.fanout; name != "" {
		// Before anything is read: a missing consumer fails the start.
		if consumerARN, err = ensureConsumer(ctx, c, s.stream, name, s.set.create.enabled(), log); err != nil {
			return err
		}
	}
	if err := s.ensureDeadLetter(ctx, c); err != nil {
		return err
	}

	cfg := s.b.s.cfg
	r := &subRun{s: s, c: c, log: log, tel: cfg.tel, began: time.Now(), stopping: make(chan struct{})}
	handlerName := s.set.name
	r.obs = r.tel.runObs(s.stream, handlerName)
	// Handlers outlive the caller's ctx (Connect's, say): they stop with the run.
	r.ctx, r.cancel = context.WithCancel(context.Background())
	var observe func() takeObserver
	if r.tel != nil && r.tel.tracer != nil {
		observe = func() takeObserver { return &batchSpans{t: r.tel, ro: &r.obs} }
	}
	r.lanes = newLanesObserved(s.set.workers, s.set.byKey, r.process, observe)
	r.idle = r.lanes.idle

	// The coordinator adds stream and owner itself.
	coordLog := cfg.logger
	if s.set.name != "" {
		coordLog = coordLog.With("handler", s.set.name)
	}
	// The application name holds no '/' (Connect checks it), so the
	// namespace names one application's stream and no other.
	liveness, balance := shard.LivenessAuto, shard.BalanceBulk
	if cfg.perLease {
		liveness, balance = shard.LivenessPerLease, shard.BalanceOneSteal
	}
	coord, err := shard.New(shard.Config{
		Liveness:    liveness,
		Balance:     balance,
		Roster:      cfg.roster,
		RosterWhole: cfg.rosterWhole,
		Alone:       c.privateLeases,
		Stream:      s.stream,
		Namespace:   cfg.app + "/" + s.stream,
		Client:      c.client,
		Leases:      c.leases,
		Owner:       c.owner,
		Logger:      coordLog,
		Start:       start,
		BatchSize:   s.set.batch,
		Poll:        s.set.poll,
		Sync:        cfg.shardSync,
		Renew:       cfg.leaseRenew,
		Failover:    cfg.failover,
		Checkpoint:  cfg.checkpointEvery,
		Sink:        r.lanes.submit,
		OnFail:      func(err error) { s.b.startFail(s, r, err) },
		OnDistribution: func(auto bool) {
			if auto && s.set.byKey {
				// Refused at start (above); switched while running, it
				// goes on with each shard's order only.
				r.log.Error("the stream's record distribution strategy is now AUTO: by_key no longer keeps one key's messages in order (only each shard's); subscribe without by_key, or switch the stream back to USER_PARTITION_KEY")
			}
		},
		Counters: &s.b.s.leaseCounts,
		// With fan-out every shard is read by SubscribeToShard instead.
		ConsumerARN: consumerARN,
		// In every lane mode a shard has at most this many records out
		// past its oldest unsettled one: a stuck handler pauses the
		// shard's reader, as a full by-key lane does, and bounds what a
		// restart reads again.
		MaxInFlight: maxInFlight(s.set.workers),
		// The SDK's deserializer is half of a draining reader's CPU.
		GetRecordsOptions: []func(*kinesis.Options){wire.FastGetRecords},
	})
	if err != nil {
		r.abandon()
		return &Error{Kind: ErrInvalid, Op: "subscribe", Stream: s.stream, Err: err}
	}
	r.coord = coord
	if err := coord.Start(ctx); err != nil {
		stopCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), s.b.stopBound())
		_ = coord.Stop(stopCtx) // release whatever the failed pass took
		cancel()
		r.abandon()
		return &Error{Kind: readErrorKind(err), Op: "subscribe", Stream: s.stream, Err: err}
	}

	if err := s.install(ctx, r); err != nil {
		return err
	}
	if err := coord.Err(); err != nil { // failed before the run was set
		s.b.startFail(s, r, err)
	}
	if consumerARN != "" {
		r.log.Info("subscribed", "workers", s.set.workers, "by_key", s.set.byKey, "fanout", s.set.fanout)
	} else {
		r.log.Info("subscribed", "workers", s.set.workers, "by_key", s.set.byKey)
	}
	return nil
}

// install makes r the subscription's run, unless the subscription was
// stopped while starting: then it stops r and answers ErrNotConnected.
func (s *Subscription) install(ctx context.Context, r *subRun) error {
	s.mu.Lock()
	if s.state != subStarting { // stopped while starting
		s.mu.Unlock()
		stopCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), s.b.stopBound())
		defer cancel()
		_ = r.stop(stopCtx)
		return &Error{Kind: ErrNotConnected, Op: "subscribe", Stream: s.stream}
	}
	s.state = subRunning
	s.run = r
	s.mu.Unlock()
	return nil
}

// abandon stops the lanes of a run that did not start; nothing it may have
// delivered was settled, so it is read again.
func (r *subRun) abandon() {
	r.lanes.close()
	r.cancel()
}

// stop stops fetching and lets the lanes finish what they were given
// (bounded by ctx: past half of it, only the records already being handled;
// the others are stale and read again by the next owner); the coordinator
// then writes the final checkpoints and releases the leases. Handlers still running after that see their context
// cancelled; records they never settle are read again by the next owner.
func (r *subRun) stop(ctx context.Context) error {
	if r.queue != nil {
		return r.stopQueue(ctx)
	}
	r.stopOnce.Do(func() { close(r.stopping) })
	err := r.coord.Stop(ctx)
	r.lanes.close()
	r.cancel()
	select {
	case <-r.idle:
	case <-ctx.Done():
		// The handlers' context was cancelled just now: give those that
		// honour it a moment to return.
		t := time.NewTimer(stopGrace)
		defer t.Stop()
		select {
		case <-r.idle:
		case <-t.C:
			r.log.Warn("handlers still running after the shutdown timeout")
			if err == nil {
				err = fmt.Errorf("handlers still running: %w", ctx.Err())
			}
		}
	}
	if err != nil {
		r.log.Warn("subscription stopped with work left", "error", err)
		kind := readErrorKind(err)
		if name := r.s.set.name; name != "" {
			err = fmt.Errorf("handler %s: %w", name, err)
		}
		return &Error{Kind: kind, Op: "stop", Stream: r.s.stream, Err: err}
	}
	r.log.Info("subscription stopped")
	return nil
}

// readErrorKind classifies a coordinator error for the caller.
func readErrorKind(err error) error {
	var le *lease.Error
	if errors.As(err, &le) || errors.Is(err, lease.ErrLeaseLost) {
		return ErrLease
	}
	if isNotFound(err) {
		return ErrStream
	}
	return ErrRead
}

// process handles one record on a lane: decode, call the handler, carry out
// its outcome. It reports whether the record is settled (the lane settles
// it); it is left unsettled for redelivery only when it is stale or the run
// stops before a republish succeeded.
func (r *subRun) process(rec *shard.Record) (settle bool) {
	if rec.Stale() {
		// A seek repositioned the shard, or its lease went to another
		// reader: the record is delivered again from there.
		return false
	}
	// A publish from inside the handler that names no key goes under this
	// record's key (the key ladder's fourth rung).
	hc := &handling{Context: r.handlerCtx(rec), key: rec.PartitionKey, log: r.log}
	ctx := context.Context(hc)
	if !r.s.raw && kpl.IsAggregated(rec.Data) {
		// The reader hands over a KPL aggregate whole only when it is
		// corrupt: say so, rather than that its bytes do not decode.
		if _, _, kerr := kpl.Deaggregate(rec.Data); kerr != nil {
			r.countUndecodable()
			return r.giveUp(ctx, rec, nil, rec.Data, 1, &Error{Kind: ErrDecode, Op: "decode", Stream: rec.Stream, Shard: rec.ShardID, Err: kerr})
		}
	}
	headers, payload, err := decodeEnvelope(rec.Data)
	if err != nil {
		if !r.s.raw {
			r.countUndecodable()
			return r.giveUp(ctx, rec, nil, rec.Data, 1, err) // an ErrDecode error
		}
		headers, payload = nil, rec.Data // a raw subscriber takes it as it is
	}
	if app, ok := headers[ApplicationHeader]; ok {
		// Another application's retry copy is none of this one's: its
		// original was (or will be) handled here once already.
		if app != r.s.b.s.cfg.app {
			rec.Count(shard.Skipped)
			if t := r.tel; t != nil && t.metrics {
				t.handled.Add(context.Background(), 1, r.obs.outcomeAdd[skipped]...)
			}
			return true
		}
		delete(headers, ApplicationHeader)
	}
	attempt := takeAttempt(headers)
	if r.tel != nil && r.tel.tracer != nil {
		hc.traceparent, hc.tracestate = headers[traceparentHeader], headers[tracestateHeader]
	}
	for {
		d := Delivery{
			Stream:         rec.Stream,
			ShardID:        rec.ShardID,
			SequenceNumber: rec.SequenceNumber,
			PartitionKey:   rec.PartitionKey,
			ArrivalTime:    rec.ArrivalTime,
			Attempt:        attempt,
			headers:        headers,
		}
		if attempt > 1 && r.s.set.inPlace {
			// The handler may have changed the map it was given.
			d.headers = maps.Clone(headers)
		}
		out, err := r.invoke(ctx, payload, &d)
		if err != nil {
			return r.giveUp(ctx, rec, headers, payload, attempt, &Error{Kind: ErrDecode, Op: "decode", Stream: rec.Stream, Shard: rec.ShardID, Err: err})
		}
		if out.kind != outcomeAck && rec.Stale() {
			// The lease was lost while the handler ran (its context was
			// cancelled): the next owner handles the record again, so no
			// retry copy or dead letter is made of this handling.
			return false
		}
		if out.kind != outcomeRetry {
			return r.settleOutcome(ctx, rec, headers, payload, attempt, out)
		}
		cause := out.err
		if cause == nil {
			cause = errors.New("handler asked for a retry")
		}
		if attempt > r.s.set.retries {
			return r.giveUp(ctx, rec, headers, payload, attempt, fmt.Errorf("gave up after %d attempts: %w", attempt, cause))
		}
		if !r.s.set.inPlace {
			return r.retry(ctx, rec, headers, payload, attempt, cause)
		}
		if !r.backOff(rec, attempt, cause) {
			return false
		}
		attempt++
	}
}

// settleOutcome carries out an ack or a reject.
func (r *subRun) settleOutcome(ctx context.Context, rec *shard.Record, headers Headers, payload []byte, attempt int, out Outcome) (settle bool) {
	if out.kind == outcomeAck {
		rec.Count(shard.Acked)
		return true
	}
	reason := out.err
	if reason == nil {
		reason = errors.New("rejected by the handler")
	}
	return r.giveUp(ctx, rec, headers, payload, attempt, reason)
}

// The bounds of an in-place retry's backoff; tests shorten them.
var inPlaceBase, inPlaceMax = InPlaceRetryBase, InPlaceRetryMax

// backOff waits, in the record's lane, before attempt attempt+1 of an
// in-place retry (RetryInPlace): exponential with jitter, bounded by
// InPlaceRetryMax. It reports false when the record is to be left
// unsettled instead: the run is stopping (its shard's unsettled records
// are then abandoned, so that the stop does not wait for them: the next
// owner reads them again), the record went stale (its lease was lost or
// its shard repositioned), or the run's context ends before the wait does
// (a Lambda invocation's deadline less its margin).
func (r *subRun) backOff(rec *shard.Record, attempt int, cause error) bool {
	d := min(inPlaceBase<<min(attempt-1, 16), inPlaceMax)
	wait := max(d/2+randsrc.N(d/2+1, "in-place retry", rec.SequenceNumber, uint64(attempt)), time.Millisecond)
	if dl, ok := r.ctx.Deadline(); ok && time.Until(dl) < wait {
		// A Lambda invocation's run (runtime/kinesislambda): the next
		// attempt could not start before its deadline, so waiting would
		// only be billed. Left unsettled, the record is reported failed
		// and the mapping delivers it again, its key's later records after.
		r.log.Info("in-place retry stopped: the next attempt would start after the invocation's deadline; the record is left unsettled and delivered again", "shard", rec.ShardID, "sequence", rec.SequenceNumber, "attempt", attempt, "retry_in", wait, "error", cause)
		return false
	}
	r.log.Debug("record retried in place", "shard", rec.ShardID, "sequence", rec.SequenceNumber, "attempt", attempt, "retry_in", wait, "error", cause)
	t := time.NewTimer(wait)
	defer t.Stop()
	// A lost lease is seen within a tick: Record.Stale has no channel.
	tick := time.NewTicker(min(wait, 100*time.Millisecond))
	defer tick.Stop()
	for {
		select {
		case <-t.C:
			if rec.Stale() {
				return false
			}
			return true
		case <-tick.C:
			if rec.Stale() {
				r.log.Info("in-place retry given up: the shard's lease was lost or it was repositioned; the record is read again", "shard", rec.ShardID, "sequence", rec.SequenceNumber, "attempt", attempt)
				return false
			}
		case <-r.stopping:
			rec.Abandon()
			r.log.Info("in-place retry stopped by shutdown; the record is left unsettled and read again by the shard's next owner", "shard", rec.ShardID, "sequence", rec.SequenceNumber, "attempt", attempt)
			return false
		case <-r.ctx.Done():
			return false
		}
	}
}

// invoke calls the handler on d, observed when telemetry is on.
func (r *subRun) invoke(ctx context.Context, payload []byte, d *Delivery) (Outcome, error) {
	if t := r.tel; t != nil {
		return r.callObserved(ctx, t, payload, d)
	}
	return r.call(ctx, payload, *d)
}

// call runs the handling (middleware and handler); a panic is recovered,
// logged with its stack and turned into a retry: this is Recover, around
// everything.
func (r *subRun) call(ctx context.Context, payload []byte, d Delivery) (out Outcome, decodeErr error) {
	defer func() {
		if p := recover(); p != nil {
			out, decodeErr = panicked(ctx, r.log, d, p), nil
		}
	}()
	return r.s.invoke(ctx, payload, d)
}

// callObserved is call counted and timed. With tracing on, the record is
// in its worker's batch span (batchSpans), and the handler's context
// carries the producer's span (see handling.traceparent).
func (r *subRun) callObserved(ctx context.Context, t *telemetry, payload []byte, d *Delivery) (Outcome, error) {
	began := time.Now()
	out, err := r.call(ctx, payload, *d)
	kind := int(out.kind)
	if err != nil {
		kind = undecodable
	}
	t.endProcess(&r.obs, began, kind)
	return out, err
}

// countUndecodable counts a record given up before its handling because
// it does not decode.
func (r *subRun) countUndecodable() {
	if t := r.tel; t != nil && t.metrics {
		t.handled.Add(context.Background(), 1, r.obs.outcomeAdd[undecodable]...)
	}
}

// retry publishes a copy of rec at the tip of its stream, with the same key
// and headers and the next attempt count; the original is then to be
// settled. A copy that cannot be published keeps the original unsettled.
func (r *subRun) retry(ctx context.Context, rec *shard.Record, headers Headers, payload []byte, attempt int, cause error) (settle bool) {
	if err := checkKey(rec.PartitionKey); err != nil {
		// A KPL sub-record may carry a key the service refuses: its copy
		// could never be published, so the record is given up at once.
		return r.giveUp(ctx, rec, headers, payload, attempt, fmt.Errorf("cannot be retried under its partition key (%v): %w", err, cause))
	}
	h := cloneHeaders(headers, 2)
	h[AttemptHeader] = strconv.Itoa(attempt + 1)
	h[ApplicationHeader] = r.s.b.s.cfg.app
	out := Outgoing{Stream: r.s.stream, PartitionKey: rec.PartitionKey, Headers: h, Payload: payload}
	switch r.publish(ctx, rec, out) {
	case published:
		r.log.Debug("record retried", "shard", rec.ShardID, "sequence", rec.SequenceNumber, "attempt", attempt, "error", cause)
		rec.Count(shard.Retried)
		return true
	case refused:
		// The copy can never be published (too large with its headers, say):
		// retrying would stall the shard, so the record is given up.
		return r.giveUp(ctx, rec, headers, payload, attempt, fmt.Errorf("retry copy refused: %w", cause))
	}
	return false
}

// giveUp sends rec to the dead-letter stream, with its reason and origin in
// headers, and reports it to be settled; without a dead-letter stream it
// logs it. A dead letter not yet published when the run stops leaves the
// record unsettled.
//
// Every record given up reaches the dead-letter stream: one whose key
// cannot be published goes under a key derived from it, the original in a
// header; one too large with the dead-letter headers carries the first
// bytes of its payload that fit, its size in a header (see deadLetter).
func (r *subRun) giveUp(ctx context.Context, rec *shard.Record, headers Headers, payload []byte, attempt int, reason error) (settle bool) {
	// The key itself stays out of the logs (it may name a customer): its
	// digest finds the record's lines.
	attrs := []any{"shard", rec.ShardID, "sequence", rec.SequenceNumber, "partition_key_md5", keyDigest(rec.PartitionKey), "attempt", attempt, "error", reason}
	dl := r.s.set.deadLetter
	if dl == "" {
		r.log.Error("record rejected and checkpointed past", attrs...)
		rec.Count(shard.Rejected)
		return true
	}
	out := deadLetter(dl, r.c.knownLimit(dl), rec, headers, payload, attempt, reason)
	switch r.publish(ctx, rec, out) {
	case published:
		if n, ok := out.Headers[TruncatedFromHeader]; ok {
			attrs = append(attrs, "truncated_from", n)
		}
		r.log.Warn("record sent to the dead-letter stream", append(attrs, "dead_letter", dl)...)
		rec.Count(shard.DeadLettered)
		return true
	case refused:
		r.log.Error("dead-letter stream refused the record; checkpointed past", append(attrs, "dead_letter", dl)...)
		rec.Count(shard.Rejected)
		return true
	}
	return false
}

// deadLetter is the record that takes rec to the dead-letter stream dl: its
// payload and user headers plus the reason and origin headers, under rec's
// key. A key the service would refuse is replaced by one derived from it
// (the same for every record of that key, so they stay in order), the
// original kept in OriginPartitionKeyHeader. A record that would exceed
// limit (the dead-letter stream's record size) keeps the first bytes of its payload that fit, its size
// in TruncatedFromHeader; should the headers alone not fit, only the
// runtime's are kept.
func deadLetter(dl string, limit int, rec *shard.Record, headers Headers, payload []byte, attempt int, reason error) Outgoing {
	h := cloneHeaders(headers, 7)
	why := reason.Error()
	if len(why) > maxReasonLen {
		why = strings.ToValidUTF8(why[:maxReasonLen], "")
	}
	h[DeadLetterReasonHeader] = why
	h[OriginStreamHeader] = rec.Stream
	h[OriginShardHeader] = rec.ShardID
	h[OriginSequenceHeader] = rec.SequenceNumber
	h[OriginAttemptsHeader] = strconv.Itoa(attempt)
	key := rec.PartitionKey
	if checkKey(key) != nil {
		sum := md5.Sum([]byte(key))
		key = "kinesisgen-invalid-key-" + hex.EncodeToString(sum[:])
		if utf8.ValidString(rec.PartitionKey) {
			h[OriginPartitionKeyHeader] = rec.PartitionKey
		} else {
			h[OriginPartitionKeyBase64Header] = base64.StdEncoding.EncodeToString([]byte(rec.PartitionKey))
		}
	}
	if recordLen(h, payload)+len(key) > limit {
		h[TruncatedFromHeader] = strconv.Itoa(len(payload))
		room := limit - len(key) - recordLen(h, nil)
		if room < 0 {
			// User headers of about 1 MiB: keep the runtime's only.
			for k := range h {
				if !strings.HasPrefix(k, "kinesisgen-") {
					delete(h, k)
				}
			}
			room = limit - len(key) - recordLen(h, nil)
		}
		// The size header's own length does not depend on room, and a
		// headered record is always an envelope, so the payload adds its
		// length exactly.
		payload = payload[:max(0, min(room, len(payload)))]
	}
	return Outgoing{Stream: dl, PartitionKey: key, Headers: h, Payload: payload}
}

type publishResult uint8

const (
	published publishResult = iota
	refused                 // the record itself is invalid: trying again cannot help
	abandoned               // the run stopped first: leave the record unsettled
)

// publish puts out, trying again with backoff and jitter until it succeeds,
// the record is refused as invalid, or ctx ends. The lane waits meanwhile,
// which holds its shard back: the original stays unsettled, never lost.
func (r *subRun) publish(ctx context.Context, rec *shard.Record, out Outgoing) publishResult {
	const maxBackoff = 10 * time.Second
	if n := recordLen(out.Headers, out.Payload) + len(out.PartitionKey); n > r.c.knownLimit(out.Stream) {
		r.log.Error("record too large to republish with its headers", "to", out.Stream, "shard", rec.ShardID, "sequence", rec.SequenceNumber, "bytes", n)
		return refused
	}
	backoff := 100 * time.Millisecond
	for try := uint64(0); ; try++ {
		_, err := r.c.put(ctx, out)
		switch {
		case err == nil:
			return published
		case ctx.Err() != nil, errors.Is(err, ErrNotConnected):
			return abandoned
		case errors.Is(err, ErrInvalid), errors.Is(err, ErrPublish) && refusedForOneEntry(err):
			// The service refused this record itself (the batcher sends a
			// record it refuses alone): trying again cannot help. Other
			// refusals (access denied, a disabled KMS key) are the
			// operator's to fix: the record waits for them, unsettled.
			r.log.Error("publish refused", "to", out.Stream, "shard", rec.ShardID, "sequence", rec.SequenceNumber, "error", err)
			return refused
		}
		wait := backoff/2 + randsrc.N(backoff/2+1, "republish", rec.SequenceNumber, try)
		r.log.Warn("publish failed; the record stays unsettled and is tried again",
			"to", out.Stream, "shard", rec.ShardID, "sequence", rec.SequenceNumber, "retry_in", wait, "error", err)
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return abandoned
		case <-t.C:
		}
		backoff = min(2*backoff, maxBackoff)
	}
}

// takeAttempt removes the attempt header from h and returns the attempt it
// names (1 when absent or unreadable).
func takeAttempt(h Headers) int {
	v, ok := h[AttemptHeader]
	if !ok {
		return 1
	}
	delete(h, AttemptHeader)
	n, err := strconv.Atoi(v)
	if err != nil || n < 1 {
		return 1
	}
	return n
}

func cloneHeaders(h Headers, extra int) Headers {
	out := make(Headers, len(h)+extra)
	for k, v := range h {
		out[k] = v
	}
	delete(out, PartitionKeyHeader)
	return out
}
