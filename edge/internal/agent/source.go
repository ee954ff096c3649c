package agent

import (
	"context"
	"fmt"
	"time"

	"github.com/tailor-project/tailor/edge/internal/rules"
)

// Refresh fetches the table once and installs it if it changed. On any
// error the installed table stays and the error is returned.
func (a *Agent) Refresh(ctx context.Context, src *rules.Source) error {
	data, err := src.Fetch(ctx)
	if err != nil {
		err = fmt.Errorf("%w: %w", ErrTableSource, err)
	}
	changed := data != nil
	if err == nil && changed {
		_, err = a.Load(data)
		if err == nil {
			fmt.Fprintf(a.cfg.Log, "tailor-agent: installed table version %d from %s\n", a.Version(), src.Loc)
		}
	}
	if err != nil {
		a.setLastError(err)
		fmt.Fprintf(a.cfg.Log, "tailor-agent: keeping table version %d: %v\n", a.Version(), err)
		return err
	}
	if changed {
		a.setLastError(nil)
	}
	return nil
}

// PollTables refreshes the table every Config.Poll until ctx ends.
func (a *Agent) PollTables(ctx context.Context, src *rules.Source) {
	t := time.NewTicker(a.cfg.Poll)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			_ = a.Refresh(ctx, src)
		}
	}
}
