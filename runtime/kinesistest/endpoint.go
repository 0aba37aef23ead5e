package kinesistest

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"math/big"
	"net"
	"net/http"
	"sync"
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
// (awsJson1_1) and the Java SDK's CBOR (application/x-amz-cbor-1.1, for
// every operation but SubscribeToShard), SubscribeToShard as an event
// stream, and ListStreams, DescribeStream and UpdateShardCount besides
// kinesisapi.API's operations. The Go SDK, the AWS CLI, boto3 and the Java
// SDK reach it with their endpoint URL set to URL and any credentials; a
// Java client that subscribes (the KCL's enhanced fan-out) sets
// AWS_CBOR_DISABLE=1, as the event stream is JSON only. cmd/kinesislocal
// is this type as a command.
type Endpoint struct {
	backend *Server
	srv     *http.Server
	l       net.Listener
	served  chan struct{}
	certPEM []byte         // ListenTLS: the self-signed certificate
	roots   *x509.CertPool // ListenTLS: a pool holding it

	mu      sync.Mutex
	clients []*http.Transport // made by Client, for Close
}

// Listen serves s on addr ("127.0.0.1:0" picks a free loopback port) until
// Close. s's fault hooks, throttling and subscription limits apply to the
// network clients as to in-process ones.
func Listen(s *Server, addr string) (*Endpoint, error) {
	return listen(s, addr, false)
}

// ListenTLS is Listen over TLS (HTTP/2 negotiated by ALPN, HTTP/1.1 too),
// for clients that speak HTTP/2 only over TLS (the Java SDK's SubscribeToShard,
// the KCL), with a fresh self-signed certificate for localhost, 127.0.0.1,
// ::1 and addr's host. Clients trust it from CertificatePEM (AWS_CA_BUNDLE
// names such a file for the AWS CLI, boto3 and the Go SDK); Client does.
func ListenTLS(s *Server, addr string) (*Endpoint, error) {
	return listen(s, addr, true)
}

func listen(s *Server, addr string, withTLS bool) (*Endpoint, error) {
	var cert tls.Certificate
	var certPEM []byte
	if withTLS {
		var err error
		if cert, certPEM, err = selfSigned(addr); err != nil {
			return nil, err
		}
	}
	l, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, err
	}
	front := &HTTPServer{backend: s}
	var protocols http.Protocols
	protocols.SetHTTP1(true)
	if withTLS {
		protocols.SetHTTP2(true)
	} else {
		protocols.SetUnencryptedHTTP2(true)
	}
	e := &Endpoint{backend: s, l: l, served: make(chan struct{}), certPEM: certPEM}
	e.srv = &http.Server{
		Handler:           withCBOR(withEndpointOperations(s, front.serve)),
		Protocols:         &protocols,
		ReadHeaderTimeout: 10 * time.Second,
		ConnContext: func(ctx context.Context, c net.Conn) context.Context {
			return context.WithValue(ctx, connKey{}, c)
		},
	}
	if withTLS {
		e.srv.TLSConfig = &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}
		e.roots = x509.NewCertPool()
		e.roots.AppendCertsFromPEM(certPEM)
	}
	go func() {
		defer close(e.served)
		if withTLS {
			_ = e.srv.ServeTLS(l, "", "")
			return
		}
		_ = e.srv.Serve(l)
	}()
	return e, nil
}

// selfSigned makes a certificate for loopback and addr's host, valid for a
// year.
func selfSigned(addr string) (tls.Certificate, []byte, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return tls.Certificate{}, nil, err
	}
	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 64))
	if err != nil {
		return tls.Certificate{}, nil, err
	}
	tmpl := &x509.Certificate{
		SerialNumber:          serial,
		Subject:               pkix.Name{CommonName: "kinesislocal"},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(365 * 24 * time.Hour),
		KeyUsage:              x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign,
		ExtKeyUsage:           []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		BasicConstraintsValid: true,
		IsCA:                  true,
		DNSNames:              []string{"localhost"},
		IPAddresses:           []net.IP{net.IPv4(127, 0, 0, 1), net.IPv6loopback},
	}
	if host, _, err := net.SplitHostPort(addr); err == nil && host != "" {
		if ip := net.ParseIP(host); ip != nil {
			tmpl.IPAddresses = append(tmpl.IPAddresses, ip)
		} else if host != "localhost" {
			tmpl.DNSNames = append(tmpl.DNSNames, host)
		}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return tls.Certificate{}, nil, err
	}
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), nil
}

// URL is the endpoint to give clients: http://HOST:PORT, or https:// under
// ListenTLS.
func (e *Endpoint) URL() string {
	if e.certPEM != nil {
		return "https://" + e.l.Addr().String()
	}
	return "http://" + e.l.Addr().String()
}

// CertificatePEM is the self-signed certificate of a ListenTLS endpoint, in
// PEM (nil for Listen's plain HTTP).
func (e *Endpoint) CertificatePEM() []byte { return e.certPEM }

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
	// An HTTP/2 server that has sent GOAWAY waits a second for the client
	// to hang up an idle connection; the clients Client made hang up now.
	e.mu.Lock()
	for _, t := range e.clients {
		t.CloseIdleConnections()
	}
	e.mu.Unlock()
	err := <-shut
	if errors.Is(err, context.DeadlineExceeded) {
		err = e.srv.Close()
	}
	<-e.served
	return err
}

// Client returns a *kinesis.Client for the endpoint as an application would
// make one: region us-east-1, static credentials, the SDK's default
// retries, and HTTP/2 (with prior knowledge on plain HTTP; trusting the
// certificate under TLS), so that SubscribeToShard runs over HTTP/2 as it
// does against the service. optFns change any of it.
func (e *Endpoint) Client(optFns ...func(*kinesis.Options)) *kinesis.Client {
	var protocols http.Protocols
	t := http.DefaultTransport.(*http.Transport).Clone()
	if e.roots != nil {
		protocols.SetHTTP2(true)
		t.TLSClientConfig = &tls.Config{RootCAs: e.roots, MinVersion: tls.VersionTLS12}
	} else {
		protocols.SetUnencryptedHTTP2(true)
	}
	t.Protocols = &protocols
	e.mu.Lock()
	e.clients = append(e.clients, t)
	e.mu.Unlock()
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
