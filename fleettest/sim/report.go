package sim

import (
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/kinesisgen/kinesisgen/runtime/lease"
)

// Report is what one run measured.
type Report struct {
	Config    Config
	Began     time.Time
	Ended     time.Time
	Phases    []Phase
	Rest      Window // the fleet at rest: nothing published, nothing changing
	ScanUnits int64  // one strongly consistent Scan of the lease table (as at rest), in read units
	Total     Counts
	Published int
	// Losses counts leases lost involuntarily: fenced for want of a
	// renewal, or found taken by another instance (the crashed and the
	// cut-off instance's included).
	Losses     int
	Violations []string // broken invariants; empty when the run passed
}

// Phase is one event and the fleet settling after it.
type Phase struct {
	Name    string
	Subject string    // the instance that joined, left, crashed or was cut off
	At      time.Time // when the event happened
	Live    int       // instances in the fleet after the event
	// Converged: the fleet was balanced (every lease held by a live
	// instance, none being handed over, each instance at its fair share)
	// for Settle, Convergence after the event; Stuck says what was not
	// balanced when it gave up.
	Converged   bool
	Convergence time.Duration
	Stuck       string
	PassEvery   time.Duration // the lease-pass interval
	// FairShare is when the subject (joined or healed) first held its fair
	// share (the floor of leases over instances).
	FairShare time.Duration
	// FailedOver is when every shard the subject held was read by a live
	// instance again (it left, crashed or was cut off); Failover is the
	// failover setting.
	FailedOver time.Duration
	Failover   time.Duration
	Moves      int // owner changes from the event to the end of the phase
	MinMoves   int // the fewest that reach a balanced fleet
	// Duplicates are records handled again in this phase; AfterLoss
	// those whose earlier handler then lost the lease involuntarily (not
	// the crashed or cut-off instance: a store too slow to renew in time);
	// Unexplained the rest, which a graceful handoff caused.
	Duplicates  int
	AfterLoss   int
	Unexplained int
	Window      Window // the lease-store traffic from the event to the end of the phase
}

// Passes is the convergence time in lease passes.
func (p Phase) Passes() float64 { return p.Convergence.Seconds() / p.PassEvery.Seconds() }

// Window is the lease-store traffic over a stretch of time.
type Window struct {
	Dur    time.Duration
	Counts Counts
}

func (w Window) per(n float64) float64 {
	if w.Dur <= 0 {
		return 0
	}
	return n / w.Dur.Seconds()
}

// ReadsPerSec, ItemsPerSec, WritesPerSec, RCUPerSec and WCUPerSec are rates
// over the window.
func (w Window) ReadsPerSec() float64  { return w.per(float64(w.Counts.Reads())) }
func (w Window) ItemsPerSec() float64  { return w.per(float64(w.Counts.ItemsRead)) }
func (w Window) WritesPerSec() float64 { return w.per(float64(w.Counts.Writes())) }
func (w Window) RCUPerSec() float64    { return w.per(w.Counts.RCU) }
func (w Window) WCUPerSec() float64    { return w.per(w.Counts.WCU) }

// Monthly is the on-demand cost of the window's traffic sustained for a month.
func (w Window) Monthly(p Prices) float64 { return p.Monthly(w.RCUPerSec(), w.WCUPerSec()) }

// Ops lists the write calls by operation, as "renew 333.0/s, checkpoint 1.2/s".
func (w Window) Ops() string {
	var parts []string
	for o := Op(0); o < opCount; o++ {
		if n := w.Counts.Calls[o]; n > 0 {
			parts = append(parts, fmt.Sprintf("%s %.1f/s", o, w.per(float64(n))))
		}
	}
	return strings.Join(parts, ", ")
}

// cells are the traffic columns of a report row.
func (w Window) cells() string {
	return fmt.Sprintf("%.1f | %.0f | %.1f | %.1f (%.1f) | %.1f | %.0f",
		w.ReadsPerSec(), w.ItemsPerSec(), w.RCUPerSec(), w.WritesPerSec(), w.per(float64(w.Counts.Calls[OpCheckpoint])), w.WCUPerSec(), w.Monthly(OnDemand))
}

func (w Window) summary() string {
	return fmt.Sprintf("%.1f reads/s (%.0f items/s, %.1f RCU/s), %.1f writes/s (%.1f WCU/s; %s; %d creates refused), $%.0f/month on demand",
		w.ReadsPerSec(), w.ItemsPerSec(), w.RCUPerSec(), w.WritesPerSec(), w.WCUPerSec(), w.Ops(), w.Counts.RefusedCreates, w.Monthly(OnDemand))
}

