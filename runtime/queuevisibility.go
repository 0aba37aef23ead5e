package runtime

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/kinesis"
	"github.com/aws/aws-sdk-go-v2/service/kinesis/types"
)

// A queue hides a received record from other receivers for its
// visibility timeout only. The keeper extends the visibility of every
// record received here and not yet settled (waiting for a worker, or
// being handled) before it runs out, so that a handler longer than the
// timeout does not have its record handled elsewhere at the same time.
// Records waiting for a worker are kept too: let go, each would come back
// with one more receive against the queue's max_receives.

// queueMaxHold bounds how long extensions keep one record hidden, from its
// receive. The SDK documents no bound; SQS, which the queues resemble,
// allows 12 hours, as does this runtime's Visibility. A handler still
// running then is taken as stuck: its record goes to another receiver.
var queueMaxHold = MaxVisibility

// held is a record received and not yet settled.
type held struct {
	rec     *types.QueueRecord // in the receive's answer
	at      time.Duration      // received, since queueRun.base
	expires atomic.Int64       // its visibility ends (as far as known here), since queueRun.base
	// extended: expires is an extension's, reckoned from when the call
	// was sent (no later than the queue's); not yet, it is the receive's,
	// reckoned from the answer (later than the queue's by its way back).
	extended atomic.Bool
	settled  atomic.Bool // acknowledged (the call over), released or left: no longer extended
	acking   atomic.Bool // handled; its acknowledgement is on its way
	dropped  atomic.Bool // its visibility is lost (counted once): no longer extended
}

// since is the time since the run's base, on the monotonic clock.
func (q *queueRun) since() time.Duration { return time.Since(q.base) }

// track gives the keeper the records a receive returned. The list is
// compacted here too, so that a fast run does not pile up settled
// records between the keeper's rounds.
func (q *queueRun) track(hs []held) {
	if q.visDur == 0 {
		return
	}
	q.heldMu.Lock()
	if len(q.held)+len(hs) > 2*cap(q.slots)+queueBatch {
		q.compactLocked(nil, 0)
	}
	for i := range hs {
		q.held = append(q.held, &hs[i])
	}
	q.heldMu.Unlock()
}

// compactLocked drops the settled records from q.held and, when due is
// not nil, adds to it the others whose visibility ends within three
// quarters of the visibility timeout from now.
func (q *queueRun) compactLocked(due *[]*held, now time.Duration) {
	live := q.held[:0]
	for _, h := range q.held {
		if h.settled.Load() {
			continue
		}
		live = append(live, h)
		if due != nil && !h.dropped.Load() && time.Duration(h.expires.Load())-now <= q.visDur*3/4 {
			*due = append(*due, h)
		}
	}
	clear(q.held[len(live):])
	q.held = live
}

// keep extends visibilities until stopKeep is closed: every quarter of the
// visibility timeout it extends the records whose visibility ends within
// three quarters of it, so each extension goes out with at least half of
// the timeout left. A call answering within that half (its deadline) keeps
// the record, however the rounds fall, and a stall of the keeper (a GC
// pause, a starved machine) up to a quarter of the timeout costs nothing;
// one that fails is tried again at the next round. The price is a call
// per record every quarter to half of the timeout, ten records a call.
func (q *queueRun) keep() {
	t := time.NewTicker(q.visDur / 4)
	defer t.Stop()
	var due []*held
	for {
		select {
		case <-q.stopKeep:
			return
		case <-t.C:
		}
		now := q.since()
		due = due[:0]
		q.heldMu.Lock()
		q.compactLocked(&due, now)
		q.heldMu.Unlock()
		n := 0
		for _, h := range due {
			if now-h.at >= queueMaxHold {
				q.lose(h, "held for the longest a queue allows: its handler is taken as stuck", "held", now-h.at)
				continue
			}
			due[n] = h
			n++
		}
		// The calls go together, up to keepCalls at once: one after
		// another, slow ones (each may take half the timeout) would leave
		// the last batches to run out.
		var calls sync.WaitGroup
		slots := make(chan struct{}, keepCalls)
		for start := 0; start < n; start += queueBatch {
			batch := due[start:min(start+queueBatch, n)]
			slots <- struct{}{}
			calls.Go(func() {
				defer func() { <-slots }()
				q.extend(batch)
			})
		}
		calls.Wait()
		clear(due)
	}
}

