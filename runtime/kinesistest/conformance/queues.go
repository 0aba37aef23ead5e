package conformance

import (
	"context"
	"fmt"
	"regexp"
	"sort"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/kinesis"
	"github.com/aws/aws-sdk-go-v2/service/kinesis/types"
)

// The queue cases (SDK v1.57.0: CreateQueue and the rest).
//
// Where the SDK's documentation is silent the suite expects what the
// service most plausibly does, SQS's behaviour where the queues resemble
// it; each choice is one constant or one check here, to change when the
// service is seen to differ:
//
//   - A queue on a provisioned stream is InvalidArgumentException
//     (errQueueOnProvisioned): a request the resource's state forbids.
//   - A name already used by a queue of the account is
//     ResourceInUseException; DeleteStream of a stream with queues too
//     (the SDK says they must be deleted first).
//   - Limit over 10 and WaitTimeSeconds over 20 (maxWait, SQS's) are
//     ValidationException.
//   - RecordId is the same in every queue of the stream (documented).
//   - A receipt handle of an earlier delivery (the record was received
//     again since) fails its entry with InvalidArgumentException
//     (errStaleHandle); acknowledging a record acknowledged already, with
//     its latest handle, succeeds, so that a retried batch is harmless.
//   - A record becomes a dead letter when the visibility timeout of its
//     MaxReceiveCount-th receive ends (or is set to 0); as a dead letter it
//     keeps that ReceiveCount. A dead letter's handle is refused by the
//     live operations (InvalidArgumentException) and the other way round.
//   - A restored record is received again with ReceiveCount 1.
//   - A receive long-polls: it answers as soon as a record arrives.

const (
	errQueueOnProvisioned = "InvalidArgumentException"
	errStaleHandle        = "InvalidArgumentException"
	maxWait               = 20
)

var queueARNForm = regexp.MustCompile(`^arn:aws[a-z-]*:kinesis:[a-z0-9-]+:[0-9]{12}:queue/.+$`)

func contextFor(d time.Duration) (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.Background(), d)
}

// noQueues checks the NoQueues deviation: CreateQueue must fail. It
// reports whether the case should stop there.
func (e *env) noQueues() bool {
	e.t.Helper()
	if !e.dev.NoQueues {
		return false
	}
	name := e.stream(1)
	_, err := e.api.CreateQueue(e.ctx, &kinesis.CreateQueueInput{QueueName: aws.String(e.uniqueName("q")), StreamConfigurationList: []types.QueueStreamConfiguration{{StreamARN: aws.String(e.streamARN(name))}}})
	if err == nil {
		e.t.Fatal("declared NoQueues, but CreateQueue created a queue")
	}
	return true
}

func (e *env) createQueue(stream string, attrs *types.QueueAttributes, start types.QueueStartingPositionType) (*kinesis.CreateQueueOutput, error) {
	return e.api.CreateQueue(e.ctx, &kinesis.CreateQueueInput{
		QueueName:       aws.String(e.uniqueName("q")),
		QueueAttributes: attrs,
		StreamConfigurationList: []types.QueueStreamConfiguration{{
			StreamARN:        aws.String(e.streamARN(stream)),
			StartingPosition: &types.QueueStartingPosition{Type: start},
		}},
	})
}

// queue creates a queue on stream from TRIM_HORIZON, waits until it is
// ACTIVE and deletes it when the test ends; it returns its ARN.
func (e *env) queue(stream string, attrs *types.QueueAttributes) string {
	e.t.Helper()
	out, err := e.createQueue(stream, attrs, types.QueueStartingPositionTypeTrimHorizon)
	if err != nil {
		e.t.Fatalf("CreateQueue: %v", err)
	}
	arn := aws.ToString(out.QueueDescription.QueueARN)
	e.t.Cleanup(func() {
		ctx, cancel := contextFor(5 * time.Second)
		defer cancel()
		_, _ = e.api.DeleteQueue(ctx, &kinesis.DeleteQueueInput{QueueARN: &arn})
	})
	for {
		d, err := e.api.DescribeQueue(e.ctx, &kinesis.DescribeQueueInput{QueueARN: &arn})
		if err != nil {
			e.t.Fatalf("DescribeQueue: %v", err)
		}
		if d.QueueDescription.QueueStatus == types.QueueStatusActive {
			return arn
		}
		select {
		case <-e.ctx.Done():
			e.t.Fatalf("queue not ACTIVE before the deadline (%s)", d.QueueDescription.QueueStatus)
		case <-time.After(5 * time.Millisecond):
		}
	}
}

