// Package msg is named like the message parameter of the generated handler
// closures.
package msg

//go:generate go run github.com/kinesisgen/kinesisgen/cmd/kinesisgen

// Hdr is a header contract, handled by clash both as a message and as headers.
type Hdr struct {
	Customer string `kinesis:"partition-key"`
}
