package dst

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"log/slog"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/kinesis"
	"github.com/aws/aws-sdk-go-v2/service/kinesis/types"

	"github.com/kinesisgen/kinesisgen/internal/randsrc"
	"github.com/kinesisgen/kinesisgen/runtime"
	"github.com/kinesisgen/kinesisgen/runtime/kinesistest"
	"github.com/kinesisgen/kinesisgen/runtime/lease"
)

// Msg is what the simulation publishes: an id unique in the run and its
// key ("" for a keyless publish).
type Msg struct {
	ID  int64  `json:"id"`
	Key string `json:"key"`
}

const stream = "dst"

// Config is one run.
type Config struct {
	Seed   uint64
	Mix    Mix
	Timing Timing
	// Events is the schedule; nil: Generate(Seed, Mix, Timing).
	Events []Event
	// Logger gets the runtime's logs (discarded when nil).
	Logger *slog.Logger
	// The members roster is the runtime's default (its whole member
	// list read every pass at the simulator's few members). Roster makes
	// every instance read the watched entries only whenever it can
	// (runtime.WithMembersRoster(-1)); NoRoster turns the roster off
	// (runtime.WithoutMembersRoster: liveness per instance as before it).
	Roster, NoRoster bool
}

// instance is one broker, one member of an application.
type instance struct {
	name, app string
	ns        string // the application name it runs under (app, or app-gN after a re-creation)
	w         *world
	b         *runtime.Broker
	dead      atomic.Bool
	f         faults // world.mu
	// bad is the last time one of its lease-store calls failed, was
	// answered late or was frozen (world.mu); fences when the fence
	// followed no such call within a failover time.
	bad    time.Time
	fences [][2]time.Time // when it fenced, and bad then
	// lastBeats is each member\'s beat in its last members answer.
	lastBeats map[string]int64
	started   time.Time
	gone      time.Time // left or crashed (world.mu)
	crashed   bool
	// stopping: its shutdown has begun (world.mu); it is not paused
	// again (see pause).
	stopping bool
	// exited is closed when the process ends (it crashed, or its
	// Shutdown returned): a stuck handler dies with it.
	exited   chan struct{}
	exitOnce sync.Once
}

func (in *instance) exit() { in.exitOnce.Do(func() { close(in.exited) }) }

type span struct {
	inst     string
	from, to time.Time
}

// handling is one run of a handler.
type handling struct {
	app, inst    string
	id           int64
	attempt      int
	shard, seq   string
	key          string // the record's partition key (a keyless publish's is the runtime's)
	start, end   time.Time
	outcome      string
	cancelledAt  time.Time
	crashedMidst bool
}

type published struct {
	id    int64
	key   string
	agg   bool
	at    time.Time // acknowledged
	shard string
}

type callRec struct {
	what  string
	took  time.Duration
	bound time.Duration
	err   error
}

// world is one run.
type world struct {
	cfg    Config
	kin    *kinesistest.Server
	leases *lease.Memory
	begin  time.Time
	logger *slog.Logger
	apps   []string
	gen    int // stream generation: bumped by Recreate
	joins  int // instances started (by the run's goroutine): the next one's phase

	mu      sync.Mutex
	insts   map[string]*instance
	order   []*instance
	pub     []published
	handled []handling
	retried map[string]map[int64]int // app → id → highest attempt it answered Retry at
	calls   []callRec
	pubErrs []string
	trace   []string
	traceAt []time.Duration // each trace line's time, to the nanosecond (observations)
	pauses  []span
	outages []span // Kinesis read faults
	// kinSlow are the KinesisSlow windows, with their latency.
	kinSlow []slowSpan
	takes   []take // every lease taken, in order
	// storeOutages are lease-store outages (StoreFail): a take-over by
	// the instance waits for its end.
	storeOutages []span
	steals       []steal
	lateSpans    []span              // StoreLate
	parents      map[string][]string // shard → its parents (the last stream's)
	pubHold      chan struct{}
	putFaults    putFaults       // PutSlow, PutLate, PutHang, PutFail
	stuck        map[string]bool // app/id: a handler of it was stuck
	putOutages   []span          // PutLate, PutHang, PutFail windows, a call's deadline past each: a publish's bound grows by its overlap with them
	stopPub      atomic.Bool
	pubWG        sync.WaitGroup
	bg           sync.WaitGroup // leaves under way
	pubs         *runtime.Broker
	plain        runtime.Publisher[Msg]
	aggregate    runtime.Publisher[Msg]

	// fetched are the times an instance got a record in a GetRecords
	// answer (instance → shard/sequence → times), iterShard the shard of
	// each iterator handed out: the unread check counts a shard read
	// while a reader holds records it fetched, however long they then
	// wait for a worker.
	fetched   map[string]map[string][]time.Time
	iterShard map[string]string
	// foreign are the fetches (as fetched) of retry copies another
	// application made: the fetching instance skips them without a
	// handler, so only its checkpoints (checkpoints: instance → the
	// positions it wrote, in order) say when it was done with them.
	foreign     map[string]map[string][]time.Time
	checkpoints map[string][]cpWrite
	// releases are the leases each instance released (instance → shard
	// and when), leaseFences those it fenced: a record fetched and never
	// handled by a reader that then released its lease (a Stop's records
	// not begun) counts until the release (see checkUnread).
	releases    map[string][]shardAt
	leaseFences map[string][]shardAt
	// leftToExpire are the leases each instance's Stop left to expire
	// (a handler still ran a record of the shard, or might: see
	// checkUnread), and when.
	leftToExpire map[string][]shardAt

	// seen (application → ids it handled, from handled[:seenN]) and
	// allSeen (application → a prefix of pub it has all handled) keep
	// drain's poll from rebuilding unhandledLocked's maps every 200 ms.
	seen    map[string]map[int64]bool
	seenN   int
	allSeen map[string]int
}

