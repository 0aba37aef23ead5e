package kinesistest_test

import (
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
	})
}

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
	serve := func(t *testing.T, s *kinesistest.Server) kinesisapi.API {
		h := kinesistest.NewHTTPServer(s)
		t.Cleanup(h.Close)
		return h.Client()
	}
	conformance.Run(t, conformance.Harness{
		New:               func(t *testing.T) kinesisapi.API { return serve(t, kinesistest.New(fastSubscribe)) },
		Throttled:         func(t *testing.T) kinesisapi.API { return serve(t, kinesistest.New(kinesistest.WithThrottling())) },
		SubscribeInterval: subscribeInterval,
	})
}
