package main

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/kinesisgen/kinesisgen/bench/internal/kbench"
	"github.com/kinesisgen/kinesisgen/internal/bench/benchkit"
	kgrt "github.com/kinesisgen/kinesisgen/runtime"
	"github.com/kinesisgen/kinesisgen/runtime/kpl"
	"github.com/kinesisgen/kinesisgen/runtime/shard"
)

// The replay modes measure the server alone: every PutRecords request body
// is built before the clock starts (bare-replay: the bare loop's requests,
// 500 plain records each; agg-replay: 50 KiB aggregates by shard, as
// agg-all makes them, eight to a request), then sent over plain HTTP from
// -bulkcallers goroutines, each sending the requests of the keys it owns
// in order. The client then costs next to nothing per message (writing the
// bytes, reading the answer), so the two modes' ratio is the most any
// client could reach against this server on this machine, and the server's
// CPU per message is its own floor.

// replayAggsPerRequest is how many aggregates go in one replayed request
// (about 400 KiB). Three, five and eight cost kinesalite alike, within the
// rounds' spread (3.4–4.6 µs of server CPU a message, two runs of three
// rounds each); one to a request cost it 4.5–5.6: each request has a cost
// of its own, about a third of a millisecond of the server's CPU.
const replayAggsPerRequest = 8

// replayPublish sends the prebuilt requests of mode (bare-replay or
// agg-replay) for events into stream.
func replayPublish(ctx context.Context, o options, mode, stream string, events []kbench.Event) (measure, error) {
	bodies, err := replayBodies(ctx, o, mode, stream, events)
	if err != nil {
		return measure{}, err
	}
	hc := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: o.bulkCallers}}
	clock := startClock(o)
	var next atomic.Int64
	err = benchkit.Parallel(o.bulkCallers, func() error {
		for _, body := range bodies[next.Add(1)-1] {
			if err := replaySend(ctx, hc, o.endpoint, body); err != nil {
				return err
			}
		}
		return nil
	})
	return clock.measure(), err
}

// replaySend posts one PutRecords body, as an SDK would (the server checks
// that a signature is there, not what it signs), and fails unless every
// record was stored.
func replaySend(ctx context.Context, hc *http.Client, endpoint string, body []byte) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, endpoint, bytes.NewReader(body))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/x-amz-json-1.1")
	req.Header.Set("X-Amz-Target", "Kinesis_20131202.PutRecords")
	req.Header.Set("X-Amz-Date", time.Now().UTC().Format("20060102T150405Z"))
	req.Header.Set("Authorization", "AWS4-HMAC-SHA256 Credential=x/20260101/us-east-1/kinesis/aws4_request, SignedHeaders=host;x-amz-date;x-amz-target, Signature=0")
	resp, err := hc.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	out, err := io.ReadAll(resp.Body)
	if err != nil {
		return err
	}
	if resp.StatusCode != http.StatusOK || !bytes.Contains(out, []byte(`"FailedRecordCount":0`)) {
		return fmt.Errorf("PutRecords: %s: %.200s", resp.Status, out)
	}
	return nil
}

// replayBodies builds each caller's request bodies, in the order it sends
// them: caller g owns the keys k with k%bulkcallers == g, as in agg-all.
func replayBodies(ctx context.Context, o options, mode, stream string, events []kbench.Event) ([][][]byte, error) {
	var lineage *shard.Lineage
	if mode == "agg-replay" {
		cfg, _ := kbench.Config()
		l, err := shard.List(ctx, kbench.Client(cfg, o.endpoint), stream)
		if err != nil {
			return nil, err
		}
		lineage = l
	}
	bodies := make([][][]byte, o.bulkCallers)
	for g, ids := range byOwner(o, o.bulkCallers) {
		var recs []replayRecord
		perRequest := 500
		if lineage == nil {
			for _, i := range ids {
				data, _ := json.Marshal(&events[i])
				recs = append(recs, replayRecord{data: base64.StdEncoding.EncodeToString(data), key: key(i, o.keys)})
			}
		} else {
			aggs, err := replayAggregates(lineage, o, ids, events)
			if err != nil {
				return nil, err
			}
			recs, perRequest = aggs, replayAggsPerRequest
		}
		for len(recs) > 0 {
			n := min(perRequest, len(recs))
			bodies[g] = append(bodies[g], replayBody(stream, recs[:n]))
			recs = recs[n:]
		}
	}
	return bodies, nil
}

// replayRecord is one record of a replayed request: base64 data, an
// ExplicitHashKey (or "") and a partition key.
type replayRecord struct{ data, hashKey, key string }

// replayAggregates packs the messages ids, in order, into aggregates of up
// to DefaultAggregateBytes by the open shard each key hashes into, each
// put with its shard's starting hash key, as agg-all's aggregator does.
func replayAggregates(l *shard.Lineage, o options, ids []int, events []kbench.Event) ([]replayRecord, error) {
	var recs []replayRecord
	open := map[string]*kpl.Builder{}
	seal := func(id string) {
		info, _ := l.Shard(id)
		b := open[id]
		recs = append(recs, replayRecord{data: base64.StdEncoding.EncodeToString(b.Bytes()), hashKey: info.StartingHashKey, key: b.KeyAt(0)})
		delete(open, id)
	}
	for _, i := range ids {
		k := key(i, o.keys)
		id, ok := l.OpenShardFor(k)
		if !ok {
			return nil, fmt.Errorf("no open shard for key %q", k)
		}
		data, _ := json.Marshal(&events[i])
		if b := open[id]; b != nil && !b.AddWithin(k, data, kgrt.DefaultAggregateBytes) {
			seal(id)
		}
		if open[id] == nil {
			open[id] = &kpl.Builder{}
			open[id].Add(k, data)
		}
	}
	for _, id := range l.IDs() { // in a fixed order
		if open[id] != nil {
			seal(id)
		}
	}
	return recs, nil
}

// replayBody is the JSON body of a PutRecords request of recs.
func replayBody(stream string, recs []replayRecord) []byte {
	var b bytes.Buffer
	b.WriteString(`{"Records":[`)
	for j, r := range recs {
		if j > 0 {
			b.WriteByte(',')
		}
		b.WriteString(`{"Data":"` + r.data + `"`)
		if r.hashKey != "" {
			b.WriteString(`,"ExplicitHashKey":"` + r.hashKey + `"`)
		}
		b.WriteString(`,"PartitionKey":` + strconv.Quote(r.key) + `}`)
	}
	b.WriteString(`],"StreamName":` + strconv.Quote(stream) + `}`)
	return b.Bytes()
}
