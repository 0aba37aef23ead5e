package annotations

import (
	"go/token"
	"strconv"
	"time"
)

// The doc comments of the two marker types and of their fields are the
// reference that `kinesisgen -help` prints (see Help); the `marker` tag of a
// field is its key, `meta` the placeholder of its value, `min`/`max` the
// bounds of a number.

// Message binds a struct type to a Kinesis stream:
//
//	//kinesis:message stream=NAME [headers=TYPE] [partition_key=KEY] [aggregate] [shared]
//
// It goes in the doc comment of a struct type declaration. kinesisgen writes
// NewXPublisher(b, opts...) for it, where X is the type's name.
//
// A publish takes its partition key from the first of: (1) the
// PartitionKey(k) step; (2) the partition-key header (a header contract
// field tagged kinesis:"partition-key"); (3) the mount-site key,
// partition_key= on this marker, or on the subscriber for its replies;
// (4) inside a handler, the key of the record being handled, so a reply or
// a publish with the handler's ctx keeps the key's order; (5) a
// process-unique key. A key that is given but empty is an error.
//
// The message's own fields never key its publish nor travel as headers: a
// kinesis:"..." tag on one is an error, unless the marker says headers=X
// with X the message type itself (then publish with .Headers(msg)). To key
// by a field, publish with pub.Message(msg).PartitionKey(msg.Field).
type Message struct {
	Pos    token.Position            // where the marker starts
	KeyPos map[string]token.Position // where each key given starts, by key

	// Stream is the stream that messages of this type are published to.
	// Stream names are 1 to 128 characters of letters, digits, '_', '-' and '.'.
	Stream string `marker:"stream,required" meta:"NAME"`

	// Headers names the header contract (a struct type of the same package
	// with `kinesis:"HEADER"` field tags) that messages of this type carry.
	// Handlers of this message that take a headers parameter must take this type.
	Headers string `marker:"headers" meta:"TYPE"`

	// PartitionKey is the key a publisher of this type uses when neither the
	// publish nor its partition-key header names one (rung 3 of the key
	// ladder); it overrides the key a publish from inside a handler would
	// inherit from the record being handled (rung 4). 1 to 256 UTF-16 units, as the service counts: a character
	// outside the Basic Multilingual Plane (most emoji) counts two.
	PartitionKey string `marker:"partition_key" meta:"KEY"`

	// Aggregate packs the messages that publishers of this type send into
	// KPL-aggregated records (the Java KPL's format, read by every KCL):
	// many messages per Kinesis record, fewer records and PUT payload
	// units. An aggregate holds only messages whose keys map to one shard
	// and is put on that shard, so each message is read on its own key's
	// shard, under its own key, in its key's order. Publishing code does not
	// change; runtime.WithAggregation on a publisher sets the size and
	// linger bounds (or turns aggregation on for a publisher of a type
	// without this flag), runtime.WithoutAggregation turns it off for one.
	Aggregate bool `marker:"aggregate,flag"`

	// Shared says that other message types are published to this stream
	// too, on purpose. Without it two //kinesis:message types on one
	// stream (of one package, or of two packages of one run) are an error,
	// as a subscriber decodes every record of its stream as one type: mark
	// each of them shared, and read the stream with a type that accepts them
	// all, or with runtime.RawRecord.
	Shared bool `marker:"shared,flag"`
}

