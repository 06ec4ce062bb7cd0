package config_test

import (
	"fmt"

	"github.com/sluice-dev/sluice/config"
)

func ExampleParse() {
	cfg, err := config.Parse("sluice.yaml", []byte(`
worker:
  concurrency: 8
channels:
  whatsapp:
    limits:
      - name: throughput
        key: "whatsapp:number:{phone_number_id}"
        algorithm: gcra
        rate: 1000/s
        burst: 10
  sms:
    enabled: false
`))
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println("concurrency:", cfg.Worker.Concurrency)
	fmt.Println("delayed task check:", cfg.Worker.DelayedTaskCheckInterval) // default
	for _, name := range []string{"whatsapp", "sms", "webhook"} {
		ch := cfg.Channels[name]
		fmt.Printf("%s enabled=%t queue=%s\n", name, ch.Enabled, ch.Queue)
		for _, r := range ch.Rules() {
			fmt.Printf("  %s %s %s capacity=%d line=%d\n", r.Limit.Name, r.Key, r.Limit.Algorithm, r.Limit.Capacity(), r.Line)
		}
	}
	// Output:
	// concurrency: 8
	// delayed task check: 100ms
	// whatsapp enabled=true queue=whatsapp
	//   throughput whatsapp:number:{phone_number_id} gcra capacity=10 line=7
	// sms enabled=false queue=sms
	//   sender sms:sender:{sender} gcra capacity=1 line=0
	//   concurrency sms:account:{account_sid} concurrency capacity=100 line=0
	// webhook enabled=true queue=webhook
	//   host webhook:host:{host} gcra capacity=1 line=0
}

func ExampleParse_errors() {
	_, err := config.Parse("sluice.yaml", []byte(`
worker:
  delayed_task_check_interval: 5s
channels:
  whatsapp:
    limits:
      - name: daily
        key: "whatsapp:daily:{recipient}"
        algorithm: fixed_window
        rate: 250/1d
  telegram: {}
`))
	fmt.Println(err)
	// Output:
	// sluice.yaml:3:32: worker.delayed_task_check_interval: 5s is longer than 1s: asynq moves due retry and scheduled tasks to pending only this often, so every throttled task would wait up to 5s past its RetryAfter
	// sluice.yaml:8:14: channels.whatsapp.limits[0].key: key "whatsapp:daily:{recipient}": placeholder {recipient} is not a field of whatsapp tasks (want {phone_number_id}, {to})
	// sluice.yaml:11:3: channels.telegram: unknown channel (want whatsapp, sms, webhook or http)
}

func ExampleDefault() {
	for _, r := range config.Default().Channels["whatsapp"].Rules() {
		fmt.Println(r.Limit.Name, r.Key, r.Limit.Algorithm, r.Limit.Rate)
	}
	// Output:
	// throughput whatsapp:number:{phone_number_id} gcra 80/s
	// pair whatsapp:pair:{phone_number_id}:{to} gcra 1/6s
	// daily whatsapp:daily:{to} fixed_window 250/d
}
