package kinesistest

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"hash/fnv"
	"sync"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/kinesis"
	"github.com/aws/aws-sdk-go-v2/service/kinesis/types"
)

// LambdaFunction is a Kinesis Lambda handler, as runtime/kinesislambda's
// Handler returns it.
type LambdaFunction func(context.Context, events.KinesisEvent) (events.KinesisEventResponse, error)

// EventSourceMapping stands in for an AWS Lambda event source mapping on a
// stream of this server: it reads each shard from the trim horizon and
// invokes Function with batches shaped as the service shapes them, resuming
// where each response says. Zero fields take the service's defaults.
type EventSourceMapping struct {
	Stream   string
	Function LambdaFunction

	// BatchSize is the most records per invocation (service default 100).
	BatchSize int
	// BatchingWindow is how long a batch waits to fill once it has a
	// record (MaximumBatchingWindowInSeconds; default 0).
	BatchingWindow time.Duration
	// ParallelizationFactor is how many batches of one shard run at once
	// (1..10). Records are spread over the shard's batch streams by the
	// hash of their partition key, so a key stays on one stream, in order.
	ParallelizationFactor int
	// BisectBatchOnFunctionError splits a batch whose invocation failed
	// whole in two and retries each half (splitting counts no attempt).
	BisectBatchOnFunctionError bool
	// MaximumRetryAttempts bounds the retries of a failing batch, after
	// which its records are discarded (to OnFailure); -1 is for ever,
	// which is the service's default. Zero means none.
	MaximumRetryAttempts int
	// ReportBatchItemFailures reads the response's batchItemFailures
	// (FunctionResponseTypes ReportBatchItemFailures): the mapping
	// resumes at the lowest sequence number reported. Without it a
	// response is success whatever it says.
	ReportBatchItemFailures bool
	// Timeout is the function's timeout: each invocation's context ends
	// then (default 1 minute).
	Timeout time.Duration
	// OnFailure receives the records a batch discarded after its retries
	// (an on-failure destination); nil drops them.
	OnFailure func(records []events.KinesisEventRecord)
}

// MappingStats counts what Drain did.
type MappingStats struct {
	Invocations int // every call of the function
	Failed      int // invocations that failed whole (error or timeout)
	Partial     int // invocations that reported a batch item failure
	Discarded   int // records discarded after the retries
}

// ErrMappingStuck is Drain's error when a batch keeps failing and ctx ends.
var ErrMappingStuck = errors.New("kinesistest: event source mapping still retrying")

// Drain runs the mapping until it has handled (or discarded) every record
// in the stream, those its function publishes to the stream meanwhile
// among them, then returns its counts. It returns early, with an error,
// when ctx ends or the stream cannot be read.
func (s *Server) Drain(ctx context.Context, m EventSourceMapping) (MappingStats, error) {
	if m.Function == nil {
		return MappingStats{}, errors.New("kinesistest: event source mapping without a function")
	}
	if m.BatchSize <= 0 {
		m.BatchSize = 100
	}
	if m.ParallelizationFactor <= 0 {
		m.ParallelizationFactor = 1
	}
	if m.ParallelizationFactor > 10 {
		return MappingStats{}, fmt.Errorf("kinesistest: ParallelizationFactor %d: want 1..10", m.ParallelizationFactor)
	}
	if m.Timeout <= 0 {
		m.Timeout = time.Minute
	}
	sum, err := s.DescribeStreamSummary(ctx, &kinesis.DescribeStreamSummaryInput{StreamName: aws.String(m.Stream)})
	if err != nil {
		return MappingStats{}, err
	}
	esm := &mapping{s: s, m: m, arn: aws.ToString(sum.StreamDescriptionSummary.StreamARN), iters: map[string]*string{}}
	for {
		n, err := esm.read(ctx)
		if err != nil {
			return esm.stats, err
		}
		if n == 0 {
			return esm.stats, nil
		}
		if err := esm.process(ctx); err != nil {
			return esm.stats, err
		}
	}
}

type mapping struct {
	s     *Server
	m     EventSourceMapping
	arn   string
	iters map[string]*string // shard -> next iterator
	order []string           // shards in ListShards order (parents first)
	// queues[shard][i] are the records of the shard's i-th batch stream
	// not yet handled, in order.
	queues map[string][][]events.KinesisEventRecord

	mu    sync.Mutex
	stats MappingStats
}

