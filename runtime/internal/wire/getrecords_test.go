package wire

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"net"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	awsmiddleware "github.com/aws/aws-sdk-go-v2/aws/middleware"
	"github.com/aws/aws-sdk-go-v2/service/kinesis"
	"github.com/aws/aws-sdk-go-v2/service/kinesis/schemas"
	"github.com/aws/aws-sdk-go-v2/service/kinesis/types"
	"github.com/aws/smithy-go"
	smithytime "github.com/aws/smithy-go/time"
	smithyhttp "github.com/aws/smithy-go/transport/http"
	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
)

// recordsServer answers every request with whatever status and body it was
// last given.
type recordsServer struct {
	mu     sync.Mutex
	status int
	body   string
}

func (s *recordsServer) set(status int, body string) {
	s.mu.Lock()
	s.status, s.body = status, body
	s.mu.Unlock()
}

// recordsClient is an SDK client whose endpoint is a recordsServer.
func recordsClient(t testing.TB) (*kinesis.Client, *recordsServer) {
	t.Helper()
	rs := &recordsServer{status: http.StatusOK, body: "{}"}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		rs.mu.Lock()
		status, body := rs.status, rs.body
		rs.mu.Unlock()
		w.Header().Set("Content-Type", "application/x-amz-json-1.1")
		w.Header().Set("x-amzn-RequestId", "req-1")
		w.Header().Set("Content-Length", strconv.Itoa(len(body))) // as the service does
		w.WriteHeader(status)
		_, _ = io.WriteString(w, body)
	}))
	return testClient(t, srv), rs
}

// outputsEqual compares outputs strictly: nil and empty slices differ, and
// times must be identical (location included), not merely Equal. The
// unexported members are empty serde markers; ResultMetadata holds the
// response's timing and is checked apart.
var outputsEqual = cmp.Options{
	cmp.Comparer(func(a, b time.Time) bool { return a == b }),
	cmpopts.IgnoreUnexported(kinesis.GetRecordsOutput{}, types.Record{}, types.ChildShard{}, types.HashKeyRange{}),
	cmpopts.IgnoreFields(kinesis.GetRecordsOutput{}, "ResultMetadata"),
}

// rec is a record's JSON, members written in order, raw.
func rec(members ...string) string { return "{" + strings.Join(members, ",") + "}" }

func recordsBody(records []string, rest ...string) string {
	return "{" + strings.Join(append([]string{`"Records":[` + strings.Join(records, ",") + `]`}, rest...), ",") + "}"
}

func b64(b []byte) string { return `"` + base64.StdEncoding.EncodeToString(b) + `"` }

// manyRecords is n records like the service's, with data of every length
// up to maxData.
func manyRecords(n, maxData int) string {
	rs := make([]string, n)
	data := make([]byte, maxData+1)
	for i := range data {
		data[i] = byte(i*7 + 3)
	}
	for i := range rs {
		rs[i] = rec(
			fmt.Sprintf(`"SequenceNumber":"4963%052d"`, i),
			fmt.Sprintf(`"ApproximateArrivalTimestamp":1.700000%03dE9`, i%1000),
			`"Data":`+b64(data[:i%(maxData+1)]),
			fmt.Sprintf(`"PartitionKey":"key-%d"`, i%37),
		)
	}
	return recordsBody(rs, `"NextShardIterator":"AAAAAAAAAAH/next+iterator=="`, `"MillisBehindLatest":0`)
}

