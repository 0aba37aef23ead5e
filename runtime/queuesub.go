package runtime

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/kinesis"
	"github.com/aws/aws-sdk-go-v2/service/kinesis/types"

	"github.com/kinesisgen/kinesisgen/internal/randsrc"
	"github.com/kinesisgen/kinesisgen/runtime/kpl"
	"github.com/kinesisgen/kinesisgen/runtime/shard"
)

// Queue subscribers (issue 31): a subscription with Queue reads the
// stream's records through a Kinesis queue instead of its shards. The
// queue hands each record to one receiver at a time for its visibility
// timeout; the runtime acknowledges what was handled. No leases, no
// checkpoints, no order.

// Limits of the queue settings (the service's, as the SDK and the
// in-process backend have them).
const (
	MaxVisibility  = 12 * time.Hour
	MaxMaxReceives = 1000
)

// queueRetryBackoff is the first Retry's wait before the record is
// visible again; it doubles with each receive, up to queueRetryMax.
var (
	queueRetryBackoff = time.Second
	queueRetryMax     = 5 * time.Minute
)

// queueDefaultVis is the visibility timeout, in seconds, of a queue that
// names none (the SDK's default).
const queueDefaultVis = 30

// queueWait is the long poll of one ReceiveQueueRecords call, in seconds
// (the service's default): an idle subscription makes few calls, and
// Shutdown cuts a poll short.
const queueWait int32 = 9

// Queue reads the stream through the Kinesis queue named queue (1–128 of
// [a-zA-Z0-9_.-], or the queue's ARN) instead of its shards: any number of
// instances share its records, each acknowledged on its own, in no order.
// No lease store is used. The queue must exist on the stream (ErrStream
// otherwise) unless CreateIfMissing... is set: then a missing one is
// created and waited for. Queues need an on-demand stream (ErrInvalid
// otherwise). Excludes ByKey (a queue keeps no order), FanOut,
// PollInterval and BatchSize; StartAt(Horizon()) makes a queue it creates
// start at the stream's oldest record (default: records arriving after
// its creation).
func Queue(queue string) SubscribeOption { // queue=QUEUE
	return func(s *subscribeSettings) {
		if !validQueueName(queue) && !queueARNForm.MatchString(queue) {
			s.invalid("queue=%q: want 1 to 128 of [a-zA-Z0-9_.-], or a queue ARN", queue)
			return
		}
		s.queue = queue
	}
}

// Visibility is how long a received record stays hidden from other
// receivers (whole seconds, 1 s to 12 h; default: the queue's own as it
// is at the start, 30 s for one created here). While a record waits for a
// worker or is handled, the subscriber extends its visibility by this
// much (UpdateQueueRecordsVisibility, 10 a call) a quarter to a half of it
// before it runs out, so a handler that runs longer keeps its record, up
// to 12 h from its receive; a record whose extension fails may be handled
// elsewhere too (logged, and counted in SubscriptionStatus.VisibilityLost).
// On Shutdown, extensions end once the handlers finish or are abandoned to
// its timeout: an abandoned handler's record is received again within
// this long. Needs Queue.
func Visibility(d time.Duration) SubscribeOption { // visibility=DURATION
	return func(s *subscribeSettings) {
		if d < time.Second || d > MaxVisibility {
			s.invalid("visibility=%s: want 1s..%s", d, MaxVisibility)
			return
		}
		s.visibility = d
	}
}

// MaxReceives is the MaxReceiveCount of a queue CreateIfMissing creates:
// a record received this many times without an acknowledgement becomes
// one of the queue's dead letters (1–1000; the service's default is 6). An
// existing queue keeps its own. Needs Queue.
func MaxReceives(n int) SubscribeOption { // max_receives=N
	return func(s *subscribeSettings) {
		if n < 1 || n > MaxMaxReceives {
			s.invalid("max_receives=%d: want 1..%d", n, MaxMaxReceives)
			return
		}
		s.maxReceives = n
	}
}

