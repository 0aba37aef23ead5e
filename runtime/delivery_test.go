package runtime

import (
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestDeliveryHeadersAreCopies(t *testing.T) {
	d := Delivery{PartitionKey: "alice", headers: Headers{"trace": "t-1"}}
	h := d.Headers()
	if diff := cmp.Diff(Headers{"trace": "t-1", PartitionKeyHeader: "alice"}, h); diff != "" {
		t.Fatalf("Headers() (-want +got):\n%s", diff)
	}
	h["trace"] = "changed" // a handler's change must not reach retries or dead letters
	delete(h, PartitionKeyHeader)
	if v, _ := d.Header("trace"); v != "t-1" {
		t.Fatalf("a change to the copy reached the delivery: trace = %q", v)
	}
	if v, ok := d.Header(PartitionKeyHeader); !ok || v != "alice" {
		t.Fatalf("Header(partition-key) = %q, %v", v, ok)
	}
	if _, ok := d.Header("missing"); ok {
		t.Fatal("Header reports a header the record does not have")
	}
	// A Delivery built by hand (a handler's unit test) still carries its key.
	if diff := cmp.Diff(Headers{PartitionKeyHeader: "bob"}, Delivery{PartitionKey: "bob"}.Headers()); diff != "" {
		t.Fatalf("hand-made Delivery (-want +got):\n%s", diff)
	}
}
