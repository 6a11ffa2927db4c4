package main

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/llmd/llmd/api"
)

const acmeQuota = "" +
	"Tenant:  acme\n" +
	"Tier:    enterprise\n" +
	"Limits:\n" +
	"  requests per minute  600 (tier)\n" +
	"  tokens per minute    unlimited (override)\n" +
	"  concurrency          8 (tier)\n" +
	"  daily tokens         1000000 (override)\n" +
	"Usage:\n" +
	"  in flight            2 of 8\n" +
	"  requests available   598\n" +
	"  tokens available     unlimited\n" +
	"  daily tokens used    1234 of 1000000\n" +
	"  rejected             5\n"

func TestQuotaGet(t *testing.T) {
	srv := newFakeAdmin(t, &fakeAdmin{})
	out, errOut, err := runCmd(t, "", "--addr", srv.URL, "--api-key", adminKey, "quota", "get", "acme")
	require.NoError(t, err)
	require.Empty(t, errOut)
	require.Equal(t, acmeQuota, out)

	out, _, err = runCmd(t, "", "--addr", srv.URL, "--api-key", adminKey, "quota", "get", "default")
	require.NoError(t, err)
	require.Equal(t, ""+
		"Tenant:  default\n"+
		"Tier:    paid\n"+
		"Limits:\n"+
		"  requests per minute  60 (tier)\n"+
		"  tokens per minute    40000 (tier)\n"+
		"  concurrency          4 (tier)\n"+
		"  daily tokens         unlimited (tier)\n"+
		"Usage:\n"+
		"  in flight            0 of 4\n"+
		"  requests available   60\n"+
		"  tokens available     40000\n"+
		"  daily tokens used    0\n"+
		"  rejected             0\n", out)

	out, _, err = runCmd(t, "", "--addr", srv.URL, "--api-key", adminKey, "quota", "get", "acme", "--json")
	require.NoError(t, err)
	var q api.QuotaInfo
	require.NoError(t, json.Unmarshal([]byte(out), &q))
	require.Equal(t, "acme", q.Tenant)
	require.Equal(t, []string{"tpm", "daily_tokens"}, q.Overridden)
	require.Equal(t, uint64(5), q.Usage.Rejected)

	var stdout, stderr bytes.Buffer
	code := execute(t.Context(), []string{"--addr", srv.URL, "--api-key", adminKey, "quota", "get", "nope"},
		strings.NewReader(""), &stdout, &stderr)
	require.Equal(t, exitFailure, code)
	require.Empty(t, stdout.String())
	require.Equal(t, "llmctl: no tenant \"nope\": see the tenants with \"llmctl tenants list\"\n", stderr.String())
}

func TestQuotaList(t *testing.T) {
	srv := newFakeAdmin(t, &fakeAdmin{})
	out, errOut, err := runCmd(t, "", "--addr", srv.URL, "--api-key", adminKey, "quota", "list")
	require.NoError(t, err)
	require.Empty(t, errOut)
	require.Equal(t, ""+
		"TENANT   TIER        RPM  TPM         CONCURRENCY  DAILY TOKENS\n"+
		"acme     enterprise  600  unlimited*  8            1000000*\n"+
		"default  paid        60   40000       4            unlimited\n"+
		"* set for the tenant; the other limits are its tier's defaults\n", out)

	out, _, err = runCmd(t, "", "--addr", srv.URL, "--api-key", adminKey, "quota", "list", "--json")
	require.NoError(t, err)
	var list api.QuotaList
	require.NoError(t, json.Unmarshal([]byte(out), &list))
	require.Len(t, list.Quotas, 2)
	require.Equal(t, api.QuotaLimits{RequestsPerMinute: 60, TokensPerMinute: 40000, Concurrency: 4}, list.Quotas[1].Limits)
}

