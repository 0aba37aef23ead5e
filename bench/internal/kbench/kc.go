package kbench

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/kinesis"
	consumer "github.com/harlow/kinesis-consumer"
)

// ScanKC does what kinesis-consumer's Scan does for a stream whose shards do
// not change, one ScanShard per shard, without Scan's own shard map: v0.3.6
// writes that map from every shard's goroutine at once (consumer.go:130),
// and a benchmark run here died of "fatal error: concurrent map writes". It
// decodes each record's JSON, as the callback of an application would, and
// hands the Event to fn. It returns when ctx ends, a shard's scan fails or a
// record does not decode.
func ScanKC(ctx context.Context, c *consumer.Consumer, client *kinesis.Client, stream string, fn func(Event)) error {
	out, err := client.ListShards(ctx, &kinesis.ListShardsInput{StreamName: aws.String(stream)})
	if err != nil {
		return err
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	decode := func(r *consumer.Record) error {
		var e Event
		if err := json.Unmarshal(r.Data, &e); err != nil {
			return err
		}
		fn(e)
		return nil
	}
	errc := make(chan error, len(out.Shards))
	var wg sync.WaitGroup
	for _, sh := range out.Shards {
		id := aws.ToString(sh.ShardId)
		wg.Go(func() {
			if err := c.ScanShard(ctx, id, decode); err != nil && ctx.Err() == nil {
				errc <- fmt.Errorf("shard %s: %w", id, err)
				cancel()
			}
		})
	}
	wg.Wait()
	close(errc)
	return <-errc // nil when every scan ended with ctx
}
