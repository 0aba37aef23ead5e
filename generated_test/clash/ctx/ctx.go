// Package ctx is named like the context parameter of the generated handler
// closures.
package ctx

//go:generate go run github.com/kinesisgen/kinesisgen/cmd/kinesisgen

// Meta is a header contract.
type Meta struct {
	Trace string `kinesis:"trace"`
}
