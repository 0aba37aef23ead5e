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
// (about 400 KiB); 1, 2 and 8 measured alike, within the rounds' spread.
const replayAggsPerRequest = 8

// replayPublish sends the prebuilt requests of mode (bare-replay or
// agg-replay) for events into stream.
func replayPublish(ctx context.Context, o options, mode, stream string, events []kbench.Event) (measure, error) {
	bodies, err := replayBodies(ctx, o, mode, stream, events)
	if err != nil {
		return measure{}, err
	}
	hc := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: o.bulkCallers}}
	t0, c0, s0 := time.Now(), benchkit.CPUTime(), procCPU(o.pid)
	var next atomic.Int64
	err = benchkit.Parallel(o.bulkCallers, func() error {
		for _, body := range bodies[next.Add(1)-1] {
			if err := replaySend(ctx, hc, o.endpoint, body); err != nil {
				return err
			}
		}
		return nil
	})
	return measure{time.Since(t0), benchkit.CPUTime() - c0, procCPU(o.pid) - s0, 0, 0}, err
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
	mine := make([][]int, o.bulkCallers)
	for i := range o.n {
		g := (i % o.keys) % o.bulkCallers
		mine[g] = append(mine[g], i)
	}
	var shards []shard.Info
	if mode == "agg-replay" {
		cfg, _ := kbench.Config()
		l, err := shard.List(ctx, kbench.Client(cfg, o.endpoint), stream)
		if err != nil {
			return nil, err
		}
		for _, id := range l.IDs() {
			info, _ := l.Shard(id)
			shards = append(shards, info)
		}
	}
	bodies := make([][][]byte, o.bulkCallers)
	for g, ids := range mine {
		type rec struct{ data, hashKey, key string }
		var recs []rec
		if mode == "bare-replay" {
			for _, i := range ids {
				data, _ := json.Marshal(&events[i])
				recs = append(recs, rec{data: base64.StdEncoding.EncodeToString(data), key: key(i, o.keys)})
			}
			for len(recs) > 0 {
				n := min(500, len(recs))
				bodies[g] = append(bodies[g], replayBody(stream, len(recs[:n]), func(j int) (string, string, string) {
					return recs[j].data, recs[j].hashKey, recs[j].key
				}))
				recs = recs[n:]
			}
			continue
		}
		open := make([]*kpl.Builder, len(shards))
		seal := func(s int) {
			b := open[s]
			recs = append(recs, rec{data: base64.StdEncoding.EncodeToString(b.Bytes()), hashKey: shards[s].StartingHashKey, key: b.KeyAt(0)})
			open[s] = nil
		}
		for _, i := range ids {
			k := key(i, o.keys)
			data, _ := json.Marshal(&events[i])
			s := 0
			for s < len(shards) && !shards[s].Range.Contains(shard.HashKeyOf(k)) {
				s++
			}
			if s == len(shards) {
				return nil, fmt.Errorf("no shard for key %q", k)
			}
			if open[s] != nil && !open[s].AddWithin(k, data, kgrt.DefaultAggregateBytes) {
				seal(s)
			}
			if open[s] == nil {
				open[s] = &kpl.Builder{}
				open[s].Add(k, data)
			}
		}
		for s := range open {
			if open[s] != nil {
				seal(s)
			}
		}
		for len(recs) > 0 {
			n := min(replayAggsPerRequest, len(recs))
			bodies[g] = append(bodies[g], replayBody(stream, n, func(j int) (string, string, string) {
				return recs[j].data, recs[j].hashKey, recs[j].key
			}))
			recs = recs[n:]
		}
	}
	return bodies, nil
}

// replayBody is the JSON body of a PutRecords request of n records, each
// given as base64 data, an ExplicitHashKey (or "") and a partition key.
func replayBody(stream string, n int, rec func(j int) (data, hashKey, key string)) []byte {
	var b bytes.Buffer
	b.WriteString(`{"Records":[`)
	for j := range n {
		data, hashKey, key := rec(j)
		if j > 0 {
			b.WriteByte(',')
		}
		b.WriteString(`{"Data":"` + data + `"`)
		if hashKey != "" {
			b.WriteString(`,"ExplicitHashKey":"` + hashKey + `"`)
		}
		b.WriteString(`,"PartitionKey":` + strconv.Quote(key) + `}`)
	}
	b.WriteString(`],"StreamName":` + strconv.Quote(stream) + `}`)
	return b.Bytes()
}
