package kinesistest

import (
	"container/heap"
	"context"
	"encoding/base64"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/kinesis"
	"github.com/aws/aws-sdk-go-v2/service/kinesis/types"
)

// Queue limits and defaults. The SDK documents the defaults (visibility
// 30 s, wait 9 s, up to 10 records or entries a call, MaxReceiveCount 6);
// the upper bounds are not documented and are SQS's, the closest service
// the queues resemble (the conformance suite says so).
const (
	queueBatch           = 10
	queueDefaultVis      = 30
	queueMaxVis          = 12 * 60 * 60
	queueDefaultWait     = 9
	queueMaxWait         = 20
	queueDefaultReceives = 6
	queueMaxReceives     = 1000
)

// queue is a queue on one stream. Records enter it lazily: each receive
// first takes in what was appended to the stream's shards since its
// cursor. A record's delivery state lives in an entry until it is
// acknowledged (or leaves retention).
type queue struct {
	st      *stream
	account string // the queue's own: its creator's, whoever owns the stream
	name    string
	arn     string
	epoch   uint64 // tells receipt handles of a deleted queue from a later one's
	created time.Time
	active  time.Time // CREATING until then
	start   types.QueueStartingPosition

	mu          sync.Mutex
	deleted     bool
	vis         int32 // default visibility timeout, seconds
	maxReceives int32 // 0: dead-letter handling off (TargetType NONE)
	pos         uint64
	ts          int64 // AT_TIMESTAMP: skip records that arrived before (UnixNano)
	cursors     map[int]uint64
	entries     map[uint64]*qentry // by the record's counter
	lanes       [2]lane            // normal, dead
	nonce       uint64
}

const (
	laneNormal = 0
	laneDead   = 1
)

// lane is one delivery path: records visible now (in arrival order of
// their becoming visible) and records in flight (a heap by the time they
// become visible again).
type lane struct {
	ready    []*qentry
	inflight qheap
}

type qentry struct {
	rec      record
	shard    int
	lane     int
	inflight bool
	visible  time.Time // in flight until then
	receives int32
	first    time.Time
	nonce    uint64 // the current delivery's; older receipt handles are stale
	hidx     int    // index in the lane's heap, -1 when not in it
}

type qheap []*qentry

func (h qheap) Len() int           { return len(h) }
func (h qheap) Less(i, j int) bool { return h[i].visible.Before(h[j].visible) }
func (h qheap) Swap(i, j int) {
	h[i], h[j] = h[j], h[i]
	h[i].hidx, h[j].hidx = i, j
}
func (h *qheap) Push(x any) { e := x.(*qentry); e.hidx = len(*h); *h = append(*h, e) }
func (h *qheap) Pop() any {
	old := *h
	e := old[len(old)-1]
	old[len(old)-1] = nil
	*h = old[:len(old)-1]
	e.hidx = -1
	return e
}

func (q *queue) status(now time.Time) types.QueueStatus {
	if now.Before(q.active) {
		return types.QueueStatusCreating
	}
	return types.QueueStatusActive
}

// queueARN is arn:aws:kinesis:REGION:ACCOUNT:queue/ID; the SDK says the ID
// is generated, not derived from the name.
func queueARN(region, account string, epoch uint64) string {
	return fmt.Sprintf("arn:aws:kinesis:%s:%s:queue/q-%016x", region, account, epoch*0x9e3779b97f4a7c15)
}

// receipt is the decoded form of a receipt handle.
type receipt struct {
	epoch   uint64
	lane    int
	counter uint64
	nonce   uint64
}

func (r receipt) encode() string {
	b := make([]byte, 0, 64)
	b = append(b, "Q1/"...)
	for i, v := range []uint64{r.epoch, uint64(r.lane), r.counter, r.nonce} {
		if i > 0 {
			b = append(b, '/')
		}
		b = strconv.AppendUint(b, v, 10)
	}
	return base64.RawURLEncoding.EncodeToString(b)
}

func decodeReceipt(s string) (receipt, bool) {
	raw, err := base64.RawURLEncoding.DecodeString(s)
	if err != nil {
		return receipt{}, false
	}
	f := strings.Split(string(raw), "/")
	if len(f) != 5 || f[0] != "Q1" {
		return receipt{}, false
	}
	var v [4]uint64
	for i := range v {
		if v[i], err = strconv.ParseUint(f[i+1], 10, 64); err != nil {
			return receipt{}, false
		}
	}
	if v[1] > laneDead {
		return receipt{}, false
	}
	return receipt{epoch: v[0], lane: int(v[1]), counter: v[2], nonce: v[3]}, true
}

