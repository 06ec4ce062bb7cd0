package emulator

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
)

// Faults: a test makes a sender's next requests fail with a provider error
// code the limits alone would never produce (WhatsApp 131048 spam rate
// limit, 190 expired token; Twilio 30023 daily cap, 20003 bad credentials),
// to see what the sender's client does with it. Faults are checked after
// authentication and validation and before the limits; a faulted request
// is not accepted and counts as throttled (the throttle codes of
// docs/providers.md) or rejected.

type fault struct {
	code int
	left int // requests still to fail; < 0: until cleared
}

// Fault makes the next n requests of sender on channel (ChannelWhatsApp: a
// phone-number-id; ChannelSMS: a From or MessagingServiceSid) fail with the
// provider's error code; n < 0 fails them until ClearFaults. The HTTP
// status is the provider's for the code: WhatsApp 4 429, 190 401, others
// 400; Twilio 20429 429, 20003 401, others 400.
func (s *Server) Fault(channel, sender string, code, n int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.faults == nil {
		s.faults = map[string]*fault{}
	}
	s.faults[channel+"|"+sender] = &fault{code: code, left: n}
}

// ClearFaults ends every fault.
func (s *Server) ClearFaults() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.faults = nil
}

// takeFault returns the code a request of sender must fail with, if any.
func (s *Server) takeFault(channel, sender string) (int, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	f := s.faults[channel+"|"+sender]
	if f == nil || f.left == 0 {
		return 0, false
	}
	if f.left > 0 {
		f.left--
	}
	switch f.code {
	case 4, 80007, 130429, 131048, 131049, 131056, 131057, 20429, 30022, 30023, 63017, 63038, 21611, 30001, 14107:
		s.throttledLocked(channel, strconv.Itoa(f.code))
	default:
		s.stats[channel].Rejected++
	}
	return f.code, true
}

// writeWhatsAppFault answers a faulted WhatsApp request.
func writeWhatsAppFault(w http.ResponseWriter, code int) {
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
func writeTwilioFault(w http.ResponseWriter, code int) {
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
// "count"} (count 0 means 1, negative until cleared) and DELETE
// /_emulator/faults.
func (s *Server) faultsHandler(mux *http.ServeMux) {
	mux.HandleFunc("POST /_emulator/faults", func(w http.ResponseWriter, r *http.Request) {
		var f struct {
			Channel string `json:"channel"`
			Sender  string `json:"sender"`
			Code    int    `json:"code"`
			Count   int    `json:"count"`
		}
		if err := json.NewDecoder(http.MaxBytesReader(w, r.Body, 4096)).Decode(&f); err != nil || f.Sender == "" || f.Code == 0 ||
			(f.Channel != ChannelWhatsApp && f.Channel != ChannelSMS) {
			http.Error(w, `want {"channel":"whatsapp"|"sms","sender":"…","code":N,"count":N}`, http.StatusBadRequest)
			return
		}
		if f.Count == 0 {
			f.Count = 1
		}
		s.Fault(f.Channel, f.Sender, f.Code, f.Count)
		w.WriteHeader(http.StatusNoContent)
	})
	mux.HandleFunc("DELETE /_emulator/faults", func(w http.ResponseWriter, _ *http.Request) {
		s.ClearFaults()
		w.WriteHeader(http.StatusNoContent)
	})
}
