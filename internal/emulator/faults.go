package emulator

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"time"
)

// Faults: a test makes a sender's next requests fail with a provider error
// code the limits alone would never produce (WhatsApp 131048 spam rate
// limit, 190 expired token; Twilio 30023 daily cap, 20003 bad credentials),
// to see what the sender's client does with it. Faults are checked after
// authentication and validation and before the limits; a faulted request
// is not accepted and counts as throttled (the throttle codes of
// docs/providers.md, and Bare429) or rejected.

// Bare429 is the fault code of a bare HTTP 429: no error code and no
// error body the provider documents (text/plain "Too Many Requests"), as a
// proxy, an edge or an undocumented limit answers; with
// FaultOptions.RetryAfter it carries a Retry-After header. It counts as
// throttled with code "429".
const Bare429 = 429

// Bare503 is FaultOptions.Code for an HTTP 503 with a text/plain body and
// no error code, as a provider's load balancer answers in a bad minute. It
// counts as rejected, not throttled.
const Bare503 = 503

// FaultOptions is what a sender's next requests are answered with
// (FaultWith).
type FaultOptions struct {
	// Code is the provider's error code, answered with the provider's HTTP
	// status for it (see Fault), or Bare429.
	Code int
	// Count is how many requests fail; 0 means 1, negative until
	// ClearFaults.
	Count int
	// RetryAfter, when over 0, is sent as a Retry-After header in whole
	// seconds, rounded up.
	RetryAfter time.Duration
	// Delay holds each faulted request this long before it is answered: a
	// client whose timeout is shorter sees a timeout, and the request is
	// not accepted either way.
	Delay time.Duration
}

type fault struct {
	code       int
	left       int // requests still to fail; < 0: until cleared
	retryAfter time.Duration
	delay      time.Duration
}

// Fault makes the next n requests of sender on channel (ChannelWhatsApp: a
// phone-number-id; ChannelSMS: a From or MessagingServiceSid) fail with the
// provider's error code; n < 0 fails them until ClearFaults. The HTTP
// status is the provider's for the code: WhatsApp 4 429, 190 401, others
// 400; Twilio 20429 429, 20003 401, others 400.
func (s *Server) Fault(channel, sender string, code, n int) {
	s.setFault(channel, sender, fault{code: code, left: n})
}

// FaultWith makes sender's next requests on channel fail as o says: Fault
// with a Retry-After header, or a bare 429 (Bare429). It replaces the
// sender's fault, if any.
func (s *Server) FaultWith(channel, sender string, o FaultOptions) {
	if o.Count == 0 {
		o.Count = 1
	}
	s.setFault(channel, sender, fault{code: o.Code, left: o.Count, retryAfter: o.RetryAfter, delay: o.Delay})
}

func (s *Server) setFault(channel, sender string, f fault) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.faults == nil {
		s.faults = map[string]*fault{}
	}
	s.faults[channel+"|"+sender] = &f
}

// ClearFaults ends every fault.
func (s *Server) ClearFaults() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.faults = nil
}

// takeFault returns the fault a request of sender must fail with, if any.
func (s *Server) takeFault(channel, sender string) (fault, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	f := s.faults[channel+"|"+sender]
	if f == nil || f.left == 0 {
		return fault{}, false
	}
	if f.left > 0 {
		f.left--
	}
	switch f.code {
	case Bare429, 4, 80007, 130429, 131048, 131049, 131056, 131057, 20429, 30022, 30023, 63017, 63038, 21611, 30001, 14107:
		s.throttledLocked(channel, strconv.Itoa(f.code))
	default:
		s.stats[channel].Rejected++
	}
	return *f, true
}

// writeFaultHeader waits f's delay, writes f's Retry-After, if any, and
// reports whether f is a bare 429 or 503, which it then answers whole.
func writeFaultHeader(w http.ResponseWriter, f fault) (answered bool) {
	if f.delay > 0 {
		time.Sleep(f.delay) // the fault is the wait: a provider that does not answer in time
	}
	if f.retryAfter > 0 {
		w.Header().Set("Retry-After", strconv.FormatInt(int64((f.retryAfter+time.Second-1)/time.Second), 10))
	}
	switch f.code {
	case Bare429, Bare503:
		http.Error(w, http.StatusText(f.code), f.code)
		return true
	}
	return false
}

// writeWhatsAppFault answers a faulted WhatsApp request.
func writeWhatsAppFault(w http.ResponseWriter, f fault) {
	if writeFaultHeader(w, f) {
		return
	}
	code := f.code
	status := http.StatusBadRequest
	switch code {
	case 4:
		status = http.StatusTooManyRequests
	case 190:
		status = http.StatusUnauthorized
		writeGraphError(w, status, graphError{Message: "Error validating access token: Session has expired (emulator fault).", Type: "OAuthException", Code: 190})
		return
	}
	writeGraphError(w, status, waError(code, fmt.Sprintf("(#%d) emulator fault", code), fmt.Sprintf("The emulator was told to answer this sender with %d.", code)))
}

// writeTwilioFault answers a faulted Twilio request.
func writeTwilioFault(w http.ResponseWriter, f fault) {
	if writeFaultHeader(w, f) {
		return
	}
	code := f.code
	status := http.StatusBadRequest
	switch code {
	case 20429:
		status = http.StatusTooManyRequests
	case 20003:
		status = http.StatusUnauthorized
	}
	writeTwilioError(w, status, code, fmt.Sprintf("emulator fault %d", code))
}

// faultsHandler serves POST /_emulator/faults {"channel","sender","code",
// "count","retry_after"} (FaultWith: code 429 is a bare 429; count 0 means
// 1, negative until cleared; retry_after in whole seconds, 0 for no
// Retry-After header) and DELETE /_emulator/faults.
func (s *Server) faultsHandler(mux *http.ServeMux) {
	mux.HandleFunc("POST /_emulator/faults", func(w http.ResponseWriter, r *http.Request) {
		var f struct {
			Channel    string `json:"channel"`
			Sender     string `json:"sender"`
			Code       int    `json:"code"`
			Count      int    `json:"count"`
			RetryAfter int64  `json:"retry_after"`
		}
		if err := json.NewDecoder(http.MaxBytesReader(w, r.Body, 4096)).Decode(&f); err != nil || f.Sender == "" || f.Code == 0 ||
			(f.Channel != ChannelWhatsApp && f.Channel != ChannelSMS) || f.RetryAfter < 0 || f.RetryAfter > 86400 {
			http.Error(w, `want {"channel":"whatsapp"|"sms","sender":"…","code":N (429: a bare 429),"count":N,"retry_after":0..86400 (seconds)}`, http.StatusBadRequest)
			return
		}
		s.FaultWith(f.Channel, f.Sender, FaultOptions{Code: f.Code, Count: f.Count, RetryAfter: time.Duration(f.RetryAfter) * time.Second})
		w.WriteHeader(http.StatusNoContent)
	})
	mux.HandleFunc("DELETE /_emulator/faults", func(w http.ResponseWriter, _ *http.Request) {
		s.ClearFaults()
		w.WriteHeader(http.StatusNoContent)
	})
}
