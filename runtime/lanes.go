package runtime

import (
	"context"
	"math/bits"
	"sync"
	"sync/atomic"

	"github.com/kinesisgen/kinesisgen/runtime/shard"
)

// laneDepth bounds the records one by-key lane holds: those queued for it
// plus the batch its worker is working through. A full lane blocks the
// shard readers that feed it (backpressure), so memory stays flat on any
// backlog. Without by-key, the shared queue holds laneDepth records plus one
// per worker, and each worker holds one more. Deeper lanes block readers
// less often: in process, 256 against 64 drains about 10 % faster. Queues
// grow to their depth only when records wait in them.
const laneDepth = 256

// maxInFlight is the most records a shard hands out past its oldest
// unsettled record, for a subscription of workers workers: what its lanes
// hold when every worker has a full lane (with by-key), so the bound slows
// no healthy subscription and holds for both lane modes. Without it, plain
// workers would go on past a stuck delivery for ever, and with by-key the
// lanes of other keys would.
func maxInFlight(workers int) int { return laneDepth * workers }

// lanes run a subscription's deliveries. Without by-key there is one queue
// that n workers share, so n deliveries run at once in no particular order.
// With by-key each worker has its own queue and a record goes to the queue
// its partition key hashes to, so the records of one key (which one shard
// delivers in order) are handled one after another in that order.
//
// A reader hands over a run of records at once (see submit), a by-key
// worker takes everything queued for it at once, and a reader blocked on a
// full lane is woken only when its worker has taken the lot: the hand-off
// costs a lock per lane per run and a wake-up per batch, not a channel
// operation and a goroutine switch per record. Records travel by value, so
// it allocates nothing.
type lanes struct {
	queues  []*queue
	quit    chan struct{} // closed by close: workers exit, submit refuses
	once    sync.Once
	stopped atomic.Bool // set by close, before quit is closed
	wg      sync.WaitGroup
	idle    chan struct{} // closed when every worker has exited
	// observe, when set, makes each worker's observer of its takes: how
	// tracing makes one span per batch of records (see batchSpans).
	observe func() takeObserver
}

// takeObserver sees a worker's takes: take before a take's records are
// handled, idle when the worker has handled and settled everything it took
// and is about to wait for more (or exit).
type takeObserver interface {
	take([]shard.Record)
	idle()
}

// newLanes starts the workers. work handles one record and reports whether
// the record is to be settled; the lane settles it (in a batch with the
// others of its take, see work).
func newLanes(workers int, byKey bool, work func(*shard.Record) (settle bool)) *lanes {
	return newLanesObserved(workers, byKey, work, nil)
}

// newLanesObserved is newLanes with lanes.observe set (nil: none).
func newLanesObserved(workers int, byKey bool, work func(*shard.Record) (settle bool), observe func() takeObserver) *lanes {
	l := &lanes{quit: make(chan struct{}), idle: make(chan struct{}), observe: observe}
	if byKey {
		l.queues = make([]*queue, workers)
		for i := range l.queues {
			// Half the depth queued, half taken: the reader refills the
			// queue while the worker works through its batch.
			l.queues[i] = newQueue(laneDepth/2, laneDepth/2, 1)
		}
	} else {
		// One record per take, so that n workers run n deliveries at once.
		l.queues = []*queue{newQueue(laneDepth+workers, 1, workers)}
	}
	for i := range workers {
		q := l.queues[i%len(l.queues)]
		l.wg.Go(func() { l.work(q, work) })
	}
	go func() {
		l.wg.Wait()
		close(l.idle)
	}()
	return l
}