// read appends what each shard has past its iterator to its batch streams
// and returns how many records it read.
func (e *mapping) read(ctx context.Context) (int, error) {
	shards, err := e.s.ListShards(ctx, &kinesis.ListShardsInput{StreamName: aws.String(e.m.Stream)})
	if err != nil {
		return 0, err
	}
	if e.queues == nil {
		e.queues = map[string][][]events.KinesisEventRecord{}
	}
	total := 0
	for _, sh := range shards.Shards {
		id := aws.ToString(sh.ShardId)
		it, ok := e.iters[id]
		if !ok {
			out, err := e.s.GetShardIterator(ctx, &kinesis.GetShardIteratorInput{
				StreamName: aws.String(e.m.Stream), ShardId: sh.ShardId, ShardIteratorType: types.ShardIteratorTypeTrimHorizon,
			})
			if err != nil {
				return 0, err
			}
			it = out.ShardIterator
			e.order = append(e.order, id)
			e.queues[id] = make([][]events.KinesisEventRecord, e.m.ParallelizationFactor)
		}
		for it != nil {
			out, err := e.s.GetRecords(ctx, &kinesis.GetRecordsInput{ShardIterator: it, Limit: aws.Int32(10000)})
			if err != nil {
				return 0, err
			}
			for _, r := range out.Records {
				j := streamOf(aws.ToString(r.PartitionKey), e.m.ParallelizationFactor)
				e.queues[id][j] = append(e.queues[id][j], e.event(id, r))
			}
			total += len(out.Records)
			it = out.NextShardIterator
			if len(out.Records) == 0 {
				break // caught up: read on from here next time
			}
		}
		e.iters[id] = it
	}
	return total, nil
}

// event is r as the service puts it in an event.
func (e *mapping) event(shardID string, r types.Record) events.KinesisEventRecord {
	seq := aws.ToString(r.SequenceNumber)
	return events.KinesisEventRecord{
		AwsRegion:         e.s.cfg.region,
		EventID:           shardID + ":" + seq,
		EventName:         "aws:kinesis:record",
		EventSource:       "aws:kinesis",
		EventSourceArn:    e.arn,
		EventVersion:      "1.0",
		InvokeIdentityArn: "arn:aws:iam::" + e.s.cfg.account + ":role/kinesistest",
		Kinesis: events.KinesisRecord{
			ApproximateArrivalTimestamp: events.SecondsEpochTime{Time: aws.ToTime(r.ApproximateArrivalTimestamp)},
			Data:                        r.Data,
			PartitionKey:                aws.ToString(r.PartitionKey),
			SequenceNumber:              seq,
			KinesisSchemaVersion:        "1.0",
		},
	}
}

// streamOf is the batch stream of a key: its hash modulo the factor.
func streamOf(key string, n int) int {
	h := fnv.New32a()
	h.Write([]byte(key))
	return int(h.Sum32() % uint32(n))
}

// process runs every batch stream of every shard to its end, the streams
// of one shard at once, the shards one after the other (parents first).
func (e *mapping) process(ctx context.Context) error {
	for _, id := range e.order {
		qs := e.queues[id]
		errs := make([]error, len(qs))
		var wg sync.WaitGroup
		for j := range qs {
			wg.Go(func() {
				qs[j], errs[j] = e.drainStream(ctx, qs[j])
			})
		}
		wg.Wait()
		if err := errors.Join(errs...); err != nil {
			return err
		}
	}
	return nil
}

