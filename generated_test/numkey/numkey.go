// Package numkey keys its records by an integer header field: zero is no
// key, so publishing it is the empty-key error, as an empty string is.
package numkey

//go:generate go run github.com/kinesisgen/kinesisgen/cmd/kinesisgen

// Key keys an Order by its customer number.
type Key struct {
	Customer uint32 `kinesis:"partition-key"`
}

// Order carries Key.
//
//kinesis:message stream=numkey.orders headers=Key
type Order struct{ ID int }
