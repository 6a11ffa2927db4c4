package server

import (
	"net/http"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestAuthenticateRefusesUnsetPolicy(t *testing.T) {
	t.Parallel()
	req, err := http.NewRequest(http.MethodGet, "/x", nil)
	require.NoError(t, err)
	_, err = (&Server{}).authenticate(req, policyUnset)
	require.ErrorIs(t, err, errUnsetRoute)
	require.Equal(t, http.StatusForbidden, StatusOf(err))
}
