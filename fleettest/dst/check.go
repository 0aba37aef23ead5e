package dst

import (
	"fmt"
	"math/big"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/kinesisgen/kinesisgen/runtime/lease"
)

// Violation is one broken invariant, with an example.
type Violation struct {
	// Kind is one of: lost (an acknowledged publish an application never
	// handled), overlap (one message handled by two instances of an
	// application at once; overlap-paused when one of the two froze while
	// it ran), order (a key's first handlings out of publish
	// order), retry-crossed (an application handled a retry copy another
	// one made), unread (a shard with waiting records unread longer than
	// the bound), slow-call (a public call past its bound), publish-failed
	// (a publish result other than stored), fenced-live (an instance fenced
	// itself though its lease-store calls answered within their deadline),
	// taken-from-live (a lease taken from an instance neither crashed, gone,
	// frozen nor failing its lease-store calls), setup.
	Kind string
	// Count is how many times it was broken; What the first example.
	Count int
	What  string
}

func (v Violation) String() string {
	if v.Count > 1 {
		return fmt.Sprintf("%s ×%d: %s", v.Kind, v.Count, v.What)
	}
	return fmt.Sprintf("%s: %s", v.Kind, v.What)
}

// Kinds returns the distinct kinds of vs, sorted.
func Kinds(vs []Violation) []string {
	var out []string
	for _, v := range vs {
		if !slices.Contains(out, v.Kind) {
			out = append(out, v.Kind)
		}
	}
	sort.Strings(out)
	return out
}

type collector struct {
	vs []Violation
}

func (c *collector) add(kind, format string, args ...any) {
	for i := range c.vs {
		if c.vs[i].Kind == kind {
			c.vs[i].Count++
			return
		}
	}
	c.vs = append(c.vs, Violation{Kind: kind, Count: 1, What: fmt.Sprintf(format, args...)})
}

// unhandledLocked returns, per application, the acknowledged messages it
// has not handled.
func (w *world) unhandledLocked() map[string][]published {
	seen := map[string]map[int64]bool{}
	for _, h := range w.handled {
		if seen[h.app] == nil {
			seen[h.app] = map[int64]bool{}
		}
		seen[h.app][h.id] = true
	}
	out := map[string][]published{}
	for _, app := range w.apps {
		for _, p := range w.pub {
			if !seen[app][p.id] {
				out[app] = append(out[app], p)
			}
		}
	}
	return out
}

// anyUnhandledLocked reports whether an application has not handled an
// acknowledged message (unhandledLocked is not empty), from where its
// last call left off: handled and pub only grow.
func (w *world) anyUnhandledLocked() bool {
	if w.seen == nil {
		w.seen, w.allSeen = map[string]map[int64]bool{}, map[string]int{}
	}
	for _, h := range w.handled[w.seenN:] {
		if w.seen[h.app] == nil {
			w.seen[h.app] = map[int64]bool{}
		}
		w.seen[h.app][h.id] = true
	}
	w.seenN = len(w.handled)
	missing := false
	for _, app := range w.apps {
		n := w.allSeen[app]
		for n < len(w.pub) && w.seen[app][w.pub[n].id] {
			n++
		}
		w.allSeen[app] = n
		missing = missing || n < len(w.pub)
	}
	return missing
}

// pausedDuring reports whether h's instance was paused while h ran.
func (w *world) pausedDuring(h handling) bool {
	for _, p := range w.pauses {
		if p.inst == h.inst && p.from.Before(h.end) && h.start.Before(p.to) {
			return true
		}
	}
	return false
}

// effEnd is when a handling stopped counting as running: when it returned
// or when the runtime cancelled its context, whichever came first (a
// handler that ignores its context is the handler's doing).
func (h handling) effEnd() time.Time {
	if !h.cancelledAt.IsZero() && h.cancelledAt.Before(h.end) {
		return h.cancelledAt
	}
	return h.end
}

