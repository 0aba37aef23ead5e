// Command aggregate measures KPL aggregation (issue 13) against kinesalite,
// side by side in one run: the same messages (about 200 bytes of JSON, keyed
// over many keys) published several ways, each into a fresh 4-shard stream
// with a fresh client:
//
//	bare     a bare loop of PutRecords batches of 500 from -bulkcallers (4)
//	         goroutines, one record per message, each JSON-encoded (the
//	         baseline)
//	plain    runtime.Publisher, -callers goroutines, each owning a set of
//	         keys and publishing their messages in order, one Publish each
//	agg      the same with aggregation on (WithAggregation; by default
//	         50 KiB aggregates, no linger)
//	agg-all  the aggregating publisher driven like the bare loop: runtime.SendAll
//	         of -bulk messages from -bulkcallers goroutines, each owning a set
//	         of keys, each message under its own key
//	agg-pipe the same with runtime.StartAll, each goroutine keeping -depth
//	         (2) batches on their way: it submits the next batch, then
//	         waits for its oldest
//	a8m      a8m/kinesis-producer v0.2.0 with aggregation (its defaults),
//	         Put from 4 goroutines, Stop to flush
//	bare-replay, agg-replay
//	         the server alone: the bare loop's requests, or agg-all's
//	         aggregates (50 KiB, by shard, eight to a request), built
//	         before the clock starts and sent over plain HTTP from
//	         -bulkcallers goroutines, so that the client costs next to
//	         nothing; agg-replay's rate over the bare loop's is the most
//	         any client could reach against this server on this machine
//
// then drains the plain and the aggregated stream (agg-all's, else agg's)
// with runtime.Subscribe (Workers(8), ByKey, BatchSize -batch, a no-op
// handler, checkpoints on, the broker's own in-memory lease store), timed
// from Connect and from the first GetRecords request (the subscriber's
// start, the same for both, left out), and, with -aggbatch N, the
// aggregated stream once more with BatchSize N (reads of about N messages).
// Every stream is read back after it is published, untimed: the
// Kinesis records and PUT payload units (25 KiB of data plus key, rounded
// up per record) per million messages, and a check that every message is
// stored once, on the shard its own key hashes to, under its own key, each
// key's messages in publish order; the run fails otherwise for ours, and
// counts the exceptions for bare (no order kept) and a8m (which files an
// aggregate under its first message's key). Each stream is deleted as soon
// as the round is done with it, so that kinesalite, which keeps every
// record in its memory, does not carry earlier modes into the later ones;
// an uncounted round of a tenth of the messages goes first (-warmup), so
// that kinesalite has compiled its paths for large blobs before the first
// counted aggregate. It reports messages per second,
// client CPU per message (getrusage around each mode) and the server's CPU
// per message (the process listening on the endpoint, from /proc), with
// each round's messages per PutRecords call where the mode's calls go
// through the counting client (not a8m's, nor the replays'), medians
// over the rounds, and ratios of the medians with each round's in brackets,
// then the goals of issue 34 item 1 side by side, each round's ratio
// against its bound: agg (Publish from -callers goroutines) at least 0.9×
// agg-pipe's (StartAll's) messages/s and at most the bare loop's client
// CPU per message, agg-pipe at most a8m's, beside the replay ceiling.
//
//	bash scripts/with-servers.sh sh -c 'cd bench && go run ./cmd/aggregate'
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"iter"
	"log"
	"net/http"
	"net/url"
	"os"
	goruntime "runtime"
	"runtime/pprof"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	producer "github.com/a8m/kinesis-producer"
	"github.com/aws/aws-sdk-go-v2/aws"
	awshttp "github.com/aws/aws-sdk-go-v2/aws/transport/http"
	"github.com/aws/aws-sdk-go-v2/service/kinesis"
	"github.com/aws/aws-sdk-go-v2/service/kinesis/types"
	awsv1 "github.com/aws/aws-sdk-go/aws"
	credv1 "github.com/aws/aws-sdk-go/aws/credentials"
	"github.com/aws/aws-sdk-go/aws/session"
	kinesisv1 "github.com/aws/aws-sdk-go/service/kinesis"

	"github.com/kinesisgen/kinesisgen/bench/internal/kbench"
	_ "github.com/kinesisgen/kinesisgen/bench/internal/protoconflict" // before the peers: two of kbench's register AggregatedRecord
	"github.com/kinesisgen/kinesisgen/internal/bench/benchkit"
	kgrt "github.com/kinesisgen/kinesisgen/runtime"
	"github.com/kinesisgen/kinesisgen/runtime/kpl"
	"github.com/kinesisgen/kinesisgen/runtime/shard"
)

