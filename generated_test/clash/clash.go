// Package clash declares and imports names that the generated file would
// otherwise use for its own imports, parameters and locals: every handler
// here once made kinesis_gen.go fail to compile.
package clash

//go:generate go run github.com/kinesisgen/kinesisgen/cmd/kinesisgen

import (
	"context"

	"github.com/kinesisgen/kinesisgen/generated_test/clash/ctx"
	"github.com/kinesisgen/kinesisgen/generated_test/clash/d"
	ev "github.com/kinesisgen/kinesisgen/generated_test/clash/events"
	"github.com/kinesisgen/kinesisgen/generated_test/clash/msg"
	"github.com/kinesisgen/kinesisgen/generated_test/clash/orders"
	"github.com/kinesisgen/kinesisgen/generated_test/clash/v"
	"github.com/kinesisgen/kinesisgen/generated_test/headers"
)

// Calls receives what each handler was given.
var Calls = make(chan any, 100)

// events is a package-level name like the package of ev.Shipped: the file
// imports that package as ev, and so must the generated file.
//
//lint:ignore U1000 declared for its name only
var events = "events"

// runtime and runtime_ take the generated file's runtime import name and its
// first fallback.
//
//lint:ignore U1000 declared for their names only
var runtime, runtime_ = "runtime", "runtime_"

// Orders is a receiver whose Mount parameter would be named orders, like the
// package of the message it handles.
type Orders struct{}

// OnPlaced takes orders.Placed.
//
//kinesis:subscriber stream=clash.placed
func (o *Orders) OnPlaced(c context.Context, p orders.Placed) error {
	Calls <- p
	return nil
}

// OnShipped takes a message of the package imported as ev.
//
//kinesis:subscriber stream=clash.shipped
func OnShipped(c context.Context, s ev.Shipped) error {
	Calls <- s
	return nil
}

// OnHdr takes a message of package msg.
//
//kinesis:subscriber stream=clash.hdr
func OnHdr(c context.Context, h msg.Hdr) error {
	Calls <- h
	return nil
}

// Note is a message with headers from packages named like the closure's
// parameters.
//
//kinesis:message stream=clash.notes
type Note struct{ Text string }

// Memo is a message on its own stream.
//
//kinesis:message stream=clash.memos
type Memo struct{ Text string }

// Jot is a message on its own stream.
//
//kinesis:message stream=clash.jots
type Jot struct{ Text string }

// Scrap is a message on its own stream.
//
//kinesis:message stream=clash.scraps
type Scrap struct{ Text string }

// OnNote takes headers of package msg.
//
//kinesis:subscriber stream=clash.notes
func OnNote(c context.Context, n Note, h msg.Hdr) error {
	Calls <- h
	return nil
}

// OnMemo takes headers of package ctx.
//
//kinesis:subscriber stream=clash.memos
func OnMemo(c context.Context, n Memo, h ctx.Meta) error {
	Calls <- h
	return nil
}

// OnJot takes headers of package d.
//
//kinesis:subscriber stream=clash.jots
func OnJot(c context.Context, n Jot, h d.Meta) error {
	Calls <- h
	return nil
}

// OnScrap takes headers of package headers.
//
//kinesis:subscriber stream=clash.scraps
func OnScrap(c context.Context, n Scrap, h headers.All) error {
	Calls <- h
	return nil
}

// Key has a field of a named type of package v, a name DecodeHeaders uses
// for a header's value.
type Key struct {
	ID v.ID `kinesis:"id"`
}

// Tagged carries Key.
//
//kinesis:message stream=clash.tagged headers=Key
type Tagged struct{ N int }

// OnTagged takes Key.
//
//kinesis:subscriber stream=clash.tagged
func OnTagged(c context.Context, t Tagged, k Key) error {
	Calls <- k
	return nil
}