// work runs one worker: it takes records from q and handles them in order
// until close. The records it handled of one shard are settled together,
// one lock per run of a shard's records in a take instead of one per
// record, before a record of another shard starts (or once the take is
// done): a shard's settling never waits for another shard's handler,
// which may be slow, and its checkpoint lags by at most its own run, which
// its records still queued behind the run hold back anyway. (Settled only
// at the take's end, a closed shard whose records were all handled waited
// for other shards' slow handlers in its take to checkpoint its end and
// start its children, and a handoff of it was postponed meanwhile.) A
// stopped lane settles what it handled and starts no other delivery; what
// it held or what stays queued is never settled, so it is read again
// after a restart.
func (l *lanes) work(q *queue, work func(*shard.Record) bool) {
	// Both grow with the takes, to q.take at most.
	var batch []shard.Record
	var done []*shard.Record
	var obs takeObserver
	if l.observe != nil {
		obs = l.observe()
		defer obs.idle()
	}
	for {
		var ok bool
		if batch, ok = q.get(batch[:0], l.quit); !ok {
			return
		}
		if obs != nil {
			obs.take(batch)
		}
		for i := range batch {
			if l.stopped.Load() {
				break
			}
			if n := len(done); n > 0 && !sameShard(done[n-1], &batch[i]) {
				shard.SettleAll(done)
				done = done[:0]
			}
			if work(&batch[i]) {
				done = append(done, &batch[i])
			} else {
				// Not settled here (stale, or the run stops): in no
				// handler any more, so a stop waits for it no longer
				// and the next owner reads it again (issue 29).
				batch[i].Abandon()
			}
		}
		shard.SettleAll(done)
		if obs != nil && q.empty() {
			obs.idle()
		}
		done = done[:0]
		clear(batch) // the records' data goes with their deliveries
		if l.stopped.Load() {
			return
		}
	}
}

// sameShard reports whether a and b were read from the same shard.
func sameShard(a, b *shard.Record) bool { return a.ShardID == b.ShardID && a.Stream == b.Stream }

// submit queues rs, each record on its lane, in order: it is the
// coordinator's sink. Whatever it returns, the records it took are a prefix
// of rs, so a shard's checkpoint (which advances over a contiguous run of
// settled records) can pass every record it took once they are handled: a
// reader stopped while it waits for room leaves nothing behind that was
// handled and not checkpointed. It takes the lock of every lane the run
// uses once per step, a step queueing as many records as fit before the
// first whose lane is full, and waits for room on that lane; it fails only
// when ctx ends or the lanes are closed.
func (l *lanes) submit(ctx context.Context, rs []shard.Record) (int, error) {
	const most = 256
	if len(rs) > most {
		n, err := l.submit(ctx, rs[:most])
		if err != nil {
			return n, err
		}
		m, err := l.submit(ctx, rs[most:])
		return n + m, err
	}
	// The run's lanes, found before any lock is taken, and the set of them
	// in ascending order: every submit locks in that order, so two readers
	// feeding the same lanes cannot deadlock.
	var lane [most]uint16
	var used [MaxWorkers / 64]uint64
	if len(l.queues) > 1 {
		for i := range rs {
			j := keyLane(rs[i].PartitionKey, len(l.queues))
			lane[i] = uint16(j)
			used[j/64] |= 1 << (j % 64)
		}
	} else {
		used[0] = 1
	}
	var order [most]uint16
	lanes := order[:0]
	for w, set := range used {
		for ; set != 0; set &= set - 1 {
			lanes = append(lanes, uint16(w*64+bits.TrailingZeros64(set)))
		}
	}
	var room [MaxWorkers]int32
	done := 0
	for {
		for _, j := range lanes {
			q := l.queues[j]
			q.mu.Lock()
			room[j] = int32(q.room())
		}
		m := done
		for m < len(rs) && room[lane[m]] > 0 {
			room[lane[m]]--
			m++
		}
		for i := done; i < m; i++ {
			l.queues[lane[i]].push(&rs[i])
		}
		var space chan struct{}
		if m < len(rs) {
			space = l.queues[lane[m]].waitForRoom()
		}
		for _, j := range lanes {
			l.queues[j].wakeAndUnlock()
		}
		done = m
		if done == len(rs) {
			return done, nil
		}
		select {
		case <-space:
		case <-ctx.Done():
			return done, ctx.Err()
		case <-l.quit:
			return done, context.Canceled
		}
	}
}

