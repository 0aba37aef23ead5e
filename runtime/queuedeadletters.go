package runtime

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/kinesis"
	"github.com/aws/aws-sdk-go-v2/service/kinesis/types"

	"github.com/kinesisgen/kinesisgen/runtime/kinesisapi"
)

// QueueDeadLetters reaches the built-in dead letters of a Kinesis queue:
// the records its consumers received MaxReceiveCount times without
// acknowledging them. The service keeps them in the queue, out of the
// receive path, until they are acknowledged (discarded) or restored
// (re-driven: received again, their receive count reset).
//
// Receive lists dead letters and holds them in flight for a while, as the
// service hands them out; Acknowledge, Restore and Release act on what
// Receive returned. It is safe for concurrent use.
type QueueDeadLetters struct {
	api kinesisapi.API
	arn string
}

// QueueDeadLetter is one dead letter as Receive returns it.
type QueueDeadLetter struct {
	RecordID       string // the same in every queue of the stream
	PartitionKey   string
	Data           []byte // the record's data as written: a KPL aggregate or an envelope is not decoded
	ReceiveCount   int    // receives before it became a dead letter
	ArrivedAt      time.Time
	FirstReceiveAt time.Time

	receipt string
}

// queueARNForm is the form of a queue ARN.
var queueARNForm = regexp.MustCompile(`^arn:aws[a-z-]*:kinesis:[a-z0-9-]+:[0-9]{12}:queue/\S+$`)

// NewQueueDeadLetters returns the dead letters of the queue queueARN
// names, through client. A malformed ARN is an ErrInvalid error; nothing
// is called until Receive.
func NewQueueDeadLetters(client kinesisapi.API, queueARN string) (*QueueDeadLetters, error) {
	if client == nil {
		return nil, &Error{Kind: ErrInvalid, Op: "queue dead letters", Err: errors.New("no Kinesis client")}
	}
	if !queueARNForm.MatchString(queueARN) {
		return nil, &Error{Kind: ErrInvalid, Op: "queue dead letters", Err: fmt.Errorf("%q is not a queue ARN (arn:aws:kinesis:REGION:ACCOUNT:queue/ID)", queueARN)}
	}
	return &QueueDeadLetters{api: client, arn: queueARN}, nil
}

// QueueDeadLetters returns the dead letters of a queue named by its ARN,
// or by its name in the broker's account (looked up with ListQueues). The
// broker must be connected (ErrNotConnected); a malformed ARN or name is
// an ErrInvalid error before any call; a name no queue has is an ErrStream
// error.
func (b *Broker) QueueDeadLetters(ctx context.Context, queue string) (*QueueDeadLetters, error) {
	c, err := b.connection()
	if err != nil {
		return nil, err
	}
	if strings.HasPrefix(queue, "arn:") {
		return NewQueueDeadLetters(c.client, queue)
	}
	if !validQueueName(queue) {
		return nil, &Error{Kind: ErrInvalid, Op: "queue dead letters", Err: fmt.Errorf("queue name %q: want 1 to 128 of [a-zA-Z0-9_.-], or a queue ARN", queue)}
	}
	in := &kinesis.ListQueuesInput{}
	for {
		out, err := c.client.ListQueues(ctx, in)
		if err != nil {
			return nil, &Error{Kind: ErrStream, Op: "ListQueues", Stream: queue, Err: err}
		}
		for _, q := range out.QueueSummaries {
			if aws.ToString(q.QueueName) == queue {
				return NewQueueDeadLetters(c.client, aws.ToString(q.QueueARN))
			}
		}
		if out.NextToken == nil {
			return nil, &Error{Kind: ErrStream, Op: "queue dead letters", Stream: queue, Err: errors.New("no queue of that name in the account")}
		}
		in.NextToken = out.NextToken
	}
}

// validQueueName tells a queue name, which follows the stream-name rule.
func validQueueName(s string) bool { return validateName("queue", s) == "" }

// ARN is the queue's ARN.
func (d *QueueDeadLetters) ARN() string { return d.arn }

