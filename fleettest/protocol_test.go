package fleettest

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

func TestParseLineRoundTrip(t *testing.T) {
	h := Handled{Owner: "w1", Key: "key-007", Index: 42, Shard: "shardId-000000000003", Sequence: "49680768964550037602621911476230196141268232066035613698"}
	gotH, gotS, err := ParseLine(h.String())
	if err != nil || gotS != nil {
		t.Fatalf("ParseLine(%q) = %v, %v, %v; want a handled line", h.String(), gotH, gotS, err)
	}
	if diff := cmp.Diff(h, *gotH); diff != "" {
		t.Errorf("handled line (-want +got):\n%s", diff)
	}

	s := Stats{Owner: "w2", UnixNano: 1700000000000000000, Writes: 12, Checkpoints: 5, Reads: 7, GetRecords: 3, SubscribeToShard: 9}
	gotH, gotS, err = ParseLine(s.String())
	if err != nil || gotH != nil {
		t.Fatalf("ParseLine(%q) = %v, %v, %v; want a stats line", s.String(), gotH, gotS, err)
	}
	if diff := cmp.Diff(s, *gotS); diff != "" {
		t.Errorf("stats line (-want +got):\n%s", diff)
	}
}

func TestParseLineRejectsMalformed(t *testing.T) {
	for name, line := range map[string]string{
		"empty":          "",
		"too few fields": "w1 key-1 3 shardId-0",
		"too many":       "w1 key-1 3 shardId-0 123 extra",
		"bad index":      "w1 key-1 x shardId-0 123",
		"negative index": "w1 key-1 -1 shardId-0 123",
		"short stats":    "#stats w1 1 2 3 4",
		"bad stats":      "#stats w1 1 2 x 4 5 6",
	} {
		t.Run(name, func(t *testing.T) {
			if h, s, err := ParseLine(line); err == nil {
				t.Errorf("ParseLine(%q) = %v, %v, nil; want an error", line, h, s)
			}
		})
	}
}

func TestCompareSequence(t *testing.T) {
	for _, tc := range []struct {
		a, b string
		want int
	}{
		{"9", "10", -1}, // numeric, not textual, order
		{"49680768964550037602621911476230196141268232066035613698", "49680768964550037602621911476230196141268232066035613699", -1},
		{"123", "123", 0},
		{"1000", "999", 1},
	} {
		if got := CompareSequence(tc.a, tc.b); got != tc.want {
			t.Errorf("CompareSequence(%s, %s) = %d, want %d", tc.a, tc.b, got, tc.want)
		}
	}
}

func TestPublishLinesRoundTrip(t *testing.T) {
	c := PublishCommand{First: 1, Stride: 3, Keys: 100, From: 30, N: 20, Pause: 250 * time.Millisecond}
	gotC, err := ParsePublishCommand(c.String())
	if err != nil || gotC != c {
		t.Errorf("ParsePublishCommand(%q) = %+v, %v; want %+v", c.String(), gotC, err, c)
	}
	for _, p := range []Published{
		{Owner: "w1", Key: KeyName(7), Index: 3, Took: 1500 * time.Microsecond},
		{Owner: "w2", Key: KeyName(8), Index: 0, Took: 5 * time.Second, Err: "publish: not sent: context deadline exceeded"},
	} {
		got, done, err := ParsePublished(p.String())
		if err != nil || got == nil || done != "" {
			t.Fatalf("ParsePublished(%q) = %v, %q, %v", p.String(), got, done, err)
		}
		if diff := cmp.Diff(p, *got); diff != "" {
			t.Errorf("publish line (-want +got):\n%s", diff)
		}
	}
	if got, done, err := ParsePublished(PublishDone("w3")); err != nil || got != nil || done != "w3" {
		t.Errorf("ParsePublished(%q) = %v, %q, %v; want done by w3", PublishDone("w3"), got, done, err)
	}
	// An error's newlines must not split its line.
	multi := Published{Owner: "w1", Key: "k", Index: 1, Err: "first\nsecond"}
	if got, _, err := ParsePublished(multi.String()); err != nil || got.Err != "first second" {
		t.Errorf("ParsePublished(%q) = %v, %v; want the message on one line", multi.String(), got, err)
	}
}

func TestPublishLinesRejectMalformed(t *testing.T) {
	for name, line := range map[string]string{
		"too few":        "#pub w1 k 1 100",
		"bad status":     "#pub w1 k 1 100 maybe",
		"err, no reason": "#pub w1 k 1 100 err",
		"ok with more":   "#pub w1 k 1 100 ok extra",
		"bad index":      "#pub w1 k x 100 ok",
		"done, no owner": "#pubdone",
	} {
		if p, done, err := ParsePublished(line); err == nil {
			t.Errorf("%s: ParsePublished(%q) = %v, %q, nil; want an error", name, line, p, done)
		}
	}
	for name, line := range map[string]string{
		"wrong verb": "send 0 1 10 0 5 0",
		"stride 0":   "publish 0 0 10 0 5 0",
		"negative":   "publish 0 1 10 -1 5 0",
		"short":      "publish 0 1 10 0 5",
	} {
		if c, err := ParsePublishCommand(line); err == nil {
			t.Errorf("%s: ParsePublishCommand(%q) = %+v, nil; want an error", name, line, c)
		}
	}
}
