//go:build k8s

package repocheck

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/production-go/gateway-lab/gateway/identity"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/intstr"
	"sigs.k8s.io/yaml"
)

// The manifests in deploy/k8s are decoded with the real Kubernetes API
// types, strictly (an unknown or misspelt field is an error, as the API
// server's strict field validation would say), and held against the app
// they run: every flag exists, every duration parses, the ports are the
// listeners, the probes hit the real endpoints, and the kubelet's SIGKILL
// comes after the whole drain. Build tag k8s: the API types are a large
// compile that `make test` need not pay; `make test-k8s` and `make ci` run it.

// manifests is every file in deploy/k8s, each checked by a test below.
var manifests = []string{"deployment.yaml", "networkpolicy.yaml", "pdb.yaml", "service.yaml"}

func TestK8sEveryManifestIsChecked(t *testing.T) {
	entries, err := os.ReadDir(filepath.Join(root(t), "deploy/k8s"))
	require.NoError(t, err)
	var files []string
	for _, e := range entries {
		files = append(files, e.Name())
	}
	assert.Equal(t, manifests, files, "a manifest in deploy/k8s that no test decodes is one kubectl apply -f takes unchecked: add it to the tests and to manifests")
}

func decodeStrict(t *testing.T, file string, obj any) {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(root(t), "deploy/k8s", file))
	require.NoError(t, err)
	require.NoError(t, yaml.UnmarshalStrict(data, obj), "deploy/k8s/%s must decode strictly", file)
}

// secureAppFlags builds secure_app and reads its flags from -h.
func secureAppFlags(t *testing.T) map[string]bool {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "secure_app")
	build := exec.CommandContext(t.Context(), "go", "build", "-o", bin, "./solutions/secure_app")
	build.Dir = root(t)
	out, err := build.CombinedOutput()
	require.NoError(t, err, "build secure_app:\n%s", out)
	help := exec.CommandContext(t.Context(), bin, "-h")
	out, err = help.CombinedOutput()
	require.NoError(t, err, "secure_app -h:\n%s", out)
	flags := map[string]bool{}
	for _, m := range regexp.MustCompile(`(?m)^  -([a-z0-9-]+)`).FindAllStringSubmatch(string(out), -1) {
		flags[m[1]] = true
	}
	require.Contains(t, flags, "drain-grace", "secure_app -h lists its flags")
	return flags
}