func dlq(max int32) *types.QueueAttributes {
	return &types.QueueAttributes{DeadLetterConfiguration: &types.DeadLetterConfiguration{TargetType: types.TargetTypeBuiltIn, MaxReceiveCount: aws.Int32(max)}}
}

// receive makes one ReceiveQueueRecords call (the dead letters' with
// dead) waiting up to wait seconds.
func (e *env) receive(arn string, dead bool, wait, vis *int32) []types.QueueRecord {
	e.t.Helper()
	if dead {
		out, err := e.api.ReceiveDeadLetterQueueRecords(e.ctx, &kinesis.ReceiveDeadLetterQueueRecordsInput{QueueARN: &arn, WaitTimeSeconds: wait, VisibilityTimeoutSeconds: vis})
		if err != nil {
			e.t.Fatalf("ReceiveDeadLetterQueueRecords: %v", err)
		}
		return out.QueueRecords
	}
	out, err := e.api.ReceiveQueueRecords(e.ctx, &kinesis.ReceiveQueueRecordsInput{QueueARN: &arn, WaitTimeSeconds: wait, VisibilityTimeoutSeconds: vis})
	if err != nil {
		e.t.Fatalf("ReceiveQueueRecords: %v", err)
	}
	return out.QueueRecords
}

// receiveN receives until n records came (each call waiting a second).
func (e *env) receiveN(arn string, dead bool, n int) []types.QueueRecord {
	e.t.Helper()
	var got []types.QueueRecord
	for len(got) < n {
		if e.ctx.Err() != nil {
			e.t.Fatalf("received %d of %d records before the deadline", len(got), n)
		}
		got = append(got, e.receive(arn, dead, aws.Int32(1), nil)...)
	}
	if len(got) > n {
		e.t.Fatalf("received %d records, want %d", len(got), n)
	}
	return got
}

// ack acknowledges handles (of dead letters with dead) and returns the
// failed entries' codes by handle.
func (e *env) ack(arn string, dead bool, handles ...*string) map[string]string {
	e.t.Helper()
	failed := map[string]string{}
	if dead {
		in := &kinesis.AcknowledgeDeadLetterQueueRecordsInput{QueueARN: &arn}
		for _, h := range handles {
			in.Entries = append(in.Entries, types.AcknowledgeDeadLetterQueueRecordsRequestEntry{ReceiptHandle: h})
		}
		out, err := e.api.AcknowledgeDeadLetterQueueRecords(e.ctx, in)
		if err != nil {
			e.t.Fatalf("AcknowledgeDeadLetterQueueRecords: %v", err)
		}
		for _, f := range out.Failed {
			failed[aws.ToString(f.ReceiptHandle)] = aws.ToString(f.ErrorCode)
		}
		if len(out.Failed)+len(out.Successful) != len(handles) {
			e.t.Fatalf("AcknowledgeDeadLetterQueueRecords of %d: %d failed, %d successful", len(handles), len(out.Failed), len(out.Successful))
		}
		return failed
	}
	in := &kinesis.AcknowledgeQueueRecordsInput{QueueARN: &arn}
	for _, h := range handles {
		in.Entries = append(in.Entries, types.AcknowledgeQueueRecordsRequestEntry{ReceiptHandle: h})
	}
	out, err := e.api.AcknowledgeQueueRecords(e.ctx, in)
	if err != nil {
		e.t.Fatalf("AcknowledgeQueueRecords: %v", err)
	}
	for _, f := range out.Failed {
		failed[aws.ToString(f.ReceiptHandle)] = aws.ToString(f.ErrorCode)
	}
	if len(out.Failed)+len(out.Successful) != len(handles) {
		e.t.Fatalf("AcknowledgeQueueRecords of %d: %d failed, %d successful", len(handles), len(out.Failed), len(out.Successful))
	}
	return failed
}

