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
		mo, mino := o.moves()
		mn, minn := n.moves()
		row("owner changes, all phases / minimum (≤ 1.10)",
			fmt.Sprintf("%d / %d = %.2f", mo, mino, float64(mo)/float64(mino)), fmt.Sprintf("%d / %d = %.2f", mn, minn, float64(mn)/float64(minn)),
			float64(mn) <= 1.1*float64(minn))
		perShard := float64(n.Config.Shards) / n.Config.Renew.Seconds()
		row(fmt.Sprintf("writes/s at rest (one renewal per shard: %.1f; ≥ 20× fewer)", perShard),
			fmt.Sprintf("%.1f", o.Rest.WritesPerSec()), fmt.Sprintf("%.2f (%.0f× fewer)", n.Rest.WritesPerSec(), perShard/max(n.Rest.WritesPerSec(), 1e-9)),
			n.Rest.WritesPerSec()*20 <= perShard)
		row("reads at rest: calls/s, items/s, RCU/s",
			fmt.Sprintf("%.1f, %.0f, %.1f", o.Rest.ReadsPerSec(), o.Rest.ItemsPerSec(), o.Rest.RCUPerSec()),
			fmt.Sprintf("%.1f, %.0f, %.1f", n.Rest.ReadsPerSec(), n.Rest.ItemsPerSec(), n.Rest.RCUPerSec()), true)
		row("on-demand $/month at rest",
			fmt.Sprintf("%.0f", o.Rest.Monthly(OnDemand)), fmt.Sprintf("%.0f", n.Rest.Monthly(OnDemand)), true)
		co, cn := o.phase("crash"), n.phase("crash")
		if co != nil && cn != nil {
			row("crash: shards read again (× failover; ≤ 2)",
				fmt.Sprintf("%.2f", co.FailedOver.Seconds()/co.Failover.Seconds()), fmt.Sprintf("%.2f", cn.FailedOver.Seconds()/cn.Failover.Seconds()),
				cn.FailedOver > 0 && cn.FailedOver <= 2*cn.Failover)
		}
		do, dn := o.graceful(), n.graceful()
		row("duplicates from graceful handoffs (0)", fmt.Sprint(do), fmt.Sprint(dn), dn == 0 && len(n.Violations) == 0)
	}
	fmt.Fprintln(w)
}

func (r *Report) phase(name string) *Phase {
	for i := range r.Phases {
		if r.Phases[i].Name == name {
			return &r.Phases[i]
		}
	}
	return nil
}

// moves sums the owner changes and their minimum over every phase after
// the start (at start every lease is taken once whatever the rule).
func (r *Report) moves() (moves, minimum int) {
	for _, p := range r.Phases {
		moves += p.Moves
		minimum += p.MinMoves
	}
	return moves, minimum
}

func (r *Report) graceful() int {
	n := 0
	for _, p := range r.Phases {
		n += p.Unexplained
	}
	return n
}
