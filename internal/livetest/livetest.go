// Package livetest hands tests the endpoints of the local Kinesis and DynamoDB
// servers that scripts/with-servers.sh starts. Under `make test`
// (KINESISGEN_LIVE=required) a missing endpoint fails the test; elsewhere the
// live tests skip with a message saying how to run them.
package livetest

import (
	"os"
	"testing"
)

const (
	EnvKinesis  = "KINESIS_TEST_ENDPOINT"
	EnvDynamoDB = "DYNAMODB_TEST_ENDPOINT"
	EnvRequired = "KINESISGEN_LIVE"
)

// KinesisEndpoint returns the kinesalite endpoint URL.
func KinesisEndpoint(t testing.TB) string { return endpoint(t, EnvKinesis) }

// DynamoDBEndpoint returns the dynalite endpoint URL.
func DynamoDBEndpoint(t testing.TB) string { return endpoint(t, EnvDynamoDB) }

func endpoint(t testing.TB, env string) string {
	t.Helper()
	if v := os.Getenv(env); v != "" {
		return v
	}
	if os.Getenv(EnvRequired) == "required" {
		t.Fatalf("%s is not set but %s=required: the local servers did not start", env, EnvRequired)
	}
	t.Skipf("%s not set: run `make test` to start the local servers", env)
	return ""
}
