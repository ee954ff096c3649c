package agent

import (
	"io"
	"os"
	"time"

	"github.com/tailor-project/tailor/edge/internal/telemetry"
)

// Config is everything tailor-agent run takes.
type Config struct {
	// Table is a decision-table file path or http(s) URL. Default "": nothing
	// is tuned until a table is installed (or the pinned maps hold one).
	Table string
	// Poll is how often the table source is re-read. Default 5s.
	Poll time.Duration
	// TelemetryOut is a file for JSON-line batches, "-" for stdout. Default "" (off).
	TelemetryOut string
	// TelemetryURL is a manager endpoint for batched POSTs. Default "" (off).
	TelemetryURL string
	// Token is the bearer token for TelemetryURL. Default: $TAILOR_TOKEN.
	Token string
	// TelemetryLimit bounds the HTTP buffer in records. Default 50000.
	TelemetryLimit int
	// TelemetryBufferBytes bounds the HTTP buffer in estimated encoded bytes. Default 16 MiB.
	TelemetryBufferBytes int
	// TablePubKey is a PEM file of Ed25519 public keys; every table must be
	// signed by one of them. Default "": unsigned tables accepted (warned).
	TablePubKey string
	// ManagerCA is a PEM CA bundle for https:// table and telemetry URLs.
	// Default "": the system roots.
	ManagerCA string
	// Source is the agent instance id in telemetry. Default "agent-<hostname>".
	Source string
	// FullAddress reports client_addr and a full-length client_prefix.
	// Default false: client_prefix is the /24 (IPv4) or /64 (IPv6).
	FullAddress bool
	// CgroupRoot is the cgroup v2 mount. Default /sys/fs/cgroup/unified.
	CgroupRoot string
	// Cgroup is the cgroup to attach to (absolute, or relative to CgroupRoot).
	// Default "": create CgroupRoot/tailor-agent-<pid> and remove it on exit.
	Cgroup string
	// Pin is a directory for a private bpffs holding the maps and the link,
	// so a restarted agent keeps tuning. Default "" (no pinning).
	Pin string
	// FlushEvery is the ring-buffer reader deadline and sink flush period. Default 100ms.
	FlushEvery time.Duration
	// WakeBytes forces a reader wake-up once this much is queued. Default 65536.
	WakeBytes uint32
	// TrackRate enables RTT_CB for the maximum delivery rate. Default true (via NoTrackRate=false).
	NoTrackRate bool
	// CostHist records per-callback cost histograms (benchmarks). Default false.
	CostHist bool
	// NoTelemetry disables the close-time events entirely. Default false.
	NoTelemetry bool
	// Metrics is the HOST:PORT of a read-only Prometheus /metrics listener.
	// Default "" (off).
	Metrics string
	// Log receives human-readable status lines. Default os.Stderr.
	Log io.Writer

	// Bus is --bus nats://HOST:PORT[,...]: tables and telemetry over NATS
	// JetStream (docs/bus.md). Default "" (HTTP / files).
	Bus string
	// BusUser and BusPasswordFile authenticate to the bus. Default "" (none).
	BusUser, BusPasswordFile string
	// BusCA is --bus-ca: PEM CA certificate(s) that signed the bus servers'
	// certificates; set, TLS is required and the server verified. Default
	// "" (tls:// URLs against the system roots).
	BusCA string
	// Pop is the telemetry subject's point of presence. Default "default".
	Pop string
	// TableCache is a directory for the last good tables (--bus), loaded at
	// start before the bus is contacted. Default "" (none).
	TableCache string
}

func (c *Config) defaults() {
	if c.Poll <= 0 {
		c.Poll = 5 * time.Second
	}
	if c.Token == "" {
		c.Token = os.Getenv("TAILOR_TOKEN")
	}
	if c.Source == "" {
		host, _ := os.Hostname()
		c.Source = "agent-" + host
	}
	c.Source = telemetry.SanitizeSource(c.Source)
	if c.CgroupRoot == "" {
		c.CgroupRoot = "/sys/fs/cgroup/unified"
	}
	if c.FlushEvery <= 0 {
		c.FlushEvery = 100 * time.Millisecond
	}
	if c.WakeBytes == 0 {
		c.WakeBytes = 65536
	}
	if c.Log == nil {
		c.Log = os.Stderr
	}
}
