package throttle_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sluice-dev/sluice/throttle"
)

// Probe turns: none before the first interval, one process at a time, the
// interval doubling up to the most; a record set again keeps its count;
// Resume ends the record with its pause. A lock's expiry is stood in for
// by deleting it, so the test needs no wall-clock wait.
func TestProbeTurnsAreSpacedAndDouble(t *testing.T) {
	backends(t, func(t *testing.T, rdb redis.UniversalClient) {
		ctx := context.Background()
		a := throttle.NewRedis(rdb, throttle.Options{OverrideRefresh: -1})
		b := throttle.NewRedis(rdb, throttle.Options{OverrideRefresh: -1})
		key := throttle.PauseKey("wa", "channel", "")
		lock := a.Key(key) + "|probe-lock"
		expire := func() {
			t.Helper()
			if err := rdb.Del(ctx, lock).Err(); err != nil {
				t.Fatal(err)
			}
		}
		pttl := func() time.Duration {
			t.Helper()
			d, err := rdb.PTTL(ctx, lock).Result()
			if err != nil {
				t.Fatal(err)
			}
			return d
		}
		const first, most = 30 * time.Second, 100 * time.Second
		if _, ok, err := a.ClaimProbe(ctx, key, most); err != nil || ok {
			t.Fatalf("no record: ok %v, err %v", ok, err)
		}
		if _, err := a.Pause(ctx, key, throttle.PauseOptions{Wait: time.Hour, Code: 190, Reason: "credentials refused"}); err != nil {
			t.Fatal(err)
		}
		fields := map[string]string{"phone_number_id": "106540352242922"}
		if err := a.SetProbe(ctx, key, fields, 190, first, time.Hour); err != nil {
			t.Fatal(err)
		}
		if d := pttl(); d <= first-time.Second || d > first {
			t.Fatalf("first turn in %v, want %v", d, first)
		}
		if _, ok, _ := b.ClaimProbe(ctx, key, most); ok {
			t.Fatal("a turn before the first interval passed")
		}
		var wantNext = []time.Duration{60 * time.Second, most, most}
		for i, want := range wantNext {
			expire()
			p, ok, err := b.ClaimProbe(ctx, key, most)
			if err != nil || !ok {
				t.Fatalf("turn %d: ok %v, err %v", i+1, ok, err)
			}
			if p.N != i+1 || p.Next != want || p.Code != 190 || p.Fields["phone_number_id"] != "106540352242922" {
				t.Fatalf("turn %d: %+v, want n %d, next %v, code 190 and the fields", i+1, p, i+1, want)
			}
			if _, ok, _ := a.ClaimProbe(ctx, key, most); ok {
				t.Fatalf("turn %d: a second process got the same turn", i+1)
			}
			if d := pttl(); d <= want-time.Second || d > want {
				t.Fatalf("turn %d: next turn in %v, want %v", i+1, d, want)
			}
		}
		// Set again (a refusal of a send that was in flight): the count
		// and the lock stay.
		if err := a.SetProbe(ctx, key, fields, 190, first, time.Hour); err != nil {
			t.Fatal(err)
		}
		if d := pttl(); d <= most-time.Second {
			t.Fatalf("set again: the lock moved to %v", d)
		}
		expire()
		if p, ok, _ := a.ClaimProbe(ctx, key, most); !ok || p.N != 4 {
			t.Fatalf("after setting again: %+v, %v; want the 4th probe", p, ok)
		}
		if ok, err := a.Resume(ctx, key); err != nil || !ok {
			t.Fatalf("resume: %v, %v", ok, err)
		}
		expire()
		if _, ok, _ := b.ClaimProbe(ctx, key, most); ok {
			t.Fatal("a turn after Resume ended the pause and its record")
		}
	})
}

func TestProbeErrors(t *testing.T) {
	backends(t, func(t *testing.T, rdb redis.UniversalClient) {
		ctx := context.Background()
		l := throttle.NewRedis(rdb, throttle.Options{OverrideRefresh: -1})
		key := throttle.PauseKey("wa", "channel", "")
		for name, err := range map[string]error{
			"bad key":        l.SetProbe(ctx, "", nil, 190, time.Second, time.Hour),
			"first interval": l.SetProbe(ctx, key, nil, 190, 0, time.Hour),
		} {
			if !errors.Is(err, throttle.ErrBadRequest) {
				t.Errorf("%s: %v, want ErrBadRequest", name, err)
			}
		}
		if _, _, err := l.ClaimProbe(ctx, key, 0); !errors.Is(err, throttle.ErrBadRequest) {
			t.Errorf("most 0: %v, want ErrBadRequest", err)
		}
		// A record whose fields are not JSON is a malformed reply, not a
		// probe with no fields.
		if err := rdb.HSet(ctx, l.Key(key)+"|probe", "fields", "{not json", "code", "190", "first", "1000").Err(); err != nil {
			t.Fatal(err)
		}
		if _, _, err := l.ClaimProbe(ctx, key, time.Minute); !errors.Is(err, throttle.ErrMalformedReply) {
			t.Errorf("malformed record: %v, want ErrMalformedReply", err)
		}
	})
}

// An operator's pause stays the operator's: a provider's pause of the
// same key while it lasts extends it but keeps its code, reason and flag.
func TestOperatorPauseKeepsItsOwner(t *testing.T) {
	backends(t, func(t *testing.T, rdb redis.UniversalClient) {
		ctx := context.Background()
		l := throttle.NewRedis(rdb, throttle.Options{OverrideRefresh: -1})
		key := throttle.PauseKey("wa", "channel", "")
		if _, err := l.Pause(ctx, key, throttle.PauseOptions{Wait: time.Hour, Reason: "paused by an operator", Operator: true}); err != nil {
			t.Fatal(err)
		}
		if _, err := l.Pause(ctx, key, throttle.PauseOptions{Wait: 2 * time.Hour, Code: 190, Reason: "credentials refused"}); err != nil {
			t.Fatal(err)
		}
		p, err := l.PauseOf(ctx, key)
		if err != nil || p == nil {
			t.Fatalf("pause: %+v, %v", p, err)
		}
		if !p.Operator || p.Code != 0 || p.Reason != "paused by an operator" {
			t.Fatalf("%+v: want the operator's pause, code 0, its reason", p)
		}
		if time.Until(p.Until) < 90*time.Minute {
			t.Fatalf("until %v: the provider's pause should extend it", p.Until)
		}
	})
}
