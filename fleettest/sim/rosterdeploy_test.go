package sim_test

import (
	"fmt"
	"strings"
	"testing"
	"testing/synctest"

	"github.com/kinesisgen/kinesisgen/fleettest/sim"
	"github.com/kinesisgen/kinesisgen/runtime/lease"
	"github.com/kinesisgen/kinesisgen/runtime/shard"
)

// The rolling deploys that make the members roster (shard.Config.Roster)
// the default (issue 34 item 3), past the whole-list threshold
// (RosterWhole's default, 48 members: beyond it a roster member reads the
// version and its watched successors only), on the virtual clock: every
// step must balance, no shard may have two owners at once, every record
// must be handled and none twice without a crash to explain it, and each
// crash's shards must be read again within twice the failover time
// (checkRolling).

// rosterFleet is how many instances the deploys run: past 48, with one
// crash during the roll and one after it.
const rosterFleet = 52

// perInstance tunes an instance as the runtime's default did before the
// roster: liveness per instance, bulk balancing.
func perInstance(c *shard.Config) {
	c.Liveness, c.Balance = shard.LivenessPerInstance, shard.BalanceBulk
}

// rosterDefault tunes an instance as the runtime's default does with the
// roster: per instance, the roster, RosterWhole at its default.
func rosterDefault(c *shard.Config) {
	perInstance(c)
	c.Roster = true
}

// rollBatch is how many instances a deploy step starts or stops at once
// (as a rolling update with a surge of 4 does).
const rollBatch = 4

// roll is a script: from the fleet of n from-prefixed instances to one of
// to-prefixed ones, rollBatch joining and then as many leaving at a time,
// with a crash of a joined instance halfway (a mixed fleet past the
// threshold) and one of the last ones at the end.
func roll(from, to string, n int) (start, steps []string) {
	names := func(prefix string, i, j int) string {
		var b strings.Builder
		for k := i; k < j; k++ {
			fmt.Fprintf(&b, " %s%02d", prefix, k)
		}
		return b.String()
	}
	start = strings.Fields(names(from, 0, n))
	for i := 0; i < n; i += rollBatch {
		j := min(i+rollBatch, n)
		steps = append(steps, "join"+names(to, i, j), "leave"+names(from, i, j))
		if i <= n/2 && n/2 < j {
			steps = append(steps, fmt.Sprintf("crash %s%02d", to, i))
		}
	}
	return start, append(steps, fmt.Sprintf("crash %s%02d", to, n-1))
}

// runSteps runs a script on the virtual clock and checks it.
func runSteps(t *testing.T, cfg sim.Config, title string, start, steps []string) *sim.Report {
	t.Helper()
	rep, err := sim.RunSteps(t.Context(), cfg, start, steps)
	if err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	rep.Write(&b, title)
	if testing.Verbose() {
		fmt.Print(b.String())
	}
	checkRolling(t, rep, "start ,"+strings.Join(steps, ","))
	return rep
}

// watchedOnly fails t unless the last phase's member reads were mostly
// of the watched entries (the roster past the threshold), not of the
// whole list.
func watchedOnly(t *testing.T, rep *sim.Report) {
	t.Helper()
	last := rep.Phases[len(rep.Phases)-1]
	whole, watched := last.Window.Counts.Calls[sim.OpMembers], last.Window.Counts.Calls[sim.OpMembersByOwner]
	if watched <= 2*whole {
		t.Errorf("after the roll, %d reads of the whole member list and %d of the watched entries: want the watched ones, the roster past its whole-list threshold", whole, watched)
	}
}

// From per-instance liveness to the roster at its defaults, past the
// threshold, and back (a rollback, with a crash halfway).
func TestRollingDeployToTheRosterDefault(t *testing.T) {
	for _, dir := range []struct{ name, from, to string }{{"forward", "o", "n"}, {"rollback", "n", "o"}} {
		t.Run(dir.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				cfg := sim.Config{Shards: 2 * rosterFleet, Seed: 1, Tune: func(c *shard.Config) {
					if strings.HasPrefix(c.Owner, "n") {
						rosterDefault(c)
					} else {
						perInstance(c)
					}
				}}
				start, steps := roll(dir.from, dir.to, rosterFleet)
				rep := runSteps(t, cfg, "rolling deploy "+dir.name+", per-instance and the roster default", start, steps)
				if dir.to == "n" {
					watchedOnly(t, rep)
				}
			})
		})
	}
}

// noNotices is a store of the roster without notices
// (lease.RosterNotices): the opt-in roster of the version before them.
type noNotices struct{ lease.RosterStore }

// From the opt-in roster without notices ("o…": a store that keeps none)
// to the roster with them, on one store, past the threshold.
func TestRollingDeployFromTheRosterWithoutNotices(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		mem := lease.NewMemory()
		cfg := sim.Config{Shards: 2 * rosterFleet, Seed: 1, Store: mem, Tune: rosterDefault,
			StoreFor: func(name string) lease.Store {
				if strings.HasPrefix(name, "o") {
					return noNotices{mem}
				}
				return mem
			}}
		start, steps := roll("o", "n", rosterFleet)
		rep := runSteps(t, cfg, "rolling deploy, the roster without notices to the roster with them", start, steps)
		watchedOnly(t, rep)
	})
}
