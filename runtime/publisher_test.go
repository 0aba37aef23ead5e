package runtime

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/kinesis/types"

	"github.com/kinesisgen/kinesisgen/internal/randsrc"
)

// shipmentKey is a header contract as the generator writes one: a field
// tagged kinesis:"partition-key" plus an ordinary header.
type shipmentKey struct {
	Customer string // kinesis:"partition-key"
	Trace    string // kinesis:"trace"
}

func (k shipmentKey) EncodeHeaders(h Headers) {
	h[PartitionKeyHeader] = k.Customer
	if k.Trace != "" {
		h["trace"] = k.Trace
	}
}

func TestKeyLadder(t *testing.T) {
	tests := []struct {
		name        string
		mount       []PublishOption
		spec        string // PublisherSpec.PartitionKey
		build       func(m *Message[order]) *Message[order]
		wantKey     string // "" means a process-unique key
		wantHeaders Headers
	}{
		{
			name:  "step wins over header and mount site",
			spec:  "spec-key",
			mount: []PublishOption{WithPartitionKey("mount-key")},
			build: func(m *Message[order]) *Message[order] {
				return m.Header(PartitionKeyHeader, "hdr").PartitionKey("step")
			},
			wantKey: "step",
		},
		{
			name:    "header contract field tagged partition-key",
			mount:   []PublishOption{WithPartitionKey("mount-key")},
			build:   func(m *Message[order]) *Message[order] { return m.Headers(shipmentKey{Customer: "cust-9"}) },
			wantKey: "cust-9",
		},
		{
			name: "header map carried over from a message from elsewhere",
			build: func(m *Message[order]) *Message[order] {
				// The Headers of a Delivery read from another broker of the framework.
				delivered := Headers{PartitionKeyHeader: "cust-7", "trace": "t-1"}
				return m.Headers(delivered)
			},
			spec:        "spec-key",
			wantKey:     "cust-7",
			wantHeaders: Headers{"trace": "t-1"},
		},
		{
			name:    "mount-site option over the spec",
			spec:    "spec-key",
			mount:   []PublishOption{WithPartitionKey("mount-key")},
			wantKey: "mount-key",
		},
		{
			name:    "spec key (the message marker's partition_key)",
			spec:    "spec-key",
			wantKey: "spec-key",
		},
		{
			name: "process-unique key when nothing names one",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newFake()
			b := connected(t, f)
			p := NewPublisher[order](b, PublisherSpec{Stream: "orders", PartitionKey: tt.spec}, tt.mount...)
			m := p.Message(order{ID: 1, Customer: "ada"})
			if tt.build != nil {
				m = tt.build(m)
			}
			r, err := m.Send(testCtx(t))
			if err != nil {
				t.Fatalf("Send: %v", err)
			}
			recs := f.records()
			if len(recs) != 1 {
				t.Fatalf("service holds %d records, want 1", len(recs))
			}
			got := recs[0]
			if tt.wantKey != "" && got.Key != tt.wantKey {
				t.Errorf("record key %q, want %q", got.Key, tt.wantKey)
			}
			if tt.wantKey == "" && (got.Key == "" || got.Key == tt.spec) {
				t.Errorf("record key %q, want a process-unique key", got.Key)
			}
			if r.PartitionKey != got.Key || r.SequenceNumber != got.Seq || r.ShardID != got.Shard || r.Stream != "orders" {
				t.Errorf("receipt %+v does not match the stored record %+v", r, got)
			}
			h, payload, err := decodeEnvelope(got.Data)
			if err != nil {
				t.Fatalf("decode: %v", err)
			}
			if _, ok := h[PartitionKeyHeader]; ok {
				t.Errorf("the partition-key header travelled in the envelope: %v", h)
			}
			if !maps.Equal(h, tt.wantHeaders) {
				t.Errorf("headers %v, want %v", h, tt.wantHeaders)
			}
			if len(tt.wantHeaders) == 0 && !bytes.Equal(got.Data, payload) {
				t.Errorf("a record without headers must be the plain payload, got %q", got.Data)
			}
			var o order
			if err := json.Unmarshal(payload, &o); err != nil || o != (order{ID: 1, Customer: "ada"}) {
				t.Errorf("payload %q decodes to %+v, %v", payload, o, err)
			}
		})
	}
}

func TestProcessUniqueKeysDiffer(t *testing.T) {
	f := newFake()
	p := NewPublisher[order](connected(t, f), PublisherSpec{Stream: "orders"})
	seen := map[string]bool{}
	for i := range 100 {
		r, err := p.Message(order{ID: i}).Send(testCtx(t))
		if err != nil {
			t.Fatal(err)
		}
		if seen[r.PartitionKey] {
			t.Fatalf("key %q used twice", r.PartitionKey)
		}
		seen[r.PartitionKey] = true
	}
}

