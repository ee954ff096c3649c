// Package bus is the edge side of docs/bus.md: the NATS connection, the
// partition function, the signed table envelopes and the table watcher
// (tailor-tables bucket) with its on-disk cache, and the JetStream
// publisher behind telemetry.BusSink.
package bus

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"log"
	"net"
	"net/url"
	"os"
	"regexp"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/tailor-project/tailor/edge/internal/telemetry"
)

// Names of the contract (docs/bus.md).
const (
	TelemetryStream = "TAILOR_TELEMETRY"
	TelemetryPrefix = "tailor.tel."
	TablesBucket    = "tailor-tables"
	ClusterKey      = "cluster"
	PartKeyPrefix   = "part."
	MaxPartitions   = 256
	DefaultPop      = "default"
)

// ErrBus prefixes configuration and connection errors.
var ErrBus = errors.New("bus")

var popRE = regexp.MustCompile(`^[a-z0-9-]{1,32}$`)

// CheckPop validates --pop ([a-z0-9-]{1,32}).
func CheckPop(pop string) error {
	if !popRE.MatchString(pop) {
		return fmt.Errorf("--pop %q: want 1 to 32 characters of [a-z0-9-]", truncate(pop, 40))
	}
	return nil
}

// Partition is FNV-1a-32 of the canonical client prefix text, mod P
// (P in 1..MaxPartitions; any other P gives 0).
func Partition(clientPrefix string, P int) int {
	if P <= 1 {
		return 0
	}
	h := uint32(2166136261) // FNV-1a-32 inline: no hasher or []byte allocation per connection
	for i := 0; i < len(clientPrefix); i++ {
		h = (h ^ uint32(clientPrefix[i])) * 16777619
	}
	return int(h % uint32(P))
}

// Options are the --bus flags.
type Options struct {
	URLs         string      // --bus: nats://HOST:PORT[,nats://HOST:PORT...]
	User         string      // --bus-user ("" = no authentication)
	PasswordFile string      // --bus-password-file
	Name         string      // client name shown by the server
	Log          *log.Logger // connects and disconnects; default log.Default()
	// CAFile is --bus-ca: PEM CA certificate(s) that signed the bus
	// servers' certificates. Set, every connection is TLS (a nats:// URL
	// too: a server that does not offer TLS is refused, not spoken to in
	// clear text) and the server's certificate must verify against these
	// CAs for the URL's host (an IP host against the IP SANs). "" = nats://
	// as the server offers, tls:// against the system roots.
	CAFile string
	// ReconnectWait is the pause between reconnect attempts; default 1 s.
	ReconnectWait time.Duration
}

// maxPasswordBytes bounds --bus-password-file.
const maxPasswordBytes = 1024

// maxCABytes bounds --bus-ca: a CA bundle is a few KiB; a larger file is
// a wrong path (a log, a disk image), refused rather than read.
const maxCABytes = 1 << 20

// CheckURLs validates --bus: a comma-separated list of nats:// or tls://
// URLs with a host and a port.
func CheckURLs(s string) ([]string, error) {
	if s == "" {
		return nil, fmt.Errorf("--bus: empty")
	}
	var out []string
	for _, u := range strings.Split(s, ",") {
		u = strings.TrimSpace(u)
		p, err := url.Parse(u)
		if err != nil || (p.Scheme != "nats" && p.Scheme != "tls") || p.User != nil || (p.Path != "" && p.Path != "/") {
			return nil, fmt.Errorf("--bus %q: want nats://HOST:PORT (comma-separated for several)", truncate(u, 80))
		}
		if _, port, err := net.SplitHostPort(p.Host); err != nil || port == "" {
			return nil, fmt.Errorf("--bus %q: want nats://HOST:PORT (comma-separated for several)", truncate(u, 80))
		}
		out = append(out, u)
	}
	return out, nil
}

// ReadPassword reads --bus-password-file (the first line, at most 1 KiB).
func ReadPassword(path string) (string, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", fmt.Errorf("--bus-password-file: %v", err)
	}
	defer f.Close()
	buf := make([]byte, maxPasswordBytes+1)
	n, _ := f.Read(buf)
	if n > maxPasswordBytes {
		return "", fmt.Errorf("--bus-password-file %s: longer than %d bytes", path, maxPasswordBytes)
	}
	pw, _, _ := bytes.Cut(buf[:n], []byte("\n"))
	pw = bytes.TrimRight(pw, "\r")
	if len(pw) == 0 {
		return "", fmt.Errorf("--bus-password-file %s: empty", path)
	}
	return string(pw), nil
}

