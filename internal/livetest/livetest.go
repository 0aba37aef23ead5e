// Package livetest hands tests the endpoints of the local Kinesis
// (kinesalite, kinesis-mock) and DynamoDB (dynalite) servers that
// scripts/with-servers.sh starts. Under `make test`
// (KINESISGEN_LIVE=required) a missing endpoint fails the test; elsewhere the
// live tests skip with a message saying how to run them.
package livetest

import (
	"os"
	"testing"
)

const (
	EnvKinesis     = "KINESIS_TEST_ENDPOINT"
	EnvKinesisMock = "KINESIS_MOCK_TEST_ENDPOINT"
	EnvDynamoDB    = "DYNAMODB_TEST_ENDPOINT"
	EnvRequired    = "KINESISGEN_LIVE"
)

// KinesisEndpoint returns the kinesalite endpoint URL.
func KinesisEndpoint(t testing.TB) string { return endpoint(t, EnvKinesis) }

// KinesisMockEndpoint returns the kinesis-mock endpoint URL.
func KinesisMockEndpoint(t testing.TB) string { return endpoint(t, EnvKinesisMock) }

// KinesisServer is one of the local Kinesis servers.
type KinesisServer struct {
	Name     string // "kinesalite" or "kinesis-mock", for subtest names and messages
	Endpoint func(testing.TB) string
	// Slow is how many times kinesalite's time bounds a test gives this
	// server: kinesis-mock answers a call in tens to hundreds of
	// milliseconds on a loaded machine, and a second or more at worst.
	Slow int
}

// KinesisServers are the local Kinesis servers every live Kinesis test runs
// against: kinesalite, and kinesis-mock, which sends ChildShards at a
// shard's end and paginates ListShards as the service does.
var KinesisServers = []KinesisServer{Kinesalite, KinesisMock}

// The local Kinesis servers, each by name.
var (
	Kinesalite  = KinesisServer{Name: "kinesalite", Endpoint: KinesisEndpoint, Slow: 1}
	KinesisMock = KinesisServer{Name: "kinesis-mock", Endpoint: KinesisMockEndpoint, Slow: 3}
)

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
