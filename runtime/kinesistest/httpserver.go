package kinesistest

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/kinesis"
	"github.com/aws/smithy-go"
)

// HTTPServer serves a Server over the network as the service does: TLS,
// HTTP/2, the awsJson1_1 protocol, and SubscribeToShard as an HTTP/2 event
// stream written with the SDK's event-stream encoder. A *kinesis.Client
// pointed at it (Client) runs the SDK's real HTTP path, event streams
// included, against the in-process backend.
//
// Its fault controls are the backend's: EndSubscriptions ends a
// subscription cleanly, CutSubscriptions drops its TCP connection in the
// middle of an event (a dropped connection ends every stream on it, as on
// a network), ResetSubscriptions resets only its HTTP/2 stream after half
// an event, InjectCallFault refuses calls (a ResourceInUseException or
// LimitExceededException for OpSubscribeToShard, say), a split or merge
// sends ChildShards at the parent's end, and WithSubscriptionLifetime,
// WithSubscribeInterval and WithSubscriptionTakeover set the subscription
// limits.
type HTTPServer struct {
	backend *Server
	srv     *httptest.Server
}

type connKey struct{}

// NewHTTPServer starts serving s on a loopback port with a fresh
// self-signed certificate. Close it when done.
func NewHTTPServer(s *Server) *HTTPServer {
	h := &HTTPServer{backend: s}
	h.srv = httptest.NewUnstartedServer(http.HandlerFunc(h.serve))
	h.srv.EnableHTTP2 = true
	h.srv.Config.ConnContext = func(ctx context.Context, c net.Conn) context.Context {
		return context.WithValue(ctx, connKey{}, c)
	}
	h.srv.StartTLS()
	return h
}

// URL is the server's https:// endpoint.
func (h *HTTPServer) URL() string { return h.srv.URL }

// Backend is the in-process server behind this one.
func (h *HTTPServer) Backend() *Server { return h.backend }

// Close stops the server and drops its connections.
func (h *HTTPServer) Close() {
	h.srv.CloseClientConnections()
	h.srv.Close()
}

// HTTPClient returns an HTTP client that trusts the server's certificate
// and speaks HTTP/2 to it; each call makes a new one (own connections).
func (h *HTTPServer) HTTPClient() *http.Client {
	base := h.srv.Client().Transport.(*http.Transport)
	t := base.Clone()
	t.ForceAttemptHTTP2 = true
	return &http.Client{Transport: t}
}

// Client returns a *kinesis.Client for the server, ready to use: region
// us-east-1, static test credentials, an HTTPClient of its own, and no
// retries (tests see each answer; pass optFns to change any of it).
func (h *HTTPServer) Client(optFns ...func(*kinesis.Options)) *kinesis.Client {
	o := kinesis.Options{
		Region:       "us-east-1",
		BaseEndpoint: aws.String(h.srv.URL),
		Credentials:  credentials.NewStaticCredentialsProvider("kinesistest", "kinesistest", ""),
		HTTPClient:   h.HTTPClient(),
		Retryer:      aws.NopRetryer{},
	}
	return kinesis.New(o, optFns...)
}

// callerContext is the request's context acting for the account its
// signature names: an access key ID of 12 digits is taken for the account
// ID (ClientAs); any other is the server's own account. Signatures are not
// checked.
func callerContext(r *http.Request) context.Context {
	auth := r.Header.Get("Authorization")
	if _, cred, ok := strings.Cut(auth, "Credential="); ok {
		if akid, _, ok := strings.Cut(cred, "/"); ok && accountID.MatchString(akid) {
			return AsAccount(r.Context(), akid)
		}
	}
	return r.Context()
}

// ClientAs is Client acting for another account (12 digits): its access
// key ID is the account ID, which the server takes for the caller's
// account.
func (h *HTTPServer) ClientAs(account string, optFns ...func(*kinesis.Options)) *kinesis.Client {
	return h.Client(append([]func(*kinesis.Options){func(o *kinesis.Options) {
		o.Credentials = credentials.NewStaticCredentialsProvider(account, "kinesistest", "")
	}}, optFns...)...)
}

// operation is one JSON operation: decode the body, call the backend.
type operation func(ctx context.Context, s *Server, body []byte) (any, error)

func op[I, O any](f func(*Server, context.Context, *I, ...func(*kinesis.Options)) (*O, error)) operation {
	return func(ctx context.Context, s *Server, body []byte) (any, error) {
		in := new(I)
		if err := decodeInput(body, in); err != nil {
			return nil, &smithy.GenericAPIError{Code: "SerializationException", Message: err.Error()}
		}
		return f(s, ctx, in)
	}
}

