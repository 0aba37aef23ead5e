package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"sync"
	"time"

	"github.com/kinesisgen/kinesisgen/runtime"
	"github.com/kinesisgen/kinesisgen/runtime/kinesistest"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	if err := run(ctx, os.Args[1:], os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "aggregated:", err)
		os.Exit(1)
	}
}

// run publishes -sensors × -readings readings from -goroutines goroutines,
// waits until the subscriber has handled them all and reports.
func run(ctx context.Context, args []string, stdout io.Writer) (err error) {
	fs := flag.NewFlagSet("aggregated", flag.ContinueOnError)
	goroutines := fs.Int("goroutines", 8, "publishing goroutines; each owns its share of the sensors")
	sensors := fs.Int("sensors", 64, "sensors (the partition keys)")
	readings := fs.Int("readings", 100, "readings per sensor")
	batch := fs.Int("batch", 200, "messages per SendAll")
	endpoint := fs.String("endpoint", "", "Kinesis endpoint URL; empty runs on the in-process Kinesis")
	timeout := fs.Duration("timeout", 20*time.Second, "give up after this long")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *goroutines < 1 || *sensors < *goroutines || *readings < 1 || *batch < 1 {
		return errors.New("want -goroutines ≥ 1, -sensors ≥ -goroutines, -readings ≥ 1, -batch ≥ 1")
	}
	ctx, cancel := context.WithTimeout(ctx, *timeout)
	defer cancel()

	var b *runtime.Broker
	if *endpoint == "" {
		b = kinesistest.NewBroker()
	} else {
		b = runtime.NewBroker(runtime.WithEndpoint(*endpoint), runtime.WithTestCredentials())
	}
	total := *sensors * *readings
	checker := NewChecker(total)
	if err := Mount(b, checker); err != nil {
		return err
	}
	if err := b.Connect(ctx); err != nil {
		return fmt.Errorf("connect: %w", err)
	}
	defer func() {
		sctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		err = errors.Join(err, b.Shutdown(sctx))
	}()

	// NewReadingPublisher aggregates: the marker says so.
	pub := NewReadingPublisher(b)
	start := time.Now()
	records, err := publish(ctx, pub, *goroutines, *sensors, *readings, *batch)
	if err != nil {
		return fmt.Errorf("publish: %w", err)
	}
	elapsed := time.Since(start)
	problems, err := checker.Wait(ctx)
	if err != nil {
		return fmt.Errorf("waiting for the subscriber: %w", err)
	}
	fmt.Fprintf(stdout, "published %d readings of %d sensors from %d goroutines in %d Kinesis records (%.1f a record) in %v\n",
		total, *sensors, *goroutines, records, float64(total)/float64(records), elapsed.Round(time.Millisecond))
	for _, p := range problems {
		fmt.Fprintln(stdout, "out of order:", p)
	}
	if len(problems) > 0 {
		return fmt.Errorf("%d readings out of order", len(problems))
	}
	fmt.Fprintf(stdout, "handled all %d, every sensor in order\n", total)
	return nil
}

// publish sends each sensor's readings in order. Goroutine g owns the
// sensors s with s%goroutines == g (a key published from two goroutines at
// once has no order to keep) and sends them round-robin in SendAll
// batches: a batch keeps each key's slice order, and the next batch starts
// once this one is resolved. It returns how many Kinesis records carried
// the readings: the distinct (shard, sequence number) of the receipts.
func publish(ctx context.Context, pub runtime.Publisher[Reading], goroutines, sensors, readings, batch int) (records int, err error) {
	type record struct{ shard, seq string }
	var (
		mu   sync.Mutex
		seen = map[record]bool{}
		wg   sync.WaitGroup
		errs = make([]error, goroutines)
	)
	for g := range goroutines {
		wg.Go(func() {
			var msgs []*runtime.Message[Reading]
			send := func() error {
				receipts, err := runtime.SendAll(ctx, msgs)
				mu.Lock()
				for _, r := range receipts {
					seen[record{r.ShardID, r.SequenceNumber}] = true
				}
				mu.Unlock()
				msgs = msgs[:0]
				return err
			}
			for seq := 1; seq <= readings; seq++ {
				for s := g; s < sensors; s += goroutines {
					sensor := fmt.Sprintf("sensor-%03d", s)
					r := Reading{Sensor: sensor, Seq: seq, Value: float64(seq) / 10}
					msgs = append(msgs, pub.Message(r).PartitionKey(sensor))
					if len(msgs) == batch {
						if errs[g] = send(); errs[g] != nil {
							return
						}
					}
				}
			}
			if len(msgs) > 0 {
				errs[g] = send()
			}
		})
	}
	wg.Wait()
	return len(seen), errors.Join(errs...)
}