type options struct {
	endpoint    string
	n           int
	keys        int
	shards      int
	size        int
	callers     int
	bulkCallers int
	bulk        int
	aggGroups   int // agg-all: publishers, each with its own aggregator
	depth       int // agg-pipe: batches each caller keeps on their way
	runs        int
	warmup      bool
	aggBytes    int
	linger      time.Duration
	batch       int // the drains' BatchSize
	aggBatch    int // if > 0, the aggregated stream is drained again with this BatchSize
	profile     string
	modes       []string
	pid         int // the server's, for its CPU time; 0: unknown
}

func main() {
	var o options
	flag.StringVar(&o.endpoint, "endpoint", os.Getenv("KINESIS_TEST_ENDPOINT"), "Kinesis endpoint URL (default $KINESIS_TEST_ENDPOINT)")
	flag.IntVar(&o.n, "n", 100_000, "messages per mode")
	flag.IntVar(&o.keys, "keys", 10_000, "distinct partition keys")
	flag.IntVar(&o.shards, "shards", 4, "shards per stream")
	flag.IntVar(&o.size, "size", 200, "bytes per message (JSON)")
	flag.IntVar(&o.callers, "callers", 2048, "publishing goroutines for plain and agg")
	flag.IntVar(&o.bulkCallers, "bulkcallers", 4, "goroutines of the bare loop and of agg-all's SendAll calls")
	flag.IntVar(&o.bulk, "bulk", 500, "messages per SendAll call for agg-all")
	flag.IntVar(&o.aggGroups, "agggroups", 1, "agg-all's callers split over this many publishers, each with its own aggregator (callers never share an aggregate across groups)")
	flag.IntVar(&o.depth, "depth", 2, "agg-pipe: batches of -bulk messages each caller keeps on their way (runtime.StartAll)")
	flag.IntVar(&o.runs, "runs", 3, "rounds")
	flag.BoolVar(&o.warmup, "warmup", true, "run an uncounted round of a tenth of the messages first")
	flag.IntVar(&o.aggBytes, "aggbytes", 0, "Aggregation.MaxBytes for agg (0: the default)")
	flag.DurationVar(&o.linger, "linger", 0, "Aggregation.Linger for agg")
	flag.IntVar(&o.batch, "batch", kgrt.MaxBatchSize, "the drains' BatchSize")
	flag.IntVar(&o.aggBatch, "aggbatch", 0, "if > 0, drain the aggregated stream once more with this BatchSize (reads of about that many messages)")
	modes := flag.String("modes", "bare,plain,agg,agg-all,agg-pipe,a8m,bare-replay,agg-replay", "publishing modes to run: bare, plain, agg, agg-all, agg-pipe, a8m, bare-replay, agg-replay (the drains need plain and agg-all or agg)")
	flag.StringVar(&o.profile, "cpuprofile", "", "write a CPU profile of each mode of the last round to this prefix plus .MODE.prof (.drain-STREAM.prof for the drains)")
	flag.Parse()
	o.modes = strings.Split(*modes, ",")
	if o.endpoint == "" {
		fmt.Fprintln(os.Stderr, "aggregate: no endpoint: pass -endpoint or run under scripts/with-servers.sh")
		os.Exit(2)
	}
	o.pid = serverPID(o.endpoint)
	fmt.Printf("aggregate: %d messages of %d bytes over %d keys, %d shards, %d callers (agg-all: %d × SendAll of %d), GOMAXPROCS=%d, server pid %d\n",
		o.n, len(kbench.Payload(0, o.size)), o.keys, o.shards, o.callers, o.bulkCallers, o.bulk, goruntime.GOMAXPROCS(0), o.pid)
	type series struct{ rate, cpu, srv, fromRead []float64 }
	res := map[string]*series{}
	add := func(mode string, m measure) {
		s := res[mode]
		if s == nil {
			s = &series{}
			res[mode] = s
		}
		n := float64(o.n)
		s.rate = append(s.rate, n/m.wall.Seconds())
		s.cpu = append(s.cpu, float64(m.cpu.Microseconds())/n)
		s.srv = append(s.srv, float64(m.server.Microseconds())/n)
		fmt.Printf("  %-11s %9.0f msg/s  %6.2f µs client CPU/msg  %6.2f µs server CPU/msg", mode, s.rate[len(s.rate)-1], s.cpu[len(s.cpu)-1], s.srv[len(s.srv)-1])
		if m.puts > 0 {
			fmt.Printf("  %5.0f msg/PutRecords", n/float64(m.puts))
		}
		if m.first > 0 {
			s.fromRead = append(s.fromRead, n/(m.wall-m.firstRead).Seconds())
			fmt.Printf("  first read after %v, first message after %v, %.0f msg/s from the first read",
				m.firstRead.Round(time.Millisecond), m.first.Round(time.Millisecond), s.fromRead[len(s.fromRead)-1])
		}
		fmt.Println()
	}
	drained := ""
	for _, m := range []string{"agg-all", "agg"} {
		if drained == "" && slices.Contains(o.modes, m) && slices.Contains(o.modes, "plain") {
			drained = m
		}
	}
	ctx := context.Background()
	if o.warmup {
		// kinesalite compiles its paths for large blobs (the aggregates)
		// only when it first meets them: without this, the first round
		// of the aggregated modes runs at half speed.
		w := o
		w.n = max(o.n/10, 1000)
		fmt.Printf("warm-up round (%d messages, not counted; load average %s)\n", w.n, loadAverage())
		runRound(ctx, w, drained, func(string, measure) {})
	}
	var stats map[string]storeStats
	for round := range o.runs {
		fmt.Printf("round %d (load average %s)\n", round+1, loadAverage())
		stats = runRound(ctx, o, drained, add)
	}
	fmt.Printf("end (load average %s)\n", loadAverage())
	rate := func(s *series) []float64 { return s.rate }
	cpu := func(s *series) []float64 { return s.cpu }
	fmt.Println("\nmedians")
	for _, mode := range append(slices.Clone(o.modes), "drain-plain", "drain-"+drained, smallReads) {
		s := res[mode]
		if s == nil {
			continue
		}
		fmt.Printf("  %-13s %9.0f msg/s  %6.2f µs client CPU/msg  %6.2f µs server CPU/msg  (rounds: %s msg/s)\n",
			mode, kbench.Median(s.rate), kbench.Median(s.cpu), kbench.Median(s.srv), kbench.Fmt(s.rate, 0))
	}
	// ratio is the median of a/b and each round's a/b.
	ratio := func(a, b string, f func(*series) []float64) (float64, []float64) {
		if res[a] == nil || res[b] == nil {
			return 0, nil
		}
		x, y := f(res[a]), f(res[b])
		var per []float64
		for i := range x {
			per = append(per, x[i]/y[i])
		}
		return kbench.Median(x) / kbench.Median(y), per
	}
	fmt.Println("\nratios (of medians; per round in brackets)")
	for _, r := range [][2]string{{"agg", "bare"}, {"agg-all", "bare"}, {"agg-pipe", "bare"}, {"agg-pipe", "agg-all"}, {"agg", "agg-pipe"}, {"a8m", "bare"}, {"agg-pipe", "a8m"}, {"agg", "plain"}, {"agg-replay", "bare-replay"}, {"agg-replay", "bare"}, {"agg-all", "agg-replay"}, {"agg-pipe", "agg-replay"}, {"agg", "agg-replay"}, {"bare", "bare-replay"}} {
		m, per := ratio(r[0], r[1], rate)
		if per == nil {
			continue
		}
		c, cper := ratio(r[0], r[1], cpu)
		fmt.Printf("  %s / %s: msg/s %.1f [%s], client CPU/msg %.2f [%s]\n", r[0], r[1], m, kbench.Fmt(per, 1), c, kbench.Fmt(cper, 2))
	}
	goals(ratio, rate, cpu)
	fromRead := func(s *series) []float64 { return s.fromRead }
	for _, a := range []string{"drain-" + drained, smallReads} {
		if m, per := ratio(a, "drain-plain", rate); per != nil {
			m2, per2 := ratio(a, "drain-plain", fromRead)
			c, cper := ratio(a, "drain-plain", cpu)
			fmt.Printf("  %s / drain-plain: msg/s %.1f [%s] from Connect, %.1f [%s] from each drain's first GetRecords (the subscriber's start left out), client CPU/msg %.2f [%s]\n",
				a, m, kbench.Fmt(per, 1), m2, kbench.Fmt(per2, 1), c, kbench.Fmt(cper, 2))
		}
	}
	fmt.Println("\nstored (last round): records and PUT payload units per 1M messages; messages misplaced, out of order and under another key per 1M")
	for _, mode := range o.modes {
		st := stats[mode]
		per := 1e6 / float64(st.messages)
		fmt.Printf("  %-7s %9.0f records  %9.0f PUT payload units  %6.1f bytes/msg  misplaced %.0f  out of order %.0f  under another key %.0f\n",
			mode, float64(st.records)*per, float64(st.units)*per, float64(st.bytes)/float64(st.messages),
			float64(st.misplaced)*per, float64(st.unordered)*per, float64(st.wrongKey)*per)
	}
}

