package emulator

import (
	"fmt"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/stretchr/testify/assert"
)

// recs builds records of one channel from (sender, recipient, offset from
// t0) triples.
func recs(channel string, rows ...any) []Record {
	var out []Record
	for i := 0; i+2 < len(rows); i += 3 {
		var at time.Duration
		switch v := rows[i+2].(type) {
		case time.Duration:
			at = v
		case int: // an untyped constant such as 0
			at = time.Duration(v)
		default:
			panic(fmt.Sprintf("recs: offset %v is %T", v, v))
		}
		out = append(out, Record{Channel: channel, Sender: rows[i].(string), Recipient: rows[i+1].(string), At: t0.Add(at)})
	}
	return out
}

func TestMaxInSpan(t *testing.T) {
	t.Parallel()
	mixed := append(recs(ChannelWhatsApp,
		"a", "+1", ms(999), // out of order on purpose
		"a", "+2", ms(0),
		"a", "+3", ms(500),
		"a", "+4", ms(1000), // 0 and 1000 never share a half-open 1s span
		"b", "+1", ms(0),
	), recs(ChannelSMS, "a", "+1", ms(1), "a", "+1", ms(2), "a", "+1", ms(3), "a", "+1", ms(4))...)

	for _, tc := range []struct {
		name    string
		records []Record
		channel string
		span    time.Duration
		want    map[string]int
	}{
		{name: "no records", channel: ChannelWhatsApp, span: time.Second, want: map[string]int{}},
		{name: "per sender, one channel", records: mixed, channel: ChannelWhatsApp, span: time.Second, want: map[string]int{"a": 3, "b": 1}},
		{name: "other channel", records: mixed, channel: ChannelSMS, span: time.Second, want: map[string]int{"a": 4}},
		{name: "span 1001ms reaches 0 and 1000", records: mixed, channel: ChannelWhatsApp, span: ms(1001), want: map[string]int{"a": 4, "b": 1}},
		{name: "span 500ms", records: mixed, channel: ChannelWhatsApp, span: ms(500), want: map[string]int{"a": 2, "b": 1}},
		{name: "span 0 holds nothing", records: mixed, channel: ChannelWhatsApp, span: 0, want: map[string]int{"a": 0, "b": 0}},
		{name: "same instant", records: recs(ChannelWebhook, "h", "", ms(5), "h", "", ms(5), "h", "", ms(5)), channel: ChannelWebhook, span: time.Nanosecond, want: map[string]int{"h": 3}},
		{name: "80 at 12.5ms", records: spaced(80, ms(12.5)), channel: ChannelWhatsApp, span: time.Second, want: map[string]int{"p": 80}},
		{name: "81 at 12.5ms", records: spaced(81, ms(12.5)), channel: ChannelWhatsApp, span: time.Second, want: map[string]int{"p": 80}},
		{name: "81 at 12.3ms", records: spaced(81, ms(12.3)), channel: ChannelWhatsApp, span: time.Second, want: map[string]int{"p": 81}},
	} {
		got := MaxInSpan(tc.records, tc.channel, tc.span)
		if diff := cmp.Diff(tc.want, got); diff != "" {
			t.Errorf("%s (-want +got):\n%s", tc.name, diff)
		}
	}
	// The input is not reordered.
	assert.Equal(t, t0.Add(ms(999)), mixed[0].At)
}

// spaced is n WhatsApp records from sender "p" to distinct recipients, step
// apart from t0.
func spaced(n int, step time.Duration) []Record {
	out := make([]Record, n)
	for i := range out {
		out[i] = Record{Channel: ChannelWhatsApp, Sender: "p", Recipient: recipient(i), At: t0.Add(time.Duration(i) * step)}
	}
	return out
}

func TestMinPairGap(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name    string
		records []Record
		gap     time.Duration
		ok      bool
	}{
		{name: "no records"},
		{name: "no repeat", records: recs(ChannelWhatsApp, "a", "+1", ms(0), "a", "+2", ms(1), "b", "+1", ms(2))},
		{name: "one pair", records: recs(ChannelWhatsApp, "a", "+1", 0, "a", "+2", ms(1), "a", "+1", 6*time.Second), gap: 6 * time.Second, ok: true},
		{name: "smallest of consecutive gaps", records: recs(ChannelWhatsApp,
			"a", "+1", 0, "a", "+1", 12*time.Second, "a", "+1", ms(5999), // out of order: gaps 5.999s and 6.001s
			"b", "+2", 0, "b", "+2", 7*time.Second,
		), gap: ms(5999), ok: true},
		{name: "same instant", records: recs(ChannelWhatsApp, "a", "+1", ms(3), "a", "+1", ms(3)), gap: 0, ok: true},
		{name: "other channels ignored", records: append(
			recs(ChannelSMS, "a", "+1", 0, "a", "+1", ms(1)),
			recs(ChannelWhatsApp, "a", "+1", 0, "a", "+1", 10*time.Second)...), gap: 10 * time.Second, ok: true},
	} {
		gap, ok := MinPairGap(tc.records)
		assert.Equal(t, tc.ok, ok, tc.name)
		assert.Equal(t, tc.gap, gap, tc.name)
	}
}