// checkQueueSettings adds what is wrong with the queue settings of s.
func checkQueueSettings(s *subscribeSettings) {
	if s.queue == "" {
		if s.visibility != 0 {
			s.invalid("visibility=%s without queue", s.visibility)
		}
		if s.maxReceives != 0 {
			s.invalid("max_receives=%d without queue", s.maxReceives)
		}
		return
	}
	if s.byKey {
		s.invalid("by_key with queue=%s: a queue keeps no order, so no key's messages can be handled in order", s.queue)
	}
	if s.fanout != "" {
		s.invalid("queue=%s with fanout=%s: a queue subscriber reads through the queue, not the shards", s.queue, s.fanout)
	}
	if s.poll != 0 {
		s.invalid("queue=%s with poll=%s: a queue subscriber long-polls the queue", s.queue, s.poll)
	}
	if s.batch != 0 {
		s.invalid("queue=%s with batch=%d: a queue hands out up to 10 records a receive", s.queue, s.batch)
	}
	if s.create.shards > 0 {
		s.invalid("queue=%s with create_if_missing=%d: queues need an on-demand stream (create_if_missing=on_demand)", s.queue, s.create.shards)
	}
}

// queueRun is the queue half of a subRun: receivers, workers and ackers.
type queueRun struct {
	r          *subRun
	arn        string
	name       string
	vis        int32 // receive's VisibilityTimeoutSeconds; 0: the queue's
	maxRecv    int32 // the queue's MaxReceiveCount; 0: no dead-letter handling
	recvCtx    context.Context
	stopRecv   context.CancelFunc
	slots      chan struct{} // in-flight bound: one per record received and not yet handled
	work       chan *held
	acks       chan *held    // handled: to acknowledge, still kept hidden
	quit       chan struct{} // closed when the workers are to stop (nothing queued for them)
	ackQuit    chan struct{} // closed once the workers are done: the ackers flush and stop
	receivers  sync.WaitGroup
	workers    sync.WaitGroup
	ackers     sync.WaitGroup
	stopping   atomic.Bool
	rejected   rejectedSet // rejected here, released until the queue dead-letters them
	inHandling atomic.Int64
	inAck      atomic.Int64 // handled, their acknowledgement on its way
	quitOnce   sync.Once
	// How handlings ended, for Status.
	acked, retried, rejectedN, deadLettered, skippedN atomic.Uint64

	// Visibility extension (queuevisibility.go).
	visDur               time.Duration // the visibility of what is received here; 0: not extended
	base                 time.Time
	heldMu               sync.Mutex
	held                 []*held // received and maybe not settled
	stopKeep             chan struct{}
	keeper               sync.WaitGroup
	visExtended, visLost atomic.Uint64
}

