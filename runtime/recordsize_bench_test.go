package runtime_test

import (
	"context"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/kinesis"
	"github.com/aws/aws-sdk-go-v2/service/kinesis/types"

	"github.com/kinesisgen/kinesisgen/runtime"
	"github.com/kinesisgen/kinesisgen/runtime/kinesistest"
)

// BenchmarkLargeRecords publishes 5 MiB records over the in-process HTTP
// server, one caller, through a publisher and through a bare PutRecords
// loop (issue 31's target: the publisher at least 0.9× the loop's bytes/s).
func BenchmarkLargeRecords(b *testing.B) {
	const size = 5 << 20
	data := make([]byte, size)
	for i := range data {
		data[i] = byte(i)
	}
	setup := func(b *testing.B) (*kinesis.Client, string) {
		s := kinesistest.New(kinesistest.WithRetention(0))
		h := kinesistest.NewHTTPServer(s)
		b.Cleanup(h.Close)
		c := h.Client()
		name := "large"
		if _, err := c.CreateStream(context.Background(), &kinesis.CreateStreamInput{StreamName: &name, ShardCount: aws.Int32(1), MaxRecordSizeInKiB: aws.Int32(10240)}); err != nil {
			b.Fatal(err)
		}
		return c, name
	}
	b.Run("publisher", func(b *testing.B) {
		c, name := setup(b)
		br := runtime.NewBroker(runtime.WithKinesisClient(c), runtime.WithCodec(blobCodec{}))
		if err := br.Connect(context.Background()); err != nil {
			b.Fatal(err)
		}
		defer br.Shutdown(context.Background())
		p := runtime.NewPublisher[[]byte](br, runtime.PublisherSpec{Stream: name, PartitionKey: "k"})
		b.SetBytes(size)
		b.ResetTimer()
		for b.Loop() {
			if err := p.Publish(context.Background(), data); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("bare", func(b *testing.B) {
		c, name := setup(b)
		b.SetBytes(size)
		b.ResetTimer()
		for b.Loop() {
			out, err := c.PutRecords(context.Background(), &kinesis.PutRecordsInput{StreamName: &name, Records: []types.PutRecordsRequestEntry{{Data: data, PartitionKey: aws.String("k")}}})
			if err != nil || aws.ToInt32(out.FailedRecordCount) != 0 {
				b.Fatal(err)
			}
		}
	})
}
