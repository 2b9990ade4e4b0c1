package otlpexport

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestFromEnv checks the OpenTelemetry exporter variables: the profiles
// one before the general one, headers URL-decoded, the timeout in
// milliseconds, gzip; a malformed variable is an error naming it.
func TestFromEnv(t *testing.T) {
	env := map[string]string{
		"OTEL_EXPORTER_OTLP_HEADERS":              "a=1,b=x%20y",
		"OTEL_EXPORTER_OTLP_PROFILES_HEADERS":     "c=3",
		"OTEL_EXPORTER_OTLP_TIMEOUT":              "2500",
		"OTEL_EXPORTER_OTLP_PROFILES_COMPRESSION": "gzip",
		"OTEL_EXPORTER_OTLP_ENDPOINT":             "http://127.0.0.1:4318/",
	}
	c, err := FromEnv("", func(k string) string { return env[k] })
	require.NoError(t, err)
	assert.Equal(t, map[string]string{"c": "3"}, c.Headers, "the profiles variable wins")
	assert.Equal(t, 2500*time.Millisecond, c.Timeout)
	assert.True(t, c.Gzip)
	assert.Equal(t, "http://127.0.0.1:4318/v1development/profiles", c.Endpoint)

	delete(env, "OTEL_EXPORTER_OTLP_PROFILES_HEADERS")
	env["OTEL_EXPORTER_OTLP_PROTOCOL"] = "grpc"
	c, err = FromEnv("", func(k string) string { return env[k] })
	require.NoError(t, err)
	assert.Equal(t, map[string]string{"a": "1", "b": "x y"}, c.Headers)
	assert.Equal(t, "grpc://127.0.0.1:4318/", c.Endpoint)

	env["OTEL_EXPORTER_OTLP_TIMEOUT"] = "10s"
	_, err = FromEnv("x", func(k string) string { return env[k] })
	assert.ErrorContains(t, err, `OTEL_EXPORTER_OTLP_TIMEOUT="10s": not a timeout in milliseconds`)
	env["OTEL_EXPORTER_OTLP_TIMEOUT"] = ""
	env["OTEL_EXPORTER_OTLP_HEADERS"] = "novalue"
	_, err = FromEnv("x", func(k string) string { return env[k] })
	assert.ErrorContains(t, err, `OTEL_EXPORTER_OTLP_HEADERS: header "novalue" is not key=value`)
}

// TestEndpointURL checks where each form of endpoint is sent.
func TestEndpointURL(t *testing.T) {
	for in, want := range map[string]string{
		"http://h:4318":                "http://h:4318/v1development/profiles",
		"http://h:4318/":               "http://h:4318/v1development/profiles",
		"https://h/custom/path":        "https://h/custom/path",
		"h:4318":                       "http://h:4318/v1development/profiles",
		"grpc://h:4317":                "http://h:4317" + GRPCPath,
		"grpcs://h:4317":               "https://h:4317" + GRPCPath,
		"ftp://h":                      "error: scheme \"ftp\"",
		"http://":                      "error: has no host",
		"":                             "error: no OTLP endpoint",
		"http://h:4318/v1/development": "http://h:4318/v1/development",
	} {
		got, _, _, err := endpointURL(in)
		if strings.HasPrefix(want, "error: ") {
			assert.ErrorContains(t, err, strings.TrimPrefix(want, "error: "), in)
			continue
		}
		require.NoError(t, err, in)
		assert.Equal(t, want, got, in)
	}
}

// TestSendRetries sends to a test endpoint on 127.0.0.1 that answers 503
// twice, then accepts with a partial success: Send tries again and
// returns the rejected count and message. An endpoint that keeps
// answering 503 makes Send give up at its timeout with the status.
func TestSendRetries(t *testing.T) {
	var calls atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		if string(b) != "request" {
			w.WriteHeader(http.StatusBadRequest)
			return
		}
		if calls.Add(1) <= 2 {
			w.WriteHeader(http.StatusServiceUnavailable)
			return
		}
		w.Header().Set("Content-Type", "application/x-protobuf")
		// partial_success { rejected_profiles: 3, error_message: "bad" }
		w.Write([]byte{0x0a, 0x07, 0x08, 0x03, 0x12, 0x03, 'b', 'a', 'd'})
	}))
	defer srv.Close()
	res, err := Send(context.Background(), Config{Endpoint: srv.URL, Timeout: time.Minute}, []byte("request"))
	require.NoError(t, err)
	assert.Equal(t, Result{Rejected: 3, Message: "bad"}, res)
	assert.Equal(t, int32(3), calls.Load())

	down := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusServiceUnavailable)
	}))
	defer down.Close()
	_, err = Send(context.Background(), Config{Endpoint: down.URL, Timeout: 300 * time.Millisecond}, []byte("request"))
	require.Error(t, err)
	assert.Contains(t, err.Error(), "OTLP endpoint "+down.URL+" refused the profiles: HTTP 503 Service Unavailable")
	assert.Contains(t, err.Error(), "gave up after 300ms")
}

// TestSendConnectionRefused names the endpoint when nothing listens.
func TestSendConnectionRefused(t *testing.T) {
	srv := httptest.NewServer(http.NotFoundHandler())
	url := srv.URL
	srv.Close()
	_, err := Send(context.Background(), Config{Endpoint: url, Timeout: 5 * time.Second}, []byte("x"))
	require.Error(t, err)
	assert.Contains(t, err.Error(), "OTLP endpoint "+url+": ")
	assert.Contains(t, err.Error(), "connection refused")
}

// TestParseResponse checks the partial success decoding against bytes
// written by hand from the proto (field 1: partial_success; its field 1
// rejected_profiles, field 2 error_message), unknown fields skipped, and
// damage named by offset.
func TestParseResponse(t *testing.T) {
	n, msg, err := ParseResponse([]byte{0x0a, 0x05, 0x08, 0x96, 0x01, 0x12, 0x00, 0x15, 1, 2, 3, 4})
	require.NoError(t, err)
	assert.Equal(t, int64(150), n)
	assert.Equal(t, "", msg)
	_, _, err = ParseResponse([]byte{0x0a, 0x09, 0x08})
	assert.ErrorContains(t, err, "protobuf: field 1 at offset 0 has 9 bytes, 1 left")
	_, _, err = ParseResponse([]byte{0x0a, 0x02, 0x08, 0x80})
	assert.ErrorContains(t, err, "bad varint of field 1 at offset 3")
	_, _, err = ParseResponse([]byte{0x0b})
	assert.ErrorContains(t, err, "field 1 at offset 0 has wire type 3")
}

func FuzzParseResponse(f *testing.F) {
	f.Add([]byte{0x0a, 0x07, 0x08, 0x03, 0x12, 0x03, 'b', 'a', 'd'})
	f.Add([]byte{0x0a, 0x05, 0x08, 0x96, 0x01, 0x12, 0x00, 0x15, 1, 2, 3, 4})
	f.Add([]byte{0x12, 0x02, 'h', 'i'})
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, b []byte) {
		ParseResponse(b)
		ParseStatus(b)
	})
}
