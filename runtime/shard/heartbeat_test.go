package shard

import (
	"context"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/kinesisgen/kinesisgen/runtime/lease"
)

// beatLog is a member store whose heartbeats land and, while late is set,
// are answered after their deadline; it records every heartbeat answered
// in time.
type beatLog struct {
	*lease.Memory
	mu        sync.Mutex
	late      bool
	lateFence func() // called once a heartbeat that says fenced is answered late
	ok        []beatSent
}

type beatSent struct {
	at     time.Time
	fenced bool
}

func (s *beatLog) Heartbeat(ctx context.Context, ns string, m lease.Member) error {
	sent := time.Now()
	err := s.Memory.Heartbeat(ctx, ns, m)
	s.mu.Lock()
	late, hook := s.late, s.lateFence
	if late && m.Fenced {
		s.lateFence = nil
	}
	if !late && err == nil {
		s.ok = append(s.ok, beatSent{at: sent, fenced: m.Fenced})
	}
	s.mu.Unlock()
	if late {
		<-ctx.Done()
		if m.Fenced && hook != nil {
			hook()
		}
		return ctx.Err()
	}
	return err
}

// fleettest/dst mix all, seed 1796553848717798450 (fenced-live): a
// heartbeat that says this owner is fenced, confirmed by a pass's
// heartbeat (one made after asking for leases) while the heartbeat loop
// waited out its backoff, left beatDue set; the loop's next heartbeat
// wrote and confirmed a new beat, and then the stale beatDue paced the
// one after it at the new fence (max(left, 0), the whole fence time)
// instead of a beat interval later. With every call answered in time the
// owner passed its fence 2.4 s after the new beat and said it was fenced
// again, in a loop. The way back from a fence goes at once (it waited for
// the loop's backoff), and once a new beat is confirmed the beats go every
// beat interval.
func TestFencedBeatConfirmedByAPassLeavesTheBeatsPaced(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		store := &beatLog{Memory: lease.NewMemory()}
		c, err := New(Config{
			Stream: "s", Client: noKinesis{}, Leases: store, Owner: "a",
			Sink:     func(context.Context, []Record) (int, error) { return 0, nil },
			Liveness: LivenessPerInstance, Renew: time.Second, Failover: 3 * time.Second,
		})
		if err != nil {
			t.Fatal(err)
		}
		c.beatCtx, c.beatCancel = context.WithCancel(context.Background())
		defer func() {
			c.beatCancel()
			c.beating.Wait()
		}()
		if err := c.heartbeat(t.Context()); err != nil {
			t.Fatal(err)
		}
		c.beating.Add(1)
		go c.heartLoop()
		time.Sleep(3 * time.Second)

		// The store turns late: the owner passes its fence, and its
		// heartbeat past it (Fenced) is answered late. While the loop
		// waits out its backoff the store recovers, and a pass that
		// asked for leases heartbeats: that fenced beat is confirmed.
		healed := make(chan time.Time, 1)
		store.mu.Lock()
		store.late = true
		store.lateFence = func() {
			go func() {
				time.Sleep(100 * time.Millisecond)
				store.mu.Lock()
				store.late = false
				store.mu.Unlock()
				healed <- time.Now()
				if err := c.heartbeat(t.Context()); err != nil {
					t.Errorf("the pass's heartbeat: %v", err)
				}
			}()
		}
		store.mu.Unlock()
		var from time.Time
		select {
		case from = <-healed:
		case <-time.After(30 * time.Second):
			t.Fatal("no fenced heartbeat answered late")
		}
		time.Sleep(15 * time.Second)

		store.mu.Lock()
		defer store.mu.Unlock()
		var last, said time.Time // the last unfenced beat confirmed; the pass's fenced one
		every := c.cfg.beatEvery()
		for _, b := range store.ok {
			if b.at.Before(from) {
				continue
			}
			if b.fenced && said.IsZero() {
				said = b.at
			}
			if !b.fenced && last.IsZero() && !said.IsZero() && b.at.Sub(said) > 10*time.Millisecond {
				t.Errorf("the way back from the fence (a new beat) sent %v after the pass's heartbeat said fenced was confirmed; want at once", b.at.Sub(said))
			}
			if b.fenced && !last.IsZero() {
				t.Errorf("a heartbeat sent %v after the store recovered said the owner is fenced, %v after the last confirmed beat was sent; every call was answered in time",
					b.at.Sub(from), b.at.Sub(last))
			}
			if !b.fenced {
				if !last.IsZero() && b.at.Sub(last) > every+every/10 {
					t.Errorf("confirmed beats sent %v and %v after the store recovered: %v apart, want at most about %v (the fence is %v after a send)",
						last.Sub(from), b.at.Sub(from), b.at.Sub(last), every, c.cfg.fenceAfter())
				}
				last = b.at
			}
		}
		if last.IsZero() {
			t.Fatal("no beat confirmed after the store recovered")
		}
		if c.beatStale() {
			t.Errorf("the owner is past its fence %v after the store recovered", time.Since(from))
		}
	})
}
