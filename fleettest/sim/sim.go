// Package sim runs a fleet of shard coordinators (runtime/shard) on one
// stream of the in-process Kinesis through the events a fleet meets: start,
// an instance joining, a graceful leave, a crash and a network partition of
// one instance. It measures per event how long the fleet takes to settle,
// how many leases changed owner against the fewest that had to, records
// handled twice and the lease-store traffic with its DynamoDB cost; and it
// checks that no shard was handled by two instances at once and that no
// graceful handoff handled a record twice.
//
// Run reads the clock through the time package only, so inside a
// testing/synctest bubble (sim_test.go) the whole fleet runs on the
// bubble's virtual clock: 1,000 shards × 20 instances at the runtime's
// default timing take seconds of CPU, not the minutes they take on a wall
// clock. Outside a bubble it runs in real time, which is how it runs
// against a real lease store (DynamoDB on dynalite).
//
// The fleet is made of shard.Coordinators, not brokers: the coordinator is
// what takes, renews and hands over leases, and a sink with a few handler
// goroutines per instance stands in for the lanes (handlers skip records
// gone stale, as the lanes do).
package sim

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"math/rand/v2"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/kinesis"
	"github.com/aws/aws-sdk-go-v2/service/kinesis/types"

	"github.com/kinesisgen/kinesisgen/fleettest"
	"github.com/kinesisgen/kinesisgen/runtime/kinesisapi"
	"github.com/kinesisgen/kinesisgen/runtime/kinesistest"
	"github.com/kinesisgen/kinesisgen/runtime/lease"
	"github.com/kinesisgen/kinesisgen/runtime/shard"
)

// Config is one simulation. Zero durations take the runtime's defaults
// (Failover 10 s, Renew 3 s, Sync 10 s, Checkpoint 1 s) or the defaults
// named below.
type Config struct {
	Shards    int
	Instances int // at start; one more joins

	Failover, Renew, Sync, Checkpoint time.Duration

	// Store is the shared lease store; nil: a lease.Memory. Observe, when
	// set, is the same store seen through another client, for the
	// simulation's own looks at the table (so a metered client counts
	// only the fleet's calls); default Store.
	Store, Observe lease.Store
	// StoreFor, when set, gives an instance its own client of the shared
	// store by its name (RunRolling: instances of two versions, each with
	// its layout, on one table); nil: Store for every instance.
	StoreFor func(instance string) lease.Store
	// Namespace of the leases; default "sim/stream".
	Namespace string
	// Members is the layout of the member entries the run's member calls
	// are billed in (Counts.RCU and WCU; Counts.MembersRCU and MembersWCU
	// bill them in every layout side by side): by default, or over a store
	// that says its layout (lease.DynamoDB), the store's; over another
	// store (lease.Memory) the DynamoDB store's default, MembersMigrating.
	Members lease.MembersLayout
	// Latency is added to every lease-store call, and Hang makes the
	// partitioned instance's calls hang until their deadline instead of
	// failing at once. Neither works inside a synctest bubble: the
	// coordinator holds a lease's mutex across its store calls, and a
	// goroutine waiting for a sync.Mutex is not durably blocked, so a
	// call that waits on the virtual clock while another goroutine waits
	// for that mutex stops the clock for good. In virtual time a store
	// call therefore takes no time and a partition fails calls at once
	// (a refused connection); real-time runs (a DynamoDB store) may set both.
	Latency time.Duration
	Hang    bool
	// Rate is the records a second published while the fleet changes
	// (default one per shard every two seconds); none are published at rest.
	Rate float64
	// Handle is how long a record's handler runs (default 20 ms); Workers
	// how many run at once per instance (default 16).
	Handle  time.Duration
	Workers int
	// Rest is the window of the at-rest measurement (default 60 s).
	Rest time.Duration
	// Partition is how long the partitioned instance's lease-store calls
	// hang (default three failover times).
	Partition time.Duration
	// Settle is how long the fleet must stay balanced to count as
	// converged (default two lease passes); a phase gives up after
	// PhaseTimeout (default 10 min) and is reported not converged.
	Settle, PhaseTimeout time.Duration
	// Sample is how often the lease table is looked at (default 100 ms).
	Sample time.Duration
	// Seed makes the published keys repeatable.
	Seed uint64
	// Progress, when set, gets a line per phase as the run goes.
	Progress io.Writer
	// Logger is the coordinators' logger (discarded when nil).
	Logger *slog.Logger
	// Tune, when set, changes each instance's coordinator config before
	// it starts (a balancing mode, say).
	Tune func(*shard.Config)
	// RestItems is the most items an instance may read per lease pass at
	// rest (Report.RestMisses; default 2: the members item, or the
	// members table's Query and the members item; the roster reads its
	// version and two watched entries, 3).
	RestItems int
}

