package worker

import (
	"context"
	"maps"
	"slices"
	"testing"
	"time"

	"github.com/sluice-dev/sluice/channels"
	"github.com/sluice-dev/sluice/rules"
	"github.com/sluice-dev/sluice/tasks"
	"github.com/sluice-dev/sluice/throttle"
)

// fakeAdapter records the requests each AdaptDown was given.
type fakeAdapter struct {
	throttle.Limiter
	down [][]throttle.Request
}

func (f *fakeAdapter) AdaptDown(_ context.Context, _ throttle.AdaptOptions, _ throttle.AdaptSignal, reqs ...throttle.Request) ([]throttle.AdaptChange, error) {
	f.down = append(f.down, reqs)
	return nil, nil
}

func (f *fakeAdapter) AdaptUp(context.Context, throttle.AdaptOptions, ...throttle.Request) ([]throttle.AdaptChange, error) {
	return nil, nil
}

func (f *fakeAdapter) CachedAdaptations(context.Context) []throttle.Adaptation { return nil }

func gcraRule(name, key string, r throttle.Rate) rules.Rule {
	return rules.Rule{Limit: throttle.Limit{Name: name, Algorithm: throttle.GCRA, Rate: r, Burst: 1}, Key: key}
}

// A throttle lowers the send's rate limits that its scope concerns: the
// pair's for a pair, the sender's for a sender, and for the account every
// rate limit not keyed by a recipient; caps and holds lower nothing.
func TestAdaptDownPicksTheLimitsTheScopeConcerns(t *testing.T) {
	wa := []rules.Rule{
		gcraRule("throughput", "whatsapp:number:{phone_number_id}", throttle.PerSecond(80)),
		gcraRule("pair", "whatsapp:pair:{phone_number_id}:{to}", throttle.Rate{Limit: 1, Period: 6 * time.Second}),
		{Limit: throttle.Limit{Name: "daily", Algorithm: throttle.FixedWindow, Rate: throttle.PerDay(250)}, Key: "whatsapp:daily:{to}"},
		{Limit: throttle.Limit{Name: "tier", Algorithm: throttle.Distinct, Rate: throttle.PerDay(2000)}, Key: "whatsapp:tier:{phone_number_id}", Member: "{to}"},
	}
	sms := []rules.Rule{
		gcraRule("sender", "sms:sender:{sender}", throttle.PerSecond(1)),
		{Limit: throttle.Limit{Name: "concurrency", Algorithm: throttle.Concurrency, Max: 100}, Key: "sms:account:{account_sid}"},
	}
	for _, c := range []struct {
		name   string
		ch     Channel
		fields map[string]string
		err    *channels.Error
		want   []string // limit names lowered
	}{
		{"whatsapp 130429", Channel{Name: "whatsapp", TaskType: tasks.TypeWhatsAppSend, Rules: wa, PauseScopes: WhatsAppPauseScopes},
			map[string]string{"phone_number_id": "1065", "to": "+12025550123"},
			&channels.Error{Class: channels.Throttled, Provider: channels.ProviderWhatsApp, Code: 130429, Scope: channels.ScopeSender}, []string{"throughput"}},
		{"whatsapp 131056", Channel{Name: "whatsapp", TaskType: tasks.TypeWhatsAppSend, Rules: wa, PauseScopes: WhatsAppPauseScopes},
			map[string]string{"phone_number_id": "1065", "to": "+12025550123"},
			&channels.Error{Class: channels.Throttled, Provider: channels.ProviderWhatsApp, Code: 131056, Scope: channels.ScopePair}, []string{"pair"}},
		{"whatsapp 80007", Channel{Name: "whatsapp", TaskType: tasks.TypeWhatsAppSend, Rules: wa, PauseScopes: WhatsAppPauseScopes},
			map[string]string{"phone_number_id": "1065", "to": "+12025550123"},
			&channels.Error{Class: channels.Throttled, Provider: channels.ProviderWhatsApp, Code: 80007, Scope: channels.ScopeAccount}, []string{"throughput"}},
		{"whatsapp 131048 is a hold", Channel{Name: "whatsapp", TaskType: tasks.TypeWhatsAppSend, Rules: wa, PauseScopes: WhatsAppPauseScopes},
			map[string]string{"phone_number_id": "1065", "to": "+12025550123"},
			&channels.Error{Class: channels.Throttled, Provider: channels.ProviderWhatsApp, Code: 131048, Scope: channels.ScopeSender}, nil},
		{"twilio 20429", Channel{Name: "sms", TaskType: tasks.TypeSMSSend, Rules: sms, PauseScopes: SMSPauseScopes},
			map[string]string{"sender": "+12025550100", "from": "+12025550100", "to": "+12025550123", "account_sid": "AC1"},
			&channels.Error{Class: channels.Throttled, Provider: channels.ProviderTwilio, Code: 20429, Scope: channels.ScopeAccount}, []string{"sender"}},
		{"twilio 30023 is a cap", Channel{Name: "sms", TaskType: tasks.TypeSMSSend, Rules: sms, PauseScopes: SMSPauseScopes},
			map[string]string{"sender": "+12025550100", "from": "+12025550100", "to": "+12025550123", "account_sid": "AC1"},
			&channels.Error{Class: channels.Throttled, Provider: channels.ProviderTwilio, Code: 30023, Scope: channels.ScopeSender}, nil},
		{"whatsapp 130429, spread by number", Channel{Name: "whatsapp", TaskType: tasks.TypeWhatsAppSend, Rules: wa, PauseScopes: WhatsAppPauseScopes, SpreadBy: "phone_number_id"},
			map[string]string{"phone_number_id": "1065", "to": "+12025550123"},
			&channels.Error{Class: channels.Throttled, Provider: channels.ProviderWhatsApp, Code: 130429, Scope: channels.ScopeSender}, []string{"throughput"}},
		{"twilio 20429, spread by sender", Channel{Name: "sms", TaskType: tasks.TypeSMSSend, Rules: sms, PauseScopes: SMSPauseScopes, SpreadBy: "sender"},
			map[string]string{"sender": "+12025550100", "from": "+12025550100", "to": "+12025550123", "account_sid": "AC1"},
			&channels.Error{Class: channels.Throttled, Provider: channels.ProviderTwilio, Code: 20429, Scope: channels.ScopeAccount}, []string{"sender"}},
		{"adaptive off", Channel{Name: "sms", TaskType: tasks.TypeSMSSend, Rules: sms, PauseScopes: SMSPauseScopes, Adaptive: throttle.AdaptOptions{Disabled: true}},
			map[string]string{"sender": "+12025550100", "from": "+12025550100", "to": "+12025550123", "account_sid": "AC1"},
			&channels.Error{Class: channels.Throttled, Provider: channels.ProviderTwilio, Code: 20429, Scope: channels.ScopeAccount}, nil},
	} {
		t.Run(c.name, func(t *testing.T) {
			f := &fakeAdapter{}
			w := &Worker{opts: Options{Limiter: f}}
			fields, _ := tasks.FieldNames(c.ch.TaskType)
			set, err := rules.Compile(c.ch.Name, c.ch.SpreadBy, fields, c.ch.Rules)
			if err != nil {
				t.Fatal(err)
			}
			h := &handler{w: w, ch: c.ch, rules: set}
			for _, s := range slices.Sorted(maps.Keys(c.ch.PauseScopes)) {
				tm, err := rules.ParseKey(c.ch.Name, throttle.PauseKey(c.ch.Name, s, c.ch.PauseScopes[s]), fields)
				if err != nil {
					t.Fatal(err)
				}
				h.pauses = append(h.pauses, pauseScope{s, tm.SpreadBy(c.ch.SpreadBy)})
			}
			if h.adapt, err = newAdaptBinding(c.ch, f, set, fields, h.pauses); err != nil {
				t.Fatal(err)
			}
			h.adaptDown(context.Background(), c.err, c.fields, set.Requests(c.fields), time.Now())
			var got []string
			for _, call := range f.down {
				for _, r := range call {
					got = append(got, r.Limit.Name)
				}
			}
			if !slices.Equal(got, c.want) {
				t.Fatalf("lowered %q, want %q", got, c.want)
			}
		})
	}
}
