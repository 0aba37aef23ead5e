package lease

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"strconv"
	"sync"
	"sync/atomic"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/aws/smithy-go"
)

// MembersLayout is where a DynamoDB store keeps the member entries
// (MemberStore).
//
// DynamoDB bills a write by the size of the item it writes (a write unit
// per 1 KB, rounded up). With every entry in one item per namespace
// (MembersItem) a heartbeat writes all of them: past about 25 instances a
// beat costs more than one unit, and the fleet's write units grow with the
// square of its instances. With an item per entry (MembersTable) a beat
// writes its own small item (one unit), and the entries are read with one
// Query, billed by their total size (a read unit per 4 KB of entries).
// The lease table's key (leaseKey alone, the KCL's) allows no Query of
// several items, so those items live in a second table, the members table
// (WithMembersTable).
type MembersLayout int

const (
	// MembersMigrating (the default) keeps the entries in the members
	// table, as MembersTable, and also reads the members item of the
	// earlier layout (MembersItem) at every read: while that item holds
	// an entry of an owner missing from the members table (an instance of
	// an earlier version, which reads and writes the item alone), every
	// heartbeat writes the item too, so that each side sees the other
	// alive. Readers see the entries of both, the newer beat of an owner in
	// both. A rolling deploy from MembersItem needs nothing else; it costs
	// one more read unit per read. When the members table is missing and
	// the store was not asked to create it (CreateTableIfMissing), the
	// store keeps the entries as MembersItem (and logs it).
	MembersMigrating MembersLayout = iota
	// MembersTable keeps the entries in the members table only: the
	// layout once no instance of an earlier version runs (see
	// docs/instances.md, "Upgrading").
	MembersTable
	// MembersItem keeps every entry of a namespace in one item of the
	// lease table, keyed MembersKey(namespace): the layout before issue 34,
	// which earlier versions read and write.
	MembersItem
)

func (l MembersLayout) String() string {
	switch l {
	case MembersMigrating:
		return "migrating"
	case MembersTable:
		return "table"
	case MembersItem:
		return "item"
	}
	return "MembersLayout(" + strconv.Itoa(int(l)) + ")"
}

// WithMembers sets where the member entries are kept (default
// MembersMigrating).
func WithMembers(layout MembersLayout) DynamoDBOption {
	return func(c *dynamoConfig) { c.members = layout }
}

// WithMembersTable names the members table (default: the lease table's
// name with "-members" appended). Its key is ns (String, hash) and owner
// (String, range); CreateTableIfMissing creates it with the lease table.
func WithMembersTable(name string) DynamoDBOption {
	return func(c *dynamoConfig) {
		if name != "" {
			c.membersTable = name
		}
	}
}

// Attributes of a members-table item: one per owner and namespace.
const (
	attrNS       = "ns"
	attrMemOwner = "owner"
)

// querier is a client that can Query (*dynamodb.Client can; a test's
// wrapper may not, and then the store keeps MembersItem).
type querier interface {
	Query(ctx context.Context, in *dynamodb.QueryInput, optFns ...func(*dynamodb.Options)) (*dynamodb.QueryOutput, error)
}

// membersState is what a MembersMigrating store knows of a namespace's
// members item from its last read. Its map is never changed once stored
// (setInItem stores a new one).
type membersState struct {
	read bool            // the item was read at least once
	dual bool            // it holds an owner the members table lacks: write both
	in   map[string]bool // the owners the item holds
}

// membersTableName returns the members table's name.
func (d *DynamoDB) membersTableName() string {
	if d.cfg.membersTable != "" {
		return d.cfg.membersTable
	}
	return d.table + "-members"
}

// MembersTable returns the name of the members table (used unless the
// layout is MembersItem).
func (d *DynamoDB) MembersTable() string { return d.membersTableName() }

// MembersLayout returns where the member entries are kept: as configured,
// or MembersItem where the client cannot Query or, MembersMigrating, the
// members table is missing and was not to be created. Before the table
// check (EnsureTable) it returns the configured layout.
func (d *DynamoDB) MembersLayout() MembersLayout {
	if d.itemOnly.Load() {
		return MembersItem
	}
	return d.cfg.members
}

