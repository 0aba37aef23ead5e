package lease

import (
	"context"
	"errors"
	"slices"
	"strconv"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
)

// Attributes of the roster (RosterStore): the version item's counter (in
// the lease table, keyed RosterKey), and a members-table item's marks.
const (
	attrRosterVersion = "v"
	attrRoster        = "roster" // written only when true: earlier versions ignore it
	attrDead          = "dead"   // set by DeclareDead; a roster heartbeat is refused over it
)

var _ RosterStore = (*DynamoDB)(nil)

// RosterSupported reports whether the store keeps the roster: with the
// members table (MembersTable, MembersMigrating), not with the members
// item, whose every read is of every entry anyway, nor in a KCL table.
func (d *DynamoDB) RosterSupported() bool {
	return !d.PerLeaseOnly() && d.MembersLayout() != MembersItem
}

func (d *DynamoDB) noRoster(op, key string) error {
	if err := d.noMembers(op, key); err != nil {
		return err
	}
	if !d.RosterSupported() {
		return invalid(op, key, "the roster needs the members table (layout "+d.MembersLayout().String()+")")
	}
	return nil
}

// RosterVersion reads the version item: one strongly consistent GetItem
// of a small item (a read unit).
func (d *DynamoDB) RosterVersion(ctx context.Context, namespace string) (int64, error) {
	key := RosterKey(namespace)
	if err := d.begin(ctx, "roster", key); err != nil {
		return 0, err
	}
	if err := d.noRoster("roster", key); err != nil {
		return 0, err
	}
	out, err := d.client.GetItem(ctx, &dynamodb.GetItemInput{
		TableName:      &d.table,
		Key:            map[string]types.AttributeValue{attrKey: str(key)},
		ConsistentRead: aws.Bool(true),
	})
	if err != nil {
		return 0, d.fail("roster", key, err)
	}
	if n, ok := out.Item[attrRosterVersion].(*types.AttributeValueMemberN); ok {
		v, _ := strconv.ParseInt(n.Value, 10, 64)
		return v, nil
	}
	return 0, nil
}

// BumpRoster adds one to the version: one UpdateItem (ADD) of the version
// item (a write unit), creating it the first time.
func (d *DynamoDB) BumpRoster(ctx context.Context, namespace string) (int64, error) {
	key := RosterKey(namespace)
	if err := d.begin(ctx, "roster bump", key); err != nil {
		return 0, err
	}
	if err := d.noRoster("roster bump", key); err != nil {
		return 0, err
	}
	out, err := d.client.UpdateItem(ctx, &dynamodb.UpdateItemInput{
		TableName:                 &d.table,
		Key:                       map[string]types.AttributeValue{attrKey: str(key)},
		UpdateExpression:          aws.String("ADD #v :one"),
		ExpressionAttributeNames:  map[string]string{"#v": attrRosterVersion},
		ExpressionAttributeValues: map[string]types.AttributeValue{":one": num(1)},
		ReturnValues:              types.ReturnValueUpdatedNew,
	})
	if err != nil {
		return 0, d.fail("roster bump", key, err)
	}
	if n, ok := out.Attributes[attrRosterVersion].(*types.AttributeValueMemberN); ok {
		v, _ := strconv.ParseInt(n.Value, 10, 64)
		return v, nil
	}
	return 0, nil
}

