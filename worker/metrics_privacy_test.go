package worker

import (
	"context"
	"fmt"
	"log/slog"
	"regexp"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	"github.com/sluice-dev/sluice/channels"
	"github.com/sluice-dev/sluice/internal/redistest"
	"github.com/sluice-dev/sluice/rules"
	"github.com/sluice-dev/sluice/tasks"
	"github.com/sluice-dev/sluice/throttle"
)

// phoneRE finds a phone number in a label value.
var phoneRE = regexp.MustCompile(`\+[0-9]`)

// gatherSeries returns every series /metrics would show, as
// "name{label=value,...}", and fails on a label value holding a phone
// number.
func gatherSeries(t *testing.T, reg *prometheus.Registry) map[string]float64 {
	t.Helper()
	mfs, err := reg.Gather()
	require.NoError(t, err)
	out := map[string]float64{}
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			id := mf.GetName() + "{"
			for _, lp := range m.GetLabel() {
				require.NotRegexp(t, phoneRE, lp.GetValue(), "%s: label %s carries a phone number", mf.GetName(), lp.GetName())
				id += lp.GetName() + "=" + lp.GetValue() + ","
			}
			id += "}"
			v := m.GetGauge().GetValue() + m.GetCounter().GetValue() + float64(m.GetHistogram().GetSampleCount())
			out[id] = v
		}
	}
	return out
}

// Pair throttles (WhatsApp 131056) on 500 recipients pause each pair and
// lower each pair's rate; the metrics say how many pairs are adapted and
// the lowest rate, and name no recipient (nor the sender's number): the
// series are the same after 5 recipients as after 500.
func TestMetricsNameNoRecipient(t *testing.T) {
	srv := redistest.Start(t)
	rdb := srv.Client(t)
	lim := throttle.NewRedis(rdb, throttle.Options{Prefix: "wm"})
	reg := prometheus.NewRegistry()
	m := NewMetrics(reg)
	ch := Channel{Name: "whatsapp", TaskType: tasks.TypeWhatsAppSend, PauseScopes: WhatsAppPauseScopes,
		Rules: []rules.Rule{
			gcraRule("throughput", "whatsapp:number:{phone_number_id}", throttle.PerSecond(80)),
			gcraRule("pair", "whatsapp:pair:{phone_number_id}:{to}", throttle.Rate{Limit: 1, Period: 6 * time.Second}),
		},
		Prepare: func([]byte) (Prepared, error) { return Prepared{}, fmt.Errorf("not used") }}
	w, err := New(Options{Redis: rdb, Limiter: lim, Channels: []Channel{ch}, Metrics: m, Logger: slog.New(slog.DiscardHandler)})
	require.NoError(t, err)
	h := w.handlers["whatsapp"]
	ctx := context.Background()
	throttled := func(from, to int) {
		for i := from; i < to; i++ {
			fields := map[string]string{"phone_number_id": "106540352242922", "to": fmt.Sprintf("+1202555%04d", i)}
			ce := &channels.Error{Class: channels.Throttled, Provider: channels.ProviderWhatsApp, Code: 131056, Scope: channels.ScopePair}
			// A throttle a delivery callback reported (no departure time):
			// it lowers the pair's rate whatever the margin.
			_, wait := h.providerThrottled(ctx, ce, fields, h.rules.Requests(fields), time.Time{}, time.Time{})
			m.outcome(ch.Name, OutcomeProviderThrottle)
			m.throttled(ch.Name, ProviderLimit, wait.Seconds())
		}
	}

	throttled(0, 5)
	few := gatherSeries(t, reg)
	require.Equal(t, 5.0, few["sluice_limit_adapted_keys{channel=whatsapp,limit=pair,}"], "series: %v", few)
	throttled(5, 500)
	many := gatherSeries(t, reg)
	require.Equal(t, 500.0, many["sluice_limit_adapted_keys{channel=whatsapp,limit=pair,}"])
	require.Less(t, many["sluice_limit_effective_rate{channel=whatsapp,limit=pair,}"], many["sluice_limit_configured_rate{channel=whatsapp,limit=pair,}"])
	var fewNames, manyNames []string
	for id := range few {
		fewNames = append(fewNames, id)
	}
	for id := range many {
		manyNames = append(manyNames, id)
	}
	require.ElementsMatch(t, fewNames, manyNames, "the series do not grow with recipients")
}
