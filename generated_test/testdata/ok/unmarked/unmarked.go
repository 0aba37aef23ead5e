// Package unmarked lost its last marker; its kinesis_gen.go is stale.
package unmarked

// Order is no longer a message.
type Order struct{}
