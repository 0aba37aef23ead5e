package annotations

import (
	"go/token"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
)

var at = token.Position{Filename: "x.go", Line: 3, Column: 1}

// ignorePos compares markers by value, not by where they were written.
var ignorePos = cmpopts.IgnoreFields(Message{}, "Pos", "KeyPos")
var ignoreSubPos = cmpopts.IgnoreFields(Subscriber{}, "Pos", "KeyPos")

func intp(n int) *int { return &n }

func TestParseValid(t *testing.T) {
	tests := []struct {
		name string
		text string
		want Marker
	}{
		{"message minimal", `//kinesis:message stream=orders`, &Message{Stream: "orders"}},
		{"message all keys", `//kinesis:message stream=shipments headers=ShipmentKey partition_key="a key"`,
			&Message{Stream: "shipments", Headers: "ShipmentKey", PartitionKey: "a key"}},
		{"subscriber all keys", "//kinesis:subscriber stream=customer-orders create_if_missing=2 workers=4 by_key reply partition_key=receipts start_at=2026-01-02T15:04:05Z batch=500 poll=250ms retries=0 dead_letter=orders.dlq",
			&Subscriber{Stream: "customer-orders", CreateIfMissing: CreateIfMissing{Shards: 2}, Workers: 4, ByKey: true, Reply: true, PartitionKey: "receipts",
				StartAt: StartAt{Kind: StartAtTime, Time: time.Date(2026, 1, 2, 15, 4, 5, 0, time.UTC)}, Batch: 500, Poll: 250 * time.Millisecond,
				Retries: intp(0), DeadLetter: "orders.dlq"}},
		{"tabs and raw quotes", "//kinesis:subscriber\tstream=`s`  start_at=horizon", &Subscriber{Stream: "s", StartAt: StartAt{Kind: StartHorizon}}},
		{"start latest", `//kinesis:subscriber stream=s start_at=latest`, &Subscriber{Stream: "s", StartAt: StartAt{Kind: StartLatest}}},
		{"on-demand stream", `//kinesis:subscriber stream=s create_if_missing=on_demand`, &Subscriber{Stream: "s", CreateIfMissing: CreateIfMissing{OnDemand: true}}},
		{"retry in place", `//kinesis:subscriber stream=s workers=2 by_key retry=in_place`, &Subscriber{Stream: "s", Workers: 2, ByKey: true, Retry: RetryInPlace}},
		{"fan-out", `//kinesis:subscriber stream=s create_if_missing=2 fanout=orders-app.v2_low`, &Subscriber{Stream: "s", CreateIfMissing: CreateIfMissing{Shards: 2}, Fanout: "orders-app.v2_low"}},
		{"queue", `//kinesis:subscriber stream=s create_if_missing=on_demand queue=work visibility=45s max_receives=4 workers=8`, &Subscriber{Stream: "s", CreateIfMissing: CreateIfMissing{OnDemand: true}, Queue: "work", Visibility: 45 * time.Second, MaxReceives: 4, Workers: 8}},
		{"queue by ARN", `//kinesis:subscriber stream=s queue=arn:aws:kinesis:us-east-1:123456789012:queue/abc`, &Subscriber{Stream: "s", Queue: "arn:aws:kinesis:us-east-1:123456789012:queue/abc"}},
		{"large records", `//kinesis:subscriber stream=s create_if_missing=on_demand max_record_size=10240`, &Subscriber{Stream: "s", CreateIfMissing: CreateIfMissing{OnDemand: true}, MaxRecordSize: 10240}},
		{"stream by ARN", `//kinesis:subscriber stream=arn:aws:kinesis:eu-west-1:123456789012:stream/orders dead_letter=arn:aws:kinesis:eu-west-1:123456789012:stream/orders.dlq`,
			&Subscriber{Stream: "arn:aws:kinesis:eu-west-1:123456789012:stream/orders", DeadLetter: "arn:aws:kinesis:eu-west-1:123456789012:stream/orders.dlq"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, diags := ParseComment(at, tt.text)
			if len(diags) != 0 {
				t.Fatalf("diagnostics: %v", diags)
			}
			if diff := cmp.Diff(tt.want, got, ignorePos, ignoreSubPos); diff != "" {
				t.Errorf("ParseComment (-want +got):\n%s", diff)
			}
		})
	}
}

func TestKeyPositions(t *testing.T) {
	m, diags := ParseComment(token.Position{Filename: "a.go", Line: 7, Column: 2, Offset: 40}, `//kinesis:message stream=s headers=H`)
	if len(diags) != 0 {
		t.Fatal(diags)
	}
	got := m.(*Message).KeyPos["headers"]
	if want := (token.Position{Filename: "a.go", Line: 7, Column: 29, Offset: 67}); got != want {
		t.Errorf("headers at %v, want %v", got, want)
	}
}

