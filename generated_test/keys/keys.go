// Package keys uses every key of both markers, so that its kinesis_gen.go
// shows how each one becomes a runtime option.
package keys

//go:generate go run github.com/kinesisgen/kinesisgen/cmd/kinesisgen -asyncapi asyncapi.yaml

import (
	"context"

	"github.com/kinesisgen/kinesisgen/generated_test/publishonly"
	"github.com/kinesisgen/kinesisgen/runtime"
)

// Event is read by Handle with every subscriber setting but reply.
//
//kinesis:message stream=keys.events
type Event struct{ ID string }

// Echo is the reply of Replay: a message with every message key.
//
//kinesis:message stream=keys.echoes headers=EchoHeaders partition_key="echo key"
type Echo struct{ ID string }

// EchoHeaders is the header contract of Echo.
type EchoHeaders struct {
	Trace string `kinesis:"trace-id"`
}

// Replayed is read from a point in time and answered with an Echo.
//
//kinesis:message stream=keys.replayed
type Replayed struct{ ID string }

// Late is read from the latest record with no retries.
type Late struct{ ID string }

// Handle has every key of //kinesis:subscriber except reply and partition_key.
//
//kinesis:subscriber stream=keys.events create_if_missing=3 workers=8 by_key start_at=horizon batch=250 poll=1500ms retries=5 dead_letter=keys.dead
func Handle(ctx context.Context, msg Event) error { return nil }

// Replay replies under a quoted mount-site key, from an RFC 3339 time.
//
//kinesis:subscriber stream=keys.replayed start_at=2026-01-02T15:04:05.123+02:00 reply partition_key="reply key" workers=2
func Replay(ctx context.Context, msg Replayed) (Echo, error) { return Echo(msg), nil }

// Latest starts at the tip and never retries.
//
//kinesis:subscriber stream=`keys.latest` start_at=latest retries=0 poll=2m
func Latest(ctx context.Context, msg Late) runtime.Outcome { return runtime.Ack() }

// Noted reads a message type and a header contract of another package.
//
//kinesis:subscriber stream=publishonly.events
func Noted(ctx context.Context, msg publishonly.Event, meta publishonly.Meta) error { return nil }

// Burst is read from a stream created in on-demand mode when missing.
type Burst struct{ ID string }

// Bursts asks for an on-demand stream, and so an on-demand dead-letter stream.
//
//kinesis:subscriber stream=keys.bursts create_if_missing=on_demand dead_letter=keys.bursts.dead
func Bursts(ctx context.Context, msg Burst) error { return nil }

// Pushed is read by enhanced fan-out.
type Pushed struct{ ID string }

// Push is read by enhanced fan-out through the stream consumer keys-app,
// which create_if_missing registers when missing.
//
//kinesis:subscriber stream=keys.pushed create_if_missing=1 fanout=keys-app
func Push(ctx context.Context, msg Pushed) error { return nil }
