package tasks

import (
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/stretchr/testify/require"
)

func TestChannels(t *testing.T) {
	t.Parallel()
	require.Equal(t, []string{"whatsapp", "sms", "webhook", "http"}, Channels())
	for _, ch := range Channels() {
		typ, ok := ChannelTaskType(ch)
		require.True(t, ok, ch)
		require.Equal(t, ch, DefaultQueue(typ), "default queue of %s", typ)
	}
	_, ok := ChannelTaskType("email")
	require.False(t, ok)
	require.Equal(t, "", DefaultQueue("email:send"))
	_, ok = FieldNames("email:send")
	require.False(t, ok)
}

func TestFields(t *testing.T) {
	t.Parallel()
	tests := []struct {
		taskType string
		fields   map[string]string
		want     map[string]string
	}{
		{TypeWhatsAppSend, validWhatsApp().Fields(), map[string]string{
			"phone_number_id": "106540352242922", "to": "+12025550123",
		}},
		{TypeSMSSend, validSMS().Fields(), map[string]string{
			"from": "+12025550100", "messaging_service_sid": "", "to": "+12025550123", "sender": "+12025550100", "account_sid": "", "segments": "1",
		}},
		{TypeSMSSend, SMSSend{MessagingServiceSID: "MG1", To: "+12025550123", Body: strings.Repeat("x", 300)}.Fields(), map[string]string{
			"from": "", "messaging_service_sid": "MG1", "to": "+12025550123", "sender": "MG1", "account_sid": "", "segments": "2",
		}},
		// A raw payload with the SID as From: the service field names it too.
		{TypeSMSSend, SMSSend{From: testServiceSID, To: "+12025550123", Body: "😀"}.Fields(), map[string]string{
			"from": testServiceSID, "messaging_service_sid": testServiceSID, "to": "+12025550123", "sender": testServiceSID, "account_sid": "", "segments": "1",
		}},
		{TypeWebhookDeliver, WebhookDeliver{URL: "https://Hooks.Example.COM:8443/x?a=1", EventType: "order.updated", Endpoint: "acme"}.Fields(), map[string]string{
			"url": "https://Hooks.Example.COM:8443/x?a=1", "host": "hooks.example.com:8443", "endpoint": "acme", "event_type": "order.updated",
		}},
		{TypeHTTPCall, validHTTP().Fields(), map[string]string{
			"method": "POST", "url": "https://api.example.com/v1/orders", "host": "api.example.com",
		}},
	}
	for _, tc := range tests {
		if diff := cmp.Diff(tc.want, tc.fields); diff != "" {
			t.Errorf("%s Fields (-want +got):\n%s", tc.taskType, diff)
		}
		names, ok := FieldNames(tc.taskType)
		require.True(t, ok)
		keys := make([]string, 0, len(tc.fields))
		for k := range tc.fields {
			keys = append(keys, k)
		}
		slices.Sort(keys)
		slices.Sort(names)
		require.Equal(t, keys, names, "FieldNames(%s) must match the keys of Fields", tc.taskType)
	}
	// Every channel of the registry is held to its payload's Fields above: a
	// channel added without a case fails here.
	for _, ch := range Channels() {
		typ, _ := ChannelTaskType(ch)
		require.True(t, slices.ContainsFunc(tests, func(tc struct {
			taskType string
			fields   map[string]string
			want     map[string]string
		}) bool {
			return tc.taskType == typ
		}), "channel %s (%s): no Fields case ties its FieldNames to its payload", ch, typ)
	}
}

func TestFieldNamesReturnsCopy(t *testing.T) {
	t.Parallel()
	a, _ := FieldNames(TypeHTTPCall)
	a[0] = "changed"
	b, _ := FieldNames(TypeHTTPCall)
	require.Equal(t, "method", b[0])
}

const testServiceSID = "MG0123456789abcdef0123456789abcdef"
