// Package inline is the narrow hook through which runtime/kinesislambda
// runs a broker's mounted subscribers over records that something else has
// read (an AWS Lambda event source mapping), without the runtime's public
// API growing a second way in. Package runtime sets the functions in its
// init; they are nil only if runtime is not linked in, which cannot happen
// for a caller that holds a *runtime.Broker.
package inline

import (
	"context"
	"time"
)

// Record is one user record to handle: a plain Kinesis record, or one
// sub-record of a KPL aggregate (SubSequence its index), or a corrupt
// aggregate whole (the subscriber then rejects it as undecodable).
type Record struct {
	Stream string // for the logs; deliveries name the subscription's

	ShardID        string
	SequenceNumber string
	SubSequence    int64
	PartitionKey   string
	Data           []byte
	ArrivalTime    time.Time
}

// Sub is one mounted subscriber, ready to handle records inline.
type Sub interface {
	// Workers and ByKey are the subscriber's workers= and by_key.
	Workers() int
	ByKey() bool
	// Begin starts an invocation whose handlers run under ctx; its Run is
	// safe for concurrent use.
	Begin(ctx context.Context) Run
}

// Run handles the records of one invocation.
type Run interface {
	// Handle decodes rec and runs the handler (middleware, telemetry,
	// panic recovery), then carries out its outcome as the consumer
	// does: a Retry publishes a copy at the stream's tip, a Reject or an
	// exhausted retry count a dead letter. It reports whether the record
	// is settled; false only when a republish could not be stored before
	// the invocation's context ended.
	Handle(rec Record) (settled bool)
	// End is called once every Handle of the invocation has returned: it
	// ends the invocation's trace (its last batch span).
	End()
}

var (
	// Connect connects broker (a *runtime.Broker) for publishing without
	// starting its subscriptions: nothing polls or takes leases. It is a
	// no-op when the broker is connected already.
	Connect func(ctx context.Context, broker any) error
	// Lookup returns the subscriber mounted on broker for stream; the
	// broker is connected.
	Lookup func(broker any, stream string) (Sub, bool)
	// Streams lists the streams broker's subscribers read.
	Streams func(broker any) []string
)