// shardAt is a lease event of one instance: a release or a fence.
type shardAt struct {
	shard string
	at    time.Time
}

// cpWrite is a checkpoint an instance wrote (applied by the lease store).
type cpWrite struct {
	shard, cp string
	at        time.Time
}

func (w *world) now() time.Duration { return time.Since(w.begin) }

// note adds a line to the trace.
func (w *world) note(format string, args ...any) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.noteLocked(format, args...)
}

func (w *world) noteLocked(format string, args ...any) {
	now := w.now()
	w.trace = append(w.trace, fmt.Sprintf("%8.3fs ", now.Seconds())+fmt.Sprintf(format, args...))
	w.traceAt = append(w.traceAt, now)
}

// Result is what a run found.
type Result struct {
	Seed       uint64
	Mix        string
	Events     []Event
	Violations []Violation
	// Trace is the run's log: the events as applied and what the
	// simulation noticed (pauses that began at a members read, say).
	Trace []string
	// Published and Handled count acknowledged messages and handler runs.
	Published, Handled int
	// Observations are what the run did, one line each in the order the
	// simulation saw it (see observations), and Fingerprint a hash of
	// them sorted: two runs of a seed whose fingerprints match did the
	// same things at the same virtual times.
	Observations []string
	Fingerprint  string
}

// Failed reports whether the run broke an invariant.
func (r *Result) Failed() bool { return len(r.Violations) > 0 }

// Run runs one schedule. It must run inside a testing/synctest bubble (it
// lasts minutes of virtual time).
func Run(ctx context.Context, cfg Config) *Result {
	if cfg.Timing == (Timing{}) {
		cfg.Timing = DefaultTiming
	}
	if cfg.Mix.Apps == 0 {
		cfg.Mix.Apps = 1
	}
	if cfg.Events == nil {
		cfg.Events = Generate(cfg.Seed, cfg.Mix, cfg.Timing)
	}
	// The runtime's own draws (jitter, keyless keys) from the seed, and
	// the keyless keys anew: a schedule sees the keys it sees run alone.
	defer randsrc.Seed(cfg.Seed)()
	kopts := []kinesistest.Option{kinesistest.WithIteratorTTL(cmp.Or(cfg.Timing.IteratorTTL, 5*time.Minute))}
	if cfg.Mix.FanOut {
		// Subscriptions end every 10–20 s (the service's 5 min, shortened),
		// so that readers renew them all through a run.
		kopts = append(kopts, kinesistest.WithSubscriptionLifetime(time.Duration(10+cfg.Seed%11)*time.Second))
	}
	w := &world{
		cfg:     cfg,
		kin:     kinesistest.New(kopts...),
		leases:  lease.NewMemory(),
		begin:   time.Now(),
		insts:   map[string]*instance{},
		retried: map[string]map[int64]int{},
		apps:    appNames(cfg.Mix.Apps),
		stuck:   map[string]bool{},
	}
	w.fetched, w.iterShard = map[string]map[string][]time.Time{}, map[string]string{}
	w.foreign, w.checkpoints = map[string]map[string][]time.Time{}, map[string][]cpWrite{}
	w.releases, w.leaseFences, w.leftToExpire = map[string][]shardAt{}, map[string][]shardAt{}, map[string][]shardAt{}
	w.logger = cfg.Logger
	if w.logger == nil {
		// Disabled, not a handler writing to io.Discard: the runtime then
		// skips building the records nobody reads (fenceHook still sees
		// its warnings).
		w.logger = slog.New(slog.DiscardHandler)
	}
	res := &Result{Seed: cfg.Seed, Mix: cfg.Mix.Name, Events: cfg.Events}
	if err := w.kin.AddStream(stream, 4); err != nil {
		res.Violations = append(res.Violations, Violation{Kind: "setup", What: err.Error()})
		return res
	}
	w.pubs = w.kin.NewBroker(runtime.WithLogger(w.logger), runtime.WithOwnerID("publisher"), runtime.WithLeaseStore(lease.NewMemory()),
		runtime.WithKinesisClient(&pubClient{API: w.kin, w: w}), runtime.WithPublishCallTimeout(putCallTimeout))
	if err := w.pubs.Connect(ctx); err != nil {
		res.Violations = append(res.Violations, Violation{Kind: "setup", What: err.Error()})
		return res
	}
	w.plain = runtime.NewPublisher[Msg](w.pubs, runtime.PublisherSpec{Stream: stream})
	w.aggregate = runtime.NewPublisher[Msg](w.pubs, runtime.PublisherSpec{Stream: stream, Aggregate: true})

	pctx, stopPublishing := context.WithCancel(ctx)
	w.startPublishers(pctx)

	for _, e := range cfg.Events {
		if d := e.At - w.now(); d > 0 {
			time.Sleep(d)
		}
		w.apply(ctx, e)
	}
	if d := cfg.Timing.Length - w.now(); d > 0 {
		time.Sleep(d)
	}
	w.stopPub.Store(true)
	w.pubWG.Wait()
	stopPublishing()
	end := w.now()
	w.note("publishing stopped; draining")
	w.drain(ctx)
	w.note("drained (%.1fs); shutting down", (w.now() - end).Seconds())
	w.shutdownAll(ctx)
	w.callBound("publisher shutdown", 10*time.Second, func() error {
		sctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		return w.pubs.Shutdown(sctx)
	})
	w.parents = w.lineage(ctx)
	w.mu.Lock()
	defer w.mu.Unlock()
	res.Violations = w.check()
	res.Trace = slices.Clone(w.trace)
	res.Published, res.Handled = len(w.pub), len(w.handled)
	res.Observations = w.observationsLocked(res.Violations)
	res.Fingerprint = Fingerprint(res.Observations, true)
	return res
}

