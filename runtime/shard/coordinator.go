package shard

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/kinesis"
	"github.com/aws/aws-sdk-go-v2/service/kinesis/types"

	"github.com/kinesisgen/kinesisgen/runtime/kinesisapi"
	"github.com/kinesisgen/kinesisgen/runtime/lease"
)

// Record is one user record read from a shard (KPL-aggregated records are
// already expanded, each with its SubSequence).
type Record struct {
	Stream         string
	ShardID        string
	SequenceNumber string
	SubSequence    int64
	PartitionKey   string
	Data           []byte
	ArrivalTime    time.Time

	wm  *watermark // the reader generation that delivered the record
	idx uint64     // arrival index within wm
}

// Settle marks the record handled (whatever the outcome). The shard's
// checkpoint advances over the contiguous run of settled records. Settling
// twice is harmless.
func (r *Record) Settle() {
	if r.wm != nil {
		r.wm.settle(r.idx)
	}
}

// Abandon leaves r unsettled for good, and lets no later record of its
// reader begin (Record.Stale), so that none of r's key is handled before
// it: a stop or handoff no longer waits for r, the checkpoint never passes
// it, and the shard's next reader reads it again with what follows. A lane
// that stops while it holds r back (an in-place retry backing off), or
// that leaves r unsettled, calls it. The records of r's reader that
// handlers already run still settle, and a stop still waits for them
// (issue 29: before, Abandon dropped them all, and a stop released the
// shard while they ran).
func (r *Record) Abandon() {
	if w := r.wm; w != nil {
		w.close()
		w.skip(r.idx)
	}
}

// Stale reports whether settling r can no longer matter: its reader lost the
// lease, handed it over or was repositioned by a seek, or the lease is past
// its fence by this process's monotonic clock (after a pause, before the
// fence's timer has run), or Stop has used half its time and no longer
// lets a record begin. The record will be (or was) delivered again from
// the shard's checkpoint; a lane must not hand it to a handler.
func (r *Record) Stale() bool {
	w := r.wm
	if w == nil {
		return false
	}
	if w.discard.Load() || w.expired() {
		// Not handed to a handler (or back from one, to be read again):
		// a fenced generation's handlers are waited for (inHandlers).
		w.skip(r.idx)
		return true
	}
	if w.closing.Load() {
		// A Stop's last seconds: only what a handler already runs is
		// finished here; this record goes to the shard's next owner.
		w.skip(r.idx)
		return true
	}
	return false
}

// Lease returns a context that ends when the lease r was read under is
// lost, fenced or released: a handler's context is cancelled then, since
// another instance may be handling the record already.
func (r *Record) Lease() context.Context {
	if r.wm == nil || r.wm.lost == nil {
		return context.Background()
	}
	return r.wm.lost
}

// Sink receives a reader's records in shard order, a run at a time. It may
// block (backpressure: the shard's reader waits). It returns how many of rs,
// from the front, it took: all of them with a nil error, fewer only with an
// error, which it returns only when ctx ends (the reader then stops, even if
// every record was taken). The records it did not take
// are read again by the shard's next reader. rs is the reader's buffer: the
// sink copies the records it keeps (a Record is a value; its copies settle
// the same record), so handing records over allocates nothing.
type Sink func(ctx context.Context, rs []Record) (taken int, err error)

