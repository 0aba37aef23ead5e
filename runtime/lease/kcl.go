package lease

import (
	"context"
	"errors"
	"fmt"
	"math/big"
	"strconv"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
)

// The KCL's lease attributes besides those of attr* in dynamodb.go, named
// as in the Java KCL's DynamoDBLeaseSerializer and
// DynamoDBMultiStreamLeaseSerializer (amazon-kinesis-client 2.x/3.x).
const (
	kclPendingCheckpoint      = "pendingCheckpoint"                  // S
	kclPendingCheckpointSub   = "pendingCheckpointSubSequenceNumber" // N
	kclPendingCheckpointState = "pendingCheckpointState"             // B
	kclThroughput             = "throughputKBps"                     // N (a double), 3.x
	kclCheckpointOwner        = "checkpointOwner"                    // S, 3.x: the old owner during a graceful handoff
	kclStreamID               = "streamName"                         // S, multi-stream: account:stream:creationEpoch
	kclEntityType             = "entityType"                         // S, newer KCLs: what an item of the lease table is
	kclEntityLease            = "LEASE"

	// kinesisgen's own attributes in a KCL table, which the KCL ignores.
	// kinesisgenOwner is leaseOwner as kinesisgen last wrote it: when the
	// two differ, a KCL worker took the lease since (ForeignOwner).
	attrOwnerMark = "kinesisgenOwner"
	// kinesisgenCheckpoint holds a checkpoint the KCL cannot express, next
	// to the KCL checkpoint that stands for it for a KCL worker: no
	// checkpoint yet (kclNone, beside TRIM_HORIZON), or the time pin of a
	// shard opened at Latest (AT_TIMESTAMP with the Unix milliseconds in
	// kinesisgenCheckpointSubSequenceNumber, beside LATEST). It is read only
	// while the KCL checkpoint is still the one written with it.
	attrOwnCheckpoint  = "kinesisgenCheckpoint"
	attrOwnSubSequence = "kinesisgenCheckpointSubSequenceNumber"
	kclNone            = "NONE"

	// KCL 3.x coordinator state: a table with hash key "key" (by default
	// named after the application: <lease table>-CoordinatorState), whose
	// items are the leader lock (DynamoDB lock client) and the 2.x → 3.x
	// migration state. Newer KCLs may keep these items in the lease table,
	// under leaseKey.
	kclCoordinatorKey   = "key"
	kclMigrationKey     = "Migration3.0"
	kclLeaderKey        = "Leader"
	kclClientVersion    = "cv"
	kclModifiedBy       = "mb"
	kclModifiedAt       = "mts"
	kclLockOwner        = "ownerName"
	kclLockDuration     = "leaseDuration"
	kclLockReleased     = "isReleased"
	kclCoordinatorTable = "-CoordinatorState"
)

// KCL client versions of the migration-state item (ClientVersion in the KCL).
const (
	KCLClientVersion2x             = "CLIENT_VERSION_2X"
	KCLClientVersionUpgradeFrom2x  = "CLIENT_VERSION_UPGRADE_FROM_2X"
	KCLClientVersion3xWithRollback = "CLIENT_VERSION_3X_WITH_ROLLBACK"
	KCLClientVersion3x             = "CLIENT_VERSION_3X"
	KCLClientVersionInit           = "CLIENT_VERSION_INIT"
)

// ErrKCLMigration: the KCL application is in the middle of its migration
// from KCL 2.x to 3.x (see KCLMigrationError); kinesisgen does not take a
// table over until the migration is finished or rolled back.
var ErrKCLMigration = errors.New("KCL 2.x to 3.x migration in progress")

// KCLMigrationError reports the migration state that stopped a take-over.
// It matches ErrKCLMigration with errors.Is.
type KCLMigrationError struct {
	Table         string // where the migration-state item was read
	ClientVersion string // its cv attribute
	ModifiedBy    string // the KCL worker that last set it
	ModifiedAt    time.Time
}

func (e *KCLMigrationError) Error() string {
	return fmt.Sprintf("%v: table %s says client version %s (set by %s at %s): finish the migration (the KCL migration tool sets %s) or roll it back to %s, then start kinesisgen",
		ErrKCLMigration, e.Table, e.ClientVersion, e.ModifiedBy, e.ModifiedAt.UTC().Format(time.RFC3339), KCLClientVersion3x, KCLClientVersion2x)
}