func TestParseDiagnostics(t *testing.T) {
	tests := []struct {
		text string
		want []string // "col: message"
	}{
		{`//kinesis:mesage stream=x`, []string{"1: unknown marker //kinesis:mesage; did you mean //kinesis:message?"}},
		{`//kinesis:frobnicate`, []string{"1: unknown marker //kinesis:frobnicate; want one of //kinesis:message, //kinesis:subscriber"}},
		{`//kinesis:`, []string{"1: missing marker name after //kinesis:; want message or subscriber"}},
		{`// kinesis:message stream=x`, []string{"1: marker written with a space after //: write //kinesis:message (a marker is a directive comment), or reword the comment"}},
		{`//kinesis:message strem=x`, []string{"19: unknown key strem for //kinesis:message; did you mean stream?", "1: //kinesis:message needs stream=NAME"}},
		{`//kinesis:message stream=x stream=y`, []string{"28: stream given twice"}},
		{`//kinesis:message`, []string{"1: //kinesis:message needs stream=NAME"}},
		{`//kinesis:message stream=x headers=a.B`, []string{"28: headers=a.B: want the name of a struct type in this package"}},
		{`//kinesis:message stream="a b"`, []string{`19: stream="a b": a stream name is 1 to 128 characters of letters, digits, '_', '-' and '.'`}},
		{`//kinesis:message stream=x partition_key=` + strings.Repeat("k", 257), []string{"28: partition_key=\"kkkkkkkkkkkkkkkk\"...: partition key \"kkkkkkkkkkkkkkkk\"... is 257 UTF-16 units long (257 characters, 257 bytes); the service allows at most 256"}},
		{`//kinesis:message stream=x partition_key=` + strings.Repeat("😀", 129), []string{"28: partition_key=\"" + strings.Repeat("😀", 16) + "\"...: partition key \"" + strings.Repeat("😀", 16) + "\"... is 258 UTF-16 units long (129 characters, 516 bytes); the service allows at most 256"}},
		{`//kinesis:subscriber stream=x workers=four`, []string{"31: workers=four: not a whole number"}},
		{`//kinesis:subscriber stream=x workers=0`, []string{"31: workers=0: must be 1 to 1024"}},
		{`//kinesis:subscriber stream=x create_if_missing=0`, []string{"31: create_if_missing=0: must be 1 to 100000 shards, or on_demand"}},
		{`//kinesis:subscriber stream=x create_if_missing=ondemand`, []string{"31: create_if_missing=ondemand: want a shard count or on_demand"}},
		{`//kinesis:subscriber stream=x batch=10001`, []string{"31: batch=10001: must be 1 to 10000"}},
		{`//kinesis:subscriber stream=x batch=0`, []string{"31: batch=0: must be 1 to 10000"}},
		{`//kinesis:subscriber stream=x retries=-1`, []string{"31: retries=-1: must be 0 to 1000000"}},
		{`//kinesis:subscriber stream=x retry=inline`, []string{"31: retry=inline: want tip (a copy at the stream's tip, the default) or in_place (back off in the lane, keeping the key's order)"}},
		{`//kinesis:subscriber stream=x poll=soon`, []string{"31: poll=soon: not a duration; write for example 500ms or 2s"}},
		{`//kinesis:subscriber stream=x poll=100ms`, []string{"31: poll=100ms: must be at least 200ms (five reads per shard per second)"}},
		{`//kinesis:subscriber stream=x start_at=yesterday`, []string{"31: start_at=yesterday: want horizon, latest or an RFC 3339 time such as 2026-01-02T15:04:05Z"}},
		{`//kinesis:subscriber stream=x by_key`, []string{"31: by_key needs workers=N (the number of lanes)"}},
		{`//kinesis:subscriber stream=arn:aws:kinesis:us-east-1:12345:stream/x`, []string{`22: stream=arn:aws:kinesis:us-east-1:12345:stream/x: "arn:aws:kinesis:us-east-1:12345:stream/x" is not a stream ARN (arn:aws:kinesis:REGION:ACCOUNT:stream/NAME): the account is not 12 digits`}},
		{`//kinesis:subscriber stream=x max_record_size=2048`, []string{"31: max_record_size sets the record size of the streams create_if_missing creates; it needs create_if_missing"}},
		{`//kinesis:subscriber stream=x create_if_missing=1 max_record_size=10241`, []string{"51: max_record_size=10241: must be 1024 to 10240"}},
		{`//kinesis:subscriber stream=x partition_key=k`, []string{"31: partition_key on a subscriber is the key of its replies; it needs reply"}},
		{`//kinesis:subscriber stream=x dead_letter=x`, []string{"31: dead_letter must be another stream than the one read"}},
		{`//kinesis:subscriber stream=x reply=true`, []string{"31: reply is a flag and takes no value"}},
		{`//kinesis:subscriber stream=x workers`, []string{"31: workers needs a value: workers=N"}},
		{`//kinesis:subscriber stream=x workers=`, []string{"31: workers= has no value"}},
		{`//kinesis:subscriber stream=x =4`, []string{"31: missing key before ="}},
		{`//kinesis:subscriber stream="x`, []string{"22: stream: unterminated or malformed quoted value"}},
		{`//kinesis:subscriber stream="x"y`, []string{"22: stream: want a blank after the quoted value"}},
		{`//kinesis:subscriber stream=x fanout=`, []string{"31: fanout= has no value"}},
		{`//kinesis:subscriber stream=x fanout=a/b`, []string{"31: fanout=a/b: a stream consumer name is 1 to 128 characters of letters, digits, '_', '-' and '.'"}},
		{`//kinesis:subscriber stream=x fanout=` + strings.Repeat("c", 129), []string{"31: fanout=\"cccccccccccccccc\"...: a stream consumer name is 1 to 128 characters of letters, digits, '_', '-' and '.'"}},
		{`//kinesis:subscriber stream=x fanout="my app"`, []string{"31: fanout=\"my app\": a stream consumer name is 1 to 128 characters of letters, digits, '_', '-' and '.'"}},
		{`//kinesis:subscriber stream=x poll=1s fanout=app`, []string{"31: poll sets how GetRecords is polled; a fanout subscriber does not poll (Kinesis pushes its records): drop one of them"}},
		{`//kinesis:subscriber stream=x fanout=app batch=10`, []string{"42: batch sets how GetRecords is polled; a fanout subscriber does not poll (Kinesis pushes its records): drop one of them"}},
		{`//kinesis:subscriber stream=x queue=a/b`, []string{"31: queue=a/b: a queue is named by 1 to 128 characters of letters, digits, '_', '-' and '.', or by its ARN (arn:aws:kinesis:REGION:ACCOUNT:queue/ID)"}},
		{`//kinesis:subscriber stream=x queue=q visibility=1500ms`, []string{"39: visibility=1500ms: must be whole seconds, 1s to 12h"}},
		{`//kinesis:subscriber stream=x queue=q max_receives=0`, []string{"39: max_receives=0: must be 1 to 1000"}},
		{`//kinesis:subscriber stream=x visibility=5s`, []string{"31: visibility is a setting of a queue subscriber; it needs queue"}},
		{`//kinesis:subscriber stream=x queue=q create_if_missing=2`, []string{"39: queues need an on-demand stream: create_if_missing=on_demand"}},
		{`//kinesis:subscriber stream=x queue=q poll=1s`, []string{"39: poll sets how GetRecords is polled; a queue subscriber long-polls the queue instead: drop one of them"}},
		{`//kinesis:subscriber stream=x fan_out=app`, []string{"31: unknown key fan_out for //kinesis:subscriber; did you mean fanout?"}},
		{`//kinesis:subscriber stream=x deadletter=y`, []string{"31: unknown key deadletter for //kinesis:subscriber; did you mean dead_letter?"}},
		{`//kinesis:subscriber stream=x aggregate`, []string{"31: aggregate is a key of //kinesis:message (on the message's struct type), not of //kinesis:subscriber"}},
		{`//kinesis:message stream=x fanout=app`, []string{"28: fanout is a key of //kinesis:subscriber (on the handler), not of //kinesis:message"}},
	}
	for _, tt := range tests {
		t.Run(tt.text, func(t *testing.T) {
			_, diags := ParseComment(at, tt.text)
			var got []string
			for _, d := range diags {
				if d.Pos.Filename != "x.go" || d.Pos.Line != 3 {
					t.Errorf("diagnostic at %v, want x.go line 3", d.Pos)
				}
				got = append(got, strings.TrimPrefix(d.String(), "x.go:3:"))
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("diagnostics (-want +got):\n%s", diff)
			}
		})
	}
}

