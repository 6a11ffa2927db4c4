package daemon

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"time"

	"github.com/llmd/llmd/api"
	"github.com/llmd/llmd/engine"
)

// OpenAI error types and codes used in error bodies.
const (
	typeInvalidRequest = "invalid_request_error"
	typeServer         = "server_error"

	codeContextLength = "context_length_exceeded"
	codeModelNotFound = "model_not_found"
)

// statusClientClosed is logged (never sent) for a request whose client went
// away, as nginx does.
const statusClientClosed = 499

// errDraining is returned for requests that arrive while the server stops.
var errDraining = errors.New("daemon: server is shutting down")

// errStalled ends a request that produced no token for Config.StallTimeout.
var errStalled = errors.New("daemon: no new token within the stall timeout; the request was stopped")

// errRequestCancelled is the terminal event of a stream cancelled by
// DELETE /v1/requests/{id}, by having no reader for too long, or by
// shutdown.
var errRequestCancelled = &requestError{Status: statusClientClosed, Type: typeInvalidRequest, Code: "request_cancelled",
	Message: "the request was cancelled"}

// errCancelledJSON answers a non-streamed request cancelled by DELETE
// /v1/requests/{id} while its client still waits.
var errCancelledJSON = &requestError{Status: http.StatusConflict, Type: typeInvalidRequest, Code: "request_cancelled",
	Message: "the request was cancelled (DELETE /v1/requests/{id})"}

// requestError is a problem with the request itself, found before it reaches
// an engine. It is sent as is.
type requestError struct {
	Status  int
	Type    string
	Code    string // "" means null
	Param   string // "" means null
	Message string
}

func (e *requestError) Error() string { return e.Message }

// invalidParam reports a bad parameter with status 400.
func invalidParam(param, format string, args ...any) *requestError {
	return &requestError{Status: http.StatusBadRequest, Type: typeInvalidRequest, Param: param, Message: fmt.Sprintf(format, args...)}
}

// apiError is an error as the client sees it.
type apiError struct {
	Status     int
	Detail     api.ErrorDetail
	RetryAfter time.Duration // 0: no Retry-After header
	// ShouldRetry, when set, is sent as x-should-retry (false on a spent
	// budget, so that SDKs do not retry in vain).
	ShouldRetry *bool
}

func strPtr(s string) *string {
	if s == "" {
		return nil
	}
	return &s
}

