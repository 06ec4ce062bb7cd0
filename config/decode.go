package config

import (
	"bytes"
	"cmp"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"maps"
	"math"
	"net"
	"net/netip"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/robfig/cron/v3"
	"gopkg.in/yaml.v3"

	"github.com/sluice-dev/sluice/rules"
	"github.com/sluice-dev/sluice/tasks"
	"github.com/sluice-dev/sluice/throttle"
	"github.com/sluice-dev/sluice/worker"
)

// Bounds on the file's values. Every string the file gives is held in
// memory, rendered into keys and log lines, so none is unbounded.
const (
	// maxDelayedTaskCheckInterval bounds worker.delayed_task_check_interval.
	maxDelayedTaskCheckInterval = worker.MaxDelayedTaskCheckInterval
	// maxScalarBytes bounds every single value (a URL, a template, a name).
	maxScalarBytes = 2048
	// maxKeyPrefixBytes bounds redis.key_prefix: it starts every limiter key.
	maxKeyPrefixBytes = 64
	// maxRules bounds a channel's limits list: each rule is a Redis call's
	// worth of work on every send.
	maxRules = 32
	// maxKeyShown bounds a mapping key as errors show it.
	maxKeyShown = 64
)

// parseYAML returns the root node of data's single document, or nil if data
// holds no document.
func parseYAML(name string, data []byte) (root *yaml.Node, err error) {
	defer func() {
		// yaml.v3 re-panics on errors it does not expect; a config file must
		// never crash the worker.
		if r := recover(); r != nil {
			root, err = nil, &Error{File: name, Err: fmt.Errorf("yaml: cannot parse: %v", r)}
		}
	}()
	dec := yaml.NewDecoder(bytes.NewReader(data))
	var doc yaml.Node
	if err := dec.Decode(&doc); err != nil {
		if errors.Is(err, io.EOF) {
			return nil, nil
		}
		return nil, syntaxError(name, err)
	}
	var next yaml.Node
	switch err := dec.Decode(&next); {
	case errors.Is(err, io.EOF):
	case err != nil:
		return nil, syntaxError(name, err)
	default:
		return nil, &Error{File: name, Line: next.Line, Column: next.Column, Err: errors.New("a second YAML document; want one document")}
	}
	if doc.Kind != yaml.DocumentNode || len(doc.Content) == 0 {
		return nil, nil
	}
	root = doc.Content[0]
	if isNull(root) {
		return nil, nil
	}
	return root, nil
}

var yamlLine = regexp.MustCompile(`^yaml: line (\d+): `)

// syntaxError turns "yaml: line 3: msg" into an *Error at line 3.
func syntaxError(name string, err error) error {
	msg := err.Error()
	if m := yamlLine.FindStringSubmatch(msg); m != nil {
		if line, err := strconv.Atoi(m[1]); err == nil {
			return &Error{File: name, Line: line, Err: errors.New("yaml: " + msg[len(m[0]):])}
		}
	}
	return &Error{File: name, Err: errors.New(msg)}
}

// decoder walks the YAML tree onto a Config, collecting every problem.
type decoder struct {
	file string
	errs []*Error
}

func (d *decoder) errorf(n *yaml.Node, path, format string, args ...any) {
	d.errs = append(d.errs, &Error{File: d.file, Line: n.Line, Column: n.Column, Path: path, Err: fmt.Errorf(format, args...)})
}

// err joins the collected errors sorted by position, or returns nil.
func (d *decoder) err() error {
	if len(d.errs) == 0 {
		return nil
	}
	slices.SortStableFunc(d.errs, func(a, b *Error) int {
		return cmp.Or(cmp.Compare(a.Line, b.Line), cmp.Compare(a.Column, b.Column))
	})
	errs := make([]error, len(d.errs))
	for i, e := range d.errs {
		errs[i] = e
	}
	return errors.Join(errs...)
}

// resolve follows aliases (*anchor) to the node they name.
func resolve(n *yaml.Node) *yaml.Node {
	for i := 0; n.Kind == yaml.AliasNode && n.Alias != nil && i < 100; i++ {
		n = n.Alias
	}
	return n
}

func isNull(n *yaml.Node) bool {
	n = resolve(n)
	return n.Kind == yaml.ScalarNode && n.ShortTag() == "!!null"
}

func describe(n *yaml.Node) string {
	switch n.Kind {
	case yaml.MappingNode:
		return "a mapping"
	case yaml.SequenceNode:
		return "a list"
	case yaml.ScalarNode:
		if n.ShortTag() == "!!null" {
			return "nothing"
		}
		return fmt.Sprintf("%q", n.Value)
	}
	return "an unexpected node"
}

var plainKeyRE = regexp.MustCompile(`^[A-Za-z0-9_<-]+$`)

// join appends key to a field path; an unusual key is quoted, so an error
// stays on one line.
func join(path, key string) string {
	if len(key) > maxKeyShown {
		key = fmt.Sprintf("%.*q…", maxKeyShown, key)
	} else if !plainKeyRE.MatchString(key) {
		key = strconv.Quote(key)
	}
	if path == "" {
		return key
	}
	return path + "." + key
}

// orList renders "a, b or c".
func orList(items []string) string {
	if len(items) < 2 {
		return strings.Join(items, "")
	}
	return strings.Join(items[:len(items)-1], ", ") + " or " + items[len(items)-1]
}

