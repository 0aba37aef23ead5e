package clash_test

import (
	"context"
	"testing"
	"time"

	"github.com/kinesisgen/kinesisgen/generated_test/clash"
	"github.com/kinesisgen/kinesisgen/generated_test/clash/ctx"
	"github.com/kinesisgen/kinesisgen/generated_test/clash/d"
	"github.com/kinesisgen/kinesisgen/generated_test/clash/events"
	"github.com/kinesisgen/kinesisgen/generated_test/clash/msg"
	"github.com/kinesisgen/kinesisgen/generated_test/clash/orders"
	"github.com/kinesisgen/kinesisgen/generated_test/clash/v"
	"github.com/kinesisgen/kinesisgen/generated_test/headers"
	"github.com/kinesisgen/kinesisgen/runtime"
	"github.com/kinesisgen/kinesisgen/runtime/kinesistest"
)

// TestMountDelivers mounts the handlers whose names clashed with the
// generated file's and sees each get its message and headers.
func TestMountDelivers(t *testing.T) {
	c, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	b, srv := kinesistest.NewBrokerServer()
	for _, s := range []string{"clash.placed", "clash.shipped", "clash.hdr", "clash.notes", "clash.memos", "clash.jots", "clash.scraps", "clash.tagged"} {
		if err := srv.AddStream(s, 1); err != nil {
			t.Fatal(err)
		}
	}
	if err := clash.Mount(b, &clash.Orders{}); err != nil {
		t.Fatalf("Mount: %v", err)
	}
	if err := b.Connect(c); err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := b.Shutdown(context.Background()); err != nil {
			t.Error(err)
		}
	}()
	publish(t, c, b, "clash.placed", orders.Placed{ID: 1})
	publish(t, c, b, "clash.shipped", events.Shipped{ID: 2})
	publish(t, c, b, "clash.hdr", msg.Hdr{Customer: "c3"})
	must(t, clash.NewNotePublisher(b).Message(clash.Note{Text: "n"}).Headers(msg.Hdr{Customer: "c4"}).Publish(c))
	must(t, clash.NewMemoPublisher(b).Message(clash.Memo{Text: "m"}).Headers(ctx.Meta{Trace: "t5"}).Publish(c))
	must(t, clash.NewJotPublisher(b).Message(clash.Jot{Text: "j"}).Headers(d.Meta{Trace: "t6"}).Publish(c))
	must(t, clash.NewScrapPublisher(b).Message(clash.Scrap{Text: "s"}).Headers(headers.All{Key: "k7"}).Publish(c))
	must(t, clash.NewTaggedPublisher(b).Message(clash.Tagged{N: 8}).Headers(clash.Key{ID: v.ID("id8")}).Publish(c))
	want := map[any]bool{
		orders.Placed{ID: 1}: true, events.Shipped{ID: 2}: true, msg.Hdr{Customer: "c3"}: true, msg.Hdr{Customer: "c4"}: true,
		ctx.Meta{Trace: "t5"}: true, d.Meta{Trace: "t6"}: true, clash.Key{ID: "id8"}: true,
	}
	for len(want) > 0 {
		select {
		case got := <-clash.Calls:
			if all, ok := got.(headers.All); ok {
				if all.Key != "k7" {
					t.Errorf("OnScrap got %+v", all)
				}
				continue
			}
			if !want[got] {
				t.Errorf("unexpected call %#v", got)
			}
			delete(want, got)
		case <-c.Done():
			t.Fatalf("still waiting for %v", want)
		}
	}
}

func publish[T any](t *testing.T, c context.Context, b *runtime.Broker, stream string, m T) {
	t.Helper()
	must(t, runtime.NewPublisher[T](b, runtime.PublisherSpec{Stream: stream}).Publish(c, m))
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}
