package sim

import (
	"context"
	"errors"
	"math"
	"sync/atomic"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/kinesisgen/kinesisgen/runtime/lease"
)

// Metered is a DynamoDB client that asks every call for the capacity it
// consumed and adds it up, so a run on a real store (dynalite) reports the
// units the server computed beside the ones Counts estimates.
type Metered struct {
	lease.DynamoDBAPI
	milliRCU, milliWCU atomic.Int64
}

var _ lease.DynamoDBAPI = (*Metered)(nil)

// Consumed returns the read and write units consumed so far.
func (m *Metered) Consumed() (rcu, wcu float64) {
	return float64(m.milliRCU.Load()) / 1000, float64(m.milliWCU.Load()) / 1000
}

func (m *Metered) add(c *types.ConsumedCapacity, write bool) {
	if c == nil {
		return
	}
	var u float64
	switch {
	case write && c.WriteCapacityUnits != nil:
		u = *c.WriteCapacityUnits
	case !write && c.ReadCapacityUnits != nil:
		u = *c.ReadCapacityUnits
	case c.CapacityUnits != nil:
		u = *c.CapacityUnits
	}
	n := int64(math.Round(u * 1000))
	if write {
		m.milliWCU.Add(n)
	} else {
		m.milliRCU.Add(n)
	}
}

func (m *Metered) GetItem(ctx context.Context, in *dynamodb.GetItemInput, o ...func(*dynamodb.Options)) (*dynamodb.GetItemOutput, error) {
	in.ReturnConsumedCapacity = types.ReturnConsumedCapacityTotal
	out, err := m.DynamoDBAPI.GetItem(ctx, in, o...)
	if err == nil {
		m.add(out.ConsumedCapacity, false)
	}
	return out, err
}

func (m *Metered) Scan(ctx context.Context, in *dynamodb.ScanInput, o ...func(*dynamodb.Options)) (*dynamodb.ScanOutput, error) {
	in.ReturnConsumedCapacity = types.ReturnConsumedCapacityTotal
	out, err := m.DynamoDBAPI.Scan(ctx, in, o...)
	if err == nil {
		m.add(out.ConsumedCapacity, false)
	}
	return out, err
}

func (m *Metered) PutItem(ctx context.Context, in *dynamodb.PutItemInput, o ...func(*dynamodb.Options)) (*dynamodb.PutItemOutput, error) {
	in.ReturnConsumedCapacity = types.ReturnConsumedCapacityTotal
	out, err := m.DynamoDBAPI.PutItem(ctx, in, o...)
	if err == nil {
		m.add(out.ConsumedCapacity, true)
	}
	return out, err
}

func (m *Metered) UpdateItem(ctx context.Context, in *dynamodb.UpdateItemInput, o ...func(*dynamodb.Options)) (*dynamodb.UpdateItemOutput, error) {
	in.ReturnConsumedCapacity = types.ReturnConsumedCapacityTotal
	out, err := m.DynamoDBAPI.UpdateItem(ctx, in, o...)
	if err == nil {
		m.add(out.ConsumedCapacity, true)
	}
	return out, err
}

func (m *Metered) DeleteItem(ctx context.Context, in *dynamodb.DeleteItemInput, o ...func(*dynamodb.Options)) (*dynamodb.DeleteItemOutput, error) {
	in.ReturnConsumedCapacity = types.ReturnConsumedCapacityTotal
	out, err := m.DynamoDBAPI.DeleteItem(ctx, in, o...)
	if err == nil {
		m.add(out.ConsumedCapacity, true)
	}
	return out, err
}

// Query passes the call on when the client has it (the DynamoDB store
// reads its members table with it, else keeps the members item).
func (m *Metered) Query(ctx context.Context, in *dynamodb.QueryInput, o ...func(*dynamodb.Options)) (*dynamodb.QueryOutput, error) {
	q, ok := m.DynamoDBAPI.(interface {
		Query(context.Context, *dynamodb.QueryInput, ...func(*dynamodb.Options)) (*dynamodb.QueryOutput, error)
	})
	if !ok {
		return nil, errors.New("sim: the client has no Query")
	}
	in.ReturnConsumedCapacity = types.ReturnConsumedCapacityTotal
	out, err := q.Query(ctx, in, o...)
	if err == nil {
		m.add(out.ConsumedCapacity, false)
	}
	return out, err
}

// BatchGetItem passes the call on when the client has it (the DynamoDB
// store's GetMany uses it then, else GetItem by GetItem).
func (m *Metered) BatchGetItem(ctx context.Context, in *dynamodb.BatchGetItemInput, o ...func(*dynamodb.Options)) (*dynamodb.BatchGetItemOutput, error) {
	bg, ok := m.DynamoDBAPI.(interface {
		BatchGetItem(context.Context, *dynamodb.BatchGetItemInput, ...func(*dynamodb.Options)) (*dynamodb.BatchGetItemOutput, error)
	})
	if !ok {
		return nil, errors.New("sim: the client has no BatchGetItem")
	}
	in.ReturnConsumedCapacity = types.ReturnConsumedCapacityTotal
	out, err := bg.BatchGetItem(ctx, in, o...)
	if err == nil {
		for i := range out.ConsumedCapacity {
			m.add(&out.ConsumedCapacity[i], false)
		}
	}
	return out, err
}
