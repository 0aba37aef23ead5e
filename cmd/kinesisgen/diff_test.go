package main

import (
	"strconv"
	"strings"
	"testing"
)

func TestUnifiedDiff(t *testing.T) {
	numbered := func(from, to int, change map[int]string) string {
		var b strings.Builder
		for i := from; i <= to; i++ {
			if c, ok := change[i]; ok {
				if c != "" {
					b.WriteString(c + "\n")
				}
				continue
			}
			b.WriteString("line " + strconv.Itoa(i) + "\n")
		}
		return b.String()
	}
	tests := []struct {
		name, old, new, want string
	}{
		{name: "equal", old: "a\nb\n", new: "a\nb\n", want: ""},
		{
			name: "one line changed in the middle",
			old:  numbered(1, 10, nil),
			new:  numbered(1, 10, map[int]string{5: "five"}),
			want: "--- old\n+++ new\n@@ -2,7 +2,7 @@\n line 2\n line 3\n line 4\n-line 5\n+five\n line 6\n line 7\n line 8\n",
		},
		{
			name: "a line appended",
			old:  "a\nb\nc\nd\n",
			new:  "a\nb\nc\nd\n// edited\n",
			want: "--- old\n+++ new\n@@ -2,3 +2,4 @@\n b\n c\n d\n+// edited\n",
		},
		{
			name: "two changes far apart make two hunks",
			old:  numbered(1, 20, nil),
			new:  numbered(1, 20, map[int]string{2: "", 19: "nineteen"}),
			want: "--- old\n+++ new\n@@ -1,5 +1,4 @@\n line 1\n-line 2\n line 3\n line 4\n line 5\n" +
				"@@ -16,5 +15,5 @@\n line 16\n line 17\n line 18\n-line 19\n+nineteen\n line 20\n",
		},
		{
			name: "from nothing",
			old:  "",
			new:  "x\n",
			want: "--- old\n+++ new\n@@ -0,0 +1,1 @@\n+x\n",
		},
		{
			name: "no newline at the end",
			old:  "a\n",
			new:  "a",
			want: "--- old\n+++ new\n@@ -1,1 +1,1 @@\n-a\n+a\n\\ No newline at end of file\n",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := unifiedDiff("old", "new", []byte(tt.old), []byte(tt.new)); got != tt.want {
				t.Errorf("got\n%s\nwant\n%s", got, tt.want)
			}
		})
	}
}
