package shard

import (
	"errors"
	"fmt"
	"time"
)

// PositionKind says where a reader starts.
type PositionKind int

const (
	// Latest starts after the last record at the moment the reader opens (the default).
	Latest PositionKind = iota
	// Horizon starts at the oldest record the stream retains.
	Horizon
	// AtTimestamp starts at the first record at or after Time, on every shard
	// (also on shards found later).
	AtTimestamp
	// AtSequence starts at Sequence on ShardID (other shards start at Latest).
	AtSequence
)

// Position is a start position or a seek target.
type Position struct {
	Kind     PositionKind
	Time     time.Time // AtTimestamp
	ShardID  string    // AtSequence
	Sequence string    // AtSequence
}

func (p Position) validate() error {
	switch p.Kind {
	case Latest, Horizon:
	case AtTimestamp:
		if p.Time.IsZero() {
			return errors.New("AtTimestamp without a time")
		}
	case AtSequence:
		if p.ShardID == "" || p.Sequence == "" {
			return errors.New("AtSequence needs a shard id and a sequence number")
		}
	default:
		return fmt.Errorf("unknown position kind %d", p.Kind)
	}
	return nil
}

func (k PositionKind) String() string {
	switch k {
	case Latest:
		return "latest"
	case Horizon:
		return "horizon"
	case AtTimestamp:
		return "timestamp"
	case AtSequence:
		return "sequence"
	}
	return fmt.Sprintf("PositionKind(%d)", int(k))
}