// MembersByOwner reads the roster version and the owners' items of the
// members table with strongly consistent BatchGetItem calls, the version
// item in the first (100 keys a call; a read unit per item of up to 4 KB,
// the version's included): one call for up to 99 owners. With
// MembersMigrating an owner missing from the table is looked for in the
// members item (an instance of an earlier version), which costs one
// GetItem more. Without BatchGetItem on the client, one GetItem each.
func (d *DynamoDB) MembersByOwner(ctx context.Context, namespace string, owners []string) (int64, []Member, error) {
	key := MembersKey(namespace)
	if err := d.begin(ctx, "members", key); err != nil {
		return 0, nil, err
	}
	if err := d.noRoster("members", key); err != nil {
		return 0, nil, err
	}
	owners = normSet(owners)
	out := make([]Member, 0, len(owners))
	name := d.membersTableName()
	vkey := map[string]types.AttributeValue{attrKey: str(RosterKey(namespace))}
	var version int64
	readVersion := func(item map[string]types.AttributeValue) {
		if n, ok := item[attrRosterVersion].(*types.AttributeValueMemberN); ok {
			version, _ = strconv.ParseInt(n.Value, 10, 64)
		}
	}
	found := map[string]bool{}
	addMember := func(item map[string]types.AttributeValue) error {
		m, err := memberFromValues(item, "")
		if err != nil {
			return &Error{Op: "members", Key: key, Err: err}
		}
		found[m.Owner] = true
		out = append(out, m)
		return nil
	}
	bg, ok := d.client.(batchGetter)
	if !ok {
		v, err := d.RosterVersion(ctx, namespace)
		if err != nil {
			return 0, nil, err
		}
		version = v
		for _, o := range owners {
			res, err := d.client.GetItem(ctx, &dynamodb.GetItemInput{TableName: &name, ConsistentRead: aws.Bool(true),
				Key: map[string]types.AttributeValue{attrNS: str(namespace), attrMemOwner: str(o)}})
			if err != nil {
				return 0, nil, d.fail("members", key, err)
			}
			if res.Item != nil {
				if err := addMember(res.Item); err != nil {
					return 0, nil, err
				}
			}
		}
	} else {
		withVersion := true
		for rest := owners; withVersion || len(rest) > 0; {
			n := min(len(rest), 99)
			if !withVersion {
				n = min(len(rest), 100)
			}
			req := map[string]types.KeysAndAttributes{}
			if n > 0 {
				keys := make([]map[string]types.AttributeValue, n)
				for i, o := range rest[:n] {
					keys[i] = map[string]types.AttributeValue{attrNS: str(namespace), attrMemOwner: str(o)}
				}
				req[name] = types.KeysAndAttributes{Keys: keys, ConsistentRead: aws.Bool(true)}
			}
			if withVersion {
				req[d.table] = types.KeysAndAttributes{Keys: []map[string]types.AttributeValue{vkey}, ConsistentRead: aws.Bool(true)}
				withVersion = false
			}
			rest = rest[n:]
			wait := 20 * time.Millisecond
			for len(req) > 0 {
				res, err := bg.BatchGetItem(ctx, &dynamodb.BatchGetItemInput{RequestItems: req})
				if err != nil {
					return 0, nil, d.fail("members", key, err)
				}
				for _, item := range res.Responses[d.table] {
					readVersion(item)
				}
				for _, item := range res.Responses[name] {
					if err := addMember(item); err != nil {
						return 0, nil, err
					}
				}
				req = res.UnprocessedKeys
				if len(req) > 0 {
					// Throttled in part: back off before asking for the rest.
					select {
					case <-ctx.Done():
						return 0, nil, &Error{Op: "members", Key: key, Err: ctx.Err()}
					case <-time.After(wait):
					}
					wait = min(2*wait, time.Second)
				}
			}
		}
	}
	if len(found) < len(owners) && d.MembersLayout() == MembersMigrating {
		old, err := d.itemMembers(ctx, namespace)
		if err != nil {
			return 0, nil, err
		}
		for _, m := range old {
			if slices.Contains(owners, m.Owner) && !found[m.Owner] {
				out = append(out, m)
			}
		}
	}
	sortMembers(out)
	return version, out, nil
}

// DeclareDead marks owner's members-table item dead while it holds beat:
// one conditional UpdateItem (a write unit, refused or not).
func (d *DynamoDB) DeclareDead(ctx context.Context, namespace, owner string, beat int64) error {
	key := MembersKey(namespace)
	if err := d.begin(ctx, "declare dead", key); err != nil {
		return err
	}
	if err := d.noRoster("declare dead", key); err != nil {
		return err
	}
	name := d.membersTableName()
	_, err := d.client.UpdateItem(ctx, &dynamodb.UpdateItemInput{
		TableName:                 &name,
		Key:                       map[string]types.AttributeValue{attrNS: str(namespace), attrMemOwner: str(owner)},
		UpdateExpression:          aws.String("SET #d = :t"),
		ConditionExpression:       aws.String("#b = :b"),
		ExpressionAttributeNames:  map[string]string{"#d": attrDead, "#b": attrBeat},
		ExpressionAttributeValues: map[string]types.AttributeValue{":t": &types.AttributeValueMemberBOOL{Value: true}, ":b": num(beat)},
	})
	var ccf *types.ConditionalCheckFailedException
	switch {
	case errors.As(err, &ccf):
		return &Error{Op: "declare dead", Key: key, Err: ErrLeaseLost}
	case err != nil:
		return d.fail("declare dead", key, err)
	}
	return nil
}