// ratioFunc is main's ratio: the ratio of two modes' medians of a measure,
// and each round's.
type ratioFunc[S any] func(a, b string, f func(S) []float64) (float64, []float64)

// goals prints the goals of issue 34 item 1, each with the ratio of the
// medians and each round's, and whether every round met it: Publish from
// many goroutines (agg) against StartAll (agg-pipe) and the bare loop,
// StartAll against a8m, beside the server-alone ceiling (agg-replay over
// the bare loop). Placement and order need no line: check fails the run
// when a message of ours is on a shard its key does not hash to, or out
// of its key's order.
func goals[S any](ratio ratioFunc[S], rate, cpu func(S) []float64) {
	type goal struct {
		name, a, b string
		f          func(S) []float64
		bound      float64
		atLeast    bool
	}
	fmt.Println("\ngoals (issue 34 item 1; every message of ours on its key's shard in its key's order: checked above, the run fails otherwise)")
	for _, g := range []goal{
		{"Publish (agg) / StartAll (agg-pipe), msg/s", "agg", "agg-pipe", rate, 0.9, true},
		{"Publish (agg) / bare loop, client CPU/msg", "agg", "bare", cpu, 1, false},
		{"StartAll (agg-pipe) / a8m, client CPU/msg", "agg-pipe", "a8m", cpu, 1, false},
	} {
		m, per := ratio(g.a, g.b, g.f)
		if per == nil {
			fmt.Printf("  %s: not measured (-modes needs %s and %s)\n", g.name, g.a, g.b)
			continue
		}
		met := 0
		for _, x := range per {
			if g.atLeast && x >= g.bound || !g.atLeast && x <= g.bound {
				met++
			}
		}
		op := "≤"
		if g.atLeast {
			op = "≥"
		}
		fmt.Printf("  %s: %.2f [%s], goal %s %.1f: met in %d of %d rounds\n", g.name, m, kbench.Fmt(per, 2), op, g.bound, met, len(per))
	}
	for _, c := range [][2]string{{"agg-replay", "bare"}, {"agg", "bare"}, {"agg-pipe", "bare"}} {
		if m, per := ratio(c[0], c[1], rate); per != nil {
			fmt.Printf("  %s / %s, msg/s: %.1f [%s]\n", c[0], c[1], m, kbench.Fmt(per, 1))
		}
	}
	if m, _ := ratio("agg-replay", "bare", rate); m == 0 {
		fmt.Println("  the server-alone ceiling (agg-replay / bare) needs -modes with agg-replay and bare")
	}
}

