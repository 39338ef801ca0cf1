// Package redisconn is how a service reaches the Redis that holds its
// shared limits: the flags and environment variables that name it (one
// server by URL, or a Redis Cluster by its nodes' addresses), its TLS and
// ACL user, a password read only from the environment, the timeouts every
// call runs under, and a check at start that it answers. Nothing it prints,
// logs or returns carries a password: every error and every line of
// go-redis' own log is redacted first.
package redisconn

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net/url"
	"os"
	"regexp"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// Settings say which Redis holds the shared limits and how to reach
// it; Flags fills them in. Its credentials never come from a flag, and nothing here is printed
// unredacted: the URL and the addresses may carry a password.
type Settings struct {
	url         envFlag // -redis-url, else $REDIS_URL
	cluster     envFlag // -redis-cluster, else $REDIS_CLUSTER_ADDRS
	username    string
	passwordEnv string
	tls         bool
	tlsCA       string
}

// Flags registers the Redis flags on fs. The environment variables that
// stand in for -redis-url and -redis-cluster are read by Connect, after the
// flags are parsed, so -h names them without printing their values.
func (s *Settings) Flags(fs *flag.FlagSet) {
	s.url.env, s.cluster.env = "REDIS_URL", "REDIS_CLUSTER_ADDRS"
	fs.Var(&s.url, "redis-url", "the Redis `URL` for the shared limits, e.g. rediss://user:password@redis:6380/0 (default $REDIS_URL, read at start, never printed)")
	fs.Var(&s.cluster, "redis-cluster", "a Redis Cluster instead of -redis-url: comma-separated node `addresses` (default $REDIS_CLUSTER_ADDRS)")
	fs.StringVar(&s.username, "redis-username", "", "Redis ACL user, for -redis-cluster or a -redis-url without one")
	fs.StringVar(&s.passwordEnv, "redis-password-env", "REDIS_PASSWORD", "the environment `variable` holding the Redis password, for -redis-cluster or a -redis-url without one (a password never goes in a flag)")
	fs.BoolVar(&s.tls, "redis-tls", false, "speak TLS to Redis (1.2 at least, each node's certificate checked against its own address); a rediss:// URL turns it on too")
	fs.StringVar(&s.tlsCA, "redis-tls-ca", "", "PEM `file` of the CA that signs Redis' certificates (default: the system's roots)")
}

// envFlag is a string flag whose default is an environment variable read
// after the flags are parsed, never when they are registered, so -h prints
// the variable's name and not its value.
type envFlag struct {
	env, value string
	set        bool
}

func (f *envFlag) String() string {
	if f == nil {
		return ""
	}
	return f.value
}

func (f *envFlag) Set(v string) error {
	f.value, f.set = v, true
	return nil
}

// get is the flag's value if it was set (even to ""), else the variable's.
func (f *envFlag) get(getenv func(string) string) string {
	if f.set {
		return f.value
	}
	return getenv(f.env)
}

