// Command drain fills a kinesalite stream and drains it from the horizon
// four ways, side by side in one run, each into a fresh consumer with a
// fresh HTTP client:
//
//	ours  runtime.Subscribe: Workers(8), ByKey, a no-op handler, checkpoints
//	      on, BatchSize 10000; leases in DynamoDB (fresh lease and members
//	      tables on -dynamodb per drain), in memory when no DynamoDB
//	      endpoint is given
//	bare  a goroutine per shard: GetRecords with Limit 10000, json.Unmarshal
//	kc    github.com/harlow/kinesis-consumer at its defaults, from the
//	      horizon, decoding with json.Unmarshal in its callback (its
//	      ScanShard per shard, through kbench.ScanKC: Scan races)
//	kcl   github.com/vmware/vmware-go-kcl-v2 (the Go port of the KCL): a
//	      worker at its defaults but TRIM_HORIZON and -kclsync, leases in
//	      a fresh DynamoDB table per drain, a record processor that decodes
//	      with json.Unmarshal and checkpoints each batch's last record
//
// The lease tables of ours and kcl are created before their drain starts,
// outside its timing, as a service's infrastructure code creates them: no
// production start pays a CreateTable, and on dynalite creating a table
// takes longer than the whole start-up it would be counted in. The start
// still checks them (DescribeTable). How long ours' tables took to create
// is printed beside it, as the first start of a service that creates them
// with CreateTableIfMissing would pay it.
//
// Each drain is split in two. Start-up runs from its first call (ours:
// Connect; kcl: Start) to its first GetRecords sent (listing shards,
// iterators, leases; ours: the first pass). Steady state runs from there to
// the moment its n-th distinct record was decoded (ours: handled): the
// first GetRecords is the same point for every consumer, where the first
// record read would not be (kinesalite answers a first GetRecords of 10,000
// records in seconds, a large part of the drain). The headline figures are
// steady-state records per second (n over that span) and the client's CPU
// time per record over it (user+sys of this process, from getrusage, so the
// servers' CPU is not counted). Beside them: the rate between the 10 % and
// the 90 % records (without start-up and tail) and the time from the first
// call to the first record. Each record is counted once by its id; repeats
// are printed as duplicates. Then, with -idle, the consumer is left on the
// drained stream: after a second to settle, GetRecords calls per shard per
// second, DynamoDB calls per second and client CPU over the -idle window.
// Per round and as medians over the rounds, with the ratios of ours to each
// peer, ending with the summary table BENCHMARKS.md takes. Rounds rotate
// the order of the modes.
//
//	bash scripts/with-servers.sh sh -c 'cd bench && go run ./cmd/drain'
//
// -cpuprofile PREFIX profiles each mode of the last round, for comparing
// where the CPU goes (go tool pprof -top PREFIX.ours.prof).
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	goruntime "runtime"
	"runtime/pprof"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	dtypes "github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/aws/aws-sdk-go-v2/service/kinesis"
	"github.com/aws/aws-sdk-go-v2/service/kinesis/types"
	consumer "github.com/harlow/kinesis-consumer"
	"github.com/vmware/vmware-go-kcl-v2/clientlibrary/checkpoint"

	"github.com/kinesisgen/kinesisgen/bench/internal/kbench"
	_ "github.com/kinesisgen/kinesisgen/bench/internal/protoconflict" // before the peers: both register AggregatedRecord
	"github.com/kinesisgen/kinesisgen/internal/bench/benchkit"
	kgrt "github.com/kinesisgen/kinesisgen/runtime"
	"github.com/kinesisgen/kinesisgen/runtime/lease"
)

// drainTimeout bounds one drain; kinesalite drains 100k records in seconds.
const drainTimeout = 5 * time.Minute

type options struct {
	endpoint string
	dynamodb string
	kclSync  time.Duration
	idle     time.Duration
	records  int
	shards   int
	size     int
	runs     int
	warmup   int
	poll     time.Duration
	modes    []string
	profile  string
}

