package wire

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/binary"
	"io"
	"math"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
	"unicode"
	"unicode/utf16"
	"unicode/utf8"

	"github.com/aws/aws-sdk-go-v2/service/kinesis"
	"github.com/aws/aws-sdk-go-v2/service/kinesis/types"
	"github.com/aws/smithy-go"
	smithyhttp "github.com/aws/smithy-go/transport/http"
)

// The SDK decodes a GetRecords response with its schema-driven JSON
// deserializer: 9 allocations and 2.7 KB per 200-byte record (a copy of
// each Data's base64 text and another for its bytes, a pointer for each
// member, big.Floats for each timestamp), about half of a draining
// consumer's CPU. The response has one shape: getRecordsDecoder decodes it
// in one pass into a few buffers shared by all records, giving what the SDK
// gives, and leaves to the SDK any body it is not sure of.

// FastGetRecords is the reader's GetRecords option: on a client speaking
// awsJson1_1 it decodes successful responses with getRecordsDecoder; on any
// other it does nothing.
func FastGetRecords(o *kinesis.Options) {
	if o.Protocol != nil && o.Protocol.ID() == awsJSON11 {
		o.Protocol = getRecordsProtocol{o.Protocol}
	}
}

// getRecordsProtocol is the client's protocol but for the bodies of
// successful GetRecords responses getRecordsDecoder can decode.
type getRecordsProtocol struct{ smithyhttp.ClientProtocol }

func (p getRecordsProtocol) DeserializeResponse(ctx context.Context, op *smithy.OperationSchema, reg *smithy.TypeRegistry, resp *smithyhttp.Response, out smithy.Deserializable) error {
	o, ok := out.(*kinesis.GetRecordsOutput)
	if !ok || resp.StatusCode < 200 || resp.StatusCode >= 300 || resp.Body == nil {
		return p.ClientProtocol.DeserializeResponse(ctx, op, reg, resp, out)
	}
	d := getRecordsDecoders.Get().(*getRecordsDecoder)
	body, err := readBody(d.body[:0], resp.Body, resp.ContentLength)
	if err == nil && d.decode(body, o) {
		d.reuse(body)
		getRecordsDecoders.Put(d)
		return nil
	}
	// The SDK reads what was read (and the read's error, if any) and
	// decodes or rejects it as it would have. The middleware drains and
	// closes resp.Body: closing must still reach the connection's body.
	// body is resp.Body's now, so d is not reused.
	var r io.Reader = bytes.NewReader(body)
	if err != nil {
		r = io.MultiReader(r, failingReader{err})
	}
	resp.Body = readCloser{r, resp.Body}
	return p.ClientProtocol.DeserializeResponse(ctx, op, reg, resp, out)
}

type readCloser struct {
	io.Reader
	io.Closer
}

type failingReader struct{ err error }

func (f failingReader) Read([]byte) (int, error) { return 0, f.err }

// readBody reads all of r into b, grown once to the announced size.
func readBody(b []byte, r io.Reader, size int64) ([]byte, error) {
	n := 512
	if size >= 0 && size < 1<<30 {
		n = int(size) + 1 // room to see EOF without growing
	}
	if cap(b) < n {
		b = make([]byte, 0, n)
	}
	for {
		if len(b) == cap(b) {
			b = append(b, 0)[:len(b)]
		}
		m, err := r.Read(b[len(b):cap(b)])
		b = b[:len(b)+m]
		if err == io.EOF {
			return b, nil
		}
		if err != nil {
			return b, err
		}
	}
}

// getRecordsDecoders keeps decoders with their scratch: the body (all it
// holds is copied out by decode) and the records' spans. A response holds
// up to 10 MiB of data, 14 MB of JSON.
var getRecordsDecoders = sync.Pool{New: func() any { return new(getRecordsDecoder) }}

// reuse readies d to be reused, with body as its body buffer.
func (d *getRecordsDecoder) reuse(body []byte) {
	if cap(body) > 16<<20 {
		body = nil
	}
	spans, tmp := d.spans[:0], d.tmp[:0]
	if cap(spans) > 1<<14 {
		spans = nil
	}
	if cap(tmp) > 64<<10 {
		tmp = nil
	}
	*d = getRecordsDecoder{body: body[:0], spans: spans, tmp: tmp}
}