// apiErrorFor is the one place that maps an error to an HTTP status and an
// OpenAI error body. requestID goes into the text of 5xx bodies, whose
// details stay in the log.
func apiErrorFor(err error, requestID string) apiError {
	var (
		re    *requestError
		mbe   *http.MaxBytesError
		cle   *engine.ContextLengthError
		ire   *engine.InvalidRequestError
		syn   *json.SyntaxError
		typ   *json.UnmarshalTypeError
		qe    *quotaError
		oe    *overloadError
		unavl = func(msg string, retry time.Duration) apiError {
			return apiError{Status: http.StatusServiceUnavailable, RetryAfter: retry,
				Detail: api.ErrorDetail{Message: msg, Type: typeServer}}
		}
	)
	switch {
	case errors.As(err, &re):
		return apiError{Status: re.Status, Detail: api.ErrorDetail{
			Message: re.Message, Type: re.Type, Param: strPtr(re.Param), Code: strPtr(re.Code)}}
	case errors.As(err, &qe):
		typ, code, retry := "tokens", "rate_limit_exceeded", !qe.d.Hard
		switch qe.d.Reason {
		case "requests", "concurrency":
			typ = "requests"
		case "daily_tokens":
			code = "insufficient_quota"
		}
		wait := qe.d.RetryAfter
		if wait <= 0 && retry {
			wait = time.Second
		}
		return apiError{Status: http.StatusTooManyRequests, RetryAfter: wait, ShouldRetry: &retry,
			Detail: api.ErrorDetail{Message: qe.Error(), Type: typ, Code: strPtr(code)}}
	case errors.As(err, &oe):
		retry := true
		return apiError{Status: http.StatusTooManyRequests, RetryAfter: oe.retry, ShouldRetry: &retry,
			Detail: api.ErrorDetail{Message: oe.Error(), Type: "requests", Code: strPtr("rate_limit_exceeded")}}
	case errors.As(err, &mbe):
		return apiError{Status: http.StatusRequestEntityTooLarge, Detail: api.ErrorDetail{
			Message: fmt.Sprintf("request body is larger than the limit of %d bytes", mbe.Limit),
			Type:    typeInvalidRequest, Code: strPtr("request_too_large")}}
	case errors.As(err, &syn):
		return apiError{Status: http.StatusBadRequest, Detail: api.ErrorDetail{
			Message: fmt.Sprintf("request body is not valid JSON: %v (at byte %d)", syn, syn.Offset),
			Type:    typeInvalidRequest}}
	case errors.As(err, &typ):
		return apiError{Status: http.StatusBadRequest, Detail: api.ErrorDetail{
			Message: fmt.Sprintf("%s must be of type %s, not JSON %s", fieldOr(typ.Field, "request body"), typ.Type, typ.Value),
			Type:    typeInvalidRequest, Param: strPtr(typ.Field)}}
	case errors.As(err, &cle):
		return apiError{Status: http.StatusBadRequest, Detail: api.ErrorDetail{
			Message: contextLengthMessage(cle.Limit, cle.PromptTokens, cle.MaxTokens),
			Type:    typeInvalidRequest, Param: strPtr("messages"), Code: strPtr(codeContextLength)}}
	case errors.As(err, &ire):
		return apiError{Status: http.StatusBadRequest, Detail: api.ErrorDetail{
			Message: ire.Reason, Type: typeInvalidRequest}}
	case errors.Is(err, errStalled):
		return apiError{Status: http.StatusGatewayTimeout, Detail: api.ErrorDetail{
			Message: "the model produced no new token for too long; the request was stopped (request id " + requestID + ")",
			Type:    typeServer, Code: strPtr("stalled")}}
	case errors.Is(err, engine.ErrQueueFull):
		return unavl("the engine is currently overloaded (queue full); retry later", time.Second)
	case errors.Is(err, engine.ErrClosed), errors.Is(err, errDraining):
		return unavl("the server is shutting down; retry later", 0)
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		// The client went away; nobody reads this.
		return apiError{Status: statusClientClosed, Detail: api.ErrorDetail{
			Message: "request cancelled", Type: typeInvalidRequest}}
	default:
		return apiError{Status: http.StatusInternalServerError, Detail: api.ErrorDetail{
			Message: "internal error (request id " + requestID + ")", Type: typeServer}}
	}
}

func fieldOr(field, alt string) string {
	if field == "" {
		return alt
	}
	return field
}

// contextLengthMessage words a context overflow as vLLM does.
func contextLengthMessage(limit, prompt, completion int) string {
	return fmt.Sprintf("This model's maximum context length is %d tokens. However, you requested %d tokens "+
		"(%d in the messages, %d in the completion). Please reduce the length of the messages or completion.",
		limit, prompt+completion, prompt, completion)
}

// writeError writes err as an HTTP error response. It must be called before
// anything else is written. It returns the status, for the request log.
func writeError(w http.ResponseWriter, requestID string, err error) int {
	ae := apiErrorFor(err, requestID)
	if ae.Status == statusClientClosed {
		return ae.Status
	}
	h := w.Header()
	if ae.ShouldRetry != nil {
		setRetryHeaders(h, ae.RetryAfter, *ae.ShouldRetry)
	} else if ae.RetryAfter > 0 {
		h.Set("Retry-After", strconv.Itoa(int((ae.RetryAfter+time.Second-1)/time.Second)))
	}
	writeJSON(w, ae.Status, api.ErrorBody{Error: ae.Detail})
	return ae.Status
}

// writeJSON writes v as a JSON response with status.
func writeJSON(w http.ResponseWriter, status int, v any) {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		// Only our own wire types get here; they always marshal.
		status = http.StatusInternalServerError
		buf.Reset()
		buf.WriteString(`{"error":{"message":"internal error","type":"server_error","param":null,"code":null}}` + "\n")
	}
	h := w.Header()
	h.Set("Content-Type", "application/json")
	if h.Get("Trailer") == "" { // a length would drop the trailers (a forwarded request's usage)
		h.Set("Content-Length", strconv.Itoa(buf.Len()))
	}
	w.WriteHeader(status)
	_, _ = w.Write(buf.Bytes())
}