// mapping calls set for each key of mapping node n that is in known, in
// document order, and reports keys that are unknown or repeated. what names a
// key in errors ("field", "channel"). A null n (an empty section) is fine.
func (d *decoder) mapping(n *yaml.Node, path, what string, known []string, set func(key string, k, v *yaml.Node)) {
	n = resolve(n)
	if isNull(n) {
		return
	}
	if n.Kind != yaml.MappingNode {
		d.errorf(n, path, "want a mapping of %s, got %s", orList(known), describe(n))
		return
	}
	seen := map[string]int{}
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := resolve(n.Content[i]), n.Content[i+1]
		if k.Kind != yaml.ScalarNode {
			d.errorf(k, path, "want a %s name as key, got %s", what, describe(k))
			continue
		}
		p := join(path, k.Value)
		switch line, dup := seen[k.Value]; {
		case k.ShortTag() == "!!merge":
			d.errorf(k, p, "merge keys (<<) are not supported; write the fields out")
		case dup:
			d.errorf(k, p, "%s given twice (first at line %d)", what, line)
		case !slices.Contains(known, k.Value):
			d.errorf(k, p, "unknown %s (want %s)", what, orList(known))
		default:
			seen[k.Value] = k.Line
			set(k.Value, k, v)
		}
	}
}

// scalar returns the text of a single non-null value.
func (d *decoder) scalar(n *yaml.Node, path string) (string, bool) {
	n = resolve(n)
	if n.Kind != yaml.ScalarNode {
		d.errorf(n, path, "want a single value, got %s", describe(n))
		return "", false
	}
	if n.ShortTag() == "!!null" {
		d.errorf(n, path, "no value (omit the field to keep its default)")
		return "", false
	}
	if len(n.Value) > maxScalarBytes {
		d.errorf(n, path, "value is %d bytes, want at most %d", len(n.Value), maxScalarBytes)
		return "", false
	}
	return n.Value, true
}

// integer reads a whole number >= lo.
func (d *decoder) integer(n *yaml.Node, path string, lo int64) (int64, bool) {
	s, ok := d.scalar(n, path)
	if !ok {
		return 0, false
	}
	n = resolve(n)
	var v int64
	if n.ShortTag() != "!!int" || n.Decode(&v) != nil {
		d.errorf(n, path, "want a whole number, got %q", s)
		return 0, false
	}
	if v < lo {
		d.errorf(n, path, "want >= %d, got %d", lo, v)
		return 0, false
	}
	return v, true
}

// setInt reads a whole number >= lo that fits an int32 into dst.
func (d *decoder) setInt(n *yaml.Node, path string, lo int64, dst *int) {
	v, ok := d.integer(n, path, lo)
	if !ok {
		return
	}
	if v > math.MaxInt32 {
		d.errorf(resolve(n), path, "want at most %d, got %d", math.MaxInt32, v)
		return
	}
	*dst = int(v)
}

func (d *decoder) boolean(n *yaml.Node, path string, dst *bool) {
	s, ok := d.scalar(n, path)
	if !ok {
		return
	}
	n = resolve(n)
	var v bool
	if n.ShortTag() != "!!bool" || n.Decode(&v) != nil {
		d.errorf(n, path, "want true or false, got %q", s)
		return
	}
	*dst = v
}

// duration reads a Go duration ("100ms", "15s", "1m30s") greater than zero.
func (d *decoder) duration(n *yaml.Node, path string) (time.Duration, bool) {
	s, ok := d.scalar(n, path)
	if !ok {
		return 0, false
	}
	v, err := time.ParseDuration(s)
	if err != nil {
		d.errorf(resolve(n), path, "want a duration such as 100ms, 15s or 1m, got %q", s)
		return 0, false
	}
	if v <= 0 {
		d.errorf(resolve(n), path, "want a duration > 0, got %s", s)
		return 0, false
	}
	return v, true
}

func (d *decoder) setDuration(n *yaml.Node, path string, dst *time.Duration) {
	if v, ok := d.duration(n, path); ok {
		*dst = v
	}
}

// envNameRE is the form of the environment variable names the file may give.
// Upper case only: access tokens, auth tokens, whsec_ secrets and URLs all
// have lower-case letters, so one pasted by mistake is refused, not used as a
// name that would later appear in an error.
var envNameRE = regexp.MustCompile(`^[A-Z_][A-Z0-9_]*$`)

// envName reads the name of an environment variable. The value is never
// quoted in errors: a secret pasted here by mistake must not reach a log.
func (d *decoder) envName(n *yaml.Node, path string, allowEmpty bool, dst *string) {
	s, ok := d.scalar(n, path)
	if !ok {
		return
	}
	switch {
	case s == "" && allowEmpty:
	case s == "":
		d.errorf(resolve(n), path, "want the name of an environment variable, got an empty string")
		return
	case !envNameRE.MatchString(s):
		d.errorf(resolve(n), path, "want the name of an environment variable (A-Z, 0-9 and _), not its value; the value is not shown")
		return
	}
	*dst = s
}

// hostPort checks "host:port" with a numeric port (host may be empty).
func hostPort(s string) error {
	_, port, err := net.SplitHostPort(s)
	if err != nil {
		return fmt.Errorf("want host:port, got %q", s)
	}
	if p, err := strconv.ParseUint(port, 10, 16); err != nil || (p == 0 && port != "0") {
		return fmt.Errorf("want host:port with a port number, got %q", s)
	}
	return nil
}

func (d *decoder) config(n *yaml.Node, c *Config) {
	sections := []string{"redis", "worker", "http", "cleanup", "events", "egress", "channels"}
	d.mapping(n, "", "section", sections, func(key string, _, v *yaml.Node) {
		switch key {
		case "redis":
			d.redis(v, key, &c.Redis)
		case "worker":
			d.worker(v, key, &c.Worker)
		case "http":
			d.http(v, key, &c.HTTP)
		case "cleanup":
			d.cleanup(v, key, &c.Cleanup)
		case "events":
			d.events(v, key, &c.Events)
		case "egress":
			d.egress(v, key, &c.Egress)
		case "channels":
			nodes := map[string]*yaml.Node{}
			d.mapping(v, key, "channel", channelNames, func(name string, _, v *yaml.Node) {
				nodes[name] = resolve(v)
				d.channel(v, join(key, name), c.Channels[name])
			})
			d.queuesApart(key, c, nodes)
		}
	})
}