var operations = map[string]operation{
	"CreateStream":             op((*Server).CreateStream),
	"DeleteStream":             op((*Server).DeleteStream),
	"DescribeStreamSummary":    op((*Server).DescribeStreamSummary),
	"ListShards":               op((*Server).ListShards),
	"PutRecord":                op((*Server).PutRecord),
	"PutRecords":               op((*Server).PutRecords),
	"GetShardIterator":         op((*Server).GetShardIterator),
	"GetRecords":               op((*Server).GetRecords),
	"SplitShard":               op((*Server).SplitShard),
	"MergeShards":              op((*Server).MergeShards),
	"RegisterStreamConsumer":   op((*Server).RegisterStreamConsumer),
	"DescribeStreamConsumer":   op((*Server).DescribeStreamConsumer),
	"ListStreamConsumers":      op((*Server).ListStreamConsumers),
	"DeregisterStreamConsumer": op((*Server).DeregisterStreamConsumer),

	"UpdateMaxRecordSize":                    op((*Server).UpdateMaxRecordSize),
	"UpdateStreamRecordDistributionStrategy": op((*Server).UpdateStreamRecordDistributionStrategy),

	"CreateQueue":                            op((*Server).CreateQueue),
	"DescribeQueue":                          op((*Server).DescribeQueue),
	"ListQueues":                             op((*Server).ListQueues),
	"UpdateQueue":                            op((*Server).UpdateQueue),
	"DeleteQueue":                            op((*Server).DeleteQueue),
	"ReceiveQueueRecords":                    op((*Server).ReceiveQueueRecords),
	"AcknowledgeQueueRecords":                op((*Server).AcknowledgeQueueRecords),
	"UpdateQueueRecordsVisibility":           op((*Server).UpdateQueueRecordsVisibility),
	"ReceiveDeadLetterQueueRecords":          op((*Server).ReceiveDeadLetterQueueRecords),
	"AcknowledgeDeadLetterQueueRecords":      op((*Server).AcknowledgeDeadLetterQueueRecords),
	"RestoreDeadLetterQueueRecords":          op((*Server).RestoreDeadLetterQueueRecords),
	"UpdateDeadLetterQueueRecordsVisibility": op((*Server).UpdateDeadLetterQueueRecordsVisibility),
}

const targetPrefix = "Kinesis_20131202."

var bufs = sync.Pool{New: func() any { return new([]byte) }}

func (h *HTTPServer) serve(w http.ResponseWriter, r *http.Request) {
	name, ok := strings.CutPrefix(r.Header.Get("X-Amz-Target"), targetPrefix)
	if r.Method != http.MethodPost || !ok {
		writeError(w, &smithy.GenericAPIError{Code: "UnknownOperationException", Message: "no X-Amz-Target"})
		return
	}
	body, err := io.ReadAll(r.Body)
	if err != nil {
		return
	}
	if name == "SubscribeToShard" {
		h.subscribe(w, r, body)
		return
	}
	f := operations[name]
	if f == nil {
		writeError(w, &smithy.GenericAPIError{Code: "UnknownOperationException", Message: "unknown operation " + name})
		return
	}
	out, err := f(callerContext(r), h.backend, body)
	if err != nil {
		writeError(w, err)
		return
	}
	bp := bufs.Get().(*[]byte)
	b := encodeOutput((*bp)[:0], out)
	w.Header().Set("Content-Type", "application/x-amz-json-1.1")
	_, _ = w.Write(b)
	*bp = b
	bufs.Put(bp)
}

// writeError answers an error as the service does: HTTP 400 with the
// error's code in __type (500 for anything that is not a service error).
func writeError(w http.ResponseWriter, err error) {
	code, msg, status := "InternalFailure", err.Error(), http.StatusInternalServerError
	if ae, ok := errors.AsType[smithy.APIError](err); ok {
		code, msg, status = ae.ErrorCode(), ae.ErrorMessage(), http.StatusBadRequest
	}
	w.Header().Set("Content-Type", "application/x-amz-json-1.1")
	w.Header().Set("X-Amzn-ErrorType", code)
	w.WriteHeader(status)
	b := append([]byte(`{"__type":`), appendJSONString(nil, code)...)
	b = append(b, `,"message":`...)
	b = appendJSONString(b, msg)
	_, _ = w.Write(append(b, '}'))
}

// subscribe answers SubscribeToShard: an error before the stream, or the
// event stream, flushed event by event, until the subscription ends.
func (h *HTTPServer) subscribe(w http.ResponseWriter, r *http.Request, body []byte) {
	in := new(kinesis.SubscribeToShardInput)
	if err := decodeInput(body, in); err != nil {
		writeError(w, &smithy.GenericAPIError{Code: "SerializationException", Message: err.Error()})
		return
	}
	sub, err := h.backend.subscribe(callerContext(r), in)
	if err != nil {
		writeError(w, err)
		return
	}
	if !sub.running.CompareAndSwap(false, true) {
		return
	}
	w.Header().Set("Content-Type", "application/vnd.amazon.eventstream")
	w.WriteHeader(http.StatusOK)
	rc := http.NewResponseController(w)
	_ = rc.Flush()
	conn, _ := r.Context().Value(connKey{}).(net.Conn)
	sink := &httpSink{w: w, rc: rc, conn: conn, gone: r.Context().Done()}
	sub.run(sink)
	if sink.reset.Load() {
		// net/http resets the stream of a handler that panics with
		// ErrAbortHandler, without logging it.
		panic(http.ErrAbortHandler)
	}
}

// httpSink writes a subscription's frames to an HTTP/2 response.
type httpSink struct {
	w     http.ResponseWriter
	rc    *http.ResponseController
	conn  net.Conn
	gone  <-chan struct{}
	reset atomic.Bool // the handler resets the stream when the pump returns
}

func (s *httpSink) Write(p []byte) (int, error) {
	n, err := s.w.Write(p)
	if err != nil {
		return n, err
	}
	return n, s.rc.Flush()
}

// Cut drops the TCP connection: the client's HTTP/2 transport reports
// io.ErrUnexpectedEOF to every stream on it. The HTTP/2 server flushes
// its connection's buffer just after a handler's flush returns, so the
// half event is given a moment to leave first.
func (s *httpSink) Cut(reset bool) {
	if reset {
		s.reset.Store(true)
		// A write blocked on the client's flow control fails now.
		_ = s.rc.SetWriteDeadline(time.Now())
		return
	}
	time.Sleep(20 * time.Millisecond)
	if s.conn != nil {
		_ = s.conn.Close()
	}
}

func (s *httpSink) Gone() <-chan struct{} { return s.gone }
