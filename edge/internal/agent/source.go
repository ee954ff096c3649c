package agent

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
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
			a.installed(data)
			fmt.Fprintf(a.cfg.Log, "tailor-agent: installed table version %d from %s\n", a.Version(), src.Loc)
		} else {
			a.tableRejections.Add(1)
		}
	} else if err != nil {
		a.countFetchError(err)
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

// installed notes a table's installation and its generated_at (for the
// table age metric).
func (a *Agent) installed(data []byte) {
	var head struct {
		GeneratedAt float64 `json:"generated_at"`
	}
	_ = json.Unmarshal(data, &head) // it was just parsed and validated
	a.generatedAt.Store(math.Float64bits(head.GeneratedAt))
	a.installedAt.Store(time.Now().UnixNano())
	a.tableLoads.Add(1)
}

func (a *Agent) countFetchError(err error) {
	if errors.Is(err, rules.ErrRefused) {
		a.tableRejections.Add(1)
		return
	}
	a.tableFetchErrors.Add(1)
}

func (a *Agent) tableGenerated() float64 { return math.Float64frombits(a.generatedAt.Load()) }

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