// queuesApart reports a channel given in the file (nodes, by name) one of
// whose queue groups is also another channel's queue or group: a group
// holds one channel's senders. (Channels may share a plain queue.)
func (d *decoder) queuesApart(path string, c *Config, nodes map[string]*yaml.Node) {
	owner := map[string]string{}
	for _, name := range channelNames {
		cc := c.Channels[name]
		if cc == nil || !cc.Enabled {
			continue
		}
		for i, q := range cc.Queues() {
			other, taken := owner[q]
			if !taken || other == name {
				owner[q] = name
				continue
			}
			if i == 0 && !slices.Contains(c.Channels[other].Queues()[1:], q) {
				continue // two plain queues
			}
			n := nodes[name]
			if n == nil {
				n = nodes[other]
			}
			if n != nil {
				d.errorf(n, join(path, name), "queue %q is also the %s channel's: each channel needs queues of its own (queue, queue_groups)", q, other)
			}
			break
		}
	}
}

// maxRedisAddrs bounds redis.addrs.
const maxRedisAddrs = 64

func (d *decoder) redis(n *yaml.Node, path string, r *RedisConfig) {
	given := map[string]*yaml.Node{} // the fields the file gives, by name
	d.mapping(n, path, "field", []string{"mode", "addrs", "master_name", "username_env", "password_env", "sentinel_username_env", "sentinel_password_env", "tls", "tls_ca_file", "tls_server_name", "url_env", "addr", "db", "key_prefix"}, func(key string, _, v *yaml.Node) {
		p := join(path, key)
		given[key] = resolve(v)
		switch key {
		case "mode":
			if s, ok := d.scalar(v, p); ok {
				if s != RedisSingle && s != RedisCluster && s != RedisSentinel {
					d.errorf(resolve(v), p, "want single, cluster or sentinel, got %q", s)
					return
				}
				r.Mode = s
			}
		case "addrs":
			r.Addrs, _ = d.stringList(v, p, "a list of host:port such as [10.0.0.1:6379, 10.0.0.2:6379]", maxRedisAddrs, func(s string, kept []string) error {
				if err := hostPort(s); err != nil {
					return err
				}
				if slices.Contains(kept, s) {
					return fmt.Errorf("%s given twice", s)
				}
				return nil
			})
		case "master_name":
			if s, ok := d.scalar(v, p); ok {
				if s == "" || strings.ContainsAny(s, " \t\r\n") {
					d.errorf(resolve(v), p, "want the name the Sentinels monitor the master under, got %q", s)
					return
				}
				r.MasterName = s
			}
		case "username_env":
			d.envName(v, p, true, &r.UsernameEnv)
		case "password_env":
			d.envName(v, p, true, &r.PasswordEnv)
		case "sentinel_username_env":
			d.envName(v, p, true, &r.SentinelUsernameEnv)
		case "sentinel_password_env":
			d.envName(v, p, true, &r.SentinelPasswordEnv)
		case "tls":
			d.boolean(v, p, &r.TLS)
		case "tls_ca_file":
			if s, ok := d.scalar(v, p); ok {
				if err := checkCAFile(d.file, s); err != nil {
					d.errorf(resolve(v), p, "%v", err)
					return
				}
				r.TLSCAFile = resolvePath(d.file, s)
			}
		case "tls_server_name":
			if s, ok := d.scalar(v, p); ok {
				if s == "" || strings.ContainsAny(s, " \t\r\n/:") {
					d.errorf(resolve(v), p, "want the host name the servers' certificates carry, got %q", s)
					return
				}
				r.TLSServerName = s
			}
		case "url_env":
			d.envName(v, p, true, &r.URLEnv)
		case "addr":
			if s, ok := d.scalar(v, p); ok {
				if err := hostPort(s); err != nil {
					d.errorf(resolve(v), p, "%v", err)
					return
				}
				r.Addr = s
			}
		case "db":
			d.setInt(v, p, 0, &r.DB)
		case "key_prefix":
			if s, ok := d.scalar(v, p); ok {
				if len(s) > maxKeyPrefixBytes {
					d.errorf(resolve(v), p, "%d bytes, want at most %d", len(s), maxKeyPrefixBytes)
					return
				}
				if s == "" || strings.ContainsAny(s, "{} \t\r\n") {
					d.errorf(resolve(v), p, "want a non-empty prefix without spaces or braces, got %q", s)
					return
				}
				r.KeyPrefix = s
			}
		}
	})
	at := func(key string) *yaml.Node { // the field's node, else the section's
		if n := given[key]; n != nil {
			return n
		}
		return resolve(n)
	}
	for _, key := range []string{"tls_ca_file", "tls_server_name"} {
		if given[key] != nil && !r.TLS && r.Mode != RedisSingle {
			d.errorf(given[key], join(path, key), "only with tls: true")
		}
	}
	switch r.Mode {
	case RedisSingle:
		for _, key := range []string{"addrs", "master_name", "username_env", "password_env", "sentinel_username_env", "sentinel_password_env"} {
			if given[key] != nil {
				d.errorf(given[key], join(path, key), "only with mode cluster or sentinel (a single server's address is addr, its credentials are in its URL)")
			}
		}
		for _, key := range []string{"tls", "tls_ca_file", "tls_server_name"} {
			if given[key] != nil {
				d.errorf(given[key], join(path, key), "only with mode cluster or sentinel (a single server takes TLS with a rediss:// URL)")
			}
		}
	case RedisCluster, RedisSentinel:
		if given["addrs"] == nil {
			what := "some of the cluster's nodes"
			if r.Mode == RedisSentinel {
				what = "the Sentinels"
			}
			d.errorf(at("mode"), join(path, "addrs"), "required with mode %s: host:port of %s", r.Mode, what)
		}
		for _, key := range []string{"addr", "url_env"} {
			if given[key] != nil {
				d.errorf(given[key], join(path, key), "only with mode single: with mode %s the servers are addrs (and --redis URL, for one server, overrides the mode)", r.Mode)
			}
		}
		if r.Mode == RedisCluster && r.DB != 0 {
			d.errorf(at("db"), join(path, "db"), "%d: a cluster has database 0 only", r.DB)
		}
		for _, key := range []string{"master_name", "sentinel_username_env", "sentinel_password_env"} {
			if r.Mode == RedisCluster && given[key] != nil {
				d.errorf(given[key], join(path, key), "only with mode sentinel")
			}
		}
		if r.Mode == RedisSentinel && r.MasterName == "" && given["master_name"] == nil {
			d.errorf(at("mode"), join(path, "master_name"), "required with mode sentinel: the name the Sentinels monitor the master under")
		}
	}
}

