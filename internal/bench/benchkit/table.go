package benchkit

import (
	"fmt"
	"io"
	"os"
	"strings"
)

// Row is one measure of a benchmark's summary table: ours against a peer,
// their ratio and the goal the ratio (or ours) is held to.
type Row struct {
	Measure    string
	Ours, Peer string  // formatted figures, with units
	Ratio      float64 // ours / peer; 0 prints nothing
	Goal       string  // empty: no goal
	Met        *bool   // nil: no verdict
}

// Verdict is a Met value.
func Verdict(ok bool) *bool { return &ok }

// Table is a summary table, printed as Markdown so that BENCHMARKS.md takes
// it as printed. Note is printed under it (the load average, the runs).
type Table struct {
	Title string
	Rows  []Row
	Note  string
}

// Add appends a row.
func (t *Table) Add(r Row) { t.Rows = append(t.Rows, r) }

// Print writes the table to stdout.
func (t *Table) Print() { t.Fprint(os.Stdout) }

// Fprint writes the table to w.
func (t *Table) Fprint(w io.Writer) {
	fmt.Fprintf(w, "\n%s\n\n", t.Title)
	fmt.Fprintln(w, "| measure | ours | peer | ratio | goal |")
	fmt.Fprintln(w, "| --- | ---: | ---: | ---: | --- |")
	for _, r := range t.Rows {
		ratio := ""
		if r.Ratio != 0 {
			ratio = fmt.Sprintf("%.2f", r.Ratio)
		}
		goal := r.Goal
		if r.Met != nil {
			if *r.Met {
				goal += " — met"
			} else {
				goal += " — NOT met"
			}
		}
		fmt.Fprintf(w, "| %s | %s | %s | %s | %s |\n", r.Measure, r.Ours, r.Peer, ratio, strings.TrimSpace(goal))
	}
	if t.Note != "" {
		fmt.Fprintf(w, "\n%s\n", t.Note)
	}
}

// LoadAverage is the 1-minute load average from /proc/loadavg ("?" where
// there is none), for a table's note: figures on a shared machine say little
// without it.
func LoadAverage() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "?"
	}
	f := strings.Fields(string(b))
	if len(f) == 0 {
		return "?"
	}
	return f[0]
}