func (cfg *Config) setDefaults() error {
	if cfg.Shards <= 0 || cfg.Instances <= 0 {
		return fmt.Errorf("sim: %d shards, %d instances: both must be positive", cfg.Shards, cfg.Instances)
	}
	def := func(d *time.Duration, v time.Duration) {
		if *d == 0 {
			*d = v
		}
	}
	def(&cfg.Failover, 10*time.Second)
	def(&cfg.Renew, 3*time.Second)
	def(&cfg.Sync, 10*time.Second)
	def(&cfg.Checkpoint, time.Second)
	if cfg.Store == nil {
		cfg.Store = lease.NewMemory()
	}
	if cfg.Observe == nil {
		cfg.Observe = cfg.Store
	}
	if l, ok := cfg.Store.(interface{ MembersLayout() lease.MembersLayout }); ok && cfg.Members == lease.MembersMigrating {
		cfg.Members = l.MembersLayout()
	}
	if cfg.Namespace == "" {
		cfg.Namespace = "sim/stream"
	}
	if cfg.Rate == 0 {
		cfg.Rate = float64(cfg.Shards) / 2
	}
	def(&cfg.Handle, 20*time.Millisecond)
	if cfg.Workers == 0 {
		cfg.Workers = 16
	}
	def(&cfg.Rest, 60*time.Second)
	def(&cfg.Partition, 3*cfg.Failover)
	def(&cfg.Settle, 2*cfg.passEvery())
	def(&cfg.PhaseTimeout, 10*time.Minute)
	def(&cfg.Sample, 100*time.Millisecond)
	return nil
}

// passEvery is the coordinator's lease-pass interval for this timing.
func (cfg *Config) passEvery() time.Duration { return min(cfg.Sync, cfg.Failover/4) }

const stream = "sim"

// recID names one record.
type recID struct {
	shard string
	seq   string
}

// handling is one run of a record's handler.
type handling struct {
	owner      string
	start, end time.Time
}

// instance is one member of the fleet.
type instance struct {
	name  string
	coord *shard.Coordinator
	fault atomic.Int32 // its lease-store calls (a Fault)
	dead  atomic.Bool  // crashed: no Kinesis call, no handling
	queue chan shard.Record
	done  sync.WaitGroup // its handlers
	live  bool           // a member of the fleet now (sim.mu)
	// diedAt is when it crashed or was cut off; zero while healthy.
	diedAt time.Time
}

// fleet is one run.
type fleet struct {
	cfg    Config
	kin    *kinesistest.Server
	c      counters
	moves  moveLog
	losses lossLog
	logger *slog.Logger

	mu        sync.Mutex
	instances []*instance
	handled   map[recID][]handling
	published map[recID]bool
	// unhandledN counts the published records not handled yet, kept as
	// records are published and handled: drain asks every Sample, and a
	// scan of published each time cost a run with slow handlers (thousands
	// left unhandled for a 10 min drain) over a minute of CPU.
	unhandledN int
	// checkpoints is the last checkpoint each owner wrote per shard.
	checkpoints map[string]map[string]string
	// crashes are the instances that crashed and cut the one cut off,
	// with the checkpoints they had written by then: a record one of
	// them handled past its checkpoint may be handled again, and cutTo
	// is when the cut one came back.
	crashes map[string]crashed
	cut     string
	cutCP   map[string]string
	cutFrom time.Time
	cutTo   time.Time

	pubOn atomic.Bool
	pubWG sync.WaitGroup
	bg    sync.WaitGroup // a leaving instance's Stop
}

// crashed is when an instance crashed and the checkpoints it had written
// by then, by shard.
type crashed struct {
	at time.Time
	cp map[string]string
}