func main() {
	var o options
	var modes string
	flag.StringVar(&o.endpoint, "endpoint", os.Getenv("KINESIS_TEST_ENDPOINT"), "Kinesis endpoint URL (default $KINESIS_TEST_ENDPOINT)")
	flag.StringVar(&o.dynamodb, "dynamodb", os.Getenv("DYNAMODB_TEST_ENDPOINT"), "DynamoDB endpoint URL for the leases of ours and kcl (default $DYNAMODB_TEST_ENDPOINT; ours keeps them in memory without one)")
	flag.DurationVar(&o.kclSync, "kclsync", 100*time.Millisecond, "kcl: ShardSyncIntervalMillis (at its default, 60 s, it takes its first lease 30-90 s after Start and one more per pass)")
	flag.DurationVar(&o.idle, "idle", 5*time.Second, "after each drain, count GetRecords over this idle window (0: skip)")
	flag.IntVar(&o.records, "records", 100_000, "records in the stream")
	flag.IntVar(&o.shards, "shards", 4, "shards of the stream")
	flag.IntVar(&o.size, "size", 200, "bytes per record (JSON)")
	flag.IntVar(&o.runs, "runs", 3, "rounds of all modes; medians are reported")
	flag.IntVar(&o.warmup, "warmup", 1, "uncounted rounds first (heap growth, connection setup)")
	flag.DurationVar(&o.poll, "poll", time.Second, "ours: poll interval after an empty read")
	flag.StringVar(&modes, "modes", "bare,kc,kcl,ours", "modes to run")
	flag.StringVar(&o.profile, "cpuprofile", "", "write CPU profiles of the last round to PREFIX.MODE.prof")
	flag.Parse()
	o.modes = strings.Split(modes, ",")
	if o.endpoint == "" {
		fail(errors.New("no endpoint: pass -endpoint or run under scripts/with-servers.sh"))
	}
	for _, m := range o.modes {
		if drains[m] == nil {
			fail(fmt.Errorf("unknown mode %q (want bare, kc, kcl, ours)", m))
		}
		if m == "kcl" && o.dynamodb == "" {
			fail(errors.New("kcl keeps its leases in DynamoDB: pass -dynamodb or run under scripts/with-servers.sh"))
		}
	}
	if err := run(o); err != nil {
		fail(err)
	}
}

type result struct {
	wall, cpu  time.Duration // steady state: from the first GetRecords sent to the n-th record
	startup    time.Duration // from the first call to the first GetRecords sent
	first      time.Duration // from the first call to the first record decoded
	tenth      time.Duration // from the first call to the 10 % record
	mid        time.Duration // from the 10 % record to the 90 % one
	getRecords int64
	dups       int64         // records decoded more than once before the last new one
	dynamoDB   int64         // lease-store calls during the drain
	idleCalls  float64       // GetRecords per shard per second on the drained stream
	idleCPU    float64       // client CPU ms per second, the same window
	idleDynamo float64       // lease-store calls per second, the same window
	tables     time.Duration // creating the lease tables before the drain (not timed in it)
	allocs     uint64        // heap allocations (runtime.MemStats.Mallocs delta)
	bytes      uint64        // heap bytes allocated
	gcs        uint32        // GC cycles
}

func (r result) rate(n int) float64         { return float64(n) / r.wall.Seconds() }
func (r result) midRate(n int) float64      { return float64(n-n/10-n/10) / r.mid.Seconds() }
func (r result) cpuPerRecord(n int) float64 { return float64(r.cpu.Nanoseconds()) / 1e3 / float64(n) }

type drainFunc func(ctx context.Context, o options, stream string) (result, error)

var drains = map[string]drainFunc{"ours": drainOurs, "bare": drainBare, "kc": drainKC, "kcl": drainKCL}

