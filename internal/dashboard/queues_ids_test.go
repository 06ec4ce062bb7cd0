package dashboard

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/sluice-dev/sluice/internal/testutil"

	"github.com/chromedp/chromedp"
	"github.com/hibiken/asynq"
	"github.com/hibiken/asynqmon"
	"github.com/stretchr/testify/require"

	"github.com/sluice-dev/sluice/internal/campaign"
	"github.com/sluice-dev/sluice/internal/redistest"
	"github.com/sluice-dev/sluice/tasks"
)

// asynqmon's task tables showed a task's ID up to its first "-": every
// task of a campaign ("sms-<hash>") showed "sms". The UI script served
// shows the whole ID; the rest of it is asynqmon's own.
func TestQueuesShowWholeTaskIDs(t *testing.T) {
	t.Parallel()
	for _, readOnly := range []bool{false, true} {
		srv := queuesServer(t, QueuesOptions{ReadOnly: readOnly})
		_, index := get(t, srv.URL+"/queues/")
		name := regexp.MustCompile(`/queues/static/js/main\.[0-9a-f]+\.chunk\.js`).FindString(index)
		require.NotEmpty(t, name, "asynqmon's index names its main script")
		res, js := get(t, srv.URL+name)
		require.Equal(t, http.StatusOK, res.StatusCode)
		require.Equal(t, "application/javascript; charset=utf-8", res.Header.Get("Content-Type"))
		require.Equal(t, queuesCSP, res.Header.Get("Content-Security-Policy"))
		require.False(t, strings.Contains(js, `.indexOf("-");return-1===`), "the script cuts IDs at their first dash")
		require.Regexp(t, `function (\w+)\((\w+)\)\{return (\w+)\}function \w+\(\w+,\w+\)\{if\(0===\w+\)return"0.00%"`, js,
			"uuidPrefix returns the whole ID")

		// asynqmon's own script differs by that function only.
		mon := asynqmon.New(asynqmon.Options{RootPath: "/queues", RedisConnOpt: sharedConn{redistest.Start(t).Client(t)}})
		rec := httptest.NewRecorder()
		mon.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, name, nil))
		orig := rec.Body.String()
		require.True(t, strings.Contains(orig, `.indexOf("-");return-1===`), "asynqmon's own script cuts IDs")
		require.Equal(t, uuidPrefixJS.ReplaceAllString(orig, "function ${1}(${2}){return ${2}}"), js)
	}
}

// In a browser, asynqmon's pending tasks of a campaign show their whole,
// different IDs.
func TestBrowserQueuesShowCampaignTaskIDs(t *testing.T) {
	bin := testutil.Chromium(t)
	t.Parallel()
	rdb := redistest.Start(t).Client(t)
	client := asynq.NewClientFromRedisClient(rdb)
	var want []string
	for i := range 3 {
		row := campaign.Row{To: fmt.Sprintf("+1202555%04d", i), Params: map[string]string{"to": fmt.Sprintf("+1202555%04d", i)}}
		id := campaign.IdempotencyKey("spring", "sms", row, []string{"to"})
		want = append(want, id)
		task, err := tasks.NewSMSSendTask(tasks.SMSSend{From: "+12025550100", To: row.To, Body: "hi", IdempotencyKey: id})
		require.NoError(t, err)
		_, err = client.Enqueue(task)
		require.NoError(t, err)
	}
	require.Regexp(t, `^sms-[0-9a-f]+$`, want[0])
	h, err := NewQueues(QueuesOptions{Redis: rdb})
	require.NoError(t, err)
	mux := http.NewServeMux()
	mux.Handle("/queues/", h)
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)

	cctx := testutil.Browser(t, bin, 1280, 900, 2*time.Minute)
	require.NoError(t, chromedp.Do(cctx, chromedp.Navigate(srv.URL+"/queues/queues/sms?status=pending")))
	ids, err := chromedp.Run(cctx, chromedp.Poll[[]string](`(() => {
		const ids = [...document.querySelectorAll("table tbody tr th")].map(c => c.textContent.trim());
		return ids.length === 3 ? ids : null;
	})()`, chromedp.WithPollingInterval(100*time.Millisecond), chromedp.WithPollingTimeout(time.Minute)))
	require.NoError(t, err, "asynqmon shows the sms queue's three pending tasks")
	require.ElementsMatch(t, want, ids)
}
