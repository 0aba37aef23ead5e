package sim_test

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/smithy-go/middleware"

	"github.com/kinesisgen/kinesisgen/fleettest/sim"
	"github.com/kinesisgen/kinesisgen/internal/livetest"
	"github.com/kinesisgen/kinesisgen/runtime/lease"
	"github.com/kinesisgen/kinesisgen/runtime/shard"
)

// sizes reads SIM_SIZES ("1000x20,256x20": shards x instances), default
// the short run of make test.
func sizes(t *testing.T, def string) [][2]int {
	spec := os.Getenv("SIM_SIZES")
	if spec == "" {
		spec = def
	}
	var out [][2]int
	for _, s := range strings.Split(spec, ",") {
		a, b, ok := strings.Cut(strings.TrimSpace(s), "x")
		n, err1 := strconv.Atoi(a)
		k, err2 := strconv.Atoi(b)
		if !ok || err1 != nil || err2 != nil || n <= 0 || k < 3 {
			t.Fatalf("SIM_SIZES %q: want shards x instances (at least 3), comma-separated", spec)
		}
		out = append(out, [2]int{n, k})
	}
	return out
}

// membersLayout reads SIM_MEMBERS (item, table or migrating): the layout
// of the member entries a run on the in-memory store is billed in
// (default migrating, the DynamoDB store's default).
func membersLayout(t *testing.T) lease.MembersLayout {
	switch v := os.Getenv("SIM_MEMBERS"); v {
	case "", "migrating":
		return lease.MembersMigrating
	case "table":
		return lease.MembersTable
	case "item":
		return lease.MembersItem
	default:
		t.Fatalf("SIM_MEMBERS %q: want item, table or migrating", v)
	}
	return 0
}

// simMode is one of the coordinator's balancing modes, by name.
type simMode struct {
	name string
	tune func(*shard.Config)
}

// modes are the coordinator's balancing modes the simulation compares:
// this runtime's before issue 17 (a renewal per lease, one steal per pass)
// and after (a heartbeat per instance, bulk balancing).
var modes = []simMode{
	{"per-lease", func(c *shard.Config) { c.Liveness, c.Balance = shard.LivenessPerLease, shard.BalanceOneSteal }},
	{"per-instance", func(c *shard.Config) { c.Liveness, c.Balance = shard.LivenessPerInstance, shard.BalanceBulk }},
	// per-instance with the roster (shard.Config.Roster, issue 34 item 3;
	// the runtime's default): members read at a cost linear in the
	// instances.
	{"roster", func(c *shard.Config) {
		c.Liveness, c.Balance, c.Roster = shard.LivenessPerInstance, shard.BalanceBulk, true
	}},
}