func run(o options) error {
	ctx := context.Background()
	cfg, _ := kbench.Config()
	client := kbench.Client(cfg, o.endpoint)
	stream, err := benchkit.CreateStream(ctx, client, "drain", int32(o.shards))
	if err != nil {
		return err
	}
	began := time.Now()
	if err := kbench.Fill(ctx, client, stream, o.records, o.size); err != nil {
		return fmt.Errorf("fill: %w", err)
	}
	leases := "in memory"
	if o.dynamodb != "" {
		leases = "in DynamoDB at " + o.dynamodb
	}
	fmt.Printf("drain: %d records of %d bytes on %d shards (filled in %v), %d rounds after %d warm-up, GOMAXPROCS=%d, poll %v, kcl shard sync %v, leases %s, load average %s\n",
		o.records, len(kbench.Payload(o.records/2, o.size)), o.shards, time.Since(began).Round(time.Millisecond),
		o.runs, o.warmup, goruntime.GOMAXPROCS(0), o.poll, o.kclSync, leases, benchkit.LoadAverage())

	rates := map[string][]float64{}
	mids := map[string][]float64{}
	cpus := map[string][]float64{}
	starts := map[string][]float64{}
	firsts := map[string][]float64{}
	idles := map[string][]float64{}
	idleCPU := map[string][]float64{}
	idleDyn := map[string][]float64{}
	tables := map[string][]float64{}
	load0 := benchkit.LoadAverage()
	for round := -o.warmup; round < o.runs; round++ {
		label := fmt.Sprintf("round %d", round+1)
		if round < 0 {
			label = "warm-up"
		}
		for i := range o.modes {
			mode := o.modes[(i+round+o.warmup)%len(o.modes)]
			goruntime.GC() // earlier modes' garbage is not this mode's cost
			stopProfile := func() {}
			if o.profile != "" && round == o.runs-1 {
				if stopProfile, err = startProfile(o.profile + "." + mode + ".prof"); err != nil {
					return err
				}
			}
			dctx, cancel := context.WithTimeout(ctx, drainTimeout)
			r, err := drains[mode](dctx, o, stream)
			cancel()
			stopProfile()
			if err != nil {
				return fmt.Errorf("%s, %s: %w", label, mode, err)
			}
			fmt.Printf("%-8s %-4s %8.0f records/s %6.2f µs CPU/record in steady state (%v; 10–90 %% %8.0f records/s, %v to %v)  start-up %v, first record at %v, %d GetRecords, %d DynamoDB calls, %d duplicates, %.1f allocs %.2f KB/record, %d GCs",
				label, mode, r.rate(o.records), r.cpuPerRecord(o.records), r.wall.Round(time.Millisecond), r.midRate(o.records),
				r.tenth.Round(time.Millisecond), (r.tenth + r.mid).Round(time.Millisecond),
				r.startup.Round(time.Millisecond), r.first.Round(time.Millisecond), r.getRecords, r.dynamoDB, r.dups,
				float64(r.allocs)/float64(o.records), float64(r.bytes)/1024/float64(o.records), r.gcs)
			if o.idle > 0 {
				fmt.Printf("; idle %.2f GetRecords/shard/s %.2f DynamoDB calls/s %.2f ms CPU/s", r.idleCalls, r.idleDynamo, r.idleCPU)
			}
			if r.tables > 0 {
				fmt.Printf("; lease tables created beforehand in %v", r.tables.Round(time.Millisecond))
			}
			fmt.Println()
			if round < 0 {
				continue
			}
			rates[mode] = append(rates[mode], r.rate(o.records))
			mids[mode] = append(mids[mode], r.midRate(o.records))
			cpus[mode] = append(cpus[mode], r.cpuPerRecord(o.records))
			starts[mode] = append(starts[mode], float64(r.startup.Microseconds())/1e3)
			firsts[mode] = append(firsts[mode], float64(r.first.Microseconds())/1e3)
			idles[mode] = append(idles[mode], r.idleCalls)
			idleCPU[mode] = append(idleCPU[mode], r.idleCPU)
			idleDyn[mode] = append(idleDyn[mode], r.idleDynamo)
			if r.tables > 0 {
				tables[mode] = append(tables[mode], float64(r.tables.Microseconds())/1e3)
			}
		}
	}
	fmt.Printf("medians (load average %s):\n", benchkit.LoadAverage())
	for _, m := range o.modes {
		fmt.Printf("  %-4s %8.0f records/s %6.2f µs CPU/record (steady state; 10–90 %% %8.0f records/s), start-up %.0f ms, first record %.0f ms", m,
			kbench.Median(rates[m]), kbench.Median(cpus[m]), kbench.Median(mids[m]), kbench.Median(starts[m]), kbench.Median(firsts[m]))
		if o.idle > 0 {
			fmt.Printf("; idle %.2f GetRecords/shard/s %.2f DynamoDB calls/s %.2f ms CPU/s", kbench.Median(idles[m]), kbench.Median(idleDyn[m]), kbench.Median(idleCPU[m]))
		}
		fmt.Printf("   (runs: %s records/s; 10–90 %% %s; %s µs; start-up %s ms)\n", kbench.Fmt(rates[m], 0), kbench.Fmt(mids[m], 0), kbench.Fmt(cpus[m], 2), kbench.Fmt(starts[m], 0))
	}
	t := benchkit.Table{Title: fmt.Sprintf("Draining %d records of %d bytes on %d shards from the horizon (medians of %d rounds)", o.records, len(kbench.Payload(o.records/2, o.size)), o.shards, o.runs)}
	med := func(m map[string][]float64, mode string) float64 { return kbench.Median(m[mode]) }
	steadyRows := func(other string, goalRate, goalCPU float64) {
		if rates["ours"] == nil || rates[other] == nil {
			return
		}
		r := med(rates, "ours") / med(rates, other)
		c := med(cpus, "ours") / med(cpus, other)
		row := benchkit.Row{Measure: "steady records/s, ours / " + other, Ours: fmt.Sprintf("%.0f", med(rates, "ours")), Peer: fmt.Sprintf("%.0f", med(rates, other)), Ratio: r}
		if goalRate > 0 {
			row.Goal, row.Met = fmt.Sprintf("≥ %.2f", goalRate), benchkit.Verdict(r >= goalRate)
		}
		t.Add(row)
		t.Add(benchkit.Row{Measure: "steady client CPU µs/record, ours / " + other, Ours: fmt.Sprintf("%.2f", med(cpus, "ours")), Peer: fmt.Sprintf("%.2f", med(cpus, other)), Ratio: c,
			Goal: fmt.Sprintf("≤ %.2f", goalCPU), Met: benchkit.Verdict(c <= goalCPU)})
	}
	steadyRows("bare", 0.9, 1.3)
	steadyRows("kc", 0, 0.99)
	// Issue 34 item 4: at least the Go KCL's records/s at no more than 0.8×
	// its client CPU per record.
	steadyRows("kcl", 1, 0.8)
	if starts["ours"] != nil && starts["bare"] != nil {
		// The first pass on a lease store others could share waits a tenth
		// of Renew (300 ms) for instances starting beside it; the goal
		// allows that and one more pass's calls over the bare loop's.
		d := med(starts, "ours") - med(starts, "bare")
		t.Add(benchkit.Row{Measure: "start-up ms (first call → first GetRecords), ours − bare", Ours: fmt.Sprintf("%.0f", med(starts, "ours")), Peer: fmt.Sprintf("%.0f", med(starts, "bare")),
			Goal: fmt.Sprintf("ours − bare ≤ 400 ms (%.0f)", d), Met: benchkit.Verdict(d <= 400)})
		if tables["ours"] != nil {
			// Not a production start: its tables exist. Shown for a
			// service's very first start with CreateTableIfMissing.
			c := med(tables, "ours")
			t.Add(benchkit.Row{Measure: fmt.Sprintf("first start creating its lease tables ms (start-up + %.0f ms of CreateTable), ours / bare", c),
				Ours: fmt.Sprintf("%.0f", med(starts, "ours")+c), Peer: fmt.Sprintf("%.0f", med(starts, "bare"))})
		}
	}
	if starts["ours"] != nil && starts["kcl"] != nil {
		t.Add(benchkit.Row{Measure: "start-up ms (first call → first GetRecords), ours / kcl", Ours: fmt.Sprintf("%.0f", med(starts, "ours")), Peer: fmt.Sprintf("%.0f", med(starts, "kcl")),
			Ratio: ratio(med(starts, "ours"), med(starts, "kcl"))})
	}
	if o.idle > 0 && idles["ours"] != nil && idles["kcl"] != nil {
		t.Add(benchkit.Row{Measure: "idle GetRecords/shard/s, ours / kcl", Ours: fmt.Sprintf("%.2f", med(idles, "ours")), Peer: fmt.Sprintf("%.2f", med(idles, "kcl")),
			Ratio: ratio(med(idles, "ours"), med(idles, "kcl"))})
		t.Add(benchkit.Row{Measure: "idle DynamoDB calls/s, ours / kcl", Ours: fmt.Sprintf("%.2f", med(idleDyn, "ours")), Peer: fmt.Sprintf("%.2f", med(idleDyn, "kcl")),
			Ratio: ratio(med(idleDyn, "ours"), med(idleDyn, "kcl"))})
		t.Add(benchkit.Row{Measure: "idle client CPU ms/s, ours / kcl", Ours: fmt.Sprintf("%.2f", med(idleCPU, "ours")), Peer: fmt.Sprintf("%.2f", med(idleCPU, "kcl")),
			Ratio: ratio(med(idleCPU, "ours"), med(idleCPU, "kcl"))})
	}
	t.Note = fmt.Sprintf("Load average %s at the start, %s at the end; per round: ours/bare records/s %s.", load0, benchkit.LoadAverage(), kbench.Fmt(ratios(rates["ours"], rates["bare"]), 2))
	if rates["ours"] != nil && rates["kcl"] != nil {
		t.Note += fmt.Sprintf(" Ours/kcl: steady records/s per round %s, 10–90 %% records/s %.2f; first record at %.0f ms (ours) and %.0f ms (kcl).",
			kbench.Fmt(ratios(rates["ours"], rates["kcl"]), 2), ratio(med(mids, "ours"), med(mids, "kcl")), med(firsts, "ours"), med(firsts, "kcl"))
	}
	t.Print()
	return nil
}

