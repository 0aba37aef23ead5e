package main

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"

	"github.com/kinesisgen/kinesisgen/runtime"
	"github.com/kinesisgen/kinesisgen/runtime/kinesistest"
)

// The service against the emulator over the wire: the test publishes, the
// handler handles, the test asserts on what the handler did.
func TestWelcomeOverTheWire(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), 15*time.Second)
	defer cancel()
	b := kinesistest.ServeLocal(t).NewBroker(runtime.WithApplication("welcome"))
	w := NewWelcomer()
	if err := Mount(b, w); err != nil {
		t.Fatal(err)
	}
	if err := b.Connect(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := b.Shutdown(ctx); err != nil {
			t.Errorf("shutdown: %v", err)
		}
	})

	signups := NewSignupPublisher(b)
	// The same signup twice, as a retried publish would: one greeting.
	for _, s := range []Signup{{"ada@example.com", "Ada"}, {"ada@example.com", "Ada"}, {"alan@example.com", "Alan"}} {
		if err := signups.Message(s).PartitionKey(s.Email).Publish(ctx); err != nil {
			t.Fatal(err)
		}
	}
	got, err := w.WaitFor(ctx, 2)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{"ada@example.com": "Welcome, Ada!", "alan@example.com": "Welcome, Alan!"}
	if len(got) != len(want) {
		t.Fatalf("greeted %v, want %v", got, want)
	}
	for email, greeting := range want {
		if got[email] != greeting {
			t.Errorf("%s: greeting %q, want %q", email, got[email], greeting)
		}
	}
}

// The command as a reader runs it, pointed at the emulator's URL.
func TestRunAgainstEndpoint(t *testing.T) {
	ep := kinesistest.ServeLocal(t)
	var out bytes.Buffer
	if err := run(t.Context(), []string{"-endpoint", ep.URL(), "-n", "3"}, &out); err != nil {
		t.Fatalf("run: %v\n%s", err, out.String())
	}
	for _, line := range []string{"user1@example.com: Welcome, User 1!", "user3@example.com: Welcome, User 3!"} {
		if !strings.Contains(out.String(), line) {
			t.Errorf("output lacks %q:\n%s", line, out.String())
		}
	}
}

func TestRunBadFlag(t *testing.T) {
	if err := run(t.Context(), []string{"-n", "many"}, new(bytes.Buffer)); err == nil {
		t.Fatal("run with a bad flag: no error")
	}
}
