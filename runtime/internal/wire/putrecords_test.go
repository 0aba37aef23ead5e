package wire

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/kinesis"
	"github.com/aws/aws-sdk-go-v2/service/kinesis/types"
)

// capturedRequest is what the SDK sent for one PutRecords call.
type capturedRequest struct {
	header http.Header
	body   []byte
}

// captureClient is an SDK client whose endpoint records each request and
// answers every record with success.
func captureClient(t *testing.T) (*kinesis.Client, <-chan capturedRequest) {
	t.Helper()
	got := make(chan capturedRequest, 4)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		got <- capturedRequest{header: r.Header.Clone(), body: body}
		n := strings.Count(string(body), `"PartitionKey"`)
		w.Header().Set("Content-Type", "application/x-amz-json-1.1")
		_, _ = io.WriteString(w, `{"FailedRecordCount":0,"Records":[`+strings.TrimSuffix(strings.Repeat(`{"SequenceNumber":"1","ShardId":"shardId-000000000000"},`, n), ",")+`]}`)
	}))
	return testClient(t, srv), got
}

// testClient is an SDK client of srv, closed with the test, that makes one
// attempt per call.
func testClient(t testing.TB, srv *httptest.Server) *kinesis.Client {
	t.Cleanup(srv.Close)
	return kinesis.NewFromConfig(aws.Config{
		Region:      "us-east-1",
		Credentials: credentials.NewStaticCredentialsProvider("x", "x", ""),
		Retryer:     func() aws.Retryer { return aws.NopRetryer{} },
	}, func(o *kinesis.Options) { o.BaseEndpoint = aws.String(srv.URL) })
}

// TestSizedPutRecordsBodyIsTheSDKs checks that the batcher's PutRecords
// option sends byte for byte the body and headers the SDK would, for keys
// and data that need escaping and encoding.
func TestSizedPutRecordsBodyIsTheSDKs(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	client, got := captureClient(t)
	o := client.Options()
	if SizedPutRecords(&o); o.Protocol == nil {
		t.Fatal("the client has no protocol")
	} else if _, ok := o.Protocol.(putRecordsProtocol); !ok {
		t.Fatalf("the option left the client's %v protocol in place: the comparison would test nothing", o.Protocol.ID())
	}
	in := &kinesis.PutRecordsInput{
		StreamName: aws.String("orders"),
		StreamARN:  aws.String("arn:aws:kinesis:us-east-1:123456789012:stream/orders"),
		Records: []types.PutRecordsRequestEntry{
			{Data: []byte(`{"id":1}`), PartitionKey: aws.String("customer-1")},
			{Data: []byte{0xFE, 'k', 'g', 'E', 1, 0, 0xFF}, PartitionKey: aws.String("quote\" back\\slash\ttab\nnl\x01ctl é ✓")},
			{Data: []byte{}, PartitionKey: aws.String("k"), ExplicitHashKey: aws.String("12345")},
			{Data: bytes.Repeat([]byte("x"), 4097), PartitionKey: aws.String("big")},
		},
	}
	if _, err := client.PutRecords(ctx, in); err != nil {
		t.Fatalf("PutRecords with the SDK's serializer: %v", err)
	}
	want := <-got
	if _, err := client.PutRecords(ctx, in, SizedPutRecords); err != nil {
		t.Fatalf("PutRecords with SizedPutRecords: %v", err)
	}
	have := <-got
	if !bytes.Equal(have.body, want.body) {
		t.Errorf("body differs from the SDK's:\n got %s\nwant %s", have.body, want.body)
	}
	for _, h := range []string{"Content-Type", "X-Amz-Target", "Content-Length"} {
		if have.header.Get(h) != want.header.Get(h) {
			t.Errorf("header %s = %q, the SDK sends %q", h, have.header.Get(h), want.header.Get(h))
		}
	}
	if have.header.Get("Authorization") == "" {
		t.Error("the request is not signed")
	}
}

// TestSizedPutRecordsLeavesOtherInputsToTheSDK checks that an input with
// members wireBody does not write still goes through the SDK's serializer.
func TestSizedPutRecordsLeavesOtherInputsToTheSDK(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	client, got := captureClient(t)
	in := &kinesis.PutRecordsInput{
		StreamName: aws.String("orders"),
		StreamId:   aws.String("stream-id"),
		Records:    []types.PutRecordsRequestEntry{{Data: []byte("a"), PartitionKey: aws.String("k")}},
	}
	if _, err := client.PutRecords(ctx, in, SizedPutRecords); err != nil {
		t.Fatalf("PutRecords: %v", err)
	}
	if have := <-got; !bytes.Contains(have.body, []byte(`"StreamId":"stream-id"`)) {
		t.Errorf("StreamId was dropped from the body: %s", have.body)
	}
}
