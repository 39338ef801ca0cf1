//go:build stack && linux

package stack

import (
	"bufio"
	"context"
	"encoding/json"
	"flag"
	"io"
	"net"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/compose-spec/compose-go/v2/cli"
	"github.com/compose-spec/compose-go/v2/types"
	"github.com/production-go/gateway-lab/gateway/identity"
	"github.com/production-go/gateway-lab/gateway/providers/openaicompat"
	"github.com/production-go/gateway-lab/gateway/providers/sim"
	"github.com/production-go/gateway-lab/gateway/service"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.yaml.in/yaml/v3"
)

// root is the repository, seen from this package's directory.
const root = "../.."

// loadCompose loads docker-compose.yml as `docker compose config` would,
// with the defaults of its ${VAR:-default} knobs (no environment of the
// caller's), env files resolved into each service's environment.
func loadCompose(t *testing.T) *types.Project {
	t.Helper()
	opts, err := cli.NewProjectOptions([]string{filepath.Join(root, "docker-compose.yml")},
		cli.WithWorkingDirectory(root), cli.WithEnv(nil), cli.WithConsistency(true), cli.WithResolvedPaths(true))
	require.NoError(t, err)
	p, err := opts.LoadProject(t.Context())
	require.NoError(t, err, "docker-compose.yml must load and validate with the Compose reference loader")
	return p
}

// gatewayServices are the services built from the secure_app target: the replicas.
func gatewayServices(p *types.Project) []types.ServiceConfig {
	var out []types.ServiceConfig
	for _, name := range p.ServiceNames() {
		s := p.Services[name]
		if s.Build != nil && s.Build.Target == "secure_app" {
			out = append(out, s)
		}
	}
	return out
}

func env(s types.ServiceConfig, key string) string {
	if v, ok := s.Environment[key]; ok && v != nil {
		return *v
	}
	return ""
}

func port(t *testing.T, hostport string) string {
	t.Helper()
	_, p, err := net.SplitHostPort(hostport)
	require.NoError(t, err, "%q is host:port", hostport)
	return p
}

// healthURL is the URL a service's health check probes (the last argument
// that parses as an http URL).
func healthURL(t *testing.T, s types.ServiceConfig) *url.URL {
	t.Helper()
	require.NotNil(t, s.HealthCheck, "%s has a health check", s.Name)
	for _, a := range slices.Backward(s.HealthCheck.Test) {
		if u, err := url.Parse(a); err == nil && strings.HasPrefix(u.Scheme, "http") {
			return u
		}
	}
	t.Fatalf("%s's health check %v probes no http URL", s.Name, s.HealthCheck.Test)
	return nil
}

func publishes(s types.ServiceConfig, target string) bool {
	for _, p := range s.Ports {
		if p.Target > 0 && target == strconv.FormatUint(uint64(p.Target), 10) {
			return true
		}
	}
	return false
}

// registerOthers registers, as plain strings, the flags secure_app has on
// top of service.Config's, so service.Parse accepts their GATEWAY_* variables.
func registerOthers(fs *flag.FlagSet, names map[string]bool) {
	for n := range names {
		if fs.Lookup(n) == nil {
			fs.String(n, "", "")
		}
	}
}

// flagNames runs a binary with -h and returns the flag names its usage lists.
func flagNames(t *testing.T, bin string) map[string]bool {
	t.Helper()
	out, _ := runOutput(t, bin, "-h")
	names := map[string]bool{}
	re := regexp.MustCompile(`^\s+-([a-z0-9-]+)`)
	sc := bufio.NewScanner(strings.NewReader(out))
	for sc.Scan() {
		if m := re.FindStringSubmatch(sc.Text()); m != nil {
			names[m[1]] = true
		}
	}
	require.NotEmpty(t, names, "%s -h lists its flags", bin)
	return names
}

func flagOf(env, prefix string) string {
	return strings.ReplaceAll(strings.ToLower(strings.TrimPrefix(env, prefix)), "_", "-")
}

