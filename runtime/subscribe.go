package runtime

// OWNER: consume-side helper (issue 3). Contract skeleton; fill in.

import (
	"context"
	"time"

	"github.com/kinesisgen/kinesisgen/runtime/shard"
)

// Position is where a subscription starts or seeks to.
type Position = shard.Position

func Horizon() Position           { return Position{Kind: shard.Horizon} }
func Latest() Position            { return Position{Kind: shard.Latest} }
func AtTime(t time.Time) Position { return Position{Kind: shard.AtTimestamp, Time: t} }
func AtSequence(shardID, seq string) Position {
	return Position{Kind: shard.AtSequence, ShardID: shardID, Sequence: seq}
}

// Delivery describes the record a handler is given.
type Delivery struct {
	Stream         string
	ShardID        string
	SequenceNumber string
	PartitionKey   string
	ArrivalTime    time.Time
	Attempt        int     // 1 on first delivery; retry copies count up
	Headers        Headers // user headers plus PartitionKeyHeader
}

// Outcome is what a handler decided about a delivery.
type Outcome struct {
	kind outcomeKind
	err  error
}

type outcomeKind uint8

const (
	outcomeAck outcomeKind = iota
	outcomeRetry
	outcomeReject
)

func Ack() Outcome             { return Outcome{kind: outcomeAck} }
func Retry() Outcome           { return Outcome{kind: outcomeRetry} }
func Reject(err error) Outcome { return Outcome{kind: outcomeReject, err: err} }

// OutcomeOf maps a handler's error to an outcome: nil acks, non-nil retries.
func OutcomeOf(err error) Outcome {
	if err == nil {
		return Ack()
	}
	return Outcome{kind: outcomeRetry, err: err}
}

// Handler handles one decoded message.
type Handler[M any] func(ctx context.Context, msg M, d Delivery) Outcome

// SubscribeOption sets one subscriber setting (the keys of //kinesis:subscriber).
type SubscribeOption func(*subscribeSettings)

type subscribeSettings struct{}

// The options below mirror the keys of //kinesis:subscriber one to one;
// generated Mount functions call them.

func CreateIfMissing(shards int32) SubscribeOption { panic("TODO issue 3") } // create_if_missing=SHARDS
func Workers(n int) SubscribeOption                { panic("TODO issue 3") } // workers=N
func ByKey() SubscribeOption                       { panic("TODO issue 3") } // by_key
func StartAt(p Position) SubscribeOption           { panic("TODO issue 3") } // start_at=
func BatchSize(n int32) SubscribeOption            { panic("TODO issue 3") } // batch=N
func PollInterval(d time.Duration) SubscribeOption { panic("TODO issue 3") } // poll=DURATION
func MaxRetries(n int) SubscribeOption             { panic("TODO issue 3") } // retries=N
func DeadLetter(stream string) SubscribeOption     { panic("TODO issue 3") } // dead_letter=STREAM
func HandlerName(name string) SubscribeOption      { panic("TODO issue 3") } // for logs: "pkg.Func"

// ReplyOutcome publishes a handler's reply (when err is nil) and maps the
// result to an outcome: a failed handler or a failed publish retries.
func ReplyOutcome[Y any](ctx context.Context, p Publisher[Y], reply Y, err error) Outcome {
	panic("TODO issue 3")
}

// Subscription is a running (or registered) subscription: its seek handle and stop.
type Subscription struct{}

// Subscribe registers h on stream. Before Connect it is started by Connect;
// after Connect it starts at once and returns when every owned shard has its
// first iterator. The settings are validated before any I/O.
func Subscribe[M any](b *Broker, stream string, h Handler[M], opts ...SubscribeOption) (*Subscription, error) {
	panic("TODO issue 3")
}

// startRegistered starts every registered subscription; Connect calls it.
func (b *Broker) startRegistered(ctx context.Context, c *conn) error { panic("TODO issue 3") }

// stopSubscriptions stops fetching, lets lanes finish, checkpoints and
// releases leases; Shutdown calls it before marking the connection closed.
func (b *Broker) stopSubscriptions(ctx context.Context) error { panic("TODO issue 3") }
