package rules

import (
	"fmt"
	"strings"
)

// StreamARN is a stream named by its ARN,
// arn:PARTITION:kinesis:REGION:ACCOUNT:stream/NAME: how another account's
// stream is read or written (through its resource policy).
type StreamARN struct {
	ARN       string // as given
	Partition string // aws, aws-cn, aws-us-gov, ...
	Region    string
	Account   string // 12 digits
	Name      string
}

// IsARN reports whether s names a stream by ARN rather than by name (it
// may still be malformed: ParseStreamARN says).
func IsARN(s string) bool { return strings.HasPrefix(s, "arn:") }

// ParseStreamARN reads a stream ARN, or reports why s is not one.
func ParseStreamARN(s string) (StreamARN, error) {
	parts := strings.SplitN(s, ":", 6)
	bad := func(why string) (StreamARN, error) {
		return StreamARN{}, fmt.Errorf("%q is not a stream ARN (arn:aws:kinesis:REGION:ACCOUNT:stream/NAME): %s", s, why)
	}
	if len(parts) != 6 || parts[0] != "arn" {
		return bad("want six fields separated by ':'")
	}
	a := StreamARN{ARN: s, Partition: parts[1], Region: parts[3], Account: parts[4]}
	switch {
	case !lowerDashed(a.Partition):
		return bad("the partition (aws) is missing or not lower-case letters and '-'")
	case parts[2] != "kinesis":
		return bad(fmt.Sprintf("the service is %q, not kinesis", parts[2]))
	case !lowerDashed(a.Region):
		return bad("the region (such as us-east-1) is missing or not lower-case letters, digits and '-'")
	case len(a.Account) != 12 || strings.Trim(a.Account, "0123456789") != "":
		return bad("the account is not 12 digits")
	case !strings.HasPrefix(parts[5], "stream/"):
		return bad("the resource is not stream/NAME")
	}
	a.Name = parts[5][len("stream/"):]
	if !ValidStreamName(a.Name) {
		return bad("the stream name is not 1 to 128 letters, digits, '_', '.' and '-'")
	}
	return a, nil
}

// ValidStreamName is the service's rule for a stream name: 1 to 128 of
// [a-zA-Z0-9_.-].
func ValidStreamName(s string) bool {
	if len(s) < 1 || len(s) > 128 {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '.' || c == '-') {
			return false
		}
	}
	return true
}

func lowerDashed(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-') {
			return false
		}
	}
	return true
}