// setVisibility changes a record's visibility timeout (a dead letter's
// with dead) and returns the entry's error code, "" on success.
func (e *env) setVisibility(arn string, dead bool, h *string, secs int32) string {
	e.t.Helper()
	if dead {
		out, err := e.api.UpdateDeadLetterQueueRecordsVisibility(e.ctx, &kinesis.UpdateDeadLetterQueueRecordsVisibilityInput{QueueARN: &arn,
			Entries: []types.UpdateDeadLetterQueueRecordsVisibilityRequestEntry{{ReceiptHandle: h, VisibilityTimeoutSeconds: aws.Int32(secs)}}})
		if err != nil {
			e.t.Fatalf("UpdateDeadLetterQueueRecordsVisibility: %v", err)
		}
		if len(out.Failed) > 0 {
			return aws.ToString(out.Failed[0].ErrorCode)
		}
		return ""
	}
	out, err := e.api.UpdateQueueRecordsVisibility(e.ctx, &kinesis.UpdateQueueRecordsVisibilityInput{QueueARN: &arn,
		Entries: []types.UpdateQueueRecordsVisibilityRequestEntry{{ReceiptHandle: h, VisibilityTimeoutSeconds: aws.Int32(secs)}}})
	if err != nil {
		e.t.Fatalf("UpdateQueueRecordsVisibility: %v", err)
	}
	if len(out.Failed) > 0 {
		return aws.ToString(out.Failed[0].ErrorCode)
	}
	return ""
}

func datas(recs []types.QueueRecord) []string {
	out := make([]string, len(recs))
	for i, r := range recs {
		out[i] = string(r.Data)
	}
	sort.Strings(out)
	return out
}

