package api

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
)

// The admin methods below call llmd's /v1/admin routes. They need an admin
// key (see [Client.SetAPIKey]): without one llmd answers 401, with a key
// that is not an admin key 403, both as a *StatusError. The one exception
// is bootstrapping: while llmd has no key at all, a client on the loopback
// interface may call CreateKey without a key.

// CreateKey creates an API key (POST /v1/admin/keys). The returned
// KeyCreated is the only place the key itself is ever shown.
func (c *Client) CreateKey(ctx context.Context, req KeyCreateRequest) (*KeyCreated, error) {
	var kc KeyCreated
	if err := c.doJSON(ctx, http.MethodPost, "/v1/admin/keys", req, &kc); err != nil {
		return nil, err
	}
	return &kc, nil
}

// Keys lists the API keys (GET /v1/admin/keys), without the keys
// themselves.
func (c *Client) Keys(ctx context.Context) ([]KeyInfo, error) {
	var list KeyList
	if err := c.doJSON(ctx, http.MethodGet, "/v1/admin/keys", nil, &list); err != nil {
		return nil, err
	}
	return list.Keys, nil
}

// RevokeKey revokes the key with the given ID (DELETE /v1/admin/keys/{id})
// and returns it as it is now. An unknown id is a *StatusError with
// StatusCode 404.
func (c *Client) RevokeKey(ctx context.Context, id string) (*KeyInfo, error) {
	p, err := adminPath("/v1/admin/keys", "key id", id)
	if err != nil {
		return nil, err
	}
	var ki KeyInfo
	if err := c.doJSON(ctx, http.MethodDelete, p, nil, &ki); err != nil {
		return nil, err
	}
	return &ki, nil
}

// Tenants lists the tenants (GET /v1/admin/tenants).
func (c *Client) Tenants(ctx context.Context) ([]TenantInfo, error) {
	var list TenantList
	if err := c.doJSON(ctx, http.MethodGet, "/v1/admin/tenants", nil, &list); err != nil {
		return nil, err
	}
	return list.Tenants, nil
}

// Quotas returns every tenant's quota (GET /v1/admin/quotas).
func (c *Client) Quotas(ctx context.Context) ([]QuotaInfo, error) {
	var list QuotaList
	if err := c.doJSON(ctx, http.MethodGet, "/v1/admin/quotas", nil, &list); err != nil {
		return nil, err
	}
	return list.Quotas, nil
}

// Quota returns one tenant's quota and usage
// (GET /v1/admin/quotas/{tenant}). An unknown tenant is a *StatusError
// with StatusCode 404.
func (c *Client) Quota(ctx context.Context, tenant string) (*QuotaInfo, error) {
	p, err := adminPath("/v1/admin/quotas", "tenant", tenant)
	if err != nil {
		return nil, err
	}
	var qi QuotaInfo
	if err := c.doJSON(ctx, http.MethodGet, p, nil, &qi); err != nil {
		return nil, err
	}
	return &qi, nil
}

// SetQuota changes a tenant's tier or limits (PUT /v1/admin/quotas/{tenant})
// and returns the resulting quota. Nil fields of u are left as they are; see
// [QuotaUpdate] for -1 and 0. llmd creates the tenant if it does not exist.
func (c *Client) SetQuota(ctx context.Context, tenant string, u QuotaUpdate) (*QuotaInfo, error) {
	p, err := adminPath("/v1/admin/quotas", "tenant", tenant)
	if err != nil {
		return nil, err
	}
	var qi QuotaInfo
	if err := c.doJSON(ctx, http.MethodPut, p, u, &qi); err != nil {
		return nil, err
	}
	return &qi, nil
}

// Snapshot returns the node's live state for llmctl top: each model's
// engine state and latencies, the live requests, the tenants' quota burn
// and the GPUs (GET /v1/admin/snapshot).
func (c *Client) Snapshot(ctx context.Context) (*Snapshot, error) {
	var s Snapshot
	if err := c.doJSON(ctx, http.MethodGet, "/v1/admin/snapshot", nil, &s); err != nil {
		return nil, err
	}
	return &s, nil
}

