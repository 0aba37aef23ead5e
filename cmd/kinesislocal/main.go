// Command kinesislocal serves the in-process Kinesis of kinesisgen
// (runtime/kinesistest) over the real wire, for any Kinesis client: the Go
// SDK, the AWS CLI, boto3, the Java SDK and the KCL.
//
//	go run github.com/kinesisgen/kinesisgen/cmd/kinesislocal -stream orders:2
//
// It listens on 127.0.0.1:4567 unless -addr says otherwise, speaks the
// service's JSON protocol over plain HTTP (HTTP/1.1, and HTTP/2 with prior
// knowledge, h2c), serves stream consumers and SubscribeToShard as an event
// stream, and takes any credentials. Point a client at it with its endpoint
// URL (AWS_ENDPOINT_URL_KINESIS=http://127.0.0.1:4567, or --endpoint-url
// for the AWS CLI). With -tls it serves HTTPS instead, with a fresh
// self-signed certificate written to -cert FILE for clients to trust
// (AWS_CA_BUNDLE=FILE), for clients that speak HTTP/2 only over TLS. The
// Java SDK's CBOR is understood for every call but SubscribeToShard, whose
// event stream is JSON only: a Java client that subscribes (the KCL with
// enhanced fan-out) sets AWS_CBOR_DISABLE=1 (or
// -Dcom.amazonaws.sdk.disableCbor=true).
//
// Streams are ACTIVE at once, and SplitShard, MergeShards and
// UpdateShardCount reshard at once; -reshard-every reshards on its own. Everything is held in memory and gone when the command stops
// (Ctrl-C or SIGTERM: open subscriptions end cleanly first).
//
// Leases: a broker's default lease store is in its own process's memory, so
// several processes sharing streams need a shared DynamoDB: run dynalite
// beside it (npx dynalite --port 4568) and give each broker
// runtime.WithLeaseStore(lease.NewDynamoDB(client, table)) with a DynamoDB
// client for that endpoint.
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"math/big"
	"math/rand/v2"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/kinesis"
	"github.com/aws/aws-sdk-go-v2/service/kinesis/types"
	"github.com/aws/smithy-go"

	"github.com/kinesisgen/kinesisgen/runtime/kinesistest"
)

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

// run is the whole command; it returns the exit code: 0 stopped by a
// signal, 1 could not serve, 2 bad usage.
func run(args []string, stdout, stderr io.Writer) int {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	return serve(ctx, args, stdout, stderr)
}

// streamSpecs collects -stream NAME:SHARDS (repeatable, or comma-separated).
type streamSpecs []streamSpec

type streamSpec struct {
	name   string
	shards int
}

func (s *streamSpecs) String() string { return "" }

func (s *streamSpecs) Set(v string) error {
	for _, one := range strings.Split(v, ",") {
		name, n, ok := strings.Cut(strings.TrimSpace(one), ":")
		shards := 1
		if ok {
			var err error
			if shards, err = strconv.Atoi(n); err != nil || shards < 1 {
				return fmt.Errorf("%q: want NAME:SHARDS with SHARDS a positive number", one)
			}
		}
		if name == "" {
			return fmt.Errorf("%q: want NAME or NAME:SHARDS", one)
		}
		*s = append(*s, streamSpec{name, shards})
	}
	return nil
}

// faultCodes are the errors -fault-rate can answer with.
var faultCodes = map[string]func() error{
	"ProvisionedThroughputExceededException": func() error {
		return &types.ProvisionedThroughputExceededException{Message: ptr("Rate exceeded for shard (kinesislocal -fault-rate).")}
	},
	"InternalFailure": func() error {
		return &smithy.GenericAPIError{Code: "InternalFailure", Message: "kinesislocal -fault-rate", Fault: smithy.FaultServer}
	},
	"LimitExceededException": func() error {
		return &types.LimitExceededException{Message: ptr("Rate exceeded (kinesislocal -fault-rate).")}
	},
}

func ptr(s string) *string { return &s }

// dataOps are the calls -fault-rate fails: reads and writes, not the
// stream and consumer administration a test sets up with.
var dataOps = map[kinesistest.Op]bool{
	kinesistest.OpPutRecord: true, kinesistest.OpPutRecords: true, kinesistest.OpGetShardIterator: true,
	kinesistest.OpGetRecords: true, kinesistest.OpListShards: true, kinesistest.OpSubscribeToShard: true,
}

