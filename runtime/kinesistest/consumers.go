package kinesistest

import (
	"context"
	"encoding/base64"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/kinesis"
	"github.com/aws/aws-sdk-go-v2/service/kinesis/types"
)

// consumer is a registered stream consumer (enhanced fan-out). It belongs to
// one stream: deleting the stream deletes its consumers.
type consumer struct {
	st       *stream
	name     string
	arn      string
	created  time.Time
	activeAt time.Time // CREATING until then

	goneAt atomic.Int64 // DELETING until then (UnixNano); 0 while registered

	// Guarded by st.cmu.
	deleted bool
	subs    map[int]*subscription // the active subscription of each shard index
	lastSub map[int]time.Time     // the last SubscribeToShard admitted per shard index
}

func (c *consumer) status(now time.Time) types.ConsumerStatus {
	if c.goneAt.Load() != 0 {
		return types.ConsumerStatusDeleting
	}
	if now.Before(c.activeAt) {
		return types.ConsumerStatusCreating
	}
	return types.ConsumerStatusActive
}

func (c *consumer) describe(now time.Time, cfg config) *types.ConsumerDescription {
	created := c.created
	return &types.ConsumerDescription{
		ConsumerName:              aws.String(c.name),
		ConsumerARN:               aws.String(c.arn),
		ConsumerStatus:            c.status(now),
		ConsumerCreationTimestamp: &created,
		StreamARN:                 aws.String(c.st.arn(cfg)),
	}
}

// consumerARN is the service's form:
// arn:aws:kinesis:REGION:ACCOUNT:stream/STREAM/consumer/CONSUMER:EPOCH, with
// EPOCH the registration time in Unix seconds.
func consumerARN(streamARN, name string, epoch int64) string {
	return fmt.Sprintf("%s/consumer/%s:%d", streamARN, name, epoch)
}

// parseConsumerARN returns the ARN of the stream and the consumer name a
// consumer ARN names.
func parseConsumerARN(arn string) (streamARN, name string, ok bool) {
	streamARN, rest, found := strings.Cut(arn, "/consumer/")
	if !found {
		return "", "", false
	}
	j := strings.LastIndexByte(rest, ':')
	if j < 0 {
		return "", "", false
	}
	if _, err := strconv.ParseInt(rest[j+1:], 10, 64); err != nil {
		return "", "", false
	}
	name = rest[:j]
	if !streamARNForm.MatchString(streamARN) || !validStreamName(name) {
		return "", "", false
	}
	return streamARN, name, true
}

// purgeLocked forgets the consumers whose DELETING time is over; st.cmu is
// held.
func (st *stream) purgeLocked(now time.Time) {
	for name, c := range st.consumers {
		if g := c.goneAt.Load(); g != 0 && now.UnixNano() >= g {
			delete(st.consumers, name)
		}
	}
}

// beginConsumer is begin for the consumer operations: the call fault sees
// the stream and consumer the request names.
func (s *Server) beginConsumer(ctx context.Context, op Op, stream, consumerName, shard string) error {
	s.calls[op].Add(1)
	if err := ctx.Err(); err != nil {
		return err
	}
	if f := s.callFault.Load(); f != nil {
		if err := (*f)(Call{Op: op, Stream: stream, Shard: shard, Consumer: consumerName}); err != nil {
			return opError(op.String(), err)
		}
	}
	return nil
}

// streamByARN resolves a StreamARN, which the consumer operations require.
func (s *Server) streamByARN(arn *string) (*stream, error) {
	if arn == nil || *arn == "" {
		return nil, validation("1 validation error detected: Value null at 'streamARN' failed to satisfy constraint: Member must not be null")
	}
	key, err := s.resolveARN(*arn)
	if err != nil {
		return nil, err
	}
	return s.lookup(key)
}

// findConsumer resolves a consumer named by ConsumerARN, or by StreamARN
// and ConsumerName, as DescribeStreamConsumer and DeregisterStreamConsumer
// accept. An ARN of a consumer that was deregistered, or of a stream deleted
// since, is not found even when a later one has the same name.
func (s *Server) findConsumer(consumerARN, streamARN, name *string) (*consumer, error) {
	var st *stream
	var cname string
	switch {
	case consumerARN != nil && *consumerARN != "":
		sarn, n, ok := parseConsumerARN(*consumerARN)
		if !ok {
			return nil, invalidArg("ConsumerARN %q is not a stream consumer ARN", *consumerARN)
		}
		var err error
		if st, err = s.streamByARN(&sarn); err != nil {
			return nil, notFound("Consumer %s under account %s not found.", *consumerARN, s.cfg.account)
		}
		cname = n
	case streamARN != nil && *streamARN != "" && name != nil && *name != "":
		var err error
		if st, err = s.streamByARN(streamARN); err != nil {
			return nil, err
		}
		cname = *name
	default:
		return nil, invalidArg("Either ConsumerARN or both StreamARN and ConsumerName must be provided.")
	}
	st.cmu.Lock()
	st.purgeLocked(s.now())
	c := st.consumers[cname]
	st.cmu.Unlock()
	if c == nil || (consumerARN != nil && *consumerARN != "" && c.arn != *consumerARN) {
		what := cname
		if consumerARN != nil && *consumerARN != "" {
			what = *consumerARN
		}
		return nil, notFound("Consumer %s under account %s not found.", what, s.cfg.account)
	}
	return c, nil
}

