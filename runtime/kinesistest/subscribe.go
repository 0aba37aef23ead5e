package kinesistest

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"io"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/aws/protocol/eventstream"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/kinesis"
	"github.com/aws/aws-sdk-go-v2/service/kinesis/schemas"
	"github.com/aws/aws-sdk-go-v2/service/kinesis/types"
	"github.com/aws/smithy-go/transport/http/protocol/awsjson"
)

// Limits of one SubscribeToShard event and the idle heartbeat.
const (
	maxEventRecords = maxGetRecords
	maxEventBytes   = 1 << 20 // data of one event (a larger record still goes alone)
	heartbeatEvery  = 5 * time.Second
)

// endKind says how a subscription ends.
type endKind int

const (
	endClean     endKind = iota // the stream ends after the last whole event
	endException                // an exception event, then the end
	endCut                      // half an event, then the connection drops
	endReset                    // half an event, then the stream is reset
)

// subscription is one SubscribeToShard: a pump that pushes a shard's
// records to a sink as SubscribeToShard events, the same for the
// in-process client and the HTTP/2 front.
type subscription struct {
	s       *Server
	st      *stream
	sh      *shard
	c       *consumer
	it      iterator // the next position to send; owned by the pump
	started time.Time

	stop     chan struct{}
	stopOnce sync.Once
	kind     endKind // set before stop closes
	reason   error   // endException: the exception
	finished chan struct{}
	running  atomic.Bool // the pump started (or never will)

	sinkMu sync.Mutex
	sink   eventSink // set when the pump starts
}

// end asks the subscription to stop; the first request wins.
func (sub *subscription) end(kind endKind, reason error) {
	sub.stopOnce.Do(func() {
		sub.kind, sub.reason = kind, reason
		close(sub.stop)
	})
}

// release forgets the subscription in its consumer's table.
func (sub *subscription) release() {
	sub.st.cmu.Lock()
	if sub.c.subs[sub.sh.index] == sub {
		delete(sub.c.subs, sub.sh.index)
	}
	sub.st.cmu.Unlock()
	close(sub.finished)
}

// eventSink is where a subscription writes its event stream: the in-process
// client's pipe or an HTTP/2 response.
type eventSink interface {
	// Write writes (and flushes) bytes of the stream.
	Write(p []byte) (int, error)
	// Cut drops the connection abruptly, after a partial event; with
	// reset, only this stream is aborted (HTTP/2 RST_STREAM). It may be
	// called while the pump is blocked writing (a subscriber that does not
	// read), and more than once.
	Cut(reset bool)
	// Gone is closed when the subscriber has gone away.
	Gone() <-chan struct{}
}

