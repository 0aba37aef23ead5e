package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"maps"
	"os"
	"os/signal"
	"slices"
	"time"

	"github.com/kinesisgen/kinesisgen/runtime"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	if err := run(ctx, os.Args[1:], os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "localtest:", err)
		os.Exit(1)
	}
}

// run publishes -n signups to the Kinesis at -endpoint, waits until each is
// welcomed, prints the greetings and returns.
func run(ctx context.Context, args []string, stdout io.Writer) error {
	fs := flag.NewFlagSet("localtest", flag.ContinueOnError)
	endpoint := fs.String("endpoint", "http://127.0.0.1:4567", "Kinesis endpoint URL (go run ./cmd/kinesislocal serves one there)")
	n := fs.Int("n", 3, "signups to publish")
	timeout := fs.Duration("timeout", 20*time.Second, "give up after this long")
	if err := fs.Parse(args); err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, *timeout)
	defer cancel()

	// Any credentials will do for a local endpoint; against the service,
	// leave out WithEndpoint and WithTestCredentials.
	b := runtime.NewBroker(
		runtime.WithEndpoint(*endpoint),
		runtime.WithTestCredentials(),
		runtime.WithApplication("welcome"),
	)
	greetings, err := Greet(ctx, b, *n)
	if err != nil {
		return err
	}
	for _, e := range slices.Sorted(maps.Keys(greetings)) {
		fmt.Fprintf(stdout, "%s: %s\n", e, greetings[e])
	}
	return nil
}

// Greet runs the service on b: it mounts the Welcomer, connects, publishes
// n signups, waits until all are welcomed and shuts down. The test calls it
// with a broker on kinesistest.ServeLocal.
func Greet(ctx context.Context, b *runtime.Broker, n int) (greetings map[string]string, err error) {
	w := NewWelcomer()
	if err := Mount(b, w); err != nil {
		return nil, err
	}
	if err := b.Connect(ctx); err != nil {
		return nil, fmt.Errorf("connect: %w", err)
	}
	defer func() {
		// Shutdown writes the final checkpoints; give it its own time.
		sctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		err = errors.Join(err, b.Shutdown(sctx))
	}()
	signups := NewSignupPublisher(b)
	for i := range n {
		s := Signup{Email: fmt.Sprintf("user%d@example.com", i+1), Name: fmt.Sprintf("User %d", i+1)}
		if err := signups.Message(s).PartitionKey(s.Email).Publish(ctx); err != nil {
			return nil, fmt.Errorf("publish: %w", err)
		}
	}
	return w.WaitFor(ctx, n)
}
