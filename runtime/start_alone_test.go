package runtime_test

import (
	"context"
	"testing"
	"time"

	"github.com/kinesisgen/kinesisgen/runtime"
	"github.com/kinesisgen/kinesisgen/runtime/kinesistest"
	"github.com/kinesisgen/kinesisgen/runtime/lease"
)

// A broker on its own in-memory lease store (the default: kinesistest's
// brokers, the embedded backend) is the only instance that can ever hold
// its leases, so Connect does not wait the tenth of the renewal interval a
// fleet's start gives instances starting together; given a store another
// broker could share, it still does.
func TestConnectAloneDoesNotWaitForOtherInstances(t *testing.T) {
	const renew = 10 * time.Second // a start's wait of 1 s
	for _, tc := range []struct {
		name string
		opts []runtime.Option
		wait bool
	}{
		{"private store", nil, false},
		{"store given", []runtime.Option{runtime.WithLeaseStore(lease.NewMemory())}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv := kinesistest.New()
			opts := append([]runtime.Option{runtime.WithLeaseRenewInterval(renew), runtime.WithFailoverTime(3 * renew)}, tc.opts...)
			b := srv.NewBroker(opts...)
			h, _ := collect()
			if _, err := runtime.Subscribe(b, "orders", h, runtime.CreateIfMissing(2)); err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
			defer cancel()
			began := time.Now()
			if err := b.Connect(ctx); err != nil {
				t.Fatal(err)
			}
			took := time.Since(began)
			t.Cleanup(func() { _ = b.Shutdown(context.Background()) })
			if tc.wait && took < renew/10 {
				t.Errorf("Connect took %v on a lease store other brokers may share; want the start's wait of %v", took, renew/10)
			}
			if !tc.wait && took >= renew/10 {
				t.Errorf("Connect took %v alone in its lease store; want no wait for other instances (%v)", took, renew/10)
			}
		})
	}
}
