package runtime

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/kinesis"
	"github.com/aws/aws-sdk-go-v2/service/kinesis/types"
)

// createWait bounds the wait for a stream to become active.
const createWait = time.Minute

// ensureStream checks that stream exists, creating it as create says when
// it is missing (and create is enabled), and waits (up to a minute,
// bounded by ctx) until it can be read. fresh reports a stream that was
// created just now (by this call, or found still being created): nothing
// in it predates the caller.
func ensureStream(ctx context.Context, c *conn, stream string, create creation, log *slog.Logger) (fresh bool, err error) {
	status, err := describeStatus(ctx, c, stream)
	switch {
	case err == nil && readable(status):
		return false, nil
	case err == nil && status == types.StreamStatusDeleting:
		return false, &Error{Kind: ErrStream, Op: "DescribeStreamSummary", Stream: stream, Err: errors.New("stream is being deleted")}
	case err == nil: // CREATING
	case !isNotFound(err):
		// A refused connection or a failed lookup says nothing about the stream.
		return false, &Error{Kind: kindOr(ErrStream, err), Op: "DescribeStreamSummary", Stream: stream, Err: err}
	case !create.enabled():
		return false, &Error{Kind: ErrStream, Op: "DescribeStreamSummary", Stream: stream, Err: fmt.Errorf("stream does not exist: %w", err)}
	default:
		in := &kinesis.CreateStreamInput{StreamName: &stream}
		if create.onDemand {
			in.StreamModeDetails = &types.StreamModeDetails{StreamMode: types.StreamModeOnDemand}
		} else {
			in.ShardCount = &create.shards
		}
		_, err := c.client.CreateStream(ctx, in)
		var inUse *types.ResourceInUseException
		if err != nil && !errors.As(err, &inUse) { // in use: someone else created it first
			return false, &Error{Kind: kindOr(ErrStream, err), Op: "CreateStream", Stream: stream, Err: err}
		}
		if create.onDemand {
			log.Info("stream created", "mode", "on-demand")
		} else {
			log.Info("stream created", "shards", create.shards)
		}
	}

	wctx, cancel := context.WithTimeout(ctx, createWait)
	defer cancel()
	backoff := 20 * time.Millisecond
	for {
		t := time.NewTimer(backoff)
		select {
		case <-wctx.Done():
			t.Stop()
			return false, &Error{Kind: ErrStream, Op: "CreateStream", Stream: stream, Err: fmt.Errorf("stream not active: %w", wctx.Err())}
		case <-t.C:
		}
		backoff = min(2*backoff, time.Second)
		status, err := describeStatus(wctx, c, stream)
		switch {
		case err == nil && readable(status):
			return true, nil
		case err == nil && status == types.StreamStatusDeleting:
			return false, &Error{Kind: ErrStream, Op: "DescribeStreamSummary", Stream: stream, Err: errors.New("stream is being deleted")}
		case err != nil && !isNotFound(err) && wctx.Err() == nil:
			// Just after CreateStream a stream may read as missing for a moment;
			// any other error ends the wait.
			return false, &Error{Kind: kindOr(ErrStream, err), Op: "DescribeStreamSummary", Stream: stream, Err: err}
		}
	}
}

func describeStatus(ctx context.Context, c *conn, stream string) (types.StreamStatus, error) {
	out, err := c.client.DescribeStreamSummary(ctx, &kinesis.DescribeStreamSummaryInput{StreamName: &stream})
	if err != nil {
		return "", err
	}
	if out.StreamDescriptionSummary == nil {
		return "", errors.New("DescribeStreamSummary returned no summary")
	}
	return out.StreamDescriptionSummary.StreamStatus, nil
}

// readable: an UPDATING stream (resharding) serves reads and writes.
func readable(s types.StreamStatus) bool {
	return s == types.StreamStatusActive || s == types.StreamStatusUpdating
}

func isNotFound(err error) bool {
	var nf *types.ResourceNotFoundException
	return errors.As(err, &nf)
}
