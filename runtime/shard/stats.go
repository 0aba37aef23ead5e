package shard

import (
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/kinesisgen/kinesisgen/runtime/lease"
)

// Outcome is how the handling of a record ended, as a shard's Stats count
// it. The sink's user counts each record once, with Record.Count.
type Outcome uint8

const (
	Acked        Outcome = iota // settled by its handler
	Retried                     // a copy went to the tip of the stream
	Rejected                    // given up without a dead-letter stream (logged, checkpointed past)
	DeadLettered                // given up to the dead-letter stream
	Skipped                     // not the application's to handle (another's retry copy): settled unhandled
	NumOutcomes
)

// Stats is what is counted and observed for one shard while this
// coordinator holds it: it lives as long as the coordinator, so it keeps
// counting across a handoff and a retake. Every method is safe for
// concurrent use; the per-record ones are single atomic operations.
//
// It is the one place per shard where a reader reports how far behind the
// stream's tip it is (ObserveBehind): a GetRecords reader from each
// answer's MillisBehindLatest, an enhanced fan-out reader from each event's.
// Its reads that fail are observed here too (readFailed), and cleared by
// the next that answers (readAnswered).
type Stats struct {
	outcomes [NumOutcomes]atomic.Uint64
	behindMs atomic.Int64
	behindAt atomic.Int64 // Unix nanoseconds of the last ObserveBehind; 0: never
	cp       atomic.Pointer[Checkpoint]
	// readErr is the last of the reads that failed in a row; nil once one
	// answers. Only failures write it, so a read that answers costs a load.
	readErr atomic.Pointer[ReadFailure]
	// postponed counts the handoffs of the shard postponed because its
	// records were still being handled.
	postponed atomic.Uint64

	rate rateMeter
}

func newStats(now time.Time) *Stats {
	s := &Stats{}
	s.rate.push(now, 0)
	return s
}

// ObserveBehind records that the shard's reader is ms milliseconds behind
// the tip of the stream (MillisBehindLatest), as of now.
func (s *Stats) ObserveBehind(ms int64) {
	s.behindMs.Store(ms)
	s.behindAt.Store(time.Now().UnixNano())
}

// ReadFailure is the last failed read of a shard (GetRecords,
// GetShardIterator, SubscribeToShard, a subscription that broke off) and
// how many failed in a row, since the last read that answered.
type ReadFailure struct {
	Err   string    // the error's text
	At    time.Time // when it failed
	Count int       // consecutive failed reads, this one included
}

// readFailed records a failed read (throttles included: they are worth
// seeing when they go on).
func (s *Stats) readFailed(err error) {
	f := &ReadFailure{Err: err.Error(), At: time.Now(), Count: 1}
	for {
		cur := s.readErr.Load()
		if cur != nil {
			f.Count = cur.Count + 1
		}
		if s.readErr.CompareAndSwap(cur, f) {
			return
		}
	}
}

// readAnswered records that a read answered (a GetRecords answer, a
// subscription's event): the failures before it are over. It costs one
// atomic load when nothing failed.
func (s *Stats) readAnswered() {
	if cur := s.readErr.Load(); cur != nil {
		s.readErr.CompareAndSwap(cur, nil)
	}
}

// forgetReads drops the failed reads of an earlier holding of the shard.
func (s *Stats) forgetReads() { s.readErr.Store(nil) }

// count adds one record handled with outcome o.
func (s *Stats) count(o Outcome) {
	if o < NumOutcomes {
		s.outcomes[o].Add(1)
	}
}

// handled returns the counts by outcome and the sum of those handled
// (all but Skipped).
func (s *Stats) handled() (by [NumOutcomes]uint64, total uint64) {
	for i := range by {
		by[i] = s.outcomes[i].Load()
		if Outcome(i) != Skipped {
			total += by[i]
		}
	}
	return by, total
}

// checkpointed records a checkpoint stored at when (zero: read from the
// lease table, time unknown), unless it is the one recorded already.
func (s *Stats) checkpointed(seq string, sub int64, when time.Time) {
	if cur := s.cp.Load(); cur != nil && cur.Sequence == seq && cur.SubSequence == sub {
		return
	}
	s.cp.Store(&Checkpoint{Sequence: seq, SubSequence: sub, At: when})
}

// Count records how the handling of r ended, in its shard's Stats. Count
// each record once; a record that is not settled (it will be delivered
// again) is not counted.
func (r *Record) Count(o Outcome) {
	if r.wm != nil && r.wm.st != nil {
		r.wm.st.count(o)
	}
}

// Checkpoint is a shard's checkpoint: a sequence number (with the
// sub-sequence of a KPL aggregate's record) or one of the lease package's
// Checkpoint* values, and when this process stored it (zero when it was
// read from the lease table).
type Checkpoint struct {
	Sequence    string
	SubSequence int64
	At          time.Time
}

// LeaseState is what is happening to a shard's lease.
type LeaseState string

