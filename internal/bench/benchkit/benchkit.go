// Package benchkit holds what the kinesalite benchmark commands share across
// both modules: internal/bench/publishbench here and the bench module's
// commands (whose import paths lie under this module's, so they may import
// it). It uses only the AWS SDK, which this module requires anyway; the bench
// module's own dependencies stay out of it.
package benchkit

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/kinesis"
	"github.com/aws/aws-sdk-go-v2/service/kinesis/types"
)

// CreateStream creates a stream with a unique name and waits until it is active.
func CreateStream(ctx context.Context, client *kinesis.Client, prefix string, shards int32) (string, error) {
	var r [4]byte
	_, _ = rand.Read(r[:])
	name := prefix + "-" + hex.EncodeToString(r[:])
	if _, err := client.CreateStream(ctx, &kinesis.CreateStreamInput{StreamName: &name, ShardCount: &shards}); err != nil {
		return "", err
	}
	w := kinesis.NewStreamExistsWaiter(client, func(o *kinesis.StreamExistsWaiterOptions) { o.MinDelay = 10 * time.Millisecond })
	if err := w.Wait(ctx, &kinesis.DescribeStreamInput{StreamName: &name}, time.Minute); err != nil {
		return "", errors.Join(errors.New("stream never became active"), err)
	}
	return name, nil
}

// DeleteStream deletes a stream a benchmark is done with, so that a local
// server (kinesalite keeps every record in its process's memory) does not
// carry it into the modes measured after it.
func DeleteStream(ctx context.Context, client *kinesis.Client, name string) error {
	_, err := client.DeleteStream(ctx, &kinesis.DeleteStreamInput{StreamName: &name, EnforceConsumerDeletion: aws.Bool(true)})
	return err
}

// Parallel runs fn in g goroutines and returns the first error any of them
// returned, after all have returned.
func Parallel(g int, fn func() error) error {
	errs := make(chan error, g)
	var wg sync.WaitGroup
	for range g {
		wg.Go(func() {
			if err := fn(); err != nil {
				errs <- err
			}
		})
	}
	wg.Wait()
	close(errs)
	return <-errs
}

// PutBatches puts records 0..n-1 into stream with PutRecords of 500 from g
// goroutines, resending the entries a call refused; record gives record i's
// data and partition key.
func PutBatches(ctx context.Context, client *kinesis.Client, stream string, n, g int, record func(i int) (data []byte, key string)) error {
	var next atomic.Int64
	return Parallel(g, func() error {
		for {
			start := int(next.Add(500) - 500)
			if start >= n {
				return nil
			}
			end := min(start+500, n)
			recs := make([]types.PutRecordsRequestEntry, 0, end-start)
			for i := start; i < end; i++ {
				data, key := record(i)
				recs = append(recs, types.PutRecordsRequestEntry{Data: data, PartitionKey: aws.String(key)})
			}
			for len(recs) > 0 {
				out, err := client.PutRecords(ctx, &kinesis.PutRecordsInput{StreamName: &stream, Records: recs})
				if err != nil {
					return err
				}
				var again []types.PutRecordsRequestEntry
				for j, r := range out.Records {
					if r.ErrorCode != nil {
						again = append(again, recs[j])
					}
				}
				recs = again
			}
		}
	})
}

// CPUTime is the user plus system CPU time of this process so far.
func CPUTime() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