func (w *world) atOrNever(t time.Time) string {
	if t.IsZero() {
		return "none"
	}
	return w.at(t)
}

func (w *world) at(t time.Time) string { return fmt.Sprintf("%.3fs", t.Sub(w.begin).Seconds()) }

// check finds the broken invariants; w.mu is held.
func (w *world) check() []Violation {
	var c collector
	// Every publish result is true.
	for _, e := range w.pubErrs {
		c.add("publish-failed", "%s", e)
	}
	// Every public call returns within its bound.
	for _, r := range w.calls {
		if r.took > r.bound {
			c.add("slow-call", "%s took %v (bound %v; err %v)", r.what, r.took, r.bound, r.err)
		}
	}
	// Every acknowledged publish is handled at least once by every application.
	for app, ps := range w.unhandledLocked() {
		for _, p := range ps {
			c.add("lost", "app %s never handled message %d (key %q, aggregated %v, acknowledged at %s on %s)", app, p.id, p.key, p.agg, w.at(p.at), p.shard)
		}
	}
	byApp := map[string]map[int64][]handling{}
	for _, h := range w.handled {
		if byApp[h.app] == nil {
			byApp[h.app] = map[int64][]handling{}
		}
		byApp[h.app][h.id] = append(byApp[h.app][h.id], h)
	}
	for _, app := range w.apps {
		for _, id := range slicesSortedKeys(byApp[app]) {
			hs := byApp[app][id]
			// No message handled by two instances of one application at once.
			for i := range hs {
				for j := i + 1; j < len(hs); j++ {
					a, b := hs[i], hs[j]
					if a.inst != b.inst && a.start.Before(b.effEnd()) && b.start.Before(a.effEnd()) {
						kind := "overlap"
						if w.pausedDuring(a) || w.pausedDuring(b) {
							kind = "overlap-paused" // one of them froze mid-handling
						}
						c.add(kind, "app %s: message %d handled by %s (%s–%s, %s) and %s (%s–%s, %s) at once", app, id,
							a.inst, w.at(a.start), w.at(a.effEnd()), a.shard, b.inst, w.at(b.start), w.at(b.effEnd()), b.shard)
					}
				}
				// A retry copy is handled only by the application that made it.
				if h := hs[i]; h.attempt > 1 && w.retried[app][id] < h.attempt-1 {
					c.add("retry-crossed", "app %s handled attempt %d of message %d (by %s at %s) but never asked for a retry of it", app, h.attempt, id, h.inst, w.at(h.start))
				}
			}
		}
	}
	// Each key's first handlings are in publish order.
	first := map[string]map[int64]handling{}
	for _, h := range w.handled {
		m := first[h.app]
		if m == nil {
			m = map[int64]handling{}
			first[h.app] = m
		}
		if f, ok := m[h.id]; !ok || h.start.Before(f.start) {
			m[h.id] = h
		}
	}
	for _, app := range w.apps {
		last := map[string]handling{}
		lastID := map[string]int64{}
		for _, p := range w.pub {
			if p.key == "" {
				continue
			}
			f, ok := first[app][p.id]
			if !ok {
				continue
			}
			if prev, ok := last[p.key]; ok && f.start.Before(prev.start) {
				c.add("order", "app %s, key %s: message %d (published after %d) first handled at %s by %s, before %d at %s by %s",
					app, p.key, p.id, lastID[p.key], w.at(f.start), f.inst, lastID[p.key], w.at(prev.start), prev.inst)
			}
			if prev, ok := last[p.key]; !ok || f.start.After(prev.start) {
				last[p.key], lastID[p.key] = f, p.id
			}
		}
	}
	w.checkUnread(&c, first)
	// A lease store answering within the call deadline never fences a
	// live owner: a fence needs a failed, late or frozen lease-store call
	// of its instance within the failover time before it.
	for _, in := range w.order {
		for _, fb := range in.fences {
			f, bad := fb[0], fb[1]
			if in.crashed || !in.gone.IsZero() && !f.Before(in.gone) {
				continue
			}
			if bad.IsZero() || f.Sub(bad) > w.cfg.Timing.Failover {
				c.add("fenced-live", "%s fenced a lease at %s with every lease-store call answered in time (last failed or late one: %s)",
					in.name, w.at(f), w.atOrNever(bad))
			}
		}
	}
	// A lease is taken from another instance only when that one may be
	// dead: it crashed, left, is frozen, or one of its lease-store calls
	// failed, was late or frozen within the failover time before.
	for _, st := range w.steals {
		in := w.insts[st.from]
		if in.crashed || !in.gone.IsZero() && !st.at.Before(in.gone.Add(time.Second)) || st.fromPaused {
			continue
		}
		if !st.fromBad.IsZero() && st.at.Sub(st.fromBad) <= 2*w.cfg.Timing.Failover {
			continue
		}
		c.add("taken-from-live", "%s took %s from %s at %s, which was live with its lease-store calls answered in time (last failed, late or frozen one: %s)",
			st.to, st.id, st.from, w.at(st.at), w.atOrNever(st.fromBad))
	}
	return c.vs
}