// Is makes a KCLMigrationError match ErrKCLMigration.
func (e *KCLMigrationError) Is(target error) bool { return target == ErrKCLMigration }

// KCLStream names one stream of a KCL multi-stream application, as its
// lease keys do: account id, stream name and the stream's creation time in
// epoch seconds (the KCL's StreamIdentifier).
type KCLStream struct {
	AccountID     string
	Name          string
	CreationEpoch int64
}

// Identifier is the stream's serialized KCL identifier,
// account:stream:creationEpoch: the streamName attribute of its leases and
// the prefix of their keys.
func (s KCLStream) Identifier() string {
	return s.AccountID + ":" + s.Name + ":" + strconv.FormatInt(s.CreationEpoch, 10)
}

func (s KCLStream) validate() error {
	switch {
	case s.AccountID == "" || strings.Trim(s.AccountID, "0123456789") != "":
		return fmt.Errorf("KCL stream %q: account id %q is not a string of digits", s.Name, s.AccountID)
	case s.Name == "" || strings.Contains(s.Name, ":"):
		return fmt.Errorf("KCL stream name %q is empty or holds a colon", s.Name)
	case s.CreationEpoch <= 0:
		return fmt.Errorf("KCL stream %q: creation epoch %d is not positive", s.Name, s.CreationEpoch)
	}
	return nil
}

// KCLLayout is how a Java KCL application (2.x or 3.x) lays out its lease
// table: one item per shard, keyed by the bare shard id (single-stream) or
// account:stream:creationEpoch:shardId (multi-stream). A DynamoDB store in
// this layout (WithKCLLayout) reads and writes leases exactly as the KCL
// does, so kinesisgen can take over a KCL application's table and resume
// from its checkpoints, and the KCL can take it back.
type KCLLayout struct {
	multi       bool
	streams     []KCLStream
	coordinator string
}

// KCLSingleStream is the layout of a KCL application that reads one stream
// (named here, so that no subscription to another stream reads its
// checkpoints): leaseKey is the shard id.
func KCLSingleStream(stream string) KCLLayout {
	return KCLLayout{streams: []KCLStream{{Name: stream}}}
}

// KCLMultiStream is the layout of a KCL multi-stream application reading
// streams: leaseKey is account:stream:creationEpoch:shardId, and every
// lease carries streamName (account:stream:creationEpoch) and shardId.
func KCLMultiStream(streams ...KCLStream) KCLLayout {
	return KCLLayout{multi: true, streams: streams}
}

// CoordinatorStateTable names the KCL 3.x coordinator-state table, read for
// a migration in progress. By default it is the lease table's name plus
// "-CoordinatorState" (the KCL's default, the lease table being named after
// the application). A table that does not exist (a KCL 2.x application) is
// not an error.
func (k KCLLayout) CoordinatorStateTable(name string) KCLLayout {
	k.coordinator = name
	return k
}

// WithKCLLayout makes a DynamoDB store read and write its table in the KCL's
// layout instead of kinesisgen's own (namespace/shardId keys). Lease keys
// given to and returned by the store stay KeyFor(namespace, shardID); the
// stream is the namespace's last segment. Only shard leases live in such a
// table: the Leader lock is refused. On first use the store reads the KCL
// 3.x coordinator state and fails with a KCLMigrationError while a KCL 2.x
// to 3.x migration is in progress.
func WithKCLLayout(k KCLLayout) DynamoDBOption {
	return func(c *dynamoConfig) { c.codec = k }
}

var _ itemCodec = KCLLayout{}

// streamFor returns the stream of namespace in this layout.
func (k KCLLayout) streamFor(namespace string) (KCLStream, error) {
	name := namespace[strings.LastIndex(namespace, "/")+1:]
	for _, s := range k.streams {
		if s.Name == name {
			return s, nil
		}
	}
	if !k.multi && len(k.streams) == 1 {
		return KCLStream{}, fmt.Errorf("%w: the KCL single-stream table is stream %q's, not %q's", ErrInvalid, k.streams[0].Name, name)
	}
	return KCLStream{}, fmt.Errorf("%w: stream %q is not one of the KCL multi-stream layout's", ErrInvalid, name)
}

