#!/usr/bin/env bash
# The AWS CLI against cmd/kinesislocal, for make test-cli: installs Debian's
# awscli with apt-get (as root or through sudo) when `aws` is missing,
# starts the command on a free loopback port and runs create-stream,
# list-streams, describe-stream, put-record, get-shard-iterator,
# get-records and update-shard-count against it, checking the
# record comes back. make test does not run it.
set -euo pipefail

if ! command -v aws >/dev/null; then
	if ! command -v apt-get >/dev/null; then
		echo "make test-cli needs the AWS CLI on the PATH (on Debian: apt-get install awscli)" >&2
		exit 1
	fi
	as_root=()
	if [ "$(id -u)" != 0 ]; then
		command -v sudo >/dev/null || { echo "make test-cli: awscli is missing, and installing it needs root or sudo" >&2; exit 1; }
		as_root=(sudo)
	fi
	export DEBIAN_FRONTEND=noninteractive
	install=("${as_root[@]}" apt-get install -y -q --no-install-recommends awscli)
	"${install[@]}" || { "${as_root[@]}" apt-get update -q && "${install[@]}"; }
fi

dir=$(mktemp -d)
pid=
cleanup() {
	[ -n "$pid" ] && kill -TERM "$pid" 2>/dev/null && wait "$pid" || true
	rm -rf "$dir"
}
trap cleanup EXIT
go build -o "$dir/kinesislocal" ./cmd/kinesislocal
"$dir/kinesislocal" -addr 127.0.0.1:0 >"$dir/out" 2>&1 &
pid=$!
for _ in $(seq 100); do
	url=$(sed -n 's/^kinesislocal: serving Kinesis on \(http:[^ ]*\)$/\1/p' "$dir/out")
	[ -n "$url" ] && break
	sleep 0.1
done
[ -n "$url" ] || { cat "$dir/out" >&2; echo "kinesislocal printed no endpoint" >&2; exit 1; }

export AWS_ACCESS_KEY_ID=kinesislocal AWS_SECRET_ACCESS_KEY=kinesislocal AWS_DEFAULT_REGION=us-east-1 AWS_PAGER=
kinesis=(aws --endpoint-url "$url" kinesis)
# AWS CLI v2 takes blobs as base64 unless told otherwise; v1 takes them raw.
binary=()
case "$(aws --version 2>&1)" in aws-cli/2*) binary=(--cli-binary-format raw-in-base64-out) ;; esac

set -x
"${kinesis[@]}" create-stream --stream-name cli-check --shard-count 2
"${kinesis[@]}" describe-stream-summary --stream-name cli-check --query StreamDescriptionSummary.StreamStatus --output text | grep -qx ACTIVE
"${kinesis[@]}" list-streams --query StreamNames --output text | grep -qx cli-check
[ "$("${kinesis[@]}" describe-stream --stream-name cli-check --query 'length(StreamDescription.Shards)' --output text)" = 2 ]
shard=$("${kinesis[@]}" put-record --stream-name cli-check --partition-key k1 --data hello-from-the-cli "${binary[@]}" --query ShardId --output text)
it=$("${kinesis[@]}" get-shard-iterator --stream-name cli-check --shard-id "$shard" --shard-iterator-type TRIM_HORIZON --query ShardIterator --output text)
data=$("${kinesis[@]}" get-records --shard-iterator "$it" --query 'Records[0].Data' --output text)
"${kinesis[@]}" update-shard-count --stream-name cli-check --target-shard-count 3 --scaling-type UNIFORM_SCALING
[ "$("${kinesis[@]}" describe-stream-summary --stream-name cli-check --query StreamDescriptionSummary.OpenShardCount --output text)" = 3 ]
set +x
got=$(printf %s "$data" | base64 -d)
if [ "$got" != hello-from-the-cli ]; then
	echo "get-records returned $got, want hello-from-the-cli" >&2
	exit 1
fi
echo "make test-cli: the AWS CLI ($(aws --version 2>&1 | cut -d' ' -f1)) created, listed and described a stream, put a record and read it back, and resharded it on kinesislocal"

# boto3, when the Python beside the CLI has it (Debian: python3-boto3):
# SubscribeToShard's event stream over HTTP/1.1.
if python3 -c 'import boto3' 2>/dev/null; then
	python3 - "$url" <<'PY'
import sys, boto3
k = boto3.client("kinesis", endpoint_url=sys.argv[1])
k.create_stream(StreamName="boto3-check", ShardCount=1)
k.put_record(StreamName="boto3-check", PartitionKey="p", Data=b"fan-out")
arn = k.describe_stream_summary(StreamName="boto3-check")["StreamDescriptionSummary"]["StreamARN"]
consumer = k.register_stream_consumer(StreamARN=arn, ConsumerName="boto3")["Consumer"]["ConsumerARN"]
sub = k.subscribe_to_shard(ConsumerARN=consumer, ShardId="shardId-000000000000", StartingPosition={"Type": "TRIM_HORIZON"})
for event in sub["EventStream"]:
    got = [r["Data"] for r in event["SubscribeToShardEvent"]["Records"]]
    assert got == [b"fan-out"], got
    break
print("make test-cli: boto3 %s subscribed to a shard and got the record" % boto3.__version__)
PY
else
	echo "make test-cli: boto3 not installed; its SubscribeToShard check skipped"
fi

# Over TLS: -tls with its certificate trusted through --ca-bundle.
kill -TERM "$pid" && wait "$pid" || true
"$dir/kinesislocal" -addr 127.0.0.1:0 -tls -cert "$dir/cert.pem" -stream tls-check:1 >"$dir/out" 2>&1 &
pid=$!
url=
for _ in $(seq 100); do
	url=$(sed -n 's/^kinesislocal: serving Kinesis on \(https:[^ ]*\)$/\1/p' "$dir/out")
	[ -n "$url" ] && break
	sleep 0.1
done
[ -n "$url" ] || { cat "$dir/out" >&2; echo "kinesislocal -tls printed no endpoint" >&2; exit 1; }
aws --endpoint-url "$url" --ca-bundle "$dir/cert.pem" kinesis describe-stream-summary --stream-name tls-check --query StreamDescriptionSummary.StreamStatus --output text | grep -qx ACTIVE
echo "make test-cli: and over HTTPS (-tls) with --ca-bundle"
