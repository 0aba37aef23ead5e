package gen

import (
	"fmt"
	"go/token"
	"testing"
	"time"

	"github.com/dave/jennifer/jen"

	"github.com/kinesisgen/kinesisgen/annotations"
)

func TestUnexported(t *testing.T) {
	for in, want := range map[string]string{"Service": "service", "HTTPServer": "httpServer", "ID": "id", "OrderBook": "orderBook", "x": "x", "Über": "über"} {
		if got := unexported(in); got != want {
			t.Errorf("unexported(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestGroupImports(t *testing.T) {
	in := "package p\n\nimport (\n\t\"context\"\n\t\"github.com/x/y\"\n\tz \"strconv\"\n)\n\nvar _ = 1\n"
	want := "package p\n\nimport (\n\t\"context\"\n\tz \"strconv\"\n\n\t\"github.com/x/y\"\n)\n\nvar _ = 1\n"
	if got := string(groupImports([]byte(in))); got != want {
		t.Errorf("groupImports:\n%s\nwant\n%s", got, want)
	}
	single := "package p\n\nimport \"github.com/x/y\"\n"
	if got := string(groupImports([]byte(single))); got != single {
		t.Errorf("a single import changed: %q", got)
	}
}

func TestDurationCode(t *testing.T) {
	for d, want := range map[time.Duration]string{
		1500 * time.Millisecond: "1500 * time.Millisecond",
		2 * time.Minute:         "2 * time.Minute",
		90 * time.Second:        "90 * time.Second",
		time.Hour:               "1 * time.Hour",
		1001 * time.Nanosecond:  "1001 * time.Nanosecond",
	} {
		if got := fmt.Sprintf("%#v", jen.Var().Id("_").Op("=").Add(durationCode(d))); got != "var _ = "+want {
			t.Errorf("durationCode(%v) = %s, want %s", d, got, want)
		}
	}
}

func TestParsePos(t *testing.T) {
	p := &loadedPkg{}
	tests := map[string]token.Position{
		"/a/b.go:3:4": {Filename: "/a/b.go", Line: 3, Column: 4},
		"/a/b.go:3":   {Filename: "/a/b.go", Line: 3},
		"c:/x.go:1:2": {Filename: "c:/x.go", Line: 1, Column: 2},
	}
	for in, want := range tests {
		if got := parsePos(in, p); got != want {
			t.Errorf("parsePos(%q) = %+v, want %+v", in, got, want)
		}
	}
}

// TestSubscribeOptionsMaxRecordSize: max_record_size=KiB becomes
// runtime.MaxRecordSizeKiB, after the create_if_missing option it needs.
func TestSubscribeOptionsMaxRecordSize(t *testing.T) {
	h := &handler{marker: &annotations.Subscriber{Stream: "s", CreateIfMissing: annotations.CreateIfMissing{OnDemand: true}, MaxRecordSize: 4096}}
	got := fmt.Sprintf("%#v", jen.Index().Qual(runtimePath, "SubscribeOption").Values(subscribeOptions(h, "p.F")...))
	want := `[]runtime.SubscribeOption{runtime.CreateOnDemandIfMissing(), runtime.MaxRecordSizeKiB(4096), runtime.HandlerName("p.F")}`
	if got != want {
		t.Errorf("options:\n%s\nwant\n%s", got, want)
	}
}

// TestSubscribeOptionsQueue: queue=, visibility= and max_receives= become
// runtime.Queue, runtime.Visibility and runtime.MaxReceives.
func TestSubscribeOptionsQueue(t *testing.T) {
	h := &handler{marker: &annotations.Subscriber{Stream: "s", CreateIfMissing: annotations.CreateIfMissing{OnDemand: true}, Workers: 8, Queue: "work", Visibility: 45 * time.Second, MaxReceives: 4}}
	got := fmt.Sprintf("%#v", jen.Index().Qual(runtimePath, "SubscribeOption").Values(subscribeOptions(h, "p.F")...))
	want := `[]runtime.SubscribeOption{runtime.CreateOnDemandIfMissing(), runtime.Workers(8), runtime.Queue("work"), runtime.Visibility(45 * time.Second), runtime.MaxReceives(4), runtime.HandlerName("p.F")}`
	if got != want {
		t.Errorf("options:\n%s\nwant\n%s", got, want)
	}
}