// TestUniqueKeysFollowASeed: the deterministic simulation seeds the
// process-unique keys per schedule (randsrc.Seed), so a keyless publish
// gets the same key whenever its schedule runs; afterwards the process's
// own sequence goes on.
func TestUniqueKeysFollowASeed(t *testing.T) {
	f := newFake()
	p := NewPublisher[order](connected(t, f), PublisherSpec{Stream: "orders"})
	send := func() string {
		r, err := p.Message(order{ID: 1}).Send(testCtx(t))
		if err != nil {
			t.Fatal(err)
		}
		return r.PartitionKey
	}
	before := send()
	var runs [2][]string
	for i := range runs {
		restore := randsrc.Seed(29)
		for range 3 {
			runs[i] = append(runs[i], send())
		}
		restore()
	}
	if !slices.Equal(runs[0], runs[1]) {
		t.Errorf("seed 29's keyless publishes got keys %v, then %v", runs[0], runs[1])
	}
	prefix := before[:strings.LastIndex(before, "-")+1]
	if strings.HasPrefix(runs[0][0], prefix) {
		t.Errorf("seeded key %q has the process's prefix %q", runs[0][0], prefix)
	}
	if after := send(); !strings.HasPrefix(after, prefix) || after == before {
		t.Errorf("after the seeded run the key is %q, want the process's sequence (%q) going on", after, before)
	}
}

func TestInvalidKeysFailBeforeAnyCall(t *testing.T) {
	tests := []struct {
		name  string
		key   string
		mount string
		ok    bool
	}{
		{name: "empty step key", key: ""},
		{name: "257 ASCII characters", key: strings.Repeat("k", 257)},
		{name: "256 ASCII characters", key: strings.Repeat("k", 256), ok: true},
		{name: "256 two-byte characters (512 bytes)", key: strings.Repeat("é", 256), ok: true},
		{name: "128 four-byte characters (256 UTF-16 units)", key: strings.Repeat("🚚", 128), ok: true},
		{name: "129 four-byte characters (258 UTF-16 units)", key: strings.Repeat("🚚", 129)},
		{name: "200 four-byte characters", key: strings.Repeat("🚚", 200)},
		{name: "254 ASCII and one astral character (256 units)", key: strings.Repeat("k", 254) + "🚚", ok: true},
		{name: "255 ASCII and one astral character (257 units)", key: strings.Repeat("k", 255) + "🚚"},
		{name: "256 three-byte characters (768 bytes)", key: strings.Repeat("中", 256), ok: true},
		{name: "257 two-byte characters", key: strings.Repeat("é", 257)},
		{name: "invalid UTF-8", key: "a\xffb"},
		{name: "a lone surrogate encoded in UTF-8", key: "a\xed\xa0\x80b"},
		{name: "257-character mount-site key", mount: strings.Repeat("m", 257)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newFake()
			p := NewPublisher[order](connected(t, f), PublisherSpec{Stream: "orders"}, WithPartitionKey(tt.mount))
			m := p.Message(order{ID: 1})
			if tt.mount == "" {
				m = m.PartitionKey(tt.key)
			}
			err := m.Publish(testCtx(t))
			if tt.ok {
				if err != nil {
					t.Fatalf("valid key refused: %v", err)
				}
				if recs := f.records(); len(recs) != 1 || recs[0].Key != tt.key {
					t.Fatalf("stored %+v, want one record keyed %q", recs, tt.key)
				}
				return
			}
			wantKind(t, err, ErrPublish, "orders")
			key := tt.key + tt.mount
			if len(key) > 40 && strings.Contains(err.Error(), key) {
				t.Errorf("the error quotes the whole key: %v", err)
			}
			if len(key) > 0 && !strings.Contains(err.Error(), fmt.Sprintf("%d bytes", len(key))) {
				t.Errorf("the error does not name the key's length (%d bytes): %v", len(key), err)
			}
			if calls := f.callSizes(); len(calls) != 0 {
				t.Fatalf("an invalid key reached the service (%d calls)", len(calls))
			}
		})
	}
}

func TestEmptyStreamIsInvalid(t *testing.T) {
	f := newFake()
	err := NewPublisher[order](connected(t, f), PublisherSpec{}).Publish(testCtx(t), order{})
	wantKind(t, err, ErrInvalid, "")
	if len(f.callSizes()) != 0 {
		t.Fatal("an empty stream name reached the service")
	}
}

// rawCodec publishes []byte messages as they are, to size records exactly.
type rawCodec struct{}

func (rawCodec) Marshal(v any) ([]byte, error)      { return v.([]byte), nil }
func (rawCodec) Unmarshal(data []byte, v any) error { *v.(*[]byte) = data; return nil }

