package sim

import (
	"fmt"
	"io"
)

// WriteGoals prints issue 17's goals for each size run in both modes, old
// (per-lease) beside new (per-instance), with whether the new mode meets
// each. Reports pair up by size.
func WriteGoals(w io.Writer, old, new []*Report) {
	if len(old) == 0 || len(new) == 0 {
		return
	}
	fmt.Fprintln(w, "| size | goal | per-lease, one steal | per-instance, bulk | met |")
	fmt.Fprintln(w, "| --- | --- | ---: | ---: | --- |")
	for _, n := range new {
		var o *Report
		for _, r := range old {
			if r.Config.Shards == n.Config.Shards && r.Config.Instances == n.Config.Instances {
				o = r
			}
		}
		if o == nil {
			continue
		}
		size := fmt.Sprintf("%d×%d", n.Config.Shards, n.Config.Instances)
		row := func(goal, ov, nv string, met bool) {
			m := "not met"
			if met {
				m = "met"
			}
			fmt.Fprintf(w, "| %s | %s | %s | %s | %s |\n", size, goal, ov, nv, m)
		}
		jo, jn := o.phase("join"), n.phase("join")
		if jo != nil && jn != nil {
			fp := func(p *Phase) float64 { return p.FairShare.Seconds() / p.PassEvery.Seconds() }
			row("joiner at fair share (lease passes; ≤ 3)",
				fmt.Sprintf("%.1f (%s)", fp(jo), secs(jo.FairShare)), fmt.Sprintf("%.1f (%s)", fp(jn), secs(jn.FairShare)),
				jn.FairShare > 0 && fp(jn) <= 3)
		}
		row("owner changes / minimum, start to heal (each phase ≤ 1.10 and balanced)", o.moves(), n.moves(), n.movesMet())
		perShard := float64(n.Config.Shards) / n.Config.Renew.Seconds()
		if n.Config.Shards == 1000 && n.Config.Instances == 20 {
			row(fmt.Sprintf("writes/s at rest (one renewal per shard: %.1f; ≥ 20× fewer)", perShard),
				fmt.Sprintf("%.1f", o.Rest.WritesPerSec()), fmt.Sprintf("%.2f (%.0f× fewer)", n.Rest.WritesPerSec(), perShard/max(n.Rest.WritesPerSec(), 1e-9)),
				n.Rest.WritesPerSec()*20 <= perShard)
		} else {
			fmt.Fprintf(w, "| %s | writes/s at rest (one renewal per shard: %.1f; the goal is set at 1,000×20) | %.1f | %.2f (%.0f× fewer) | – |\n",
				size, perShard, o.Rest.WritesPerSec(), n.Rest.WritesPerSec(), perShard/max(n.Rest.WritesPerSec(), 1e-9))
		}
		perPass := func(r *Report) float64 {
			return r.Rest.ItemsPerSec() * r.Config.passEvery().Seconds() / float64(r.Config.Instances)
		}
		row("items read per instance per lease pass at rest (must not grow with shards)",
			fmt.Sprintf("%.0f", perPass(o)), fmt.Sprintf("%.1f", perPass(n)), perPass(n) <= 2)
		info := func(goal, ov, nv string) { fmt.Fprintf(w, "| %s | %s | %s | %s | – |\n", size, goal, ov, nv) }
		info("reads at rest: calls/s, items/s, RCU/s",
			fmt.Sprintf("%.1f, %.0f, %.1f", o.Rest.ReadsPerSec(), o.Rest.ItemsPerSec(), o.Rest.RCUPerSec()),
			fmt.Sprintf("%.1f, %.0f, %.1f", n.Rest.ReadsPerSec(), n.Rest.ItemsPerSec(), n.Rest.RCUPerSec()))
		info("on-demand $/month at rest",
			fmt.Sprintf("%.0f", o.Rest.Monthly(OnDemand)), fmt.Sprintf("%.0f", n.Rest.Monthly(OnDemand)))
		co, cn := o.phase("crash"), n.phase("crash")
		if co != nil && cn != nil {
			row("crash: shards read again (× failover; ≤ 2)",
				fmt.Sprintf("%.2f", co.FailedOver.Seconds()/co.Failover.Seconds()), fmt.Sprintf("%.2f", cn.FailedOver.Seconds()/cn.Failover.Seconds()),
				cn.FailedOver > 0 && cn.FailedOver <= 2*cn.Failover)
		}
		do, dn := o.graceful(), n.graceful()
		row("duplicates from graceful handoffs; handlings of one shard by two instances at once (0; 0)",
			fmt.Sprintf("%d; %d", do, o.overlaps()), fmt.Sprintf("%d; %d", dn, n.overlaps()), dn == 0 && n.overlaps() == 0)
	}
	fmt.Fprintln(w)
}

