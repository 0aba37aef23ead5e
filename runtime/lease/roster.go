package lease

import (
	"context"
	"errors"
	"slices"
	"strings"
	"time"
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
// declares it dead (DeclareDead) and bumps the version. A store may carry
// notices on the version item too (RosterNotices).
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

// RosterNotices is a RosterStore whose version item also carries notices
// (RosterNotice): a watcher's word, read by every instance with the
// version at no cost more, that a member's death falls due. What a store
// gains by implementing it: the instances act on a death when it falls
// due on their own clocks, as with liveness per instance, instead of up
// to a lease pass later, at their next pass after the declaration. A
// RosterStore without it still keeps the roster (RosterOf), with
// declarations only. The coordinator uses the notices only when the store
// implements them (the Memory and DynamoDB stores do).
type RosterNotices interface {
	RosterStore
	// WatchRoster is MembersByOwner that also returns the notices on the
	// version item (PostNotice), sorted by owner and watcher: the same
	// read, at the same cost.
	WatchRoster(ctx context.Context, namespace string, owners []string) (version int64, ms []Member, notices []RosterNotice, err error)
	// PostNotice puts n on the version item, unless n.By's notice of
	// n.Owner at a later beat is there (then it does nothing): one
	// conditional write of the version item, which it does not bump. Each
	// watcher's notice is its own, and a watcher posting one again at the
	// same beat replaces it (a reader counts from the one that falls due
	// first on its clock).
	PostNotice(ctx context.Context, namespace string, n RosterNotice) error
	// WithdrawNotice removes n.By's notice of n.Owner while it names
	// n.Beat or an earlier beat; removing an absent or later notice does
	// nothing.
	WithdrawNotice(ctx context.Context, namespace string, n RosterNotice) error
}

// RosterNotice is a watcher's word, on the roster's version item, that a
// member's beat has stood still for nearly the failover time: every
// instance reads the version item each pass, so each learns of the death
// before it falls due and reads the member's entry by key when it does,
// instead of learning of the declaration a pass later (issue 34).
type RosterNotice struct {
	Owner string // the member whose beat stands still
	By    string // the watcher that posted it
	Beat  int64  // the beat that stands still
	// Due is how long after the notice was sent the beat will have stood
	// still for the failover time, on the watcher's clock. A reader
	// counts it from when its read of the notice returned, which is after
	// the notice was sent: its due moment is never earlier than the
	// watcher's.
	Due time.Duration
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

func sortNotices(ns []RosterNotice) {
	slices.SortFunc(ns, func(a, b RosterNotice) int {
		if c := strings.Compare(a.Owner, b.Owner); c != 0 {
			return c
		}
		return strings.Compare(a.By, b.By)
	})
}