// ratio is a/b, 0 (printed as nothing) where b is 0.
func ratio(a, b float64) float64 {
	if b == 0 {
		return 0
	}
	return a / b
}

func ratios(a, b []float64) []float64 {
	out := make([]float64, min(len(a), len(b)))
	for i := range out {
		out[i] = ratio(a[i], b[i])
	}
	return out
}

// idleWindow leaves a consumer that has drained the stream running: after a
// second for its last reads to settle, it counts its GetRecords calls and
// its DynamoDB calls and the process's CPU over o.idle.
func idleWindow(ctx context.Context, o options, calls *kbench.Counter, r *result) {
	if o.idle <= 0 {
		return
	}
	sleep := func(d time.Duration) {
		select {
		case <-ctx.Done():
		case <-time.After(d):
		}
	}
	sleep(time.Second)
	c0, d0, cpu0, t0 := calls.GetRecords(), calls.DynamoDB(), benchkit.CPUTime(), time.Now()
	sleep(o.idle)
	wall := time.Since(t0).Seconds()
	r.idleCalls = float64(calls.GetRecords()-c0) / float64(o.shards) / wall
	r.idleCPU = float64((benchkit.CPUTime() - cpu0).Microseconds()) / 1e3 / wall
	r.idleDynamo = float64(calls.DynamoDB()-d0) / wall
}

