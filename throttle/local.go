package throttle

import (
	"context"
	"errors"
	"time"
)

// LocalOptions configures an in-process limiter.
type LocalOptions struct {
	// Clock supplies the time; nil means time.Now.
	Clock func() time.Time
	// MaxKeys bounds memory: when more keys hold state, the least recently
	// used idle ones are evicted. Zero means 100000.
	MaxKeys int
	// ConcurrencyRetry caps the RetryAfter of a blocked Concurrency limit,
	// as Options.ConcurrencyRetry. Zero means 100ms.
	ConcurrencyRetry time.Duration
}

// Local is the in-process Limiter. TODO(issue 3): being written.
type Local struct{}

var _ Limiter = (*Local)(nil)

var errLocalTODO = errors.New("throttle: local backend not implemented yet")

// NewLocal returns an in-process Limiter.
func NewLocal(opts LocalOptions) *Local { return &Local{} }

func (l *Local) Consume(ctx context.Context, reqs ...Request) (Decision, error) {
	return Decision{}, errLocalTODO
}
func (l *Local) Check(ctx context.Context, reqs ...Request) (Decision, error) {
	return Decision{}, errLocalTODO
}
func (l *Local) Status(ctx context.Context, reqs ...Request) (Decision, error) {
	return Decision{}, errLocalTODO
}
func (l *Local) Release(ctx context.Context, leases []Lease) error        { return errLocalTODO }
func (l *Local) Reset(ctx context.Context, keys ...string) (int64, error) { return 0, errLocalTODO }
func (l *Local) ResetPrefix(ctx context.Context, prefix string) (int64, error) {
	return 0, errLocalTODO
}
func (l *Local) List(ctx context.Context, prefix string, cursor uint64, count int64) ([]string, uint64, error) {
	return nil, 0, errLocalTODO
}
