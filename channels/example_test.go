package channels_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"time"

	"github.com/sluice-dev/sluice/channels"
	"github.com/sluice-dev/sluice/tasks"
)

func ExampleSign() {
	// The Standard Webhooks test vector.
	sig, err := channels.Sign("whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw", "msg_p5jXN8AQM9LWM0D4loKWxJek",
		time.Unix(1614265330, 0), []byte(`{"test": 2432232314}`))
	fmt.Println(sig, err)
	// Output: v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE= <nil>
}

func ExampleVerify() {
	h := http.Header{}
	h.Set("webhook-id", "msg_p5jXN8AQM9LWM0D4loKWxJek")
	h.Set("webhook-timestamp", "1614265330")
	h.Set("webhook-signature", "v1,bm9wZQ== v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE=")
	body := []byte(`{"test": 2432232314}`)
	now := time.Unix(1614265330+60, 0)

	fmt.Println(channels.Verify("whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw", h, body, 5*time.Minute, now))
	err := channels.Verify("whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw", h, []byte(`{"test": 1}`), 5*time.Minute, now)
	fmt.Println(errors.Is(err, channels.ErrVerification))
	// Output:
	// <nil>
	// true
}

func ExampleParseRetryAfter() {
	now := time.Date(2026, 11, 10, 12, 0, 0, 0, time.UTC)
	for _, v := range []string{"120", "Tue, 10 Nov 2026 12:01:30 GMT", "Wed, 21 Oct 2015 07:28:00 GMT", "soon"} {
		fmt.Println(channels.ParseRetryAfter(http.Header{"Retry-After": {v}}, now))
	}
	// Output:
	// 2m0s
	// 1m30s
	// 0s
	// 0s
}

func ExampleWhatsApp_Send() {
	// A stand-in for the Graph API answering with a pair rate limit error.
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusBadRequest)
		io.WriteString(w, `{"error":{"message":"(#131056) (Business Account, Consumer Account) pair rate limit hit","type":"OAuthException","code":131056,"fbtrace_id":"A1"}}`)
	}))
	defer srv.Close()

	wa := &channels.WhatsApp{BaseURL: srv.URL, Token: "EAAexample"}
	_, err := wa.Send(context.Background(), tasks.WhatsAppSend{V: 1, PhoneNumberID: "106540352242922", To: "+12025550123", Text: "Your order shipped"})
	var e *channels.Error
	if errors.As(err, &e) {
		fmt.Println(e.Class, e.Scope, e.Code)
		fmt.Println(e)
	}
	// Output:
	// throttled pair 131056
	// whatsapp: throttled: code 131056 (pair rate limit): (#131056) (Business Account, Consumer Account) pair rate limit hit
}