// TestSimulatedFleet runs the fleet simulation on the virtual clock of a
// synctest bubble, at the runtime's default timing, in its three modes
// (per lease, per instance, and per instance with the members roster, the
// runtime's default), and fails on a broken invariant: a shard handled by two
// instances at once, a record handled twice across a graceful handoff, a
// record never handled, a phase that never balances, or a crash whose
// shards are not read again within twice the failover time; and, in the
// per-instance modes, on a missed goal of issue 17 (Report.Misses): a
// phase, the start of every instance at once included, that moves more
// than 1.1 × the fewest leases it had to, a joiner not at its share
// within 3 lease passes, a phase, the start included, that reads more
// read units than Report.ReadBound (about a Scan of the lease table per
// live instance per pass, with the roster's own reads: listing the leases
// by key costs ten times that; at the start one Scan more each), or a start with a lease create
// refused because another instance made the lease first (each lease is
// created once, by the instance the start gives it to; before, at
// 1,000 × 20 over a thousand were refused). The fleet at rest
// fails it too (Report.RestMisses): a lease item written, more writes than
// a heartbeat per instance per renewal (at 1,000 × 20 fewer than 20× below
// a renewal per shard), more than 2 items read per instance per pass (3
// with the roster); the
// per-lease mode must miss those (it shows that they can fail). Every run
// must go through start, join, leave, crash, partition and heal and count
// capacity units in each. SIM_MEMBERS picks the members layout the run
// is billed in (default migrating; every layout's member units are
// printed side by side). SIM_SIZES picks the sizes (default 64 shards ×
// 4 and × 20 instances in every mode, and 256 × 20, 1,000 × 4 and
// 1,000 × 20 in the per-instance modes alone: about 15 s in all; the
// per-lease mode at 1,000 × 20 takes 25 s alone); SIM_MODES the modes
// (default all three: "per-lease,per-instance,roster"). The reports, and the issue's
// goals side by side, go to standard output.
func TestSimulatedFleet(t *testing.T) {
	want := os.Getenv("SIM_MODES")
	if want == "" {
		want = "per-lease,per-instance,roster"
	}
	type run struct {
		size  [2]int
		modes string
	}
	var runs []run
	for _, sz := range sizes(t, "64x4,64x20") {
		runs = append(runs, run{sz, want})
	}
	if os.Getenv("SIM_SIZES") == "" {
		// Issue 17's goals at 256 and 1,000 shards, in the mode that
		// meets them (a joiner at its share within 3 passes, the fewest
		// moves, the reads bounded, the writes at rest).
		for _, sz := range [][2]int{{256, 20}, {1000, 4}, {1000, 20}} {
			runs = append(runs, run{sz, "per-instance,roster"})
		}
	}
	reports := map[string][]*sim.Report{}
	for _, r := range runs {
		sz := r.size
		for _, m := range modes {
			if !strings.Contains(","+r.modes+",", ","+m.name+",") || !strings.Contains(","+want+",", ","+m.name+",") {
				continue
			}
			t.Run(fmt.Sprintf("%dx%d/%s", sz[0], sz[1], m.name), func(t *testing.T) {
				synctest.Test(t, func(t *testing.T) {
					cfg := sim.Config{Shards: sz[0], Instances: sz[1], Seed: 1, Tune: m.tune, Members: membersLayout(t)}
					if m.name == "roster" {
						cfg.RestItems = 3 // the version and two watched entries
					}
					if os.Getenv("SIM_PROGRESS") != "" {
						cfg.Progress = os.Stdout
					}
					if os.Getenv("SIM_LOG") != "" {
						cfg.Logger = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelInfo}))
					}
					rep, err := sim.Run(t.Context(), cfg)
					if err != nil {
						t.Fatal(err)
					}
					reports[m.name] = append(reports[m.name], rep)
					var b strings.Builder
					rep.Write(&b, m.name)
					fmt.Print(b.String())
					for _, v := range rep.Violations {
						t.Error(v)
					}
					for _, p := range rep.Phases {
						if p.Name == "crash" && (p.FailedOver == 0 || p.FailedOver > 2*p.Failover) {
							t.Errorf("crash: shards read again after %v, want at most twice the failover time %v", p.FailedOver, p.Failover)
						}
					}
					checkPhases(t, rep)
					if m.name != "per-lease" {
						// (The roster's heal is held to the bound too: it
						// read up to 1.9× it at 4 instances while each
						// change of a member entry woke a lease pass.)
						for _, miss := range rep.Misses() {
							t.Error(miss)
						}
					} else if misses := rep.RestMisses(); len(misses) < 3 {
						// A renewal per lease and a Scan per pass: the
						// checks at rest must catch it.
						t.Errorf("per-lease at rest misses %d of the rest goals, want the lease writes, the writes per instance and the items read: %q", len(misses), misses)
					}
				})
			})
		}
	}
	var b strings.Builder
	sim.WriteGoals(&b, reports[modes[0].name], reports[modes[1].name])
	fmt.Print(b.String())
}

