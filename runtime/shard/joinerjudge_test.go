package shard_test

import (
	"context"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/kinesisgen/kinesisgen/runtime/lease"
)

// Issue 29, dst mix churn seed 1796567417450576642 (9.1 s unread at a 3 s
// failover): a member dies holding a lease, and an instance joins shortly
// before the others judge it dead. The fair-share plan gave the dead
// member's lease to the joiner, below its share; but the joiner first saw
// the dead member's entry when it joined and judges it dead only a
// failover time after that, so the lease waited for the joiner's own
// judgement (or for takeOverdue, a failover time later). Here the joiner
// beats and never takes (as a joiner that cannot judge the owner dead):
// a, which judges it dead, takes the lease within about a pass.
func TestDeadOwnersLeaseIsNotLeftToAJoinerThatCannotJudgeIt(t *testing.T) {
	const failover = 3 * time.Second
	e, a, cfg, ids := startGhostAsked(t, failover)
	give := ids[1]
	ms := e.store.(lease.MemberStore)
	beat := ghostAsks(t, e, cfg, give)
	ctx := e.ctx(30 * time.Second)
	// The ghost takes what a released to it and beats, holding it, until
	// it dies.
	if _, err := e.store.Take(ctx, e.lease(give), "ghost"); err != nil {
		t.Fatal(err)
	}
	for range 10 {
		beat++
		if err := ms.Heartbeat(ctx, cfg.Namespace, lease.Member{Owner: "ghost", Beat: beat, Held: 1}); err != nil {
			t.Fatal(err)
		}
		time.Sleep(50 * time.Millisecond)
	}
	eventually(t, 2*time.Second, "a reads one shard", func() bool { return slices.Equal(a.Reading(), ids[:1]) })
	died := time.Now()
	// The joiner arrives half a second before a can judge the ghost dead.
	time.Sleep(failover - 500*time.Millisecond)
	jctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	t.Cleanup(func() { cancel(); wg.Wait() })
	wg.Go(func() {
		for b := int64(1); jctx.Err() == nil; b++ {
			_ = ms.Heartbeat(jctx, cfg.Namespace, lease.Member{Owner: "joiner", Beat: b})
			time.Sleep(50 * time.Millisecond)
		}
	})
	eventually(t, 4*failover, "a reads both shards", func() bool { return slices.Equal(a.Reading(), ids) })
	// a judges the ghost dead a failover time after it saw its last beat
	// (a pass at most after it was written), and takes at its next pass.
	took, bound := time.Since(died), failover*7/4
	t.Logf("a read the dead member's %s %v after its last beat", give, took.Round(time.Millisecond))
	if took > bound {
		t.Fatalf("a read the dead member's %s %v after its last beat, want within %v: the plan left it to a joiner that could not judge the owner dead yet",
			give, took.Round(time.Millisecond), bound)
	}
}
