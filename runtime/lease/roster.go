package lease

import (
	"context"
	"errors"
)

// RosterKey is the key of a namespace's roster version item in the lease
// table (RosterStore): like MembersKey, outside List(namespace).
func RosterKey(namespace string) string { return namespace + "#roster" }

// ErrDeclaredDead is a roster heartbeat's refusal (Member.Roster): a
// watcher declared the owner's entry dead (RosterStore.DeclareDead). The
// owner has fenced itself by then (its beat stood still for the failover
// time); it writes a new entry (Leave, then Heartbeat) and bumps the
// roster to be seen alive again.
var ErrDeclaredDead = errors.New("member declared dead")

// RosterStore is a MemberStore that lets instances judge liveness with
// reads that grow linearly with the instances (issue 34): a roster version
// per namespace, bumped by every change of the member list that readers
// must see (a join, a leave, a death declared, an entry whose Held, Asks,
// Starting or Fenced changed); an instance reads the version (one small
// item) every pass and the whole member list only when it moved, and
// watches the beats of a few members by key (MembersByOwner): its
// successors on the ring of owners, and every member of an earlier version
// (without Member.Roster), as before. A watcher that sees a successor's
// beat stand still for the failover time, or its entry say Fenced,
// declares it dead (DeclareDead) and bumps the version.
type RosterStore interface {
	MemberStore
	// RosterVersion returns the namespace's roster version (0 before the
	// first bump): one strongly consistent read of one small item.
	RosterVersion(ctx context.Context, namespace string) (int64, error)
	// BumpRoster adds one to the version (one write) and returns it.
	BumpRoster(ctx context.Context, namespace string) (int64, error)
	// MembersByOwner returns the roster version and the entries of owners
	// that exist, sorted by owner, read by key (strongly consistent) in
	// one call: a view of them is as old as that one call.
	MembersByOwner(ctx context.Context, namespace string, owners []string) (version int64, ms []Member, err error)
	// DeclareDead marks owner's entry dead (Member.Dead) while it holds
	// beat; else an error matching ErrLeaseLost (it beat since, or left).
	DeclareDead(ctx context.Context, namespace, owner string, beat int64) error
}

// RosterCapable is implemented by a store that implements RosterStore only
// in some configurations (the DynamoDB store: with the members table).
type RosterCapable interface {
	RosterSupported() bool
}

// RosterOf returns s as a RosterStore when it keeps members (MembersOf)
// and supports the roster.
func RosterOf(s Store) (RosterStore, bool) {
	if _, ok := MembersOf(s); !ok {
		return nil, false
	}
	r, ok := s.(RosterStore)
	if !ok {
		return nil, false
	}
	if c, ok := s.(RosterCapable); ok && !c.RosterSupported() {
		return nil, false
	}
	return r, true
}