// ensureQueue finds the queue of the subscription (by ARN, or by name
// among the stream's queues), creating it when missing and create is set,
// and waits until it is ACTIVE. It returns its description.
func (s *Subscription) ensureQueue(ctx context.Context, c *conn, streamARN string) (*types.QueueDescription, error) {
	qerr := func(kind error, op string, err error) error {
		return &Error{Kind: kind, Op: op, Stream: s.stream, Err: fmt.Errorf("queue %s: %w", s.set.queue, err)}
	}
	find := func(ctx context.Context) (string, error) {
		if strings.HasPrefix(s.set.queue, "arn:") {
			return s.set.queue, nil
		}
		in := &kinesis.ListQueuesInput{StreamFilter: []types.QueueStreamFilter{{StreamARN: &streamARN}}}
		for {
			out, err := c.client.ListQueues(ctx, in)
			if err != nil {
				return "", qerr(kindOr(ErrStream, err), "ListQueues", err)
			}
			for _, q := range out.QueueSummaries {
				if aws.ToString(q.QueueName) == s.set.queue {
					return aws.ToString(q.QueueARN), nil
				}
			}
			if out.NextToken == nil {
				return "", nil
			}
			in.NextToken = out.NextToken
		}
	}
	arn, err := find(ctx)
	if err != nil {
		return nil, err
	}
	if arn == "" {
		if !s.set.create.enabled() {
			return nil, qerr(ErrStream, "ListQueues", fmt.Errorf("no queue of that name on stream %s (create it, or set create_if_missing=on_demand)", s.stream))
		}
		in := &kinesis.CreateQueueInput{
			QueueName:               &s.set.queue,
			StreamConfigurationList: []types.QueueStreamConfiguration{{StreamARN: &streamARN}},
		}
		if s.set.start.Kind == shard.Horizon {
			in.StreamConfigurationList[0].StartingPosition = &types.QueueStartingPosition{Type: types.QueueStartingPositionTypeTrimHorizon}
		}
		attrs := &types.QueueAttributes{}
		if s.set.visibility > 0 {
			attrs.VisibilityTimeoutSeconds = aws.Int32(visSeconds(s.set.visibility))
		}
		if s.set.maxReceives > 0 {
			attrs.DeadLetterConfiguration = &types.DeadLetterConfiguration{TargetType: types.TargetTypeBuiltIn, MaxReceiveCount: aws.Int32(int32(s.set.maxReceives))}
		}
		in.QueueAttributes = attrs
		out, err := c.client.CreateQueue(ctx, in)
		var inUse *types.ResourceInUseException
		switch {
		case err == nil && out.QueueDescription != nil:
			arn = aws.ToString(out.QueueDescription.QueueARN)
			s.log.Info("queue created", "queue", s.set.queue)
		case errors.As(err, &inUse): // another instance created it first
			if arn, err = find(ctx); err != nil {
				return nil, err
			}
		case err != nil:
			kind := kindOr(ErrStream, err)
			var inv *types.InvalidArgumentException
			if errors.As(err, &inv) {
				kind = ErrInvalid
			}
			return nil, qerr(kind, "CreateQueue", err)
		}
		if arn == "" {
			return nil, qerr(ErrStream, "CreateQueue", errors.New("created, but the answer names no queue ARN"))
		}
	}
	wctx, cancel := context.WithTimeout(ctx, createWait)
	defer cancel()
	backoff := 20 * time.Millisecond
	for {
		out, err := c.client.DescribeQueue(wctx, &kinesis.DescribeQueueInput{QueueARN: &arn})
		switch {
		case err != nil && isNotFound(err) && wctx.Err() == nil:
			// Just after CreateQueue it may read as missing for a moment.
		case err != nil:
			return nil, qerr(kindOr(ErrStream, err), "DescribeQueue", err)
		case out.QueueDescription == nil:
			return nil, qerr(ErrStream, "DescribeQueue", errors.New("the answer describes no queue"))
		case out.QueueDescription.QueueStatus == types.QueueStatusActive, out.QueueDescription.QueueStatus == types.QueueStatusUpdating:
			d := out.QueueDescription
			for _, sc := range d.StreamConfigurationList {
				if aws.ToString(sc.StreamARN) != streamARN {
					return nil, qerr(ErrInvalid, "DescribeQueue", fmt.Errorf("the queue delivers stream %s, not %s", aws.ToString(sc.StreamARN), streamARN))
				}
			}
			return d, nil
		case out.QueueDescription.QueueStatus == types.QueueStatusDeleting:
			return nil, qerr(ErrStream, "DescribeQueue", errors.New("the queue is being deleted"))
		}
		t := time.NewTimer(backoff)
		select {
		case <-wctx.Done():
			t.Stop()
			return nil, qerr(ErrStream, "DescribeQueue", fmt.Errorf("not active: %w", wctx.Err()))
		case <-t.C:
		}
		backoff = min(2*backoff, time.Second)
	}
}

// visSeconds rounds d up to whole seconds.
func visSeconds(d time.Duration) int32 { return int32((d + time.Second - 1) / time.Second) }

// launchQueue is launch for a queue subscription.
func (s *Subscription) launchQueue(ctx context.Context, c *conn) error {
	log := s.log.With("owner", c.owner, "queue", s.set.queue)
	_, sum, err := s.ensureSource(ctx, c, log)
	if err != nil {
		return err
	}
	if sum.StreamModeDetails == nil || sum.StreamModeDetails.StreamMode != types.StreamModeOnDemand {
		return &Error{Kind: ErrInvalid, Op: "subscribe", Stream: s.stream, Err: fmt.Errorf("queue=%s on a provisioned stream: queues deliver only on-demand streams (switch its capacity mode, or read it by shards)", s.set.queue)}
	}
	if sum.StreamARN == nil {
		return &Error{Kind: ErrStream, Op: "DescribeStreamSummary", Stream: s.stream, Err: errors.New("the answer names no stream ARN")}
	}
	desc, err := s.ensureQueue(ctx, c, *sum.StreamARN)
	if err != nil {
		return err
	}
	if err := s.ensureDeadLetter(ctx, c); err != nil {
		return err
	}

	cfg := s.b.s.cfg
	r := &subRun{s: s, c: c, log: log, tel: cfg.tel, began: time.Now(), stopping: make(chan struct{})}
	r.obs = r.tel.runObs(s.stream, s.set.name)
	r.ctx, r.cancel = context.WithCancel(context.Background())
	q := &queueRun{r: r, arn: aws.ToString(desc.QueueARN), name: aws.ToString(desc.QueueName)}
	if a := desc.QueueAttributes; a != nil && a.DeadLetterConfiguration != nil && a.DeadLetterConfiguration.TargetType == types.TargetTypeBuiltIn {
		q.maxRecv = aws.ToInt32(a.DeadLetterConfiguration.MaxReceiveCount)
	} else if a == nil || a.DeadLetterConfiguration == nil {
		q.maxRecv = 6 // the service's default
	}
	if s.set.maxReceives > 0 && q.maxRecv != int32(s.set.maxReceives) {
		log.Warn("the queue exists with another max_receives; it keeps its own", "max_receives", q.maxRecv)
	}
	// Every receive names the visibility, so that the keeper knows when
	// each record's runs out (a later UpdateQueue does not change it).
	q.vis = queueDefaultVis
	if s.set.visibility > 0 {
		q.vis = visSeconds(s.set.visibility)
	} else if a := desc.QueueAttributes; a != nil && a.VisibilityTimeoutSeconds != nil {
		q.vis = *a.VisibilityTimeoutSeconds
	}
	q.rejected.ttl = time.Duration(max(q.maxRecv, 1)) * time.Duration(max(q.vis, 1)) * time.Second
	q.rejected.max = rejectedMax
	r.queue = q
	q.start(s.set.workers)
	r.idle = make(chan struct{})
	go func() {
		q.workers.Wait()
		close(r.idle)
	}()

	if err := s.install(ctx, r); err != nil {
		return err
	}
	log.Info("subscribed", "workers", s.set.workers, "queue_arn", q.arn)
	return nil
}

