package shard_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/kinesisgen/kinesisgen/runtime/lease"
	"github.com/kinesisgen/kinesisgen/runtime/shard"
)

// refusalLog is a rosterWrap that remembers when a heartbeat was first
// refused as declared dead, and how long after that the next heartbeat
// was sent.
type refusalLog struct {
	*rosterWrap
	mu        sync.Mutex
	refusedAt time.Time
	next      time.Duration // from the refusal to the next heartbeat sent; 0: none yet
}

func (l *refusalLog) Heartbeat(ctx context.Context, ns string, m lease.Member) error {
	l.mu.Lock()
	if !l.refusedAt.IsZero() && l.next == 0 {
		l.next = time.Since(l.refusedAt)
	}
	l.mu.Unlock()
	err := l.rosterWrap.Heartbeat(ctx, ns, m)
	if errors.Is(err, lease.ErrDeclaredDead) {
		l.mu.Lock()
		if l.refusedAt.IsZero() {
			l.refusedAt = time.Now()
		}
		l.mu.Unlock()
	}
	return err
}

// keepsDeadEntries is a rosterWrap whose removals of other members'
// entries never land: a member declared dead keeps its entry, as when
// the declarer's store failed after the declaration.
type keepsDeadEntries struct {
	*rosterWrap
	me string
}

func (k keepsDeadEntries) Leave(ctx context.Context, ns, owner string, beat int64) error {
	if owner == k.me {
		return k.rosterWrap.Leave(ctx, ns, owner, beat)
	}
	return &lease.Error{Op: "leave", Err: context.DeadlineExceeded}
}

func (l *refusalLog) rejoinedAfter() (time.Duration, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.next, l.next > 0
}

// An owner declared dead while its store failed rejoins as soon as a
// heartbeat is refused as declared dead: the refusal is an answer, the
// store is back, and it may answer only for a while. (Before, the rejoin
// waited out the failed heartbeats' backoff, up to Renew, and the next
// outage could begin before it: fleettest/dst mix late, seed
// 1796595926111222315, a shard unread 10.1 s against a bound of 9 s.)
func TestDeclaredDeadOwnerRejoinsAtTheRefusal(t *testing.T) {
	e, _ := memEnv(t, 2)
	ids := e.shards()
	// b declares a dead, and its removal of a's entry fails.
	cs := map[string]*shard.Coordinator{}
	var a *refusalLog
	for _, name := range []string{"a", "b"} {
		cfg := e.config(name, newCollector().sink)
		cfg.Renew, cfg.Failover = time.Second, 3*time.Second
		var store lease.Store = keepsDeadEntries{newRosterWrap(e.store), name}
		if name == "a" {
			a = &refusalLog{rosterWrap: newRosterWrap(e.store)}
			store = a
		}
		cfg.Leases, cfg.Roster, cfg.RosterWhole = store, true, -1
		cs[name] = e.start(cfg)
	}
	eventually(t, 10*time.Second, "a and b read a shard each", func() bool {
		return len(cs["a"].Reading()) == 1 && len(cs["b"].Reading()) == 1
	})
	a.off.Store(true) // its heartbeats fail: it fences, b declares it dead
	eventually(t, 15*time.Second, "b reads both shards", func() bool { return readingAll(map[string]*shard.Coordinator{"b": cs["b"]}, ids) })
	time.Sleep(2 * time.Second) // a's failed heartbeats back off to Renew
	a.off.Store(false)
	eventually(t, 10*time.Second, "a refused as declared dead, then a heartbeat again", func() bool { _, ok := a.rejoinedAfter(); return ok })
	if after, _ := a.rejoinedAfter(); after > 200*time.Millisecond {
		t.Errorf("a sent its next heartbeat %v after one was refused as declared dead; want at once (the store answered), not a backoff later", after)
	}
	eventually(t, 10*time.Second, "a reads a shard again", func() bool { return len(cs["a"].Reading()) == 1 })
}
