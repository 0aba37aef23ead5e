package runtime_test

import (
	"errors"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/kinesisgen/kinesisgen/internal/livetest"
	"github.com/kinesisgen/kinesisgen/runtime"
	"github.com/kinesisgen/kinesisgen/runtime/lease"
	"github.com/kinesisgen/kinesisgen/runtime/lease/leasetest"
)

// A KCL application's table taken over mid-migration from KCL 2.x to 3.x:
// Connect fails with the migration state (a KCLMigrationError) instead of
// reading shards under leases the KCL is still rewriting. The
// migration-state item is as KCL 3.x writes it (MigrationState.java:
// key "Migration3.0", cv, mb, mts), here in the lease table, where newer
// KCLs keep their coordinator state.
func TestKCLMigrationInProgressFailsConnect(t *testing.T) {
	dynamoURL := livetest.DynamoDBEndpoint(t)
	cfg := aws.Config{Region: "us-east-1", Credentials: credentials.NewStaticCredentialsProvider("x", "x", "")}
	ddb := dynamodb.NewFromConfig(cfg, func(o *dynamodb.Options) { o.BaseEndpoint = aws.String(dynamoURL) })
	e := newEnv(t)
	orders := e.newStream("orders", 1)
	table := "kcl" + e.suffix
	// The table as the KCL left it: created, then the migration state.
	if err := leasetest.CreateKCLTable(e.ctx, ddb, table, "leaseKey"); err != nil {
		t.Fatal(err)
	}
	s := func(v string) types.AttributeValue { return &types.AttributeValueMemberS{Value: v} }
	if _, err := ddb.PutItem(e.ctx, &dynamodb.PutItemInput{TableName: aws.String(table), Item: map[string]types.AttributeValue{
		"leaseKey": s("Migration3.0"), "cv": s("CLIENT_VERSION_UPGRADE_FROM_2X"), "mb": s("ip-10-0-0-7:5b1e"),
		"mts": &types.AttributeValueMemberN{Value: "1764825600000"},
	}}); err != nil {
		t.Fatal(err)
	}
	e.store = lease.NewDynamoDB(ddb, table, lease.WithKCLLayout(lease.KCLSingleStream(orders)))
	b := e.broker(runtime.WithApplication("orders-app"))
	h, _ := collect()
	mustSubscribe(e, b, orders, h)
	err := b.Connect(e.ctx)
	_ = b.Shutdown(e.ctx)
	var me *lease.KCLMigrationError
	if !errors.Is(err, lease.ErrKCLMigration) || !errors.As(err, &me) || me.ClientVersion != "CLIENT_VERSION_UPGRADE_FROM_2X" {
		t.Fatalf("Connect = %v, want a KCLMigrationError naming CLIENT_VERSION_UPGRADE_FROM_2X", err)
	}
}