// start runs the receivers, workers and ackers. At most 10 records per
// receiver plus 2×workers are received and not yet handled: enough for
// the next receives to be under way while the workers handle the last
// ones.
func (q *queueRun) start(workers int) {
	receivers, ackers := queueCalls(workers)
	inflight := queueBatch*receivers + 2*workers
	q.slots = make(chan struct{}, inflight)
	q.work = make(chan *held, inflight)
	q.acks = make(chan *held, inflight)
	q.quit = make(chan struct{})
	q.ackQuit = make(chan struct{})
	q.recvCtx, q.stopRecv = context.WithCancel(context.Background())
	q.base = time.Now()
	q.stopKeep = make(chan struct{})
	if q.vis > 0 {
		q.visDur = time.Duration(q.vis) * time.Second
		q.keeper.Go(q.keep)
	}
	for range receivers {
		q.receivers.Go(q.receive)
	}
	for range workers {
		q.workers.Go(q.worker)
	}
	for range ackers {
		q.ackers.Go(q.acker)
	}
}

// queueCalls is how many receives and acknowledgements a subscription
// keeps under way: a receive takes a round trip for its 10 records, so
// one per worker (up to 64) keeps the workers busy; acknowledgements,
// 10 a call, need half as many.
var queueCalls = func(workers int) (receivers, ackers int) {
	receivers = min(max(2, workers), 64)
	return receivers, max(1, receivers/2)
}

// receive long-polls the queue while there are free slots.
func (q *queueRun) receive() {
	backoff := 100 * time.Millisecond
	var fails uint64 // the failed receives so far: names a seeded jitter draw
	// Until the run stops: a backend that answers a receive cut by the
	// stop with records anyway (the workers release them) is not asked
	// again, each receive counting one more toward max_receives.
	for q.recvCtx.Err() == nil {
		// A full receive's worth of slots: a receive of fewer records
		// costs as much as one of 10.
		n := 0
		for n < queueBatch {
			select {
			case q.slots <- struct{}{}:
				n++
			case <-q.recvCtx.Done():
				for range n {
					<-q.slots
				}
				return
			}
		}
		in := &kinesis.ReceiveQueueRecordsInput{QueueARN: &q.arn, Limit: aws.Int32(int32(n)), WaitTimeSeconds: aws.Int32(queueWait), VisibilityTimeoutSeconds: aws.Int32(q.vis)}
		out, err := q.r.c.client.ReceiveQueueRecords(q.recvCtx, in)
		got := 0
		if err == nil {
			got = len(out.QueueRecords)
		}
		for range n - got {
			<-q.slots
		}
		if err != nil {
			if q.recvCtx.Err() != nil {
				// Records a cut receive took stay in flight until their
				// visibility timeout: nothing is lost.
				return
			}
			if isNotFound(err) {
				q.r.s.b.startFail(q.r.s, q.r, err)
				return
			}
			wait := backoff/2 + randsrc.N(backoff/2+1, "queue receive", q.arn, fails)
			fails++
			q.r.log.Warn("ReceiveQueueRecords failed; trying again", "retry_in", wait, "error", err)
			t := time.NewTimer(wait)
			select {
			case <-q.recvCtx.Done():
				t.Stop()
				return
			case <-t.C:
			}
			backoff = min(2*backoff, 10*time.Second)
			continue
		}
		backoff = 100 * time.Millisecond
		if got == 0 {
			continue
		}
		// The visibility began when the queue answered, a little before
		// now: the keeper extends it with half of it to spare.
		now := q.since()
		hs := make([]held, got)
		for i := range hs {
			hs[i].rec = &out.QueueRecords[i]
			hs[i].at = now
			hs[i].expires.Store(int64(now + time.Duration(q.vis)*time.Second))
		}
		q.track(hs)
		for i := range hs {
			q.work <- &hs[i] // never blocks: a slot was taken for it
		}
	}
}