// SubscribeToShard subscribes a registered, ACTIVE consumer to one shard
// and returns the SDK's own *kinesis.SubscribeToShardOutput: its event
// stream is decoded by the SDK's event-stream reader from real event-stream
// frames that the server writes into an in-memory pipe, the same frames the
// HTTP/2 front (NewHTTPServer) sends over the network.
//
// As on the service: the first event comes at once (with the records
// already there, or none), later ones as records are appended (no polling
// delay), and an empty one after 5 s without records. Each event carries
// its Records, MillisBehindLatest and ContinuationSequenceNumber (use it with
// AFTER_SEQUENCE_NUMBER to subscribe again); at a closed shard's end the
// last event has ChildShards and no ContinuationSequenceNumber, and the
// stream ends. A subscription ends cleanly after its lifetime
// (WithSubscriptionLifetime, default 5 min) and when ctx ends; it ends with
// a ResourceNotFoundException when its consumer is deregistered or its
// stream deleted, and with a ResourceInUseException when another
// subscription takes the shard over. (WithSubscriptionIgnoringShardEnd
// makes it deviate as kinesis-mock does: no end at a closed shard's end.)
//
// Refusals: a consumer that is not ACTIVE, or a shard that this consumer
// already reads through a subscription younger than the takeover time
// (WithSubscriptionTakeover, default 5 s; an older one is taken over), is
// a ResourceInUseException; a second call for one shard and consumer within
// the subscribe interval (WithSubscribeInterval, default 1 s) is a
// LimitExceededException. The subscription's timing (lifetime, heartbeat,
// interval, takeover) runs on the wall clock, not WithClock's.
func (s *Server) SubscribeToShard(ctx context.Context, in *kinesis.SubscribeToShardInput, optFns ...func(*kinesis.Options)) (*kinesis.SubscribeToShardOutput, error) {
	sub, err := s.subscribe(ctx, in)
	if err != nil {
		return nil, err
	}
	opts := append(append([]func(*kinesis.Options){}, optFns...), func(o *kinesis.Options) {
		o.HTTPClient = inProcessHTTP{}
		o.BaseEndpoint = aws.String("http://kinesistest.invalid")
		o.Credentials = credentials.NewStaticCredentialsProvider("kinesistest", "kinesistest", "")
		o.Retryer = aws.NopRetryer{}
		o.Region = s.cfg.region
		// The SDK's protocol keeps decoding state that concurrent streams
		// of one client would share (a data race in SDK v1.57.0).
		o.Protocol = awsjson.New11(schemas.Kinesis_20131202)
	})
	out, err := s.sdkClient().SubscribeToShard(context.WithValue(ctx, subKey{}, sub), in, opts...)
	if err != nil {
		if sub.running.CompareAndSwap(false, true) {
			sub.release() // the pump never started
		}
		return nil, err
	}
	return out, nil
}

// subscribe validates a SubscribeToShard request and admits the
// subscription; its pump is not running yet.
func (s *Server) subscribe(ctx context.Context, in *kinesis.SubscribeToShardInput) (*subscription, error) {
	const op = OpSubscribeToShard
	sname, cname := s.callNames(in.ConsumerARN, nil, nil)
	shardArg := aws.ToString(in.ShardId)
	if err := s.beginConsumer(ctx, op, sname, cname, shardArg); err != nil {
		return nil, err
	}
	switch {
	case in.ConsumerARN == nil:
		return nil, opError(op.String(), validation("1 validation error detected: Value null at 'consumerARN' failed to satisfy constraint: Member must not be null"))
	case in.ShardId == nil:
		return nil, opError(op.String(), validation("1 validation error detected: Value null at 'shardId' failed to satisfy constraint: Member must not be null"))
	case in.StartingPosition == nil:
		return nil, opError(op.String(), validation("1 validation error detected: Value null at 'startingPosition' failed to satisfy constraint: Member must not be null"))
	}
	c, err := s.findConsumer(in.ConsumerARN, nil, nil)
	if err != nil {
		return nil, opError(op.String(), err)
	}
	st := c.st
	if err := s.gone(st); err != nil {
		return nil, opError(op.String(), err)
	}
	now := s.now()
	if c.status(now) != types.ConsumerStatusActive {
		return nil, opError(op.String(), inUse("Consumer %s under account %s is not in ACTIVE state.", c.arn, s.cfg.account))
	}
	sh := st.shardByID(shardArg)
	if sh == nil {
		return nil, opError(op.String(), notFound("Shard %s in stream %s under account %s does not exist", shardArg, st.name, st.account))
	}
	p := in.StartingPosition
	it, err := s.position(st, sh, p.Type, p.SequenceNumber, p.Timestamp, now)
	if err != nil {
		return nil, opError(op.String(), err)
	}
	wall := time.Now()
	sub := &subscription{s: s, st: st, sh: sh, c: c, it: it, started: wall, stop: make(chan struct{}), finished: make(chan struct{})}
	st.cmu.Lock()
	if c.deleted {
		st.cmu.Unlock()
		return nil, opError(op.String(), notFound("Consumer %s under account %s not found.", c.arn, s.cfg.account))
	}
	if last, ok := c.lastSub[sh.index]; ok && s.cfg.subscribeInterval > 0 && wall.Sub(last) < s.cfg.subscribeInterval {
		st.cmu.Unlock()
		return nil, opError(op.String(), limitExceeded("Rate exceeded for consumer %s and shard %s in stream %s under account %s.", c.arn, sh.id, st.name, st.account))
	}
	c.lastSub[sh.index] = wall
	var old *subscription
	if prev := c.subs[sh.index]; prev != nil {
		if s.cfg.takeover <= 0 || wall.Sub(prev.started) < s.cfg.takeover {
			st.cmu.Unlock()
			return nil, opError(op.String(), inUse("Another active subscription exists for consumer %s and shard %s in stream %s under account %s.", c.arn, sh.id, st.name, st.account))
		}
		old = prev
	}
	c.subs[sh.index] = sub
	st.cmu.Unlock()
	if old != nil {
		old.end(endException, inUse("Subscription for consumer %s and shard %s was taken over by a newer subscription.", c.arn, sh.id))
	}
	return sub, nil
}