// prefix is what precedes the shard id in a lease key of stream s.
func (k KCLLayout) prefix(s KCLStream) string {
	if k.multi {
		return s.Identifier() + ":"
	}
	return ""
}

func validShardID(id string) bool {
	if id == "" || len(id) > 128 {
		return false
	}
	for _, r := range id {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '-' || r == '_' || r == '.') {
			return false
		}
	}
	return true
}

func (k KCLLayout) itemKey(key string) (string, error) {
	i := strings.LastIndex(key, "/")
	shard := key[i+1:]
	if i < 0 || !validShardID(shard) {
		return "", fmt.Errorf("%w: %q is not namespace/shardId: a KCL table holds only shard leases", ErrInvalid, key)
	}
	s, err := k.streamFor(key[:i])
	if err != nil {
		return "", err
	}
	return k.prefix(s) + shard, nil
}

func (k KCLLayout) listFilter(namespace string) (scanFilter, error) {
	s, err := k.streamFor(namespace)
	if err != nil {
		return scanFilter{}, err
	}
	f := scanFilter{
		// Lease items carry leaseCounter; the coordinator-state items a
		// newer KCL keeps in the lease table do not, and name their type.
		expr:   "attribute_exists(#c) AND (attribute_not_exists(#e) OR #e = :lease)",
		names:  map[string]string{"#c": attrCounter, "#e": kclEntityType},
		values: map[string]types.AttributeValue{":lease": str(kclEntityLease)},
	}
	if p := k.prefix(s); p != "" {
		f.expr = "begins_with(#k, :p) AND " + f.expr
		f.names["#k"] = attrKey
		f.values[":p"] = str(p)
	}
	return f, nil
}

// kclCheckpoint returns the KCL checkpoint standing for a kinesisgen one,
// and what kinesisgenCheckpoint keeps beside it ("" when nothing).
func kclCheckpoint(checkpoint string, sub int64) (cp string, cpSub int64, own string, ownSub int64) {
	switch {
	case checkpoint == "":
		// Not read yet: where it starts depends on the reader's start
		// position, which the KCL has too. TRIM_HORIZON loses nothing.
		return CheckpointTrimHorizon, 0, kclNone, 0
	case checkpoint == CheckpointAtTimestamp && sub > 0:
		// A pin of an opening at Latest: to the KCL, LATEST, which is
		// what its lease said before any record was read.
		return CheckpointLatest, 0, CheckpointAtTimestamp, sub
	}
	return checkpoint, sub, "", 0
}

// Item lays l out as the KCL writes a lease (Create's item; the roll-back
// test compares it with what the KCL reads).
func (k KCLLayout) Item(l Lease) (map[string]types.AttributeValue, error) { return k.toItem(l) }

func (k KCLLayout) toItem(l Lease) (map[string]types.AttributeValue, error) {
	leaseKey, err := k.itemKey(l.Key)
	if err != nil {
		return nil, err
	}
	cp, cpSub, own, ownSub := kclCheckpoint(l.Checkpoint, l.SubSequence)
	item := map[string]types.AttributeValue{
		attrKey:           str(leaseKey),
		attrCounter:       num(l.Counter),
		attrOwnerSwitches: num(l.OwnerSwitchesSinceCheckpoint),
		attrCheckpoint:    str(cp),
		attrSubSequence:   num(cpSub),
	}
	if own != "" {
		item[attrOwnCheckpoint], item[attrOwnSubSequence] = str(own), num(ownSub)
	}
	if l.Owner != "" {
		item[attrOwner] = str(l.Owner)
		if !l.ForeignOwner {
			item[attrOwnerMark] = str(l.Owner)
		}
	}
	if s := normSet(l.ParentShardIDs); len(s) > 0 {
		item[attrParents] = &types.AttributeValueMemberSS{Value: s}
	}
	if s := normSet(l.ChildShardIDs); len(s) > 0 {
		item[attrChildren] = &types.AttributeValueMemberSS{Value: s}
	}
	// The KCL reads a hash range only when both ends are there.
	if l.StartingHashKey != "" && l.EndingHashKey != "" {
		item[attrStartingHash], item[attrEndingHash] = str(l.StartingHashKey), str(l.EndingHashKey)
	}
	if l.PendingOwner != "" {
		item[attrPendingOwner] = str(l.PendingOwner)
	}
	if k.multi {
		s, _ := k.streamFor(namespaceOf(l.Key))
		item[kclStreamID], item[attrShardID] = str(s.Identifier()), str(l.ShardID)
	}
	return item, nil
}