// TestKeyOnTheWrongMarker: every key that only one marker has is refused
// on the other, with a diagnostic naming the marker it belongs to; the keys
// both have parse on both.
func TestKeyOnTheWrongMarker(t *testing.T) {
	values := map[string]string{"create_if_missing": "2", "workers": "2", "batch": "10", "poll": "1s", "retries": "1",
		"start_at": "horizon", "fanout": "app", "dead_letter": "d", "headers": "H", "partition_key": "k"}
	for _, spec := range specs {
		for _, other := range specs {
			if other == spec {
				continue
			}
			for _, f := range other.fields {
				arg := f.key
				if !f.flag {
					arg += "=" + values[f.key]
				}
				text := Prefix + spec.name + " stream=x " + arg
				t.Run(text, func(t *testing.T) {
					_, diags := ParseComment(at, text)
					var msgs []string
					for _, d := range diags {
						msgs = append(msgs, d.Msg)
					}
					if spec.byKey[f.key] != nil {
						for _, m := range msgs {
							if strings.Contains(m, "is a key of") || strings.Contains(m, "unknown key") {
								t.Errorf("%s, which both markers have, refused: %s", f.key, m)
							}
						}
						return
					}
					want := f.key + " is a key of " + Prefix + other.name + " (" + other.place + "), not of " + Prefix + spec.name
					if !slices.Contains(msgs, want) {
						t.Errorf("diagnostics %q, want %q", msgs, want)
					}
				})
			}
		}
	}
}