// testQueues: a queue's life, what it delivers and how, and a second
// queue of the same stream.
func testQueues(t *testing.T, e *env) {
	if e.noQueues() {
		return
	}
	name := e.onDemandStream(kinesis.CreateStreamInput{})
	if name == "" {
		return
	}
	before := e.putAll(name, keys("old", 3), payload)
	out, err := e.createQueue(name, nil, types.QueueStartingPositionTypeLatest)
	if err != nil {
		t.Fatalf("CreateQueue: %v", err)
	}
	d := out.QueueDescription
	latest := aws.ToString(d.QueueARN)
	t.Cleanup(func() { _, _ = e.api.DeleteQueue(context.Background(), &kinesis.DeleteQueueInput{QueueARN: &latest}) })
	if !queueARNForm.MatchString(latest) {
		t.Errorf("queue ARN %q is not arn:aws:kinesis:REGION:ACCOUNT:queue/ID", latest)
	}
	if s := d.QueueStatus; s != types.QueueStatusCreating && s != types.QueueStatusActive {
		t.Errorf("CreateQueue answered status %s", s)
	}
	horizon := e.queue(name, nil)
	desc, err := e.api.DescribeQueue(e.ctx, &kinesis.DescribeQueueInput{QueueARN: &horizon})
	if err != nil {
		t.Fatal(err)
	}
	a := desc.QueueDescription.QueueAttributes
	if a == nil || aws.ToInt32(a.VisibilityTimeoutSeconds) != 30 || a.DeadLetterConfiguration == nil ||
		a.DeadLetterConfiguration.TargetType != types.TargetTypeBuiltIn || aws.ToInt32(a.DeadLetterConfiguration.MaxReceiveCount) != 6 {
		t.Errorf("a queue created without attributes has %+v, want visibility 30 s and BUILT_IN dead letters after 6 receives", a)
	}
	if sc := desc.QueueDescription.StreamConfigurationList; len(sc) != 1 || aws.ToString(sc[0].StreamARN) != e.streamARN(name) {
		t.Errorf("DescribeQueue's StreamConfigurationList %+v, want the stream's ARN", sc)
	}
	if q := aws.ToInt32(e.summary(name).QueueCount); q != 2 {
		t.Errorf("DescribeStreamSummary QueueCount %d, want 2", q)
	}

	after := e.putAll(name, keys("new", 4), func(i int) []byte { return payload(100 + i) })
	got := e.receiveN(horizon, false, 7)
	var want []string
	for _, p := range append(before, after...) {
		want = append(want, string(p.data))
	}
	sort.Strings(want)
	if fmt.Sprint(datas(got)) != fmt.Sprint(want) {
		t.Errorf("TRIM_HORIZON queue received %q, want %q", datas(got), want)
	}
	ids := map[string]string{}
	for _, r := range got {
		if aws.ToInt32(r.ReceiveCount) != 1 || r.ReceiptHandle == nil || r.FirstReceiveTimestamp == nil || r.ApproximateArrivalTimestamp == nil || r.PartitionKey == nil || aws.ToString(r.RecordId) == "" {
			t.Errorf("a first delivery: %+v", r)
		}
		ids[string(r.Data)] = aws.ToString(r.RecordId)
	}
	if len(e.receive(horizon, false, aws.Int32(0), nil)) != 0 {
		t.Error("records in flight were received again")
	}
	lat := e.receiveN(latest, false, 4)
	if fmt.Sprint(datas(lat)) != fmt.Sprint(want[3:]) { // the "new" payloads (record-0100...) sort last
		t.Errorf("LATEST queue received %q, want the 4 records written after it", datas(lat))
	}
	for _, r := range lat {
		if ids[string(r.Data)] != aws.ToString(r.RecordId) {
			t.Errorf("record %q has RecordId %s in one queue and %s in another", r.Data, aws.ToString(r.RecordId), ids[string(r.Data)])
		}
	}
	var handles []*string
	for _, r := range got {
		handles = append(handles, r.ReceiptHandle)
	}
	if f := e.ack(horizon, false, handles...); len(f) != 0 {
		t.Errorf("acknowledging 7 received records failed %v", f)
	}
	if f := e.ack(horizon, false, handles[0]); len(f) != 0 {
		t.Errorf("acknowledging an acknowledged record again failed %v", f)
	}

	// A long poll answers when a record arrives.
	done := make(chan []types.QueueRecord, 1)
	start := time.Now()
	go func() {
		out, err := e.api.ReceiveQueueRecords(e.ctx, &kinesis.ReceiveQueueRecordsInput{QueueARN: &horizon, WaitTimeSeconds: aws.Int32(maxWait)})
		if err != nil {
			done <- nil
			return
		}
		done <- out.QueueRecords
	}()
	time.Sleep(200 * time.Millisecond)
	e.putOne(name, "late", []byte("late"))
	if recs := <-done; len(recs) != 1 || string(recs[0].Data) != "late" {
		t.Errorf("a long poll received %v", recs)
	} else if el := time.Since(start); el > maxWait*time.Second/2 {
		t.Errorf("a long poll answered %v after its record arrived", el)
	}

	// Listed, then deleted.
	var arns []string
	in := &kinesis.ListQueuesInput{StreamFilter: []types.QueueStreamFilter{{StreamARN: aws.String(e.streamARN(name))}}}
	for {
		l, err := e.api.ListQueues(e.ctx, in)
		if err != nil {
			t.Fatal(err)
		}
		for _, q := range l.QueueSummaries {
			arns = append(arns, aws.ToString(q.QueueARN))
		}
		if l.NextToken == nil {
			break
		}
		in.NextToken = l.NextToken
	}
	sort.Strings(arns)
	wantARNs := []string{horizon, latest}
	sort.Strings(wantARNs)
	if fmt.Sprint(arns) != fmt.Sprint(wantARNs) {
		t.Errorf("ListQueues of the stream = %v, want %v", arns, wantARNs)
	}
	if _, err := e.api.DeleteQueue(e.ctx, &kinesis.DeleteQueueInput{QueueARN: &latest}); err != nil {
		t.Fatal(err)
	}
	for {
		_, err := e.api.DescribeQueue(e.ctx, &kinesis.DescribeQueueInput{QueueARN: &latest})
		if err != nil {
			wantErr[*types.ResourceNotFoundException](t, "DescribeQueue of a deleted queue", err)
			break
		}
		select {
		case <-e.ctx.Done():
			t.Fatal("a deleted queue is still described")
		case <-time.After(10 * time.Millisecond):
		}
	}
}

