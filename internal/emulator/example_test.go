package emulator_test

import (
	"fmt"
	"net/http"
	"strings"

	"github.com/sluice-dev/sluice/internal/emulator"
)

func ExampleStart() {
	s, err := emulator.Start(emulator.Options{})
	if err != nil {
		panic(err)
	}
	defer s.Close()

	send := func(to string) int {
		body := `{"messaging_product":"whatsapp","to":"` + to + `","type":"text","text":{"body":"hi"}}`
		req, _ := http.NewRequest(http.MethodPost, s.WhatsAppURL()+"/v23.0/106540352242922/messages", strings.NewReader(body))
		req.Header.Set("Authorization", "Bearer "+emulator.DefaultWhatsAppToken)
		req.Header.Set("Content-Type", "application/json")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			panic(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	fmt.Println(send("+16505551234"))
	fmt.Println(send("+16505551234")) // same pair within 6s: 131056
	fmt.Println(send("+16505550000")) // magic: undeliverable

	st := s.Stats()[emulator.ChannelWhatsApp]
	fmt.Printf("accepted %d, throttled %v, rejected %d\n", st.Accepted, st.ThrottledByCode, st.Rejected)
	// Output:
	// 200
	// 400
	// 400
	// accepted 1, throttled map[131056:1], rejected 1
}
