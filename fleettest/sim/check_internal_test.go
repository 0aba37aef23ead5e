package sim

import (
	"strings"
	"testing"
	"time"
)

// TestCheckReportsOverlapsAndDuplicates: the checker names a record handled
// by a second instance while the first still handled the shard, and a
// record handled twice with no crash, partition or lost lease to explain
// it; the same handlings one after the other on one owner are no
// violation.
func TestCheckReportsOverlapsAndDuplicates(t *testing.T) {
	t0 := time.Date(2026, 12, 6, 0, 0, 0, 0, time.UTC)
	rep := &Report{Began: t0, Phases: []Phase{{Name: "join", At: t0, Converged: true}}}
	f := &fleet{handled: map[recID][]handling{
		{"shardId-000000000000", "1"}: {
			{owner: "a", start: t0.Add(time.Second), end: t0.Add(5 * time.Second)},
			{owner: "b", start: t0.Add(2 * time.Second), end: t0.Add(3 * time.Second)},
		},
		{"shardId-000000000001", "7"}: {
			{owner: "c", start: t0.Add(time.Second), end: t0.Add(2 * time.Second)},
		},
	}}
	f.check(rep)
	all := strings.Join(rep.Violations, "\n")
	for _, want := range []string{"1 handlings overlapped another instance's on the same shard", "no crash or partition explains it"} {
		if !strings.Contains(all, want) {
			t.Errorf("violations do not say %q:\n%s", want, all)
		}
	}

	calm := &Report{Began: t0, Phases: []Phase{{Name: "join", At: t0, Converged: true}}}
	f = &fleet{handled: map[recID][]handling{
		{"shardId-000000000000", "1"}: {{owner: "a", start: t0.Add(time.Second), end: t0.Add(2 * time.Second)}},
		{"shardId-000000000000", "2"}: {{owner: "b", start: t0.Add(3 * time.Second), end: t0.Add(4 * time.Second)}},
	}}
	f.check(calm)
	if len(calm.Violations) != 0 {
		t.Errorf("handlings one after another: %v", calm.Violations)
	}
}