// unreadBound is how long a shard's waiting records may go unread: about
// twice the failover time, plus a shard sync and the poll; with slow
// handlers in the mix, plus the slowest handler (a lane it holds delays
// the records behind it).
func (w *world) unreadBound() time.Duration {
	t := w.cfg.Timing
	b := 2*t.Failover + t.Sync + 2*time.Second
	if w.cfg.Mix.Slow > 0 {
		b += 8 * time.Second
	}
	return b
}

// checkUnread finds records that waited longer than the bound while
// nothing of their shard (or, for a child, of its parents) was handled by
// the application, less any time an instance of it was paused or its
// Kinesis reads failed (an injected outage excuses the wait).
func (w *world) checkUnread(c *collector, first map[string]map[int64]handling) {
	bound := w.unreadBound()
	for _, app := range w.apps {
		// Activity per shard: handling starts and running spans. h is
		// the handling it stands for: a report names the one a gap
		// began after.
		type act struct {
			from, to time.Time
			h        handling
			skip     bool // h is another application's retry copy, skipped
			left     bool // h stands for a record its fetcher released unhandled
		}
		acts := map[string][]act{}
		for _, h := range w.handled {
			if h.app == app {
				acts[h.shard] = append(acts[h.shard], act{h.start, h.end, h, false, false})
			}
		}
		// A record a reader fetched is activity on its shard from the
		// fetch (the handling instance's last before it) until its
		// handling starts. Unread is a shard whose records no reader of
		// the application has fetched, not one whose fetched records
		// wait for a worker: with by-key lanes a record queues behind
		// its lane's earlier records of any shard, and a child is read
		// only once its parent's records are all settled, so after an
		// outage a lone instance with slow handlers can start a shard's
		// next handling, or its child's first, later than the bound
		// after records it fetched at once (mix all, seed
		// 1796538577222111690: a parent's keyless record fetched at
		// 38.4 s waited in a lane until 58.7 s behind four slow handlers
		// of other shards, and the child, with a record since 32.8 s,
		// was read at 58.8 s). That is handling capacity, which this
		// check does not bound. A fenced or crashed reader's fetched
		// records it never handled count until the fence or crash (below):
		// the next owner's wait until it fetches them again is still a gap.
		// The wait runs from the handler's instance's first fetch of the
		// record since it last released or fenced the shard's lease: a
		// reader resumed after a postponed handoff reads on from the last
		// record it handed out (AT_SEQUENCE_NUMBER, skipped), in the same
		// generation, so it fetches that record again while the copy it
		// handed out still waits in its lane (mix stuck, seed
		// 1796631038291334950: a keyless record of shard 7, fetched by a3 at
		// 33.8 s, queued behind key k2's backlog of slow handlings, fetched
		// again by the resumed readers at 40.6 and 100.6 s, handled at
		// 104.0 s; from the last fetch, the shard looked unread for 66.8 s).
		for _, h := range w.handled {
			if h.app != app {
				continue
			}
			var first time.Time
			for _, t := range w.fetched[h.inst][h.shard+"/"+h.seq] {
				if t.After(h.start) {
					break
				}
				if first.IsZero() || w.letGo(h.inst, h.shard, first, t) {
					first = t
				}
			}
			if !first.IsZero() {
				acts[h.shard] = append(acts[h.shard], act{first, h.start, h, false, false})
			}
		}
		// A record its fetcher never handled counts from the fetch until
		// the fetcher's Stop released the shard's lease, if that came
		// before it fetched the record again and it fenced no lease of the
		// shard meanwhile: a Stop leaves the records its lanes never began
		// (Record.Stale) to the next owner, which reads them again from
		// the checkpoint it released; until then they waited in a lane of
		// a live owner, as a handled record waits (mix all, seed
		// 1796561424145306228: app b's keyless record of a split's parent,
		// fetched by b0 at 11.3 s, waited in the lane of key k0, whose
		// backlog b0 had taken over with slow handlings of 6.9, 7.0, 3.7
		// and 2.4 s in it, until b0's Stop released the parent at 34.3 s;
		// b1 fetched it at 34.7 s, and the parent looked unread for 18 s
		// from b0's last handling of it at 16.7 s). Those a live reader
		// released otherwise (a generation a lane closed, then handed
		// over) still count only if it handles them.
		began := map[string]map[string][]time.Time{} // instance → shard/sequence → handling starts
		for _, h := range w.handled {
			if h.app != app {
				continue
			}
			m := began[h.inst]
			if m == nil {
				m = map[string][]time.Time{}
				began[h.inst] = m
			}
			m[h.shard+"/"+h.seq] = append(m[h.shard+"/"+h.seq], h.start)
		}
		//
		// A Stop that ran out of time with a handler still running (a
		// stuck one) leaves the leases of the records in its lanes to
		// expire, not only the stuck record's: a queued record is not
		// told from one in a handler (mix stuck, seed 65: a keyless record
		// of shard 4, queued at 20.3 s behind key k7's handler stuck on
		// shard 0, whose Stop at 24.5 s ran 10 s and left both leases to
		// expire; the next owner read it at 38.1 s). Such a record counts
		// until the lease expired, the Stop's end plus the failover time.
		for _, in := range w.order {
			if in.app != app || in.crashed || in.gone.IsZero() || len(w.releases[in.name])+len(w.leftToExpire[in.name]) == 0 {
				continue
			}
			w.eachFetch(w.fetched[in.name], func(k, id, seq string, t, until time.Time) {
				if slices.ContainsFunc(began[in.name][k], func(s time.Time) bool { return !s.Before(t) && s.Before(until) }) {
					return // handled: counted above
				}
				fencedBy := func(at time.Time) bool {
					return slices.ContainsFunc(w.leaseFences[in.name], func(f shardAt) bool {
						return f.shard == id && !f.at.Before(t) && !f.at.After(at)
					})
				}
				for _, r := range w.releases[in.name] {
					if r.shard != id || r.at.Before(t) || r.at.Before(in.gone) || !r.at.Before(until) {
						continue
					}
					if !fencedBy(r.at) {
						h := handling{app: app, inst: in.name, shard: id, seq: seq, start: r.at, end: r.at}
						acts[id] = append(acts[id], act{t, r.at, h, false, true})
					}
					return
				}
				for _, l := range w.leftToExpire[in.name] {
					if l.shard != id || l.at.Before(t) || l.at.Before(in.gone) || !l.at.Before(until) {
						continue
					}
					if !fencedBy(l.at) {
						exp := l.at.Add(w.cfg.Timing.Failover)
						h := handling{app: app, inst: in.name, shard: id, seq: seq, start: exp, end: exp}
						acts[id] = append(acts[id], act{t, exp, h, false, true})
					}
					return
				}
			})
		}
		// A record a reader fetched and never handled because it crashed
		// or its lease was fenced meanwhile counts from the fetch until the
		// crash or the fence: it waited in a lane of a live owner until
		// then, as a handled record waits; the next owner's wait from
		// there until it fetched it again is the gap (mix stuck, seed 84:
		// key k0's record, fetched by a0 at 4.8 s, queued behind a
		// keyless record whose handler hung 38 s, until a0 crashed at
		// 32.0 s; a1 read it at 34.4 s, and the shard looked unread from
		// a0's last handling of it at 16.9 s).
		for _, in := range w.order {
			if in.app != app {
				continue
			}
			w.eachFetch(w.fetched[in.name], func(k, id, seq string, t, until time.Time) {
				if slices.ContainsFunc(began[in.name][k], func(s time.Time) bool { return !s.Before(t) && s.Before(until) }) {
					return
				}
				var end time.Time
				if in.crashed && in.gone.After(t) && in.gone.Before(until) {
					end = in.gone
				}
				for _, f := range w.leaseFences[in.name] {
					if f.shard == id && !f.at.Before(t) && f.at.Before(until) && (end.IsZero() || f.at.Before(end)) {
						end = f.at
					}
				}
				if !end.IsZero() {
					h := handling{app: app, inst: in.name, shard: id, seq: seq, start: end, end: end}
					acts[id] = append(acts[id], act{t, end, h, false, true})
				}
			})
		}
		// Another application's retry copy is fetched and skipped without
		// a handler, when its lane's worker reaches it: it waits for a
		// worker like any record, and a parent waits for it to end (mix
		// all, seed 1796559867691955090: app b's copy, fetched by a1 at
		// 41.9 s, waited in a lane behind 30 s of a slow key's handlings
		// on another shard; the parent's last handling ended at 49.5 s and
		// its child was read at 71.4 s, seen as unread for 21.9 s). It
		// counts from its fetch until the fetcher's first checkpoint of
		// the shard at or past it (which it writes once the skip settled
		// it), if that comes before the fetcher fetched it again: a
		// fenced reader's copies count nothing.
		for _, in := range w.order {
			if in.app != app {
				continue
			}
			w.eachFetch(w.foreign[in.name], func(_, id, seq string, t, until time.Time) {
				for _, cw := range w.checkpoints[in.name] {
					if cw.shard == id && !cw.at.Before(t) && cw.at.Before(until) && checkpointPast(cw.cp, seq) {
						h := handling{app: app, inst: in.name, shard: id, seq: seq, start: cw.at, end: cw.at}
						acts[id] = append(acts[id], act{t, cw.at, h, true, false})
						break
					}
				}
			})
		}
		var excuse []span
		for _, s := range w.pauses {
			if in := w.insts[s.inst]; in != nil && in.app == app {
				excuse = append(excuse, s)
			}
		}
		for _, s := range w.storeOutages {
			if in := w.insts[s.inst]; in != nil && in.app == app {
				excuse = append(excuse, s)
			}
		}
		for _, s := range w.outages {
			if in := w.insts[s.inst]; in != nil && in.app == app {
				excuse = append(excuse, s)
			}
		}
		// Times when the application had no healthy member: none live, or
		// every live one frozen or with its lease store or reads failing
		// or answering late (nobody could read then).
		var healthy []span
		for _, in := range w.order {
			if in.app != app {
				continue
			}
			to := in.gone
			if to.IsZero() {
				to = w.begin.Add(24 * time.Hour)
			}
			var bad []span
			for _, ss := range [][]span{w.pauses, w.storeOutages, w.lateSpans, w.outages} {
				for _, s := range ss {
					if s.inst == in.name {
						bad = append(bad, s)
					}
				}
			}
			healthy = append(healthy, subtract(span{from: in.started, to: to}, bad)...)
		}
		cur := w.begin
		for _, l := range sortedSpans(healthy) {
			if l.from.After(cur) {
				excuse = append(excuse, span{from: cur, to: l.from})
			}
			if l.to.After(cur) {
				cur = l.to
			}
		}
		excuse = append(excuse, span{from: cur, to: w.begin.Add(24 * time.Hour)})
		// Per shard, the activity of its ancestry sorted once: most
		// publishes that waited past the bound had no gap past it, and
		// their scan below needs only the spans. A gap past the bound is
		// measured again as before (the report names the activity it
		// began after, which depends on how ties sort).
		byShard := map[string]*gapIndex{}
		for _, p := range w.pub {
			f, ok := first[app][p.id]
			end := f.start
			if !ok {
				continue // lost: reported as such
			}
			bound := bound + w.slowAllowance(app, p.shard, p.at, end) + w.stuckAllowance(app, p.at, end)
			if end.Sub(p.at) <= bound {
				continue
			}
			gi := byShard[p.shard]
			if gi == nil {
				gi = &gapIndex{}
				for _, id := range w.ancestry(p.shard) {
					for _, a := range acts[id] {
						gi.spans = append(gi.spans, span{from: a.from, to: a.to})
					}
				}
				gi.sort()
				byShard[p.shard] = gi
			}
			if gi.worst(p.at, end, excuse) <= bound {
				continue
			}
			// The longest stretch in [p.at, end] without activity on the shard.
			// A child is not read before its parents end: their
			// handlings count as its own.
			var marks []act
			for _, id := range w.ancestry(p.shard) {
				for _, a := range acts[id] {
					if a.to.After(p.at) && a.from.Before(end) {
						marks = append(marks, a)
					}
				}
			}
			slices.SortFunc(marks, func(a, b act) int { return a.from.Compare(b.from) })
			cur := p.at
			var curBy, worstBy *act // the activity that ended at cur; at worstFrom
			worst, worstFrom := time.Duration(0), cur
			for i, a := range marks {
				if a.from.After(cur) {
					if g := a.from.Sub(cur) - overlap(excuse, cur, a.from); g > worst {
						worst, worstFrom, worstBy = g, cur, curBy
					}
				}
				if a.to.After(cur) {
					cur, curBy = a.to, &marks[i]
				}
			}
			if end.After(cur) {
				if g := end.Sub(cur) - overlap(excuse, cur, end); g > worst {
					worst, worstFrom, worstBy = g, cur, curBy
				}
			}
			if worst > bound {
				after := "its acknowledgement"
				if b := worstBy; b != nil {
					// What the shard's (or its parents') reader did last
					// before the gap: where to look in its runtime log.
					after = fmt.Sprintf("%s's handling of message %d on %s (fetched or started %s, ended %s)",
						b.h.inst, b.h.id, b.h.shard, w.at(b.from), w.at(b.h.end))
					if b.skip {
						after = fmt.Sprintf("%s's skip of another application's retry copy %s on %s (fetched %s, checkpointed past %s)",
							b.h.inst, b.h.seq, b.h.shard, w.at(b.from), w.at(b.h.end))
					}
					if b.left {
						after = fmt.Sprintf("%s's hold of %s with record %s unhandled (fetched %s, held until %s: released, left to expire, fenced or crashed)",
							b.h.inst, b.h.shard, b.h.seq, w.at(b.from), w.at(b.h.end))
					}
				}
				c.add("unread", "app %s: shard %s unread for %.1fs from %s (bound %v), after %s, while message %d (key %q, acknowledged at %s) waited; first handled at %s by %s",
					app, p.shard, worst.Seconds(), w.at(worstFrom), bound, after, p.id, p.key, w.at(p.at), w.at(end), f.inst)
			}
		}
	}
}

