package numkey_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/kinesisgen/kinesisgen/generated_test/numkey"
	"github.com/kinesisgen/kinesisgen/runtime"
	"github.com/kinesisgen/kinesisgen/runtime/kinesistest"
)

// TestZeroIsNoKey: customer 0 is an unset field, not the key "0": publishing
// it fails as an empty string key does, instead of putting every unset
// customer's records under one key.
func TestZeroIsNoKey(t *testing.T) {
	h := runtime.Headers{}
	numkey.Key{}.EncodeHeaders(h)
	if v, ok := h["partition-key"]; !ok || v != "" {
		t.Errorf("zero key encoded as %q (present %v), want an empty partition-key", v, ok)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	b, srv := kinesistest.NewBrokerServer()
	if err := srv.AddStream("numkey.orders", 1); err != nil {
		t.Fatal(err)
	}
	if err := b.Connect(ctx); err != nil {
		t.Fatal(err)
	}
	defer b.Shutdown(context.Background())
	pub := numkey.NewOrderPublisher(b)
	err := pub.Message(numkey.Order{ID: 1}).Headers(numkey.Key{}).Publish(ctx)
	if rerr := (*runtime.Error)(nil); !errors.As(err, &rerr) || rerr.Kind != runtime.ErrPublish {
		t.Errorf("publish with customer 0: %v, want an ErrPublish error", err)
	}
	r, err := pub.Message(numkey.Order{ID: 2}).Headers(numkey.Key{Customer: 42}).Send(ctx)
	if err != nil || r.PartitionKey != "42" {
		t.Errorf("publish with customer 42: key %q, %v; want 42", r.PartitionKey, err)
	}
}
