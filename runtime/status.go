package runtime

import (
	"slices"
	"strings"
	"time"

	"github.com/kinesisgen/kinesisgen/runtime/shard"
)

// Status is a snapshot of what a broker reads and handles: per
// subscription and per shard, who holds the lease, the checkpoint, how far
// behind the stream's tip the reader is, and what the handlers did with the
// records. Broker.Status returns it; the JSON tags are for serving it as it
// is (examples/orders does, behind -status).
type Status struct {
	Owner string    `json:"owner"` // this instance's lease-owner id ("" before Connect)
	Time  time.Time `json:"time"`  // when the snapshot was taken
	// Leases are this instance's, over every subscription.
	Leases        LeaseStatus          `json:"leases"`
	Subscriptions []SubscriptionStatus `json:"subscriptions"` // sorted by stream
}

// LeaseStatus counts this instance's leases. Taken, Lost and HandedOver
// count since NewBroker.
type LeaseStatus struct {
	Held       int    `json:"held"`        // leases held now
	Taken      uint64 `json:"taken"`       // taken: free, expired, or handed over by their owner
	Lost       uint64 `json:"lost"`        // found taken by another owner, or given up after failed renewals (fenced)
	HandedOver uint64 `json:"handed_over"` // released to an instance that asked for them (balancing)
	// HandoffsPostponed counts the handoffs this instance postponed: an
	// instance that asked for a lease waits while records of its shard are
	// still being handled here, so no record is handled by two instances.
	HandoffsPostponed uint64 `json:"handoffs_postponed"`
	// LeftToExpire counts the leases a stop left to expire instead of
	// releasing them: a handler still ran one of their records when the
	// shutdown timeout ran out, so another instance takes each after the
	// failover time, as after a crash, not beside the handler.
	LeftToExpire uint64 `json:"left_to_expire"`
}

// SubscriptionStatus is one subscription of the broker.
type SubscriptionStatus struct {
	Stream  string `json:"stream"`
	Handler string `json:"handler,omitempty"` // HandlerName, as the generated Mount sets it
	// State is "registered" (waiting for Connect), "starting", "running"
	// or "stopped".
	State   string `json:"state"`
	Workers int    `json:"workers"`
	ByKey   bool   `json:"by_key"`
	// Queue is the queue of a queue subscriber (runtime.Queue); it has no
	// Shards or Others.
	Queue string `json:"queue,omitempty"`
	// QueueDepth is how many records wait in the lanes for a worker.
	QueueDepth int `json:"queue_depth"`
	// InFlight is how many records the shards held here have handed out
	// past their checkpoints and not all settled: queued, being handled,
	// or handled but behind an unsettled one. For a queue subscriber: the
	// records received and not settled (waiting for a worker, being
	// handled, or their acknowledgement on its way).
	InFlight int `json:"in_flight"`
	// VisibilityExtended counts, for a queue subscriber, the extensions of
	// the visibility timeout of records received and not yet settled (see
	// Visibility); VisibilityLost the records whose visibility ran out
	// while they were here (before their handling or acknowledgement was
	// over), which the queue refused to extend or to acknowledge (a
	// receipt handle expired: received again), or which were held for
	// 12 h: they may be handled twice.
	VisibilityExtended uint64 `json:"visibility_extended,omitempty"`
	VisibilityLost     uint64 `json:"visibility_lost,omitempty"`
	// Handled and Outcomes count the records handled on every shard this
	// run of the subscription has held, also those it no longer holds;
	// PerSecond is their rate over the last ten seconds or so.
	Handled   uint64   `json:"handled"`
	Outcomes  Outcomes `json:"outcomes"`
	PerSecond float64  `json:"per_second"`
	// Shards are the shards whose leases this instance holds, sorted by id.
	Shards []ShardStatus `json:"shards"`
	// Others are the stream's other shards, as the lease table showed them
	// at OthersAt: held by another instance, expired, unowned, or read to
	// their end. Only the owner, lease and checkpoint are known for them.
	// An instance at its share of the leases does not read the table at
	// rest; while its status is read, it does so every five seconds (or
	// failover time, if shorter), so Others are at most that old plus a
	// lease pass.
	Others   []ShardStatus `json:"others"`
	OthersAt time.Time     `json:"others_at"`
}

