package shard_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/kinesisgen/kinesisgen/internal/livetest"
	"github.com/kinesisgen/kinesisgen/runtime/shard"
)

// The handoff whose release fails, with the DynamoDB store on dynalite, in
// both liveness modes (per lease the request and the release's retries
// meet the owner's renewals of the lease).
func TestLiveHandoffWithFailedReleaseDoesNotStrand(t *testing.T) {
	eachLiveness(t, func(t *testing.T, l shard.Liveness) {
		for _, c := range []struct {
			name string
			f    func(*testing.T, *env)
		}{{"release-retried", testHandoffReleaseRetried}, {"asker-gone", testHandoffAskerGone}} {
			t.Run(c.name, func(t *testing.T) {
				e := liveEnv(t, livetest.KinesisServers[0], 2)
				store := liveDynamoDB(t, livetest.DynamoDBEndpoint(t), fmt.Sprintf("shard-leases-%d", time.Now().UnixNano()))
				if err := store.EnsureTable(e.ctx(30 * time.Second)); err != nil {
					t.Fatalf("EnsureTable: %v", err)
				}
				e.store = store
				e.liveness = l
				c.f(t, e)
			})
		}
	})
}
