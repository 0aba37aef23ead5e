package shard

import (
	"fmt"
	"log/slog"
	"sync/atomic"

	"github.com/kinesisgen/kinesisgen/runtime/lease"
)

// leaseState is where a lease this coordinator holds is in its life. It is
// derived, in one place (stateLocked), from the fields that carry it
// (gone, fctx, handing, finished and the checkpoint, sess), and every
// write of those fields is checked against the transitions below
// (moveChecked), as raft's become* check theirs.
//
//	state     | promises                                  | moves to
//	----------+-------------------------------------------+-------------------------------------
//	waiting   | held, no reader: its parents have not     | reading (open), handing, ended
//	          | ended, or the next pass (re)opens it      | (taken with SHARD_END), fenced, gone
//	reading   | one reader generation hands out records   | waiting (sink failed, seek, refused
//	          | and its settled prefix is checkpointed    | SHARD_END), reading (new generation),
//	          |                                           | handing, ended, fenced, gone
//	handing   | reader stopped, records settling for up   | reading (postponed), waiting (kept
//	          | to Handoff/2, final checkpoint, release   | after failed releases), ended, fenced,
//	          |                                           | gone
//	ended     | SHARD_END is written: nothing to read;    | handing, gone (released), fenced,
//	          | its reader or the next pass releases it   | waiting or reading (a Seek rewound it)
//	fenced    | its fence passed unrenewed: the reader    | gone; handing or ended only as the
//	          | hands out nothing more, nothing is written| fence fires (a handoff begun then finds
//	          |                                           | the lease gone; a write in flight lands)
//	gone      | lost, released or fenced and forgotten:   | (none: only a new take holds it again,
//	          | no more writes                            | as a new owned)
//
// When several reasons to stop a reader meet, they rank (as the KCL's
// ShutdownReason.canTransitionTo): lost or fenced beats everything (its
// records are abandoned, nothing more is written: mutate, loseLocked,
// fenceIfExpired); a written SHARD_END beats a stop or handoff (their final
// checkpoint writes nothing over it: persist); a stop or handoff beats a
// SHARD_END write the store refused (the retry ends with the reader, and
// the final checkpoint is the last settled record: finish). The state
// order in stateLocked is that ranking, except that a handoff of an ended
// lease shows as handing (it only releases it).
type leaseState int

const (
	stWaiting leaseState = iota
	stReading
	stHanding
	stEnded
	stFenced
	stGone
)

var stateNames = [...]string{"waiting", "reading", "handing", "ended", "fenced", "gone"}

func (s leaseState) String() string {
	if s >= 0 && int(s) < len(stateNames) {
		return stateNames[s]
	}
	return fmt.Sprintf("leaseState(%d)", int(s))
}

// legal lists, per state, the states a write of its fields may move it to
// (a move to the same state is always legal: a new reader generation, a
// renewed lease).
var legal = [...][]leaseState{
	stWaiting: {stReading, stHanding, stEnded, stFenced, stGone},
	stReading: {stWaiting, stHanding, stEnded, stFenced, stGone},
	stHanding: {stReading, stWaiting, stEnded, stFenced, stGone},
	stEnded:   {stHanding, stFenced, stGone, stWaiting, stReading},
	stFenced:  {stGone, stHanding, stEnded},
	stGone:    {},
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
// otherwise it is logged as an error and the lease goes on.
var strictStates atomic.Bool

// stateLocked is o's state; o.mu is held (or o is new). A fence ends
// o.fctx without o.mu, so fenced shows as soon as it happens.
func (o *owned) stateLocked() leaseState {
	switch {
	case o.gone:
		return stGone
	case o.fctx.Err() != nil:
		return stFenced
	case o.handing:
		return stHanding
	case o.finished || o.l.Checkpoint == lease.CheckpointShardEnd:
		return stEnded
	case o.sess != nil:
		return stReading
	default:
		return stWaiting
	}
}

// moveChecked checks a write of o's fields that moved it from state from
// (read before the write) towards state to; o.mu is held. A write that
// only clears a field (to < 0) is checked against the state it leaves o
// in. The order in stateLocked hides what is written to a gone or fenced
// lease, so the write's intent is checked, not only the outcome: a reader
// opened on a gone lease is a reader nobody stops.
func (o *owned) moveChecked(from, to leaseState, why string) {
	if to < 0 {
		to = o.stateLocked()
	}
	if canMove(from, to) {
		return
	}
	if strictStates.Load() {
		panic(fmt.Sprintf("shard %s: illegal lease move %v -> %v (%s)", o.shard, from, to, why))
	}
	log := o.log
	if log == nil {
		log = slog.Default()
	}
	log.Error("illegal lease state move", "shard", o.shard, "from", from, "to", to, "why", why)
}

// derived, as moveChecked's to: the state the write left o in.
const derived leaseState = -1

// setGone marks o lost, released or fenced: no more writes; o.mu is held.
// Its current reader stops and its records are abandoned.
func (o *owned) setGone() {
	from := o.stateLocked()
	o.gone = true
	if o.sess != nil {
		o.sess.wm.abandon()
		o.sess.cancel()
	}
	o.moveChecked(from, stGone, "gone")
}

// setFinished records that SHARD_END is written; o.mu is held.
func (o *owned) setFinished() {
	from := o.stateLocked()
	o.finished = true
	o.ended.Store(true)
	o.moveChecked(from, stEnded, "SHARD_END written")
}