// Lease reads a lease item the KCL (or kinesisgen in this layout) wrote, as
// a lease of namespace.
func (k KCLLayout) Lease(item map[string]types.AttributeValue, namespace string) (Lease, error) {
	l, _, err := k.fromItem(item, namespace)
	return l, err
}

func (k KCLLayout) fromItem(item map[string]types.AttributeValue, namespace string) (Lease, string, error) {
	r := itemReader{item: item}
	leaseKey := r.s(attrKey)
	s, err := k.streamFor(namespace)
	if err != nil {
		return Lease{}, "", err
	}
	var shard string
	switch p := k.prefix(s); {
	case leaseKey == "":
		r.fail("no %s", attrKey)
	case !k.multi && strings.Contains(leaseKey, ":"):
		r.fail("%s is a multi-stream lease key: the table needs the KCL multi-stream layout", attrKey)
	case !strings.HasPrefix(leaseKey, p):
		r.fail("%s is not a lease of stream %s", attrKey, s.Identifier())
	default:
		shard = leaseKey[len(p):]
	}
	if k.multi {
		if id := r.s(kclStreamID); id != "" && id != s.Identifier() {
			r.fail("%s %q does not match the key", kclStreamID, id)
		}
		if id := r.s(attrShardID); id != "" && id != shard {
			r.fail("%s %q does not match the key", attrShardID, id)
		}
	}
	l := Lease{
		Key:                          KeyFor(namespace, shard),
		ShardID:                      shard,
		Owner:                        r.s(attrOwner),
		Counter:                      r.n(attrCounter, true),
		Checkpoint:                   r.s(attrCheckpoint),
		SubSequence:                  r.n(attrSubSequence, false),
		OwnerSwitchesSinceCheckpoint: r.n(attrOwnerSwitches, false),
		ParentShardIDs:               r.ss(attrParents),
		ChildShardIDs:                r.ss(attrChildren),
		StartingHashKey:              r.s(attrStartingHash),
		EndingHashKey:                r.s(attrEndingHash),
		PendingOwner:                 r.s(attrPendingOwner),
	}
	if l.Checkpoint == "" {
		r.fail("no %s", attrCheckpoint)
	}
	if l.StartingHashKey != "" && l.EndingHashKey != "" && (!validHashKey(l.StartingHashKey) || !validHashKey(l.EndingHashKey)) {
		r.fail("hash key range %s..%s is not two integers in [0, 2^128)", l.StartingHashKey, l.EndingHashKey)
	}
	if own := r.s(attrOwnCheckpoint); own != "" && l.SubSequence == 0 {
		switch {
		case own == kclNone && l.Checkpoint == CheckpointTrimHorizon:
			l.Checkpoint = ""
		case own == CheckpointAtTimestamp && l.Checkpoint == CheckpointLatest:
			l.Checkpoint, l.SubSequence = CheckpointAtTimestamp, r.n(attrOwnSubSequence, false)
		}
	}
	l.ForeignOwner = l.Owner != "" && r.s(attrOwnerMark) != l.Owner
	// Read for their types only: kinesisgen keeps them as the KCL left
	// them (a checkpoint clears the pending ones, as the KCL's does).
	r.s(kclPendingCheckpoint)
	r.n(kclPendingCheckpointSub, false)
	r.b(kclPendingCheckpointState)
	r.f(kclThroughput)
	r.s(kclCheckpointOwner)
	r.n(attrOwnSubSequence, false)
	token := r.s(attrToken)
	if err := r.err(leaseKey); err != nil {
		return Lease{}, "", err
	}
	return l, token, nil
}

// itemReader reads typed attributes, collecting every type mismatch.
type itemReader struct {
	item map[string]types.AttributeValue
	errs []error
}

func (r *itemReader) fail(format string, args ...any) {
	r.errs = append(r.errs, fmt.Errorf(format, args...))
}

func (r *itemReader) err(key string) error {
	if len(r.errs) == 0 {
		return nil
	}
	return fmt.Errorf("malformed KCL lease item %q: %w", key, errors.Join(r.errs...))
}

func (r *itemReader) s(a string) string {
	switch v := r.item[a].(type) {
	case nil:
	case *types.AttributeValueMemberS:
		return v.Value
	default:
		r.fail("%s is %T, want S", a, v)
	}
	return ""
}