func TestComposeFileValidatesAndEveryServiceHasAHealthCheck(t *testing.T) {
	p := loadCompose(t)
	want := []string{"gateway-1", "gateway-2", "grafana", "mockupstream", "otel-collector", "prometheus", "redis"}
	assert.Equal(t, want, p.ServiceNames(), "the services of the full stack")
	assert.Len(t, gatewayServices(p), 2, "two secure_app replicas")
	dockerfile, err := os.ReadFile(filepath.Join(root, "Dockerfile"))
	require.NoError(t, err)
	for _, name := range p.ServiceNames() {
		s := p.Services[name]
		if assert.NotNil(t, s.HealthCheck, "%s has a health check", name) {
			assert.False(t, s.HealthCheck.Disable, "%s's health check is on", name)
			assert.NotEmpty(t, s.HealthCheck.Test, "%s's health check runs something", name)
		}
		for _, pc := range s.Ports {
			assert.Equal(t, "127.0.0.1", pc.HostIP, "%s publishes port %d on loopback only", name, pc.Target)
		}
		if s.Build != nil {
			assert.Regexp(t, `(?m)^FROM \S+ AS `+regexp.QuoteMeta(s.Build.Target)+`$`, string(dockerfile), "%s builds Dockerfile target %q", name, s.Build.Target)
			if strings.HasPrefix(s.HealthCheck.Test[0], "CMD") && len(s.HealthCheck.Test) > 1 && strings.HasPrefix(s.HealthCheck.Test[1], "/") {
				assert.Contains(t, string(dockerfile), "/healthprobe", "%s's image carries the probe its health check runs", name)
			}
		}
	}
}

func TestGatewayReplicasMatchSecureAppsFlags(t *testing.T) {
	p := loadCompose(t)
	bins := binaries(t)
	flags := flagNames(t, filepath.Join(bins, "secure_app"))
	other := map[string]bool{"REDIS_URL": true, "REDIS_CLUSTER_ADDRS": true,
		identity.EnvSecret: true, identity.EnvSecretFile: true, identity.EnvSecretPrevious: true, identity.EnvSecretPrevFile: true,
		"OTEL_EXPORTER_OTLP_ENDPOINT": true, "OTEL_SERVICE_NAME": true}
	collectorHTTP := port(t, otelCollectorConfig(t).Receivers.OTLP.Protocols.HTTP.Endpoint)
	seenAdmin := map[string]bool{}
	for _, s := range gatewayServices(p) {
		t.Run(s.Name, func(t *testing.T) {
			up, err := openaicompat.ParseSpec(env(s, "GATEWAY_UPSTREAM"), func(k string) string { return env(s, k) })
			require.NoError(t, err, "GATEWAY_UPSTREAM is an upstream spec whose key-env is set")
			keyEnv := regexp.MustCompile(`key-env=([A-Z0-9_]+)`).FindStringSubmatch(env(s, "GATEWAY_UPSTREAM"))
			for k := range s.Environment {
				switch {
				case strings.HasPrefix(k, "GATEWAY_"):
					assert.True(t, flags[flagOf(k, "GATEWAY_")], "%s sets %s, but secure_app has no -%s flag", s.Name, k, flagOf(k, "GATEWAY_"))
				case keyEnv != nil && k == keyEnv[1]:
				default:
					assert.True(t, other[k], "%s sets %s, which secure_app does not read", s.Name, k)
				}
			}
			// The values parse as secure_app parses them.
			for k := range s.Environment {
				if strings.HasPrefix(k, "GATEWAY_") || k == identity.EnvSecret {
					t.Setenv(k, env(s, k))
				}
			}
			_, err = service.Parse("secure_app", nil, io.Discard, func(fs *flag.FlagSet) { registerOthers(fs, flags) })
			require.NoError(t, err, "the GATEWAY_* values parse")
			_, _, err = identity.SecretsFromEnv(func(k string) string { return env(s, k) }, os.ReadFile)
			require.NoError(t, err, "the JWT secret is set and long enough")
			if spec := env(s, "GATEWAY_PROVIDER"); spec != "" {
				_, err := sim.Parse(spec)
				require.NoError(t, err, "GATEWAY_PROVIDER is a simulated provider spec")
			}

			addr, admin := env(s, "GATEWAY_ADDR"), env(s, "GATEWAY_ADMIN_ADDR")
			assert.True(t, publishes(s, port(t, addr)), "the API port of GATEWAY_ADDR=%s is published", addr)
			assert.True(t, publishes(s, port(t, admin)), "the metrics port of GATEWAY_ADMIN_ADDR=%s is published", admin)
			h := healthURL(t, s)
			assert.Equal(t, port(t, admin), h.Port(), "the health check probes the admin listener")
			assert.Equal(t, "/readyz", h.Path, "the health check is readiness: a draining replica is unhealthy")
			seenAdmin[s.Name+":"+port(t, admin)] = true

			redisURL, err := url.Parse(env(s, "REDIS_URL"))
			require.NoError(t, err)
			assert.Contains(t, p.ServiceNames(), redisURL.Hostname(), "REDIS_URL names a service")
			otel, err := url.Parse(env(s, "OTEL_EXPORTER_OTLP_ENDPOINT"))
			require.NoError(t, err)
			assert.Equal(t, "otel-collector", otel.Hostname(), "spans go to the collector")
			assert.Equal(t, collectorHTTP, otel.Port(), "to the collector's OTLP/HTTP receiver")
			assert.Contains(t, s.DependsOn, "redis")

			u, err := url.Parse(up.BaseURL)
			require.NoError(t, err)
			mock := p.Services[u.Hostname()]
			require.Equal(t, "mockupstream", mock.Name, "the upstream is the mockupstream service")
			assert.Equal(t, port(t, env(mock, "MOCKUPSTREAM_ADDR")), u.Port(), "on the port mockupstream listens on")
			assert.True(t, up.Local, "marked local=true: secure_app's egress guard refuses private addresses otherwise")
			assert.Equal(t, env(mock, "MOCKUPSTREAM_API_KEY"), up.APIKey, "the gateway sends the key mockupstream asks for")
		})
	}
	targets := prometheusTargets(t)
	assert.Equal(t, seenAdmin, targets, "Prometheus scrapes every replica's admin port, and nothing else, in its gateway job")
}

