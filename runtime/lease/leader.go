package lease

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"sync"
	"time"
)

// LeaderKey is the key of a namespace's leader lock. It sits beside the
// namespace's leases but outside List(namespace), so a coordinator never
// mistakes it for a shard.
func LeaderKey(namespace string) string { return namespace + "#leader" }

// Leader elects one instance of a namespace (the one that lists shards and
// creates leases) through a lock item kept in a Store as a lease: leaseOwner
// is the leader, leaseCounter its heartbeat. As with the KCL's DynamoDB lock
// client, no decision compares the clocks of two hosts: a contender takes
// the lock only after it has seen the counter stand still for the failover
// time on its own clock, and a leader stops calling itself leader when it
// has not managed a heartbeat for that long on its clock.
//
// Call TryAcquire periodically (well under the failover time, say a third
// of it) on every instance: it acquires when the lock is free or expired and
// heartbeats while held. A Leader is safe for concurrent use.
type Leader struct {
	store    Store
	key      string
	owner    string
	failover time.Duration
	now      func() time.Time
	log      *slog.Logger

	mu      sync.Mutex
	held    Lease     // the lock as last written by us, when holding
	holding bool      // held is ours
	beat    time.Time // when our last successful write was sent
	seen    Lease     // the lock as last observed held by another owner
	seenAt  time.Time // when seen's counter was first observed
}

// LeaderOption configures a Leader.
type LeaderOption func(*Leader)

// LeaderClock replaces time.Now (for tests that step time).
func LeaderClock(now func() time.Time) LeaderOption { return func(l *Leader) { l.now = now } }

// LeaderLogger sets the logger (discarded by default).
func LeaderLogger(log *slog.Logger) LeaderOption {
	return func(l *Leader) {
		if log != nil {
			l.log = log
		}
	}
}

// NewLeader returns owner's contender for the leadership of namespace.
// failover is how long a lock's counter must stand still before another
// owner takes it over.
func NewLeader(store Store, namespace, owner string, failover time.Duration, opts ...LeaderOption) *Leader {
	l := &Leader{
		store: store, key: LeaderKey(namespace), owner: owner, failover: failover,
		now: time.Now, log: slog.New(slog.NewTextHandler(io.Discard, nil)),
	}
	for _, o := range opts {
		o(l)
	}
	return l
}

// IsLeader reports whether this owner holds the lock and has heartbeaten
// within the failover time, so no other owner can have taken it over yet.
func (l *Leader) IsLeader() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.leaderLocked()
}

func (l *Leader) leaderLocked() bool {
	return l.holding && l.now().Sub(l.beat) < l.failover
}

// TryAcquire heartbeats when this owner holds the lock, and otherwise takes
// it if it is free, or held by an owner whose heartbeat has stood still for
// the failover time. It reports whether this owner is the leader. Losing a
// race to another contender is not an error.
func (l *Leader) TryAcquire(ctx context.Context) (bool, error) {
	if l.owner == "" || l.failover <= 0 {
		return false, invalid("leader", l.key, "empty owner or non-positive failover time")
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.holding {
		err := l.heartbeatLocked(ctx)
		if errors.Is(err, ErrLeaseLost) {
			err = nil // taken over: fall through and contend again
		} else {
			return l.leaderLocked(), err
		}
	}
	return l.acquireLocked(ctx)
}

func (l *Leader) acquireLocked(ctx context.Context) (bool, error) {
	sent := l.now()
	cur, err := l.store.Get(ctx, l.key)
	if errors.Is(err, ErrNotFound) {
		fresh := Lease{Key: l.key, ShardID: "leader", Owner: l.owner}
		created, cerr := l.store.Create(ctx, fresh)
		if cerr != nil {
			return false, cerr
		}
		if created {
			return l.wonLocked(fresh, sent, "created"), nil
		}
		cur, err = l.store.Get(ctx, l.key) // another contender created it first
	}
	if err != nil {
		return false, err
	}
	switch {
	case cur.Owner == l.owner:
		// Ours from before (a restart under the same owner id): confirm it.
		won, err := l.store.Renew(ctx, cur)
		if err != nil {
			return false, ignoreLost(err)
		}
		return l.wonLocked(won, sent, "resumed"), nil
	case cur.Owner != "":
		if cur.Owner != l.seen.Owner || cur.Counter != l.seen.Counter {
			l.seen, l.seenAt = cur, sent
			return false, nil
		}
		if sent.Sub(l.seenAt) < l.failover {
			return false, nil
		}
	}
	won, err := l.store.Take(ctx, cur, l.owner)
	if err != nil {
		l.seen = Lease{}
		return false, ignoreLost(err)
	}
	how := "took free lock"
	if cur.Owner != "" {
		how = "took over from " + cur.Owner
	}
	return l.wonLocked(won, sent, how), nil
}

func (l *Leader) wonLocked(held Lease, sent time.Time, how string) bool {
	l.held, l.holding, l.beat, l.seen = held, true, sent, Lease{}
	l.log.Info("leader elected", "owner", l.owner, "lock", l.key, "how", how)
	return true
}

// Heartbeat renews the lock; an error matching ErrLeaseLost means another
// owner has taken it over (or this owner never held it).
func (l *Leader) Heartbeat(ctx context.Context) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.heartbeatLocked(ctx)
}

func (l *Leader) heartbeatLocked(ctx context.Context) error {
	if !l.holding {
		return &Error{Op: "heartbeat", Key: l.key, Err: ErrLeaseLost}
	}
	sent := l.now()
	renewed, err := l.store.Renew(ctx, l.held)
	switch {
	case errors.Is(err, ErrLeaseLost), errors.Is(err, ErrNotFound):
		l.holding = false
		l.log.Warn("leadership lost", "owner", l.owner, "lock", l.key)
		return &Error{Op: "heartbeat", Key: l.key, Err: ErrLeaseLost}
	case err != nil:
		// Unknown outcome: still holding as far as we know; IsLeader turns
		// false by itself if no heartbeat lands within the failover time.
		return err
	}
	l.held, l.beat = renewed, sent
	return nil
}

// Release gives the lock up at once, so another contender can take it on
// its next TryAcquire instead of after the failover time.
func (l *Leader) Release(ctx context.Context) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if !l.holding {
		return nil
	}
	l.holding = false
	_, err := l.store.Release(ctx, l.held)
	if errors.Is(err, ErrLeaseLost) || errors.Is(err, ErrNotFound) {
		return nil // someone else has it already
	}
	return err
}

func ignoreLost(err error) error {
	if errors.Is(err, ErrLeaseLost) {
		return nil
	}
	return err
}
