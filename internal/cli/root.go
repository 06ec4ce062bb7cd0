// Package cli is the sluice command line: cobra commands that parse flags
// and call Sluice's packages. Commands write to the io.Writers they are
// given; main only maps errors to exit codes.
package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"
	"sync/atomic"

	"github.com/redis/go-redis/v9"
	"github.com/spf13/cobra"

	"github.com/sluice-dev/sluice/config"
	"github.com/sluice-dev/sluice/internal/app"
	"github.com/sluice-dev/sluice/redact"
)

// ExitError carries a specific exit code: 2 for usage errors, 3 for a
// bulk send with rejected rows (1, the default, for everything else).
type ExitError struct {
	Code int
	Err  error
}

func (e *ExitError) Error() string { return e.Err.Error() }
func (e *ExitError) Unwrap() error { return e.Err }

// globals are the persistent flags.
type globals struct {
	configPath string
	redisURL   string
	logLevel   string
	stdout     io.Writer
	stderr     io.Writer
}

// NewRoot returns the sluice command tree writing to stdout and stderr.
func NewRoot(stdout, stderr io.Writer) *cobra.Command {
	g := &globals{stdout: stdout, stderr: stderr}
	root := &cobra.Command{
		Use:   "sluice",
		Short: "Sluice delivers WhatsApp, SMS, webhook and API sends through Redis-backed provider limits",
		Long: `Sluice is an asynq worker that runs every send through its channel's limits
(per second, per recipient, per sender, daily, concurrency) in one atomic Redis
call, sends what is allowed and puts what is blocked back in Redis for exactly
as long as the limit requires, without spending a retry.`,
		SilenceUsage:  true,
		SilenceErrors: true,
		Version:       buildVersion(),
	}
	root.SetVersionTemplate("{{.Version}}\n")
	root.SetOut(stdout)
	root.SetErr(stderr)
	// A bad flag (--burst x, --interval 6) is a usage error, for every command.
	root.SetFlagErrorFunc(func(cmd *cobra.Command, err error) error {
		return &ExitError{Code: 2, Err: withCommand(cmd, err)}
	})
	// A command that does not read the configuration refuses --config
	// rather than run without a word about the file it was given.
	root.PersistentPreRunE = func(cmd *cobra.Command, _ []string) error {
		goRedisLogger.Store(g.logger())
		if why, ok := cmd.Annotations[ignoresConfig]; ok && cmd.Flags().Changed("config") {
			return usageErr("%s: --config is not read here: %s; leave it out", strings.TrimPrefix(cmd.CommandPath(), "sluice "), why)
		}
		return nil
	}
	pf := root.PersistentFlags()
	pf.StringVarP(&g.configPath, "config", "c", "", "configuration file (YAML); default: built-in provider limits")
	pf.StringVar(&g.redisURL, "redis", "", "Redis URL, overrides the config (default: $REDIS_URL, else redis.addr)")
	pf.StringVar(&g.logLevel, "log-level", "info", "debug, info, warn or error")
	root.AddCommand(
		newServeCmd(g),
		newDemoCmd(g), // reads the file's redis section only
		noConfig(newEmulateCmd(g), "the emulators enforce the providers' limits, set by their own flags"),
		newEnqueueCmd(g),
		newSendCmd(g), newLimitsCmd(g), newChannelsCmd(g), newEventsCmd(g), newConfigCmd(g),
		noConfig(newVersionCmd(g), "the version does not depend on it"),
	)
	return root
}

// ignoresConfig annotates a command that does not read --config; its
// value says why, and the command refuses the flag.
const ignoresConfig = "sluice/ignores-config"

// noConfig marks cmd as not reading --config, for the reason why.
func noConfig(cmd *cobra.Command, why string) *cobra.Command {
	if cmd.Annotations == nil {
		cmd.Annotations = map[string]string{}
	}
	cmd.Annotations[ignoresConfig] = why
	return cmd
}

// Execute runs the command line and returns the process exit code.
func Execute(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	root := NewRoot(stdout, stderr)
	root.SetArgs(args)
	err := root.ExecuteContext(ctx)
	if err == nil {
		return 0
	}
	fmt.Fprintln(stderr, "sluice:", err)
	var ee *ExitError
	if errors.As(err, &ee) {
		return ee.Code
	}
	return 1
}