func TestNotAMarker(t *testing.T) {
	for _, text := range []string{"// Post posts an order.", "//go:generate go tool kinesisgen", "//\t//kinesis:message stream=x", "// kinesis: the word", "//kinesisx:message"} {
		if m, diags := ParseComment(at, text); m != nil || diags != nil {
			t.Errorf("ParseComment(%q) = %v, %v; want nothing", text, m, diags)
		}
	}
}

func TestPrintCanonical(t *testing.T) {
	m, _ := ParseComment(at, "//kinesis:subscriber  dead_letter=d poll=1500ms stream=s  reply partition_key=\"k k\"")
	if got, want := m.String(), `//kinesis:subscriber stream=s reply partition_key="k k" poll=1.5s dead_letter=d`; got != want {
		t.Errorf("String() = %s, want %s", got, want)
	}
}

func TestHeaderTag(t *testing.T) {
	tests := []struct {
		tag     string
		name    string
		ok      bool
		wantErr bool
	}{
		{`kinesis:"partition-key"`, "partition-key", true, false},
		{`json:"x" kinesis:"trace.id"`, "trace.id", true, false},
		{`json:"x"`, "", false, false},
		{`kinesis:""`, "", true, true},
		{`kinesis:"a b"`, "", true, true},
		{`kinesis:"a,omitempty"`, "", true, true},
		{`kinesis:"kinesisgen-attempt"`, "", true, true}, // the runtime's own
	}
	for _, tt := range tests {
		name, ok, err := HeaderTag(tt.tag)
		if name != tt.name || ok != tt.ok || (err != nil) != tt.wantErr {
			t.Errorf("HeaderTag(%s) = %q, %v, %v", tt.tag, name, ok, err)
		}
	}
}

func TestHelpNamesEveryKey(t *testing.T) {
	help := Help()
	for _, spec := range specs {
		if !strings.Contains(help, synopsis(spec)) {
			t.Errorf("help lacks the synopsis %s", synopsis(spec))
		}
		for _, f := range spec.fields {
			if !strings.Contains(help, "\n  "+f.key) {
				t.Errorf("help lacks key %s of %s", f.key, spec.name)
			}
		}
	}
	if !strings.Contains(help, "Workers runs up to N deliveries at once") {
		t.Error("help does not carry the field doc comments")
	}
}

func FuzzParse(f *testing.F) {
	for _, s := range []string{
		`//kinesis:message stream=orders headers=K partition_key="a \"b\""`,
		"//kinesis:subscriber stream=s create_if_missing=2 workers=4 by_key reply partition_key=r start_at=2026-01-02T15:04:05.5+02:00 batch=10 poll=1s retries=3 dead_letter=d",
		"//kinesis:subscriber stream=`x` start_at=horizon",
		"//kinesis:subscriber stream=x create_if_missing=on_demand",
		"//kinesis:subscriber stream=x fanout=app.v1",
		"//kinesis:subscriber stream=x create_if_missing=on_demand queue=q visibility=30s max_receives=3",
		"// kinesis:message", "//kinesis:", "//kinesis:message stream=\"\\xff\"",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, text string) {
		m, diags := ParseComment(at, text)
		if m == nil || len(diags) != 0 {
			return
		}
		printed := m.String()
		m2, diags2 := ParseComment(at, printed)
		if len(diags2) != 0 {
			t.Fatalf("%q printed as %q, which does not parse: %v", text, printed, diags2)
		}
		if diff := cmp.Diff(m, m2, ignorePos, ignoreSubPos); diff != "" {
			t.Fatalf("%q printed as %q parses to another value (-first +second):\n%s", text, printed, diff)
		}
	})
}
