package dst

import (
	"fmt"
	"slices"
	"strings"
)

// Runner runs one schedule (in a fresh bubble) and returns its result.
type Runner func(Config) *Result

// Shrink looks for a shorter schedule than failed's that still breaks an
// invariant of the same kind: it drops chunks of events (halves, then
// quarters, … then single events; the joins at time zero stay, so a
// fleet is there) and keeps a drop whenever the run still fails so. It
// stops after budget runs. It returns the shortest failing result found
// (failed itself when no drop kept failing).
func Shrink(run Runner, cfg Config, failed *Result, budget int) *Result {
	want := Kinds(failed.Violations)
	best := failed
	evs := slices.Clone(failed.Events)
	still := func(r *Result) bool {
		for _, k := range Kinds(r.Violations) {
			if slices.Contains(want, k) {
				return true
			}
		}
		return false
	}
	runs := 0
	for chunk := max(1, len(evs)/2); chunk >= 1 && runs < budget; chunk /= 2 {
		for i := 0; i < len(evs) && runs < budget; {
			if evs[i].At == 0 && evs[i].Kind == Join {
				i++
				continue
			}
			j := min(len(evs), i+chunk)
			try := slices.Concat(evs[:i], evs[j:])
			c := cfg
			c.Events = try
			runs++
			if r := run(c); still(r) {
				evs, best = try, r
				continue // same i: the next chunk moved here
			}
			i = j
		}
		if chunk == 1 {
			break
		}
	}
	return best
}

// Report is the text printed for a failing run: the seed, how to run it
// again, the violations, the schedule and the trace.
func Report(r *Result, rerun string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "dst: seed %d (mix %s) broke %d invariant(s); reproduce with:\n    %s\n", r.Seed, r.Mix, len(r.Violations), rerun)
	for _, v := range r.Violations {
		fmt.Fprintf(&b, "  - %s\n", v)
	}
	fmt.Fprintf(&b, "schedule (%d events; replay it with -dst.events=%q):\n", len(r.Events), EncodeEvents(r.Events))
	for _, e := range r.Events {
		fmt.Fprintf(&b, "  %s\n", e)
	}
	fmt.Fprintf(&b, "trace (%d published, %d handler runs):\n", r.Published, r.Handled)
	for _, t := range r.Trace {
		fmt.Fprintf(&b, "  %s\n", t)
	}
	return b.String()
}
