package channels

import (
	"fmt"
	"strconv"
	"strings"
	"time"
)

// Class is how a send attempt ended, as far as retrying is concerned.
type Class int

const (
	// Success: the provider accepted the message (2xx).
	Success Class = iota
	// Throttled: a rate or volume limit was hit. Requeue after Error.RetryAfter
	// (or the caller's own backoff when it is 0) without burning a retry; Error.Scope
	// says which limiter to slow down.
	Throttled
	// Transient: the attempt failed for a reason that may go away (5xx, network
	// error, timeout). Retry with backoff.
	Transient
	// Permanent: retrying the same request cannot succeed (bad number, policy
	// block, 4xx, invalid payload or client configuration). Archive it.
	Permanent
	// Unauthorized: the provider refused the channel's credentials (WhatsApp
	// 190 expired or invalid access token, Twilio 20003, HTTP 401 or 403
	// from WhatsApp or Twilio). No send of the channel can succeed until
	// they are fixed: pause the channel (Scope is ScopeChannel), keep the
	// task, and resume when a probe succeeds or an operator resumes it.
	Unauthorized
)

// String returns "success", "throttled", "transient", "permanent" or
// "unauthorized" ("Class(n)" for other values).
func (c Class) String() string {
	switch c {
	case Success:
		return "success"
	case Throttled:
		return "throttled"
	case Transient:
		return "transient"
	case Permanent:
		return "permanent"
	case Unauthorized:
		return "unauthorized"
	}
	return "Class(" + strconv.Itoa(int(c)) + ")"
}

// Scope values of Error.Scope: what a throttle applies to.
const (
	// ScopeSender: the sending number (WhatsApp phone number ID, Twilio From or
	// Messaging Service), or the whole host for webhooks and HTTP calls. A
	// WhatsApp or Twilio 429 without a known code names it too.
	ScopeSender = "sender"
	// ScopePair: one sender/recipient pair only (WhatsApp 131056, Twilio 14107);
	// other recipients are unaffected.
	ScopePair = "pair"
	// ScopeAccount: the whole provider account, app or business (WhatsApp 4 and
	// 80007, Twilio 20429, 63017, 63038).
	ScopeAccount = "account"
	// ScopeChannel: every send of the channel, whatever its sender
	// (Unauthorized: the credentials all sends use were refused).
	ScopeChannel = "channel"
)

// Provider names used in Error.Provider.
const (
	ProviderWhatsApp = "whatsapp"
	ProviderTwilio   = "twilio"
	ProviderWebhook  = "webhook"
	ProviderHTTP     = "http"
)

// Response describes a send. On success ProviderID is set, unless
// Incomplete; with an error, Status still holds the HTTP status when there
// was a response.
type Response struct {
	// ProviderID is the provider's message ID: "wamid.…" for WhatsApp, "SM…" for
	// Twilio, "" for webhooks and HTTP calls.
	ProviderID string
	// Status is the HTTP status code of the provider's response.
	Status int
	// Incomplete reports a 2xx whose body did not arrive whole (cut off,
	// or still trickling at the timeout) or, for WhatsApp and Twilio, had no
	// message ID. It is still a delivery: a retry would send twice.
	Incomplete bool
}

// Error is returned for every non-success outcome of Send, Deliver and Call,
// except when the caller's context was cancelled (then the error wraps
// context.Canceled and is not an *Error, so a shutdown is not a failure).
// Use errors.As to get it.
type Error struct {
	Class    Class
	Provider string // ProviderWhatsApp, ProviderTwilio, ProviderWebhook or ProviderHTTP
	// HTTPStatus is the response status; 0 when there was no response (network
	// error, timeout, invalid payload or configuration).
	HTTPStatus int
	// Code is the provider's error code (WhatsApp error.code such as 131056,
	// Twilio code such as 20429); 0 if none.
	Code int
	// Scope is what a throttle applies to: ScopeSender, ScopePair, ScopeAccount,
	// or "" when unknown or not a throttle.
	Scope string
	// RetryAfter is the delay the provider asked for (Retry-After header, or the
	// x-business-use-case-usage estimated_time_to_regain_access in minutes), or a
	// documented default for daily and quality limits (see WhatsApp.Send and
	// Twilio.Send). 0 means not given: the caller uses its own backoff.
	RetryAfter time.Duration
	// Growth is how a repeated throttle of this kind on the same scope
	// grows its pause: each pause in a row multiplies the wait (4 for
	// WhatsApp's pair limit, whose documented backoff is 4^n s; 2 for
	// Twilio 20429, exponential backoff). 0 or 1 means a fixed wait, for
	// waits the provider or its documentation gives exactly. Pauses grow
	// only while they come with no accepted send between them on the scope
	// (throttle.Redis.EndPauseRun).
	Growth float64
	// MaxWait caps a grown wait (Growth) for throttles of limits that have
	// room again within a second of the traffic stopping (per-second rates,
	// requests in flight: see perSecondMaxWait); 0 means the caller's cap
	// (worker.Channel.MaxRetryAfter). A RetryAfter longer than it is still
	// waited in full: the provider's wait always wins.
	MaxWait time.Duration
	// Message is the provider's message (plus details) or the start of the
	// response body (at most 512 bytes of it), for archive reasons. It never
	// contains tokens, secrets or URL queries.
	Message string
	// Err is the underlying error (network error, timeout), for errors.Is/As.
	Err error
}

