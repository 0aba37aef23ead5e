// Command fanout compares enhanced fan-out with polling, side by side in one
// run, on the HTTP/2 test server (runtime/kinesistest's NewHTTPServer: TLS,
// HTTP/2, SubscribeToShard as a real event stream), which it starts in a
// child process of its own so that the client's CPU is measured apart from
// the server's:
//
//   - idle: a 4-shard stream with no traffic for -idle: GetRecords calls per
//     shard per second and client CPU per second; then -publishes sparse
//     publishes (random gaps): publish → handler latency p50 and p99. Modes:
//     fanout (runtime.FanOut), poll-1s (the default poll interval) and
//     poll-200ms (the floor).
//   - drain: -records records of -size bytes on 4 shards, drained from the
//     horizon by fan-out and by polling (the default interval; BatchSize
//     10000). Start-up: from Connect to the first read sent (GetRecords or
//     SubscribeToShard; fan-out registers its consumer first). Steady
//     state: from there to the last record handled, records per second and
//     client CPU per record over that span (user+sys of this process, from
//     getrusage).
//
// Every consumer gets a fresh broker, HTTP client, lease store and (fan-out)
// stream consumer; each mode reads a stream of its own. Rounds rotate the
// order of the modes; medians over -runs rounds are reported, with the
// ratios fanout/poll.
//
//	cd bench && go run ./cmd/fanout
package main

import (
	"bufio"
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"math/rand/v2"
	"net/http"
	"os"
	"os/exec"
	"runtime/pprof"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/kinesis"

	"github.com/kinesisgen/kinesisgen/bench/internal/kbench"
	"github.com/kinesisgen/kinesisgen/internal/bench/benchkit"
	kgrt "github.com/kinesisgen/kinesisgen/runtime"
	"github.com/kinesisgen/kinesisgen/runtime/kinesistest"
	"github.com/kinesisgen/kinesisgen/runtime/lease"
)

type options struct {
	shards    int
	idle      time.Duration
	runs      int
	publishes int
	gap       time.Duration
	size      int
	records   int
	skip      string // "idle" or "drain": leave that part out
	profile   string // prefix of the drains' CPU profiles
}

func main() {
	serve := flag.Bool("serve", false, "run the HTTP/2 test server and print its URL (the child process)")
	var o options
	flag.IntVar(&o.shards, "shards", 4, "shards of every stream")
	flag.DurationVar(&o.idle, "idle", 10*time.Second, "idle window")
	flag.IntVar(&o.runs, "runs", 3, "rounds; medians are reported")
	flag.IntVar(&o.publishes, "publishes", 200, "sparse publishes for the latency figure")
	flag.DurationVar(&o.gap, "gap", 50*time.Millisecond, "mean gap between sparse publishes (uniform in 0..2×gap)")
	flag.IntVar(&o.size, "size", 200, "bytes per record (JSON)")
	flag.IntVar(&o.records, "records", 100_000, "records per drain")
	flag.StringVar(&o.skip, "skip", "", "idle or drain: leave that part out")
	flag.StringVar(&o.profile, "cpuprofile", "", "write each drain's CPU profile of the last round to PREFIX.MODE.prof")
	flag.Parse()
	if *serve {
		runServer()
		return
	}
	if err := run(o); err != nil {
		fmt.Fprintln(os.Stderr, "fanout:", err)
		os.Exit(1)
	}
}

// runServer serves a fresh in-process Kinesis over HTTP/2 until stdin
// closes (the parent exits).
func runServer() {
	h := kinesistest.NewHTTPServer(kinesistest.New())
	defer h.Close()
	fmt.Println(h.URL())
	_, _ = bufio.NewReader(os.Stdin).ReadString(0)
}

// startServer starts this command as the server's child process.
func startServer() (url string, stop func(), err error) {
	exe, err := os.Executable()
	if err != nil {
		return "", nil, err
	}
	cmd := exec.Command(exe, "-serve")
	cmd.Stderr = os.Stderr
	in, err := cmd.StdinPipe()
	if err != nil {
		return "", nil, err
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		return "", nil, err
	}
	if err := cmd.Start(); err != nil {
		return "", nil, err
	}
	line, err := bufio.NewReader(out).ReadString('\n')
	if err != nil {
		_ = cmd.Process.Kill()
		return "", nil, fmt.Errorf("server: %w", err)
	}
	return strings.TrimSpace(line), func() { _ = in.Close(); _ = cmd.Wait() }, nil
}

