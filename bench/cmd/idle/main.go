// Command idle measures what a consumer costs on a kinesalite stream with no
// traffic, and how late a sparse record reaches its handler:
//
//   - GetRecords calls per shard per second (counted in the HTTP client) and
//     client CPU per second, over an idle window, for ours (runtime.Subscribe
//     at the default poll interval, and at the 200 ms floor) and for github.com/harlow/kinesis-consumer
//     at its smallest scan interval (1 ns: it reads as fast as the server
//     answers) and at its default (250 ms);
//   - the latency from Publish returning to the handler starting, p50 and
//     p99 over sparse publishes (random gaps), for both of ours and for
//     kinesis-consumer at its default.
//
// Every figure is taken -runs times; medians are reported.
//
//	bash scripts/with-servers.sh sh -c 'cd bench && go run ./cmd/idle'
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"math/rand/v2"
	"os"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/kinesis/types"
	consumer "github.com/harlow/kinesis-consumer"

	"github.com/kinesisgen/kinesisgen/bench/internal/kbench"
	"github.com/kinesisgen/kinesisgen/internal/bench/benchkit"
	kgrt "github.com/kinesisgen/kinesisgen/runtime"
	"github.com/kinesisgen/kinesisgen/runtime/lease"
)

type options struct {
	endpoint  string
	shards    int
	idle      time.Duration
	runs      int
	publishes int
	gap       time.Duration
	size      int
}

func main() {
	var o options
	flag.StringVar(&o.endpoint, "endpoint", os.Getenv("KINESIS_TEST_ENDPOINT"), "Kinesis endpoint URL (default $KINESIS_TEST_ENDPOINT)")
	flag.IntVar(&o.shards, "shards", 4, "shards of the stream")
	flag.DurationVar(&o.idle, "idle", 10*time.Second, "idle window")
	flag.IntVar(&o.runs, "runs", 3, "repetitions; medians are reported")
	flag.IntVar(&o.publishes, "publishes", 200, "sparse publishes for the latency figure")
	flag.DurationVar(&o.gap, "gap", 50*time.Millisecond, "mean gap between sparse publishes (uniform in 0..2×gap)")
	flag.IntVar(&o.size, "size", 200, "bytes per record (JSON)")
	flag.Parse()
	if o.endpoint == "" {
		fail(errors.New("no endpoint: pass -endpoint or run under scripts/with-servers.sh"))
	}
	if err := run(o); err != nil {
		fail(err)
	}
}

// idleCost is one idle window's figures.
type idleCost struct {
	perShardSecond float64 // GetRecords calls per shard per second
	cpuMsPerSecond float64 // client CPU (user+sys) per second of wall time
}

