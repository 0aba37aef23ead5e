package kinesistest

import (
	"context"
	"encoding/base64"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/kinesis"
	"github.com/aws/aws-sdk-go-v2/service/kinesis/types"

	"github.com/kinesisgen/kinesisgen/internal/rules"
)

// Service limits the server enforces.
const (
	maxRecordSize    = maxRecordKiB << 10 // data plus key of one record on any stream (MaxRecordSizeInKiB lowers it)
	maxPutRequest    = 10 << 20           // data plus keys of one PutRecords call
	maxPutEntries    = 500                // entries of one PutRecords call
	maxGetRecords    = 10000              // records of one GetRecords answer
	maxGetBytes      = 10 << 20           // data of one GetRecords answer
	defaultGetRecord = maxGetRecords
)

// validateEntry applies the request's shape rules to one record: the key
// rule is the runtime's (internal/rules): 1 to 256 UTF-16 units of valid
// UTF-8, when there is a key (an AUTO stream takes records without one).
func validateEntry(key *string, data []byte) error {
	if key != nil {
		if err := rules.PartitionKey(*key); err != nil {
			return validation("1 validation error detected: Value at 'partitionKey' failed to satisfy constraint: Member must have length between 1 and 256 (%v)", err)
		}
	}
	if len(data) > maxRecordSize {
		return validation("1 validation error detected: Value at 'data' failed to satisfy constraint: Member must have length less than or equal to %d", maxRecordSize)
	}
	return nil
}

// admit applies the stream's rules to a record of a valid shape: a key
// unless the stream is AUTO, and data plus key within the stream's
// MaxRecordSizeInKiB. It returns the key the record is stored with.
func admit(st *stream, key *string, data []byte) (string, error) {
	if key == nil && !st.auto.Load() {
		return "", validation("1 validation error detected: Value null at 'partitionKey' failed to satisfy constraint: Member must not be null")
	}
	k := aws.ToString(key)
	if n, limit := len(k)+len(data), st.recordLimit(); n > limit {
		// Over the stream's limit but within the shape's 10 MiB: a check of
		// the stream, not of the request's shape (as kinesis-mock answers).
		return "", invalidArg("Record size %d (data plus partition key) exceeds the stream's maximum record size of %d KiB.", n, limit>>10)
	}
	return k, nil
}

// route finds the hash key of a record. On an AUTO stream it ignores the
// key and any ExplicitHashKey and deals records to the open shards in
// turn, evenly, as the service's "service-managed algorithms" promise.
func route(st *stream, key string, explicit *string) (hashKey, error) {
	if st != nil && st.auto.Load() {
		open := *st.open.Load()
		return open[st.spread.Add(1)%uint64(len(open))].start, nil
	}
	if explicit == nil {
		return hashOf(key), nil
	}
	h, err := parseHashKey(*explicit)
	if err != nil {
		return hashKey{}, invalidArg("Invalid ExplicitHashKey. %v", err)
	}
	return h, nil
}

// append stores one record on the open shard that owns h and returns the
// shard and the record's sequence number counter. kd is a private buffer
// holding the key (keyLen bytes), then the data.
//
// With WithThrottling, a record over the shard's write limit is refused
// with a ProvisionedThroughputExceededException and not stored.
func (s *Server) append(st *stream, h hashKey, kd []byte, keyLen int, now time.Time) (*shard, uint64, error) {
	cutoff := now.Add(-s.cfg.retention)
	for {
		open := *st.open.Load()
		// The open shards cover the whole key space in contiguous ranges.
		i := sort.Search(len(open), func(i int) bool { return !open[i].end.less(h) })
		sh := open[i]
		sh.mu.Lock()
		if sh.closed {
			// Resharded between loading the table and locking: reroute.
			sh.mu.Unlock()
			continue
		}
		if s.cfg.throttle && !sh.admitPut(now, len(kd)) {
			sh.mu.Unlock()
			return sh, 0, throttled(sh, st.name, st.account)
		}
		arrival := now.UnixNano()
		if n := sh.log.len(); n > 0 {
			// Arrival times never go back within a shard.
			arrival = max(arrival, sh.log.at(n-1).arrival)
			sh.log.trim(cutoff)
		}
		c := st.counter.Add(1)
		sh.log.add(record{counter: c, arrival: arrival, kd: kd, keyLen: keyLen})
		sh.wakeLocked()
		sh.mu.Unlock()
		sh.putCount.Add(1)
		if st.qwaiting.Load() {
			st.wakeQueues()
		}
		return sh, c, nil
	}
}

