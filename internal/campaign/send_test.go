package campaign

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/sluice-dev/sluice/tasks"
)

// A media campaign's flags are checked once against the file's columns,
// and each row's cells fill its media object.
func TestMediaMessage(t *testing.T) {
	t.Parallel()
	cols := []string{"to", "name", "media_url", "doc"}
	base := Message{Channel: "whatsapp", Campaign: "c", PhoneNumberID: "106540352242922"}
	for _, tc := range []struct {
		name string
		edit func(*Message)
		want string
	}{
		{"media and text", func(m *Message) { m.MediaType, m.MediaURL, m.Text = "image", "{media_url}", "hi" }, "whatsapp: give one of --template (with --params), --text, --media"},
		{"caption without media", func(m *Message) { m.Text, m.Caption = "hi", "x" }, "--media-url, --media-id, --caption, --filename: give --media"},
		{"unknown column", func(m *Message) { m.MediaType, m.MediaURL = "image", "{mediaurl}" }, `--media-url: `},
		{"media on sms", func(m *Message) {
			m.Channel, m.Senders, m.Text, m.MediaType = "sms", []string{"+12025550100"}, "hi", "image"
		}, "whatsapp only"},
	} {
		m := base
		tc.edit(&m)
		require.ErrorContains(t, m.Validate(cols), tc.want, tc.name)
	}

	m := base
	m.MediaType, m.MediaURL, m.Caption, m.Filename = "document", "{media_url}", "For {name}", "{doc}.pdf"
	require.NoError(t, m.Validate(cols))
	row := Row{Line: 2, To: "+12025550101", Params: map[string]string{"to": "+12025550101", "name": "Ann", "media_url": "https://cdn.example.com/1.pdf", "doc": "invoice-1"}}
	task, err := m.Task(row, 0, cols)
	require.NoError(t, err)
	p, err := tasks.DecodeWhatsAppSend(task.Payload())
	require.NoError(t, err)
	require.Equal(t, &tasks.Media{Type: "document", Link: "https://cdn.example.com/1.pdf", Caption: "For Ann", Filename: "invoice-1.pdf"}, p.Media)
}

// A webhook campaign signs with the endpoint --endpoint names, or with the
// default secret: the URL is not an endpoint's name.
func TestWebhookCampaignEndpoint(t *testing.T) {
	t.Parallel()
	row := Row{Line: 2, To: "+12025550101", Params: map[string]string{"to": "+12025550101"}}
	for _, endpoint := range []string{"", "billing"} {
		m := Message{Channel: "webhook", Campaign: "c", URLs: []string{"https://hooks.example.com/h"}, EventType: "e", Endpoint: endpoint}
		require.NoError(t, m.Validate([]string{"to"}))
		task, err := m.Task(row, 0, []string{"to"})
		require.NoError(t, err)
		p, err := tasks.DecodeWebhookDeliver(task.Payload())
		require.NoError(t, err)
		require.Equal(t, endpoint, p.Endpoint)
	}
}