// apply carries out one event.
func (w *world) apply(ctx context.Context, e Event) {
	w.note("%s", strings.TrimSpace(e.String()[9:]))
	in := w.get(e.Inst)
	switch e.Kind {
	case Join:
		w.join(ctx, e.App, e.Inst)
	case Leave:
		if in == nil || in.dead.Load() {
			return
		}
		w.mu.Lock()
		in.gone = time.Now()
		w.mu.Unlock()
		w.bg.Go(func() { w.shutdown(ctx, in, "leave") })
	case Crash:
		if in == nil {
			return
		}
		w.mu.Lock()
		in.gone, in.crashed = time.Now(), true
		w.mu.Unlock()
		in.dead.Store(true)
		in.exit()
	case Pause:
		if in != nil && !in.dead.Load() {
			in.pause(e.D)
		}
	case PauseAfterMembers:
		if in != nil {
			w.mu.Lock()
			in.f.memberPause = e.D
			w.mu.Unlock()
		}
	case StoreSlow:
		if in != nil {
			w.mu.Lock()
			in.f.slowUntil, in.f.slowLat = time.Now().Add(e.D), e.Lat
			w.mu.Unlock()
		}
	case StoreLate:
		if in != nil {
			w.mu.Lock()
			in.f.lateUntil = time.Now().Add(e.D)
			w.lateSpans = append(w.lateSpans, span{inst: in.name, from: time.Now(), to: time.Now().Add(e.D)})
			w.mu.Unlock()
		}
	case StoreFail:
		if in != nil {
			w.mu.Lock()
			in.f.failUntil, in.f.failThrottle = time.Now().Add(e.D), e.Throttle
			w.storeOutages = append(w.storeOutages, span{inst: in.name, from: time.Now(), to: time.Now().Add(e.D + storeBackoff)})
			w.mu.Unlock()
		}
	case KinesisFail:
		if in != nil {
			w.mu.Lock()
			in.f.kinUntil, in.f.kinThrottle = time.Now().Add(e.D), e.Throttle
			// A reader backs off up to 10 s after failed reads.
			w.outages = append(w.outages, span{inst: in.name, from: time.Now(), to: time.Now().Add(e.D + readerBackoff)})
			w.mu.Unlock()
		}
	case StoreHang:
		if in != nil {
			w.mu.Lock()
			in.f.hangUntil = time.Now().Add(e.D)
			// A call sent at the window's end waits out its deadline (a
			// third of the failover time), then backs off as a failed one.
			w.storeOutages = append(w.storeOutages, span{inst: in.name, from: time.Now(), to: time.Now().Add(e.D + w.cfg.Timing.Failover/3 + storeBackoff)})
			w.mu.Unlock()
		}
	case KinesisSlow:
		if in != nil {
			w.mu.Lock()
			in.f.kinSlowUntil, in.f.kinSlowLat = time.Now().Add(e.D), e.Lat
			w.kinSlow = append(w.kinSlow, slowSpan{span{inst: in.name, from: time.Now(), to: time.Now().Add(e.D)}, e.Lat})
			w.mu.Unlock()
		}
	case KinesisHang:
		if in != nil {
			w.mu.Lock()
			in.f.kinHangUntil = time.Now().Add(e.D)
			// A call sent at the window's end waits out its deadline (the
			// runtime's Kinesis call deadline is the failover time); its
			// reader then backs off as after any failed read.
			w.outages = append(w.outages, span{inst: in.name, from: time.Now(), to: time.Now().Add(e.D + w.cfg.Timing.Failover + readerBackoff)})
			w.mu.Unlock()
		}
	case PutSlow, PutLate, PutHang, PutFail:
		w.mu.Lock()
		until := time.Now().Add(e.D)
		if e.Kind != PutSlow {
			// A publish waits out the window, one call's deadline and a
			// backoff: its bound grows by that much (see putOutages).
			w.putOutages = append(w.putOutages, span{from: time.Now(), to: until.Add(putCallTimeout)})
		}
		switch f := &w.putFaults; e.Kind {
		case PutSlow:
			f.slowUntil, f.slowLat = until, e.Lat
		case PutLate:
			f.lateUntil = until
		case PutHang:
			f.hangUntil = until
		case PutFail:
			f.failUntil, f.failThrottle = until, e.Throttle
		}
		w.mu.Unlock()
	case Split, Merge:
		w.reshard(ctx, e)
	case Scale:
		w.scale(ctx, e)
	case Recreate:
		w.recreate(ctx, e)
	case SubCut, SubEnd:
		// In the background: ending a subscription whose reader is frozen
		// waits up to 5 s, which would shift the schedule's later events.
		w.bg.Go(func() { w.endSubscriptions(e) })
	}
}