// newFleet makes a fleet for cfg on a fresh in-process stream.
func newFleet(cfg Config) (*fleet, error) {
	if err := cfg.setDefaults(); err != nil {
		return nil, err
	}
	f := &fleet{
		cfg:         cfg,
		kin:         kinesistest.New(),
		handled:     map[recID][]handling{},
		published:   map[recID]bool{},
		checkpoints: map[string]map[string]string{},
		crashes:     map[string]crashed{},
	}
	f.c.layout = cfg.Members
	var next slog.Handler
	if cfg.Logger != nil {
		next = cfg.Logger.Handler()
	}
	f.logger = slog.New(&lossHook{log: &f.losses, next: next})
	if err := f.kin.AddStream(stream, cfg.Shards); err != nil {
		return nil, err
	}
	return f, nil
}

// startPublisher starts the publishing goroutine (it publishes while
// f.pubOn is set) and returns the function that stops it and waits.
func (f *fleet) startPublisher(ctx context.Context) (stop func()) {
	pctx, stopPub := context.WithCancel(ctx)
	f.pubWG.Add(1)
	go f.publish(pctx)
	return func() {
		stopPub()
		f.pubWG.Wait()
	}
}

// instanceNames names n instances prefix00, prefix01, ….
func instanceNames(prefix string, n int) []string {
	names := make([]string, n)
	for i := range names {
		names[i] = fmt.Sprintf("%s%02d", prefix, i)
	}
	return names
}

// startAtOnce starts an instance per name, all at once; on an error it
// stops every instance.
func (f *fleet) startAtOnce(ctx context.Context, names []string) error {
	var wg sync.WaitGroup
	errs := make([]error, len(names))
	for i, n := range names {
		in := f.add(n)
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = f.startInstance(ctx, in)
		}()
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		f.stopAll()
		return fmt.Errorf("sim: starting %d instances at once: %w", len(names), err)
	}
	return nil
}

// Run runs the scenario and returns its report. The report's Violations
// list every broken invariant; Run's error is for a run that could not be
// carried out at all.
func Run(ctx context.Context, cfg Config) (*Report, error) {
	f, err := newFleet(cfg)
	if err != nil {
		return nil, err
	}
	cfg = f.cfg // with its defaults
	rep := &Report{Config: cfg, Began: time.Now()}
	stopPub := f.startPublisher(ctx)
	defer stopPub()

	// start: every instance at once, records flowing.
	f.pubOn.Store(true)
	ev := f.event(ctx, "start", "")
	names := instanceNames("i", cfg.Instances)
	if err := f.startAtOnce(ctx, names); err != nil {
		return nil, err
	}
	rep.add(f.settle(ctx, ev))

	// rest: nothing published, nothing changes.
	f.pubOn.Store(false)
	f.drain(ctx, cfg.PhaseTimeout)
	sleep(ctx, 2*cfg.Checkpoint) // the last checkpoints
	before := f.c.snapshot()
	at := time.Now()
	sleep(ctx, cfg.Rest)
	rep.Rest = Window{Dur: time.Since(at), Counts: f.c.snapshot().Sub(before)}
	if ls, err := f.cfg.Observe.List(ctx, f.cfg.Namespace); err == nil {
		var b int64
		for _, l := range ls {
			b += int64(ItemBytes(l))
		}
		rep.ScanUnits = scanUnits(b)
	}
	f.progress("rest: %s", rep.Rest.summary())

	f.pubOn.Store(true)
	// join
	joiner := fmt.Sprintf("i%02d", cfg.Instances)
	ev = f.event(ctx, "join", joiner)
	if err := f.startInstance(ctx, f.add(joiner)); err != nil {
		rep.Violations = append(rep.Violations, fmt.Sprintf("join: %s did not start: %v", joiner, err))
	}
	rep.add(f.settle(ctx, ev))

	// leave: the first instance stops gracefully.
	leaver := names[0]
	ev = f.event(ctx, "leave", leaver)
	f.setLive(leaver, false)
	f.bg.Add(1)
	go func() {
		defer f.bg.Done()
		f.leave(ctx, leaver)
	}()
	rep.add(f.settle(ctx, ev))

	// crash: the second instance stops making calls and handling at once.
	if len(names) > 1 {
		victim := names[1]
		rep.add(f.crash(ctx, victim))
	}

	// partition: the third instance's lease-store calls hang, then heal.
	if len(names) > 2 {
		victim := names[2]
		ev = f.event(ctx, "partition", victim)
		in := f.get(victim)
		if cfg.Hang {
			in.fault.Store(int32(Hang))
		} else {
			in.fault.Store(int32(Cut))
		}
		f.mu.Lock()
		f.cut, in.diedAt, f.cutFrom = victim, time.Now(), time.Now()
		f.cutCP = maps.Clone(f.checkpoints[victim])
		f.mu.Unlock()
		f.setLive(victim, false)
		healAt := time.Now().Add(cfg.Partition)
		rep.add(f.settle(ctx, ev))
		sleep(ctx, time.Until(healAt))
		ev = f.event(ctx, "heal", victim)
		f.mu.Lock()
		f.cutTo = time.Now()
		f.mu.Unlock()
		in.fault.Store(int32(Healthy))
		f.setLive(victim, true)
		rep.add(f.settle(ctx, ev))
	}

	// Done: stop publishing, let every record be handled, stop the fleet.
	return f.finish(ctx, rep, stopPub), nil
}

