// Command worker is the test service of the fleet test: it subscribes to one
// stream with a DynamoDB lease table, prints one line per record it handles
// ("owner key index shard seq", written before the record is acknowledged,
// so a SIGKILL loses no acknowledged line) and stops gracefully on SIGTERM
// or SIGINT (final checkpoints, leases released, exit status 0).
//
// Every -stats interval, and once more on exit, it prints
// "#stats owner unixNano writes checkpoints reads getrecords subscribes":
// the DynamoDB calls its lease store has made so far, and its GetRecords
// and SubscribeToShard calls.
//
// With -fanout CONSUMER it reads by enhanced fan-out through that stream
// consumer (runtime.FanOut), registering it when missing
// (-create-if-missing); its Kinesis client then reads kinesis-mock's
// subscriptions through kinesismock.Transport, which passes the service's
// answers through unchanged.
//
// It publishes too when asked on its standard input ("publish first stride
// keys from n pause", see fleettest.PublishCommand): each call bounded by
// -publish-timeout, a "#pub" line after each, the same record again after
// an error, "#pubdone owner" when the command's records are all published.
//
//	worker -kinesis-endpoint URL -dynamodb-endpoint URL -stream S -table T -owner ID \
//	       [-failover 3s] [-renew 1s] [-sync 1s] [-checkpoint 1s] [-fanout CONSUMER [-create-if-missing SHARDS]]
//
// Endpoints default to $KINESIS_TEST_ENDPOINT and $DYNAMODB_TEST_ENDPOINT.
package main

import (
	"bufio"
	"context"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"os/signal"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	awshttp "github.com/aws/aws-sdk-go-v2/aws/transport/http"
	awsconfig "github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"

	"github.com/kinesisgen/kinesisgen/fleettest"
	"github.com/kinesisgen/kinesisgen/runtime"
	"github.com/kinesisgen/kinesisgen/runtime/kinesistest/kinesismock"
	"github.com/kinesisgen/kinesisgen/runtime/lease"
)

type options struct {
	kinesis, dynamo  string
	stream, table    string
	owner, app       string
	failover, renew  time.Duration
	sync, checkpoint time.Duration
	shutdown, stats  time.Duration
	publishTimeout   time.Duration
	slow             time.Duration // each handling's duration (-slow)
	workers          int
	region           string
	verbose          bool
	perLease         bool
	fanout           string
	createShards     int
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
	fs.DurationVar(&o.publishTimeout, "publish-timeout", 5*time.Second, "deadline of each publish call")
	fs.IntVar(&o.workers, "workers", 8, "handler lanes (by key)")
	fs.BoolVar(&create, "create-table", false, "create the lease table when missing")
	fs.BoolVar(&o.verbose, "v", false, "debug logging")
	fs.DurationVar(&o.slow, "slow", 0, "how long each handling takes after its line is printed (ends early when its context ends)")
	fs.BoolVar(&o.perLease, "per-lease", false, "renew every lease and ask for one per pass (runtime.WithPerLeaseRenewal)")
	fs.StringVar(&o.fanout, "fanout", "", "read by enhanced fan-out through this stream consumer (runtime.FanOut)")
	fs.IntVar(&o.createShards, "create-if-missing", 0, "create a missing stream with this many shards, and a missing -fanout consumer (runtime.CreateIfMissing)")
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

	// The SDK's default configuration, as runtime.WithEndpoint would load
	// it, with the Kinesis read calls counted for the #stats lines.
	awsCfg, err := awsconfig.LoadDefaultConfig(context.Background(), awsconfig.WithRegion(o.region),
		awsconfig.WithCredentialsProvider(credentials.NewStaticCredentialsProvider("test", "test", "")))
	if err != nil {
		fmt.Fprintf(stderr, "worker: AWS config: %v\n", err)
		return 1
	}
	awsCfg.HTTPClient = awshttp.NewBuildableClient() // the SDK client's own default
	if o.fanout != "" {
		// kinesis-mock's SubscribeToShard answers are unreadable to the
		// SDK without it.
		awsCfg.HTTPClient = kinesismock.HTTPClient()
	}
	calls := &countingHTTP{next: awsCfg.HTTPClient}
	awsCfg.HTTPClient = calls

	opts := []runtime.Option{
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
	}
	if o.perLease {
		opts = append(opts, runtime.WithPerLeaseRenewal())
	}
	b := runtime.NewBrokerFromConfig(awsCfg, opts...)

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
		if o.slow > 0 {
			t := time.NewTimer(o.slow)
			defer t.Stop()
			select {
			case <-t.C:
			case <-ctx.Done(): // the lease was lost, or the worker stops
			}
		}
		return runtime.Ack()
	}
	subOpts := []runtime.SubscribeOption{runtime.Workers(o.workers), runtime.ByKey(), runtime.StartAt(runtime.Horizon()),
		runtime.HandlerName("fleettest.worker")}
	if o.fanout != "" {
		subOpts = append(subOpts, runtime.FanOut(o.fanout))
	}
	if o.createShards > 0 {
		subOpts = append(subOpts, runtime.CreateIfMissing(int32(o.createShards)))
	}
	if _, err := runtime.Subscribe(b, o.stream, handle, subOpts...); err != nil {
		fmt.Fprintf(stderr, "worker: subscribe: %v\n", err)
		return 1
	}

	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()

	printStats := func() {
		s := ddb.stats(o.owner)
		s.GetRecords, s.SubscribeToShard = calls.getRecords.Load(), calls.subscribes.Load()
		_ = out.print(s.String())
	}
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

	// Publish commands run until done or until the worker stops.
	var publishing tasks
	go readCommands(ctx, os.Stdin, stderr, func(c fleettest.PublishCommand) {
		publishing.start(func() {
			publish(ctx, runtime.NewPublisher[fleettest.Item](b, runtime.PublisherSpec{Stream: o.stream}), c, o, out)
		})
	})

	runCtx, cancelRun := context.WithCancel(ctx)
	defer cancelRun()
	status := 0
	done := make(chan error, 1)
	go func() { done <- b.Run(runCtx) }()
	select {
	case err = <-done:
	case berr := <-bad:
		fmt.Fprintf(stderr, "worker: %v\n", berr)
		status = 3
		cancelRun()
		err = <-done
	}
	stop()
	publishing.stopAndWait() // each call ends within -publish-timeout
	<-statsDone
	printStats()
	if err != nil {
		fmt.Fprintf(stderr, "worker: %v\n", err)
		return 1
	}
	log.Info("worker stopped")
	return status
}