func TestK8sManifestsMatchTheApp(t *testing.T) {
	var dep appsv1.Deployment
	var svc corev1.Service
	var pdb policyv1.PodDisruptionBudget
	decodeStrict(t, "deployment.yaml", &dep)
	decodeStrict(t, "service.yaml", &svc)
	decodeStrict(t, "pdb.yaml", &pdb)
	assert.Equal(t, "Deployment", dep.Kind)
	assert.Equal(t, "apps/v1", dep.APIVersion)
	assert.Equal(t, "Service", svc.Kind)
	assert.Equal(t, "PodDisruptionBudget", pdb.Kind)
	assert.Equal(t, "policy/v1", pdb.APIVersion)

	pod := dep.Spec.Template
	require.Len(t, pod.Spec.Containers, 1)
	c := pod.Spec.Containers[0]

	// Every argument is a real flag of secure_app, as -name=value.
	known := secureAppFlags(t)
	args := map[string]string{}
	for _, a := range c.Args {
		name, value, ok := strings.Cut(strings.TrimPrefix(a, "-"), "=")
		require.True(t, ok && strings.HasPrefix(a, "-"), "argument %q: write flags as -name=value", a)
		assert.True(t, known[name], "argument %q: secure_app has no flag -%s", a, name)
		args[name] = value
	}
	// Profiles only where nothing but the pod can reach them: the admin
	// port listens on the pod IP, which node-local traffic reaches
	// whatever the NetworkPolicy says.
	if host, _, _ := strings.Cut(args["admin-addr"], ":"); host != "127.0.0.1" && host != "localhost" {
		assert.Equal(t, "false", args["admin-pprof"], "-admin-addr=%s is not loopback: set -admin-pprof=false", args["admin-addr"])
	}
	dur := func(flag string) time.Duration {
		v, ok := args[flag]
		require.True(t, ok, "the Deployment sets -%s explicitly: the grace period is computed from it", flag)
		d, err := time.ParseDuration(v)
		require.NoError(t, err, "-%s=%s", flag, v)
		return d
	}

	// Secrets come from the environment, from Secret objects, never literal.
	env := map[string]corev1.EnvVar{}
	for _, e := range c.Env {
		env[e.Name] = e
	}
	for _, name := range []string{identity.EnvSecret, "REDIS_URL"} {
		e, ok := env[name]
		if assert.True(t, ok, "the container sets %s", name) {
			assert.Empty(t, e.Value, "%s must not be a literal in the manifest", name)
			assert.NotNil(t, e.ValueFrom.SecretKeyRef, "%s comes from a Secret", name)
		}
	}

	// Ports: http is -addr's, admin is -admin-addr's, and both listen on
	// every interface (the kubelet probes the pod IP, not loopback).
	ports := map[string]int32{}
	for _, p := range c.Ports {
		ports[p.Name] = p.ContainerPort
	}
	for name, flag := range map[string]string{"http": "addr", "admin": "admin-addr"} {
		t.Run("port "+name, func(t *testing.T) {
			host, port, ok := strings.Cut(args[flag], ":")
			require.True(t, ok, "-%s is host:port", flag)
			assert.Equal(t, "0.0.0.0", host, "-%s must listen beyond loopback in a pod", flag)
			n, err := strconv.Atoi(port)
			require.NoError(t, err)
			assert.Equal(t, int32(n), ports[name], "container port %s is -%s's port", name, flag)
		})
	}

	// Probes: readiness on /readyz, liveness on /healthz, both on the admin
	// listener, where gateway/service registers them.
	serve, err := os.ReadFile(filepath.Join(root(t), "gateway/service/serve.go"))
	require.NoError(t, err)
	for _, p := range []struct {
		kind  string
		probe *corev1.Probe
		path  string
	}{{"readiness", c.ReadinessProbe, "/readyz"}, {"liveness", c.LivenessProbe, "/healthz"}} {
		t.Run(p.kind+" probe", func(t *testing.T) {
			require.NotNil(t, p.probe, "a %s probe", p.kind)
			require.NotNil(t, p.probe.HTTPGet, "the %s probe is an HTTP GET", p.kind)
			assert.Equal(t, p.path, p.probe.HTTPGet.Path, "the %s probe's path", p.kind)
			assert.Equal(t, "admin", p.probe.HTTPGet.Port.String(), "the %s probe hits the admin port", p.kind)
			assert.Contains(t, string(serve), `"GET `+p.path+`"`, "gateway/service/serve.go serves %s", p.path)
		})
		if p.probe == nil || p.probe.HTTPGet == nil {
			t.FailNow() // the subtest says which; the checks below read both probes
		}
	}
	assert.NotEqual(t, c.ReadinessProbe.HTTPGet.Path, c.LivenessProbe.HTTPGet.Path, "readiness and liveness are separate (DRAIN-2)")

	// The kubelet waits terminationGracePeriodSeconds from the start of
	// preStop, then SIGKILLs: it must outlast preStop and the whole drain.
	require.NotNil(t, c.Lifecycle, "a preStop hook")
	require.NotNil(t, c.Lifecycle.PreStop)
	require.NotNil(t, c.Lifecycle.PreStop.Sleep, "preStop sleeps (no shell needed in the image)")
	preStop := time.Duration(c.Lifecycle.PreStop.Sleep.Seconds) * time.Second
	budget := preStop + dur("readiness-delay") + dur("drain-grace") + dur("shutdown-timeout")
	require.NotNil(t, pod.Spec.TerminationGracePeriodSeconds)
	grace := time.Duration(*pod.Spec.TerminationGracePeriodSeconds) * time.Second
	assert.Greater(t, grace, budget, "terminationGracePeriodSeconds (%s) must exceed preStop + readiness delay + drain grace + shutdown timeout (%s)", grace, budget)

	// The Service and the PDB select these pods; the Service exposes only
	// the public port (metrics stay off it, SEC-6).
	podLabels := labels.Set(pod.Labels)
	assert.True(t, labels.SelectorFromSet(svc.Spec.Selector).Matches(podLabels), "the Service selects the pods")
	require.Len(t, svc.Spec.Ports, 1, "the Service exposes one port")
	assert.Equal(t, "http", svc.Spec.Ports[0].TargetPort.String(), "the Service targets the http port, never admin")
	sel, err := metav1.LabelSelectorAsSelector(pdb.Spec.Selector)
	require.NoError(t, err)
	assert.True(t, sel.Matches(podLabels), "the PodDisruptionBudget selects the pods")
	depSel, err := metav1.LabelSelectorAsSelector(dep.Spec.Selector)
	require.NoError(t, err)
	assert.True(t, depSel.Matches(podLabels), "the Deployment's selector matches its template")
	require.NotNil(t, pdb.Spec.MaxUnavailable)
	require.NotNil(t, dep.Spec.Replicas)
	assert.Less(t, pdb.Spec.MaxUnavailable.IntValue(), int(*dep.Spec.Replicas), "the PDB leaves at least one pod serving")
	require.NotNil(t, dep.Spec.Strategy.RollingUpdate)
	assert.Equal(t, 0, dep.Spec.Strategy.RollingUpdate.MaxUnavailable.IntValue(), "a rollout never drops below the replica count")
}

// A NetworkPolicy client of the gateway's pods: its namespace's labels and
// its own, or no pod at all (a caller from outside the cluster).
type policyPeer struct {
	description   string
	sameNamespace bool // in the gateway's namespace
	namespace     labels.Set
	pod           labels.Set // nil: not a pod
}

// admits says whether np lets from reach port, by NetworkPolicy's rules:
// the rules add up; a rule without ports admits every port and one without
// `from` every source; a peer with both selectors needs both to match, a
// podSelector alone means the policy's own namespace; an ipBlock names
// addresses, which may be anyone's, so it counts as every source here.
func admits(t *testing.T, np networkingv1.NetworkPolicy, port corev1.ContainerPort, from policyPeer) bool {
	t.Helper()
	for _, rule := range np.Spec.Ingress {
		if !portListed(rule.Ports, port) {
			continue
		}
		if len(rule.From) == 0 {
			return true
		}
		for _, p := range rule.From {
			if peerMatches(t, p, from) {
				return true
			}
		}
	}
	return false
}