func TestRecordSizeLimit(t *testing.T) {
	const key = "k1234" // 5 bytes
	tests := []struct {
		name    string
		data    int
		headers Headers
		ok      bool
	}{
		{name: "data plus key exactly 1 MiB", data: MaxRecordSize - len(key), ok: true},
		{name: "one byte over", data: MaxRecordSize - len(key) + 1},
		{name: "fits alone, over with the envelope", data: MaxRecordSize - len(key) - 4, headers: Headers{"trace": "t"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newFake()
			p := NewPublisher[[]byte](connected(t, f, WithCodec(rawCodec{})), PublisherSpec{Stream: "blobs"})
			m := p.Message(make([]byte, tt.data)).PartitionKey(key)
			for k, v := range tt.headers {
				m.Header(k, v)
			}
			err := m.Publish(testCtx(t))
			if tt.ok {
				if err != nil {
					t.Fatalf("record at the limit refused: %v", err)
				}
				return
			}
			e := wantKind(t, err, ErrPublish, "blobs")
			if !strings.Contains(e.Error(), "limit") {
				t.Errorf("error %q does not name the limit", e)
			}
			if len(f.callSizes()) != 0 {
				t.Fatal("an oversize record reached the service")
			}
		})
	}
}

func TestHeadersTravelInTheEnvelope(t *testing.T) {
	f := newFake()
	p := NewPublisher[order](connected(t, f), PublisherSpec{Stream: "orders"})
	err := p.Message(order{ID: 3}).Header("trace", "abc").Header("tenant", "x|y\nz").PartitionKey("c3").Publish(testCtx(t))
	if err != nil {
		t.Fatal(err)
	}
	h, payload, err := decodeEnvelope(f.records()[0].Data)
	if err != nil {
		t.Fatal(err)
	}
	if want := (Headers{"trace": "abc", "tenant": "x|y\nz"}); !maps.Equal(h, want) {
		t.Errorf("headers %v, want %v", h, want)
	}
	if string(payload) != `{"id":3,"customer":""}` {
		t.Errorf("payload %s", payload)
	}
}

func TestPutLeavesThePartitionKeyHeaderOutOfTheEnvelope(t *testing.T) {
	f := newFake()
	c, _ := connected(t, f).connection()
	h := Headers{PartitionKeyHeader: "k1", "trace": "t"}
	if _, err := c.put(testCtx(t), Outgoing{Stream: "orders", PartitionKey: "k1", Headers: h, Payload: []byte("{}")}); err != nil {
		t.Fatal(err)
	}
	got, _, err := decodeEnvelope(f.records()[0].Data)
	if err != nil || !maps.Equal(got, Headers{"trace": "t"}) {
		t.Errorf("envelope headers %v, %v; want only trace", got, err)
	}
	if _, ok := h[PartitionKeyHeader]; !ok {
		t.Error("put changed the caller's header map")
	}
}

func TestPublishAll(t *testing.T) {
	f := newFake()
	f.entryFault = func(_ int, e types.PutRecordsRequestEntry) *string {
		if strings.Contains(string(e.Data), `"id":13,`) {
			return aws.String("KMSDisabledException") // not retryable: that record fails alone
		}
		return nil
	}
	p := NewPublisher[order](connected(t, f), PublisherSpec{Stream: "orders", PartitionKey: "one-key"})
	msgs := make([]order, 40)
	for i := range msgs {
		msgs[i] = order{ID: i}
	}
	err := PublishAll(testCtx(t), p, msgs)
	var ee *EntryError
	if !errors.Is(err, ErrPublish) || !errors.As(err, &ee) || ee.Code != "KMSDisabledException" {
		t.Fatalf("PublishAll: %v, want the one refused record's error", err)
	}
	var ids []int
	for _, r := range f.records() {
		var o order
		if err := json.Unmarshal(r.Data, &o); err != nil || r.Key != "one-key" {
			t.Fatalf("stored %q under %q: %v", r.Data, r.Key, err)
		}
		ids = append(ids, o.ID)
	}
	want := slices.DeleteFunc(seqInts(40), func(i int) bool { return i == 13 })
	if !slices.Equal(ids, want) {
		t.Errorf("stored %v, want every id but 13, in slice order", ids)
	}
	if err := PublishAll(testCtx(t), NewPublisher[order](NewBroker(), PublisherSpec{Stream: "orders"}), msgs[:2]); !errors.Is(err, ErrNotConnected) {
		t.Errorf("PublishAll before Connect: %v", err)
	}
}

func seqInts(n int) []int {
	s := make([]int, n)
	for i := range s {
		s[i] = i
	}
	return s
}