// depth is how many records wait in the queues, not yet taken by a worker.
func (l *lanes) depth() int {
	n := 0
	for _, q := range l.queues {
		q.mu.Lock()
		n += q.n
		q.mu.Unlock()
	}
	return n
}

// close stops the workers after their current delivery.
func (l *lanes) close() {
	l.once.Do(func() {
		l.stopped.Store(true)
		close(l.quit)
	})
}

// queue is a bounded FIFO of records between shard readers and the workers
// that share it.
type queue struct {
	mu       sync.Mutex
	ring     []shard.Record // by value: handing a record over allocates nothing
	size     int            // most records queued; the ring grows to it
	head, n  int
	take     int           // most records one get returns
	low      int           // readers waiting for room wake when n drops to this
	sleepers int           // workers waiting in get for a record
	wake     int           // sleepers push took for new records, woken on unlock
	ready    chan struct{} // a token per sleeper woken by push
	space    chan struct{} // closed when room appears; nil while nobody waits
}

func newQueue(size, take, workers int) *queue {
	return &queue{
		ring:  make([]shard.Record, min(size, 16)),
		size:  size,
		take:  take,
		low:   size / 2,
		ready: make(chan struct{}, workers),
	}
}

// empty reports whether nothing is queued (a worker's next get would wait).
func (q *queue) empty() bool {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.n == 0
}

// room is how many more records the queue takes; q.mu is held.
func (q *queue) room() int { return q.size - q.n }

// push appends a copy of r; q.mu is held and the queue has room.
func (q *queue) push(r *shard.Record) {
	if q.n == len(q.ring) {
		q.grow()
	}
	i := q.head + q.n
	if i >= len(q.ring) {
		i -= len(q.ring)
	}
	q.ring[i] = *r
	q.n++
	if q.sleepers > 0 {
		q.sleepers--
		q.wake++
	}
}

// grow doubles the ring, up to the queue's size; q.mu is held.
func (q *queue) grow() {
	ring := make([]shard.Record, min(2*len(q.ring), q.size))
	n := copy(ring, q.ring[q.head:])
	copy(ring[n:], q.ring[:q.head])
	q.ring, q.head = ring, 0
}

// waitForRoom returns a channel closed when the queue has room again; q.mu
// is held.
func (q *queue) waitForRoom() chan struct{} {
	if q.space == nil {
		q.space = make(chan struct{})
	}
	return q.space
}

// wakeAndUnlock releases q.mu and wakes the workers push counted.
func (q *queue) wakeAndUnlock() {
	wake := q.wake
	q.wake = 0
	q.mu.Unlock()
	for range wake {
		// Never blocks: a token is sent only for a sleeper counted by push,
		// and ready holds one per worker.
		q.ready <- struct{}{}
	}
}

// get appends up to q.take records to dst in queue order, waiting while the
// queue is empty; ok is false once quit is closed.
func (q *queue) get(dst []shard.Record, quit <-chan struct{}) (_ []shard.Record, ok bool) {
	q.mu.Lock()
	for q.n == 0 {
		q.sleepers++
		q.mu.Unlock()
		select {
		case <-q.ready:
		case <-quit:
			return dst, false
		}
		q.mu.Lock() // another worker of a shared queue may have taken it
	}
	k := min(q.n, q.take)
	for range k {
		dst = append(dst, q.ring[q.head])
		q.ring[q.head] = shard.Record{}
		if q.head++; q.head == len(q.ring) {
			q.head = 0
		}
	}
	q.n -= k
	if q.space != nil && q.n <= q.low {
		close(q.space) // wake every reader waiting for room
		q.space = nil
	}
	q.mu.Unlock()
	return dst, true
}

// keyLane hashes a partition key (FNV-1a) onto one of n lanes.
func keyLane(key string, n int) int {
	h := uint32(2166136261)
	for i := 0; i < len(key); i++ {
		h ^= uint32(key[i])
		h *= 16777619
	}
	return int(h % uint32(n))
}