// checkPhases fails a run that skipped one of the events the simulation
// is for, or counted no capacity while the fleet changed or at rest.
func checkPhases(t *testing.T, rep *sim.Report) {
	t.Helper()
	var names []string
	for _, p := range rep.Phases {
		names = append(names, p.Name)
		if p.Window.Counts.RCU <= 0 || p.Window.Counts.WCU <= 0 {
			t.Errorf("%s: %.1f RCU, %.1f WCU counted, want both above zero", p.Name, p.Window.Counts.RCU, p.Window.Counts.WCU)
		}
	}
	if got, want := strings.Join(names, ","), "start,join,leave,crash,partition,heal"; got != want {
		t.Errorf("phases %s, want %s", got, want)
	}
	if rep.Rest.Counts.RCU <= 0 || rep.Rest.Counts.WCU <= 0 {
		t.Errorf("at rest: %.1f RCU, %.1f WCU counted, want both above zero", rep.Rest.Counts.RCU, rep.Rest.Counts.WCU)
	}
}

// TestSlowHandlersPostponeHandoffs: with handlers slower than the handoff
// allows (4 s against half of a 1 s handoff), an owner asked for a lease
// postpones the handoff instead of releasing the lease with records still
// being handled (issue 29, defect 1), so no record is handled twice
// without a crash or partition to explain it. Before that fix this
// very scenario had such records (the checker's own failure is shown by
// TestCheckReportsOverlapsAndDuplicates).
func TestSlowHandlersPostponeHandoffs(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		cfg := sim.Config{
			Shards: 16, Instances: 3, Seed: 1,
			Handle: 4 * time.Second, Rate: 16,
			Tune: func(c *shard.Config) {
				modes[0].tune(c)
				c.Handoff = time.Second
			},
		}
		rep, err := sim.Run(t.Context(), cfg)
		if err != nil {
			t.Fatal(err)
		}
		// The scenario also crashes and cuts off instances, whose handlers
		// run on past their leases (overlaps that failover allows), and its
		// 4 s handlers cannot keep up with the publishing (records left
		// unhandled at the end): what a graceful handoff must never cause is
		// a record handled twice that no crash or partition explains.
		for _, v := range rep.Violations {
			if strings.Contains(v, "no crash or partition explains it") {
				t.Errorf("violation: %s", v)
			} else {
				t.Logf("allowed here: %s", v)
			}
		}
	})
}

// TestSimulatedFleetOnDynamoDB runs the scenario in real time with its
// leases in DynamoDB (dynalite, through lease.DynamoDB) and the in-process
// Kinesis, at compressed timing (failover SIM_DYNAMO_FAILOVER, default 2 s),
// and fails on the same broken invariants. SIM_DYNAMO_SIZES picks the sizes
// (default 8 shards × 3 instances), SIM_MODES the modes as above (default
// roster, the runtime's default, to keep make test short),
// SIM_PHASE_TIMEOUT how long a phase may take to balance (default 50
// failover times).
func TestSimulatedFleetOnDynamoDB(t *testing.T) {
	want := os.Getenv("SIM_MODES")
	if want == "" {
		want = "roster"
	}
	url := livetest.DynamoDBEndpoint(t)
	failover := 2 * time.Second
	if v := os.Getenv("SIM_DYNAMO_FAILOVER"); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil {
			t.Fatalf("SIM_DYNAMO_FAILOVER: %v", err)
		}
		failover = d
	}
	spec := os.Getenv("SIM_DYNAMO_SIZES")
	if spec == "" {
		spec = "8x3"
	}
	t.Setenv("SIM_SIZES", spec)
	reports := map[string][]*sim.Report{}
	for _, sz := range sizes(t, spec) {
		for _, m := range modes {
			if !strings.Contains(","+want+",", ","+m.name+",") {
				continue
			}
			t.Run(fmt.Sprintf("%dx%d/%s", sz[0], sz[1], m.name), func(t *testing.T) {
				// A crash's shards read again past twice the failover is a
				// failure, unless the machine ran late or dynalite slow
				// meanwhile (make test's load starves them): such a run is
				// run again, up to three times. Every other violation
				// fails at once.
				for attempt := 1; ; attempt++ {
					rep, late, slowest := simulateOnDynamoDB(t, url, sz, m, failover)
					slowCrash := ""
					for _, p := range rep.Phases {
						if p.Name == "crash" && (p.FailedOver == 0 || p.FailedOver > 2*p.Failover) {
							slowCrash = fmt.Sprintf("crash: shards read again after %v, want at most twice the failover time %v", p.FailedOver, p.Failover)
						}
					}
					switch {
					case slowCrash == "":
						reports[m.name] = append(reports[m.name], rep)
						return
					case late < machineLate && slowest < storeSlow || attempt == 3:
						reports[m.name] = append(reports[m.name], rep)
						t.Errorf("%s (the machine woke a 50 ms sleep at most %v late, dynalite's slowest item call took %v)", slowCrash, late.Round(time.Millisecond), slowest.Round(time.Millisecond))
						return
					}
					t.Logf("attempt %d: %s, the machine woke a 50 ms sleep %v late and dynalite's slowest item call took %v meanwhile; again", attempt, slowCrash, late.Round(time.Millisecond), slowest.Round(time.Millisecond))
				}
			})
		}
	}
	var b strings.Builder
	sim.WriteGoals(&b, reports[modes[0].name], reports[modes[1].name])
	fmt.Print(b.String())
}