// run pumps events into sink until the subscription ends.
func (sub *subscription) run(sink eventSink) {
	defer sub.release()
	sub.sinkMu.Lock()
	sub.sink = sink
	sub.sinkMu.Unlock()
	s := sub.s
	w := &frameWriter{enc: eventstream.NewEncoder()}
	if !w.message(sink, initialResponse()) {
		return
	}
	lifetime := time.NewTimer(time.Until(sub.started.Add(s.cfg.subLifetime)))
	defer lifetime.Stop()
	heartbeat := time.NewTimer(s.cfg.heartbeat)
	defer heartbeat.Stop()
	first, beat := true, false
	pace := newBucket(time.Now())
	for {
		select {
		case <-sub.stop:
			sub.finish(sink, w)
			return
		case <-lifetime.C:
			return
		case <-sink.Gone():
			return
		default:
		}
		if err := s.gone(sub.st); err != nil {
			w.message(sink, exceptionMessage(err))
			return
		}
		ev, wait, last := sub.next()
		if len(ev.records) > 0 || first || beat || last {
			if s.cfg.throttle && !pace.take(ev.size(), sub.stop, sink.Gone()) {
				select {
				case <-sub.stop:
					sub.finish(sink, w)
				default: // the subscriber is gone
				}
				return
			}
			if !w.message(sink, ev.message(w)) {
				return
			}
			if last {
				return
			}
			first, beat = false, false
			heartbeat.Reset(s.cfg.heartbeat)
			if len(ev.records) > 0 {
				continue
			}
		}
		if wait == nil {
			continue
		}
		select {
		case <-wait:
		case <-sub.stop:
		case <-sink.Gone():
			return
		case <-lifetime.C:
			return
		case <-heartbeat.C:
			beat = true
		}
	}
}

// finish ends a subscription as its end request says.
func (sub *subscription) finish(sink eventSink, w *frameWriter) {
	switch sub.kind {
	case endException:
		w.message(sink, exceptionMessage(sub.reason))
	case endCut, endReset:
		// Half of the event the subscriber would have got next.
		ev, _, _ := sub.next()
		w.frame.Reset()
		if err := w.enc.Encode(&w.frame, ev.message(w)); err == nil {
			b := w.frame.Bytes()
			_, _ = sink.Write(b[:len(b)/2])
		}
		sink.Cut(sub.kind == endReset)
	}
}

// readBytesPerSecond is the service's push rate per shard and consumer
// (2 MB/s), enforced with WithThrottling.
const readBytesPerSecond = 2 << 20

// bucket paces a subscription's data: a token bucket holding one second's
// worth, which a send may overdraw; the debt is then waited off.
type bucket struct {
	tokens float64
	at     time.Time
}

func newBucket(now time.Time) *bucket { return &bucket{tokens: readBytesPerSecond, at: now} }

// reserve takes n bytes at now and returns how long to wait before
// sending them.
func (b *bucket) reserve(n int, now time.Time) time.Duration {
	b.tokens = min(readBytesPerSecond, b.tokens+now.Sub(b.at).Seconds()*readBytesPerSecond)
	b.at = now
	b.tokens -= float64(n)
	if b.tokens >= 0 {
		return 0
	}
	return time.Duration(-b.tokens / readBytesPerSecond * float64(time.Second))
}

