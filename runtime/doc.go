// Package runtime is what a kinesisgen application runs on: the Broker that
// owns the connection to Kinesis, typed publishers, subscriptions with their
// outcomes and worker lanes, and the record envelope. The generated
// kinesis_gen.go of each package calls it, and so does the application.
//
// # Start here
//
// An application makes a broker, mounts the handlers of its packages (the
// generated Mount), runs the broker and publishes with the generated
// publishers:
//
//	b := runtime.NewBroker(runtime.WithRegion("eu-west-1")) // no I/O yet; NewBrokerFromConfig(awsCfg) takes an aws.Config
//	if err := orders.Mount(b, &orders.Service{}); err != nil {
//		return err
//	}
//	errc := make(chan error, 1)
//	go func() { errc <- b.Run(ctx) }() // connect, serve until ctx ends (or a stream is deleted), shut down
//	select {
//	case <-b.Ready(): // every subscription reads its shards
//	case err := <-errc:
//		return err
//	}
//	err := orders.NewOrderPublisher(b).Message(order).PartitionKey(order.Customer).Publish(ctx)
//
// Connect and Shutdown do Run's two halves separately; in tests
// kinesistest.NewBroker gives the same broker on an in-process Kinesis.
// Options (WithEndpoint, WithLeaseStore, WithApplication, WithLogger, ...)
// configure the broker. Without WithLogger the broker logs its warnings and
// errors (a dead letter, a record checkpointed past, a lost lease, a failing
// call being retried) to slog.Default(); WithLogger replaces that.
//
// A handler returns Ack, Retry, Reject(err), or OutcomeOf(err); a Delivery
// parameter describes the record. Subscribe mounts a handler without a
// marker, and a handler of RawRecord gets every record undecoded (a
// dead-letter reader). A record given up always reaches the dead-letter
// stream when one is set: under a key derived from its own when that one
// cannot be published (OriginPartitionKeyHeader), with its payload cut to
// the service's limit when the dead-letter headers do not fit beside it
// (TruncatedFromHeader); RawRecord.DeadLetter reads both. In every lane
// mode a shard hands out at most 256 records per worker past its oldest
// unsettled one, so a stuck handler pauses its shard's reader. Every error
// matches one of the Err* sentinels with
// errors.Is, and *Error says which stream and shard it concerns. An error
// whose cause is a credential the SDK could not get, or an identity or
// permission the service refused, matches ErrAccess besides its own kind;
// a publish that failed after an attempt whose outcome is unknown (the
// record may be stored) matches ErrMayBeStored.
//
// # For generated code
//
// NewPublisher with PublisherSpec and the PublishOptions (WithPartitionKey,
// WithStream, WithAggregation); the SubscribeOptions, one per key of //kinesis:subscriber
// (CreateIfMissing, CreateOnDemandIfMissing, Workers, ByKey, StartAt,
// BatchSize, PollInterval, MaxRetries (default 3), RetryAtTip, RetryInPlace,
// DeadLetter, FanOut) and HandlerName;
// ReplyOutcome; HeaderEncoder and HeaderDecoder; and
// SupportPackageIsVersion1 are what kinesis_gen.go calls. An application
// may call them too (to publish or subscribe without markers), but a marker
// says the same more briefly.
//
// # Publishing
//
// A publish resolves its partition key by the key ladder (the PartitionKey
// step, the partition-key header, the mount-site key, inside a handler the
// key of the record being handled, a process-unique key); a key that is
// given but empty is an error. It checks the key (1 to 256 UTF-16 units of
// valid UTF-8, the service's count), the headers and the record's size
// (the stream's MaxRecordSizeInKiB of data plus key, 1 MiB where the stream
// names none) before any I/O, and waits for its own result.
// Concurrent publishes to one stream share PutRecords calls: a
// call starts at once when none is in flight or one has just returned, and
// otherwise when 500 records or 5 MiB (10 MiB on a stream that takes
// records over 1 MiB) are ready or after a linger of a
// millisecond (WithPublishLinger); up to four calls per stream run at once
// (WithPublishConcurrency). Entries the service refuses with a retryable
// code (throttling, internal failure) are retried with capped exponential
// backoff and jitter until they succeed or their caller's context ends;
// nothing is dropped silently. A call that gets no answer within
// WithPublishCallTimeout (10 s) is retried too: the service may have stored
// its records, so they may be stored twice, and its keys move on. A
// publish whose context ends while its record
// is in a call returns an ErrPublish error saying the record may have been
// written. After Shutdown, queued publishes fail with ErrNotConnected.
// PublishAll submits many messages at once, so that a single goroutine can
// keep whole calls busy without a goroutine per record; SendAll does the
// same for messages built with their own keys and headers, and StartAll
// submits such a batch without waiting for it (Pending.Wait does), so one
// goroutine can keep a batch on its way while it builds the next.
//
// Order: records of one partition key are stored in the order their
// publishes were submitted, even when one of them is retried. PutRecords
// does not order the entries of one request, so at most one record per key
// is unresolved at any time and a key's later records wait for it; a hot
// key therefore gets one record per round trip. Records with a
// process-unique key have no order to keep and are never held back. Records
// published from concurrent goroutines have no submit order between them.
//
// Aggregation: a publisher with PublisherSpec.Aggregate (the aggregate key of
// //kinesis:message) or WithAggregation packs its messages into KPL
// aggregates, one open shard's messages per aggregate, put on that shard by
// ExplicitHashKey while each message keeps its own partition key; a key's
// messages are in at most one unresolved aggregate at a time, so its order
// holds as above. See Aggregation.
package runtime

// SupportPackageIsVersion1 is referenced by generated code (only): a
// generator and a runtime that disagree on the generated-code contract fail
// to compile with this name in the error.
const SupportPackageIsVersion1 = true