// Subscriber mounts a function or method as the handler of a stream:
//
//	//kinesis:subscriber stream=NAME [create_if_missing=SHARDS|on_demand] [max_record_size=KiB] [workers=N] [by_key] [reply] [partition_key=KEY] [start_at=horizon|latest|RFC3339] [batch=N] [poll=DURATION] [fanout=NAME] [queue=QUEUE [visibility=DURATION] [max_receives=N]] [retries=N] [retry=tip|in_place] [dead_letter=STREAM]
//
// It goes in the doc comment of a function or method with the shape
//
//	func Name(ctx context.Context, msg M, [headers H,] [out runtime.Publisher[X], ...] [d runtime.Delivery]) R
//
// where M is a struct type (the stream's //kinesis:message, if it has one),
// or runtime.RawRecord to receive every record undecoded (its bytes, key and
// headers: a dead-letter reader); H is a header contract; each
// runtime.Publisher[X] is a publisher of a //kinesis:message type X; and R
// is runtime.Outcome, error (nil acks, non-nil retries; one wrapped in
// runtime.Permanent rejects at once), or, with reply, a message type Y or
// (Y, error). The generated Mount registers it. A method
// works too: Mount then takes one receiver per receiver type, after b,
// sorted by type name and named after it (methods of *Service and *Ledger
// give Mount(b *runtime.Broker, ledger *Ledger, service *Service)); a nil
// receiver is a runtime.ErrInvalid error.
type Subscriber struct {
	Pos    token.Position            // where the marker starts
	KeyPos map[string]token.Position // where each key given starts, by key

	// Stream is the stream the handler reads. A stream has one subscriber per package.
	Stream string `marker:"stream,required" meta:"NAME"`

	// CreateIfMissing creates the stream when it does not exist, with this
	// many shards (and a missing dead_letter stream with one shard), or, with
	// create_if_missing=on_demand, in on-demand capacity mode (no shard
	// count: the service scales it; a missing dead_letter stream likewise).
	// Without it a missing stream is an error.
	CreateIfMissing CreateIfMissing `marker:"create_if_missing" meta:"SHARDS|on_demand" min:"1" max:"100000"`

	// MaxRecordSize is the MaxRecordSizeInKiB of the streams
	// create_if_missing creates (the stream and its dead_letter stream):
	// records of up to this many KiB, 1024 (the service's default) to
	// 10240. Needs create_if_missing; an existing stream keeps its own.
	MaxRecordSize int32 `marker:"max_record_size" meta:"KiB" min:"1024" max:"10240"`

	// Workers runs up to N deliveries at once (default 1, at most 1024).
	Workers int `marker:"workers" meta:"N" min:"1" max:"1024"`

	// ByKey makes the workers N lanes: deliveries of one partition key run
	// one after another on one lane. Needs workers.
	ByKey bool `marker:"by_key,flag"`

	// Reply publishes the handler's returned message to the stream of that
	// message type, under the key of the record it answers unless
	// partition_key names one. The handler must return a message type Y or
	// (Y, error).
	Reply bool `marker:"reply,flag"`

	// PartitionKey is the key of every reply (the mount-site key). Needs
	// reply. Without it a reply goes under the key of the record it answers
	// (unless it names its own), which keeps each key's order through a
	// pipeline; one constant key puts every reply on one shard.
	PartitionKey string `marker:"partition_key" meta:"KEY"`

	// StartAt is where a shard without a checkpoint starts: horizon (the
	// oldest record kept), latest (the default), or an RFC 3339 time.
	StartAt StartAt `marker:"start_at" meta:"horizon|latest|RFC3339"`

	// Batch bounds one GetRecords read, 1 to 10000: that many records, or
	// on a stream of KPL aggregates as many aggregates as hold about that
	// many messages (runtime.BatchSize).
	Batch int32 `marker:"batch" meta:"N" min:"1" max:"10000"`

	// Poll is how long a reader waits after an empty read, a Go duration
	// such as 500ms or 2s; at least 200ms, the service's read budget of five
	// reads per shard per second.
	Poll time.Duration `marker:"poll" meta:"DURATION"`

	// Fanout reads the stream by enhanced fan-out through the stream
	// consumer NAME (1 to 128 letters, digits, '_', '-' and '.'): Kinesis
	// pushes each shard's records to it over HTTP/2 (SubscribeToShard), at
	// about 70 ms and 2 MB/s per shard of its own, instead of the
	// subscriber polling GetRecords. The consumer must be registered on the
	// stream, unless create_if_missing is set: then a missing one is
	// registered. The runtime never deregisters it (it costs per shard hour
	// while it exists). Excludes poll and batch.
	Fanout string `marker:"fanout" meta:"NAME"`

	// Queue reads the stream through the Kinesis queue QUEUE (a name of 1
	// to 128 letters, digits, '_', '-' and '.', or the queue's ARN) instead
	// of its shards: any number of instances share its records, each
	// acknowledged on its own, in no order, and no lease store is used. Ack
	// acknowledges (batched); Retry makes the record visible again after a
	// backoff, the queue's receive count being the attempt; Reject and
	// exhausted retries go to dead_letter, or without one to the queue's own
	// dead letters (runtime.Broker.QueueDeadLetters). The stream must be
	// on-demand; a missing queue is created with create_if_missing=on_demand
	// (start_at=horizon makes it start at the oldest record). Excludes
	// by_key (a queue keeps no order), fanout, poll and batch.
	Queue string `marker:"queue" meta:"QUEUE"`

	// Visibility is how long a received record stays hidden from other
	// receivers: whole seconds, 1s to 12h (default: the queue's own, 30s
	// for a queue created here). The runtime extends it while the record
	// is handled, up to 12h. Needs queue.
	Visibility time.Duration `marker:"visibility" meta:"DURATION"`

	// MaxReceives is the MaxReceiveCount of a queue create_if_missing
	// creates: a record received this many times without an
	// acknowledgement becomes one of its dead letters (1 to 1000; the
	// service's default is 6). An existing queue keeps its own. Needs queue.
	MaxReceives int `marker:"max_receives" meta:"N" min:"1" max:"1000"`

	// Retries bounds the retries of one record (default 3; 0: none, a
	// retry rejects at once); a record that exhausts them is handled like
	// a rejected one.
	Retries *int `marker:"retries" meta:"N" min:"0" max:"1000000"`

	// Retry is how a record is retried: tip (the default) publishes a copy
	// at the stream's tip and moves on, so the copy loses its place among
	// its key's records; in_place backs off in the lane and handles the
	// record again (Delivery.Attempt counting up), its key's later records
	// waiting: pick it with by_key when a key's order matters. Its backoff
	// is exponential with jitter, 0.1-0.2 s at first, doubling up to 5-10 s;
	// without by_key the record holds its worker meanwhile; a shutdown or a
	// lost lease during it leaves the record to the shard's next owner
	// (which counts attempts from 1 again). Both kinds stop after retries.
	Retry string `marker:"retry" meta:"tip|in_place"`

	// DeadLetter is the stream rejected records and records out of retries
	// go to; without it they are logged and checkpointed past. It must
	// exist, unless create_if_missing is set.
	DeadLetter string `marker:"dead_letter" meta:"STREAM"`
}

// CreateIfMissing is the value of create_if_missing: a shard count, or
// on_demand. The zero value is "not given".
type CreateIfMissing struct {
	Shards   int32 // provisioned mode with this many shards
	OnDemand bool  // on-demand mode
}

// Set reports whether create_if_missing was given.
func (c CreateIfMissing) Set() bool { return c.Shards > 0 || c.OnDemand }

// String is the value as written in a marker.
func (c CreateIfMissing) String() string {
	if c.OnDemand {
		return OnDemand
	}
	return strconv.Itoa(int(c.Shards))
}

// OnDemand is the create_if_missing value of an on-demand stream.
const OnDemand = "on_demand"

// StartKind is the kind of a start_at position.
type StartKind uint8

const (
	StartUnset   StartKind = iota // start_at not given: the runtime's default
	StartHorizon                  // start_at=horizon
	StartLatest                   // start_at=latest
	StartAtTime                   // start_at=RFC3339
)

// StartAt is the value of start_at.
type StartAt struct {
	Kind StartKind
	Time time.Time // StartAtTime
}