// Outcomes counts handled records by how their handling ended. Records
// delivered again (after a lost lease, a seek, a stop) are counted each
// time they are handled; a record left unsettled is not counted.
type Outcomes struct {
	Acked        uint64 `json:"acked"`         // settled by the handler (Ack, a nil error)
	Retried      uint64 `json:"retried"`       // a copy went to the tip of the stream (Retry, an error, a panic)
	Rejected     uint64 `json:"rejected"`      // given up and checkpointed past, without a dead-letter stream (or refused by it)
	DeadLettered uint64 `json:"dead_lettered"` // given up to the dead-letter stream (Reject, retries exhausted, undecodable)
	// Skipped counts the retry copies of other applications reading the
	// stream (see ApplicationHeader): settled without a handler, so not
	// in Total (nor in Handled and PerSecond).
	Skipped uint64 `json:"skipped"`
}

// Total is the sum of the outcomes of records handled (all but Skipped).
func (o Outcomes) Total() uint64 { return o.Acked + o.Retried + o.Rejected + o.DeadLettered }

func outcomesOf(c [shard.NumOutcomes]uint64) Outcomes {
	return Outcomes{Acked: c[shard.Acked], Retried: c[shard.Retried], Rejected: c[shard.Rejected], DeadLettered: c[shard.DeadLettered], Skipped: c[shard.Skipped]}
}

// LeaseState is what is happening to a shard's lease.
type LeaseState = shard.LeaseState

// The states of a shard's lease in a Status.
const (
	LeaseReading     = shard.LeaseReading     // held here, its reader runs
	LeaseWaiting     = shard.LeaseWaiting     // held here, waiting for its parents to be read to their end
	LeaseHandingOver = shard.LeaseHandingOver // held here, being handed to the instance that asked for it
	LeaseEnded       = shard.LeaseEnded       // read to its end (SHARD_END)
	LeaseHeld        = shard.LeaseHeld        // held by another instance, which renews it
	LeaseExpired     = shard.LeaseExpired     // its owner stopped renewing it: any instance may take it
	LeaseUnowned     = shard.LeaseUnowned     // nobody holds it
)

// ShardStatus is one shard of a subscription's stream.
type ShardStatus struct {
	ShardID string     `json:"shard"`
	Owner   string     `json:"owner"` // the lease's owner id; "" when nobody holds it
	Lease   LeaseState `json:"lease"`
	// HandoffTo is the instance that asked for the lease, while a handoff
	// is under way.
	HandoffTo string `json:"handoff_to,omitempty"`
	// Checkpoint is the last checkpoint stored: a sequence number (and
	// the sub-sequence of a record inside a KPL aggregate), or
	// TRIM_HORIZON, LATEST, SHARD_END, or AT_TIMESTAMP (a shard opened at
	// Latest before its first record settled; SubSequence then holds the
	// time in Unix milliseconds). CheckpointAt is when this instance
	// stored it; zero when it was read from the lease table.
	Checkpoint   string    `json:"checkpoint,omitempty"`
	SubSequence  int64     `json:"sub_sequence,omitempty"`
	CheckpointAt time.Time `json:"checkpoint_at,omitzero"`

	// The rest is known for the shards this instance holds.

	// MillisBehindLatest is how far the shard's reader was behind the tip
	// of the stream at its last read (from GetRecords, or from an enhanced
	// fan-out event); BehindAt is when that was. 0 means at the tip. A
	// zero BehindAt means no read has answered yet.
	MillisBehindLatest int64     `json:"millis_behind_latest"`
	BehindAt           time.Time `json:"behind_at,omitzero"`
	// ReadError is the last read of the shard that failed (GetRecords,
	// GetShardIterator, SubscribeToShard, or a fan-out subscription that
	// broke off), as its error's text: AccessDeniedException after a
	// change of permissions, a throttle, an endpoint that cannot be
	// reached. ReadErrorAt is when it failed and ReadFailures how many
	// reads have failed in a row; the reader retries them with backoff.
	// All three are zero once a read answers (a GetRecords answer, a
	// fan-out event), and while nothing has failed: a shard whose
	// ReadFailures grows is stuck, not idle (with WithMeterProvider the
	// gauge kinesisgen.shard.read_failures reports it too). An iterator
	// that expired and a fan-out subscription that ended at its 5-minute
	// lifetime are not failures.
	ReadError    string    `json:"read_error,omitempty"`
	ReadErrorAt  time.Time `json:"read_error_at,omitzero"`
	ReadFailures int       `json:"read_failures,omitempty"`
	// Handled and Outcomes count the shard's records handled by this
	// instance, over every time it held the shard in this run of the
	// subscription; PerSecond is their rate over the last ten seconds or
	// so.
	Handled   uint64   `json:"handled"`
	Outcomes  Outcomes `json:"outcomes"`
	PerSecond float64  `json:"per_second"`
	// InFlight is how many records the shard has handed out past its
	// checkpoint and not all settled.
	InFlight int `json:"in_flight"`
	// HandoffsPostponed counts the handoffs of the shard this instance
	// postponed because its records were still being handled; one that
	// keeps growing is a handler that does not return, holding its shard.
	HandoffsPostponed uint64 `json:"handoffs_postponed,omitempty"`
	// Handoff is how far the handoff of a shard held here has come:
	// "asked" (HandoffTo asked; answered on the next look), "settling"
	// (reader stopped, its records settling), "checkpointing",
	// "releasing"; empty when nobody asked.
	Handoff string `json:"handoff,omitempty"`
}

