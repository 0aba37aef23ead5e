package shard

// Liveness is how an owner shows other instances that it is alive, so that
// they leave its leases alone.
type Liveness int

const (
	// LivenessAuto is LivenessPerInstance when the lease store is a
	// lease.MemberStore whose layout allows it (lease.MembersOf), and
	// LivenessPerLease otherwise.
	LivenessAuto Liveness = iota
	// LivenessPerLease renews every held lease every Renew: a lease whose
	// counter stands still for Failover is expired. The Java KCL judges
	// liveness this way, so a table it shares needs it; a fleet of
	// instances writes one item per shard per Renew at rest, and every
	// pass lists every lease.
	LivenessPerLease
	// LivenessPerInstance writes one member entry per instance every Renew
	// (lease.MemberStore.Heartbeat) instead: an owner whose entry stands
	// still for Failover is dead, and its leases are expired. Leases are
	// written only when their ownership changes and at checkpoints, still
	// each conditional on its counter and owner. The lease store must be
	// a lease.MemberStore.
	LivenessPerInstance
)

func (l Liveness) String() string {
	switch l {
	case LivenessAuto:
		return "auto"
	case LivenessPerLease:
		return "per-lease"
	case LivenessPerInstance:
		return "per-instance"
	}
	return "Liveness(?)"
}

// Balance is how an instance below its fair share gets leases from the
// instances above it.
type Balance int

const (
	// BalanceBulk: every instance applies one deterministic rule to the
	// same view (live owners, their leases) and asks, in one pass, for
	// every lease the rule assigns to it, each from the owner it names.
	BalanceBulk Balance = iota
	// BalanceOneSteal asks the most loaded owner for one lease per pass
	// (this runtime's rule before issue 17, and the KCL's).
	BalanceOneSteal
)

func (b Balance) String() string {
	switch b {
	case BalanceBulk:
		return "bulk"
	case BalanceOneSteal:
		return "one-steal"
	}
	return "Balance(?)"
}