// Misses lists the goals of issue 17 this run misses that the
// per-instance mode meets: a phase (the start included) with more owner
// changes than 1.1 × the minimum, a joiner (or an instance back from a
// partition) not at its fair share within 3 lease passes, a phase (the
// start included) that reads more than ReadBound, a start with a lease
// create refused (the instances starting together each create the leases
// the start gives them, none another's), and the fleet at rest missing
// RestMisses.
func (r *Report) Misses() []string {
	out := r.RestMisses()
	for _, p := range r.Phases {
		if float64(p.Moves) > 1.1*float64(p.MinMoves) {
			out = append(out, fmt.Sprintf("%s: %d owner changes, more than 1.1 × the minimum %d", p.Name, p.Moves, p.MinMoves))
		}
		if bound := r.ReadBound(p); r.ScanUnits > 0 && p.Window.RCUPerSec() > bound {
			extra := fmt.Sprintf("3 reads per lease moved (%d)", p.Moves)
			if p.Name == "start" {
				extra = fmt.Sprintf("one more Scan each over the phase (%v)", p.Window.Dur)
			}
			out = append(out, fmt.Sprintf("%s: %.1f RCU/s, more than a Scan of the lease table (%d RCU) and the members item per live instance (%d) per lease pass (%v) and %s: %.1f RCU/s",
				p.Name, p.Window.RCUPerSec(), r.ScanUnits, p.Live, p.PassEvery, extra, bound))
		}
		if p.Name == "start" && p.Window.Counts.RefusedCreates > 0 {
			out = append(out, fmt.Sprintf("start: %d lease creates refused (a write unit each), want 0: each lease created by one instance", p.Window.Counts.RefusedCreates))
		}
		if p.Name == "join" && (p.FairShare == 0 || p.FairShare > 3*p.PassEvery) {
			out = append(out, fmt.Sprintf("join: %s at its fair share after %v, want within 3 lease passes (%v)", p.Subject, p.FairShare, 3*p.PassEvery))
		}
	}
	return out
}