// ensureMembersTable runs after the lease table was found usable: it
// checks (or creates) the members table, or falls back to MembersItem.
func (d *DynamoDB) ensureMembersTable(ctx context.Context) error {
	if d.cfg.members == MembersItem || d.PerLeaseOnly() {
		return nil
	}
	if _, ok := d.client.(querier); !ok {
		if d.cfg.members == MembersTable {
			return fmt.Errorf("%w: the members table needs a client with Query (%T has none)", ErrInvalid, d.client)
		}
		d.itemOnly.Store(true)
		return nil
	}
	name := d.membersTableName()
	out, err := d.client.DescribeTable(ctx, &dynamodb.DescribeTableInput{TableName: &name})
	var missing *types.ResourceNotFoundException
	var api smithy.APIError
	switch {
	case d.cfg.members == MembersMigrating && errors.As(err, &api) && api.ErrorCode() == "AccessDeniedException":
		// A role granted the lease table alone (an upgrade that has not
		// granted the members table yet) keeps the earlier layout.
		d.cfg.log.Warn("members table not accessible: keeping the member entries in one item per stream (grant the members table, see docs/instances.md)", "table", name, "err", err)
		d.itemOnly.Store(true)
		return nil
	case errors.As(err, &missing):
		if !d.cfg.create {
			if d.cfg.members == MembersTable {
				return fmt.Errorf("%w: members table %q does not exist (create it with hash key %s and range key %s, both of type S, or use CreateTableIfMissing)", ErrNoTable, name, attrNS, attrMemOwner)
			}
			d.cfg.log.Warn("members table missing: keeping the member entries in one item per stream, whose heartbeats cost more write units as instances are added (create the table, or use CreateTableIfMissing)", "table", name)
			d.itemOnly.Store(true)
			return nil
		}
		_, err := d.client.CreateTable(ctx, &dynamodb.CreateTableInput{
			TableName:   &name,
			BillingMode: types.BillingModePayPerRequest,
			AttributeDefinitions: []types.AttributeDefinition{
				{AttributeName: aws.String(attrNS), AttributeType: types.ScalarAttributeTypeS},
				{AttributeName: aws.String(attrMemOwner), AttributeType: types.ScalarAttributeTypeS},
			},
			KeySchema: []types.KeySchemaElement{
				{AttributeName: aws.String(attrNS), KeyType: types.KeyTypeHash},
				{AttributeName: aws.String(attrMemOwner), KeyType: types.KeyTypeRange},
			},
		})
		var inUse *types.ResourceInUseException
		if err != nil && !errors.As(err, &inUse) {
			return fmt.Errorf("create members table %q: %w", name, err)
		}
		return d.waitActiveTable(ctx, name)
	case err != nil:
		return err
	}
	if err := checkMembersSchema(out.Table); err != nil {
		return fmt.Errorf("%w: members table %q: %v", ErrNoTable, name, err)
	}
	if out.Table.TableStatus == types.TableStatusCreating {
		return d.waitActiveTable(ctx, name)
	}
	return nil
}

func checkMembersSchema(t *types.TableDescription) error {
	if t == nil || len(t.KeySchema) != 2 {
		return fmt.Errorf("key schema must be exactly %s (HASH), %s (RANGE)", attrNS, attrMemOwner)
	}
	for _, k := range t.KeySchema {
		name := aws.ToString(k.AttributeName)
		if !(name == attrNS && k.KeyType == types.KeyTypeHash) && !(name == attrMemOwner && k.KeyType == types.KeyTypeRange) {
			return fmt.Errorf("key schema must be exactly %s (HASH), %s (RANGE)", attrNS, attrMemOwner)
		}
	}
	return nil
}

// Heartbeat writes m as its owner's entry (see MembersLayout): one PutItem
// of its own item in the members table, and with MembersMigrating also its
// entry of the members item while that holds an owner of an earlier
// version.
func (d *DynamoDB) Heartbeat(ctx context.Context, namespace string, m Member) error {
	key := MembersKey(namespace)
	if err := d.noMembers("heartbeat", key); err != nil {
		return err
	}
	if m.Owner == "" {
		return invalid("heartbeat", key, "empty owner")
	}
	if err := d.begin(ctx, "heartbeat", key); err != nil {
		return err
	}
	switch d.MembersLayout() {
	case MembersItem:
		return d.itemHeartbeat(ctx, namespace, m)
	case MembersTable:
		return d.tableHeartbeat(ctx, namespace, m)
	}
	st, err := d.itemState(ctx, namespace)
	if err != nil {
		return err
	}
	if err := d.tableHeartbeat(ctx, namespace, m); err != nil {
		return err
	}
	if st.dual {
		// The table first: an entry in the item alone reads as an owner of
		// an earlier version and turns every reader to writing both.
		if err := d.itemHeartbeat(ctx, namespace, m); err != nil {
			return err
		}
		d.setInItem(namespace, m.Owner, true)
		return nil
	}
	if st.in[m.Owner] {
		// No owner of an earlier version left: take this owner's entry out
		// of the item, so the item empties. An earlier version started
		// later sees this owner by its leases until the readers turn to
		// writing both again (at their next read). Best effort: the entry
		// is in the table too, and readers take the newer beat.
		if err := d.itemLeave(ctx, namespace, m.Owner, 0, false); err == nil {
			d.setInItem(namespace, m.Owner, false)
		}
	}
	return nil
}

