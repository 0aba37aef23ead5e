package main

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/kinesis"

	"github.com/kinesisgen/kinesisgen/runtime"
	"github.com/kinesisgen/kinesisgen/runtime/kinesistest"
)

// The function behind kinesistest's event source mapping stand-in, set as
// docs/lambda.md recommends: every order gets its receipt, each customer's
// in order, and the invalid and the undecodable ones are dead letters.
func TestFunction(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	srv := kinesistest.New()
	for name, shards := range map[string]int{"orders": 2, "order-receipts": 2, "orders.dead-letters": 1} {
		if err := srv.AddStream(name, shards); err != nil {
			t.Fatal(err)
		}
	}
	// The shop: another service, publishing with the generated publisher.
	shop := srv.NewBroker()
	if err := shop.Connect(ctx); err != nil {
		t.Fatal(err)
	}
	defer shop.Shutdown(ctx)
	orders := NewOrderPublisher(shop)
	want := map[string][]int{}
	for id := 1; id <= 60; id++ {
		o := Order{ID: id, Customer: fmt.Sprintf("c%d", id%5), Amount: 10}
		if id%20 == 0 {
			o.Amount = 0 // rejected
		} else {
			want[o.Customer] = append(want[o.Customer], id)
		}
		if err := orders.Message(o).PartitionKey(o.Customer).Publish(ctx); err != nil {
			t.Fatal(err)
		}
	}
	// And one record that is not an order at all.
	if _, err := srv.PutRecord(ctx, &kinesis.PutRecordInput{StreamName: aws.String("orders"), PartitionKey: aws.String("c1"), Data: []byte("not json")}); err != nil {
		t.Fatal(err)
	}

	h, err := function(srv.NewBroker())
	if err != nil {
		t.Fatal(err)
	}
	stats, err := srv.Drain(ctx, kinesistest.EventSourceMapping{
		Stream: "orders", Function: h,
		BatchSize: 100, ParallelizationFactor: 2, ReportBatchItemFailures: true,
		BisectBatchOnFunctionError: true, MaximumRetryAttempts: 10, Timeout: 30 * time.Second,
	})
	if err != nil || stats.Failed+stats.Partial+stats.Discarded != 0 {
		t.Fatalf("stats %+v, err %v", stats, err)
	}

	recs, err := srv.Records("order-receipts")
	if err != nil {
		t.Fatal(err)
	}
	got := map[string][]int{}
	for _, r := range recs {
		_, payload, err := runtime.DecodeRecord(r.Data)
		if err != nil {
			t.Fatal(err)
		}
		var rc Receipt
		if err := json.Unmarshal(payload, &rc); err != nil {
			t.Fatal(err)
		}
		if aws.ToString(r.PartitionKey) != rc.Customer {
			t.Errorf("receipt %d under key %s", rc.Order, aws.ToString(r.PartitionKey))
		}
		got[rc.Customer] = append(got[rc.Customer], rc.Order)
	}
	for c, ids := range want {
		if fmt.Sprint(got[c]) != fmt.Sprint(ids) {
			t.Errorf("customer %s: receipts %v, want %v", c, got[c], ids)
		}
	}
	dls, err := srv.Records("orders.dead-letters")
	if err != nil {
		t.Fatal(err)
	}
	if len(dls) != 4 {
		t.Fatalf("%d dead letters, want 4 (three invalid, one undecodable)", len(dls))
	}
}