// PutRecord stores one record on the shard its partition key (or
// ExplicitHashKey) routes to.
func (s *Server) PutRecord(ctx context.Context, in *kinesis.PutRecordInput, _ ...func(*kinesis.Options)) (*kinesis.PutRecordOutput, error) {
	const op = OpPutRecord
	name, err := s.beginStream(ctx, op, in.StreamName, in.StreamARN, "")
	if err != nil {
		return nil, err
	}
	if err := validateEntry(in.PartitionKey, in.Data); err != nil {
		return nil, opError(op.String(), err)
	}
	if in.ExplicitHashKey != nil {
		if _, err := route(nil, "", in.ExplicitHashKey); err != nil {
			return nil, opError(op.String(), err)
		}
	}
	st, err := s.lookup(name)
	if err != nil {
		return nil, opError(op.String(), err)
	}
	key, err := admit(st, in.PartitionKey, in.Data)
	if err != nil {
		return nil, opError(op.String(), err)
	}
	h, err := route(st, key, in.ExplicitHashKey)
	if err != nil {
		return nil, opError(op.String(), err)
	}
	if f := s.putFault.Load(); f != nil {
		if err := (*f)(name, key); err != nil {
			return nil, opError(op.String(), err)
		}
	}
	kd := append(append(make([]byte, 0, len(key)+len(in.Data)), key...), in.Data...)
	sh, c, err := s.append(st, h, kd, len(key), s.now())
	if err != nil {
		return nil, opError(op.String(), err)
	}
	return &kinesis.PutRecordOutput{ShardId: aws.String(sh.id), SequenceNumber: aws.String(formatSeq(c, sh.index)), EncryptionType: types.EncryptionTypeNone}, nil
}

// PutRecords stores up to 500 records and reports each entry's outcome in
// request order. An invalid request fails whole; an injected fault fails
// only its entry.
func (s *Server) PutRecords(ctx context.Context, in *kinesis.PutRecordsInput, _ ...func(*kinesis.Options)) (*kinesis.PutRecordsOutput, error) {
	const op = OpPutRecords
	name, err := s.beginStream(ctx, op, in.StreamName, in.StreamARN, "")
	if err != nil {
		return nil, err
	}
	if n := len(in.Records); n < 1 || n > maxPutEntries {
		return nil, opError(op.String(), validation("1 validation error detected: Value '%d' at 'records' failed to satisfy constraint: Member must have length between 1 and 500", n))
	}
	size := 0
	for _, e := range in.Records {
		if err := validateEntry(e.PartitionKey, e.Data); err != nil {
			return nil, opError(op.String(), err)
		}
		if e.ExplicitHashKey != nil {
			if _, err := route(nil, "", e.ExplicitHashKey); err != nil {
				return nil, opError(op.String(), err)
			}
		}
		size += len(aws.ToString(e.PartitionKey)) + len(e.Data)
	}
	if size > maxPutRequest {
		return nil, opError(op.String(), invalidArg("Records size exceeds 10 MiB limit"))
	}
	st, err := s.lookup(name)
	if err != nil {
		return nil, opError(op.String(), err)
	}
	hashes := make([]hashKey, len(in.Records))
	for i, e := range in.Records {
		key, err := admit(st, e.PartitionKey, e.Data)
		if err != nil {
			return nil, opError(op.String(), err)
		}
		if hashes[i], err = route(st, key, e.ExplicitHashKey); err != nil {
			return nil, opError(op.String(), err)
		}
	}
	fault := s.putFault.Load()
	now := s.now()
	// One backing array for every entry's key and data keeps allocations
	// per call, not per record.
	buf := make([]byte, 0, size)
	strs := make([]string, 2*len(in.Records)) // the results' ShardId and SequenceNumber
	seqs := seqStrings{buf: make([]byte, 0, seqLen*len(in.Records))}
	stored := make([]int, 0, len(in.Records)) // indexes of the stored entries
	out := &kinesis.PutRecordsOutput{Records: make([]types.PutRecordsResultEntry, len(in.Records)), EncryptionType: types.EncryptionTypeNone}
	failed := int32(0)
	for i, e := range in.Records {
		key := aws.ToString(e.PartitionKey)
		fail := func(err error) {
			failed++
			out.Records[i] = types.PutRecordsResultEntry{ErrorCode: aws.String(errorCode(err)), ErrorMessage: aws.String(err.Error())}
		}
		if fault != nil {
			if err := (*fault)(name, key); err != nil {
				fail(err)
				continue
			}
		}
		start := len(buf)
		buf = append(append(buf, key...), e.Data...)
		sh, c, err := s.append(st, hashes[i], buf[start:len(buf):len(buf)], len(key), now)
		if err != nil {
			buf = buf[:start]
			fail(err)
			continue
		}
		seqs.add(c, sh.index)
		strs[2*i] = sh.id
		stored = append(stored, i)
	}
	seq := seqs.done()
	for j, i := range stored {
		strs[2*i+1] = seq(j)
		out.Records[i] = types.PutRecordsResultEntry{ShardId: &strs[2*i], SequenceNumber: &strs[2*i+1]}
	}
	out.FailedRecordCount = aws.Int32(failed)
	return out, nil
}

