package kinesistest_test

import (
	"sync"
	"testing"
	"time"

	"github.com/kinesisgen/kinesisgen/runtime/kinesisapi"
	"github.com/kinesisgen/kinesisgen/runtime/kinesistest"
	"github.com/kinesisgen/kinesisgen/runtime/kinesistest/conformance"
)

// The subscribe interval of the in-process runs: the service's limit, a
// fifth as long.
const subscribeInterval = 200 * time.Millisecond

var fastSubscribe = kinesistest.WithSubscribeInterval(subscribeInterval)

// The in-process server claims no deviation from the service.
func TestConformanceInProcess(t *testing.T) {
	conformance.Run(t, conformance.Harness{
		New:               func(*testing.T) kinesisapi.API { return kinesistest.New(fastSubscribe) },
		Throttled:         func(*testing.T) kinesisapi.API { return kinesistest.New(kinesistest.WithThrottling()) },
		SubscribeInterval: subscribeInterval,
		OtherAccount: func(_ *testing.T, api kinesisapi.API) kinesisapi.API {
			return api.(*kinesistest.Server).As(otherAccount)
		},
	})
}

// otherAccount is the account of the cross-account cases.
const otherAccount = "111122223333"

// WithSubscriptionIgnoringShardEnd deviates as kinesis-mock does, as
// declared, and in no other way.
func TestConformanceIgnoringShardEnd(t *testing.T) {
	conformance.Run(t, conformance.Harness{
		New: func(*testing.T) kinesisapi.API {
			return kinesistest.New(fastSubscribe, kinesistest.WithSubscriptionIgnoringShardEnd())
		},
		Throttled:         func(*testing.T) kinesisapi.API { return kinesistest.New(kinesistest.WithThrottling()) },
		Deviations:        conformance.Deviations{SubscriptionIgnoresShardEnd: true},
		SubscribeInterval: subscribeInterval,
	})
}

// The same server through its HTTP/2 front and the SDK's real client: the
// front's JSON must be the service's.
func TestConformanceHTTP(t *testing.T) {
	var mu sync.Mutex
	servers := map[kinesisapi.API]*kinesistest.HTTPServer{}
	serve := func(t *testing.T, s *kinesistest.Server) kinesisapi.API {
		h := kinesistest.NewHTTPServer(s)
		t.Cleanup(h.Close)
		c := h.Client()
		mu.Lock()
		servers[c] = h
		mu.Unlock()
		return c
	}
	conformance.Run(t, conformance.Harness{
		New:               func(t *testing.T) kinesisapi.API { return serve(t, kinesistest.New(fastSubscribe)) },
		Throttled:         func(t *testing.T) kinesisapi.API { return serve(t, kinesistest.New(kinesistest.WithThrottling())) },
		SubscribeInterval: subscribeInterval,
		OtherAccount: func(_ *testing.T, api kinesisapi.API) kinesisapi.API {
			mu.Lock()
			defer mu.Unlock()
			return servers[api].ClientAs(otherAccount)
		},
	})
}
