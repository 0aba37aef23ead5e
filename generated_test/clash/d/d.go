// Package d is named like the delivery parameter of the generated handler
// closures.
package d

//go:generate go run github.com/kinesisgen/kinesisgen/cmd/kinesisgen

// Meta is a header contract.
type Meta struct {
	Trace string `kinesis:"trace"`
}
