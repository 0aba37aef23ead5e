// Command worker is the test service of the fleet test: it subscribes to one
// stream with a DynamoDB lease table, prints one line per record it handles
// ("owner key index shard seq", written before the record is acknowledged,
// so a SIGKILL loses no acknowledged line) and stops gracefully on SIGTERM
// or SIGINT (final checkpoints, leases released, exit status 0).
//
// Every -stats interval, and once more on exit, it prints
// "#stats owner unixNano writes checkpoints reads": the DynamoDB calls its
// lease store has made so far.
//
//	worker -kinesis-endpoint URL -dynamodb-endpoint URL -stream S -table T -owner ID \
//	       [-failover 3s] [-renew 1s] [-sync 1s] [-checkpoint 1s]
//
// Endpoints default to $KINESIS_TEST_ENDPOINT and $DYNAMODB_TEST_ENDPOINT.
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"

	"github.com/kinesisgen/kinesisgen/fleettest"
	"github.com/kinesisgen/kinesisgen/runtime"
	"github.com/kinesisgen/kinesisgen/runtime/lease"
)

type options struct {
	kinesis, dynamo  string
	stream, table    string
	owner, app       string
	failover, renew  time.Duration
	sync, checkpoint time.Duration
	shutdown, stats  time.Duration
	workers          int
	region           string
	verbose          bool
}

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

func run(args []string, stdout, stderr io.Writer) int {
	var o options
	var create bool
	fs := flag.NewFlagSet("worker", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.StringVar(&o.kinesis, "kinesis-endpoint", os.Getenv("KINESIS_TEST_ENDPOINT"), "Kinesis endpoint URL")
	fs.StringVar(&o.dynamo, "dynamodb-endpoint", os.Getenv("DYNAMODB_TEST_ENDPOINT"), "DynamoDB endpoint URL")
	fs.StringVar(&o.region, "region", "us-east-1", "AWS region")
	fs.StringVar(&o.stream, "stream", "", "stream to read (required)")
	fs.StringVar(&o.table, "table", "", "lease table (required)")
	fs.StringVar(&o.owner, "owner", "", "lease owner id (required, unique per instance)")
	fs.StringVar(&o.app, "app", "fleettest", "application name (lease namespace prefix)")
	fs.DurationVar(&o.failover, "failover", 3*time.Second, "lease failover time")
	fs.DurationVar(&o.renew, "renew", time.Second, "lease renewal interval")
	fs.DurationVar(&o.sync, "sync", time.Second, "shard sync (and balancing) interval")
	fs.DurationVar(&o.checkpoint, "checkpoint", time.Second, "checkpoint interval")
	fs.DurationVar(&o.shutdown, "shutdown-timeout", 10*time.Second, "bound on a graceful stop")
	fs.DurationVar(&o.stats, "stats", time.Second, "interval of #stats lines")
	fs.IntVar(&o.workers, "workers", 8, "handler lanes (by key)")
	fs.BoolVar(&create, "create-table", false, "create the lease table when missing")
	fs.BoolVar(&o.verbose, "v", false, "debug logging")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	for name, v := range map[string]string{"stream": o.stream, "table": o.table, "owner": o.owner, "kinesis-endpoint": o.kinesis, "dynamodb-endpoint": o.dynamo} {
		if v == "" {
			fmt.Fprintf(stderr, "worker: -%s is required\n", name)
			return 2
		}
	}

	level := slog.LevelInfo
	if o.verbose {
		level = slog.LevelDebug
	}
	base := slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: level}))
	log := base.With("owner", o.owner) // the runtime adds owner (and stream, shard) itself

	ddb := &countingDynamo{client: dynamodb.NewFromConfig(aws.Config{
		Region:      o.region,
		Credentials: credentials.NewStaticCredentialsProvider("test", "test", ""),
	}, func(opt *dynamodb.Options) { opt.BaseEndpoint = aws.String(o.dynamo) })}
	var storeOpts []lease.DynamoDBOption
	if create {
		storeOpts = append(storeOpts, lease.CreateTableIfMissing())
	}
	storeOpts = append(storeOpts, lease.WithLogger(log))
	store := lease.NewDynamoDB(ddb, o.table, storeOpts...)

	b := runtime.NewBroker(
		runtime.WithEndpoint(o.kinesis),
		runtime.WithRegion(o.region),
		runtime.WithTestCredentials(),
		runtime.WithLeaseStore(store),
		runtime.WithOwnerID(o.owner),
		runtime.WithApplication(o.app),
		runtime.WithFailoverTime(o.failover),
		runtime.WithLeaseRenewInterval(o.renew),
		runtime.WithShardSyncInterval(o.sync),
		runtime.WithCheckpointInterval(o.checkpoint),
		runtime.WithShutdownTimeout(o.shutdown),
		runtime.WithLogger(base),
	)

	out := &lineWriter{w: stdout}
	bad := make(chan error, 1)
	handle := func(ctx context.Context, msg fleettest.Item, d runtime.Delivery) runtime.Outcome {
		if msg.Key != d.PartitionKey {
			// The runtime routed a record under the wrong key: fail loudly
			// rather than print a line the test would misread.
			reportOnce(bad, fmt.Errorf("record %s/%s: partition key %q but message key %q", d.ShardID, d.SequenceNumber, d.PartitionKey, msg.Key))
			<-ctx.Done()
			return runtime.Retry()
		}
		line := fleettest.Handled{Owner: o.owner, Key: msg.Key, Index: msg.Index, Shard: d.ShardID, Sequence: d.SequenceNumber}
		if err := out.print(line.String()); err != nil {
			// Nobody reads our lines any more; acking would claim a record
			// was handled that no one saw.
			reportOnce(bad, fmt.Errorf("write stdout: %w", err))
			<-ctx.Done()
			return runtime.Retry()
		}
		return runtime.Ack()
	}
	if _, err := runtime.Subscribe(b, o.stream, handle,
		runtime.Workers(o.workers), runtime.ByKey(), runtime.StartAt(runtime.Horizon()),
		runtime.HandlerName("fleettest.worker")); err != nil {
		fmt.Fprintf(stderr, "worker: subscribe: %v\n", err)
		return 1
	}

	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()

	printStats := func() { _ = out.print(ddb.stats(o.owner).String()) }
	statsDone := make(chan struct{})
	go func() {
		defer close(statsDone)
		t := time.NewTicker(o.stats)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
				printStats()
			}
		}
	}()

	runCtx, cancelRun := context.WithCancel(ctx)
	defer cancelRun()
	status := 0
	done := make(chan error, 1)
	go func() { done <- b.Run(runCtx) }()
	var err error
	select {
	case err = <-done:
	case berr := <-bad:
		fmt.Fprintf(stderr, "worker: %v\n", berr)
		status = 3
		cancelRun()
		err = <-done
	}
	stop()
	<-statsDone
	printStats()
	if err != nil {
		fmt.Fprintf(stderr, "worker: %v\n", err)
		return 1
	}
	log.Info("worker stopped")
	return status
}

