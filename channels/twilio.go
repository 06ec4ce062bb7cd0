package channels

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/sluice-dev/sluice/tasks"
)

// DefaultTwilioBaseURL is Twilio's REST API root.
const DefaultTwilioBaseURL = "https://api.twilio.com"

// twilioAccountSID is the AccountSid pattern of Twilio's OpenAPI spec
// (twilio_api_v2010.json); the MessagingServiceSid one is
// tasks.IsMessagingServiceSID's.
var twilioAccountSID = regexp.MustCompile(`^AC[0-9a-fA-F]{32}$`)

// Twilio sends SMS through Twilio Programmable Messaging
// (POST {BaseURL}/2010-04-01/Accounts/{AccountSID}/Messages.json). Safe for
// concurrent use.
type Twilio struct {
	// BaseURL is the API root; default DefaultTwilioBaseURL ("https://api.twilio.com").
	BaseURL string
	// AccountSID ("AC" + 32 hex digits) is the account in the URL and the Basic
	// auth user name. Required.
	AccountSID string
	// AuthToken is the Basic auth password. Required. Never appears in errors.
	AuthToken string
	// HTTP is the client to use; nil = NewHTTPClient() (15 s timeout, no redirects).
	HTTP *http.Client
	// Now is the clock for Retry-After dates and the 30023 daily reset; nil = time.Now.
	Now func() time.Time
	// StatusCallback is the absolute http(s) URL Twilio posts the message's
	// status changes to (queued, sent, delivered, undelivered, failed),
	// sent as the StatusCallback form field of every message; Sluice's is
	// http.public_url + "/callbacks/twilio" (internal/callbacks). "" sends
	// none: the account's or Messaging Service's own callback applies.
	StatusCallback string
}

// Validate checks the configuration and names the first bad field.
func (c *Twilio) Validate() error {
	if err := CheckAccountSID(c.AccountSID); err != nil {
		return fmt.Errorf("channels: Twilio.AccountSID: %w", err)
	}
	if c.AuthToken == "" {
		return errors.New("channels: Twilio.AuthToken: required")
	}
	if err := validBaseURL(c.BaseURL); err != nil {
		return fmt.Errorf("channels: Twilio.BaseURL: %w", err)
	}
	if err := validCallbackURL(c.StatusCallback); err != nil {
		return fmt.Errorf("channels: Twilio.StatusCallback: %w", err)
	}
	return nil
}

// validCallbackURL accepts "" (none) or an absolute http(s) URL with a
// host and no user info or fragment, the shape Twilio's spec (format uri)
// and its docs (a valid hostname, no underscores) ask of StatusCallback.
func validCallbackURL(raw string) error {
	if raw == "" {
		return nil
	}
	u, err := url.Parse(raw)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Hostname() == "" {
		return fmt.Errorf("want an absolute http(s) URL, got %q", redactURL(raw))
	}
	if u.User != nil || u.Fragment != "" {
		return fmt.Errorf("want no user info or fragment, got %q", redactURL(raw))
	}
	if strings.Contains(u.Hostname(), "_") {
		return fmt.Errorf("want a host name without underscores (Twilio refuses them), got %q", redactURL(raw))
	}
	return nil
}

// CheckAccountSID reports whether sid has the shape of a Twilio account SID:
// "AC" and 32 hex digits. The error does not quote sid: an auth token pasted
// in its place by mistake must not reach a log.
func CheckAccountSID(sid string) error {
	if !twilioAccountSID.MatchString(sid) {
		return fmt.Errorf("want AC followed by 32 hex digits, got %d characters (the value is not shown)", len(sid))
	}
	return nil
}