// Config describes one stream's coordinator. Zero durations take defaults.
type Config struct {
	Stream     string
	Namespace  string // lease namespace (application + stream), default Stream
	Client     kinesisapi.API
	Leases     lease.Store
	Owner      string
	Logger     *slog.Logger
	Start      Position
	BatchSize  int32         // user records a GetRecords read holds about (its Limit, on a plain shard), default 10000
	Poll       time.Duration // wait between empty reads, default 1 s (service budget: 5 reads/s/shard)
	Sync       time.Duration // shard re-listing, default 10 s
	Renew      time.Duration // lease renewal, default 3 s
	Failover   time.Duration // lease expiry as observed locally, default 10 s
	Checkpoint time.Duration // how often settled progress is persisted, default 1 s
	Sink       Sink
	// MaxInFlight bounds the records a shard has handed to the sink past
	// its oldest unsettled one (that record included): its reader waits
	// while that many are, so a record whose handler is stuck pauses its
	// shard's reading, and what the frozen checkpoint makes a restart read
	// again stays bounded. 0: no bound (the sink's backpressure only).
	MaxInFlight int
	// GetRecordsOptions are per-call SDK options for GetRecords.
	GetRecordsOptions []func(*kinesis.Options)
	// Handoff bounds a graceful handoff: the owner asked for a lease gets
	// half of it to let its delivered records settle before it checkpoints
	// and releases. When they have not settled by then, it postpones the
	// handoff (keeps the lease, reads on) and the asker asks again later:
	// a live owner is never forced. The asker takes the lease as soon as
	// the owner counts as dead, as a crash failover takes a lease, however
	// long Handoff is. Default Failover.
	Handoff time.Duration
	// Liveness is how this owner shows it is alive (default
	// LivenessAuto); Balance how it gets its share from busier owners
	// (default BalanceBulk). LivenessPerLease with BalanceOneSteal is this
	// runtime's behaviour before issue 17, kept for tables shared with the
	// Java KCL and for comparison.
	Liveness Liveness
	Balance  Balance
	// Roster, with liveness per instance over a store that keeps the
	// roster (lease.RosterOf), reads the members at a cost linear in the
	// instances: each pass reads the roster's version and the entries of
	// a few ring successors only, and the whole member list only when the
	// version moved; a watcher's notice (a store with
	// lease.RosterNotices) tells every instance of a death before it
	// falls due (roster.go). The runtime turns it on by default
	// (runtime.WithoutMembersRoster turns it off); Start turns it off
	// when the store refuses its calls for want of permission
	// (checkRoster).
	Roster bool
	// RosterWhole, with Roster, is the most members whose whole list is
	// still read every pass (default 48: their items fit in about one
	// read unit, no dearer than the version and two entries); negative:
	// never.
	RosterWhole int
	// Alone says no other instance can share Leases (a store private to
	// this process's one coordinator of the namespace, such as the
	// runtime's default in-memory one): a first pass then takes its leases
	// at once instead of waiting for instances starting beside it.
	Alone bool
	// ConsumerARN, when set, reads every shard by enhanced fan-out through
	// this registered stream consumer (SubscribeToShard) instead of
	// polling GetRecords: Poll, BatchSize and
	// GetRecordsOptions apply only to the GetRecords that confirms the end
	// of a closed shard whose subscription never ends (kinesis-mock). Leases, checkpoints, the sink and
	// resharding are the same.
	ConsumerARN string
	// OnFail, when set, is called once when the coordinator stops reading
	// for good while running: the stream was deleted (the error matches
	// ErrStreamDeleted), or its fan-out consumer (ErrConsumerDeleted). It is called from one of the coordinator's
	// goroutines and must not block; Stop still releases the leases.
	OnFail func(error)
	// Counters, when set, count this coordinator's lease changes (shared
	// with others: a broker's subscriptions count together); else it
	// counts them on its own. Status reads them too.
	Counters *LeaseCounters
	// OnDistribution, when set, is told the stream's record distribution
	// strategy (auto: AUTO) at the first shard listing that reads it and
	// whenever a later listing finds it changed (within one Sync on an
	// on-demand stream, the only kind that can be AUTO). It is called from
	// the sync loop and must not block.
	OnDistribution func(auto bool)
}

const (
	defaultBatch      = 10000
	defaultPoll       = time.Second
	minPoll           = 200 * time.Millisecond // 5 GetRecords per shard per second
	minLeaseEvery     = 10 * time.Millisecond
	defaultSync       = 10 * time.Second
	defaultRenew      = 3 * time.Second
	defaultFailover   = 10 * time.Second
	defaultCheckpoint = time.Second
	// finalWrites bounds the checkpoints and releases of Stop once its ctx
	// has ended: they are what lets another instance resume at once.
	finalWrites = 5 * time.Second
)

