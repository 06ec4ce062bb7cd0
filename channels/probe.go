package channels

import (
	"context"
	"net/http"
	"strings"
)

// Probes: after an Unauthorized answer the worker pauses the channel and,
// now and then, asks the provider whether the credentials work again with a
// read-only request that sends nothing. A probe that succeeds resumes the
// channel; one that is refused keeps it paused. Both probes are requests of
// the providers' official OpenAPI specs (channels/contract_test.go checks
// them as it checks sends).

// Probe checks the WhatsApp token with
// GET {BaseURL}/{Version}/{phoneNumberID}?fields=id (Meta's "Retrieve
// WhatsApp Business Phone Number Information", the spec's
// /{Version}/{Phone-Number-ID}): it sends no message. It returns nil when
// Meta answers 2xx; an *Error classified as Send's (190 or HTTP 401/403:
// Unauthorized) otherwise. phoneNumberID is digits, as in
// tasks.WhatsAppSend.PhoneNumberID.
func (c *WhatsApp) Probe(ctx context.Context, phoneNumberID string) error {
	if err := c.Validate(); err != nil {
		return permanent(ProviderWhatsApp, "config: %v", err)
	}
	if phoneNumberID == "" || !isDigits(phoneNumberID) {
		return permanent(ProviderWhatsApp, "probe: phone_number_id: want digits, got %q", phoneNumberID)
	}
	base := strings.TrimRight(orDefault(c.BaseURL, DefaultWhatsAppBaseURL), "/")
	u := base + "/" + orDefault(c.Version, DefaultWhatsAppVersion) + "/" + phoneNumberID + "?fields=id"
	req, err := http.NewRequest(http.MethodGet, u, nil)
	if err != nil {
		return permanent(ProviderWhatsApp, "config: building request: %v", redactErr(err, []string{c.Token}))
	}
	req.Header.Set("Authorization", "Bearer "+c.Token)
	req.Header.Set("Accept", "application/json")
	req.Header.Set("User-Agent", DefaultUserAgent)
	r, err := do(ctx, c.HTTP, req, ProviderWhatsApp, c.Token)
	if err != nil {
		return err
	}
	if r.status >= 200 && r.status < 300 {
		return nil
	}
	_, err = whatsappResult(r, clock(c.Now), c.Token)
	return err
}

// Probe checks the Twilio credentials with
// GET {BaseURL}/2010-04-01/Accounts/{AccountSID}.json (the spec's
// FetchAccount): it sends no message. It returns nil when Twilio answers
// 2xx; an *Error classified as Send's (20003 or HTTP 401/403: Unauthorized)
// otherwise.
func (c *Twilio) Probe(ctx context.Context) error {
	if err := c.Validate(); err != nil {
		return permanent(ProviderTwilio, "config: %v", err)
	}
	base := strings.TrimRight(orDefault(c.BaseURL, DefaultTwilioBaseURL), "/")
	req, err := http.NewRequest(http.MethodGet, base+"/2010-04-01/Accounts/"+c.AccountSID+".json", nil)
	if err != nil {
		return permanent(ProviderTwilio, "config: building request: %v", redactErr(err, []string{c.AuthToken}))
	}
	req.SetBasicAuth(c.AccountSID, c.AuthToken)
	req.Header.Set("Accept", "application/json")
	req.Header.Set("User-Agent", DefaultUserAgent)
	r, err := do(ctx, c.HTTP, req, ProviderTwilio, c.AuthToken)
	if err != nil {
		return err
	}
	if r.status >= 200 && r.status < 300 {
		return nil
	}
	_, err = twilioResult(r, clock(c.Now), c.AuthToken)
	return err
}
