// Command stale uses what kinesis_gen.go will define while its kinesis_gen.go is stale, as after
// an edit before go generate.
package main

import (
	"context"
	"fmt"

	"github.com/kinesisgen/kinesisgen/runtime"
)

// Entry is a journal line.
//
//kinesis:message stream=journal headers=Key
type Entry struct{ N int }

// Key carries the customer.
type Key struct {
	Customer string `kinesis:"partition-key"`
}

// Service posts entries.
type Service struct{}

// Post handles an entry.
//
//kinesis:subscriber stream=journal
func (s *Service) Post(ctx context.Context, msg Entry, k Key) error { return nil }

func main() {
	b := runtime.NewBroker()
	journal := NewEntryPublisher(b)
	var k Key
	_ = k.DecodeHeaders(runtime.Headers{})
	_ = journal.Message(Entry{N: 1}).Headers(k).Publish(context.Background())
	fmt.Println(Mount(b, &Service{}))
}