// maxDepth bounds nesting well below the SDK parser's 10,000: deeper bodies
// go to the SDK.
const maxDepth = 512

// span is a record member's bytes in one of the decoder's buffers.
type span struct{ off, end int32 }

var absent = span{-1, -1}

// recordSpans is where a record's members are until the buffers are done.
type recordSpans struct {
	seq, key, enc, data span
	at                  time.Time
	hasAt               bool
}

// getRecordsDecoder decodes an awsJson1_1 GetRecords body as the SDK's
// deserializer (smithy-go's internal/json ShapeDeserializer) does: the same
// grammar (strict JSON, UTF-8 unchecked outside escaped strings, bytes
// after the top-level object ignored), unknown members skipped, null
// members absent, null list items zero values, a repeated member replacing
// the earlier one. Anything else it reports as not decoded.
type getRecordsDecoder struct {
	body  []byte // the buffer the body is read into
	b     []byte
	i     int
	depth int

	recs  []types.Record
	spans []recordSpans
	start int             // where the record list began
	sized bool            // the buffers were sized from the records read
	strs  strings.Builder // all records' strings, unescaped, end to end
	data  []byte          // all records' Data, decoded, end to end
	tmp   []byte          // an escaped key or Data, unescaped
}

// decode decodes b into o, reporting whether it could. o is left as it was
// if not.
func (d *getRecordsDecoder) decode(b []byte, o *kinesis.GetRecordsOutput) bool {
	r, ok := d.decodeRead(b, "NextShardIterator")
	if !ok {
		return false // null, empty and other bodies are the SDK's
	}
	o.Records, o.ChildShards, o.MillisBehindLatest, o.NextShardIterator = r.records, r.children, r.behind, r.next
	return true
}

// readOut is what a GetRecords answer and a SubscribeToShard event both
// carry: records, the child shards at the shard's end, how far behind the
// tip, and where to read next (a member named nextKey).
type readOut struct {
	records  []types.Record // nil when the body has no Records
	children []types.ChildShard
	behind   *int64
	next     *string
}

// decodeRead decodes a read's body b, reporting whether it could.
func (d *getRecordsDecoder) decodeRead(b []byte, nextKey string) (r readOut, ok bool) {
	if len(b) > 1<<28 { // spans are int32; unescaping can triple a string
		return readOut{}, false
	}
	d.b = b
	records := false
	ok = d.members(func(key []byte) bool {
		switch string(key) {
		case "Records":
			records = true
			return d.records()
		case nextKey:
			return d.optString(&r.next)
		case "MillisBehindLatest":
			n, ok := d.int64()
			if ok {
				r.behind = &n
			}
			return ok
		case "ChildShards":
			var ok bool
			r.children, ok = d.childShards()
			return ok
		}
		return d.skip()
	})
	if !ok {
		return readOut{}, false
	}
	if records {
		r.records = d.finish()
	}
	return r, true
}

// records reads a record list into recs and spans.
func (d *getRecordsDecoder) records() bool {
	if !d.open('[') {
		return false
	}
	d.recs, d.spans, d.start = d.recs[:0], d.spans[:0], d.i
	if d.recs == nil {
		d.recs = []types.Record{}
	}
	more, ok := d.firstItem()
	for ; ok && more; more, ok = d.nextItem() {
		sp := recordSpans{seq: absent, key: absent, enc: absent, data: absent}
		if !d.null() {
			if ok = d.record(&sp); !ok {
				return false
			}
		}
		if len(d.recs) > 0 && (len(d.recs) == cap(d.recs) || len(d.spans) == cap(d.spans)) {
			d.reserve()
		}
		d.recs = append(d.recs, types.Record{}) // finish fills it in
		d.spans = append(d.spans, sp)
	}
	return ok
}

// more is how much more of something there will be, n of it having come
// in the records read so far, supposing the rest are alike: records are
// usually alike, and sizing each buffer once is what saves the SDK's
// allocations per record. It is 0 until a second record is read, the
// first being all there is to go by until then.
func (d *getRecordsDecoder) more(n int) int {
	if !d.sized {
		return 0
	}
	read := max(d.i-d.start, 16)
	return int(int64(len(d.b)-d.i) * int64(n) / int64(read) * 17 / 16)
}