// slowSpan is a KinesisSlow window of an instance: every call answered
// lat late.
type slowSpan struct {
	span
	lat time.Duration
}

// slowAllowance is how much longer than the bound a record of shard
// acknowledged at from and handled at end may wait when an instance of
// app had slow Kinesis calls meanwhile: each take-over of the shard (or of
// a parent) costs a listing, its reader's iterator and its first read,
// one call's latency each, one after another (a stretch beyond that is a
// defect). A call sent at a window's end answers lat after it. (Soak seed
// 1796611529948387512, mix kinslow: a0 took a crashed owner's shard,
// handed it to a joiner as its first read answered, the joiner crashed
// before it took it, and a0 took it again: two take-overs, six slow calls.)
func (w *world) slowAllowance(app, shard string, from, end time.Time) time.Duration {
	var most time.Duration
	for _, s := range w.kinSlow {
		if in := w.insts[s.inst]; in != nil && in.app == app && s.from.Before(end) && from.Before(s.to.Add(3*s.lat)) {
			most = max(most, 3*s.lat)
		}
	}
	if most == 0 {
		return 0
	}
	lineage := w.ancestry(shard)
	n := 0
	for _, t := range w.takes {
		if in := w.insts[t.inst]; in != nil && in.app == app && !t.at.Before(from) && t.at.Before(end) && slices.Contains(lineage, t.shard) {
			n++
		}
	}
	return time.Duration(max(n, 1)) * most
}