// counter counts GetRecords calls through one HTTP client and stamps the
// first read sent (GetRecords or SubscribeToShard), where a drain's start-up
// ends.
type counter struct {
	getRecords atomic.Int64
	once       sync.Once
	firstAt    time.Time
	firstCPU   time.Duration
}

type countingDoer struct {
	next *http.Client
	c    *counter
}

func (d countingDoer) Do(r *http.Request) (*http.Response, error) {
	target := r.Header.Get("X-Amz-Target")
	if strings.HasSuffix(target, ".GetRecords") || strings.HasSuffix(target, ".SubscribeToShard") {
		d.c.once.Do(func() { d.c.firstAt, d.c.firstCPU = time.Now(), benchkit.CPUTime() })
	}
	if strings.HasSuffix(target, ".GetRecords") {
		d.c.getRecords.Add(1)
	}
	return d.next.Do(r)
}

// config is a fresh AWS configuration for the test server: its own HTTP/2
// client (the server's certificate is self-signed, on loopback) that counts
// GetRecords calls.
func config() (aws.Config, *counter) {
	c := &counter{}
	t := &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}, ForceAttemptHTTP2: true, MaxIdleConnsPerHost: 16}
	return aws.Config{
		Region:      "us-east-1",
		Credentials: credentials.NewStaticCredentialsProvider("x", "x", ""),
		HTTPClient:  countingDoer{next: &http.Client{Transport: t}, c: c},
	}, c
}

func client(url string) *kinesis.Client {
	cfg, _ := config()
	return kinesis.NewFromConfig(cfg, func(o *kinesis.Options) { o.BaseEndpoint = aws.String(url) })
}

var streamSeq atomic.Int64

func createStream(ctx context.Context, c *kinesis.Client, prefix string, shards int32) (string, error) {
	name := fmt.Sprintf("%s-%d-%d", prefix, time.Now().UnixNano()%1e9, streamSeq.Add(1))
	if _, err := c.CreateStream(ctx, &kinesis.CreateStreamInput{StreamName: &name, ShardCount: &shards}); err != nil {
		return "", err
	}
	for range 500 {
		out, err := c.DescribeStreamSummary(ctx, &kinesis.DescribeStreamSummaryInput{StreamName: &name})
		if err == nil && out.StreamDescriptionSummary.StreamStatus == "ACTIVE" {
			return name, nil
		}
		time.Sleep(10 * time.Millisecond)
	}
	return "", errors.New("stream never became active")
}

// mode is one way of subscribing.
type mode struct {
	name string
	opts func(consumer string) []kgrt.SubscribeOption
}

var (
	fanout = mode{"fanout", func(c string) []kgrt.SubscribeOption {
		return []kgrt.SubscribeOption{kgrt.FanOut(c), kgrt.CreateIfMissing(1)}
	}}
	poll1s  = mode{"poll-1s", func(string) []kgrt.SubscribeOption { return []kgrt.SubscribeOption{kgrt.BatchSize(10000)} }}
	poll200 = mode{"poll-200ms", func(string) []kgrt.SubscribeOption {
		return []kgrt.SubscribeOption{kgrt.BatchSize(10000), kgrt.PollInterval(kgrt.MinPollInterval)}
	}}
)