// level is --log-level's (info when it does not parse).
func (g *globals) level() slog.Level {
	var lvl slog.Level
	if err := lvl.UnmarshalText([]byte(g.logLevel)); err != nil {
		lvl = slog.LevelInfo
	}
	return lvl
}

func (g *globals) logger() *slog.Logger {
	return slog.New(slog.NewTextHandler(g.stderr, &slog.HandlerOptions{Level: g.level()}))
}

// goRedisLog takes go-redis's own log lines (a pool's dial retries: four
// lines before the error a command reports anyway) off stderr: they go to
// the command's logger at DEBUG.
type goRedisLog struct{}

var goRedisLogger atomic.Pointer[slog.Logger]

func (goRedisLog) Printf(_ context.Context, format string, v ...any) {
	if l := goRedisLogger.Load(); l != nil {
		l.Debug("go-redis: " + fmt.Sprintf(format, v...))
	}
}

// go-redis's logger is process-wide: set once, before any client exists.
func init() { redis.SetLogger(goRedisLog{}) }

// loadConfig returns the file's configuration, or the defaults without --config.
func (g *globals) loadConfig() (*config.Config, error) {
	if g.configPath == "" {
		return config.Default(), nil
	}
	return config.Load(g.configPath)
}

// redisSource resolves --redis, then the config (its env var, then addr),
// and says where the URL came from, for people:
// "--redis", "$REDIS_URL", "redis.addr in FILE" or the default's.
func (g *globals) redisSource(cfg *config.Config) (url, from string, err error) {
	if g.redisURL != "" {
		return g.redisURL, "--redis", nil
	}
	url, err = cfg.RedisURL()
	env := cfg.Redis.URLEnv
	switch {
	case err != nil:
	case env != "" && os.Getenv(env) != "":
		from = "$" + env
	case g.configPath != "":
		from = "redis.addr in " + g.configPath
	case env != "":
		from = "the default: no --redis, $" + env + " not set"
	default:
		from = "the default: no --redis"
	}
	return url, from, err
}

// connectRedis opens the Redis that --redis, the environment or cfg name,
// after naming it on stderr with where it came from (at --log-level info or
// debug), so a forgotten REDIS_URL is not silently the default; the URL is
// shown without user or password.
func (g *globals) connectRedis(ctx context.Context, cfg *config.Config) (redis.UniversalClient, error) {
	if g.redisURL == "" && cfg.Redis.Mode != "" && cfg.Redis.Mode != config.RedisSingle {
		if g.level() <= slog.LevelInfo {
			fmt.Fprintf(g.stderr, "sluice: redis %s %s (redis.mode in %s)\n", cfg.Redis.Mode, strings.Join(cfg.Redis.Addrs, ","), g.configPath)
		}
		return app.Connect(ctx, cfg, nil)
	}
	url, from, err := g.redisSource(cfg)
	if err != nil {
		return nil, err
	}
	if g.level() <= slog.LevelInfo {
		fmt.Fprintf(g.stderr, "sluice: redis %s (%s)\n", redact.URL(url), from)
	}
	return app.ConnectURL(ctx, url)
}

// withCommand prefixes err with the command's path below the root
// ("limits set: …"); Execute prints "sluice: " before every error, so the
// root's own errors get no second "sluice: ".
func withCommand(cmd *cobra.Command, err error) error {
	if !cmd.HasParent() {
		return err
	}
	return fmt.Errorf("%s: %w", strings.TrimPrefix(cmd.CommandPath(), cmd.Root().Name()+" "), err)
}

func usageErr(format string, args ...any) error {
	return &ExitError{Code: 2, Err: fmt.Errorf(format, args...)}
}

// usageArgs makes a wrong number of arguments a usage error (exit 2).
func usageArgs(check cobra.PositionalArgs) cobra.PositionalArgs {
	return func(cmd *cobra.Command, args []string) error {
		if err := check(cmd, args); err != nil {
			return &ExitError{Code: 2, Err: withCommand(cmd, err)}
		}
		return nil
	}
}

func envOr(name, def string) string {
	if v := strings.TrimSpace(os.Getenv(name)); v != "" {
		return v
	}
	return def
}
