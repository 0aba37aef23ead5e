package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/kinesisgen/kinesisgen/runtime"
	"github.com/kinesisgen/kinesisgen/runtime/kinesistest"
)

// The command end to end: every click is archived once, in its shard's
// file, and each user's clicks are in publish order.
func TestRunArchivesEveryClick(t *testing.T) {
	dir := t.TempDir()
	var out bytes.Buffer
	if err := run(t.Context(), []string{"-dir", dir, "-n", "300", "-users", "12"}, &out); err != nil {
		t.Fatalf("run: %v\n%s", err, out.String())
	}
	if !strings.Contains(out.String(), "archived 300 clicks") {
		t.Errorf("output: %s", out.String())
	}
	files, _ := filepath.Glob(filepath.Join(dir, "*.jsonl"))
	if len(files) < 2 {
		t.Errorf("%d shard files, want clicks spread over the 4 shards", len(files))
	}
	seen := map[int]bool{}
	last := map[string]int{} // user -> last click id
	userFile := map[string]string{}
	for _, name := range files {
		f, err := os.Open(name)
		if err != nil {
			t.Fatal(err)
		}
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			var l Line
			if err := json.Unmarshal(sc.Bytes(), &l); err != nil {
				t.Fatalf("%s: %v", name, err)
			}
			c := l.Click
			if seen[c.ID] {
				t.Errorf("click %d archived twice", c.ID)
			}
			seen[c.ID] = true
			if f, ok := userFile[c.User]; ok && f != name {
				t.Errorf("user %s in %s and %s: a key belongs to one shard", c.User, f, name)
			}
			userFile[c.User] = name
			if c.ID <= last[c.User] {
				t.Errorf("user %s: click %d after %d", c.User, c.ID, last[c.User])
			}
			last[c.User] = c.ID
		}
		f.Close()
	}
	if len(seen) != 300 {
		t.Errorf("%d clicks archived, want 300", len(seen))
	}
}

// The records come through SubscribeToShard, not GetRecords.
func TestArchiveReadsByFanOut(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), 15*time.Second)
	defer cancel()
	b, srv := kinesistest.NewBrokerServer(runtime.WithApplication("archiver"))
	archive := NewArchive(t.TempDir(), 20)
	defer archive.Close()
	if err := Mount(b, archive); err != nil {
		t.Fatal(err)
	}
	if err := b.Connect(ctx); err != nil {
		t.Fatal(err)
	}
	defer func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := b.Shutdown(ctx); err != nil {
			t.Errorf("shutdown: %v", err)
		}
	}()
	clicks := NewClickPublisher(b)
	for i := range 20 {
		if err := clicks.Message(Click{ID: i + 1, User: fmt.Sprint(i)}).PartitionKey(fmt.Sprint(i)).Publish(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if err := archive.Wait(ctx); err != nil {
		t.Fatal(err)
	}
	if n := srv.Calls(kinesistest.OpSubscribeToShard); n < 4 {
		t.Errorf("%d SubscribeToShard calls, want one per shard at least", n)
	}
	if n := srv.Calls(kinesistest.OpGetRecords); n != 0 {
		t.Errorf("%d GetRecords calls, want none", n)
	}
	subs := srv.Subscriptions("clicks")
	if len(subs) != 4 || subs[0].Consumer != "archiver" {
		t.Errorf("subscriptions %+v, want 4 of consumer archiver", subs)
	}
}

// The same over the wire: the SDK's SubscribeToShard event stream over
// HTTP/2, as against the service.
func TestRunOverTheWire(t *testing.T) {
	ep := kinesistest.ServeLocal(t)
	var out bytes.Buffer
	if err := run(t.Context(), []string{"-endpoint", ep.URL(), "-dir", t.TempDir(), "-n", "50"}, &out); err != nil {
		t.Fatalf("run: %v\n%s", err, out.String())
	}
	if !strings.Contains(out.String(), "archived 50 clicks") {
		t.Errorf("output: %s", out.String())
	}
}

func TestRunBadFlag(t *testing.T) {
	if err := run(t.Context(), []string{"-n", "0"}, new(bytes.Buffer)); err == nil {
		t.Fatal("run -n 0: no error")
	}
}