func serve(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fl := flag.NewFlagSet("kinesislocal", flag.ContinueOnError)
	fl.SetOutput(stderr)
	fl.Usage = func() {
		fmt.Fprintln(stderr, "usage: kinesislocal [flags]\n\nServes an in-memory Kinesis Data Streams on HTTP (JSON protocol, HTTP/1.1 and h2c,\nSubscribeToShard included) until Ctrl-C or SIGTERM. Flags:")
		fl.PrintDefaults()
	}
	var streams streamSpecs
	addr := fl.String("addr", "127.0.0.1:4567", "listen on this address (loopback unless you mean otherwise: 0.0.0.0:4567 serves every interface)")
	fl.Var(&streams, "stream", "create the stream NAME with SHARDS shards at start: NAME:SHARDS (repeatable, or comma-separated)")
	throttle := fl.Bool("throttle", false, "enforce the service's per-shard limits (1 MiB or 1,000 records a second written, 5 GetRecords a second, 2 MiB a second to a subscription): ProvisionedThroughputExceededException")
	retention := fl.Duration("retention", 24*time.Hour, "keep records this long")
	shardLimit := fl.Int("shard-limit", 0, "the open-shard limit per stream (0: the default, 1000); CreateStream and SplitShard beyond it fail with LimitExceededException")
	subLifetime := fl.Duration("subscription-lifetime", 5*time.Minute, "end a SubscribeToShard subscription after this long, as the service does")
	subInterval := fl.Duration("subscribe-interval", time.Second, "the least time between two SubscribeToShard calls of one consumer and shard (LimitExceededException sooner)")
	activation := fl.Duration("consumer-activation", 0, "keep a newly registered stream consumer CREATING this long")
	faultRate := fl.Float64("fault-rate", 0, "answer this fraction (0..1) of PutRecord(s), GetShardIterator, GetRecords, ListShards and SubscribeToShard calls with -fault-code")
	faultCode := fl.String("fault-code", "ProvisionedThroughputExceededException", "the error of -fault-rate: ProvisionedThroughputExceededException, InternalFailure or LimitExceededException")
	putFaultRate := fl.Float64("put-fault-rate", 0, "fail this fraction (0..1) of the records put, each with ProvisionedThroughputExceededException (PutRecords: a partial failure)")
	useTLS := fl.Bool("tls", false, "serve HTTPS (HTTP/2 by ALPN, and HTTP/1.1) with a fresh self-signed certificate, for clients that speak HTTP/2 only over TLS (the Java SDK's SubscribeToShard, the KCL)")
	certFile := fl.String("cert", "", "with -tls: write the certificate (PEM) to this file, for clients to trust (AWS_CA_BUNDLE=FILE); default: a file in the temporary directory")
	reshardEvery := fl.Duration("reshard-every", 0, "every this long, reshard every stream: split its widest open shard in half, next time merge the narrowest adjacent pair back, and so on (0: never)")
	cutEvery := fl.Duration("cut-subscriptions", 0, "every this long, drop the connection of every open subscription in the middle of an event (0: never)")
	if err := fl.Parse(args); err != nil {
		if err == flag.ErrHelp {
			return 0
		}
		return 2
	}
	if fl.NArg() > 0 {
		fmt.Fprintf(stderr, "kinesislocal: unexpected arguments %q\n", fl.Args())
		return 2
	}
	newFault, ok := faultCodes[*faultCode]
	switch {
	case !ok:
		fmt.Fprintf(stderr, "kinesislocal: -fault-code %s: want ProvisionedThroughputExceededException, InternalFailure or LimitExceededException\n", *faultCode)
		return 2
	case *faultRate < 0 || *faultRate > 1 || *putFaultRate < 0 || *putFaultRate > 1:
		fmt.Fprintln(stderr, "kinesislocal: -fault-rate and -put-fault-rate are fractions between 0 and 1")
		return 2
	case *certFile != "" && !*useTLS:
		fmt.Fprintln(stderr, "kinesislocal: -cert names the certificate file of -tls")
		return 2
	case *retention <= 0 || *subLifetime <= 0 || *subInterval < 0 || *activation < 0 || *cutEvery < 0 || *reshardEvery < 0 || *shardLimit < 0:
		fmt.Fprintln(stderr, "kinesislocal: -retention and -subscription-lifetime must be positive; the other durations and -shard-limit not negative")
		return 2
	}

	opts := []kinesistest.Option{
		kinesistest.WithRetention(*retention),
		kinesistest.WithSubscriptionLifetime(*subLifetime),
		kinesistest.WithSubscribeInterval(*subInterval),
		kinesistest.WithConsumerActivation(*activation),
	}
	if *throttle {
		opts = append(opts, kinesistest.WithThrottling())
	}
	if *shardLimit > 0 {
		opts = append(opts, kinesistest.WithShardLimit(*shardLimit))
	}
	backend := kinesistest.New(opts...)
	for _, s := range streams {
		if err := backend.AddStream(s.name, s.shards); err != nil {
			fmt.Fprintf(stderr, "kinesislocal: -stream %s:%d: %v\n", s.name, s.shards, err)
			return 2
		}
	}
	if rate := *faultRate; rate > 0 {
		backend.InjectCallFault(func(c kinesistest.Call) error {
			if dataOps[c.Op] && rand.Float64() < rate {
				return newFault()
			}
			return nil
		})
	}
	if rate := *putFaultRate; rate > 0 {
		backend.InjectPutFault(func(string, string) error {
			if rand.Float64() < rate {
				return &types.ProvisionedThroughputExceededException{Message: ptr("Rate exceeded for shard (kinesislocal -put-fault-rate).")}
			}
			return nil
		})
	}

	listen := kinesistest.Listen
	if *useTLS {
		listen = kinesistest.ListenTLS
	}
	e, err := listen(backend, *addr)
	if err != nil {
		fmt.Fprintf(stderr, "kinesislocal: %v\n", err)
		return 1
	}
	if *useTLS {
		if *certFile == "" {
			*certFile = filepath.Join(os.TempDir(), fmt.Sprintf("kinesislocal-%d.pem", os.Getpid()))
			defer os.Remove(*certFile)
		}
		if err := os.WriteFile(*certFile, e.CertificatePEM(), 0o644); err != nil {
			fmt.Fprintf(stderr, "kinesislocal: -cert: %v\n", err)
			_ = e.Close()
			return 1
		}
	}
	fmt.Fprintf(stdout, "kinesislocal: serving Kinesis on %s\n", e.URL())
	for _, s := range streams {
		fmt.Fprintf(stdout, "  stream %s: %d shards\n", s.name, s.shards)
	}
	fmt.Fprintf(stdout, "  clients: AWS_ENDPOINT_URL_KINESIS=%s, any region and credentials (AWS CLI: --endpoint-url %s)\n", e.URL(), e.URL())
	if *useTLS {
		fmt.Fprintf(stdout, "  certificate: %s (AWS_CA_BUNDLE=%s; AWS CLI: --ca-bundle %s)\n", *certFile, *certFile, *certFile)
	}
	fmt.Fprintln(stdout, "  Java SDK: CBOR served, but SubscribeToShard (the KCL's fan-out) needs AWS_CBOR_DISABLE=1")
	fmt.Fprintln(stdout, "  leases shared between processes: npx dynalite --port 4568")

	if *cutEvery > 0 {
		go func() {
			t := time.NewTicker(*cutEvery)
			defer t.Stop()
			for {
				select {
				case <-ctx.Done():
					return
				case <-t.C:
					for _, name := range backend.Streams() {
						backend.CutSubscriptions(name, "")
					}
				}
			}
		}()
	}

	if *reshardEvery > 0 {
		go reshardPeriodically(ctx, backend, *reshardEvery, stderr)
	}

	<-ctx.Done()
	if err := e.Close(); err != nil {
		fmt.Fprintf(stderr, "kinesislocal: stopping: %v\n", err)
	}
	fmt.Fprintln(stdout, "kinesislocal: stopped")
	return 0
}

