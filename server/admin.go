package server

import (
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/llmd/llmd/api"
	"github.com/llmd/llmd/pipeline"
	"github.com/llmd/llmd/store"
)

// defaultKeyTenant owns keys created without a tenant.
const defaultKeyTenant = "default"

// storeError maps the store's errors to client errors.
func storeError(err error, what string) error {
	switch {
	case errors.Is(err, store.ErrNotFound):
		return &pipeline.Error{Status: http.StatusNotFound, Type: pipeline.TypeInvalidRequest, Message: what + " not found"}
	case errors.Is(err, store.ErrInvalid):
		return &pipeline.Error{Status: http.StatusBadRequest, Type: pipeline.TypeInvalidRequest, Message: err.Error()}
	}
	return err
}

func (s *Server) handleCreateKey(w http.ResponseWriter, r *http.Request) {
	var req api.KeyCreateRequest
	if err := s.decodeBody(w, r, &req); err != nil {
		writeError(w, "", err)
		return
	}
	if req.Tenant == "" {
		req.Tenant = defaultKeyTenant
	}
	tier := store.TierPaid
	if req.Tier != "" {
		t, err := store.ParseTier(req.Tier)
		if err != nil {
			writeError(w, "", pipeline.InvalidParam("tier", "%v", err))
			return
		}
		tier = t
	}
	ctx := r.Context()
	if _, err := s.store.EnsureTenant(ctx, req.Tenant, tier); err != nil {
		writeError(w, "", storeError(err, "tenant"))
		return
	}
	var (
		secret = req.Key
		k      store.Key
		err    error
	)
	if secret != "" {
		k, err = s.store.ImportKey(ctx, req.Tenant, req.Admin, req.Name, secret)
		if errors.Is(err, store.ErrInvalid) {
			writeError(w, "", pipeline.InvalidParam("key", "%v", err))
			return
		}
	} else {
		secret, k, err = s.store.CreateKey(ctx, req.Tenant, req.Admin, req.Name)
	}
	if err != nil {
		writeError(w, "", storeError(err, "tenant"))
		return
	}
	s.log.Info("api key created", "key_id", k.ID, "tenant", k.Tenant, "admin", k.Admin, "imported", req.Key != "",
		"by", principalFrom(ctx).KeyID)
	writeJSON(w, http.StatusCreated, api.KeyCreated{Key: secret, KeyInfo: keyInfo(k)})
}

func (s *Server) handleListKeys(w http.ResponseWriter, r *http.Request) {
	keys, err := s.store.Keys(r.Context())
	if err != nil {
		writeError(w, "", err)
		return
	}
	out := api.KeyList{Keys: make([]api.KeyInfo, 0, len(keys))}
	for _, k := range keys {
		out.Keys = append(out.Keys, keyInfo(k))
	}
	writeJSON(w, http.StatusOK, out)
}

func (s *Server) handleRevokeKey(w http.ResponseWriter, r *http.Request) {
	k, err := s.store.RevokeKey(r.Context(), r.PathValue("id"))
	if err != nil {
		writeError(w, "", storeError(err, fmt.Sprintf("key %q", r.PathValue("id"))))
		return
	}
	s.log.Info("api key revoked", "key_id", k.ID, "tenant", k.Tenant, "by", principalFrom(r.Context()).KeyID)
	if n, admins, err := s.store.ActiveKeys(r.Context()); err == nil && (n == 0 || admins == 0) {
		// Fail closed: no key at all means no request is served; no admin
		// key means keys are made only offline (llmctl keys create
		// --data-dir) from now on.
		s.log.Warn("no active API key left for some callers", "active_keys", n, "admin_keys", admins,
			"anonymous_access", s.cfg.Anonymous)
	}
	writeJSON(w, http.StatusOK, keyInfo(k))
}

func (s *Server) handleListTenants(w http.ResponseWriter, r *http.Request) {
	ts, err := s.store.Tenants(r.Context())
	if err != nil {
		writeError(w, "", err)
		return
	}
	out := api.TenantList{Tenants: make([]api.TenantInfo, 0, len(ts))}
	for _, t := range ts {
		out.Tenants = append(out.Tenants, api.TenantInfo{ID: t.ID, Tier: string(t.Tier), Created: t.Created, Keys: t.Keys})
	}
	writeJSON(w, http.StatusOK, out)
}

func (s *Server) handleListQuotas(w http.ResponseWriter, r *http.Request) {
	qs, err := s.store.Quotas(r.Context())
	if err != nil {
		writeError(w, "", err)
		return
	}
	out := api.QuotaList{Quotas: make([]api.QuotaInfo, 0, len(qs))}
	for _, q := range qs {
		out.Quotas = append(out.Quotas, quotaInfo(q))
	}
	writeJSON(w, http.StatusOK, out)
}

