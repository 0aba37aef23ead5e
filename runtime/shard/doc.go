// Package shard reads one stream for one subscription: it follows shard
// lineage, takes and renews leases, runs a reader per owned shard, and turns
// settled records into checkpoints through a watermark.
//
// # A held lease's states
//
// Every lease this coordinator holds is in one state, stored and written
// only by named transitions that check each move (state.go):
//
//	state          what it promises                            moves to
//	waiting        held, no reader: a parent has not ended, or  reading, settling, ended, fenced, gone
//	               the next pass opens it
//	reading        one reader generation hands out the shard's  waiting, reading, settling, ended,
//	               records in order; its settled prefix is the  fenced, gone
//	               checkpoint
//	settling       asked for: reader stopped, its records       checkpointing; reading, waiting or
//	               settle for up to Handoff/2                   ended (postponed); fenced, gone
//	checkpointing  the handoff's final checkpoint               releasing, fenced, gone
//	releasing      the handoff's release, retried until Handoff gone (released), waiting or ended
//	                                                            (kept), fenced
//	ended          SHARD_END written: nothing left to read      settling, fenced, gone (released)
//	fenced         not renewed in time: hands out nothing,      gone
//	               writes nothing; its records count for nothing
//	gone           lost, released, left to expire, or fenced    (a new take only)
//	               and forgotten
//
// A lease not held here is free (no owner), held by a live owner, or
// expired (its owner stopped: any instance may take it). When reasons to
// stop a reader meet, lost or fenced beats everything, a written SHARD_END
// beats a stop or handoff, and a stop or handoff beats a SHARD_END write
// the store refused. Status shows the handoff's steps (Handoff: asked,
// settling, checkpointing, releasing).
//
// # Transitions
//
// take (free or expired → waiting). Balancing decides (below). A dead
// owner's leases are taken between Failover and 1.25 × Failover after its
// last write; one that died mid-handoff (expired, as a crash failover
// judges it) loses the lease at once, whatever Handoff. A take is
// conditional on the counter read, so two takers never both win.
//
// open (waiting → reading). Once every parent is checkpointed SHARD_END
// (or no longer exists: past retention, it counts as read), so each key's
// records stay in order across splits and merges. It starts at the
// checkpoint, else (a child) at the trim horizon, else at Config.Start. A
// lease that would open at Latest is created pinned at the listing that
// found its shard, and an opening at Latest is pinned at once: the lease
// holds the time (the service's clock, from its Date header, less a
// margin) until a record settles, and the reader reopens there if its
// iterator expires first. So no record written after a shard was first
// opened is skipped, whatever happens to its owner; a few written just
// before may be read too (the KCL's LATEST would send the next owner to
// its own Latest).
//
// read (reading). Records go to the Sink in shard order, in runs of up to
// 256, never more than MaxInFlight past the oldest unsettled one; the
// checkpoint advances over the contiguous run of settled records (arrival
// order, never parsed sequence numbers) and is written every Checkpoint.
// An expired iterator is renewed after the last record handed out. A sink
// that breaks its contract drops the generation (→ waiting). Seek starts a
// new generation (reading → reading) whose records alone move the
// checkpoint, and writes its position to the lease.
//
// end (reading → ended). Only when the stream says the shard is closed.
// Once every delivered record settled (none skipped stale, which the next
// reader reads again), SHARD_END is written, retried while
// the reader lasts (a stop or handoff meanwhile checkpoints the last
// record instead, and the next owner ends the shard; a write the store
// refuses as invalid reads it again: → waiting), then the lease is
// released and a pass starts the children.
//
// hand over (reading, waiting or ended → settling → checkpointing →
// releasing → gone). The owner notices the request (on a lease write, or
// in the asker's member entry), stops reading, lets the delivered records settle for up to Handoff/2,
// checkpoints and releases; the asker takes the lease. Records still
// unsettled then postpone the handoff (→ reading, in the same generation:
// the owner keeps the lease, the asker asks again later; while the same
// record is stuck a new request is postponed at once), so no record is
// handled by two owners and a live owner is never forced. A failed release
// is retried, and after Handoff the owner keeps the lease (→ waiting,
// clearing the request). A handoff ends released, lost or kept, never
// stranded.
//
// stop (any held → gone). Stop first says in the member entry that this
// owner is leaving (lease.Member.Leaving): the others give it no share,
// no free lease and no handoff from then on, but take its leases only
// once it is dead. It stops reading (no handoff postponed
// meanwhile reads on), lets the delivered records settle for half its
// time, then lets no record begin that a handler has not (Record.Stale)
// and waits the other half for those that run, so that no lease is
// released while a record of it is being handled. It writes each lease's
// final checkpoint side by side and releases it: the settled prefix, or,
// if none settled, the first record out ("at" it), so the next owner reads
// the rest again. A failed final checkpoint is written again for up to
// 5 s (heartbeats, or renewals, go on meanwhile, so its own fence does not
// cut that off); a lease whose checkpoint never lands is released all the
// same. A release, and then the removal of the member entry, that fails is
// sent up to 3 times (finalTries): a store that answers one call late does
// not leave a lease, or the entry, to the others' failover time. A release
// whose answer was lost is found landed by the next write (the lease free,
// or its asker's) and counts as released, not lost (releaseLanded). A lease whose record a handler still runs when Stop's time is up
// is not released: its settled prefix is checkpointed, its handlers'
// contexts (Record.Lease) end, and, unless they return within 250 ms, it
// is left to expire as a crashed owner's lease does (the member entry
// stays, leaving and no longer beating: the released leases are taken
// within a pass), so the next owner handles the record a
// failover time later, not beside the handler; Stop's error
// (LeftToExpireError) and LeaseCounters.LeftToExpire name and count them.
// A record a lane abandons (Record.Abandon) lets no later record of its
// reader begin, and Stop still waits for those in handlers.
//
// lose (any held → gone). A write that finds another owner stops the
// reader at once and abandons its unsettled records. A deleted stream
// stops every reader and is reported once through Err and Config.OnFail.
//
// fence (any held → fenced → gone). An owner that has not renewed (with
// liveness per instance: confirmed a heartbeat; else written the lease)
// for fenceAfter, Failover less a fifth, counted on its monotonic clock
// from when that write was sent, stops before anyone can take the lease,
// as the KCL does. No later renewal revives it: the reader hands out
// nothing more, Record.Stale is true, and Record.Lease (the handlers'
// context) ends when the fence's timer runs. It reads the shard again only
// if it takes the lease back; once its writes land it releases those it
// does not (the others never take a live member's lease). A lease whose
// records a handler still runs (the fence abandoned them, not the
// handler) is neither taken back nor released until it returns, or until
// the lease has expired to the others (a failover time after its last
// renewal: a handler deaf to its context holds the shard no longer than a
// crash would): a pass counts it as held meanwhile (heldKeys,
// fencedRunning), so its record is not read again beside its handler,
// here or by another owner, within the margin the fence keeps. Stop ends
// the fenced leases that still name this owner as a pass would: with its
// heartbeats confirmed again it releases them (liveness per instance),
// and it leaves one a handler still runs to expire (endFenced).
//
// # Decisions
//
// Each decision is a pure function of what was read (leases, members,
// lineage, the clock, records in flight), table-tested without I/O
// (plan_test.go, balance_test.go); the loops (pass, read, heartLoop,
// keepLoop, startHandoff, Stop) only read, call it and apply the outcome:
//
//	decision                                     function
//	a lease pass's takes, asks, answers,         planBalanceEffects (planBulk,
//	releases and dead entries, as data           planBalance); applied by applyBalance
//	who may be planned a dead owner's lease      canJudge (planBulk)
//	take a lease its planned taker left free     takeOverdue, withoutUntakenReservations
//	a take another won: the spare tried instead  nextSpare
//	list the leases on this pass                 mustList, belowShare, unheld,
//	                                             deadLeftToJoiners
//	open a held lease's reader, or release it    heldStep
//	answer a request; release or postpone        handoffStep, drainedStep
//	follow a request of this owner's             followStep
//	at Stop: release a lease or leave it to      finalStep
//	expire; how to leave the member entry        exitStep
//	take back or release a lease left in this    takeBackStep, leftover
//	owner's name
//	delete a past shard's lease                  deletable
//	renew every lease (owners without entries)   needsCompat
//	skip a renewal a checkpoint just made        renewedRecently
//	has a lease's owner stopped                  ownerStopped
//	when the next heartbeat goes                 nextBeat
//	how a reader waits before its next read      pace
//
// # Passes, liveness and balancing
//
// Every Sync a pass lists the shards (all pages) and creates a lease per
// shard without one; every min(Sync, Failover/4) a lease pass runs. Every
// lease-store call has a deadline of Failover/3, every Kinesis call one of
// Failover (1 s to 30 s); Stop cancels a pass stuck in a call.
//
// Liveness per instance (the default, with a lease.MemberStore): every
// min(Renew, Failover/3) from the last send the owner writes its member
// entry, one write whatever it holds; leases are written only when
// ownership changes and at checkpoints, and listed only when something may
// have changed (members.go). A beat moves only on heartbeats the owner
// confirmed, and every heartbeat sent past its fence says it is fenced
// (lease.Member.Fenced; the first confirmed new beat clears it): a fenced
// member is dead at once to the others, who take its leases without
// waiting. An older reader ignores the flag and sees the beat stand still.
// With Config.Roster a pass reads a roster version and two ring
// successors' entries, the whole list only when the version moved; the
// watchers declare a dead successor, and a pass before that post a notice
// on the version item (a store implementing lease.RosterNotices), which
// every instance reads and acts on when the death falls due on its own
// clock (roster.go).
// An owner whose entry stood still for
// Failover on the reader's clock is dead: the clock for a beat starts when
// a read showing it returned and its age is judged when that read was
// sent. No two hosts' clocks are ever compared. With LivenessPerLease (the
// KCL's model, needed when Java KCL workers share the table) every held
// lease is renewed every Renew and every pass lists the leases; owners
// without a member entry are judged that way in either mode, and while one
// holds a lease the others renew their leases too (a rolling upgrade).
//
// BalanceBulk applies one deterministic rule on every instance (planBulk):
// fair shares, the rounding's extra leases kept by the most loaded, free
// and expired leases to those below their share, then the surplus of those
// above it, in a fixed order; so each lease moves once and a joiner asks
// for its whole share in one pass, and the owners asked hand over in
// parallel. An expired lease is planned only for a member that can judge
// its owner dead (canJudge): one this instance has seen for the failover
// time (a joiner first saw the owner's entry when it joined, and judges it
// dead only a failover time after that), unless the owner said it is
// fenced or was declared dead; one that no member below its share can take
// goes to the least loaded member that can, above its share if need be,
// and an instance at its share lists at once for it (deadLeftToJoiners).
// A free lease its planned taker leaves free (it beats but
// cannot take: its takes fail, it died unseen yet, or one view was
// behind another) is
// taken by any instance (takeOverdue): once the members' own counts have
// held fewer leases than are known for Failover/2, instances at their
// share list too, and take a lease still free Failover/2 after that; a
// reservation whose asker left, or that stood still for Failover/2, is
// free (withoutUntakenReservations). A fleet starting (every lease free on
// a first pass) waits a tenth of Renew after its first heartbeat, so that
// each free lease is taken once; a first pass that ran that long reads
// the members and leases again before it plans. BalanceOneSteal asks the
// most loaded owner for one lease per pass.
//
// # Status
//
// Status reports, without waiting for any remote call, the shards held
// (state, checkpoint, MillisBehindLatest, the last failed read and how many
// failed in a row, records in flight, handoffs postponed, the outcomes
// counted with Record.Count) and the others as the last pass listed them.
package shard