func reportOnce(ch chan error, err error) {
	select {
	case ch <- err:
	default:
	}
}

// lineWriter writes each line with one write call under a lock: lanes print
// concurrently, and an unbuffered write is on the pipe before the handler
// returns (and so before its record is acknowledged).
type lineWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (l *lineWriter) print(s string) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	_, err := io.WriteString(l.w, s)
	return err
}

// countingDynamo counts the lease store's DynamoDB calls.
type countingDynamo struct {
	client                     *dynamodb.Client
	writes, checkpoints, reads atomic.Int64
}

var _ lease.DynamoDBAPI = (*countingDynamo)(nil)

func (c *countingDynamo) stats(owner string) fleettest.Stats {
	return fleettest.Stats{Owner: owner, UnixNano: time.Now().UnixNano(), Writes: c.writes.Load(), Checkpoints: c.checkpoints.Load(), Reads: c.reads.Load()}
}

func (c *countingDynamo) GetItem(ctx context.Context, in *dynamodb.GetItemInput, f ...func(*dynamodb.Options)) (*dynamodb.GetItemOutput, error) {
	c.reads.Add(1)
	return c.client.GetItem(ctx, in, f...)
}

func (c *countingDynamo) Scan(ctx context.Context, in *dynamodb.ScanInput, f ...func(*dynamodb.Options)) (*dynamodb.ScanOutput, error) {
	c.reads.Add(1)
	return c.client.Scan(ctx, in, f...)
}

func (c *countingDynamo) DescribeTable(ctx context.Context, in *dynamodb.DescribeTableInput, f ...func(*dynamodb.Options)) (*dynamodb.DescribeTableOutput, error) {
	c.reads.Add(1)
	return c.client.DescribeTable(ctx, in, f...)
}

func (c *countingDynamo) PutItem(ctx context.Context, in *dynamodb.PutItemInput, f ...func(*dynamodb.Options)) (*dynamodb.PutItemOutput, error) {
	c.writes.Add(1)
	return c.client.PutItem(ctx, in, f...)
}

func (c *countingDynamo) UpdateItem(ctx context.Context, in *dynamodb.UpdateItemInput, f ...func(*dynamodb.Options)) (*dynamodb.UpdateItemOutput, error) {
	c.writes.Add(1)
	// The store names attributes through placeholders; a write that sets
	// the KCL's checkpoint attribute is a checkpoint.
	for _, name := range in.ExpressionAttributeNames {
		if name == "checkpoint" {
			c.checkpoints.Add(1)
			break
		}
	}
	return c.client.UpdateItem(ctx, in, f...)
}

func (c *countingDynamo) DeleteItem(ctx context.Context, in *dynamodb.DeleteItemInput, f ...func(*dynamodb.Options)) (*dynamodb.DeleteItemOutput, error) {
	c.writes.Add(1)
	return c.client.DeleteItem(ctx, in, f...)
}

func (c *countingDynamo) CreateTable(ctx context.Context, in *dynamodb.CreateTableInput, f ...func(*dynamodb.Options)) (*dynamodb.CreateTableOutput, error) {
	return c.client.CreateTable(ctx, in, f...)
}