func (cfg *Config) setDefaults() error {
	switch {
	case cfg.Stream == "":
		return configError("empty stream name")
	case cfg.Client == nil:
		return configError("stream %s: no Kinesis client", cfg.Stream)
	case cfg.Leases == nil:
		return configError("stream %s: no lease store", cfg.Stream)
	case cfg.Owner == "":
		return configError("stream %s: empty owner id", cfg.Stream)
	case cfg.Sink == nil:
		return configError("stream %s: no sink", cfg.Stream)
	case cfg.MaxInFlight < 0:
		return configError("stream %s: max in flight %d is negative", cfg.Stream, cfg.MaxInFlight)
	case cfg.Liveness < LivenessAuto || cfg.Liveness > LivenessPerInstance:
		return configError("stream %s: unknown liveness %d", cfg.Stream, cfg.Liveness)
	case cfg.Balance < BalanceBulk || cfg.Balance > BalanceOneSteal:
		return configError("stream %s: unknown balance %d", cfg.Stream, cfg.Balance)
	case cfg.BatchSize < 0 || cfg.BatchSize > defaultBatch:
		return configError("stream %s: batch size %d outside 1..%d", cfg.Stream, cfg.BatchSize, defaultBatch)
	}
	if err := cfg.Start.validate(); err != nil {
		return configError("stream %s: start position: %v", cfg.Stream, err)
	}
	if cfg.Namespace == "" {
		cfg.Namespace = cfg.Stream
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	if cfg.BatchSize == 0 {
		cfg.BatchSize = defaultBatch
	}
	for _, d := range []struct {
		name string
		v    *time.Duration
		def  time.Duration
	}{
		{"poll", &cfg.Poll, defaultPoll},
		{"sync", &cfg.Sync, defaultSync},
		{"renew", &cfg.Renew, defaultRenew},
		{"failover", &cfg.Failover, defaultFailover},
		{"checkpoint", &cfg.Checkpoint, defaultCheckpoint},
		{"handoff", &cfg.Handoff, 0}, // 0: the failover time, set below
	} {
		if *d.v < 0 {
			return configError("stream %s: negative %s interval %v", cfg.Stream, d.name, *d.v)
		}
		if *d.v == 0 {
			*d.v = d.def
		}
	}
	if cfg.Handoff == 0 {
		cfg.Handoff = cfg.Failover
	}
	if cfg.RosterWhole == 0 {
		cfg.RosterWhole = rosterWhole
	}
	cfg.Poll = max(cfg.Poll, minPoll)
	if cfg.Renew >= cfg.Failover {
		return configError("stream %s: renew interval %v must be shorter than the failover time %v", cfg.Stream, cfg.Renew, cfg.Failover)
	}
	return nil
}

// startSettle is how long after its first heartbeat a starting instance
// waits before it takes a free lease when no other owner holds one
// (startSettles): a tenth of the renewal interval (300 ms by default).
// Instances whose first heartbeats land within it of each other split the
// leases at once, each lease taken once (and, missing, created once:
// startCreates).
func (cfg *Config) startSettle() time.Duration { return cfg.Renew / 10 }

// beatEvery is the time from one heartbeat's send to the next's
// (LivenessPerInstance): Renew, at most the lease-call deadline. A
// heartbeat is sent at most that long after the one before, or when that
// one's answer arrives, whichever is later; so while every answer arrives
// within the deadline, each lands within two deadlines of the one before
// was sent: 2/3 of Failover, before the fence (fenceAfter, at least 4/5 of
// it). A store that is slow but answers never fences a live owner.
func (cfg *Config) beatEvery() time.Duration { return min(cfg.Renew, cfg.leaseCallTimeout()) }

// leaseEvery is how often the lease counters are observed (one List) and
// expired leases taken: a quarter of the failover time, or Sync when that is
// shorter. The observer's clock for a lease starts at the first listing that
// shows its last counter, up to one interval after the write, so a dead
// owner's leases are taken between Failover and 1.25 × Failover after its
// last renewal, whatever Sync is.
func (cfg *Config) leaseEvery() time.Duration {
	return max(min(cfg.Sync, cfg.Failover/4), minLeaseEvery)
}

// Coordinator runs the readers of one stream.
type Coordinator struct {
	cfg Config
	log *slog.Logger

	mu      sync.Mutex
	state   runState
	lineage *Lineage
	owned   map[string]*owned    // by shard id: leases this coordinator holds
	pending map[string]time.Time // lease key -> when this owner asked for it
	// letGo: by shard id, the counter of a lease this owner let go of
	// (released, or found under another owner or deleted when a write of
	// it failed) as the store then had it. A listing older than that which
	// still shows the lease under this owner's name leaves nothing behind
	// (leftBehind); a take of the lease clears it.
	letGo   map[string]int64
	start   Position // for shards without checkpoint; a stream-wide seek replaces it
	obs     *observer
	beats   *observer         // member beats (LivenessPerInstance), keyed by owner
	view    memberView        // the members as the last pass read them
	compat  bool              // an owner without a member entry holds a lease: renew each lease too
	epoch   time.Time         // the zero of the lease fences' monotonic clock
	drained bool              // Stop waits for the workers: a fence starts none
	failErr error             // why the coordinator stopped reading for good (Err)
	stats   map[string]*Stats // by shard id: every shard held since New
	listed  []listedLease     // the last pass's lease listing, for Status
	// listedAt is when listed was read; statusRead, that Status was called
	// since: with liveness per instance an owner at its share lists no
	// more, so a status reader asks for a listing (at most one per
	// statusListEvery) to keep Others from going stale.
	listedAt   time.Time
	statusRead atomic.Bool
	// fences counts the leases this owner fenced and forgot; listedFences
	// is what it was when the last listing (passLeases) was sent. A lease
	// fenced since names this owner in the store although the last
	// listing may not show it so (taken by following a handoff, after
	// that listing): a pass lists again (leftBehind) and takes it back.
	// Guarded by mu.
	fences, listedFences int64
	// fenced: by shard id, the leases this owner fenced and forgot, which
	// name it in the store until it takes them back or lets them go, with
	// the generation their reader was in (nil: none). While a handler
	// still runs a record of it, the fence's margin holds: no take-back
	// reads the record again beside it, and no release hands it to
	// another owner (fencedRunning). Guarded by mu.
	fenced map[string]fencedLease

	passMu   chanMutex // one sync pass at a time
	followMu chanMutex // one followHandoffs at a time
	// Guarded by passMu (LivenessPerInstance): the leases as last known
	// (listed, created, taken), by shard id; the live members at the last
	// listing; whether the next pass must list again.
	known    map[string]lease.Lease
	wantMore bool
	// freeSince: by lease key, when a pass first planned the lease free
	// (as listed: counter and owner) for another member to take
	// (takeOverdue).
	freeSince map[string]observation
	// unheldSince: since when the members' own counts hold fewer leases
	// than known (mustList); zero while they hold them all.
	unheldSince time.Time
	// byKeyRun: the listings read by key since the last List while the
	// List measured dearer; remeasure, how many of them make the next
	// listing a List again (listLeases: 0 until the first, then doubling).
	byKeyRun, remeasure int
	// awaiting: by shard id, the leases a fleet's start left to the
	// instances starting beside this one to create (startCreates); the
	// next pass lists, and creates those still missing.
	awaiting map[string]lease.Lease
	// beat is the member entry's beat. A heartbeat writes a new one only
	// once a heartbeat of the last one was confirmed (answered without
	// error); until then it writes the same one again, so the others see
	// the beat stand still while this owner cannot confirm it is alive
	// (beatFirst, beatNew: guarded by beatSem, a 1-buffered channel held
	// by the heartbeat in flight, which serialises heartbeats).
	beat      atomic.Int64
	beatSem   chan struct{}
	beatFirst time.Time // when the current beat was first sent
	beatNew   bool      // the current beat was confirmed: the next heartbeat writes a new one
	// beatDue: a heartbeat that said this owner is fenced was confirmed;
	// the next one, a new beat that ends the fence, goes at once
	// (beatKick wakes the heartbeat loop for it).
	beatDue  atomic.Bool
	beatKick chan struct{}
	// bumpKick wakes bumpLoop (the roster) for an entry's change a
	// heartbeat wrote (rosterState.passBump).
	bumpKick chan struct{}
	// beatSaid: the last heartbeat sent said this owner is fenced.
	beatSaid atomic.Bool
	// starting: the first pass has not ended, and the member entry says
	// so (lease.Member.Starting): a fleet's start gives leases to create
	// only to the members that are starting (startOwners).
	starting atomic.Bool
	// leaving: Stop has begun, and the member entry says so
	// (lease.Member.Leaving): the others give this owner no lease.
	// leftHeld counts the leases Stop left to expire, which the entry's
	// Held still counts.
	leaving  atomic.Bool
	leftHeld atomic.Int32
	// beatUntil is the fence of the last successful heartbeat: its send
	// time plus fenceAfter, in nanoseconds since epoch (LivenessPerInstance).
	beatUntil atomic.Int64
	ctx       context.Context
	cancel    context.CancelFunc
	// passCtx ends when Stop begins: a pass (or seek) stuck in a remote
	// call gives up its lock at once instead of holding Stop up.
	passCtx    context.Context
	passCancel context.CancelFunc
	// beatCtx ends after Stop's final writes: the heartbeats go on while
	// they are written, so that the owner's own fence does not cut them
	// off (LivenessPerInstance).
	beatCtx    context.Context
	beatCancel context.CancelFunc
	ensure     tableEnsurer         // the store's table check, run once by Start
	members    lease.MemberStore    // the store's members, with deadlines: nil unless LivenessPerInstance
	roster     lease.RosterStore    // with members and Config.Roster: the store's roster, with deadlines
	rosterRaw  lease.Store          // the store itself: checkRoster asks it again once its tables are checked
	notices    lease.RosterNotices  // roster, when the store's version item carries notices too
	rs         rosterState          // what this owner knows of the roster (members.go)
	fanOut     kinesisapi.API       // the client without deadlines, when reading by fan-out
	lookup     lease.Lookup         // with members: reads the known leases by key instead of listing the namespace
	listCost   lease.ListCost       // with lookup: what a List costs, when the store knows (listLeases)
	creator    lease.CreateOrGetter // a store whose refused create returns the lease (createLease)
	loops      sync.WaitGroup       // sync and keeper loops
	beating    sync.WaitGroup       // the heartbeat loop
	workers    sync.WaitGroup       // readers and handoffs
	kick       chan bool            // wake the sync loop; true asks for a re-listing
	dist       atomic.Pointer[distribution]
	distSkip   int // listings since the distribution was read (guarded by passMu)
}

type runState int

const (
	idle runState = iota
	running
	stopped
)

// New validates cfg; it does no I/O.
func New(cfg Config) (*Coordinator, error) {
	if err := cfg.setDefaults(); err != nil {
		return nil, err
	}
	if cfg.Counters == nil {
		cfg.Counters = new(LeaseCounters)
	}
	var fanOut kinesisapi.API
	if cfg.ConsumerARN != "" {
		// Unbounded: a subscription's events come for minutes.
		fanOut = cfg.Client
	}
	raw := cfg.Leases
	members, ok := lease.MembersOf(raw)
	switch {
	case cfg.Liveness == LivenessPerInstance && !ok:
		return nil, configError("stream %s: liveness per instance needs a lease.MemberStore whose layout allows it (lease.MembersOf), not %T", cfg.Stream, raw)
	case cfg.Liveness == LivenessAuto && ok:
		cfg.Liveness = LivenessPerInstance
	case cfg.Liveness == LivenessAuto:
		cfg.Liveness = LivenessPerLease
	}
	if cfg.Liveness != LivenessPerInstance {
		members = nil
	}
	cfg.Leases = boundedStore{s: raw, d: cfg.leaseCallTimeout()}
	cfg.Client = boundClient(cfg.Client, cfg.kinesisCallTimeout())
	ensure, _ := raw.(tableEnsurer)
	var bm lease.MemberStore
	var look lease.Lookup
	var cost lease.ListCost
	var roster lease.RosterStore
	var notices lease.RosterNotices
	if members != nil {
		b := boundedMembers{boundedStore: cfg.Leases.(boundedStore), m: members}
		bm = b
		if r, ok := lease.RosterOf(raw); ok && cfg.Roster {
			br := boundedRoster{boundedMembers: b, r: r}
			roster = br
			if n, ok := r.(lease.RosterNotices); ok {
				notices = boundedNotices{boundedRoster: br, n: n}
			}
		}
		if l, ok := raw.(lease.Lookup); ok {
			look = boundedLookup{l: l, d: cfg.leaseCallTimeout()}
			cost, _ = raw.(lease.ListCost)
		}
	}
	c := &Coordinator{
		members:   bm,
		roster:    roster,
		rosterRaw: raw,
		notices:   notices,
		lookup:    look,
		ensure:    ensure,
		fanOut:    fanOut,
		cfg:       cfg,
		log:       cfg.Logger.With("stream", cfg.Stream, "owner", cfg.Owner),
		owned:     make(map[string]*owned),
		pending:   make(map[string]time.Time),
		letGo:     make(map[string]int64),
		fenced:    make(map[string]fencedLease),
		listCost:  cost,
		stats:     make(map[string]*Stats),
		start:     cfg.Start,
		obs:       newObserver(),
		beats:     &observer{seen: make(map[string]observation), linger: 3 * cfg.Failover, rejoin: cfg.Failover},
		epoch:     time.Now(),
		kick:      make(chan bool, 1),
		beatSem:   make(chan struct{}, 1),
		passMu:    newChanMutex(),
		followMu:  newChanMutex(),
		beatKick:  make(chan struct{}, 1),
		bumpKick:  make(chan struct{}, 1),
	}
	if cg, ok := raw.(lease.CreateOrGetter); ok {
		c.creator = boundedCreator{c: cg, d: cfg.leaseCallTimeout()}
	}
	c.beat.Store(time.Now().UnixNano()) // a restart under the same owner id never repeats a beat
	return c, nil
}

// Start runs the first pass (list shards, take leases, fetch every owned
// shard's first iterator) and returns; readers and the sync loop keep running
// until Stop. A shard that resumes at a time pin (see open) fetches its
// iterator in its reader: its position does not depend on when.
func (c *Coordinator) Start(ctx context.Context) error {
	c.mu.Lock()
	if c.state != idle {
		c.mu.Unlock()
		return fmt.Errorf("%w: Start called twice", ErrStopped)
	}
	c.state = running
	// Readers and loops outlive Start's ctx: they end with Stop.
	c.ctx, c.cancel = context.WithCancel(context.WithoutCancel(ctx))
	c.passCtx, c.passCancel = context.WithCancel(c.ctx)
	c.beatCtx, c.beatCancel = context.WithCancel(context.WithoutCancel(ctx))
	c.mu.Unlock()

	if c.ensure != nil {
		// Creating a table takes longer than any call may: do it now,
		// within Start's ctx. A failure shows in the first pass's listing.
		_ = c.ensure.EnsureTable(ctx)
	}
	c.checkRoster(ctx)
	c.starting.Store(true)
	if c.members != nil {
		// Beating already: the leases the first pass takes are fenced at
		// the failover time after the last heartbeat, and opening many
		// shards (or a slow endpoint, or passes run again) may take longer
		// than that.
		c.beating.Add(1)
		go c.heartLoop()
		if c.roster != nil {
			c.beating.Add(1)
			go c.bumpLoop()
		}
	}
	// An owner that renews each lease renews those the first pass took
	// while it goes on, for the same reason: those renewals are its
	// heartbeats, and keepLoop starts only after the first pass.
	stopRenewing := c.renewDuring(c.ctx)
	err := c.firstPass(ctx)
	stopRenewing()
	c.starting.Store(false) // said by the next heartbeat
	if err != nil {
		c.abort()
		return err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.state != running { // Stop ran meanwhile
		return ErrStopped
	}
	c.loops.Add(2)
	go c.syncLoop()
	go c.keepLoop()
	c.log.Info("coordinator started", "shards", len(c.owned))
	return nil
}

// firstPass runs the first pass, again while it fails only for a while: a
// call past its deadline, throttled, or refused by a server fault. A lease
// store slow to answer at a deploy (cold connections, a loaded endpoint)
// then delays Connect instead of failing it. It gives up after the failover
// time or when ctx ends, with the last error; any other error (a missing
// table or stream, no access, no endpoint) fails at once.
func (c *Coordinator) firstPass(ctx context.Context) error {
	deadline := time.Now().Add(c.cfg.Failover)
	wait := 100 * time.Millisecond
	for {
		err := c.pass(ctx, true)
		if err == nil || ctx.Err() != nil || !passing(err) || time.Now().Add(wait).After(deadline) {
			return err
		}
		c.log.Warn("first shard sync failed; retrying", "err", err, "after", wait)
		select {
		case <-ctx.Done():
			return err
		case <-time.After(wait):
		}
		wait = min(2*wait, time.Second)
	}
}

// abort undoes a failed first pass: readers stop, leases are released.
func (c *Coordinator) abort() {
	ctx, cancel := context.WithTimeout(context.Background(), finalWrites)
	defer cancel()
	_ = c.Stop(ctx)
}

// Err returns why the coordinator stopped reading for good while running
// (an error matching ErrStreamDeleted), or nil.
func (c *Coordinator) Err() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.failErr
}

// streamDeleted checks, after op failed with a not-found error, whether
// the stream itself is gone (the service does not know it, or is deleting
// it). If so the coordinator stops reading for good: every reader stops,
// no pass runs any more, and OnFail is told. A shard that is gone while
// the stream lives (past retention) is not this.
func (c *Coordinator) streamDeleted(ctx context.Context, op string, cause error) bool {
	if classify(cause) != classGone {
		return false
	}
	in := &kinesis.DescribeStreamSummaryInput{}
	in.StreamName, in.StreamARN = streamRef(c.cfg.Stream)
	out, err := c.cfg.Client.DescribeStreamSummary(ctx, in)
	switch {
	case err != nil && classify(err) == classGone:
	case err == nil && out.StreamDescriptionSummary != nil && out.StreamDescriptionSummary.StreamStatus == types.StreamStatusDeleting:
	default:
		return false
	}
	c.stopReading(op, fmt.Errorf("%w: %w", ErrStreamDeleted, cause))
	return true
}

// stopReading stops every reader for good because of err (the stream or
// its fan-out consumer is gone): no pass runs any more, Err returns it and
// OnFail is told, once. Stop still releases the leases.
func (c *Coordinator) stopReading(op string, err error) {
	c.mu.Lock()
	if c.failErr != nil || c.state != running {
		c.mu.Unlock()
		return
	}
	c.failErr = &Error{Op: op, Stream: c.cfg.Stream, Err: err}
	failErr := c.failErr
	c.mu.Unlock()
	c.log.Error("reading stopped for good", "err", err)
	for _, o := range c.snapshot() {
		o.mu.Lock() // bounded: a write in flight has a deadline
		if o.sess != nil {
			o.sess.cancel()
		}
		o.mu.Unlock()
	}
	if c.cfg.OnFail != nil {
		c.cfg.OnFail(failErr)
	}
}

// Owned returns the ids of the shards whose leases this coordinator holds.
func (c *Coordinator) Owned() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := make([]string, 0, len(c.owned))
	for id, o := range c.owned {
		if o.fctx.Err() == nil { // not fenced
			out = append(out, id)
		}
	}
	slices.Sort(out)
	return out
}

