package api

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"time"
)

// VersionStats is one model version's recent traffic, for a canary's
// comparison with its stable version. Times are milliseconds; rates are
// fractions of the requests (0 to 1).
type VersionStats struct {
	Model      string  `json:"model"`
	Requests   int     `json:"requests"`
	ErrorRate  float64 `json:"error_rate"`
	LengthRate float64 `json:"length_rate"`
	CancelRate float64 `json:"cancel_rate"`
	TTFTP50Ms  float64 `json:"ttft_p50_ms"`
	TTFTP95Ms  float64 `json:"ttft_p95_ms"`
	ITLP50Ms   float64 `json:"itl_p50_ms"`
	ITLP95Ms   float64 `json:"itl_p95_ms"`
}

// CanaryStatus is an alias's rollout: its stable version, its canary (if
// any) with its share per tier, and both versions' figures.
type CanaryStatus struct {
	Alias  string `json:"alias"`
	Stable string `json:"stable"`
	Canary string `json:"canary,omitempty"`
	// Percent is the canary's share of each tier's requests.
	Percent map[string]float64 `json:"percent,omitempty"`
	// State is "running", "rolled_back" (Reason says why) or "none".
	State        string       `json:"state"`
	Reason       string       `json:"reason,omitempty"`
	RolledBackAt *time.Time   `json:"rolled_back_at,omitempty"`
	StableStats  VersionStats `json:"stable_stats"`
	CanaryStats  VersionStats `json:"canary_stats"`
	// Shadow is the version receiving a copy of ShadowPercent of the
	// alias's requests, "" for none.
	Shadow        string  `json:"shadow,omitempty"`
	ShadowPercent float64 `json:"shadow_percent,omitempty"`
}

// RolloutList is the response of GET /v1/admin/models/rollouts.
type RolloutList struct {
	Aliases []CanaryStatus `json:"aliases"`
}

// CanaryRequest is the body of PUT /v1/admin/models/aliases/{alias}/canary.
type CanaryRequest struct {
	Version string             `json:"version"`
	Percent map[string]float64 `json:"percent"`
}

// ShadowRequest is the body of PUT /v1/admin/models/aliases/{alias}/shadow.
type ShadowRequest struct {
	Version string  `json:"version"`
	Percent float64 `json:"percent"`
}

// PromoteRequest is the body of POST
// /v1/admin/models/aliases/{alias}/promote: the canary becomes the stable
// version; the old one stays served under its pinned name, deprecated
// from Deprecate and retired at Sunset when those are set (dates
// "2006-01-02" or RFC 3339).
type PromoteRequest struct {
	Deprecate string `json:"deprecate,omitempty"`
	Sunset    string `json:"sunset,omitempty"`
}

// PromoteResult says what a promotion changed.
type PromoteResult struct {
	Alias    string `json:"alias"`
	Stable   string `json:"stable"`
	Previous string `json:"previous"`
	// Deprecated and Sunset are the previous version's, when set.
	Deprecated *time.Time `json:"deprecated,omitempty"`
	Sunset     *time.Time `json:"sunset,omitempty"`
}

// ModelsApplied is the response of PUT /v1/admin/models/config.
type ModelsApplied struct {
	// Loaded and Unloaded are the models the new config added and
	// removed; Names every name a caller may now use.
	Loaded   []string `json:"loaded"`
	Unloaded []string `json:"unloaded"`
	Names    []string `json:"names"`
	// Saved says the config was written to llmd's --models-config file.
	Saved bool `json:"saved"`
}

// Rollouts lists every alias's rollout (GET /v1/admin/models/rollouts).
func (c *Client) Rollouts(ctx context.Context) (*RolloutList, error) {
	var l RolloutList
	if err := c.doJSON(ctx, http.MethodGet, "/v1/admin/models/rollouts", nil, &l); err != nil {
		return nil, err
	}
	return &l, nil
}