// drainStream invokes the function over q, batch after batch, until q is
// empty, and returns what is left of it (nothing unless ctx ended).
func (e *mapping) drainStream(ctx context.Context, q []events.KinesisEventRecord) ([]events.KinesisEventRecord, error) {
	attempts := 0          // failed invocations at the current head
	limit := e.m.BatchSize // bisection narrows it
	for len(q) > 0 {
		if ctx.Err() != nil {
			return q, fmt.Errorf("%w: %v", ErrMappingStuck, ctx.Err())
		}
		n := min(limit, len(q))
		if n < e.m.BatchSize && e.m.BatchingWindow > 0 && limit == e.m.BatchSize {
			// A short batch waits the window out (what arrives meanwhile is
			// read by the next pass; here the window only costs its time,
			// as it does in the service for a stream that is caught up).
			t := time.NewTimer(e.m.BatchingWindow)
			select {
			case <-ctx.Done():
				t.Stop()
			case <-t.C:
			}
		}
		batch := q[:n]
		failedAt, whole := e.invoke(ctx, batch)
		switch {
		case !whole && failedAt < 0: // success
			q = q[n:]
			attempts, limit = 0, e.m.BatchSize
			continue
		case !whole && failedAt > 0: // progress up to the failed record
			q = q[failedAt:]
			attempts, limit = 1, e.m.BatchSize
		case whole && e.m.BisectBatchOnFunctionError && n > 1:
			limit = (n + 1) / 2 // split: no attempt counted
			continue
		default:
			attempts++
		}
		if e.m.MaximumRetryAttempts >= 0 && attempts > e.m.MaximumRetryAttempts {
			// The failing batch (from its failed record) is given up.
			bad := q[:min(limit, len(q))]
			if failedAt > 0 {
				bad = q[:min(n-failedAt, len(q))]
			}
			e.mu.Lock()
			e.stats.Discarded += len(bad)
			e.mu.Unlock()
			if e.m.OnFailure != nil {
				e.m.OnFailure(append([]events.KinesisEventRecord(nil), bad...))
			}
			q = q[len(bad):]
			attempts, limit = 0, e.m.BatchSize
		}
	}
	return q, nil
}

// invoke calls the function with batch as the service does (the event
// and the response travel as JSON), and returns the index of the lowest
// record the response reports failed (-1: none) or whole when the
// invocation failed whole (error, panic, timeout, or a reported identifier
// that is not in the batch).
func (e *mapping) invoke(ctx context.Context, batch []events.KinesisEventRecord) (failedAt int, whole bool) {
	e.mu.Lock()
	e.stats.Invocations++
	e.mu.Unlock()
	resp, err := e.call(ctx, batch)
	if err != nil {
		e.mu.Lock()
		e.stats.Failed++
		e.mu.Unlock()
		return -1, true
	}
	if !e.m.ReportBatchItemFailures || len(resp.BatchItemFailures) == 0 {
		return -1, false
	}
	e.mu.Lock()
	e.stats.Partial++
	e.mu.Unlock()
	low := -1
	for _, f := range resp.BatchItemFailures {
		i := indexOf(batch, f.ItemIdentifier)
		if i < 0 {
			return -1, true // the service fails the whole batch
		}
		if low < 0 || i < low {
			low = i
		}
	}
	return low, false
}

func indexOf(batch []events.KinesisEventRecord, seq string) int {
	for i := range batch {
		if batch[i].Kinesis.SequenceNumber == seq {
			return i
		}
	}
	return -1
}

// call is one invocation under the function's timeout.
func (e *mapping) call(ctx context.Context, batch []events.KinesisEventRecord) (resp events.KinesisEventResponse, err error) {
	payload, err := json.Marshal(events.KinesisEvent{Records: batch})
	if err != nil {
		return resp, err
	}
	var ev events.KinesisEvent
	if err := json.Unmarshal(payload, &ev); err != nil {
		return resp, err
	}
	ctx, cancel := context.WithTimeout(ctx, e.m.Timeout)
	defer cancel()
	type result struct {
		resp events.KinesisEventResponse
		err  error
	}
	done := make(chan result, 1)
	go func() {
		defer func() {
			if p := recover(); p != nil {
				done <- result{err: fmt.Errorf("function panicked: %v", p)}
			}
		}()
		r, err := e.m.Function(ctx, ev)
		done <- result{r, err}
	}()
	select {
	case r := <-done:
		if r.err != nil {
			return resp, r.err
		}
		out, err := json.Marshal(r.resp)
		if err != nil {
			return resp, err
		}
		err = json.Unmarshal(out, &resp)
		return resp, err
	case <-ctx.Done():
		return resp, fmt.Errorf("function timed out: %w", ctx.Err())
	}
}
