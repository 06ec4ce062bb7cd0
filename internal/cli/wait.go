package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/vbauerster/mpb/v8"
	"github.com/vbauerster/mpb/v8/decor"
)

// campaignCounts is what the workers and the providers' delivery callbacks
// have reported for a campaign's sends so far.
type campaignCounts struct {
	// Enqueued: new tasks its producers counted; 0 when they did not.
	Enqueued int64
	// Sent: the provider accepted the send (sent or sent_unconfirmed).
	// Failed: the worker gave up on it (permanent error, budget spent).
	// Each send ends as exactly one of the two.
	Sent, Failed int64
	// Delivered, Read and Undelivered come from delivery callbacks, when
	// the provider sends them (http.public_url, the Meta webhook).
	Delivered, Read, Undelivered int64
}

// done is the sends that reached an outcome.
func (c campaignCounts) done() int64 { return c.Sent + c.Failed }

// waitOptions tune waitCampaign.
type waitOptions struct {
	// Every is how often the counts are read. Default 1s.
	Every time.Duration
	// Bar is where the progress bar is drawn: a terminal, else nil for none.
	Bar io.Writer
	// Lines, when Bar is nil, gets one progress line every LineEvery
	// (default 10s): logs and pipes get a record without a bar's escapes.
	Lines     io.Writer
	LineEvery time.Duration
	// Expected is when the campaign's last send is expected (its plan,
	// moved past the pauses that hold it: expectedEnd), shown with the
	// progress; zero: not shown (no time can be said).
	Expected time.Time
	// Stall ends the wait when no send reached an outcome for this long
	// after Expected (a task deleted from its queue never gets one).
	// Default 10m.
	Stall time.Duration
	// Now is the clock for the progress lines; nil means time.Now.
	Now func() time.Time
}

// errStalled is waitCampaign's error when the campaign stopped moving.
var errStalled = errors.New("no send of the campaign reached an outcome")

// waitCampaign reads the campaign's counts through poll every opts.Every
// until total of its sends (or Enqueued, when the producers counted more)
// reached an outcome, drawing a progress bar of the deliveries with their
// rate and the expected end. The rate is of the outcomes reached since the
// wait began, over the time the reads took (those done while the file was
// enqueued are where the bar starts). It returns the last counts read; the error is
// ctx's (Ctrl-C), poll's, or errStalled after opts.Stall without progress.
func waitCampaign(ctx context.Context, name string, total int64, poll func(context.Context) (campaignCounts, error), opts waitOptions) (campaignCounts, error) {
	if opts.Every <= 0 {
		opts.Every = time.Second
	}
	if opts.LineEvery <= 0 {
		opts.LineEvery = 10 * time.Second
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	if opts.Stall <= 0 {
		opts.Stall = 10 * time.Minute
	}
	popts := []mpb.ContainerOption{mpb.WithOutput(opts.Bar), mpb.WithWidth(40)}
	if opts.Bar != nil {
		// Bar is a terminal in use; auto refresh also draws to other
		// writers (a test's buffer).
		popts = append(popts, mpb.WithAutoRefresh())
	}
	p := mpb.NewWithContext(ctx, popts...)
	bar := p.AddBar(total,
		mpb.PrependDecorators(decor.Name(name, decor.WC{C: decor.DindentRight | decor.DextraSpace}), decor.CountersNoUnit("%d / %d")),
		mpb.AppendDecorators(decor.Percentage(), decor.Name(" "), decor.EwmaSpeed(0, "%.1f/s", 30), decor.Name(" ETA "), decor.EwmaETA(decor.ET_STYLE_GO, 30)))
	finish := func() {
		if !bar.Completed() {
			bar.Abort(false)
		}
		p.Wait()
	}
	start := opts.Now()
	lastLine, moved, polled := start, start, start
	var last, first campaignCounts
	tick := time.NewTicker(opts.Every)
	defer tick.Stop()
	for n := 0; ; n++ {
		c, err := poll(ctx)
		if err != nil {
			finish()
			return last, err
		}
		if c.Enqueued > total {
			total = c.Enqueued
			bar.SetTotal(total, false)
		}
		now := opts.Now()
		switch d := c.done() - last.done(); {
		case n == 0:
			// What was done before the wait began (while the file was
			// enqueued) is where the bar starts, not a rate.
			first = c
			bar.SetCurrent(c.done())
		default:
			// Every read counts, those that found nothing new too, with the
			// time it covered: outcomes recorded in batches are spread over
			// the reads they took, not counted as a burst in one Every.
			bar.EwmaIncrInt64(max(d, 0), now.Sub(polled))
		}
		if c.done() > last.done() {
			moved = now
		}
		last, polled = c, now
		if c.done() >= total {
			bar.SetTotal(total, true)
			p.Wait()
			return c, nil
		}
		if since := now.Sub(moved); since >= opts.Stall && now.After(opts.Expected.Add(opts.Stall)) {
			finish()
			return c, fmt.Errorf("%w for %s: %d of %d have none (a task deleted from its queue never gets one)", errStalled, since.Round(time.Second), total-c.done(), total)
		}
		if opts.Bar == nil && opts.Lines != nil && now.Sub(lastLine) >= opts.LineEvery {
			lastLine = now
			fmt.Fprintf(opts.Lines, "%s: %d / %d done (%d sent, %d failed), %.1f/s%s\n",
				name, c.done(), total, c.Sent, c.Failed, float64(c.done()-first.done())/now.Sub(start).Seconds(), expected(opts.Expected))
		}
		select {
		case <-ctx.Done():
			finish()
			return last, ctx.Err()
		case <-tick.C:
		}
	}
}

// expected renders the planned end for a progress line.
func expected(t time.Time) string {
	if t.IsZero() {
		return ""
	}
	return ", last send expected at " + t.Format(time.TimeOnly)
}
