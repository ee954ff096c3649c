// Package bustest runs a real nats-server with JetStream for tests
// (skipped when the binary is missing), creates the contract's stream and
// bucket as the managers do in production, and holds the edge user's
// permissions (EdgePermissions).
package bustest

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// EdgePermissions is the nats-server permissions block of the "edge" user
// (docs/bus.md, Security): publish telemetry and read the tailor-tables
// bucket through an ordered-consumer watch (nats.go's KV Watch): stream
// info, consumer create (the filtered-subject form, nats-server >= 2.9)
// and delete, flow-control replies; and receive on its inboxes (PubAcks,
// API replies, the watch's deliveries). Nothing else: no reading of
// telemetry, no writing of the bucket.
const EdgePermissions = `{
  publish: {
    allow: [
      "tailor.tel.>",
      "$JS.API.STREAM.INFO.KV_tailor-tables",
      "$JS.API.CONSUMER.CREATE.KV_tailor-tables.>",
      "$JS.API.CONSUMER.DELETE.KV_tailor-tables.>",
      "$JS.FC.KV_tailor-tables.>"
    ]
  }
  subscribe: {
    allow: ["_INBOX.>"]
  }
}`

// Users are the test server's credentials.
const (
	ManagerUser = "manager"
	EdgeUser    = "edge"
)

// Server is one nats-server process.
type Server struct {
	Port     int
	StoreDir string
	Auth     bool   // users manager/edge (passwords in ManagerPass/EdgePass)
	Dir      string // config, logs, password files
	// MaxPayload is the server's max_payload (0: the server's default, 1 MB).
	MaxPayload int
	// StreamMaxBytes is TAILOR_TELEMETRY's max_bytes in Setup (0: none).
	StreamMaxBytes int64
	// Partitions is P of TAILOR_TELEMETRY's subjects in Setup (Subjects).
	Partitions int
	// TLS: the server requires TLS with a certificate of CAFile's CA.
	TLS bool

	ManagerPass, EdgePass string

	t    testing.TB
	bin  string
	mu   sync.Mutex
	cmd  *exec.Cmd
	done chan struct{}
	log  *os.File
}

// URL is nats://127.0.0.1:<port> (with TLS too: nats.go upgrades when the
// server requires it).
func (s *Server) URL() string { return fmt.Sprintf("nats://127.0.0.1:%d", s.Port) }

// Binary is the nats-server to run: $TAILOR_NATS_SERVER or nats-server on
// PATH ("" when neither exists).
func Binary() string {
	if b := os.Getenv("TAILOR_NATS_SERVER"); b != "" {
		return b
	}
	b, err := exec.LookPath("nats-server")
	if err != nil {
		return ""
	}
	return b
}

// Start runs nats-server -js on a free loopback port with a temporary
// store; it is killed (and waited for) in t.Cleanup. auth: with the users
// manager (everything) and edge (EdgePermissions).
func Start(t testing.TB, auth bool) *Server {
	t.Helper()
	return StartWith(t, Options{Auth: auth})
}

// Options of StartWith.
type Options struct {
	Auth           bool  // users manager and edge
	MaxPayload     int   // max_payload; 0 = the default
	StreamMaxBytes int64 // the telemetry stream's max_bytes in Setup; 0 = none
	// Partitions: Setup gives the stream the production subjects for P
	// partitions (Subjects); 0 = tailor.tel.> (every subject the edge user
	// may publish on: the stream before 2026-12-07, which refused none).
	Partitions int
	// TLS: a CA and a server certificate it signed for 127.0.0.1 and
	// localhost are made in Dir; the server requires TLS from every client
	// (CAFile is the CA; Connect trusts it).
	TLS bool
}

// StartWith is Start with options.
func StartWith(t testing.TB, o Options) *Server {
	t.Helper()
	auth := o.Auth
	bin := Binary()
	if bin == "" {
		t.Skip("nats-server not found (install Debian's nats-server or set TAILOR_NATS_SERVER): the bus tests need a real server")
	}
	s := &Server{t: t, bin: bin, Port: FreePort(t), StoreDir: t.TempDir(), Dir: t.TempDir(), Auth: auth, MaxPayload: o.MaxPayload, StreamMaxBytes: o.StreamMaxBytes, Partitions: o.Partitions, TLS: o.TLS}
	if o.TLS {
		writeTLS(t, s.Dir) // once: a Restart keeps the CA its clients trust
	}
	if auth {
		s.ManagerPass, s.EdgePass = "manager-secret-1", "edge-secret-2"
		for name, pw := range map[string]string{"manager.pw": s.ManagerPass, "edge.pw": s.EdgePass} {
			if err := os.WriteFile(filepath.Join(s.Dir, name), []byte(pw+"\n"), 0o600); err != nil {
				t.Fatal(err)
			}
		}
	}
	s.Restart()
	t.Cleanup(s.Stop)
	return s
}

// PasswordFile is the file holding user's password (auth servers).
func (s *Server) PasswordFile(user string) string { return filepath.Join(s.Dir, user+".pw") }

func (s *Server) config() string {
	c := fmt.Sprintf("listen: \"127.0.0.1:%d\"\njetstream { store_dir: %q }\n", s.Port, s.StoreDir)
	if s.MaxPayload > 0 {
		c += fmt.Sprintf("max_payload: %d\n", s.MaxPayload)
	}
	if s.TLS {
		c += fmt.Sprintf("tls {\n  cert_file: %q\n  key_file: %q\n  timeout: 5\n}\n",
			filepath.Join(s.Dir, certFileName), filepath.Join(s.Dir, keyFileName))
	}
	if s.Auth {
		c += fmt.Sprintf(`authorization {
  users = [
    { user: %q, password: %q }
    { user: %q, password: %q, permissions: %s }
  ]
}
`, ManagerUser, s.ManagerPass, EdgeUser, s.EdgePass, EdgePermissions)
	}
	return c
}

