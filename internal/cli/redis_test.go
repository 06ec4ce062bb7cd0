package cli

import (
	"bytes"
	"net"
	"os"
	"os/exec"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/sluice-dev/sluice/config"
)

// subprocessArgs is the environment variable that makes the test binary
// run `sluice` with its arguments (unit-separator-separated) instead of the tests.
const subprocessArgs = "SLUICE_CLI_TEST_ARGS"

// runProcess runs `sluice args...` in a child process, so that what goes
// to the process's own stderr (go-redis's logger) is seen too.
func runProcess(t *testing.T, env []string, args ...string) result {
	t.Helper()
	cmd := exec.Command(os.Args[0])
	cmd.Env = append(append(os.Environ(), env...), subprocessArgs+"="+strings.Join(args, "\x1f"))
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else {
		require.NoError(t, err)
	}
	r := result{code: code, stdout: stdout.String(), stderr: stderr.String()}
	t.Logf("sluice %s → exit %d\nstdout:\n%s\nstderr:\n%s", strings.Join(args, " "), r.code, r.stdout, r.stderr)
	return r
}

// closedPort returns a loopback port nothing listens on.
func closedPort(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := ln.Addr().String()
	require.NoError(t, ln.Close())
	return addr
}

// A wrong Redis port: stderr names the server (without the password) and
// gives the one clear error, without go-redis's pool lines before it.
func TestWrongRedisPortIsOneClearError(t *testing.T) {
	t.Parallel()
	addr := closedPort(t)
	r := runProcess(t, nil, "--redis", "redis://ops:s3cret@"+addr+"/0", "limits", "list")
	require.Equal(t, 1, r.code)
	require.Equal(t, "sluice: redis redis://"+addr+" (--redis)\n"+
		"sluice: redis at redis://"+addr+": dial tcp "+addr+": connect: connection refused\n", r.stderr)
	require.NotContains(t, r.stderr, "s3cret")
}

// Without --redis the server used is named with where it came from: the
// environment variable, the config file's redis.addr, or the default.
func TestRedisServerUsedIsNamed(t *testing.T) {
	addr := closedPort(t)
	cfg := writeFile(t, "c.yaml", "redis:\n  addr: "+addr+"\n")
	for _, tc := range []struct {
		env  []string
		args []string
		want string
	}{
		{[]string{"REDIS_URL=redis://:pw@" + addr + "/2"}, nil, "sluice: redis redis://" + addr + " ($REDIS_URL)\n"},
		{[]string{"REDIS_URL="}, []string{"-c", cfg}, "sluice: redis redis://" + addr + " (redis.addr in " + cfg + ")\n"},
	} {
		r := runProcess(t, tc.env, append(tc.args, "limits", "list")...)
		require.Equal(t, 1, r.code)
		require.True(t, strings.HasPrefix(r.stderr, tc.want), "stderr %q, want it to start with %q", r.stderr, tc.want)
		require.NotContains(t, r.stderr, "pw@")
	}
	t.Setenv("REDIS_URL", "")
	g := &globals{}
	_, from, err := g.redisSource(config.Default())
	require.NoError(t, err)
	require.Equal(t, "the default: no --redis, $REDIS_URL not set", from)
}
