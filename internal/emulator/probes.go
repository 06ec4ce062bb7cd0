package emulator

import (
	"fmt"
	"net/http"
	"strings"
)

// Probes: the read-only requests a sender makes to learn whether its
// credentials work, without sending anything. WhatsApp: GET
// /{version}/{phone-number-id} (Meta's "Retrieve WhatsApp Business Phone
// Number Information"); Twilio: GET /2010-04-01/Accounts/{Sid}.json
// (FetchAccount). Each answers as the provider does: the same
// authentication as a send, and a fault set with Fault for the sender (the
// phone number; for Twilio any fault of the account's senders that is an
// authentication code, 20003) answers the probe too, without using up the
// fault's count. Probes are counted in ChannelStats.Probes, apart from
// sends.

func (s *Server) countProbe(ch string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.stats[ch].Probes++
}

// peekFault returns the code of sender's fault without using it up.
func (s *Server) peekFault(channel, sender string) (int, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	f := s.faults[channel+"|"+sender]
	if f == nil || f.left == 0 {
		return 0, false
	}
	return f.code, true
}

// accountFault returns 20003 if any Twilio sender has that fault: bad
// credentials are the account's, whichever sender found out.
func (s *Server) accountFault() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	for k, f := range s.faults {
		if strings.HasPrefix(k, ChannelSMS+"|") && f.code == 20003 && f.left != 0 {
			return true
		}
	}
	return false
}

func (s *Server) handleWhatsAppProbe(w http.ResponseWriter, r *http.Request) {
	const ch = ChannelWhatsApp
	if r.PathValue("version") == "_emulator" {
		// GET of a POST-only control path (/_emulator/reset): not a probe.
		http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
		return
	}
	s.countProbe(ch)
	if e, ok := s.checkBearer(r); !ok {
		writeGraphError(w, http.StatusUnauthorized, e)
		return
	}
	version, phoneID := r.PathValue("version"), r.PathValue("phoneID")
	if !graphVersionPattern.MatchString(version) || !digitsOnly(phoneID) {
		writeGraphError(w, http.StatusBadRequest, graphError{Message: fmt.Sprintf("Unknown path components: /%s/%s", version, phoneID), Type: "OAuthException", Code: 2500})
		return
	}
	if code, ok := s.peekFault(ch, phoneID); ok && code == 190 {
		writeWhatsAppFault(w, fault{code: code})
		return
	}
	writeJSON(w, http.StatusOK, map[string]string{"id": phoneID})
}

func (s *Server) handleTwilioProbe(w http.ResponseWriter, r *http.Request) {
	const ch = ChannelSMS
	s.countProbe(ch)
	// (ServeMux wildcards are whole segments: {Sid} is "AC….json".)
	sid, ok := strings.CutSuffix(r.PathValue("Sid"), ".json")
	if !ok || sid != s.opts.TwilioAccountSID {
		writeTwilioError(w, http.StatusNotFound, 20404, "The requested resource was not found")
		return
	}
	r.SetPathValue("AccountSid", sid)
	if !s.twilioAuthorized(r) || s.accountFault() {
		writeTwilioError(w, http.StatusUnauthorized, 20003, "Authenticate")
		return
	}
	writeJSON(w, http.StatusOK, map[string]string{"sid": s.opts.TwilioAccountSID, "status": "active", "type": "Full"})
}
