// Package shard reads one stream for one subscription: it follows shard
// lineage, takes and renews leases, runs a reader per owned shard, and turns
// settled records into checkpoints through a watermark.
//
// A Coordinator works in passes. Every Sync it lists the shards (all pages)
// and creates a lease per shard in the lease store; every min(Sync,
// Failover/4) it reads the leases (one List) and takes its fair share, the
// ceiling of unfinished shards over live owners. An owner is live while the counter of
// one of its leases moved within Failover, as seen on this host's clock (no
// two hosts' clocks are ever compared). Unowned and expired leases are taken
// first; at most one lease per pass is asked of the most loaded owner, which
// notices the request on its next lease write, stops reading, lets the
// delivered records settle, checkpoints and releases. The asker takes the
// lease by force only after Handoff. A dead owner's leases are taken
// between Failover and 1.25 × Failover after its last write.
//
// A held shard is read once every parent is checkpointed SHARD_END (or no
// longer exists: past the stream's retention, it counts as read), so each
// key's records stay in order across splits and merges. A shard ends only
// when the stream says it is closed. It starts at its
// checkpoint, else (a child) at its trim horizon, else at Config.Start.
// Records go to the Sink in shard order, in runs of up to 256 by value,
// and never more than MaxInFlight past the oldest unsettled one (the reader
// waits meanwhile); the checkpoint advances over the
// contiguous run of settled records (arrival order, never parsed sequence
// numbers) and is written every Checkpoint, which also renews the lease; an
// idle lease is renewed every Renew. A failed write that finds another owner
// stops the reader at once and abandons its unsettled records (fencing).
// Seek starts a new reader generation whose records alone move the
// checkpoint, and writes the position it sought to the lease.
package shard
