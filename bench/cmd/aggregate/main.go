// Command aggregate measures KPL aggregation (issue 13) against kinesalite,
// side by side in one run: the same messages (about 200 bytes of JSON, keyed
// over many keys) published three ways, each into a fresh 4-shard stream
// with a fresh client:
//
//	bare   a bare loop of PutRecords batches of 500 from 4 goroutines, one
//	       record per message, each JSON-encoded (the baseline)
//	plain  runtime.Publisher, -callers goroutines, each owning a set of
//	       keys and publishing their messages in order
//	agg    the same publisher with aggregation on (WithAggregation; by
//	       default 50 KiB aggregates, no linger)
//
// then drains the plain and the aggregated streams with runtime.Subscribe
// (Workers(8), ByKey, a no-op handler, checkpoints on). Every stream is read
// back after it is published, untimed: the Kinesis records and PUT payload
// units (25 KiB of data plus key, rounded up per record) per million
// messages, and a check that every message is stored once, on the shard its
// own key hashes to, and each key's messages in publish order (ours only:
// the bare loop does not keep order). It reports messages per second and
// client CPU per message (getrusage around each mode), medians over the
// rounds, and the ratios agg/bare and agg/plain, drain agg/plain.
//
//	bash scripts/with-servers.sh sh -c 'cd bench && go run ./cmd/aggregate'
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
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/kinesis"
	"github.com/aws/aws-sdk-go-v2/service/kinesis/types"

	"github.com/kinesisgen/kinesisgen/bench/internal/kbench"
	"github.com/kinesisgen/kinesisgen/internal/bench/benchkit"
	kgrt "github.com/kinesisgen/kinesisgen/runtime"
	"github.com/kinesisgen/kinesisgen/runtime/kpl"
	"github.com/kinesisgen/kinesisgen/runtime/lease"
	"github.com/kinesisgen/kinesisgen/runtime/shard"
)

type options struct {
	endpoint string
	n        int
	keys     int
	shards   int
	size     int
	callers  int
	runs     int
	aggBytes int
	linger   time.Duration
	profile  string
	modes    []string
}

