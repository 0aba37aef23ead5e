package runtime_test

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/kinesis"
	"github.com/aws/smithy-go"

	"github.com/kinesisgen/kinesisgen/internal/livetest"
	"github.com/kinesisgen/kinesisgen/runtime"
	"github.com/kinesisgen/kinesisgen/runtime/lease"
)

// rosterRefusing is a DynamoDB client whose role was granted the members
// table before the roster: its BatchGetItem and UpdateItem calls on that
// table are refused, as IAM refuses them.
type rosterRefusing struct {
	*dynamodb.Client
	members string
}

func (r rosterRefusing) refused(table string) error {
	if table != r.members {
		return nil
	}
	return &smithy.GenericAPIError{Code: "AccessDeniedException", Message: "User is not authorized to perform this action on resource " + table, Fault: smithy.FaultClient}
}

func (r rosterRefusing) BatchGetItem(ctx context.Context, in *dynamodb.BatchGetItemInput, o ...func(*dynamodb.Options)) (*dynamodb.BatchGetItemOutput, error) {
	for table := range in.RequestItems {
		if err := r.refused(table); err != nil {
			return nil, err
		}
	}
	return r.Client.BatchGetItem(ctx, in, o...)
}

func (r rosterRefusing) UpdateItem(ctx context.Context, in *dynamodb.UpdateItemInput, o ...func(*dynamodb.Options)) (*dynamodb.UpdateItemOutput, error) {
	if err := r.refused(aws.ToString(in.TableName)); err != nil {
		return nil, err
	}
	return r.Client.UpdateItem(ctx, in, o...)
}

// Issue 34 item 3: the members roster is the default. On dynalite, with
// the lease store's default layout (the members table), two brokers with
// the default options read the members with it: each join bumps the
// roster's version, and every record is delivered once. Brokers whose
// role was refused the roster's calls (a policy from before it) run
// without it, say so with the permission to grant, and deliver every
// record all the same.
func TestMembersRosterIsTheDefaultOnDynalite(t *testing.T) {
	kinesisURL, dynamoURL := livetest.KinesisEndpoint(t), livetest.DynamoDBEndpoint(t)
	for _, refused := range []bool{false, true} {
		name := map[bool]string{false: "granted", true: "refused"}[refused]
		t.Run(name, func(t *testing.T) {
			cfg := aws.Config{Region: "us-east-1", Credentials: credentials.NewStaticCredentialsProvider("x", "x", "")}
			e := newEnvWithin(t, kinesis.NewFromConfig(cfg, func(o *kinesis.Options) { o.BaseEndpoint = aws.String(kinesisURL) }), 40*time.Second)
			ddb := dynamodb.NewFromConfig(cfg, func(o *dynamodb.Options) { o.BaseEndpoint = aws.String(dynamoURL) })
			table := "leases" + e.suffix
			var api lease.DynamoDBAPI = ddb
			if refused {
				api = rosterRefusing{Client: ddb, members: table + "-members"}
			}
			e.store = lease.NewDynamoDB(api, table, lease.CreateTableIfMissing(), lease.TableWaitTimeout(15*time.Second))
			observe := lease.NewDynamoDB(ddb, table)
			stream := e.newStream("roster", 2)
			var chans []<-chan delivered
			for _, owner := range []string{"a", "b"} {
				b := e.broker(runtime.WithOwnerID(owner))
				h, ch := collect()
				chans = append(chans, ch)
				mustSubscribe(e, b, stream, h, runtime.StartAt(runtime.Horizon()))
				e.connect(b)
			}
			e.publishRange(e.publisher(stream), 0, 20)
			var got []int
			for deadline := time.Now().Add(30 * time.Second); len(got) < 20 && time.Now().Before(deadline); {
				for _, ch := range chans {
					select {
					case d := <-ch:
						got = append(got, d.order.ID)
					default:
					}
				}
				time.Sleep(10 * time.Millisecond)
			}
			slices.Sort(got)
			want := make([]int, 20)
			for i := range want {
				want[i] = i
			}
			if !slices.Equal(got, want) {
				t.Fatalf("delivered %v, want 0..19 once each", got)
			}
			r, ok := lease.RosterOf(observe)
			if !ok {
				t.Fatal("the default layout keeps no roster")
			}
			v, err := r.RosterVersion(e.ctx, runtime.DefaultApplication+"/"+stream)
			if err != nil {
				t.Fatal(err)
			}
			warned := strings.Contains(e.logs.String(), "members roster off") && strings.Contains(e.logs.String(), "dynamodb:BatchGetItem")
			switch {
			case !refused && (v == 0 || warned):
				t.Errorf("with the default options the roster's version is %d and the log says the roster is off: %v; want it bumped by the joins, and on", v, warned)
			case refused && (v != 0 || !warned):
				t.Errorf("refused its calls, the roster's version is %d, and the warning with the permission to grant logged: %v; want 0 (no roster), and logged\n%s", v, warned, e.logs.String())
			}
		})
	}
}