// testQueueVisibility: in-flight records come back when their visibility
// timeout ends, sooner when it is set to 0, and a stale handle fails.
func testQueueVisibility(t *testing.T, e *env) {
	if e.noQueues() {
		return
	}
	name := e.onDemandStream(kinesis.CreateStreamInput{})
	if name == "" {
		return
	}
	arn := e.queue(name, &types.QueueAttributes{VisibilityTimeoutSeconds: aws.Int32(1)})
	e.putAll(name, []string{"a", "b"}, payload)
	first := e.receiveN(arn, false, 2)

	// Made visible at once: received again, counted.
	if code := e.setVisibility(arn, false, first[0].ReceiptHandle, 0); code != "" {
		t.Fatalf("UpdateQueueRecordsVisibility 0: %s", code)
	}
	again := e.receive(arn, false, aws.Int32(0), aws.Int32(60))
	if len(again) != 1 || aws.ToString(again[0].RecordId) != aws.ToString(first[0].RecordId) || aws.ToInt32(again[0].ReceiveCount) != 2 {
		t.Fatalf("after visibility 0, received %+v; want record %s with ReceiveCount 2", again, aws.ToString(first[0].RecordId))
	}
	if !again[0].FirstReceiveTimestamp.Equal(*first[0].FirstReceiveTimestamp) {
		t.Errorf("FirstReceiveTimestamp changed from %v to %v", first[0].FirstReceiveTimestamp, again[0].FirstReceiveTimestamp)
	}
	// The first handle is stale now.
	if f := e.ack(arn, false, first[0].ReceiptHandle); f[aws.ToString(first[0].ReceiptHandle)] != errStaleHandle {
		t.Errorf("acknowledging with the handle of an earlier delivery: failed %v, want %s", f, errStaleHandle)
	}

	// The other one comes back by itself after its 1 s.
	back := e.receiveN(arn, false, 1)
	if aws.ToString(back[0].RecordId) != aws.ToString(first[1].RecordId) || aws.ToInt32(back[0].ReceiveCount) != 2 {
		t.Errorf("after the visibility timeout received %+v, want record %s again", back[0], aws.ToString(first[1].RecordId))
	}
	// Extended, it stays away.
	if code := e.setVisibility(arn, false, back[0].ReceiptHandle, 60); code != "" {
		t.Fatalf("UpdateQueueRecordsVisibility 60: %s", code)
	}
	time.Sleep(1500 * time.Millisecond)
	if recs := e.receive(arn, false, aws.Int32(0), nil); len(recs) != 0 {
		t.Errorf("a record whose visibility was extended came back: %d records", len(recs))
	}
	if f := e.ack(arn, false, again[0].ReceiptHandle, back[0].ReceiptHandle); len(f) != 0 {
		t.Errorf("acknowledging the latest handles failed %v", f)
	}
}