// finish records the end of a drain: the caller that brings the distinct
// records to n closes done. It also stamps the first record and the 10 % and
// 90 % ones.
type finish struct {
	n       int64
	seen    []atomic.Uint64 // a bit per record id (the fill's index)
	count   atomic.Int64    // distinct records
	dups    atomic.Int64    // records decoded again, or with an id not filled
	done    chan struct{}
	started time.Time
	calls   *kbench.Counter // stamps the first GetRecords
	stamps  [3]atomic.Int64 // ns since started at the first, the 10 % and the 90 % record
	mem0    goruntime.MemStats
	res     result
}

func start(n int, calls *kbench.Counter) *finish {
	f := &finish{n: int64(n), seen: make([]atomic.Uint64, (n+63)/64), done: make(chan struct{}), calls: calls}
	goruntime.ReadMemStats(&f.mem0)
	f.started = time.Now()
	return f
}

// add counts the decoded record id once (a repeat is a duplicate, so a
// consumer that delivers some records twice does not finish early) and
// stamps the end when the distinct records reach n.
func (f *finish) add(id int) {
	if id < 0 || int64(id) >= f.n {
		f.dups.Add(1)
		return
	}
	bit := uint64(1) << (id % 64)
	if f.seen[id/64].Or(bit)&bit != 0 {
		f.dups.Add(1)
		return
	}
	c := f.count.Add(1)
	for i, mark := range [3]int64{1, f.n / 10, f.n - f.n/10} {
		if c == mark {
			f.stamps[i].Store(int64(time.Since(f.started)))
		}
	}
	if c == f.n {
		first, cpu1 := f.calls.FirstGetRecords()
		f.res = result{wall: time.Since(first), cpu: benchkit.CPUTime() - cpu1, startup: first.Sub(f.started), dups: f.dups.Load()}
		f.res.first, f.res.tenth = time.Duration(f.stamps[0].Load()), time.Duration(f.stamps[1].Load())
		f.res.mid = time.Duration(f.stamps[2].Load() - f.stamps[1].Load())
		var m goruntime.MemStats
		goruntime.ReadMemStats(&m)
		f.res.allocs, f.res.bytes, f.res.gcs = m.Mallocs-f.mem0.Mallocs, m.TotalAlloc-f.mem0.TotalAlloc, m.NumGC-f.mem0.NumGC
		close(f.done)
	}
}