// getRecordsCases are bodies the decoder must decode (fast) or must leave
// to the SDK.
var getRecordsCases = []struct {
	name string
	body string
	fast bool
}{
	{"empty records", `{"Records":[],"NextShardIterator":"it","MillisBehindLatest":0}`, true},
	{"no members", `{}`, true},
	{"one record", recordsBody([]string{rec(`"SequenceNumber":"1"`, `"ApproximateArrivalTimestamp":1700000000`, `"Data":"aGVsbG8="`, `"PartitionKey":"k"`)}), true},
	{"many records", manyRecords(300, 260), true},
	{"data of many lengths", func() string {
		var rs []string
		for n := 0; n < 70; n++ {
			rs = append(rs, rec(`"Data":`+b64(bytes.Repeat([]byte{0xff, 0, 'x'}, n)[:n]), `"SequenceNumber":"`+strconv.Itoa(n)+`"`))
		}
		return recordsBody(rs)
	}(), true},
	{"empty data only", recordsBody([]string{rec(`"Data":""`), rec(`"Data":""`, `"PartitionKey":""`)}), true},
	{"keys needing escapes", recordsBody([]string{
		rec(`"PartitionKey":"quote\" back\\slash \/ \b\f\n\r\t"`),
		rec(`"PartitionKey":"ctl \u0001\u001f \u0000 end"`),
		rec(`"PartitionKey":"é ✓ 日本 raw"`),
		rec(`"PartitionKey":"\u00e9\u2713\u65E5 escaped"`),
		rec(`"PartitionKey":"pair \ud83d\ude00 raw 😀"`),
		rec(`"PartitionKey":"lone \ud83d x"`),
		rec(`"PartitionKey":"lone low \ude00"`),
		rec(`"PartitionKey":"high high \ud83d\ud83d\ude00"`),
		rec(`"PartitionKey":"high then escape \ud83d\n"`),
		rec(`"PartitionKey":"bad utf8 raw ` + "\xff\xc3" + `"`),
		rec(`"PartitionKey":"bad utf8 escaped ` + "\xff\xc3\xed\xa0\x80" + `\t"`),
		rec(`"SequenceNumber":"\u0034\u0039", "EncryptionType":"\u004B\u004DS"`),
	}), true},
	{"timestamps", recordsBody([]string{
		rec(`"ApproximateArrivalTimestamp":1.700000000123E9`),
		rec(`"ApproximateArrivalTimestamp":1700000000`),
		rec(`"ApproximateArrivalTimestamp":1700000000.5`),
		rec(`"ApproximateArrivalTimestamp":1700000000.999999`),
		rec(`"ApproximateArrivalTimestamp":1.7e9`),
		rec(`"ApproximateArrivalTimestamp":17000000001e-1`),
		rec(`"ApproximateArrivalTimestamp":0`),
		rec(`"ApproximateArrivalTimestamp":-0`),
		rec(`"ApproximateArrivalTimestamp":-1.5`),
		rec(`"ApproximateArrivalTimestamp":0.0004`),
		rec(`"ApproximateArrivalTimestamp":1e300`),
		rec(`"ApproximateArrivalTimestamp":-1e300`),
		rec(`"ApproximateArrivalTimestamp":9223372036854775807`),
		rec(`"ApproximateArrivalTimestamp":-9223372036854775808`),
		rec(`"ApproximateArrivalTimestamp":99999999999999999999`),
		rec(`"ApproximateArrivalTimestamp":1e-320`),
	}), true},
	{"missing and null members", recordsBody([]string{
		rec(),
		rec(`"SequenceNumber":null`, `"Data":null`, `"PartitionKey":null`, `"ApproximateArrivalTimestamp":null`, `"EncryptionType":null`),
		rec(`"SequenceNumber":"5"`),
		`null`,
	}, `"NextShardIterator":null`, `"MillisBehindLatest":null`, `"ChildShards":null`), true},
	{"records null", `{"Records":null,"NextShardIterator":"x"}`, true},
	{"unknown members", `{"Before":{"a":[1,2,{"b":null}],"c":"\"}"},"Records":[{"Extra":[[],{},"x",true,false,null,-1.5e+3],"Data":"AA==","Nested":{"Data":"bad"}}],"After":[{"Records":[1]}],"Num":12.5E-3,"T":true,"F":false,"N":null}`, true},
	{"repeated members", `{"Records":[{"Data":"AA=="}],"MillisBehindLatest":1,"Records":[{"Data":"AQ==","Data":"Ag==","SequenceNumber":"1","SequenceNumber":"2","SequenceNumber":null}],"MillisBehindLatest":2}`, true},
	{"escaped keys", `{"Rec\u006frds":[{"D\u0061ta":"AA==","Partition\u004bey":"k"}],"Next\u0053hardIterator":"i"}`, true},
	{"escaped data", recordsBody([]string{rec(`"Data":"\/\/\/\/aGVsbG8=\n\r"`), rec(`"Data":"\u0061GVsbG8="`), rec(`"Data":"aGVs\nbG8="`)}), true},
	{"child shards", `{"Records":[],"ChildShards":[{"ShardId":"shardId-000000000001","ParentShards":["shardId-000000000000"],"HashKeyRange":{"StartingHashKey":"0","EndingHashKey":"170141183460469231731687303715884105727"}},{"ShardId":"shardId-000000000002","ParentShards":["shardId-000000000000",null],"HashKeyRange":{"EndingHashKey":"1","X":1}},null,{},{"ParentShards":[],"HashKeyRange":null,"ShardId":null},{"HashKeyRange":{}}],"MillisBehindLatest":0}`, true},
	{"whitespace", " \n\t{ \"Records\" :\r\n [ { \"Data\" : \"AA==\" , \"SequenceNumber\" : \"1\" } , null ] ,\n\"MillisBehindLatest\"\t:\t7 } \n", true},
	{"millis large", `{"Records":[],"MillisBehindLatest":9223372036854775807}`, true},
	{"millis negative", `{"Records":[],"MillisBehindLatest":-9223372036854775808}`, true},
	{"encryption types", recordsBody([]string{rec(`"EncryptionType":"KMS"`), rec(`"EncryptionType":"NONE"`), rec(`"EncryptionType":""`), rec(`"EncryptionType":"Other"`)}), true},
	{"trailing bytes", `{"Records":[]} garbage`, true},
	{"message member", `{"message":"x","Message":"y","__type":"z","Records":[]}`, true},

	// The SDK's: malformed, or what the decoder does not take on.
	{"empty body", ``, false},
	{"null body", `null`, false},
	{"array body", `[]`, false},
	{"truncated", `{"Records":[{"Data":"AA=="`, false},
	{"truncated string", `{"Records":[{"Data":"AA`, false},
	{"truncated list", `{"Records":[`, false},
	{"bad base64", recordsBody([]string{rec(`"Data":"A"`)}), false},
	{"bad base64 char", recordsBody([]string{rec(`"Data":"AA.="`)}), false},
	{"raw newline in data", recordsBody([]string{rec("\"Data\":\"AAAA\nAAAA\"")}), false},
	{"raw newlines in data, whole quanta", recordsBody([]string{rec("\"Data\":\"AA\nAA\n\n\nAAAA\"")}), false},
	{"control char in key", recordsBody([]string{rec("\"PartitionKey\":\"a\x01b\"")}), false},
	{"string timestamp", recordsBody([]string{rec(`"ApproximateArrivalTimestamp":"1700000000"`)}), false},
	{"infinite timestamp", recordsBody([]string{rec(`"ApproximateArrivalTimestamp":"Infinity"`)}), false},
	{"overflowing timestamp", recordsBody([]string{rec(`"ApproximateArrivalTimestamp":1e400`)}), false},
	{"fractional millis", `{"Records":[],"MillisBehindLatest":1.0}`, false},
	{"overflowing millis", `{"Records":[],"MillisBehindLatest":9223372036854775808}`, false},
	{"string millis", `{"Records":[],"MillisBehindLatest":"1"}`, false},
	{"number sequence", recordsBody([]string{rec(`"SequenceNumber":1`)}), false},
	{"record not object", `{"Records":[1]}`, false},
	{"records not list", `{"Records":{}}`, false},
	{"trailing comma", `{"Records":[],}`, false},
	{"bad escape", recordsBody([]string{rec(`"PartitionKey":"\x"`)}), false},
	{"leading zero", `{"Records":[],"X":01}`, false},
	{"bad literal", `{"Records":[],"X":tru}`, false},
	{"deep unknown", `{"X":` + strings.Repeat("[", 600) + strings.Repeat("]", 600) + `,"Records":[]}`, false},
}