// runRound publishes o.n messages in each mode, checks each stream, drains
// the plain and the aggregated one, and passes each measure to add.
func runRound(ctx context.Context, o options, drained string, add func(mode string, m measure)) map[string]storeStats {
	stats := map[string]storeStats{}
	streams := map[string]string{}
	for _, mode := range o.modes {
		m, stream, err := publish(ctx, o, mode)
		if err != nil {
			fail(fmt.Errorf("%s: %w", mode, err))
		}
		add(mode, m)
		st, err := check(ctx, o, stream, mode != "bare" && mode != "a8m")
		if err != nil {
			fail(fmt.Errorf("%s: check: %w", mode, err))
		}
		stats[mode] = st
		if mode == "plain" || mode == drained {
			streams[mode] = stream
		} else {
			drop(ctx, o, stream)
		}
	}
	if drained == "" {
		return stats
	}
	for _, mode := range []string{"plain", drained} {
		m, err := drain(ctx, o, streams[mode], o.batch)
		if err != nil {
			fail(fmt.Errorf("drain %s: %w", mode, err))
		}
		add("drain-"+mode, m)
	}
	if o.aggBatch > 0 {
		m, err := drain(ctx, o, streams[drained], o.aggBatch)
		if err != nil {
			fail(fmt.Errorf("drain %s with BatchSize %d: %w", drained, o.aggBatch, err))
		}
		add(smallReads, m)
	}
	drop(ctx, o, streams["plain"])
	drop(ctx, o, streams[drained])
	return stats
}

type measure struct {
	wall, cpu, server time.Duration
	first             time.Duration // a drain's: from Connect to the first message handled
	firstRead         time.Duration // a drain's: from Connect to its first GetRecords request
	puts              int64         // PutRecords calls of a publishing mode (0: not counted)
}

func key(i, keys int) string { return "customer-" + strconv.Itoa(i%keys) }

