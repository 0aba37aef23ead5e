package runtime

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/kinesis"
	"github.com/aws/aws-sdk-go-v2/service/kinesis/types"

	"github.com/kinesisgen/kinesisgen/internal/rules"
)

// createWait bounds the wait for a stream (or a fan-out consumer) to
// become active. A variable only so that tests can shorten it.
var createWait = time.Minute

// ensureStream checks that stream exists, creating it as create says when
// it is missing (and create is enabled), and waits (up to a minute,
// bounded by ctx) until it can be read. fresh reports a stream that was
// created just now (by this call, or found still being created): nothing
// in it predates the caller. sum is the stream's summary once readable.
func ensureStream(ctx context.Context, c *conn, stream string, create creation, log *slog.Logger) (fresh bool, sum *types.StreamDescriptionSummary, err error) {
	sum, err = describeSummary(ctx, c, stream)
	var status types.StreamStatus
	if err == nil {
		status = sum.StreamStatus
	}
	switch {
	case err == nil && readable(status):
		return false, sum, nil
	case err == nil && status == types.StreamStatusDeleting:
		return false, nil, &Error{Kind: ErrStream, Op: "DescribeStreamSummary", Stream: stream, Err: errors.New("stream is being deleted")}
	case err == nil: // CREATING
	case !isNotFound(err):
		// A refused connection or a failed lookup says nothing about the stream.
		return false, nil, &Error{Kind: kindOr(ErrStream, err), Op: "DescribeStreamSummary", Stream: stream, Err: err}
	case !create.enabled():
		return false, nil, &Error{Kind: ErrStream, Op: "DescribeStreamSummary", Stream: stream, Err: fmt.Errorf("stream does not exist: %w", err)}
	case rules.IsARN(stream):
		// CreateStream takes a name, of the caller's own account.
		return false, nil, &Error{Kind: ErrStream, Op: "DescribeStreamSummary", Stream: stream, Err: fmt.Errorf("stream does not exist, and a stream named by ARN is never created (it may be another account's): %w", err)}
	default:
		in := &kinesis.CreateStreamInput{StreamName: &stream}
		if create.maxKiB != 0 {
			in.MaxRecordSizeInKiB = &create.maxKiB
		}
		if create.onDemand {
			in.StreamModeDetails = &types.StreamModeDetails{StreamMode: types.StreamModeOnDemand}
		} else {
			in.ShardCount = &create.shards
		}
		_, err := c.client.CreateStream(ctx, in)
		var inUse *types.ResourceInUseException
		if err != nil && !errors.As(err, &inUse) { // in use: someone else created it first
			return false, nil, &Error{Kind: kindOr(ErrStream, err), Op: "CreateStream", Stream: stream, Err: err}
		}
		switch {
		case err != nil:
			// Two instances starting together both find the stream
			// missing; only one CreateStream succeeds.
			log.Info("stream created by another instance")
		case create.onDemand:
			log.Info("stream created", "mode", "on-demand")
		default:
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
			return false, nil, &Error{Kind: ErrStream, Op: "CreateStream", Stream: stream, Err: fmt.Errorf("stream not active: %w", wctx.Err())}
		case <-t.C:
		}
		backoff = min(2*backoff, time.Second)
		sum, err := describeSummary(wctx, c, stream)
		switch {
		case err == nil && readable(sum.StreamStatus):
			return true, sum, nil
		case err == nil && sum.StreamStatus == types.StreamStatusDeleting:
			return false, nil, &Error{Kind: ErrStream, Op: "DescribeStreamSummary", Stream: stream, Err: errors.New("stream is being deleted")}
		case err != nil && !isNotFound(err) && wctx.Err() == nil:
			// Just after CreateStream a stream may read as missing for a moment;
			// any other error ends the wait.
			return false, nil, &Error{Kind: kindOr(ErrStream, err), Op: "DescribeStreamSummary", Stream: stream, Err: err}
		}
	}
}

func describeSummary(ctx context.Context, c *conn, stream string) (*types.StreamDescriptionSummary, error) {
	in := &kinesis.DescribeStreamSummaryInput{}
	in.StreamName, in.StreamARN = streamRef(stream)
	out, err := c.client.DescribeStreamSummary(ctx, in)
	if err != nil {
		return nil, err
	}
	if out.StreamDescriptionSummary == nil {
		return nil, errors.New("DescribeStreamSummary returned no summary")
	}
	return out.StreamDescriptionSummary, nil
}

// autoDistribution reports whether sum is of an AUTO stream: the service
// places its records on any shard, whatever their keys.
func autoDistribution(sum *types.StreamDescriptionSummary) bool {
	return sum != nil && sum.RecordDistributionStrategy == types.RecordDistributionStrategyAuto
}

// readable: an UPDATING stream (resharding) serves reads and writes.
func readable(s types.StreamStatus) bool {
	return s == types.StreamStatusActive || s == types.StreamStatusUpdating
}

func isNotFound(err error) bool {
	var nf *types.ResourceNotFoundException
	return errors.As(err, &nf)
}

