package headers_test

import (
	"context"
	"errors"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/kinesisgen/kinesisgen/generated_test/headers"
	"github.com/kinesisgen/kinesisgen/runtime"
	"github.com/kinesisgen/kinesisgen/runtime/kinesistest"
)

func full() headers.All {
	return headers.All{
		Key: "cust-1", Region: "eu-west-1", Urgent: true,
		Int: -1, Int8: math.MinInt8, Int16: math.MinInt16, Int32: math.MinInt32, Int64: math.MinInt64,
		Uint: 1, Uint8: math.MaxUint8, Uint16: math.MaxUint16, Uint32: math.MaxUint32, Uint64: math.MaxUint64,
		Level: 7, At: time.Date(2026, 3, 4, 5, 6, 7, 890, time.FixedZone("x", 3600)), Seen: time.Unix(1, 0).UTC(),
		Note: "not a header",
	}.WithPrivate("p")
}

var cmpAll = cmp.Options{cmp.AllowUnexported(headers.All{})}

func TestRoundTrip(t *testing.T) {
	in := full()
	h := runtime.Headers{}
	in.EncodeHeaders(h)
	if len(h) != 17 || h["partition-key"] != "cust-1" || h["uint64"] != "18446744073709551615" || h["x.private_name"] != "p" || h["at"] != "2026-03-04T05:06:07.00000089+01:00" {
		t.Errorf("encoded %v", h)
	}
	var out headers.All
	if err := out.DecodeHeaders(h); err != nil {
		t.Fatal(err)
	}
	in.Note = "" // untagged: not carried
	if diff := cmp.Diff(in, out, cmpAll); diff != "" {
		t.Errorf("round trip (-in +out):\n%s", diff)
	}
}

// TestZeroValuesLeftOutButTheKey: zero values are left out, but the key
// field is always written, so that an empty key is an error at publish
// instead of a silent fall to a process-unique key.
func TestZeroValuesLeftOutButTheKey(t *testing.T) {
	h := runtime.Headers{}
	headers.All{}.EncodeHeaders(h)
	if len(h) != 1 || h["partition-key"] != "" {
		t.Errorf("zero contract encoded as %v, want only an empty partition-key", h)
	}
}

func TestMalformedHeaderNamesIt(t *testing.T) {
	for header, value := range map[string]string{"int8": "128", "uint": "-1", "urgent": "maybe", "at": "yesterday", "level": "65536"} {
		var out headers.All
		err := out.DecodeHeaders(runtime.Headers{header: value})
		var re *runtime.Error
		if !errors.Is(err, runtime.ErrDecode) || !errors.As(err, &re) || !strings.Contains(err.Error(), "header "+header) {
			t.Errorf("%s=%q: error %v, want a runtime.ErrDecode naming the header", header, value, err)
		}
	}
}

func TestDeliveredHeaders(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	b, srv := kinesistest.NewBrokerServer()
	if err := srv.AddStream("headers.parcels", 2); err != nil {
		t.Fatal(err)
	}
	if err := headers.Mount(b); err != nil {
		t.Fatal(err)
	}
	if err := b.Connect(ctx); err != nil {
		t.Fatal(err)
	}
	defer b.Shutdown(context.Background())
	in := full()
	if err := headers.NewParcelPublisher(b).Message(headers.Parcel{ID: 1}).Headers(in).Publish(ctx); err != nil {
		t.Fatal(err)
	}
	select {
	case got := <-headers.Received:
		in.Note = ""
		if diff := cmp.Diff(in, got, cmpAll); diff != "" {
			t.Errorf("delivered headers (-sent +got):\n%s", diff)
		}
	case <-ctx.Done():
		t.Fatal("Receive was not called")
	}
}

// TestEmptyContractKeyFailsThePublish: a header contract with an empty key
// field names an empty key, which is an ErrPublish error before any call.
func TestEmptyContractKeyFailsThePublish(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	b, srv := kinesistest.NewBrokerServer()
	if err := srv.AddStream("headers.parcels", 1); err != nil {
		t.Fatal(err)
	}
	if err := b.Connect(ctx); err != nil {
		t.Fatal(err)
	}
	defer b.Shutdown(context.Background())
	in := full()
	in.Key = ""
	err := headers.NewParcelPublisher(b).Message(headers.Parcel{ID: 1}).Headers(in).Publish(ctx)
	if !errors.Is(err, runtime.ErrPublish) || !strings.Contains(err.Error(), "empty partition key") {
		t.Fatalf("Publish = %v, want an ErrPublish error for the empty key", err)
	}
}