func run(o options) error {
	ctx := context.Background()
	cfg, _ := kbench.Config()
	client := kbench.Client(cfg, o.endpoint)
	fmt.Printf("idle: %d shards, %v idle window, %d sparse publishes with mean gap %v, %d runs; ours at the default poll (%v)\n",
		o.shards, o.idle, o.publishes, o.gap, o.runs, time.Second)

	// Every mode measures the idle window; all but kc-1ns (which reads as
	// fast as the server answers) also the latency of sparse publishes.
	type mode struct {
		name    string
		latency bool
		measure func(stream string) (idleCost, []time.Duration, error)
	}
	modes := []mode{
		{"ours", true, func(stream string) (idleCost, []time.Duration, error) { return ours(ctx, o, stream, 0) }},
		{"ours-200ms", true, func(stream string) (idleCost, []time.Duration, error) {
			return ours(ctx, o, stream, kgrt.MinPollInterval)
		}},
		{"kc-1ns", false, func(stream string) (idleCost, []time.Duration, error) {
			return kinesisConsumer(ctx, o, stream, time.Nanosecond, false)
		}},
		{"kc-250ms", true, func(stream string) (idleCost, []time.Duration, error) {
			return kinesisConsumer(ctx, o, stream, 0, true)
		}},
	}
	calls := map[string][]float64{}
	cpu := map[string][]float64{}
	p50 := map[string][]float64{}
	p99 := map[string][]float64{}
	for run := 1; run <= o.runs; run++ {
		stream, err := benchkit.CreateStream(ctx, client, "idle", int32(o.shards))
		if err != nil {
			return err
		}
		for _, m := range modes {
			c, lat, err := m.measure(stream)
			if err != nil {
				return fmt.Errorf("run %d, %s: %w", run, m.name, err)
			}
			calls[m.name] = append(calls[m.name], c.perShardSecond)
			cpu[m.name] = append(cpu[m.name], c.cpuMsPerSecond)
			line := fmt.Sprintf("run %d %-10s %6.2f GetRecords/shard/s %7.2f ms CPU/s", run, m.name, c.perShardSecond, c.cpuMsPerSecond)
			if m.latency {
				p50[m.name] = append(p50[m.name], ms(kbench.Percentile(lat, 50)))
				p99[m.name] = append(p99[m.name], ms(kbench.Percentile(lat, 99)))
				line += fmt.Sprintf("; latency p50 %v p99 %v max %v", kbench.Percentile(lat, 50).Round(time.Millisecond),
					kbench.Percentile(lat, 99).Round(time.Millisecond), kbench.Percentile(lat, 100).Round(time.Millisecond))
			}
			fmt.Println(line)
		}
	}
	fmt.Println("medians:")
	for _, m := range modes {
		line := fmt.Sprintf("  %-10s %7.2f GetRecords/shard/s %7.2f ms CPU/s", m.name, kbench.Median(calls[m.name]), kbench.Median(cpu[m.name]))
		if p50[m.name] != nil {
			line += fmt.Sprintf("; latency p50 %.0f ms p99 %.0f ms", kbench.Median(p50[m.name]), kbench.Median(p99[m.name]))
		}
		fmt.Println(line)
	}
	fmt.Printf("goal: ours ≤ 5 GetRecords/shard/s idle, latency within one poll interval (%v)\n", time.Second)
	med := func(m map[string][]float64, k string) float64 { return kbench.Median(m[k]) }
	t := benchkit.Table{Title: fmt.Sprintf("Idle cost and latency, %d shards, %v idle then %d sparse publishes (medians of %d runs); peer: kinesis-consumer", o.shards, o.idle, o.publishes, o.runs)}
	for _, pair := range [][2]string{{"ours", "kc-250ms"}, {"ours-200ms", "kc-250ms"}} {
		us, peer := pair[0], pair[1]
		t.Add(benchkit.Row{Measure: fmt.Sprintf("idle GetRecords/shard/s, %s / %s", us, peer), Ours: fmt.Sprintf("%.2f", med(calls, us)), Peer: fmt.Sprintf("%.2f", med(calls, peer)),
			Ratio: med(calls, us) / med(calls, peer), Goal: "ours ≤ 5", Met: benchkit.Verdict(med(calls, us) <= 5)})
		t.Add(benchkit.Row{Measure: fmt.Sprintf("idle client CPU ms/s, %s / %s", us, peer), Ours: fmt.Sprintf("%.1f", med(cpu, us)), Peer: fmt.Sprintf("%.1f", med(cpu, peer)), Ratio: med(cpu, us) / med(cpu, peer)})
		poll := time.Second
		if us == "ours-200ms" {
			poll = kgrt.MinPollInterval
		}
		t.Add(benchkit.Row{Measure: fmt.Sprintf("publish → handler p99 ms, %s / %s", us, peer), Ours: fmt.Sprintf("%.0f", med(p99, us)), Peer: fmt.Sprintf("%.0f", med(p99, peer)),
			Goal: fmt.Sprintf("ours ≤ one poll (%v)", poll), Met: benchkit.Verdict(med(p99, us) <= ms(poll)*1.05)})
	}
	t.Add(benchkit.Row{Measure: "idle GetRecords/shard/s, ours / kc at its smallest scan interval (1 ns)", Ours: fmt.Sprintf("%.2f", med(calls, "ours")), Peer: fmt.Sprintf("%.0f", med(calls, "kc-1ns")), Ratio: med(calls, "ours") / med(calls, "kc-1ns")})
	t.Note = fmt.Sprintf("p50 latency: ours %.0f ms, ours-200ms %.0f ms, kc-250ms %.0f ms. The p99 goal allows 5 %% over the interval. Load average %s at the end.",
		med(p50, "ours"), med(p50, "ours-200ms"), med(p50, "kc-250ms"), benchkit.LoadAverage())
	t.Print()
	return nil
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// window counts GetRecords calls and CPU over o.idle with no traffic.
func window(o options, counter *kbench.Counter) idleCost {
	c0, cpu0, t0 := counter.GetRecords(), benchkit.CPUTime(), time.Now()
	time.Sleep(o.idle)
	wall := time.Since(t0).Seconds()
	return idleCost{
		perShardSecond: float64(counter.GetRecords()-c0) / float64(o.shards) / wall,
		cpuMsPerSecond: float64((benchkit.CPUTime() - cpu0).Milliseconds()) / wall,
	}
}

// ours subscribes (poll 0: the default interval), measures the idle window,
// then the latency of sparse publishes.
func ours(ctx context.Context, o options, stream string, poll time.Duration) (idleCost, []time.Duration, error) {
	cfg, counter := kbench.Config()
	b := kgrt.NewBrokerFromConfig(cfg, kgrt.WithEndpoint(o.endpoint), kgrt.WithLeaseStore(lease.NewMemory()))
	arrivals := make(chan arrival, o.publishes)
	opts := []kgrt.SubscribeOption{kgrt.Workers(8), kgrt.ByKey()}
	if poll > 0 {
		opts = append(opts, kgrt.PollInterval(poll))
	}
	_, err := kgrt.Subscribe(b, stream, func(_ context.Context, e kbench.Event, _ kgrt.Delivery) kgrt.Outcome {
		deliver(arrivals, e.ID)
		return kgrt.Ack()
	}, opts...)
	if err != nil {
		return idleCost{}, nil, err
	}
	// Connect returns once every shard has its first iterator.
	if err := b.Connect(ctx); err != nil {
		return idleCost{}, nil, err
	}
	defer func() {
		stopCtx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		_ = b.Shutdown(stopCtx)
	}()
	cost := window(o, counter)
	lat, err := latency(ctx, o, stream, arrivals)
	return cost, lat, err
}

// kinesisConsumer scans with kinesis-consumer (interval 0: its default),
// waits for its first GetRecords call, measures the idle window and, when
// asked, the latency of sparse publishes.
func kinesisConsumer(ctx context.Context, o options, stream string, interval time.Duration, withLatency bool) (idleCost, []time.Duration, error) {
	cfg, counter := kbench.Config()
	client := kbench.Client(cfg, o.endpoint)
	opts := []consumer.Option{consumer.WithClient(client),
		consumer.WithShardIteratorType(string(types.ShardIteratorTypeLatest))}
	if interval > 0 {
		opts = append(opts, consumer.WithScanInterval(interval))
	}
	c, err := consumer.New(stream, opts...)
	if err != nil {
		return idleCost{}, nil, err
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	arrivals := make(chan arrival, o.publishes)
	scanned := make(chan error, 1)
	go func() {
		scanned <- kbench.ScanKC(ctx, c, client, stream, func(e kbench.Event) { deliver(arrivals, e.ID) })
	}()
	// Every shard has its iterator once each has made a GetRecords call.
	deadline := time.Now().Add(30 * time.Second)
	for counter.GetRecords() < int64(o.shards) {
		if time.Now().After(deadline) {
			return idleCost{}, nil, errors.New("no GetRecords on every shard within 30 s")
		}
		select {
		case err := <-scanned:
			return idleCost{}, nil, fmt.Errorf("scan ended: %v", err)
		case <-time.After(5 * time.Millisecond):
		}
	}
	cost := window(o, counter)
	var lat []time.Duration
	if withLatency {
		lat, err = latency(ctx, o, stream, arrivals)
	}
	cancel()
	<-scanned // an error now is our cancellation
	return cost, lat, err
}

type arrival struct {
	id int
	at time.Time
}

// deliver notes that the handler of record id started; it never blocks a
// handler (a full channel means the measurement is over).
func deliver(arrivals chan<- arrival, id int) {
	select {
	case arrivals <- arrival{id: id, at: time.Now()}:
	default:
	}
}

// latency publishes o.publishes records one at a time with random gaps and
// returns, per record, the time from Publish returning to its handler
// starting (0 when the handler started first).
func latency(ctx context.Context, o options, stream string, arrivals <-chan arrival) ([]time.Duration, error) {
	cfg, _ := kbench.Config()
	pb := kgrt.NewBrokerFromConfig(cfg, kgrt.WithEndpoint(o.endpoint))
	if err := pb.Connect(ctx); err != nil {
		return nil, err
	}
	defer pb.Shutdown(context.WithoutCancel(ctx))
	p := kgrt.NewPublisher[kbench.Event](pb, kgrt.PublisherSpec{Stream: stream})

	published := make(map[int]time.Time, o.publishes)
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
	base := 1_000_000 // ids apart from anything else on the stream
	for i := range o.publishes {
		time.Sleep(time.Duration(rand.Int64N(int64(2*o.gap) + 1)))
		var e kbench.Event
		if err := json.Unmarshal(kbench.Payload(base+i, o.size), &e); err != nil {
			return nil, err
		}
		if err := p.Message(e).PartitionKey(kbench.Key(i)).Publish(ctx); err != nil {
			return nil, err
		}
		published[base+i] = time.Now()
	}
	<-collected
	if len(arrived) < o.publishes {
		return nil, fmt.Errorf("%d of %d published records reached the handler", len(arrived), o.publishes)
	}
	lat := make([]time.Duration, 0, o.publishes)
	for id, at := range arrived {
		lat = append(lat, max(0, at.Sub(published[id])))
	}
	return lat, nil
}

func fail(err error) {
	fmt.Fprintln(os.Stderr, "idle:", err)
	os.Exit(1)
}
