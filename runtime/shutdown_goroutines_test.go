package runtime_test

import (
	"fmt"
	goruntime "runtime"
	"strings"
	"testing"
	"time"

	"github.com/kinesisgen/kinesisgen/runtime"
)

// Shutdown leaves nothing running: no heartbeat, lease pass, reader, lane,
// batcher or aggregator goroutine outlives it (as the KCL's scheduler
// shutdown closes its lock clients' heartbeat threads), in both liveness
// modes, with plain and aggregating publishers that have sent.
func TestShutdownLeavesNoGoroutine(t *testing.T) {
	for name, opts := range map[string][]runtime.Option{"per-instance": nil, "per-lease": {runtime.WithPerLeaseRenewal()}} {
		t.Run(name, func(t *testing.T) {
			e := newEnv(t)
			orders := e.newStream("orders", 3)
			base := goruntime.NumGoroutine()
			b := e.broker(opts...)
			h, ch := collect()
			mustSubscribe(e, b, orders, h, runtime.Workers(2), runtime.ByKey())
			if err := b.Connect(e.ctx); err != nil {
				t.Fatal(err)
			}
			p := runtime.NewPublisher[order](b, runtime.PublisherSpec{Stream: orders})
			pa := runtime.NewPublisher[order](b, runtime.PublisherSpec{Stream: orders}, runtime.WithAggregation(runtime.Aggregation{}))
			for i := range 10 {
				e.publish(p, order{ID: i, Customer: fmt.Sprintf("c%d", i)})
				e.publish(pa, order{ID: 100 + i, Customer: fmt.Sprintf("c%d", i)})
			}
			receive(e, ch, 20)
			if err := b.Shutdown(e.ctx); err != nil {
				t.Fatal(err)
			}
			deadline := time.Now().Add(3 * time.Second)
			for goruntime.NumGoroutine() > base && time.Now().Before(deadline) {
				time.Sleep(20 * time.Millisecond)
			}
			if n := goruntime.NumGoroutine(); n > base {
				buf := make([]byte, 1<<20)
				buf = buf[:goruntime.Stack(buf, true)]
				var mine []string
				for _, g := range strings.Split(string(buf), "\n\n") {
					if strings.Contains(g, "kinesisgen/runtime") && !strings.Contains(g, "testing.tRunner") {
						mine = append(mine, g)
					}
				}
				t.Fatalf("%d goroutines after Shutdown, %d before the broker:\n%s", n, base, strings.Join(mine, "\n\n"))
			}
		})
	}
}