// owned yields caller c's messages in order: those of the keys k with
// k%callers == c, so each key's messages are published by one caller, in
// order. The indices are computed, not read from a list: with thousands of
// callers each one's list is out of the cache by its next message, a miss
// the bench would count as the publisher's CPU, where the bulk modes read
// theirs in a row. (Side by side, four runs each, the difference was
// inside the noise: it did not hide a cost of the runtime's.)
func owned(o options, callers, c int) iter.Seq[int] {
	return func(yield func(int) bool) {
		for base := 0; base < o.n; base += o.keys {
			for k := c; k < o.keys && base+k < o.n; k += callers {
				if !yield(base + k) {
					return
				}
			}
		}
	}
}

// byOwner is owned for every caller, as lists.
func byOwner(o options, callers int) [][]int {
	mine := make([][]int, callers)
	for c := range mine {
		mine[c] = slices.Collect(owned(o, callers, c))
	}
	return mine
}

// clock measures a mode from when it starts: wall time, this process's
// CPU time and the server's.
type clock struct {
	t0       time.Time
	cpu, srv time.Duration
	pid      int
}

func startClock(o options) clock {
	return clock{t0: time.Now(), cpu: benchkit.CPUTime(), srv: procCPU(o.pid), pid: o.pid}
}

// measure is what passed since the clock started.
func (c clock) measure() measure {
	return measure{wall: time.Since(c.t0), cpu: benchkit.CPUTime() - c.cpu, server: procCPU(c.pid) - c.srv}
}

// measurePuts is measure with the PutRecords calls counted (every one of
// the mode's client is in the timed part: nothing is put before it).
func (c clock) measurePuts(n *kbench.Counter) measure {
	m := c.measure()
	m.puts = n.PutRecords()
	return m
}

// publish publishes messages 0..n-1 into a fresh stream one way.
func publish(ctx context.Context, o options, mode string) (measure, string, error) {
	cfg, counter := kbench.Config()
	client := kbench.Client(cfg, o.endpoint)
	stream, err := benchkit.CreateStream(ctx, client, "agg-"+mode, int32(o.shards))
	if err != nil {
		return measure{}, "", err
	}
	events := make([]kbench.Event, o.n)
	for i := range events {
		if err := json.Unmarshal(kbench.Payload(i, o.size), &events[i]); err != nil {
			return measure{}, "", err
		}
	}
	goruntime.GC()
	if o.profile != "" && (mode == "bare" || mode == "a8m") {
		f, err := os.Create(o.profile + "." + mode + ".prof")
		if err != nil {
			return measure{}, "", err
		}
		_ = pprof.StartCPUProfile(f)
		defer func() { pprof.StopCPUProfile(); _ = f.Close() }()
	}
	if mode == "bare" {
		// Each event JSON-encoded, as an application must (and as the
		// runtime's codec does for the other modes).
		clock := startClock(o)
		err := benchkit.PutBatches(ctx, client, stream, o.n, o.bulkCallers, func(i int) ([]byte, string) {
			data, _ := json.Marshal(&events[i])
			return data, key(i, o.keys)
		})
		return clock.measurePuts(counter), stream, err
	}
	if mode == "a8m" {
		return a8mPublish(o, events, stream)
	}
	if mode == "bare-replay" || mode == "agg-replay" {
		m, err := replayPublish(ctx, o, mode, stream, events)
		return m, stream, err
	}
	b := kgrt.NewBrokerFromConfig(cfg, kgrt.WithEndpoint(o.endpoint))
	if err := b.Connect(ctx); err != nil {
		return measure{}, "", err
	}
	defer b.Shutdown(context.Background())
	var opts []kgrt.PublishOption
	if mode == "agg" || mode == "agg-all" || mode == "agg-pipe" {
		opts = append(opts, kgrt.WithAggregation(kgrt.Aggregation{MaxBytes: o.aggBytes, Linger: o.linger}))
	}
	p := kgrt.NewPublisher[*kbench.Event](b, kgrt.PublisherSpec{Stream: stream}, opts...)
	if o.profile != "" {
		f, err := os.Create(o.profile + "." + mode + ".prof")
		if err != nil {
			return measure{}, "", err
		}
		_ = pprof.StartCPUProfile(f)
		defer func() { pprof.StopCPUProfile(); _ = f.Close() }()
	}
	if mode == "agg-all" || mode == "agg-pipe" {
		ps := []kgrt.Publisher[*kbench.Event]{p}
		for g := 1; g < o.aggGroups; g++ {
			// Another aggregator of the stream: the connection keeps one
			// per stream and settings, so each group's MaxBytes differs by
			// a byte.
			agg := kgrt.Aggregation{MaxBytes: kgrt.DefaultAggregateBytes - g, Linger: o.linger}
			ps = append(ps, kgrt.NewPublisher[*kbench.Event](b, kgrt.PublisherSpec{Stream: stream}, kgrt.WithAggregation(agg)))
		}
		depth := 1
		if mode == "agg-pipe" {
			depth = o.depth
		}
		m, stream, err := bulkPublish(ctx, o, ps, events, stream, depth)
		m.puts = counter.PutRecords()
		return m, stream, err
	}
	clock := startClock(o)
	var next atomic.Int64
	err = benchkit.Parallel(o.callers, func() error {
		// Each caller publishes its keys' messages one at a time.
		for i := range owned(o, o.callers, int(next.Add(1)-1)) {
			if err := p.Message(&events[i]).PartitionKey(key(i, o.keys)).Publish(ctx); err != nil {
				return err
			}
		}
		return nil
	})
	return clock.measurePuts(counter), stream, err
}

