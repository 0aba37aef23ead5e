// Command latency measures the aggregating publisher's waiting for the
// aggregate in flight (runtime.Aggregation.InFlightWait) on a link with
// latency: kinesalite behind a proxy that delays every PutRecords call by
// -delay. Callers each own a set of keys and publish their messages one at
// a time, waiting for each result (a closed loop, as a request handler
// does), into a fresh 4-shard stream per run; the default wait (100 ms)
// and no wait (InFlightWait < 0) alternate, for each number of callers.
// It reports messages per second, each Publish's latency (p50, p99),
// PutRecords calls, and the Kinesis records and PUT payload units (25 KiB
// of data plus key, rounded up per record) stored per 1,000 messages.
//
//	bash scripts/with-servers.sh sh -c 'cd bench && go run ./cmd/latency'
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/kinesis"
	"github.com/aws/aws-sdk-go-v2/service/kinesis/types"

	"github.com/kinesisgen/kinesisgen/bench/internal/kbench"
	"github.com/kinesisgen/kinesisgen/internal/bench/benchkit"
	"github.com/kinesisgen/kinesisgen/internal/faultproxy"
	kgrt "github.com/kinesisgen/kinesisgen/runtime"
)

func main() {
	n := flag.Int("n", 20_000, "messages per run")
	keys := flag.Int("keys", 10_000, "distinct partition keys")
	callersList := flag.String("callers", "32,256,2048", "publishing goroutines, one run each")
	delay := flag.Duration("delay", 20*time.Millisecond, "latency added to each PutRecords call")
	runs := flag.Int("runs", 2, "rounds")
	flag.Parse()
	endpoint := os.Getenv("KINESIS_TEST_ENDPOINT")
	if endpoint == "" {
		fmt.Fprintln(os.Stderr, "latency: run under scripts/with-servers.sh (KINESIS_TEST_ENDPOINT)")
		os.Exit(2)
	}
	px, err := faultproxy.New(endpoint, 1)
	if err != nil {
		fail(err)
	}
	defer px.Close()
	if err := px.Set(faultproxy.Rule{Ops: []string{"PutRecords"}, Fault: faultproxy.Latency, Rate: 1, Delay: *delay}); err != nil {
		fail(err)
	}
	events := make([]kbench.Event, *n)
	for i := range events {
		if err := json.Unmarshal(kbench.Payload(i, 200), &events[i]); err != nil {
			fail(err)
		}
	}
	fmt.Printf("latency: %d messages over %d keys, 4 shards, PutRecords delayed %v, GOMAXPROCS from the environment\n", *n, *keys, *delay)
	for round := range *runs {
		fmt.Printf("round %d\n", round+1)
		for _, c := range strings.Split(*callersList, ",") {
			callers, err := strconv.Atoi(c)
			if err != nil {
				fail(err)
			}
			for _, wait := range []time.Duration{0, -1} {
				r, err := run(px, endpoint, events, *keys, callers, wait)
				if err != nil {
					fail(err)
				}
				name := "default (100 ms)"
				if wait < 0 {
					name = "none"
				}
				fmt.Printf("  %5d callers, wait %-16s %7.0f msg/s  p50 %4v  p99 %4v  %5d calls  %5.1f records  %5.1f PUT units per 1k messages\n",
					callers, name, r.rate, r.p50, r.p99, r.calls, r.records, r.units)
			}
		}
	}
}

type result struct {
	rate           float64
	p50, p99       time.Duration
	calls          int64
	records, units float64
}

// run publishes events from callers goroutines through the proxy, each
// caller owning the keys k with k%callers == c, and reads the stream back.
func run(px *faultproxy.Proxy, endpoint string, events []kbench.Event, keys, callers int, wait time.Duration) (result, error) {
	ctx := context.Background()
	cfg, _ := kbench.Config()
	client := kbench.Client(cfg, endpoint)
	stream, err := benchkit.CreateStream(ctx, client, "latency", 4)
	if err != nil {
		return result{}, err
	}
	defer func() { _ = benchkit.DeleteStream(ctx, client, stream) }()
	b := kgrt.NewBrokerFromConfig(cfg, kgrt.WithEndpoint(px.URL()))
	if err := b.Connect(ctx); err != nil {
		return result{}, err
	}
	p := kgrt.NewPublisher[*kbench.Event](b, kgrt.PublisherSpec{Stream: stream},
		kgrt.WithAggregation(kgrt.Aggregation{InFlightWait: wait}))
	mine := make([][]int, callers)
	for i := range events {
		c := (i % keys) % callers
		mine[c] = append(mine[c], i)
	}
	calls0 := px.Requests("PutRecords")
	var next atomic.Int64
	var mu sync.Mutex
	var lat []time.Duration
	t0 := time.Now()
	err = benchkit.Parallel(callers, func() error {
		var l []time.Duration
		for _, i := range mine[next.Add(1)-1] {
			s := time.Now()
			if err := p.Message(&events[i]).PartitionKey("customer-" + strconv.Itoa(i%keys)).Publish(ctx); err != nil {
				return err
			}
			l = append(l, time.Since(s))
		}
		mu.Lock()
		lat = append(lat, l...)
		mu.Unlock()
		return nil
	})
	wall := time.Since(t0)
	calls := px.Requests("PutRecords") - calls0
	_ = b.Shutdown(ctx)
	if err != nil {
		return result{}, err
	}
	slices.Sort(lat)
	recs, units, err := stored(ctx, client, stream)
	if err != nil {
		return result{}, err
	}
	per := 1000 / float64(len(events))
	return result{
		rate: float64(len(events)) / wall.Seconds(),
		p50:  lat[len(lat)/2].Round(time.Millisecond), p99: lat[len(lat)*99/100].Round(time.Millisecond),
		calls: calls, records: float64(recs) * per, units: float64(units) * per,
	}, nil
}

// stored counts the stream's Kinesis records and their PUT payload units.
func stored(ctx context.Context, client *kinesis.Client, stream string) (records, units int, err error) {
	shards, err := client.ListShards(ctx, &kinesis.ListShardsInput{StreamName: &stream})
	if err != nil {
		return 0, 0, err
	}
	for _, s := range shards.Shards {
		it, err := client.GetShardIterator(ctx, &kinesis.GetShardIteratorInput{StreamName: &stream, ShardId: s.ShardId, ShardIteratorType: types.ShardIteratorTypeTrimHorizon})
		if err != nil {
			return 0, 0, err
		}
		for iter := it.ShardIterator; iter != nil; {
			out, err := client.GetRecords(ctx, &kinesis.GetRecordsInput{ShardIterator: iter})
			if err != nil {
				return 0, 0, err
			}
			if len(out.Records) == 0 {
				break
			}
			for _, r := range out.Records {
				records++
				units += kbench.PutUnits(len(r.Data) + len(*r.PartitionKey))
			}
			iter = out.NextShardIterator
		}
	}
	return records, units, nil
}

func fail(err error) {
	fmt.Fprintln(os.Stderr, "latency:", err)
	os.Exit(1)
}