// RestMisses lists the goals of issue 17 for the fleet at rest that this
// run misses: a lease item written at all (leases are written when their
// ownership changes and at checkpoints, and nothing is published at rest:
// the writes are the instances' heartbeats alone); more writes than one
// heartbeat per instance per renewal interval (so they grow with the
// instances, not the shards), and at 1,000 shards × 20 instances fewer
// than 20 times below one renewal per shard; more than 2 items read per
// instance per lease pass (the members item: the reads do not grow with
// shards × instances, as a Scan per pass does). The per-lease mode misses
// each of them.
func (r *Report) RestMisses() []string {
	w := r.Rest
	if w.Dur <= 0 {
		return []string{"at rest: not measured"}
	}
	var out []string
	n := float64(r.Config.Instances)
	if lw := w.Counts.Writes() - w.Counts.Calls[OpHeartbeat]; lw > 0 {
		out = append(out, fmt.Sprintf("at rest: %d lease-item writes in %v (%s), want none: only heartbeats", lw, w.Dur, w.Ops()))
	}
	beats := n / r.Config.Renew.Seconds()
	if w.WritesPerSec() > 1.1*beats {
		out = append(out, fmt.Sprintf("at rest: %.2f writes/s, more than one heartbeat per instance per renewal interval (%.2f/s)", w.WritesPerSec(), beats))
	}
	if w.WCUPerSec() > 1.2*beats {
		// Issue 34: the heartbeats' units grow with the instances, not
		// with their square.
		out = append(out, fmt.Sprintf("at rest: %.2f WCU/s (members layout %s), more than 1.2 × instances ÷ renewal interval (%.2f/s)", w.WCUPerSec(), r.Config.Members, 1.2*beats))
	}
	perShard := float64(r.Config.Shards) / r.Config.Renew.Seconds()
	if r.Config.Shards == 1000 && r.Config.Instances == 20 && 20*w.WritesPerSec() > perShard {
		out = append(out, fmt.Sprintf("at rest: %.2f writes/s, not 20× fewer than one renewal per shard (%.1f/s)", w.WritesPerSec(), perShard))
	}
	if per, most := w.ItemsPerSec()*r.Config.passEvery().Seconds()/n, float64(max(r.Config.RestItems, 2)); per > most {
		out = append(out, fmt.Sprintf("at rest: %.1f items read per instance per lease pass, want at most %.0f (the members; not growing with the shards)", per, most))
	}
	return out
}

func (r *Report) phase(name string) *Phase {
	for i := range r.Phases {
		if r.Phases[i].Name == name {
			return &r.Phases[i]
		}
	}
	return nil
}

// moves sums the owner changes and their minimum over the phases (the
// start's minimum is one take per lease), with the worst phase.
func (r *Report) moves() string {
	moves, minimum, worst, name := 0, 0, 0.0, ""
	for _, p := range r.Phases {
		moves += p.Moves
		minimum += p.MinMoves
		if q := float64(p.Moves) / float64(max(p.MinMoves, 1)); q > worst || !p.Converged {
			worst, name = q, p.Name
			if !p.Converged {
				name += ", not balanced"
			}
		}
	}
	return fmt.Sprintf("%d / %d; worst %s %.2f", moves, minimum, name, worst)
}

func (r *Report) movesMet() bool {
	for _, p := range r.Phases {
		if !p.Converged || float64(p.Moves) > 1.1*float64(p.MinMoves) {
			return false
		}
	}
	return true
}

// overlaps is the number of handlings that overlapped another instance's
// on the same shard (from the violations).
func (r *Report) overlaps() int {
	for _, v := range r.Violations {
		var n int
		if _, err := fmt.Sscanf(v, "%d handlings overlapped", &n); err == nil {
			return n
		}
	}
	return 0
}

func (r *Report) graceful() int {
	n := 0
	for _, p := range r.Phases {
		n += p.Unexplained
	}
	return n
}

// ReadBound is the read units a second a phase may cost while the fleet
// changes: every live instance scanning the lease table and reading the
// members item every lease pass (liveness per lease scans every pass, at
// rest too), with the roster also the items it reads at rest
// (Config.RestItems: the version and two watched entries, a strongly
// consistent read unit each), and three reads per lease moved (the asker's and the owner's
// reads of it, and a refused write's re-read). Listing the leases by key,
// a read unit each, costs about ten times the Scan. At the start, where
// every lease is free, nothing is asked for and each instance lists once
// more (its first pass lists before its creates and again once the
// instances starting beside it show), the bound is one more Scan per
// live instance over the phase instead of the reads per lease moved: a
// create refused because another instance made the lease first must read
// nothing (the DynamoDB store takes the item from the refusal).
func (r *Report) ReadBound(p Phase) float64 {
	perPass := float64(p.Live) * float64(r.ScanUnits+1+int64(r.Config.RestItems)) / p.PassEvery.Seconds()
	if p.Name == "start" {
		return perPass + float64(p.Live)*float64(r.ScanUnits)/p.Window.Dur.Seconds()
	}
	return perPass + 3*float64(p.Moves)/p.Window.Dur.Seconds()
}