const (
	LeaseReading     LeaseState = "reading"      // held here, its reader runs
	LeaseWaiting     LeaseState = "waiting"      // held here, waiting for its parents to end (or to be opened)
	LeaseHandingOver LeaseState = "handing-over" // held here, being handed to the owner that asked for it
	LeaseEnded       LeaseState = "ended"        // read to its end (SHARD_END)
	LeaseHeld        LeaseState = "held"         // held by another owner, renewed
	LeaseExpired     LeaseState = "expired"      // its owner stopped renewing it: any instance may take it
	LeaseUnowned     LeaseState = "unowned"      // nobody holds it
)

// HandoffStep is how far the handoff of a lease held here has come, for an
// operator who wonders why a handoff takes its time.
type HandoffStep string

const (
	// HandoffAsked: another owner asked for the lease (Asked); this owner
	// answers on its next write or look at the request.
	HandoffAsked HandoffStep = "asked"
	// HandoffSettling: the reader is stopped and the records it handed out
	// are settling (up to Config.Handoff/2; then the handoff is postponed,
	// HandoffsPostponed).
	HandoffSettling HandoffStep = "settling"
	// HandoffCheckpointing: the final checkpoint is being written.
	HandoffCheckpointing HandoffStep = "checkpointing"
	// HandoffReleasing: the lease is being released to the asker (retried
	// until Config.Handoff; then kept).
	HandoffReleasing HandoffStep = "releasing"
)

// ShardStatus is one shard as a coordinator sees it.
type ShardStatus struct {
	ShardID string
	Owner   string // "" when nobody holds it
	State   LeaseState
	// Asked is the owner that asked for the lease (a handoff under way).
	Asked string
	// Handoff is the step of the handoff of a lease held here: "" when
	// nobody asked for it.
	Handoff    HandoffStep
	Checkpoint Checkpoint
	// The rest is known for the shards held here only.
	MillisBehindLatest int64     // of the reader's last read
	BehindAt           time.Time // when it was observed; zero: not yet
	// ReadFailure is the last of the reads that have failed in a row
	// since one last answered; zero (Count 0) when the last read answered.
	ReadFailure ReadFailure
	Handled     [NumOutcomes]uint64
	PerSecond   float64 // records handled per second, lately
	InFlight    int     // records handed out past the checkpoint, not all settled
	// HandoffsPostponed counts the handoffs of the shard this coordinator
	// postponed because records it had handed out were still being
	// handled (a stuck handler holds its shard): it grows while one is.
	HandoffsPostponed uint64
}

// LeaseCounters count this instance's lease changes. One set may be shared
// by several coordinators (a broker's subscriptions) through Config.
type LeaseCounters struct {
	Taken      atomic.Uint64 // leases taken (free, expired, or handed over by their owner)
	Lost       atomic.Uint64 // leases found taken by another owner, or fenced after failed renewals
	HandedOver atomic.Uint64 // leases released to an owner that asked for them
	Postponed  atomic.Uint64 // handoffs postponed: records still being handled
	// LeftToExpire counts the leases a Stop left to expire instead of
	// releasing them, because a handler still ran one of their records
	// when its time ran out (LeftToExpireError).
	LeftToExpire atomic.Uint64
}

// Status is a snapshot of a coordinator: the shards it holds and, as the
// lease table showed at its last pass, the others.
type Status struct {
	Held   []ShardStatus // sorted by shard id
	Others []ShardStatus // sorted by shard id
	// ListedAt is when the lease table was read for Others. With
	// liveness per instance an owner at its share does not list the
	// leases at rest; a Status call asks the next pass to, when the last
	// listing is older than five seconds (or the failover time).
	ListedAt time.Time
	// Handled and PerSecond are over every shard this coordinator has
	// held, also those it no longer holds.
	Handled   [NumOutcomes]uint64
	PerSecond float64
}

// listedLease is one lease of the last pass's listing.
type listedLease struct {
	l       lease.Lease
	expired bool
}

// stats returns the shard's Stats, made on first use; c.mu is held.
func (c *Coordinator) statsLocked(shardID string) *Stats {
	st := c.stats[shardID]
	if st == nil {
		st = newStats(time.Now())
		c.stats[shardID] = st
	}
	return st
}

