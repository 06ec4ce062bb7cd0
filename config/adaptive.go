package config

import (
	"math"
	"strconv"
	"strings"

	"gopkg.in/yaml.v3"

	"github.com/sluice-dev/sluice/throttle"
)

// adaptiveFields are the fields of channels.*.adaptive.
var adaptiveFields = []string{"enabled", "decrease", "floor", "increase", "quiet", "margin", "ceiling_ttl"}

// adaptive reads a channel's adaptive section:
//
//	adaptive:
//	  enabled: true      # default true
//	  decrease: 25%      # a counted throttle multiplies the rate by this
//	  floor: 1%          # of the configured rate, the least effective rate
//	  increase: 10%      # of the configured rate, the most a quiet period adds
//	  quiet: 3s          # sends through without a throttle before a step up
//	  margin: 10%        # the search for the provider's rate stops this close
//	  ceiling_ttl: 1h    # the lowest rate throttled is remembered this long
//
// Fractions are written as percentages ("25%") or plain numbers (0.25).
// The values are checked by throttle.AdaptOptions.Validate; an error
// points at the field.
func (d *decoder) adaptive(n *yaml.Node, path string, c *ChannelConfig) {
	o := c.Adaptive
	nodes := map[string]*yaml.Node{}
	before := len(d.errs)
	d.mapping(n, path, "field", adaptiveFields, func(key string, _, v *yaml.Node) {
		p := join(path, key)
		nodes[key] = resolve(v)
		switch key {
		case "enabled":
			on := !o.Disabled
			d.boolean(v, p, &on)
			o.Disabled = !on
		case "decrease":
			d.fraction(v, p, &o.Decrease)
		case "floor":
			d.fraction(v, p, &o.Floor)
		case "increase":
			d.fraction(v, p, &o.Increase)
		case "margin":
			d.fraction(v, p, &o.Margin)
		case "quiet":
			d.setDuration(v, p, &o.Quiet)
		case "ceiling_ttl":
			d.setDuration(v, p, &o.CeilingTTL)
		}
	})
	if len(d.errs) > before {
		return
	}
	if err := o.Validate(); err != nil {
		field, msg, _ := strings.Cut(err.Error(), ": ")
		at := resolve(n)
		if v, ok := nodes[field]; ok {
			at = v
		}
		d.errorf(at, join(path, field), "%s", msg)
		return
	}
	c.Adaptive = o
}

// fraction reads "25%" or 0.25 as 0.25. A zero would mean "the default"
// to throttle.AdaptOptions, so it is refused here.
func (d *decoder) fraction(n *yaml.Node, path string, dst *float64) {
	s, ok := d.scalar(n, path)
	if !ok {
		return
	}
	t := strings.TrimSpace(s)
	num, pct := strings.CutSuffix(t, "%")
	v, err := strconv.ParseFloat(strings.TrimSpace(num), 64)
	if err != nil || math.IsNaN(v) || math.IsInf(v, 0) {
		d.errorf(resolve(n), path, "want a fraction such as 25%% or 0.25, got %q", s)
		return
	}
	if pct {
		v /= 100
	}
	if v <= 0 {
		d.errorf(resolve(n), path, "want more than 0, got %s", s)
		return
	}
	*dst = v
}

// defaultAdaptive is every channel's adaptive section before the file:
// on, with throttle's defaults.
func defaultAdaptive() throttle.AdaptOptions {
	return throttle.AdaptOptions{}.WithDefaults()
}