// ReadCA reads --bus-ca (at most 1 MiB, at least one PEM certificate)
// into a pool of roots.
func ReadCA(path string) (*x509.CertPool, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("--bus-ca: %v", err)
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, maxCABytes+1))
	if err != nil {
		return nil, fmt.Errorf("--bus-ca %s: %v", path, err)
	}
	if len(data) > maxCABytes {
		return nil, fmt.Errorf("--bus-ca %s: larger than %d bytes", path, maxCABytes)
	}
	// a bundle with a key in it (a CA's certificate and key concatenated):
	// the key does not belong on every edge, so the file is refused
	if bytes.Contains(data, []byte("PRIVATE KEY-----")) {
		return nil, fmt.Errorf("--bus-ca %s: holds a private key (want the CA certificate(s) only)", path)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(data) {
		return nil, fmt.Errorf("--bus-ca %s: no PEM certificate (want the CA certificate(s) that signed the bus servers' certificates)", path)
	}
	return pool, nil
}

// Connect opens the connection. It does not wait for the server: with no
// server reachable it returns at once and keeps trying (RetryOnFailedConnect,
// unlimited reconnects), so an edge starts without a bus.
func Connect(o Options) (*nats.Conn, error) {
	urls, err := CheckURLs(o.URLs)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrBus, err)
	}
	logger := o.Log
	if logger == nil {
		logger = log.Default()
	}
	wait := o.ReconnectWait
	if wait <= 0 {
		wait = time.Second
	}
	failed := &seenErrors{}
	opts := []nats.Option{
		nats.Name(o.Name),
		nats.RetryOnFailedConnect(true),
		nats.MaxReconnects(-1),
		nats.ReconnectWait(wait),
		nats.ReconnectJitter(wait/4, wait/4),
		nats.ConnectHandler(func(c *nats.Conn) {
			failed.reset()
			logger.Printf("bus: connected to %s", c.ConnectedUrlRedacted())
		}),
		nats.ReconnectHandler(func(c *nats.Conn) {
			failed.reset()
			logger.Printf("bus: reconnected to %s", c.ConnectedUrlRedacted())
		}),
		// Why an attempt failed (a certificate --bus-ca does not verify, a
		// server without TLS, a refused dial), once per distinct reason
		// until the next connection: without it a wrong --bus-ca showed only
		// "not reachable yet"; without the dedup a server down wrote a line
		// per attempt.
		nats.ReconnectErrHandler(func(_ *nats.Conn, err error) {
			if err != nil && failed.first(err.Error()) {
				logger.Printf("bus: cannot connect: %v", err)
			}
		}),
		nats.DisconnectErrHandler(func(_ *nats.Conn, err error) {
			if err != nil {
				logger.Printf("bus: disconnected: %v", err)
			} else {
				logger.Printf("bus: disconnected")
			}
		}),
		nats.ErrorHandler(func(_ *nats.Conn, sub *nats.Subscription, err error) {
			if sub != nil {
				logger.Printf("bus: error on %s: %v", sub.Subject, err)
			} else {
				logger.Printf("bus: error: %v", err)
			}
		}),
	}
	switch {
	case o.User != "" && o.PasswordFile == "":
		return nil, fmt.Errorf("%w: --bus-user needs --bus-password-file", ErrBus)
	case o.User == "" && o.PasswordFile != "":
		return nil, fmt.Errorf("%w: --bus-password-file needs --bus-user", ErrBus)
	case o.User != "":
		pw, err := ReadPassword(o.PasswordFile)
		if err != nil {
			return nil, fmt.Errorf("%w: %v", ErrBus, err)
		}
		opts = append(opts, nats.UserInfo(o.User, pw))
	}
	if o.CAFile != "" {
		// read once: a CA rotation takes a restart, as the password does
		pool, err := ReadCA(o.CAFile)
		if err != nil {
			return nil, fmt.Errorf("%w: %v", ErrBus, err)
		}
		// Secure: TLS even on a nats:// URL whose server does not require
		// it (nats.go then refuses the server rather than downgrade);
		// ServerName stays empty: nats.go sets it to each URL's host.
		opts = append(opts, nats.Secure(&tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}))
	}
	nc, err := nats.Connect(strings.Join(urls, ","), opts...)
	if err != nil {
		return nil, fmt.Errorf("%w: --bus %s: %v", ErrBus, o.URLs, err)
	}
	if !nc.IsConnected() {
		logger.Printf("bus: %s not reachable yet; retrying in the background", o.URLs)
	}
	return nc, nil
}

// seenErrors are the failed-attempt messages logged since the last
// connection (at most maxSeenErrors: several URLs each failing their own
// way are a handful; beyond the bound nothing more is logged until a
// connection).
type seenErrors struct {
	mu   sync.Mutex
	seen map[string]bool
}

const maxSeenErrors = 32

// first reports whether msg is new since the last reset (and records it).
func (s *seenErrors) first(msg string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.seen[msg] || len(s.seen) >= maxSeenErrors {
		return false
	}
	if s.seen == nil {
		s.seen = map[string]bool{}
	}
	s.seen[msg] = true
	return true
}

