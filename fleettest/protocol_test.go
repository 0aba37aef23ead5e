package fleettest

import (
	"testing"

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

	s := Stats{Owner: "w2", UnixNano: 1700000000000000000, Writes: 12, Checkpoints: 5, Reads: 7}
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
		"short stats":    "#stats w1 1 2 3",
		"bad stats":      "#stats w1 1 2 x 4",
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