// reserve makes room for the records after those read (recs and the one
// just read), supposing they are like them.
func (d *getRecordsDecoder) reserve() {
	d.sized = true
	n := 1 + max(0, min(d.more(len(d.recs)+1), 10000-len(d.recs))) // 10,000: GetRecords' most
	d.recs = slices.Grow(d.recs, n)
	d.spans = slices.Grow(d.spans, n)
	if n := d.more(d.strs.Len()); d.strs.Cap()-d.strs.Len() < n {
		d.strs.Grow(n)
	}
	if n := d.more(len(d.data)); cap(d.data)-len(d.data) < n {
		d.data = slices.Grow(d.data, n)
	}
}

// record reads one record's members into r and sp.
func (d *getRecordsDecoder) record(sp *recordSpans) bool {
	return d.members(func(key []byte) bool {
		var ok bool
		switch string(key) {
		case "SequenceNumber":
			sp.seq, ok = d.stringSpan()
		case "ApproximateArrivalTimestamp":
			sp.at, ok = d.timestamp()
			sp.hasAt = true
		case "Data":
			sp.data, ok = d.blob()
		case "PartitionKey":
			sp.key, ok = d.stringSpan()
		case "EncryptionType":
			sp.enc, ok = d.stringSpan()
		default:
			ok = d.skip()
		}
		return ok
	})
}

// finish points the records at their members: one string for all their
// strings, one array for their string pointers, one for their times, Data
// slices of one buffer (capped, so that appending to one cannot write over
// the next).
func (d *getRecordsDecoder) finish() []types.Record {
	var nstr, nat int
	for i := range d.spans {
		sp := &d.spans[i]
		if sp.seq != absent {
			nstr++
		}
		if sp.key != absent {
			nstr++
		}
		if sp.hasAt {
			nat++
		}
	}
	all := d.strs.String()
	data := d.data
	if data == nil {
		data = []byte{} // empty Data is empty, not nil, as the SDK's
	}
	strs := make([]string, nstr)
	ats := make([]time.Time, nat)
	for i := range d.recs {
		r, sp := &d.recs[i], &d.spans[i]
		if sp.seq != absent {
			strs[0] = all[sp.seq.off:sp.seq.end]
			r.SequenceNumber, strs = &strs[0], strs[1:]
		}
		if sp.key != absent {
			strs[0] = all[sp.key.off:sp.key.end]
			r.PartitionKey, strs = &strs[0], strs[1:]
		}
		if sp.enc != absent {
			r.EncryptionType = types.EncryptionType(all[sp.enc.off:sp.enc.end])
		}
		if sp.data != absent {
			r.Data = data[sp.data.off:sp.data.end:sp.data.end]
		}
		if sp.hasAt {
			ats[0] = sp.at
			r.ApproximateArrivalTimestamp, ats = &ats[0], ats[1:]
		}
	}
	return d.recs
}

func (d *getRecordsDecoder) childShards() ([]types.ChildShard, bool) {
	if !d.open('[') {
		return nil, false
	}
	shards := []types.ChildShard{}
	more, ok := d.firstItem()
	for ; ok && more; more, ok = d.nextItem() {
		var c types.ChildShard
		if !d.null() {
			if ok = d.childShard(&c); !ok {
				return nil, false
			}
		}
		shards = append(shards, c)
	}
	return shards, ok
}

func (d *getRecordsDecoder) childShard(c *types.ChildShard) bool {
	return d.members(func(key []byte) bool {
		switch string(key) {
		case "ShardId":
			return d.optString(&c.ShardId)
		case "ParentShards":
			var ok bool
			c.ParentShards, ok = d.strings()
			return ok
		case "HashKeyRange":
			h := &types.HashKeyRange{}
			c.HashKeyRange = h
			return d.members(func(key []byte) bool {
				switch string(key) {
				case "StartingHashKey":
					return d.optString(&h.StartingHashKey)
				case "EndingHashKey":
					return d.optString(&h.EndingHashKey)
				}
				return d.skip()
			})
		}
		return d.skip()
	})
}