func (s *Server) handleGetQuota(w http.ResponseWriter, r *http.Request) {
	tenant := r.PathValue("tenant")
	q, err := s.store.Quota(r.Context(), tenant)
	if err != nil {
		writeError(w, "", storeError(err, fmt.Sprintf("tenant %q", tenant)))
		return
	}
	s.writeQuota(w, r, q)
}

func (s *Server) handleSetQuota(w http.ResponseWriter, r *http.Request) {
	var req api.QuotaUpdate
	if err := s.decodeBody(w, r, &req); err != nil {
		writeError(w, "", err)
		return
	}
	u := store.QuotaUpdate{RPM: req.RequestsPerMinute, TPM: req.TokensPerMinute, Concurrency: req.Concurrency,
		DailyTokens: req.DailyTokens, Capacity: store.CapacityUpdate{HotShards: req.HotShards, UserRPM: req.UserRPM,
			UserTPM: req.UserTPM, ReservedTPS: req.ReservedTPS, ReservedModel: req.ReservedModel}}
	if req.Tier != nil {
		t, err := store.ParseTier(*req.Tier)
		if err != nil {
			writeError(w, "", pipeline.InvalidParam("tier", "%v", err))
			return
		}
		u.Tier = &t
	}
	tenant := r.PathValue("tenant")
	q, err := s.store.UpdateQuota(r.Context(), tenant, u)
	if err != nil {
		writeError(w, "", storeError(err, fmt.Sprintf("tenant %q", tenant)))
		return
	}
	s.log.Info("quota set", "tenant", q.Tenant, "tier", q.Tier, "rpm", q.Limits.RPM, "tpm", q.Limits.TPM,
		"concurrency", q.Limits.Concurrency, "daily_tokens", q.Limits.DailyTokens, "hot_shards", q.Capacity.HotShards,
		"user_rpm", q.Capacity.UserRPM, "user_tpm", q.Capacity.UserTPM, "reserved_tps", q.Capacity.ReservedTPS,
		"reserved_model", q.Capacity.ReservedModel, "by", principalFrom(r.Context()).KeyID)
	s.writeQuota(w, r, q)
}

// writeQuota answers with q and the tenant's current usage.
func (s *Server) writeQuota(w http.ResponseWriter, r *http.Request, q store.Quota) {
	info := quotaInfo(q)
	u, err := s.limiter.Usage(r.Context(), q.Tenant, pipeline.QuotaLimitsOf(q))
	if err != nil {
		// Redis failing: the settings are still worth showing.
		s.log.Warn("quota usage unavailable", "tenant", q.Tenant, "err", err)
		writeJSON(w, http.StatusOK, info)
		return
	}
	info.Usage = &api.QuotaUsage{InFlight: u.InFlight, RequestsAvailable: u.RequestsAvailable,
		TokensAvailable: u.TokensAvailable, DailyTokensUsed: u.DailyTokensUsed, Rejected: s.rejected(q.Tenant)}
	writeJSON(w, http.StatusOK, info)
}

func keyInfo(k store.Key) api.KeyInfo {
	return api.KeyInfo{ID: k.ID, Tenant: k.Tenant, Admin: k.Admin, Name: k.Name, Created: k.Created,
		LastUsed: timePtr(k.LastUsed), Revoked: timePtr(k.Revoked)}
}

func timePtr(t time.Time) *time.Time {
	if t.IsZero() {
		return nil
	}
	return &t
}

func quotaInfo(q store.Quota) api.QuotaInfo {
	info := api.QuotaInfo{Tenant: q.Tenant, Tier: string(q.Tier), Limits: api.QuotaLimits{
		RequestsPerMinute: q.Limits.RPM, TokensPerMinute: q.Limits.TPM,
		Concurrency: q.Limits.Concurrency, DailyTokens: q.Limits.DailyTokens}}
	for _, o := range []struct {
		name string
		v    *int64
	}{{"rpm", q.Override.RPM}, {"tpm", q.Override.TPM}, {"concurrency", q.Override.Concurrency},
		{"daily_tokens", q.Override.DailyTokens}} {
		if o.v != nil {
			info.Overridden = append(info.Overridden, o.name)
		}
	}
	if c := q.Capacity; c != (store.Capacity{}) {
		info.Capacity = &api.QuotaCapacity{HotShards: c.HotShards, UserRPM: c.UserRPM, UserTPM: c.UserTPM,
			ReservedTPS: c.ReservedTPS, ReservedModel: c.ReservedModel}
	}
	return info
}

// rejected is how many of tenant's requests quota refused since start.
func (s *Server) rejected(tenant string) uint64 {
	n, _ := s.pipe.Rejected(tenant, time.Now())
	return n
}