func (r *itemReader) n(a string, required bool) int64 {
	switch v := r.item[a].(type) {
	case nil:
		if required {
			r.fail("no %s", a)
		}
	case *types.AttributeValueMemberN:
		x, err := strconv.ParseInt(v.Value, 10, 64)
		if err != nil {
			r.fail("%s: %v", a, err)
		}
		return x
	default:
		r.fail("%s is %T, want N", a, v)
	}
	return 0
}

func (r *itemReader) f(a string) {
	switch v := r.item[a].(type) {
	case nil:
	case *types.AttributeValueMemberN:
		if _, err := strconv.ParseFloat(v.Value, 64); err != nil {
			r.fail("%s: %v", a, err)
		}
	default:
		r.fail("%s is %T, want N", a, v)
	}
}

func (r *itemReader) b(a string) {
	switch v := r.item[a].(type) {
	case nil, *types.AttributeValueMemberB:
	default:
		r.fail("%s is %T, want B", a, v)
	}
}

func (r *itemReader) ss(a string) []string {
	switch v := r.item[a].(type) {
	case nil:
	case *types.AttributeValueMemberSS:
		return normSet(v.Value)
	default:
		r.fail("%s is %T, want SS", a, v)
	}
	return nil
}

func (k KCLLayout) take(l Lease, owner string) update {
	return update{
		set:    map[string]types.AttributeValue{attrOwner: str(owner), attrOwnerMark: str(owner)},
		remove: []string{attrPendingOwner, kclCheckpointOwner},
		// As the KCL counts: a switch from another owner, not a take of
		// an unowned lease.
		incSwitches: l.Owner != "" && l.Owner != owner,
	}
}

func (k KCLLayout) checkpoint(checkpoint string, sub int64) update {
	cp, cpSub, own, ownSub := kclCheckpoint(checkpoint, sub)
	u := update{
		set: map[string]types.AttributeValue{
			attrCheckpoint:    str(cp),
			attrSubSequence:   num(cpSub),
			attrOwnerSwitches: num(0),
		},
		// A checkpoint ends a two-phase one, as in the KCL.
		remove: []string{kclPendingCheckpoint, kclPendingCheckpointSub, kclPendingCheckpointState},
	}
	if own != "" {
		u.set[attrOwnCheckpoint], u.set[attrOwnSubSequence] = str(own), num(ownSub)
	} else {
		u.remove = append(u.remove, attrOwnCheckpoint, attrOwnSubSequence)
	}
	return u
}

func (k KCLLayout) release() update {
	return update{remove: []string{attrOwner, attrOwnerMark, kclCheckpointOwner}}
}

func (k KCLLayout) check(ctx context.Context, d *DynamoDB) error {
	if len(k.streams) == 0 {
		return fmt.Errorf("%w: a KCL multi-stream layout needs at least one stream", ErrInvalid)
	}
	for _, s := range k.streams {
		if !k.multi {
			if s.Name == "" {
				return fmt.Errorf("%w: a KCL single-stream layout needs the stream's name", ErrInvalid)
			}
			continue
		}
		if err := s.validate(); err != nil {
			return fmt.Errorf("%w: %v", ErrInvalid, err)
		}
	}
	st, err := ReadKCLCoordinatorState(ctx, d.client, d.table, k.coordinator)
	if err != nil {
		return err
	}
	if st.Leader != "" && !st.LeaderReleased {
		d.cfg.log.Info("the KCL leader lock is held: a Java KCL worker may still run; its leases are taken only once they expire",
			"table", st.LeaderTable, "owner", st.Leader)
	}
	return st.Err()
}

// KCLCoordinatorState is what a KCL 3.x application keeps besides its
// leases: the 2.x → 3.x migration state and the leader lock.
type KCLCoordinatorState struct {
	// ClientVersion is the migration state's cv ("" when there is no
	// migration-state item: a KCL 2.x application), read from Table.
	ClientVersion string
	ModifiedBy    string
	ModifiedAt    time.Time
	Table         string
	// Leader is the owner of the leader lock ("" when there is none), read
	// from LeaderTable; LeaderReleased when its holder released it.
	Leader         string
	LeaderReleased bool
	LeaderDuration time.Duration
	LeaderTable    string
}

