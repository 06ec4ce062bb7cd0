package throttle_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/sluice-dev/sluice/throttle"
)

// A GCRA key whose sends are all planned has no state key yet: List does
// not see it, ListPlanned names it by its backlog.
func TestListPlannedNamesKeysWithOnlyABacklog(t *testing.T) {
	t.Parallel()
	l, _ := reserveLimiter(t)
	ctx := context.Background()
	const key = "whatsapp:number:106540352242922"
	sends := make([]throttle.Send, 200)
	for i := range sends {
		sends[i] = throttle.Send{TaskID: fmt.Sprintf("t%d", i), Requests: []throttle.Request{{Key: key, Limit: mps80, Cost: 1}}}
	}
	if _, err := l.Plan(ctx, throttle.ReserveOptions{}, sends); err != nil {
		t.Fatal(err)
	}
	listed, _, err := l.List(ctx, "", 0, 100)
	if err != nil {
		t.Fatal(err)
	}
	if len(listed) != 0 {
		t.Fatalf("List: %q, want no key (the backlog is not a limiter key)", listed)
	}
	planned, next, err := l.ListPlanned(ctx, "whatsapp:", 0, 100)
	if err != nil {
		t.Fatal(err)
	}
	if next != 0 || len(planned) != 1 || planned[0] != key {
		t.Fatalf("ListPlanned: %q (cursor %d), want [%q]", planned, next, key)
	}
}