// TestGatewayReplicasPassDevForTheirPublishedSecret: the replicas' JWT
// secret is in git (stack/env/gateway.env), so secure_app refuses it
// unless -dev; the compose file sets GATEWAY_DEV, and the real binary shows
// both sides of that rule.
func TestGatewayReplicasPassDevForTheirPublishedSecret(t *testing.T) {
	p := loadCompose(t)
	bin := filepath.Join(binaries(t), "secure_app")
	for _, s := range gatewayServices(p) {
		t.Run(s.Name, func(t *testing.T) {
			assert.Equal(t, "true", env(s, "GATEWAY_DEV"), "the replicas run with -dev: their secret is published")
			base := []string{identity.EnvSecret + "=" + env(s, identity.EnvSecret), "REDIS_URL=redis://127.0.0.1:1/0"}
			for _, tc := range []struct {
				name string
				env  []string
				want string
			}{
				{"without -dev the secret is refused", base, "one this repository publishes"},
				{"with GATEWAY_DEV it is accepted (and the start goes on to Redis)", append(slices.Clone(base), "GATEWAY_DEV=true"), "does not answer"},
			} {
				ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
				defer cancel()
				cmd := exec.CommandContext(ctx, bin)
				cmd.Env = tc.env
				out, err := cmd.CombinedOutput()
				require.Error(t, err, "%s: secure_app stops (no Redis here)", tc.name)
				assert.Contains(t, string(out), tc.want, tc.name)
				assert.NotContains(t, string(out), env(s, identity.EnvSecret), "never the secret")
			}
		})
	}
}