func main() {
	var o options
	flag.StringVar(&o.endpoint, "endpoint", os.Getenv("KINESIS_TEST_ENDPOINT"), "Kinesis endpoint URL (default $KINESIS_TEST_ENDPOINT)")
	flag.IntVar(&o.n, "n", 100_000, "messages per mode")
	flag.IntVar(&o.keys, "keys", 10_000, "distinct partition keys")
	flag.IntVar(&o.shards, "shards", 4, "shards per stream")
	flag.IntVar(&o.size, "size", 200, "bytes per message (JSON)")
	flag.IntVar(&o.callers, "callers", 2048, "publishing goroutines for plain and agg")
	flag.IntVar(&o.runs, "runs", 3, "rounds")
	flag.IntVar(&o.aggBytes, "aggbytes", 0, "Aggregation.MaxBytes for agg (0: the default)")
	flag.DurationVar(&o.linger, "linger", 0, "Aggregation.Linger for agg")
	modes := flag.String("modes", "bare,plain,agg", "publishing modes to run (the drains need plain and agg)")
	flag.StringVar(&o.profile, "cpuprofile", "", "write a CPU profile of each mode of the last round to this prefix plus .MODE.prof (.drain-STREAM.prof for the drains)")
	flag.Parse()
	o.modes = strings.Split(*modes, ",")
	if o.endpoint == "" {
		fmt.Fprintln(os.Stderr, "aggregate: no endpoint: pass -endpoint or run under scripts/with-servers.sh")
		os.Exit(2)
	}
	fmt.Printf("aggregate: %d messages of %d bytes over %d keys, %d shards, %d callers, GOMAXPROCS=%d\n",
		o.n, len(kbench.Payload(0, o.size)), o.keys, o.shards, o.callers, goruntime.GOMAXPROCS(0))
	type series struct{ rate, cpu []float64 }
	res := map[string]*series{}
	add := func(mode string, m measure) {
		s := res[mode]
		if s == nil {
			s = &series{}
			res[mode] = s
		}
		s.rate = append(s.rate, float64(o.n)/m.wall.Seconds())
		s.cpu = append(s.cpu, float64(m.cpu.Microseconds())/float64(o.n))
		fmt.Printf("  %-11s %9.0f msg/s  %6.2f µs CPU/msg\n", mode, float64(o.n)/m.wall.Seconds(), float64(m.cpu.Microseconds())/float64(o.n))
	}
	ctx := context.Background()
	var stats map[string]storeStats
	for round := range o.runs {
		fmt.Printf("round %d\n", round+1)
		stats = map[string]storeStats{}
		streams := map[string]string{}
		for _, mode := range o.modes {
			m, stream, err := publish(ctx, o, mode)
			if err != nil {
				fail(fmt.Errorf("%s: %w", mode, err))
			}
			add(mode, m)
			st, err := check(ctx, o, stream, mode != "bare")
			if err != nil {
				fail(fmt.Errorf("%s: check: %w", mode, err))
			}
			stats[mode] = st
			streams[mode] = stream
		}
		for _, mode := range []string{"plain", "agg"} {
			if streams["plain"] == "" || streams["agg"] == "" {
				break
			}
			m, err := drain(ctx, o, streams[mode])
			if err != nil {
				fail(fmt.Errorf("drain %s: %w", mode, err))
			}
			add("drain-"+mode, m)
		}
	}
	fmt.Println("\nmedians")
	for _, mode := range []string{"bare", "plain", "agg", "drain-plain", "drain-agg"} {
		s := res[mode]
		if s == nil {
			continue
		}
		fmt.Printf("  %-11s %9.0f msg/s  %6.2f µs CPU/msg   (rounds: %s msg/s)\n", mode, kbench.Median(s.rate), kbench.Median(s.cpu), kbench.Fmt(s.rate, 0))
	}
	ratio := func(a, b string, f func(*series) []float64) float64 {
		if res[a] == nil || res[b] == nil {
			return 0
		}
		return kbench.Median(f(res[a])) / kbench.Median(f(res[b]))
	}
	rate := func(s *series) []float64 { return s.rate }
	cpu := func(s *series) []float64 { return s.cpu }
	fmt.Printf("\nratios\n  agg/bare msg/s %.1f, CPU/msg %.2f\n  agg/plain msg/s %.1f, CPU/msg %.2f\n  drain agg/plain msg/s %.1f, CPU/msg %.2f\n",
		ratio("agg", "bare", rate), ratio("agg", "bare", cpu), ratio("agg", "plain", rate), ratio("agg", "plain", cpu),
		ratio("drain-agg", "drain-plain", rate), ratio("drain-agg", "drain-plain", cpu))
	fmt.Println("\nstored (last round), per 1M messages")
	for _, mode := range o.modes {
		st := stats[mode]
		per := 1e6 / float64(st.messages)
		fmt.Printf("  %-5s %9.0f records  %9.0f PUT payload units  %6.1f bytes/msg  misplaced %d  out of order %d\n",
			mode, float64(st.records)*per, float64(st.units)*per, float64(st.bytes)/float64(st.messages), st.misplaced, st.unordered)
	}
}

type measure struct{ wall, cpu time.Duration }

func key(i, keys int) string { return "customer-" + strconv.Itoa(i%keys) }