func (f *fleet) progress(format string, args ...any) {
	if f.cfg.Progress != nil {
		fmt.Fprintf(f.cfg.Progress, format+"\n", args...)
	}
}

func sleep(ctx context.Context, d time.Duration) {
	if d <= 0 {
		return
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
	case <-ctx.Done():
	}
}

// add makes an instance (not started) and counts it live.
func (f *fleet) add(name string) *instance {
	in := &instance{name: name, queue: make(chan shard.Record, 1024), live: true}
	f.mu.Lock()
	f.instances = append(f.instances, in)
	f.mu.Unlock()
	return in
}

func (f *fleet) get(name string) *instance {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, in := range f.instances {
		if in.name == name {
			return in
		}
	}
	panic("sim: no instance " + name)
}

func (f *fleet) setLive(name string, live bool) {
	in := f.get(name)
	f.mu.Lock()
	in.live = live
	f.mu.Unlock()
}

func (f *fleet) liveNames() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []string
	for _, in := range f.instances {
		if in.live {
			out = append(out, in.name)
		}
	}
	return out
}

func (f *fleet) startInstance(ctx context.Context, in *instance) error {
	inner := f.cfg.Store
	if f.cfg.StoreFor != nil {
		inner = f.cfg.StoreFor(in.name)
	}
	ccfg := shard.Config{
		Stream:    stream,
		Namespace: f.cfg.Namespace,
		Client:    &client{API: f.kin, w: f.kin, in: in},
		Leases: newStore(&store{inner: inner, c: &f.c, latency: f.cfg.Latency, fault: &in.fault,
			moved: f.moves.add, checkpointed: f.checkpointed}),
		Owner:      in.name,
		Logger:     f.logger,
		Start:      shard.Position{Kind: shard.Horizon},
		Sync:       f.cfg.Sync,
		Renew:      f.cfg.Renew,
		Failover:   f.cfg.Failover,
		Checkpoint: f.cfg.Checkpoint,
		Sink:       f.sink(in),
	}
	if f.cfg.Tune != nil {
		f.cfg.Tune(&ccfg)
	}
	for range f.cfg.Workers {
		in.done.Add(1)
		go f.handle(in)
	}
	sctx, cancel := context.WithTimeout(ctx, 2*f.cfg.Failover+time.Minute)
	defer cancel()
	for try := 1; ; try++ {
		c, err := shard.New(ccfg)
		if err != nil {
			return err
		}
		in.coord = c
		err = c.Start(sctx)
		// A real store slower than the call deadline for the whole
		// failover time (dynalite on a loaded machine) fails Start, which
		// releases what it took; a deploy would start the instance again.
		if err == nil || try == startTries || sctx.Err() != nil || !errors.Is(err, context.DeadlineExceeded) {
			return err
		}
		f.logger.Warn("sim: an instance's start timed out on the store; starting it again", "instance", in.name, "err", err)
	}
}

// startTries is how many times an instance whose start timed out is
// started.
const startTries = 3

// sink hands an instance's records to its handlers; a crashed instance
// takes them and does nothing.
func (f *fleet) sink(in *instance) shard.Sink {
	return func(ctx context.Context, rs []shard.Record) (int, error) {
		if in.dead.Load() {
			return len(rs), nil
		}
		for i := range rs {
			select {
			case in.queue <- rs[i]:
			case <-ctx.Done():
				return i, ctx.Err()
			}
		}
		return len(rs), nil
	}
}