func clone(b []byte) []byte {
	if b == nil {
		return []byte{}
	}
	return append([]byte(nil), b...)
}

// iterator is the decoded form of a shard iterator. Iterators are
// self-contained tokens, so the server keeps no per-reader state.
type iterator struct {
	stream string
	epoch  uint64
	shard  int
	pos    uint64 // read records whose counter is >= pos
	ts     int64  // AT_TIMESTAMP: also skip records that arrived before (UnixNano); 0 = none
	issued int64  // UnixNano
}

func (it iterator) encode() string {
	b := make([]byte, 0, 96)
	b = append(b, "I1"...)
	for _, v := range []uint64{it.epoch, uint64(it.shard), it.pos, uint64(it.ts), uint64(it.issued)} {
		b = append(b, '/')
		b = strconv.AppendUint(b, v, 10)
	}
	b = append(b, '/')
	b = append(b, it.stream...)
	return base64.RawURLEncoding.EncodeToString(b)
}

func decodeIterator(s string) (iterator, error) {
	raw, err := base64.RawURLEncoding.DecodeString(s)
	if err != nil {
		return iterator{}, errMalformed
	}
	f := strings.SplitN(string(raw), "/", 7)
	if len(f) != 7 || f[0] != "I1" {
		return iterator{}, errMalformed
	}
	var v [5]uint64
	for i := range v {
		if v[i], err = strconv.ParseUint(f[i+1], 10, 64); err != nil {
			return iterator{}, errMalformed
		}
	}
	return iterator{epoch: v[0], shard: int(v[1]), pos: v[2], ts: int64(v[3]), issued: int64(v[4]), stream: f[6]}, nil
}

// GetShardIterator returns an iterator of any of the five types. Iterators
// expire after the iterator TTL (5 minutes by default).
func (s *Server) GetShardIterator(ctx context.Context, in *kinesis.GetShardIteratorInput, _ ...func(*kinesis.Options)) (*kinesis.GetShardIteratorOutput, error) {
	const op = OpGetShardIterator
	shardArg := aws.ToString(in.ShardId)
	name, err := s.beginStream(ctx, op, in.StreamName, in.StreamARN, shardArg)
	if err != nil {
		return nil, err
	}
	st, err := s.lookup(name)
	if err != nil {
		return nil, opError(op.String(), err)
	}
	sh := st.shardByID(shardArg)
	if sh == nil {
		return nil, opError(op.String(), notFound("Shard %s in stream %s under account %s does not exist", shardArg, name, s.cfg.account))
	}
	it, err := s.position(st, sh, in.ShardIteratorType, in.StartingSequenceNumber, in.Timestamp, s.now())
	if err != nil {
		return nil, opError(op.String(), err)
	}
	return &kinesis.GetShardIteratorOutput{ShardIterator: aws.String(it.encode())}, nil
}

