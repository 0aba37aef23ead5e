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
	receipts  []Receipt        // in the order confirmed (one key, one order)
	shipments map[string][]int // customer -> order ids as delivered
	delivered int
	want      int
	done      chan struct{}
}

func newBook(want int) *Book {
	return &Book{
		journal:   map[string][]int{},
		shipments: map[string][]int{},
		want:      want,
		done:      make(chan struct{}),
	}
}

func (b *Book) posted(e Entry) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.journal[e.Customer] = append(b.journal[e.Customer], e.Order)
}

func (b *Book) receipted(r Receipt) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.receipts = append(b.receipts, r)
}

func (b *Book) shipped(customer string, s Shipment) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.shipments[customer] = append(b.shipments[customer], s.Order)
	b.delivered++
	if b.delivered == b.want {
		close(b.done)
	}
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
		ok := ascending(b.journal[c]) && ascending(b.shipments[c])
		if !ok {
			outOfOrder++
		}
		fmt.Fprintf(w, "%-6s journal %s  shipped %s  %s\n", c, ids(b.journal[c]), ids(b.shipments[c]), verdict(ok))
	}
	receipts := make([]int, len(b.receipts))
	for i, r := range b.receipts {
		receipts[i] = r.Order
	}
	fmt.Fprintf(w, "receipts (one key, one order): %s\n", ids(receipts))
	entries := 0
	for _, j := range b.journal {
		entries += len(j)
	}
	fmt.Fprintf(w, "summary: %d customers, %d journal entries, %d receipts, %d shipments delivered, %d customers out of order\n",
		len(customers), entries, len(b.receipts), b.delivered, outOfOrder)
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