// worker handles received records until the run stops. With tracing on,
// what it handles back to back, until no received record waits, is one
// batch: a process span per batch (see batchSpans), as a lane worker's.
func (q *queueRun) worker() {
	spans := q.r.tel.newBatchSpans(&q.r.obs)
	if spans != nil {
		defer spans.idle()
	}
	for {
		select {
		case h := <-q.work:
			if q.stopping.Load() || q.r.ctx.Err() != nil {
				// Received but not begun: visible again at once for
				// another instance, rather than after its timeout.
				h.settled.Store(true)
				q.setVisibility(context.Background(), aws.ToString(h.rec.ReceiptHandle), 0)
			} else {
				q.inHandling.Add(1)
				q.handle(h, spans)
				q.inHandling.Add(-1)
			}
			<-q.slots
			if spans != nil && len(q.work) == 0 {
				spans.idle()
			}
		case <-q.r.ctx.Done():
			return
		case <-q.quit:
			return
		}
	}
}

// acker acknowledges handled records, up to 10 a call: whatever is waiting
// when a call can be made goes in it, so acks are never held back for a
// fuller batch.
func (q *queueRun) acker() {
	batch := make([]*held, 0, queueBatch)
	for {
		select {
		case h := <-q.acks:
			batch = append(batch, h)
		case <-q.ackQuit:
			// Flush what the workers queued before they stopped.
			for {
				select {
				case h := <-q.acks:
					batch = append(batch, h)
					if len(batch) == queueBatch {
						q.ack(batch)
						batch = batch[:0]
					}
					continue
				default:
				}
				break
			}
			if len(batch) > 0 {
				q.ack(batch)
			}
			return
		}
		q.fill(&batch)
		q.ack(batch)
		batch = batch[:0]
	}
}

// ackLinger is how long a partial batch of acknowledgements waits for
// more while records are still being handled: fuller calls cost the
// service and this process less, and a record waits at most this long.
const ackLinger = time.Millisecond

// fill adds to batch what is waiting, up to 10; while records are still
// being handled it waits up to ackLinger for them.
func (q *queueRun) fill(batch *[]*held) {
	var t *time.Timer
	defer func() {
		if t != nil {
			t.Stop()
		}
	}()
	for len(*batch) < queueBatch {
		select {
		case h := <-q.acks:
			*batch = append(*batch, h)
			continue
		default:
		}
		if q.inHandling.Load() == 0 && len(q.work) == 0 {
			return
		}
		if t == nil {
			t = time.NewTimer(ackLinger)
		}
		select {
		case h := <-q.acks:
			*batch = append(*batch, h)
		case <-t.C:
			return
		case <-q.ackQuit:
			return
		}
	}
}

// ack acknowledges the records of hs, trying a failed call, and the
// entries the queue failed for a passing cause (throttling, an internal
// error), again a few times; a record not acknowledged is received again
// after its visibility timeout (handled twice, never lost). Until the
// calls are over the keeper goes on extending their visibility: a slow
// acknowledgement does not let a handled record be received again
// meanwhile. An entry the queue refuses for good (its receipt handle
// expired: the record was received again since, its visibility having run
// out), or one whose visibility ran out before the calls were over, is a
// visibility lost, counted as the keeper counts one.
func (q *queueRun) ack(hs []*held) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	defer func(all []*held) {
		for _, h := range all {
			q.settle(h, "its visibility ran out before its acknowledgement was over")
		}
		q.inAck.Add(-int64(len(all)))
	}(hs)
	backoff := 50 * time.Millisecond
	for try := 0; ; try++ {
		entries := make([]types.AcknowledgeQueueRecordsRequestEntry, len(hs))
		for i, h := range hs {
			entries[i].ReceiptHandle = h.rec.ReceiptHandle
		}
		out, err := q.r.c.client.AcknowledgeQueueRecords(ctx, &kinesis.AcknowledgeQueueRecordsInput{QueueARN: &q.arn, Entries: entries})
		last := try == 3 || ctx.Err() != nil
		if err == nil {
			if hs = q.ackFailed(hs, out.Failed, last); len(hs) == 0 {
				return
			}
		} else if last {
			q.r.log.Warn("AcknowledgeQueueRecords failed; its records will be received again", "records", len(hs), "record_ids", recordIDs(hs), "error", err)
			return
		}
		time.Sleep(backoff)
		backoff *= 2
	}
}

