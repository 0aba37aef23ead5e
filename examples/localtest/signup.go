// Package main is an application tested against the local Kinesis
// emulator: a signup service whose test (signup_test.go) runs it over the
// wire, with the SDK's real client, on a loopback port that
// kinesistest.ServeLocal opens for the test. Run by hand against
// cmd/kinesislocal:
//
//	go run ./cmd/kinesislocal &
//	go run ./examples/localtest -endpoint http://127.0.0.1:4567
package main

//go:generate go run github.com/kinesisgen/kinesisgen/cmd/kinesisgen

import (
	"context"
	"maps"
	"sync"
)

// Signup is published when someone creates an account, keyed by email.
//
//kinesis:message stream=signups
type Signup struct {
	Email string `json:"email"`
	Name  string `json:"name"`
}

// Welcomer greets each new account once. Delivery is at least once, so it
// keeps the emails it has greeted and greets a repeated signup only once.
type Welcomer struct {
	mu      sync.Mutex
	greeted map[string]string // email -> greeting
	changed chan struct{}     // closed and replaced on every new greeting
}

// NewWelcomer returns a Welcomer that has greeted nobody.
func NewWelcomer() *Welcomer {
	return &Welcomer{greeted: map[string]string{}, changed: make(chan struct{})}
}

// Welcome handles a signup. A new subscriber starts at the tip of the
// stream (or its start, when create_if_missing just created it): what is
// published once Connect has returned is read.
//
//kinesis:subscriber stream=signups create_if_missing=2
func (w *Welcomer) Welcome(ctx context.Context, s Signup) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if _, ok := w.greeted[s.Email]; ok {
		return nil // a redelivery: already greeted
	}
	w.greeted[s.Email] = "Welcome, " + s.Name + "!"
	close(w.changed)
	w.changed = make(chan struct{})
	return nil
}

// WaitFor waits until n accounts are greeted, and returns their greetings.
func (w *Welcomer) WaitFor(ctx context.Context, n int) (map[string]string, error) {
	for {
		w.mu.Lock()
		if len(w.greeted) >= n {
			out := maps.Clone(w.greeted)
			w.mu.Unlock()
			return out, nil
		}
		changed := w.changed
		w.mu.Unlock()
		select {
		case <-changed:
		case <-ctx.Done():
			return nil, context.Cause(ctx)
		}
	}
}