// keepCalls bounds the keeper's extension calls under way at once: a
// round's batches go together (a subscription holds at most 10 per
// receiver and 2 per worker: up to 77 batches with 64 workers), but not
// all at once against the queue's request rate.
const keepCalls = 8

// extend extends the visibility of hs (at most 10) by the visibility
// timeout from now. A record the queue refuses (its receipt handle
// expired: it may have been received elsewhere) or whose visibility ran
// out before an extension went through is counted lost: it may be handled
// twice, and nothing is lost.
func (q *queueRun) extend(hs []*held) {
	secs := visSeconds(q.visDur)
	entries := make([]types.UpdateQueueRecordsVisibilityRequestEntry, len(hs))
	for i, h := range hs {
		entries[i] = types.UpdateQueueRecordsVisibilityRequestEntry{ReceiptHandle: h.rec.ReceiptHandle, VisibilityTimeoutSeconds: &secs}
	}
	sent := q.since()
	ctx, cancel := context.WithTimeout(context.Background(), min(10*time.Second, q.visDur/2))
	out, err := q.r.c.client.UpdateQueueRecordsVisibility(ctx, &kinesis.UpdateQueueRecordsVisibilityInput{QueueARN: &q.arn, Entries: entries})
	cancel()
	failed := map[string]types.UpdateQueueRecordsVisibilityErrorEntry{}
	if err == nil {
		for _, f := range out.Failed {
			failed[aws.ToString(f.ReceiptHandle)] = f
		}
	}
	now := q.since()
	again := 0
	var cause error
	for _, h := range hs {
		f, refused := failed[aws.ToString(h.rec.ReceiptHandle)]
		switch {
		case h.settled.Load() || refused && h.acking.Load() && !q.mayHaveRunOut(h, now):
			// Settled while the call ran, or being acknowledged with its
			// visibility not run out by the answer: an acknowledgement that
			// landed first makes the queue refuse the extension ("The
			// record was acknowledged"), which loses nothing (one the
			// queue refuses too, ack counts). Run out, the record may
			// have been received again, which the queue refuses alike
			// and which an acknowledgement landing after the other
			// delivery's would not reveal: lost, below.
		case err == nil && !refused:
			h.expires.Store(int64(sent + q.visDur))
			h.extended.Store(true)
			q.visExtended.Add(1)
		case refused && permanentEntryError(aws.ToString(f.ErrorCode)):
			q.lose(h, "the queue refused to extend its visibility", "code", aws.ToString(f.ErrorCode), "error", aws.ToString(f.ErrorMessage))
		case time.Duration(h.expires.Load()) <= now:
			q.lose(h, "its visibility ran out before an extension went through", "error", entryError(err, f))
		default:
			again++
			cause = entryError(err, f)
		}
	}
	if again > 0 {
		q.r.log.Warn("UpdateQueueRecordsVisibility failed; trying again before the visibility runs out", "records", again, "error", cause)
	}
}

// entryError is why an extension failed: the call's error, or the entry's.
func entryError(err error, f types.UpdateQueueRecordsVisibilityErrorEntry) error {
	if err != nil {
		return err
	}
	return fmt.Errorf("%s: %s", aws.ToString(f.ErrorCode), aws.ToString(f.ErrorMessage))
}

