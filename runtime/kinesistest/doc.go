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
// Deviations from the service, on purpose: streams are ACTIVE as soon as
// CreateStream returns and resharding is immediate; there is no throttling
// unless WithThrottling asks for the service's per-shard limits (or faults
// are injected with InjectCallFault and InjectPutFault); no enhanced
// fan-out, encryption or tagging.
package kinesistest