// reshardPeriodically splits and merges shards of every stream in turn, so that
// readers meet parents and children while they run.
func reshardPeriodically(ctx context.Context, s *kinesistest.Server, every time.Duration, stderr io.Writer) {
	t := time.NewTicker(every)
	defer t.Stop()
	split := true
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		for _, name := range s.Streams() {
			if err := reshardOnce(ctx, s, name, split); err != nil && ctx.Err() == nil {
				fmt.Fprintf(stderr, "kinesislocal: -reshard-every: stream %s: %v\n", name, err)
			}
		}
		split = !split
	}
}

func reshardOnce(ctx context.Context, s *kinesistest.Server, stream string, split bool) error {
	out, err := s.ListShards(ctx, &kinesis.ListShardsInput{StreamName: &stream, ShardFilter: &types.ShardFilter{Type: types.ShardFilterTypeAtLatest}})
	if err != nil {
		return err
	}
	open := out.Shards
	width := func(sh types.Shard) *big.Int {
		lo, _ := new(big.Int).SetString(*sh.HashKeyRange.StartingHashKey, 10)
		hi, _ := new(big.Int).SetString(*sh.HashKeyRange.EndingHashKey, 10)
		return hi.Sub(hi, lo)
	}
	slices.SortFunc(open, func(a, b types.Shard) int {
		lo, _ := new(big.Int).SetString(*a.HashKeyRange.StartingHashKey, 10)
		hi, _ := new(big.Int).SetString(*b.HashKeyRange.StartingHashKey, 10)
		return lo.Cmp(hi)
	})
	if split || len(open) < 2 {
		widest := open[0]
		for _, sh := range open[1:] {
			if width(sh).Cmp(width(widest)) > 0 {
				widest = sh
			}
		}
		return s.SplitInHalf(stream, *widest.ShardId)
	}
	best := 0
	for i := 1; i+1 < len(open); i++ {
		if new(big.Int).Add(width(open[i]), width(open[i+1])).Cmp(new(big.Int).Add(width(open[best]), width(open[best+1]))) < 0 {
			best = i
		}
	}
	_, err = s.MergeShards(ctx, &kinesis.MergeShardsInput{StreamName: &stream, ShardToMerge: open[best].ShardId, AdjacentShardToMerge: open[best+1].ShardId})
	return err
}