// Reading returns the ids of the shards this coordinator is reading now
// (owned, parents finished, not yet at their end), less those a handoff
// has settled and is checkpointing or releasing: their records are all
// handled, and the taker may read them as soon as the release lands. A
// lease past its fence by the monotonic clock is not read (its records
// are stale) even before its fence's timer has run, which on a busy
// machine may run late: another owner may read it meanwhile.
func (c *Coordinator) Reading() []string {
	var out []string
	for _, o := range c.snapshot() {
		if st := o.stateNow(); st == stCheckpointing || st == stReleasing {
			continue
		}
		if o.until.Load() != 0 && c.fenceLeft(o) <= 0 {
			continue
		}
		if o.session() != nil {
			out = append(out, o.shard)
		}
	}
	slices.Sort(out)
	return out
}

// Seek repositions every owned shard. Settlements of records delivered
// before the seek never move a checkpoint. A seek becomes durable with the
// first settled record after it. AtSequence repositions that one shard
// (which this coordinator must be reading) and leaves the others where they
// are; the other kinds also apply to shards this coordinator takes later
// without a checkpoint.
func (c *Coordinator) Seek(ctx context.Context, p Position) error {
	if err := p.validate(); err != nil {
		return configError("seek: %v", err)
	}
	c.mu.Lock()
	if c.state != running {
		c.mu.Unlock()
		return ErrStopped
	}
	c.mu.Unlock()
	ctx, cancel := c.passScope(ctx)
	defer cancel()
	c.passMu.Lock() // no reader starts or ends its lease meanwhile
	defer c.passMu.Unlock()
	c.mu.Lock()
	if c.state != running {
		c.mu.Unlock()
		return ErrStopped
	}
	if p.Kind != AtSequence {
		c.start = p
	}
	var targets []*owned
	for _, o := range c.owned {
		if p.Kind != AtSequence || o.shard == p.ShardID {
			targets = append(targets, o)
		}
	}
	c.mu.Unlock()
	slices.SortFunc(targets, func(a, b *owned) int { return strings.Compare(a.shard, b.shard) })
	var errs []error
	found := false
	for _, o := range targets {
		if o.session() == nil {
			continue // waiting for its parents or finished: nothing to move
		}
		found = true
		if err := c.reposition(ctx, o, p); err != nil {
			errs = append(errs, err)
		}
	}
	if p.Kind == AtSequence && !found {
		return fmt.Errorf("%w: seek to %s of shard %s", ErrNotOwned, p.Sequence, p.ShardID)
	}
	return errors.Join(errs...)
}

