// Package dst is deterministic simulation testing of the consume and
// publish paths: real runtime Brokers (coordinator, readers, lanes,
// batcher, aggregator) sharing one in-process Kinesis (runtime/kinesistest)
// and one lease.Memory, driven by a schedule drawn from one seed, inside a
// testing/synctest bubble, so a minute of failovers takes a fraction of a
// second. It is a package of its own, beside fleettest/sim (which measures
// shard.Coordinators' balancing), because it has one job: break the
// runtime's promises with schedules nobody wrote by hand.
//
// # A run
//
// Generate(seed, mix, timing) draws the schedule (math/rand/v2 PCG):
// instances joining, leaving (Broker.Shutdown) and crashing (abandoned:
// every call fails, nothing released), pauses (every lease-store and
// Kinesis call and handler of the instance waits at a gate; see below),
// pauses that begin just after a members read was answered, lease-store
// calls slow (under the call deadline), late (applied, answered with the
// deadline error), never answered nor applied, failed or throttled,
// Kinesis reads failed or throttled, an instance's Kinesis calls slow
// (under the call deadline) or
// never answered, the publishers' PutRecords slow, stored but never
// answered, neither stored nor answered, failed or throttled, splits,
// merges, UpdateShardCount, and a deletion and re-creation of the stream;
// iterators expire after 8 s, so a long pause or outage expires them.
// Instances read by polling, or, in a mix with FanOut (mix fanout), by
// enhanced fan-out (runtime.FanOut, one stream consumer per application,
// registered by the simulation): then subscriptions end by their
// lifetime every 10–20 s, and the schedule cuts them mid-event (SubCut)
// and ends them cleanly (SubEnd), one shard's or all at once, so readers
// subscribe again after their last continuation across handoffs,
// crashes, pauses and reshards. A paused instance reads no event (the
// server's pump blocks behind it and its subscription keeps the shard
// until another owner's takes it over, 5 s old), a crashed one's or one
// under KinesisFail breaks at its next event, and an event's records
// count as fetched, as a GetRecords answer's do (the unread check).
// A mix (Mixes) chooses which. Eight keyed publishers (each sequential, so
// a key's publish order is its acknowledgement order) and a keyless one
// publish through a plain and an aggregating publisher, in a mix with
// Batch the keyed ones some of their messages in SendAll batches of 2–4
// (the bulk path, whose waiter counts the batch down); handlers ack,
// take 1–8 s, retry, reject, panic or hang 15–45 s deaf to their context
// (once per message, two a run at most: the next owner's delivery runs), as a hash of (seed,
// application, message, attempt) says, so a shrunk schedule keeps its
// handlers. One or two applications read the stream. After the events,
// faults end, every application is given a live instance, and the run
// drains.
//
// # Invariants
//
// Checked after the run (Violation.Kind): lost (an acknowledged publish an
// application never handled); overlap (one message handled by two
// instances of one application at once; a handler counts as running from
// its call (frozen at its first line or not) until it returns or its
// context is cancelled; overlap-paused when one of them
// froze meanwhile); order (a key's first handlings out of publish order);
// retry-crossed (an application handled a retry copy it never asked for);
// unread (waiting records whose shard nothing of the application handled
// or held fetched for longer than about twice the failover time, less
// pauses and injected outages, plus three calls' latency where Kinesis
// answered an instance of the application slowly (a take-over lists,
// gets an iterator and reads, one after another): a fetched record waiting for a worker is
// read, and another application's retry copy, which no handler runs, until
// its fetcher checkpoints past it, and a record its fetcher's Stop left
// unbegun, until it released the lease); fenced-live (an instance fenced a lease with its lease-store
// calls answered in time); taken-from-live (a lease taken from an instance
// neither crashed, gone, frozen nor failing); slow-call (Connect, Shutdown
// or a publish past its bound); publish-failed.
//
// # Reading a failure
//
// A failing run prints its seed, the command that runs it again, the
// violations with the first example of each, the shrunk schedule (Shrink
// drops chunks of events while the run still breaks an invariant of the
// same kind) as a list and as a -dst.events line, and the trace: each
// event as applied and what the instances did to leases ("a2 asked a0 for
// shardId-…", "a0 released …", "a1 took … from a0", "a0 fenced its lease
// of …", "a0: members read answered …, then paused"), with virtual times
// from the run's start. Read the example's times against the trace: who
// held the shard when each handling began.
//
//	go test -count=1 -run 'TestSeeds$' ./fleettest/dst/ -dst.mix=pause -dst.seed=1
//	go test -count=1 -run 'TestSeeds$' ./fleettest/dst/ -dst.mix=pause -dst.seed=1 -dst.events='0,join,a,a0,0,0,0,0;…'
//	go test -count=1 -v -run 'TestHunt$' ./fleettest/dst/ -dst.mix=pausemem -dst.want=taken-from-live -dst.hunt=300
//	make soak SOAK=30m SOAK_FLAGS=-dst.defects
//
// -dst.log logs the runtime at Info (with -dst.debug, at Debug: a
// reader's "shard ended; waiting for delivered records to settle" and
// its pending count, say); an unread example names the handling its gap
// began after, whose instance's log is where to look. make test runs TestSeeds' fixed set
// (mixes basic, twoapps and aggregate, 150 seeds each, which held both
// before issue 29's fixes and on them as merged, fanout's first 100, and
// soak seeds that once failed, which hold since their fixes);
// -dst.defects adds
// the mixes that find defects 1–7 (FINDINGS.md has what they found).
//
// # What may vary
//
// A seed fixes the schedule, the handlers' behaviour, the publishers'
// timing and keys, every virtual time an event happens at, and the
// runtime's own random draws: its backoff jitter and the partition keys
// of keyless publishes (internal/randsrc, seeded by Run per schedule, so
// a schedule sees the same keys run alone or after others in the
// process). The simulation keeps its actors off shared instants, since
// the order in which goroutines runnable at the same virtual instant run
// is the Go scheduler's: each instance starts its own microseconds past
// its event (its timers never fire with another's), each publisher has
// a phase of its own, a handler's duration has a nanosecond part, and a
// reader's GetRecords and WaitForRecords answers, and a fan-out
// subscription's answer, each of its events and its end, take under
// 0.1 ms, other per instance and shard. (The simulation puts its own
// event stream in the SDK's answer rather than swapping the Reader of the
// SDK's, which a goroutine of the SDK reads at a moment of the
// scheduler's choosing; see setEventStream.) Where a map's order decided the order of
// lease-store calls, the runtime sorts.
//
// What a seed does not fix is what still falls on one instant: inside
// one instance, a pass and a handoff's release at one tick, say, or
// Go's own random choices (a select among ready channels). So two runs
// of a seed can still differ, rarely: scripts/dst-repro.sh runs seeds
// 1..N of the make-test mixes in two processes and counts the seeds
// whose runs differ (Result.Fingerprint: what happened at which virtual
// time). Before the runtime's draws were seeded and the actors kept
// apart, every seed's two runs differed (300 of 300, seeds 1-100 of each
// mix); after, 7 of 300 did. A finding
// that needs a particular order at one instant (a pause that must fall
// on a particular members read) may need its hunt, or its seed, run
// again; seeds found before then replay their schedule, not their run.
// The shrinker therefore keeps a drop only when the shorter run still
// fails.
//
// # Limits of the bubble
//
// A goroutine waiting for a sync.Mutex is not durably blocked, so time in
// a bubble stops while one waits for a holder that sleeps on the virtual
// clock (the coordinator's pass and follow locks are channels for this
// reason, so Kinesis calls made in a pass may be slow). So does a
// goroutine that spins: the bubble hung on the batcher going round its
// loop while every call slot was taken (fixed). The runtime holds a
// lease's mutex across its checkpoint, renewal,
// release, children and keep writes (and the re-read of a moved lease):
// those calls are never delayed; their slow and late answers come at
// once (with Mix.HeartbeatsUnderMu, heartbeats too), and while the
// instance is paused they fail with the deadline error at once (as a call
// sent just before a freeze fails after the thaw). A
// paused instance's timers still fire (the fence among them); its calls
// made at the instant it resumes ignore deadlines that expired during the
// pause, as a thawed process's goroutines race their timers. A bubble
// whose clock stops anyway is reported (every goroutine's stack and the
// seed) and the test binary exits. The runtime's batcher pools its publish
// entries per batcher, so no channel of one bubble reaches the next. The
// simulation runs without -race (golang/go#78156).
package dst