// aliasPath is the admin path of an alias's rollout action.
func aliasPath(alias, action string) (string, error) {
	p, err := adminPath("/v1/admin/models/aliases", "alias", alias)
	if err != nil {
		return "", err
	}
	return p + "/" + action, nil
}

// SetCanary sends percent (per tier) of alias's requests to version.
func (c *Client) SetCanary(ctx context.Context, alias string, req CanaryRequest) (*CanaryStatus, error) {
	return c.aliasAction(ctx, http.MethodPut, alias, "canary", req)
}

// ClearCanary ends alias's canary: every request goes to the stable
// version again.
func (c *Client) ClearCanary(ctx context.Context, alias string) (*CanaryStatus, error) {
	return c.aliasAction(ctx, http.MethodDelete, alias, "canary", nil)
}

// SetShadow copies percent of alias's requests to version.
func (c *Client) SetShadow(ctx context.Context, alias string, req ShadowRequest) (*CanaryStatus, error) {
	return c.aliasAction(ctx, http.MethodPut, alias, "shadow", req)
}

// ClearShadow stops alias's shadow traffic.
func (c *Client) ClearShadow(ctx context.Context, alias string) (*CanaryStatus, error) {
	return c.aliasAction(ctx, http.MethodDelete, alias, "shadow", nil)
}

func (c *Client) aliasAction(ctx context.Context, method, alias, action string, body any) (*CanaryStatus, error) {
	p, err := aliasPath(alias, action)
	if err != nil {
		return nil, err
	}
	var st CanaryStatus
	if err := c.doJSON(ctx, method, p, body, &st); err != nil {
		return nil, err
	}
	return &st, nil
}

// Promote makes alias's canary its stable version.
func (c *Client) Promote(ctx context.Context, alias string, req PromoteRequest) (*PromoteResult, error) {
	p, err := aliasPath(alias, "promote")
	if err != nil {
		return nil, err
	}
	var res PromoteResult
	if err := c.doJSON(ctx, http.MethodPost, p, req, &res); err != nil {
		return nil, err
	}
	return &res, nil
}

// ApplyModelsConfig replaces llmd's models config with yaml (PUT
// /v1/admin/models/config): the models it adds are loaded, those it drops
// unloaded, and llmd saves it to its --models-config file.
func (c *Client) ApplyModelsConfig(ctx context.Context, yaml []byte) (*ModelsApplied, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPut, c.base.JoinPath("/v1/admin/models/config").String(),
		bytes.NewReader(yaml))
	if err != nil {
		return nil, fmt.Errorf("api: new request: %w", err)
	}
	req.Header.Set("Content-Type", "application/yaml")
	req.Header.Set("Accept", "application/json")
	if key := c.key(); key != "" {
		req.Header.Set("Authorization", "Bearer "+key)
	}
	resp, err := c.hc.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		return nil, readStatusError(resp)
	}
	var res ModelsApplied
	if err := decodeJSON(resp, &res); err != nil {
		return nil, err
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	return &res, nil
}

// ShadowReportQuery selects a shadow report's rows.
type ShadowReportQuery struct {
	Alias       string
	ShadowModel string
	Since       time.Time
	Until       time.Time
}

// ShadowReport compares shadow versions with their primaries (GET
// /v1/admin/models/shadow/report).
func (c *Client) ShadowReport(ctx context.Context, q ShadowReportQuery) (*ShadowReport, error) {
	v := url.Values{}
	if q.Alias != "" {
		v.Set("alias", q.Alias)
	}
	if q.ShadowModel != "" {
		v.Set("shadow_model", q.ShadowModel)
	}
	if !q.Since.IsZero() {
		v.Set("since", q.Since.UTC().Format(time.RFC3339))
	}
	if !q.Until.IsZero() {
		v.Set("until", q.Until.UTC().Format(time.RFC3339))
	}
	p := "/v1/admin/models/shadow/report"
	if len(v) > 0 {
		p += "?" + v.Encode()
	}
	var r ShadowReport
	if err := c.doJSON(ctx, http.MethodGet, p, nil, &r); err != nil {
		return nil, err
	}
	return &r, nil
}