// MigrationInProgress reports whether the client version says a KCL 2.x to
// 3.x migration is under way (or unknown): every version but none, 2.x
// (rolled back) and 3.x (finished).
func (s KCLCoordinatorState) MigrationInProgress() bool {
	switch s.ClientVersion {
	case "", KCLClientVersion2x, KCLClientVersion3x:
		return false
	}
	return true
}

// Err is a KCLMigrationError while a migration is in progress, else nil.
func (s KCLCoordinatorState) Err() error {
	if !s.MigrationInProgress() {
		return nil
	}
	return &KCLMigrationError{Table: s.Table, ClientVersion: s.ClientVersion, ModifiedBy: s.ModifiedBy, ModifiedAt: s.ModifiedAt}
}

// ReadKCLCoordinatorState reads the migration-state and leader-lock items of
// a KCL application whose lease table is leaseTable, as the KCL reads them:
// from the coordinator-state table first (coordinatorTable, default
// leaseTable + "-CoordinatorState"), then from the lease table; a leader
// lock held in either wins over a released one. A missing coordinator-state
// table is not an error.
func ReadKCLCoordinatorState(ctx context.Context, client DynamoDBAPI, leaseTable, coordinatorTable string) (KCLCoordinatorState, error) {
	if coordinatorTable == "" {
		coordinatorTable = leaseTable + kclCoordinatorTable
	}
	var st KCLCoordinatorState
	for _, t := range []struct{ table, key string }{{coordinatorTable, kclCoordinatorKey}, {leaseTable, attrKey}} {
		if st.Table == "" {
			item, err := getItem(ctx, client, t.table, t.key, kclMigrationKey)
			if err != nil {
				return st, err
			}
			if item != nil {
				r := itemReader{item: item}
				st.ClientVersion, st.ModifiedBy, st.Table = r.s(kclClientVersion), r.s(kclModifiedBy), t.table
				st.ModifiedAt = time.UnixMilli(r.n(kclModifiedAt, false))
				if err := r.err(kclMigrationKey); err != nil {
					return st, err
				}
				if st.ClientVersion == "" {
					st.ClientVersion = "(none)" // unreadable: in progress as far as we can tell
				}
			}
		}
		// The lock is in the coordinator-state table until the KCL's table
		// migration is complete, then in the lease table; while its workers
		// cross over either may be held, so a released lock in one does not
		// hide a held one in the other.
		if st.LeaderTable == "" || st.LeaderReleased {
			item, err := getItem(ctx, client, t.table, t.key, kclLeaderKey)
			if err != nil {
				return st, err
			}
			r := itemReader{item: item}
			if item != nil && r.s(kclLockOwner) != "" && (st.LeaderTable == "" || r.s(kclLockReleased) == "") {
				st.Leader, st.LeaderReleased, st.LeaderTable = r.s(kclLockOwner), r.s(kclLockReleased) != "", t.table
				if ms, err := strconv.ParseInt(r.s(kclLockDuration), 10, 64); err == nil {
					st.LeaderDuration = time.Duration(ms) * time.Millisecond
				}
			}
		}
	}
	return st, nil
}

// getItem reads one item by its hash key; nil when the item or the table
// does not exist.
func getItem(ctx context.Context, client DynamoDBAPI, table, keyAttr, key string) (map[string]types.AttributeValue, error) {
	out, err := client.GetItem(ctx, &dynamodb.GetItemInput{
		TableName:      aws.String(table),
		Key:            map[string]types.AttributeValue{keyAttr: str(key)},
		ConsistentRead: aws.Bool(true),
	})
	var missing *types.ResourceNotFoundException
	switch {
	case errors.As(err, &missing):
		return nil, nil
	case err != nil:
		// A table keyed otherwise answers a validation error: not a KCL
		// coordinator-state table, nothing to read there.
		if strings.Contains(err.Error(), "ValidationException") {
			return nil, nil
		}
		return nil, fmt.Errorf("reading the KCL coordinator state (%s %q): %w", table, key, err)
	}
	return out.Item, nil
}

// validHashKey reports whether s is a hash key the KCL accepts (an integer
// in [0, 2^128)).
func validHashKey(s string) bool {
	n, ok := new(big.Int).SetString(s, 10)
	return ok && n.Sign() >= 0 && n.BitLen() <= 128
}
