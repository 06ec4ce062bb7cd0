package campaign

import (
	"bytes"
	"flag"
	"os"
	"path/filepath"
	"testing"

	"github.com/nyaruka/phonenumbers"
	"github.com/stretchr/testify/require"
)

var update = flag.Bool("update", false, "rewrite examples/recipients.csv")

func TestFictionalNumbersAreValid(t *testing.T) {
	t.Parallel()
	nums := fictionalNumbers()
	require.Len(t, usAreaCodes, 60)
	require.Len(t, nums, 60*100+154)
	seen := map[string]bool{}
	for _, s := range nums {
		n, err := phonenumbers.Parse(s, "ZZ")
		require.NoError(t, err, s)
		require.True(t, phonenumbers.IsValidNumber(n), "%s is not a valid number", s)
		require.Equal(t, s, phonenumbers.Format(n, phonenumbers.E164))
		require.False(t, seen[s], "%s listed twice", s)
		seen[s] = true
	}
}

func generate(t *testing.T, n int, seed int64) []byte {
	t.Helper()
	var buf bytes.Buffer
	require.NoError(t, Generate(&buf, n, seed))
	return buf.Bytes()
}

func TestGenerateDeterministic(t *testing.T) {
	t.Parallel()
	require.Equal(t, generate(t, 500, 7), generate(t, 500, 7))
	require.NotEqual(t, generate(t, 500, 7), generate(t, 500, 8))
}

// TestGenerateRead checks the mix of rows that Read finds in generated files.
func TestGenerateRead(t *testing.T) {
	t.Parallel()
	for _, n := range []int{0, 1, 40, 99, 100, 250, 1000} {
		res, err := Read(bytes.NewReader(generate(t, n, int64(n))), Options{})
		require.NoError(t, err, "n=%d", n)
		require.Equal(t, []string{"to", "name", "order_id"}, res.Columns)

		bad, repeats, dups := n/100, n*3/100, 0
		if n >= 100 {
			dups = 2
		}
		require.Len(t, res.Rows, n-bad-dups, "n=%d: valid rows", n)
		require.Len(t, res.Rejects, bad+dups, "n=%d: rejects", n)

		// Every line 2..n+1 is accounted for.
		got := outcomes(t, res)
		require.Len(t, got, n)
		for i, o := range got {
			require.Equal(t, i+2, o.Line)
		}

		var nBad, nDup int
		for _, r := range res.Rejects {
			if len(r.Reason) > 13 && r.Reason[:13] == "duplicate of " {
				nDup++
			} else {
				nBad++
			}
		}
		require.Equal(t, bad, nBad, "n=%d: invalid numbers", n)
		require.Equal(t, dups, nDup, "n=%d: exact duplicates", n)

		// Repeated recipients: second rows far enough from the first and
		// not at the end of the file.
		gap, tail := (n+9)/10, n*40/100
		first := map[string]int{}
		nRepeat := 0
		for _, r := range res.Rows {
			pos := r.Line - 2
			p, ok := first[r.To]
			if !ok {
				first[r.To] = pos
				continue
			}
			nRepeat++
			require.GreaterOrEqual(t, pos-p, gap, "n=%d: repeat of %s at line %d", n, r.To, r.Line)
			require.Less(t, pos, tail, "n=%d: repeat of %s at line %d is after the first 40%%", n, r.To, r.Line)
		}
		require.Equal(t, repeats, nRepeat, "n=%d: repeated recipients", n)
		require.Len(t, first, n-bad-dups-repeats, "n=%d: distinct recipients", n)
	}
}

func TestGenerateLimits(t *testing.T) {
	t.Parallel()
	var buf bytes.Buffer
	require.EqualError(t, Generate(&buf, -1, 1), "n: -1 rows, want >= 0")
	require.NoError(t, Generate(&buf, 6400, 1), "6400 rows need 6142 of the 6154 numbers")
	require.ErrorContains(t, Generate(&buf, 7000, 1), "n: 7000 rows need")
}

// TestExampleRecipientsFile keeps examples/recipients.csv equal to
// Generate(1000, 1). Run with -update to rewrite it.
func TestExampleRecipientsFile(t *testing.T) {
	path := filepath.Join("..", "..", "examples", "recipients.csv")
	want := generate(t, 1000, 1)
	if *update {
		require.NoError(t, os.WriteFile(path, want, 0o644))
	}
	got, err := os.ReadFile(path)
	require.NoError(t, err, "run: go test ./internal/campaign -run TestExampleRecipientsFile -update")
	require.True(t, bytes.Equal(want, got), "%s is stale; run: go test ./internal/campaign -run TestExampleRecipientsFile -update", path)
}
