package shard

import (
	"errors"
	"fmt"
	"strings"
	"time"
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
	// ErrLeftToExpire: Stop's time ran out while handlers still ran
	// records of some shards; their leases were left to expire instead of
	// released (a *LeftToExpireError names them).
	ErrLeftToExpire = errors.New("shard: leases left to expire")
)

// LeftToExpireError is Stop's error when its time ran out while handlers
// still ran records of Shards. Releasing those leases would let the next
// owner handle the records again while the handlers still run them, so
// Stop cancelled the handlers' contexts (Record.Lease), checkpointed each
// shard's settled prefix and stopped renewing the leases without releasing
// them: another instance takes each one Failover after this owner's last
// renewal (its last heartbeat, with liveness per instance), as after a
// crash, and reads again from the first record not settled.
// errors.Is(err, ErrLeftToExpire) holds.
type LeftToExpireError struct {
	Stream   string
	Shards   []string // sorted
	Failover time.Duration
}

func (e *LeftToExpireError) Error() string {
	return fmt.Sprintf("shard: stop: stream %s: handlers still ran records of %s: leases left to expire (another instance takes them after the failover time, %v)",
		e.Stream, strings.Join(e.Shards, ", "), e.Failover)
}

func (e *LeftToExpireError) Unwrap() error { return ErrLeftToExpire }

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