// publish publishes messages 0..n-1 into a fresh stream one way.
func publish(ctx context.Context, o options, mode string) (measure, string, error) {
	cfg, _ := kbench.Config()
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
	if mode == "bare" {
		// Each event JSON-encoded, as an application must (and as the
		// runtime's codec does for the other modes).
		t0, c0 := time.Now(), benchkit.CPUTime()
		err := benchkit.PutBatches(ctx, client, stream, o.n, 4, func(i int) ([]byte, string) {
			data, _ := json.Marshal(&events[i])
			return data, key(i, o.keys)
		})
		return measure{time.Since(t0), benchkit.CPUTime() - c0}, stream, err
	}
	b := kgrt.NewBrokerFromConfig(cfg, kgrt.WithEndpoint(o.endpoint))
	if err := b.Connect(ctx); err != nil {
		return measure{}, "", err
	}
	defer b.Shutdown(context.Background())
	var opts []kgrt.PublishOption
	if mode == "agg" {
		opts = append(opts, kgrt.WithAggregation(kgrt.Aggregation{MaxBytes: o.aggBytes, Linger: o.linger}))
	}
	p := kgrt.NewPublisher[*kbench.Event](b, kgrt.PublisherSpec{Stream: stream}, opts...)
	// Caller c owns the keys k with k%callers == c and publishes their
	// messages in order, one at a time, so each key is published in order.
	mine := make([][]int, o.callers)
	for i := range o.n {
		c := (i % o.keys) % o.callers
		mine[c] = append(mine[c], i)
	}
	if o.profile != "" {
		f, err := os.Create(o.profile + "." + mode + ".prof")
		if err != nil {
			return measure{}, "", err
		}
		_ = pprof.StartCPUProfile(f)
		defer func() { pprof.StopCPUProfile(); _ = f.Close() }()
	}
	t0, c0 := time.Now(), benchkit.CPUTime()
	var next atomic.Int64
	err = benchkit.Parallel(o.callers, func() error {
		for _, i := range mine[next.Add(1)-1] {
			if err := p.Message(&events[i]).PartitionKey(key(i, o.keys)).Publish(ctx); err != nil {
				return err
			}
		}
		return nil
	})
	return measure{time.Since(t0), benchkit.CPUTime() - c0}, stream, err
}

// rawJSON is a message that keeps its JSON as it is: the drains decode
// nothing.
type rawJSON []byte

func (r rawJSON) MarshalJSON() ([]byte, error) { return r, nil }

func (r *rawJSON) UnmarshalJSON(b []byte) error { *r = append((*r)[:0], b...); return nil }

type storeStats struct {
	messages, records, units, bytes int
	misplaced, unordered            int
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
				st.units += (size + 25<<10 - 1) / (25 << 10)
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
					if s.PartitionKey != key(id, o.keys) {
						return st, fmt.Errorf("message %d under key %q", id, s.PartitionKey)
					}
					if !info.Range.Contains(shard.HashKeyOf(s.PartitionKey)) {
						st.misplaced++
					}
					if prev, ok := last[s.PartitionKey]; ordered && ok && prev > id {
						st.unordered++
					}
					last[s.PartitionKey] = id
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
// messages were handled.
func drain(ctx context.Context, o options, stream string) (measure, error) {
	cfg, _ := kbench.Config()
	b := kgrt.NewBrokerFromConfig(cfg, kgrt.WithEndpoint(o.endpoint), kgrt.WithLeaseStore(lease.NewMemory()))
	var handled atomic.Int64
	all := make(chan struct{})
	var once sync.Once
	_, err := kgrt.Subscribe(b, stream, func(_ context.Context, _ rawJSON, _ kgrt.Delivery) kgrt.Outcome {
		if handled.Add(1) == int64(o.n) {
			once.Do(func() { close(all) })
		}
		return kgrt.Ack()
	}, kgrt.Workers(8), kgrt.ByKey(), kgrt.StartAt(kgrt.Horizon()), kgrt.BatchSize(10000))
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
	t0, c0 := time.Now(), benchkit.CPUTime()
	if err := b.Connect(ctx); err != nil {
		return measure{}, err
	}
	defer b.Shutdown(context.Background())
	select {
	case <-all:
	case <-time.After(5 * time.Minute):
		return measure{}, fmt.Errorf("handled %d of %d", handled.Load(), o.n)
	}
	return measure{time.Since(t0), benchkit.CPUTime() - c0}, nil
}

func fail(err error) {
	fmt.Fprintln(os.Stderr, "aggregate:", err)
	os.Exit(1)
}
