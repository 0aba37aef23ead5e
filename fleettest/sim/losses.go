package sim

import (
	"context"
	"log/slog"
	"strings"
	"sync"
	"time"
)

// A lease lost involuntarily (fenced for want of a renewal, or taken by
// another instance) lets its next owner read the shard again from the
// checkpoint: the records handled since are handled twice, and that is no
// graceful handoff's doing. The coordinator says so in its log; lossLog
// collects those lines, so a duplicate can be told apart.
type lossLog struct {
	mu     sync.Mutex
	losses map[[2]string][]time.Time // owner, shard → when
}

func (l *lossLog) add(owner, shardID string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.losses == nil {
		l.losses = map[[2]string][]time.Time{}
	}
	k := [2]string{owner, shardID}
	l.losses[k] = append(l.losses[k], time.Now())
}

// between reports whether owner lost shard's lease within [from, to].
func (l *lossLog) between(owner, shardID string, from, to time.Time) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, t := range l.losses[[2]string{owner, shardID}] {
		if !t.Before(from) && !t.After(to) {
			return true
		}
	}
	return false
}

func (l *lossLog) count() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := 0
	for _, ts := range l.losses {
		n += len(ts)
	}
	return n
}

// lossHook is a slog.Handler that records the coordinators' lease-loss
// lines and passes everything to next (if any).
type lossHook struct {
	log   *lossLog
	next  slog.Handler
	attrs []slog.Attr
}

func (h *lossHook) Enabled(ctx context.Context, lv slog.Level) bool {
	return lv >= slog.LevelWarn || (h.next != nil && h.next.Enabled(ctx, lv))
}

func (h *lossHook) Handle(ctx context.Context, r slog.Record) error {
	if m := r.Message; strings.HasPrefix(m, "lease lost") || strings.HasPrefix(m, "lease not renewed in time") {
		var owner, shardID string
		look := func(a slog.Attr) bool {
			switch a.Key {
			case "owner":
				owner = a.Value.String()
			case "shard":
				shardID = a.Value.String()
			}
			return true
		}
		for _, a := range h.attrs {
			look(a)
		}
		r.Attrs(look)
		h.log.add(owner, shardID)
	}
	if h.next != nil && h.next.Enabled(ctx, r.Level) {
		return h.next.Handle(ctx, r)
	}
	return nil
}

func (h *lossHook) WithAttrs(as []slog.Attr) slog.Handler {
	n := &lossHook{log: h.log, attrs: append(append([]slog.Attr(nil), h.attrs...), as...)}
	if h.next != nil {
		n.next = h.next.WithAttrs(as)
	}
	return n
}

func (h *lossHook) WithGroup(name string) slog.Handler {
	n := &lossHook{log: h.log, attrs: h.attrs}
	if h.next != nil {
		n.next = h.next.WithGroup(name)
	}
	return n
}
