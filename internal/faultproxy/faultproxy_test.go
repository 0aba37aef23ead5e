package faultproxy

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/aws/retry"
	awshttp "github.com/aws/aws-sdk-go-v2/aws/transport/http"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	dtypes "github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/aws/aws-sdk-go-v2/service/kinesis"
	ktypes "github.com/aws/aws-sdk-go-v2/service/kinesis/types"
	"github.com/aws/smithy-go"
)

// upstream is a stand-in for kinesalite and dynalite: it counts the
// requests that reach it per operation and answers each with a valid body.
type upstream struct {
	srv   *httptest.Server
	mu    sync.Mutex
	calls map[string]int
}

func newUpstream(t *testing.T) *upstream {
	u := &upstream{calls: make(map[string]int)}
	u.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, op := target(r)
		u.mu.Lock()
		u.calls[op]++
		u.mu.Unlock()
		body := map[string]string{
			"PutRecords":    `{"FailedRecordCount":0,"Records":[{"SequenceNumber":"49590338271490256608559692538361571095921575989136588898","ShardId":"shardId-000000000000"}]}`,
			"GetRecords":    `{"Records":[],"NextShardIterator":"it-2","MillisBehindLatest":0}`,
			"ListShards":    `{"Shards":[]}`,
			"UpdateItem":    `{}`,
			"DescribeTable": `{"Table":{"TableName":"leases","TableStatus":"ACTIVE"}}`,
		}[op]
		if body == "" {
			http.Error(w, "unexpected operation "+op, http.StatusBadRequest)
			return
		}
		w.Header().Set("Content-Type", "application/x-amz-json-1.1")
		_, _ = w.Write([]byte(body))
	}))
	t.Cleanup(u.srv.Close)
	return u
}

func (u *upstream) count(op string) int {
	u.mu.Lock()
	defer u.mu.Unlock()
	return u.calls[op]
}

func newProxy(t *testing.T, up *upstream, seed uint64) *Proxy {
	t.Helper()
	p, err := New(up.srv.URL, seed)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = p.Close() })
	return p
}

// Clients that make one attempt, so each fault shows as the caller sees it.
func kinesisClient(p *Proxy) *kinesis.Client {
	return kinesis.New(kinesis.Options{
		BaseEndpoint: aws.String(p.URL()),
		Region:       "us-east-1",
		Credentials:  credentials.NewStaticCredentialsProvider("x", "x", ""),
		Retryer:      aws.NopRetryer{},
	})
}

func dynamoClient(p *Proxy) *dynamodb.Client {
	return dynamodb.New(dynamodb.Options{
		BaseEndpoint: aws.String(p.URL()),
		Region:       "us-east-1",
		Credentials:  credentials.NewStaticCredentialsProvider("x", "x", ""),
		Retryer:      aws.NopRetryer{},
	})
}

func putRecords(ctx context.Context, c *kinesis.Client) error {
	_, err := c.PutRecords(ctx, &kinesis.PutRecordsInput{
		StreamName: aws.String("s"),
		Records:    []ktypes.PutRecordsRequestEntry{{Data: []byte("x"), PartitionKey: aws.String("k")}},
	})
	return err
}

func getRecords(ctx context.Context, c *kinesis.Client) error {
	_, err := c.GetRecords(ctx, &kinesis.GetRecordsInput{ShardIterator: aws.String("it-1")})
	return err
}

func updateItem(ctx context.Context, c *dynamodb.Client) error {
	_, err := c.UpdateItem(ctx, &dynamodb.UpdateItemInput{
		TableName:        aws.String("leases"),
		Key:              map[string]dtypes.AttributeValue{"leaseKey": &dtypes.AttributeValueMemberS{Value: "a"}},
		UpdateExpression: aws.String("SET leaseCounter = :c"),
		ExpressionAttributeValues: map[string]dtypes.AttributeValue{
			":c": &dtypes.AttributeValueMemberN{Value: "1"},
		},
	})
	return err
}

