// Command publishbench measures publishing to a Kinesis endpoint (kinesalite
// under scripts/with-servers.sh) three ways, side by side in one run:
//
//	ours  runtime.Publisher, many concurrent callers, batched by the runtime
//	bulk  runtime.PublishAll of 500 messages from 4 goroutines
//	(a)   one PutRecord per message from 16 goroutines
//	(b)   a bare loop of PutRecords batches of 500 from 4 goroutines
//
// It reports records per second and the client's CPU time per record
// (user+sys of this process, from getrusage), and the ratios of ours to (b).
//
//	bash scripts/with-servers.sh go run ./internal/bench/publishbench -n 100000
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	goruntime "runtime"
	"runtime/pprof"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	awsconfig "github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/kinesis"

	"github.com/kinesisgen/kinesisgen/internal/bench/benchkit"
	kgrt "github.com/kinesisgen/kinesisgen/runtime"
	"github.com/kinesisgen/kinesisgen/runtime/kinesisapi"
)

// event is the ~200-byte message every mode publishes.
type event struct {
	ID      int    `json:"id"`
	Kind    string `json:"kind"`
	Account string `json:"account"`
	Body    string `json:"body"`
}

func main() {
	endpoint := flag.String("endpoint", os.Getenv("KINESIS_TEST_ENDPOINT"), "Kinesis endpoint URL (default $KINESIS_TEST_ENDPOINT)")
	n := flag.Int("n", 100_000, "records per mode")
	shards := flag.Int("shards", 4, "shards per stream")
	callers := flag.Int("callers", 2048, "concurrent publishing goroutines for ours")
	modes := flag.String("modes", "a,b,bj,ours,bulk,b,bj,ours,bulk", "modes to run, in order; a mode named twice is averaged")
	inflight := flag.Int("inflight", 0, "PutRecords calls in flight per stream for ours (0: the runtime's default)")
	linger := flag.Duration("linger", 0, "linger of a partial batch for ours (0: the runtime's default)")
	cpuprofile := flag.String("cpuprofile", "", "write a CPU profile of each mode to this file name plus .MODE")
	memprofile := flag.String("memprofile", "", "write an allocation profile of the whole run to this file")
	flag.Parse()
	if *endpoint == "" {
		fmt.Fprintln(os.Stderr, "publishbench: no endpoint: pass -endpoint or run under scripts/with-servers.sh")
		os.Exit(2)
	}
	if *memprofile != "" {
		goruntime.MemProfileRate = 4096
		defer func() {
			f, err := os.Create(*memprofile)
			if err != nil {
				fail(err)
			}
			_ = pprof.Lookup("allocs").WriteTo(f, 0)
			_ = f.Close()
		}()
	}
	ctx := context.Background()
	client, err := newClient(ctx, *endpoint)
	if err != nil {
		fail(err)
	}
	payload := sample()
	fmt.Printf("publishbench: %d records of %d bytes per mode, %d shards, GOMAXPROCS=%s\n",
		*n, len(payload), *shards, strconv.Itoa(goruntime.GOMAXPROCS(0)))

	results := map[string]result{}
	for _, mode := range strings.Split(*modes, ",") {
		stream, err := benchkit.CreateStream(ctx, client, "bench", int32(*shards))
		if err != nil {
			fail(err)
		}
		if *cpuprofile != "" {
			f, err := os.Create(*cpuprofile + "." + mode)
			if err != nil {
				fail(err)
			}
			_ = pprof.StartCPUProfile(f)
		}
		var r result
		switch mode {
		case "a":
			r = measure(*n, func() error { return perMessage(ctx, client, stream, *n, 16, payload) })
		case "b":
			r = measure(*n, func() error {
				return bareBatches(ctx, client, stream, *n, 4, func(int) []byte { return payload })
			})
		case "bj":
			// (b) as an application writes it: every event encoded on its own.
			r = measure(*n, func() error {
				return bareBatches(ctx, client, stream, *n, 4, func(i int) []byte {
					data, err := kgrt.JSON.Marshal(makeEvent(i))
					if err != nil {
						panic(err)
					}
					return data
				})
			})
		case "ours":
			counted := &countingClient{Client: client}
			r = measure(*n, func() error {
				return ours(ctx, counted, stream, *n, *callers, kgrt.WithPublishConcurrency(*inflight), kgrt.WithPublishLinger(*linger))
			})
			r.note = counted.note()
		case "bulk":
			counted := &countingClient{Client: client}
			r = measure(*n, func() error {
				return bulk(ctx, counted, stream, *n, 4, kgrt.WithPublishConcurrency(*inflight), kgrt.WithPublishLinger(*linger))
			})
			r.note = counted.note()
		default:
			fail(fmt.Errorf("unknown mode %q", mode))
		}
		if *cpuprofile != "" {
			pprof.StopCPUProfile()
		}
		if r.err != nil {
			fail(fmt.Errorf("mode %s: %w", mode, r.err))
		}
		fmt.Printf("%-5s %9.0f records/s  %7.2f µs CPU/record  (%v wall, %d B and %.2f GCs per 1k records%s)\n",
			mode, r.rate(), r.cpuPerRecord(), r.wall.Round(time.Millisecond), r.alloc/uint64(r.n), float64(r.gcs)*1000/float64(r.n), r.note)
		results[mode] = results[mode].add(r) // a mode named twice is averaged
	}
	if o, ok := results["bulk"]; ok {
		if b, ok := results["b"]; ok {
			fmt.Printf("bulk/(b): throughput %.2f, CPU per record %.2f\n", o.rate()/b.rate(), o.cpuPerRecord()/b.cpuPerRecord())
		}
	}
	if o, ok := results["ours"]; ok {
		if b, ok := results["b"]; ok {
			fmt.Printf("ours/(b): throughput %.2f (goal ≥ 0.90), CPU per record %.2f (goal ≤ 1.50)\n", o.rate()/b.rate(), o.cpuPerRecord()/b.cpuPerRecord())
		}
		if bj, ok := results["bj"]; ok {
			fmt.Printf("ours/(b with per-record JSON): throughput %.2f, CPU per record %.2f\n", o.rate()/bj.rate(), o.cpuPerRecord()/bj.cpuPerRecord())
		}
		if a, ok := results["a"]; ok {
			fmt.Printf("ours/(a): throughput %.2f, CPU per record %.2f\n", o.rate()/a.rate(), o.cpuPerRecord()/a.cpuPerRecord())
		}
	}
	t := benchkit.Table{Title: fmt.Sprintf("Publishing %d records to kinesalite; peer: (b), bare PutRecords of 500 from 4 goroutines", *n)}
	b, okb := results["b"]
	row := func(mode, label string, goalRate, goalCPU float64) {
		o, ok := results[mode]
		if !ok || !okb {
			return
		}
		r, c := o.rate()/b.rate(), o.cpuPerRecord()/b.cpuPerRecord()
		rr := benchkit.Row{Measure: label + " records/s", Ours: fmt.Sprintf("%.0f", o.rate()), Peer: fmt.Sprintf("%.0f", b.rate()), Ratio: r}
		cr := benchkit.Row{Measure: label + " client CPU µs/record", Ours: fmt.Sprintf("%.2f", o.cpuPerRecord()), Peer: fmt.Sprintf("%.2f", b.cpuPerRecord()), Ratio: c}
		if goalRate > 0 {
			rr.Goal, rr.Met = fmt.Sprintf("≥ %.2f", goalRate), benchkit.Verdict(r >= goalRate)
			cr.Goal, cr.Met = fmt.Sprintf("≤ %.2f", goalCPU), benchkit.Verdict(c <= goalCPU)
		}
		t.Add(rr)
		t.Add(cr)
	}
	row("ours", "Publish, many goroutines,", 0.9, 1.5)
	row("bulk", "PublishAll of 500, 4 goroutines,", 0, 0)
	row("bj", "(bj) bare with per-record JSON,", 0, 0)
	row("a", "(a) PutRecord per message,", 0, 0)
	t.Note = fmt.Sprintf("Load average %s at the end; kinesalite is the limit on rate for (b), Publish and PublishAll alike.", benchkit.LoadAverage())
	t.Print()
}