// getRecords calls GetRecords with the given options.
//
// A call that fails in the transport (the SDK, with or without the option,
// now and then reads "use of closed network connection" from the test
// server) is made again, up to three times: these tests compare decoders,
// and a decoder never sees such a call.
func getRecords(t *testing.T, client *kinesis.Client, optFns ...func(*kinesis.Options)) (*kinesis.GetRecordsOutput, error) {
	t.Helper()
	for attempt := 1; ; attempt++ {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		out, err := client.GetRecords(ctx, &kinesis.GetRecordsInput{ShardIterator: aws.String("it")}, optFns...)
		cancel()
		var netErr *net.OpError
		if attempt == 3 || !errors.As(err, &netErr) {
			return out, err
		}
		t.Logf("GetRecords attempt %d failed in the transport, trying again: %v", attempt, err)
	}
}

// TestFastGetRecordsIsInPlace checks that the option replaces the client's
// protocol, so that the comparisons below compare two decoders.
func TestFastGetRecordsIsInPlace(t *testing.T) {
	client, _ := recordsClient(t)
	o := client.Options()
	if FastGetRecords(&o); o.Protocol == nil {
		t.Fatal("the client has no protocol")
	} else if _, ok := o.Protocol.(getRecordsProtocol); !ok {
		t.Fatalf("the option left the client's %v protocol in place: the comparison would test nothing", o.Protocol.ID())
	}
}