// Send creates one Message resource and returns its SID ("SM…", from the 201
// body's sid).
//
// The form-encoded body has To, From and/or MessagingServiceSid (at least one;
// both are sent when both are set), Body, one MediaUrl per media URL (an
// MMS), ContentSid with ContentVariables (a JSON object of strings: a
// Content Template), ValidityPeriod (seconds) and StatusCallback, each when
// set, as the spec's CreateMessageRequest defines them. From is sent as the payload gives it (an E.164 number, a
// short code, an alphanumeric sender ID or whatsapp:+E.164), except a
// Messaging Service SID ("MG…"), which is sent as MessagingServiceSid. p.IdempotencyKey is sent as Idempotency-Key (IETF httpapi draft)
// and I-Twilio-Idempotency-Token (Twilio's own header, honoured by its webhooks
// and the emulator).
//
// Errors are *Error, classified on the JSON body's code, then on the HTTP status
// (docs/providers.md, Twilio table; Twilio error dictionary):
//
//   - 20429 (too many concurrent requests), 63017 (account MPS cap):
//     Throttled, ScopeAccount, the backoff growing to at most 30 s;
//   - HTTP 429 without a code or with one not listed here: Throttled,
//     ScopeSender (see uncodedThrottle), the backoff growing to at most 30 s;
//   - 30022 (carrier throughput), 21611 and 30001 (sender queue full): Throttled,
//     ScopeSender;
//   - 30023 (10DLC daily cap): Throttled, ScopeSender, RetryAfter until the next
//     midnight in America/Los_Angeles (UTC-8 if the zone database is missing),
//     when the daily caps reset;
//   - 63038 (account daily limit): Throttled, ScopeAccount, RetryAfter 24 h;
//   - 14107 (>30 replies between the same pair in 30 s): Throttled, ScopePair,
//     RetryAfter 30 s;
//   - 20003 (authentication failed), HTTP 401, or HTTP 403 without a code:
//     Unauthorized, ScopeChannel (the account's credentials: pause the
//     channel, probe); a 403 with another code (20403) is Permanent;
//   - 21211, 21610, 63016 and any other code or 4xx: Permanent;
//   - 5xx: Transient.
//
// A Retry-After header, if Twilio sends one, overrides these defaults. An
// invalid payload (tasks.SMSSend.CheckShape: every rule of enqueue but
// libphonenumber's, whoever built p) or configuration is a Permanent
// *Error without HTTPStatus. If ctx is cancelled the error wraps
// context.Canceled and is not an *Error.
func (c *Twilio) Send(ctx context.Context, p tasks.SMSSend) (Response, error) {
	if err := c.Validate(); err != nil {
		return Response{}, permanent(ProviderTwilio, "config: %v", err)
	}
	form, err := twilioForm(p)
	if err != nil {
		return Response{}, permanent(ProviderTwilio, "invalid payload: %v", err)
	}
	if c.StatusCallback != "" {
		form.Set("StatusCallback", c.StatusCallback)
	}
	if !validHeaderValue(p.IdempotencyKey) {
		return Response{}, permanent(ProviderTwilio, "invalid payload: idempotency_key contains control characters")
	}
	base := strings.TrimRight(orDefault(c.BaseURL, DefaultTwilioBaseURL), "/")
	u := base + "/2010-04-01/Accounts/" + c.AccountSID + "/Messages.json"
	req, err := http.NewRequest(http.MethodPost, u, strings.NewReader(form.Encode()))
	if err != nil {
		return Response{}, permanent(ProviderTwilio, "config: building request: %v", redactErr(err, []string{c.AuthToken}))
	}
	req.SetBasicAuth(c.AccountSID, c.AuthToken)
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.Header.Set("Accept", "application/json")
	req.Header.Set("User-Agent", DefaultUserAgent)
	if p.IdempotencyKey != "" {
		req.Header.Set("Idempotency-Key", p.IdempotencyKey)
		req.Header.Set("I-Twilio-Idempotency-Token", p.IdempotencyKey)
	}
	r, err := do(ctx, c.HTTP, req, ProviderTwilio, c.AuthToken)
	if err != nil {
		return Response{}, err
	}
	return twilioResult(r, clock(c.Now), c.AuthToken)
}

// twilioForm builds and checks the form for p.
func twilioForm(p tasks.SMSSend) (url.Values, error) {
	if err := p.CheckShape(); err != nil {
		return nil, err
	}
	if p.To == "" {
		return nil, errors.New("to: required")
	}
	if p.From == "" && p.MessagingServiceSID == "" {
		return nil, errors.New("from or messaging_service_sid: want at least one, got neither")
	}
	if p.MessagingServiceSID != "" && !tasks.IsMessagingServiceSID(p.MessagingServiceSID) {
		return nil, fmt.Errorf("messaging_service_sid: want MG followed by 32 hex digits, got %q", p.MessagingServiceSID)
	}
	if p.Body == "" && len(p.MediaURLs) == 0 && p.ContentSID == "" {
		return nil, errors.New("body: required (or media_urls, or content_sid)")
	}
	// A Messaging Service SID given as From (a payload built without
	// tasks.NewSMSSendTask) goes as MessagingServiceSid, the spec's field
	// for it; in From it would be refused (21212).
	from, service := p.Sender()
	f := url.Values{"To": {p.To}}
	if p.Body != "" {
		f.Set("Body", p.Body)
	}
	if from != "" {
		f.Set("From", from)
	}
	if service != "" {
		f.Set("MessagingServiceSid", service)
	}
	for _, u := range p.MediaURLs {
		f.Add("MediaUrl", u)
	}
	if p.ContentSID != "" {
		f.Set("ContentSid", p.ContentSID)
		if len(p.ContentVariables) > 0 {
			vars, err := json.Marshal(p.ContentVariables) // (a map: keys sorted)
			if err != nil {
				return nil, fmt.Errorf("content_variables: %v", err)
			}
			f.Set("ContentVariables", string(vars))
		}
	}
	if p.ValidityPeriod > 0 {
		f.Set("ValidityPeriod", strconv.Itoa(p.ValidityPeriod))
	}
	return f, nil
}

