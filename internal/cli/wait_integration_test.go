package cli

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/sluice-dev/sluice/config"
	"github.com/sluice-dev/sluice/internal/redistest"
	"github.com/sluice-dev/sluice/internal/server"
)

// send --wait returns once every row's send was sent or failed, as a real
// worker records them, and says how many of each.
func TestSendWaitFollowsTheCampaignToItsEnd(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	rdb := srv.Client(t)
	store, err := server.NewStore(config.Default(), rdb)
	require.NoError(t, err)
	startWorker(t, rdb, store)

	// Four rows; the emulated Twilio refuses the last recipient for good
	// (21610), so the campaign ends with 3 sent and 1 failed.
	path := writeFile(t, "autumn.csv", "to,name\n+12025550101,Ann\n+12125550102,Bob\n+13055550103,Cy\n+14155550000,Dee\n")
	r := run(t, "send", "--channel", "sms", "--csv", path, "--from", "+14155550100,+14155550101",
		"--body", "Hi {name}", "--wait", "--redis", srv.URL())
	require.Equal(t, 0, r.code)
	require.Contains(t, r.stdout, "4 rows: 4 enqueued")
	require.Contains(t, r.stdout, "campaign autumn: 3 sent, 1 failed of 4")
	require.Contains(t, r.stdout, "failed sends are archived with their reason")

	// Again: nothing is enqueued twice, and the outcomes are already known.
	r = run(t, "send", "--channel", "sms", "--csv", path, "--from", "+14155550100,+14155550101",
		"--body", "Hi {name}", "--wait", "--redis", srv.URL())
	require.Equal(t, 0, r.code)
	require.Contains(t, r.stdout, "0 enqueued, 4 already enqueued")
	require.Contains(t, r.stdout, "campaign autumn: 3 sent, 1 failed of 4")
}
