package runtime

import (
	"context"
	"sync"

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
	queues []chan *shard.Record
	quit   chan struct{} // closed by close: workers exit, submit refuses
	once   sync.Once
	wg     sync.WaitGroup
	idle   chan struct{} // closed when every worker has exited
}

func newLanes(workers int, byKey bool, work func(*shard.Record)) *lanes {
	l := &lanes{quit: make(chan struct{}), idle: make(chan struct{})}
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
			for {
				// Checking quit first keeps a stopped lane from starting
				// another delivery; what stays queued is never settled, so
				// it is read again after a restart.
				select {
				case <-l.quit:
					return
				default:
				}
				select {
				case r := <-q:
					work(r)
				case <-l.quit:
					return
				}
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
	l.once.Do(func() { close(l.quit) })
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
