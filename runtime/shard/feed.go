package shard

import (
	"context"
	"errors"
	"log/slog"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/kinesis/types"

	"github.com/kinesisgen/kinesisgen/runtime/internal/md5x"
	"github.com/kinesisgen/kinesisgen/runtime/kpl"
)

// feed hands the records of one reader session to the sink, the same for
// both readers (GetRecords and SubscribeToShard): KPL aggregates expanded
// and filtered to the shard's hash range, records settled before the
// session opened skipped, runs of up to sinkRun records within the shard's
// in-flight bound, each counted in the session's watermark.
type feed struct {
	ctx       context.Context
	c         *Coordinator
	shard     string
	s         *session
	hashRange *HashRange
	// run collects records for the sink, up to sinkRun at a time: one
	// watermark lock and one hand-off per run instead of per record, and
	// the buffer is reused (the sink copies what it takes).
	run     []Record
	arrival time.Time // of the record being expanded
	// skip drops the records of skipTo.seq whose SubSequence <= skipTo.sub
	// (settled before the position was opened), up to the first other one.
	skip   bool
	skipTo mark
	// since skips the records that arrived before it, up to the first that
	// did not (startAt.since).
	since time.Time
	// took, if set, is told the last record of each part the sink took.
	took func(last *Record)
	// emitFn is emit as a func value, made once per session.
	emitFn func(seq string, sub int64, key string, data []byte) error
	// fctx is the lease's fence (owned.fctx): ended, nothing more is
	// handed out.
	fctx context.Context
	// users counts the user records the last deliver expanded.
	users int
	// verified[i] says record i of the chunk being expanded is an
	// aggregate whose MD5 matched (verifyAggregates).
	verified [verifyChunk]bool
}

// verifyChunk is how many records of a read deliver expands at a time: a
// kernel's lanes of MD5s.
const verifyChunk = md5x.Lanes

// newFeed returns the feed of session s of o, reading from where s opened.
func (c *Coordinator) newFeed(ctx context.Context, o *owned, s *session) *feed {
	f := &feed{ctx: ctx, fctx: o.fctx, c: c, shard: o.shard, s: s, hashRange: c.hashRange(o), run: make([]Record, 0, sinkRun)}
	f.emitFn = f.emit
	f.from(s.from)
	return f
}

// from sets what is skipped for a read opened at at.
func (f *feed) from(at startAt) {
	f.skip, f.skipTo, f.since = at.skip, mark{at.seq, at.sub}, at.since
}

// errFenced is deliver's answer once the lease is fenced.
var errFenced = errors.New("lease fenced")

// deliver hands the user records of one read to the sink, the last run
// included.
func (f *feed) deliver(recs []types.Record) error {
	if f.fctx.Err() != nil || f.s.wm.expired() {
		// Fenced while the read was out: hand out nothing it returned. The
		// fence cancels the session's ctx only from another goroutine, a
		// moment later (after a pause, when the timer runs); the next
		// owner (or a take-back) reads these from the checkpoint.
		return errFenced
	}
	f.users = 0
	// Sixteen records at a time: their aggregates' MD5s run side by side
	// (verifyAggregates), and each chunk is expanded while its data is
	// still in the cache (a pass over a whole read first cost the drain of
	// small plain records a tenth of its rate).
	for len(recs) > 0 {
		chunk := recs[:min(len(recs), verifyChunk)]
		recs = recs[len(chunk):]
		f.verifyAggregates(chunk)
		for i := range chunk {
			f.arrival = aws.ToTime(chunk[i].ApproximateArrivalTimestamp)
			if !f.since.IsZero() {
				if f.arrival.Before(f.since) {
					continue
				}
				f.since = time.Time{}
			}
			hr := f.hashRange
			if !f.c.dist.Load().filters(f.arrival) {
				hr = nil
			}
			if err := userRecords(&chunk[i], hr, f.verified[i], f.emitFn); err != nil {
				return err
			}
		}
	}
	return f.flush()
}

// verifyAggregates checks the MD5 trailers of the aggregated records of
// chunk (at most verifyChunk) at once (kpl.VerifyAll): f.verified[i]
// says chunk[i]'s matched.
func (f *feed) verifyAggregates(chunk []types.Record) {
	var datas [verifyChunk][]byte
	for i := range chunk {
		datas[i] = chunk[i].Data
	}
	kpl.VerifyAll(f.verified[:len(chunk)], datas[:len(chunk)])
}

// emit collects one user record.
func (f *feed) emit(seq string, sub int64, key string, data []byte) error {
	f.users++
	if f.skip {
		if seq == f.skipTo.seq && sub <= f.skipTo.sub {
			return nil // settled before this position was opened
		}
		f.skip = false
	}
	f.run = append(f.run, Record{
		Stream:         f.c.cfg.Stream,
		ShardID:        f.shard,
		SequenceNumber: seq,
		SubSequence:    sub,
		PartitionKey:   key,
		Data:           data,
		ArrivalTime:    f.arrival,
	})
	if len(f.run) == sinkRun {
		return f.flush()
	}
	return nil
}

// flush hands the collected run to the sink.
func (f *feed) flush() error {
	var err error
	for rest := f.run; len(rest) > 0 && err == nil; {
		n := len(rest)
		if f.c.cfg.MaxInFlight > 0 {
			// Wait while the shard has its most records in flight (a
			// stuck handler holds them): the rest are read again from
			// where the reader resumes if it stops meanwhile.
			var room int
			if room, err = f.s.wm.waitRoom(f.ctx, f.c.cfg.MaxInFlight); err != nil {
				break
			}
			n = min(n, room)
		}
		if f.s.wm.expired() {
			// The lease ran out while the reader waited for room: no
			// more of the read goes out.
			err = errFenced
			break
		}
		part := rest[:n]
		f.s.wm.addAll(part)
		var taken int
		taken, err = f.c.cfg.Sink(f.ctx, part)
		if taken > 0 && f.took != nil {
			f.took(&part[taken-1])
		}
		if err != nil && taken < len(part) {
			// Not taken: they must not hold the watermark.
			f.s.wm.truncate(part[taken].idx)
		}
		rest = rest[n:]
	}
	clear(f.run) // drop the references to this read's data
	f.run = f.run[:0]
	return err
}

// handOut delivers the records of one read through f and reports whether
// the reader goes on: not when the lease was fenced or ctx ended (nothing
// of the read is handed out), nor when the sink failed (the session ends,
// see sinkFailed).
func handOut(ctx context.Context, log *slog.Logger, o *owned, s *session, f *feed, recs []types.Record) bool {
	err := f.deliver(recs)
	if err == nil {
		return true
	}
	if ctx.Err() == nil && !errors.Is(err, errFenced) {
		sinkFailed(log, o, s, err)
	}
	return false
}

// sinkFailed ends session s after the sink broke its contract: its
// generation is dropped and the next pass reopens the shard at its
// checkpoint.
func sinkFailed(log *slog.Logger, o *owned, s *session, err error) {
	log.Error("sink failed while the reader runs; reopening the shard at its checkpoint", "err", err)
	s.wm.abandon()
	o.mu.Lock()
	if o.sess == s {
		o.unread()
	}
	o.mu.Unlock()
}
