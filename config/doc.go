// Package config loads and validates Sluice's YAML configuration: where Redis
// is, how the asynq worker runs, and, per channel (whatsapp, sms, webhook,
// http), the provider settings and the limit rules the throttle enforces.
//
// Default holds the built-in configuration, the providers' published limits;
// sluice.example.yaml at the repository root is the same configuration with
// every field documented, and a test keeps the two equal. Load and Parse
// start from Default and overlay the file: anything the file omits keeps its
// default, and a channel's limits, when given, replace that channel's list.
//
//	channels:
//	  whatsapp:
//	    limits:
//	      - name: throughput
//	        key: "whatsapp:number:{phone_number_id}"
//	        algorithm: gcra
//	        rate: 1000/s
//
// A limit rule becomes a rules.Rule: a throttle.Limit, the key template
// ("whatsapp:pair:{phone_number_id}:{to}": ':'-separated segments, the first
// the channel name, {field} placeholders naming task fields) and the cost of
// one task: a whole number, or for sms "segments", the body's message
// segments (rules.Rule.CostField; tasks.CostFieldNames). Every algorithm of throttle.Algorithms is accepted, by name or
// alias (throttle.ParseAlgorithm), each with its own fields: rate (gcra and
// the windowed algorithms, whose window must be one of throttle.Windows:
// 1s, 30s, 1m, 5m, 1h, 1d), burst (gcra), interval (min_interval), max and
// lease (concurrency), member (distinct: the template of the subject it
// counts, such as "{to}"):
//
//	limits:
//	  - name: tier
//	    key: "whatsapp:tier:{phone_number_id}"
//	    algorithm: distinct
//	    rate: 2000/1d
//	    member: "{to}"
//
// A channel's tunables (timeout, throttle_backoff, probe_every,
// max_retry_after, max_payload_bytes, headroom, max_margin, hold,
// tenant_weights) are rows of one table, channelSettings in settings.go:
// each row gives the YAML key, the parse, the bounds and their error
// text, the default, the documentation (the generated part of
// sluice.example.yaml) and how the value lands in worker.Channel
// (ChannelSettings.Apply). An omitted setting is its default; an explicit
// 0 is a value, accepted only where a row says what it means (headroom:
// 0% is no headroom, max_margin: 0 a fixed headroom).
//
// Validation reports every problem at once, each with its position and field,
// sorted by position:
//
//	sluice.yaml:9:3: channels.telegram: unknown channel (want whatsapp, sms, webhook or http)
//	sluice.yaml:14:15: channels.whatsapp.limits[1].rate: rate "80/x": period "x": unknown unit "x" (want ms, s, m, h or d)
//
// Secrets are never in the file: fields ending in _env name environment
// variables, read with Config.Secret and Config.RedisURL, whose errors name the
// variable and never show a value.
//
// Typical use:
//
//	cfg, err := config.Load(path)
//	if err != nil {
//		return err // every line is file:line:column: field: problem
//	}
//	redisURL, err := cfg.RedisURL()
//	...
//	for _, rule := range cfg.Channels["whatsapp"].Rules() { ... }
package config