// stuckAllowance is how much longer than the bound a record acknowledged
// at from and handled at end may wait when a handler of app was stuck
// meanwhile: a lane holds the records queued behind a stuck handler, of
// every shard whose keys hash to it, for as long as it is stuck (as the
// bound holds them for the slowest slow handler; docs/lanes-and-retries.md).
// Soak seed 1796609071646894299 (mix stuck): a lone owner's keyless record
// of a merge's parent, queued behind key k7's handler stuck 32 s on
// another shard, then released to a joiner by a handoff, unhandled.
func (w *world) stuckAllowance(app string, from, end time.Time) time.Duration {
	var most time.Duration
	for _, h := range w.handled {
		if h.app == app && h.outcome == "stuck" && h.start.Before(end) && from.Before(h.end) {
			most = max(most, h.end.Sub(h.start))
		}
	}
	return most
}

// gapIndex is a shard's activity spans sorted by start, with the
// latest end among each prefix: a scan from a time skips, by binary
// search, the spans that ended before it.
type gapIndex struct {
	spans []span
	maxTo []time.Time
}

func (g *gapIndex) sort() {
	slices.SortFunc(g.spans, func(a, b span) int { return a.from.Compare(b.from) })
	g.maxTo = make([]time.Time, len(g.spans))
	var m time.Time
	for i, s := range g.spans {
		if i == 0 || s.to.After(m) {
			m = s.to
		}
		g.maxTo[i] = m
	}
}