// FollowRequest reads request id's token stream from its start, as another
// reader next to the client that made the request (GET
// /v1/requests/{id}/stream), calling fn with each delta, and returns the
// final "done" event. Following neither changes nor cancels the request;
// a connection that drops is resumed after the last event read, as in
// [Client.Chat].
//
// Only resumable streams can be followed (native /v1/chat, and OpenAI
// requests sent with X-Resumable), and only with a key of the request's
// tenant: for the others, and for a request llmd no longer keeps, llmd
// answers 404, a *StatusError. If fn returns an error, the stream stops
// and FollowRequest returns that error.
func (c *Client) FollowRequest(ctx context.Context, id string, fn func(NativeDelta) error) (*NativeDone, error) {
	if _, err := adminPath("/v1/requests", "request id", id); err != nil {
		return nil, err
	}
	lastID := ""
	for attempt := 0; ; attempt++ {
		resp, err := c.resume(ctx, id, lastID)
		if err != nil {
			var se *StatusError
			if errors.As(err, &se) || ctx.Err() != nil || attempt == 0 || attempt >= maxResumes {
				return nil, err
			}
		} else {
			done, err := c.readNative(ctx, resp, fn, &lastID)
			if cb, ok := err.(*callbackError); ok {
				return nil, cb.err
			}
			if err == nil || !errors.Is(err, ErrIncompleteStream) || attempt >= maxResumes {
				return done, err
			}
		}
		if err := sleepCtx(ctx, resumeBackoff(attempt)); err != nil {
			return nil, err
		}
	}
}

// UsageQuery selects what [Client.Usage] reports. Empty fields are not
// sent, so llmd's defaults apply (see [UsageReport]).
type UsageQuery struct {
	// Tenant and Model keep only one tenant's or one model's usage.
	Tenant, Model string
	// Since is the start of the window: a duration back from now such as
	// "24h" or "7d", or an RFC 3339 time. Until is its end, RFC 3339.
	Since, Until string
	// By groups the rows: "day", "tenant", "model", "tier" or
	// "decision".
	By string
}

// values returns q as query parameters, without the empty fields.
func (q UsageQuery) values() url.Values {
	v := url.Values{}
	for _, p := range [][2]string{
		{"tenant", q.Tenant}, {"model", q.Model}, {"since", q.Since}, {"until", q.Until}, {"by", q.By},
	} {
		if p[1] != "" {
			v.Set(p[0], p[1])
		}
	}
	return v
}

// Usage returns the usage and cost report of the window and filters of q
// (GET /v1/admin/usage). A parameter llmd does not accept is a
// *StatusError with StatusCode 400.
func (c *Client) Usage(ctx context.Context, q UsageQuery) (*UsageReport, error) {
	var r UsageReport
	path := "/v1/admin/usage"
	if v := q.values(); len(v) > 0 {
		path += "?" + v.Encode()
	}
	if err := c.doJSON(ctx, http.MethodGet, path, nil, &r); err != nil {
		return nil, err
	}
	return &r, nil
}

// adminPath appends the path-escaped id to prefix. The empty id and the
// dot segments are refused: the request path is cleaned, so they would
// name the collection or its parent rather than one item.
func adminPath(prefix, what, id string) (string, error) {
	if id == "" || id == "." || id == ".." {
		return "", fmt.Errorf("api: invalid %s %q", what, id)
	}
	return prefix + "/" + url.PathEscape(id), nil
}

// doJSON sends body (nil for none) as JSON and decodes a 2xx answer into
// out.
func (c *Client) doJSON(ctx context.Context, method, path string, body, out any) error {
	resp, err := c.do(ctx, method, path, body, "application/json")
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	return decodeJSON(resp, out)
}

// Nodes returns the cluster's members as this llmd sees them (GET
// /v1/admin/nodes).
func (c *Client) Nodes(ctx context.Context) (*NodeList, error) {
	var nl NodeList
	if err := c.doJSON(ctx, http.MethodGet, "/v1/admin/nodes", nil, &nl); err != nil {
		return nil, err
	}
	return &nl, nil
}