// checkCAFile checks that name (relative to the directory of the
// configuration file, when it is not absolute) holds at least one PEM
// certificate: a CA file that is missing or empty would fail every
// connection, found only when a command first dials.
func checkCAFile(file, name string) error {
	if name == "" {
		return errors.New("want the path of a PEM file of CA certificates")
	}
	_, err := CertPool(resolvePath(file, name))
	return err
}

// CertPool reads the PEM file at path (RedisConfig.TLSCAFile) into a
// certificate pool. Errors: "read <path>: <why>", or "<path> holds no PEM
// certificate".
func CertPool(path string) (*x509.CertPool, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", path, errors.Unwrap(err))
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(b) {
		return nil, fmt.Errorf("%s holds no PEM certificate", path)
	}
	return pool, nil
}

// resolvePath is name, relative to the directory of the configuration
// file file when name is not absolute (and file is a path).
func resolvePath(file, name string) string {
	if filepath.IsAbs(name) || file == "" {
		return name
	}
	return filepath.Join(filepath.Dir(file), name)
}

// stringList reads a list of 1 to max strings, want describing it for an
// error on its kind or length. Each item must pass check (given the items
// kept before it), whose error is reported at the item. It returns the
// items kept and their nodes.
func (d *decoder) stringList(n *yaml.Node, path, want string, max int, check func(s string, kept []string) error) ([]string, []*yaml.Node) {
	n = resolve(n)
	switch {
	case n.Kind != yaml.SequenceNode:
		d.errorf(n, path, "want %s, got %s", want, describe(n))
		return nil, nil
	case len(n.Content) == 0 || len(n.Content) > max:
		d.errorf(n, path, "%d entries, want 1 to %d", len(n.Content), max)
		return nil, nil
	}
	var out []string
	var kept []*yaml.Node
	for i, item := range n.Content {
		ip := fmt.Sprintf("%s[%d]", path, i)
		s, ok := d.scalar(item, ip)
		if !ok {
			continue
		}
		if err := check(s, out); err != nil {
			d.errorf(resolve(item), ip, "%v", err)
			continue
		}
		out = append(out, s)
		kept = append(kept, resolve(item))
	}
	return out, kept
}

func (d *decoder) worker(n *yaml.Node, path string, w *WorkerConfig) {
	fields := []string{"concurrency", "delayed_task_check_interval", "task_check_interval", "shutdown_timeout", "max_retry"}
	d.mapping(n, path, "field", fields, func(key string, _, v *yaml.Node) {
		p := join(path, key)
		switch key {
		case "concurrency":
			d.setInt(v, p, 1, &w.Concurrency)
		case "delayed_task_check_interval":
			iv, ok := d.duration(v, p)
			if !ok {
				return
			}
			if iv > maxDelayedTaskCheckInterval {
				d.errorf(resolve(v), p, "%s is longer than %s: asynq moves due retry and scheduled tasks to pending only this often, "+
					"so every throttled task would wait up to %s past its RetryAfter", iv, maxDelayedTaskCheckInterval, iv)
				return
			}
			w.DelayedTaskCheckInterval = iv
		case "task_check_interval":
			d.setDuration(v, p, &w.TaskCheckInterval)
		case "shutdown_timeout":
			d.setDuration(v, p, &w.ShutdownTimeout)
		case "max_retry":
			d.setInt(v, p, 0, &w.MaxRetry)
		}
	})
}

func (d *decoder) http(n *yaml.Node, path string, h *HTTPConfig) {
	fields := []string{"listen", "public_url", "api_rate", "api_burst", "max_body_bytes", "queues_read_only"}
	d.mapping(n, path, "field", fields, func(key string, _, v *yaml.Node) {
		p := join(path, key)
		switch key {
		case "listen":
			if s, ok := d.scalar(v, p); ok {
				if s != "" {
					if err := hostPort(s); err != nil {
						d.errorf(resolve(v), p, "%v (or \"\" to disable)", err)
						return
					}
				}
				h.Listen = s
			}
		case "public_url":
			if s, ok := d.scalar(v, p); ok {
				if s != "" {
					u, err := url.Parse(s)
					if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || u.User != nil ||
						(u.Path != "" && u.Path != "/") || u.RawQuery != "" || u.Fragment != "" {
						d.errorf(resolve(v), p, "want an absolute http(s) URL with no path, query or user, such as https://sluice.example.com, got %.80q", s)
						return
					}
					s = strings.TrimSuffix(s, "/")
				}
				h.PublicURL = s
			}
		case "api_rate":
			if s, ok := d.scalar(v, p); ok {
				var r throttle.Rate
				if err := r.UnmarshalText([]byte(s)); err != nil {
					d.errorf(resolve(v), p, "%v", err)
					return
				}
				h.APIRate = r
			}
		case "api_burst":
			d.setInt(v, p, 1, &h.APIBurst)
		case "max_body_bytes":
			if m, ok := d.integer(v, p, 1024); ok {
				if m > MaxMaxBodyBytes {
					d.errorf(resolve(v), p, "want at most %d, got %d", MaxMaxBodyBytes, m)
					return
				}
				h.MaxBodyBytes = int(m)
			}
		case "queues_read_only":
			d.boolean(v, p, &h.QueuesReadOnly)
		}
	})
}