// A dynalite simulation's crash bound is held to account when the
// machine woke a 50 ms sleep less than machineLate late, at worst, and
// dynalite answered the instances' item calls within storeSlow: on a
// quiet machine it answers in milliseconds, and the bound has no
// allowance for a slow store (the simulator's, fleettest/dst, has).
const (
	machineLate = 250 * time.Millisecond
	storeSlow   = 200 * time.Millisecond
)

// simulateOnDynamoDB runs the simulation of sz in mode m on a fresh table
// of the dynalite at url and fails t on its invariants. It returns its
// report and how the machine kept its time meanwhile: how late, at worst,
// it woke a 50 ms sleep, and the slowest item call of the instances.
func simulateOnDynamoDB(t *testing.T, url string, sz [2]int, m simMode, failover time.Duration) (rep *sim.Report, late, slowest time.Duration) {
	t.Helper()
	stop := lateProbe()
	var slowestCall atomic.Int64
	cfg := aws.Config{Region: "us-east-1", Credentials: credentials.NewStaticCredentialsProvider("x", "x", "")}
	client := dynamodb.NewFromConfig(cfg, func(o *dynamodb.Options) { o.BaseEndpoint = aws.String(url) })
	timed := dynamodb.NewFromConfig(cfg, func(o *dynamodb.Options) {
		o.BaseEndpoint = aws.String(url)
		o.APIOptions = append(o.APIOptions, timeItemCalls(&slowestCall))
	})
	api := &sim.Metered{DynamoDBAPI: timed}
	table := fmt.Sprintf("sim-%d", time.Now().UnixNano())
	store := lease.NewDynamoDB(api, table, lease.CreateTableIfMissing())
	observe := lease.NewDynamoDB(client, table)
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	if err := store.EnsureTable(ctx); err != nil {
		t.Fatal(err)
	}
	scfg := sim.Config{
		Shards: sz[0], Instances: sz[1], Seed: 1, Store: store, Observe: observe, Hang: true, Tune: m.tune,
		Failover: failover, Renew: failover * 3 / 10, Sync: failover, Checkpoint: failover / 10,
		Rest: 2 * failover, Partition: 2 * failover, Sample: max(250*time.Millisecond, failover/20),
		PhaseTimeout: 50 * failover,
	}
	if m.name == "roster" {
		scfg.RestItems = 3 // the version and two watched entries
	}
	if v := os.Getenv("SIM_PHASE_TIMEOUT"); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil {
			t.Fatalf("SIM_PHASE_TIMEOUT: %v", err)
		}
		scfg.PhaseTimeout = d
	}
	if os.Getenv("SIM_LOG") != "" {
		scfg.Logger = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelInfo}))
	}
	if os.Getenv("SIM_PROGRESS") != "" {
		scfg.Progress = os.Stdout
	}
	rep, err := sim.Run(t.Context(), scfg)
	if err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	rep.Write(&b, m.name+" on dynalite")
	rcu, wcu := api.Consumed()
	fmt.Fprintf(&b, "Capacity dynalite reported for the whole run: %.1f RCU, %.1f WCU; estimated from the calls: %.1f RCU, %.1f WCU.\n\n", rcu, wcu, rep.Total.RCU, rep.Total.WCU)
	fmt.Print(b.String())
	checkPhases(t, rep)
	for _, v := range rep.Violations {
		t.Error(v)
	}
	return rep, stop(), time.Duration(slowestCall.Load())
}