// The error answers are the typed errors the SDK's callers match on, with
// the real service's status, and the server never sees the request.
func TestErrorAnswersAreTheServicesTypedErrors(t *testing.T) {
	up := newUpstream(t)
	p := newProxy(t, up, 1)
	kc, dc := kinesisClient(p), dynamoClient(p)
	ctx := context.Background()
	for _, tc := range []struct {
		name   string
		rule   Rule
		call   func() error
		op     string
		status int
		code   string
		typed  func(error) bool
	}{
		{"kinesis put throttled", Rule{Ops: []string{"PutRecords"}, Fault: Throttle, Rate: 1},
			func() error { return putRecords(ctx, kc) }, "PutRecords", 400, "ProvisionedThroughputExceededException",
			func(err error) bool { var e *ktypes.ProvisionedThroughputExceededException; return errors.As(err, &e) }},
		{"kinesis list throttled", Rule{Ops: []string{"ListShards"}, Fault: Throttle, Rate: 1},
			func() error {
				_, err := kc.ListShards(ctx, &kinesis.ListShardsInput{StreamName: aws.String("s")})
				return err
			},
			"ListShards", 400, "LimitExceededException",
			func(err error) bool { var e *ktypes.LimitExceededException; return errors.As(err, &e) }},
		{"kinesis code override", Rule{Ops: []string{"GetRecords"}, Fault: Throttle, Rate: 1, Code: "KMSThrottlingException"},
			func() error { return getRecords(ctx, kc) }, "GetRecords", 400, "KMSThrottlingException",
			func(err error) bool { var e *ktypes.KMSThrottlingException; return errors.As(err, &e) }},
		{"kinesis internal failure", Rule{Ops: []string{"GetRecords"}, Fault: InternalFailure, Rate: 1},
			func() error { return getRecords(ctx, kc) }, "GetRecords", 500, "InternalFailure",
			func(err error) bool { return retry.NewStandard().IsErrorRetryable(err) }},
		{"kinesis expired iterator", Rule{Ops: []string{"GetRecords"}, Fault: ExpireIterator, Rate: 1},
			func() error { return getRecords(ctx, kc) }, "GetRecords", 400, "ExpiredIteratorException",
			func(err error) bool { var e *ktypes.ExpiredIteratorException; return errors.As(err, &e) }},
		{"dynamodb write throttled", Rule{Ops: []string{"UpdateItem"}, Fault: Throttle, Rate: 1},
			func() error { return updateItem(ctx, dc) }, "UpdateItem", 400, "ProvisionedThroughputExceededException",
			func(err error) bool { var e *dtypes.ProvisionedThroughputExceededException; return errors.As(err, &e) }},
		{"dynamodb control plane throttled", Rule{Ops: []string{"DescribeTable"}, Fault: Throttle, Rate: 1},
			func() error {
				_, err := dc.DescribeTable(ctx, &dynamodb.DescribeTableInput{TableName: aws.String("leases")})
				return err
			}, "DescribeTable", 400, "ThrottlingException",
			func(err error) bool { var e smithy.APIError; return errors.As(err, &e) }},
		{"dynamodb internal failure", Rule{Ops: []string{"UpdateItem"}, Fault: InternalFailure, Rate: 1},
			func() error { return updateItem(ctx, dc) }, "UpdateItem", 500, "InternalServerError",
			func(err error) bool { var e *dtypes.InternalServerError; return errors.As(err, &e) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if err := p.Set(tc.rule); err != nil {
				t.Fatal(err)
			}
			before := up.count(tc.op)
			err := tc.call()
			if err == nil {
				t.Fatalf("%s: no error, want %s", tc.op, tc.code)
			}
			var api smithy.APIError
			if !errors.As(err, &api) || api.ErrorCode() != tc.code {
				t.Errorf("error %v: want code %s", err, tc.code)
			}
			var re *awshttp.ResponseError
			if !errors.As(err, &re) || re.HTTPStatusCode() != tc.status {
				t.Errorf("error %v: want HTTP status %d", err, tc.status)
			}
			if !tc.typed(err) {
				t.Errorf("error %v (%T) is not the service's typed error", err, err)
			}
			if n := up.count(tc.op) - before; n != 0 {
				t.Errorf("the server saw %d %s requests, want 0", n, tc.op)
			}
		})
	}
	if err := p.Set(); err != nil {
		t.Fatal(err)
	}
	if err := putRecords(ctx, kc); err != nil {
		t.Errorf("with no rules: %v", err)
	}
}

