package emulator

import (
	"encoding/json"
	"net/http"
	"net/url"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

const (
	fromA = "+14155550101"
	fromB = "+14155550102"
	fromC = "+14155550103"
	toSMS = "+14155552345"
)

// messageSchemaFields are the properties of api.v2010.account.message in
// specs/twilio_api_v2010.json.
var messageSchemaFields = []string{
	"account_sid", "api_version", "body", "date_created", "date_sent", "date_updated",
	"direction", "error_code", "error_message", "from", "messaging_service_sid",
	"num_media", "num_segments", "price", "price_unit", "sid", "status",
	"subresource_uris", "to", "uri",
}

func TestTwilioAccepts(t *testing.T) {
	t.Parallel()
	h := newHarness(t, Options{})
	r := h.sms(smsForm(fromA, toSMS), nil)
	require.Equal(t, http.StatusCreated, r.status, "body: %s", r.body)

	var got map[string]any
	require.NoError(t, json.Unmarshal(r.body, &got))
	var keys []string
	for k := range got {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	if diff := cmp.Diff(messageSchemaFields, keys); diff != "" {
		t.Errorf("fields (-want +got):\n%s", diff)
	}

	sid, _ := got["sid"].(string)
	require.Regexp(t, `^SM[0-9a-f]{32}$`, sid)
	base := "/2010-04-01/Accounts/" + DefaultTwilioAccountSID + "/Messages/" + sid
	want := map[string]any{
		"account_sid":           DefaultTwilioAccountSID,
		"api_version":           "2010-04-01",
		"body":                  "hello",
		"date_created":          "Mon, 02 Nov 2026 09:00:00 +0000",
		"date_sent":             nil,
		"date_updated":          "Mon, 02 Nov 2026 09:00:00 +0000",
		"direction":             "outbound-api",
		"error_code":            nil,
		"error_message":         nil,
		"from":                  fromA,
		"messaging_service_sid": nil,
		"num_media":             "0",
		"num_segments":          "1",
		"price":                 nil,
		"price_unit":            nil,
		"sid":                   sid,
		"status":                "queued",
		"subresource_uris":      map[string]any{"media": base + "/Media.json"},
		"to":                    toSMS,
		"uri":                   base + ".json",
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("message (-want +got):\n%s", diff)
	}
	wantRecords := []Record{{Channel: ChannelSMS, At: t0, Sender: fromA, Recipient: toSMS, ProviderID: sid, Kind: "sms"}}
	if diff := cmp.Diff(wantRecords, h.s.Records()); diff != "" {
		t.Errorf("records (-want +got):\n%s", diff)
	}
}

func TestTwilioMessagingServiceAndMedia(t *testing.T) {
	t.Parallel()
	h := newHarness(t, Options{})
	const mg = "MG0123456789abcdef0123456789abcdef"

	r := h.sms(url.Values{"MessagingServiceSid": {mg}, "To": {toSMS}, "Body": {"hi"}}, nil)
	require.Equal(t, http.StatusCreated, r.status, "body: %s", r.body)
	var m twilioMessage
	require.NoError(t, json.Unmarshal(r.body, &m))
	assert.Equal(t, "accepted", m.Status)
	assert.Nil(t, m.From)
	require.NotNil(t, m.MessagingServiceSID)
	assert.Equal(t, mg, *m.MessagingServiceSID)

	r = h.sms(url.Values{"From": {fromA}, "To": {toSMS}, "MediaUrl": {"https://example.com/a.png"}}, nil)
	require.Equal(t, http.StatusCreated, r.status, "body: %s", r.body)
	require.NoError(t, json.Unmarshal(r.body, &m))
	assert.Regexp(t, `^MM[0-9a-f]{32}$`, m.SID)
	assert.Equal(t, "1", m.NumMedia)

	r = h.sms(url.Values{"From": {"Sluice"}, "To": {toSMS}, "ContentSid": {"HX0123456789abcdef0123456789abcdef"}}, nil)
	require.Equal(t, http.StatusCreated, r.status, "body: %s", r.body)

	var senders []string
	for _, rec := range h.s.Records() {
		senders = append(senders, rec.Sender)
	}
	assert.Equal(t, []string{mg, fromA, "Sluice"}, senders)
}

func TestTwilioPerSenderRate(t *testing.T) {
	t.Parallel()
	// 1 per second per From: sliding (default) and calendar statuses.
	steps := []struct {
		at       time.Duration
		from     string
		sliding  int
		calendar int
	}{
		{at: 0, from: fromA, sliding: 201, calendar: 201},
		{at: 500 * time.Millisecond, from: fromA, sliding: 429, calendar: 429},
		{at: 500 * time.Millisecond, from: fromB, sliding: 201, calendar: 201}, // other senders unaffected
		{at: time.Second - time.Nanosecond, from: fromA, sliding: 429, calendar: 429},
		{at: time.Second, from: fromA, sliding: 201, calendar: 201}, // 1s after the previous one
		{at: 1999 * time.Millisecond, from: fromA, sliding: 429, calendar: 429},
		{at: 2990 * time.Millisecond, from: fromA, sliding: 201, calendar: 201},
		{at: 3 * time.Second, from: fromA, sliding: 429, calendar: 201}, // 10ms later, but the next calendar second
		{at: 3 * time.Second, from: fromA, sliding: 429, calendar: 429},
		{at: 3990 * time.Millisecond, from: fromA, sliding: 201, calendar: 429},
	}
	for _, calendar := range []bool{false, true} {
		h := newHarness(t, Options{CalendarSeconds: calendar})
		accepted, throttled := 0, 0
		for i, st := range steps {
			want := st.sliding
			if calendar {
				want = st.calendar
			}
			h.clock.Set(t0.Add(st.at))
			r := h.sms(smsForm(st.from, toSMS), nil)
			require.Equal(t, want, r.status, "calendar %v, step %d: %s", calendar, i, r.body)
			if want == http.StatusTooManyRequests {
				throttled++
				want := twilioError{Code: 20429, Message: "Too Many Requests", MoreInfo: "https://www.twilio.com/docs/errors/20429", Status: 429}
				assert.Equal(t, want, r.twErr(t), "step %d", i)
			} else {
				accepted++
			}
		}
		st := h.s.Stats()[ChannelSMS]
		assert.Equal(t, 5, accepted)
		assert.Equal(t, accepted, st.Accepted)
		assert.Equal(t, throttled, st.Throttled)
		assert.Equal(t, map[string]int{"20429": throttled}, st.ThrottledByCode)
		wantMax := 1
		if calendar {
			wantMax = 2 // 2.990 and 3.000
		}
		assert.Equal(t, wantMax, h.s.MaxInAnySecond()[ChannelSMS], "calendar %v", calendar)
		assert.Equal(t, map[string]int{fromA: wantMax, fromB: 1}, MaxInSpan(h.s.Records(), ChannelSMS, time.Second))
	}
}

func TestTwilioConcurrency(t *testing.T) {
	t.Parallel()
	entered := make(chan string, 10)
	release := make(chan struct{})
	h := newHarness(t, Options{
		TwilioConcurrency: 2,
		hold: func(channel string) {
			if channel != ChannelSMS {
				return
			}
			entered <- channel
			<-release
		},
	})

	var wg sync.WaitGroup
	statuses := make([]int, 2)
	for i, from := range []string{fromA, fromB} {
		wg.Go(func() { statuses[i] = h.sms(smsForm(from, toSMS), nil).status })
	}
	for range 2 {
		select {
		case <-entered:
		case <-time.After(10 * time.Second):
			close(release)
			t.Fatal("requests did not reach the emulator")
		}
	}

	// Two in flight: a third, from a fresh sender, is over the account's limit.
	r := h.sms(smsForm(fromC, toSMS), nil)
	require.Equal(t, http.StatusTooManyRequests, r.status, "body: %s", r.body)
	assert.Equal(t, twilioError{Code: 20429, Message: "Too Many Requests", MoreInfo: "https://www.twilio.com/docs/errors/20429", Status: 429}, r.twErr(t))

	close(release)
	wg.Wait()
	assert.Equal(t, []int{201, 201}, statuses)

	// The slots are free again; fromC was not charged by its refused request.
	assert.Equal(t, http.StatusCreated, h.sms(smsForm(fromC, toSMS), nil).status)

	st := h.s.Stats()[ChannelSMS]
	assert.Equal(t, 3, st.Accepted)
	assert.Equal(t, map[string]int{"20429": 1}, st.ThrottledByCode)
}

func TestTwilioLatencyIsCutByClose(t *testing.T) {
	t.Parallel()
	h := newHarness(t, Options{Latency: time.Hour})
	done := make(chan int)
	go func() { done <- h.sms(smsForm(fromA, toSMS), nil).status }()
	require.Eventually(t, func() bool {
		h.s.mu.Lock()
		defer h.s.mu.Unlock()
		return h.s.inflight[DefaultTwilioAccountSID] == 1
	}, 10*time.Second, time.Millisecond)
	require.NoError(t, h.s.Close())
	select {
	case status := <-done:
		assert.Equal(t, http.StatusCreated, status)
	case <-time.After(10 * time.Second):
		t.Fatal("Close did not end the Latency wait")
	}
}

func TestTwilioAuth(t *testing.T) {
	t.Parallel()
	h := newHarness(t, Options{})
	const otherSID = "ACffffffffffffffffffffffffffffffff"
	for _, tc := range []struct {
		name, account, auth string
	}{
		{name: "missing", account: DefaultTwilioAccountSID},
		{name: "wrong token", account: DefaultTwilioAccountSID, auth: basicAuth(DefaultTwilioAccountSID, "nope")},
		{name: "wrong sid", account: DefaultTwilioAccountSID, auth: basicAuth(otherSID, DefaultTwilioAuthToken)},
		{name: "other account in path", account: otherSID, auth: basicAuth(DefaultTwilioAccountSID, DefaultTwilioAuthToken)},
		{name: "bearer", account: DefaultTwilioAccountSID, auth: "Bearer " + DefaultTwilioAuthToken},
	} {
		header := http.Header{"Authorization": nil}
		if tc.auth != "" {
			header = hdr("Authorization", tc.auth)
		}
		r := h.smsTo(tc.account, smsForm(fromA, toSMS), header)
		require.Equal(t, http.StatusUnauthorized, r.status, tc.name)
		assert.Equal(t, twilioError{Code: 20003, Message: "Authenticate", MoreInfo: "https://www.twilio.com/docs/errors/20003", Status: 401}, r.twErr(t), tc.name)
		assert.Equal(t, `Basic realm="Twilio API"`, r.header.Get("WWW-Authenticate"), tc.name)
	}
	st := h.s.Stats()[ChannelSMS]
	assert.Equal(t, 5, st.Rejected)
	assert.Zero(t, st.Accepted)
}

func TestTwilioValidation(t *testing.T) {
	t.Parallel()
	h := newHarness(t, Options{})
	for _, tc := range []struct {
		name string
		form url.Values
		code int
	}{
		{name: "no To", form: url.Values{"From": {fromA}, "Body": {"x"}}, code: 21604},
		{name: "To without +", form: smsForm(fromA, "14155552345"), code: 21211},
		{name: "To too short", form: smsForm(fromA, "+1415555"), code: 21211},
		{name: "To too long", form: smsForm(fromA, "+1234567890123456"), code: 21211},
		{name: "To channel address, From a number", form: smsForm(fromA, "whatsapp:"+toSMS), code: 21910},
		{name: "From channel address, To a number", form: smsForm("whatsapp:"+fromA, toSMS), code: 21910},
		{name: "To bad channel address", form: smsForm("whatsapp:"+fromA, "whatsapp:"+"+1415"), code: 21211},
		{name: "no From", form: url.Values{"To": {toSMS}, "Body": {"x"}}, code: 21603},
		{name: "bad From", form: smsForm("+1", toSMS), code: 21212},
		{name: "alphanumeric From too long", form: smsForm("SluiceSenderX", toSMS), code: 21212},
		{name: "bad MessagingServiceSid", form: url.Values{"To": {toSMS}, "MessagingServiceSid": {"MG123"}, "Body": {"x"}}, code: 21705},
		{name: "no Body", form: url.Values{"From": {fromA}, "To": {toSMS}}, code: 21602},
		{name: "Body over 1600", form: url.Values{"From": {fromA}, "To": {toSMS}, "Body": {strings.Repeat("é", 1601)}}, code: 21617},
		{name: "11 media", form: url.Values{"From": {fromA}, "To": {toSMS}, "MediaUrl": mediaURLs(11)}, code: 21623},
		{name: "media not http", form: url.Values{"From": {fromA}, "To": {toSMS}, "MediaUrl": {"https://a.example/1.jpg", "ftp://a.example/2.jpg"}}, code: 21620},
		{name: "whatsapp with 2 media", form: url.Values{"From": {"whatsapp:" + fromA}, "To": {"whatsapp:" + toSMS}, "MediaUrl": mediaURLs(2)}, code: 21623},
		{name: "whatsapp through a service with 2 media", form: url.Values{"MessagingServiceSid": {"MG0123456789abcdef0123456789abcdef"}, "To": {"whatsapp:" + toSMS}, "MediaUrl": mediaURLs(2)}, code: 21623},
		{name: "ContentVariables without ContentSid", form: url.Values{"From": {fromA}, "To": {toSMS}, "Body": {"x"}, "ContentVariables": {`{"1":"a"}`}}, code: 21654},
		{name: "bad ContentSid", form: url.Values{"From": {fromA}, "To": {toSMS}, "ContentSid": {"HX123"}}, code: 21655},
		{name: "ContentVariables not JSON", form: url.Values{"From": {fromA}, "To": {toSMS}, "ContentSid": {contentSID}, "ContentVariables": {"1=a"}}, code: 21656},
		{name: "ContentVariables empty value", form: url.Values{"From": {fromA}, "To": {toSMS}, "ContentSid": {contentSID}, "ContentVariables": {`{"1":""}`}}, code: 21656},
		{name: "ValidityPeriod over 36000", form: url.Values{"From": {fromA}, "To": {toSMS}, "Body": {"x"}, "ValidityPeriod": {"36001"}}, code: 21624},
		{name: "ValidityPeriod not a number", form: url.Values{"From": {fromA}, "To": {toSMS}, "Body": {"x"}, "ValidityPeriod": {"1h"}}, code: 21624},
	} {
		r := h.sms(tc.form, nil)
		require.Equal(t, http.StatusBadRequest, r.status, "%s: %s", tc.name, r.body)
		e := r.twErr(t)
		assert.Equal(t, tc.code, e.Code, tc.name)
		assert.Equal(t, 400, e.Status, tc.name)
		assert.NotEmpty(t, e.Message, tc.name)
		assert.True(t, strings.HasSuffix(e.MoreInfo, "/errors/"+strconv.Itoa(tc.code)), tc.name)
	}
	// 1600 characters is fine.
	r := h.sms(url.Values{"From": {fromA}, "To": {toSMS}, "Body": {strings.Repeat("é", 1600)}}, nil)
	assert.Equal(t, http.StatusCreated, r.status, "body: %s", r.body)

	st := h.s.Stats()[ChannelSMS]
	assert.Equal(t, 23, st.Rejected)
	assert.Equal(t, 1, st.Accepted)
}

const contentSID = "HX0123456789abcdef0123456789abcdef"

// mediaURLs returns n media URLs.
func mediaURLs(n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = "https://cdn.example.com/m/" + strconv.Itoa(i) + ".jpg"
	}
	return out
}

// An MMS, a Content Template and a validity period are accepted; an MMS
// is one unit of its sender's MPS whatever its body's length (Twilio, "MMS
// Account Rate Limits": 1 MMS a second per long code).
func TestTwilioMMSAndContent(t *testing.T) {
	t.Parallel()
	h := newHarness(t, Options{})
	r := h.sms(url.Values{"From": {fromA}, "To": {toSMS}, "Body": {strings.Repeat("a", 300)}, "MediaUrl": mediaURLs(10), "ValidityPeriod": {"600"}}, nil)
	require.Equal(t, http.StatusCreated, r.status, "body: %s", r.body)
	var m twilioMessage
	require.NoError(t, json.Unmarshal(r.body, &m))
	assert.Equal(t, "10", m.NumMedia)
	assert.Equal(t, "1", m.NumSegments, "an MMS is not split into segments")
	r = h.sms(url.Values{"MessagingServiceSid": {"MG0123456789abcdef0123456789abcdef"}, "To": {"whatsapp:" + toSMS},
		"ContentSid": {contentSID}, "ContentVariables": {`{"1":"Ann","order":"1042"}`}}, nil)
	require.Equal(t, http.StatusCreated, r.status, "body: %s", r.body)
	var kinds []string
	for _, rec := range h.s.Records() {
		kinds = append(kinds, rec.Kind)
	}
	assert.Equal(t, []string{"mms", "content"}, kinds)
}

func TestTwilioMagicRecipients(t *testing.T) {
	t.Parallel()
	h := newHarness(t, Options{Tolerance: -1})

	r := h.sms(smsForm(fromA, "+14155550000"), nil)
	require.Equal(t, http.StatusBadRequest, r.status)
	assert.Equal(t, 21610, r.twErr(t).Code)

	r = h.sms(smsForm(fromA, "+14155550500"), nil)
	require.Equal(t, http.StatusInternalServerError, r.status)
	assert.Equal(t, twilioError{Code: 20500, Message: "Internal Server Error", MoreInfo: "https://www.twilio.com/docs/errors/20500", Status: 500}, r.twErr(t))

	// fromA's 1/s was not used up.
	assert.Equal(t, http.StatusCreated, h.sms(smsForm(fromA, toSMS), nil).status)
	st := h.s.Stats()[ChannelSMS]
	assert.Equal(t, ChannelStats{Accepted: 1, Unique: 1, Rejected: 1, Failed: 1, ThrottledByCode: map[string]int{}}, st)
}

func TestTwilioDuplicates(t *testing.T) {
	t.Parallel()
	h := newHarness(t, Options{})
	for i, header := range []http.Header{
		hdr("Idempotency-Key", "k1"),
		hdr("I-Twilio-Idempotency-Token", "k1"),
		hdr("Idempotency-Key", "k2", "I-Twilio-Idempotency-Token", "k1"),
		nil,
	} {
		h.clock.Advance(time.Second)
		require.Equal(t, http.StatusCreated, h.sms(smsForm(fromA, toSMS), header).status, "request %d", i)
	}
	var got []keyDup
	for _, rec := range h.s.Records() {
		got = append(got, keyDup{rec.IdempotencyKey, rec.Duplicate})
	}
	want := []keyDup{{"k1", false}, {"k1", true}, {"k2", false}, {"", false}}
	if diff := cmp.Diff(want, got, cmp.AllowUnexported(keyDup{})); diff != "" {
		t.Errorf("records (-want +got):\n%s", diff)
	}
	st := h.s.Stats()[ChannelSMS]
	assert.Equal(t, [3]int{4, 3, 1}, [3]int{st.Accepted, st.Unique, st.Duplicates})
}

// TestTwilioSenders: besides E.164 numbers, From may be a short code, an
// alphanumeric sender ID or whatsapp:+E.164 (with a whatsapp: To).
func TestTwilioSenders(t *testing.T) {
	t.Parallel()
	h := newHarness(t, Options{})
	for _, form := range []url.Values{
		smsForm("898211", toSMS),
		smsForm("Sluice 1", toSMS),
		smsForm("whatsapp:"+fromA, "whatsapp:"+toSMS),
	} {
		r := h.sms(form, nil)
		require.Equal(t, http.StatusCreated, r.status, "From %s: %s", form.Get("From"), r.body)
	}
}

// TestTwilioSegments: num_segments is the body's, and the per-sender MPS
// counts segments: a 3-segment message on a 1 MPS sender holds it for 3 s.
func TestTwilioSegments(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		body string
		want string
	}{
		{"hello", "1"},
		{strings.Repeat("a", 160), "1"},
		{strings.Repeat("a", 161), "2"},
		{strings.Repeat("a", 300), "2"},
		{strings.Repeat("a", 307), "3"},
		{strings.Repeat("€", 80), "1"},
		{strings.Repeat("€", 81), "2"},
		{strings.Repeat("ж", 70), "1"},
		{strings.Repeat("ж", 71), "2"},
		{strings.Repeat("😀", 35), "1"},
		{strings.Repeat("😀", 36), "2"},
		{strings.Repeat("ж", 66) + "😀" + strings.Repeat("ж", 66), "3"},
	} {
		h := newHarness(t, Options{})
		form := smsForm(fromA, toSMS)
		form.Set("Body", tc.body)
		r := h.sms(form, nil)
		require.Equal(t, http.StatusCreated, r.status, "%s", r.body)
		var got struct {
			NumSegments string `json:"num_segments"`
		}
		require.NoError(t, json.Unmarshal(r.body, &got))
		assert.Equal(t, tc.want, got.NumSegments, "%.20q… (%d characters)", tc.body, len([]rune(tc.body)))
	}

	for _, calendar := range []bool{false, true} {
		h := newHarness(t, Options{CalendarSeconds: calendar})
		long := smsForm(fromA, toSMS)
		long.Set("Body", strings.Repeat("x", 307)) // 3 segments
		for i, st := range []struct {
			at   time.Duration
			form url.Values
			want int
		}{
			{0, long, http.StatusCreated},
			{2999 * time.Millisecond, smsForm(fromA, toSMS), http.StatusTooManyRequests},
			{3 * time.Second, smsForm(fromA, toSMS), http.StatusCreated},
			{4 * time.Second, long, http.StatusCreated},
			{6999 * time.Millisecond, long, http.StatusTooManyRequests},
			{7 * time.Second, long, http.StatusCreated},
		} {
			h.clock.Set(t0.Add(st.at))
			r := h.sms(st.form, nil)
			require.Equal(t, st.want, r.status, "calendar %v, step %d: %s", calendar, i, r.body)
		}
	}
}
