package embedded_test

import (
	"context"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/kinesisgen/kinesisgen/generated_test/embedded"
	"github.com/kinesisgen/kinesisgen/runtime"
	"github.com/kinesisgen/kinesisgen/runtime/kinesistest"
)

func full() embedded.Hdr {
	return embedded.Hdr{
		Base:     embedded.Base{Tenant: "acme"},
		Trace:    &embedded.Trace{ID: "t-1", Hops: 2},
		Customer: "ann",
	}
}

func TestEmbeddedFieldsAreHeaders(t *testing.T) {
	h := runtime.Headers{}
	in := full()
	in.Trace.Span = &embedded.Span{Name: "s"}
	in.EncodeHeaders(h)
	want := runtime.Headers{"tenant": "acme", "trace-id": "t-1", "hops": "2", "span": "s", "partition-key": "ann"}
	if diff := cmp.Diff(want, h); diff != "" {
		t.Errorf("encoded (-want +got):\n%s", diff)
	}
	var out embedded.Hdr
	if err := out.DecodeHeaders(h); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(in, out); diff != "" {
		t.Errorf("round trip (-in +out):\n%s", diff)
	}
}

// TestNilEmbedIsAbsent: a nil pointer embed sends none of its headers and
// decodes as nil when none of them came; one header allocates it.
func TestNilEmbedIsAbsent(t *testing.T) {
	h := runtime.Headers{}
	embedded.Hdr{Customer: "ann"}.EncodeHeaders(h)
	if diff := cmp.Diff(runtime.Headers{"partition-key": "ann"}, h); diff != "" {
		t.Errorf("encoded (-want +got):\n%s", diff)
	}
	var out embedded.Hdr
	if err := out.DecodeHeaders(h); err != nil || out.Trace != nil {
		t.Errorf("decoded %+v, %v; want a nil Trace", out, err)
	}
	if err := out.DecodeHeaders(runtime.Headers{"span": "s"}); err != nil || out.Trace == nil || out.Trace.Span == nil || out.Trace.Span.Name != "s" {
		t.Errorf("decoded %+v, %v; want Trace.Span allocated", out, err)
	}
}

func TestDeliveredEmbeddedHeaders(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	b, srv := kinesistest.NewBrokerServer()
	if err := srv.AddStream("embedded.orders", 1); err != nil {
		t.Fatal(err)
	}
	if err := embedded.Mount(b); err != nil {
		t.Fatal(err)
	}
	if err := b.Connect(ctx); err != nil {
		t.Fatal(err)
	}
	defer b.Shutdown(context.Background())
	in := full()
	if err := embedded.NewOrderPublisher(b).Message(embedded.Order{ID: 1}).Headers(in).Publish(ctx); err != nil {
		t.Fatal(err)
	}
	select {
	case got := <-embedded.Received:
		if diff := cmp.Diff(in, got); diff != "" {
			t.Errorf("delivered headers (-sent +got):\n%s", diff)
		}
	case <-ctx.Done():
		t.Fatal("Receive was not called")
	}
}