// queueAttrs validates QueueAttributes and returns the visibility timeout
// and max receives they set (keeping vis and maxReceives where absent).
func queueAttrs(a *types.QueueAttributes, vis, maxReceives int32) (int32, int32, error) {
	if a == nil {
		return vis, maxReceives, nil
	}
	if a.VisibilityTimeoutSeconds != nil {
		v := *a.VisibilityTimeoutSeconds
		if v < 0 || v > queueMaxVis {
			return 0, 0, validation("1 validation error detected: Value '%d' at 'queueAttributes.visibilityTimeoutSeconds' failed to satisfy constraint: Member must have value between 0 and %d", v, queueMaxVis)
		}
		vis = v
	}
	if d := a.DeadLetterConfiguration; d != nil {
		switch d.TargetType {
		case types.TargetTypeNone:
			if d.MaxReceiveCount != nil {
				return 0, 0, validation("MaxReceiveCount must not be set when TargetType is NONE")
			}
			maxReceives = 0
		case types.TargetTypeBuiltIn:
			if d.MaxReceiveCount == nil {
				return 0, 0, validation("MaxReceiveCount is required when TargetType is BUILT_IN")
			}
			m := *d.MaxReceiveCount
			if m < 1 || m > queueMaxReceives {
				return 0, 0, validation("1 validation error detected: Value '%d' at 'queueAttributes.deadLetterConfiguration.maxReceiveCount' failed to satisfy constraint: Member must have value between 1 and %d", m, queueMaxReceives)
			}
			maxReceives = m
		default:
			return 0, 0, validation("1 validation error detected: Value '%s' at 'queueAttributes.deadLetterConfiguration.targetType' failed to satisfy constraint: Member must satisfy enum value set: [BUILT_IN, NONE]", d.TargetType)
		}
	}
	return vis, maxReceives, nil
}

func (q *queue) attrs() *types.QueueAttributes {
	dl := &types.DeadLetterConfiguration{TargetType: types.TargetTypeNone}
	if q.maxReceives > 0 {
		dl = &types.DeadLetterConfiguration{TargetType: types.TargetTypeBuiltIn, MaxReceiveCount: aws.Int32(q.maxReceives)}
	}
	return &types.QueueAttributes{VisibilityTimeoutSeconds: aws.Int32(q.vis), DeadLetterConfiguration: dl}
}

func (q *queue) describe(now time.Time, s *Server) *types.QueueDescription {
	q.mu.Lock()
	attrs := q.attrs()
	q.mu.Unlock()
	created := q.created
	start := q.start
	if q.status(now) == types.QueueStatusActive && start.Timestamp == nil {
		// Once ACTIVE the effective position is always reported.
		t := created
		if start.Type == types.QueueStartingPositionTypeTrimHorizon {
			t = maxTime(q.st.created, now.Add(-s.cfg.retention))
		}
		start.Timestamp = &t
	}
	return &types.QueueDescription{
		QueueARN:               aws.String(q.arn),
		QueueName:              aws.String(q.name),
		QueueStatus:            q.status(now),
		QueueCreationTimestamp: &created,
		QueueAttributes:        attrs,
		StreamConfigurationList: []types.QueueStreamConfiguration{{
			StreamARN:        aws.String(q.st.arn(s.cfg)),
			StartingPosition: &start,
		}},
	}
}

// keyOrNil is a queue record's PartitionKey: absent for a record an AUTO
// stream took without one.
func keyOrNil(k string) *string {
	if k == "" {
		return nil
	}
	return aws.String(k)
}