type result struct {
	n     int
	wall  time.Duration
	cpu   time.Duration
	alloc uint64 // bytes allocated
	gcs   uint32 // garbage collections
	err   error
	note  string
}

func (r result) add(o result) result {
	return result{n: r.n + o.n, wall: r.wall + o.wall, cpu: r.cpu + o.cpu, alloc: r.alloc + o.alloc, gcs: r.gcs + o.gcs}
}

// countingClient counts the PutRecords calls the runtime makes.
type countingClient struct {
	*kinesis.Client
	calls, records atomic.Int64
}

func (c *countingClient) PutRecords(ctx context.Context, in *kinesis.PutRecordsInput, opts ...func(*kinesis.Options)) (*kinesis.PutRecordsOutput, error) {
	c.calls.Add(1)
	c.records.Add(int64(len(in.Records)))
	return c.Client.PutRecords(ctx, in, opts...)
}

// note is the result's suffix for a mode that published through c.
func (c *countingClient) note() string {
	return fmt.Sprintf(", %d PutRecords calls, %.0f records per call", c.calls.Load(), float64(c.records.Load())/float64(c.calls.Load()))
}

func (r result) rate() float64         { return float64(r.n) / r.wall.Seconds() }
func (r result) cpuPerRecord() float64 { return float64(r.cpu.Microseconds()) / float64(r.n) }