// bulkPublish publishes from bulkcallers goroutines, each owning the keys
// k with k%bulkcallers == g and sending their messages in order, bulk per
// runtime.StartAll, each message under its own key, with depth batches on
// their way (depth 1: each batch waited for before the next, as SendAll
// does); caller g publishes through ps[g%len(ps)] (-agggroups).
func bulkPublish(ctx context.Context, o options, ps []kgrt.Publisher[*kbench.Event], events []kbench.Event, stream string, depth int) (measure, string, error) {
	mine := byOwner(o, o.bulkCallers)
	clock := startClock(o)
	var next atomic.Int64
	err := benchkit.Parallel(o.bulkCallers, func() error {
		g := int(next.Add(1) - 1)
		ids, p := mine[g], ps[g%len(ps)]
		var started []*kgrt.Pending
		msgs := make([]*kgrt.Message[*kbench.Event], 0, o.bulk) // StartAll keeps none of it
		for len(ids) > 0 {
			chunk := ids[:min(o.bulk, len(ids))]
			ids = ids[len(chunk):]
			msgs = msgs[:0]
			for _, i := range chunk {
				msgs = append(msgs, p.Message(&events[i]).PartitionKey(key(i, o.keys)))
			}
			started = append(started, kgrt.StartAll(ctx, msgs))
			if len(started) == depth {
				if _, err := started[0].Wait(); err != nil {
					return err
				}
				started = started[1:]
			}
		}
		for _, pd := range started {
			if _, err := pd.Wait(); err != nil {
				return err
			}
		}
		return nil
	})
	return clock.measure(), stream, err
}

// a8mPublish publishes through a8m/kinesis-producer (aggregation on, its
// defaults: 50 KB aggregates, PutRecords of up to 500 records or 5 MiB, 24
// connections), Put from 4 goroutines as the bare loop sends, each message
// JSON-encoded and put under its own key; Stop flushes the rest. Its own
// SDK v1 client, with a fresh HTTP client.
func a8mPublish(o options, events []kbench.Event, stream string) (measure, string, error) {
	sess, err := session.NewSession(&awsv1.Config{
		Region: awsv1.String("us-east-1"), Endpoint: awsv1.String(o.endpoint), DisableSSL: awsv1.Bool(true),
		Credentials: credv1.NewStaticCredentials("x", "x", ""), HTTPClient: &http.Client{},
	})
	if err != nil {
		return measure{}, "", err
	}
	pr := producer.New(&producer.Config{
		StreamName: stream, Client: kinesisv1.New(sess),
		Logger: &producer.StdLogger{Logger: log.New(io.Discard, "", 0)},
	})
	failures := pr.NotifyFailures()
	var failed atomic.Int64
	go func() {
		for range failures {
			failed.Add(1)
		}
	}()
	clock := startClock(o)
	pr.Start()
	var next atomic.Int64
	err = benchkit.Parallel(4, func() error {
		for {
			i := int(next.Add(1) - 1)
			if i >= o.n {
				return nil
			}
			data, _ := json.Marshal(&events[i])
			if err := pr.Put(data, key(i, o.keys)); err != nil {
				return err
			}
		}
	})
	pr.Stop()
	m := clock.measure()
	if n := failed.Load(); n > 0 && err == nil {
		err = fmt.Errorf("a8m reported %d records it could not put", n)
	}
	return m, stream, err
}

// rawJSON is a message that keeps its JSON as it is: the drains decode
// nothing.
type rawJSON []byte

func (r rawJSON) MarshalJSON() ([]byte, error) { return r, nil }

func (r *rawJSON) UnmarshalJSON(b []byte) error { *r = append((*r)[:0], b...); return nil }