// handle is one handler goroutine of an instance.
func (f *fleet) handle(in *instance) {
	defer in.done.Done()
	for r := range in.queue {
		if r.Stale() || in.dead.Load() {
			continue // as a lane does: its shard's next owner reads it again
		}
		h := handling{owner: in.name, start: time.Now()}
		time.Sleep(f.cfg.Handle)
		h.end = time.Now()
		id := recID{r.ShardID, r.SequenceNumber}
		f.mu.Lock()
		if in.dead.Load() && in.diedAt.Before(h.end) {
			h.end = in.diedAt
		}
		if len(f.handled[id]) == 0 && f.published[id] {
			f.unhandledN--
		}
		f.handled[id] = append(f.handled[id], h)
		f.mu.Unlock()
		r.Settle()
	}
}

func (f *fleet) checkpointed(owner, shardID, seq string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	m := f.checkpoints[owner]
	if m == nil {
		m = map[string]string{}
		f.checkpoints[owner] = m
	}
	m[shardID] = seq
}

// explainedLocked reports whether h's record may be handled again at
// again because h ran on the crashed or the cut-off instance before that
// happened (or, cut off, before it came back), past the checkpoint it had
// written for the shard by then, and again is after it happened.
func (f *fleet) explainedLocked(id recID, h handling, again time.Time) bool {
	c, isCrashed := f.crashes[h.owner]
	switch {
	case isCrashed && again.After(c.at):
		return pastCheckpoint(id.seq, c.cp[id.shard])
	case h.owner == f.cut && again.After(f.cutFrom) && (f.cutTo.IsZero() || h.start.Before(f.cutTo)):
		return pastCheckpoint(id.seq, f.cutCP[id.shard])
	}
	return false
}

// pastCheckpoint reports whether seq comes after the checkpoint cp (a
// sequence number, or a position before every record).
func pastCheckpoint(seq, cp string) bool {
	if cp == "" || strings.ToUpper(cp) == cp && !strings.ContainsAny(cp, "0123456789") {
		return true
	}
	return fleettest.CompareSequence(seq, cp) > 0
}

// stopAll stops every instance still running (a crashed one's calls fail).
func (f *fleet) stopAll() {
	f.mu.Lock()
	ins := slices.Clone(f.instances)
	crashes := maps.Clone(f.crashes)
	f.mu.Unlock()
	var wg sync.WaitGroup
	for _, in := range ins {
		if _, isCrashed := crashes[in.name]; in.coord == nil || (!in.live && !isCrashed) {
			continue // never started, or left already
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			ctx, cancel := context.WithTimeout(context.Background(), 2*f.cfg.Failover)
			defer cancel()
			_ = in.coord.Stop(ctx)
			close(in.queue)
			in.done.Wait()
		}()
	}
	wg.Wait()
	f.bg.Wait()
}

// publish puts records on random keys at cfg.Rate while pubOn is set, in
// one PutRecords call every 100 ms.
func (f *fleet) publish(ctx context.Context) {
	defer f.pubWG.Done()
	rng := rand.New(rand.NewPCG(f.cfg.Seed, 17))
	const tick = 100 * time.Millisecond
	per := f.cfg.Rate * tick.Seconds()
	owed := 0.0
	t := time.NewTicker(tick)
	defer t.Stop()
	for n := 0; ; {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if !f.pubOn.Load() {
			continue
		}
		owed += per
		var entries []types.PutRecordsRequestEntry
		for ; owed >= 1 && len(entries) < 500; owed-- {
			n++
			entries = append(entries, types.PutRecordsRequestEntry{
				PartitionKey: aws.String(fmt.Sprintf("k%08x", rng.Uint32())),
				Data:         []byte(fmt.Sprint(n)),
			})
		}
		if len(entries) == 0 {
			continue
		}
		out, err := f.kin.PutRecords(ctx, &kinesis.PutRecordsInput{StreamName: aws.String(stream), Records: entries})
		if err != nil {
			continue
		}
		f.mu.Lock()
		for _, r := range out.Records {
			if r.ErrorCode == nil {
				// A record may be handled before its PutRecords answer is here.
				id := recID{aws.ToString(r.ShardId), aws.ToString(r.SequenceNumber)}
				if !f.published[id] && len(f.handled[id]) == 0 {
					f.unhandledN++
				}
				f.published[id] = true
			}
		}
		f.mu.Unlock()
	}
}