func maxTime(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

// beginQueue runs begin for a queue operation and finds the queue its
// QueueARN names. A queue of a deleted stream is gone too.
func (s *Server) beginQueue(ctx context.Context, op Op, arn *string) (*queue, error) {
	s.calls[op].Add(1)
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if arn == nil || *arn == "" {
		return nil, opError(op.String(), validation("1 validation error detected: Value null at 'queueARN' failed to satisfy constraint: Member must not be null"))
	}
	if !strings.HasPrefix(*arn, "arn:aws:kinesis:") || !strings.Contains(*arn, ":queue/") {
		return nil, opError(op.String(), validation("1 validation error detected: Value '%s' at 'queueARN' failed to satisfy constraint: Member must satisfy regular expression pattern: arn:aws.*:kinesis:.*:\\d{12}:queue/.+", *arn))
	}
	s.mu.RLock()
	q := s.queues[*arn]
	s.mu.RUnlock()
	if f := s.callFault.Load(); f != nil {
		c := Call{Op: op}
		if q != nil {
			c.Stream, c.Queue = q.st.name, q.name
		}
		if err := (*f)(c); err != nil {
			return nil, opError(op.String(), err)
		}
	}
	if q == nil || s.gone(q.st) != nil {
		return nil, opError(op.String(), notFound("Queue %s not found.", *arn))
	}
	return q, nil
}

// CreateQueue creates a queue on an on-demand stream. It answers
// CREATING, as the service does; the queue is ACTIVE once the activation
// time (WithQueueActivation, default 0) has passed. A queue counts against
// the stream's registered-consumer limit (WithConsumerLimit), shared with
// the enhanced fan-out consumers.
func (s *Server) CreateQueue(ctx context.Context, in *kinesis.CreateQueueInput, _ ...func(*kinesis.Options)) (*kinesis.CreateQueueOutput, error) {
	const op = OpCreateQueue
	s.calls[op].Add(1)
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	fail := func(err error) (*kinesis.CreateQueueOutput, error) { return nil, opError(op.String(), err) }
	name := aws.ToString(in.QueueName)
	var streamARN *string
	if len(in.StreamConfigurationList) == 1 {
		streamARN = in.StreamConfigurationList[0].StreamARN
	}
	if f := s.callFault.Load(); f != nil {
		var sname string
		if streamARN != nil {
			sname, _ = s.resolveARN(*streamARN)
		}
		if err := (*f)(Call{Op: op, Stream: sname, Queue: name}); err != nil {
			return fail(err)
		}
	}
	if in.QueueName == nil {
		return fail(validation("1 validation error detected: Value null at 'queueName' failed to satisfy constraint: Member must not be null"))
	}
	if !validStreamName(name) {
		return fail(validation("1 validation error detected: Value '%s' at 'queueName' failed to satisfy constraint: Member must satisfy regular expression pattern: [a-zA-Z0-9_.-]+ and length 1-128", name))
	}
	if n := len(in.StreamConfigurationList); n != 1 {
		return fail(validation("1 validation error detected: Value at 'streamConfigurationList' failed to satisfy constraint: Member must have length 1 (got %d)", n))
	}
	sc := in.StreamConfigurationList[0]
	start := types.QueueStartingPosition{Type: types.QueueStartingPositionTypeLatest}
	if sc.StartingPosition != nil {
		start = *sc.StartingPosition
	}
	now := s.now()
	switch start.Type {
	case types.QueueStartingPositionTypeLatest, types.QueueStartingPositionTypeTrimHorizon:
		if start.Timestamp != nil {
			return fail(validation("Timestamp can be specified only when the starting position type is AT_TIMESTAMP"))
		}
	case types.QueueStartingPositionTypeAtTimestamp:
		if start.Timestamp == nil {
			return fail(validation("Timestamp is required when the starting position type is AT_TIMESTAMP"))
		}
		if start.Timestamp.After(now) {
			return fail(invalidArg("The starting timestamp %s is in the future", start.Timestamp.Format(time.RFC3339)))
		}
		t := maxTime(*start.Timestamp, now.Add(-s.cfg.retention)) // the effective position, once ACTIVE
		start.Timestamp = &t
	default:
		return fail(validation("1 validation error detected: Value '%s' at 'startingPosition.type' failed to satisfy constraint: Member must satisfy enum value set: [TRIM_HORIZON, LATEST, AT_TIMESTAMP]", start.Type))
	}
	vis, maxReceives, err := queueAttrs(in.QueueAttributes, queueDefaultVis, queueDefaultReceives)
	if err != nil {
		return fail(err)
	}
	st, err := s.streamByARN(sc.StreamARN)
	if err != nil {
		return fail(err)
	}
	if st.mode != types.StreamModeOnDemand {
		return fail(errQueueOnProvisioned(st.name))
	}
	q := &queue{
		st: st, name: name, epoch: s.epochs.Add(1), created: now, active: now.Add(s.cfg.queueActivation), start: start,
		vis: vis, maxReceives: maxReceives, cursors: map[int]uint64{}, entries: map[uint64]*qentry{},
	}
	q.account = s.caller(ctx)
	q.arn = queueARN(s.cfg.region, q.account, q.epoch)
	switch start.Type {
	case types.QueueStartingPositionTypeLatest:
		q.pos = st.counter.Load() + 1
	case types.QueueStartingPositionTypeAtTimestamp:
		q.ts = start.Timestamp.UnixNano()
	}

	// Lock order: the stream's consumers, then the server (as
	// RegisterStreamConsumer takes them).
	st.cmu.Lock()
	defer st.cmu.Unlock()
	s.mu.Lock()
	defer s.mu.Unlock()
	if cur := s.streams[st.key]; cur != st {
		return fail(notFound("Stream %s under account %s not found.", st.name, st.account))
	}
	for _, other := range s.queues {
		if other.name == name && other.account == q.account {
			return fail(inUse("Queue %s under account %s already exists.", name, q.account))
		}
	}
	st.purgeLocked(now)
	if len(st.consumers)+st.queueCount >= s.cfg.consumerLimit {
		return fail(limitExceeded("Stream %s under account %s has reached its limit of %d registered consumers and queues.", st.name, st.account, s.cfg.consumerLimit))
	}
	st.queueCount++
	s.queues[q.arn] = q
	d := q.describe(now, s)
	d.QueueStatus = types.QueueStatusCreating
	// While CREATING the service echoes what was asked: the timestamp
	// given for AT_TIMESTAMP, none for the others.
	given := types.QueueStartingPosition{Type: start.Type}
	if sc.StartingPosition != nil {
		given.Timestamp = sc.StartingPosition.Timestamp
	}
	d.StreamConfigurationList[0].StartingPosition = &given
	return &kinesis.CreateQueueOutput{QueueDescription: d}, nil
}

// errQueueOnProvisioned is the answer to a queue on a provisioned stream.
// The SDK says queues are supported only on on-demand streams but not
// which error refuses one; InvalidArgumentException is the service's usual
// answer to a request its resource's state forbids (the conformance suite
// writes the choice down).
func errQueueOnProvisioned(stream string) error {
	return invalidArg("Queues are supported only on streams in ON_DEMAND capacity mode; stream %s is PROVISIONED.", stream)
}

// DescribeQueue describes a queue.
func (s *Server) DescribeQueue(ctx context.Context, in *kinesis.DescribeQueueInput, _ ...func(*kinesis.Options)) (*kinesis.DescribeQueueOutput, error) {
	q, err := s.beginQueue(ctx, OpDescribeQueue, in.QueueARN)
	if err != nil {
		return nil, err
	}
	return &kinesis.DescribeQueueOutput{QueueDescription: q.describe(s.now(), s)}, nil
}

// ListQueues lists the caller's account's queues in ARN order, optionally those of
// one stream, MaxResults (default and at most 100) at a time.
func (s *Server) ListQueues(ctx context.Context, in *kinesis.ListQueuesInput, _ ...func(*kinesis.Options)) (*kinesis.ListQueuesOutput, error) {
	const op = OpListQueues
	if err := s.begin(ctx, op, "", ""); err != nil {
		return nil, err
	}
	limit := 100
	if in.MaxResults != nil {
		if *in.MaxResults < 1 || *in.MaxResults > 100 {
			return nil, opError(op.String(), validation("1 validation error detected: Value '%d' at 'maxResults' failed to satisfy constraint: Member must have value between 1 and 100", *in.MaxResults))
		}
		limit = int(*in.MaxResults)
	}
	after := aws.ToString(in.NextToken)
	var filter map[string]bool
	for _, f := range in.StreamFilter {
		if filter == nil {
			filter = map[string]bool{}
		}
		filter[aws.ToString(f.StreamARN)] = true
	}
	now := s.now()
	account := s.caller(ctx)
	s.mu.RLock()
	var qs []*queue
	for arn, q := range s.queues {
		if arn > after && q.account == account && (filter == nil || filter[q.st.arn(s.cfg)]) && s.streams[q.st.key] == q.st {
			qs = append(qs, q)
		}
	}
	s.mu.RUnlock()
	sort.Slice(qs, func(i, j int) bool { return qs[i].arn < qs[j].arn })
	out := &kinesis.ListQueuesOutput{QueueSummaries: []types.QueueSummary{}}
	if len(qs) > limit {
		qs = qs[:limit]
		out.NextToken = aws.String(qs[limit-1].arn)
	}
	for _, q := range qs {
		created, stCreated := q.created, q.st.created
		out.QueueSummaries = append(out.QueueSummaries, types.QueueSummary{
			QueueARN: aws.String(q.arn), QueueName: aws.String(q.name), QueueStatus: q.status(now), QueueCreationTimestamp: &created,
			Streams: []types.QueueStreamIdentifier{{StreamARN: aws.String(q.st.arn(s.cfg)), StreamCreationTimestamp: &stCreated}},
		})
	}
	return out, nil
}

// UpdateQueue changes a queue's visibility timeout or dead-letter
// handling. The service answers UPDATING and applies it asynchronously;
// here it is applied at once (records in flight keep their timeouts).
func (s *Server) UpdateQueue(ctx context.Context, in *kinesis.UpdateQueueInput, _ ...func(*kinesis.Options)) (*kinesis.UpdateQueueOutput, error) {
	const op = OpUpdateQueue
	q, err := s.beginQueue(ctx, op, in.QueueARN)
	if err != nil {
		return nil, err
	}
	if in.QueueAttributes == nil {
		return nil, opError(op.String(), validation("1 validation error detected: Value null at 'queueAttributes' failed to satisfy constraint: Member must not be null"))
	}
	q.mu.Lock()
	vis, maxReceives, err := queueAttrs(in.QueueAttributes, q.vis, q.maxReceives)
	if err == nil {
		q.vis, q.maxReceives = vis, maxReceives
	}
	q.mu.Unlock()
	if err != nil {
		return nil, opError(op.String(), err)
	}
	d := q.describe(s.now(), s)
	d.QueueStatus = types.QueueStatusUpdating
	return &kinesis.UpdateQueueOutput{QueueDescription: d}, nil
}

// DeleteQueue deletes a queue at once (the service goes through DELETING);
// its receipt handles stop being valid.
func (s *Server) DeleteQueue(ctx context.Context, in *kinesis.DeleteQueueInput, _ ...func(*kinesis.Options)) (*kinesis.DeleteQueueOutput, error) {
	q, err := s.beginQueue(ctx, OpDeleteQueue, in.QueueARN)
	if err != nil {
		return nil, err
	}
	q.st.cmu.Lock()
	s.mu.Lock()
	if s.queues[q.arn] == q {
		delete(s.queues, q.arn)
		q.st.queueCount--
	}
	s.mu.Unlock()
	q.st.cmu.Unlock()
	q.mu.Lock()
	q.deleted = true
	q.mu.Unlock()
	q.st.wakeQueues()
	return &kinesis.DeleteQueueOutput{}, nil
}

// receiveArgs validates a receive's Limit, VisibilityTimeoutSeconds and
// WaitTimeSeconds and applies the defaults.
func receiveArgs(limit, vis, wait *int32, defVis int32) (int, int32, int32, error) {
	n := queueBatch
	if limit != nil {
		if *limit < 1 || *limit > queueBatch {
			return 0, 0, 0, validation("1 validation error detected: Value '%d' at 'limit' failed to satisfy constraint: Member must have value between 1 and %d", *limit, queueBatch)
		}
		n = int(*limit)
	}
	v := defVis
	if vis != nil {
		if *vis < 0 || *vis > queueMaxVis {
			return 0, 0, 0, validation("1 validation error detected: Value '%d' at 'visibilityTimeoutSeconds' failed to satisfy constraint: Member must have value between 0 and %d", *vis, queueMaxVis)
		}
		v = *vis
	}
	w := int32(queueDefaultWait)
	if wait != nil {
		if *wait < 0 || *wait > queueMaxWait {
			return 0, 0, 0, validation("1 validation error detected: Value '%d' at 'waitTimeSeconds' failed to satisfy constraint: Member must have value between 0 and %d", *wait, queueMaxWait)
		}
		w = *wait
	}
	return n, v, w, nil
}

// ReceiveQueueRecords receives up to Limit visible records, making them in
// flight for the visibility timeout; it waits up to WaitTimeSeconds
// (default 9) for one to become visible.
func (s *Server) ReceiveQueueRecords(ctx context.Context, in *kinesis.ReceiveQueueRecordsInput, _ ...func(*kinesis.Options)) (*kinesis.ReceiveQueueRecordsOutput, error) {
	recs, err := s.receive(ctx, OpReceiveQueueRecords, in.QueueARN, in.Limit, in.VisibilityTimeoutSeconds, in.WaitTimeSeconds, laneNormal)
	if err != nil {
		return nil, err
	}
	return &kinesis.ReceiveQueueRecordsOutput{QueueRecords: recs}, nil
}

// ReceiveDeadLetterQueueRecords receives the queue's dead-letter records
// as ReceiveQueueRecords receives its live ones.
func (s *Server) ReceiveDeadLetterQueueRecords(ctx context.Context, in *kinesis.ReceiveDeadLetterQueueRecordsInput, _ ...func(*kinesis.Options)) (*kinesis.ReceiveDeadLetterQueueRecordsOutput, error) {
	recs, err := s.receive(ctx, OpReceiveDeadLetterQueueRecords, in.QueueARN, in.Limit, in.VisibilityTimeoutSeconds, in.WaitTimeSeconds, laneDead)
	if err != nil {
		return nil, err
	}
	return &kinesis.ReceiveDeadLetterQueueRecordsOutput{QueueRecords: recs}, nil
}

func (s *Server) receive(ctx context.Context, op Op, arn *string, limitArg, visArg, waitArg *int32, ln int) ([]types.QueueRecord, error) {
	q, err := s.beginQueue(ctx, op, arn)
	if err != nil {
		return nil, err
	}
	q.mu.Lock()
	defVis := q.vis
	q.mu.Unlock()
	limit, vis, wait, err := receiveArgs(limitArg, visArg, waitArg, defVis)
	if err != nil {
		return nil, opError(op.String(), err)
	}
	if q.status(s.now()) != types.QueueStatusActive {
		return nil, opError(op.String(), inUse("Queue %s is not ACTIVE.", q.name))
	}
	deadline := time.Now().Add(time.Duration(wait) * time.Second)
	for {
		if err := ctx.Err(); err != nil {
			// The caller gave up (as a closed connection ends a real
			// request): nothing is taken for it.
			return nil, opError(op.String(), err)
		}
		// Register for a wake-up before looking, so that an append in
		// between is not missed.
		woken := q.st.queueWaitChan()
		now := s.now()
		q.mu.Lock()
		if q.deleted {
			q.mu.Unlock()
			return nil, opError(op.String(), notFound("Queue %s not found.", q.arn))
		}
		if ln == laneNormal {
			s.ingestLocked(q, now)
		}
		recs := s.takeLocked(q, ln, limit, vis, now)
		next := q.lanes[ln].nextVisible()
		q.mu.Unlock()
		left := time.Until(deadline)
		if len(recs) > 0 || left <= 0 {
			if recs == nil {
				recs = []types.QueueRecord{}
			}
			return recs, nil
		}
		if !next.IsZero() {
			// In-flight records come back on the server's clock; a
			// test's clock may jump, so look again at least every 100 ms.
			left = min(left, max(next.Sub(now), time.Millisecond), 100*time.Millisecond)
		}
		t := time.NewTimer(left)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil, opError(op.String(), ctx.Err())
		case <-woken:
		case <-t.C:
		}
		t.Stop()
	}
}

