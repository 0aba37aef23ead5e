// Package runtime is what kinesisgen's generated code calls: the Broker and
// its lifecycle, typed publishers, subscriptions with their outcomes and
// worker lanes, and the record envelope.
//
// # Publishing
//
// A publish resolves its partition key by the key ladder (the PartitionKey
// step, the partition-key header, the mount-site key, inside a handler the
// key of the record being handled, a process-unique key); a key that is
// given but empty is an error. It checks the key (1 to 256 UTF-16 units of
// valid UTF-8, the service's count), the headers and the record's size
// (1 MiB of data plus key) before any I/O, and waits for its own result. Concurrent publishes to one stream share PutRecords calls: a
// call starts at once when none is in flight or one has just returned, and
// otherwise when 500 records or 5 MiB are ready or after a linger of a
// millisecond (WithPublishLinger); up to four calls per stream run at once
// (WithPublishConcurrency). Entries the service refuses with a retryable
// code (throttling, internal failure) are retried with capped exponential
// backoff and jitter until they succeed or their caller's context ends;
// nothing is dropped silently. A publish whose context ends while its record
// is in a call returns an ErrPublish error saying the record may have been
// written. After Shutdown, queued publishes fail with ErrNotConnected.
// PublishAll submits many messages at once, so that a single goroutine can
// keep whole calls busy without a goroutine per record.
//
// Order: records of one partition key are stored in the order their
// publishes were submitted, even when one of them is retried. PutRecords
// does not order the entries of one request, so at most one record per key
// is unresolved at any time and a key's later records wait for it; a hot
// key therefore gets one record per round trip. Records with a
// process-unique key have no order to keep and are never held back. Records
// published from concurrent goroutines have no submit order between them.
package runtime

// SupportPackageIsVersion1 is referenced by generated code; a generator and a
// runtime that disagree on the generated-code contract fail to compile with
// this name in the error.
const SupportPackageIsVersion1 = true