// endSubscriptions cuts (SubCut) or ends (SubEnd) the fan-out
// subscriptions of e's shard.
func (w *world) endSubscriptions(e Event) {
	shard := ""
	if e.N > 0 {
		var shards []string
		for _, s := range w.kin.Subscriptions(stream) {
			shards = append(shards, s.Shard)
		}
		slices.Sort(shards)
		shards = slices.Compact(shards)
		if len(shards) == 0 {
			w.note("%s: no subscription", e.Kind)
			return
		}
		shard = shards[(e.N-1)%len(shards)]
	}
	var n int
	if e.Kind == SubCut {
		n = w.kin.CutSubscriptions(stream, shard)
	} else {
		n = w.kin.EndSubscriptions(stream, shard)
	}
	w.note("%s %s: %d subscriptions", e.Kind, cmp.Or(shard, "(every shard)"), n)
}

func (w *world) get(name string) *instance {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.insts[name]
}

// join starts an instance of app. Each starts its own microseconds past
// the event's instant, so its timers never fire at an instant another
// instance's do: which of two instances acts first is then the virtual
// clock's to say, not the Go scheduler's (see "What may vary").
func (w *world) join(ctx context.Context, app, name string) *instance {
	w.joins++
	time.Sleep(time.Duration(w.joins) * time.Microsecond)
	in := &instance{name: name, app: app, ns: w.appNS(app), w: w, started: time.Now(), exited: make(chan struct{})}
	t := w.cfg.Timing
	opts := []runtime.Option{
		runtime.WithKinesisClient(&client{API: w.kin, w: w.kin, in: in}),
		runtime.WithLeaseStore(&store{m: w.leases, in: in}),
		runtime.WithOwnerID(name),
		runtime.WithApplication(in.ns),
		runtime.WithLogger(slog.New(&fenceHook{in: in, next: w.logger.Handler()})),
		runtime.WithFailoverTime(t.Failover),
		runtime.WithLeaseRenewInterval(t.Renew),
		runtime.WithShardSyncInterval(t.Sync),
		runtime.WithCheckpointInterval(t.Checkpoint),
		runtime.WithShutdownTimeout(shutdownTimeout),
	}
	switch {
	case w.cfg.NoRoster:
		opts = append(opts, runtime.WithoutMembersRoster())
	case w.cfg.Roster:
		opts = append(opts, runtime.WithMembersRoster(-1))
	}
	in.b = w.kin.NewBroker(opts...)
	w.mu.Lock()
	w.insts[name] = in
	w.order = append(w.order, in)
	w.mu.Unlock()
	read := runtime.PollInterval(runtime.MinPollInterval)
	if w.cfg.Mix.FanOut {
		read = runtime.FanOut(w.consumer(ctx, in.ns))
	}
	if _, err := runtime.Subscribe(in.b, stream, w.handler(in), runtime.Workers(8), runtime.ByKey(), runtime.StartAt(runtime.Horizon()),
		read, runtime.MaxRetries(3)); err != nil {
		w.note("%s: subscribe: %v", name, err)
		return in
	}
	w.callBound(name+" connect", 2*t.Failover+10*time.Second, func() error {
		cctx, cancel := context.WithTimeout(ctx, 2*t.Failover+10*time.Second)
		defer cancel()
		return in.b.Connect(cctx)
	})
	return in
}

// consumer registers the stream consumer of application namespace ns,
// once, and returns its name: registered here, not by the instances, so
// that a Connect never waits for one.
func (w *world) consumer(ctx context.Context, ns string) string {
	d, err := w.kin.DescribeStreamSummary(ctx, &kinesis.DescribeStreamSummaryInput{StreamName: aws.String(stream)})
	if err == nil {
		_, err = w.kin.RegisterStreamConsumer(ctx, &kinesis.RegisterStreamConsumerInput{StreamARN: d.StreamDescriptionSummary.StreamARN, ConsumerName: aws.String(ns)})
	}
	var inUse *types.ResourceInUseException // registered at an earlier join
	if err != nil && !errors.As(err, &inUse) {
		w.note("register stream consumer %s: %v", ns, err)
	}
	return ns
}

// readerBackoff and storeBackoff are the longest waits of the runtime's
// backoff after failed reads (a reader's) and lease-store calls: an
// outage excuses a shard unread for that much longer.
const (
	readerBackoff = 10 * time.Second
	storeBackoff  = 2 * time.Second
)

// shutdownTimeout is the brokers' WithShutdownTimeout; a Shutdown must
// return within it and a failover time.
const shutdownTimeout = 10 * time.Second

func (w *world) shutdown(ctx context.Context, in *instance, why string) {
	// A paused process handles its shutdown signal once it runs again
	// (and its Stop would wait on a pass frozen at the gate). From then
	// on it is not paused (see pause).
	for {
		in.gate()
		w.mu.Lock()
		paused := in.f.resume != nil
		in.stopping = !paused
		w.mu.Unlock()
		if !paused {
			break
		}
	}
	bound := shutdownTimeout + w.cfg.Timing.Failover
	w.callBound(in.name+" shutdown ("+why+")", bound, func() error {
		sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), bound)
		defer cancel()
		return in.b.Shutdown(sctx)
	})
	in.exit()
}