// ingestLocked takes into q the records appended to its stream since its
// cursors; q.mu is held.
func (s *Server) ingestLocked(q *queue, now time.Time) {
	cutoff := now.Add(-s.cfg.retention).UnixNano()
	for _, sh := range *q.st.all.Load() {
		pos, ok := q.cursors[sh.index]
		if !ok {
			pos = q.pos
		}
		sh.mu.Lock()
		i := sh.log.search(pos, q.ts)
		n := sh.log.len()
		for ; i < n; i++ {
			r := *sh.log.at(i)
			pos = r.counter + 1
			if r.arrival < cutoff {
				continue
			}
			e := &qentry{rec: r, shard: sh.index, hidx: -1}
			q.entries[r.counter] = e
			q.lanes[laneNormal].ready = append(q.lanes[laneNormal].ready, e)
		}
		sh.mu.Unlock()
		q.cursors[sh.index] = pos
	}
}

// nextVisible is when the first in-flight record of the lane becomes
// visible again (zero when none is in flight).
func (l *lane) nextVisible() time.Time {
	if len(l.inflight) == 0 {
		return time.Time{}
	}
	return l.inflight[0].visible
}

// expireLocked makes visible again the records of lane ln whose visibility
// timeout is over; a live record received MaxReceiveCount times becomes a
// dead letter instead.
func (q *queue) expireLocked(ln int, now time.Time) {
	l := &q.lanes[ln]
	for len(l.inflight) > 0 && !l.inflight[0].visible.After(now) {
		e := heap.Pop(&l.inflight).(*qentry)
		q.releaseLocked(e)
	}
}