// members reads an object, calling member with the value of each member
// that is not null next to read: member reads it (or skips it) and reports
// whether it could. A null member is absent, as the SDK has it.
func (d *getRecordsDecoder) members(member func(key []byte) bool) bool {
	if !d.open('{') {
		return false
	}
	key, more, ok := d.firstKey()
	for ; ok && more; key, more, ok = d.nextKey() {
		if d.null() {
			continue
		}
		if !member(key) {
			return false
		}
	}
	return ok
}

// optString reads a string into a new *string at dst.
func (d *getRecordsDecoder) optString(dst **string) bool {
	s, ok := d.string()
	if ok {
		*dst = &s
	}
	return ok
}

// strings reads a list of strings, null items as "".
func (d *getRecordsDecoder) strings() ([]string, bool) {
	if !d.open('[') {
		return nil, false
	}
	list := []string{}
	more, ok := d.firstItem()
	for ; ok && more; more, ok = d.nextItem() {
		var s string
		if !d.null() {
			if s, ok = d.string(); !ok {
				return nil, false
			}
		}
		list = append(list, s)
	}
	return list, ok
}

// --- tokens ---

func (d *getRecordsDecoder) ws() {
	for d.i < len(d.b) {
		switch d.b[d.i] {
		case ' ', '\t', '\n', '\r':
			d.i++
		default:
			return
		}
	}
}

// open reads c, '{' or '[', and enters it.
func (d *getRecordsDecoder) open(c byte) bool {
	d.ws()
	if d.i >= len(d.b) || d.b[d.i] != c {
		return false
	}
	d.i++
	d.depth++
	return d.depth <= maxDepth
}

// firstKey reads, after '{', the first member's key and its colon, or the
// '}' of an empty object (more is false).
func (d *getRecordsDecoder) firstKey() (key []byte, more, ok bool) {
	d.ws()
	if d.i < len(d.b) && d.b[d.i] == '}' {
		d.i++
		d.depth--
		return nil, false, true
	}
	return d.key()
}

// nextKey reads, after a member's value, the next member's key and its
// colon, or the object's '}' (more is false).
func (d *getRecordsDecoder) nextKey() (key []byte, more, ok bool) {
	d.ws()
	if d.i >= len(d.b) {
		return nil, false, false
	}
	switch d.b[d.i] {
	case '}':
		d.i++
		d.depth--
		return nil, false, true
	case ',':
		d.i++
		return d.key()
	}
	return nil, false, false
}

// key reads a key, unescaped, and the colon after it.
func (d *getRecordsDecoder) key() (key []byte, more, ok bool) {
	d.ws()
	raw, esc, ok := d.str()
	if !ok {
		return nil, false, false
	}
	if esc {
		d.tmp = appendUnquoted(d.tmp[:0], raw)
		raw = d.tmp
	}
	d.ws()
	if d.i >= len(d.b) || d.b[d.i] != ':' {
		return nil, false, false
	}
	d.i++
	return raw, true, true
}

// firstItem reports, after '[', whether an item follows; if not it has read
// the ']'.
func (d *getRecordsDecoder) firstItem() (more, ok bool) {
	d.ws()
	if d.i < len(d.b) && d.b[d.i] == ']' {
		d.i++
		d.depth--
		return false, true
	}
	return true, d.i < len(d.b)
}

// nextItem reads, after an item, the comma before the next or the ']'.
func (d *getRecordsDecoder) nextItem() (more, ok bool) {
	d.ws()
	if d.i >= len(d.b) {
		return false, false
	}
	switch d.b[d.i] {
	case ']':
		d.i++
		d.depth--
		return false, true
	case ',':
		d.i++
		return true, true
	}
	return false, false
}

// null reads a null if one is next.
func (d *getRecordsDecoder) null() bool {
	d.ws()
	if d.i+4 <= len(d.b) && string(d.b[d.i:d.i+4]) == "null" {
		d.i += 4
		return true
	}
	return false
}

// plain marks the bytes a string holds as they are; the rest (quote,
// backslash, control characters) need a closer look.
var plain = func() (t [256]bool) {
	for c := 0x20; c < 256; c++ {
		t[c] = c != '"' && c != '\\'
	}
	return t
}()

const (
	ones  = 0x0101010101010101
	highs = 0x8080808080808080
)

// hasLess reports whether a byte of v is less than n (n <= 128).
func hasLess(v uint64, n byte) uint64 { return (v - ones*uint64(n)) &^ v & highs }