// callBound runs a public call and records how long it took against its
// bound.
func (w *world) callBound(what string, bound time.Duration, f func() error) {
	start := time.Now()
	err := f()
	took := time.Since(start)
	w.mu.Lock()
	w.calls = append(w.calls, callRec{what: what, took: took, bound: bound, err: err})
	w.mu.Unlock()
}

func (w *world) appNS(app string) string {
	if w.gen == 0 {
		return app
	}
	return fmt.Sprintf("%s-g%d", app, w.gen)
}

// behaviour is what the handler does with a delivery: a function of the
// seed, the application, the message and the attempt only, so a schedule
// shrunk of events keeps its handlers.
type behaviour struct {
	kind string // ack, slow, retry, reject, panic
	// d is whole milliseconds and up to one more in nanoseconds: two
	// handlers, or a handler and a timer, then rarely end at one instant.
	d time.Duration
}

func (w *world) behaviour(app string, id int64, attempt int) behaviour {
	h := fnv.New64a()
	// The bytes of fmt's "%s/%d/%d", without fmt (every handling).
	var b [64]byte
	k := append(b[:0], app...)
	k = append(strconv.AppendInt(append(k, '/'), id, 10), '/')
	h.Write(strconv.AppendInt(k, int64(attempt), 10))
	rng := rand.New(rand.NewPCG(w.cfg.Seed, h.Sum64()))
	m := w.cfg.Mix
	x := rng.Float64()
	d := time.Duration(5+rng.IntN(30)) * time.Millisecond
	tie := time.Duration(rng.Int64N(int64(time.Millisecond)))
	if attempt > 1 {
		return behaviour{kind: "ack", d: d + tie}
	}
	d += tie
	switch {
	case x < m.Slow && id%1_000_000 >= 10:
		// Not while the fleet starts (a key's first ten messages, about
		// 5 s): a slow record during the first balancing is defect 1's
		// crossing, which slowjoin finds; the other mixes look for their
		// own.
		return behaviour{kind: "slow", d: time.Duration(1000+rng.IntN(7000))*time.Millisecond + tie}
	case x < m.Slow+m.Retry:
		return behaviour{kind: "retry", d: d}
	case x < m.Slow+m.Retry+m.Reject:
		return behaviour{kind: "reject", d: d}
	case x < m.Slow+m.Retry+m.Reject+m.Panic:
		return behaviour{kind: "panic", d: d}
	case x < m.Slow+m.Retry+m.Reject+m.Panic+m.Stuck:
		return behaviour{kind: "stuck", d: time.Duration(15000+rng.IntN(30000))*time.Millisecond + tie}
	}
	return behaviour{kind: "ack", d: d}
}

var errRejected = errors.New("dst: rejected")

// maxStuck is the most messages whose handler hangs in a run (Mix.Stuck).
const maxStuck = 2

// steal is a lease taken from another instance (not released by it).
type steal struct {
	at, fromBad  time.Time
	to, from, id string
	fromPaused   bool
}

// take is a lease taken by inst.
type take struct {
	inst string
	shardAt
}

// took notes a take of shard id by to from from ("" for nobody).
func (w *world) took(to, from, id string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.noteLocked("%s took %s from %s", to, id, orNobody(from))
	w.takes = append(w.takes, take{inst: to, shardAt: shardAt{id, time.Now()}})
	if in := w.insts[from]; in != nil {
		w.steals = append(w.steals, steal{at: time.Now(), fromBad: in.bad, to: to, from: from, id: id, fromPaused: in.f.resume != nil})
	}
}

// fenceHook notes the runtime's "lease not renewed in time" warnings: an
// instance fencing itself.
type fenceHook struct {
	in   *instance
	next slog.Handler
}

func (h *fenceHook) Enabled(ctx context.Context, l slog.Level) bool {
	return l >= slog.LevelWarn || h.next.Enabled(ctx, l)
}

func (h *fenceHook) Handle(ctx context.Context, r slog.Record) error {
	if strings.HasPrefix(r.Message, "lease not renewed in time") {
		w := h.in.w
		w.mu.Lock()
		bad := h.in.bad
		if h.in.f.resume != nil {
			bad = time.Now() // fenced while frozen: as it should
		}
		h.in.fences = append(h.in.fences, [2]time.Time{time.Now(), bad})
		shard := ""
		r.Attrs(func(a slog.Attr) bool {
			if a.Key == "shard" {
				shard = a.Value.String()
			}
			return true
		})
		w.leaseFences[h.in.name] = append(w.leaseFences[h.in.name], shardAt{shard, time.Now()})
		w.noteLocked("%s fenced its lease of %s (not renewed in time)", h.in.name, shard)
		w.mu.Unlock()
	}
	if strings.HasPrefix(r.Message, "stop: handlers still run records: leases left to expire") {
		w := h.in.w
		w.mu.Lock()
		r.Attrs(func(a slog.Attr) bool {
			if ids, ok := a.Value.Any().([]string); ok && a.Key == "shards" {
				for _, id := range ids {
					w.leftToExpire[h.in.name] = append(w.leftToExpire[h.in.name], shardAt{id, time.Now()})
				}
			}
			return true
		})
		w.mu.Unlock()
	}
	if h.next.Enabled(ctx, r.Level) {
		return h.next.Handle(ctx, r)
	}
	return nil
}