// ensureConsumer finds the stream consumer name of stream and returns its
// ARN once it is ACTIVE. A missing one is registered when create is set,
// and an ErrStream error naming stream and consumer otherwise. Instances
// that register one name at once all end on the one consumer: whoever's
// RegisterStreamConsumer is refused as in use waits for the winner's. The
// wait is bounded by a minute (and ctx). A consumer being deleted is
// waited out and registered again only with create.
func ensureConsumer(ctx context.Context, c *conn, stream, name string, create bool, log *slog.Logger) (string, error) {
	api := c.client
	streamErr := func(op string, err error) error {
		return &Error{Kind: kindOr(ErrStream, err), Op: op, Stream: stream, Err: fmt.Errorf("stream consumer %s: %w", name, err)}
	}
	in := &kinesis.DescribeStreamSummaryInput{}
	in.StreamName, in.StreamARN = streamRef(stream)
	sum, err := c.client.DescribeStreamSummary(ctx, in)
	if err != nil {
		return "", streamErr("DescribeStreamSummary", err)
	}
	if sum.StreamDescriptionSummary == nil || sum.StreamDescriptionSummary.StreamARN == nil {
		return "", streamErr("DescribeStreamSummary", errors.New("the answer names no stream ARN"))
	}
	streamARN := sum.StreamDescriptionSummary.StreamARN

	wctx, cancel := context.WithTimeout(ctx, createWait)
	defer cancel()
	backoff := 20 * time.Millisecond
	registered := false
	var last error // a refusal being retried
	for {
		out, err := api.DescribeStreamConsumer(wctx, &kinesis.DescribeStreamConsumerInput{StreamARN: streamARN, ConsumerName: &name})
		var status types.ConsumerStatus
		if err == nil {
			if out.ConsumerDescription == nil || out.ConsumerDescription.ConsumerARN == nil {
				return "", streamErr("DescribeStreamConsumer", errors.New("the answer describes no consumer"))
			}
			status = out.ConsumerDescription.ConsumerStatus
		}
		switch {
		case err == nil && status == types.ConsumerStatusActive:
			return *out.ConsumerDescription.ConsumerARN, nil
		case err == nil && status == types.ConsumerStatusDeleting && !create:
			return "", &Error{Kind: ErrStream, Op: "DescribeStreamConsumer", Stream: stream, Err: fmt.Errorf("stream consumer %s is being deleted", name)}
		case err == nil: // CREATING, or DELETING to be registered again
		case wctx.Err() != nil:
			return "", streamErr("DescribeStreamConsumer", fmt.Errorf("not active: %w", errors.Join(wctx.Err(), last)))
		case !isNotFound(err):
			return "", streamErr("DescribeStreamConsumer", err)
		case !create:
			return "", &Error{Kind: ErrStream, Op: "DescribeStreamConsumer", Stream: stream,
				Err: fmt.Errorf("stream consumer %s is not registered on stream %s (register it, or set create_if_missing): %w", name, stream, err)}
		default:
			_, rerr := api.RegisterStreamConsumer(wctx, &kinesis.RegisterStreamConsumerInput{StreamARN: streamARN, ConsumerName: &name})
			var inUse *types.ResourceInUseException
			var limit *types.LimitExceededException
			switch {
			case rerr == nil:
				if !registered {
					log.Info("stream consumer registered", "consumer", name)
				}
				registered = true
			case errors.As(rerr, &inUse): // another instance registered it first
			case errors.As(rerr, &limit) && wctx.Err() == nil:
				// The call rate (or, for good, the stream's consumer
				// count): retried until the wait ends, then reported.
				last = rerr
			default:
				return "", streamErr("RegisterStreamConsumer", rerr)
			}
		}
		t := time.NewTimer(backoff)
		select {
		case <-wctx.Done():
			t.Stop()
			return "", streamErr("DescribeStreamConsumer", fmt.Errorf("not active: %w", errors.Join(wctx.Err(), last)))
		case <-t.C:
		}
		backoff = min(2*backoff, time.Second)
	}
}

// ensureSource checks the regions of the stream and the dead-letter
// stream, and checks (or creates) the stream.
func (s *Subscription) ensureSource(ctx context.Context, c *conn, log *slog.Logger) (fresh bool, sum *types.StreamDescriptionSummary, err error) {
	for _, stream := range []string{s.stream, s.set.deadLetter} {
		if err := c.checkRegion(stream); err != nil {
			return false, nil, &Error{Kind: ErrInvalid, Op: "subscribe", Stream: stream, Err: err}
		}
	}
	fresh, sum, err = ensureStream(ctx, c, s.stream, s.set.create, log)
	if err != nil {
		return false, nil, err
	}
	// Retry copies go back to the stream, up to its record size.
	c.learnLimit(s.stream, sum)
	return fresh, sum, nil
}

// ensureDeadLetter checks (or creates) the dead-letter stream, if any.
func (s *Subscription) ensureDeadLetter(ctx context.Context, c *conn) error {
	dl := s.set.deadLetter
	if dl == "" {
		return nil
	}
	// With create_if_missing a missing dead-letter stream is created too,
	// with one shard (it carries the few records handlers give up), or on
	// demand like the stream.
	create := s.set.create
	if create.shards > 0 {
		create.shards = 1
	}
	// Logged under its own name: s.log names the subscription's stream.
	dlLog := s.b.s.cfg.logger.With("stream", dl, "owner", c.owner, "dead_letter_of", s.stream)
	_, dlSum, err := ensureStream(ctx, c, dl, create, dlLog)
	if err != nil {
		return err
	}
	// A dead letter is cut to the dead-letter stream's record size.
	c.learnLimit(dl, dlSum)
	return nil
}
