package main

import (
	"fmt"
	"io"
	"sort"
	"strings"
	"sync"
)

// Book records what the handlers did, per customer, in the order they did it.
type Book struct {
	mu        sync.Mutex
	journal   map[string][]int // customer -> order ids as posted
	receipts  map[string][]int // customer -> order ids as receipted
	shipments map[string][]int // customer -> order ids as delivered
	dead      []string         // dead letters, as Inspect read them
	delivered int
	want      int // shipments
	wantDead  int
	done      chan struct{}
	finished  bool // done is closed
}

func newBook(want, wantDead int) *Book {
	return &Book{
		journal:   map[string][]int{},
		receipts:  map[string][]int{},
		shipments: map[string][]int{},
		want:      want,
		wantDead:  wantDead,
		done:      make(chan struct{}),
	}
}

// finishedLocked closes done once every shipment and dead letter is in
// (later orders, with -status, count on).
func (b *Book) finishedLocked() {
	if !b.finished && b.delivered >= b.want && len(b.dead) >= b.wantDead {
		b.finished = true
		close(b.done)
	}
}

func (b *Book) deadLettered(line string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.dead = append(b.dead, line)
	b.finishedLocked()
}

func (b *Book) posted(e Entry) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.journal[e.Customer] = append(b.journal[e.Customer], e.Order)
}

func (b *Book) receipted(r Receipt) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.receipts[r.Customer] = append(b.receipts[r.Customer], r.Order)
}

func (b *Book) shipped(customer string, s Shipment) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.shipments[customer] = append(b.shipments[customer], s.Order)
	b.delivered++
	b.finishedLocked()
}

// Report prints each customer's journal and shipments, the receipts, and a
// summary line; it returns the number of customers seen out of order.
func (b *Book) Report(w io.Writer) (outOfOrder int) {
	b.mu.Lock()
	defer b.mu.Unlock()
	customers := make([]string, 0, len(b.journal))
	for c := range b.journal {
		customers = append(customers, c)
	}
	sort.Strings(customers)
	for _, c := range customers {
		ok := ascending(b.journal[c]) && ascending(b.receipts[c]) && ascending(b.shipments[c])
		if !ok {
			outOfOrder++
		}
		fmt.Fprintf(w, "%-6s journal %s  receipts %s  shipped %s  %s\n", c, ids(b.journal[c]), ids(b.receipts[c]), ids(b.shipments[c]), verdict(ok))
	}
	for _, d := range b.dead {
		fmt.Fprintf(w, "dead letter: %s\n", d)
	}
	entries, receipts := 0, 0
	for c, j := range b.journal {
		entries += len(j)
		receipts += len(b.receipts[c])
	}
	fmt.Fprintf(w, "summary: %d customers, %d journal entries, %d receipts, %d shipments delivered, %d dead letters, %d customers out of order\n",
		len(customers), entries, receipts, b.delivered, len(b.dead), outOfOrder)
	return outOfOrder
}

func ascending(xs []int) bool { return sort.IntsAreSorted(xs) }

func ids(xs []int) string {
	s := make([]string, len(xs))
	for i, x := range xs {
		s[i] = fmt.Sprint(x)
	}
	return "[" + strings.Join(s, " ") + "]"
}

func verdict(inOrder bool) string {
	if inOrder {
		return "in order"
	}
	return "OUT OF ORDER"
}