func run(o options) error {
	url, stop, err := startServer()
	if err != nil {
		return err
	}
	defer stop()
	ctx := context.Background()
	admin := client(url)
	fmt.Printf("fanout: HTTP/2 test server in a child process at %s; %d shards; idle %v then %d sparse publishes (mean gap %v); drain %d records of %d bytes; %d rounds\n",
		url, o.shards, o.idle, o.publishes, o.gap, o.records, o.size, o.runs)

	idleModes := []mode{fanout, poll1s, poll200}
	drainModes := []mode{fanout, poll1s}
	type figures struct{ calls, cpu, p50, p99, c50, c99, rate, cpuRec, startup []float64 }
	load0 := benchkit.LoadAverage()
	fig := map[string]*figures{}
	for _, m := range idleModes {
		fig[m.name] = &figures{}
	}
	for round := 1; round <= o.runs; round++ {
		if o.skip != "idle" {
			for i := range idleModes {
				m := idleModes[(i+round-1)%len(idleModes)]
				stream, err := createStream(ctx, admin, "idle", int32(o.shards))
				if err != nil {
					return err
				}
				calls, cpu, lat, fromCall, err := idle(ctx, o, url, stream, m, fmt.Sprintf("idle-%d", round))
				if err != nil {
					return fmt.Errorf("round %d, %s: %w", round, m.name, err)
				}
				f := fig[m.name]
				f.calls, f.cpu = append(f.calls, calls), append(f.cpu, cpu)
				p50, p99 := kbench.Percentile(lat, 50), kbench.Percentile(lat, 99)
				f.p50, f.p99 = append(f.p50, ms(p50)), append(f.p99, ms(p99))
				c50, c99 := kbench.Percentile(fromCall, 50), kbench.Percentile(fromCall, 99)
				f.c50, f.c99 = append(f.c50, ms(c50)), append(f.c99, ms(c99))
				fmt.Printf("round %d idle  %-10s %6.2f GetRecords/shard/s %6.2f ms CPU/s; latency p50 %v p99 %v max %v; from the call p50 %v p99 %v\n", round, m.name, calls, cpu,
					p50.Round(time.Millisecond), p99.Round(time.Millisecond), kbench.Percentile(lat, 100).Round(time.Millisecond), c50.Round(time.Millisecond), c99.Round(time.Millisecond))
			}
		}
		if o.skip != "drain" {
			for i := range drainModes {
				m := drainModes[(i+round-1)%len(drainModes)]
				stream, err := createStream(ctx, admin, "drain", int32(o.shards))
				if err != nil {
					return err
				}
				if err := kbench.Fill(ctx, admin, stream, o.records, o.size); err != nil {
					return err
				}
				prof := ""
				if o.profile != "" && round == o.runs {
					prof = o.profile + "." + m.name + ".prof"
				}
				rate, cpuRec, startup, err := drain(ctx, o, url, stream, m, fmt.Sprintf("drain-%d", round), prof)
				if err != nil {
					return fmt.Errorf("round %d, drain %s: %w", round, m.name, err)
				}
				f := fig[m.name]
				f.rate, f.cpuRec = append(f.rate, rate), append(f.cpuRec, cpuRec)
				f.startup = append(f.startup, ms(startup))
				fmt.Printf("round %d drain %-10s %8.0f records/s %6.2f µs CPU/record, start-up %v\n", round, m.name, rate, cpuRec, startup.Round(time.Millisecond))
			}
		}
	}
	fmt.Println("medians:")
	med := kbench.Median
	t := benchkit.Table{Title: fmt.Sprintf("Enhanced fan-out against polling (1 s), HTTP/2 test server, %d shards (medians of %d rounds)", o.shards, o.runs)}
	if o.skip != "idle" {
		for _, m := range idleModes {
			f := fig[m.name]
			fmt.Printf("  idle  %-10s %6.2f GetRecords/shard/s %6.2f ms CPU/s; latency p50 %.1f ms p99 %.1f ms; from the call p50 %.1f ms p99 %.1f ms\n", m.name, med(f.calls), med(f.cpu), med(f.p50), med(f.p99), med(f.c50), med(f.c99))
		}
		fo, po := fig[fanout.name], fig[poll1s.name]
		t.Add(benchkit.Row{Measure: "publish → handler p50, ms", Ours: fmt.Sprintf("%.1f", med(fo.p50)), Peer: fmt.Sprintf("%.1f", med(po.p50)), Goal: "fan-out < 50 ms", Met: benchkit.Verdict(med(fo.p50) < 50)})
		t.Add(benchkit.Row{Measure: "publish → handler p99, ms", Ours: fmt.Sprintf("%.1f", med(fo.p99)), Peer: fmt.Sprintf("%.1f", med(po.p99)), Goal: "fan-out < 200 ms", Met: benchkit.Verdict(med(fo.p99) < 200)})
		t.Add(benchkit.Row{Measure: "idle GetRecords per shard per second", Ours: fmt.Sprintf("%.2f", med(fo.calls)), Peer: fmt.Sprintf("%.2f", med(po.calls)), Goal: "fan-out 0", Met: benchkit.Verdict(med(fo.calls) == 0)})
		t.Add(benchkit.Row{Measure: "idle client CPU ms/s", Ours: fmt.Sprintf("%.1f", med(fo.cpu)), Peer: fmt.Sprintf("%.1f", med(po.cpu)), Ratio: med(fo.cpu) / med(po.cpu)})
	}
	if o.skip != "drain" {
		for _, m := range drainModes {
			f := fig[m.name]
			fmt.Printf("  drain %-10s %8.0f records/s %6.2f µs CPU/record, start-up %.0f ms\n", m.name, med(f.rate), med(f.cpuRec), med(f.startup))
		}
		fo, po := fig[fanout.name], fig[poll1s.name]
		rate, cpu := ratios(fo.rate, po.rate), ratios(fo.cpuRec, po.cpuRec)
		fmt.Printf("fanout/poll per round: records/s %s, CPU/record %s\n", kbench.Fmt(rate, 2), kbench.Fmt(cpu, 2))
		t.Add(benchkit.Row{Measure: "steady drain records/s", Ours: fmt.Sprintf("%.0f", med(fo.rate)), Peer: fmt.Sprintf("%.0f", med(po.rate)), Ratio: med(rate), Goal: "≥ 1", Met: benchkit.Verdict(med(rate) >= 1)})
		t.Add(benchkit.Row{Measure: "steady drain client CPU µs/record", Ours: fmt.Sprintf("%.2f", med(fo.cpuRec)), Peer: fmt.Sprintf("%.2f", med(po.cpuRec)), Ratio: med(cpu), Goal: "≤ 1.2", Met: benchkit.Verdict(med(cpu) <= 1.2)})
		t.Add(benchkit.Row{Measure: "drain start-up ms (Connect → first read)", Ours: fmt.Sprintf("%.0f", med(fo.startup)), Peer: fmt.Sprintf("%.0f", med(po.startup)),
			Goal: "fan-out − poll ≤ 200 ms (consumer registration)", Met: benchkit.Verdict(med(fo.startup)-med(po.startup) <= 200)})
		t.Note = fmt.Sprintf("Per round, fan-out / poll: records/s %s, CPU/record %s. ", kbench.Fmt(rate, 2), kbench.Fmt(cpu, 2))
	}
	t.Note += fmt.Sprintf("Ratio column: fan-out / poll. Load average %s at the start, %s at the end.", load0, benchkit.LoadAverage())
	t.Print()
	return nil
}