func (h *fenceHook) WithAttrs(as []slog.Attr) slog.Handler {
	return &fenceHook{in: h.in, next: h.next.WithAttrs(as)}
}

func (h *fenceHook) WithGroup(g string) slog.Handler {
	return &fenceHook{in: h.in, next: h.next.WithGroup(g)}
}

func (w *world) handler(in *instance) runtime.Handler[Msg] {
	return func(ctx context.Context, m Msg, d runtime.Delivery) (out runtime.Outcome) {
		// The handling starts when the runtime calls the handler, and a
		// process frozen at its first line (the gate) has its context
		// cancelled by the fence meanwhile: both count from before the
		// gate. Taken after it, a handler called before its lease's fence
		// and thawed after another owner took the shard looked like one
		// started then, its context cancelled only at the thaw: an
		// overlap (mix all, seed 103, -dst.roster).
		start := time.Now()
		var cancelled atomic.Int64
		stop := context.AfterFunc(ctx, func() { cancelled.Store(int64(time.Since(w.begin))) })
		in.gate()
		if in.dead.Load() {
			stop()
			return runtime.Ack() // a crashed process runs nothing
		}
		h := handling{app: in.app, inst: in.name, id: m.ID, attempt: d.Attempt, shard: d.ShardID, seq: d.SequenceNumber, key: d.PartitionKey, start: start}
		b := w.behaviour(in.app, m.ID, d.Attempt)
		if b.kind == "stuck" {
			// Stuck once, as on a downstream call that hung: the next
			// owner's delivery runs as any (one stuck on every delivery
			// would hold its shard and its children on every owner in
			// turn, for as long as it stays stuck, whatever the runtime).
			// At most maxStuck in a run, and only while events happen: a
			// lane holds the records behind a stuck handler, and stuck
			// handlers one after another in one lane (seed 24: 56 s, then
			// 48 s from 114 s) outlast any drain.
			w.mu.Lock()
			k := in.app + "/" + strconv.FormatInt(m.ID, 10)
			if w.stuck[k] || len(w.stuck) >= maxStuck || time.Since(w.begin) > w.cfg.Timing.Length {
				b = behaviour{kind: "ack", d: 5 * time.Millisecond}
			} else {
				w.stuck[k] = true
			}
			w.mu.Unlock()
		}
		h.outcome = b.kind
		defer func() {
			// Frozen before it returns (the gate): a cancellation meanwhile
			// counts, so the AfterFunc stays armed across the gate. The
			// handler may see Done before the AfterFunc runs (a context
			// closes Done before it runs its AfterFuncs): record that too.
			in.gate()
			if stop() && ctx.Err() != nil {
				cancelled.CompareAndSwap(0, int64(time.Since(w.begin)))
			}
			h.end = time.Now()
			if c := cancelled.Load(); c != 0 {
				h.cancelledAt = w.begin.Add(time.Duration(c))
			}
			w.mu.Lock()
			if in.crashed && in.gone.Before(h.end) {
				h.end, h.crashedMidst = in.gone, true
			}
			w.handled = append(w.handled, h)
			if b.kind == "retry" || b.kind == "panic" { // a panic is retried
				rs := w.retried[in.app]
				if rs == nil {
					rs = map[int64]int{}
					w.retried[in.app] = rs
				}
				rs[m.ID] = max(rs[m.ID], d.Attempt)
			}
			w.mu.Unlock()
		}()
		if b.kind == "stuck" {
			// Deaf to its context (the AfterFunc notes a cancellation):
			// it ends when its time is up or its process does.
			select {
			case <-time.After(b.d):
			case <-in.exited:
			}
		} else {
			select {
			case <-time.After(b.d):
			case <-ctx.Done():
				cancelled.CompareAndSwap(0, int64(time.Since(w.begin)))
			}
		}
		switch b.kind {
		case "retry":
			return runtime.Retry()
		case "reject":
			return runtime.Reject(errRejected)
		case "panic":
			panic("dst: handler panics")
		}
		return runtime.Ack()
	}
}

// keys are the partition keys of the keyed publishers.
var keys = []string{"k0", "k1", "k2", "k3", "k4", "k5", "k6", "k7"}