// Restart starts the server (again) on the same port and store directory.
func (s *Server) Restart() {
	s.t.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cmd != nil {
		s.t.Fatal("bustest: server already running")
	}
	conf := filepath.Join(s.Dir, "nats.conf")
	if err := os.WriteFile(conf, []byte(s.config()), 0o600); err != nil {
		s.t.Fatal(err)
	}
	lf, err := os.OpenFile(filepath.Join(s.Dir, "nats.log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		s.t.Fatal(err)
	}
	cmd := exec.Command(s.bin, "-c", conf)
	cmd.Stdout, cmd.Stderr = lf, lf
	if err := cmd.Start(); err != nil {
		_ = lf.Close()
		s.t.Fatalf("bustest: start nats-server: %v", err)
	}
	s.cmd, s.log, s.done = cmd, lf, make(chan struct{})
	done := s.done
	go func() { _ = cmd.Wait(); close(done) }()
	deadline := time.Now().Add(10 * time.Second)
	for {
		c, err := net.DialTimeout("tcp", fmt.Sprintf("127.0.0.1:%d", s.Port), 200*time.Millisecond)
		if err == nil {
			_ = c.Close()
			break
		}
		select {
		case <-done:
			s.t.Fatalf("bustest: nats-server exited at start:\n%s", s.Log())
		default:
		}
		if time.Now().After(deadline) {
			s.t.Fatalf("bustest: nats-server not listening after 10 s:\n%s", s.Log())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// Stop kills the server and waits for it (idempotent).
func (s *Server) Stop() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cmd == nil {
		return
	}
	_ = s.cmd.Process.Kill()
	<-s.done
	_ = s.log.Close()
	s.cmd = nil
}

// Log is the server's log so far.
func (s *Server) Log() string {
	b, _ := os.ReadFile(filepath.Join(s.Dir, "nats.log"))
	return string(b)
}

// Violations are the permission violations the server logged.
func (s *Server) Violations() []string {
	var out []string
	sc := bufio.NewScanner(strings.NewReader(s.Log()))
	for sc.Scan() {
		if strings.Contains(sc.Text(), "Permissions Violation") {
			out = append(out, sc.Text())
		}
	}
	return out
}

// Connect is a manager connection (closed in t.Cleanup); with TLS it
// trusts CAFile.
func (s *Server) Connect(t testing.TB) *nats.Conn {
	t.Helper()
	var opts []nats.Option
	if s.Auth {
		opts = append(opts, nats.UserInfo(ManagerUser, s.ManagerPass))
	}
	if s.TLS {
		opts = append(opts, nats.RootCAs(s.CAFile()))
	}
	nc, err := nats.Connect(s.URL(), opts...)
	if err != nil {
		t.Fatalf("bustest: connect: %v", err)
	}
	t.Cleanup(nc.Close)
	return nc
}

// Subjects are TAILOR_TELEMETRY's subjects in production for a cluster of
// P partitions (tailor.bus.setup.stream_subjects): tailor.tel.*.<p> for
// p < P, what the part-<p> consumers read; a publish on any other subject
// finds no stream (nats.go: jetstream.ErrNoStreamResponse). P <= 0:
// tailor.tel.> (the stream before 2026-12-07).
func Subjects(P int) []string {
	if P <= 0 {
		return []string{"tailor.tel.>"}
	}
	out := make([]string, P)
	for p := range out {
		out[p] = fmt.Sprintf("tailor.tel.*.%d", p)
	}
	return out
}

// Setup creates what the managers create in production: the stream
// TAILOR_TELEMETRY (subjects Subjects(Partitions); discard new, no max
// age: a full stream refuses the publish; max_bytes StreamMaxBytes) and
// the bucket tailor-tables. It returns the bucket.
func (s *Server) Setup(t testing.TB) (jetstream.JetStream, jetstream.KeyValue) {
	t.Helper()
	js, err := jetstream.New(s.Connect(t))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := js.CreateOrUpdateStream(ctx, jetstream.StreamConfig{Name: "TAILOR_TELEMETRY", Subjects: Subjects(s.Partitions),
		Storage: jetstream.FileStorage, Duplicates: 2 * time.Minute, MaxMsgSize: 4 << 20, Discard: jetstream.DiscardNew,
		MaxBytes: s.StreamMaxBytes}); err != nil {
		t.Fatalf("bustest: stream: %v", err)
	}
	kv, err := js.CreateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: "tailor-tables", History: 64, Storage: jetstream.FileStorage})
	if err != nil {
		t.Fatalf("bustest: bucket: %v", err)
	}
	return js, kv
}

// SetPartitions moves TAILOR_TELEMETRY to Subjects(P), as a shard's start
// does when the cluster document names another P (the messages it holds on
// other subjects stay: nats-server keeps them; the shards purge them).
func SetPartitions(t testing.TB, js jetstream.JetStream, P int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	st, err := js.Stream(ctx, "TAILOR_TELEMETRY")
	if err != nil {
		t.Fatalf("bustest: stream: %v", err)
	}
	cfg := st.CachedInfo().Config
	cfg.Subjects = Subjects(P)
	if _, err := js.UpdateStream(ctx, cfg); err != nil {
		t.Fatalf("bustest: stream subjects for %d partitions: %v", P, err)
	}
}

// FreePort is a TCP port free on 127.0.0.1 right now.
func FreePort(t testing.TB) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}