// hasByte reports whether a byte of v is c.
func hasByte(v uint64, c byte) uint64 { return hasLess(v^(ones*uint64(c)), 1) }

// str reads a string, returning its bytes between the quotes and whether
// they hold escapes. Escapes are checked as the SDK's parser checks them;
// UTF-8 is not checked.
func (d *getRecordsDecoder) str() (raw []byte, escaped, ok bool) {
	if d.i >= len(d.b) || d.b[d.i] != '"' {
		return nil, false, false
	}
	b := d.b
	j := d.i + 1
	for j < len(b) {
		// Eight bytes at a time while none is special.
		for j+8 <= len(b) {
			v := binary.LittleEndian.Uint64(b[j:])
			if hasLess(v, 0x20)|hasByte(v, '"')|hasByte(v, '\\') != 0 {
				break
			}
			j += 8
		}
		for j < len(b) && plain[b[j]] {
			j++
		}
		if j >= len(b) {
			break
		}
		c := b[j]
		switch c {
		case '"':
			raw = b[d.i+1 : j]
			d.i = j + 1
			return raw, escaped, true
		case '\\':
			escaped = true
			if j+1 >= len(b) {
				return nil, false, false
			}
			switch b[j+1] {
			case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
				j += 2
			case 'u':
				if getu4(b[j:]) < 0 {
					return nil, false, false
				}
				j += 6
			default:
				return nil, false, false
			}
		default: // a control character
			return nil, false, false
		}
	}
	return nil, false, false
}

// unquoted reads a string value: its bytes in the body, or unescaped into
// tmp (valid until the next call) when it has escapes.
func (d *getRecordsDecoder) unquoted() ([]byte, bool) {
	raw, esc, ok := d.str()
	if ok && esc {
		d.tmp = appendUnquoted(d.tmp[:0], raw)
		raw = d.tmp
	}
	return raw, ok
}

// string reads a string value into a string of its own.
func (d *getRecordsDecoder) string() (string, bool) {
	raw, ok := d.unquoted()
	return string(raw), ok
}

// stringSpan reads a string value into strs.
func (d *getRecordsDecoder) stringSpan() (span, bool) {
	raw, ok := d.unquoted()
	if !ok {
		return absent, false
	}
	if d.strs.Cap()-d.strs.Len() < len(raw) {
		d.strs.Grow(len(raw) + d.more(d.strs.Len()))
	}
	off := d.strs.Len()
	d.strs.Write(raw)
	return span{int32(off), int32(d.strs.Len())}, true
}

// blob reads a base64 string value, decoded as the SDK decodes it
// (base64.StdEncoding, which skips '\r' and '\n'), into data.
func (d *getRecordsDecoder) blob() (span, bool) {
	if d.i >= len(d.b) || d.b[d.i] != '"' {
		return absent, false
	}
	// Data is plain base64 but for a service that escapes '/' or splits
	// lines: decode up to the next quote, the base64 decoder checking every
	// byte. It would skip a raw '\r' or '\n', which JSON forbids: a
	// padded base64 text of 4k bytes with no line breaks decodes to at
	// least 3k-2 bytes, with any (4 or more, for the rest to be whole
	// quanta) to at most 3k-3.
	start := d.i + 1
	if n := bytes.IndexByte(d.b[start:], '"'); n >= 0 && n%4 == 0 {
		seg := d.b[start : start+n]
		if m, ok := d.decode64(seg); ok && m >= n/4*3-2 {
			d.i = start + n + 1
			return span{int32(len(d.data) - m), int32(len(d.data))}, true
		}
	}
	raw, ok := d.unquoted()
	if !ok {
		return absent, false
	}
	m, ok := d.decode64(raw)
	if !ok {
		return absent, false
	}
	return span{int32(len(d.data) - m), int32(len(d.data))}, true
}

// decode64 appends the decoding of s to data, reporting its length.
func (d *getRecordsDecoder) decode64(s []byte) (int, bool) {
	off := len(d.data)
	n := base64.StdEncoding.DecodedLen(len(s))
	if cap(d.data)-off < n {
		d.data = slices.Grow(d.data, n+d.more(off))
	}
	m, err := base64.StdEncoding.Decode(d.data[off:off+n], s)
	if err != nil {
		return 0, false
	}
	d.data = d.data[:off+m]
	return m, true
}