// position is where an iterator (or a subscription) of type typ starts on
// sh: GetShardIterator's rules and errors, shared with SubscribeToShard.
func (s *Server) position(st *stream, sh *shard, typ types.ShardIteratorType, seq *string, ts *time.Time, now time.Time) (iterator, error) {
	var err error
	it := iterator{stream: st.key, epoch: st.epoch, shard: sh.index, issued: now.UnixNano()}
	atSeq := func(after bool) error {
		if seq == nil {
			return invalidArg("StartingSequenceNumber is required for %s", typ)
		}
		c, idx, err := parseSeq(*seq)
		if err != nil {
			return invalidArg("Invalid StartingSequenceNumber. %v", err)
		}
		if idx != sh.index {
			return invalidArg("Invalid StartingSequenceNumber. It encodes %s, while it was used in a call to a shard with %s", shardID(idx), sh.id)
		}
		it.pos = c
		if after {
			it.pos++
		}
		return nil
	}
	if seq != nil && typ != types.ShardIteratorTypeAtSequenceNumber && typ != types.ShardIteratorTypeAfterSequenceNumber {
		return it, invalidArg("Must either specify (1) AT_SEQUENCE_NUMBER or AFTER_SEQUENCE_NUMBER and StartingSequenceNumber or (2) TRIM_HORIZON or LATEST and no StartingSequenceNumber. Request specified %s and also a StartingSequenceNumber.", typ)
	}
	switch typ {
	case types.ShardIteratorTypeTrimHorizon:
	case types.ShardIteratorTypeLatest:
		// Under the shard lock no record of this shard is between taking a
		// counter and appending, so every later record has a larger one.
		sh.mu.Lock()
		it.pos = st.counter.Load() + 1
		sh.mu.Unlock()
	case types.ShardIteratorTypeAtSequenceNumber:
		err = atSeq(false)
	case types.ShardIteratorTypeAfterSequenceNumber:
		err = atSeq(true)
	case types.ShardIteratorTypeAtTimestamp:
		switch {
		case ts == nil:
			err = invalidArg("Must specify timestampInMillis parameter for iterator of type AT_TIMESTAMP. Current request has no timestamp parameter.")
		case ts.UnixMilli() > now.UnixMilli(): // the service compares milliseconds
			err = invalidArg("The timestampInMillis parameter cannot be greater than the currentTimestampInMillis. timestampInMillis: %d, currentTimestampInMillis: %d", ts.UnixMilli(), now.UnixMilli())
		default:
			it.ts = ts.UnixNano()
			if it.ts <= 0 {
				it.ts = 1 // before every record; 0 means "no timestamp"
			}
		}
	default:
		err = validation("1 validation error detected: Value '%s' at 'shardIteratorType' failed to satisfy constraint: Member must satisfy enum value set: %v", typ, types.ShardIteratorType("").Values())
	}
	return it, err
}

// resolveIterator decodes an iterator and finds its stream and shard.
func (s *Server) resolveIterator(raw *string) (iterator, *stream, *shard, error) {
	if raw == nil {
		return iterator{}, nil, nil, validation("1 validation error detected: Value null at 'shardIterator' failed to satisfy constraint: Member must not be null")
	}
	it, err := decodeIterator(*raw)
	if err != nil {
		return iterator{}, nil, nil, invalidArg("Invalid ShardIterator.")
	}
	st, err := s.lookup(it.stream)
	if err != nil {
		return it, nil, nil, err
	}
	sh := st.shard(it.shard)
	if st.epoch != it.epoch || sh == nil {
		return it, nil, nil, notFound("Shard %s in stream %s under account %s does not exist", shardID(it.shard), it.stream, s.cfg.account)
	}
	return it, st, sh, nil
}