func (f *fleet) unhandled() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.unhandledN
}

// drain waits until every published record has been handled.
func (f *fleet) drain(ctx context.Context, limit time.Duration) bool {
	end := time.Now().Add(limit)
	for f.unhandled() > 0 {
		if time.Now().After(end) || ctx.Err() != nil {
			return false
		}
		sleep(ctx, f.cfg.Sample)
	}
	return true
}

// client is one instance's Kinesis client: nothing gets through once it
// has crashed.
type client struct {
	kinesisapi.API
	w interface {
		WaitForRecords(context.Context, string) error
	}
	in *instance
}

// errDead is what a crashed instance's Kinesis calls fail with: an
// invalid argument, which the coordinator does not retry (a retry's
// backoff inside a pass would hold the pass lock, and Stop waits for it on
// a sync.Mutex, which stops a synctest bubble's clock).
var errDead = &types.InvalidArgumentException{Message: aws.String("sim: instance crashed")}

func (c *client) GetRecords(ctx context.Context, in *kinesis.GetRecordsInput, o ...func(*kinesis.Options)) (*kinesis.GetRecordsOutput, error) {
	if c.in.dead.Load() {
		return nil, errDead
	}
	return c.API.GetRecords(ctx, in, o...)
}

func (c *client) GetShardIterator(ctx context.Context, in *kinesis.GetShardIteratorInput, o ...func(*kinesis.Options)) (*kinesis.GetShardIteratorOutput, error) {
	if c.in.dead.Load() {
		return nil, errDead
	}
	return c.API.GetShardIterator(ctx, in, o...)
}

func (c *client) ListShards(ctx context.Context, in *kinesis.ListShardsInput, o ...func(*kinesis.Options)) (*kinesis.ListShardsOutput, error) {
	if c.in.dead.Load() {
		return nil, errDead
	}
	return c.API.ListShards(ctx, in, o...)
}

func (c *client) WaitForRecords(ctx context.Context, it string) error {
	if c.in.dead.Load() {
		sleep(ctx, time.Second)
		return errDead
	}
	return c.w.WaitForRecords(ctx, it)
}

// event is a change of the fleet about to happen.
type event struct {
	name    string
	subject string // the instance it is about
	at      time.Time
	before  Counts
	// owners is who held which lease just before.
	owners map[string]string
}

func (f *fleet) event(ctx context.Context, name, subject string) event {
	ls, _ := f.cfg.Observe.List(ctx, f.cfg.Namespace)
	owners := map[string]string{}
	for _, l := range ls {
		if l.Checkpoint != lease.CheckpointShardEnd {
			owners[l.ShardID] = l.Owner
		}
	}
	f.progress("%s %s", name, subject)
	return event{name: name, subject: subject, at: time.Now(), before: f.c.snapshot(), owners: owners}
}

// settle watches the fleet after ev until it has been balanced for Settle
// (or PhaseTimeout passed) and returns the phase's figures.
func (f *fleet) settle(ctx context.Context, ev event) Phase {
	cfg := f.cfg
	p := Phase{Name: ev.name, Subject: ev.subject, At: ev.at, PassEvery: cfg.passEvery(), Failover: cfg.Failover}
	live := f.liveNames()
	p.Live = len(live)
	p.MinMoves = minMoves(ev.owners, live, cfg.Shards)
	if ev.name == "start" {
		p.MinMoves = cfg.Shards
	}
	// The subject's shards that must move (it left) or the ones it must
	// get (it joined).
	subjects := strings.Fields(ev.subject) // RunSteps: several at once
	var orphans []string
	for id, o := range ev.owners {
		if slices.Contains(subjects, o) && !slices.Contains(live, o) {
			orphans = append(orphans, id)
		}
	}
	fair := cfg.Shards / max(len(live), 1)
	var balancedSince, lastNote time.Time
	deadline := ev.at.Add(cfg.PhaseTimeout)
	for {
		now := time.Now()
		ls, err := cfg.Observe.List(ctx, cfg.Namespace)
		if err == nil {
			ok, why := balanced(ls, live)
			if now.Sub(lastNote) >= 10*time.Second {
				lastNote = now
				f.progress("    %s after %s: %s", ev.name, secs(now.Sub(ev.at)), why)
			}
			if ok {
				if balancedSince.IsZero() {
					balancedSince = now
				}
			} else {
				balancedSince = time.Time{}
			}
			if p.FairShare == 0 && len(subjects) > 0 && atShare(ls, live, subjects, fair) {
				p.FairShare = now.Sub(ev.at)
			}
		}
		if len(orphans) > 0 && p.FailedOver == 0 && f.allRead(orphans) {
			p.FailedOver = now.Sub(ev.at)
		}
		if !balancedSince.IsZero() && now.Sub(balancedSince) >= cfg.Settle && (len(orphans) == 0 || p.FailedOver > 0) {
			p.Converged = true
			p.Convergence = balancedSince.Sub(ev.at)
			break
		}
		if now.After(deadline) || ctx.Err() != nil {
			ls, _ := cfg.Observe.List(ctx, cfg.Namespace)
			_, why := balanced(ls, live)
			p.Stuck = why
			break
		}
		sleep(ctx, cfg.Sample)
	}
	p.Window = Window{Dur: time.Since(ev.at), Counts: f.c.snapshot().Sub(ev.before)}
	p.Moves = len(f.moves.since(ev.at))
	f.progress("  %s", p.summary())
	return p
}

