package runtime_test

import (
	"crypto/md5"
	"encoding/hex"
	"log/slog"
	"strings"
	"testing"

	"github.com/kinesisgen/kinesisgen/internal/faultproxy"
	"github.com/kinesisgen/kinesisgen/internal/livetest"
	"github.com/kinesisgen/kinesisgen/runtime"
)

// A PutRecords call whose records the server stored but whose answer never
// arrived (the connection reset after the server answered) is sent again,
// and the resend is the publisher's own: logged with its key, so whoever
// finds a record stored twice can tell why. Its key's order holds: alice's
// records read back as 1, 1, 2. Before, the SDK's retryer resent the call
// under the publisher, unseen. (kinesalite only: the fault proxy speaks
// plain HTTP, the in-process server's HTTP front TLS.)
func TestLostPutRecordsAnswerIsResentInViewKinesalite(t *testing.T) {
	url := livetest.KinesisEndpoint(t)
	api, _ := liveClient(url)
	testLostPutRecordsAnswer(newEnvWith(t, api), url)
}

func testLostPutRecordsAnswer(e *env, upstream string) {
	t := e.t
	p, err := faultproxy.New(upstream, 3)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = p.Close() })
	orders := e.newStream("orders", 1)

	// The runtime's own client, as an application gets it from an endpoint.
	logs := &syncBuffer{}
	b := runtime.NewBroker(runtime.WithEndpoint(p.URL()), runtime.WithRegion("us-east-1"), runtime.WithTestCredentials(),
		runtime.WithLogger(slog.New(slog.NewJSONHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug}))))
	e.connect(b)
	pub := runtime.NewPublisher[order](b, runtime.PublisherSpec{Stream: orders})

	if err := p.Set(faultproxy.Rule{Ops: []string{"PutRecords"}, Fault: faultproxy.ResetAfter, Rate: 1, Max: 1}); err != nil {
		t.Fatal(err)
	}
	for id := 1; id <= 2; id++ {
		e.publish(pub, order{ID: id, Customer: "alice"})
	}
	if n := p.Requests("PutRecords"); n != 3 {
		t.Errorf("%d PutRecords requests, want 3: the lost one, its resend, the second record's", n)
	}
	line := logs.line("kinesis publish retry")
	sum := md5.Sum([]byte("alice"))
	if line == "" || !strings.Contains(line, hex.EncodeToString(sum[:])) {
		t.Errorf("no publish retry logged for alice's key; the publisher's log:\n%s", logs.String())
	}
	if n := strings.Count(logs.String(), `"msg":"kinesis publish retry"`); n != 1 {
		t.Errorf("%d publish retries logged, want 1", n)
	}

	h, ch := collect()
	reader := e.broker()
	mustSubscribe(e, reader, orders, h, runtime.StartAt(runtime.Horizon()))
	e.connect(reader)
	got := receive(e, ch, 3)
	if ids := ids(got); ids[0] != 1 || ids[1] != 1 || ids[2] != 2 {
		t.Fatalf("alice's records read as %v, want [1 1 2]: the first stored twice, in order", ids)
	}
	if got[0].d.SequenceNumber == got[1].d.SequenceNumber {
		t.Fatalf("record 1 read twice at one sequence number %s: a redelivery, not the resend", got[0].d.SequenceNumber)
	}
}
