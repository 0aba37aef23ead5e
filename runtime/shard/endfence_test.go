package shard_test

import (
	"context"
	"log/slog"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/kinesisgen/kinesisgen/runtime/lease"
	"github.com/kinesisgen/kinesisgen/runtime/shard"
)

// seenMsg is a log handler that notes whether a message beginning with
// prefix was logged.
type seenMsg struct {
	prefix string
	seen   *atomic.Bool
}

func (h seenMsg) Enabled(context.Context, slog.Level) bool { return true }
func (h seenMsg) Handle(_ context.Context, r slog.Record) error {
	if strings.HasPrefix(r.Message, h.prefix) {
		h.seen.Store(true)
	}
	return nil
}
func (h seenMsg) WithAttrs([]slog.Attr) slog.Handler { return h }
func (h seenMsg) WithGroup(string) slog.Handler      { return h }

// fleettest/dst mix all, seed 1796557200246886138 (lost): a closed shard's
// reader waited for its delivered records to settle when its lease passed
// its fence by the clock, before the fence's timer ran. The lanes, seeing
// the records stale, left each unsettled (Record.Abandon, which closes the
// generation and skips it), the wait took a closed generation with every
// record skipped for drained, and the reader wrote SHARD_END past records
// no handler ran; the store applied it (answered late), and the shard's
// children were read without them. A shard's end is checkpointed only once
// every record delivered of it has settled.
func TestEndCheckpointWaitsForEveryRecordNotTheSkipped(t *testing.T) {
	restore := shard.DelayFences(2 * time.Second)
	defer restore()
	e, _ := memEnv(t, 1)
	ids := e.shards()
	store := newSlowStore(e.store)
	queue, sink := laneQueue()
	var ended atomic.Bool
	cfg := e.config("a", sink)
	cfg.Leases = store
	cfg.Renew, cfg.Failover = 100*time.Millisecond, time.Second
	cfg.Logger = slog.New(seenMsg{prefix: "shard ended; waiting", seen: &ended})
	c := e.start(cfg)
	eventually(t, 5*time.Second, "a reads the shard", func() bool { return slices.Equal(c.Reading(), ids) })
	e.publish(map[string]int{}, 20, 4)
	split(t, e, ids[0])
	eventually(t, 5*time.Second, "a reads the shard to its end and waits for its records", ended.Load)
	if len(queue) != 20 {
		t.Fatalf("%d records delivered; want the 20 published", len(queue))
	}
	// Every call lands and is answered late: the lease passes its fence
	// by the clock; its timer runs 2 s late.
	store.set(0, time.Hour)
	first := <-queue
	eventually(t, 3*time.Second, "the records are stale", first.Stale)
	// The lane leaves every stale record unsettled, as lanes.work does.
	first.Abandon()
	for n := len(queue); n > 0; n-- {
		r := <-queue
		if !r.Stale() {
			t.Fatalf("record %s stale, %s not", first.SequenceNumber, r.SequenceNumber)
		}
		r.Abandon()
	}
	time.Sleep(time.Second) // the fence's timer has not run yet
	if l := e.lease(ids[0]); l.Checkpoint == lease.CheckpointShardEnd {
		t.Fatalf("the lease of %s says SHARD_END; none of its 20 records was handled", ids[0])
	}
}