type storeStats struct {
	messages, records, units, bytes int
	misplaced, unordered, wrongKey  int // on a shard its own key does not hash to, out of its key's order, read under another key
}

// check reads the stream back and counts what is stored; with ordered, a
// key whose messages are not in publish order counts as out of order.
func check(ctx context.Context, o options, stream string, ordered bool) (storeStats, error) {
	cfg, _ := kbench.Config()
	client := kbench.Client(cfg, o.endpoint)
	l, err := shard.List(ctx, client, stream)
	if err != nil {
		return storeStats{}, err
	}
	var st storeStats
	seen := make([]bool, o.n)
	last := map[string]int{}
	for _, id := range l.IDs() {
		info, _ := l.Shard(id)
		it, err := client.GetShardIterator(ctx, &kinesis.GetShardIteratorInput{StreamName: &stream, ShardId: aws.String(id), ShardIteratorType: types.ShardIteratorTypeTrimHorizon})
		if err != nil {
			return st, err
		}
		for iter := it.ShardIterator; iter != nil; {
			out, err := client.GetRecords(ctx, &kinesis.GetRecordsInput{ShardIterator: iter, Limit: aws.Int32(10000)})
			if err != nil {
				return st, err
			}
			for _, r := range out.Records {
				size := len(r.Data) + len(aws.ToString(r.PartitionKey))
				st.records++
				st.bytes += size
				st.units += kbench.PutUnits(size)
				subs, ok, err := kpl.Deaggregate(r.Data)
				if err != nil {
					return st, err
				}
				if !ok {
					subs = []kpl.Record{{PartitionKey: aws.ToString(r.PartitionKey), Data: r.Data}}
				}
				for _, s := range subs {
					id, err := idOf(s.Data)
					if err != nil || id >= o.n || seen[id] {
						return st, fmt.Errorf("message %q read twice or unknown: %v", s.Data, err)
					}
					seen[id] = true
					st.messages++
					own := key(id, o.keys)
					if s.PartitionKey != own {
						if ordered {
							return st, fmt.Errorf("message %d under key %q", id, s.PartitionKey)
						}
						st.wrongKey++ // a8m: every message under its aggregate's first key
					}
					if !info.Range.Contains(shard.HashKeyOf(own)) {
						st.misplaced++
					}
					if prev, ok := last[own]; ok && prev > id {
						st.unordered++
					}
					last[own] = id
				}
			}
			if len(out.Records) == 0 {
				break
			}
			iter = out.NextShardIterator
		}
	}
	if st.messages != o.n {
		return st, fmt.Errorf("read %d messages, want %d", st.messages, o.n)
	}
	if ordered && (st.misplaced > 0 || st.unordered > 0) {
		return st, fmt.Errorf("%d messages on a shard their key does not hash to, %d out of their key's order", st.misplaced, st.unordered)
	}
	return st, nil
}

// idOf reads the id of a kbench payload: {"id":N,...}.
func idOf(data []byte) (int, error) {
	s := string(data)
	rest, ok := strings.CutPrefix(s, `{"id":`)
	if !ok {
		return 0, errors.New("no id")
	}
	end := strings.IndexByte(rest, ',')
	if end < 0 {
		return 0, errors.New("no id")
	}
	return strconv.Atoi(rest[:end])
}

// drain reads the stream from the horizon with a fresh broker until n
// messages were handled. Its time runs from Connect; it also notes when the
// first GetRecords request went out (after the subscriber's start: leases
// created and taken) and when the first message was handled.
func drain(ctx context.Context, o options, stream string, batch int) (measure, error) {
	cfg, _ := kbench.Config()
	var firstRead atomic.Int64 // when the first GetRecords request went out
	cfg.HTTPClient = &http.Client{Transport: stampFirst{awshttp.NewBuildableClient().GetTransport(), "Kinesis_20131202.GetRecords", &firstRead}}
	// One instance on the broker's own in-memory lease store: no fleet to
	// wait for at the start.
	b := kgrt.NewBrokerFromConfig(cfg, kgrt.WithEndpoint(o.endpoint))
	var handled atomic.Int64
	all := make(chan struct{})
	var once sync.Once
	var first atomic.Int64
	_, err := kgrt.Subscribe(b, stream, func(_ context.Context, _ rawJSON, _ kgrt.Delivery) kgrt.Outcome {
		if first.Load() == 0 {
			first.CompareAndSwap(0, time.Now().UnixNano())
		}
		if handled.Add(1) == int64(o.n) {
			once.Do(func() { close(all) })
		}
		return kgrt.Ack()
	}, kgrt.Workers(8), kgrt.ByKey(), kgrt.StartAt(kgrt.Horizon()), kgrt.BatchSize(int32(batch)))
	if err != nil {
		return measure{}, err
	}
	goruntime.GC()
	if o.profile != "" {
		f, err := os.Create(o.profile + ".drain-" + stream + ".prof")
		if err != nil {
			return measure{}, err
		}
		_ = pprof.StartCPUProfile(f)
		defer func() { pprof.StopCPUProfile(); _ = f.Close() }()
	}
	clock := startClock(o)
	if err := b.Connect(ctx); err != nil {
		return measure{}, err
	}
	defer b.Shutdown(context.Background())
	select {
	case <-all:
	case <-time.After(5 * time.Minute):
		return measure{}, fmt.Errorf("handled %d of %d", handled.Load(), o.n)
	}
	m := clock.measure()
	m.first, m.firstRead = time.Unix(0, first.Load()).Sub(clock.t0), time.Unix(0, firstRead.Load()).Sub(clock.t0)
	return m, nil
}