// number reads a number token, checked as the SDK's parser checks it.
func (d *getRecordsDecoder) number() ([]byte, bool) {
	b, i := d.b, d.i
	if i < len(b) && b[i] == '-' {
		i++
	}
	digits := i
	i = skipDigits(b, i)
	if i == digits || b[digits] == '0' && i-digits > 1 {
		return nil, false
	}
	if i < len(b) && b[i] == '.' {
		digits = i + 1
		if i = skipDigits(b, digits); i == digits {
			return nil, false
		}
	}
	if i < len(b) && (b[i] == 'e' || b[i] == 'E') {
		i++
		if i < len(b) && (b[i] == '+' || b[i] == '-') {
			i++
		}
		digits = i
		if i = skipDigits(b, i); i == digits {
			return nil, false
		}
	}
	tok := b[d.i:i]
	d.i = i
	return tok, true
}

// skipDigits is the index of the first byte of b at or after i that is not
// a decimal digit.
func skipDigits(b []byte, i int) int {
	for i < len(b) && '0' <= b[i] && b[i] <= '9' {
		i++
	}
	return i
}

// int64 reads an integer as the SDK's ReadInt64 does: digits only.
func (d *getRecordsDecoder) int64() (int64, bool) {
	tok, ok := d.number()
	if !ok {
		return 0, false
	}
	return parseInt(tok)
}

// timestamp reads epoch seconds as the SDK's ReadTime does: an integer
// converted, anything else through strconv.ParseFloat. (The SDK also takes
// the strings "NaN" and "Infinity", and panics on NaN: those go to it.)
func (d *getRecordsDecoder) timestamp() (time.Time, bool) {
	tok, ok := d.number()
	if !ok {
		return time.Time{}, false
	}
	var f float64
	if n, ok := parseInt(tok); ok {
		f = float64(n)
	} else if f, ok = parseFloat(tok); !ok {
		return time.Time{}, false
	}
	return epochSeconds(f), true
}

// parseFloat is strconv.ParseFloat(string(tok), 64) for a JSON number tok,
// done without it when that is exact: a mantissa below 2^53 and a power of
// ten up to 1e22 are exact float64s, so their product or quotient is the
// correctly rounded value ParseFloat returns. Seconds with a fraction
// (1.700000000123E9) are such numbers.
func parseFloat(tok []byte) (float64, bool) {
	var mant uint64
	exp, i := 0, 0
	neg := tok[0] == '-'
	if neg {
		i++
	}
	digits := func(frac bool) bool {
		for ; i < len(tok) && '0' <= tok[i] && tok[i] <= '9'; i++ {
			if mant >= 1<<53 {
				return false
			}
			mant = mant*10 + uint64(tok[i]-'0')
			if frac {
				exp--
			}
		}
		return true
	}
	if !digits(false) {
		return slowParseFloat(tok)
	}
	if i < len(tok) && tok[i] == '.' {
		i++
		if !digits(true) {
			return slowParseFloat(tok)
		}
	}
	if i < len(tok) { // 'e' or 'E', then an exponent the grammar checked
		e, ok := parseInt(bytes.TrimPrefix(tok[i+1:], []byte{'+'}))
		if !ok || e < -400 || e > 400 {
			return slowParseFloat(tok)
		}
		exp += int(e)
	}
	if mant >= 1<<53 || exp < -22 || exp > 22 {
		return slowParseFloat(tok)
	}
	f := float64(mant)
	if exp >= 0 {
		f *= pow10[exp]
	} else {
		f /= pow10[-exp]
	}
	if neg {
		f = -f
	}
	return f, true
}

var pow10 = [...]float64{1e0, 1e1, 1e2, 1e3, 1e4, 1e5, 1e6, 1e7, 1e8, 1e9, 1e10,
	1e11, 1e12, 1e13, 1e14, 1e15, 1e16, 1e17, 1e18, 1e19, 1e20, 1e21, 1e22}

func slowParseFloat(tok []byte) (float64, bool) {
	f, err := strconv.ParseFloat(string(tok), 64)
	return f, err == nil
}

