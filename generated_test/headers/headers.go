// Package headers has a header contract with a field of every supported kind.
package headers

//go:generate go run github.com/kinesisgen/kinesisgen/cmd/kinesisgen -asyncapi asyncapi.yaml

import (
	"context"
	"time"

	"github.com/kinesisgen/kinesisgen/runtime"
)

// Region is a named string type.
type Region string

// Stamp is an alias of time.Time.
type Stamp = time.Time

// Level is a named integer type.
type Level uint16

// All has one tagged field of each kind kinesisgen encodes; Note has no tag
// and is not a header.
type All struct {
	Key     string    `kinesis:"partition-key"`
	Region  Region    `kinesis:"region"`
	Urgent  bool      `kinesis:"urgent"`
	Int     int       `kinesis:"int"`
	Int8    int8      `kinesis:"int8"`
	Int16   int16     `kinesis:"int16"`
	Int32   int32     `kinesis:"int32"`
	Int64   int64     `kinesis:"int64"`
	Uint    uint      `kinesis:"uint"`
	Uint8   uint8     `kinesis:"uint8"`
	Uint16  uint16    `kinesis:"uint16"`
	Uint32  uint32    `kinesis:"uint32"`
	Uint64  uint64    `kinesis:"uint64"`
	Level   Level     `kinesis:"level"`
	At      time.Time `kinesis:"at"`
	Seen    Stamp     `kinesis:"seen"`
	private string    `kinesis:"x.private_name"`
	Note    string
}

// Private reads the unexported field, which the generated methods also fill.
func (a All) Private() string { return a.private }

// WithPrivate sets the unexported field.
func (a All) WithPrivate(s string) All { a.private = s; return a }

// Parcel carries All.
//
//kinesis:message stream=headers.parcels headers=All
type Parcel struct{ ID int }

// Received gets each parcel with its headers.
var Received = make(chan All, 100)

// Receive hands the decoded headers to Received.
//
//kinesis:subscriber stream=headers.parcels start_at=horizon
func Receive(ctx context.Context, msg Parcel, h All) runtime.Outcome {
	Received <- h
	return runtime.Ack()
}
