package runtime

import (
	"context"
	"strings"
	"testing"
)

// TestAGivenEmptyKeyIsAnError: a key named anywhere on the ladder is used as
// given, so an empty one fails the publish before any call instead of
// falling silently to a process-unique key (which loses the key's order).
func TestAGivenEmptyKeyIsAnError(t *testing.T) {
	tests := []struct {
		name  string
		mount []PublishOption
		build func(m *Message[order]) *Message[order]
		rung  string // what the error names as the key's source
	}{
		{name: "PartitionKey step", build: func(m *Message[order]) *Message[order] { return m.PartitionKey("") }, rung: "PartitionKey step"},
		{name: "partition-key header", build: func(m *Message[order]) *Message[order] { return m.Header(PartitionKeyHeader, "") }, rung: "partition-key header"},
		{
			name: "header contract whose key field is empty",
			// The generated EncodeHeaders writes the partition-key field even when empty.
			build: func(m *Message[order]) *Message[order] { return m.Headers(shipmentKey{Trace: "t-2"}) },
			rung:  "partition-key header",
		},
		{name: "mount-site key", mount: []PublishOption{WithPartitionKey("")}, rung: "mount-site key"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newFake()
			p := NewPublisher[order](connected(t, f), PublisherSpec{Stream: "orders", PartitionKey: "spec-key"}, tt.mount...)
			m := p.Message(order{ID: 1})
			if tt.build != nil {
				m = tt.build(m)
			}
			// Inside a handler too: an empty given key is not replaced by the handled record's.
			err := m.Publish(withHandledKey(testCtx(t), "handled"))
			wantKind(t, err, ErrPublish, "orders")
			if !strings.Contains(err.Error(), "empty partition key") || !strings.Contains(err.Error(), tt.rung) {
				t.Errorf("error %q does not say the key named by the %s is empty", err, tt.rung)
			}
			if calls := f.callSizes(); len(calls) != 0 {
				t.Fatalf("the record reached the service (%d calls)", len(calls))
			}
		})
	}
	t.Run("PublishAll with an empty mount-site key fails every message alone", func(t *testing.T) {
		f := newFake()
		p := NewPublisher[order](connected(t, f), PublisherSpec{Stream: "orders"}, WithPartitionKey(""))
		err := PublishAll(testCtx(t), p, []order{{ID: 1}, {ID: 2}})
		wantKind(t, err, ErrPublish, "orders")
		if calls := f.callSizes(); len(calls) != 0 {
			t.Fatalf("records reached the service (%d calls)", len(calls))
		}
	})
}

// TestPublishInsideAHandlerInheritsTheHandledKey: the handled record's key
// is the rung below the mount-site key and above a process-unique key.
func TestPublishInsideAHandlerInheritsTheHandledKey(t *testing.T) {
	tests := []struct {
		name    string
		spec    string
		mount   []PublishOption
		build   func(m *Message[order]) *Message[order]
		wantKey string
	}{
		{name: "no key named: the handled record's", wantKey: "cust-1"},
		{name: "PartitionKey step wins", build: func(m *Message[order]) *Message[order] { return m.PartitionKey("step") }, wantKey: "step"},
		{name: "partition-key header wins", build: func(m *Message[order]) *Message[order] { return m.Headers(shipmentKey{Customer: "hdr"}) }, wantKey: "hdr"},
		{name: "subscriber partition_key= overrides", mount: []PublishOption{WithPartitionKey("mount")}, wantKey: "mount"},
		{name: "message marker partition_key= overrides", spec: "spec", wantKey: "spec"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newFake()
			p := NewPublisher[order](connected(t, f), PublisherSpec{Stream: "orders", PartitionKey: tt.spec}, tt.mount...)
			m := p.Message(order{ID: 1})
			if tt.build != nil {
				m = tt.build(m)
			}
			// A handler may derive its own context; the key goes with it.
			ctx, cancel := context.WithCancel(withHandledKey(testCtx(t), "cust-1"))
			defer cancel()
			r, err := m.Send(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if r.PartitionKey != tt.wantKey {
				t.Errorf("key %q, want %q", r.PartitionKey, tt.wantKey)
			}
		})
	}
	t.Run("a handled key the service would refuse: a process-unique key", func(t *testing.T) {
		f := newFake()
		p := NewPublisher[order](connected(t, f), PublisherSpec{Stream: "orders"})
		for _, bad := range []string{"", strings.Repeat("k", 300), "a\xffb"} {
			r, err := p.Message(order{ID: 1}).Send(withHandledKey(testCtx(t), bad))
			if err != nil || r.PartitionKey == bad || checkKey(r.PartitionKey) != nil {
				t.Fatalf("handled key %q: Send = %+v, %v; want a process-unique key", bad, r, err)
			}
		}
	})
	t.Run("outside a handler: a process-unique key", func(t *testing.T) {
		f := newFake()
		p := NewPublisher[order](connected(t, f), PublisherSpec{Stream: "orders"})
		r, err := p.Message(order{ID: 1}).Send(testCtx(t))
		if err != nil || r.PartitionKey == "" || r.PartitionKey == "cust-1" {
			t.Fatalf("Send = %+v, %v; want a process-unique key", r, err)
		}
	})
}

// TestHeadersAreCheckedAtPublish: header names follow the generator's tag
// rule, are not the runtime's own (a publisher that set the attempt header
// would have a subscriber count its retries from it), and values must be
// text, checked before any I/O.
func TestHeadersAreCheckedAtPublish(t *testing.T) {
	tests := []struct {
		name, header, value string
		ok                  bool
	}{
		{name: "ordinary", header: "trace-id.v_2", value: "t", ok: true},
		{name: "empty value", header: "trace", value: "", ok: true},
		{name: "empty name", header: "", value: "v"},
		{name: "space in name", header: "trace id", value: "v"},
		{name: "non-ASCII name", header: "trâce", value: "v"},
		{name: "129-character name", header: strings.Repeat("h", 129), value: "v"},
		{name: "invalid UTF-8 value", header: "trace", value: "a\xffb"},
		{name: "the attempt header", header: AttemptHeader, value: "99"},
		{name: "a dead letter's reason header", header: DeadLetterReasonHeader, value: "forged"},
		{name: "the runtime's prefix in another case", header: "Kinesisgen-Attempt", value: "99"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newFake()
			p := NewPublisher[order](connected(t, f), PublisherSpec{Stream: "orders"})
			err := p.Message(order{ID: 1}).PartitionKey("k").Header(tt.header, tt.value).Publish(testCtx(t))
			if tt.ok {
				if err != nil {
					t.Fatalf("valid header refused: %v", err)
				}
				return
			}
			wantKind(t, err, ErrPublish, "orders")
			if calls := f.callSizes(); len(calls) != 0 {
				t.Fatalf("the record reached the service (%d calls)", len(calls))
			}
		})
	}
}

// BenchmarkUniqueKey is the last rung of the key ladder, a keyless
// publish's key: one allocation (the key), no lock.
func BenchmarkUniqueKey(b *testing.B) {
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			_ = uniqueKey()
		}
	})
}
