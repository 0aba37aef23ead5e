// Package shard reads one stream for one subscription: it follows shard
// lineage, takes and renews leases, runs a reader per owned shard, and turns
// settled records into checkpoints through a watermark.
//
// A Coordinator works in passes. Every Sync it lists the shards (all pages)
// and creates a lease per shard it has no lease for; every min(Sync,
// Failover/4) it runs a lease pass.
//
// Liveness is per instance by default (LivenessPerInstance, with a
// lease.MemberStore): every Renew the owner writes its member entry, one
// write whatever it holds, and leases are written only when ownership
// changes and at checkpoints. A pass reads the members (one read); an owner
// whose entry stood still for Failover, as seen on this host's clock (no two
// hosts' clocks are ever compared), is dead and its leases are free. The
// leases are listed only when something may have changed (see members.go).
//
// The liveness rule (issue 29). An owner's beat moves only on heartbeats
// it confirmed: one that landed but was answered late or with an error
// leaves the next writing the same beat, so an owner that cannot confirm
// its liveness, and fences itself, looks dead to the others a Failover
// later (slow, throttled, failed and late answers alike). Its fence is
// fenceAfter (Failover less a fifth) after the confirmed beat was first
// sent, on its monotonic clock; the others' clock for a beat starts when
// a read showing it returned, and its age is judged at the time that read
// was sent, never at when a (possibly pre-pause) answer was processed.
// Heartbeats go every min(Renew, Failover/3) from the last send, so a
// store answering within the call deadline (Failover/3) never fences a
// live owner. A lease past its fence is fenced by the clock itself: no
// renewal revives it, the reader hands out nothing more, Record.Stale is
// true, and Record.Lease (the handlers' context in the runtime) ends when
// the fence's timer runs.
// With LivenessPerLease (the KCL's model, needed when Java KCL workers
// share the table) every held lease is renewed every Renew, every pass
// lists the leases, and an owner is live while the counter of one of its
// leases moved within Failover. Owners without a member entry are judged
// that way in either mode, and while one holds a lease an owner with
// liveness per instance renews its leases too (a rolling upgrade).
//
// Balancing (BalanceBulk) applies one deterministic rule on every instance
// (planBulk): fair shares with the rounding's extra leases kept by the most
// loaded, free and expired leases to those below their share, then the
// surplus of those above it, in a fixed order, so every instance computes
// the same moves, each lease moves once, and a joiner asks for its whole
// share in one pass. An instance whose first pass finds every lease free
// (a fleet starting) waits a tenth of Renew after its first heartbeat
// before it takes any, so that the instances starting with it are in its
// view and each free lease is taken once; a first pass that has run that
// long (thousands of leases to create) reads the members and the leases
// again before it plans. The owners asked hand over in parallel: each notices
// the request (on a lease write, or in the asker's member entry), stops
// reading, lets the delivered records settle, checkpoints and releases;
// records still unsettled after Handoff/2 postpone the handoff (the owner
// keeps the lease and reads on, the asker asks again later), so no record
// is handled by two owners. A live owner is never forced; one that died
// mid-handoff (expired, as a crash failover judges it) loses the lease at
// once, whatever Handoff. BalanceOneSteal asks the
// most loaded owner for one lease per pass, as before issue 17. A dead
// owner's leases are taken between Failover and 1.25 × Failover after its
// last write.
//
// A held shard is read once every parent is checkpointed SHARD_END (or no
// longer exists: past the stream's retention, it counts as read), so each
// key's records stay in order across splits and merges. A shard ends only
// when the stream says it is closed; a refused SHARD_END checkpoint is
// written again while its reader lasts (a stop or handoff meanwhile
// checkpoints the last record, and the next owner ends the shard). It starts at its checkpoint, else (a
// child) at its trim horizon, else at Config.Start.
//
// A lease that would open at Latest is created pinned at the listing that
// found its shard, and an opening at Latest is pinned at once: the lease
// holds the time (by the service's clock, from its Date header, less a
// margin) until a record settles, and the reader reopens there if its
// iterator expires before it delivered a record. So no record written
// after a shard was first opened is skipped, whether the iterator expires,
// the owner stops, hands over, loses the lease or crashes; a few written
// just before may be read too. This departs from the KCL, whose LATEST
// sentinel sends the next owner to its own Latest.
//
// Records go to the Sink in shard order, in runs of up to 256 by value,
// and never more than MaxInFlight past the oldest unsettled one (the reader
// waits meanwhile); the checkpoint advances over the contiguous run of
// settled records (arrival order, never parsed sequence numbers) and is
// written every Checkpoint, which also renews the lease; with
// LivenessPerLease an idle lease is renewed every Renew. A stop or handoff
// whose records have not all settled writes the settled prefix, or, if none settled, the first record out
// ("at" it), so the next owner reads the rest again; a final checkpoint
// that fails is written again, for up to 5 s, before the release (Stop's
// heartbeats, with LivenessPerLease its renewals, go on meanwhile, so its
// own fence does not cut that off; its
// leases' final writes run side by side, and one whose checkpoint never
// lands is released all the same, a little before the 5 s are over). A
// failed write that finds another owner stops the reader at once and abandons its unsettled
// records (fencing). An owner that has not written a lease (with liveness
// per instance: its member entry, whatever its lease writes do)
// successfully for Failover less a margin (a fifth of it), counted on its
// monotonic clock from when that write was sent, fences itself the same
// way before anyone can take the lease, as the KCL does, and reads the shard again
// only if it takes the lease back; once its writes land again it releases
// the fenced leases it does not take back (the others never take a live
// member's lease, so nobody would read them). Every lease-store call has a deadline
// of Failover/3 and every Kinesis call one of Failover (1 s to 30 s); Stop
// cancels a pass stuck in a call instead of waiting for it. A handoff whose
// release fails retries it, and keeps the lease (clearing the request)
// when it still fails after Handoff. A stream that is deleted stops every
// reader and is reported once through Err and Config.OnFail.
// Seek starts a new reader generation whose records alone move the
// checkpoint, and writes the position it sought to the lease.
//
// Status reports, without waiting for any remote call, the shards held
// (lease state, checkpoint, MillisBehindLatest, the last failed read and
// how many failed in a row, records in flight, and the outcomes the sink's
// user counted with Record.Count) and the others as the last pass listed
// them. A shard's Stats is where its readers report how far behind the tip
// they are and the reads that fail.
package shard
