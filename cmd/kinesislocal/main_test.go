package main

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/kinesis"
	"github.com/aws/aws-sdk-go-v2/service/kinesis/types"
	"github.com/aws/smithy-go"

	"github.com/kinesisgen/kinesisgen/runtime/kinesisapi"
	"github.com/kinesisgen/kinesisgen/runtime/kinesistest/conformance"
)

// Bad flags are refused before anything is served.
func TestBadUsage(t *testing.T) {
	for _, args := range [][]string{
		{"-stream", "orders:0"},
		{"-stream", ":2"},
		{"-stream", "orders:two"},
		{"-fault-code", "Nope"},
		{"-fault-rate", "1.5"},
		{"-retention", "0s"},
		{"-reshard-every", "-1s"},
		{"-cert", "x.pem"},
		{"extra"},
	} {
		var stdout, stderr bytes.Buffer
		if code := serve(t.Context(), args, &stdout, &stderr); code != 2 || stderr.Len() == 0 || stdout.Len() != 0 {
			t.Errorf("%q: exit %d, stdout %q, stderr %q; want 2 and a message", args, code, stdout.String(), stderr.String())
		}
	}
}

// The built command, started as a process on a free port, passes the
// conformance suite over the network (HTTP/2 with prior knowledge, as
// Endpoint.Client speaks it), and stops cleanly on SIGTERM.
func TestConformanceOfTheCommand(t *testing.T) {
	bin := build(t)
	plain := start(t, bin, "-subscribe-interval", "200ms", "-stream", "ready:2")
	throttled := start(t, bin, "-throttle", "-subscribe-interval", "200ms")
	conformance.Run(t, conformance.Harness{
		New:               func(*testing.T) kinesisapi.API { return client(plain.url) },
		Throttled:         func(*testing.T) kinesisapi.API { return client(throttled.url) },
		SubscribeInterval: 200 * time.Millisecond,
	})
	// -stream made its stream at start.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	sum, err := client(plain.url).DescribeStreamSummary(ctx, &kinesis.DescribeStreamSummaryInput{StreamName: aws.String("ready")})
	if err != nil || aws.ToInt32(sum.StreamDescriptionSummary.OpenShardCount) != 2 {
		t.Errorf("stream ready: %v, %v; want 2 open shards", sum, err)
	}
	plain.stop(t)
	throttled.stop(t)
}

// With -tls the command serves HTTPS with the certificate it writes to
// -cert, and a client trusting that file reaches it over HTTP/2.
func TestTLS(t *testing.T) {
	dir := t.TempDir()
	bin := build(t)
	cert := filepath.Join(dir, "cert.pem")
	p := start(t, bin, "-tls", "-cert", cert, "-stream", "secure:1")
	if !strings.HasPrefix(p.url, "https://") {
		t.Fatalf("endpoint %s, want https", p.url)
	}
	pemBytes, err := os.ReadFile(cert)
	if err != nil {
		t.Fatal(err)
	}
	roots := x509.NewCertPool()
	if !roots.AppendCertsFromPEM(pemBytes) {
		t.Fatalf("-cert wrote no certificate: %q", pemBytes)
	}
	var proto string
	tr := &http.Transport{TLSClientConfig: &tls.Config{RootCAs: roots}, ForceAttemptHTTP2: true}
	c := kinesis.New(kinesis.Options{
		Region: "us-east-1", BaseEndpoint: aws.String(p.url), Retryer: aws.NopRetryer{},
		Credentials: credentials.NewStaticCredentialsProvider("x", "x", ""),
		HTTPClient: &http.Client{Transport: roundTripFunc(func(r *http.Request) (*http.Response, error) {
			res, err := tr.RoundTrip(r)
			if err == nil {
				proto = res.Proto
			}
			return res, err
		})},
	})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := c.DescribeStreamSummary(ctx, &kinesis.DescribeStreamSummaryInput{StreamName: aws.String("secure")}); err != nil || proto != "HTTP/2.0" {
		t.Fatalf("DescribeStreamSummary over TLS: %v, %s", err, proto)
	}
	p.stop(t)
}

// -reshard-every splits and merges back in turn, and the records stay.
func TestReshardEvery(t *testing.T) {
	p := start(t, build(t), "-reshard-every", "100ms", "-stream", "moving:1")
	c := client(p.url)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if _, err := c.PutRecord(ctx, &kinesis.PutRecordInput{StreamName: aws.String("moving"), PartitionKey: aws.String("k"), Data: []byte("x")}); err != nil {
		t.Fatal(err)
	}
	for {
		out, err := c.ListShards(ctx, &kinesis.ListShardsInput{StreamName: aws.String("moving")})
		if err != nil {
			t.Fatal(err)
		}
		// 1 shard, split into 2, merged into 1, split into 2: 6 shards.
		if len(out.Shards) >= 6 {
			break
		}
		select {
		case <-ctx.Done():
			t.Fatalf("%d shards after 20 s, want a split, a merge and a split", len(out.Shards))
		case <-time.After(50 * time.Millisecond):
		}
	}
	p.stop(t)
}

