package shard

import (
	"context"
	"sync"
	"sync/atomic"
	"time"
)

// mark is a position inside a shard: a record's sequence number and, for a
// record expanded from a KPL aggregate, its sub-sequence.
type mark struct {
	seq string
	sub int64
}

// watermark turns settlements, which arrive in any order, into the last
// record of the contiguous settled prefix of one reader generation. Records
// are keyed by arrival order (the index handed out when a record goes to the
// sink), never by their sequence numbers. The pending records live in a ring
// that doubles when full, so each record costs O(1) amortised and no
// allocation of its own.
type watermark struct {
	// discard is read for every delivered record (Record.Stale) and written
	// once: it sits apart from the fields that add and settle write, so
	// that reading it does not miss the cache.
	discard atomic.Bool
	// closing is set by a Stop that ran half its time, or by a lane that
	// abandoned a record (Record.Abandon): records not handed to a handler
	// yet are stale (Record.Stale marks them skipped), so that only those
	// a handler already runs are waited for.
	closing atomic.Bool
	st      *Stats // the shard's counters, for Record.Count; nil in tests
	// The lease the generation reads under (nil in tests): until is its
	// fence (owned.until, nanoseconds since epoch on the monotonic
	// clock), lost its context (owned.lctx). Record.Stale reads the clock
	// itself rather than wait for the fence's timer, which after a pause
	// (SIGSTOP, a GC or VM freeze) may run after the lanes have resumed.
	until *atomic.Int64
	epoch time.Time
	lost  context.Context
	_     [cacheLine]byte

	mu       sync.Mutex
	ring     []slot // len is a power of two
	base     uint64 // index of the oldest unsettled record
	next     uint64 // index of the next delivered record
	last     mark   // last record of the settled prefix
	has      bool   // last is set
	drained  chan struct{}
	room     chan struct{} // closed when next-base drops to roomAt; nil while nobody waits
	roomAt   uint64
	advanced uint64 // bumped whenever base moves; the persister compares it
	skipped  uint64 // unsettled records a lane was told were stale while closing
}

const cacheLine = 64

type slot struct {
	m       mark
	done    bool
	skipped bool // stale while closing: never handed to a handler here
}

func newWatermark() *watermark { return &watermark{ring: make([]slot, 64)} }

// expired reports whether the lease of the generation is past its fence by
// the monotonic clock: fenced, whether or not its timer has run yet.
func (w *watermark) expired() bool {
	return w.until != nil && time.Since(w.epoch) >= time.Duration(w.until.Load())
}

// addAll gives each record of rs, in order, the next arrival index of w.
func (w *watermark) addAll(rs []Record) {
	w.mu.Lock()
	for i := range rs {
		r := &rs[i]
		if w.next-w.base == uint64(len(w.ring)) {
			w.grow()
		}
		w.ring[w.next&uint64(len(w.ring)-1)] = slot{m: mark{r.SequenceNumber, r.SubSequence}}
		r.wm, r.idx = w, w.next
		w.next++
	}
	w.mu.Unlock()
}

func (w *watermark) grow() {
	old, mask := w.ring, uint64(len(w.ring)-1)
	w.ring = make([]slot, 2*len(old))
	nmask := uint64(len(w.ring) - 1)
	for i := w.base; i < w.next; i++ {
		w.ring[i&nmask] = old[i&mask]
	}
}

// settle marks index i settled and advances over the settled prefix.
// Settling an index twice does nothing; in a discarded generation it moves
// no checkpoint (advance), but counts: the record left its handler
// (inHandlers).
func (w *watermark) settle(i uint64) {
	w.mu.Lock()
	w.mark(i)
	w.advance()
	w.mu.Unlock()
}

// SettleAll settles every record of rs, as Settle does one by one, taking
// each watermark's lock once for all its records instead of once per
// record. It clears rs.
func SettleAll(rs []*Record) {
	for i, r := range rs {
		if r == nil {
			continue
		}
		w := r.wm
		if w == nil {
			rs[i] = nil
			continue
		}
		w.mu.Lock()
		for j := i; j < len(rs); j++ {
			if rs[j] != nil && rs[j].wm == w {
				w.mark(rs[j].idx)
				rs[j] = nil
			}
		}
		w.advance()
		w.mu.Unlock()
	}
}

// mark records index i settled; w.mu is held.
func (w *watermark) mark(i uint64) {
	if i >= w.base && i < w.next {
		s := &w.ring[i&uint64(len(w.ring)-1)]
		if s.skipped && !s.done {
			w.skipped--
		}
		s.done = true
	}
}

// advance moves the watermark over the settled prefix; w.mu is held.
func (w *watermark) advance() {
	mask := uint64(len(w.ring) - 1)
	if w.base == w.next || !w.ring[w.base&mask].done {
		if w.closing.Load() {
			w.wakeIfIdle() // a record settled past a skipped one
		}
		return
	}
	discarded := w.discard.Load() // its records never move a checkpoint
	for w.base < w.next && w.ring[w.base&mask].done {
		s := &w.ring[w.base&mask]
		if !discarded {
			w.last, w.has = s.m, true
		}
		*s = slot{} // drop the string so the ring keeps no record alive
		w.base++
	}
	if !discarded {
		w.advanced++
	}
	if w.room != nil && w.next-w.base <= w.roomAt {
		close(w.room)
		w.room = nil
	}
	w.wakeIfIdle()
}