// itemState returns what the last read showed of the namespace's members
// item, reading it first when it has not been read.
func (d *DynamoDB) itemState(ctx context.Context, namespace string) (membersState, error) {
	d.memMu.Lock()
	st := d.memState[namespace]
	d.memMu.Unlock()
	if st.read {
		return st, nil
	}
	if _, err := d.Members(ctx, namespace); err != nil {
		return membersState{}, err
	}
	d.memMu.Lock()
	defer d.memMu.Unlock()
	return d.memState[namespace], nil
}

func (d *DynamoDB) setInItem(namespace, owner string, in bool) {
	d.memMu.Lock()
	defer d.memMu.Unlock()
	if d.memState == nil {
		d.memState = map[string]membersState{}
	}
	st := d.memState[namespace]
	// A copy: callers read the map of a state they took without the lock.
	st.in = maps.Clone(st.in)
	if st.in == nil {
		st.in = map[string]bool{}
	}
	if in {
		st.in[owner] = true
	} else {
		delete(st.in, owner)
	}
	d.memState[namespace] = st
}

func (d *DynamoDB) tableHeartbeat(ctx context.Context, namespace string, m Member) error {
	item := map[string]types.AttributeValue{
		attrNS:       str(namespace),
		attrMemOwner: str(m.Owner),
		attrBeat:     num(m.Beat),
		attrHeld:     num(int64(m.Held)),
	}
	if asks := normSet(m.Asks); len(asks) > 0 {
		item[attrAsks] = &types.AttributeValueMemberSS{Value: asks}
	}
	if m.Starting {
		item[attrStarting] = &types.AttributeValueMemberBOOL{Value: true}
	}
	if m.Fenced {
		item[attrFenced] = &types.AttributeValueMemberBOOL{Value: true}
	}
	if m.Leaving {
		item[attrLeaving] = &types.AttributeValueMemberBOOL{Value: true}
	}
	name := d.membersTableName()
	in := &dynamodb.PutItemInput{TableName: &name, Item: item}
	if m.Roster {
		// Never over a declaration (RosterStore): the owner must rejoin.
		item[attrRoster] = &types.AttributeValueMemberBOOL{Value: true}
		in.ConditionExpression = aws.String("attribute_not_exists(#d)")
		in.ExpressionAttributeNames = map[string]string{"#d": attrDead}
	}
	_, err := d.client.PutItem(ctx, in)
	var ccf *types.ConditionalCheckFailedException
	switch {
	case errors.As(err, &ccf):
		return &Error{Op: "heartbeat", Key: MembersKey(namespace), Err: ErrDeclaredDead}
	case err != nil:
		return d.fail("heartbeat", MembersKey(namespace), err)
	}
	return nil
}

// Members returns the namespace's entries (see MembersLayout): one
// strongly consistent Query of the members table, with MembersMigrating
// also one strongly consistent GetItem of the members item.
func (d *DynamoDB) Members(ctx context.Context, namespace string) ([]Member, error) {
	key := MembersKey(namespace)
	if err := d.noMembers("members", key); err != nil {
		return nil, err
	}
	if err := d.begin(ctx, "members", key); err != nil {
		return nil, err
	}
	layout := d.MembersLayout()
	if layout == MembersItem {
		return d.itemMembers(ctx, namespace)
	}
	ms, err := d.tableMembers(ctx, namespace)
	if err != nil || layout == MembersTable {
		return ms, err
	}
	old, err := d.itemMembers(ctx, namespace)
	if err != nil {
		return nil, err
	}
	st := membersState{read: true, in: make(map[string]bool, len(old))}
	byOwner := make(map[string]int, len(ms))
	for i, m := range ms {
		byOwner[m.Owner] = i
	}
	for _, m := range old {
		st.in[m.Owner] = true
		i, ok := byOwner[m.Owner]
		switch {
		case !ok:
			st.dual = true
			ms = append(ms, m)
		case m.Beat > ms[i].Beat:
			ms[i] = m
		case m.Beat == ms[i].Beat && m.Fenced:
			// One beat is written unfenced, then fenced, never back
			// (Member.Fenced): the fenced copy is the later.
			ms[i].Fenced = true
		case m.Beat == ms[i].Beat && m.Leaving:
			// Likewise: a beat is written leaving, never back.
			ms[i].Leaving = true
		}
	}
	d.memMu.Lock()
	if d.memState == nil {
		d.memState = map[string]membersState{}
	}
	d.memState[namespace] = st
	d.memMu.Unlock()
	sortMembers(ms)
	return ms, nil
}