// gone is the ResourceNotFoundException a reader of st gets once st has been
// deleted or replaced by a later stream of the same name; nil while it lives.
func (s *Server) gone(st *stream) error {
	if cur, err := s.lookup(st.key); err != nil || cur != st {
		return notFound("Stream %s under account %s not found.", st.name, st.account)
	}
	return nil
}

// pending returns up to limit+1 records at or after the iterator's
// position (the extra one tells whether the answer reaches the tip), and
// the shard's closed flag and children, under the shard lock. If there is
// nothing and the shard is open, wait is a channel closed at its next
// change.
func (s *Server) pending(sh *shard, it iterator, now time.Time, limit int, wantWait bool) (recs [][]record, closed bool, children []*shard, wait <-chan struct{}) {
	sh.mu.Lock()
	defer sh.mu.Unlock()
	sh.log.trim(now.Add(-s.cfg.retention))
	from := sh.log.search(it.pos, it.ts)
	recs = sh.log.segments(from, min(limit+1, sh.log.len()-from))
	if len(recs) == 0 && !sh.closed && wantWait {
		wait = sh.waitChanLocked()
	}
	return recs, sh.closed, sh.children, wait
}

// GetRecords reads from a shard iterator. At the end of a closed shard it
// returns a nil NextShardIterator and the shard's ChildShards, in the same
// answer that returns the shard's last records.
func (s *Server) GetRecords(ctx context.Context, in *kinesis.GetRecordsInput, _ ...func(*kinesis.Options)) (*kinesis.GetRecordsOutput, error) {
	const op = OpGetRecords
	it, st, sh, resolveErr := s.resolveIterator(in.ShardIterator)
	var callShard string
	if it.stream != "" {
		callShard = shardID(it.shard)
	}
	if err := s.begin(ctx, op, it.stream, callShard); err != nil {
		return nil, err
	}
	if resolveErr != nil {
		return nil, opError(op.String(), resolveErr)
	}
	if in.StreamARN != nil && *in.StreamARN != "" {
		// The ARN must name the iterator's stream: one of another region
		// or account is not found, another stream's is refused.
		key, err := s.resolveARN(*in.StreamARN)
		if err != nil {
			return nil, opError(op.String(), err)
		}
		if key != it.stream {
			return nil, opError(op.String(), invalidArg("The shard iterator is not of stream %s.", *in.StreamARN))
		}
	}
	limit := defaultGetRecord
	if in.Limit != nil {
		limit = int(*in.Limit)
		if limit < 1 || limit > maxGetRecords {
			return nil, opError(op.String(), invalidArg("Limit %d is out of range: it must be between 1 and 10000", limit))
		}
	}
	now := s.now()
	if now.Sub(time.Unix(0, it.issued)) > s.cfg.iteratorTTL {
		return nil, opError(op.String(), expiredIterator("Iterator expired. The iterator was created at time %s while right now it is %s which is further in the future than the tolerated delay of %d milliseconds.",
			time.Unix(0, it.issued).UTC().Format(time.RFC3339Nano), now.Format(time.RFC3339Nano), s.cfg.iteratorTTL.Milliseconds()))
	}
	sh.getCalls.Add(1)
	if s.cfg.throttle && !sh.admitGet(now) {
		return nil, opError(op.String(), throttled(sh, it.stream, s.cfg.account))
	}

	segs, closed, children, wait := s.pending(sh, it, now, limit, s.cfg.longPoll > 0)
	if wait != nil {
		timer := time.NewTimer(s.cfg.longPoll)
		for wait != nil {
			select {
			case <-wait:
			case <-timer.C:
				wait = nil
				continue
			case <-ctx.Done():
				timer.Stop()
				return nil, ctx.Err()
			}
			if err := s.gone(st); err != nil {
				timer.Stop()
				return nil, opError(op.String(), err)
			}
			now = s.now()
			segs, closed, children, wait = s.pending(sh, it, now, limit, true)
		}
		timer.Stop()
	}

	// Take up to limit records and 10 MiB of data (always at least one).
	avail, n, size := 0, 0, 0
	var nextUnread *record // the first record this answer leaves behind
	for _, seg := range segs {
		avail += len(seg)
		for i := range seg {
			if nextUnread != nil {
				break
			}
			if n == limit || (n > 0 && size+len(seg[i].data()) > maxGetBytes) {
				nextUnread = &seg[i]
				break
			}
			size += len(seg[i].data())
			n++
		}
	}
	out := &kinesis.GetRecordsOutput{Records: make([]types.Record, n), MillisBehindLatest: aws.Int64(0)}
	var last *record
	if n == 0 {
		sh.emptyGets.Add(1)
	} else {
		// The answer owns its bytes, times and strings: one allocation each
		// per call, not per record.
		buf := make([]byte, 0, size)
		times := make([]time.Time, n)
		keys := make([]string, n)
		seqs := make([]string, n)
		var seqBuf seqStrings
		seqBuf.buf = make([]byte, 0, n*seqLen)
		for _, seg := range segs {
			for j := range seg {
				if seqBuf.len() == n {
					break
				}
				seqBuf.add(seg[j].counter, sh.index)
			}
		}
		seq := seqBuf.done()
		i := 0
		for _, seg := range segs {
			for j := range seg {
				if i == n {
					break
				}
				r := &seg[j]
				start := len(buf)
				buf = append(buf, r.data()...)
				times[i] = time.Unix(0, r.arrival).UTC()
				keys[i], seqs[i] = r.key(), seq(i)
				out.Records[i] = types.Record{
					Data:                        buf[start:len(buf):len(buf)],
					PartitionKey:                &keys[i],
					SequenceNumber:              &seqs[i],
					ApproximateArrivalTimestamp: &times[i],
					EncryptionType:              types.EncryptionTypeNone,
				}
				last = r
				i++
			}
		}
		if nextUnread != nil {
			out.MillisBehindLatest = aws.Int64(max(0, now.Sub(time.Unix(0, nextUnread.arrival)).Milliseconds()))
		}
	}
	if closed && n == avail {
		out.ChildShards = childShards(children)
		return out, nil
	}
	next := it
	next.issued = now.UnixNano()
	if last != nil {
		next.pos = last.counter + 1
		next.ts = 0
	}
	out.NextShardIterator = aws.String(next.encode())
	return out, nil
}