// A reset before the server sees the request and one after it applied it
// look the same to the caller (a transport error the SDK retries); only the
// server's count tells them apart.
func TestResetsBeforeAndAfterTheServer(t *testing.T) {
	up := newUpstream(t)
	p := newProxy(t, up, 1)
	kc := kinesisClient(p)
	for _, tc := range []struct {
		fault  Fault
		server int
	}{{ResetBefore, 0}, {ResetAfter, 1}} {
		t.Run(tc.fault.String(), func(t *testing.T) {
			if err := p.Set(Rule{Ops: []string{"PutRecords"}, Fault: tc.fault, Rate: 1}); err != nil {
				t.Fatal(err)
			}
			before := up.count("PutRecords")
			err := putRecords(context.Background(), kc)
			if err == nil || !strings.Contains(err.Error(), "connection reset") {
				t.Errorf("PutRecords: %v, want a connection reset", err)
			}
			var api smithy.APIError
			if errors.As(err, &api) {
				t.Errorf("PutRecords: an API error %v, want a transport error", api)
			}
			if got := up.count("PutRecords") - before; got != tc.server {
				t.Errorf("the server applied %d PutRecords, want %d", got, tc.server)
			}
		})
	}
}

func TestLatencyDelaysAndCombines(t *testing.T) {
	up := newUpstream(t)
	p := newProxy(t, up, 1)
	kc := kinesisClient(p)
	const delay = 150 * time.Millisecond
	if err := p.Set(
		Rule{Fault: Latency, Rate: 1, Delay: delay},
		Rule{Ops: []string{"GetRecords"}, Fault: Throttle, Rate: 1},
	); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	if err := putRecords(context.Background(), kc); err != nil {
		t.Fatalf("PutRecords: %v", err)
	}
	if took := time.Since(start); took < delay {
		t.Errorf("PutRecords answered after %v, want at least %v", took, delay)
	}
	start = time.Now()
	var throttled *ktypes.ProvisionedThroughputExceededException
	if err := getRecords(context.Background(), kc); !errors.As(err, &throttled) {
		t.Errorf("GetRecords: %v, want the throttle after the delay", err)
	}
	if took := time.Since(start); took < delay {
		t.Errorf("GetRecords answered after %v, want at least %v", took, delay)
	}
}

// A black hole holds requests until their caller gives up; once its period
// has run out, new requests pass.
func TestBlackHoleHoldsRequestsForItsPeriod(t *testing.T) {
	up := newUpstream(t)
	p := newProxy(t, up, 1)
	dc := dynamoClient(p)
	const period = 600 * time.Millisecond
	if err := p.Set(Rule{Ops: []string{"UpdateItem"}, Fault: BlackHole, Rate: 1, For: period}); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	err := updateItem(ctx, dc)
	cancel()
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("UpdateItem in the black hole: %v, want the caller's deadline", err)
	}
	if n := up.count("UpdateItem"); n != 0 {
		t.Errorf("the server saw %d requests held by the black hole", n)
	}
	time.Sleep(period - time.Since(start) + 50*time.Millisecond)
	if err := updateItem(context.Background(), dc); err != nil {
		t.Errorf("UpdateItem after the black hole: %v", err)
	}
	if n := up.count("UpdateItem"); n != 1 {
		t.Errorf("the server saw %d requests after the black hole, want 1", n)
	}
}

// A caller with no deadline is held for good, until Close releases it.
func TestCloseReleasesHeldRequests(t *testing.T) {
	up := newUpstream(t)
	p := newProxy(t, up, 1)
	kc := kinesisClient(p)
	if err := p.Set(Rule{Fault: BlackHole, Rate: 1}); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- putRecords(context.Background(), kc) }()
	for p.Requests("PutRecords") == 0 {
		time.Sleep(5 * time.Millisecond)
	}
	select {
	case err := <-done:
		t.Fatalf("PutRecords answered in a black hole: %v", err)
	case <-time.After(100 * time.Millisecond):
	}
	if err := p.Close(); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-done:
		if err == nil {
			t.Error("PutRecords succeeded after the proxy closed")
		}
	case <-time.After(5 * time.Second):
		t.Fatal("PutRecords still held 5 s after Close")
	}
}