func (c *Coordinator) running() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.state == running
}

// passScope is ctx, ended also when Stop begins.
func (c *Coordinator) passScope(ctx context.Context) (context.Context, context.CancelFunc) {
	c.mu.Lock()
	pc := c.passCtx
	c.mu.Unlock()
	ctx, cancel := context.WithCancel(ctx)
	if pc == nil {
		return ctx, cancel
	}
	stop := context.AfterFunc(pc, cancel)
	return ctx, func() {
		stop()
		cancel()
	}
}

// syncLoop runs lease passes every leaseEvery and re-lists the shards every
// Sync, or at once when a shard has ended. A pass between listings costs one
// lease List and no Kinesis call.
func (c *Coordinator) syncLoop() {
	defer c.loops.Done()
	t := time.NewTicker(c.cfg.leaseEvery())
	defer t.Stop()
	lastList := time.Now()
	for {
		relist := false
		select {
		case <-c.ctx.Done():
			return
		case <-t.C:
		case r := <-c.kick:
			relist = r
		}
		if time.Since(lastList) >= c.cfg.Sync {
			relist = true
		}
		if relist {
			lastList = time.Now()
		}
		// A pass that Stop cancelled in its remote call did not fail.
		if err := c.pass(c.ctx, relist); err != nil && c.ctx.Err() == nil && c.running() {
			c.log.Warn("shard sync failed; retrying next pass", "err", err)
		}
	}
}

