package odd_test

import (
	"context"
	"reflect"
	"testing"
	"time"

	"github.com/kinesisgen/kinesisgen/generated_test/odd"
	"github.com/kinesisgen/kinesisgen/runtime/kinesistest"
)

// TestAliasReceiverMounts: Mount takes the aliased type of a method declared
// on an alias, and the method gets the message with its bytes intact.
func TestAliasReceiverMounts(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	b, srv := kinesistest.NewBrokerServer()
	if err := srv.AddStream("odd.blobs", 1); err != nil {
		t.Fatal(err)
	}
	svc := &odd.Svc{Got: make(chan odd.Blob, 1)}
	if err := odd.Mount(b, svc); err != nil {
		t.Fatalf("Mount: %v", err)
	}
	if err := b.Connect(ctx); err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := b.Shutdown(context.Background()); err != nil {
			t.Error(err)
		}
	}()
	want := odd.Blob{Raw: []byte{0, 1}, Octets: []odd.Octet{2, 255}, Named: odd.Octets{3}, Fixed: [2]odd.Octet{4, 5}}
	if err := odd.NewBlobPublisher(b).Publish(ctx, want); err != nil {
		t.Fatal(err)
	}
	select {
	case got := <-svc.Got:
		if !reflect.DeepEqual(got, want) {
			t.Errorf("got %+v, want %+v", got, want)
		}
	case <-ctx.Done():
		t.Fatal("OnBlob was not called")
	}
}
