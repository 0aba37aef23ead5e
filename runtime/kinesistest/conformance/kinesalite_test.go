package conformance_test

import (
	"net/http"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/kinesis"

	"github.com/kinesisgen/kinesisgen/internal/livetest"
	"github.com/kinesisgen/kinesisgen/runtime/kinesisapi"
	"github.com/kinesisgen/kinesisgen/runtime/kinesistest/conformance"
	"github.com/kinesisgen/kinesisgen/runtime/kinesistest/kinesismock"
)

func liveClient(url string) *kinesis.Client { return liveClientVia(url, nil) }

// liveClientVia is liveClient with its own HTTP client (nil: the SDK's).
func liveClientVia(url string, hc *http.Client) *kinesis.Client {
	cfg := aws.Config{
		Region:      "us-east-1",
		Credentials: credentials.NewStaticCredentialsProvider("x", "x", ""),
	}
	if hc != nil {
		cfg.HTTPClient = hc
	}
	return kinesis.NewFromConfig(cfg, func(o *kinesis.Options) { o.BaseEndpoint = aws.String(url) })
}

func TestConformanceKinesalite(t *testing.T) {
	client := liveClient(livetest.KinesisEndpoint(t))
	conformance.Run(t, conformance.Harness{
		New:        func(*testing.T) kinesisapi.API { return client },
		Deviations: conformance.Kinesalite,
	})
}

// kinesis-mock's subscriptions are read through kinesismock.Transport,
// which mends the two ways they differ on the wire; the suite checks on the
// unmended client that kinesis-mock still has both.
func TestConformanceKinesisMock(t *testing.T) {
	url := livetest.KinesisMockEndpoint(t)
	client, unmended := liveClientVia(url, kinesismock.HTTPClient()), liveClient(url)
	conformance.Run(t, conformance.Harness{
		New:        func(*testing.T) kinesisapi.API { return client },
		Unmended:   func(*testing.T) kinesisapi.API { return unmended },
		Deviations: conformance.KinesisMock,
		// It answers a call in tens to hundreds of milliseconds on a loaded
		// machine, and the Throttling case makes 2,500 records and 20 reads;
		// a MiB of record data takes it seconds (MaxRecordSize writes and
		// reads about 8 MiB: 50 to 85 s at a load of 20 on two cores).
		Timeout: 180 * time.Second,
	})
}