func met(ok bool) string {
	if ok {
		return "met"
	}
	return "NOT met"
}

func ratios(a, b []float64) []float64 {
	out := make([]float64, min(len(a), len(b)))
	for i := range out {
		out[i] = a[i] / b[i]
	}
	return out
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// subscribe starts a broker on its own client that subscribes to stream in
// mode m, with handle as its handler, and returns it connected.
func subscribe(ctx context.Context, url, stream string, m mode, consumer string, handle func(kbench.Event), extra ...kgrt.SubscribeOption) (*kgrt.Broker, *counter, error) {
	cfg, c := config()
	b := kgrt.NewBrokerFromConfig(cfg, kgrt.WithEndpoint(url), kgrt.WithLeaseStore(lease.NewMemory()))
	opts := append(append([]kgrt.SubscribeOption{kgrt.Workers(8), kgrt.ByKey()}, m.opts(consumer)...), extra...)
	if _, err := kgrt.Subscribe(b, stream, func(_ context.Context, e kbench.Event, _ kgrt.Delivery) kgrt.Outcome {
		handle(e)
		return kgrt.Ack()
	}, opts...); err != nil {
		return nil, nil, err
	}
	if err := b.Connect(ctx); err != nil {
		return nil, nil, err
	}
	return b, c, nil
}

func shutdown(b *kgrt.Broker) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	_ = b.Shutdown(ctx)
}

// idle measures GetRecords calls and CPU over the idle window, then the
// latency of sparse publishes.
func idle(ctx context.Context, o options, url, stream string, m mode, consumer string) (calls, cpuMsPerS float64, lat, fromCall []time.Duration, err error) {
	arrivals := make(chan arrival, o.publishes)
	b, c, err := subscribe(ctx, url, stream, m, consumer, func(e kbench.Event) { deliver(arrivals, e.ID) })
	if err != nil {
		return 0, 0, nil, nil, err
	}
	defer shutdown(b)
	time.Sleep(time.Second) // let every shard's reader settle in
	c0, cpu0, t0 := c.getRecords.Load(), benchkit.CPUTime(), time.Now()
	time.Sleep(o.idle)
	wall := time.Since(t0).Seconds()
	calls = float64(c.getRecords.Load()-c0) / float64(o.shards) / wall
	cpuMsPerS = float64((benchkit.CPUTime() - cpu0).Milliseconds()) / wall
	lat, fromCall, err = latency(ctx, o, url, stream, arrivals)
	return calls, cpuMsPerS, lat, fromCall, err
}