// startPublishers starts one sequential publisher per key (so publish
// order is acknowledgement order) and one keyless one.
func (w *world) startPublishers(ctx context.Context) {
	for i := range len(keys) + 1 {
		w.pubWG.Add(1)
		go func() {
			defer w.pubWG.Done()
			rng := rand.New(rand.NewPCG(w.cfg.Seed, uint64(1000+i)))
			key := ""
			if i < len(keys) {
				key = keys[i]
			}
			// A phase of its own, apart from the instances' (join), so
			// that no two publishes, and no publish and timer, fall on
			// one instant: their order is the clock's.
			time.Sleep(time.Duration(500+i) * time.Microsecond)
			for n := int64(0); ; n++ {
				time.Sleep(time.Duration(100+rng.IntN(700)) * time.Millisecond)
				w.mu.Lock()
				hold := w.pubHold
				w.mu.Unlock()
				if hold != nil {
					<-hold
				}
				if w.stopPub.Load() {
					return
				}
				m := Msg{ID: int64(i)*1_000_000 + n, Key: key}
				agg := rng.Float64() < w.cfg.Mix.Aggregate
				if key == "" && rng.Float64() >= w.cfg.Mix.Keyless*4 {
					continue // the keyless publisher runs at a share of the others' rate
				}
				p := w.plain
				if agg {
					p = w.aggregate
				}
				// Drawn only in a mix with batches, so that the others'
				// seeds keep their schedules.
				if key != "" && w.cfg.Mix.Batch > 0 && rng.Float64() < w.cfg.Mix.Batch {
					n += w.publishBatch(ctx, p, m, 2+rng.IntN(3), agg) - 1
					continue
				}
				start := time.Now()
				cctx, cancel := context.WithTimeout(ctx, time.Minute)
				var rc runtime.Receipt
				var err error
				if key == "" {
					rc, err = p.Message(m).Send(cctx)
				} else {
					rc, err = p.Message(m).PartitionKey(key).Send(cctx)
				}
				cancel()
				took := time.Since(start)
				w.mu.Lock()
				w.calls = append(w.calls, callRec{what: fmt.Sprintf("publish %d", m.ID), took: took, bound: 20*time.Second + overlap(w.putOutages, start, time.Now()), err: nil})
				if err != nil {
					if ctx.Err() == nil {
						w.pubErrs = append(w.pubErrs, fmt.Sprintf("publish %d (key %q, aggregated %v) at %.3fs: %v", m.ID, key, agg, w.now().Seconds(), err))
					}
				} else {
					w.pub = append(w.pub, published{id: m.ID, key: key, agg: agg, at: time.Now(), shard: rc.ShardID})
				}
				w.mu.Unlock()
			}
		}()
	}
}

// publishBatch publishes size messages of first's key, first and the
// ones after it, in one SendAll (the bulk path: its waiter counts the
// batch down as a whole), records each one stored, as a sequential
// publisher's, and each one failed as a publish error; it returns size.
func (w *world) publishBatch(ctx context.Context, p runtime.Publisher[Msg], first Msg, size int, agg bool) int64 {
	msgs := make([]*runtime.Message[Msg], size)
	for j := range msgs {
		msgs[j] = p.Message(Msg{ID: first.ID + int64(j), Key: first.Key}).PartitionKey(first.Key)
	}
	start := time.Now()
	cctx, cancel := context.WithTimeout(ctx, time.Minute)
	receipts, err := runtime.SendAll(cctx, msgs)
	cancel()
	took := time.Since(start)
	w.mu.Lock()
	defer w.mu.Unlock()
	w.calls = append(w.calls, callRec{what: fmt.Sprintf("publish batch %d..%d", first.ID, first.ID+int64(size)-1), took: took, bound: 20*time.Second + overlap(w.putOutages, start, time.Now())})
	for j, rc := range receipts {
		id := first.ID + int64(j)
		if rc.SequenceNumber == "" {
			if ctx.Err() == nil {
				w.pubErrs = append(w.pubErrs, fmt.Sprintf("publish %d (key %q, aggregated %v, message %d of a batch of %d) at %.3fs: %v", id, first.Key, agg, j, size, w.now().Seconds(), err))
			}
			continue
		}
		w.pub = append(w.pub, published{id: id, key: first.Key, agg: agg, at: time.Now(), shard: rc.ShardID})
	}
	return int64(size)
}

// reshard splits or merges shards of the stream.
func (w *world) reshard(ctx context.Context, e Event) {
	out, err := w.kin.ListShards(ctx, &kinesis.ListShardsInput{StreamName: aws.String(stream)})
	if err != nil {
		w.note("reshard: list: %v", err)
		return
	}
	var open []string
	ranges := map[string][2]string{}
	for _, s := range out.Shards {
		if s.SequenceNumberRange.EndingSequenceNumber == nil {
			open = append(open, *s.ShardId)
			ranges[*s.ShardId] = [2]string{*s.HashKeyRange.StartingHashKey, *s.HashKeyRange.EndingHashKey}
		}
	}
	rng := rand.New(rand.NewPCG(w.cfg.Seed, uint64(e.At)))
	switch e.Kind {
	case Split:
		if len(open) >= 12 {
			return
		}
		id := open[rng.IntN(len(open))]
		r := ranges[id]
		mid := midpoint(r[0], r[1])
		_, err = w.kin.SplitShard(ctx, &kinesis.SplitShardInput{StreamName: aws.String(stream), ShardToSplit: aws.String(id), NewStartingHashKey: aws.String(mid)})
		w.note("split %s at %s: %v", id, mid, err)
	case Merge:
		if len(open) < 2 {
			return
		}
		// Adjacent: an open shard whose range ends just before another's starts.
		slices.SortFunc(open, func(a, b string) int { return cmpDec(ranges[a][0], ranges[b][0]) })
		i := rng.IntN(len(open) - 1)
		_, err = w.kin.MergeShards(ctx, &kinesis.MergeShardsInput{StreamName: aws.String(stream), ShardToMerge: aws.String(open[i]), AdjacentShardToMerge: aws.String(open[i+1])})
		w.note("merge %s + %s: %v", open[i], open[i+1], err)
	}
}

