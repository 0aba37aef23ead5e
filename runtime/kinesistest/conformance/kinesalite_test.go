package conformance_test

import (
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/kinesis"

	"github.com/kinesisgen/kinesisgen/internal/livetest"
	"github.com/kinesisgen/kinesisgen/runtime/kinesisapi"
	"github.com/kinesisgen/kinesisgen/runtime/kinesistest/conformance"
)

func liveClient(url string) *kinesis.Client {
	return kinesis.NewFromConfig(aws.Config{
		Region:      "us-east-1",
		Credentials: credentials.NewStaticCredentialsProvider("x", "x", ""),
	}, func(o *kinesis.Options) { o.BaseEndpoint = aws.String(url) })
}

func TestConformanceKinesalite(t *testing.T) {
	client := liveClient(livetest.KinesisEndpoint(t))
	conformance.Run(t, conformance.Harness{
		New:        func(*testing.T) kinesisapi.API { return client },
		Deviations: conformance.Kinesalite,
	})
}

func TestConformanceKinesisMock(t *testing.T) {
	client := liveClient(livetest.KinesisMockEndpoint(t))
	conformance.Run(t, conformance.Harness{
		New:        func(*testing.T) kinesisapi.API { return client },
		Deviations: conformance.KinesisMock,
		// It answers a call in tens to hundreds of milliseconds on a loaded
		// machine, and the Throttling case makes 2,500 records and 20 reads.
		Timeout: 90 * time.Second,
	})
}
