package runtime

import (
	"context"
	"fmt"
	"sync"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/kinesis"
	"github.com/aws/aws-sdk-go-v2/service/kinesis/types"

	"github.com/kinesisgen/kinesisgen/runtime/kinesisapi"
)

// fakeKinesis answers PutRecords for the publish tests, storing what it
// accepted in write order and letting a test fail chosen entries or calls.
// Other methods are not implemented (the embedded nil API panics).
type fakeKinesis struct {
	kinesisapi.API

	mu      sync.Mutex
	calls   []int // records per PutRecords call, in call order
	written []fakeRecord
	seq     int

	// entryFault, when set, names an error code for an entry of a call (nil: accept).
	entryFault func(call int, e types.PutRecordsRequestEntry) *string
	// callFault, when set, fails a whole call.
	callFault func(call int) error
	// gate, when set, holds every call until it is closed (or ctx ends).
	gate chan struct{}
	// entered is signalled (without blocking) when a call starts.
	entered chan int
}

type fakeRecord struct {
	Stream, Key, Shard, Seq string
	Data                    []byte
}

func newFake() *fakeKinesis { return &fakeKinesis{entered: make(chan int, 1024)} }

func (f *fakeKinesis) PutRecords(ctx context.Context, in *kinesis.PutRecordsInput, _ ...func(*kinesis.Options)) (*kinesis.PutRecordsOutput, error) {
	f.mu.Lock()
	call := len(f.calls)
	f.calls = append(f.calls, len(in.Records))
	gate := f.gate
	f.mu.Unlock()
	select {
	case f.entered <- call:
	default:
	}
	if gate != nil {
		select {
		case <-gate:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.callFault != nil {
		if err := f.callFault(call); err != nil {
			return nil, err
		}
	}
	out := &kinesis.PutRecordsOutput{Records: make([]types.PutRecordsResultEntry, len(in.Records))}
	failed := int32(0)
	for i, e := range in.Records {
		if f.entryFault != nil {
			if code := f.entryFault(call, e); code != nil {
				out.Records[i] = types.PutRecordsResultEntry{ErrorCode: code, ErrorMessage: aws.String("injected")}
				failed++
				continue
			}
		}
		f.seq++
		shard := fmt.Sprintf("shardId-%012d", len(*e.PartitionKey)%2)
		seq := fmt.Sprintf("%056d", f.seq)
		f.written = append(f.written, fakeRecord{Stream: *in.StreamName, Key: *e.PartitionKey, Shard: shard, Seq: seq, Data: e.Data})
		out.Records[i] = types.PutRecordsResultEntry{ShardId: aws.String(shard), SequenceNumber: aws.String(seq)}
	}
	out.FailedRecordCount = aws.Int32(failed)
	return out, nil
}

func (f *fakeKinesis) records() []fakeRecord {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]fakeRecord(nil), f.written...)
}

func (f *fakeKinesis) callSizes() []int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]int(nil), f.calls...)
}

// DescribeStreamSummary describes any stream as ACTIVE, naming no
// MaxRecordSizeInKiB (a backend that predates it: the 1 MiB default).
func (f *fakeKinesis) DescribeStreamSummary(_ context.Context, in *kinesis.DescribeStreamSummaryInput, _ ...func(*kinesis.Options)) (*kinesis.DescribeStreamSummaryOutput, error) {
	return &kinesis.DescribeStreamSummaryOutput{StreamDescriptionSummary: &types.StreamDescriptionSummary{
		StreamName: in.StreamName, StreamStatus: types.StreamStatusActive,
	}}, nil
}