// tasks runs goroutines that stopAndWait waits for; none starts after it.
type tasks struct {
	mu      sync.Mutex
	stopped bool
	wg      sync.WaitGroup
}

func (t *tasks) start(f func()) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.stopped {
		return
	}
	t.wg.Add(1)
	go func() {
		defer t.wg.Done()
		f()
	}()
}

func (t *tasks) stopAndWait() {
	t.mu.Lock()
	t.stopped = true
	t.mu.Unlock()
	t.wg.Wait()
}

// readCommands hands each publish command on r to start until r ends or
// ctx does. A read of standard input cannot be interrupted: the goroutine
// ends with the process.
func readCommands(ctx context.Context, r io.Reader, stderr io.Writer, start func(fleettest.PublishCommand)) {
	sc := bufio.NewScanner(r)
	for sc.Scan() && ctx.Err() == nil {
		c, err := fleettest.ParsePublishCommand(sc.Text())
		if err != nil {
			fmt.Fprintf(stderr, "worker: %v\n", err)
			continue
		}
		start(c)
	}
}

// publish runs one command: a goroutine per key publishes the key's records
// in index order, each until a call succeeds, so the key's records are in
// the stream in index order (an index may be stored twice: a call that
// failed may have written it).
func publish(ctx context.Context, p runtime.Publisher[fleettest.Item], c fleettest.PublishCommand, o options, out *lineWriter) {
	var keys sync.WaitGroup
	for k := c.First; k < c.Keys; k += c.Stride {
		keys.Add(1)
		go func() {
			defer keys.Done()
			key := fleettest.KeyName(k)
			for i := c.From; i < c.From+c.N; i++ {
				if i > c.From && !sleep(ctx, c.Pause) {
					return
				}
				for ctx.Err() == nil {
					callCtx, cancel := context.WithTimeout(ctx, o.publishTimeout)
					start := time.Now()
					err := p.Message(fleettest.Item{Key: key, Index: i}).PartitionKey(key).Publish(callCtx)
					cancel()
					line := fleettest.Published{Owner: o.owner, Key: key, Index: i, Took: time.Since(start)}
					if err == nil {
						_ = out.print(line.String())
						break
					}
					line.Err = err.Error()
					_ = out.print(line.String())
					sleep(ctx, 100*time.Millisecond) // as a caller would before trying again
				}
			}
		}()
	}
	keys.Wait()
	if ctx.Err() == nil {
		_ = out.print(fleettest.PublishDone(o.owner))
	}
}

// sleep waits d; it reports false when ctx ended first.
func sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
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

// countingHTTP counts the Kinesis calls that read records, by the
// operation the request names.
type countingHTTP struct {
	next                   aws.HTTPClient
	getRecords, subscribes atomic.Int64
}

func (c *countingHTTP) Do(req *http.Request) (*http.Response, error) {
	switch req.Header.Get("X-Amz-Target") {
	case "Kinesis_20131202.GetRecords":
		c.getRecords.Add(1)
	case "Kinesis_20131202.SubscribeToShard":
		c.subscribes.Add(1)
	}
	return c.next.Do(req)
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

func (c *countingDynamo) BatchGetItem(ctx context.Context, in *dynamodb.BatchGetItemInput, f ...func(*dynamodb.Options)) (*dynamodb.BatchGetItemOutput, error) {
	c.reads.Add(1)
	return c.client.BatchGetItem(ctx, in, f...)
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
