package runtime_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/smithy-go"

	"github.com/kinesisgen/kinesisgen/internal/livetest"
	"github.com/kinesisgen/kinesisgen/runtime"
	"github.com/kinesisgen/kinesisgen/runtime/kinesistest"
	"github.com/kinesisgen/kinesisgen/runtime/lease"
)

// failingCredentials is a credential source that cannot be had, as a
// missing profile or an expired SSO session.
func failingCredentials(cause error) aws.CredentialsProvider {
	return aws.NewCredentialsCache(aws.CredentialsProviderFunc(func(context.Context) (aws.Credentials, error) {
		return aws.Credentials{}, cause
	}))
}

// A publish whose credentials cannot be had fails at once with ErrPublish
// and ErrAccess, instead of retrying until its context ends as it does for
// an endpoint it cannot reach: a credential that is missing stays missing.
func TestPublishWithBadCredentialFailsAtOnceAsAccess(t *testing.T) {
	bad := errors.New("no such profile: orders-prod")
	cfg := aws.Config{Region: "us-east-1", Credentials: failingCredentials(bad)}
	b := runtime.NewBrokerFromConfig(cfg, runtime.WithEndpoint(refusedEndpoint(t)))
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	if err := b.Connect(ctx); err != nil {
		t.Fatal(err)
	}
	defer b.Shutdown(context.Background())

	start := time.Now()
	err := runtime.NewPublisher[order](b, runtime.PublisherSpec{Stream: "orders"}).Publish(ctx, order{ID: 1})
	if d := time.Since(start); d > 5*time.Second {
		t.Fatalf("Publish took %v to fail (%v); want it to fail at once", d, err)
	}
	if !errors.Is(err, runtime.ErrAccess) || !errors.Is(err, runtime.ErrPublish) || !errors.Is(err, bad) {
		t.Fatalf("Publish = %v; want ErrPublish and ErrAccess, with the credential's error", err)
	}
	if errors.Is(err, runtime.ErrTransport) {
		t.Fatalf("Publish = %v; matches ErrTransport, but no request was sent", err)
	}
}

// A lease table whose client's credentials cannot be had fails Connect with
// ErrLease that also matches ErrAccess.
func TestLeaseStoreWithBadCredentialIsAnAccessError(t *testing.T) {
	bad := errors.New("no such profile: leases-prod")
	ddb := dynamodb.New(dynamodb.Options{
		Region:       "us-east-1",
		BaseEndpoint: aws.String(refusedEndpoint(t)),
		Credentials:  failingCredentials(bad),
	})
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	err := connectWithLeaseTable(t, ctx, ddb)
	if err == nil {
		t.Fatal("Connect succeeded with no credentials for the lease table")
	}
	if !errors.Is(err, runtime.ErrAccess) || !errors.Is(err, runtime.ErrLease) || !errors.Is(err, bad) {
		t.Fatalf("Connect = %v; want ErrLease and ErrAccess, with the credential's error", err)
	}
}

// Live: kinesalite and dynalite refuse an unsigned request (anonymous
// credentials) with MissingAuthenticationTokenException, as the services
// do. The subscription's start fails with ErrStream and ErrAccess, a
// publish with ErrPublish and ErrAccess, at once, and a lease table's
// refusal fails Connect with ErrLease and ErrAccess.
func TestUnsignedRequestsAreRefusedAsAccessLive(t *testing.T) {
	kinesisURL, dynamoURL := livetest.KinesisEndpoint(t), livetest.DynamoDBEndpoint(t)
	anon := aws.Config{Region: "us-east-1", Credentials: aws.AnonymousCredentials{}}
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	wantCode := func(t *testing.T, what string, err error) {
		t.Helper()
		ae, ok := errors.AsType[smithy.APIError](err)
		if !ok || ae.ErrorCode() != "MissingAuthenticationTokenException" {
			t.Fatalf("%s = %v; want the server's MissingAuthenticationTokenException", what, err)
		}
	}

	t.Run("kinesis", func(t *testing.T) {
		b := runtime.NewBrokerFromConfig(anon, runtime.WithEndpoint(kinesisURL))
		if err := b.Connect(ctx); err != nil {
			t.Fatal(err)
		}
		defer b.Shutdown(context.Background())
		_, err := runtime.Subscribe(b, "orders", ack) // refused before the stream is looked up
		if !errors.Is(err, runtime.ErrAccess) || !errors.Is(err, runtime.ErrStream) {
			t.Fatalf("Subscribe = %v; want ErrStream and ErrAccess", err)
		}
		wantCode(t, "Subscribe", err)

		start := time.Now()
		err = runtime.NewPublisher[order](b, runtime.PublisherSpec{Stream: "orders"}).Publish(ctx, order{ID: 1})
		if !errors.Is(err, runtime.ErrAccess) || !errors.Is(err, runtime.ErrPublish) {
			t.Fatalf("Publish = %v; want ErrPublish and ErrAccess", err)
		}
		wantCode(t, "Publish", err)
		if d := time.Since(start); d > 5*time.Second {
			t.Fatalf("Publish took %v to fail", d)
		}
	})

	t.Run("dynamodb", func(t *testing.T) {
		ddb := dynamodb.NewFromConfig(anon, func(o *dynamodb.Options) { o.BaseEndpoint = aws.String(dynamoURL) })
		err := connectWithLeaseTable(t, ctx, ddb)
		if err == nil {
			t.Fatal("Connect succeeded with an unsigned lease table client")
		}
		if !errors.Is(err, runtime.ErrAccess) || !errors.Is(err, runtime.ErrLease) {
			t.Fatalf("Connect = %v; want ErrLease and ErrAccess", err)
		}
		wantCode(t, "Connect", err)
	})
}

// connectWithLeaseTable connects a broker that subscribes to an in-process
// stream and keeps its leases in the table "leases" through ddb, and
// returns what Connect returned (a broker that connected is shut down).
func connectWithLeaseTable(t *testing.T, ctx context.Context, ddb *dynamodb.Client) error {
	t.Helper()
	srv := kinesistest.New()
	if err := srv.AddStream("orders", 1); err != nil {
		t.Fatal(err)
	}
	b := runtime.NewBroker(runtime.WithKinesisClient(srv), runtime.WithLeaseStore(lease.NewDynamoDB(ddb, "leases")))
	if _, err := runtime.Subscribe(b, "orders", ack); err != nil {
		t.Fatal(err)
	}
	err := b.Connect(ctx)
	if err == nil {
		b.Shutdown(ctx)
	}
	return err
}