// testQueueDeadLetters: MaxReceiveCount receives make a dead letter; it is
// received, made visible, restored and acknowledged through the
// dead-letter operations; TargetType NONE keeps redelivering.
func testQueueDeadLetters(t *testing.T, e *env) {
	if e.noQueues() {
		return
	}
	name := e.onDemandStream(kinesis.CreateStreamInput{})
	if name == "" {
		return
	}
	arn := e.queue(name, dlq(2))
	none := e.queue(name, &types.QueueAttributes{DeadLetterConfiguration: &types.DeadLetterConfiguration{TargetType: types.TargetTypeNone}})
	e.putOne(name, "poison", []byte("poison"))

	fail := func(arn string, times int) types.QueueRecord {
		var r types.QueueRecord
		for i := range times {
			recs := e.receiveN(arn, false, 1)
			r = recs[0]
			if n := aws.ToInt32(r.ReceiveCount); n != int32(i+1) {
				t.Fatalf("receive %d has ReceiveCount %d", i+1, n)
			}
			if code := e.setVisibility(arn, false, r.ReceiptHandle, 0); code != "" {
				t.Fatalf("UpdateQueueRecordsVisibility 0: %s", code)
			}
		}
		return r
	}
	last := fail(arn, 2)
	if recs := e.receive(arn, false, aws.Int32(1), nil); len(recs) != 0 {
		t.Fatalf("a record received MaxReceiveCount (2) times was received again (ReceiveCount %d)", aws.ToInt32(recs[0].ReceiveCount))
	}
	fail(none, 3) // no dead letters: a third receive comes

	dead := e.receiveN(arn, true, 1)[0]
	if string(dead.Data) != "poison" || aws.ToString(dead.PartitionKey) != "poison" || aws.ToString(dead.RecordId) != aws.ToString(last.RecordId) || aws.ToInt32(dead.ReceiveCount) != 2 {
		t.Fatalf("dead letter %+v; want the record with ReceiveCount 2", dead)
	}
	if len(e.receive(arn, true, aws.Int32(0), nil)) != 0 {
		t.Error("a dead letter in flight was received again")
	}
	if f := e.ack(arn, false, dead.ReceiptHandle); f[aws.ToString(dead.ReceiptHandle)] != "InvalidArgumentException" {
		t.Errorf("AcknowledgeQueueRecords of a dead letter's handle: failed %v, want InvalidArgumentException", f)
	}
	if code := e.setVisibility(arn, true, dead.ReceiptHandle, 0); code != "" {
		t.Fatalf("UpdateDeadLetterQueueRecordsVisibility 0: %s", code)
	}
	dead = e.receiveN(arn, true, 1)[0]

	// Restored: live again, counted from 1.
	res, err := e.api.RestoreDeadLetterQueueRecords(e.ctx, &kinesis.RestoreDeadLetterQueueRecordsInput{QueueARN: &arn,
		Entries: []types.RestoreDeadLetterQueueRecordsRequestEntry{{ReceiptHandle: dead.ReceiptHandle}}})
	if err != nil || len(res.Successful) != 1 {
		t.Fatalf("RestoreDeadLetterQueueRecords: %v %+v", err, res)
	}
	live := e.receiveN(arn, false, 1)[0]
	if aws.ToString(live.RecordId) != aws.ToString(dead.RecordId) || aws.ToInt32(live.ReceiveCount) != 1 {
		t.Fatalf("a restored record received as %+v, want ReceiveCount 1", live)
	}
	if code := e.setVisibility(arn, false, live.ReceiptHandle, 0); code != "" {
		t.Fatal(code)
	}
	if r := e.receiveN(arn, false, 1)[0]; aws.ToInt32(r.ReceiveCount) != 2 {
		t.Fatalf("the restored record's second receive has ReceiveCount %d", aws.ToInt32(r.ReceiveCount))
	} else if code := e.setVisibility(arn, false, r.ReceiptHandle, 0); code != "" {
		t.Fatal(code)
	}
	dead = e.receiveN(arn, true, 1)[0] // received twice again: dead again
	if f := e.ack(arn, true, dead.ReceiptHandle); len(f) != 0 {
		t.Fatalf("AcknowledgeDeadLetterQueueRecords: failed %v", f)
	}
	if recs := e.receive(arn, true, aws.Int32(1), aws.Int32(0)); len(recs) != 0 {
		t.Errorf("an acknowledged dead letter was received again")
	}
}