// TestFastGetRecordsIsTheSDKs checks that the option gives what the SDK
// gives, for every case, and that the cases meant for the decoder are
// decoded by it: the protocols on the bodies in memory, and the small
// bodies also through a client and a server (bodies above 16 KiB made the
// SDK fail in the transport more often; getRecords tries those again).
func TestFastGetRecordsIsTheSDKs(t *testing.T) {
	client, srv := recordsClient(t)
	sdk := client.Options().Protocol
	for _, tc := range getRecordsCases {
		t.Run(tc.name, func(t *testing.T) {
			var d getRecordsDecoder
			if ok := d.decode([]byte(tc.body), &kinesis.GetRecordsOutput{}); ok != tc.fast {
				t.Errorf("decoded = %v, want %v", ok, tc.fast)
			}
			want, wantErr := protocolCall(sdk, []byte(tc.body), nil)
			have, haveErr := protocolCall(getRecordsProtocol{sdk}, []byte(tc.body), nil)
			compareOutputs(t, tc.fast, want, wantErr, have, haveErr)
			if len(tc.body) > 16<<10 {
				return
			}
			srv.set(http.StatusOK, tc.body)
			want, wantErr = getRecords(t, client)
			have, haveErr = getRecords(t, client, FastGetRecords)
			compareOutputs(t, tc.fast, want, wantErr, have, haveErr)
			if wantErr != nil {
				return
			}
			for _, md := range []*kinesis.GetRecordsOutput{want, have} {
				if id, _ := awsmiddleware.GetRequestIDMetadata(md.ResultMetadata); id != "req-1" {
					t.Errorf("request ID %q in the result metadata", id)
				}
				if _, ok := awsmiddleware.GetResponseAt(md.ResultMetadata); !ok {
					t.Error("no response time in the result metadata")
				}
			}
		})
	}
}

func compareOutputs(t *testing.T, fast bool, want *kinesis.GetRecordsOutput, wantErr error, have *kinesis.GetRecordsOutput, haveErr error) {
	t.Helper()
	if fmt.Sprint(haveErr) != fmt.Sprint(wantErr) {
		t.Fatalf("error %v, the SDK's %v", haveErr, wantErr)
	}
	if wantErr != nil {
		if fast {
			t.Fatalf("the SDK fails on a body the decoder takes: %v", wantErr)
		}
		return
	}
	if diff := cmp.Diff(want, have, outputsEqual); diff != "" {
		t.Errorf("output differs from the SDK's (-sdk +fast):\n%s", diff)
	}
}

