package shard

import (
	"errors"
	"fmt"
)

var (
	// ErrConfig: New was given a Config it cannot run (no stream, client,
	// store, owner or sink; a bad position). Nothing was started.
	ErrConfig = errors.New("shard: invalid config")
	// ErrStopped: the coordinator was stopped (or never started) and cannot
	// run, seek or start again.
	ErrStopped = errors.New("shard: coordinator not running")
	// ErrNotOwned: a seek named a shard this coordinator does not read.
	ErrNotOwned = errors.New("shard: shard not owned")
	// ErrStreamDeleted: the stream was deleted (the service no longer
	// knows it, or is deleting it); the coordinator stopped reading it.
	ErrStreamDeleted = errors.New("shard: stream deleted")
	// ErrConsumerDeleted: the stream consumer of a fan-out reader was
	// deregistered (or is being); the coordinator stopped reading.
	ErrConsumerDeleted = errors.New("shard: stream consumer deleted")
)

// Error is a failure of one Kinesis or lease-store operation, with the stream
// and shard it concerns. Unwrap reaches the cause: an SDK error (errors.As
// with the service's types.*Exception) or a *lease.Error.
type Error struct {
	Op     string // "ListShards", "GetShardIterator", "lease take", ...
	Stream string
	Shard  string
	Err    error
}

func (e *Error) Error() string {
	s := "shard: " + e.Op + " stream=" + e.Stream
	if e.Shard != "" {
		s += " shard=" + e.Shard
	}
	return s + ": " + e.Err.Error()
}

func (e *Error) Unwrap() error { return e.Err }

func configError(format string, args ...any) error {
	return fmt.Errorf("%w: %s", ErrConfig, fmt.Sprintf(format, args...))
}