func measure(n int, run func() error) result {
	goruntime.GC()
	var m0, m1 goruntime.MemStats
	goruntime.ReadMemStats(&m0)
	before := benchkit.CPUTime()
	start := time.Now()
	err := run()
	r := result{n: n, wall: time.Since(start), cpu: benchkit.CPUTime() - before, err: err}
	goruntime.ReadMemStats(&m1)
	r.alloc, r.gcs = m1.TotalAlloc-m0.TotalAlloc, m1.NumGC-m0.NumGC
	return r
}

// connect connects a broker on client and returns a publisher of stream and
// the broker's shutdown. The broker gets the same SDK client as (a) and (b),
// built as Connect builds it.
func connect(ctx context.Context, client kinesisapi.API, stream string, opts []kgrt.Option) (kgrt.Publisher[event], func(), error) {
	b := kgrt.NewBroker(append(opts, kgrt.WithKinesisClient(client))...)
	if err := b.Connect(ctx); err != nil {
		return nil, nil, err
	}
	return kgrt.NewPublisher[event](b, kgrt.PublisherSpec{Stream: stream}), func() { _ = b.Shutdown(ctx) }, nil
}

// ours publishes through runtime.Publisher from many callers, each waiting
// for its own result, as a service's handlers would.
func ours(ctx context.Context, client kinesisapi.API, stream string, n, callers int, opts ...kgrt.Option) error {
	p, shutdown, err := connect(ctx, client, stream, opts)
	if err != nil {
		return err
	}
	defer shutdown()
	var next atomic.Int64
	return benchkit.Parallel(callers, func() error {
		for {
			i := int(next.Add(1))
			if i > n {
				return nil
			}
			if err := p.Publish(ctx, makeEvent(i)); err != nil {
				return err
			}
		}
	})
}

// bulk publishes through runtime.PublishAll: g goroutines, 500 messages
// each time, as (b) sends them.
func bulk(ctx context.Context, client kinesisapi.API, stream string, n, g int, opts ...kgrt.Option) error {
	p, shutdown, err := connect(ctx, client, stream, opts)
	if err != nil {
		return err
	}
	defer shutdown()
	var next atomic.Int64
	return benchkit.Parallel(g, func() error {
		msgs := make([]event, 0, 500)
		for {
			start := int(next.Add(500)) - 500
			if start >= n {
				return nil
			}
			msgs = msgs[:0]
			for i := start; i < min(start+500, n); i++ {
				msgs = append(msgs, makeEvent(i))
			}
			if err := kgrt.PublishAll(ctx, p, msgs); err != nil {
				return err
			}
		}
	})
}

// perMessage is (a): one PutRecord per message from g goroutines.
func perMessage(ctx context.Context, client *kinesis.Client, stream string, n, g int, payload []byte) error {
	var next atomic.Int64
	return benchkit.Parallel(g, func() error {
		for {
			i := next.Add(1)
			if i > int64(n) {
				return nil
			}
			key := strconv.FormatInt(i, 36)
			if _, err := client.PutRecord(ctx, &kinesis.PutRecordInput{StreamName: &stream, PartitionKey: &key, Data: payload}); err != nil {
				return err
			}
		}
	})
}

// bareBatches is (b): PutRecords of 500 from g goroutines, resending the
// entries a call refused; payload gives record i's data.
func bareBatches(ctx context.Context, client *kinesis.Client, stream string, n, g int, payload func(i int) []byte) error {
	return benchkit.PutBatches(ctx, client, stream, n, g, func(i int) ([]byte, string) {
		return payload(i), strconv.FormatInt(int64(i), 36)
	})
}

func makeEvent(i int) event {
	return event{ID: i, Kind: "order.created", Account: "acct-0042", Body: body}
}

var body = strings.Repeat("lorem ipsum dolor sit amet ", 5)[:130]

// sample is the JSON of one event: the payload (a) and (b) send.
func sample() []byte {
	b, err := kgrt.JSON.Marshal(makeEvent(123456))
	if err != nil {
		panic(err)
	}
	return b
}

func newClient(ctx context.Context, endpoint string) (*kinesis.Client, error) {
	cfg, err := awsconfig.LoadDefaultConfig(ctx, awsconfig.WithRegion("us-east-1"),
		awsconfig.WithCredentialsProvider(credentials.NewStaticCredentialsProvider("test", "test", "")))
	if err != nil {
		return nil, err
	}
	return kinesis.NewFromConfig(cfg, func(o *kinesis.Options) { o.BaseEndpoint = aws.String(endpoint) }), nil
}

func fail(err error) {
	fmt.Fprintln(os.Stderr, "publishbench:", err)
	os.Exit(1)
}