// epochSeconds is smithy-go's time.ParseEpochSeconds without its big.Float:
// that multiplies by 1e3 at 53 bits rounding to nearest even, which is the
// float64 product, save that a big.Float cannot overflow, and truncates to
// an int64, saturating.
func epochSeconds(v float64) time.Time {
	ms := v * 1e3
	var i int64
	switch {
	case ms >= 0x1p63:
		i = math.MaxInt64
	case ms < -0x1p63:
		i = math.MinInt64
	default:
		i = int64(ms)
	}
	return time.Unix(0, i*1e6).UTC()
}

// parseInt is the SDK's: an optional minus, then decimal digits that fit.
func parseInt(b []byte) (int64, bool) {
	if len(b) == 0 {
		return 0, false
	}
	neg := false
	if b[0] == '-' {
		neg = true
		b = b[1:]
		if len(b) == 0 {
			return 0, false
		}
	}
	const cutoff = math.MaxUint64/10 + 1
	var n uint64
	for _, c := range b {
		if c < '0' || c > '9' || n >= cutoff {
			return 0, false
		}
		nn := n*10 + uint64(c-'0')
		if nn < n {
			return 0, false
		}
		n = nn
		if n > uint64(math.MaxInt64) {
			if neg && n == uint64(math.MaxInt64)+1 {
				return math.MinInt64, true
			}
			return 0, false
		}
	}
	if neg {
		return -int64(n), true
	}
	return int64(n), true
}

// skip reads a value of any kind.
func (d *getRecordsDecoder) skip() bool {
	d.ws()
	if d.i >= len(d.b) {
		return false
	}
	switch c := d.b[d.i]; c {
	case '"':
		_, _, ok := d.str()
		return ok
	case '{':
		if !d.open('{') {
			return false
		}
		_, more, ok := d.firstKey()
		for ; ok && more; _, more, ok = d.nextKey() {
			if !d.skip() {
				return false
			}
		}
		return ok
	case '[':
		if !d.open('[') {
			return false
		}
		more, ok := d.firstItem()
		for ; ok && more; more, ok = d.nextItem() {
			if !d.skip() {
				return false
			}
		}
		return ok
	case 't', 'f', 'n':
		for _, lit := range [...]string{"true", "false", "null"} {
			if lit[0] == c {
				if d.i+len(lit) > len(d.b) || string(d.b[d.i:d.i+len(lit)]) != lit {
					return false
				}
				d.i += len(lit)
				return true
			}
		}
		return false
	default:
		_, ok := d.number()
		return ok
	}
}

// getu4 and appendUnquoted are encoding/json's getu4 and unquoteBytes, as
// the SDK copies them, for a string already checked: invalid UTF-8 and
// unpaired surrogates become U+FFFD.
func getu4(s []byte) rune {
	if len(s) < 6 || s[0] != '\\' || s[1] != 'u' {
		return -1
	}
	var r rune
	for _, c := range s[2:6] {
		switch {
		case '0' <= c && c <= '9':
			c = c - '0'
		case 'a' <= c && c <= 'f':
			c = c - 'a' + 10
		case 'A' <= c && c <= 'F':
			c = c - 'A' + 10
		default:
			return -1
		}
		r = r*16 + rune(c)
	}
	return r
}

func appendUnquoted(b, s []byte) []byte {
	for r := 0; r < len(s); {
		switch c := s[r]; {
		case c == '\\':
			switch s[r+1] {
			case 'b':
				b = append(b, '\b')
			case 'f':
				b = append(b, '\f')
			case 'n':
				b = append(b, '\n')
			case 'r':
				b = append(b, '\r')
			case 't':
				b = append(b, '\t')
			case 'u':
				rr := getu4(s[r:])
				r += 6
				if utf16.IsSurrogate(rr) {
					if dec := utf16.DecodeRune(rr, getu4(s[r:])); dec != unicode.ReplacementChar {
						r += 6
						b = utf8.AppendRune(b, dec)
						continue
					}
					rr = unicode.ReplacementChar
				}
				b = utf8.AppendRune(b, rr)
				continue
			default: // '"', '\\', '/'
				b = append(b, s[r+1])
			}
			r += 2
		case c < utf8.RuneSelf:
			b = append(b, c)
			r++
		default:
			rr, size := utf8.DecodeRune(s[r:])
			r += size
			b = utf8.AppendRune(b, rr)
		}
	}
	return b
}