// Connect connects to the shared limits' Redis — one server, or a cluster
// (every key of one tenant carries one hash tag, so its scripts run on one
// node) — and checks it answers, so a wrong address fails the start rather
// than every request. No error it returns carries a password.
func Connect(s Settings, getenv func(string) string) (redis.UniversalClient, error) {
	rawURL, cluster := s.url.get(getenv), s.cluster.get(getenv)
	password := ""
	if s.passwordEnv != "" {
		password = getenv(s.passwordEnv)
	}
	r := redactor{secrets: append(secretsIn(rawURL), secretsIn(cluster)...)}
	if password != "" {
		r.secrets = append(r.secrets, password)
	}
	var (
		rdb   redis.UniversalClient
		where string
	)
	switch {
	case cluster != "":
		opts, err := clusterOptions(cluster, s, password)
		if err != nil {
			return nil, r.error(err)
		}
		rdb, where = redis.NewClusterClient(opts), "the cluster at "+redactURL(cluster)
	case rawURL != "":
		opts, err := urlOptions(rawURL, s, password)
		if err != nil {
			return nil, r.error(err)
		}
		rdb, where = redis.NewClient(opts), opts.Addr
	default:
		return nil, errors.New("no Redis for the shared limits: set REDIS_URL or -redis-url, or -redis-cluster (make run-secure starts one)")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	if err := rdb.Ping(ctx).Err(); err != nil {
		_ = rdb.Close()
		return nil, r.error(fmt.Errorf("redis at %s does not answer: %w", where, err))
	}
	return rdb, nil
}

// The timeouts every Redis call runs under.
const (
	dialTimeout = time.Second
	ioTimeout   = 500 * time.Millisecond
)

// urlOptions reads -redis-url as go-redis' ParseURL does (rediss:// is TLS
// to the URL's host), then adds what the other flags say: a user and a
// password the URL does not carry, -redis-tls, -redis-tls-ca.
func urlOptions(raw string, s Settings, password string) (*redis.Options, error) {
	opts, err := redis.ParseURL(raw)
	if err != nil {
		var ue *url.Error
		if errors.As(err, &ue) {
			// url.Parse quotes the whole URL and the bytes it tripped on,
			// password included: say what is wrong in our own words.
			err = errors.New("it does not parse as a URL")
		}
		return nil, fmt.Errorf("-redis-url %s: %w (want redis://host:port/db or rediss://…, credentials as user:password@ before the host)", redactURL(raw), err)
	}
	switch {
	case password != "" && opts.Password != "":
		return nil, fmt.Errorf("-redis-url carries a password and $%s holds one too: keep one (the variable keeps it out of the URL)", s.passwordEnv)
	case s.username != "" && opts.Username != "":
		return nil, errors.New("-redis-url names a user and -redis-username another: keep one")
	}
	if password != "" {
		opts.Password = password
	}
	if s.username != "" {
		opts.Username = s.username
	}
	if s.tls && opts.TLSConfig == nil {
		host, _, _ := strings.Cut(opts.Addr, ":")
		opts.TLSConfig = &tls.Config{ServerName: strings.Trim(host, "[]"), MinVersion: tls.VersionTLS12}
	}
	if err := withCA(opts.TLSConfig, s.tlsCA); err != nil {
		return nil, err
	}
	opts.DialTimeout, opts.ReadTimeout, opts.WriteTimeout = dialTimeout, ioTimeout, ioTimeout
	// Without it go-redis ignores a call's context deadline, and the shared
	// limits' 50 ms budgets would be the 500 ms read timeout.
	opts.ContextTimeoutEnabled = true
	return opts, nil
}

// clusterOptions are -redis-cluster's: the nodes, the user and password
// from -redis-username and the password variable, and TLS as ParseURL sets
// it for rediss:// (TLS 1.2 at least) — except the server name, left for
// crypto/tls to take from each node's own address, since one name cannot
// match every node of a cluster.
func clusterOptions(addrs string, s Settings, password string) (*redis.ClusterOptions, error) {
	nodes := strings.Split(addrs, ",")
	for i, n := range nodes {
		nodes[i] = strings.TrimSpace(n)
		if nodes[i] == "" || strings.Contains(nodes[i], "@") || strings.Contains(nodes[i], "://") {
			return nil, fmt.Errorf("-redis-cluster %s: want host:port,host:port,… (the password comes from $%s, TLS from -redis-tls)",
				redactURL(addrs), s.passwordEnv)
		}
	}
	opts := &redis.ClusterOptions{Addrs: nodes, Username: s.username, Password: password,
		DialTimeout: dialTimeout, ReadTimeout: ioTimeout, WriteTimeout: ioTimeout,
		ContextTimeoutEnabled: true} // see urlOptions
	if s.tls {
		opts.TLSConfig = &tls.Config{MinVersion: tls.VersionTLS12}
	}
	if err := withCA(opts.TLSConfig, s.tlsCA); err != nil {
		return nil, err
	}
	return opts, nil
}

// withCA makes c trust only the CA certificates in file, when one is given.
func withCA(c *tls.Config, file string) error {
	switch {
	case file == "":
		return nil
	case c == nil:
		return errors.New("-redis-tls-ca does nothing without TLS: add -redis-tls, or use a rediss:// URL")
	}
	pem, err := os.ReadFile(file)
	if err != nil {
		return fmt.Errorf("-redis-tls-ca: %w", err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pem) {
		return fmt.Errorf("-redis-tls-ca: %s holds no PEM certificate", file)
	}
	c.RootCAs = pool
	return nil
}

// userinfo and passwordArg find what may be a credential in a Redis URL
// or address list without trusting it to parse: everything between "://"
// (or the start) and the last "@", and the value of a password-like query
// parameter (see secretsIn and redactURL).
var (
	userinfo    = regexp.MustCompile(`^((?:[A-Za-z][A-Za-z0-9+.-]*://)?)(.*)@`)
	passwordArg = regexp.MustCompile(`(?i)((?:^|[?&;\s])(?:password|pass|pwd|auth|secret)=)([^&#\s]*)`)
	// inText finds the same two in a line of free text (a log line).
	userinfoInText = regexp.MustCompile(`([A-Za-z][A-Za-z0-9+.-]*://)[^\s/@]*@`)
)

// redactURL is raw with its userinfo and password-like query values
// replaced by "xxxxx".
func redactURL(raw string) string {
	if strings.Contains(raw, "@") {
		raw = userinfo.ReplaceAllString(raw, "${1}xxxxx@")
	}
	return passwordArg.ReplaceAllString(raw, "${1}xxxxx")
}

// secretsIn lists the substrings of raw redactURL hides, as written and
// percent-decoded: what an error about raw might quote.
func secretsIn(raw string) []string {
	var out []string
	add := func(s string) {
		if s == "" {
			return
		}
		out = append(out, s)
		if u, err := url.PathUnescape(s); err == nil && u != s {
			out = append(out, u)
		}
	}
	if m := userinfo.FindStringSubmatch(raw); m != nil {
		add(m[2])
		if _, pw, ok := strings.Cut(m[2], ":"); ok {
			add(pw)
		}
	}
	for _, m := range passwordArg.FindAllStringSubmatch(raw, -1) {
		add(m[2])
	}
	return out
}

// redactor scrubs known secrets from error text.
type redactor struct{ secrets []string }

// error returns err with every known secret in its text replaced; the
// chain is not kept, since a wrapped error would still print the original.
func (r redactor) error(err error) error {
	msg := err.Error()
	for _, s := range r.secrets {
		msg = strings.ReplaceAll(msg, s, "xxxxx")
	}
	return errors.New(redactText(msg))
}

// redactText hides URL userinfo and password-like parameters in free text.
func redactText(s string) string {
	s = userinfoInText.ReplaceAllString(s, "${1}xxxxx@")
	return passwordArg.ReplaceAllString(s, "${1}xxxxx")
}

// Log sends go-redis' own log lines (a pool that cannot dial, say) to log,
// redacted, as structured warnings like every other line instead of plain
// text on stderr. go-redis' logger is process-wide: the first call sets it,
// later ones do nothing.
func Log(log *slog.Logger) {
	logOnce.Do(func() { redis.SetLogger(logger{log}) })
}

var logOnce sync.Once

type logger struct{ log *slog.Logger }

func (l logger) Printf(ctx context.Context, format string, v ...any) {
	l.log.WarnContext(ctx, "redis client", "message", redactText(fmt.Sprintf(format, v...)))
}