func shardStatusOf(s shard.ShardStatus) ShardStatus {
	out := outcomesOf(s.Handled)
	return ShardStatus{
		ShardID:            s.ShardID,
		Owner:              s.Owner,
		Lease:              s.State,
		HandoffTo:          s.Asked,
		Checkpoint:         s.Checkpoint.Sequence,
		SubSequence:        s.Checkpoint.SubSequence,
		CheckpointAt:       s.Checkpoint.At,
		MillisBehindLatest: s.MillisBehindLatest,
		BehindAt:           s.BehindAt,
		ReadError:          s.ReadFailure.Err,
		ReadErrorAt:        s.ReadFailure.At,
		ReadFailures:       s.ReadFailure.Count,
		Handled:            out.Total(),
		Outcomes:           out,
		PerSecond:          s.PerSecond,
		InFlight:           s.InFlight,
		HandoffsPostponed:  s.HandoffsPostponed,
		Handoff:            string(s.Handoff),
	}
}

// Status returns a snapshot of the broker's subscriptions and leases. It
// makes no remote call and waits for none, so it is cheap enough to call
// every second, from any goroutine; the counters behind it cost an atomic
// addition per record. Handled-per-second rates are measured between
// calls (at most one sample a second is kept, over ten seconds): the first
// call's rate is the average since the shard was taken.
func (b *Broker) Status() Status {
	s := b.s
	s.mu.Lock()
	subs := slices.Clone(s.subs)
	var owner string
	if s.conn != nil {
		owner = s.conn.owner
	}
	s.mu.Unlock()

	st := Status{
		Owner: owner,
		Time:  time.Now(),
		Leases: LeaseStatus{
			Taken:             s.leaseCounts.Taken.Load(),
			Lost:              s.leaseCounts.Lost.Load(),
			HandedOver:        s.leaseCounts.HandedOver.Load(),
			HandoffsPostponed: s.leaseCounts.Postponed.Load(),
			LeftToExpire:      s.leaseCounts.LeftToExpire.Load(),
		},
		Subscriptions: make([]SubscriptionStatus, 0, len(subs)),
	}
	for _, sub := range subs {
		ss := sub.status()
		st.Leases.Held += len(ss.Shards)
		st.Subscriptions = append(st.Subscriptions, ss)
	}
	slices.SortFunc(st.Subscriptions, func(a, b SubscriptionStatus) int { return strings.Compare(a.Stream, b.Stream) })
	return st
}

// status is the subscription's part of Broker.Status.
func (s *Subscription) status() SubscriptionStatus {
	s.mu.Lock()
	r, state := s.run, s.state
	s.mu.Unlock()
	out := SubscriptionStatus{
		Stream:  s.stream,
		Handler: s.set.name,
		Workers: s.set.workers,
		ByKey:   s.set.byKey,
		Shards:  []ShardStatus{},
		Others:  []ShardStatus{},
	}
	switch state {
	case subRegistered:
		out.State = "registered"
	case subStarting:
		out.State = "starting"
	case subRunning:
		out.State = "running"
	default:
		out.State = "stopped"
	}
	if r == nil {
		return out
	}
	if r.queue != nil {
		r.queue.status(&out)
		return out
	}
	// The queue first: read after the shards, it could show records
	// queued that the shards had not yet counted in flight.
	out.QueueDepth = r.lanes.depth()
	cs := r.coord.Status()
	out.Outcomes = outcomesOf(cs.Handled)
	out.Handled = out.Outcomes.Total()
	out.PerSecond = cs.PerSecond
	out.OthersAt = cs.ListedAt
	for _, sh := range cs.Held {
		out.Shards = append(out.Shards, shardStatusOf(sh))
		out.InFlight += sh.InFlight
	}
	for _, sh := range cs.Others {
		out.Others = append(out.Others, shardStatusOf(sh))
	}
	return out
}
