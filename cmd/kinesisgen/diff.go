package main

import (
	"fmt"
	"strings"
)

// diffContext is the number of unchanged lines around each change.
const diffContext = 3

// maxDiffCells bounds the line-matching table; larger differences are shown
// as the whole changed region removed and added.
const maxDiffCells = 4 << 20

// unifiedDiff is a unified diff turning old into new (as diff -u prints
// one), with oldName and newName as its labels; "" when they are equal.
func unifiedDiff(oldName, newName string, old, new []byte) string {
	a, b := lines(old), lines(new)
	ops := diffLines(a, b)
	var out strings.Builder
	// oldAt[i] and newAt[i] count the lines of each side before ops[i].
	oldAt, newAt := make([]int, len(ops)+1), make([]int, len(ops)+1)
	for i, o := range ops {
		oldAt[i+1], newAt[i+1] = oldAt[i], newAt[i]
		if o.kind != '+' {
			oldAt[i+1]++
		}
		if o.kind != '-' {
			newAt[i+1]++
		}
	}
	changed := func(i int) bool { return ops[i].kind != ' ' }
	for i := 0; i < len(ops); {
		for i < len(ops) && !changed(i) {
			i++
		}
		if i == len(ops) {
			break
		}
		end := i // the last change of this hunk
		for {
			k := end + 1
			for k < len(ops) && !changed(k) {
				k++
			}
			if k < len(ops) && k-end-1 <= 2*diffContext {
				end = k
				continue
			}
			break
		}
		start, stop := max(0, i-diffContext), min(len(ops), end+1+diffContext)
		if out.Len() == 0 {
			fmt.Fprintf(&out, "--- %s\n+++ %s\n", oldName, newName)
		}
		fmt.Fprintf(&out, "@@ -%s +%s @@\n", hunkRange(oldAt[start], oldAt[stop]-oldAt[start]), hunkRange(newAt[start], newAt[stop]-newAt[start]))
		for _, o := range ops[start:stop] {
			out.WriteByte(o.kind)
			out.WriteString(o.line)
			out.WriteByte('\n')
		}
		i = stop
	}
	return out.String()
}

// hunkRange is a hunk header's "start,count", 1-based; an empty range
// names the line before it, as diff -u does.
func hunkRange(before, count int) string {
	if count == 0 {
		return fmt.Sprintf("%d,0", before)
	}
	return fmt.Sprintf("%d,%d", before+1, count)
}

type diffOp struct {
	kind byte // ' ', '-' or '+'
	line string
}

// diffLines matches a and b line by line (a longest common subsequence
// between their common prefix and suffix) and returns the edit script.
func diffLines(a, b []string) []diffOp {
	p := 0
	for p < len(a) && p < len(b) && a[p] == b[p] {
		p++
	}
	s := 0
	for s < len(a)-p && s < len(b)-p && a[len(a)-1-s] == b[len(b)-1-s] {
		s++
	}
	ops := make([]diffOp, 0, len(a)+len(b))
	for _, l := range a[:p] {
		ops = append(ops, diffOp{' ', l})
	}
	ma, mb := a[p:len(a)-s], b[p:len(b)-s]
	if (len(ma)+1)*(len(mb)+1) > maxDiffCells {
		for _, l := range ma {
			ops = append(ops, diffOp{'-', l})
		}
		for _, l := range mb {
			ops = append(ops, diffOp{'+', l})
		}
	} else {
		ops = append(ops, lcsOps(ma, mb)...)
	}
	for _, l := range a[len(a)-s:] {
		ops = append(ops, diffOp{' ', l})
	}
	return ops
}

// lcsOps is the edit script of a longest common subsequence of a and b,
// removals before additions within a changed run.
func lcsOps(a, b []string) []diffOp {
	n, m := len(a), len(b)
	// l[i][j] is the LCS length of a[i:] and b[j:].
	l := make([]int32, (n+1)*(m+1))
	at := func(i, j int) *int32 { return &l[i*(m+1)+j] }
	for i := n - 1; i >= 0; i-- {
		for j := m - 1; j >= 0; j-- {
			if a[i] == b[j] {
				*at(i, j) = *at(i+1, j+1) + 1
			} else {
				*at(i, j) = max(*at(i+1, j), *at(i, j+1))
			}
		}
	}
	var ops []diffOp
	i, j := 0, 0
	for i < n || j < m {
		switch {
		case i < n && j < m && a[i] == b[j]:
			ops = append(ops, diffOp{' ', a[i]})
			i, j = i+1, j+1
		case j == m || i < n && *at(i+1, j) >= *at(i, j+1):
			ops = append(ops, diffOp{'-', a[i]})
			i++
		default:
			ops = append(ops, diffOp{'+', b[j]})
			j++
		}
	}
	return ops
}

// lines splits text into lines without their newlines; a last line without
// one is marked as diff -u marks it.
func lines(text []byte) []string {
	if len(text) == 0 {
		return nil
	}
	s := string(text)
	noEOL := !strings.HasSuffix(s, "\n")
	ls := strings.Split(strings.TrimSuffix(s, "\n"), "\n")
	if noEOL {
		ls[len(ls)-1] += "\n\\ No newline at end of file"
	}
	return ls
}
