package server

import (
	"context"
	"errors"
	"log/slog"
	"net/http"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"

	"github.com/sluice-dev/sluice/config"
	"github.com/sluice-dev/sluice/internal/api"
	"github.com/sluice-dev/sluice/internal/app"
	"github.com/sluice-dev/sluice/internal/callbacks"
	"github.com/sluice-dev/sluice/internal/delivery"
	"github.com/sluice-dev/sluice/throttle"
	"github.com/sluice-dev/sluice/worker"
)

// NewStore returns the delivery store under cfg's key prefix: the worker
// records sends and archives in it (app.Options.Delivery), the callbacks
// move its records, GET /v1/tasks/{id} and `sluice send --wait` read it.
func NewStore(cfg *config.Config, rdb redis.UniversalClient) (*delivery.Store, error) {
	return delivery.New(delivery.Options{Redis: rdb, Prefix: cfg.Redis.KeyPrefix})
}

// CallbackOptions are what NewCallbacks needs besides the configuration.
type CallbackOptions struct {
	Store   *delivery.Store
	Worker  *worker.Worker // its Feedback applies throttle codes in statuses
	Limiter *throttle.Redis
	// Secrets resolves credentials; nil means the environment (cfg.Secret).
	Secrets    app.Secrets
	Registerer prometheus.Registerer
	Logger     *slog.Logger
}

// NewCallbacks returns the /callbacks/ handler for cfg's enabled channels:
// Twilio's, keyed by the sms channel's auth token and checked against
// http.public_url + /callbacks/twilio when set; WhatsApp's, keyed by the
// app secret and verify token the whatsapp channel names
// (app_secret_env, verify_token_env), which are optional: without them
// that endpoint answers 404.
func NewCallbacks(cfg *config.Config, o CallbackOptions) (http.Handler, error) {
	secrets := o.Secrets
	if secrets == nil {
		secrets = cfg.Secret
	}
	co := callbacks.Options{Store: o.Store, Limiter: o.Limiter, Registerer: o.Registerer, Logger: o.Logger,
		MaxBodyBytes: int64(cfg.HTTP.MaxBodyBytes)}
	if o.Worker != nil {
		co.Feedback = o.Worker.Feedback
	}
	if cc := cfg.Channels["sms"]; cc != nil && cc.Enabled {
		tok, err := secrets(cc.AuthTokenEnv)
		if err != nil {
			return nil, err
		}
		co.TwilioAuthToken = tok
		if cfg.HTTP.PublicURL != "" {
			co.TwilioURL = cfg.HTTP.PublicURL + app.TwilioCallbackPath
		}
	}
	whatsapp := "off: the whatsapp channel is disabled"
	if cc := cfg.Channels["whatsapp"]; cc != nil && cc.Enabled && cc.AppSecretEnv != "" && cc.VerifyTokenEnv != "" {
		secret, err1 := secrets(cc.AppSecretEnv)
		verify, err2 := secrets(cc.VerifyTokenEnv)
		if err1 == nil && err2 == nil && secret != "" && verify != "" {
			co.WhatsAppAppSecret, co.WhatsAppVerifyToken = secret, verify
			whatsapp = "on"
		} else {
			whatsapp = "off: set " + cc.AppSecretEnv + " and " + cc.VerifyTokenEnv // names, never values
		}
	}
	twilio := "off: the sms channel is disabled"
	switch {
	case co.TwilioAuthToken != "" && co.TwilioURL != "":
		twilio = "on, requested with each SMS"
	case co.TwilioAuthToken != "":
		twilio = "on, not requested (http.public_url is empty)"
	}
	if o.Logger != nil {
		o.Logger.Info("delivery callbacks", "twilio", twilio, "whatsapp", whatsapp)
	}
	return callbacks.New(co)
}

// Deliveries adapts the store to GET /v1/tasks/{id}'s "delivery".
func Deliveries(s *delivery.Store) api.DeliveryLookup {
	return func(ctx context.Context, taskID string) (*api.Delivery, error) {
		st, err := s.Get(ctx, taskID)
		if errors.Is(err, delivery.ErrNotFound) {
			return nil, nil
		}
		if err != nil {
			return nil, err
		}
		return &api.Delivery{Status: string(st.State), ProviderID: st.ProviderID, ErrorCode: st.Code, ErrorTitle: st.Reason, UpdatedAt: st.At}, nil
	}
}