// TestFastGetRecordsRecordsShareBuffers checks the point of the decoder: one
// buffer behind all Data, Data that cannot be appended over its neighbour.
func TestFastGetRecordsRecordsShareBuffers(t *testing.T) {
	var d getRecordsDecoder
	var out kinesis.GetRecordsOutput
	if !d.decode([]byte(manyRecords(3, 10)), &out) {
		t.Fatal("not decoded")
	}
	r0, r1 := out.Records[1].Data, out.Records[2].Data
	if reflect.ValueOf(r0).Pointer()+uintptr(len(r0)) != reflect.ValueOf(r1).Pointer() {
		t.Error("Data is not one buffer")
	}
	_ = append(r0, 'x')
	if r1[0] == 'x' {
		t.Error("appending to one record's Data wrote over the next's")
	}
	many := []byte(manyRecords(1000, 100))
	allocs := testing.AllocsPerRun(10, func() {
		var d getRecordsDecoder
		if !d.decode(many, &kinesis.GetRecordsOutput{}) {
			t.Fatal("not decoded")
		}
	})
	// A few per buffer as it grows with records of varied sizes, none per
	// record (the SDK makes some nine per record).
	if allocs > 40 {
		t.Errorf("%v allocations for 1000 records", allocs)
	}
}

// TestFastGetRecordsLeavesErrorsToTheSDK checks that an error response is
// the SDK's typed error.
func TestFastGetRecordsLeavesErrorsToTheSDK(t *testing.T) {
	client, srv := recordsClient(t)
	srv.set(http.StatusBadRequest, `{"__type":"ExpiredIteratorException","message":"x"}`)
	_, err := getRecords(t, client, FastGetRecords)
	var expired *types.ExpiredIteratorException
	if !errors.As(err, &expired) || expired.ErrorMessage() != "x" {
		t.Fatalf("error %v (%T), want the SDK's ExpiredIteratorException", err, err)
	}
	_, sdkErr := getRecords(t, client)
	if err.Error() != sdkErr.Error() {
		t.Errorf("error %v, the SDK's %v", err, sdkErr)
	}
}

// protocolCall runs a protocol's DeserializeResponse on body as the client
// would, body read through r if given.
func protocolCall(p smithyhttp.ClientProtocol, body []byte, r io.ReadCloser) (*kinesis.GetRecordsOutput, error) {
	if r == nil {
		r = io.NopCloser(bytes.NewReader(body))
	}
	resp := &smithyhttp.Response{Response: &http.Response{StatusCode: 200, Header: http.Header{}, Body: r, ContentLength: int64(len(body))}}
	out := &kinesis.GetRecordsOutput{}
	op := smithy.NewOperationSchema(schemas.GetRecords, schemas.GetRecordsInput, schemas.GetRecordsOutput)
	err := p.DeserializeResponse(context.Background(), op, kinesis.TypeRegistry, resp, out)
	_ = resp.Body.Close()
	return out, err
}

type failAfter struct {
	r      io.Reader
	closed *bool
}

func (f failAfter) Read(p []byte) (int, error) {
	n, err := f.r.Read(p)
	if err == io.EOF {
		err = io.ErrUnexpectedEOF
	}
	return n, err
}

func (f failAfter) Close() error { *f.closed = true; return nil }

// TestFastGetRecordsFallbackReadsAndClosesAsTheSDK checks that a body the
// decoder leaves, or fails to read, gives the SDK the same bytes and error,
// and that the connection's body is still closed.
func TestFastGetRecordsFallbackReadsAndClosesAsTheSDK(t *testing.T) {
	sdk := kinesis.New(kinesis.Options{Region: "us-east-1"}).Options().Protocol
	fast := getRecordsProtocol{sdk}
	for _, b := range []string{`{"Records":[{"Data":"AA==`, `{"Records":[{"Data":"A"}]}`, `{"Records":[]}`} {
		var closed bool
		_, wantErr := protocolCall(sdk, nil, failAfter{strings.NewReader(b), new(bool)})
		_, haveErr := protocolCall(fast, nil, failAfter{strings.NewReader(b), &closed})
		if fmt.Sprint(haveErr) != fmt.Sprint(wantErr) || haveErr == nil {
			t.Errorf("%s: error %v, the SDK's %v", b, haveErr, wantErr)
		}
		if !closed {
			t.Errorf("%s: the body was not closed", b)
		}
	}
}

