// Package kinesistest is an in-process Kinesis Data Streams service for
// tests and demos: many shards routed by MD5 hash key, sequence numbers,
// iterators of every type, split and merge with lineage, retention, iterator
// expiry, fault injection and per-shard call counters. A Server implements
// kinesisapi.API with the SDK's own types, errors included, so code under
// test cannot tell it from *kinesis.Client except by speed.
//
// Readers need not sleep: WithLongPoll makes an empty GetRecords wait for a
// publish, and Server.WaitForRecords blocks until an iterator has something
// to read (discover it on a kinesisapi.API by interface assertion).
//
// Enhanced fan-out is there too: stream consumers (RegisterStreamConsumer
// and the rest) and SubscribeToShard, whose answer is the SDK's own
// *kinesis.SubscribeToShardOutput decoding real event-stream frames; records
// are pushed as they are appended. EndSubscriptions and CutSubscriptions
// end or cut subscriptions for tests; WithSubscriptionIgnoringShardEnd
// makes a subscription of a closed shard go on past its end, as
// kinesis-mock's (LocalStack's) does.
//
// Queues (CreateQueue, ReceiveQueueRecords and the rest, dead letters
// included) deliver an on-demand stream's records with visibility
// timeouts, receive counts and long polls. A stream's MaxRecordSizeInKiB
// (1 to 10 MiB) bounds data plus key; an AUTO stream deals records to its
// open shards in turn, ignoring keys. A Server is one region holding the
// streams of any number of accounts: a StreamARN names any account's
// stream (AsAccount, HTTPServer.ClientAs act for another account).
//
// NewHTTPServer puts a Server behind TLS and HTTP/2 on a loopback port,
// speaking the service's JSON protocol and its event stream, so that a real
// *kinesis.Client (HTTPServer.Client) runs the SDK's network path, the
// HTTP/2 event stream of SubscribeToShard included.
//
// Server.Drain stands in for an AWS Lambda event source mapping: it reads
// a stream shard by shard and invokes a Kinesis Lambda handler (such as
// runtime/kinesislambda's) with batches shaped as the service shapes them,
// until every record is handled. It does not model the 6 MB invocation
// payload limit, MaximumRecordAgeInSeconds, or tumbling windows.
//
// Listen (and ListenTLS) serve a Server on a TCP port for clients of any
// language, as kinesalite does: plain HTTP/1.1 and h2c, JSON and the Java
// SDK's CBOR. ServeLocal gives an application's test one on a loopback
// port, and its NewBroker a broker that reaches it over the wire;
// cmd/kinesislocal is the same as a command.
//
// Deviations from the service, on purpose: streams are ACTIVE as soon as
// CreateStream returns and resharding is immediate; a registered consumer
// is ACTIVE, and a deregistered one gone, at once, unless
// WithConsumerActivation and WithConsumerDeletion ask for the service's
// delays; there is no throttling unless WithThrottling asks for the
// service's per-shard limits (or faults are injected with InjectCallFault
// and InjectPutFault), nor a subscription held to 2 MB/s; no encryption or
// tagging; no resource policies (every account may use every stream by
// its ARN); queues are ACTIVE at once (WithQueueActivation) and
// UpdateQueue, DeleteQueue, UpdateMaxRecordSize and
// UpdateStreamRecordDistributionStrategy take effect at once.
package kinesistest
