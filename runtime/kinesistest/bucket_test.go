package kinesistest

import (
	"testing"
	"time"
)

// A subscription under WithThrottling sends 2 MiB at once, then 2 MiB a
// second.
func TestBucketPaces2MiBPerSecond(t *testing.T) {
	t0 := time.Unix(1000, 0)
	b := newBucket(t0)
	const mib = 1 << 20
	for i, c := range []struct {
		at   time.Duration
		n    int
		wait time.Duration
	}{
		{0, mib, 0},
		{0, mib, 0},
		{0, mib, 500 * time.Millisecond}, // the third MiB of the first second
		{500 * time.Millisecond, mib, 500 * time.Millisecond}, // paid the debt, and another
		{3 * time.Second, 2 * mib, 0},                         // an idle stretch refills a second's worth, no more
		{3 * time.Second, mib / 2, 250 * time.Millisecond},
	} {
		if got := b.reserve(c.n, t0.Add(c.at)); got < c.wait-time.Millisecond || got > c.wait+time.Millisecond {
			t.Errorf("send %d (%d bytes at %v): wait %v, want %v", i, c.n, c.at, got, c.wait)
		}
	}
}