// TestEpochSecondsIsSmithys checks the timestamp arithmetic against
// smithy-go's, over the edges and random values of every magnitude.
func TestEpochSecondsIsSmithys(t *testing.T) {
	vs := []float64{0, math.Copysign(0, -1), 1, -1, 0.0004, 0.0005, -0.0005, 1.700000000123e9, 1700000000.5, 1e300, -1e300,
		math.MaxFloat64, -math.MaxFloat64, math.SmallestNonzeroFloat64, 0x1p63 / 1e3, -0x1p63 / 1e3, math.Nextafter(0x1p63/1e3, 0), 9.223372036854775e15, -9.223372036854775e15,
		math.Inf(1), math.Inf(-1)}
	rng := rand.New(rand.NewPCG(1, 2))
	for range 200000 {
		vs = append(vs, math.Float64frombits(rng.Uint64()), float64(1.6e9+rng.Float64()*2e8), rng.NormFloat64()*math.Pow(10, float64(rng.IntN(40))))
	}
	for _, v := range vs {
		if math.IsNaN(v) {
			continue
		}
		if have, want := epochSeconds(v), smithytime.ParseEpochSeconds(v); have != want {
			t.Fatalf("epochSeconds(%v) = %v, smithy's %v", v, have, want)
		}
	}
}

// FuzzGetRecordsBody checks that whenever the decoder takes a body, it
// gives what the SDK gives.
func FuzzGetRecordsBody(f *testing.F) {
	// Small seeds: the fuzzer minimizes each new input by running it
	// thousands of times.
	for _, tc := range getRecordsCases {
		if len(tc.body) <= 2048 {
			f.Add([]byte(tc.body))
		}
	}
	f.Add([]byte(manyRecords(8, 12)))
	sdk := kinesis.New(kinesis.Options{Region: "us-east-1"}).Options().Protocol
	f.Fuzz(func(t *testing.T, body []byte) {
		decodesLikeSDK(t, sdk, body)
	})
}

// decodesLikeSDK checks that when the decoder takes body, its output is
// the SDK's.
func decodesLikeSDK(t *testing.T, sdk smithyhttp.ClientProtocol, body []byte) {
	t.Helper()
	var d getRecordsDecoder
	var have kinesis.GetRecordsOutput
	if !d.decode(body, &have) {
		return
	}
	want, err := protocolCall(sdk, body, nil)
	if err != nil {
		t.Fatalf("the SDK fails on a body the decoder takes: %v\n%q", err, body)
	}
	if diff := cmp.Diff(want, &have, outputsEqual); diff != "" {
		t.Fatalf("output differs from the SDK's (-sdk +fast) for %q:\n%s", body, diff)
	}
}

// FuzzGetRecordsMembers fuzzes members inside a well-formed body, where
// FuzzGetRecordsBody's mutations mostly break the JSON: strings as they
// come or JSON-quoted, Data as base64 or as it comes, timestamps and
// MillisBehindLatest as any token.
func FuzzGetRecordsMembers(f *testing.F) {
	f.Add("49600000000000000000", "key", []byte("data"), "1.700000000123E9", "0", uint8(0))
	f.Add("1", `quote\" back\\ \u00e9 \ud83d\ude00 \ud83d`, []byte{}, "1700000000", "9223372036854775807", uint8(1))
	f.Add("", "\xff\xc3 é", []byte{0, 0xff}, "-1.5e-3", "-0", uint8(6))
	f.Add("x", "k", []byte(`YWJj\nZGVm`), "1e22", "1.0", uint8(4))
	sdk := kinesis.New(kinesis.Options{Region: "us-east-1"}).Options().Protocol
	f.Fuzz(func(t *testing.T, seq, key string, data []byte, ts, millis string, mode uint8) {
		str := func(s string, quote bool) string {
			if quote {
				b, _ := json.Marshal(s)
				return string(b)
			}
			return `"` + s + `"`
		}
		d64 := b64(data)
		if mode&4 != 0 {
			d64 = `"` + string(data) + `"`
		}
		r := rec(`"SequenceNumber":`+str(seq, mode&1 != 0), `"ApproximateArrivalTimestamp":`+ts, `"Data":`+d64,
			`"PartitionKey":`+str(key, mode&2 != 0), `"EncryptionType":`+str(key, mode&8 != 0), `"X":`+str(seq, false))
		body := []byte(recordsBody([]string{r, "null", r}, `"MillisBehindLatest":`+millis, `"NextShardIterator":`+str(key, mode&16 != 0)))
		decodesLikeSDK(t, sdk, body)
	})
}

