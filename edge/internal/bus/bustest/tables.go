package bustest

import (
	"crypto/ed25519"
	"crypto/rand"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"os"
	"path/filepath"
	"testing"

	"github.com/tailor-project/tailor/edge/internal/knobs"
	"github.com/tailor-project/tailor/edge/internal/rules"
)

// Key is a table signing key with its --table-pubkey file.
type Key struct {
	Priv    ed25519.PrivateKey
	ID      string
	PubFile string
}

// NewKey makes a key and writes its public half as a PEM file in a
// temporary directory.
func NewKey(t testing.TB) Key {
	t.Helper()
	pub, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	der, err := x509.MarshalPKIXPublicKey(pub)
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "table.pub")
	if err := os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
	return Key{Priv: priv, ID: rules.KeyID(pub), PubFile: path}
}

// Envelope is a signed table envelope of body for partition p.
func (k Key) Envelope(t testing.TB, p int, body []byte) []byte {
	t.Helper()
	b, err := json.Marshal(map[string]any{"schema": "tailor.table-envelope/v1", "partition": p, "key_id": k.ID,
		"signature": base64.StdEncoding.EncodeToString(ed25519.Sign(k.Priv, body)),
		"body":      base64.StdEncoding.EncodeToString(body)})
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// Cluster is a cluster document with P partitions.
func Cluster(P int) []byte {
	return []byte(`{"schema": "tailor.cluster/v1", "partitions": ` + itoa(P) + `, "salt": "00112233445566778899aabbccddeeff"}`)
}

func itoa(n int) string { b, _ := json.Marshal(n); return string(b) }

// Table is a valid table document of version: every knob at its default,
// and (when prefix is not "") prefix routed to a group with config values.
func Table(t testing.TB, version int, prefix string, values map[string]any) []byte {
	t.Helper()
	reg, err := knobs.Default()
	if err != nil {
		t.Fatal(err)
	}
	def := reg.ConfigID(map[string]any{})
	configs := map[string]any{def: map[string]any{}}
	groups, rs := []any{}, []any{}
	if prefix != "" {
		id := reg.ConfigID(values)
		configs[id] = values
		groups = append(groups, map[string]any{"id": "g", "choices": []any{map[string]any{"config": id, "p": 1.0}}})
		rs = append(rs, map[string]any{"prefix": prefix, "group": "g"})
	}
	b, err := json.Marshal(map[string]any{"schema": "tailor.decision-table/v1", "version": version, "generated_at": 1.0,
		"default": def, "configs": configs, "groups": groups, "rules": rs})
	if err != nil {
		t.Fatal(err)
	}
	return b
}