// inHandlers reports whether a delivered record may still be in a
// handler: neither settled nor found stale by a lane (Record.Stale, which
// marks it skipped), whether or not the generation was abandoned. A fence
// abandons a generation while its handlers may still run records; until
// they have returned, the lease is neither taken back nor released
// (Coordinator.fencedRunning).
func (w *watermark) inHandlers() bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.next-w.base != w.doneAhead()+w.skipped
}

// idle reports whether no delivered record is left to wait for: all
// settled, or, closing, all the unsettled ones skipped; w.mu is held.
func (w *watermark) idle() bool {
	return w.base == w.next || w.closing.Load() && w.next-w.base == w.doneAhead()+w.skipped
}

// doneAhead counts the settled records past the first unsettled one;
// w.mu is held. Only a closing generation asks (a Stop's last seconds).
func (w *watermark) doneAhead() uint64 {
	mask := uint64(len(w.ring) - 1)
	var n uint64
	for i := w.base; i < w.next; i++ {
		if w.ring[i&mask].done {
			n++
		}
	}
	return n
}

// wakeIfIdle wakes the waiters (wait) once w is idle; w.mu is held.
func (w *watermark) wakeIfIdle() {
	if w.drained != nil && w.idle() {
		close(w.drained)
		w.drained = nil
	}
}

// close makes every record not yet handed to a handler stale (Stop's
// second half): wait then waits only for those a handler already runs.
func (w *watermark) close() {
	w.closing.Store(true)
	w.mu.Lock()
	w.wakeIfIdle()
	w.mu.Unlock()
}

// running reports whether a record of a closed generation may still be
// in a handler: delivered, neither settled nor skipped (a lane that looks
// at it from now on skips it), and the generation not abandoned.
func (w *watermark) running() bool {
	if w.discard.Load() {
		return false
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	return !w.idle()
}

// skip marks index i stale for good while closing: it will not be handled
// here, so wait no longer waits for it (its checkpoint stays before it).
func (w *watermark) skip(i uint64) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if i < w.base || i >= w.next {
		return
	}
	s := &w.ring[i&uint64(len(w.ring)-1)]
	if !s.done && !s.skipped {
		s.skipped = true
		w.skipped++
		w.wakeIfIdle()
	}
}

// progress returns the checkpointable position and a counter that moves
// whenever it does.
func (w *watermark) progress() (m mark, ok bool, version uint64) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.last, w.has, w.advanced
}

// firstPending returns the first delivered record not settled yet, if any.
func (w *watermark) firstPending() (mark, bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.base == w.next {
		return mark{}, false
	}
	return w.ring[w.base&uint64(len(w.ring)-1)].m, true
}

// lastOut returns the last record delivered, if any: a reader that goes on
// in the same generation starts after it.
func (w *watermark) lastOut() (mark, bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.base == w.next {
		return w.last, w.has
	}
	return w.ring[(w.next-1)&uint64(len(w.ring)-1)].m, true
}

// pending returns how many delivered records are not settled yet.
func (w *watermark) pending() uint64 {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.next - w.base
}

// settledAll reports whether every delivered record has settled: none
// skipped or left unsettled (idle also counts a closing generation's
// skipped records as done with).
func (w *watermark) settledAll() bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.base == w.next
}

// wait returns nil once every delivered record has settled or the
// generation is abandoned (its settlements count for nothing), or ctx's
// error.
func (w *watermark) wait(ctx context.Context) error {
	for {
		w.mu.Lock()
		if w.idle() || w.discard.Load() {
			w.mu.Unlock()
			return nil
		}
		if w.drained == nil {
			w.drained = make(chan struct{})
		}
		ch := w.drained
		w.mu.Unlock()
		select {
		case <-ch:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// waitRoom waits until fewer than limit delivered records are unsettled
// and returns how many more may be delivered, or ctx's error. A waiter is
// woken once half of the limit is free again, not for every settlement.
func (w *watermark) waitRoom(ctx context.Context, limit int) (int, error) {
	for {
		w.mu.Lock()
		if p := w.next - w.base; p < uint64(limit) {
			w.mu.Unlock()
			return limit - int(p), nil
		}
		if w.room == nil {
			w.room = make(chan struct{})
		}
		w.roomAt = uint64(limit / 2)
		ch := w.room
		w.mu.Unlock()
		select {
		case <-ch:
		case <-ctx.Done():
			return 0, ctx.Err()
		}
	}
}

// abandon discards the generation: later settlements are ignored, so records
// delivered before a seek or a lost lease never move a checkpoint.
func (w *watermark) abandon() {
	w.discard.Store(true)
	w.mu.Lock()
	if w.drained != nil {
		close(w.drained)
		w.drained = nil
	}
	w.mu.Unlock()
}

// truncate takes back index i and every later one, for records the sink
// did not take (it returned because its ctx ended). They were never handed
// out, so nothing settles them.
func (w *watermark) truncate(i uint64) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if i < w.base || i >= w.next {
		return
	}
	for j := i; j < w.next; j++ {
		s := &w.ring[j&uint64(len(w.ring)-1)]
		if s.skipped && !s.done {
			w.skipped--
		}
		*s = slot{}
	}
	w.next = i
	w.wakeIfIdle()
}
