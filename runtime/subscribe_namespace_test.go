package runtime_test

import (
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/kinesis"

	"github.com/kinesisgen/kinesisgen/internal/livetest"
	"github.com/kinesisgen/kinesisgen/runtime"
	"github.com/kinesisgen/kinesisgen/runtime/lease"
)

// liveEnv is an env on kinesalite with its leases in a fresh dynalite table
// (skipped without the servers, failed under make test).
func liveEnv(t *testing.T) *env {
	kinesisURL, dynamoURL := livetest.KinesisEndpoint(t), livetest.DynamoDBEndpoint(t)
	cfg := aws.Config{Region: "us-east-1", Credentials: credentials.NewStaticCredentialsProvider("x", "x", "")}
	e := newEnvWith(t, kinesis.NewFromConfig(cfg, func(o *kinesis.Options) { o.BaseEndpoint = aws.String(kinesisURL) }))
	ddb := dynamodb.NewFromConfig(cfg, func(o *dynamodb.Options) { o.BaseEndpoint = aws.String(dynamoURL) })
	e.store = lease.NewDynamoDB(ddb, "leases"+e.suffix, lease.CreateTableIfMissing(), lease.TableWaitTimeout(15*time.Second))
	return e
}

// Issue 9, scenario 15: lease keys are application/stream/shard, so an
// application named "team/<stream>" would have its leases listed by
// application "team" reading <stream>. Such a name is refused before any
// I/O, and applications whose names merely share a prefix keep apart: each
// reads every record under leases of its own.
func TestApplicationNamesCannotShareALeaseNamespace(t *testing.T) {
	testApplicationNamesCannotShareALeaseNamespace(newEnv(t))
}

func TestApplicationNamesCannotShareALeaseNamespaceOnDynalite(t *testing.T) {
	testApplicationNamesCannotShareALeaseNamespace(liveEnv(t))
}

func testApplicationNamesCannotShareALeaseNamespace(e *env) {
	t := e.t
	orders, audit := e.newStream("orders", 1), e.newStream("audit", 1)

	for _, app := range []string{"team/" + orders, "team orders", string(make([]byte, 129))} {
		bad := e.broker(runtime.WithApplication(app))
		h, _ := collect()
		if _, err := subscribe(e, bad, audit, h); !errors.Is(err, runtime.ErrInvalid) {
			t.Fatalf("Subscribe with application %q = %v, want ErrInvalid", app, err)
		}
		err := bad.Connect(e.ctx)
		_ = bad.Shutdown(e.ctx)
		if !errors.Is(err, runtime.ErrInvalid) {
			t.Fatalf("Connect with application %q = %v, want ErrInvalid", app, err)
		}
	}
	if ls, err := e.store.List(e.ctx, "team/"+orders); err == nil && len(ls) > 0 {
		t.Fatalf("a refused application left %d leases under team/%s", len(ls), orders)
	}

	apps := []string{"team", "team.orders", "team-" + orders}
	chans := make([]<-chan delivered, len(apps))
	for i, app := range apps {
		b := e.broker(runtime.WithApplication(app), runtime.WithOwnerID(app))
		h, ch := collect()
		chans[i] = ch
		mustSubscribe(e, b, orders, h, runtime.StartAt(runtime.Horizon()))
		e.connect(b)
	}
	pub := e.publisher(orders)
	const n = 5
	e.publishRange(pub, 0, n)
	for i, app := range apps {
		got := ids(receive(e, chans[i], n))
		slices.Sort(got)
		if !slices.Equal(got, []int{0, 1, 2, 3, 4}) {
			t.Fatalf("application %s handled %v, want each of 0..4 once", app, got)
		}
		ls, err := e.store.List(e.ctx, app+"/"+orders)
		if err != nil {
			t.Fatal(err)
		}
		if len(ls) != 1 || ls[0].Owner != app {
			t.Fatalf("application %s has leases %+v, want its one shard's, owned by itself", app, ls)
		}
	}
	// Nothing is handled twice: no application picked up another's lease.
	time.Sleep(300 * time.Millisecond)
	for i, app := range apps {
		if extra := len(chans[i]); extra > 0 {
			t.Fatalf("application %s handled %d records again", app, extra)
		}
	}
}