// atShare reports whether every one of subjects is live and holds at
// least fair leases.
func atShare(ls []lease.Lease, live, subjects []string, fair int) bool {
	held := load(ls)
	for _, s := range subjects {
		if !slices.Contains(live, s) || held[s] < fair {
			return false
		}
	}
	return true
}

// allRead reports whether a live instance reads every one of the shards.
func (f *fleet) allRead(ids []string) bool {
	f.mu.Lock()
	ins := slices.Clone(f.instances)
	f.mu.Unlock()
	reading := map[string]bool{}
	for _, in := range ins {
		f.mu.Lock()
		live := in.live
		f.mu.Unlock()
		if !live || in.coord == nil {
			continue
		}
		for _, id := range in.coord.Reading() {
			reading[id] = true
		}
	}
	for _, id := range ids {
		if !reading[id] {
			return false
		}
	}
	return true
}

func load(ls []lease.Lease) map[string]int {
	m := map[string]int{}
	for _, l := range ls {
		if l.Checkpoint != lease.CheckpointShardEnd && l.Owner != "" {
			m[l.Owner]++
		}
	}
	return m
}

// balanced reports whether every active lease is held by a live instance,
// none is being handed over, and every live instance holds its fair share
// (the floor or the ceiling of leases over instances); why says what is not.
func balanced(ls []lease.Lease, live []string) (bool, string) {
	n := 0
	for _, l := range ls {
		if l.Checkpoint == lease.CheckpointShardEnd {
			continue
		}
		n++
		switch {
		case l.Owner == "":
			return false, "lease " + l.ShardID + " unowned"
		case !slices.Contains(live, l.Owner):
			return false, "lease " + l.ShardID + " held by " + l.Owner + ", not live"
		case l.PendingOwner != "":
			return false, "lease " + l.ShardID + " being handed to " + l.PendingOwner
		}
	}
	lo, hi := n/len(live), (n+len(live)-1)/len(live)
	m := load(ls)
	for _, o := range live {
		if m[o] < lo || m[o] > hi {
			return false, fmt.Sprintf("%s holds %d, fair share %d..%d", o, m[o], lo, hi)
		}
	}
	return true, ""
}

// minMoves is the fewest owner changes that take the fleet from owners
// (shard → owner, "" for none) to a balanced state over live: every lease
// of nobody or of an instance not live moves, and each live instance above
// its share gives up the excess, the larger shares going to those that
// hold the most already.
func minMoves(owners map[string]string, live []string, total int) int {
	held := map[string]int{}
	moves := 0
	for _, o := range owners {
		if o == "" || !slices.Contains(live, o) {
			moves++
			continue
		}
		held[o]++
	}
	counts := make([]int, 0, len(live))
	for _, o := range live {
		counts = append(counts, held[o])
	}
	sort.Sort(sort.Reverse(sort.IntSlice(counts)))
	q, r := total/len(live), total%len(live)
	for i, c := range counts {
		t := q
		if i < r {
			t++
		}
		moves += max(0, c-t)
	}
	return moves
}