// take waits until n bytes may be sent; false when stop or gone closed
// first.
func (b *bucket) take(n int, stop, gone <-chan struct{}) bool {
	d := b.reserve(n, time.Now())
	if d <= 0 {
		return true
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-stop:
	case <-gone:
	}
	return false
}

// size is the data the event carries.
func (ev *event) size() int {
	n := 0
	for i := range ev.records {
		n += len(ev.records[i].data())
	}
	return n
}

// event is one SubscribeToShard event before encoding.
type event struct {
	shardIndex   int
	records      []record
	continuation uint64 // the counter ContinuationSequenceNumber names
	end          bool   // the shard's end: no continuation, children instead
	children     []*shard
	millisBehind int64
}

// next takes the next event's records at the subscription's position and
// moves the position past them. wait, when not nil, is closed at the
// shard's next change; last reports that the event ends the shard.
func (sub *subscription) next() (ev event, wait <-chan struct{}, last bool) {
	s, sh := sub.s, sub.sh
	now := s.now()
	sh.mu.Lock()
	defer sh.mu.Unlock()
	sh.log.trim(now.Add(-s.cfg.retention))
	from := sh.log.search(sub.it.pos, sub.it.ts)
	avail := sh.log.len() - from
	ev.shardIndex = sh.index
	size := 0
	for i := 0; i < avail && len(ev.records) < maxEventRecords; i++ {
		r := sh.log.at(from + i)
		if len(ev.records) > 0 && size+len(r.data()) > maxEventBytes {
			break
		}
		size += len(r.data())
		ev.records = append(ev.records, *r)
	}
	if n := len(ev.records); n > 0 {
		sub.it.pos, sub.it.ts = ev.records[n-1].counter+1, 0
		if n < avail {
			ev.millisBehind = max(0, now.Sub(time.Unix(0, sh.log.at(from+n).arrival)).Milliseconds())
		}
	}
	if sh.closed && len(ev.records) == avail && !s.cfg.ignoreShardEnd {
		ev.end, ev.children = true, sh.children
		return ev, nil, true
	}
	if avail == 0 {
		// Nothing at or after the position: every later record of this
		// shard has a larger counter (counters are taken under this lock),
		// and arrives after the position's timestamp.
		sub.it.pos, sub.it.ts = max(sub.it.pos, sub.st.counter.Load()+1), 0
		wait = sh.waitChanLocked()
	}
	ev.continuation = sub.it.pos - 1
	return ev, wait, false
}

// frameWriter encodes event-stream messages with the SDK's encoder.
type frameWriter struct {
	enc     *eventstream.Encoder
	frame   bytes.Buffer
	payload []byte
}

// message writes one whole message; false when the subscriber is gone.
func (w *frameWriter) message(sink eventSink, m eventstream.Message) bool {
	w.frame.Reset()
	if err := w.enc.Encode(&w.frame, m); err != nil {
		return false
	}
	_, err := sink.Write(w.frame.Bytes())
	return err == nil
}

func initialResponse() eventstream.Message {
	var m eventstream.Message
	m.Headers.Set(":message-type", eventstream.StringValue("event"))
	m.Headers.Set(":event-type", eventstream.StringValue("initial-response"))
	m.Headers.Set(":content-type", eventstream.StringValue("application/json"))
	m.Payload = []byte("{}")
	return m
}

// exceptionMessage is the exception event that ends a stream with err.
func exceptionMessage(err error) eventstream.Message {
	var m eventstream.Message
	m.Headers.Set(":message-type", eventstream.StringValue("exception"))
	m.Headers.Set(":exception-type", eventstream.StringValue(errorCode(err)))
	m.Headers.Set(":content-type", eventstream.StringValue("application/json"))
	text := err.Error()
	if ae, ok := err.(interface{ ErrorMessage() string }); ok {
		text = ae.ErrorMessage()
	}
	m.Payload, _ = json.Marshal(map[string]string{"message": text})
	return m
}

