package kinesistest

import (
	"context"
	"regexp"
	"strings"
)

// Accounts: a Server is one region of the service, holding the streams of
// any number of accounts. A request acts for its caller's account, the
// server's own (WithAccount, default 000000000000) unless the context says
// otherwise (AsAccount; over HTTP, an access key ID that is a 12-digit
// account ID). StreamName names a stream of the caller's account; a
// StreamARN names a stream of any account, as a resource policy lets
// another account's caller do on the service. There are no policies here:
// every account may use every stream by its ARN. An ARN of another region
// is not found, as on the service, whose endpoints are regional.

type accountKey struct{}

// AsAccount returns a context whose requests act for account (12 digits):
// CreateStream, and StreamName, are then that account's. It is how a test
// makes "another account's" stream, to reach by its ARN.
func AsAccount(ctx context.Context, account string) context.Context {
	return context.WithValue(ctx, accountKey{}, account)
}

// WithAccount sets the server's own account ID (default 000000000000): the
// caller's account when a request says none.
func WithAccount(id string) Option { return func(c *config) { c.account = id } }

// WithRegion sets the server's region (default us-east-1); ARNs of other
// regions are not found.
func WithRegion(r string) Option { return func(c *config) { c.region = r } }

var accountID = regexp.MustCompile(`^[0-9]{12}$`)

// caller is the account a request acts for.
func (s *Server) caller(ctx context.Context) string {
	if a, ok := ctx.Value(accountKey{}).(string); ok && accountID.MatchString(a) {
		return a
	}
	return s.cfg.account
}

// streamKey is the key of an account's stream in s.streams: its name in
// the server's own account, ACCOUNT/NAME in another ('/' is in no name).
func (s *Server) streamKey(account, name string) string {
	if account == s.cfg.account {
		return name
	}
	return account + "/" + name
}

// streamARNForm is the service's pattern for a StreamARN, with the
// account and name captured.
var streamARNForm = regexp.MustCompile(`^arn:aws[a-z-]*:kinesis:([a-z0-9-]+):([0-9]{12}):stream/([a-zA-Z0-9_.-]{1,128})$`)

// resolveARN finds the key of the stream a StreamARN names. A malformed
// ARN is a ValidationException (it breaks the member's pattern); one of
// another region is not found.
func (s *Server) resolveARN(arn string) (string, error) {
	m := streamARNForm.FindStringSubmatch(arn)
	if m == nil {
		return "", validation("1 validation error detected: Value '%s' at 'streamARN' failed to satisfy constraint: Member must satisfy regular expression pattern: arn:aws.*:kinesis:.*:\\d{12}:stream/\\S+", arn)
	}
	if m[1] != s.cfg.region {
		return "", notFound("Stream %s under account %s not found.", m[3], m[2])
	}
	return s.streamKey(m[2], m[3]), nil
}

// resolve finds the key of the stream a request names by StreamName (in
// the caller's account) or StreamARN (any account); given both, they must
// agree.
func (s *Server) resolve(ctx context.Context, name, arn *string) (string, error) {
	byName := ""
	if name != nil && *name != "" {
		if !validStreamName(*name) {
			return "", validation("1 validation error detected: Value '%s' at 'streamName' failed to satisfy constraint: Member must satisfy regular expression pattern: [a-zA-Z0-9_.-]+ and length 1-128", *name)
		}
		byName = s.streamKey(s.caller(ctx), *name)
	}
	if arn == nil || *arn == "" {
		if byName == "" {
			return "", invalidArg("Either StreamName or StreamARN must be provided.")
		}
		return byName, nil
	}
	key, err := s.resolveARN(*arn)
	if err != nil {
		return "", err
	}
	if byName != "" && byName != key {
		return "", invalidArg("StreamName %s and StreamARN %s name different streams.", *name, *arn)
	}
	return key, nil
}

// find resolves a helper's stream argument: a name in the server's own
// account, or an ARN.
func (s *Server) find(nameOrARN string) (*stream, error) {
	key := nameOrARN
	if strings.HasPrefix(nameOrARN, "arn:") {
		var err error
		if key, err = s.resolveARN(nameOrARN); err != nil {
			return nil, err
		}
	}
	return s.lookup(key)
}