func (d *decoder) cleanup(n *yaml.Node, path string, c *CleanupConfig) {
	d.mapping(n, path, "field", []string{"schedule", "batch"}, func(key string, _, v *yaml.Node) {
		p := join(path, key)
		switch key {
		case "schedule":
			if s, ok := d.scalar(v, p); ok {
				if _, err := cron.ParseStandard(s); err != nil {
					d.errorf(resolve(v), p, "cron spec %q: %v", s, err)
					return
				}
				c.Schedule = s
			}
		case "batch":
			d.setInt(v, p, 1, &c.Batch)
		}
	})
}

func (d *decoder) events(n *yaml.Node, path string, e *EventsConfig) {
	d.mapping(n, path, "field", []string{"enabled", "max_len", "warn_at"}, func(key string, _, v *yaml.Node) {
		p := join(path, key)
		switch key {
		case "enabled":
			d.boolean(v, p, &e.Enabled)
		case "max_len":
			if m, ok := d.integer(v, p, 1); ok {
				e.MaxLen = m
			}
		case "warn_at":
			s, ok := d.scalar(v, p)
			if !ok {
				return
			}
			v = resolve(v)
			var f float64
			if (v.ShortTag() != "!!float" && v.ShortTag() != "!!int") || v.Decode(&f) != nil {
				d.errorf(v, p, "want a share of the capacity between 0 and 1 such as 0.1, got %q", s)
				return
			}
			if math.IsNaN(f) || f < 0 || f >= 1 {
				d.errorf(v, p, "want a share of the capacity >= 0 and < 1 (0 turns warnings off), got %s", s)
				return
			}
			e.WarnAt = f
		}
	})
}

// maxAllowCIDRs bounds egress.allow_cidrs: each is checked on every dial.
const maxAllowCIDRs = 256

func (d *decoder) egress(n *yaml.Node, path string, e *EgressConfig) {
	d.mapping(n, path, "field", []string{"allow_cidrs"}, func(key string, _, v *yaml.Node) {
		p := join(path, key)
		v = resolve(v)
		if v.Kind != yaml.SequenceNode {
			d.errorf(v, p, "want a list of CIDRs such as [127.0.0.0/8, \"::1/128\"] ([] for none), got %s", describe(v))
			return
		}
		if len(v.Content) > maxAllowCIDRs {
			d.errorf(v, p, "%d entries, want at most %d", len(v.Content), maxAllowCIDRs)
			return
		}
		var out []netip.Prefix
		ok := true
		for i, item := range v.Content {
			ip := fmt.Sprintf("%s[%d]", p, i)
			s, good := d.scalar(item, ip)
			if !good {
				ok = false
				continue
			}
			pfx, err := netip.ParsePrefix(s)
			if err != nil {
				d.errorf(resolve(item), ip, "want a CIDR such as 127.0.0.0/8 or fd00::/8 (a single address is 10.0.0.5/32), got %q", s)
				ok = false
				continue
			}
			out = append(out, pfx.Masked())
		}
		if ok {
			e.AllowCIDRs = out
		}
	})
}

// channelFields lists the fields each channel accepts besides the common
// ones and the settings table's (settings.go).
var channelFields = map[string][]string{
	"whatsapp": {"base_url", "api_version", "token_env", "app_secret_env", "verify_token_env", "templates"},
	"sms":      {"base_url", "account_sid_env", "auth_token_env"},
	"webhook":  {"signing_secret_env", "previous_signing_secret_env", "endpoints"},
	"http":     {},
}

var (
	apiVersionRE = regexp.MustCompile(`^v[0-9]+\.[0-9]+$`)
	queueRE      = regexp.MustCompile(`^[A-Za-z0-9_.:-]+$`)
)