// Status returns what the coordinator knows now. It takes no lock that a
// remote call holds, so it answers at once.
func (c *Coordinator) Status() Status {
	now := time.Now()
	c.mu.Lock()
	held := make([]*owned, 0, len(c.owned))
	for _, o := range c.owned {
		if o.fctx.Err() == nil && o.stateNow().held() {
			held = append(held, o)
		}
	}
	listed, listedAt := c.listed, c.listedAt
	all := make([]*Stats, 0, len(c.stats))
	for _, st := range c.stats {
		all = append(all, st)
	}
	c.mu.Unlock()

	c.statusRead.Store(true)
	out := Status{ListedAt: listedAt}
	mine := make(map[string]bool, len(held))
	for _, o := range held {
		mine[o.shard] = true
		st := o.st
		ss := ShardStatus{ShardID: o.shard, Owner: c.cfg.Owner}
		if p := o.asked.Load(); p != nil {
			ss.Asked = *p
		}
		ss.State, ss.Handoff = publicState(o.stateNow(), ss.Asked != "" && ss.Asked != c.cfg.Owner)
		if cp := st.cp.Load(); cp != nil {
			ss.Checkpoint = *cp
		}
		if at := st.behindAt.Load(); at != 0 {
			ss.MillisBehindLatest, ss.BehindAt = st.behindMs.Load(), time.Unix(0, at)
		}
		if f := st.readErr.Load(); f != nil {
			ss.ReadFailure = *f
		}
		var total uint64
		ss.Handled, total = st.handled()
		ss.PerSecond = st.rate.perSecond(now, total)
		if s := o.sessionA.Load(); s != nil && !s.wm.discard.Load() {
			ss.InFlight = int(s.wm.pending())
		}
		ss.HandoffsPostponed = st.postponed.Load()
		out.Held = append(out.Held, ss)
	}
	for _, ll := range listed {
		l := ll.l
		if mine[l.ShardID] {
			continue
		}
		ss := ShardStatus{ShardID: l.ShardID, Owner: l.Owner, Asked: l.PendingOwner,
			Checkpoint: Checkpoint{Sequence: l.Checkpoint, SubSequence: l.SubSequence}}
		switch {
		case l.Checkpoint == lease.CheckpointShardEnd:
			ss.State = LeaseEnded
		case l.Owner == c.cfg.Owner:
			// Released or lost since the listing: who holds it now, the
			// next listing says.
			ss.Owner, ss.State = "", LeaseUnowned
		case l.Owner == "":
			ss.State = LeaseUnowned
		case ll.expired:
			ss.State = LeaseExpired
		default:
			ss.State = LeaseHeld
		}
		out.Others = append(out.Others, ss)
	}
	for _, st := range all {
		by, total := st.handled()
		for i := range by {
			out.Handled[i] += by[i]
		}
		out.PerSecond += st.rate.perSecond(now, total)
	}
	byID := func(a, b ShardStatus) int { return strings.Compare(a.ShardID, b.ShardID) }
	slices.SortFunc(out.Held, byID)
	slices.SortFunc(out.Others, byID)
	return out
}

// publicState is how Status shows a held lease's state (read without
// o.mu: the state is atomic) and, while it is being handed over, the
// handoff's step; asked is the owner that asked for it, if any.
func publicState(st leaseState, asked bool) (LeaseState, HandoffStep) {
	switch st {
	case stSettling:
		return LeaseHandingOver, HandoffSettling
	case stCheckpointing:
		return LeaseHandingOver, HandoffCheckpointing
	case stReleasing:
		return LeaseHandingOver, HandoffReleasing
	case stEnded:
		return LeaseEnded, ""
	}
	var step HandoffStep
	if asked {
		step = HandoffAsked
	}
	if st == stReading {
		return LeaseReading, step
	}
	return LeaseWaiting, step
}

// rateMeter turns a running total into a rate over the last rateWindow:
// Status calls push a sample at most once per rateStep, and the rate is
// measured from the oldest sample in the window (or, when none is that
// recent, from the newest: the average since the previous call).
type rateMeter struct {
	mu   sync.Mutex
	at   [rateSamples]time.Time
	n    [rateSamples]uint64
	head int // index of the oldest sample
	len  int
}

const (
	rateStep    = time.Second
	rateWindow  = 10 * time.Second
	rateSamples = int(rateWindow/rateStep) + 1
)

// push adds a sample; m.mu is held (or m is new).
func (m *rateMeter) push(at time.Time, n uint64) {
	if m.len == rateSamples {
		m.head = (m.head + 1) % rateSamples
		m.len--
	}
	i := (m.head + m.len) % rateSamples
	m.at[i], m.n[i] = at, n
	m.len++
}

func (m *rateMeter) perSecond(now time.Time, total uint64) float64 {
	m.mu.Lock()
	defer m.mu.Unlock()
	// The base: the oldest sample within the window, else the newest.
	base := -1
	for k := range m.len {
		i := (m.head + k) % rateSamples
		if now.Sub(m.at[i]) <= rateWindow {
			base = i
			break
		}
	}
	if base < 0 && m.len > 0 {
		base = (m.head + m.len - 1) % rateSamples
	}
	var rate float64
	if base >= 0 {
		if dt := now.Sub(m.at[base]); dt > 0 && total >= m.n[base] {
			rate = float64(total-m.n[base]) / dt.Seconds()
		}
	}
	if m.len == 0 || now.Sub(m.at[(m.head+m.len-1)%rateSamples]) >= rateStep {
		m.push(now, total)
	}
	return rate
}
