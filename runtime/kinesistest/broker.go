package kinesistest

import "github.com/kinesisgen/kinesisgen/runtime"

// NewBroker returns a broker on a fresh in-process server: no network, no
// credentials. opts apply after the in-process client, so a later
// runtime.WithKinesisClient would replace it.
func NewBroker(opts ...runtime.Option) *runtime.Broker {
	b, _ := NewBrokerServer(opts...)
	return b
}

// NewBrokerServer is NewBroker that also returns the server, for tests that
// create streams, reshard, inject faults or count calls behind the broker.
func NewBrokerServer(opts ...runtime.Option) (*runtime.Broker, *Server) {
	s := New()
	return s.NewBroker(opts...), s
}

// NewBroker returns a broker on this server. Several brokers on one server
// behave like several processes sharing a stream (give them one lease store
// to share shards).
func (s *Server) NewBroker(opts ...runtime.Option) *runtime.Broker {
	return runtime.NewBroker(append([]runtime.Option{runtime.WithKinesisClient(s)}, opts...)...)
}
