package runtime_test

import (
	"context"
	"crypto/md5"
	"encoding/hex"
	"encoding/json"
	"errors"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"

	"github.com/kinesisgen/kinesisgen/runtime"
)

// waitLog waits until the captured logs hold a line with msg and returns it.
func waitLog(e *env, logs *syncBuffer, msg string) string {
	e.t.Helper()
	for {
		if l := logs.line(msg); l != "" {
			return l
		}
		select {
		case <-e.ctx.Done():
			e.t.Fatalf("no log line %q; logs:\n%s", msg, logs.String())
		case <-time.After(10 * time.Millisecond):
		}
	}
}

// A broker without WithLogger tells slog.Default() about a record it gave
// up, with the keys an operator filters on, and keeps its Info lines to
// itself; WithLogger replaces the default.
func TestDefaultLoggerSendsWarningsAndErrorsToSlogDefault(t *testing.T) {
	var defaults syncBuffer
	prev := slog.Default()
	slog.SetDefault(slog.New(slog.NewJSONHandler(&defaults, &slog.HandlerOptions{Level: slog.LevelDebug})))
	t.Cleanup(func() { slog.SetDefault(prev) })

	e := newEnv(t)
	stream := e.newStream("visible", 1)
	b := runtime.NewBroker(runtime.WithKinesisClient(e.api), runtime.WithLeaseStore(e.store),
		runtime.WithOwnerID("instance-7"), runtime.WithCheckpointInterval(50*time.Millisecond))
	mustSubscribe(e, b, stream, func(context.Context, order, runtime.Delivery) runtime.Outcome {
		return runtime.Reject(errors.New("no such customer"))
	}, runtime.StartAt(runtime.Horizon()))
	e.connect(b)
	e.publish(e.publisher(stream), order{ID: 1, Customer: "c1"})

	line := waitLog(e, &defaults, "record rejected and checkpointed past")
	var got map[string]any
	if err := json.Unmarshal([]byte(line), &got); err != nil {
		t.Fatal(err)
	}
	if got["level"] != "ERROR" || got["stream"] != stream || got["owner"] != "instance-7" ||
		!strings.HasPrefix(got["shard"].(string), "shardId-") || got["sequence"] == "" || got["sequence"] == nil {
		t.Errorf("rejection line lacks its level or keys: %s", line)
	}
	if l := defaults.line("subscribed"); l != "" {
		t.Errorf("an Info line reached the default logger: %s", l)
	}

	// WithLogger replaces the default: nothing of this broker reaches it.
	defaults.mu.Lock()
	defaults.b.Reset()
	defaults.mu.Unlock()
	var own syncBuffer
	b2 := runtime.NewBroker(runtime.WithKinesisClient(e.api), runtime.WithLeaseStore(e.store),
		runtime.WithLogger(slog.New(slog.NewJSONHandler(&own, nil))))
	stream2 := e.newStream("own-logger", 1)
	mustSubscribe(e, b2, stream2, func(context.Context, order, runtime.Delivery) runtime.Outcome {
		return runtime.Reject(errors.New("no such customer"))
	}, runtime.StartAt(runtime.Horizon()))
	e.connect(b2)
	e.publish(e.publisher(stream2), order{ID: 2, Customer: "c2"})
	waitLog(e, &own, "record rejected and checkpointed past")
	if s := defaults.String(); strings.Contains(s, stream2) {
		t.Errorf("a broker with its own logger wrote to the default:\n%s", s)
	}
}

