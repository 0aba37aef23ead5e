package sim

import (
	"context"
	"fmt"
	"time"
)

// RunRolling runs a rolling deploy through the fleet: cfg.Instances
// instances of the old version (named o00, o01, …) start together; then,
// one at a time, an instance of the new version (n00, …) joins and an old
// one stops gracefully, the fleet settling after each; then an old
// instance starts again (a rollback begun late), and at the end a new
// instance crashes. cfg.StoreFor gives each instance its lease store by
// its name (the old version's layout for "o…", the new one's for "n…",
// on one table). Records flow throughout. The report has a phase per
// step ("start", "join", "leave", …, "crash"), and its Violations the
// broken invariants as Run's: a shard handled by two instances at once
// (two owners), a phase that never balances (a lease nobody reads), a
// record never handled or handled twice with no crash to explain it.
func RunRolling(ctx context.Context, cfg Config) (*Report, error) {
	f, err := newFleet(cfg)
	if err != nil {
		return nil, err
	}
	cfg = f.cfg // with its defaults
	rep := &Report{Config: cfg, Began: time.Now()}
	stopPub := f.startPublisher(ctx)
	defer stopPub()
	f.pubOn.Store(true)

	old := instanceNames("o", cfg.Instances)
	ev := f.event(ctx, "start", "")
	if err := f.startAtOnce(ctx, old); err != nil {
		return nil, err
	}
	rep.add(f.settle(ctx, ev))

	for i, o := range old {
		n := fmt.Sprintf("n%02d", i)
		ev = f.event(ctx, "join", n)
		if err := f.startInstance(ctx, f.add(n)); err != nil {
			rep.Violations = append(rep.Violations, fmt.Sprintf("join: %s did not start: %v", n, err))
		}
		rep.add(f.settle(ctx, ev))

		ev = f.event(ctx, "leave", o)
		f.setLive(o, false)
		in := f.get(o)
		sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*cfg.Failover)
		if err := in.coord.Stop(sctx); err != nil {
			f.progress("leave: stop: %v", err)
		}
		cancel()
		close(in.queue)
		in.done.Wait()
		rep.add(f.settle(ctx, ev))
	}

	// An old instance starts again once the new ones write their own items
	// alone (a rollback begun, an old template still launching): it must
	// see them alive, and they it.
	late := fmt.Sprintf("o%02d", len(old))
	ev = f.event(ctx, "join", late)
	if err := f.startInstance(ctx, f.add(late)); err != nil {
		rep.Violations = append(rep.Violations, fmt.Sprintf("join: %s did not start: %v", late, err))
	}
	rep.add(f.settle(ctx, ev))

	// A new instance crashes: the others take its shards.
	if cfg.Instances > 1 {
		victim := "n00"
		rep.add(f.crash(ctx, victim))
	}

	return f.finish(ctx, rep, stopPub), nil
}