// releaseLocked ends e's flight: back to its lane's ready records, or, for
// a live record at its receive limit, to the dead letters.
func (q *queue) releaseLocked(e *qentry) {
	if e.hidx >= 0 {
		heap.Remove(&q.lanes[e.lane].inflight, e.hidx)
	}
	e.inflight = false
	if e.lane == laneNormal && q.maxReceives > 0 && e.receives >= q.maxReceives {
		e.lane = laneDead
	}
	q.lanes[e.lane].ready = append(q.lanes[e.lane].ready, e)
}

// takeLocked receives up to limit visible records of lane ln.
func (s *Server) takeLocked(q *queue, ln int, limit int, vis int32, now time.Time) []types.QueueRecord {
	q.expireLocked(ln, now)
	cutoff := now.Add(-s.cfg.retention).UnixNano()
	l := &q.lanes[ln]
	var out []types.QueueRecord
	var again []*qentry
	taken := 0
	before := q.nonce
	for taken < len(l.ready) && len(out) < limit {
		e := l.ready[taken]
		taken++
		// A record's entry may be listed twice (a restored dead letter
		// that died again is queued anew while its old place remains):
		// skip it unless it is still this lane's, visible and not taken
		// by this very call (with visibility 0 it stays visible).
		if q.entries[e.rec.counter] != e || e.inflight || e.lane != ln || e.nonce > before {
			continue // acknowledged, moved or taken since it was queued here
		}
		if e.rec.arrival < cutoff {
			delete(q.entries, e.rec.counter) // past retention: the queue stops delivering it
			continue
		}
		if ln == laneNormal {
			e.receives++
			if e.first.IsZero() {
				e.first = now
			}
		}
		q.nonce++
		e.nonce = q.nonce
		if vis > 0 {
			e.inflight = true
			e.visible = now.Add(time.Duration(vis) * time.Second)
			heap.Push(&l.inflight, e)
		} else {
			again = append(again, e)
		}
		arrival, first := time.Unix(0, e.rec.arrival).UTC(), e.first
		out = append(out, types.QueueRecord{
			ApproximateArrivalTimestamp: &arrival,
			Data:                        clone(e.rec.data()),
			FirstReceiveTimestamp:       &first,
			PartitionKey:                keyOrNil(e.rec.key()),
			ReceiptHandle:               aws.String(receipt{epoch: q.epoch, lane: ln, counter: e.rec.counter, nonce: e.nonce}.encode()),
			ReceiveCount:                aws.Int32(e.receives),
			RecordId:                    aws.String(formatSeq(e.rec.counter, e.shard)),
		})
	}
	l.ready = l.ready[taken:]
	if len(l.ready) == 0 {
		l.ready = nil // let the backing array go
	}
	for _, e := range again {
		q.releaseLocked(e)
	}
	return out
}

