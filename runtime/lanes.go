package runtime

import (
	"context"
	"sync"
	"sync/atomic"

	"github.com/kinesisgen/kinesisgen/runtime/shard"
)

// laneDepth is how many records wait on one worker. Together with the
// worker count it bounds the records in flight: a full lane blocks the
// shard reader that feeds it (backpressure), so memory stays flat on any
// backlog.
const laneDepth = 64

// lanes run a subscription's deliveries. Without by-key there is one queue
// that n workers share, so n deliveries run at once in no particular order.
// With by-key each worker has its own queue and a record goes to the queue
// its partition key hashes to, so the records of one key (which one shard
// delivers in order) are handled one after another in that order.
type lanes struct {
	queues  []chan *shard.Record
	workers int
	quit    chan struct{} // closed by close: workers exit, submit refuses
	once    sync.Once
	stopped atomic.Bool // set by close, before quit is closed
	wg      sync.WaitGroup
	idle    chan struct{} // closed when every worker has exited
}

func newLanes(workers int, byKey bool, work func(*shard.Record)) *lanes {
	l := &lanes{workers: workers, quit: make(chan struct{}), idle: make(chan struct{})}
	if byKey {
		l.queues = make([]chan *shard.Record, workers)
		for i := range l.queues {
			l.queues[i] = make(chan *shard.Record, laneDepth)
		}
	} else {
		l.queues = []chan *shard.Record{make(chan *shard.Record, laneDepth*workers)}
	}
	for i := range workers {
		q := l.queues[i%len(l.queues)]
		l.wg.Go(func() {
			// A plain receive, not a select with quit: this loop is the hot
			// path. close wakes an idle worker with a nil record; a worker
			// that finds a real one after close exits too: a stopped lane
			// starts no other delivery, and what stays queued is never
			// settled, so it is read again after a restart.
			for r := range q {
				if r == nil || l.stopped.Load() {
					return
				}
				work(r)
			}
		})
	}
	go func() {
		l.wg.Wait()
		close(l.idle)
	}()
	return l
}

// submit queues r on its lane, waiting while the lane is full. It is the
// coordinator's sink: it fails only when ctx ends or the lanes are closed.
func (l *lanes) submit(ctx context.Context, r *shard.Record) error {
	q := l.queues[0]
	if len(l.queues) > 1 {
		q = l.queues[keyLane(r.PartitionKey, len(l.queues))]
	}
	select { // the common case: room on the lane
	case q <- r:
		return nil
	default:
	}
	select {
	case q <- r:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	case <-l.quit:
		return context.Canceled
	}
}

// close stops the workers after their current delivery.
func (l *lanes) close() {
	l.once.Do(func() {
		l.stopped.Store(true)
		close(l.quit)
		go func() {
			// One wake-up per worker; a full queue needs none, its workers
			// will receive a record and see stopped.
			for i := range l.workers {
				select {
				case l.queues[i%len(l.queues)] <- nil:
				case <-l.idle:
					return
				}
			}
		}()
	})
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
