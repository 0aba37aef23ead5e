package publishonly

import (
	"context"
	"testing"
	"time"

	"github.com/kinesisgen/kinesisgen/runtime/kinesistest"
	"github.com/kinesisgen/kinesisgen/runtime/kpl"
)

// TestAggregateMarker: the publisher generated for a message marked
// aggregate writes KPL aggregates, each line under its own key.
func TestAggregateMarker(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	b, s := kinesistest.NewBrokerServer()
	if err := s.AddStream("publishonly.audit", 1); err != nil {
		t.Fatal(err)
	}
	if err := b.Connect(ctx); err != nil {
		t.Fatal(err)
	}
	defer b.Shutdown(context.Background())
	p := newAuditPublisher(b)
	errs := make(chan error, 3)
	for _, k := range []string{"a", "b", "c"} {
		go func() { errs <- p.Message(audit{Line: k}).PartitionKey(k).Publish(ctx) }()
	}
	for range 3 {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	recs, err := s.Records("publishonly.audit")
	if err != nil {
		t.Fatal(err)
	}
	lines := 0
	for _, r := range recs {
		subs, ok, err := kpl.Deaggregate(r.Data)
		if !ok || err != nil {
			t.Fatalf("record %q is not an aggregate: %v", r.Data, err)
		}
		for _, sub := range subs {
			lines++
			if want := `{"Line":"` + sub.PartitionKey + `"}`; string(sub.Data) != want {
				t.Errorf("line under key %s is %s, want %s", sub.PartitionKey, sub.Data, want)
			}
		}
	}
	if lines != 3 {
		t.Errorf("read %d lines, want 3", lines)
	}
}