func (d *decoder) channel(n *yaml.Node, path string, c *ChannelConfig) {
	fields := append([]string{"enabled", "queue", "priority"}, channelFields[c.Name]...)
	fields = append(fields, settingNames(c.Name)...)
	fields = append(fields, "adaptive", "limits", "retry")
	var eps map[string]endpointNodes
	var spreadNode, groupsNode *yaml.Node
	d.mapping(n, path, "field", fields, func(key string, _, v *yaml.Node) {
		p := join(path, key)
		if r := settingNamed(key); r != nil {
			r.decode(d, v, p, c.Name, &c.ChannelSettings)
			switch key {
			case "spread_by":
				spreadNode = resolve(v)
			case "queue_groups":
				groupsNode = resolve(v)
			}
			return
		}
		switch key {
		case "enabled":
			d.boolean(v, p, &c.Enabled)
		case "queue":
			if s, ok := d.scalar(v, p); ok {
				if !queueRE.MatchString(s) {
					d.errorf(resolve(v), p, "want a queue name (letters, digits, _ . : -), got %q", s)
					return
				}
				c.Queue = s
			}
		case "priority":
			d.setInt(v, p, 1, &c.Priority)
		case "base_url":
			if s, ok := d.scalar(v, p); ok {
				u, err := url.Parse(s)
				if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || u.RawQuery != "" || u.Fragment != "" {
					d.errorf(resolve(v), p, "want an absolute http(s) URL without query, got %q", s)
					return
				}
				c.BaseURL = s
			}
		case "api_version":
			if s, ok := d.scalar(v, p); ok {
				if !apiVersionRE.MatchString(s) {
					d.errorf(resolve(v), p, "want a Graph API version such as v23.0, got %q", s)
					return
				}
				c.APIVersion = s
			}
		case "token_env":
			d.envName(v, p, false, &c.TokenEnv)
		case "account_sid_env":
			d.envName(v, p, false, &c.AccountSIDEnv)
		case "auth_token_env":
			d.envName(v, p, false, &c.AuthTokenEnv)
		case "signing_secret_env":
			d.envName(v, p, false, &c.SigningSecretEnv)
		case "previous_signing_secret_env":
			d.envName(v, p, true, &c.PreviousSigningSecretEnv)
		case "endpoints":
			eps = d.endpoints(v, p, c)
		case "templates":
			d.templates(v, p, c)
		case "app_secret_env":
			d.envName(v, p, false, &c.AppSecretEnv)
		case "verify_token_env":
			d.envName(v, p, false, &c.VerifyTokenEnv)
		case "adaptive":
			d.adaptive(v, p, c)
		case "limits":
			if rules, ok := d.limits(v, p, c.Name); ok {
				c.Limits = rules
			}
		case "retry":
			d.retry(v, p, c)
		}
	})
	if len(c.Endpoints) > 0 {
		d.endpointsApart(join(path, "endpoints"), c, eps)
	}
	if groupsNode != nil && c.QueueGroups > 1 && c.SpreadBy == "" {
		d.errorf(groupsNode, join(path, "queue_groups"), "%d queue groups need spread_by: a send's group is chosen by its spread_by value", c.QueueGroups)
	}
	if spreadNode != nil && c.SpreadBy != "" {
		// A send's GCRA limits are decided in one script, in one scope:
		// each must be spread with the others (rules.Compile).
		for i, r := range c.Limits {
			if r.Limit.Algorithm == throttle.GCRA && !strings.Contains(r.Key, "{"+c.SpreadBy+"}") {
				d.errorf(spreadNode, join(path, "spread_by"), "limits[%d] (%s) is gcra and its key %q does not name {%s}: a send's gcra limits are paced together in one scope, so each must name the field", i, r.Limit.Name, r.Key, c.SpreadBy)
			}
		}
	}
}

var templateNameRE = regexp.MustCompile(`^[a-z0-9_]{1,512}$`)

// templates reads channels.whatsapp.templates: a mapping of template names
// to {header, body_params, buttons}.
func (d *decoder) templates(n *yaml.Node, path string, c *ChannelConfig) {
	out := map[string]tasks.TemplateShape{}
	d.named(n, path, "template", "template names to {header, body_params, buttons}", "a template name (lower-case letters, digits and _)",
		templateNameRE.MatchString, func(name, p string, v *yaml.Node) {
			var shape tasks.TemplateShape
			before := len(d.errs)
			d.mapping(v, p, "field", []string{"header", "body_params", "buttons"}, func(key string, _, fv *yaml.Node) {
				fp := join(p, key)
				switch key {
				case "header":
					if s, ok := d.scalar(fv, fp); ok && s != "none" {
						shape.Header = s
					}
				case "body_params":
					d.setInt(fv, fp, 0, &shape.BodyParams)
				case "buttons":
					fv = resolve(fv)
					if fv.Kind != yaml.SequenceNode {
						d.errorf(fv, fp, "want a list of button kinds by index (quick_reply, url, copy_code, none), got %s", describe(fv))
						return
					}
					for _, b := range fv.Content {
						if s, ok := d.scalar(b, fp); ok {
							shape.Buttons = append(shape.Buttons, s)
						}
					}
				}
			})
			if len(d.errs) > before {
				return
			}
			if err := shape.Validate(); err != nil {
				field, msg, _ := strings.Cut(err.Error(), ": ")
				d.errorf(resolve(v), p+"."+field, "%s", msg) // (field may be "buttons[1]": not a key join quotes)
				return
			}
			out[name] = shape
		})
	if len(out) > 0 {
		c.Templates = out
	}
}

// named reads a mapping of names (what: "template") to values: a name
// that valid refuses is an error showing keyWant, a name given twice an
// error naming its first line, and each other one's value goes to each
// with its path. want describes the mapping for an error on its kind.
func (d *decoder) named(n *yaml.Node, path, what, want, keyWant string, valid func(string) bool, each func(name, p string, v *yaml.Node)) {
	n = resolve(n)
	if isNull(n) {
		return
	}
	if n.Kind != yaml.MappingNode {
		d.errorf(n, path, "want a mapping of %s, got %s", want, describe(n))
		return
	}
	lines := map[string]int{}
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := resolve(n.Content[i]), n.Content[i+1]
		if k.Kind != yaml.ScalarNode || !valid(k.Value) {
			d.errorf(k, path, "want %s as key, got %s", keyWant, describe(k))
			continue
		}
		p := join(path, k.Value)
		if line, dup := lines[k.Value]; dup {
			d.errorf(k, p, "%s given twice (first at line %d)", what, line)
			continue
		}
		lines[k.Value] = k.Line
		each(k.Value, p, v)
	}
}

// maxEndpointURLs bounds one endpoint's urls: each is matched against the
// delivery's URL at enqueue and again at delivery.
const maxEndpointURLs = 32

// endpointNodes are one endpoint's nodes in the file, for errors found
// once the channel is read (endpointsApart).
type endpointNodes struct {
	value *yaml.Node    // the endpoint's mapping
	envs  [2]*yaml.Node // secret_env, previous_secret_env
	urls  []*yaml.Node  // each of urls' items kept
}

