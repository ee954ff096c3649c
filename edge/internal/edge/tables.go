package edge

import (
	"context"
	"fmt"
	"time"

	"github.com/tailor-project/tailor/edge/internal/rules"
)

func (s *Server) setupTables() error {
	if s.cfg.Table == "" {
		return s.install(defaultTable(s.reg))
	}
	s.tables = &rules.Source{Loc: s.cfg.Table}
	return s.Reload(context.Background())
}

// Reload fetches the table; an invalid or unreachable table leaves the
// last good one in force and returns the error (a *rules.FieldError inside).
func (s *Server) Reload(ctx context.Context) error {
	data, err := s.tables.Fetch(ctx)
	if err != nil {
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
		return fmt.Errorf("%w: rejected: %w", ErrTable, err)
	}
	return s.install(t)
}

func (s *Server) install(t *rules.Table) error {
	p := provision(t, s.reg, s.base, s.h1)
	for id, cc := range p.Configs {
		for _, what := range cc.Inexact {
			s.Log.Printf("edge: table %d config %s: %s (x/net/http2 limit)", t.Version, id, what)
		}
	}
	s.plan.Store(p)
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