// timeItemCalls records in slowest the longest item call (not the table's
// creation, which waits for the table) of a DynamoDB client.
func timeItemCalls(slowest *atomic.Int64) func(*middleware.Stack) error {
	return func(st *middleware.Stack) error {
		return st.Initialize.Add(middleware.InitializeMiddlewareFunc("timeItemCalls",
			func(ctx context.Context, in middleware.InitializeInput, next middleware.InitializeHandler) (middleware.InitializeOutput, middleware.Metadata, error) {
				start := time.Now()
				out, md, err := next.HandleInitialize(ctx, in)
				if op := middleware.GetOperationName(ctx); op != "CreateTable" && op != "DescribeTable" {
					d := int64(time.Since(start))
					for old := slowest.Load(); d > old && !slowest.CompareAndSwap(old, d); old = slowest.Load() {
					}
				}
				return out, md, err
			}), middleware.Before)
	}
}

// lateProbe sleeps 50 ms at a time until its stop is called, which
// returns how late it woke at worst: how far the machine's load stretched
// the waits meanwhile.
func lateProbe() (stop func() time.Duration) {
	done, ended := make(chan struct{}), make(chan time.Duration)
	go func() {
		var late time.Duration
		for {
			select {
			case <-done:
				ended <- late
				return
			default:
			}
			start := time.Now()
			time.Sleep(50 * time.Millisecond)
			late = max(late, time.Since(start)-50*time.Millisecond)
		}
	}()
	return func() time.Duration {
		close(done)
		return <-ended
	}
}

// TestRollingDeployOnDynamoDB deploys the members table over a fleet of
// the earlier version on one lease table (dynalite), the way a rolling
// deploy does: three old instances (the members item, lease.MembersItem:
// what an earlier version reads and writes) start, then one at a time a
// new instance (the default, lease.MembersMigrating) joins and an old one
// stops gracefully; then an old one starts again (a rollback begun once
// the new ones write the members table alone), and at the end a new one
// crashes. Every step must
// balance (no shard stranded without a reader), no shard may be handled by
// two instances at once (no split brain), every record must be handled,
// none twice without the crash to explain it, and the crash's shards must
// be read again within twice the failover time. SIM_DYNAMO_FAILOVER as
// above (default 2 s).
func TestRollingDeployOnDynamoDB(t *testing.T) {
	url := livetest.DynamoDBEndpoint(t)
	failover := 2 * time.Second
	if v := os.Getenv("SIM_DYNAMO_FAILOVER"); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil {
			t.Fatalf("SIM_DYNAMO_FAILOVER: %v", err)
		}
		failover = d
	}
	// 2 × 3: an old instance holds no lease, so the others see it by its
	// member entry alone (with a new version that wrote only the members
	// table, it takes the leases of the new instances as expired once the
	// last old lease holder has left: two owners at once); 8 × 3: every
	// instance holds leases.
	for _, sz := range [][2]int{{2, 3}, {8, 3}} {
		t.Run(fmt.Sprintf("%dx%d", sz[0], sz[1]), func(t *testing.T) {
			rollingDeploy(t, url, sz[0], sz[1], failover)
		})
	}
}