// endpoints reads channels.webhook.endpoints: a mapping of endpoint names
// to {secret_env (required), previous_secret_env, urls (required)}.
func (d *decoder) endpoints(n *yaml.Node, path string, c *ChannelConfig) map[string]endpointNodes {
	eps := map[string]WebhookEndpoint{}
	nodes := map[string]endpointNodes{}
	d.named(n, path, "endpoint", "endpoint names to {secret_env, previous_secret_env, urls}", "an endpoint name (1 to 64 letters, digits, _ . : / -)",
		tasks.ValidEndpointName, func(name, p string, v *yaml.Node) {
			var ep WebhookEndpoint
			en := endpointNodes{value: resolve(v)}
			given, before := map[string]bool{}, len(d.errs)
			d.mapping(v, p, "field", []string{"secret_env", "previous_secret_env", "urls"}, func(key string, _, fv *yaml.Node) {
				given[key] = true
				switch key {
				case "secret_env":
					en.envs[0] = resolve(fv)
					d.envName(fv, join(p, key), false, &ep.SecretEnv)
				case "previous_secret_env":
					en.envs[1] = resolve(fv)
					d.envName(fv, join(p, key), true, &ep.PreviousSecretEnv)
				case "urls":
					// (an error does not show the URL: its path may hold a token)
					ep.URLs, en.urls = d.stringList(fv, join(p, key), "a list of URL prefixes such as [https://hooks.example.com/billing/]",
						maxEndpointURLs, func(s string, _ []string) error { return tasks.CheckEndpointURLPrefix(s) })
				}
			})
			switch {
			case len(d.errs) > before:
			case !given["secret_env"]:
				d.errorf(resolve(v), join(p, "secret_env"), "required: the environment variable holding the endpoint's whsec_ secret")
			case !given["urls"]:
				d.errorf(resolve(v), join(p, "urls"), "required: the URL prefixes the endpoint's secret may sign for, such as [https://hooks.example.com/billing/]; without them anyone who may enqueue could have the secret sign for a URL of theirs")
			case ep.PreviousSecretEnv == ep.SecretEnv:
				d.errorf(resolve(v), join(p, "previous_secret_env"), "names the same variable as secret_env")
			default:
				eps[name] = ep
				nodes[name] = en
			}
		})
	if len(eps) > 0 {
		c.Endpoints = eps
	}
	return nodes
}

// endpointsApart holds the listed endpoints apart, as the binding of each
// secret to its own urls needs: no endpoint's variable is the default
// secret's (signing_secret_env, previous_signing_secret_env) or another
// endpoint's, and no endpoint's URL prefix is under another endpoint's
// (a URL under both would belong to two endpoints). Each error is at
// the later of the two in the file.
func (d *decoder) endpointsApart(path string, c *ChannelConfig, nodes map[string]endpointNodes) {
	names := slices.SortedFunc(maps.Keys(c.Endpoints), func(a, b string) int {
		return cmp.Compare(nodes[a].value.Line, nodes[b].value.Line)
	})
	held := map[string]string{} // a variable → who names it first
	for _, env := range []string{c.SigningSecretEnv, c.PreviousSigningSecretEnv} {
		if env != "" {
			held[env] = "the default secret (signing_secret_env, previous_signing_secret_env)"
		}
	}
	for _, name := range names {
		ep, en := c.Endpoints[name], nodes[name]
		for i, env := range []string{ep.SecretEnv, ep.PreviousSecretEnv} {
			if env == "" {
				continue
			}
			field := []string{"secret_env", "previous_secret_env"}[i]
			if who, ok := held[env]; ok {
				d.errorf(en.envs[i], join(join(path, name), field), "%s is %s's too: each endpoint's secret signs for its own urls only, so give it a variable (and a secret) of its own", env, who)
				continue
			}
			held[env] = "endpoint " + name
		}
	}
	for i, a := range names {
		for _, b := range names[i+1:] {
			for ib, pb := range c.Endpoints[b].URLs {
				for _, pa := range c.Endpoints[a].URLs {
					if tasks.URLUnder(pb, pa) || tasks.URLUnder(pa, pb) {
						d.errorf(nodes[b].urls[ib], fmt.Sprintf("%s[%d]", join(join(path, b), "urls"), ib),
							"overlaps endpoint %s's urls: a URL under both would belong to two endpoints, each signing it with its own secret; give each its own paths", a)
						break
					}
				}
			}
		}
	}
}

// limits reads a channel's list of limit rules; ok is false if any is bad.
func (d *decoder) limits(n *yaml.Node, path, channel string) ([]rules.Rule, bool) {
	n = resolve(n)
	if n.Kind != yaml.SequenceNode {
		d.errorf(n, path, "want a list of limit rules ([] for none), got %s", describe(n))
		return nil, false
	}
	if len(n.Content) > maxRules {
		d.errorf(n, path, "%d rules, want at most %d", len(n.Content), maxRules)
		return nil, false
	}
	before := len(d.errs)
	out := make([]rules.Rule, 0, len(n.Content))
	names := map[string]int{}
	for i, item := range n.Content {
		p := fmt.Sprintf("%s[%d]", path, i)
		r, nameNode := d.rule(item, p, channel)
		if nameNode != nil {
			if line, dup := names[r.Limit.Name]; dup {
				d.errorf(nameNode, p+".name", "duplicate limit name %q (first at line %d); names are unique per channel", r.Limit.Name, line)
			} else {
				names[r.Limit.Name] = nameNode.Line
			}
		}
		out = append(out, r)
	}
	return out, len(d.errs) == before
}

var allRuleFields = []string{"name", "key", "algorithm", "rate", "burst", "cost", "max", "lease", "interval", "member"}

// ruleFields returns the rule fields algorithm a takes besides name, key,
// algorithm and cost: throttle's Algorithm.Fields, and member for Distinct.
func ruleFields(a throttle.Algorithm) []string {
	if a == throttle.Distinct {
		return append(a.Fields(), rules.FieldMember)
	}
	return a.Fields()
}