// recordIDs names the records of hs (for a log line).
func recordIDs(hs []*held) []string {
	ids := make([]string, len(hs))
	for i, h := range hs {
		ids[i] = aws.ToString(h.rec.RecordId)
	}
	return ids
}

// ackFailed sorts the entries an acknowledgement failed: those refused
// for good are counted lost, the others returned to be tried again (or,
// after the last try, logged).
func (q *queueRun) ackFailed(hs []*held, failed []types.AcknowledgeQueueRecordsErrorEntry, last bool) []*held {
	if len(failed) == 0 {
		return nil
	}
	byHandle := make(map[string]*held, len(hs))
	for _, h := range hs {
		byHandle[aws.ToString(h.rec.ReceiptHandle)] = h
	}
	var again []*held
	for _, f := range failed {
		h := byHandle[aws.ToString(f.ReceiptHandle)]
		code, msg := aws.ToString(f.ErrorCode), aws.ToString(f.ErrorMessage)
		switch {
		case h == nil:
			q.r.log.Warn("record not acknowledged; it will be received again", "code", code, "error", msg)
		case permanentEntryError(code):
			q.lose(h, "the queue refused its acknowledgement", "code", code, "error", msg)
		case last:
			q.r.log.Warn("record not acknowledged; it will be received again", "record_id", aws.ToString(h.rec.RecordId), "code", code, "error", msg)
		default:
			again = append(again, h)
		}
	}
	return again
}

// setVisibility makes the record of handle visible again after secs.
func (q *queueRun) setVisibility(ctx context.Context, handle string, secs int32) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	out, err := q.r.c.client.UpdateQueueRecordsVisibility(ctx, &kinesis.UpdateQueueRecordsVisibilityInput{
		QueueARN: &q.arn,
		Entries:  []types.UpdateQueueRecordsVisibilityRequestEntry{{ReceiptHandle: &handle, VisibilityTimeoutSeconds: &secs}},
	})
	if err == nil && len(out.Failed) > 0 {
		err = errors.New(aws.ToString(out.Failed[0].ErrorMessage))
	}
	if err != nil {
		q.r.log.Warn("UpdateQueueRecordsVisibility failed; the record is received again after its visibility timeout", "error", err)
	}
}

// queueVerdict is what becomes of one received record.
type queueVerdict uint8

const (
	qAck     queueVerdict = iota // handled (or dead-lettered to dead_letter): acknowledge
	qRelease                     // rejected without dead_letter: to the queue's dead letters
	qRetry                       // visible again after a backoff
	qLeave                       // the run stopped mid-way: left to its visibility timeout
)