func rollingDeploy(t *testing.T, url string, shards, instances int, failover time.Duration) {
	client := dynamodb.NewFromConfig(aws.Config{
		Region:      "us-east-1",
		Credentials: credentials.NewStaticCredentialsProvider("x", "x", ""),
	}, func(o *dynamodb.Options) { o.BaseEndpoint = aws.String(url) })
	api := &sim.Metered{DynamoDBAPI: client}
	table := fmt.Sprintf("sim-rolling-%d", time.Now().UnixNano())
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	newStore := lease.NewDynamoDB(api, table, lease.CreateTableIfMissing())
	if err := newStore.EnsureTable(ctx); err != nil {
		t.Fatal(err)
	}
	if got := newStore.MembersLayout(); got != lease.MembersMigrating {
		t.Fatalf("the new version's layout %v; want migrating", got)
	}
	oldStore := lease.NewDynamoDB(api, table, lease.WithMembers(lease.MembersItem))
	cfg := sim.Config{
		Shards: shards, Instances: instances, Seed: 1, Hang: true,
		Store: newStore, Observe: lease.NewDynamoDB(client, table),
		StoreFor: func(name string) lease.Store {
			if strings.HasPrefix(name, "o") {
				return oldStore
			}
			return newStore
		},
		Tune:     modes[1].tune,
		Failover: failover, Renew: failover * 3 / 10, Sync: failover, Checkpoint: failover / 10,
		Sample: max(250*time.Millisecond, failover/20), PhaseTimeout: 50 * failover,
	}
	if os.Getenv("SIM_PROGRESS") != "" {
		cfg.Progress = os.Stdout
	}
	if os.Getenv("SIM_LOG") != "" {
		cfg.Logger = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelInfo}))
	}
	rep, err := sim.RunRolling(t.Context(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	rep.Write(&b, "rolling deploy, members item to members table, on dynalite")
	rcu, wcu := api.Consumed()
	fmt.Fprintf(&b, "Capacity dynalite reported for the whole run: %.1f RCU, %.1f WCU.\n\n", rcu, wcu)
	fmt.Print(b.String())
	checkRolling(t, rep, "start ,join n00,leave o00,join n01,leave o01,join n02,leave o02,join o03,crash n00")
	// Every instance has stopped or crashed: the members item holds no
	// entry but the crashed one's, if the others have not removed it yet
	// (the old ones removed theirs on leaving, the new ones theirs on
	// stopping).
	ms, err := oldStore.Members(ctx, cfg.Namespace)
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range ms {
		if m.Owner != "n00" {
			t.Errorf("the members item still holds %v after the deploy", ms)
			break
		}
	}
}

// TestRollingDeployToRoster deploys the roster (shard.Config.Roster,
// issue 34 item 3) over a fleet of today's per-instance liveness on one
// store, the way a rolling deploy does (sim.RunRolling): old instances
// ("o…", no roster) start, then one at a time a new one ("n…", the
// roster, reading the watched entries only whenever it can: RosterWhole
// -1) joins and an old one leaves; an old one starts again late (a
// rollback begun); a new one crashes. Every step must balance (no shard
// stranded), no shard may be handled by two instances at once (no split
// brain), every record must be handled, and the crash's shards must be
// read again within twice the failover time.
func TestRollingDeployToRoster(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		cfg := sim.Config{
			Shards: 64, Instances: 5, Seed: 1,
			Tune: rollToRoster,
		}
		runRolling(t, cfg, "rolling deploy, per-instance to the roster",
			"start ,join n00,leave o00,join n01,leave o01,join n02,leave o02,join n03,leave o03,join n04,leave o04,join o05,crash n00")
	})
}