// BenchmarkGetRecordsDecode decodes a 10,000-record body of 200-byte
// records, as the SDK does and as FastGetRecords does.
func BenchmarkGetRecordsDecode(b *testing.B) {
	const n = 10000
	rs := make([]string, n)
	data := make([]byte, 200)
	for i := range rs {
		for j := range data {
			data[j] = byte(i + j)
		}
		rs[i] = rec(
			fmt.Sprintf(`"SequenceNumber":"496%053d"`, i),
			fmt.Sprintf(`"ApproximateArrivalTimestamp":1.700000%03dE9`, i%1000),
			`"Data":`+b64(data),
			fmt.Sprintf(`"PartitionKey":"partition-key-%d"`, i%1000),
		)
	}
	body := []byte(recordsBody(rs, `"NextShardIterator":"AAAAAAAAAAH/next+iterator=="`, `"MillisBehindLatest":0`))
	sdk := kinesis.New(kinesis.Options{Region: "us-east-1"}).Options().Protocol
	for _, bc := range []struct {
		name string
		p    smithyhttp.ClientProtocol
	}{{"sdk", sdk}, {"fast", getRecordsProtocol{sdk}}} {
		b.Run(bc.name, func(b *testing.B) {
			b.SetBytes(int64(len(body)))
			b.ReportAllocs()
			for b.Loop() {
				out, err := protocolCall(bc.p, body, nil)
				if err != nil || len(out.Records) != n {
					b.Fatalf("%d records, %v", len(out.Records), err)
				}
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/n, "ns/record")
		})
	}
}

// TestParseFloatIsStrconvs checks the exact path against strconv.
func TestParseFloatIsStrconvs(t *testing.T) {
	toks := []string{"0", "-0", "0.0", "-0.0", "1.700000000123E9", "1700000000.5", "1.7e9", "1.7E+9", "17000000001e-1",
		"0.0004", "1e22", "1e23", "1e-22", "1e-23", "9007199254740991", "9007199254740993.0", "90071992547409930e-1",
		"1700000000.1230000000", "4.9e-324", "1e308", "123456789012345678901234567890", "0.1", "0.3", "2.5e-3", "1e0400", "1E-0400"}
	rng := rand.New(rand.NewPCG(3, 4))
	for range 100000 {
		var b []byte
		if rng.IntN(2) == 0 {
			b = append(b, '-')
		}
		b = strconv.AppendUint(b, rng.Uint64()>>rng.IntN(64), 10)
		if rng.IntN(2) == 0 {
			b = append(b, '.')
			b = strconv.AppendUint(b, rng.Uint64()>>rng.IntN(64), 10)
		}
		if rng.IntN(2) == 0 {
			b = append(b, "eE"[rng.IntN(2)])
			b = append(b, []string{"", "+", "-"}[rng.IntN(3)]...)
			b = strconv.AppendInt(b, int64(rng.IntN(30)), 10)
		}
		toks = append(toks, string(b))
	}
	for _, tok := range toks {
		want, err := strconv.ParseFloat(tok, 64)
		have, ok := parseFloat([]byte(tok))
		if ok != (err == nil) || ok && math.Float64bits(have) != math.Float64bits(want) {
			t.Fatalf("parseFloat(%s) = %v, %v; strconv: %v, %v", tok, have, ok, want, err)
		}
	}
}
