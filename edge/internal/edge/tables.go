package edge

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"time"

	"github.com/tailor-project/tailor/edge/internal/bus"
	"github.com/tailor-project/tailor/edge/internal/rules"
)

// httpCacheFile holds, in --table-cache, the last table the manager's URL
// served (an envelope: body, signature and key id; partition 0).
const httpCacheFile = "http-table.envelope.json"

func (s *Server) setupTables() error {
	if s.busTables != nil {
		if err := s.install(defaultTable(s.reg)); err != nil {
			return err
		}
		s.busTables.OnChange(s.installPartitions)
		return nil
	}
	if s.cfg.Table == "" {
		return s.install(defaultTable(s.reg))
	}
	s.tables = &rules.Source{Loc: s.cfg.Table, Client: s.client, Token: s.cfg.Token}
	if s.cfg.TablePubKey != "" {
		keys, err := rules.LoadTableKeys(s.cfg.TablePubKey)
		if err != nil {
			return fmt.Errorf("%w: --table-pubkey: %v", ErrConfig, err)
		}
		s.tables.Keys = keys
	}
	err := s.Reload(context.Background())
	if err != nil && !s.tables.IsURL() {
		return err // a bad table file on the command line stops the edge
	}
	if s.cfg.TablePubKey == "" {
		s.Log.Printf("edge: warning: no --table-pubkey: tables from %s are accepted unsigned", s.cfg.Table)
	}
	if err == nil {
		return nil
	}
	// the manager is down (or serves a refused table): start anyway and
	// keep polling
	s.Log.Printf("%v", err)
	if s.cfg.TableCache != "" {
		if err := s.loadHTTPCache(); err == nil {
			return nil
		} else if !errors.Is(err, os.ErrNotExist) {
			s.Log.Printf("edge: --table-cache: %v", err)
		}
	}
	s.Log.Printf("edge: serving the built-in default table until %s answers", s.cfg.Table)
	return s.install(defaultTable(s.reg))
}

// Reload fetches the table; an invalid, unsigned (with --table-pubkey) or
// unreachable table leaves the last good one in force and returns the
// error (a *rules.FieldError inside for an invalid one). A refused table
// is reported once: the source does not return the same body again.
func (s *Server) Reload(ctx context.Context) error {
	data, err := s.tables.Fetch(ctx)
	if err != nil {
		if errors.Is(err, rules.ErrRefused) {
			s.refused.Add(1)
		} else {
			s.fetchErrors.Add(1)
		}
		return fmt.Errorf("%w: %s: %w", ErrTable, s.cfg.Table, err)
	}
	if data == nil {
		return nil
	}
	if err := s.LoadTable(data); err != nil {
		return err
	}
	if s.cfg.TableCache != "" && s.tables.IsURL() {
		if err := s.writeHTTPCache(data); err != nil {
			s.Log.Printf("edge: --table-cache: %v", err)
		}
	}
	return nil
}

type cacheEnvelope struct {
	Schema    string `json:"schema"`
	Partition int    `json:"partition"`
	KeyID     string `json:"key_id"`
	Signature string `json:"signature"`
	Body      []byte `json:"body"` // base64
}

func (s *Server) writeHTTPCache(data []byte) error {
	if err := os.MkdirAll(s.cfg.TableCache, 0o700); err != nil {
		return err
	}
	env, err := json.Marshal(cacheEnvelope{Schema: bus.EnvelopeSchema, KeyID: s.tables.KeyID, Signature: s.tables.Signature, Body: data})
	if err != nil {
		return err
	}
	return bus.WriteFileAtomic(filepath.Join(s.cfg.TableCache, httpCacheFile), env)
}