func (f *finish) wait(ctx context.Context) (result, error) {
	select {
	case <-f.done:
		return f.res, nil
	case <-ctx.Done():
		return result{}, fmt.Errorf("decoded %d of %d distinct records: %w", f.count.Load(), f.n, ctx.Err())
	}
}

// drainOurs reads through a subscription on a fresh broker, with its leases
// in a fresh DynamoDB table (in memory without -dynamodb).
func drainOurs(ctx context.Context, o options, stream string) (result, error) {
	cfg, calls := kbench.Config()
	var store lease.Store = lease.NewMemory()
	var tables time.Duration
	if o.dynamodb != "" {
		table := tableName("ours", stream)
		// The tables first, as infrastructure code would make them, on a
		// client of their own: neither their time nor their calls are the
		// drain's. The broker's store is a fresh one, which checks them
		// at its start as a new process does.
		setupCfg, _ := kbench.Config()
		t0 := time.Now()
		if err := lease.NewDynamoDB(kbench.DynamoClient(setupCfg, o.dynamodb), table, lease.CreateTableIfMissing()).EnsureTable(ctx); err != nil {
			return result{}, fmt.Errorf("creating the lease tables: %w", err)
		}
		tables = time.Since(t0)
		store = lease.NewDynamoDB(kbench.DynamoClient(cfg, o.dynamodb), table, lease.CreateTableIfMissing())
	}
	b := kgrt.NewBrokerFromConfig(cfg, kgrt.WithEndpoint(o.endpoint), kgrt.WithLeaseStore(store))
	var f *finish
	_, err := kgrt.Subscribe(b, stream, func(_ context.Context, e kbench.Event, _ kgrt.Delivery) kgrt.Outcome {
		f.add(e.ID)
		return kgrt.Ack()
	}, kgrt.StartAt(kgrt.Horizon()), kgrt.Workers(8), kgrt.ByKey(), kgrt.BatchSize(10000), kgrt.PollInterval(o.poll))
	if err != nil {
		return result{}, err
	}
	f = start(o.records, calls)
	if err := b.Connect(ctx); err != nil {
		return result{}, err
	}
	r, err := f.wait(ctx)
	r.getRecords, r.dynamoDB, r.tables = calls.GetRecords(), calls.DynamoDB(), tables
	if err == nil {
		idleWindow(ctx, o, calls, &r)
	}
	stopCtx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	return r, errors.Join(err, b.Shutdown(stopCtx))
}

