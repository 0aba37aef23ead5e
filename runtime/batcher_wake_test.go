package runtime

import (
	"testing"
	"time"
)

// With every call slot taken, a retry whose backoff has passed waits for a
// call to return (run's results channel wakes it), not for a timer: a
// timer at a moment already past fires at once, and the batcher went round
// its loop without sending, burning a core until a call returned (in a
// synctest bubble, for ever: fleettest/dst mix putfaults, seed 1, a
// PutRecords never answered while a throttled record's retry was due).
func TestBatcherSleepsWhileEverySlotIsTaken(t *testing.T) {
	now := time.Now()
	due := &entry{notBefore: now.Add(-time.Millisecond)}
	later := &entry{notBefore: now.Add(time.Second)}
	for _, tc := range []struct {
		name     string
		inFlight int
		retries  []*entry
		wantWake bool
	}{
		{"a slot free, a retry due", 0, []*entry{due}, true},
		{"every slot taken, a retry due", 1, []*entry{due}, false},
		{"every slot taken, a retry later", 1, []*entry{later}, false},
	} {
		b := &batcher{cfg: batchConfig{maxInFlight: 1}, inFlight: tc.inFlight, retries: tc.retries}
		at, ok := b.nextWake()
		if ok != tc.wantWake {
			t.Errorf("%s: nextWake() = %v, %v; want a wake-up %v", tc.name, at.Sub(now), ok, tc.wantWake)
		}
	}
}
