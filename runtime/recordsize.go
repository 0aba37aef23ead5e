package runtime

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/kinesis"
	"github.com/aws/aws-sdk-go-v2/service/kinesis/types"
)

// MaxLargeRecordSize is the largest record (data plus partition key) a
// stream can take: its MaxRecordSizeInKiB at most 10240 KiB
// (UpdateMaxRecordSize). A stream whose summary names no size takes
// MaxRecordSize.
const MaxLargeRecordSize = 10 << 20

// limitTTL is how long a stream's learned record size stands before a
// record over it reads it again (UpdateMaxRecordSize may have raised it).
// Records within the 1 MiB every stream takes never read it.
const limitTTL = 10 * time.Second

// recordLimit is one stream's learned maximum record size.
type recordLimit struct {
	mu    sync.Mutex // one DescribeStreamSummary at a time per stream
	bytes int        // 0: not learned
	at    time.Time  // when learned
	// large: the stream takes records over MaxRecordSize, so its service
	// takes requests of maxBatchBytes (the batcher reads it).
	large atomic.Bool
}

// set records a learned size.
func (l *recordLimit) set(bytes int) {
	l.bytes, l.at = bytes, time.Now()
	l.large.Store(bytes > MaxRecordSize)
}

// streamLimit returns the largest record stream takes as far as the
// summary says: its MaxRecordSizeInKiB, or MaxRecordSize where it says
// nothing (a backend that predates the setting).
func streamLimit(sum *types.StreamDescriptionSummary) int {
	if sum == nil || sum.MaxRecordSizeInKiB == nil || *sum.MaxRecordSizeInKiB <= 0 {
		return MaxRecordSize
	}
	return min(int(*sum.MaxRecordSizeInKiB)<<10, MaxLargeRecordSize)
}

func (c *conn) limitOf(stream string) *recordLimit {
	if v, ok := c.limits.Load(stream); ok {
		return v.(*recordLimit)
	}
	v, _ := c.limits.LoadOrStore(stream, new(recordLimit))
	return v.(*recordLimit)
}

// learnLimit caches stream's record size from a summary read elsewhere (a
// subscription's start).
func (c *conn) learnLimit(stream string, sum *types.StreamDescriptionSummary) {
	if sum == nil {
		return
	}
	l := c.limitOf(stream)
	l.mu.Lock()
	l.set(streamLimit(sum))
	l.mu.Unlock()
}

// knownLimit is stream's record size as last learned, MaxRecordSize when
// never learned. It does no I/O.
func (c *conn) knownLimit(stream string) int {
	v, ok := c.limits.Load(stream)
	if !ok {
		return MaxRecordSize
	}
	l := v.(*recordLimit)
	l.mu.Lock()
	defer l.mu.Unlock()
	return max(l.bytes, MaxRecordSize)
}

// checkRecordSize reports a record of n bytes (data plus partition key)
// too large for stream, before any put. A record within MaxRecordSize,
// which every stream takes, costs nothing; a larger one reads the
// stream's MaxRecordSizeInKiB (DescribeStreamSummary, within ctx) unless
// it was learned within limitTTL. Should that read fail (an identity
// allowed to put records but not to describe the stream), the record goes
// to the service, which refuses it if it is too large.
func (c *conn) checkRecordSize(ctx context.Context, stream string, n int) error {
	if n <= MaxRecordSize {
		return nil
	}
	if n > MaxLargeRecordSize {
		return fmt.Errorf("record of %d bytes (data plus partition key) exceeds the %d-byte limit of any stream (MaxRecordSizeInKiB 10240)", n, MaxLargeRecordSize)
	}
	l := c.limitOf(stream)
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.bytes == 0 || l.bytes < n && time.Since(l.at) >= limitTTL {
		dctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		in := &kinesis.DescribeStreamSummaryInput{}
		in.StreamName, in.StreamARN = streamRef(stream)
		out, err := c.client.DescribeStreamSummary(dctx, in)
		cancel()
		if err != nil || out.StreamDescriptionSummary == nil {
			c.logger.Warn("kinesis publish: reading the stream's maximum record size failed; the service decides", "stream", stream, "bytes", n, "err", err)
			return nil
		}
		l.set(streamLimit(out.StreamDescriptionSummary))
	}
	if n > l.bytes {
		return fmt.Errorf("record of %d bytes (data plus partition key) exceeds the %d-byte limit of stream %s (MaxRecordSizeInKiB %d)", n, l.bytes, stream, l.bytes>>10)
	}
	return nil
}