// scale runs UpdateShardCount to e.N open shards, clamped to half to
// twice the open shards (the service's rule) and to 12.
func (w *world) scale(ctx context.Context, e Event) {
	d, err := w.kin.DescribeStreamSummary(ctx, &kinesis.DescribeStreamSummaryInput{StreamName: aws.String(stream)})
	if err != nil {
		w.note("scale: describe: %v", err)
		return
	}
	open := int(aws.ToInt32(d.StreamDescriptionSummary.OpenShardCount))
	target := min(max(e.N, (open+1)/2), 2*open, 12)
	_, err = w.kin.UpdateShardCount(ctx, &kinesis.UpdateShardCountInput{StreamName: aws.String(stream), TargetShardCount: aws.Int32(int32(target)), ScalingType: types.ScalingTypeUniformScaling})
	w.note("update shard count %d → %d: %v", open, target, err)
}

// recreate deletes the stream and creates it again with e.N shards while
// no publish is in flight; the fleet is shut down before and a new one
// (new application names: the old leases name shards of the old stream)
// started after. The publisher stays, idle across the re-creation.
func (w *world) recreate(ctx context.Context, e Event) {
	hold := make(chan struct{})
	w.mu.Lock()
	w.pubHold = hold
	w.mu.Unlock()
	time.Sleep(2 * time.Second) // publishes in flight land
	// Everything published so far is handled before the stream goes.
	w.drain(ctx)
	w.mu.Lock()
	var running []*instance
	for _, in := range w.order {
		if in.gone.IsZero() {
			in.gone = time.Now()
			running = append(running, in)
		}
	}
	w.mu.Unlock()
	for _, in := range running {
		if in.dead.Load() {
			continue
		}
		w.shutdown(ctx, in, "recreate")
	}
	_, err := w.kin.DeleteStream(ctx, &kinesis.DeleteStreamInput{StreamName: aws.String(stream)})
	if err == nil {
		_, err = w.kin.CreateStream(ctx, &kinesis.CreateStreamInput{StreamName: aws.String(stream), ShardCount: aws.Int32(int32(e.N))})
	}
	w.note("stream deleted and created with %d shards: %v", e.N, err)
	w.gen++
	for _, in := range running {
		if in.dead.Load() {
			continue
		}
		w.join(ctx, in.app, in.name+"r")
	}
	time.Sleep(time.Second)
	w.mu.Lock()
	w.pubHold = nil
	w.mu.Unlock()
	close(hold)
}

// live returns the instances of app neither gone nor crashed.
func (w *world) liveLocked(app string) []*instance {
	var out []*instance
	for _, in := range w.order {
		if in.app == app && in.gone.IsZero() {
			out = append(out, in)
		}
	}
	return out
}

// drain ends every fault, makes sure each application has a live instance
// and waits until every acknowledged message has been handled by every
// application, or Timing.Drain has passed.
func (w *world) drain(ctx context.Context) {
	w.mu.Lock()
	for _, in := range w.order {
		in.f.slowUntil, in.f.lateUntil, in.f.failUntil, in.f.kinUntil, in.f.memberPause = time.Time{}, time.Time{}, time.Time{}, time.Time{}, 0
	}
	now := time.Now()
	for _, c := range []struct {
		spans []span
		after time.Duration
	}{{w.lateSpans, 0}, {w.storeOutages, storeBackoff}, {w.outages, readerBackoff}} {
		for i := range c.spans {
			c.spans[i].to = minTime(c.spans[i].to, now.Add(c.after))
		}
	}
	var need []string
	for _, app := range w.apps {
		if len(w.liveLocked(app)) == 0 {
			need = append(need, app)
		}
	}
	w.mu.Unlock()
	for _, app := range need {
		name := fmt.Sprintf("%s-drain%d", app, len(w.trace))
		w.note("join %s (app %s): none of the application left for the drain", name, app)
		w.join(ctx, app, name)
	}
	deadline := time.Now().Add(w.cfg.Timing.Drain)
	for time.Now().Before(deadline) {
		w.mu.Lock()
		missing := w.anyUnhandledLocked()
		w.mu.Unlock()
		if !missing {
			return
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// shutdownAll shuts every instance down, crashed ones included (their
// calls fail: they release nothing).
func (w *world) shutdownAll(ctx context.Context) {
	w.mu.Lock()
	var ins []*instance
	for _, in := range w.order {
		if in.gone.IsZero() || in.crashed {
			ins = append(ins, in)
			if in.gone.IsZero() {
				in.gone = time.Now()
			}
		}
	}
	w.mu.Unlock()
	var wg sync.WaitGroup
	for _, in := range ins {
		wg.Go(func() { w.shutdown(ctx, in, "end") })
	}
	wg.Wait()
	w.bg.Wait()
}

// lineage lists the stream's shards with their parents.
func (w *world) lineage(ctx context.Context) map[string][]string {
	out := map[string][]string{}
	var token *string
	for {
		in := &kinesis.ListShardsInput{NextToken: token}
		if token == nil {
			in.StreamName = aws.String(stream)
		}
		o, err := w.kin.ListShards(ctx, in)
		if err != nil {
			return out
		}
		for _, s := range o.Shards {
			for _, p := range []*string{s.ParentShardId, s.AdjacentParentShardId} {
				if p != nil {
					out[*s.ShardId] = append(out[*s.ShardId], *p)
				}
			}
		}
		if token = o.NextToken; token == nil {
			return out
		}
	}
}
