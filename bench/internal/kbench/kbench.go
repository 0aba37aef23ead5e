// Package kbench holds what the kinesalite benchmark commands share: an AWS
// configuration whose HTTP client counts GetRecords calls, stream filling, the
// benchmark message and medians. Stream creation and CPU accounting are the
// main module's internal/bench/benchkit, shared with publishbench.
package kbench

import (
	"context"
	"encoding/json"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	awshttp "github.com/aws/aws-sdk-go-v2/aws/transport/http"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/kinesis"

	"github.com/kinesisgen/kinesisgen/internal/bench/benchkit"
)

// Event is the message every benchmark publishes and decodes.
type Event struct {
	ID      int    `json:"id"`
	Kind    string `json:"kind"`
	Account string `json:"account"`
	Body    string `json:"body"`
}

// Payload returns the JSON of event id, its body padded so that the whole
// record is about size bytes (ids up to 6 digits).
func Payload(id, size int) []byte {
	e := Event{ID: id, Kind: "order.created", Account: "acct-0042"}
	empty, _ := json.Marshal(Event{ID: 100000, Kind: e.Kind, Account: e.Account})
	e.Body = strings.Repeat("x", max(0, size-len(empty)))
	b, err := json.Marshal(e)
	if err != nil {
		panic(err)
	}
	return b
}

// Counter counts the calls made through an HTTP client, by operation
// (Kinesis GetRecords, DynamoDB, all), and stamps the first GetRecords sent:
// where a drain's start-up ends and its steady state begins, the same point
// for every consumer.
type Counter struct {
	getRecords atomic.Int64
	putRecords atomic.Int64
	dynamoDB   atomic.Int64
	all        atomic.Int64
	once       sync.Once
	firstAt    time.Time
	firstCPU   time.Duration
}

// FirstGetRecords is when the first GetRecords was sent and the process's
// CPU time then (zero before it). Read it only after a record was read:
// the read's answer orders it after the stamp.
func (c *Counter) FirstGetRecords() (time.Time, time.Duration) { return c.firstAt, c.firstCPU }

// GetRecords is the number of GetRecords calls so far.
func (c *Counter) GetRecords() int64 { return c.getRecords.Load() }

// DynamoDB is the number of DynamoDB calls (lease store) so far.
func (c *Counter) DynamoDB() int64 { return c.dynamoDB.Load() }

// PutRecords is the number of PutRecords calls so far.
func (c *Counter) PutRecords() int64 { return c.putRecords.Load() }

// Calls is the number of calls of any kind so far.
func (c *Counter) Calls() int64 { return c.all.Load() }

// countingClient sees every request the SDK sends; the Kinesis and DynamoDB
// JSON protocols name the operation in the X-Amz-Target header.
type countingClient struct {
	next aws.HTTPClient
	c    *Counter
}

func (h countingClient) Do(r *http.Request) (*http.Response, error) {
	h.c.all.Add(1)
	switch target := r.Header.Get("X-Amz-Target"); {
	case strings.HasSuffix(target, ".GetRecords"):
		h.c.once.Do(func() { h.c.firstAt, h.c.firstCPU = time.Now(), benchkit.CPUTime() })
		h.c.getRecords.Add(1)
	case strings.HasSuffix(target, ".PutRecords"):
		h.c.putRecords.Add(1)
	case strings.HasPrefix(target, "DynamoDB_"):
		h.c.dynamoDB.Add(1)
	}
	// A cancelled call aborts its request; scripts/local-server.js keeps
	// kinesalite serving through that, so nothing is special-cased here.
	return h.next.Do(r)
}

// Config is a fresh AWS configuration for a local server: its own HTTP
// client (so no consumer inherits another's warm connections) that counts
// calls into the returned Counter. Every consumer in a comparison gets one
// built the same way.
func Config() (aws.Config, *Counter) {
	c := &Counter{}
	return aws.Config{
		Region:      "us-east-1",
		Credentials: credentials.NewStaticCredentialsProvider("x", "x", ""),
		HTTPClient:  countingClient{next: awshttp.NewBuildableClient(), c: c},
	}, c
}

// Client is an SDK Kinesis client on cfg, pointed at endpoint.
func Client(cfg aws.Config, endpoint string) *kinesis.Client {
	return kinesis.NewFromConfig(cfg, func(o *kinesis.Options) { o.BaseEndpoint = aws.String(endpoint) })
}

// Keys is the number of distinct partition keys the filled records use.
const Keys = 1000

// Key is the partition key of record i.
func Key(i int) string { return "customer-" + strconv.Itoa(i%Keys) }

// Fill puts n records of about size bytes into stream with PutRecords of 500
// from 4 goroutines, resending the entries a call refused.
func Fill(ctx context.Context, client *kinesis.Client, stream string, n, size int) error {
	return benchkit.PutBatches(ctx, client, stream, n, 4, func(i int) ([]byte, string) { return Payload(i, size), Key(i) })
}

// Median of xs (the mean of the middle two for an even count); 0 when empty.
func Median(xs []float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	m := len(s) / 2
	if len(s)%2 == 1 {
		return s[m]
	}
	return (s[m-1] + s[m]) / 2
}

// Percentile is the p-th percentile (0..100, nearest rank) of ds.
func Percentile(ds []time.Duration, p float64) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	i := int(float64(len(s))*p/100+0.999999) - 1
	return s[min(max(i, 0), len(s)-1)]
}

// Fmt formats a float list compactly, for the per-run columns.
func Fmt(xs []float64, prec int) string {
	parts := make([]string, len(xs))
	for i, x := range xs {
		parts[i] = strconv.FormatFloat(x, 'f', prec, 64)
	}
	return strings.Join(parts, " ")
}

// PutUnits is the PUT payload units Kinesis bills for one record of size
// bytes (data plus partition key): 25 KiB each, rounded up per record.
func PutUnits(size int) int { return (size + 25<<10 - 1) / (25 << 10) }