// wake asks the sync loop for a pass now.
func (c *Coordinator) wake(relist bool) {
	select {
	case c.kick <- relist:
	default:
		if relist { // make sure the queued wake re-lists
			select {
			case <-c.kick:
			default:
			}
			select {
			case c.kick <- true:
			default:
			}
		}
	}
}

// heartLoop writes this owner's member entry every Renew
// (LivenessPerInstance), on its own: checkpoints of many busy shards must
// not hold it up past the fence.
func (c *Coordinator) heartLoop() {
	defer c.beating.Done()
	// When the next heartbeat goes: nextBeat.
	every := c.cfg.beatEvery()
	retry := time.Duration(0)
	t := time.NewTimer(every)
	defer t.Stop()
	for {
		select {
		case <-c.beatCtx.Done():
			return
		case <-c.beatKick:
			if c.beatDue.Load() {
				t.Reset(0) // the way back from a fence, at once
			}
		case <-t.C:
			sent := time.Now()
			err := c.heartbeat(c.beatCtx)
			failed := err != nil && c.beatCtx.Err() == nil
			if failed {
				// A store outage: keep reading; this owner looks dead to
				// others only after Failover without a heartbeat, and
				// fences itself before that.
				c.log.Warn("heartbeat failed", "err", err)
			}
			var next time.Duration
			left := time.Duration(c.beatUntil.Load()) - time.Since(c.epoch)
			next, retry = nextBeat(beatPacing{every: every, renew: c.cfg.Renew, call: c.cfg.leaseCallTimeout()},
				failed, retry, time.Since(sent), left)
			switch {
			case c.beatDue.Swap(false):
				next = 0 // the way back from a fence, at once
			case c.beatUntil.Load() != 0 && left < next && !c.beatSaid.Load():
				// With the fence passed or due before the next beat, a
				// beat at it, which says so (Member.Fenced): the others
				// need not wait a failover time more to see this owner
				// dead.
				next = max(left, 0)
			}
			t.Reset(next)
		}
	}
}

