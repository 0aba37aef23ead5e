package shard

import (
	"fmt"
	"log/slog"
	"sync/atomic"

	"github.com/kinesisgen/kinesisgen/runtime/lease"
)

// leaseState is where a lease this coordinator holds is in its life. It is
// stored (owned.state) and written only by the transition methods below,
// each checked against legal, as raft's become* check theirs: this file is
// the state machine. The fields that carry data (the reader session, the
// lease with its checkpoint) say where to read and what to write, never
// which state the lease is in.
//
//	state          | promises                                  | moves to
//	---------------+-------------------------------------------+------------------------------------
//	waiting        | held, no reader: its parents have not     | reading (read), settling (hand),
//	               | ended, or the next pass (re)opens it      | ended, fenced, gone
//	reading        | one reader generation hands out records   | reading (a new generation), waiting
//	               | and its settled prefix is checkpointed    | (unread: sink failed, seek, refused
//	               |                                           | SHARD_END), settling, ended, fenced,
//	               |                                           | gone
//	settling       | handoff: reader stopped, its records      | checkpointing; reading, waiting or
//	               | settle for up to Handoff/2                | ended (handBack: postponed, or Stop
//	               |                                           | takes over); fenced, gone
//	checkpointing  | handoff: the final checkpoint             | releasing, fenced, gone
//	releasing      | handoff: the release, retried until       | gone (released); waiting or ended
//	               | Handoff                                   | (handBack: kept); fenced
//	ended          | SHARD_END is written: nothing to read;    | settling, fenced, gone (released)
//	               | its reader or the next pass releases it   |
//	fenced         | its fence passed unrenewed: the reader    | gone
//	               | hands out nothing, nothing is written     |
//	gone           | lost, released, left to expire or fenced  | (none: only a new take holds it
//	               | and forgotten: no more writes             | again, as a new owned)
//
// When several reasons to stop a reader meet, they rank (as the KCL's
// ShutdownReason.canTransitionTo): lost or fenced beats everything (its
// records are abandoned, nothing more is written); a written SHARD_END
// beats a stop or handoff (their final checkpoint writes nothing over it:
// persist); a stop or handoff beats a SHARD_END write the store refused
// (the retry ends with the reader, and the final checkpoint is the last
// settled record: finish). So a SHARD_END written during a handoff leaves
// the handoff's state alone (the checkpoint records it, and a handoff
// that keeps the lease goes back to ended), and a reader a Seek opens on
// an ended lease leaves it ended.
//
// The state is atomic rather than guarded by owned.mu for the two that
// must not wait for a store call holding mu: the fence's timer, which ends
// a lease at its time whatever is in flight (fence), and Status. Every
// other transition runs under owned.mu; one that finds the lease fenced
// meanwhile does not happen (it reports false).
type leaseState int32

const (
	stWaiting leaseState = iota
	stReading
	stSettling
	stCheckpointing
	stReleasing
	stEnded
	stFenced
	stGone
)

var stateNames = [...]string{"waiting", "reading", "settling", "checkpointing", "releasing", "ended", "fenced", "gone"}

func (s leaseState) String() string {
	if s >= 0 && int(s) < len(stateNames) {
		return stateNames[s]
	}
	return fmt.Sprintf("leaseState(%d)", int(s))
}

// handing reports whether s is a step of a handoff.
func (s leaseState) handing() bool {
	return s == stSettling || s == stCheckpointing || s == stReleasing
}

// held reports whether the lease in s may still be written.
func (s leaseState) held() bool { return s != stFenced && s != stGone }

// legal lists, per state, the states it may move to (a move to the same
// state is always legal: a new reader generation, SHARD_END written again).
var legal = [...][]leaseState{
	stWaiting:       {stReading, stSettling, stEnded, stFenced, stGone},
	stReading:       {stWaiting, stSettling, stEnded, stFenced, stGone},
	stSettling:      {stCheckpointing, stReading, stWaiting, stEnded, stFenced, stGone},
	stCheckpointing: {stReleasing, stFenced, stGone},
	stReleasing:     {stGone, stWaiting, stEnded, stFenced},
	stEnded:         {stSettling, stFenced, stGone},
	stFenced:        {stGone},
	stGone:          {},
}

// canMove reports whether a lease may move from one state to another.
func canMove(from, to leaseState) bool {
	if from == to {
		return true
	}
	for _, s := range legal[from] {
		if s == to {
			return true
		}
	}
	return false
}

// strictStates makes an illegal move panic (tests, export_test.go);
// otherwise it is logged as an error and does not happen.
var strictStates atomic.Bool