// worst is checkUnread's longest stretch in [from, end] without
// activity, less the excused time: the same scan over the spans that
// end after from and start before end. Spans starting at one instant
// give the same stretches in any order (the first of them to be
// scanned moves the scan past that instant when it opens a stretch).
func (g *gapIndex) worst(from, end time.Time, excuse []span) time.Duration {
	i, _ := slices.BinarySearchFunc(g.maxTo, from, func(m, t time.Time) int {
		if m.After(t) {
			return 1
		}
		return -1
	})
	cur := from
	worst := time.Duration(0)
	for _, a := range g.spans[i:] {
		if !a.from.Before(end) {
			break
		}
		if !a.to.After(from) {
			continue
		}
		if a.from.After(cur) {
			if d := a.from.Sub(cur) - overlap(excuse, cur, a.from); d > worst {
				worst = d
			}
		}
		if a.to.After(cur) {
			cur = a.to
		}
	}
	if end.After(cur) {
		if d := end.Sub(cur) - overlap(excuse, cur, end); d > worst {
			worst = d
		}
	}
	return worst
}

// checkpointPast reports whether checkpoint cp is at or past sequence
// number seq: the shard's end, or a sequence number at least seq.
func checkpointPast(cp, seq string) bool {
	if cp == lease.CheckpointShardEnd {
		return true
	}
	a, ok1 := new(big.Int).SetString(cp, 10)
	b, ok2 := new(big.Int).SetString(seq, 10)
	return ok1 && ok2 && a.Cmp(b) >= 0
}