// beatPacing is what paces the heartbeats: the interval between sends
// (beatEvery), Renew, and a lease call's deadline.
type beatPacing struct{ every, renew, call time.Duration }

// nextBeat decides when the next heartbeat goes, after one that failed or
// not, sent took ago, with left until this owner's fence (beatUntil; not
// positive: past it), and the retry backoff after failures (zero after a
// success). After a failure the next comes sooner (a quarter, then half
// of Renew, then Renew): the fence falls less than Failover after the last
// good one, so two failures in a row with a Renew between would fence
// every lease held. One that landed is followed every after its send,
// not after its answer (a slow store's answers would otherwise add up,
// and each beat land after the fence the one before set: issue 29,
// defect 7). Either way the next goes early enough to be confirmed within
// a call's deadline before the fence; past the fence the backoff stands.
func nextBeat(p beatPacing, failed bool, retry, took, left time.Duration) (next, nextRetry time.Duration) {
	if failed {
		if retry == 0 {
			retry = p.renew / 4
		} else {
			retry = min(2*retry, p.renew)
		}
		next = retry
	} else {
		retry = 0
		next = p.every - took
	}
	if left > 0 {
		next = min(next, max(left-p.call, p.renew/10))
	}
	return max(next, 0), retry
}

// keepLoop renews held leases (LivenessPerLease, or compat) every renewal
// interval (beatEvery), follows
// handoffs this owner asked for, and persists settled progress every
// Checkpoint.
func (c *Coordinator) keepLoop() {
	defer c.loops.Done()
	renew := time.NewTicker(c.cfg.beatEvery())
	defer renew.Stop()
	cp := time.NewTicker(c.cfg.Checkpoint)
	defer cp.Stop()
	for {
		select {
		case <-c.ctx.Done():
			return
		case <-renew.C:
			if c.isCompat() {
				c.renewAll(c.ctx, true)
			}
			c.followHandoffs(c.ctx, false)
		case <-cp.C:
			eachAtOnce(c.snapshot(), func(o *owned) {
				if err := c.persist(c.ctx, o, false); err != nil && c.ctx.Err() == nil {
					c.log.Warn("checkpoint failed", "shard", o.shard, "err", err)
				}
				c.answerHandoff(o)
			})
		}
	}
}