// queueBatch is the service's limit on records per receive and entries
// per batch call.
const queueBatch = 10

// Receive lists up to max dead letters (10 a call, without waiting for
// more to come) and holds them in flight for hold, rounded up to whole
// seconds (0: the queue's visibility timeout), during which no other
// Receive returns them. Acknowledge or Restore them then, or Release them
// to leave them as they were; a dead letter not acted on is listed again
// once hold is over. max must be at least 1 and hold at most 12 hours
// (ErrInvalid).
func (d *QueueDeadLetters) Receive(ctx context.Context, max int, hold time.Duration) ([]QueueDeadLetter, error) {
	if max < 1 {
		return nil, &Error{Kind: ErrInvalid, Op: "receive dead letters", Stream: d.arn, Err: fmt.Errorf("max %d: want at least 1", max)}
	}
	if hold < 0 || hold > 12*time.Hour {
		return nil, &Error{Kind: ErrInvalid, Op: "receive dead letters", Stream: d.arn, Err: fmt.Errorf("hold %v: want 0 to 12h", hold)}
	}
	var vis *int32
	if hold > 0 {
		vis = aws.Int32(int32((hold + time.Second - 1) / time.Second))
	}
	var out []QueueDeadLetter
	for len(out) < max {
		res, err := d.api.ReceiveDeadLetterQueueRecords(ctx, &kinesis.ReceiveDeadLetterQueueRecordsInput{
			QueueARN: &d.arn, Limit: aws.Int32(int32(min(queueBatch, max-len(out)))), VisibilityTimeoutSeconds: vis, WaitTimeSeconds: aws.Int32(0),
		})
		if err != nil {
			return out, &Error{Kind: ErrRead, Op: "ReceiveDeadLetterQueueRecords", Stream: d.arn, Err: err}
		}
		for _, r := range res.QueueRecords {
			out = append(out, QueueDeadLetter{
				RecordID:       aws.ToString(r.RecordId),
				PartitionKey:   aws.ToString(r.PartitionKey),
				Data:           r.Data,
				ReceiveCount:   int(aws.ToInt32(r.ReceiveCount)),
				ArrivedAt:      aws.ToTime(r.ApproximateArrivalTimestamp),
				FirstReceiveAt: aws.ToTime(r.FirstReceiveTimestamp),
				receipt:        aws.ToString(r.ReceiptHandle),
			})
		}
		if len(res.QueueRecords) == 0 {
			break
		}
	}
	return out, nil
}

// Acknowledge discards dead letters Receive returned: the queue forgets
// them (the stream keeps its records for their retention). A letter that
// Receive did not return is an ErrInvalid error before any call. It acts
// on every letter it can, 10 a call, and reports those it could not in
// one error (ErrRead), each with the service's reason: a letter whose hold
// ended and that another Receive took since is refused.
func (d *QueueDeadLetters) Acknowledge(ctx context.Context, letters ...QueueDeadLetter) error {
	type entry = types.AcknowledgeDeadLetterQueueRecordsRequestEntry
	return d.each(ctx, "AcknowledgeDeadLetterQueueRecords", letters, func(ctx context.Context, hs []string) (map[string]string, error) {
		in := &kinesis.AcknowledgeDeadLetterQueueRecordsInput{QueueARN: &d.arn, Entries: receipts(hs, func(h *string) entry { return entry{ReceiptHandle: h} })}
		out, err := d.api.AcknowledgeDeadLetterQueueRecords(ctx, in)
		return failures(out, err, func(out *kinesis.AcknowledgeDeadLetterQueueRecordsOutput, add func(h, code, msg *string)) {
			for _, f := range out.Failed {
				add(f.ReceiptHandle, f.ErrorCode, f.ErrorMessage)
			}
		})
	})
}