// entryFor resolves a receipt handle of lane ln: the entry it names, if
// the handle is of this queue and of the record's current delivery.
func (q *queue) entryForLocked(handle *string, ln int) (*qentry, receipt, error) {
	if handle == nil || *handle == "" {
		return nil, receipt{}, invalidArg("ReceiptHandle is required")
	}
	r, ok := decodeReceipt(*handle)
	if !ok || r.epoch != q.epoch {
		return nil, r, invalidArg("The receipt handle %q is not valid for this queue.", *handle)
	}
	if r.lane != ln {
		if ln == laneDead {
			return nil, r, invalidArg("The receipt handle is not of a dead-letter record; use the queue's own operations.")
		}
		return nil, r, invalidArg("The receipt handle is of a dead-letter record; use the dead-letter operations.")
	}
	e := q.entries[r.counter]
	if e == nil {
		return nil, r, nil // acknowledged already
	}
	if e.nonce != r.nonce {
		return nil, r, invalidArg("The receipt handle has expired: the record was received again since.")
	}
	if e.lane != ln {
		return nil, r, invalidArg("The record is no longer a %s record.", map[int]string{laneNormal: "live", laneDead: "dead-letter"}[ln])
	}
	return e, r, nil
}

// entryOutcome is one batch entry's result: nil or the per-entry error.
type entryOutcome struct {
	handle string
	err    error
}

// batch applies f to each receipt handle of a batch operation under q.mu
// and reports each entry's outcome.
func (s *Server) batch(ctx context.Context, op Op, arn *string, handles []*string, f func(q *queue, h *string, now time.Time) error) ([]entryOutcome, error) {
	q, err := s.beginQueue(ctx, op, arn)
	if err != nil {
		return nil, err
	}
	if n := len(handles); n < 1 || n > queueBatch {
		return nil, opError(op.String(), validation("1 validation error detected: Value at 'entries' failed to satisfy constraint: Member must have length between 1 and %d (got %d)", queueBatch, n))
	}
	seen := map[string]bool{}
	for _, h := range handles {
		if seen[aws.ToString(h)] {
			return nil, opError(op.String(), invalidArg("The batch repeats receipt handle %q.", aws.ToString(h)))
		}
		seen[aws.ToString(h)] = true
	}
	now := s.now()
	out := make([]entryOutcome, len(handles))
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.deleted {
		return nil, opError(op.String(), notFound("Queue %s not found.", q.arn))
	}
	q.expireLocked(laneNormal, now)
	q.expireLocked(laneDead, now)
	for i, h := range handles {
		out[i] = entryOutcome{handle: aws.ToString(h), err: f(q, h, now)}
	}
	return out, nil
}

