package tasks_test

import (
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/sluice-dev/sluice/tasks"
)

// A channel's groups are its queue then q.g0 … q.g<n-1>; a sender's sends
// always fall in one of them, the same for the same sender, and many
// senders fall in every group.
func TestGroupQueues(t *testing.T) {
	require.Equal(t, []string{"whatsapp"}, tasks.GroupQueues("whatsapp", 0))
	require.Equal(t, []string{"whatsapp"}, tasks.GroupQueues("whatsapp", 1))
	require.Equal(t, []string{"whatsapp", "whatsapp.g0", "whatsapp.g1", "whatsapp.g2"}, tasks.GroupQueues("whatsapp", 3))
	require.Equal(t, "whatsapp", tasks.GroupQueue("whatsapp", 1, "106540352242922"))
	require.Equal(t, "whatsapp", tasks.GroupQueue("whatsapp", 8, ""), "a send without the field stays in the queue")
	// Pinned, since a release that routed otherwise would split a sender's
	// sends over two groups: FNV-1a 32 of "106540352242922" is 0x84a3dee2,
	// modulo 8 is 2 (computed apart from Go's hash/fnv).
	require.Equal(t, "whatsapp.g2", tasks.GroupQueue("whatsapp", 8, "106540352242922"))

	const n = 12
	count := map[string]int{}
	for i := range 1200 {
		v := fmt.Sprintf("1065403522%05d", i)
		q := tasks.GroupQueue("whatsapp", n, v)
		require.Equal(t, q, tasks.GroupQueue("whatsapp", n, v), "stable")
		require.Contains(t, tasks.GroupQueues("whatsapp", n)[1:], q)
		count[q]++
	}
	require.Len(t, count, n, "every group takes numbers")
	for q, c := range count {
		require.InDelta(t, 100, c, 40, "%s: 1,200 numbers over 12 groups", q)
	}
}