// check finds the broken invariants: a shard handled by two instances at
// once, and duplicates no crash or partition explains.
func (f *fleet) check(rep *Report) {
	f.mu.Lock()
	defer f.mu.Unlock()
	byShard := map[string][]handling{}
	for id, hs := range f.handled {
		byShard[id.shard] = append(byShard[id.shard], hs...)
	}
	overlaps := 0
	var example string
	for _, id := range slices.Sorted(maps.Keys(byShard)) {
		hs := byShard[id]
		slices.SortFunc(hs, func(a, b handling) int { return a.start.Compare(b.start) })
		ends := map[string]time.Time{} // latest end per owner so far
		for _, h := range hs {
			for o, e := range ends {
				if o != h.owner && h.start.Before(e) {
					overlaps++
					if example == "" {
						example = fmt.Sprintf("shard %s: %s handled a record at %v while %s's ran until %v",
							id, h.owner, h.start.Sub(rep.Began), o, e.Sub(rep.Began))
					}
				}
			}
			if h.end.After(ends[h.owner]) {
				ends[h.owner] = h.end
			}
		}
	}
	if overlaps > 0 {
		rep.Violations = append(rep.Violations, fmt.Sprintf("%d handlings overlapped another instance's on the same shard (%s)", overlaps, example))
	}
	// Duplicates, charged to the phase of the second handling.
	for id, hs := range f.handled {
		if len(hs) < 2 {
			continue
		}
		slices.SortFunc(hs, func(a, b handling) int { return a.start.Compare(b.start) })
		for i := 1; i < len(hs); i++ {
			explained, lost := false, false
			for _, e := range hs[:i] {
				explained = explained || f.explainedLocked(id, e, hs[i].start)
				lost = lost || f.losses.between(e.owner, id.shard, e.start, hs[i].start)
			}
			ph := rep.phaseAt(hs[i].start)
			if ph == nil {
				continue
			}
			ph.Duplicates++
			if !explained && lost {
				ph.AfterLoss++
				explained = true
			}
			if !explained {
				ph.Unexplained++
				if len(rep.Violations) < 20 {
					rep.Violations = append(rep.Violations, fmt.Sprintf("%s: record %s/%s handled by %s, then again by %s at %v (no crash or partition explains it)",
						ph.Name, id.shard, id.seq, hs[i-1].owner, hs[i].owner, hs[i].start.Sub(rep.Began)))
				}
			}
		}
	}
	rep.Published = len(f.published)
	rep.Losses = f.losses.count()
	for _, p := range rep.Phases {
		if !p.Converged {
			rep.Violations = append(rep.Violations, fmt.Sprintf("%s: not balanced within %v: %s", p.Name, f.cfg.PhaseTimeout, p.Stuck))
		}
	}
}

// leave stops name gracefully and waits for its handlers: it is no
// longer live at once.
func (f *fleet) leave(ctx context.Context, name string) {
	f.setLive(name, false)
	in := f.get(name)
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*f.cfg.Failover)
	defer cancel()
	if err := in.coord.Stop(sctx); err != nil {
		f.progress("leave: stop: %v", err)
	}
	close(in.queue)
	in.done.Wait()
}

// crash kills victim at once (no more calls, no more handling) and
// returns the phase until the others have taken its shards.
func (f *fleet) crash(ctx context.Context, victim string) Phase {
	ev := f.event(ctx, "crash", victim)
	f.kill(victim)
	return f.settle(ctx, ev)
}

// kill crashes victim: its calls fail, its handlers stop at once.
func (f *fleet) kill(victim string) {
	in := f.get(victim)
	in.dead.Store(true)
	in.fault.Store(int32(Dead))
	f.mu.Lock()
	in.diedAt = time.Now()
	f.crashes[victim] = crashed{at: in.diedAt, cp: maps.Clone(f.checkpoints[victim])}
	f.mu.Unlock()
	f.setLive(victim, false)
}

// finish stops publishing, lets every record be handled, stops the fleet
// and completes rep with its checks and totals.
func (f *fleet) finish(ctx context.Context, rep *Report, stopPub func()) *Report {
	f.pubOn.Store(false)
	stopPub()
	if !f.drain(ctx, f.cfg.PhaseTimeout) {
		rep.Violations = append(rep.Violations, fmt.Sprintf("%d published records never handled", f.unhandled()))
	}
	f.stopAll()
	rep.Ended = time.Now()
	f.check(rep)
	rep.Total = f.c.snapshot()
	return rep
}
