package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"time"

	"github.com/kinesisgen/kinesisgen/runtime"
	"github.com/kinesisgen/kinesisgen/runtime/kinesistest"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	if err := run(ctx, os.Args[1:], os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "fanout:", err)
		os.Exit(1)
	}
}

// run publishes -n clicks, archives them through fan-out into -dir, and
// returns once every click is archived.
func run(ctx context.Context, args []string, stdout io.Writer) (err error) {
	fs := flag.NewFlagSet("fanout", flag.ContinueOnError)
	dir := fs.String("dir", "", "archive directory (default: a new temporary directory)")
	n := fs.Int("n", 200, "clicks to publish")
	users := fs.Int("users", 10, "users clicking (the partition keys)")
	endpoint := fs.String("endpoint", "", "Kinesis endpoint URL; empty runs on the in-process Kinesis")
	timeout := fs.Duration("timeout", 20*time.Second, "give up after this long")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *n < 1 || *users < 1 {
		return errors.New("-n and -users must be positive")
	}
	if *dir == "" {
		if *dir, err = os.MkdirTemp("", "clicks-"); err != nil {
			return err
		}
	}
	ctx, cancel := context.WithTimeout(ctx, *timeout)
	defer cancel()

	var b *runtime.Broker
	if *endpoint == "" {
		b = kinesistest.NewBroker(runtime.WithApplication("archiver"))
	} else {
		b = runtime.NewBroker(runtime.WithEndpoint(*endpoint), runtime.WithTestCredentials(), runtime.WithApplication("archiver"))
	}
	archive := NewArchive(*dir, *n)
	defer func() { err = errors.Join(err, archive.Close()) }()
	if err := Mount(b, archive); err != nil {
		return err
	}
	if err := b.Connect(ctx); err != nil {
		return fmt.Errorf("connect: %w", err)
	}
	defer func() {
		// After the last record, Shutdown writes the final checkpoints and
		// ends the subscriptions.
		sctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		err = errors.Join(err, b.Shutdown(sctx))
	}()

	clicks := NewClickPublisher(b)
	for i := range *n {
		c := Click{ID: i + 1, User: fmt.Sprintf("u%02d", i%*users+1), Page: fmt.Sprintf("/page/%d", i%7)}
		if err := clicks.Message(c).PartitionKey(c.User).Publish(ctx); err != nil {
			return fmt.Errorf("publish: %w", err)
		}
	}
	if err := archive.Wait(ctx); err != nil {
		return fmt.Errorf("archive: %w", err)
	}
	files, _ := filepath.Glob(filepath.Join(*dir, "*.jsonl"))
	fmt.Fprintf(stdout, "archived %d clicks into %d shard files in %s\n", *n, len(files), *dir)
	return nil
}