// handle handles one received record (each message of a KPL aggregate)
// and carries out the outcome. spans, when tracing, is the worker's batch.
func (q *queueRun) handle(h *held, spans *batchSpans) {
	m := h.rec
	handle := aws.ToString(m.ReceiptHandle)
	id := aws.ToString(m.RecordId)
	attempt := int(aws.ToInt32(m.ReceiveCount))
	if attempt < 1 {
		attempt = 1
	}
	if q.rejected.has(id, time.Now(), q.maxRecv == 0 || int32(attempt) >= q.maxRecv) {
		// Rejected here before: only its receive count still has to reach
		// the queue's limit.
		h.settled.Store(true)
		q.setVisibility(q.r.ctx, handle, 0)
		return
	}
	rec := &shard.Record{
		Stream:         q.r.s.stream,
		SequenceNumber: id,
		PartitionKey:   aws.ToString(m.PartitionKey),
		Data:           m.Data,
		ArrivalTime:    aws.ToTime(m.ApproximateArrivalTimestamp),
	}
	verdict := qAck
	var cause error
	if !q.r.s.raw && kpl.IsAggregated(m.Data) {
		subs, _, err := kpl.Deaggregate(m.Data)
		if err != nil {
			if spans != nil {
				spans.add(m.Data)
			}
			q.count(undecodable)
			verdict, cause = q.giveUp(rec, nil, m.Data, attempt, &Error{Kind: ErrDecode, Op: "decode", Stream: rec.Stream, Err: err})
		}
		for _, sub := range subs {
			sr := *rec
			sr.PartitionKey, sr.Data = sub.PartitionKey, sub.Data
			v, c := q.process(&sr, attempt, spans)
			if v > verdict {
				verdict, cause = v, c
			}
		}
	} else {
		verdict, cause = q.process(rec, attempt, spans)
	}
	// Settled: its visibility is no longer extended (a retry or a release
	// sets it, a stop leaves it to run out), but for an acknowledgement's
	// until its call is over (ack).
	if verdict != qAck {
		q.settle(h, "its visibility ran out while it was handled")
	}
	switch verdict {
	case qAck:
		h.acking.Store(true)
		q.inAck.Add(1)
		select {
		case q.acks <- h:
		case <-q.ackQuit: // a handler that outlived Shutdown: received again after its visibility timeout
			h.settled.Store(true)
			q.inAck.Add(-1)
		}
	case qRetry:
		q.retried.Add(1)
		wait := queueRetryBackoff << min(attempt-1, 20)
		wait = min(wait, queueRetryMax)
		q.r.log.Debug("record retried", "record_id", id, "attempt", attempt, "retry_in", wait, "error", cause)
		q.setVisibility(q.r.ctx, handle, visSeconds(wait))
	case qRelease:
		if q.maxRecv > 0 && int32(attempt) < q.maxRecv {
			q.rejected.add(id, time.Now())
		}
		q.setVisibility(q.r.ctx, handle, 0)
	}
}

// process is the queue's counterpart of subRun.process for one message:
// the same decoding, handler call (middleware, tracing, metrics) and
// outcomes, carried out on the queue. spans, when tracing, is the
// worker's batch, which the message joins.
func (q *queueRun) process(rec *shard.Record, attempt int, spans *batchSpans) (queueVerdict, error) {
	r := q.r
	if spans != nil {
		spans.add(rec.Data)
	}
	hc := &handling{Context: r.ctx, key: rec.PartitionKey, log: r.log}
	ctx := context.Context(hc)
	headers, payload, err := decodeEnvelope(rec.Data)
	if err != nil {
		if !r.s.raw {
			q.count(undecodable)
			return q.giveUp(rec, nil, rec.Data, attempt, err)
		}
		headers, payload = nil, rec.Data
	}
	if app, ok := headers[ApplicationHeader]; ok {
		if app != r.s.b.s.cfg.app {
			q.skippedN.Add(1)
			if t := r.tel; t != nil && t.metrics {
				t.handled.Add(context.Background(), 1, r.obs.outcome[skipped])
			}
			return qAck, nil
		}
		delete(headers, ApplicationHeader)
	}
	takeAttempt(headers) // a shard subscriber's retry copy: the receive count is the attempt here
	if spans != nil {
		// The handler's context carries the producer's span, parsed when
		// asked for, as a lane's handler's does.
		hc.traceparent, hc.tracestate = headers[traceparentHeader], headers[tracestateHeader]
	}
	d := Delivery{
		Stream:       rec.Stream,
		Queue:        q.name,
		RecordID:     rec.SequenceNumber,
		PartitionKey: rec.PartitionKey,
		ArrivalTime:  rec.ArrivalTime,
		Attempt:      attempt,
		headers:      headers,
	}
	out, err := r.invoke(ctx, payload, &d)
	if err != nil {
		return q.giveUp(rec, headers, payload, attempt, &Error{Kind: ErrDecode, Op: "decode", Stream: rec.Stream, Err: err})
	}
	switch out.kind {
	case outcomeAck:
		q.acked.Add(1)
		return qAck, nil
	case outcomeRetry:
		cause := out.err
		if cause == nil {
			cause = errors.New("handler asked for a retry")
		}
		if attempt > r.s.set.retries {
			return q.giveUp(rec, headers, payload, attempt, fmt.Errorf("gave up after %d attempts: %w", attempt, cause))
		}
		return qRetry, cause
	default:
		reason := out.err
		if reason == nil {
			reason = errors.New("rejected by the handler")
		}
		return q.giveUp(rec, headers, payload, attempt, reason)
	}
}