// Error formats the error as
// "<provider>: <class>: code <code> (<meaning>): <message>", for example
// `whatsapp: throttled: code 131056 (pair rate limit): (#131056) ...`. Without a
// provider code it shows "HTTP <status>"; without a response, the network error.
func (e *Error) Error() string {
	var b strings.Builder
	b.WriteString(e.Provider)
	b.WriteString(": ")
	b.WriteString(e.Class.String())
	switch {
	case e.Code != 0:
		fmt.Fprintf(&b, ": code %d", e.Code)
		if m := codeMeaning(e.Provider, e.Code); m != "" {
			fmt.Fprintf(&b, " (%s)", m)
		}
	case e.HTTPStatus != 0:
		fmt.Fprintf(&b, ": HTTP %d", e.HTTPStatus)
	}
	if e.Message != "" {
		b.WriteString(": ")
		b.WriteString(e.Message)
	}
	if e.Err != nil {
		b.WriteString(": ")
		b.WriteString(e.Err.Error())
	}
	return b.String()
}

// Unwrap returns Err.
func (e *Error) Unwrap() error { return e.Err }

// codeMeaning names the known codes of docs/providers.md's tables.
func codeMeaning(provider string, code int) string {
	r, _ := lookupCode(provider, code)
	return r.meaning
}

// lookupCode is the row of provider's table for code.
func lookupCode(provider string, code int) (codeRule, bool) {
	switch provider {
	case ProviderWhatsApp:
		r, ok := whatsappCodes[code]
		return r, ok
	case ProviderTwilio:
		r, ok := twilioCodes[code]
		return r, ok
	}
	return codeRule{}, false
}

// codeRule is one row of a provider's error classification table.
type codeRule struct {
	class   Class
	scope   string
	meaning string
	// retry gives the RetryAfter to use when the provider gave none; nil = 0.
	retry func(now time.Time) time.Duration
	// growth is Error.Growth for a throttle with no RetryAfter of its own.
	growth float64
	// most is Error.MaxWait for such a throttle; 0: none.
	most time.Duration
}

// perSecondMaxWait is the longest a pause grows (Error.MaxWait) for a
// throttle of a limit counted per second or in requests in flight, when the
// provider names no wait: Twilio 20429 (the account's API concurrency: a
// slot frees as soon as any request in flight ends; Twilio documents it as
// "safe to retry after backing off", with no Retry-After) and 63017 (the
// account's MPS), WhatsApp 130429 (the number's messages per second),
// Twilio 30022 (carrier MPS), and a WhatsApp or Twilio 429 without a known
// code (docs/providers.md). Such a limit has room again a second after the
// traffic stops, so a longer pause only idles the scope: the backoff goes
// 1, 2, 4, 8, 16, 30 s (plus jitter) while nothing gets through, and the
// first accepted send starts it over. 30 s is Sluice's choice, not a
// provider's figure.
const perSecondMaxWait = 30 * time.Second

func fixed(d time.Duration) func(time.Time) time.Duration {
	return func(time.Time) time.Duration { return d }
}

// CodeError returns the *Error a synchronous answer with the provider's
// error code would give, for codes the provider reports later, in a status
// callback (Twilio ErrorCode, WhatsApp statuses[].errors[].code): the same
// Class, Scope, Growth and documented RetryAfter (Twilio 30023: until the
// next midnight in America/Los_Angeles, from now) as Send, from the same
// tables (docs/providers.md). provider is ProviderTwilio or
// ProviderWhatsApp; message is the provider's text, cleaned for
// Error.Message. It reports false for a code the tables do not know (and
// for code 0): the caller has no class for it.
func CodeError(provider string, code int, message string, now time.Time) (*Error, bool) {
	r, ok := lookupCode(provider, code)
	if !ok || code == 0 {
		return nil, false
	}
	e := &Error{Class: r.class, Provider: provider, Code: code, Scope: r.scope, Message: cleanMessage(message, nil)}
	if r.class == Throttled {
		e.Growth, e.MaxWait = r.growth, r.most
		if r.retry != nil {
			e.RetryAfter = r.retry(now)
		}
	}
	return e, true
}