// MembersLine gives the member calls' units a second in each layout, the
// writes also against 1.2 × instances ÷ renew (issue 34's bound).
func (w Window) MembersLine(instances int, renew time.Duration) string {
	var parts []string
	for _, l := range []lease.MembersLayout{lease.MembersItem, lease.MembersTable, lease.MembersMigrating} {
		parts = append(parts, fmt.Sprintf("%s %.1f RCU/s, %.1f WCU/s", l, w.per(w.Counts.MembersRCU[l]), w.per(w.Counts.MembersWCU[l])))
	}
	return strings.Join(parts, "; ") + fmt.Sprintf(" (write bound 1.2 × %d ÷ %v = %.1f WCU/s)", instances, renew, 1.2*float64(instances)/renew.Seconds())
}

func (p Phase) summary() string {
	conv := "not converged: " + p.Stuck
	if p.Converged {
		conv = fmt.Sprintf("converged in %s (%.1f passes)", secs(p.Convergence), p.Passes())
	}
	s := fmt.Sprintf("%s; %d/%d moves (min); %d duplicates (%d after a lost lease, %d graceful)", conv, p.Moves, p.MinMoves, p.Duplicates, p.AfterLoss, p.Unexplained)
	if p.FairShare > 0 {
		s += "; at fair share in " + secs(p.FairShare)
	}
	if p.FailedOver > 0 {
		s += fmt.Sprintf("; its shards read again in %s (%.2f× failover)", secs(p.FailedOver), p.FailedOver.Seconds()/p.Failover.Seconds())
	}
	return s + "; " + p.Window.summary()
}

func secs(d time.Duration) string { return fmt.Sprintf("%.1f s", d.Seconds()) }

func (r *Report) add(p Phase) { r.Phases = append(r.Phases, p) }

// phaseAt returns the phase under way at t: the last one begun by then
// (a handling between phases belongs to the one before).
func (r *Report) phaseAt(t time.Time) *Phase {
	var at *Phase
	for i := range r.Phases {
		if !t.Before(r.Phases[i].At) {
			at = &r.Phases[i]
		}
	}
	return at
}

// Write prints the report as Markdown: one table row per phase, the
// at-rest traffic and its cost, and the violations.
func (r *Report) Write(w io.Writer, label string) {
	c := r.Config
	fmt.Fprintf(w, "%s: %d shards × %d instances (+1 joining), failover %v, renew %v, sync %v, checkpoint %v, lease pass every %v; %d records published; %v simulated\n\n",
		label, c.Shards, c.Instances, c.Failover, c.Renew, c.Sync, c.Checkpoint, c.passEvery(), r.Published, r.Ended.Sub(r.Began).Round(time.Second))
	fmt.Fprintln(w, "| phase | balanced after | lease passes | subject at fair share | read again after (× failover) | owner changes / min | duplicates (after a lost lease, graceful) | reads/s | items read/s | RCU/s | writes/s (checkpoints) | WCU/s | $/month at this rate |")
	fmt.Fprintln(w, "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
	for _, p := range r.Phases {
		conv, passes := "not balanced", "–"
		if p.Converged {
			conv, passes = secs(p.Convergence), fmt.Sprintf("%.1f", p.Passes())
		}
		fair, failed := "", ""
		if p.FairShare > 0 {
			fair = secs(p.FairShare)
		}
		if p.FailedOver > 0 {
			failed = fmt.Sprintf("%s (%.2f×)", secs(p.FailedOver), p.FailedOver.Seconds()/p.Failover.Seconds())
		}
		fmt.Fprintf(w, "| %s %s | %s | %s | %s | %s | %d / %d | %d (%d, %d) | %s |\n",
			p.Name, p.Subject, conv, passes, fair, failed, p.Moves, p.MinMoves, p.Duplicates, p.AfterLoss, p.Unexplained, p.Window.cells())
	}
	fmt.Fprintf(w, "| at rest (%v) | | | | | | | %s |\n\n", r.Rest.Dur.Round(time.Second), r.Rest.cells())
	fmt.Fprintf(w, "At rest: %s.\n", r.Rest.summary())
	fmt.Fprintf(w, "At rest, the member calls alone (%s billed above): %s.\n", c.Members, r.Rest.MembersLine(c.Instances, c.Renew))
	fmt.Fprintf(w, "A Scan of the lease table: %d RCU.\n", r.ScanUnits)
	if p := r.phase("start"); p != nil {
		fmt.Fprintf(w, "Lease creates refused (another instance had created the lease): %d at the start, %d in the whole run; the start read %.0f RCU and wrote %.0f WCU in all.\n",
			p.Window.Counts.RefusedCreates, r.Total.RefusedCreates, p.Window.Counts.RCU, p.Window.Counts.WCU)
	}
	fmt.Fprintf(w, "Leases lost involuntarily (fenced or taken; the crashed and cut-off instance's included): %d.\n", r.Losses)
	if len(r.Violations) == 0 {
		fmt.Fprintln(w, "Invariants held: no shard handled by two instances at once, no duplicate from a graceful handoff, every record handled.")
	}
	for _, v := range r.Violations {
		fmt.Fprintln(w, "VIOLATION:", v)
	}
	fmt.Fprintln(w)
}
