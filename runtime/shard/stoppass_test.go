package shard_test

import (
	"context"
	"log/slog"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/kinesisgen/kinesisgen/runtime/lease"
)

// heldMembersRead is a store whose members read, once armed, waits until
// its caller gives it up.
type heldMembersRead struct {
	memberWrap
	armed atomic.Bool
	in    chan struct{}
}

func (s *heldMembersRead) Members(ctx context.Context, ns string) ([]lease.Member, error) {
	if s.armed.CompareAndSwap(true, false) {
		s.in <- struct{}{}
		<-ctx.Done()
		return nil, ctx.Err()
	}
	return s.memberWrap.Members(ctx, ns)
}

// A Stop that finds a lease pass in a remote call gives the call up; that
// is the stop, not a failure, and logs no warning. (CI under load logged
// "shard sync failed; retrying next pass … context canceled" at the stop
// of TestStopDuringAFanOutEndCheck.)
func TestStopDuringALeasePassLogsNoFailure(t *testing.T) {
	e, _ := memEnv(t, 1)
	m, _ := lease.MembersOf(e.store)
	store := &heldMembersRead{memberWrap: memberWrap{Store: e.store, m: m}, in: make(chan struct{}, 1)}
	var logs syncBuffer
	cfg := e.config("a", newCollector().sink)
	cfg.Leases = store
	cfg.Logger = slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelWarn}))
	c := e.start(cfg)
	eventually(t, 5*time.Second, "a reads its shard", func() bool { return len(c.Reading()) == 1 })
	store.armed.Store(true)
	select {
	case <-store.in:
	case <-time.After(10 * time.Second):
		t.Fatal("no lease pass read the members in 10 s")
	}
	if err := c.Stop(e.ctx(5 * time.Second)); err != nil {
		t.Fatalf("Stop: %v", err)
	}
	if strings.Contains(logs.String(), "shard sync failed") {
		t.Errorf("the stop logged a failed pass:\n%s", logs.String())
	}
}
