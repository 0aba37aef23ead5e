package runtime

import (
	"testing"
	"time"
)

// FastRetries makes failed entries come back within milliseconds, for
// tests outside the package.
func FastRetries() Option {
	return func(c *config) {
		c.batch.retryBase = time.Millisecond
		c.batch.retryMax = 5 * time.Millisecond
	}
}

// SetInPlaceBackoff sets the bounds of an in-place retry's backoff for
// the rest of t.
func SetInPlaceBackoff(t *testing.T, base, most time.Duration) {
	b, m := inPlaceBase, inPlaceMax
	inPlaceBase, inPlaceMax = base, most
	t.Cleanup(func() { inPlaceBase, inPlaceMax = b, m })
}

// SpareAggregateBuffers returns a function that counts the aggregate
// buffers kept for reuse by the aggregators of b's connection of the
// moment; call it once b has shut down.
func SpareAggregateBuffers(b *Broker) func() int {
	c, _ := b.connection()
	return func() int {
		n := 0
		if m := c.aggs.Load(); m != nil {
			for _, a := range *m {
				<-a.done
				n += len(a.bufs)
			}
		}
		return n
	}
}

// ShortenCreateWait bounds the wait for a created stream (or a registered
// consumer) to become active by d instead of a minute, until t ends. Not
// for parallel tests: it changes the package's bound.
func ShortenCreateWait(t testing.TB, d time.Duration) { shorten(t, &createWait, d) }

// ShortenStartTimeout bounds a start that has no caller's context
// (Subscribe after Connect) by d instead of two minutes, until t ends. Not
// for parallel tests: it changes the package's bound.
func ShortenStartTimeout(t testing.TB, d time.Duration) { shorten(t, &startTimeout, d) }

// TrustAggregateMaps makes the aggregators created until t ends trust a
// shard map for d after it was last confirmed, instead of a second: for a
// test that needs a map left stale across a reshard slower than that.
// Not for parallel tests.
func TrustAggregateMaps(t testing.TB, d time.Duration) { shorten(t, &aggMapTrust, d) }

// shorten sets *bound to d until t ends.
func shorten(t testing.TB, bound *time.Duration, d time.Duration) {
	old := *bound
	*bound = d
	t.Cleanup(func() { *bound = old })
}

// SetAggDistributionEvery sets how often aggregating publishers read their
// stream's distribution strategy, until the test ends.
func SetAggDistributionEvery(t testing.TB, d time.Duration) {
	old := aggDistributionEvery
	aggDistributionEvery = d
	t.Cleanup(func() { aggDistributionEvery = old })
}

// KeyLane is the by-key lane of key among n.
func KeyLane(key string, n int) int { return keyLane(key, n) }

// ShortenQueueRetryBackoff makes a queue subscriber's first Retry wait d
// (rounded up to whole seconds) until t ends.
func ShortenQueueRetryBackoff(t testing.TB, d time.Duration) { shorten(t, &queueRetryBackoff, d) }

// ShortenQueueMaxHold makes queue subscribers stop extending a record's
// visibility d after its receive, until t ends.
func ShortenQueueMaxHold(t testing.TB, d time.Duration) { shorten(t, &queueMaxHold, d) }

// CapQueueRejected makes the queue subscribers started until t ends
// remember at most n rejected records.
func CapQueueRejected(t testing.TB, n int) {
	old := rejectedMax
	rejectedMax = n
	t.Cleanup(func() { rejectedMax = old })
}

// QueueRejectedRemembered is how many rejected records the queue
// subscription s remembers now.
func QueueRejectedRemembered(s *Subscription) int {
	s.mu.Lock()
	r := s.run
	s.mu.Unlock()
	return r.queue.rejected.len()
}

// AggGather is aggGather, for BenchmarkPublishHandoff.
const AggGather = aggGather