// testQueueErrors: what CreateQueue and the receives refuse, and the
// registered-consumer limit queues share with fan-out consumers.
func testQueueErrors(t *testing.T, e *env) {
	if e.noQueues() {
		return
	}
	prov := e.stream(1)
	_, err := e.createQueue(prov, nil, types.QueueStartingPositionTypeLatest)
	wantCode(t, "CreateQueue on a provisioned stream", err, errQueueOnProvisioned)

	name := e.onDemandStream(kinesis.CreateStreamInput{})
	if name == "" {
		return
	}
	_, err = e.createQueue(name, &types.QueueAttributes{DeadLetterConfiguration: &types.DeadLetterConfiguration{TargetType: types.TargetTypeBuiltIn}}, types.QueueStartingPositionTypeLatest)
	wantErr[*types.ValidationException](t, "CreateQueue BUILT_IN without MaxReceiveCount", err)

	arn := e.queue(name, nil)
	d, err := e.api.DescribeQueue(e.ctx, &kinesis.DescribeQueueInput{QueueARN: &arn})
	if err != nil {
		t.Fatal(err)
	}
	_, err = e.api.CreateQueue(e.ctx, &kinesis.CreateQueueInput{QueueName: d.QueueDescription.QueueName, StreamConfigurationList: []types.QueueStreamConfiguration{{StreamARN: aws.String(e.streamARN(name))}}})
	wantErr[*types.ResourceInUseException](t, "CreateQueue of a name the account has", err)
	_, err = e.api.DeleteStream(e.ctx, &kinesis.DeleteStreamInput{StreamName: &name})
	wantErr[*types.ResourceInUseException](t, "DeleteStream of a stream with a queue", err)

	_, err = e.api.ReceiveQueueRecords(e.ctx, &kinesis.ReceiveQueueRecordsInput{QueueARN: &arn, Limit: aws.Int32(11), WaitTimeSeconds: aws.Int32(0)})
	wantErr[*types.ValidationException](t, "ReceiveQueueRecords Limit 11", err)
	_, err = e.api.ReceiveQueueRecords(e.ctx, &kinesis.ReceiveQueueRecordsInput{QueueARN: &arn, WaitTimeSeconds: aws.Int32(maxWait + 1)})
	wantErr[*types.ValidationException](t, fmt.Sprintf("ReceiveQueueRecords WaitTimeSeconds %d", maxWait+1), err)
	gone := arn[:len(arn)-1] + "x"
	if gone == arn {
		gone = arn[:len(arn)-1] + "y"
	}
	_, err = e.api.ReceiveQueueRecords(e.ctx, &kinesis.ReceiveQueueRecordsInput{QueueARN: &gone, WaitTimeSeconds: aws.Int32(0)})
	wantErr[*types.ResourceNotFoundException](t, "ReceiveQueueRecords of an unknown queue", err)
	if f := e.ack(arn, false, aws.String("not-a-receipt-handle")); len(f) != 1 {
		t.Errorf("acknowledging a made-up handle: failed %v, want it failed", f)
	}

	// Queues and fan-out consumers share the stream's limit (20 on
	// on-demand Standard): with one queue, 19 consumers fill it.
	limit := 20
	sarn := aws.String(e.streamARN(name))
	for i := range limit - 1 {
		c := fmt.Sprintf("c%d", i)
		if _, err := e.api.RegisterStreamConsumer(e.ctx, &kinesis.RegisterStreamConsumerInput{StreamARN: sarn, ConsumerName: &c}); err != nil {
			t.Fatalf("RegisterStreamConsumer %d of %d: %v", i+1, limit-1, err)
		}
		t.Cleanup(func() {
			_, _ = e.api.DeregisterStreamConsumer(context.Background(), &kinesis.DeregisterStreamConsumerInput{StreamARN: sarn, ConsumerName: &c})
		})
	}
	_, err = e.createQueue(name, nil, types.QueueStartingPositionTypeLatest)
	wantErr[*types.LimitExceededException](t, "CreateQueue over the registered-consumer limit", err)
	_, err = e.api.RegisterStreamConsumer(e.ctx, &kinesis.RegisterStreamConsumerInput{StreamARN: sarn, ConsumerName: aws.String("one-too-many")})
	wantErr[*types.LimitExceededException](t, "RegisterStreamConsumer over the limit with a queue", err)
	if c := aws.ToInt32(e.summary(name).ConsumerCount); c != int32(limit-1) {
		t.Errorf("ConsumerCount %d, want %d (queues are not counted)", c, limit-1)
	}
}
