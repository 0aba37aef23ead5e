package telemetry_test

import (
	"context"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/kinesis"

	"github.com/kinesisgen/kinesisgen/runtime"
	"github.com/kinesisgen/kinesisgen/runtime/kinesistest"
)

// The allocations per record of the consume and publish paths with
// telemetry off, as the runtime before telemetry made them (BENCHMARKS.md,
// "Telemetry off and on"), and a little room: 9.07 per drained record
// (the JSON decoding of costEvent is 6 of them), 2.06 per record published
// 500 at a time (2.55 under the race detector; 3.04 and 5.05 before the
// default codec's compiled encoder, which needs no pooled buffer that the
// race detector's sync.Pool drops at random). Telemetry off must add nothing: one
// allocation more per record fails these guards, whatever the machine's
// load (they count, not time).
const drainAllocsPerRecord = 9.2

var publishAllocsPerRecord = map[bool]float64{false: 2.2, true: 3.0}[raceOn]

// TestTelemetryOffAllocatesNothingOnTheConsumePath drains 20k records
// (4 shards, 8 by-key lanes, a no-op handler) with telemetry off and
// counts the process's allocations per record.
func TestTelemetryOffAllocatesNothingOnTheConsumePath(t *testing.T) {
	const n = 20_000
	ctx := context.Background()
	srv := kinesistest.New()
	if _, err := srv.CreateStream(ctx, &kinesis.CreateStreamInput{StreamName: aws.String("drain"), ShardCount: aws.Int32(4)}); err != nil {
		t.Fatal(err)
	}
	pb := srv.NewBroker()
	if err := pb.Connect(ctx); err != nil {
		t.Fatal(err)
	}
	pub := runtime.NewPublisher[costEvent](pb, runtime.PublisherSpec{Stream: "drain"})
	if err := runtime.PublishAll(ctx, pub, costEvents(n)); err != nil {
		t.Fatal(err)
	}
	_ = pb.Shutdown(ctx)
	drain(t, srv, n, nil) // warm: first-use allocations are not the path's
	per := testing.AllocsPerRun(1, func() { drain(t, srv, n, nil) }) / n
	t.Logf("%.3f allocations per drained record (guard %.1f)", per, drainAllocsPerRecord)
	if per > drainAllocsPerRecord {
		t.Errorf("the consume path with telemetry off allocates %.3f times per record, more than its baseline %.1f: something now allocates per record", per, drainAllocsPerRecord)
	}
}

// TestTelemetryOffAllocatesNothingOnThePublishPath publishes 20k records
// with PublishAll, 500 at a time (so that how the batcher groups them into
// requests, which depends on timing, barely moves the count), with
// telemetry off and counts the process's allocations per record.
func TestTelemetryOffAllocatesNothingOnThePublishPath(t *testing.T) {
	const n, batch = 20_000, 500
	ctx := context.Background()
	srv := kinesistest.New()
	if _, err := srv.CreateStream(ctx, &kinesis.CreateStreamInput{StreamName: aws.String("pub"), ShardCount: aws.Int32(4)}); err != nil {
		t.Fatal(err)
	}
	br := srv.NewBroker()
	if err := br.Connect(ctx); err != nil {
		t.Fatal(err)
	}
	defer br.Shutdown(ctx)
	p := runtime.NewPublisher[costEvent](br, runtime.PublisherSpec{Stream: "pub"})
	events := costEvents(batch)
	publish := func() {
		for range n / batch {
			if err := runtime.PublishAll(ctx, p, events); err != nil {
				t.Fatal(err)
			}
		}
	}
	publish() // warm
	per := testing.AllocsPerRun(1, publish) / n
	t.Logf("%.3f allocations per published record (guard %.1f)", per, publishAllocsPerRecord)
	if per > publishAllocsPerRecord {
		t.Errorf("the publish path with telemetry off allocates %.3f times per record, more than its baseline %.1f: something now allocates per record", per, publishAllocsPerRecord)
	}
}