func TestMockupstreamMatchesItsFlags(t *testing.T) {
	p := loadCompose(t)
	s := p.Services["mockupstream"]
	flags := flagNames(t, filepath.Join(binaries(t), "mockupstream"))
	for k := range s.Environment {
		if k == "MOCKUPSTREAM_API_KEY" {
			continue
		}
		require.True(t, strings.HasPrefix(k, "MOCKUPSTREAM_"), "mockupstream reads MOCKUPSTREAM_* only, not %s", k)
		assert.True(t, flags[flagOf(k, "MOCKUPSTREAM_")], "%s names no mockupstream flag", k)
	}
	h := healthURL(t, s)
	assert.Equal(t, port(t, env(s, "MOCKUPSTREAM_ADDR")), h.Port())
	assert.Equal(t, "/healthz", h.Path)
	// The knobs' defaults run: mockupstream -h accepts them (exit 0 after help means they parsed).
	var args []string
	for k := range s.Environment {
		if k != "MOCKUPSTREAM_API_KEY" && k != "MOCKUPSTREAM_ADDR" {
			args = append(args, "-"+flagOf(k, "MOCKUPSTREAM_")+"="+env(s, k))
		}
	}
	out, err := runOutput(t, filepath.Join(binaries(t), "mockupstream"), append(args, "-h")...)
	require.NoError(t, err, "mockupstream accepts the compose file's values: %s", out)
}

func TestMountedConfigsAreWhereTheServicesLook(t *testing.T) {
	p := loadCompose(t)
	mounts := func(s types.ServiceConfig) map[string]string {
		m := map[string]string{}
		for _, v := range s.Volumes {
			_, err := os.Stat(v.Source)
			assert.NoError(t, err, "%s mounts %s, which exists", s.Name, v.Source)
			assert.True(t, v.ReadOnly, "%s mounts %s read-only", s.Name, v.Target)
			m[v.Target] = v.Source
		}
		return m
	}
	prom := p.Services["prometheus"]
	pm := mounts(prom)
	assert.Contains(t, prom.Command, "--config.file=/etc/prometheus/prometheus.yml")
	assert.Equal(t, filepath.Join(abs(t), "stack/prometheus.yml"), pm["/etc/prometheus/prometheus.yml"])
	assert.Equal(t, "9090", healthURL(t, prom).Port())

	col := p.Services["otel-collector"]
	cm := mounts(col)
	assert.Contains(t, col.Command, "--config=/etc/otelcol/config.yaml")
	assert.Equal(t, filepath.Join(abs(t), "stack/otel-collector.yaml"), cm["/etc/otelcol/config.yaml"])
	assert.Equal(t, port(t, otelCollectorConfig(t).Extensions.HealthCheck.Endpoint), healthURL(t, col).Port(), "the health check probes the health_check extension")

	g := p.Services["grafana"]
	gm := mounts(g)
	assert.Equal(t, filepath.Join(abs(t), "stack/grafana/provisioning"), gm["/etc/grafana/provisioning"])
	var ds struct {
		Datasources []struct{ UID, URL string } `yaml:"datasources"`
	}
	readYAML(t, "stack/grafana/provisioning/datasources/prometheus.yaml", &ds)
	require.Len(t, ds.Datasources, 1)
	u, err := url.Parse(ds.Datasources[0].URL)
	require.NoError(t, err)
	assert.Equal(t, "prometheus", u.Hostname(), "Grafana reads the prometheus service")
	assert.Equal(t, "9090", u.Port())
	var prov struct {
		Providers []struct {
			Options struct{ Path string } `yaml:"options"`
		} `yaml:"providers"`
	}
	readYAML(t, "stack/grafana/provisioning/dashboards/gateway.yaml", &prov)
	require.Len(t, prov.Providers, 1)
	dir := prov.Providers[0].Options.Path
	assert.Equal(t, filepath.Join(abs(t), "stack/grafana/dashboards"), gm[dir], "the dashboards directory is mounted where the provider looks")
	home := env(g, "GF_DASHBOARDS_DEFAULT_HOME_DASHBOARD_PATH")
	rel, err := filepath.Rel(dir, home)
	require.NoError(t, err)
	_, err = os.Stat(filepath.Join(root, "stack/grafana/dashboards", rel))
	assert.NoError(t, err, "the home dashboard is one of the mounted files")
	for _, d := range dashboardUIDs(t) {
		assert.Equal(t, ds.Datasources[0].UID, d, "every panel and query reads the provisioned data source")
	}
}