// The logs of records given up, retried, dead-lettered, undecodable or
// whose handler panicked name the stream, shard, owner and sequence number
// of every record, and never its key, its payload, its headers' values or
// the broker's credentials.
func TestLogsNameRecordsButHoldNoKeysPayloadsOrCredentials(t *testing.T) {
	const (
		key       = "ada.lovelace@example.com"
		secret    = "payload-secret-4711"
		hdrSecret = "header-secret-0815"
		accessKey = "AKIDLOGTESTEXAMPLE"
		secretKey = "credential-secret-wJalrXUtnFEMI"
	)
	e := newEnv(t)
	stream, dl := e.newStream("private", 2), e.newStream("private-dl", 1)
	awsCfg := aws.Config{Region: "eu-west-1", Credentials: credentials.NewStaticCredentialsProvider(accessKey, secretKey, "")}
	var logs syncBuffer
	b := runtime.NewBrokerFromConfig(awsCfg,
		runtime.WithKinesisClient(e.api), runtime.WithLeaseStore(e.store), runtime.WithOwnerID("instance-9"),
		runtime.WithLogger(slog.New(slog.NewJSONHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))),
		runtime.WithCheckpointInterval(50*time.Millisecond))
	mustSubscribe(e, b, stream, func(_ context.Context, o order, d runtime.Delivery) runtime.Outcome {
		switch o.ID {
		case 1:
			panic("handler bug")
		case 2:
			return runtime.Retry()
		}
		return runtime.Reject(errors.New("refused"))
	}, runtime.StartAt(runtime.Horizon()), runtime.MaxRetries(1), runtime.DeadLetter(dl))
	e.connect(b)

	pb := runtime.NewBroker(runtime.WithKinesisClient(e.api), runtime.WithCodec(bytesCodec{}))
	e.connect(pb)
	raw := runtime.NewPublisher[[]byte](pb, runtime.PublisherSpec{Stream: stream})
	for _, payload := range []string{
		`{"id":1,"customer":"` + secret + `"}`,
		`{"id":2,"customer":"` + secret + `"}`,
		`{"id":3,"customer":"` + secret + `"}`,
		`not json ` + secret,
	} {
		if err := raw.Message([]byte(payload)).PartitionKey(key).Header("note", hdrSecret).Publish(e.ctx); err != nil {
			t.Fatal(err)
		}
	}
	// Four records given up: two after their retries ran out (the panic
	// counts as a retry), one rejected, one undecodable.
	deadline := time.After(testTimeout)
	for strings.Count(logs.String(), "record sent to the dead-letter stream") < 4 {
		select {
		case <-deadline:
			t.Fatalf("not every record was dead-lettered; logs:\n%s", logs.String())
		case <-time.After(10 * time.Millisecond):
		}
	}
	_ = b.Shutdown(context.Background())

	out := logs.String()
	for _, leak := range []string{key, secret, hdrSecret, accessKey, secretKey} {
		if strings.Contains(out, leak) {
			t.Errorf("the logs hold %q:\n%s", leak, out)
		}
	}
	sum := md5.Sum([]byte(key))
	digest := hex.EncodeToString(sum[:])
	for l := range strings.SplitSeq(strings.TrimSpace(out), "\n") {
		var got map[string]any
		if err := json.Unmarshal([]byte(l), &got); err != nil {
			t.Fatalf("%v: %s", err, l)
		}
		if got["owner"] != "instance-9" {
			t.Errorf("line without its owner: %s", l)
		}
		msg := got["msg"].(string)
		if msg == "kinesis broker connected" || strings.HasPrefix(msg, "kinesis broker shut") {
			continue // the broker's own lines concern no stream
		}
		if got["stream"] == nil {
			t.Errorf("line without its stream: %s", l)
		}
		switch msg {
		case "handler panicked; retrying the record", "record retried", "record sent to the dead-letter stream":
			if got["shard"] == nil || got["sequence"] == nil {
				t.Errorf("line about a record without its shard and sequence number: %s", l)
			}
		}
		if msg == "record sent to the dead-letter stream" && got["partition_key_md5"] != digest {
			t.Errorf("dead-letter line without the key's digest %s: %s", digest, l)
		}
	}
	if !strings.Contains(out, "handler panicked") {
		t.Errorf("no line about the panic:\n%s", out)
	}
}

// bytesCodec publishes a []byte as it is, valid JSON or not.
type bytesCodec struct{}

func (bytesCodec) Marshal(v any) ([]byte, error)      { return v.([]byte), nil }
func (bytesCodec) Unmarshal(data []byte, v any) error { *v.(*[]byte) = data; return nil }
