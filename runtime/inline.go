package runtime

import (
	"context"
	"errors"
	"log/slog"
	"time"

	"github.com/kinesisgen/kinesisgen/runtime/internal/inline"
	"github.com/kinesisgen/kinesisgen/runtime/shard"
)

// The hook of runtime/kinesislambda: the broker's subscribers handle
// records an AWS Lambda event source mapping read, through the same
// process as the consumer's lanes.
func init() {
	inline.Connect = inlineConnect
	inline.Lookup = inlineLookup
	inline.Streams = inlineStreams
}

func inlineBroker(bk any, op string) (*Broker, error) {
	b, _ := bk.(*Broker)
	if b == nil || b.s == nil {
		return nil, &Error{Kind: ErrInvalid, Op: op, Err: errors.New("nil broker: make one with NewBroker")}
	}
	return b, nil
}

// inlineConnect is Connect without starting the registered subscriptions:
// in Lambda the event source mapping reads the shards and keeps their
// positions, so this process polls nothing and holds no lease. Publishers,
// retry copies and dead letters use the connection as usual.
func inlineConnect(ctx context.Context, bk any) error {
	b, err := inlineBroker(bk, "connect")
	if err != nil {
		return err
	}
	if b.s.live.Load() != nil {
		return nil
	}
	s := b.s
	if err := checkApplication(s.cfg.app, "connect"); err != nil {
		return err
	}
	s.mu.Lock()
	switch s.phase {
	case phaseConnected:
		s.mu.Unlock()
		return nil
	case phaseConnecting:
		s.mu.Unlock()
		return &Error{Kind: ErrInvalid, Op: "connect", Err: errors.New("broker is being connected by Connect or Run: a Lambda handler's broker is connected by the handler alone")}
	case phaseClosing, phaseClosed:
		s.mu.Unlock()
		return &Error{Kind: ErrNotConnected, Op: "connect", Err: errors.New("broker was shut down; make a new one")}
	}
	s.phase = phaseConnecting
	cfg := s.cfg
	s.mu.Unlock()
	c, err := dial(ctx, cfg)
	s.mu.Lock()
	defer s.mu.Unlock()
	if err != nil {
		if s.phase == phaseConnecting {
			s.phase = phaseNew
		}
		return err
	}
	if s.phase != phaseConnecting {
		c.close(ctx)
		return &Error{Kind: ErrNotConnected, Op: "connect", Err: errors.New("broker was shut down while connecting")}
	}
	s.conn = c
	s.inline = true
	s.live.Store(c)
	s.phase = phaseConnected
	select {
	case <-s.ready:
	default:
		close(s.ready)
	}
	return nil
}

func inlineStreams(bk any) []string {
	b, err := inlineBroker(bk, "lambda")
	if err != nil {
		return nil
	}
	b.s.mu.Lock()
	defer b.s.mu.Unlock()
	out := make([]string, 0, len(b.s.subs))
	for _, s := range b.s.subs {
		out = append(out, s.stream)
	}
	return out
}

func inlineLookup(bk any, stream string) (inline.Sub, bool) {
	b, err := inlineBroker(bk, "lambda")
	if err != nil {
		return nil, false
	}
	c := b.s.live.Load()
	if c == nil {
		return nil, false
	}
	b.s.mu.Lock()
	var sub *Subscription
	for _, s := range b.s.subs {
		if s.stream == stream {
			sub = s
			break
		}
	}
	b.s.mu.Unlock()
	if sub == nil {
		return nil, false
	}
	tel := b.s.cfg.tel
	return &inlineSub{s: sub, c: c, log: sub.log.With("owner", c.owner), tel: tel,
		obs: tel.runObs(sub.stream, sub.set.name), began: time.Now()}, true
}

// inlineSub makes a subscription's runs without coordinator or lanes: the
// caller schedules the records (runtime/kinesislambda keeps each key's
// order), process handles each.
type inlineSub struct {
	s     *Subscription
	c     *conn
	log   *slog.Logger
	tel   *telemetry
	obs   runObs
	began time.Time
}

func (i *inlineSub) Workers() int { return i.s.set.workers }
func (i *inlineSub) ByKey() bool  { return i.s.set.byKey }

// Begin makes the invocation's run: its handlers' context is the
// invocation's. Its workers share it, as the consumer's lanes share theirs.
// With tracing on, the invocation's records are one batch, as a lane
// worker's takes are: a process span per up to maxBatchLinks of them,
// linked to their producers' spans (the last one made by End).
func (i *inlineSub) Begin(ctx context.Context) inline.Run {
	run := &inlineRun{r: &subRun{s: i.s, c: i.c, log: i.log, tel: i.tel, obs: i.obs, began: i.began, ctx: ctx}}
	if b := i.tel.newBatchSpans(&run.r.obs); b != nil {
		run.spans = &lockedSpans{b: *b}
	}
	return run
}

type inlineRun struct {
	r     *subRun
	spans *lockedSpans // nil: not traced
}

// End ends the invocation's last process span.
func (i *inlineRun) End() {
	if i.spans != nil {
		i.spans.idle()
	}
}

func (i *inlineRun) Handle(rec inline.Record) bool {
	if i.spans != nil {
		i.spans.add(rec.Data)
	}
	// The stream as the subscription names it (a name or an ARN), as the
	// consumer's deliveries do, whatever names it in the event.
	sr := shard.Record{
		Stream: i.r.s.stream, ShardID: rec.ShardID, SequenceNumber: rec.SequenceNumber,
		SubSequence: rec.SubSequence, PartitionKey: rec.PartitionKey, Data: rec.Data, ArrivalTime: rec.ArrivalTime,
	}
	return i.r.process(&sr)
}
