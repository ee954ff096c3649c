package edge

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/tailor-project/tailor/edge/internal/rules"
)

func (s *Server) setupTables() error {
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
	if err := s.Reload(context.Background()); err != nil {
		return err
	}
	if s.cfg.TablePubKey == "" {
		s.Log.Printf("edge: warning: no --table-pubkey: tables from %s are accepted unsigned", s.cfg.Table)
	}
	return nil
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
	return s.LoadTable(data)
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
// or badly signed with --table-pubkey, too large).
func (s *Server) TablesRefused() int64 { return s.refused.Load() }

func (s *Server) install(t *rules.Table) error {
	p := provision(t, s.reg, s.base, s.h1)
	for id, cc := range p.Configs {
		for _, what := range cc.Inexact {
			s.Log.Printf("edge: table %d config %s: %s (x/net/http2 limit)", t.Version, id, what)
		}
	}
	s.plan.Store(p)
	s.loads.Add(1)
	s.installedAt.Store(time.Now().UnixNano())
	s.Log.Printf("edge: applied table version %d (%d configs, %d groups, %d rules)", t.Version, len(t.Configs), len(t.Groups), len(t.Rules))
	return nil
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
