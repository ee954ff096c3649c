package bus

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/tailor-project/tailor/edge/internal/telemetry"
)

// TestClassifyRefusals: which JetStream refusals keep the batch. The
// account's storage limit (err_code 10002, HTTP 400: nats-server 2.9.10
// answers "resource limits exceeded for account") is a full store, kept
// and retried; until 2026-12-07 it was a refusal for good and the batch
// was dropped. A 503 that is no full store (JetStream unavailable) is kept
// and retried but no longer counted as full.
func TestClassifyRefusals(t *testing.T) {
	for _, c := range []struct {
		name      string
		code, err int
		want      error
	}{
		{"stream full (discard new)", 503, 10077, telemetry.ErrBusFull},
		{"stream full (as 2.9 answers)", 400, 10077, telemetry.ErrBusFull},
		{"account storage limit", 400, 10002, telemetry.ErrBusFull},
		{"insufficient resources", 503, 10023, telemetry.ErrBusFull},
		{"storage exceeded", 500, 10047, telemetry.ErrBusFull},
		{"JetStream not temporarily available", 503, 10008, telemetry.ErrBusUnavailable},
		{"503 without an err_code", 503, 0, telemetry.ErrBusUnavailable},
		{"message too large", 400, 10054, telemetry.ErrPublishRefused},
		{"stream not found", 404, 10059, telemetry.ErrPublishRefused},
	} {
		got := classify(&jetstream.APIError{Code: c.code, ErrorCode: jetstream.ErrorCode(c.err), Description: c.name})
		if !errors.Is(got, c.want) {
			t.Errorf("%s (%d, err_code %d): %v, want %v", c.name, c.code, c.err, got, c.want)
		}
	}
}

// TestPublishErrors: what Publish returns for JetStream's answers. No
// stream answering the subject (jetstream.ErrNoStreamResponse: no stream
// yet, or one set up for another partition count) is unavailable, kept and
// counted; until 2026-12-07 it was returned as it was (kept, counted
// nowhere).
func TestPublishErrors(t *testing.T) {
	for _, c := range []struct {
		name string
		err  error
		want error
	}{
		{"no stream answers", jetstream.ErrNoStreamResponse, telemetry.ErrBusUnavailable},
		{"no responders", fmt.Errorf("wrapped: %w", nats.ErrNoResponders), telemetry.ErrBusUnavailable},
		{"stream full", &jetstream.APIError{Code: 503, ErrorCode: 10077}, telemetry.ErrBusFull},
		{"over max_payload", nats.ErrMaxPayload, telemetry.ErrPublishRefused},
	} {
		if got := publishError("tailor.tel.x.7", c.err); !errors.Is(got, c.want) {
			t.Errorf("%s: %v, want %v", c.name, got, c.want)
		}
	}
	if publishError("s", nil) != nil {
		t.Error("nil")
	}
	if got := publishError("s", context.DeadlineExceeded); got != context.DeadlineExceeded {
		t.Errorf("a timeout: %v, want it as it is", got)
	}
}