func (s *seenErrors) reset() {
	s.mu.Lock()
	s.seen = nil
	s.mu.Unlock()
}

// Publisher publishes telemetry batches to JetStream (telemetry.Publisher).
type Publisher struct {
	NC      *nats.Conn
	JS      jetstream.JetStream
	Timeout time.Duration // per publish; default 5 s
}

// NewPublisher wraps nc.
func NewPublisher(nc *nats.Conn) (*Publisher, error) {
	js, err := jetstream.New(nc)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrBus, err)
	}
	return &Publisher{NC: nc, JS: js}, nil
}

// ErrAway: not connected (the batch stays buffered).
var ErrAway = errors.New("bus not connected")

// JetStream error codes of a store that cannot take a message now but will
// later: the stream is full (discard NEW: "maximum bytes exceeded", "maximum
// messages exceeded"), the account's storage limit is reached, or the server
// is out of storage.
const (
	errCodeAccountResources     = 10002 // JSAccountResourcesExceededErr: the account's storage limit (HTTP 400)
	errCodeStoreFailed          = 10077 // JSStreamStoreFailedF: the stream's limits (discard NEW)
	errCodeInsufficientResource = 10023 // JSInsufficientResourcesErr (HTTP 503)
	errCodeStorageExceeded      = 10047 // JSStorageResourcesExceededErr
)

// classify maps a JetStream refusal to what BusSink does with the batch:
// telemetry.ErrBusFull when no room is left now (the stream, the account's
// or the server's storage: kept, retried, counted as full);
// telemetry.ErrBusUnavailable for any other 503 (JetStream cannot answer
// now, e.g. a cluster without its leader: kept, retried, counted apart);
// telemetry.ErrPublishRefused for the rest (refused for good: dropped and
// counted). Until 2026-12-07 the account's limit (10002, an HTTP 400) was a
// refusal for good, its batch dropped, and every 503 counted as full.
func classify(e *jetstream.APIError) error {
	switch e.ErrorCode {
	case errCodeAccountResources, errCodeStoreFailed, errCodeInsufficientResource, errCodeStorageExceeded:
		return telemetry.ErrBusFull
	}
	if e.Code == 503 {
		return telemetry.ErrBusUnavailable
	}
	return telemetry.ErrPublishRefused
}

// Publish sends data with the Nats-Msg-Id header and waits for the PubAck.
// A JetStream refusal wraps the sentinel classify gives it: a full stream
// (TAILOR_TELEMETRY discards nothing: it refuses the publish) or storage
// telemetry.ErrBusFull and an unavailable JetStream or no stream for the
// subject telemetry.ErrBusUnavailable (the batch stays buffered), anything
// else (e.g. a message over the size limit) telemetry.ErrPublishRefused
// (publishError).
func (p *Publisher) Publish(ctx context.Context, subject, msgID string, data []byte) error {
	if !p.NC.IsConnected() {
		return ErrAway
	}
	t := p.Timeout
	if t <= 0 {
		t = 5 * time.Second
	}
	ctx, cancel := context.WithTimeout(ctx, t)
	defer cancel()
	_, err := p.JS.Publish(ctx, subject, data, jetstream.WithMsgID(msgID))
	return publishError(subject, err)
}

// publishError maps what JetStream's Publish returned to BusSink's
// sentinels: an API error as classify says; no stream answering the
// subject (nats.go's ErrNoStreamResponse after its retries on no
// responders: the stream is not created yet, e.g. between a manager's
// cluster document and its stream, or it stores another partition count's
// subjects) telemetry.ErrBusUnavailable: kept, retried and counted, while
// the sink re-forms the batch once the edge learns the new partition count
// (until 2026-12-07 it was returned as it was: kept and retried, counted
// nowhere); a message over the server's max_payload
// telemetry.ErrPublishRefused. Anything else (a timeout, the connection
// lost) as it is: kept and retried.
func publishError(subject string, err error) error {
	if err == nil {
		return nil
	}
	var apiErr *jetstream.APIError
	if errors.As(err, &apiErr) {
		return fmt.Errorf("%w: %s: %v", classify(apiErr), subject, err)
	}
	if errors.Is(err, jetstream.ErrNoStreamResponse) || errors.Is(err, nats.ErrNoResponders) {
		return fmt.Errorf("%w: %s: no stream stores the subject (not created yet, or set up for another partition count): %v",
			telemetry.ErrBusUnavailable, subject, err)
	}
	if errors.Is(err, nats.ErrMaxPayload) {
		return fmt.Errorf("%w: %s: %v", telemetry.ErrPublishRefused, subject, err)
	}
	return err
}

// MaxPayload is the server's message size limit (0 = not connected yet).
func (p *Publisher) MaxPayload() int64 { return p.NC.MaxPayload() }

func truncate(s string, n int) string {
	if len(s) > n {
		return s[:n] + "..."
	}
	return s
}