// shapeFields are the rule fields that only some algorithms take.
var shapeFields = append(slices.Clone(throttle.ShapeFields), rules.FieldMember)

// algorithmNames is "gcra, fixed_window, … or distinct".
func algorithmNames() string {
	names := make([]string, len(throttle.Algorithms))
	for i, a := range throttle.Algorithms {
		names[i] = string(a)
	}
	return orList(names)
}

var limitNameRE = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9_.-]*$`)

// rule reads one limit rule. nameNode is the node of a valid name, for the
// duplicate check.
func (d *decoder) rule(n *yaml.Node, path, channel string) (r rules.Rule, nameNode *yaml.Node) {
	n = resolve(n)
	r.Line = n.Line
	if n.Kind != yaml.MappingNode {
		d.errorf(n, path, "want a limit rule mapping (%s), got %s", strings.Join(allRuleFields, ", "), describe(n))
		return r, nil
	}
	nodes := map[string]*yaml.Node{}
	d.mapping(n, path, "field", allRuleFields, func(key string, _, v *yaml.Node) { nodes[key] = resolve(v) })
	before := len(d.errs)
	field := func(key string) string { return path + "." + key }
	l := &r.Limit

	if v := nodes["name"]; v == nil {
		d.errorf(n, field("name"), "required")
	} else if s, ok := d.scalar(v, field("name")); ok {
		if limitNameRE.MatchString(s) {
			l.Name, nameNode = s, v
		} else {
			d.errorf(v, field("name"), "want letters, digits, _ . or -, got %q", s)
		}
	}

	if v := nodes["key"]; v == nil {
		d.errorf(n, field("key"), "required")
	} else if s, ok := d.scalar(v, field("key")); ok {
		if _, err := rules.ParseKey(channel, s, fieldNames(channel)); err != nil {
			d.errorf(v, field("key"), "%v", err)
		}
		r.Key = s
	}

	if v := nodes["algorithm"]; v == nil {
		d.errorf(n, field("algorithm"), "required (%s)", algorithmNames())
	} else if s, ok := d.scalar(v, field("algorithm")); ok {
		a, err := throttle.ParseAlgorithm(s)
		if err != nil {
			d.errorf(v, field("algorithm"), "%v", err)
		}
		l.Algorithm = a
	}

	if v := nodes["rate"]; v != nil {
		if s, ok := d.scalar(v, field("rate")); ok {
			rate, err := throttle.ParseRate(s)
			if err != nil {
				d.errorf(v, field("rate"), "%v", err)
			}
			l.Rate = rate
		}
	}
	if v := nodes["burst"]; v != nil {
		l.Burst, _ = d.integer(v, field("burst"), 1)
	}
	r.Cost = 1
	if v := nodes["cost"]; v != nil {
		if names := costFieldNames(channel); v.Kind == yaml.ScalarNode && v.ShortTag() == "!!str" && len(names) > 0 {
			if s, ok := d.scalar(v, field("cost")); ok && slices.Contains(names, s) {
				r.CostField = s
			} else if ok {
				d.errorf(v, field("cost"), "want a whole number or %s, got %q", orList(names), s)
			}
		} else {
			r.Cost, _ = d.integer(v, field("cost"), 1)
		}
	}
	if v := nodes["max"]; v != nil {
		l.Max, _ = d.integer(v, field("max"), 1)
	}
	if v := nodes["lease"]; v != nil {
		l.Lease, _ = d.duration(v, field("lease"))
	}
	if v := nodes["interval"]; v != nil {
		if iv, ok := d.duration(v, field("interval")); ok {
			if iv < time.Millisecond {
				d.errorf(v, field("interval"), "want at least 1ms, got %s", iv)
			}
			l.Interval = iv
		}
	}
	if v := nodes["member"]; v != nil {
		if s, ok := d.scalar(v, field("member")); ok {
			if _, err := rules.ParseMember(channel, s, fieldNames(channel)); err != nil {
				d.errorf(v, field("member"), "%v", err)
			}
			r.Member = s
		}
	}

	if used := ruleFields(l.Algorithm); used != nil {
		for _, f := range shapeFields {
			if v := nodes[f]; v != nil && !slices.Contains(used, f) {
				d.errorf(v, field(f), "not used by algorithm %s (it uses %s)", l.Algorithm, strings.Join(used, " and "))
			}
		}
		required := l.Algorithm.Required()
		if l.Algorithm == throttle.Distinct {
			required[rules.FieldMember] = "a template such as {to}: the subject counted"
		}
		for _, f := range shapeFields {
			if hint, ok := required[f]; ok && nodes[f] == nil {
				d.errorf(n, field(f), "required by algorithm %s (%s)", l.Algorithm, hint)
			}
		}
		if v := nodes["cost"]; l.Algorithm == throttle.Distinct && v != nil && r.Cost > 1 {
			d.errorf(v, field("cost"), "not used by algorithm distinct: a new member counts 1, a member already counted 0 (omit cost)")
		}
	}
	if len(d.errs) > before {
		return r, nameNode
	}

	// Fill the defaults, then let throttle have the last word.
	switch l.Algorithm {
	case throttle.GCRA:
		l.Burst = max(l.Burst, 1)
	case throttle.Concurrency:
		if l.Lease == 0 {
			l.Lease = throttle.DefaultLease
		}
	}
	// The rules package has the last word; its error names the field, so it
	// is reported at that field's node.
	if err := r.Check(channel, fieldNames(channel)); err != nil {
		at, f := n, path
		if fe, ok := err.(*rules.FieldError); ok {
			if v := nodes[fe.Field]; v != nil {
				at, f = v, field(fe.Field)
			}
		}
		d.errorf(at, f, "%v", err)
	}
	return r, nameNode
}