// tableName is a lease table of its own for one drain, so each starts from
// the horizon with no lease or checkpoint of an earlier one.
func tableName(mode, stream string) string {
	return fmt.Sprintf("%s-%s-%d", mode, stream, time.Now().UnixNano())
}

// drainKCL reads with vmware-go-kcl-v2: a worker at its defaults, from the
// horizon, its shard sync at -kclsync, its leases and checkpoints in a fresh
// DynamoDB table.
func drainKCL(ctx context.Context, o options, stream string) (result, error) {
	cfg, calls := kbench.Config()
	table := tableName("kcl", stream)
	// Its table exists before it starts, as ours' do (drainOurs).
	setupCfg, _ := kbench.Config()
	t0 := time.Now()
	if err := createKCLTable(ctx, kbench.DynamoClient(setupCfg, o.dynamodb), table); err != nil {
		return result{}, fmt.Errorf("creating the lease table: %w", err)
	}
	tables := time.Since(t0)
	g := kbench.GoKCL{
		Stream:    stream,
		Table:     table,
		Kinesis:   kbench.Client(cfg, o.endpoint),
		DynamoDB:  kbench.DynamoClient(cfg, o.dynamodb),
		Horizon:   true,
		ShardSync: o.kclSync,
		Log:       os.Stderr,
	}
	f := start(o.records, calls)
	w, errs, err := kbench.StartGoKCL(g, func(e kbench.Event) { f.add(e.ID) })
	if err != nil {
		return result{}, err
	}
	defer w.Shutdown()
	var r result
	select {
	case <-f.done:
		r = f.res
	case err := <-errs:
		return result{}, fmt.Errorf("after %d of %d records: %w", f.count.Load(), f.n, err)
	case <-ctx.Done():
		return result{}, fmt.Errorf("decoded %d of %d distinct records: %w", f.count.Load(), f.n, ctx.Err())
	}
	r.getRecords, r.dynamoDB, r.tables = calls.GetRecords(), calls.DynamoDB(), tables
	idleWindow(ctx, o, calls, &r)
	return r, nil
}

// createKCLTable creates table as the Go KCL would (its lease key, a
// string, as the hash key; it finds the table at its start and skips its
// own CreateTable) and waits until it is ACTIVE.
func createKCLTable(ctx context.Context, client *dynamodb.Client, table string) error {
	_, err := client.CreateTable(ctx, &dynamodb.CreateTableInput{
		TableName:            &table,
		AttributeDefinitions: []dtypes.AttributeDefinition{{AttributeName: aws.String(checkpoint.LeaseKeyKey), AttributeType: dtypes.ScalarAttributeTypeS}},
		KeySchema:            []dtypes.KeySchemaElement{{AttributeName: aws.String(checkpoint.LeaseKeyKey), KeyType: dtypes.KeyTypeHash}},
		BillingMode:          dtypes.BillingModePayPerRequest,
	})
	if err != nil {
		return err
	}
	return dynamodb.NewTableExistsWaiter(client, func(o *dynamodb.TableExistsWaiterOptions) { o.MinDelay = 20 * time.Millisecond }).
		Wait(ctx, &dynamodb.DescribeTableInput{TableName: &table}, time.Minute)
}