// stateNow is o's state.
func (o *owned) stateNow() leaseState { return leaseState(o.state.Load()) }

// move is every transition's write: from the current state to to, if
// legal. A lease fenced meanwhile (the fence takes no lock) stays fenced:
// move reports false, and the caller leaves the rest undone.
func (o *owned) move(to leaseState, why string) bool {
	for {
		from := o.stateNow()
		if from == stFenced && to != stGone {
			return false
		}
		if !canMove(from, to) {
			o.illegal(from, to, why)
			return false
		}
		if o.state.CompareAndSwap(int32(from), int32(to)) {
			return true
		}
	}
}

func (o *owned) illegal(from, to leaseState, why string) {
	if strictStates.Load() {
		panic(fmt.Sprintf("shard %s: illegal lease move %v -> %v (%s)", o.shard, from, to, why))
	}
	log := o.log
	if log == nil {
		log = slog.Default()
	}
	log.Error("illegal lease state move", "shard", o.shard, "from", from, "to", to, "why", why)
}

// The transitions. Each runs with o.mu held, except fence.

// taken is a new lease's first state, as the take returned it: ended when
// its checkpoint is SHARD_END (kept to be released, or deleted), else
// waiting; o is not shared yet.
func (o *owned) taken() {
	st := stWaiting
	if o.l.Checkpoint == lease.CheckpointShardEnd {
		st = stEnded
	}
	o.state.Store(int32(st))
}

// read makes s the lease's reader generation (open, a seek, a reader going
// on after a postponed handoff): waiting or reading → reading; an ended
// lease stays ended. False, with nothing set, when the lease is fenced,
// gone or being handed over.
func (o *owned) read(s *session) bool {
	st := o.stateNow()
	if st.handing() || !st.held() {
		return false
	}
	if st != stEnded && !o.move(stReading, "read") {
		return false
	}
	o.sess = s
	o.sessionA.Store(s)
	return true
}

// unread drops the reader generation (its sink failed, a seek replaces it,
// the store refused SHARD_END as invalid): reading → waiting, and the next
// pass opens it again; an ended lease stays ended.
func (o *owned) unread() {
	o.sess = nil
	o.sessionA.Store(nil)
	if st := o.stateNow(); st == stReading {
		o.move(stWaiting, "unread")
	}
}

// hand starts a handoff: waiting, reading or ended → settling. False when
// the lease is no longer held (fenced, gone) or is being handed over.
func (o *owned) hand() bool {
	if st := o.stateNow(); st.handing() || !st.held() {
		return false
	}
	return o.move(stSettling, "hand over")
}

// handStep moves a handoff on: settling → checkpointing (its records
// settled, or none were out), checkpointing → releasing.
func (o *owned) handStep(to leaseState) bool {
	return o.move(to, "hand over: "+to.String())
}

// handBack ends a handoff that keeps the lease (postponed, kept after
// failed releases, or left to Stop): back to ended when SHARD_END is
// written, to reading while a reader generation is set (one going on, or
// the one Stop still waits for), else waiting.
func (o *owned) handBack(why string) {
	if !o.stateNow().handing() {
		return // released, lost or fenced meanwhile
	}
	to := stWaiting
	switch {
	case o.l.Checkpoint == lease.CheckpointShardEnd:
		to = stEnded
	case o.sess != nil:
		to = stReading
	}
	o.move(to, why)
}

// end records that SHARD_END is written: waiting or reading → ended. A
// handoff under way goes on (it writes nothing over the checkpoint, and
// goes back to ended if it keeps the lease); a fenced lease stays fenced.
func (o *owned) end() {
	if st := o.stateNow(); st == stWaiting || st == stReading {
		o.move(stEnded, "SHARD_END written")
	}
}

// ended reports whether SHARD_END is written: nothing more is written over
// it (persist).
func (o *owned) ended() bool { return o.l.Checkpoint == lease.CheckpointShardEnd }

// fence moves a held lease to fenced, without o.mu (the fence's timer: a
// write in flight may hold it); it reports whether it did.
func (o *owned) fence() bool {
	for {
		from := o.stateNow()
		if !from.held() {
			return false
		}
		if o.state.CompareAndSwap(int32(from), int32(stFenced)) {
			return true
		}
	}
}

// drop marks o lost, released, left to expire or fenced and forgotten: no
// more writes. Its current reader stops and its records are abandoned.
func (o *owned) drop(why string) {
	o.move(stGone, why)
	if o.sess != nil {
		o.sess.wm.abandon()
		o.sess.cancel()
	}
}