// TestRollingDeployToRosterOnDynamoDB is TestRollingDeployToRoster on
// dynalite, in real time (failover SIM_DYNAMO_FAILOVER, default 2 s): old
// instances with the members table (lease.MembersMigrating, no roster),
// new ones with the roster on the same tables (its version item in the
// lease table, a BatchGetItem of both tables per pass, conditional
// heartbeats and declarations in the members table).
func TestRollingDeployToRosterOnDynamoDB(t *testing.T) {
	url := livetest.DynamoDBEndpoint(t)
	failover := 2 * time.Second
	if v := os.Getenv("SIM_DYNAMO_FAILOVER"); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil {
			t.Fatalf("SIM_DYNAMO_FAILOVER: %v", err)
		}
		failover = d
	}
	client := dynamodb.NewFromConfig(aws.Config{
		Region:      "us-east-1",
		Credentials: credentials.NewStaticCredentialsProvider("x", "x", ""),
	}, func(o *dynamodb.Options) { o.BaseEndpoint = aws.String(url) })
	api := &sim.Metered{DynamoDBAPI: client}
	table := fmt.Sprintf("sim-roster-rolling-%d", time.Now().UnixNano())
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	store := lease.NewDynamoDB(api, table, lease.CreateTableIfMissing())
	if err := store.EnsureTable(ctx); err != nil {
		t.Fatal(err)
	}
	if _, ok := lease.RosterOf(store); !ok {
		t.Fatal("the default layout keeps no roster")
	}
	cfg := sim.Config{
		Shards: 8, Instances: 3, Seed: 1, Hang: true,
		Store: store, Observe: lease.NewDynamoDB(client, table),
		Tune:     rollToRoster,
		Failover: failover, Renew: failover * 3 / 10, Sync: failover, Checkpoint: failover / 10,
		Sample: max(250*time.Millisecond, failover/20), PhaseTimeout: 50 * failover,
	}
	runRolling(t, cfg, "rolling deploy, per-instance to the roster, on dynalite",
		"start ,join n00,leave o00,join n01,leave o01,join n02,leave o02,join o03,crash n00")
}

// rollToRoster tunes a rolling deploy's instances: the old ones ("o…")
// with per-instance liveness, the new ones ("n…") with the roster,
// reading the watched entries only whenever they can (RosterWhole -1).
func rollToRoster(c *shard.Config) {
	modes[1].tune(c)
	if strings.HasPrefix(c.Owner, "n") {
		c.Roster, c.RosterWhole = true, -1
	}
}

// runRolling runs a rolling deploy, prints its report under title and
// checks it (checkRolling).
func runRolling(t *testing.T, cfg sim.Config, title, want string) {
	t.Helper()
	if os.Getenv("SIM_PROGRESS") != "" {
		cfg.Progress = os.Stdout
	}
	rep, err := sim.RunRolling(t.Context(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	rep.Write(&b, title)
	fmt.Print(b.String())
	checkRolling(t, rep, want)
}

// checkRolling fails t on a rolling deploy's violations, on a crash whose
// shards were not read again within twice the failover time, and on
// phases other than want (each "name subject", comma-separated).
func checkRolling(t *testing.T, rep *sim.Report, want string) {
	t.Helper()
	for _, v := range rep.Violations {
		t.Error(v)
	}
	var names []string
	for _, p := range rep.Phases {
		names = append(names, p.Name+" "+p.Subject)
		if p.Name == "crash" && (p.FailedOver == 0 || p.FailedOver > 2*p.Failover) {
			t.Errorf("crash: shards read again after %v, want at most twice the failover time %v", p.FailedOver, p.Failover)
		}
	}
	if got := strings.Join(names, ","); got != want {
		t.Errorf("phases %s, want %s", got, want)
	}
}