// ancestry is id and its ancestors.
func (w *world) ancestry(id string) []string {
	out := []string{id}
	for i := 0; i < len(out); i++ {
		for _, p := range w.parents[out[i]] {
			if !slices.Contains(out, p) {
				out = append(out, p)
			}
		}
	}
	return out
}

// subtract returns what of s the spans cut do not cover.
func subtract(s span, cut []span) []span {
	out := []span{s}
	for _, c := range cut {
		var next []span
		for _, o := range out {
			if !c.from.Before(o.to) || !o.from.Before(c.to) {
				next = append(next, o)
				continue
			}
			if o.from.Before(c.from) {
				next = append(next, span{inst: o.inst, from: o.from, to: c.from})
			}
			if c.to.Before(o.to) {
				next = append(next, span{inst: o.inst, from: c.to, to: o.to})
			}
		}
		out = next
	}
	return out
}

func sortedSpans(s []span) []span {
	s = slices.Clone(s)
	slices.SortFunc(s, func(a, b span) int { return a.from.Compare(b.from) })
	return s
}

// overlap is how much of [from, to] the spans cover (their union).
func overlap(spans []span, from, to time.Time) time.Duration {
	type iv struct{ a, b time.Time }
	var ivs []iv
	for _, s := range spans {
		a, b := maxTime(s.from, from), minTime(s.to, to)
		if a.Before(b) {
			ivs = append(ivs, iv{a, b})
		}
	}
	slices.SortFunc(ivs, func(x, y iv) int { return x.a.Compare(y.a) })
	var total time.Duration
	var cur time.Time
	for _, v := range ivs {
		if v.a.Before(cur) {
			v.a = cur
		}
		if v.b.After(v.a) {
			total += v.b.Sub(v.a)
			cur = v.b
		}
	}
	return total
}

