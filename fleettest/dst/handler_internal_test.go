package dst

import (
	"context"
	"testing"
	"testing/synctest"
	"time"

	"github.com/kinesisgen/kinesisgen/runtime"
)

// A handler called before its lease's fence, the process then frozen at
// the handler's first line while the fence cancels its context and
// another instance takes the shard: the handling counts from the call to
// the cancellation, not as one started at the thaw, which overlapped the
// other instance's (mix all, seed 103, -dst.roster).
func TestHandlerFrozenAtEntry(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		w := &world{begin: time.Now(), retried: map[string]map[int64]int{}, cfg: Config{Seed: 1}}
		in := &instance{name: "a1", app: "a", w: w}
		ctx, fence := context.WithCancel(t.Context())
		in.pause(10 * time.Second)
		done := make(chan struct{})
		go func() {
			defer close(done)
			w.handler(in)(ctx, Msg{ID: 1}, runtime.Delivery{ShardID: "s", Attempt: 1})
		}()
		time.Sleep(2 * time.Second)
		fence()
		<-done
		if len(w.handled) != 1 {
			t.Fatalf("handled %d, want 1", len(w.handled))
		}
		a := w.handled[0]
		other := handling{app: "a", inst: "a2", id: 1, start: w.begin.Add(5 * time.Second), end: w.begin.Add(15 * time.Second)}
		if !a.start.Equal(w.begin) || !a.effEnd().Equal(w.begin.Add(2*time.Second)) {
			t.Errorf("handling %s–%s, want 0.000s–2.000s (called at 0, cancelled at 2 s while frozen)", w.at(a.start), w.at(a.effEnd()))
		}
		if a.start.Before(other.effEnd()) && other.start.Before(a.effEnd()) {
			t.Errorf("counts as running at once with a2's handling from 5 s")
		}
		if !w.pausedDuring(a) {
			t.Errorf("not seen as paused during its handling")
		}
	})
}