// outcomes sends n PutRecords one at a time and returns which ones failed.
func outcomes(t *testing.T, p *Proxy, n int) string {
	t.Helper()
	kc := kinesisClient(p)
	var b strings.Builder
	for range n {
		if putRecords(context.Background(), kc) != nil {
			b.WriteByte('x')
		} else {
			b.WriteByte('.')
		}
	}
	return b.String()
}

// The n-th request of an operation gets the same decision for the same seed
// and rules; the rate holds roughly and Max bounds the count exactly.
func TestDecisionsAreDeterministicAndBounded(t *testing.T) {
	up := newUpstream(t)
	rule := Rule{Ops: []string{"PutRecords"}, Fault: Throttle, Rate: 0.3}
	run := func(seed uint64, r Rule) (string, *Proxy) {
		p := newProxy(t, up, seed)
		if err := p.Set(r); err != nil {
			t.Fatal(err)
		}
		return outcomes(t, p, 200), p
	}
	a, pa := run(7, rule)
	b, _ := run(7, rule)
	if a != b {
		t.Errorf("seed 7 twice gave different decisions:\n%s\n%s", a, b)
	}
	if c, _ := run(8, rule); c == a {
		t.Errorf("seeds 7 and 8 gave the same decisions: %s", a)
	}
	failed := strings.Count(a, "x")
	if failed < 30 || failed > 90 {
		t.Errorf("%d of 200 throttled at rate 0.3, want about 60", failed)
	}
	if got := pa.Injected()[Injection{Op: "PutRecords", Fault: Throttle}]; got != int64(failed) {
		t.Errorf("Injected counts %d throttles, the caller saw %d", got, failed)
	}
	if got := pa.Requests("PutRecords"); got != 200 {
		t.Errorf("Requests = %d, want 200", got)
	}

	bounded := rule
	bounded.Max = 5
	if d, _ := run(7, bounded); strings.Count(d, "x") != 5 {
		t.Errorf("Max 5 injected %d faults: %s", strings.Count(d, "x"), d)
	}
}

func TestRuleEndsAfterItsPeriod(t *testing.T) {
	up := newUpstream(t)
	p := newProxy(t, up, 1)
	if err := p.Set(Rule{Fault: InternalFailure, Rate: 1, For: 100 * time.Millisecond}); err != nil {
		t.Fatal(err)
	}
	if got := outcomes(t, p, 1); got != "x" {
		t.Fatalf("within the period: %s, want a failure", got)
	}
	time.Sleep(150 * time.Millisecond)
	if got := outcomes(t, p, 3); got != "..." {
		t.Errorf("after the period: %s, want no failure", got)
	}
}

func TestRefusesBadRulesAndRemoteUpstreams(t *testing.T) {
	up := newUpstream(t)
	p := newProxy(t, up, 1)
	for name, r := range map[string]Rule{
		"zero rate":           {Fault: Throttle},
		"rate above one":      {Fault: Throttle, Rate: 1.5},
		"latency, no delay":   {Fault: Latency, Rate: 1},
		"unknown fault":       {Fault: faultCount, Rate: 1},
		"negative max":        {Fault: Throttle, Rate: 1, Max: -1},
		"negative for period": {Fault: Throttle, Rate: 1, For: -time.Second},
	} {
		if err := p.Set(r); err == nil {
			t.Errorf("%s: Set accepted %+v", name, r)
		}
	}
	for _, u := range []string{"http://192.0.2.1:4567", "https://127.0.0.1:4567", "http://example.invalid:80"} {
		if p, err := New(u, 1); err == nil {
			_ = p.Close()
			t.Errorf("New(%q) accepted a non-loopback or non-http upstream", u)
		}
	}
	if s := fmt.Sprint(BlackHole); s != "black-hole" {
		t.Errorf("BlackHole prints as %q", s)
	}
}
