package kinesislambda_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-lambda-go/lambda"

	"github.com/kinesisgen/kinesisgen/runtime"
	"github.com/kinesisgen/kinesisgen/runtime/kinesislambda"
	"github.com/kinesisgen/kinesisgen/runtime/kinesistest"
)

// childEnv makes the test binary a Lambda function (see TestMain):
// lambda.Start exits the process when its loop ends, so it runs apart.
const childEnv = "KINESISLAMBDA_TEST_FUNCTION"

func TestMain(m *testing.M) {
	if os.Getenv(childEnv) == "1" {
		runFunction()
		return
	}
	os.Exit(m.Run())
}

// runFunction is the function: an in-process stream "orders" and its
// subscriber, started by aws-lambda-go's own loop. The subscriber fails
// (a reply it cannot publish, with retries=0 and no dead-letter stream
// reachable) nothing; an order with n 99 panics, which is a retry.
func runFunction() {
	srv := kinesistest.New()
	_ = srv.AddStream("orders", 1)
	b := srv.NewBroker()
	if _, err := runtime.Subscribe(b, "orders", func(_ context.Context, o order, d runtime.Delivery) runtime.Outcome {
		if o.N == 99 && d.Attempt == 1 {
			panic("ninety-nine")
		}
		return runtime.Ack()
	}, runtime.Workers(4), runtime.ByKey()); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	lambda.Start(kinesislambda.Handler(b))
}

// runtimeAPI is a Lambda Runtime API on loopback: it hands out the queued
// events one by one and records what the function answers.
type runtimeAPI struct {
	mu      sync.Mutex
	queue   []string
	answers map[string]answer // request id -> answer
}

type answer struct {
	err  bool // posted to /error
	body string
}

func (a *runtimeAPI) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	const prefix = "/2018-06-01/runtime/invocation/"
	path, ok := strings.CutPrefix(r.URL.Path, prefix)
	if !ok {
		http.NotFound(w, r)
		return
	}
	if path == "next" && r.Method == http.MethodGet {
		a.mu.Lock()
		if len(a.queue) == 0 {
			a.mu.Unlock()
			// Nothing more: the loop ends, and lambda.Start exits.
			http.Error(w, "no more invocations", http.StatusGone)
			return
		}
		ev := a.queue[0]
		a.queue = a.queue[1:]
		id := fmt.Sprintf("req-%d", len(a.queue))
		a.mu.Unlock()
		w.Header().Set("Lambda-Runtime-Aws-Request-Id", id)
		w.Header().Set("Lambda-Runtime-Deadline-Ms", fmt.Sprint(time.Now().Add(10*time.Second).UnixMilli()))
		w.Header().Set("Lambda-Runtime-Invoked-Function-Arn", "arn:aws:lambda:us-east-1:000000000000:function:orders")
		_, _ = io.WriteString(w, ev)
		return
	}
	id, kind, ok := strings.Cut(path, "/")
	if !ok || r.Method != http.MethodPost || (kind != "response" && kind != "error") {
		http.NotFound(w, r)
		return
	}
	body, _ := io.ReadAll(r.Body)
	a.mu.Lock()
	a.answers[id] = answer{err: kind == "error", body: string(body)}
	a.mu.Unlock()
	w.WriteHeader(http.StatusAccepted)
}

// Through aws-lambda-go's real loop: a good batch, one with a panicking
// handler (recovered: a retry copy, success), a record of an unknown
// stream (aws-lambda-go's sample event: its first record reported), a
// record whose data is not base64 (the event does not unmarshal:
// aws-lambda-go reports an error, so the mapping retries the batch whole),
// and an event without records (an error too).
func TestRuntimeAPI(t *testing.T) {
	sample, err := os.ReadFile("testdata/kinesis-event.json")
	if err != nil {
		t.Fatal(err)
	}
	batch := func(ns ...int) string {
		var ev events.KinesisEvent
		for i, n := range ns {
			ev.Records = append(ev.Records, orderRecord(i, fmt.Sprint(n%3)))
			data, _ := json.Marshal(order{Key: fmt.Sprint(n % 3), N: n})
			ev.Records[i].Kinesis.Data = data
		}
		b, _ := json.Marshal(ev)
		return string(b)
	}
	notBase64 := strings.Replace(batch(1), `"data":"`, `"data":"!!`, 1)
	events := []string{batch(1, 2, 3, 4), batch(5, 99, 6), string(sample), notBase64, `{"Records":[]}`}
	api := &runtimeAPI{queue: events, answers: map[string]answer{}}
	s := httptest.NewServer(api)
	defer s.Close()

	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), childEnv+"=1", "AWS_LAMBDA_RUNTIME_API="+strings.TrimPrefix(s.URL, "http://"))
	out, _ := cmd.CombinedOutput() // it exits 1 when the loop ends: expected
	if ctx.Err() != nil {
		t.Fatalf("function did not finish: %s", out)
	}
	api.mu.Lock()
	defer api.mu.Unlock()
	got := func(i int) answer { return api.answers[fmt.Sprintf("req-%d", len(events)-1-i)] }
	if a := got(0); a.err || a.body != `{"batchItemFailures":[]}` {
		t.Errorf("good batch: %+v", a)
	}
	if a := got(1); a.err || a.body != `{"batchItemFailures":[]}` {
		t.Errorf("panicking handler: %+v", a)
	}
	if a := got(2); a.err || a.body != `{"batchItemFailures":[{"itemIdentifier":"49568167373333333333333333333333333333333333333333333333"}]}` {
		t.Errorf("unknown stream: %+v", a)
	}
	if a := got(3); !a.err || !strings.Contains(a.body, "illegal base64") {
		t.Errorf("not base64: %+v", a)
	}
	if a := got(4); !a.err || !strings.Contains(a.body, `"errorMessage":"kinesislambda: not a Kinesis event: no records","errorType":"EventError"`) {
		t.Errorf("no records: %+v", a)
	}
	for i := range events {
		t.Logf("event %d: %+v", i, got(i))
	}
	if t.Failed() {
		t.Logf("function output:\n%s", out)
	}
}