func peerMatches(t *testing.T, p networkingv1.NetworkPolicyPeer, from policyPeer) bool {
	t.Helper()
	switch {
	case p.IPBlock != nil:
		return true
	case from.pod == nil:
		return false // selectors select pods
	case p.NamespaceSelector == nil && !from.sameNamespace:
		return false
	case p.NamespaceSelector != nil && !selects(t, p.NamespaceSelector, from.namespace):
		return false
	}
	return p.PodSelector == nil || selects(t, p.PodSelector, from.pod)
}

func selects(t *testing.T, sel *metav1.LabelSelector, set labels.Set) bool {
	t.Helper()
	s, err := metav1.LabelSelectorAsSelector(sel)
	require.NoError(t, err)
	return s.Matches(set)
}

// portListed says whether ports (a rule's; none means all) include the
// container port c, by name or by number.
func portListed(ports []networkingv1.NetworkPolicyPort, c corev1.ContainerPort) bool {
	if len(ports) == 0 {
		return true
	}
	for _, p := range ports {
		switch {
		case p.Protocol != nil && *p.Protocol != corev1.ProtocolTCP:
		case p.Port == nil:
			return true
		case p.Port.Type == intstr.String:
			if p.Port.StrVal == c.Name {
				return true
			}
		default:
			last := p.Port.IntVal
			if p.EndPort != nil {
				last = *p.EndPort
			}
			if p.Port.IntVal <= c.ContainerPort && c.ContainerPort <= last {
				return true
			}
		}
	}
	return false
}

func TestK8sNetworkPolicyAdmitsOnlyTheScraperToTheAdminPort(t *testing.T) {
	var dep appsv1.Deployment
	var np networkingv1.NetworkPolicy
	decodeStrict(t, "deployment.yaml", &dep)
	decodeStrict(t, "networkpolicy.yaml", &np)
	assert.Equal(t, "NetworkPolicy", np.Kind)
	assert.Equal(t, "networking.k8s.io/v1", np.APIVersion)
	pod := dep.Spec.Template
	require.Len(t, pod.Spec.Containers, 1)
	assert.True(t, selects(t, &np.Spec.PodSelector, labels.Set(pod.Labels)), "the NetworkPolicy selects the Deployment's pods")
	assert.Contains(t, np.Spec.PolicyTypes, networkingv1.PolicyTypeIngress, "the policy limits ingress")

	// Every port the policy names is one the container exposes, so a
	// renamed port cannot leave a rule admitting nothing (or the wrong port).
	ports := map[string]corev1.ContainerPort{}
	for _, p := range pod.Spec.Containers[0].Ports {
		ports[p.Name] = p
	}
	require.Contains(t, ports, "http")
	require.Contains(t, ports, "admin")
	for _, rule := range np.Spec.Ingress {
		for _, p := range rule.Ports {
			if assert.NotNil(t, p.Port, "every rule names its port") {
				_, named := ports[p.Port.StrVal]
				assert.True(t, p.Port.Type == intstr.String && named, "port %s: name a port the container exposes (http or admin)", p.Port)
			}
		}
	}

	// The scraper, as networkpolicy.yaml documents it.
	monitoring := labels.Set{"kubernetes.io/metadata.name": "monitoring"}
	gatewayNS := labels.Set{"kubernetes.io/metadata.name": "gateway-prod"}
	for _, tc := range []struct {
		from        policyPeer
		http, admin bool
	}{
		{policyPeer{"Prometheus in the monitoring namespace", false, monitoring, labels.Set{"app.kubernetes.io/name": "prometheus"}}, true, true},
		{policyPeer{"a client pod in the gateway's namespace", true, gatewayNS, labels.Set{"app": "client"}}, true, false},
		{policyPeer{"another gateway replica", true, gatewayNS, labels.Set(pod.Labels)}, true, false},
		{policyPeer{"a pod labelled prometheus in the gateway's namespace", true, gatewayNS, labels.Set{"app.kubernetes.io/name": "prometheus"}}, true, false},
		{policyPeer{"a pod labelled prometheus in another namespace", false, labels.Set{"kubernetes.io/metadata.name": "default"}, labels.Set{"app.kubernetes.io/name": "prometheus"}}, true, false},
		{policyPeer{"Grafana in the monitoring namespace", false, monitoring, labels.Set{"app.kubernetes.io/name": "grafana"}}, true, false},
		{policyPeer{"a caller outside the cluster", false, nil, nil}, true, false},
	} {
		t.Run(tc.from.description, func(t *testing.T) {
			assert.Equal(t, tc.http, admits(t, np, ports["http"], tc.from), "the API port (http): admitted?")
			assert.Equal(t, tc.admin, admits(t, np, ports["admin"], tc.from), "the admin port (metrics and probes): admitted?")
		})
	}
}