func (d *DynamoDB) tableMembers(ctx context.Context, namespace string) ([]Member, error) {
	key := MembersKey(namespace)
	name := d.membersTableName()
	in := &dynamodb.QueryInput{
		TableName:                 &name,
		ConsistentRead:            aws.Bool(true),
		KeyConditionExpression:    aws.String("#n = :n"),
		ExpressionAttributeNames:  map[string]string{"#n": attrNS},
		ExpressionAttributeValues: map[string]types.AttributeValue{":n": str(namespace)},
	}
	ms := []Member{}
	for p := dynamodb.NewQueryPaginator(d.client.(querier), in); p.HasMorePages(); {
		page, err := p.NextPage(ctx)
		if err != nil {
			return nil, d.fail("members", key, err)
		}
		for _, item := range page.Items {
			m, err := memberFromValues(item, "")
			if err != nil {
				return nil, &Error{Op: "members", Key: key, Err: err}
			}
			ms = append(ms, m)
		}
	}
	sortMembers(ms)
	return ms, nil
}

// memberFromValues reads an entry: a members-table item (owner "": its
// owner attribute), or a map of the members item.
func memberFromValues(v map[string]types.AttributeValue, owner string) (Member, error) {
	if owner == "" {
		o, _ := v[attrMemOwner].(*types.AttributeValueMemberS)
		if o == nil || o.Value == "" {
			return Member{}, fmt.Errorf("member item without %s", attrMemOwner)
		}
		owner = o.Value
	}
	mb := Member{Owner: owner}
	if n, ok := v[attrBeat].(*types.AttributeValueMemberN); ok {
		mb.Beat, _ = strconv.ParseInt(n.Value, 10, 64)
	}
	if n, ok := v[attrHeld].(*types.AttributeValueMemberN); ok {
		h, _ := strconv.ParseInt(n.Value, 10, 64)
		mb.Held = int(h)
	}
	if ss, ok := v[attrAsks].(*types.AttributeValueMemberSS); ok {
		mb.Asks = normSet(ss.Value)
	}
	if b, ok := v[attrStarting].(*types.AttributeValueMemberBOOL); ok {
		mb.Starting = b.Value
	}
	if b, ok := v[attrFenced].(*types.AttributeValueMemberBOOL); ok {
		mb.Fenced = b.Value
	}
	if b, ok := v[attrLeaving].(*types.AttributeValueMemberBOOL); ok {
		mb.Leaving = b.Value
	}
	if b, ok := v[attrRoster].(*types.AttributeValueMemberBOOL); ok {
		mb.Roster = b.Value
	}
	if b, ok := v[attrDead].(*types.AttributeValueMemberBOOL); ok {
		mb.Dead = b.Value
	}
	return mb, nil
}

// Leave removes owner's entry; with beat non-zero only while it holds that
// beat. With MembersMigrating its entry of the members item goes too
// (there while it holds no later beat: an owner in both has the same beat
// in each, or a later one in the table).
func (d *DynamoDB) Leave(ctx context.Context, namespace, owner string, beat int64) error {
	key := MembersKey(namespace)
	if err := d.noMembers("leave", key); err != nil {
		return err
	}
	if owner == "" {
		return invalid("leave", key, "empty owner")
	}
	if err := d.begin(ctx, "leave", key); err != nil {
		return err
	}
	layout := d.MembersLayout()
	if layout == MembersItem {
		return d.itemLeave(ctx, namespace, owner, beat, false)
	}
	if err := d.tableLeave(ctx, namespace, owner, beat); err != nil {
		return err
	}
	if layout == MembersMigrating {
		d.memMu.Lock()
		st := d.memState[namespace]
		d.memMu.Unlock()
		if !st.read || st.in[owner] || beat == 0 {
			if err := d.itemLeave(ctx, namespace, owner, beat, true); err != nil {
				return err
			}
			d.setInItem(namespace, owner, false)
		}
	}
	return nil
}

func (d *DynamoDB) tableLeave(ctx context.Context, namespace, owner string, beat int64) error {
	key := MembersKey(namespace)
	name := d.membersTableName()
	in := &dynamodb.DeleteItemInput{
		TableName: &name,
		Key:       map[string]types.AttributeValue{attrNS: str(namespace), attrMemOwner: str(owner)},
	}
	if beat != 0 {
		in.ConditionExpression = aws.String("attribute_not_exists(#o) OR #b = :beat")
		in.ExpressionAttributeNames = map[string]string{"#o": attrMemOwner, "#b": attrBeat}
		in.ExpressionAttributeValues = map[string]types.AttributeValue{":beat": num(beat)}
	}
	_, err := d.client.DeleteItem(ctx, in)
	var ccf *types.ConditionalCheckFailedException
	switch {
	case errors.As(err, &ccf):
		// There with another beat: the owner came back.
		return &Error{Op: "leave", Key: key, Err: ErrLeaseLost}
	case err != nil:
		return d.fail("leave", key, err)
	}
	return nil
}

// membersFields are the DynamoDB store's fields for members (embedded in
// DynamoDB).
type membersFields struct {
	itemOnly atomic.Bool
	memMu    sync.Mutex
	memState map[string]membersState
}
