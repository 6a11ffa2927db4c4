package pipeline

import (
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/llmd/llmd/engine"
	"github.com/llmd/llmd/quota"
)

// OpenAI error types and codes.
const (
	TypeInvalidRequest = "invalid_request_error"
	TypeServer         = "server_error"

	CodeContextLength = "context_length_exceeded"
	CodeModelNotFound = "model_not_found"
)

// StatusClientClosed is logged (never sent) for a request whose client went
// away, as nginx does.
const StatusClientClosed = 499

// Error is a problem with the request itself (or a refusal the client can
// act on), sent to the client as it is: an HTTP status and an OpenAI error
// body.
type Error struct {
	Status  int
	Type    string
	Code    string // "" means null
	Param   string // "" means null
	Message string
}

func (e *Error) Error() string { return e.Message }

// InvalidParam reports a bad parameter with status 400.
func InvalidParam(param, format string, args ...any) *Error {
	return &Error{Status: http.StatusBadRequest, Type: TypeInvalidRequest, Param: param, Message: fmt.Sprintf(format, args...)}
}

var (
	// ErrQueueFull refuses a request the engine's queue has no room for
	// (503, retry soon); it is the engine's sentinel.
	ErrQueueFull = engine.ErrQueueFull
	// ErrClosed ends a request the engine stopped (shutdown); it is the
	// engine's sentinel.
	ErrClosed = engine.ErrClosed
	// ErrDraining refuses requests that arrive while the server stops.
	ErrDraining = errors.New("pipeline: server is shutting down")
	// ErrStalled ends a request that produced no token for the stall
	// timeout.
	ErrStalled = errors.New("pipeline: no new token within the stall timeout; the request was stopped")
	// ErrUsageNotRecorded ends a request whose usage row could not be
	// written (database and spool both failing): billing fails closed.
	ErrUsageNotRecorded = errors.New("pipeline: the request's usage could not be recorded")
	// ErrIncomplete ends a request whose events stopped before its final
	// one.
	ErrIncomplete = errors.New("pipeline: event stream ended before its final event")

	// ErrRequestCancelled is the terminal event of a stream cancelled by
	// DELETE /v1/requests/{id}, by having no reader for too long, or by
	// shutdown.
	ErrRequestCancelled = &Error{Status: StatusClientClosed, Type: TypeInvalidRequest, Code: "request_cancelled",
		Message: "the request was cancelled"}
	// ErrCancelledJSON answers a non-streamed request cancelled by DELETE
	// /v1/requests/{id} while its client still waits.
	ErrCancelledJSON = &Error{Status: http.StatusConflict, Type: TypeInvalidRequest, Code: "request_cancelled",
		Message: "the request was cancelled (DELETE /v1/requests/{id})"}
	// ErrNoNodeAnswered ends a request for a model served only by peers
	// when none of them accepted it.
	ErrNoNodeAnswered = &Error{Status: http.StatusServiceUnavailable, Type: TypeServer, Code: "no_node_available",
		Message: "no node serving this model accepted the request; please retry"}
	// ErrPeerLost ends a stream whose serving peer failed after its first
	// token (the request cannot be retried then).
	ErrPeerLost = &Error{Status: http.StatusBadGateway, Type: TypeServer, Code: "peer_failed",
		Message: "the node serving this request failed during generation; please retry"}
)

// QuotaError is a request refused by its tenant's quota (429).
type QuotaError struct {
	Tenant   string
	Decision quota.Decision
	// Tokens is what the request asked to reserve.
	Tokens int64
	// User, when set, names the end user whose per-user limit refused the
	// request (the tenant's own limits were not consulted).
	User string
}

