package shard

import (
	"context"
	"time"

	awsmiddleware "github.com/aws/aws-sdk-go-v2/aws/middleware"
	"github.com/aws/aws-sdk-go-v2/service/kinesis"
	"github.com/aws/aws-sdk-go-v2/service/kinesis/types"
	"github.com/aws/smithy-go/middleware"
)

// distribution is how the stream places records on shards, as the last
// DescribeStreamSummary said (read again with every shard listing of an
// on-demand stream, every provisionedEvery-th of a provisioned one).
//
// It decides the KPL hash-range filter (userRecords): the filter drops a
// sub-record whose key hashes outside its shard, which is right only for
// records the service placed by key. On an AUTO stream the service places
// records anywhere, so filtering would drop most sub-records of every
// aggregate: records lost without a word. The filter therefore applies
// only to records known to have been placed by key:
//
//   - on a provisioned stream (it cannot be AUTO), to every record;
//   - on an on-demand stream with USER_PARTITION_KEY, to the records that
//     arrived since this coordinator saw it so (keyedSince): records
//     older than that may come from an AUTO period (the strategy can be
//     switched at any time, and switching back does not move records);
//   - on an AUTO stream, or while the strategy is unknown (the describe
//     failed), to none.
//
// A record left unfiltered by mistake is at worst delivered twice (a KPL
// resend after a reshard), which at-least-once delivery allows; one
// filtered by mistake is lost.
type distribution struct {
	known      bool
	auto       bool
	onDemand   bool
	keyedSince time.Time // service time; zero: every record (provisioned)
}

// provisionedEvery is how many shard listings of a provisioned stream
// read its distribution once: it cannot be AUTO before it has been
// switched to on-demand (minutes) and then to AUTO (a second call), so
// reading it at every listing would only spend DescribeStreamSummary's
// small account-wide rate (20 a second, shared by every instance).
const provisionedEvery = 6

// filters reports whether a sub-record of a record that arrived at arrival
// is subject to the hash-range filter.
func (d *distribution) filters(arrival time.Time) bool {
	return d != nil && d.known && !d.auto && !arrival.Before(d.keyedSince)
}

// describeDistribution reads the stream's distribution strategy and
// stores it; a failure keeps the last one (logged: the next listing tries
// again). It reports a change to OnDistribution and the log.
func (c *Coordinator) describeDistribution(ctx context.Context) {
	if d := c.dist.Load(); d != nil && d.known && !d.onDemand {
		if c.distSkip++; c.distSkip < provisionedEvery {
			return
		}
	}
	c.distSkip = 0
	in := &kinesis.DescribeStreamSummaryInput{}
	in.StreamName, in.StreamARN = streamRef(c.cfg.Stream)
	out, err := c.cfg.Client.DescribeStreamSummary(ctx, in)
	if err != nil || out.StreamDescriptionSummary == nil {
		if err != nil && ctx.Err() == nil {
			c.log.Warn("describing the stream's record distribution failed; keeping the last one", "err", err)
		}
		return
	}
	sum := out.StreamDescriptionSummary
	onDemand := sum.StreamModeDetails != nil && sum.StreamModeDetails.StreamMode == types.StreamModeOnDemand
	auto := sum.RecordDistributionStrategy == types.RecordDistributionStrategyAuto
	prev := c.dist.Load()
	next := &distribution{known: true, auto: auto, onDemand: onDemand}
	switch {
	case auto:
	case !onDemand && prev == nil:
		// Provisioned from the first look: every record was placed by key
		// (a backend without modes, such as kinesalite, says nothing).
	case prev != nil && prev.known && !prev.auto:
		next.keyedSince = prev.keyedSince
	default:
		// Key-placed from now on; what arrived before may not be.
		next.keyedSince = serviceTimeAfter(out.ResultMetadata)
	}
	c.dist.Store(next)
	if prev != nil && prev.known && prev.auto == auto {
		return
	}
	if prev != nil && prev.known || auto {
		c.log.Warn("the stream's record distribution strategy", "auto", auto,
			"note", "on AUTO the service places records on any shard: no key's records stay on one shard")
	}
	if c.cfg.OnDistribution != nil {
		c.cfg.OnDistribution(auto)
	}
}

// AutoDistribution reports whether the stream was AUTO (records placed on
// any shard, keys ignored) at the last shard listing.
func (c *Coordinator) AutoDistribution() bool {
	d := c.dist.Load()
	return d != nil && d.auto
}

// serviceTimeAfter is a time at or after the answer of the call whose
// metadata is md (the mirror of serviceTime): the service's Date, which has
// whole seconds, plus a second and the margin, else the local clock plus
// localPinMargin.
func serviceTimeAfter(md middleware.Metadata) time.Time {
	if st, ok := awsmiddleware.GetServerTime(md); ok {
		return st.Add(time.Second + serverPinMargin)
	}
	return time.Now().Add(localPinMargin)
}
