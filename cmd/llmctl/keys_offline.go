package main

import (
	"context"
	"errors"
	"fmt"

	"github.com/llmd/llmd/api"
	"github.com/llmd/llmd/store"
)

// defaultKeyTenant owns keys created without --tenant, as in llmd.
const defaultKeyTenant = "default"

func init() { createKeyOffline = createKeyInStore }

// createKeyInStore creates a key in the SQLite store of dataDir, creating
// both if needed (so the first admin key can exist before llmd ever runs,
// e.g. to listen on a public address from the start). It is safe while
// llmd runs: SQLite serialises the writers.
func createKeyInStore(ctx context.Context, dataDir string, req api.KeyCreateRequest) (api.KeyCreated, error) {
	st, err := store.Open(ctx, dataDir)
	if err != nil {
		return api.KeyCreated{}, err
	}
	defer st.Close()
	if req.Tenant == "" {
		req.Tenant = defaultKeyTenant
	}
	tier := store.TierPaid
	if req.Tier != "" {
		if tier, err = store.ParseTier(req.Tier); err != nil {
			return api.KeyCreated{}, err
		}
	}
	if _, err := st.EnsureTenant(ctx, req.Tenant, tier); err != nil {
		return api.KeyCreated{}, err
	}
	var (
		secret = req.Key
		k      store.Key
	)
	if secret != "" {
		k, err = st.ImportKey(ctx, req.Tenant, req.Admin, req.Name, secret)
	} else {
		secret, k, err = st.CreateKey(ctx, req.Tenant, req.Admin, req.Name)
	}
	if err != nil {
		if errors.Is(err, store.ErrInvalid) {
			return api.KeyCreated{}, err
		}
		return api.KeyCreated{}, fmt.Errorf("create key: %w", err)
	}
	info := api.KeyInfo{ID: k.ID, Tenant: k.Tenant, Admin: k.Admin, Name: k.Name, Created: k.Created}
	return api.KeyCreated{Key: secret, KeyInfo: info}, nil
}
