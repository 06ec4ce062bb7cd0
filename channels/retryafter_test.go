package channels

import (
	"net/http"
	"testing"
	"time"
)

func TestParseRetryAfter(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 11, 10, 12, 0, 0, 0, time.UTC)
	tests := []struct {
		name   string
		values []string
		now    time.Time
		want   time.Duration
	}{
		{"absent", nil, now, 0},
		{"empty", []string{""}, now, 0},
		{"seconds", []string{"120"}, now, 120 * time.Second},
		{"zero seconds", []string{"0"}, now, 0},
		{"seconds with spaces", []string{" 5 "}, now, 5 * time.Second},
		{"first value wins", []string{"7", "9"}, now, 7 * time.Second},
		{"IMF-fixdate", []string{"Tue, 10 Nov 2026 12:01:00 GMT"}, now, time.Minute},
		{"RFC 850 date", []string{"Tuesday, 10-Nov-26 12:00:30 GMT"}, now, 30 * time.Second},
		{"asctime date", []string{"Tue Nov 10 12:00:10 2026"}, now, 10 * time.Second},
		{"date rounds up", []string{"Tue, 10 Nov 2026 12:00:10 GMT"}, now.Add(300 * time.Millisecond), 10 * time.Second},
		{"date rounds up, never early", []string{"Tue, 10 Nov 2026 12:00:10 GMT"}, now.Add(-1 * time.Nanosecond), 11 * time.Second},
		{"date now", []string{"Tue, 10 Nov 2026 12:00:00 GMT"}, now, 0},
		{"date in the past", []string{"Wed, 21 Oct 2015 07:28:00 GMT"}, now, 0},
		{"negative", []string{"-5"}, now, 0},
		{"fraction", []string{"1.5"}, now, 0},
		{"plus sign", []string{"+5"}, now, 0},
		{"garbage", []string{"soon"}, now, 0},
		{"overflow", []string{"99999999999999999999"}, now, 0},
		{"too large for a Duration", []string{"9300000000"}, now, 0},
		{"date too far away", []string{"Tue Nov 1 0:00:00 7000"}, now, 0},
		{"largest", []string{"9223372036"}, now, 9223372036 * time.Second},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := http.Header{}
			for _, v := range tt.values {
				h.Add("Retry-After", v)
			}
			if got := ParseRetryAfter(h, tt.now); got != tt.want {
				t.Errorf("ParseRetryAfter(%q) = %v, want %v", tt.values, got, tt.want)
			}
		})
	}
}

func FuzzParseRetryAfter(f *testing.F) {
	for _, s := range []string{"120", "0", "Tue, 10 Nov 2026 12:01:00 GMT", "-1", "soon", "99999999999999999999", "Tue Nov 10 12:00:10 2026"} {
		f.Add(s, int64(1793275200))
	}
	f.Fuzz(func(t *testing.T, v string, unix int64) {
		d := ParseRetryAfter(http.Header{"Retry-After": {v}}, time.Unix(unix, 0))
		if d < 0 {
			t.Fatalf("negative delay %v for %q", d, v)
		}
		if d%time.Second != 0 {
			t.Fatalf("delay %v for %q is not whole seconds", d, v)
		}
	})
}

func TestParseBusinessUseCaseUsage(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name  string
		value string
		want  time.Duration
	}{
		{"absent", "", 0},
		{"spec example, zero", `{"102290129340398":[{"type":"whatsapp_business_management","call_count":1,"total_cputime":1,"total_time":1,"estimated_time_to_regain_access":0},{"type":"whatsapp","call_count":1,"total_cputime":1,"total_time":1,"estimated_time_to_regain_access":0}]}`, 0},
		{"minutes", `{"1":[{"type":"whatsapp","call_count":100,"estimated_time_to_regain_access":5}]}`, 5 * time.Minute},
		{"largest of several businesses", `{"1":[{"estimated_time_to_regain_access":2}],"2":[{"estimated_time_to_regain_access":9},{"estimated_time_to_regain_access":3}]}`, 9 * time.Minute},
		{"fractional minutes round up to seconds", `{"1":[{"estimated_time_to_regain_access":0.51}]}`, 31 * time.Second},
		{"negative", `{"1":[{"estimated_time_to_regain_access":-3}]}`, 0},
		{"huge, capped at a year", `{"1":[{"estimated_time_to_regain_access":1e300}]}`, 365 * 24 * time.Hour},
		{"string value", `{"1":[{"estimated_time_to_regain_access":"5"}]}`, 0},
		{"garbage", `not json`, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := http.Header{}
			if tt.value != "" {
				h.Set("x-business-use-case-usage", tt.value)
			}
			if got := parseBusinessUseCaseUsage(h); got != tt.want {
				t.Errorf("got %v, want %v", got, tt.want)
			}
		})
	}
}

func FuzzParseBusinessUseCaseUsage(f *testing.F) {
	f.Add(`{"1":[{"estimated_time_to_regain_access":5}]}`)
	f.Add(`{"1":[{"estimated_time_to_regain_access":1e308}]}`)
	f.Add(`[]`)
	f.Fuzz(func(t *testing.T, v string) {
		if d := parseBusinessUseCaseUsage(http.Header{"X-Business-Use-Case-Usage": {v}}); d < 0 || d > 365*24*time.Hour {
			t.Fatalf("delay %v out of range for %q", d, v)
		}
	})
}

func FuzzClassify(f *testing.F) {
	f.Add(400, []byte(waErrBody(131056, false)))
	f.Add(200, []byte(whatsappOK))
	f.Add(201, []byte(twilioOK))
	f.Add(400, []byte(twilioErr))
	f.Add(500, []byte(`{"error":null}`))
	f.Fuzz(func(t *testing.T, status int, body []byte) {
		if status < 100 || status > 999 {
			return
		}
		r := &reply{status: status, header: http.Header{}, body: body}
		for _, classify := range []func(*reply, time.Time, ...string) (Response, error){whatsappResult, twilioResult} {
			resp, err := classify(r, testNow)
			if resp.Status != status {
				t.Fatalf("status %d became %d", status, resp.Status)
			}
			if err == nil && (status < 200 || status > 299) {
				t.Fatalf("success on HTTP %d", status)
			}
			if err != nil && status >= 200 && status <= 299 {
				t.Fatalf("HTTP %d is a delivery, got %v", status, err) // a retry would send twice
			}
			if e, ok := err.(*Error); err != nil && (!ok || e.Class == Success || len(e.Message) > maxMessage+len("…")+64) {
				t.Fatalf("bad error %#v", err)
			}
		}
	})
}
