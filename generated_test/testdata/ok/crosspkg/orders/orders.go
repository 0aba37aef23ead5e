// Package orders has markers and no kinesis_gen.go yet.
package orders

import "context"

//kinesis:message stream=orders
type Order struct{ ID int }

type Key struct {
	C string `kinesis:"partition-key"`
}

//kinesis:subscriber stream=orders
func Post(ctx context.Context, msg Order) error { _ = NewOrderPublisher; return nil }

// Wrapped is a header contract by what it embeds.
type Wrapped struct {
	*Key
	Note string
}
