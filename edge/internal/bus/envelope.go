package bus

import (
	"bytes"
	"crypto/ed25519"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"regexp"
	"strconv"

	"github.com/tailor-project/tailor/edge/internal/rules"
)

// Schemas of the bucket's values.
const (
	EnvelopeSchema = "tailor.table-envelope/v1"
	ClusterSchema  = "tailor.cluster/v1"
)

// MaxEnvelopeBytes bounds an envelope (and a cached one): the table limit.
const MaxEnvelopeBytes = rules.MaxTableBytes

// maxClusterBytes bounds the cluster document.
const maxClusterBytes = 4096

// maxKeyID bounds an envelope's key_id.
const maxKeyID = 64

// ErrEnvelope wraps every refusal of an envelope or cluster document.
var ErrEnvelope = errors.New("table envelope refused")

var (
	hexRE   = regexp.MustCompile(`^[0-9a-f]{32}$`)
	keyIDRE = regexp.MustCompile(`^[0-9a-zA-Z._-]{1,64}$`)
)

func refuse(field, format string, args ...any) error {
	return fmt.Errorf("%w: field %s: %s", ErrEnvelope, field, fmt.Sprintf(format, args...))
}

// strictDecode decodes one JSON document (numbers as json.Number).
func strictDecode(data []byte, v any) error {
	d := json.NewDecoder(bytes.NewReader(data))
	d.UseNumber()
	if err := d.Decode(v); err != nil {
		return err
	}
	if _, err := d.Token(); err != io.EOF {
		return errors.New("data after the document")
	}
	return nil
}

// OpenEnvelope checks an envelope for partition want (the key's) and
// returns the verified table body: size, schema, partition, key id (one
// of keys), and the Ed25519 signature over the decoded body. The body
// itself is not parsed here.
func OpenEnvelope(data []byte, want int, keys []rules.TableKey) ([]byte, error) {
	if len(data) > MaxEnvelopeBytes {
		return nil, refuse("(root)", "%d bytes, larger than %d", len(data), MaxEnvelopeBytes)
	}
	var env struct {
		Schema    *string      `json:"schema"`
		Partition *json.Number `json:"partition"`
		KeyID     *string      `json:"key_id"`
		Signature *string      `json:"signature"`
		Body      *string      `json:"body"`
	}
	if err := strictDecode(data, &env); err != nil {
		return nil, refuse("(root)", "not a JSON object: %v", err)
	}
	switch {
	case env.Schema == nil || *env.Schema != EnvelopeSchema:
		return nil, refuse("schema", "want %q", EnvelopeSchema)
	case env.Partition == nil:
		return nil, refuse("partition", "missing")
	case env.KeyID == nil || !keyIDRE.MatchString(*env.KeyID):
		return nil, refuse("key_id", "want 1 to %d characters of [0-9a-zA-Z._-]", maxKeyID)
	case env.Signature == nil:
		return nil, refuse("signature", "missing")
	case env.Body == nil:
		return nil, refuse("body", "missing")
	}
	p, err := strconv.Atoi(env.Partition.String())
	if err != nil || p < 0 || p >= MaxPartitions {
		return nil, refuse("partition", "%q: want an integer in 0..%d", truncate(env.Partition.String(), 20), MaxPartitions-1)
	}
	if p != want {
		return nil, refuse("partition", "%d, but the key is part.%d", p, want)
	}
	sig, err := base64.StdEncoding.DecodeString(*env.Signature)
	if err != nil || len(sig) != ed25519.SignatureSize {
		return nil, refuse("signature", "not the base64 of %d bytes", ed25519.SignatureSize)
	}
	body, err := base64.StdEncoding.DecodeString(*env.Body)
	if err != nil {
		return nil, refuse("body", "not base64: %v", err)
	}
	for _, k := range keys {
		if k.ID != *env.KeyID {
			continue
		}
		if !ed25519.Verify(k.Pub, body, sig) {
			return nil, refuse("signature", "does not verify with key %s", k.ID)
		}
		return body, nil
	}
	return nil, refuse("key_id", "%q is not a --table-pubkey key", *env.KeyID)
}

// Cluster is the cluster document (key "cluster").
type Cluster struct {
	Partitions int
	Salt       string
}

// ParseCluster checks the cluster document: schema, partitions 1..256,
// salt 32 hex digits.
func ParseCluster(data []byte) (Cluster, error) {
	var c Cluster
	if len(data) > maxClusterBytes {
		return c, refuse("cluster", "%d bytes, larger than %d", len(data), maxClusterBytes)
	}
	var doc struct {
		Schema     *string      `json:"schema"`
		Partitions *json.Number `json:"partitions"`
		Salt       *string      `json:"salt"`
	}
	if err := strictDecode(data, &doc); err != nil {
		return c, refuse("cluster", "not a JSON object: %v", err)
	}
	if doc.Schema == nil || *doc.Schema != ClusterSchema {
		return c, refuse("cluster.schema", "want %q", ClusterSchema)
	}
	if doc.Partitions == nil {
		return c, refuse("cluster.partitions", "missing")
	}
	n, err := strconv.Atoi(doc.Partitions.String())
	if err != nil || n < 1 || n > MaxPartitions {
		return c, refuse("cluster.partitions", "%q: want an integer in 1..%d", truncate(doc.Partitions.String(), 20), MaxPartitions)
	}
	if doc.Salt == nil || !hexRE.MatchString(*doc.Salt) {
		return c, refuse("cluster.salt", "want 32 lower-case hex digits")
	}
	return Cluster{Partitions: n, Salt: *doc.Salt}, nil
}

// partKey parses "part.<p>" (decimal, no leading zero, 0..255).
func partKey(key string) (int, bool) {
	s, ok := bytes.CutPrefix([]byte(key), []byte(PartKeyPrefix))
	if !ok || len(s) == 0 || len(s) > 3 || (len(s) > 1 && s[0] == '0') {
		return 0, false
	}
	p, err := strconv.Atoi(string(s))
	if err != nil || p < 0 || p >= MaxPartitions {
		return 0, false
	}
	return p, true
}
