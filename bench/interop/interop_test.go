// Package interop checks kinesisgen's KPL aggregates against AWS's own
// deaggregator, and reads aggregates written with AWS's protobuf types, so
// that neither side depends on the other's reading of the format.
package interop

import (
	"bytes"
	"context"
	"crypto/md5"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/kinesis"
	"github.com/aws/aws-sdk-go-v2/service/kinesis/types"
	"github.com/awslabs/kinesis-aggregation/go/v2/deaggregator"
	rec "github.com/awslabs/kinesis-aggregation/go/v2/records"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/protoadapt"

	"github.com/kinesisgen/kinesisgen/runtime"
	"github.com/kinesisgen/kinesisgen/runtime/kinesistest"
	"github.com/kinesisgen/kinesisgen/runtime/kpl"
	"github.com/kinesisgen/kinesisgen/runtime/shard"
)

type event struct {
	Key string `json:"key"`
	N   int    `json:"n"`
}

// TestAWSDeaggregatorReadsOurAggregates publishes through an aggregating
// publisher (some messages with headers, so in the envelope) and hands
// every stored record to AWS's deaggregator: it yields the same user
// records, record for record, as runtime/kpl, each under the key it was
// published with, every key on the shard the record was stored on.
func TestAWSDeaggregatorReadsOurAggregates(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	b, s := kinesistest.NewBrokerServer()
	if err := s.AddStream("events", 4); err != nil {
		t.Fatal(err)
	}
	if err := b.Connect(ctx); err != nil {
		t.Fatal(err)
	}
	defer b.Shutdown(context.Background())
	p := runtime.NewPublisher[event](b, runtime.PublisherSpec{Stream: "events", Aggregate: true})
	var wg sync.WaitGroup
	for k := range 20 {
		key := fmt.Sprintf("key-%02d", k)
		wg.Go(func() {
			for n := range 30 {
				m := p.Message(event{Key: key, N: n}).PartitionKey(key)
				if n%3 == 0 {
					m.Header("trace", fmt.Sprint("t", n))
				}
				if err := m.Publish(ctx); err != nil {
					t.Errorf("publish: %v", err)
				}
			}
		})
	}
	wg.Wait()

	stored, err := s.Records("events")
	if err != nil {
		t.Fatal(err)
	}
	l, err := shard.List(ctx, s, "events")
	if err != nil {
		t.Fatal(err)
	}
	users := 0
	for _, r := range stored {
		theirs, err := deaggregator.DeaggregateRecords([]types.Record{r.Record})
		if err != nil {
			t.Fatalf("AWS deaggregator: %v", err)
		}
		ours, ok, err := kpl.Deaggregate(r.Data)
		if !ok || err != nil {
			t.Fatalf("not an aggregate: %v %v", ok, err)
		}
		if len(theirs) != len(ours) {
			t.Fatalf("AWS reads %d user records, kpl %d", len(theirs), len(ours))
		}
		info, _ := l.Shard(r.ShardID)
		for i := range ours {
			key := aws.ToString(theirs[i].PartitionKey)
			if key != ours[i].PartitionKey || !bytes.Equal(theirs[i].Data, ours[i].Data) {
				t.Errorf("user record %d: AWS %s %q, kpl %s %q", i, key, theirs[i].Data, ours[i].PartitionKey, ours[i].Data)
			}
			if !info.Range.Contains(shard.HashKeyOf(key)) {
				t.Errorf("key %s stored on %s, outside its range", key, r.ShardID)
			}
			h, payload, err := runtime.DecodeRecord(theirs[i].Data)
			if err != nil || !bytes.Contains(payload, []byte(`"key":"`+key+`"`)) {
				t.Errorf("user record %q under %s: %v", payload, key, err)
			}
			if bytes.Contains(payload, []byte(`"n":3,`)) && h["trace"] != "t3" {
				t.Errorf("headers %v, want trace=t3", h)
			}
			users++
		}
	}
	if users != 600 || len(stored) >= 300 {
		t.Fatalf("%d user records in %d Kinesis records, want 600 in far fewer", users, len(stored))
	}
}

// TestSubscriberReadsAWSWrittenAggregates writes an aggregate with AWS's
// generated protobuf types (as the KPL and KPL-style Go producers do),
// under the key of its first record whatever the others' keys, and reads
// it with a kinesisgen subscriber: each user record with its own key, in
// order.
func TestSubscriberReadsAWSWrittenAggregates(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	b, s := kinesistest.NewBrokerServer()
	if err := s.AddStream("foreign", 1); err != nil {
		t.Fatal(err)
	}
	type got struct {
		key string
		ev  event
	}
	seen := make(chan got, 16)
	if _, err := runtime.Subscribe(b, "foreign", func(_ context.Context, e event, d runtime.Delivery) runtime.Outcome {
		seen <- got{d.PartitionKey, e}
		return runtime.Ack()
	}, runtime.StartAt(runtime.Horizon())); err != nil {
		t.Fatal(err)
	}
	if err := b.Connect(ctx); err != nil {
		t.Fatal(err)
	}
	defer b.Shutdown(context.Background())

	agg := &rec.AggregatedRecord{PartitionKeyTable: []string{"alice", "bob"}}
	var want []got
	for n, ki := range []uint64{0, 1, 0, 1, 1} {
		key := agg.PartitionKeyTable[ki]
		data := []byte(fmt.Sprintf(`{"key":%q,"n":%d}`, key, n))
		agg.Records = append(agg.Records, &rec.Record{PartitionKeyIndex: proto.Uint64(ki), Data: data})
		want = append(want, got{key, event{Key: key, N: n}})
	}
	body, err := proto.Marshal(protoadapt.MessageV2Of(agg))
	if err != nil {
		t.Fatal(err)
	}
	sum := md5.Sum(body)
	data := slices.Concat(kpl.Magic, body, sum[:])
	if _, err := s.PutRecord(ctx, &kinesis.PutRecordInput{StreamName: aws.String("foreign"), PartitionKey: aws.String("alice"), Data: data}); err != nil {
		t.Fatal(err)
	}
	for i, w := range want {
		select {
		case g := <-seen:
			if g != w {
				t.Fatalf("delivery %d: %+v, want %+v", i, g, w)
			}
		case <-ctx.Done():
			t.Fatalf("delivery %d never came", i)
		}
	}
}
