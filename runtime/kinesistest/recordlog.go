package kinesistest

import (
	"sort"
	"time"
)

// chunkSize is how many records one chunk of a shard's log holds. Fixed-size
// chunks mean appending never copies stored records, and trimming frees
// whole chunks.
const chunkSize = 1024

// recordLog is a shard's retained records in arrival order. Every chunk has
// capacity chunkSize and all but the last are full, so record i (counted
// from the oldest retained) is at position head+i of the concatenation.
//
// A record is never modified once added, and adding writes only past the
// last chunk's length, so slices handed out by segments stay valid and
// race-free after the shard's lock is released.
type recordLog struct {
	chunks [][]record
	head   int // records trimmed from the front of chunks[0]
}

func (l *recordLog) len() int {
	if len(l.chunks) == 0 {
		return 0
	}
	return (len(l.chunks)-1)*chunkSize + len(l.chunks[len(l.chunks)-1]) - l.head
}

func (l *recordLog) at(i int) *record {
	p := l.head + i
	return &l.chunks[p/chunkSize][p%chunkSize]
}

func (l *recordLog) add(r record) {
	n := len(l.chunks)
	if n == 0 || len(l.chunks[n-1]) == chunkSize {
		l.chunks = append(l.chunks, make([]record, 0, chunkSize))
		n++
	}
	l.chunks[n-1] = append(l.chunks[n-1], r)
}

// trim drops the records that arrived before cutoff.
func (l *recordLog) trim(cutoff time.Time) {
	n := l.len()
	c := cutoff.UnixNano()
	if n == 0 || l.at(0).arrival >= c {
		return
	}
	drop := sort.Search(n, func(i int) bool { return l.at(i).arrival >= c })
	l.head += drop
	for l.head >= chunkSize {
		l.chunks[0] = nil // let the collector have it
		l.chunks = l.chunks[1:]
		l.head -= chunkSize
	}
}

// search returns the index of the first record whose counter is at least pos
// and, when ts (UnixNano) is non-zero, that arrived at or after ts.
func (l *recordLog) search(pos uint64, ts int64) int {
	n := l.len()
	i := sort.Search(n, func(i int) bool { return l.at(i).counter >= pos })
	if ts != 0 {
		if j := sort.Search(n, func(j int) bool { return l.at(j).arrival >= ts }); j > i {
			i = j
		}
	}
	return i
}

// segments returns the records [from, from+count) as slices of the chunks.
func (l *recordLog) segments(from, count int) [][]record {
	var out [][]record
	for count > 0 {
		p := l.head + from
		c := l.chunks[p/chunkSize]
		off := p % chunkSize
		end := min(len(c), off+count)
		out = append(out, c[off:end:end])
		count -= end - off
		from += end - off
	}
	return out
}
