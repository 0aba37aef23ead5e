package shard

import (
	"context"
	"errors"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/kinesis/types"
	"github.com/aws/smithy-go"

	"github.com/kinesisgen/kinesisgen/internal/randsrc"
)

// backoff is capped exponential backoff with full jitter: the n-th wait in a
// row is uniform in [0, min(max, base·2^n)], so readers throttled together
// do not retry together.
type backoff struct {
	base, max time.Duration
	n         int
	// site and shard name its jitter draws (randsrc.N) and draws counts
	// them, so that a seeded simulation draws the same waits whatever the
	// order its goroutines run in.
	site, shard string
	draws       uint64
}

func (b *backoff) next() time.Duration {
	d := b.max
	if b.n < 30 {
		if e := b.base << b.n; e > 0 && e < b.max {
			d = e
		}
	}
	b.n++
	b.draws++
	return randsrc.N(d+1, b.site, b.shard, b.draws)
}

func (b *backoff) reset() { b.n = 0 }

// sleep waits d or until ctx ends; it reports whether the full wait passed.
func sleep(ctx context.Context, d time.Duration) bool {
	if d <= 0 {
		return ctx.Err() == nil
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}

// errClass sorts a Kinesis error by what a reader does about it.
type errClass int

const (
	classRetry    errClass = iota // transient (5xx, network): back off, retry
	classThrottle                 // over the shard's budget: back off, retry
	classExpired                  // the iterator expired: get a new one
	classGone                     // the stream or shard is gone
	classFatal                    // the request itself is wrong
)

func classify(err error) errClass {
	var (
		expired     *types.ExpiredIteratorException
		throughput  *types.ProvisionedThroughputExceededException
		limit       *types.LimitExceededException
		kmsThrottle *types.KMSThrottlingException
		notFound    *types.ResourceNotFoundException
		invalid     *types.InvalidArgumentException
	)
	switch {
	case errors.As(err, &expired):
		return classExpired
	case errors.As(err, &throughput), errors.As(err, &limit), errors.As(err, &kmsThrottle):
		return classThrottle
	case errors.As(err, &notFound):
		return classGone
	case errors.As(err, &invalid):
		return classFatal
	}
	var ae smithy.APIError
	if errors.As(err, &ae) {
		switch ae.ErrorCode() {
		case "ExpiredIteratorException":
			return classExpired
		case "ProvisionedThroughputExceededException", "LimitExceededException", "ThrottlingException", "KMSThrottlingException":
			return classThrottle
		}
	}
	return classRetry
}

// passing reports whether a failed lease pass may succeed if run again
// soon: a call past its own deadline, throttled, or failed by the server.
func passing(err error) bool {
	if errors.Is(err, context.DeadlineExceeded) || classify(err) == classThrottle {
		return true
	}
	var ae smithy.APIError
	if errors.As(err, &ae) {
		switch ae.ErrorCode() {
		case "RequestLimitExceeded", "ThrottlingException", "InternalServerError", "ServiceUnavailable":
			return true
		}
		return ae.ErrorFault() == smithy.FaultServer
	}
	return false
}

// accessDenied reports whether err is a refusal for want of permission.
func accessDenied(err error) bool {
	var ae smithy.APIError
	return errors.As(err, &ae) && (ae.ErrorCode() == "AccessDeniedException" || ae.ErrorCode() == "AccessDenied")
}