// message encodes the event as the service does: a SubscribeToShardEvent
// whose JSON payload holds Records (Data in base64, arrival times in epoch
// seconds), ContinuationSequenceNumber, MillisBehindLatest and, at a
// shard's end, ChildShards.
func (ev *event) message(w *frameWriter) eventstream.Message {
	b := w.payload[:0]
	b = append(b, `{"Records":[`...)
	for i := range ev.records {
		r := &ev.records[i]
		if i > 0 {
			b = append(b, ',')
		}
		b = append(b, `{"SequenceNumber":"`...)
		b = appendSeq(b, r.counter, ev.shardIndex)
		b = append(b, `","ApproximateArrivalTimestamp":`...)
		b = strconv.AppendFloat(b, float64(r.arrival/int64(time.Millisecond))/1000, 'f', 3, 64)
		b = append(b, `,"Data":"`...)
		b = base64.StdEncoding.AppendEncode(b, r.data())
		b = append(b, `","PartitionKey":`...)
		b = appendJSONString(b, r.key())
		b = append(b, `,"EncryptionType":"NONE"}`...)
	}
	b = append(b, `],"MillisBehindLatest":`...)
	b = strconv.AppendInt(b, ev.millisBehind, 10)
	if ev.end {
		b = append(b, `,"ChildShards":`...)
		cs, _ := json.Marshal(childShards(ev.children))
		b = append(b, cs...)
	} else {
		b = append(b, `,"ContinuationSequenceNumber":"`...)
		b = appendSeq(b, ev.continuation, ev.shardIndex)
		b = append(b, '"')
	}
	b = append(b, '}')
	w.payload = b
	var m eventstream.Message
	m.Headers.Set(":message-type", eventstream.StringValue("event"))
	m.Headers.Set(":event-type", eventstream.StringValue("SubscribeToShardEvent"))
	m.Headers.Set(":content-type", eventstream.StringValue("application/json"))
	m.Payload = b
	return m
}

func appendJSONString(b []byte, s string) []byte {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 0x20 || c == '"' || c == '\\' || c >= 0x80 {
			q, _ := json.Marshal(s)
			return append(b, q...)
		}
	}
	b = append(b, '"')
	b = append(b, s...)
	return append(b, '"')
}

// The in-process client: the SDK's own SubscribeToShard operation, with an
// HTTP client that answers from the server instead of the network.

type subKey struct{}

func (s *Server) sdkClient() *kinesis.Client {
	s.sdkOnce.Do(func() {
		s.sdk = kinesis.New(kinesis.Options{Region: s.cfg.region})
	})
	return s.sdk
}

// inProcessHTTP answers the SDK's SubscribeToShard request with an event
// stream written by the subscription in the request's context.
type inProcessHTTP struct{}

func (inProcessHTTP) Do(req *http.Request) (*http.Response, error) {
	sub, _ := req.Context().Value(subKey{}).(*subscription)
	if sub == nil || !sub.running.CompareAndSwap(false, true) {
		return nil, errNotSubscribe
	}
	pr, pw := io.Pipe()
	p := &pipeSink{pw: pw, pr: pr, gone: make(chan struct{})}
	go sub.run(p)
	go func() {
		// The request's context governs the stream, as with net/http.
		select {
		case <-req.Context().Done():
			p.pw.CloseWithError(req.Context().Err())
			p.close()
		case <-sub.finished:
			p.pw.Close()
		}
	}()
	return &http.Response{
		Status: "200 OK", StatusCode: http.StatusOK,
		Proto: "HTTP/2.0", ProtoMajor: 2,
		Header:  http.Header{"Content-Type": {"application/vnd.amazon.eventstream"}},
		Body:    p,
		Request: req,
	}, nil
}

// pipeSink is both ends of the in-process stream: the pump writes into pw,
// the SDK reads (and closes) the body.
type pipeSink struct {
	pw   *io.PipeWriter
	pr   *io.PipeReader
	once sync.Once
	gone chan struct{}
}

