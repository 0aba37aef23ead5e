package kinesistest

import (
	"context"
	"errors"
	"net"
	"net/http"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/kinesis"

	"github.com/kinesisgen/kinesisgen/runtime"
)

// Endpoint serves a Server on a TCP address for any Kinesis client, as
// kinesalite and kinesis-mock do: plain HTTP (no TLS), HTTP/1.1 and HTTP/2
// with prior knowledge (h2c) on one port, the service's JSON protocol
// (awsJson1_1), SubscribeToShard as an event stream, and ListStreams and
// DescribeStream besides kinesisapi.API's operations. The Go SDK, the
// AWS CLI, boto3 and the Java SDK (with CBOR disabled:
// AWS_CBOR_DISABLE=1) reach it with their endpoint URL set to URL and any
// credentials. cmd/kinesislocal is this type as a command.
type Endpoint struct {
	backend *Server
	srv     *http.Server
	l       net.Listener
	served  chan struct{}
}

// Listen serves s on addr ("127.0.0.1:0" picks a free loopback port) until
// Close. s's fault hooks, throttling and subscription limits apply to the
// network clients as to in-process ones.
func Listen(s *Server, addr string) (*Endpoint, error) {
	l, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, err
	}
	front := &HTTPServer{backend: s}
	var protocols http.Protocols
	protocols.SetHTTP1(true)
	protocols.SetUnencryptedHTTP2(true)
	e := &Endpoint{backend: s, l: l, served: make(chan struct{})}
	e.srv = &http.Server{
		Handler:           withEndpointOperations(s, front.serve),
		Protocols:         &protocols,
		ReadHeaderTimeout: 10 * time.Second,
		ConnContext: func(ctx context.Context, c net.Conn) context.Context {
			return context.WithValue(ctx, connKey{}, c)
		},
	}
	go func() {
		defer close(e.served)
		_ = e.srv.Serve(l)
	}()
	return e, nil
}

// URL is the endpoint to give clients: http://HOST:PORT.
func (e *Endpoint) URL() string { return "http://" + e.l.Addr().String() }

// Addr is the address the endpoint listens on.
func (e *Endpoint) Addr() net.Addr { return e.l.Addr() }

// Backend is the in-process server behind the endpoint.
func (e *Endpoint) Backend() *Server { return e.backend }

// Close stops taking connections, ends the open subscriptions cleanly (a
// subscriber sees its event stream end, as at the end of a subscription's
// lifetime), waits up to two seconds for the calls under way, then drops
// what is left.
func (e *Endpoint) Close() error {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	shut := make(chan error, 1)
	go func() { shut <- e.srv.Shutdown(ctx) }()
	// Shutdown waits for the handlers; a subscription's handler returns
	// only when its subscription ends. New ones are refused by now.
	for _, name := range e.backend.Streams() {
		e.backend.EndSubscriptions(name, "")
	}
	err := <-shut
	if errors.Is(err, context.DeadlineExceeded) {
		err = e.srv.Close()
	}
	<-e.served
	return err
}

// Client returns a *kinesis.Client for the endpoint as an application would
// make one: region us-east-1, static credentials, the SDK's default
// retries, and HTTP/2 with prior knowledge, so that SubscribeToShard runs
// over HTTP/2 as it does against the service. optFns change any of it.
func (e *Endpoint) Client(optFns ...func(*kinesis.Options)) *kinesis.Client {
	var protocols http.Protocols
	protocols.SetUnencryptedHTTP2(true)
	t := http.DefaultTransport.(*http.Transport).Clone()
	t.Protocols = &protocols
	o := kinesis.Options{
		Region:       "us-east-1",
		BaseEndpoint: aws.String(e.URL()),
		Credentials:  credentials.NewStaticCredentialsProvider("kinesislocal", "kinesislocal", ""),
		HTTPClient:   &http.Client{Transport: t},
	}
	return kinesis.New(o, optFns...)
}

// NewBroker returns a broker whose Kinesis client is Client: every call it
// makes crosses the network to the endpoint. opts apply after the client.
func (e *Endpoint) NewBroker(opts ...runtime.Option) *runtime.Broker {
	return runtime.NewBroker(append([]runtime.Option{runtime.WithKinesisClient(e.Client())}, opts...)...)
}

// ServeLocal starts a fresh Server (with opts) on a free loopback port for
// the test and closes it when the test ends. An application's test gets a
// broker that talks to it over the wire with the SDK's real client:
//
//	b := kinesistest.ServeLocal(t).NewBroker(runtime.WithApplication("billing"))
//
// When no loopback port can be opened (a sandbox without networking), the
// test is skipped, saying why.
func ServeLocal(tb testing.TB, opts ...Option) *Endpoint {
	tb.Helper()
	e, err := Listen(New(opts...), "127.0.0.1:0")
	if err != nil {
		tb.Skipf("kinesistest.ServeLocal: cannot serve Kinesis on a loopback port: %v", err)
	}
	tb.Cleanup(func() { _ = e.Close() })
	return e
}