// smallReads names the second drain of the aggregated stream, with BatchSize
// -aggbatch.
const smallReads = "drain-agg-small"

// stampFirst notes when the first request of one operation goes out.
type stampFirst struct {
	base   http.RoundTripper
	target string // X-Amz-Target
	at     *atomic.Int64
}

func (s stampFirst) RoundTrip(r *http.Request) (*http.Response, error) {
	if s.at.Load() == 0 && r.Header.Get("X-Amz-Target") == s.target {
		s.at.CompareAndSwap(0, time.Now().UnixNano())
	}
	return s.base.RoundTrip(r)
}

// drop deletes a stream once the round is done with it: kinesalite keeps
// every record in its memory, and a heap that grows with each mode would
// slow the modes measured later in the run (its collector marks every
// stored record).
func drop(ctx context.Context, o options, stream string) {
	cfg, _ := kbench.Config()
	if err := benchkit.DeleteStream(ctx, kbench.Client(cfg, o.endpoint), stream); err != nil {
		fail(fmt.Errorf("deleting %s: %w", stream, err))
	}
}

func fail(err error) {
	fmt.Fprintln(os.Stderr, "aggregate:", err)
	os.Exit(1)
}

// serverPID finds the process listening on the endpoint's loopback port
// (kinesalite under scripts/with-servers.sh), so that its CPU time can be
// reported beside the client's; 0 when it cannot be found (not Linux, or
// another user's process).
func serverPID(endpoint string) int {
	u, err := url.Parse(endpoint)
	if err != nil {
		return 0
	}
	port, err := strconv.Atoi(u.Port())
	if err != nil {
		return 0
	}
	inodes := map[string]bool{}
	for _, f := range []string{"/proc/net/tcp", "/proc/net/tcp6"} {
		data, _ := os.ReadFile(f)
		for _, line := range strings.Split(string(data), "\n")[1:] {
			fs := strings.Fields(line)
			if len(fs) < 10 || fs[3] != "0A" { // LISTEN
				continue
			}
			if _, p, ok := strings.Cut(fs[1], ":"); ok {
				if n, err := strconv.ParseInt(p, 16, 32); err == nil && int(n) == port {
					inodes["socket:["+fs[9]+"]"] = true
				}
			}
		}
	}
	procs, _ := os.ReadDir("/proc")
	for _, p := range procs {
		pid, err := strconv.Atoi(p.Name())
		if err != nil {
			continue
		}
		fds, _ := os.ReadDir("/proc/" + p.Name() + "/fd")
		for _, fd := range fds {
			if link, err := os.Readlink("/proc/" + p.Name() + "/fd/" + fd.Name()); err == nil && inodes[link] {
				return pid
			}
		}
	}
	return 0
}

// procCPU is the user plus system CPU time of process pid so far.
func procCPU(pid int) time.Duration {
	if pid == 0 {
		return 0
	}
	data, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0
	}
	s := string(data)
	fs := strings.Fields(s[strings.LastIndexByte(s, ')')+2:])
	if len(fs) < 13 {
		return 0
	}
	ut, _ := strconv.ParseInt(fs[11], 10, 64)
	st, _ := strconv.ParseInt(fs[12], 10, 64)
	return time.Duration(ut+st) * (time.Second / 100) // clock ticks: 100 Hz on Linux
}

// loadAverage is the machine's 1-, 5- and 15-minute load averages (Linux),
// printed with each round: on a shared machine they say how far to trust
// the round's rates.
func loadAverage() string {
	data, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "unknown"
	}
	fs := strings.Fields(string(data))
	if len(fs) < 3 {
		return "unknown"
	}
	return strings.Join(fs[:3], " ")
}
