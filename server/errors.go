package server

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"strconv"
	"time"

	"github.com/llmd/llmd/api"
	"github.com/llmd/llmd/peer"
	"github.com/llmd/llmd/pipeline"
	"github.com/llmd/llmd/quota"
)

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

// Authentication failures.
var (
	errNoKey      = errors.New("server: no API key")
	errBadKey     = errors.New("server: invalid API key")
	errNotAdmin   = errors.New("server: admin key required")
	errUnsetRoute = errors.New("server: route has no access policy")
	errPeerRoute  = errors.New("server: a forwarded request on a route peers may not reach")
)

// apiErrorFor is the one place that maps an error to an HTTP status and an
// OpenAI error body. requestID goes into the text of 5xx bodies, whose
// details stay in the log.
func apiErrorFor(err error, requestID string) apiError {
	var (
		re    *pipeline.Error
		mbe   *http.MaxBytesError
		syn   *json.SyntaxError
		typ   *json.UnmarshalTypeError
		qe    *pipeline.QuotaError
		oe    *pipeline.OverloadError
		unavl = func(msg string, retry time.Duration) apiError {
			return apiError{Status: http.StatusServiceUnavailable, RetryAfter: retry,
				Detail: api.ErrorDetail{Message: msg, Type: pipeline.TypeServer}}
		}
		denied = func(code, msg string) apiError {
			return apiError{Status: http.StatusForbidden, Detail: api.ErrorDetail{Message: msg,
				Type: pipeline.TypeInvalidRequest, Code: strPtr(code)}}
		}
		unauthorized = func(msg string) apiError {
			return apiError{Status: http.StatusUnauthorized, Detail: api.ErrorDetail{Message: msg,
				Type: pipeline.TypeInvalidRequest, Code: strPtr("invalid_api_key")}}
		}
	)
	switch {
	case errors.As(err, &re):
		return apiError{Status: re.Status, Detail: api.ErrorDetail{
			Message: re.Message, Type: re.Type, Param: strPtr(re.Param), Code: strPtr(re.Code)}}
	case errors.As(err, &qe):
		typ, code, retry := "tokens", "rate_limit_exceeded", !qe.Decision.Hard
		if qe.Decision.Reason.PerRequest() {
			typ = "requests"
		}
		if qe.Decision.Reason == quota.ReasonDailyTokens {
			code = "insufficient_quota"
		}
		wait := qe.Decision.RetryAfter
		if wait <= 0 && retry {
			wait = time.Second
		}
		return apiError{Status: http.StatusTooManyRequests, RetryAfter: wait, ShouldRetry: &retry,
			Detail: api.ErrorDetail{Message: qe.Error(), Type: typ, Code: strPtr(code)}}
	case errors.As(err, &oe):
		retry := true
		return apiError{Status: http.StatusTooManyRequests, RetryAfter: oe.RetryAfter, ShouldRetry: &retry,
			Detail: api.ErrorDetail{Message: oe.Error(), Type: "requests", Code: strPtr("rate_limit_exceeded")}}
	case errors.Is(err, errNotAdmin):
		return denied("permission_denied", "this route needs an admin API key; create one with `llmctl keys create --admin`")
	case errors.Is(err, errNoKey):
		return unauthorized("you must provide an API key: send `Authorization: Bearer <key>` (llmctl: --api-key or LLMD_API_KEY)")
	case errors.Is(err, errUnsetRoute):
		return denied("permission_denied", "this route is not open to any caller")
	case errors.Is(err, errCrossOrigin):
		return denied("cross_origin", "a request from another origin (a web page) may not change state; "+
			"start llmd with --cors-origin to allow a page")
	case errors.Is(err, errPreflightRefused):
		return denied("cross_origin", "cross-origin requests are not allowed from this origin (see llmd --cors-origin)")
	case errors.Is(err, errContentType):
		return apiError{Status: http.StatusUnsupportedMediaType, Detail: api.ErrorDetail{
			Message: "the request body must be JSON: send Content-Type: application/json", Type: pipeline.TypeInvalidRequest,
			Code: strPtr("unsupported_media_type")}}
	case errors.Is(err, errMisdirected):
		return apiError{Status: http.StatusMisdirectedRequest, Detail: api.ErrorDetail{
			Message: "llmd serves anonymous requests only for its own host names: use http://localhost or its IP address " +
				"(or start llmd with --allowed-host)", Type: pipeline.TypeInvalidRequest, Code: strPtr("misdirected_request")}}
	case errors.Is(err, errPeerRoute):
		return denied("permission_denied", "forwarded requests reach the generation routes only")
	case errors.Is(err, peer.ErrAuth), errors.Is(err, peer.ErrReplay):
		return denied("permission_denied", "forwarded request refused: its peer signature is missing, wrong, replayed or too old")
	case errors.Is(err, errBadKey):
		return unauthorized("the API key is not valid (it may have been revoked)")
	case errors.Is(err, os.ErrDeadlineExceeded):
		// The body did not arrive within the body timeout.
		return apiError{Status: http.StatusRequestTimeout, Detail: api.ErrorDetail{
			Message: "the request body did not arrive in time", Type: pipeline.TypeInvalidRequest,
			Code: strPtr("request_timeout")}}
	case errors.As(err, &mbe):
		return apiError{Status: http.StatusRequestEntityTooLarge, Detail: api.ErrorDetail{
			Message: fmt.Sprintf("request body is larger than the limit of %d bytes", mbe.Limit),
			Type:    pipeline.TypeInvalidRequest, Code: strPtr("request_too_large")}}
	case errors.As(err, &syn):
		return apiError{Status: http.StatusBadRequest, Detail: api.ErrorDetail{
			Message: fmt.Sprintf("request body is not valid JSON: %v (at byte %d)", syn, syn.Offset),
			Type:    pipeline.TypeInvalidRequest}}
	case errors.As(err, &typ):
		return apiError{Status: http.StatusBadRequest, Detail: api.ErrorDetail{
			Message: fmt.Sprintf("%s must be of type %s, not JSON %s", fieldOr(typ.Field, "request body"), typ.Type, typ.Value),
			Type:    pipeline.TypeInvalidRequest, Param: strPtr(typ.Field)}}
	case errors.Is(err, pipeline.ErrStalled):
		return apiError{Status: http.StatusGatewayTimeout, Detail: api.ErrorDetail{
			Message: "the model produced no new token for too long; the request was stopped (request id " + requestID + ")",
			Type:    pipeline.TypeServer, Code: strPtr("stalled")}}
	case errors.Is(err, pipeline.ErrQueueFull):
		return unavl("the engine is currently overloaded (queue full); retry later", time.Second)
	case errors.Is(err, pipeline.ErrClosed), errors.Is(err, pipeline.ErrDraining):
		return unavl("the server is shutting down; retry later", 0)
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		// The client went away; nobody reads this.
		return apiError{Status: pipeline.StatusClientClosed, Detail: api.ErrorDetail{
			Message: "request cancelled", Type: pipeline.TypeInvalidRequest}}
	default:
		return apiError{Status: http.StatusInternalServerError, Detail: api.ErrorDetail{
			Message: "internal error (request id " + requestID + ")", Type: pipeline.TypeServer}}
	}
}

