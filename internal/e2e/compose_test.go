package e2e

import (
	"os"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	"gopkg.in/yaml.v3"
)

// TestComposePublishesOnLoopbackOnly: /healthz, /metrics and Redis have no
// authentication, so docker-compose.yml publishes ports on the host's
// loopback unless SLUICE_PUBLISH_ADDR opts in (issue 7: the metrics ports
// were published on every interface). No engine runs here; the file is
// checked as compose reads it, and so are the ports its comments suggest.
func TestComposePublishesOnLoopbackOnly(t *testing.T) {
	data, err := os.ReadFile("../../docker-compose.yml")
	require.NoError(t, err)
	var file struct {
		Services map[string]struct {
			Ports []any `yaml:"ports"`
		} `yaml:"services"`
	}
	require.NoError(t, yaml.Unmarshal(data, &file))
	loopback := regexp.MustCompile(`^(127\.0\.0\.1|\$\{SLUICE_PUBLISH_ADDR:-127\.0\.0\.1\}):[0-9]+:[0-9]+$`)
	published := 0
	for name, svc := range file.Services {
		for _, p := range svc.Ports {
			s, ok := p.(string)
			require.True(t, ok, "%s: ports entry %v: use the short form host_ip:host:container", name, p)
			require.Regexp(t, loopback, s, "%s publishes %q beyond loopback", name, s)
			published++
		}
	}
	require.Equal(t, 2, published, "worker1 and worker2 publish /healthz and /metrics")
	for i, line := range strings.Split(string(data), "\n") {
		if m := regexp.MustCompile(`"(\d+:\d+)"`).FindStringSubmatch(line); m != nil {
			t.Errorf("docker-compose.yml:%d suggests %q, published on every interface", i+1, m[1])
		}
	}
}