func TestQuotaSet(t *testing.T) {
	tests := map[string]struct {
		flags    []string
		wantBody map[string]any
	}{
		"one limit":             {flags: []string{"--rpm", "600"}, wantBody: map[string]any{"rpm": 600.0}},
		"unlimited":             {flags: []string{"--tpm", "0"}, wantBody: map[string]any{"tpm": 0.0}},
		"back to the tier":      {flags: []string{"--concurrency", "-1"}, wantBody: map[string]any{"concurrency": -1.0}},
		"tier and daily tokens": {flags: []string{"--tier", "free", "--daily-tokens=5"}, wantBody: map[string]any{"tier": "free", "daily_tokens": 5.0}},
		"everything": {
			flags:    []string{"--tier", "batch", "--rpm", "1", "--tpm", "2", "--concurrency", "3", "--daily-tokens", "4"},
			wantBody: map[string]any{"tier": "batch", "rpm": 1.0, "tpm": 2.0, "concurrency": 3.0, "daily_tokens": 4.0},
		},
		"hot shards":   {flags: []string{"--hot-shards", "8"}, wantBody: map[string]any{"hot_shards": 8.0}},
		"per-user":     {flags: []string{"--user-rpm", "20", "--user-tpm", "0"}, wantBody: map[string]any{"user_rpm": 20.0, "user_tpm": 0.0}},
		"reserved":     {flags: []string{"--reserved-tps", "150.5"}, wantBody: map[string]any{"reserved_tps": 150.5, "reserved_model": ""}},
		"reserved mid": {flags: []string{"--reserved-tps", "40", "--model", "mid"}, wantBody: map[string]any{"reserved_tps": 40.0, "reserved_model": "mid"}},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			f := &fakeAdmin{}
			srv := newFakeAdmin(t, f)
			args := append([]string{"--addr", srv.URL, "--api-key", adminKey, "quota", "set", "acme"}, tc.flags...)
			out, errOut, err := runCmd(t, "", args...)
			require.NoError(t, err)
			require.Empty(t, errOut)
			require.Equal(t, acmeQuota, out, "prints the resulting quota")
			require.Equal(t, tc.wantBody, f.lastBody(t))
		})
	}

	t.Run("json", func(t *testing.T) {
		srv := newFakeAdmin(t, &fakeAdmin{})
		out, _, err := runCmd(t, "", "--addr", srv.URL, "--api-key", adminKey, "quota", "set", "beta", "--rpm", "5", "--json")
		require.NoError(t, err)
		var q api.QuotaInfo
		require.NoError(t, json.Unmarshal([]byte(out), &q))
		require.Equal(t, "beta", q.Tenant)
	})
}

func TestQuotaSetUsageErrors(t *testing.T) {
	tests := map[string]struct {
		args    []string
		wantErr string
	}{
		"no flag": {args: []string{"acme"},
			wantErr: "llmctl: nothing to set: give --tier, --rpm, --tpm, --concurrency, --daily-tokens, " +
				"--hot-shards, --user-rpm, --user-tpm or --reserved-tps\n"},
		"negative shards": {args: []string{"acme", "--hot-shards", "-1"},
			wantErr: "llmctl: --hot-shards -1: give a positive number, or 0 to clear it\n"},
		"too many shards": {args: []string{"acme", "--hot-shards", "65"}, wantErr: "llmctl: --hot-shards 65: at most 64\n"},
		"negative reserved": {args: []string{"acme", "--reserved-tps", "-3"},
			wantErr: "llmctl: --reserved-tps -3: give output tokens per second, or 0 to clear it\n"},
		"model alone": {args: []string{"acme", "--model", "mid"},
			wantErr: "llmctl: --model goes with --reserved-tps: the model the reservation holds capacity on\n"},
		"below -1": {args: []string{"acme", "--rpm", "-2"},
			wantErr: "llmctl: --rpm -2: give a positive number, 0 for unlimited or -1 for the tier's default\n"},
		"unknown tier": {args: []string{"acme", "--tier", "gold"},
			wantErr: "llmctl: unknown tier \"gold\": use one of enterprise, paid, free, batch\n"},
		"empty tier": {args: []string{"acme", "--tier", ""}, wantErr: "llmctl: --tier is empty\n"},
		"no tenant":  {args: []string{"--rpm", "5"}, wantErr: "llmctl: accepts 1 arg(s), received 0\n"},
		"not a number": {args: []string{"acme", "--tpm", "lots"},
			wantErr: "llmctl: invalid argument \"lots\" for \"--tpm\" flag: strconv.ParseInt: parsing \"lots\": invalid syntax\n"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			f := &fakeAdmin{}
			srv := newFakeAdmin(t, f)
			var stdout, stderr bytes.Buffer
			args := append([]string{"--addr", srv.URL, "--api-key", adminKey, "quota", "set"}, tc.args...)
			code := execute(t.Context(), args, strings.NewReader(""), &stdout, &stderr)
			require.Equal(t, exitUsage, code, stderr.String())
			require.Empty(t, stdout.String())
			require.Equal(t, tc.wantErr+"Run 'llmctl quota set --help' for usage.\n", stderr.String())
			require.Zero(t, f.requestCount(), "a usage error sends nothing")
		})
	}
}
