// Package lease stores shard leases and checkpoints: who reads a shard, and
// how far it has been read. Every mutation is conditional on the lease counter
// (fencing), so a stale owner can neither renew nor checkpoint.
//
// Two stores implement Store: Memory (one process) and DynamoDB (a table laid
// out like the KCL lease table, shared by many instances, streams and
// applications). Both are MemberStores too: one liveness entry per instance
// and namespace, so a coordinator need not renew every lease it holds.
// Leader elects one instance per namespace through a lock item in the same
// store. Package leasetest is the conformance kit both stores pass.
package lease

import (
	"context"
	"errors"
	"fmt"
)

// Special checkpoint values, as the KCL writes them. CheckpointAtTimestamp
// with a positive SubSequence is a time pin of the shard coordinator: the
// first record that arrived at or after that Unix-millisecond time (by the
// service's clock), written when a shard without a checkpoint is first
// opened at Latest, so that no record written after it is skipped.
const (
	CheckpointTrimHorizon = "TRIM_HORIZON"
	CheckpointLatest      = "LATEST"
	CheckpointAtTimestamp = "AT_TIMESTAMP"
	CheckpointShardEnd    = "SHARD_END"
)

// Lease is one shard's lease. Field names follow the KCL lease table.
type Lease struct {
	// Key is unique in the store: Namespace + "/" + ShardID (see KeyFor).
	Key     string // leaseKey
	ShardID string
	// Owner is empty when nobody holds the lease.
	Owner string // leaseOwner
	// Counter increases with every mutation; an owner whose counter is stale
	// has lost the lease.
	Counter int64 // leaseCounter
	// Checkpoint is a sequence number or one of the Checkpoint* constants;
	// empty when the shard has never been checkpointed.
	Checkpoint                   string // checkpoint
	SubSequence                  int64  // checkpointSubSequenceNumber
	OwnerSwitchesSinceCheckpoint int64  // ownerSwitchesSinceCheckpoint
	// ParentShardIDs and ChildShardIDs are sets (string sets in DynamoDB):
	// every store returns them sorted, without duplicates.
	ParentShardIDs  []string // parentShardId
	ChildShardIDs   []string // childShardIds
	StartingHashKey string
	EndingHashKey   string
	// PendingOwner asks the owner to hand the lease over gracefully: the
	// owner checkpoints and releases, and PendingOwner takes it.
	PendingOwner string
	// ForeignOwner: Owner is not a kinesisgen instance (a Java KCL worker,
	// read from a table in the KCL layout). It never answers a handoff
	// request, so its lease is taken only once it has expired. Take clears it.
	ForeignOwner bool
}

// KeyFor returns the lease key of a shard within a namespace (an application
// and stream), so one table can hold leases of many streams and applications.
func KeyFor(namespace, shardID string) string { return namespace + "/" + shardID }

// Store keeps leases. Implementations: Memory (the default) and DynamoDB.
// Every method that takes a Lease is conditional on the stored Counter (and
// Owner where it says so) matching the given one; a mismatch is ErrLeaseLost.
// Every successful mutation returns the lease as stored, with Counter bumped.
type Store interface {
	// List returns every lease whose key starts with namespace + "/", sorted by key.
	List(ctx context.Context, namespace string) ([]Lease, error)
	// Get returns one lease, or an error matching ErrNotFound.
	Get(ctx context.Context, key string) (Lease, error)
	// Create stores l if no lease has its key; created is false when one exists.
	Create(ctx context.Context, l Lease) (created bool, err error)
	// Take sets the owner (conditional on Counter), clears PendingOwner and
	// counts an owner switch when the owner changes.
	Take(ctx context.Context, l Lease, owner string) (Lease, error)
	// Renew keeps a held lease (conditional on Owner and Counter).
	Renew(ctx context.Context, l Lease) (Lease, error)
	// Checkpoint records progress (conditional on Owner and Counter) and resets
	// OwnerSwitchesSinceCheckpoint.
	Checkpoint(ctx context.Context, l Lease, checkpoint string, subSequence int64) (Lease, error)
	// Release clears the owner (conditional on Owner and Counter).
	Release(ctx context.Context, l Lease) (Lease, error)
	// RequestHandoff sets PendingOwner (conditional on Counter).
	RequestHandoff(ctx context.Context, l Lease, to string) (Lease, error)
	// SetChildren records the children of a closed shard (conditional on Owner and Counter).
	SetChildren(ctx context.Context, l Lease, children []string) (Lease, error)
	// Delete removes a lease (conditional on Counter).
	Delete(ctx context.Context, l Lease) error
}

var (
	// ErrLeaseLost: the stored lease no longer matches the caller's (another
	// owner took it, or the counter moved).
	ErrLeaseLost = errors.New("lease lost")
	// ErrNotFound: no lease has the key.
	ErrNotFound = errors.New("lease not found")
	// ErrInvalid: the call itself is malformed (an empty key, owner or
	// checkpoint); nothing was written.
	ErrInvalid = errors.New("lease invalid")
)

// Error wraps a store failure with the operation and lease key.
type Error struct {
	Op  string
	Key string
	Err error
}

func (e *Error) Error() string { return fmt.Sprintf("lease %s %s: %v", e.Op, e.Key, e.Err) }
func (e *Error) Unwrap() error { return e.Err }
