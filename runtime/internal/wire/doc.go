// Package wire is the runtime's Kinesis wire: what the runtime reads and
// writes on the connection, below the SDK's operations. Each piece is a
// per-call option for any *kinesis.Client that leaves to the SDK whatever
// it is not sure of:
//
//   - FastGetRecords decodes GetRecords answers in one pass;
//   - SizedPutRecords writes a PutRecords body into one buffer sized up
//     front;
//   - SubscribeToShardOptions makes a SubscribeToShard event stream that
//     was cut off end with an error, and keeps concurrent streams apart.
package wire
