package callbacks_test

import (
	"fmt"
	"net/url"

	"github.com/sluice-dev/sluice/internal/callbacks"
)

// The worked example of Twilio's request validation docs: auth token
// 12345, the URL Twilio posted to, and the POST parameters.
func ExampleTwilioSignature() {
	params := url.Values{"CallSid": {"CA1234567890ABCDE"}, "Caller": {"+14158675309"}, "Digits": {"1234"},
		"From": {"+14158675309"}, "To": {"+18005551212"}}
	fmt.Println(callbacks.TwilioSignature("12345", "https://mycompany.com/myapp.php?foo=1&bar=2", params))
	// Output: RSOYDt4T1cUTdK1PDd93/VVr8B8=
}

func ExampleWhatsAppSignature() {
	body := []byte(`{"object":"whatsapp_business_account","entry":[]}`)
	fmt.Println(callbacks.WhatsAppSignature("app-secret", body))
	// Output: sha256=d3e4f9da0ce6c71ab3dba55929b8eeeee2455349e534924ead19f98d143e904f
}