func childShards(children []*shard) []types.ChildShard {
	out := make([]types.ChildShard, 0, len(children))
	for _, c := range children {
		parents := []string{c.parent}
		if c.adjacent != "" {
			parents = append(parents, c.adjacent)
		}
		out = append(out, types.ChildShard{
			ShardId:      aws.String(c.id),
			ParentShards: parents,
			HashKeyRange: &types.HashKeyRange{StartingHashKey: aws.String(c.start.String()), EndingHashKey: aws.String(c.end.String())},
		})
	}
	return out
}

// WaitForRecords blocks until the shard behind shardIterator has a record at
// or after the iterator's position, or is closed (so GetRecords would answer
// its end), or ctx ends. It is the hook readers use instead of sleeping a
// poll interval: a reader that got an empty GetRecords from this server can
// check for
//
//	interface{ WaitForRecords(context.Context, string) error }
//
// on its client and wait for the publish that wakes it. It returns the
// GetRecords error the iterator would get (unknown or deleted stream) or
// ctx.Err().
func (s *Server) WaitForRecords(ctx context.Context, shardIterator string) error {
	it, st, sh, err := s.resolveIterator(&shardIterator)
	if err != nil {
		return opError(OpGetRecords.String(), err)
	}
	for {
		segs, closed, _, wait := s.pending(sh, it, s.now(), 0, true)
		if len(segs) > 0 || closed {
			return nil
		}
		select {
		case <-wait:
		case <-ctx.Done():
			return ctx.Err()
		}
		if err := s.gone(st); err != nil {
			return opError(OpGetRecords.String(), err)
		}
	}
}
