package shard_test

import (
	"slices"
	"testing"
	"testing/synctest"
	"time"
)

// A pass that takes several leases opens their readers side by side: with
// GetShardIterator answering 400 ms late, eight shards are all read about
// one call after the takes, not eight calls (3.2 s) later, one after
// another. (fleettest/dst mix kinslow, seed 6: a dead owner's three
// shards, taken in one pass at 1.3 s a call, had the last one unread 3.9 s
// after its take, past the unread bound.) On a virtual clock, so that a
// busy machine does not stretch the calls.
func TestPassOpensItsReadersSideBySide(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e, srv := memEnv(t, 8)
		ids := e.shards()
		cfg := e.config("a", newCollector().sink)
		cfg.Client = slowIterators{API: srv, d: 400 * time.Millisecond}
		start := time.Now()
		c := e.start(cfg)
		eventually(t, 10*time.Second, "a reads all eight shards", func() bool { return slices.Equal(c.Reading(), ids) })
		if took := time.Since(start); took > 1200*time.Millisecond {
			t.Errorf("a read its eight shards %v after it started; want about one GetShardIterator (400 ms), not eight one after another", took)
		}
	})
}