func (e *QuotaError) Error() string {
	d := e.Decision
	if e.User != "" {
		return e.userError()
	}
	switch d.Reason {
	case quota.ReasonRequests:
		return fmt.Sprintf("Rate limit reached for tenant %s on requests per minute: limit %d; retry in %s",
			e.Tenant, d.LimitRequests, RoundUp(d.RetryAfter))
	case quota.ReasonTokens:
		return fmt.Sprintf("Rate limit reached for tenant %s on tokens per minute: limit %d, remaining %d, requested %d "+
			"(prompt plus the answer reserved: max_tokens, else an estimate); retry in %s", e.Tenant, d.LimitTokens, d.RemainingTokens, e.Tokens, RoundUp(d.RetryAfter))
	case quota.ReasonConcurrency:
		return fmt.Sprintf("Rate limit reached for tenant %s on concurrent requests; retry when one of them finishes", e.Tenant)
	case quota.ReasonDailyTokens:
		return fmt.Sprintf("Tenant %s has used its daily token budget; it renews at 00:00 UTC", e.Tenant)
	case quota.ReasonTooLarge:
		return fmt.Sprintf("Request of %d tokens (prompt plus the answer reserved) is larger than tenant %s's tokens-per-minute "+
			"limit of %d; lower max_tokens", e.Tokens, e.Tenant, d.LimitTokens)
	}
	return fmt.Sprintf("Rate limit reached for tenant %s (%s)", e.Tenant, d.Reason)
}

// userError words a refusal by the tenant's per-user limit.
func (e *QuotaError) userError() string {
	d := e.Decision
	who := fmt.Sprintf("user %q of tenant %s", e.User, e.Tenant)
	switch d.Reason {
	case quota.ReasonRequests:
		return fmt.Sprintf("Per-user rate limit reached for %s on requests per minute: limit %d per user; retry in %s",
			who, d.LimitRequests, RoundUp(d.RetryAfter))
	case quota.ReasonTokens:
		return fmt.Sprintf("Per-user rate limit reached for %s on tokens per minute: limit %d per user, remaining %d, "+
			"requested %d; retry in %s", who, d.LimitTokens, d.RemainingTokens, e.Tokens, RoundUp(d.RetryAfter))
	case quota.ReasonTooLarge:
		return fmt.Sprintf("Request of %d tokens is larger than the per-user tokens-per-minute limit of %d of tenant %s; "+
			"lower max_tokens", e.Tokens, d.LimitTokens, e.Tenant)
	}
	return fmt.Sprintf("Per-user rate limit reached for %s (%s)", who, d.Reason)
}

// OverloadError sheds a free-tier request at the ladder's DegradeShedFree
// (429).
type OverloadError struct {
	Model      string
	RetryAfter time.Duration
}

func (e *OverloadError) Error() string {
	return fmt.Sprintf("model %s is overloaded and is not taking free-tier requests now; retry in %s", e.Model, e.RetryAfter)
}

// RejectReason is how a refusal by quota, load shedding or the safety
// check is counted (metrics, the usage row): "quota_<reason>", "overload",
// "content_filter" or "safety_unavailable"; "" for other errors.
func RejectReason(err error) string {
	var qe *QuotaError
	var oe *OverloadError
	var pe *Error
	switch {
	case errors.As(err, &qe) && qe.User != "":
		return "quota_user_" + string(qe.Decision.Reason)
	case errors.As(err, &qe):
		return "quota_" + string(qe.Decision.Reason)
	case errors.As(err, &oe):
		return "overload"
	case errors.As(err, &pe) && (pe.Code == "content_filter" || pe.Code == "safety_unavailable"):
		return pe.Code
	}
	return ""
}

// RoundUp rounds d up to the millisecond (0 for none).
func RoundUp(d time.Duration) time.Duration {
	if d <= 0 {
		return 0
	}
	return (d + time.Millisecond - 1).Truncate(time.Millisecond)
}

// ContextLengthMessage words a context overflow as vLLM does.
func ContextLengthMessage(limit, prompt, completion int) string {
	return fmt.Sprintf("This model's maximum context length is %d tokens. However, you requested %d tokens "+
		"(%d in the messages, %d in the completion). Please reduce the length of the messages or completion.",
		limit, prompt+completion, prompt, completion)
}