func maxTime(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

func minTime(a, b time.Time) time.Time {
	if a.Before(b) {
		return a
	}
	return b
}

func slicesSortedKeys[V any](m map[int64]V) []int64 {
	out := make([]int64, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}

// midpoint is the hash key halfway between two decimal hash keys.
func midpoint(lo, hi string) string {
	a, _ := new(big.Int).SetString(lo, 10)
	b, _ := new(big.Int).SetString(hi, 10)
	m := new(big.Int).Add(a, b)
	m.Rsh(m, 1)
	if m.Cmp(a) <= 0 {
		m.Add(a, big.NewInt(1))
	}
	return m.String()
}

// cmpDec compares two decimal numbers.
func cmpDec(a, b string) int {
	x, _ := new(big.Int).SetString(a, 10)
	y, _ := new(big.Int).SetString(b, 10)
	return x.Cmp(y)
}

// letGo says whether instance inst released or fenced its lease of shard
// from from to to: what it fetched before then is not what it holds after.
func (w *world) letGo(inst, shard string, from, to time.Time) bool {
	within := func(x shardAt) bool { return x.shard == shard && !x.at.Before(from) && !x.at.After(to) }
	return slices.ContainsFunc(w.releases[inst], within) || slices.ContainsFunc(w.leaseFences[inst], within)
}

// eachFetch calls f for each fetch of each record in fetches (key
// "shard/sequence" -> its fetch times, in order): its key, shard and
// sequence, the fetch time and when the record was fetched again (or a
// day after the run began).
func (w *world) eachFetch(fetches map[string][]time.Time, f func(key, id, seq string, t, until time.Time)) {
	for k, ts := range fetches {
		id, seq, _ := strings.Cut(k, "/")
		for i, t := range ts {
			until := w.begin.Add(24 * time.Hour)
			if i+1 < len(ts) {
				until = ts[i+1]
			}
			f(k, id, seq, t, until)
		}
	}
}