// ack discards the record a handle of lane ln names. Acknowledging a
// record acknowledged already succeeds, so that a retried batch does not
// fail; a handle of an earlier delivery fails.
func ack(ln int) func(q *queue, h *string, now time.Time) error {
	return func(q *queue, h *string, now time.Time) error {
		e, _, err := q.entryForLocked(h, ln)
		if err != nil || e == nil {
			return err
		}
		if e.hidx >= 0 {
			heap.Remove(&q.lanes[ln].inflight, e.hidx)
		}
		delete(q.entries, e.rec.counter)
		return nil
	}
}

// setVisibility changes the visibility timeout of an in-flight record,
// from now; 0 makes it visible at once.
func setVisibility(ln int, vis *int32) func(q *queue, h *string, now time.Time) error {
	return func(q *queue, h *string, now time.Time) error {
		if vis == nil {
			return invalidArg("VisibilityTimeoutSeconds is required")
		}
		if *vis < 0 || *vis > queueMaxVis {
			return invalidArg("VisibilityTimeoutSeconds %d is not between 0 and %d", *vis, queueMaxVis)
		}
		e, _, err := q.entryForLocked(h, ln)
		if err != nil {
			return err
		}
		if e == nil {
			return invalidArg("The record was acknowledged.")
		}
		if !e.inflight {
			return invalidArg("The record is not in flight: its visibility timeout is over.")
		}
		if *vis == 0 {
			q.releaseLocked(e)
			q.st.wakeQueues()
			return nil
		}
		e.visible = now.Add(time.Duration(*vis) * time.Second)
		heap.Fix(&q.lanes[ln].inflight, e.hidx)
		return nil
	}
}

// restore makes a dead letter live again with its receive count reset.
func restore(q *queue, h *string, now time.Time) error {
	e, _, err := q.entryForLocked(h, laneDead)
	if err != nil {
		return err
	}
	if e == nil {
		return invalidArg("The record was acknowledged.")
	}
	if e.hidx >= 0 {
		heap.Remove(&q.lanes[laneDead].inflight, e.hidx)
	}
	e.inflight, e.lane, e.receives, e.first = false, laneNormal, 0, time.Time{}
	q.nonce++
	e.nonce = q.nonce // the dead-letter handle is spent
	q.lanes[laneNormal].ready = append(q.lanes[laneNormal].ready, e)
	q.st.wakeQueues()
	return nil
}

func errEntry(err error) (code, message *string) {
	return aws.String(errorCode(err)), aws.String(err.Error())
}

// AcknowledgeQueueRecords acknowledges up to 10 records by receipt handle.
func (s *Server) AcknowledgeQueueRecords(ctx context.Context, in *kinesis.AcknowledgeQueueRecordsInput, _ ...func(*kinesis.Options)) (*kinesis.AcknowledgeQueueRecordsOutput, error) {
	hs := make([]*string, len(in.Entries))
	for i := range in.Entries {
		hs[i] = in.Entries[i].ReceiptHandle
	}
	res, err := s.batch(ctx, OpAcknowledgeQueueRecords, in.QueueARN, hs, ack(laneNormal))
	if err != nil {
		return nil, err
	}
	out := &kinesis.AcknowledgeQueueRecordsOutput{Successful: []types.AcknowledgeQueueRecordsResultEntry{}, Failed: []types.AcknowledgeQueueRecordsErrorEntry{}}
	for _, r := range res {
		if r.err != nil {
			c, m := errEntry(r.err)
			out.Failed = append(out.Failed, types.AcknowledgeQueueRecordsErrorEntry{ReceiptHandle: aws.String(r.handle), ErrorCode: c, ErrorMessage: m})
			continue
		}
		out.Successful = append(out.Successful, types.AcknowledgeQueueRecordsResultEntry{ReceiptHandle: aws.String(r.handle)})
	}
	return out, nil
}

// UpdateQueueRecordsVisibility changes the visibility timeouts of up to 10
// in-flight records.
func (s *Server) UpdateQueueRecordsVisibility(ctx context.Context, in *kinesis.UpdateQueueRecordsVisibilityInput, _ ...func(*kinesis.Options)) (*kinesis.UpdateQueueRecordsVisibilityOutput, error) {
	hs := make([]*string, len(in.Entries))
	vis := map[*string]*int32{}
	for i := range in.Entries {
		hs[i] = in.Entries[i].ReceiptHandle
		vis[hs[i]] = in.Entries[i].VisibilityTimeoutSeconds
	}
	res, err := s.batch(ctx, OpUpdateQueueRecordsVisibility, in.QueueARN, hs, func(q *queue, h *string, now time.Time) error {
		return setVisibility(laneNormal, vis[h])(q, h, now)
	})
	if err != nil {
		return nil, err
	}
	out := &kinesis.UpdateQueueRecordsVisibilityOutput{Successful: []types.UpdateQueueRecordsVisibilityResultEntry{}, Failed: []types.UpdateQueueRecordsVisibilityErrorEntry{}}
	for _, r := range res {
		if r.err != nil {
			c, m := errEntry(r.err)
			out.Failed = append(out.Failed, types.UpdateQueueRecordsVisibilityErrorEntry{ReceiptHandle: aws.String(r.handle), ErrorCode: c, ErrorMessage: m})
			continue
		}
		out.Successful = append(out.Successful, types.UpdateQueueRecordsVisibilityResultEntry{ReceiptHandle: aws.String(r.handle)})
	}
	return out, nil
}

