package agent_test

import (
	"bytes"
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/tailor-project/tailor/edge/internal/agent"
	"github.com/tailor-project/tailor/edge/internal/bus/bustest"
)

type lockedBuf struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuf) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuf) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

func TestAgentBusFlags(t *testing.T) {
	cases := []struct {
		cfg  agent.Config
		want string
	}{
		{agent.Config{Bus: "nats://127.0.0.1:1"}, "--table-pubkey is required with --bus"},
		{agent.Config{Bus: "nats://127.0.0.1:1", TablePubKey: "k", Table: "t.json"}, "not with --table"},
		{agent.Config{Bus: "nats://127.0.0.1:1", TablePubKey: "k", TelemetryOut: "-"}, "not with --table"},
		{agent.Config{Bus: "localhost:4222", TablePubKey: "k"}, "--bus"},
		{agent.Config{Bus: "nats://127.0.0.1:1", TablePubKey: "k", Pop: "A B"}, "--pop"},
		{agent.Config{BusUser: "edge"}, "--bus-user needs --bus"},
		{agent.Config{TableCache: "cache"}, "--table-cache needs --bus"},
		{agent.Config{BusCA: "ca.pem"}, "--bus-ca needs --bus"},
		{agent.Config{Bus: "nats://127.0.0.1:1", TablePubKey: "k", BusUser: "edge"}, "--bus-password-file"},
	}
	for _, c := range cases {
		if err := c.cfg.CheckBus(); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%+v: %v, want an error naming %q", c.cfg, err, c.want)
		}
	}
}

// TestAgentBusCA: --bus-ca reaches the connection: a missing file is one
// error naming it, and with the server's CA the agent's connection to a
// server that requires TLS comes up (no privileges: no BPF is loaded).
func TestAgentBusCA(t *testing.T) {
	srv := bustest.StartWith(t, bustest.Options{Auth: true, TLS: true})
	k := bustest.NewKey(t)
	logs := &lockedBuf{}
	cfg := agent.Config{Bus: srv.URL(), TablePubKey: k.PubFile, BusUser: bustest.EdgeUser, BusPasswordFile: srv.PasswordFile(bustest.EdgeUser),
		BusCA: filepath.Join(t.TempDir(), "none.pem"), Log: logs}
	if b, err := agent.OpenBus(&cfg); err == nil || !strings.Contains(err.Error(), "--bus-ca") {
		if b != nil {
			b.Close()
		}
		t.Fatalf("missing --bus-ca file: %v, want an error naming --bus-ca", err)
	}
	cfg.BusCA = srv.CAFile()
	b, err := agent.OpenBus(&cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	waitFor(t, "connected over TLS", b.NC.IsConnected)
	if st, err := b.NC.TLSConnectionState(); err != nil || len(st.VerifiedChains) == 0 {
		t.Fatalf("not TLS with a verified chain: %v; log:\n%s", err, logs.String())
	}
}

// TestAgentBusTables: the agent installs the composition of the
// partitions' tables (version = the sum), and a restarted agent with the
// bus down installs it from the cache.
func TestAgentBusTables(t *testing.T) {
	privileged(t)
	srv := bustest.Start(t, false)
	_, kv := srv.Setup(t)
	k := bustest.NewKey(t)
	cache := t.TempDir()
	logs := &lockedBuf{}
	open := func(url string) (*agent.Agent, func()) {
		cfg := agent.Config{Bus: url, TablePubKey: k.PubFile, TableCache: cache, Log: logs}
		b, err := agent.OpenBus(&cfg)
		if err != nil {
			t.Fatal(err)
		}
		a, err := agent.Open(cfg)
		if err != nil {
			b.Close()
			t.Fatal(err)
		}
		a.UseBus(b)
		stop, err := a.Start(context.Background(), b.Sink)
		if err != nil {
			t.Fatal(err)
		}
		return a, func() {
			stop()
			b.Close()
			if err := a.Close(); err != nil {
				t.Errorf("close: %v", err)
			}
		}
	}
	a, stop := open(srv.URL())
	ctx := context.Background()
	cwnd := map[string]any{"tcp.initial_cwnd": int64(8)}
	for key, v := range map[string][]byte{
		"cluster": bustest.Cluster(2),
		"part.0":  k.Envelope(t, 0, bustest.Table(t, 2, "10.0.1.0/24", cwnd)),
		"part.1":  k.Envelope(t, 1, bustest.Table(t, 3, "", nil)),
	} {
		if _, err := kv.Put(ctx, key, v); err != nil {
			t.Fatal(err)
		}
	}
	waitFor(t, "composed version 5", func() bool { return a.Version() == 5 })
	stop()
	srv.Stop()
	a2, stop2 := open(srv.URL())
	defer stop2()
	if v := a2.Version(); v != 5 {
		t.Fatalf("from the cache: version %d, want 5; log:\n%s", v, logs.String())
	}
	if !strings.Contains(logs.String(), "tables from cache") {
		t.Errorf("log:\n%s", logs.String())
	}
	// a composed version names one table: the sum of the partitions' versions
	// can fall back (a manager restarting its versions) and come back to a
	// value it had with other rules; the agent's versions keep rising (until
	// 2026-12-07 they were the sum: 4, then 5 again for another table, and a
	// closing connection's group was read from the wrong one)
	srv.Restart()
	for i, part0 := range [][]byte{bustest.Table(t, 1, "10.0.2.0/24", cwnd), bustest.Table(t, 2, "10.0.3.0/24", cwnd)} {
		env := k.Envelope(t, 0, part0)
		waitFor(t, "the bus back", func() bool { _, err := kv.Put(ctx, "part.0", env); return err == nil })
		want := int64(6 + i)
		waitFor(t, fmt.Sprintf("composed version %d", want), func() bool { return a2.Version() == want })
	}
}