// callNames is what a consumer request names, for the call fault: the
// stream's key and the consumer's name.
func (s *Server) callNames(consumerARN, streamARN, name *string) (stream, consumer string) {
	if consumerARN != nil {
		if sarn, c, ok := parseConsumerARN(*consumerARN); ok {
			stream, _ = s.resolveARN(sarn)
			return stream, c
		}
	}
	if streamARN != nil {
		stream, _ = s.resolveARN(*streamARN)
	}
	return stream, aws.ToString(name)
}

// RegisterStreamConsumer registers a consumer of a stream for enhanced
// fan-out. It answers CREATING, as the service does; the consumer is ACTIVE
// once the activation time (WithConsumerActivation, default 0) has passed.
// A name already registered on the stream is a ResourceInUseException; more
// than the consumer limit (WithConsumerLimit, default 20) a
// LimitExceededException.
func (s *Server) RegisterStreamConsumer(ctx context.Context, in *kinesis.RegisterStreamConsumerInput, _ ...func(*kinesis.Options)) (*kinesis.RegisterStreamConsumerOutput, error) {
	const op = OpRegisterStreamConsumer
	sname, cname := s.callNames(nil, in.StreamARN, in.ConsumerName)
	if err := s.beginConsumer(ctx, op, sname, cname, ""); err != nil {
		return nil, err
	}
	if in.ConsumerName == nil {
		return nil, opError(op.String(), validation("1 validation error detected: Value null at 'consumerName' failed to satisfy constraint: Member must not be null"))
	}
	if !validStreamName(*in.ConsumerName) {
		return nil, opError(op.String(), validation("1 validation error detected: Value '%s' at 'consumerName' failed to satisfy constraint: Member must satisfy regular expression pattern: [a-zA-Z0-9_.-]+ and length 1-128", *in.ConsumerName))
	}
	st, err := s.streamByARN(in.StreamARN)
	if err != nil {
		return nil, opError(op.String(), err)
	}
	now := s.now()
	st.cmu.Lock()
	defer st.cmu.Unlock()
	st.purgeLocked(now)
	if s.gone(st) != nil {
		return nil, opError(op.String(), notFound("Stream %s under account %s not found.", st.name, st.account))
	}
	if st.consumers[cname] != nil {
		return nil, opError(op.String(), inUse("Consumer %s under stream %s under account %s already exists.", cname, st.name, st.account))
	}
	if len(st.consumers)+st.queueCount >= s.cfg.consumerLimit {
		return nil, opError(op.String(), limitExceeded("Stream %s under account %s has reached its limit of %d consumers.", st.name, st.account, s.cfg.consumerLimit))
	}
	// The ARN's epoch is the registration second; a name registered again
	// within the same second still gets a new ARN, so an old one never
	// resolves to the new consumer.
	epoch := now.Unix()
	if last := st.lastEpoch[cname]; epoch <= last {
		epoch = last + 1
	}
	st.lastEpoch[cname] = epoch
	c := &consumer{
		st: st, name: cname, arn: consumerARN(st.arn(s.cfg), cname, epoch),
		created: now, activeAt: now.Add(s.cfg.consumerActivation),
		subs: map[int]*subscription{}, lastSub: map[int]time.Time{},
	}
	st.consumers[cname] = c
	d := c.describe(now, s.cfg)
	return &kinesis.RegisterStreamConsumerOutput{Consumer: &types.Consumer{
		ConsumerName:              d.ConsumerName,
		ConsumerARN:               d.ConsumerARN,
		ConsumerStatus:            types.ConsumerStatusCreating,
		ConsumerCreationTimestamp: d.ConsumerCreationTimestamp,
	}}, nil
}

// DescribeStreamConsumer describes a consumer named by ConsumerARN, or by
// StreamARN and ConsumerName.
func (s *Server) DescribeStreamConsumer(ctx context.Context, in *kinesis.DescribeStreamConsumerInput, _ ...func(*kinesis.Options)) (*kinesis.DescribeStreamConsumerOutput, error) {
	const op = OpDescribeStreamConsumer
	sname, cname := s.callNames(in.ConsumerARN, in.StreamARN, in.ConsumerName)
	if err := s.beginConsumer(ctx, op, sname, cname, ""); err != nil {
		return nil, err
	}
	c, err := s.findConsumer(in.ConsumerARN, in.StreamARN, in.ConsumerName)
	if err != nil {
		return nil, opError(op.String(), err)
	}
	return &kinesis.DescribeStreamConsumerOutput{ConsumerDescription: c.describe(s.now(), s.cfg)}, nil
}