func abs(t *testing.T) string {
	t.Helper()
	a, err := filepath.Abs(root)
	require.NoError(t, err)
	return a
}

func readYAML(t *testing.T, rel string, v any) {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(root, rel))
	require.NoError(t, err)
	require.NoError(t, yaml.Unmarshal(b, v), rel)
}

type otelConfig struct {
	Receivers struct {
		OTLP struct {
			Protocols struct {
				HTTP struct{ Endpoint string } `yaml:"http"`
				GRPC struct{ Endpoint string } `yaml:"grpc"`
			} `yaml:"protocols"`
		} `yaml:"otlp"`
	} `yaml:"receivers"`
	Extensions struct {
		HealthCheck struct{ Endpoint string } `yaml:"health_check"`
	} `yaml:"extensions"`
}

func otelCollectorConfig(t *testing.T) otelConfig {
	var c otelConfig
	readYAML(t, "stack/otel-collector.yaml", &c)
	return c
}

// prometheusTargets are the targets of stack/prometheus.yml's gateway job.
func prometheusTargets(t *testing.T) map[string]bool {
	var c struct {
		ScrapeConfigs []struct {
			JobName       string `yaml:"job_name"`
			StaticConfigs []struct {
				Targets []string `yaml:"targets"`
			} `yaml:"static_configs"`
		} `yaml:"scrape_configs"`
	}
	readYAML(t, "stack/prometheus.yml", &c)
	out := map[string]bool{}
	for _, sc := range c.ScrapeConfigs {
		if sc.JobName != "gateway" {
			continue
		}
		for _, s := range sc.StaticConfigs {
			for _, tg := range s.Targets {
				out[tg] = true
			}
		}
	}
	return out
}

// TestDashboardIsWellFormed checks what Grafana would otherwise show
// broken: unique panel ids, panels inside the 24-column grid and not on top
// of each other, every panel with a title and at least one query.
func TestDashboardIsWellFormed(t *testing.T) {
	b, err := os.ReadFile(filepath.Join(root, "stack/grafana/dashboards/gateway.json"))
	require.NoError(t, err)
	var d struct {
		UID    string `json:"uid"`
		Title  string `json:"title"`
		Panels []struct {
			ID      int                      `json:"id"`
			Type    string                   `json:"type"`
			Title   string                   `json:"title"`
			GridPos struct{ H, W, X, Y int } `json:"gridPos"`
			Targets []struct {
				RefID string `json:"refId"`
				Expr  string `json:"expr"`
			} `json:"targets"`
		} `json:"panels"`
	}
	require.NoError(t, json.Unmarshal(b, &d))
	assert.NotEmpty(t, d.UID)
	assert.NotEmpty(t, d.Title)
	ids := map[int]bool{}
	type cell struct{ x, y int }
	taken := map[cell]string{}
	for _, p := range d.Panels {
		assert.False(t, ids[p.ID], "panel id %d is unique", p.ID)
		ids[p.ID] = true
		assert.NotEmpty(t, p.Title, "panel %d has a title", p.ID)
		g := p.GridPos
		assert.True(t, g.W > 0 && g.H > 0 && g.X >= 0 && g.X+g.W <= 24, "panel %q fits the 24-column grid: %+v", p.Title, g)
		for x := g.X; x < g.X+g.W; x++ {
			for y := g.Y; y < g.Y+g.H; y++ {
				if other, ok := taken[cell{x, y}]; ok {
					t.Errorf("panel %q overlaps %q at (%d,%d)", p.Title, other, x, y)
				}
				taken[cell{x, y}] = p.Title
			}
		}
		if p.Type == "row" {
			continue
		}
		require.NotEmpty(t, p.Targets, "panel %q has a query", p.Title)
		refs := map[string]bool{}
		for _, tg := range p.Targets {
			assert.NotEmpty(t, tg.Expr, "panel %q: every query has an expression", p.Title)
			assert.False(t, refs[tg.RefID], "panel %q: refId %s is unique", p.Title, tg.RefID)
			refs[tg.RefID] = true
		}
	}
}