// lose gives up extending h: another receiver may get it while it is
// handled here (or has: its acknowledgement was refused).
func (q *queueRun) lose(h *held, why string, attrs ...any) {
	if h.dropped.Swap(true) {
		return // counted and said already (the keeper, then the acknowledgement)
	}
	q.visLost.Add(1)
	q.r.log.Warn("record no longer hidden while handled ("+why+"); it may be handled twice", append([]any{"record_id", aws.ToString(h.rec.RecordId)}, attrs...)...)
}

// settle ends the keeper's care of h, counting it lost first if its
// visibility may have run out: the record may have been received again
// elsewhere, and the settlement here (an acknowledgement accepted with a
// stale receipt handle, a retry or release refused) would not tell.
func (q *queueRun) settle(h *held, why string) {
	if q.mayHaveRunOut(h, q.since()) {
		q.lose(h, why)
	}
	h.settled.Store(true)
}

// mayHaveRunOut says whether h's visibility may have run out by now. An
// extension's end is reckoned from when its call was sent, no later than
// the queue's; a receive's from its answer, which came back later than
// the queue began the visibility: within the quarter of the timeout the
// keeper allows that (see keep), the record may be visible already.
func (q *queueRun) mayHaveRunOut(h *held, now time.Duration) bool {
	if q.visDur == 0 {
		return false
	}
	end := time.Duration(h.expires.Load())
	if !h.extended.Load() {
		end -= q.visDur / 4
	}
	return end <= now
}

// permanentEntryError tells a failed entry's code that trying again will
// not change (a receipt handle expired or unknown, the queue gone) from
// throttling and internal failures.
func permanentEntryError(code string) bool {
	return code == "InvalidArgumentException" || code == "ResourceNotFoundException"
}

// rejectedSet remembers records rejected here without dead_letter, which
// are released to come back until the queue dead-letters them: received
// here again, they are released at once instead of handled. Another
// instance may receive them instead, so entries expire after ttl (the
// longest the queue plausibly takes to dead-letter one: max_receives
// visibility timeouts) and the oldest give way beyond max entries; a
// record forgotten early is only handled (and rejected) again.
type rejectedSet struct {
	n     atomic.Int64 // entries, read without the lock on every record
	mu    sync.Mutex
	at    map[string]time.Time
	order []rejectedEntry // by insertion, so by expiry
	ttl   time.Duration
	max   int
}

type rejectedEntry struct {
	id string
	at time.Time
}

// rejectedMax bounds a subscription's rejected set.
var rejectedMax = 10000

func (s *rejectedSet) add(id string, now time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.at == nil {
		s.at = map[string]time.Time{}
	}
	s.expireLocked(now)
	for len(s.order) >= s.max {
		s.popLocked()
	}
	s.at[id] = now
	s.order = append(s.order, rejectedEntry{id, now})
	s.n.Store(int64(len(s.at)))
}

// has tells whether id was rejected here (and not forgotten); forget
// drops it then.
func (s *rejectedSet) has(id string, now time.Time, forget bool) bool {
	if s.n.Load() == 0 {
		return false
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.expireLocked(now)
	_, ok := s.at[id]
	if ok && forget {
		delete(s.at, id) // its place in order goes when it comes first
		s.n.Store(int64(len(s.at)))
	}
	return ok
}

func (s *rejectedSet) len() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.order)
}

func (s *rejectedSet) expireLocked(now time.Time) {
	for len(s.order) > 0 && now.Sub(s.order[0].at) >= s.ttl {
		s.popLocked()
	}
	s.n.Store(int64(len(s.at)))
}

// popLocked drops the oldest entry (the map's only if it is still that
// insertion's: a record rejected again is listed again).
func (s *rejectedSet) popLocked() {
	e := s.order[0]
	s.order[0] = rejectedEntry{}
	s.order = s.order[1:]
	if at, ok := s.at[e.id]; ok && at.Equal(e.at) {
		delete(s.at, e.id)
	}
	if len(s.order) == 0 {
		s.order = nil // let the backing array go
	}
}