// answerHandoff starts handing o over when another owner asked for it (any
// write of ours sees the request: it bumped the counter).
func (c *Coordinator) answerHandoff(o *owned) {
	if to := o.askedBy(); to != "" && to != c.cfg.Owner {
		c.startHandoff(o, to)
	}
}

// snapshot returns the leases held now, by shard id (the order of their
// renewals, releases and final writes: not the map's, so that a seeded
// simulation repeats it); a fenced lease, about to be forgotten, is no
// longer held.
func (c *Coordinator) snapshot() []*owned {
	c.mu.Lock()
	out := make([]*owned, 0, len(c.owned))
	for _, o := range c.owned {
		if o.fctx.Err() == nil {
			out = append(out, o)
		}
	}
	c.mu.Unlock()
	slices.SortFunc(out, func(a, b *owned) int { return strings.Compare(a.shard, b.shard) })
	return out
}

// renewDuring renews the held leases every beatEvery until ctx ends or the
// returned stop is called, when this owner renews every lease it holds
// (isCompat): Start's first pass, run before keepLoop starts, and Stop's
// final writes, run after it ended, would otherwise leave the leases
// unrenewed and fence them after the fence time. It answers no handoff
// request: keepLoop does, and Stop releases the leases anyway.
func (c *Coordinator) renewDuring(ctx context.Context) (stop func()) {
	if !c.isCompat() {
		return func() {}
	}
	rctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		t := time.NewTicker(c.cfg.beatEvery())
		defer t.Stop()
		for {
			select {
			case <-rctx.Done():
				return
			case <-t.C:
				c.renewAll(rctx, false)
			}
		}
	}()
	return func() {
		cancel()
		<-done
	}
}

// renewAll renews every held lease not written within half a renewal
// interval (beatEvery); answer makes
// it start the handoffs its writes find asked for.
func (c *Coordinator) renewAll(ctx context.Context, answer bool) {
	eachAtOnce(c.snapshot(), func(o *owned) {
		o.mu.Lock()
		recent := renewedRecently(time.Since(o.wrote), c.cfg.beatEvery(), c.cfg.leaseCallTimeout(), c.cfg.fenceAfter())
		o.mu.Unlock()
		if recent {
			// A checkpoint just moved the counter: that renewed it, and a
			// busy shard costs one lease write per checkpoint, not two.
			return
		}
		_, err := c.mutate(ctx, o, "lease renew", func(l lease.Lease) (lease.Lease, error) {
			return c.cfg.Leases.Renew(ctx, l)
		})
		if err != nil && !errors.Is(err, errGone) && ctx.Err() == nil {
			// A store outage: keep reading; the lease expires for others
			// only after Failover without a renewal.
			c.log.Warn("lease renewal failed", "shard", o.shard, "err", err)
		}
		if answer {
			c.answerHandoff(o)
		}
	})
}

// renewedRecently reports whether a lease written since ago needs no
// renewal now, at a renewal every every: skipping is safe while the
// longest gap from one write's send to the next one's answer (1.5
// renewal intervals and a call's deadline) stays under the fence time.
func renewedRecently(since, every, call, fenceAfter time.Duration) bool {
	return since < every/2 && every*3/2+call < fenceAfter
}

// writesAtOnce bounds the lease writes eachAtOnce has in flight.
const writesAtOnce = 16

// eachAtOnce runs f for each lease of list, up to writesAtOnce at a time,
// and returns when all have returned. The writes of a slow store (one that
// answers within the call deadline) must not add up across leases: one
// after the other, a renewal could come after its lease's fence
// (issue 29, defect 7).
func eachAtOnce(list []*owned, f func(*owned)) {
	if len(list) == 1 {
		f(list[0])
		return
	}
	sem := make(chan struct{}, writesAtOnce)
	var wg sync.WaitGroup
	for _, o := range list {
		sem <- struct{}{}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			f(o)
		}()
	}
	wg.Wait()
}