func (p *pipeSink) Write(b []byte) (int, error) { return p.pw.Write(b) }

// Cut ends the body with the error Go's HTTP/2 client reports for a
// connection that dropped, or for a reset stream.
func (p *pipeSink) Cut(reset bool) {
	if reset {
		p.pw.CloseWithError(errStreamReset)
		return
	}
	p.pw.CloseWithError(io.ErrUnexpectedEOF)
}

func (p *pipeSink) Gone() <-chan struct{} { return p.gone }

func (p *pipeSink) Read(b []byte) (int, error) { return p.pr.Read(b) }

func (p *pipeSink) Close() error {
	p.close()
	return p.pr.Close()
}

func (p *pipeSink) close() { p.once.Do(func() { close(p.gone) }) }

// Subscription describes an active SubscribeToShard subscription.
type Subscription struct {
	Consumer string // the consumer's name
	Shard    string
	Started  time.Time
}

// Subscriptions returns the active subscriptions on a stream, by consumer
// and shard.
func (s *Server) Subscriptions(stream string) []Subscription {
	var out []Subscription
	for _, sub := range s.subscriptions(stream, "") {
		out = append(out, Subscription{Consumer: sub.c.name, Shard: sub.sh.id, Started: sub.started})
	}
	return out
}

func (s *Server) subscriptions(stream, shardID string) []*subscription {
	st, err := s.find(stream)
	if err != nil {
		return nil
	}
	var out []*subscription
	st.cmu.Lock()
	for _, c := range st.consumers {
		for _, sub := range c.subs {
			if shardID == "" || sub.sh.id == shardID {
				out = append(out, sub)
			}
		}
	}
	st.cmu.Unlock()
	return out
}

// EndSubscriptions ends the active subscriptions of one shard of a stream
// (of every shard when shardID is empty), of every consumer, the way the
// service ends one whose lifetime is over: the event stream ends cleanly
// after the last whole event. It returns how many it ended and waits until
// they have.
func (s *Server) EndSubscriptions(stream, shardID string) int {
	return s.endSubscriptions(stream, shardID, endClean, nil)
}

// CutSubscriptions drops the connection of the active subscriptions of one
// shard of a stream (every shard when shardID is empty) in the middle of an
// event: the subscriber gets the first half of the event it would have got
// next, then the connection ends. In process the SDK's reader then reads
// io.ErrUnexpectedEOF, as Go's HTTP/2 client reports a dropped connection.
// A subscriber that is not reading (its next event blocked on the pipe or
// on HTTP/2 flow control) is cut all the same, 100 ms later, wherever its
// stream is. It returns how many it cut and waits until they are.
func (s *Server) CutSubscriptions(stream, shardID string) int {
	return s.endSubscriptions(stream, shardID, endCut, nil)
}

// ResetSubscriptions is CutSubscriptions for one HTTP/2 stream rather than
// its connection: after half an event the server resets the stream
// (RST_STREAM, INTERNAL_ERROR), leaving the connection and the other
// subscriptions on it alone. The SDK's reader reports that as an error of
// its own, with or without the runtime's wire options.
func (s *Server) ResetSubscriptions(stream, shardID string) int {
	return s.endSubscriptions(stream, shardID, endReset, nil)
}

func (s *Server) endSubscriptions(stream, shardID string, kind endKind, reason error) int {
	subs := s.subscriptions(stream, shardID)
	for _, sub := range subs {
		sub.end(kind, reason)
	}
	for _, sub := range subs {
		select {
		case <-sub.finished:
			continue
		case <-time.After(100 * time.Millisecond):
		}
		// The pump is blocked writing to a subscriber that does not read
		// (a full lane, say): a network cut does not wait for it.
		if kind == endCut || kind == endReset {
			sub.sinkMu.Lock()
			if sub.sink != nil {
				sub.sink.Cut(kind == endReset)
			}
			sub.sinkMu.Unlock()
		}
		select {
		case <-sub.finished:
		case <-time.After(5 * time.Second): // a subscriber that stopped reading
		}
	}
	return len(subs)
}