// AcknowledgeDeadLetterQueueRecords discards up to 10 dead letters.
func (s *Server) AcknowledgeDeadLetterQueueRecords(ctx context.Context, in *kinesis.AcknowledgeDeadLetterQueueRecordsInput, _ ...func(*kinesis.Options)) (*kinesis.AcknowledgeDeadLetterQueueRecordsOutput, error) {
	hs := make([]*string, len(in.Entries))
	for i := range in.Entries {
		hs[i] = in.Entries[i].ReceiptHandle
	}
	res, err := s.batch(ctx, OpAcknowledgeDeadLetterQueueRecords, in.QueueARN, hs, ack(laneDead))
	if err != nil {
		return nil, err
	}
	out := &kinesis.AcknowledgeDeadLetterQueueRecordsOutput{Successful: []types.AcknowledgeDeadLetterQueueRecordsResultEntry{}, Failed: []types.AcknowledgeDeadLetterQueueRecordsErrorEntry{}}
	for _, r := range res {
		if r.err != nil {
			c, m := errEntry(r.err)
			out.Failed = append(out.Failed, types.AcknowledgeDeadLetterQueueRecordsErrorEntry{ReceiptHandle: aws.String(r.handle), ErrorCode: c, ErrorMessage: m})
			continue
		}
		out.Successful = append(out.Successful, types.AcknowledgeDeadLetterQueueRecordsResultEntry{ReceiptHandle: aws.String(r.handle)})
	}
	return out, nil
}

// RestoreDeadLetterQueueRecords returns up to 10 dead letters to the
// receive path with their receive counts reset.
func (s *Server) RestoreDeadLetterQueueRecords(ctx context.Context, in *kinesis.RestoreDeadLetterQueueRecordsInput, _ ...func(*kinesis.Options)) (*kinesis.RestoreDeadLetterQueueRecordsOutput, error) {
	hs := make([]*string, len(in.Entries))
	for i := range in.Entries {
		hs[i] = in.Entries[i].ReceiptHandle
	}
	res, err := s.batch(ctx, OpRestoreDeadLetterQueueRecords, in.QueueARN, hs, restore)
	if err != nil {
		return nil, err
	}
	out := &kinesis.RestoreDeadLetterQueueRecordsOutput{Successful: []types.RestoreDeadLetterQueueRecordsResultEntry{}, Failed: []types.RestoreDeadLetterQueueRecordsErrorEntry{}}
	for _, r := range res {
		if r.err != nil {
			c, m := errEntry(r.err)
			out.Failed = append(out.Failed, types.RestoreDeadLetterQueueRecordsErrorEntry{ReceiptHandle: aws.String(r.handle), ErrorCode: c, ErrorMessage: m})
			continue
		}
		out.Successful = append(out.Successful, types.RestoreDeadLetterQueueRecordsResultEntry{ReceiptHandle: aws.String(r.handle)})
	}
	return out, nil
}

// UpdateDeadLetterQueueRecordsVisibility changes the visibility timeouts
// of up to 10 dead letters in flight.
func (s *Server) UpdateDeadLetterQueueRecordsVisibility(ctx context.Context, in *kinesis.UpdateDeadLetterQueueRecordsVisibilityInput, _ ...func(*kinesis.Options)) (*kinesis.UpdateDeadLetterQueueRecordsVisibilityOutput, error) {
	hs := make([]*string, len(in.Entries))
	vis := map[*string]*int32{}
	for i := range in.Entries {
		hs[i] = in.Entries[i].ReceiptHandle
		vis[hs[i]] = in.Entries[i].VisibilityTimeoutSeconds
	}
	res, err := s.batch(ctx, OpUpdateDeadLetterQueueRecordsVisibility, in.QueueARN, hs, func(q *queue, h *string, now time.Time) error {
		return setVisibility(laneDead, vis[h])(q, h, now)
	})
	if err != nil {
		return nil, err
	}
	out := &kinesis.UpdateDeadLetterQueueRecordsVisibilityOutput{Successful: []types.UpdateDeadLetterQueueRecordsVisibilityResultEntry{}, Failed: []types.UpdateDeadLetterQueueRecordsVisibilityErrorEntry{}}
	for _, r := range res {
		if r.err != nil {
			c, m := errEntry(r.err)
			out.Failed = append(out.Failed, types.UpdateDeadLetterQueueRecordsVisibilityErrorEntry{ReceiptHandle: aws.String(r.handle), ErrorCode: c, ErrorMessage: m})
			continue
		}
		out.Successful = append(out.Successful, types.UpdateDeadLetterQueueRecordsVisibilityResultEntry{ReceiptHandle: aws.String(r.handle)})
	}
	return out, nil
}

// queueWaitChan returns a channel closed at the next append to the stream
// or change of one of its queues.
func (st *stream) queueWaitChan() <-chan struct{} {
	st.qmu.Lock()
	defer st.qmu.Unlock()
	if st.qwake == nil {
		st.qwake = make(chan struct{})
		st.qwaiting.Store(true)
	}
	return st.qwake
}

// wakeQueues wakes the receives waiting on the stream's queues.
func (st *stream) wakeQueues() {
	st.qmu.Lock()
	if st.qwake != nil {
		close(st.qwake)
		st.qwake = nil
		st.qwaiting.Store(false)
	}
	st.qmu.Unlock()
}
