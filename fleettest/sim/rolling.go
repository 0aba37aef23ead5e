package sim

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"time"
)

// RunRolling runs a rolling deploy through the fleet: cfg.Instances
// instances of the old version (named o00, o01, …) start together; then,
// one at a time, an instance of the new version (n00, …) joins and an old
// one stops gracefully, the fleet settling after each; then an old
// instance starts again (a rollback begun late), and at the end a new
// instance crashes. cfg.StoreFor gives each instance its lease store by
// its name (the old version's layout for "o…", the new one's for "n…",
// on one table). RunSteps says what the report holds.
func RunRolling(ctx context.Context, cfg Config) (*Report, error) {
	old := instanceNames("o", cfg.Instances)
	var steps []string
	for i, o := range old {
		steps = append(steps, fmt.Sprintf("join n%02d", i), "leave "+o)
	}
	// An old instance starts again once the new ones write their own items
	// alone (a rollback begun, an old template still launching): it must
	// see them alive, and they it.
	steps = append(steps, fmt.Sprintf("join o%02d", len(old)))
	// A new instance crashes: the others take its shards.
	if cfg.Instances > 1 {
		steps = append(steps, "crash n00")
	}
	return RunSteps(ctx, cfg, old, steps)
}

// RunSteps runs a scripted change of the fleet: the instances named in
// start (cfg.Instances is their number) begin together, then each step in
// turn, the fleet settling after each:
//
//	"join NAME…"  starts instances, together
//	"leave NAME…" stops them gracefully (Stop), together
//	"crash NAME…" stops their calls and handling at once; the others
//	              must read their shards again
//
// Names say the version to cfg.Tune and cfg.StoreFor (RunRolling: "o…"
// old, "n…" new). Records flow throughout. The report has a phase per
// step (the first is "start"), and its Violations the broken invariants
// as Run's: a shard handled by two instances at once (two owners), a
// phase that never balances (a lease nobody reads), a record never
// handled, or handled twice with no crash to explain it. Its error is
// for a script that could not be carried out at all (a bad step, the
// start failing).
func RunSteps(ctx context.Context, cfg Config, start, steps []string) (*Report, error) {
	type step struct {
		op    string
		names []string
	}
	parsed := make([]step, len(steps))
	// Every name joins once, and only a running instance leaves or crashes.
	joined, running := map[string]bool{}, map[string]bool{}
	for _, n := range start {
		joined[n], running[n] = true, true
	}
	for i, s := range steps {
		f := strings.Fields(s)
		if len(f) < 2 || (f[0] != "join" && f[0] != "leave" && f[0] != "crash") {
			return nil, fmt.Errorf("sim: step %q: want join, leave or crash and instances' names", s)
		}
		op, names := f[0], f[1:]
		for _, name := range names {
			switch {
			case op == "join" && joined[name]:
				return nil, fmt.Errorf("sim: step %q: %s has joined before", s, name)
			case op != "join" && !running[name]:
				return nil, fmt.Errorf("sim: step %q: %s is not running", s, name)
			}
			joined[name], running[name] = true, op == "join"
		}
		parsed[i] = step{op, names}
	}
	cfg.Instances = len(start)
	f, err := newFleet(cfg)
	if err != nil {
		return nil, err
	}
	cfg = f.cfg // with its defaults
	rep := &Report{Config: cfg, Began: time.Now()}
	stopPub := f.startPublisher(ctx)
	defer stopPub()
	f.pubOn.Store(true)

	ev := f.event(ctx, "start", "")
	if err := f.startAtOnce(ctx, start); err != nil {
		return nil, err
	}
	rep.add(f.settle(ctx, ev))

	for _, s := range parsed {
		ev = f.event(ctx, s.op, strings.Join(s.names, " "))
		var wg sync.WaitGroup
		var mu sync.Mutex
		for _, name := range s.names {
			wg.Go(func() {
				switch s.op {
				case "join":
					if err := f.startInstance(ctx, f.add(name)); err != nil {
						mu.Lock()
						rep.Violations = append(rep.Violations, fmt.Sprintf("join: %s did not start: %v", name, err))
						mu.Unlock()
					}
				case "leave":
					f.leave(ctx, name)
				case "crash":
					f.kill(name)
				}
			})
		}
		wg.Wait()
		rep.add(f.settle(ctx, ev))
	}
	return f.finish(ctx, rep, stopPub), nil
}
