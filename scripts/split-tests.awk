# Deals a split package's tests to its parts (scripts/test-packages.sh):
#   awk -v pkg=runtime/shard -v n=PARTS -v live=REGEXP -f split-tests.awk WEIGHTS -
# reads WEIGHTS ("package seconds test" lines) and then the test names, one
# a line, and prints "part test" for each: part 0 for the tests matching
# live (when n > 1), the others by weight (1 s when not listed), the
# heaviest first, each to the part 1..n-1 with the least weight so far.
FILENAME != "-" {
	if ($1 == pkg)
		w[$3] = $2
	next
}
n > 1 && $0 ~ live {
	print 0, $0
	next
}
{
	t[++m] = $0
	tw[m] = ($0 in w) ? w[$0] : 1
}
END {
	k = n > 1 ? n - 1 : 1
	for (;;) { # the heaviest left (ties: the first listed)
		b = 0
		for (j = 1; j <= m; j++)
			if (!(j in done) && (b == 0 || tw[j] > tw[b]))
				b = j
		if (b == 0)
			break
		done[b] = 1
		p = 1
		for (q = 2; q <= k; q++)
			if (sum[q] < sum[p])
				p = q
		sum[p] += tw[b]
		print (n > 1 ? p : 0), t[b]
	}
}