// loadHTTPCache installs the cached table (its signature verified again
// with --table-pubkey).
func (s *Server) loadHTTPCache() error {
	path := filepath.Join(s.cfg.TableCache, httpCacheFile)
	env, err := bus.ReadBounded(path, bus.MaxEnvelopeBytes)
	if err != nil {
		return err
	}
	var body []byte
	if len(s.tables.Keys) > 0 {
		body, err = bus.OpenEnvelope(env, 0, s.tables.Keys)
	} else {
		var ce cacheEnvelope
		err = json.Unmarshal(env, &ce)
		body = ce.Body
	}
	if err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	if err := s.LoadTable(body); err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	s.Log.Printf("edge: table from cache %s: version %d (until %s answers)", path, s.Plan().Table.Version, s.cfg.Table)
	return nil
}

// LoadTable validates, provisions and atomically installs a table document.
func (s *Server) LoadTable(data []byte) error {
	t, err := rules.Parse(data, s.reg)
	if err != nil {
		s.refused.Add(1)
		return fmt.Errorf("%w: rejected: %w", ErrTable, err)
	}
	return s.install(t)
}

// TablesRefused is the number of tables refused so far (invalid, unsigned
// or badly signed with --table-pubkey, too large; with --bus: envelopes).
func (s *Server) TablesRefused() int64 {
	n := s.refused.Load()
	if s.busTables != nil {
		n += s.busTables.Refused()
	}
	return n
}

func (s *Server) provisionTable(t *rules.Table) *Plan {
	p := provision(t, s.reg, s.base, s.h1)
	for id, cc := range p.Configs {
		for _, what := range cc.Inexact {
			s.Log.Printf("edge: table %d config %s: %s (x/net/http2 limit)", t.Version, id, what)
		}
	}
	return p
}

func (s *Server) install(t *rules.Table) error {
	// a lower version is installed (a manager restored from a backup restarts its versions) but said and
	// counted: it may also be a stale table replayed by a cache, and it re-draws every client's arm
	if old := s.plan.Load(); old != nil && old.Table != nil && t.Version < old.Table.Version {
		s.regressions.Add(1)
		s.Log.Printf("edge: warning: table version %d replaces the higher version %d", t.Version, old.Table.Version)
	}
	s.plan.Store(s.provisionTable(t))
	s.loads.Add(1)
	s.installedAt.Store(time.Now().UnixNano())
	s.Log.Printf("edge: applied table version %d (%d configs, %d groups, %d rules)", t.Version, len(t.Configs), len(t.Groups), len(t.Rules))
	return nil
}

// partPlans are the provisioned tables of the partitions (--bus); a nil
// entry is a partition without a table (the built-in default serves it).
type partPlans struct {
	P     int
	plans []*Plan
}

// installPartitions provisions a new snapshot of the bus's tables (the
// plans of unchanged tables are kept) and installs it atomically.
func (s *Server) installPartitions(snap bus.Snapshot) {
	old := s.parts.Load()
	pp := &partPlans{P: snap.Partitions, plans: make([]*Plan, snap.Partitions)}
	for p, t := range snap.Tables {
		if p >= snap.Partitions {
			continue
		}
		if old != nil && p < len(old.plans) && old.plans[p] != nil && old.plans[p].Table == t {
			pp.plans[p] = old.plans[p]
			continue
		}
		pp.plans[p] = s.provisionTable(t)
		s.loads.Add(1)
		s.installedAt.Store(time.Now().UnixNano())
	}
	s.parts.Store(pp)
}

// planFor is the plan deciding a connection from addr: with --bus the
// table of its client prefix's partition (the built-in default when that
// partition has none), otherwise the one table.
func (s *Server) planFor(addr netip.Addr) *Plan {
	if pp := s.parts.Load(); pp != nil && pp.P > 0 {
		if p := pp.plans[bus.Partition(clientPrefix(addr), pp.P)]; p != nil {
			return p
		}
	}
	return s.plan.Load()
}

func (s *Server) pollTables(ctx context.Context) {
	t := time.NewTicker(s.cfg.Poll)
	defer t.Stop()
	last := ""
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		err := s.Reload(ctx)
		if err != nil && err.Error() != last {
			s.Log.Printf("%v (keeping table version %d)", err, s.Plan().Table.Version)
		}
		last = fmt.Sprint(err)
	}
}
