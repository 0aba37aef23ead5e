package shard

import "time"

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