// -fault-rate refuses reads and writes with -fault-code, not stream
// administration; -put-fault-rate fails records inside PutRecords.
func TestFaultFlags(t *testing.T) {
	bin := build(t)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()

	p := start(t, bin, "-fault-rate", "1", "-fault-code", "InternalFailure")
	c := client(p.url)
	if _, err := c.CreateStream(ctx, &kinesis.CreateStreamInput{StreamName: aws.String("f"), ShardCount: aws.Int32(1)}); err != nil {
		t.Fatalf("CreateStream under -fault-rate 1: %v", err)
	}
	_, err := c.PutRecord(ctx, &kinesis.PutRecordInput{StreamName: aws.String("f"), PartitionKey: aws.String("k"), Data: []byte("x")})
	var ae smithy.APIError
	if !errors.As(err, &ae) || ae.ErrorCode() != "InternalFailure" {
		t.Errorf("PutRecord under -fault-rate 1: %v, want InternalFailure", err)
	}
	p.stop(t)

	p = start(t, bin, "-put-fault-rate", "1", "-stream", "g:1")
	out, err := client(p.url).PutRecords(ctx, &kinesis.PutRecordsInput{StreamName: aws.String("g"), Records: []types.PutRecordsRequestEntry{
		{PartitionKey: aws.String("a"), Data: []byte("1")}, {PartitionKey: aws.String("b"), Data: []byte("2")},
	}})
	if err != nil || aws.ToInt32(out.FailedRecordCount) != 2 || aws.ToString(out.Records[0].ErrorCode) != "ProvisionedThroughputExceededException" {
		t.Errorf("PutRecords under -put-fault-rate 1: %+v, %v; want both records refused as throttled", out, err)
	}
	p.stop(t)
}

// -cut-subscriptions drops open subscriptions mid-event: the subscriber's
// stream ends long before its lifetime. (The SDK's reader alone takes a
// cut for a clean end; the runtime's wire options tell them apart, as
// kinesistest's own tests check.)
func TestCutSubscriptions(t *testing.T) {
	p := start(t, build(t), "-cut-subscriptions", "300ms", "-stream", "cut:1")
	c := client(p.url)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	sum, err := c.DescribeStreamSummary(ctx, &kinesis.DescribeStreamSummaryInput{StreamName: aws.String("cut")})
	if err != nil {
		t.Fatal(err)
	}
	reg, err := c.RegisterStreamConsumer(ctx, &kinesis.RegisterStreamConsumerInput{StreamARN: sum.StreamDescriptionSummary.StreamARN, ConsumerName: aws.String("c")})
	if err != nil {
		t.Fatal(err)
	}
	sub, err := c.SubscribeToShard(ctx, &kinesis.SubscribeToShardInput{
		ConsumerARN: reg.Consumer.ConsumerARN, ShardId: aws.String("shardId-000000000000"),
		StartingPosition: &types.StartingPosition{Type: types.ShardIteratorTypeTrimHorizon},
	})
	if err != nil {
		t.Fatal(err)
	}
	defer sub.GetStream().Close()
	start := time.Now()
	for range sub.GetStream().Events() {
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("the subscription ended after %v; want a cut within a second or so", d)
	}
	p.stop(t)
}

var (
	buildOnce sync.Once
	built     string
	buildErr  error
)

// build builds the command once for the package's tests.
func build(t *testing.T) string {
	t.Helper()
	buildOnce.Do(func() {
		dir, err := os.MkdirTemp("", "kinesislocal-test")
		if err != nil {
			buildErr = err
			return
		}
		built = filepath.Join(dir, "kinesislocal")
		if out, err := exec.Command("go", "build", "-o", built, ".").CombinedOutput(); err != nil {
			buildErr = fmt.Errorf("go build: %v\n%s", err, out)
		}
	})
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	return built
}

func TestMain(m *testing.M) {
	code := m.Run()
	if built != "" {
		os.RemoveAll(filepath.Dir(built))
	}
	os.Exit(code)
}

type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

type process struct {
	cmd    *exec.Cmd
	url    string
	stdout *bytes.Buffer
	done   chan error
}

// start runs the command on a free loopback port and reads its endpoint
// from the first line it prints.
func start(t *testing.T, bin string, args ...string) *process {
	t.Helper()
	cmd := exec.Command(bin, append([]string{"-addr", "127.0.0.1:0"}, args...)...)
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	p := &process{cmd: cmd, stdout: new(bytes.Buffer), done: make(chan error, 1)}
	t.Cleanup(func() {
		if cmd.ProcessState == nil {
			_ = cmd.Process.Kill()
		}
	})
	first := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(out)
		for n := 0; sc.Scan(); n++ {
			if n == 0 {
				first <- sc.Text()
			}
			p.stdout.WriteString(sc.Text() + "\n")
		}
		p.done <- cmd.Wait()
	}()
	select {
	case line := <-first:
		m := regexp.MustCompile(`serving Kinesis on (https?://127\.0\.0\.1:[0-9]+)$`).FindStringSubmatch(line)
		if m == nil {
			t.Fatalf("first line %q names no endpoint", line)
		}
		p.url = m[1]
	case <-time.After(30 * time.Second):
		t.Fatal("kinesislocal printed no endpoint within 30 s")
	}
	return p
}

// stop sends SIGTERM and wants a clean exit within ten seconds.
func (p *process) stop(t *testing.T) {
	t.Helper()
	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-p.done:
		if err != nil || !strings.HasSuffix(p.stdout.String(), "kinesislocal: stopped\n") {
			t.Errorf("after SIGTERM: %v; stdout:\n%s", err, p.stdout.String())
		}
	case <-time.After(10 * time.Second):
		t.Errorf("kinesislocal did not stop within 10 s of SIGTERM")
	}
}

func client(url string) *kinesis.Client {
	var protocols http.Protocols
	protocols.SetUnencryptedHTTP2(true)
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.Protocols = &protocols
	return kinesis.New(kinesis.Options{
		Region:       "us-east-1",
		BaseEndpoint: aws.String(url),
		Credentials:  credentials.NewStaticCredentialsProvider("x", "x", ""),
		HTTPClient:   &http.Client{Transport: tr},
		Retryer:      aws.NopRetryer{},
	})
}
