package rules

import (
	"strings"
	"testing"
)

func TestParseStreamARN(t *testing.T) {
	a, err := ParseStreamARN("arn:aws-cn:kinesis:cn-north-1:123456789012:stream/orders.v2_x-y")
	if err != nil || a.Partition != "aws-cn" || a.Region != "cn-north-1" || a.Account != "123456789012" || a.Name != "orders.v2_x-y" {
		t.Fatalf("ParseStreamARN = %+v, %v", a, err)
	}
	for in, why := range map[string]string{
		"arn:aws:kinesis:us-east-1:123456789012":                   "six fields",
		"arn:aws:kinesis:us-east-1:123456789012:orders":            "stream/NAME",
		"arn:aws:kinesis:us-east-1:12345678901x:stream/orders":     "12 digits",
		"arn:aws:sqs:us-east-1:123456789012:stream/orders":         "not kinesis",
		"arn:aws:kinesis:US-EAST-1:123456789012:stream/orders":     "region",
		"arn::kinesis:us-east-1:123456789012:stream/orders":        "partition",
		"arn:aws:kinesis:us-east-1:123456789012:stream/a b":        "stream name",
		"arn:aws:kinesis:us-east-1:123456789012:stream/":           "stream name",
		"arn:aws:kinesis:us-east-1:123456789012:stream/o/consumer": "stream name",
	} {
		if _, err := ParseStreamARN(in); err == nil || !strings.Contains(err.Error(), why) {
			t.Errorf("ParseStreamARN(%q) = %v; want an error saying %q", in, err, why)
		}
	}
	if !IsARN("arn:x") || IsARN("orders") {
		t.Error("IsARN")
	}
}