// Restore re-drives dead letters Receive returned: they go back to the
// queue's receive path with their receive counts reset, for its
// consumers to receive again (up to MaxReceiveCount times). Failures are
// reported as Acknowledge reports them.
func (d *QueueDeadLetters) Restore(ctx context.Context, letters ...QueueDeadLetter) error {
	type entry = types.RestoreDeadLetterQueueRecordsRequestEntry
	return d.each(ctx, "RestoreDeadLetterQueueRecords", letters, func(ctx context.Context, hs []string) (map[string]string, error) {
		in := &kinesis.RestoreDeadLetterQueueRecordsInput{QueueARN: &d.arn, Entries: receipts(hs, func(h *string) entry { return entry{ReceiptHandle: h} })}
		out, err := d.api.RestoreDeadLetterQueueRecords(ctx, in)
		return failures(out, err, func(out *kinesis.RestoreDeadLetterQueueRecordsOutput, add func(h, code, msg *string)) {
			for _, f := range out.Failed {
				add(f.ReceiptHandle, f.ErrorCode, f.ErrorMessage)
			}
		})
	})
}

// Release ends the hold of dead letters Receive returned, leaving them dead
// letters for the next Receive. Failures are reported as Acknowledge
// reports them.
func (d *QueueDeadLetters) Release(ctx context.Context, letters ...QueueDeadLetter) error {
	type entry = types.UpdateDeadLetterQueueRecordsVisibilityRequestEntry
	return d.each(ctx, "UpdateDeadLetterQueueRecordsVisibility", letters, func(ctx context.Context, hs []string) (map[string]string, error) {
		in := &kinesis.UpdateDeadLetterQueueRecordsVisibilityInput{QueueARN: &d.arn, Entries: receipts(hs, func(h *string) entry { return entry{ReceiptHandle: h, VisibilityTimeoutSeconds: aws.Int32(0)} })}
		out, err := d.api.UpdateDeadLetterQueueRecordsVisibility(ctx, in)
		return failures(out, err, func(out *kinesis.UpdateDeadLetterQueueRecordsVisibilityOutput, add func(h, code, msg *string)) {
			for _, f := range out.Failed {
				add(f.ReceiptHandle, f.ErrorCode, f.ErrorMessage)
			}
		})
	})
}

// receipts is a batch call's request entries, one a receipt handle.
func receipts[E any](hs []string, entry func(h *string) E) []E {
	es := make([]E, len(hs))
	for i := range hs {
		es[i] = entry(&hs[i])
	}
	return es
}

// failures is what a batch call's answer out (or error err) says failed:
// "code: message" by receipt handle, as each lists them.
func failures[O any](out *O, err error, each func(out *O, add func(h, code, msg *string))) (map[string]string, error) {
	if err != nil {
		return nil, err
	}
	failed := map[string]string{}
	each(out, func(h, code, msg *string) { failed[aws.ToString(h)] = aws.ToString(code) + ": " + aws.ToString(msg) })
	return failed, nil
}

// each runs call over the letters' receipt handles, 10 at a time, and
// joins what failed: a failed call fails its whole batch; a failed entry
// is named by its record ID.
func (d *QueueDeadLetters) each(ctx context.Context, op string, letters []QueueDeadLetter, call func(context.Context, []string) (map[string]string, error)) error {
	for _, l := range letters {
		if l.receipt == "" {
			return &Error{Kind: ErrInvalid, Op: op, Stream: d.arn, Err: fmt.Errorf("record %q: not a dead letter Receive returned", l.RecordID)}
		}
	}
	var errs []error
	for start := 0; start < len(letters); start += queueBatch {
		batch := letters[start:min(start+queueBatch, len(letters))]
		hs := make([]string, 0, len(batch))
		ids := map[string]string{}
		for _, l := range batch {
			hs = append(hs, l.receipt)
			ids[l.receipt] = l.RecordID
		}
		failed, err := call(ctx, hs)
		if err != nil {
			errs = append(errs, fmt.Errorf("%d records: %w", len(hs), err))
			continue
		}
		for _, h := range hs {
			if why, ok := failed[h]; ok {
				errs = append(errs, fmt.Errorf("record %s: %s", ids[h], why))
			}
		}
	}
	if len(errs) == 0 {
		return nil
	}
	return &Error{Kind: ErrRead, Op: op, Stream: d.arn, Err: errors.Join(errs...)}
}