// DeregisterStreamConsumer removes a consumer and ends its subscriptions
// with a ResourceNotFoundException. The consumer is gone at once, unless
// WithConsumerDeletion keeps it DELETING for a while, as the service does.
func (s *Server) DeregisterStreamConsumer(ctx context.Context, in *kinesis.DeregisterStreamConsumerInput, _ ...func(*kinesis.Options)) (*kinesis.DeregisterStreamConsumerOutput, error) {
	const op = OpDeregisterStreamConsumer
	sname, cname := s.callNames(in.ConsumerARN, in.StreamARN, in.ConsumerName)
	if err := s.beginConsumer(ctx, op, sname, cname, ""); err != nil {
		return nil, err
	}
	c, err := s.findConsumer(in.ConsumerARN, in.StreamARN, in.ConsumerName)
	if err != nil {
		return nil, opError(op.String(), err)
	}
	st := c.st
	st.cmu.Lock()
	switch {
	case s.cfg.consumerDeletion > 0:
		if c.goneAt.Load() == 0 {
			c.goneAt.Store(s.now().Add(s.cfg.consumerDeletion).UnixNano())
		}
	case st.consumers[c.name] == c:
		delete(st.consumers, c.name)
	}
	c.deleted = true
	subs := make([]*subscription, 0, len(c.subs))
	for _, sub := range c.subs {
		subs = append(subs, sub)
	}
	st.cmu.Unlock()
	for _, sub := range subs {
		sub.end(endException, notFound("Consumer %s under account %s not found.", c.arn, s.cfg.account))
	}
	return &kinesis.DeregisterStreamConsumerOutput{}, nil
}

// ListStreamConsumers lists a stream's consumers by name, MaxResults (1 to
// 10000, default 100) a page.
func (s *Server) ListStreamConsumers(ctx context.Context, in *kinesis.ListStreamConsumersInput, _ ...func(*kinesis.Options)) (*kinesis.ListStreamConsumersOutput, error) {
	const op = OpListStreamConsumers
	sname, _ := s.callNames(nil, in.StreamARN, nil)
	if err := s.beginConsumer(ctx, op, sname, "", ""); err != nil {
		return nil, err
	}
	st, err := s.streamByARN(in.StreamARN)
	if err != nil {
		return nil, opError(op.String(), err)
	}
	max := 100
	if in.MaxResults != nil {
		max = int(*in.MaxResults)
		if max < 1 || max > 10000 {
			return nil, opError(op.String(), validation("1 validation error detected: Value '%d' at 'maxResults' failed to satisfy constraint: Member must have value between 1 and 10000", max))
		}
	}
	now := s.now()
	after := ""
	if in.NextToken != nil {
		tok, err := base64.RawURLEncoding.DecodeString(*in.NextToken)
		f := strings.Split(string(tok), "\x00")
		if err != nil || len(f) != 4 || f[0] != "C1" || f[1] != st.key {
			return nil, opError(op.String(), invalidArg("Invalid NextToken."))
		}
		issued, err := strconv.ParseInt(f[3], 10, 64)
		if err != nil {
			return nil, opError(op.String(), invalidArg("Invalid NextToken."))
		}
		if now.Sub(time.Unix(0, issued)) > listTokenTTL {
			return nil, opError(op.String(), expiredToken("The timestamp in the NextToken has expired."))
		}
		after = f[2]
	}
	st.cmu.Lock()
	st.purgeLocked(now)
	names := make([]string, 0, len(st.consumers))
	for n := range st.consumers {
		if n > after {
			names = append(names, n)
		}
	}
	sort.Strings(names)
	out := &kinesis.ListStreamConsumersOutput{Consumers: []types.Consumer{}}
	for i, n := range names {
		if i == max {
			tok := strings.Join([]string{"C1", st.key, names[i-1], strconv.FormatInt(now.UnixNano(), 10)}, "\x00")
			out.NextToken = aws.String(base64.RawURLEncoding.EncodeToString([]byte(tok)))
			break
		}
		d := st.consumers[n].describe(now, s.cfg)
		out.Consumers = append(out.Consumers, types.Consumer{
			ConsumerName: d.ConsumerName, ConsumerARN: d.ConsumerARN,
			ConsumerStatus: d.ConsumerStatus, ConsumerCreationTimestamp: d.ConsumerCreationTimestamp,
		})
	}
	st.cmu.Unlock()
	return out, nil
}
