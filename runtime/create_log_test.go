package runtime_test

import (
	"context"
	"encoding/json"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/kinesis"
	"github.com/aws/aws-sdk-go-v2/service/kinesis/types"

	"github.com/kinesisgen/kinesisgen/runtime"
	"github.com/kinesisgen/kinesisgen/runtime/kinesisapi"
	"github.com/kinesisgen/kinesisgen/runtime/kinesistest"
)

// logLines returns the JSON log lines whose msg is msg, decoded.
func logLines(e *env, msg string) []map[string]any {
	var out []map[string]any
	for l := range strings.SplitSeq(e.logs.String(), "\n") {
		var m map[string]any
		if json.Unmarshal([]byte(l), &m) == nil && m["msg"] == msg {
			out = append(out, m)
		}
	}
	return out
}

// Issue 32 item 8: the dead-letter stream's creation is logged under its
// own name and shard count, the main stream's under its own.
func TestStreamCreatedIsLoggedUnderTheStreamCreated(t *testing.T) {
	e := newEnv(t)
	orders, dlq := e.stream("orders"), e.stream("orders-dlq")
	b := e.broker()
	h, _ := collect()
	mustSubscribe(e, b, orders, h, runtime.CreateIfMissing(3), runtime.DeadLetter(dlq))
	e.connect(b)
	got := map[string]float64{}
	for _, l := range logLines(e, "stream created") {
		s, _ := l["stream"].(string)
		if _, dup := got[s]; dup {
			t.Errorf("stream %s logged as created twice", s)
		}
		got[s], _ = l["shards"].(float64)
	}
	if len(got) != 2 || got[orders] != 3 || got[dlq] != 1 {
		t.Fatalf("stream created lines: %v (stream: shards), want %s: 3 and %s: 1; logs:\n%s", got, orders, dlq, e.logs.String())
	}
}

// missingOnce answers the first DescribeStreamSummary of stream with
// ResourceNotFound, as a second instance sees a stream that a first one is
// creating at that moment: its own CreateStream then finds it in use.
type missingOnce struct {
	kinesisapi.API
	stream string
	done   atomic.Bool
}

func (m *missingOnce) DescribeStreamSummary(ctx context.Context, in *kinesis.DescribeStreamSummaryInput, opts ...func(*kinesis.Options)) (*kinesis.DescribeStreamSummaryOutput, error) {
	if aws.ToString(in.StreamName) == m.stream && m.done.CompareAndSwap(false, true) {
		return nil, &types.ResourceNotFoundException{Message: aws.String("not found")}
	}
	return m.API.DescribeStreamSummary(ctx, in, opts...)
}

// Two instances starting together: the one whose CreateStream finds the
// stream in use does not log "stream created".
func TestStreamCreatedByAnotherInstanceIsNotLoggedAsCreated(t *testing.T) {
	srv := kinesistest.New()
	e0 := newEnvWith(t, srv)
	orders := e0.newStream("orders", 1)
	e := newEnvWith(t, &missingOnce{API: srv, stream: orders})
	b := e.broker()
	h, _ := collect()
	mustSubscribe(e, b, orders, h, runtime.CreateIfMissing(1))
	e.connect(b)
	if ls := logLines(e, "stream created"); len(ls) != 0 {
		t.Fatalf("logged %v for a stream another instance created", ls)
	}
	if ls := logLines(e, "stream created by another instance"); len(ls) != 1 || ls[0]["stream"] != orders {
		t.Fatalf("want one line saying another instance created %s; logs:\n%s", orders, e.logs.String())
	}
}