// count counts a record given up before its handler call.
func (q *queueRun) count(kind int) {
	if t := q.r.tel; t != nil && t.metrics {
		t.handled.Add(context.Background(), 1, q.r.obs.outcome[kind])
	}
}

// giveUp sends a record to dead_letter (then it is acknowledged) or,
// without one, leaves it to the queue's own dead-letter handling.
func (q *queueRun) giveUp(rec *shard.Record, headers Headers, payload []byte, attempt int, reason error) (queueVerdict, error) {
	r := q.r
	attrs := []any{"record_id", rec.SequenceNumber, "partition_key_md5", keyDigest(rec.PartitionKey), "attempt", attempt, "error", reason}
	dl := r.s.set.deadLetter
	if dl == "" {
		if q.maxRecv == 0 {
			// The queue has no dead letters: the record would come back
			// for ever.
			r.log.Error("record rejected and acknowledged (the queue has no dead-letter handling)", attrs...)
			q.rejectedN.Add(1)
			return qAck, reason
		}
		r.log.Warn("record rejected: left to the queue's dead letters", append(attrs, "max_receives", q.maxRecv)...)
		q.rejectedN.Add(1)
		return qRelease, reason
	}
	out := deadLetter(dl, r.c.knownLimit(dl), rec, headers, payload, attempt, reason)
	out.Headers[OriginStreamHeader] = rec.Stream + "#queue/" + q.name
	switch r.publish(r.ctx, rec, out) {
	case published:
		r.log.Warn("record sent to the dead-letter stream", append(attrs, "dead_letter", dl)...)
		q.deadLettered.Add(1)
		return qAck, reason
	case refused:
		r.log.Error("dead-letter stream refused the record; left to the queue's dead letters", append(attrs, "dead_letter", dl)...)
		q.rejectedN.Add(1)
		return qRelease, reason
	}
	return qLeave, reason
}

// stopQueue stops receiving, lets the handlers finish (bounded by ctx),
// flushes the acknowledgements and releases the records received but not
// begun. The records being handled keep their visibility extended until
// their handlers finish or ctx ends; a handler still running then is
// abandoned: its record is not acknowledged and, no longer extended,
// becomes visible again within a visibility timeout.
func (r *subRun) stopQueue(ctx context.Context) error {
	q := r.queue
	q.stopping.Store(true)
	q.stopRecv()
	q.receivers.Wait()
	var err error
	done := make(chan struct{})
	closeQuit := func() { q.quitOnce.Do(func() { close(q.quit) }) }
	go func() {
		// Workers return once nothing is queued for them (what is, they
		// release at once).
		for len(q.work) > 0 && ctx.Err() == nil {
			time.Sleep(time.Millisecond)
		}
		closeQuit()
		q.workers.Wait()
		close(done)
	}()
	select {
	case <-done:
	case <-ctx.Done():
		closeQuit()
		r.cancel()
		t := time.NewTimer(stopGrace)
		select {
		case <-done:
		case <-t.C:
			r.log.Warn("handlers still running after the shutdown timeout; their records are received again after their visibility timeout", "handling", q.inHandling.Load())
			err = fmt.Errorf("handlers still running: %w", ctx.Err())
		}
		t.Stop()
	}
	// The handlers are done, or abandoned to the shutdown timeout. Their
	// acknowledgements are flushed first, the keeper still extending the
	// records until each call is over (a slow one must not let another
	// consumer receive a handled record); then the keeper stops, and an
	// abandoned record, never acknowledged, is visible again within a
	// visibility timeout.
	close(q.ackQuit)
	q.ackers.Wait()
	close(q.stopKeep)
	q.keeper.Wait()
	r.cancel()
	if err != nil {
		return &Error{Kind: ErrRead, Op: "stop", Stream: r.s.stream, Err: err}
	}
	r.log.Info("subscription stopped")
	return nil
}

// queueStatus fills a queue subscription's status.
func (q *queueRun) status(out *SubscriptionStatus) {
	out.Queue = q.name
	out.QueueDepth = len(q.work)
	out.InFlight = len(q.work) + int(q.inHandling.Load()+q.inAck.Load()) // received, not yet settled
	out.Outcomes = Outcomes{
		Acked:        q.acked.Load(),
		Retried:      q.retried.Load(),
		Rejected:     q.rejectedN.Load(),
		DeadLettered: q.deadLettered.Load(),
		Skipped:      q.skippedN.Load(),
	}
	out.Handled = out.Outcomes.Total()
	out.VisibilityExtended = q.visExtended.Load()
	out.VisibilityLost = q.visLost.Load()
}
