package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"sync"
	"time"

	"github.com/kinesisgen/kinesisgen/runtime"
	"github.com/kinesisgen/kinesisgen/runtime/kinesistest"
	"github.com/kinesisgen/kinesisgen/runtime/statuspage"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	os.Exit(run(ctx, os.Args[1:], os.Stdout, os.Stderr))
}

// run is the service; ctx ending (Ctrl-C) stops it.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("orders", flag.ContinueOnError)
	fs.SetOutput(stderr)
	endpoint := fs.String("endpoint", "", "Kinesis endpoint URL; empty runs on the in-process Kinesis")
	region := fs.String("region", "us-east-1", "AWS region")
	customers := fs.Int("customers", 6, "number of customers")
	perCustomer := fs.Int("orders", 8, "orders per customer")
	malformed := fs.Int("malformed", 1, "orders of an older schema to publish; each ends on the dead-letter stream")
	timeout := fs.Duration("timeout", 60*time.Second, "give up after this long (with -status: stop after this long, if set)")
	verbose := fs.Bool("v", false, "log the runtime's events to stderr")
	status := fs.String("status", "", "serve a live status page on this loopback address (for example 127.0.0.1:8080) and keep taking orders until interrupted")
	pace := fs.Duration("pace", 200*time.Millisecond, "with -status: after the first orders, place one more every this long")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	timeoutSet := false
	fs.Visit(func(f *flag.Flag) { timeoutSet = timeoutSet || f.Name == "timeout" })
	if *status != "" && *pace <= 0 {
		fmt.Fprintln(stderr, "orders: -pace must be positive")
		return 2
	}

	opts := []runtime.Option{
		// Fast re-listing and polling: the demo should finish in seconds.
		runtime.WithShardSyncInterval(time.Second),
	}
	if *verbose {
		opts = append(opts, runtime.WithLogger(slog.New(slog.NewTextHandler(stderr, nil))))
	}
	var b *runtime.Broker
	if *endpoint == "" {
		b = kinesistest.NewBroker(opts...)
	} else {
		opts = append(opts, runtime.WithEndpoint(*endpoint), runtime.WithRegion(*region), runtime.WithTestCredentials())
		b = runtime.NewBroker(opts...)
	}

	book := newBook(*customers**perCustomer, *malformed)
	if err := Mount(b, &Service{book: book}); err != nil {
		fmt.Fprintln(stderr, "orders:", err)
		return 1
	}
	if *status == "" || timeoutSet {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, *timeout)
		defer cancel()
	}
	if *status != "" {
		// Before Connect, so that the page shows the subscriptions starting.
		l, err := statuspage.Listen(*status)
		if err != nil {
			fmt.Fprintf(stderr, "orders: -status: %v\n", err)
			return 2
		}
		sctx, stopServing := context.WithCancel(ctx)
		served := statuspage.Serve(sctx, l, b)
		defer func() {
			stopServing()
			<-served
		}()
		fmt.Fprintf(stdout, "status page: http://%s/\n", l.Addr())
	}

	if err := b.Connect(ctx); err != nil {
		fmt.Fprintln(stderr, "orders: connect:", err)
		return 1
	}
	defer func() {
		shutdownCtx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := b.Shutdown(shutdownCtx); err != nil {
			fmt.Fprintln(stderr, "orders: shutdown:", err)
		}
	}()

	if err := placeOrders(ctx, NewOrderPublisher(b), *customers, *perCustomer); err != nil {
		fmt.Fprintln(stderr, "orders: publish:", err)
		return 1
	}
	if err := placeMalformed(ctx, b, *malformed); err != nil {
		fmt.Fprintln(stderr, "orders: publish:", err)
		return 1
	}
	select {
	case <-book.done:
	case <-ctx.Done():
		fmt.Fprintln(stderr, "orders: not every shipment arrived:", context.Cause(ctx))
		book.Report(stdout)
		return 1
	}
	if book.Report(stdout) > 0 {
		return 1
	}
	if *status != "" {
		fmt.Fprintln(stdout, "taking more orders; Ctrl-C stops")
		keepOrdering(ctx, NewOrderPublisher(b), *customers, *perCustomer, *pace)
		fmt.Fprintln(stdout, "stopping")
	}
	return 0
}

// keepOrdering places one order every pace, the customers taking turns,
// each customer's ids going on from its first orders, until ctx ends.
func keepOrdering(ctx context.Context, orders runtime.Publisher[Order], customers, perCustomer int, pace time.Duration) {
	next := make([]int, customers)
	for c := range next {
		next[c] = (c+1)*1000 + perCustomer + 1
	}
	t := time.NewTicker(pace)
	defer t.Stop()
	for c := 0; ; c = (c + 1) % customers {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		customer := fmt.Sprintf("c%02d", c+1)
		if err := orders.Message(Order{ID: next[c], Customer: customer}).PartitionKey(customer).Publish(ctx); err == nil {
			next[c]++
		}
	}
}

// placeOrders publishes each customer's orders one after another under the
// customer as partition key; customers publish side by side.
func placeOrders(ctx context.Context, orders runtime.Publisher[Order], customers, perCustomer int) error {
	var wg sync.WaitGroup
	errs := make([]error, customers)
	for c := range customers {
		wg.Go(func() {
			customer := fmt.Sprintf("c%02d", c+1)
			for i := range perCustomer {
				order := Order{ID: (c+1)*1000 + i + 1, Customer: customer}
				if err := orders.Message(order).PartitionKey(customer).Publish(ctx); err != nil {
					errs[c] = err
					return
				}
			}
		})
	}
	wg.Wait()
	return errors.Join(errs...)
}

// placeMalformed publishes orders as a client of an older schema wrote them
// (the id a string): Post cannot decode them and rejects them to the
// dead-letter stream, where Inspect reads them raw.
func placeMalformed(ctx context.Context, b *runtime.Broker, n int) error {
	old := runtime.NewPublisher[json.RawMessage](b, runtime.PublisherSpec{Stream: "customer-orders"})
	for i := range n {
		order := json.RawMessage(fmt.Sprintf(`{"id":"legacy-%d","customer":"c00"}`, i+1))
		if err := old.Message(order).PartitionKey("c00").Publish(ctx); err != nil {
			return err
		}
	}
	return nil
}