type arrival struct {
	id int
	at time.Time
}

func deliver(arrivals chan<- arrival, id int) {
	select {
	case arrivals <- arrival{id: id, at: time.Now()}:
	default:
	}
}

// latency publishes o.publishes records one at a time with random gaps and
// returns, per record, the time from Publish returning to its handler
// starting (0 when the handler started first: the event can come before
// PutRecord's answer), and from calling Publish to it.
func latency(ctx context.Context, o options, url, stream string, arrivals <-chan arrival) (lat, fromCall []time.Duration, err error) {
	cfg, _ := config()
	pb := kgrt.NewBrokerFromConfig(cfg, kgrt.WithEndpoint(url))
	if err := pb.Connect(ctx); err != nil {
		return nil, nil, err
	}
	defer shutdown(pb)
	p := kgrt.NewPublisher[kbench.Event](pb, kgrt.PublisherSpec{Stream: stream})
	published := make(map[int]time.Time, o.publishes)
	called := make(map[int]time.Time, o.publishes)
	arrived := make(map[int]time.Time, o.publishes)
	collected := make(chan struct{})
	go func() {
		defer close(collected)
		timeout := time.After(time.Minute + time.Duration(o.publishes)*2*o.gap)
		for len(arrived) < o.publishes {
			select {
			case a := <-arrivals:
				if _, dup := arrived[a.id]; !dup {
					arrived[a.id] = a.at
				}
			case <-timeout:
				return
			}
		}
	}()
	base := 1_000_000
	for i := range o.publishes {
		time.Sleep(time.Duration(rand.Int64N(int64(2*o.gap) + 1)))
		var e kbench.Event
		if err := json.Unmarshal(kbench.Payload(base+i, o.size), &e); err != nil {
			return nil, nil, err
		}
		sent := time.Now()
		if err := p.Message(e).PartitionKey(kbench.Key(i)).Publish(ctx); err != nil {
			return nil, nil, err
		}
		published[base+i] = time.Now()
		called[base+i] = sent
	}
	<-collected
	if len(arrived) < o.publishes {
		return nil, nil, fmt.Errorf("%d of %d published records reached the handler", len(arrived), o.publishes)
	}
	lat = make([]time.Duration, 0, o.publishes)
	fromCall = make([]time.Duration, 0, o.publishes)
	for id, at := range arrived {
		lat = append(lat, max(0, at.Sub(published[id])))
		fromCall = append(fromCall, at.Sub(called[id]))
	}
	return lat, fromCall, nil
}

// drain reads the filled stream from the horizon until o.records records
// were handled: records per second from the first read sent to the last
// record, client CPU per record over the same span, and the start-up before
// it (from Connect).
func drain(ctx context.Context, o options, url, stream string, m mode, consumer, profile string) (rate, cpuPerRecord float64, startup time.Duration, err error) {
	if profile != "" {
		f, err := os.Create(profile)
		if err != nil {
			return 0, 0, 0, err
		}
		defer f.Close()
		if err := pprof.StartCPUProfile(f); err != nil {
			return 0, 0, 0, err
		}
		defer pprof.StopCPUProfile()
	}
	var handled atomic.Int64
	done := make(chan struct{})
	n := int64(o.records)
	t0 := time.Now()
	b, c, err := subscribe(ctx, url, stream, m, consumer, func(kbench.Event) {
		if handled.Add(1) == n {
			close(done)
		}
	}, kgrt.StartAt(kgrt.Horizon()))
	if err != nil {
		return 0, 0, 0, err
	}
	defer shutdown(b)
	select {
	case <-done:
	case <-time.After(5 * time.Minute):
		return 0, 0, 0, fmt.Errorf("%d of %d records handled in 5 minutes", handled.Load(), n)
	}
	end, cpu := time.Now(), benchkit.CPUTime()
	first, cpu1 := c.firstAt, c.firstCPU // a record was read: the stamp is done
	return float64(n) / end.Sub(first).Seconds(), float64((cpu - cpu1).Microseconds()) / float64(n), first.Sub(t0), nil
}