// drainBare is the baseline: a goroutine per shard reading GetRecords in a
// loop and decoding each record. An empty read waits 200 ms, the service's
// per-shard budget (it happens only on a shard already drained).
func drainBare(ctx context.Context, o options, stream string) (result, error) {
	cfg, calls := kbench.Config()
	client := kbench.Client(cfg, o.endpoint)
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	f := start(o.records, calls)
	shards, err := client.ListShards(ctx, &kinesis.ListShardsInput{StreamName: &stream})
	if err != nil {
		return result{}, err
	}
	errs := make(chan error, len(shards.Shards))
	var wg sync.WaitGroup
	for _, s := range shards.Shards {
		wg.Go(func() {
			if err := readShard(ctx, client, stream, aws.ToString(s.ShardId), f); err != nil && ctx.Err() == nil {
				errs <- err
				cancel()
			}
		})
	}
	var r result
	select {
	case <-f.done:
		r = f.res
		r.getRecords, r.dynamoDB = calls.GetRecords(), calls.DynamoDB()
		idleWindow(ctx, o, calls, &r)
	case <-ctx.Done():
	}
	cancel()
	wg.Wait()
	close(errs)
	if err := <-errs; err != nil {
		return result{}, err
	}
	if r.wall == 0 {
		return result{}, fmt.Errorf("decoded %d of %d distinct records: %w", f.count.Load(), f.n, context.Cause(ctx))
	}
	return r, nil
}

func readShard(ctx context.Context, client *kinesis.Client, stream, shard string, f *finish) error {
	it, err := client.GetShardIterator(ctx, &kinesis.GetShardIteratorInput{
		StreamName: &stream, ShardId: &shard, ShardIteratorType: types.ShardIteratorTypeTrimHorizon,
	})
	if err != nil {
		return err
	}
	iter := it.ShardIterator
	for iter != nil && ctx.Err() == nil {
		out, err := client.GetRecords(ctx, &kinesis.GetRecordsInput{ShardIterator: iter, Limit: aws.Int32(10000)})
		if err != nil {
			return err
		}
		for i := range out.Records {
			var e kbench.Event
			if err := json.Unmarshal(out.Records[i].Data, &e); err != nil {
				return err
			}
			f.add(e.ID)
		}
		if len(out.Records) == 0 {
			select {
			case <-ctx.Done():
			case <-time.After(200 * time.Millisecond):
			}
		}
		iter = out.NextShardIterator
	}
	return nil
}

// drainKC reads with kinesis-consumer at its defaults (250 ms scan interval,
// 10000 records per call, no-op checkpoint store), from the horizon.
func drainKC(ctx context.Context, o options, stream string) (result, error) {
	cfg, calls := kbench.Config()
	client := kbench.Client(cfg, o.endpoint)
	c, err := consumer.New(stream, consumer.WithClient(client),
		consumer.WithShardIteratorType(string(types.ShardIteratorTypeTrimHorizon)))
	if err != nil {
		return result{}, err
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	f := start(o.records, calls)
	scanned := make(chan error, 1)
	go func() {
		scanned <- kbench.ScanKC(ctx, c, client, stream, func(e kbench.Event) { f.add(e.ID) })
	}()
	var r result
	select {
	case <-f.done:
		r = f.res
	case err := <-scanned:
		return result{}, fmt.Errorf("scan ended after %d of %d records: %v", f.count.Load(), f.n, err)
	case <-ctx.Done():
		return result{}, fmt.Errorf("decoded %d of %d distinct records: %w", f.count.Load(), f.n, ctx.Err())
	}
	r.getRecords, r.dynamoDB = calls.GetRecords(), calls.DynamoDB()
	idleWindow(ctx, o, calls, &r)
	cancel()
	<-scanned // an error now is our cancellation (it wraps it with %v, so errors.Is cannot tell)
	return r, nil
}

func startProfile(path string) (func(), error) {
	f, err := os.Create(path)
	if err != nil {
		return nil, err
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		f.Close()
		return nil, err
	}
	return func() { pprof.StopCPUProfile(); f.Close() }, nil
}

func fail(err error) {
	fmt.Fprintln(os.Stderr, "drain:", err)
	os.Exit(1)
}