// StatusOf is the HTTP status err maps to.
func StatusOf(err error) int { return apiErrorFor(err, "").Status }

func fieldOr(field, alt string) string {
	if field == "" {
		return alt
	}
	return field
}

// writeError writes err as an HTTP error response. It must be called before
// anything else is written. It returns the status, for the request log.
func writeError(w http.ResponseWriter, requestID string, err error) int {
	ae := apiErrorFor(err, requestID)
	if ae.Status == pipeline.StatusClientClosed {
		return ae.Status
	}
	h := w.Header()
	if ae.ShouldRetry != nil {
		setRetryHeaders(h, ae.RetryAfter, *ae.ShouldRetry)
	} else if ae.RetryAfter > 0 {
		h.Set("Retry-After", strconv.Itoa(int((ae.RetryAfter+time.Second-1)/time.Second)))
	}
	status, body := ae.Status, any(api.ErrorBody{Error: ae.Detail})
	if d := dialectOf(w); d != nil {
		status, body = d.errorBody(ae)
	}
	writeJSON(w, status, body)
	return status
}

// dialect is an API's own error shape (Ollama's, Anthropic's): the status
// and body an error is sent with. Routes without one answer OpenAI's.
type dialect interface {
	errorBody(ae apiError) (status int, body any)
}

// dialectWriter carries a route's error dialect to writeError, which
// finds it through the wrappers of the ResponseWriter (their Unwrap).
type dialectWriter struct {
	http.ResponseWriter
	d dialect
}

// Unwrap lets http.ResponseController reach the connection.
func (w *dialectWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// Flush implements http.Flusher.
func (w *dialectWriter) Flush() {
	if f, ok := w.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}

// dialectOf is the error dialect of w's route, nil for OpenAI's.
func dialectOf(w http.ResponseWriter) dialect {
	for w != nil {
		if dw, ok := w.(*dialectWriter); ok {
			return dw.d
		}
		u, ok := w.(interface{ Unwrap() http.ResponseWriter })
		if !ok {
			return nil
		}
		w = u.Unwrap()
	}
	return nil
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

// setRateHeaders writes the x-ratelimit-* headers OpenAI clients log.
func setRateHeaders(h http.Header, d quota.Decision) {
	if d.LimitRequests > 0 {
		h.Set("x-ratelimit-limit-requests", strconv.FormatInt(d.LimitRequests, 10))
		h.Set("x-ratelimit-remaining-requests", strconv.FormatInt(d.RemainingRequests, 10))
		h.Set("x-ratelimit-reset-requests", pipeline.RoundUp(d.ResetRequests).String())
	}
	if d.LimitTokens > 0 {
		h.Set("x-ratelimit-limit-tokens", strconv.FormatInt(d.LimitTokens, 10))
		h.Set("x-ratelimit-remaining-tokens", strconv.FormatInt(d.RemainingTokens, 10))
		h.Set("x-ratelimit-reset-tokens", pipeline.RoundUp(d.ResetTokens).String())
	}
}

// setRetryHeaders writes Retry-After (whole seconds, rounded up),
// retry-after-ms, and x-should-retry.
func setRetryHeaders(h http.Header, retry time.Duration, shouldRetry bool) {
	if retry > 0 {
		h.Set("Retry-After", strconv.FormatInt(int64((retry+time.Second-1)/time.Second), 10))
		h.Set("retry-after-ms", strconv.FormatInt(max(retry.Milliseconds(), 1), 10))
	}
	h.Set("x-should-retry", strconv.FormatBool(shouldRetry))
}