// twilioCodes is docs/providers.md's Twilio table (source: Twilio error dictionary,
// API concurrency and messaging throughput docs).
var twilioCodes = map[int]codeRule{
	20429: {Throttled, ScopeAccount, "too many concurrent requests", nil, 2, perSecondMaxWait},
	30022: {Throttled, ScopeSender, "carrier throughput exceeded", nil, 2, perSecondMaxWait},
	// Twilio queues up to 10 h of a sender's messages before 21611: the
	// queue drains at the sender's rate, so wait minutes, not seconds.
	21611: {Throttled, ScopeSender, "sender queue full", fixed(time.Minute), 2, 0},
	30001: {Throttled, ScopeSender, "queue overflow", fixed(time.Minute), 2, 0},
	63017: {Throttled, ScopeAccount, "account MPS cap", nil, 2, perSecondMaxWait},
	30023: {Throttled, ScopeSender, "daily cap reached", untilPacificMidnight, 0, 0},
	63038: {Throttled, ScopeAccount, "account daily limit", fixed(24 * time.Hour), 0, 0},
	14107: {Throttled, ScopePair, "pair reply rate limit", fixed(30 * time.Second), 0, 0},
	21211: {Permanent, "", "invalid To number", nil, 0, 0},
	21610: {Permanent, "", "recipient unsubscribed", nil, 0, 0},
	63016: {Permanent, "", "outside 24 h window", nil, 0, 0},
	20003: {Unauthorized, ScopeChannel, "authentication failed", nil, 0, 0},
}

// pacific is America/Los_Angeles, or a fixed UTC-8 when the zone database is
// not available (then the reset may be an hour off during daylight saving).
var pacific = sync.OnceValue(func() *time.Location {
	if loc, err := time.LoadLocation("America/Los_Angeles"); err == nil {
		return loc
	}
	return time.FixedZone("UTC-8", -8*60*60)
})

// untilPacificMidnight is the time from now to the next midnight in
// America/Los_Angeles, when Twilio's daily caps reset (docs/providers.md, T-Mobile
// 10DLC caps).
func untilPacificMidnight(now time.Time) time.Duration {
	t := now.In(pacific())
	next := time.Date(t.Year(), t.Month(), t.Day()+1, 0, 0, 0, 0, t.Location())
	return ceilSecond(next.Sub(now))
}

// twilioResponse holds the fields of the 201 body (api.v2010.account.message)
// and of the error body ({"code","message","more_info","status"}) that Send reads.
type twilioResponse struct {
	SID     string `json:"sid"`
	Code    int    `json:"code"`
	Message string `json:"message"`
}

// twilioResult classifies a Messages.json response; see Send.
func twilioResult(r *reply, now time.Time, secrets ...string) (Response, error) {
	resp := Response{Status: r.status}
	var body twilioResponse
	jsonErr := json.Unmarshal(r.body, &body)
	if r.status >= 200 && r.status < 300 {
		if jsonErr == nil && body.SID != "" {
			resp.ProviderID = body.SID
			resp.Incomplete = r.incomplete
			return resp, nil
		}
		// Accepted, but the body is cut off or has no sid: a 2xx is a
		// delivery, and a retry would send the message twice. Success without
		// a SID.
		resp.Incomplete = true
		return resp, nil
	}
	secrets = r.redactions(secrets)
	e := &Error{Provider: ProviderTwilio, HTTPStatus: r.status, RetryAfter: ParseRetryAfter(r.header, now)}
	if jsonErr != nil || body.Code == 0 && body.Message == "" {
		e.Message = bodyMessage(r, secrets)
	} else {
		e.Code = body.Code
		e.Message = cleanMessage(body.Message, secrets)
	}
	if rule, ok := twilioCodes[e.Code]; ok {
		e.Class, e.Scope = rule.class, rule.scope
		if e.RetryAfter == 0 && rule.class == Throttled {
			e.Growth, e.MaxWait = rule.growth, rule.most
			if rule.retry != nil {
				e.RetryAfter = rule.retry(now)
			}
		}
		return resp, e
	}
	e.Class = statusClass(r.status)
	if e.Class == Unauthorized && r.status == http.StatusForbidden && e.Code != 0 {
		// A coded 403 (20403 permission denied...) concerns what the
		// account may do, not its credentials.
		e.Class = Permanent
	}
	switch e.Class {
	case Throttled:
		uncodedThrottle(e) // a 429 without 20429: the sender
	case Unauthorized:
		e.Scope = ScopeChannel // HTTP 401/403: the account's credentials
	}
	return resp, e
}
