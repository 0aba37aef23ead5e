package kinesistest_test

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/kinesisgen/kinesisgen/runtime"
	"github.com/kinesisgen/kinesisgen/runtime/kinesistest"
)

type order struct {
	ID string `json:"id"`
}

// A broker from NewBrokerServer publishes into the server the test holds.
func TestNewBrokerServerPublishes(t *testing.T) {
	b, srv := kinesistest.NewBrokerServer()
	mustStream(t, srv, "orders", 2)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := b.Connect(ctx); err != nil {
		t.Fatalf("Connect: %v", err)
	}
	defer func() {
		if err := b.Shutdown(ctx); err != nil {
			t.Errorf("Shutdown: %v", err)
		}
	}()
	pub := runtime.NewPublisher[order](b, runtime.PublisherSpec{Stream: "orders"})
	rc, err := pub.Message(order{ID: "o-1"}).PartitionKey("customer-7").Send(ctx)
	if err != nil {
		t.Fatalf("publish: %v", err)
	}
	recs, err := srv.Records("orders")
	if err != nil || len(recs) != 1 {
		t.Fatalf("server holds %d records (%v), want 1", len(recs), err)
	}
	var got order
	if err := json.Unmarshal(recs[0].Data, &got); err != nil || got.ID != "o-1" {
		t.Fatalf("stored %q (%v), want the JSON of order o-1", recs[0].Data, err)
	}
	if *recs[0].PartitionKey != "customer-7" || recs[0].ShardID != rc.ShardID || *recs[0].SequenceNumber != rc.SequenceNumber {
		t.Fatalf("stored key %s shard %s seq %s; receipt %+v", *recs[0].PartitionKey, recs[0].ShardID, *recs[0].SequenceNumber, rc)
	}

	// Two brokers on one server see the same streams.
	other := srv.NewBroker()
	if err := other.Connect(ctx); err != nil {
		t.Fatal(err)
	}
	defer other.Shutdown(ctx)
	if err := runtime.NewPublisher[order](other, runtime.PublisherSpec{Stream: "orders"}).Publish(ctx, order{ID: "o-2"}); err != nil {
		t.Fatal(err)
	}
	if recs, _ := srv.Records("orders"); len(recs) != 2 {
		t.Fatalf("after a second broker published: %d records, want 2", len(recs))
	}
}
