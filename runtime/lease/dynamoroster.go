package lease

import (
	"context"
	"errors"
	"slices"
	"strconv"
	"strings"
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
	// A notice (PostNotice) is an attribute of the version item named
	// attrNotice and its owner and watcher, each quoted (noticeAttr), a
	// map of the beat and the due time (ms).
	attrNotice     = "notice:"
	attrNoticeBeat = "b"
	attrNoticeDue  = "d"
)

var _ RosterNotices = (*DynamoDB)(nil)

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

// MembersByOwner is WatchRoster without the notices.
func (d *DynamoDB) MembersByOwner(ctx context.Context, namespace string, owners []string) (int64, []Member, error) {
	v, ms, _, err := d.WatchRoster(ctx, namespace, owners)
	return v, ms, err
}

// WatchRoster reads the roster version, its notices and the owners' items of the
// members table with strongly consistent BatchGetItem calls, the version
// item in the first (100 keys a call; a read unit per item of up to 4 KB,
// the version's included): one call for up to 99 owners. With
// MembersMigrating an owner missing from the table is looked for in the
// members item (an instance of an earlier version), which costs one
// GetItem more. Without BatchGetItem on the client, one GetItem each.
func (d *DynamoDB) WatchRoster(ctx context.Context, namespace string, owners []string) (int64, []Member, []RosterNotice, error) {
	key := MembersKey(namespace)
	if err := d.begin(ctx, "members", key); err != nil {
		return 0, nil, nil, err
	}
	if err := d.noRoster("members", key); err != nil {
		return 0, nil, nil, err
	}
	owners = normSet(owners)
	out := make([]Member, 0, len(owners))
	name := d.membersTableName()
	vkey := map[string]types.AttributeValue{attrKey: str(RosterKey(namespace))}
	var version int64
	var notices []RosterNotice
	readVersion := func(item map[string]types.AttributeValue) {
		version, notices = versionFromItem(item)
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
		res, err := d.client.GetItem(ctx, &dynamodb.GetItemInput{TableName: &d.table, Key: vkey, ConsistentRead: aws.Bool(true)})
		if err != nil {
			return 0, nil, nil, d.fail("members", key, err)
		}
		readVersion(res.Item)
		for _, o := range owners {
			res, err := d.client.GetItem(ctx, &dynamodb.GetItemInput{TableName: &name, ConsistentRead: aws.Bool(true),
				Key: map[string]types.AttributeValue{attrNS: str(namespace), attrMemOwner: str(o)}})
			if err != nil {
				return 0, nil, nil, d.fail("members", key, err)
			}
			if res.Item != nil {
				if err := addMember(res.Item); err != nil {
					return 0, nil, nil, err
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
					return 0, nil, nil, d.fail("members", key, err)
				}
				for _, item := range res.Responses[d.table] {
					readVersion(item)
				}
				for _, item := range res.Responses[name] {
					if err := addMember(item); err != nil {
						return 0, nil, nil, err
					}
				}
				req = res.UnprocessedKeys
				if len(req) > 0 {
					// Throttled in part: back off before asking for the rest.
					select {
					case <-ctx.Done():
						return 0, nil, nil, &Error{Op: "members", Key: key, Err: ctx.Err()}
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
			return 0, nil, nil, err
		}
		for _, m := range old {
			if slices.Contains(owners, m.Owner) && !found[m.Owner] {
				out = append(out, m)
			}
		}
	}
	sortMembers(out)
	return version, out, notices, nil
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

// versionFromItem reads the version and the notices of the version item.
func versionFromItem(item map[string]types.AttributeValue) (int64, []RosterNotice) {
	var v int64
	if n, ok := item[attrRosterVersion].(*types.AttributeValueMemberN); ok {
		v, _ = strconv.ParseInt(n.Value, 10, 64)
	}
	var ns []RosterNotice
	for name, av := range item {
		owner, by, ok := parseNoticeAttr(name)
		m, isMap := av.(*types.AttributeValueMemberM)
		if !ok || !isMap {
			continue
		}
		n := RosterNotice{Owner: owner, By: by}
		if b, ok := m.Value[attrNoticeBeat].(*types.AttributeValueMemberN); ok {
			n.Beat, _ = strconv.ParseInt(b.Value, 10, 64)
		}
		if due, ok := m.Value[attrNoticeDue].(*types.AttributeValueMemberN); ok {
			ms, _ := strconv.ParseInt(due.Value, 10, 64)
			n.Due = time.Duration(ms) * time.Millisecond
		}
		ns = append(ns, n)
	}
	sortNotices(ns)
	return v, ns
}

// noticeAttr names the version item's attribute of by's notice of owner.
func noticeAttr(owner, by string) string {
	return attrNotice + strconv.Quote(owner) + strconv.Quote(by)
}

// parseNoticeAttr reads a noticeAttr name.
func parseNoticeAttr(name string) (owner, by string, ok bool) {
	rest, ok := strings.CutPrefix(name, attrNotice)
	if !ok {
		return "", "", false
	}
	q1, err := strconv.QuotedPrefix(rest)
	if err != nil {
		return "", "", false
	}
	q2, err := strconv.QuotedPrefix(rest[len(q1):])
	if err != nil || len(q1)+len(q2) != len(rest) {
		return "", "", false
	}
	owner, _ = strconv.Unquote(q1)
	by, _ = strconv.Unquote(q2)
	return owner, by, true
}

// PostNotice sets n's attribute on the version item unless it names a
// later beat: one conditional UpdateItem (a write unit, refused or not),
// creating the item the first time. The due time is
// rounded up to the millisecond: never earlier than the watcher's.
func (d *DynamoDB) PostNotice(ctx context.Context, namespace string, n RosterNotice) error {
	key := RosterKey(namespace)
	if err := d.beginNotice(ctx, key); err != nil {
		return err
	}
	if n.Owner == "" {
		return invalid("roster notice", key, "empty owner")
	}
	due := (max(n.Due, 0) + time.Millisecond - 1) / time.Millisecond
	_, err := d.client.UpdateItem(ctx, &dynamodb.UpdateItemInput{
		TableName:                &d.table,
		Key:                      map[string]types.AttributeValue{attrKey: str(key)},
		UpdateExpression:         aws.String("SET #n = :n"),
		ConditionExpression:      aws.String("attribute_not_exists(#n) OR #n.#b <= :b"),
		ExpressionAttributeNames: map[string]string{"#n": noticeAttr(n.Owner, n.By), "#b": attrNoticeBeat},
		ExpressionAttributeValues: map[string]types.AttributeValue{
			":n": &types.AttributeValueMemberM{Value: map[string]types.AttributeValue{attrNoticeBeat: num(n.Beat), attrNoticeDue: num(int64(due))}},
			":b": num(n.Beat),
		},
	})
	return d.noticeWritten(key, err)
}

// beginNotice checks a notice call on the version item key.
func (d *DynamoDB) beginNotice(ctx context.Context, key string) error {
	if err := d.begin(ctx, "roster notice", key); err != nil {
		return err
	}
	return d.noRoster("roster notice", key)
}

// noticeWritten is a notice write's answer: a refused condition (a
// later notice, or none to withdraw) is no error.
func (d *DynamoDB) noticeWritten(key string, err error) error {
	var ccf *types.ConditionalCheckFailedException
	if err != nil && !errors.As(err, &ccf) {
		return d.fail("roster notice", key, err)
	}
	return nil
}

// WithdrawNotice removes n's attribute while it names n.Beat or an
// earlier beat: one conditional UpdateItem (a write unit, refused or
// not).
func (d *DynamoDB) WithdrawNotice(ctx context.Context, namespace string, n RosterNotice) error {
	key := RosterKey(namespace)
	if err := d.beginNotice(ctx, key); err != nil {
		return err
	}
	_, err := d.client.UpdateItem(ctx, &dynamodb.UpdateItemInput{
		TableName:                 &d.table,
		Key:                       map[string]types.AttributeValue{attrKey: str(key)},
		UpdateExpression:          aws.String("REMOVE #n"),
		ConditionExpression:       aws.String("#n.#b <= :b"),
		ExpressionAttributeNames:  map[string]string{"#n": noticeAttr(n.Owner, n.By), "#b": attrNoticeBeat},
		ExpressionAttributeValues: map[string]types.AttributeValue{":b": num(n.Beat)},
	})
	return d.noticeWritten(key, err)
}
