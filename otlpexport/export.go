// Package otlpexport sends OpenTelemetry profiles (an encoded
// ExportProfilesServiceRequest of opentelemetry.proto.profiles.v1development)
// to an OTLP endpoint, such as a Collector's OTLP receiver: OTLP/HTTP with
// a protobuf body to /v1development/profiles, or OTLP/gRPC for a
// grpc:// endpoint (unencrypted HTTP/2; grpcs:// over TLS), with the
// standard library's HTTP client only.
//
// Configuration follows the OpenTelemetry exporter conventions: headers,
// timeout, compression and protocol come from the OTEL_EXPORTER_OTLP_*
// variables, the profiles-specific OTEL_EXPORTER_OTLP_PROFILES_* ones
// first (FromEnv). A refusal is an *Error naming the endpoint and the
// HTTP or gRPC status. Imports nothing of ustack.
package otlpexport

import (
	"bytes"
	"compress/gzip"
	"context"
	"crypto/tls"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"net/url"
	"os"
	"strconv"
	"strings"
	"time"
)

// Paths of the profiles service.
const (
	HTTPPath = "/v1development/profiles"
	GRPCPath = "/opentelemetry.proto.collector.profiles.v1development.ProfilesService/Export"
)

// DefaultTimeout bounds one export, retries included, when neither the
// caller nor the environment says otherwise (the OpenTelemetry default).
const DefaultTimeout = 10 * time.Second

// Config says where and how to send.
type Config struct {
	// Endpoint is the URL: http:// or https:// for OTLP/HTTP (a URL
	// without a path gets /v1development/profiles), grpc:// (cleartext
	// HTTP/2) or grpcs:// (TLS) for OTLP/gRPC. A bare host:port is
	// http://host:port.
	Endpoint string
	// Headers are sent with every request (after the environment's, so
	// they win).
	Headers map[string]string
	// Timeout bounds one Send, retries included (DefaultTimeout when 0).
	Timeout time.Duration
	// Gzip compresses the body.
	Gzip bool
	// Client, when set, is used for OTLP/HTTP (tests).
	Client *http.Client
}

// FromEnv returns a Config for endpoint with the headers, timeout and
// compression of the environment (getenv is os.Getenv when nil): each of
// OTEL_EXPORTER_OTLP_PROFILES_HEADERS, _TIMEOUT (milliseconds) and
// _COMPRESSION (gzip or none), else the OTEL_EXPORTER_OTLP_ one. An empty
// endpoint is taken from OTEL_EXPORTER_OTLP_PROFILES_ENDPOINT (as is), else
// OTEL_EXPORTER_OTLP_ENDPOINT (a base URL). A malformed variable is an
// error naming it.
func FromEnv(endpoint string, getenv func(string) string) (Config, error) {
	if getenv == nil {
		getenv = os.Getenv
	}
	get := func(name string) (string, string) {
		if v := getenv("OTEL_EXPORTER_OTLP_PROFILES_" + name); v != "" {
			return v, "OTEL_EXPORTER_OTLP_PROFILES_" + name
		}
		return getenv("OTEL_EXPORTER_OTLP_" + name), "OTEL_EXPORTER_OTLP_" + name
	}
	c := Config{Endpoint: endpoint, Headers: map[string]string{}}
	if c.Endpoint == "" {
		if v := getenv("OTEL_EXPORTER_OTLP_PROFILES_ENDPOINT"); v != "" {
			c.Endpoint = v
		} else if v := getenv("OTEL_EXPORTER_OTLP_ENDPOINT"); v != "" {
			c.Endpoint = strings.TrimSuffix(v, "/") + HTTPPath
			if getenv("OTEL_EXPORTER_OTLP_PROTOCOL") == "grpc" {
				c.Endpoint = grpcScheme(v)
			}
		}
	}
	if v, name := get("HEADERS"); v != "" {
		h, err := ParseHeaders(v)
		if err != nil {
			return c, fmt.Errorf("%s: %w", name, err)
		}
		c.Headers = h
	}
	if v, name := get("TIMEOUT"); v != "" {
		ms, err := strconv.ParseUint(v, 10, 32)
		if err != nil {
			return c, fmt.Errorf("%s=%q: not a timeout in milliseconds", name, v)
		}
		c.Timeout = time.Duration(ms) * time.Millisecond
	}
	switch v, name := get("COMPRESSION"); v {
	case "", "none":
	case "gzip":
		c.Gzip = true
	default:
		return c, fmt.Errorf("%s=%q: want gzip or none", name, v)
	}
	return c, nil
}

// grpcScheme turns an http(s) base URL into the grpc(s) endpoint.
func grpcScheme(base string) string {
	switch {
	case strings.HasPrefix(base, "http://"):
		return "grpc://" + strings.TrimPrefix(base, "http://")
	case strings.HasPrefix(base, "https://"):
		return "grpcs://" + strings.TrimPrefix(base, "https://")
	}
	return "grpc://" + base
}

// ParseHeaders parses the OpenTelemetry header list: comma-separated
// key=value pairs, values URL-encoded.
func ParseHeaders(s string) (map[string]string, error) {
	h := map[string]string{}
	for _, kv := range strings.Split(s, ",") {
		if strings.TrimSpace(kv) == "" {
			continue
		}
		k, v, ok := strings.Cut(kv, "=")
		k = strings.TrimSpace(k)
		if !ok || k == "" {
			return nil, fmt.Errorf("header %q is not key=value", kv)
		}
		uv, err := url.PathUnescape(strings.TrimSpace(v))
		if err != nil {
			return nil, fmt.Errorf("header %s: value %q is not URL-encoded: %v", k, v, err)
		}
		h[k] = uv
	}
	return h, nil
}

// Error is a refusal: the endpoint answered, and not with success.
type Error struct {
	Endpoint string
	// HTTPStatus is the HTTP status code (0 for a gRPC status).
	HTTPStatus int
	// GRPCStatus is the gRPC status code, when the endpoint is gRPC.
	GRPCStatus int
	// Message is the server's reason, as much as it gave.
	Message string
}

func (e *Error) Error() string {
	var status string
	if e.HTTPStatus != 0 {
		status = fmt.Sprintf("HTTP %d %s", e.HTTPStatus, http.StatusText(e.HTTPStatus))
	} else {
		status = fmt.Sprintf("gRPC status %d %s", e.GRPCStatus, grpcCodeName(e.GRPCStatus))
	}
	msg := ""
	if e.Message != "" {
		msg = ": " + e.Message
	}
	return fmt.Sprintf("OTLP endpoint %s refused the profiles: %s%s", e.Endpoint, status, msg)
}

// retryable reports whether the OpenTelemetry specification lets a
// client try again after this refusal.
func (e *Error) retryable() bool {
	switch e.HTTPStatus {
	case 429, 502, 503, 504:
		return true
	}
	switch e.GRPCStatus {
	case 1, 4, 8, 10, 11, 14, 15: // CANCELLED, DEADLINE_EXCEEDED, RESOURCE_EXHAUSTED, ABORTED, OUT_OF_RANGE, UNAVAILABLE, DATA_LOSS
		return true
	}
	return false
}

var grpcCodes = []string{"OK", "CANCELLED", "UNKNOWN", "INVALID_ARGUMENT", "DEADLINE_EXCEEDED", "NOT_FOUND",
	"ALREADY_EXISTS", "PERMISSION_DENIED", "RESOURCE_EXHAUSTED", "FAILED_PRECONDITION", "ABORTED",
	"OUT_OF_RANGE", "UNIMPLEMENTED", "INTERNAL", "UNAVAILABLE", "DATA_LOSS", "UNAUTHENTICATED"}

func grpcCodeName(c int) string {
	if c >= 0 && c < len(grpcCodes) {
		return grpcCodes[c]
	}
	return "?"
}

// Result is what an accepted export said back.
type Result struct {
	// Rejected and Message are the response's partial success: how many
	// profiles the endpoint dropped, and why.
	Rejected int64
	Message  string
}

// Send sends one encoded ExportProfilesServiceRequest and waits for the
// answer, trying again after retryable refusals (HTTP 429, 502, 503, 504;
// gRPC UNAVAILABLE and the like) with backoff until the timeout.
func Send(ctx context.Context, c Config, request []byte) (Result, error) {
	target, isGRPC, tlsGRPC, err := endpointURL(c.Endpoint)
	if err != nil {
		return Result{}, err
	}
	timeout := c.Timeout
	if timeout <= 0 {
		timeout = DefaultTimeout
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	body := request
	if c.Gzip {
		var b bytes.Buffer
		zw := gzip.NewWriter(&b)
		zw.Write(request)
		zw.Close()
		body = b.Bytes()
	}
	client := c.Client
	if isGRPC {
		client = grpcClient(tlsGRPC)
		defer client.CloseIdleConnections()
		var framed []byte
		flag := byte(0)
		if c.Gzip {
			flag = 1
		}
		framed = append(framed, flag, 0, 0, 0, 0)
		binary.BigEndian.PutUint32(framed[1:], uint32(len(body)))
		body = append(framed, body...)
	} else if client == nil {
		client = &http.Client{}
		defer client.CloseIdleConnections()
	}
	backoff := 100 * time.Millisecond
	for {
		res, err := send(ctx, client, target, c, body, isGRPC)
		var e *Error
		if err == nil || !errors.As(err, &e) || !e.retryable() {
			return res, err
		}
		select {
		case <-ctx.Done():
			return res, fmt.Errorf("%w (gave up after %v)", err, timeout)
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, 2*time.Second)
	}
}

// endpointURL returns the URL to post to and whether it is gRPC (and over
// TLS).
func endpointURL(endpoint string) (target string, isGRPC, tlsGRPC bool, err error) {
	if endpoint == "" {
		return "", false, false, errors.New("no OTLP endpoint")
	}
	if !strings.Contains(endpoint, "://") {
		endpoint = "http://" + endpoint
	}
	u, err := url.Parse(endpoint)
	if err != nil {
		return "", false, false, fmt.Errorf("OTLP endpoint %q: %v", endpoint, err)
	}
	if u.Host == "" {
		return "", false, false, fmt.Errorf("OTLP endpoint %q has no host", endpoint)
	}
	switch u.Scheme {
	case "http", "https":
		if u.Path == "" || u.Path == "/" {
			u.Path = HTTPPath
		}
		return u.String(), false, false, nil
	case "grpc", "grpcs":
		tlsGRPC = u.Scheme == "grpcs"
		u.Scheme = "http"
		if tlsGRPC {
			u.Scheme = "https"
		}
		u.Path = GRPCPath
		return u.String(), true, tlsGRPC, nil
	}
	return "", false, false, fmt.Errorf("OTLP endpoint %q: scheme %q is not http, https, grpc or grpcs", endpoint, u.Scheme)
}

// grpcClient is an HTTP/2-only client: cleartext (h2c) for grpc://.
func grpcClient(useTLS bool) *http.Client {
	var p http.Protocols
	if useTLS {
		p.SetHTTP2(true)
	} else {
		p.SetUnencryptedHTTP2(true)
	}
	return &http.Client{Transport: &http.Transport{Protocols: &p, TLSClientConfig: &tls.Config{}}}
}

func send(ctx context.Context, client *http.Client, target string, c Config, body []byte, isGRPC bool) (Result, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, target, bytes.NewReader(body))
	if err != nil {
		return Result{}, err
	}
	for k, v := range c.Headers {
		req.Header.Set(k, v)
	}
	if isGRPC {
		req.Header.Set("Content-Type", "application/grpc+proto")
		req.Header.Set("TE", "trailers")
		if c.Gzip {
			req.Header.Set("Grpc-Encoding", "gzip")
		}
	} else {
		req.Header.Set("Content-Type", "application/x-protobuf")
		if c.Gzip {
			req.Header.Set("Content-Encoding", "gzip")
		}
	}
	resp, err := client.Do(req)
	if err != nil {
		return Result{}, fmt.Errorf("OTLP endpoint %s: %w", c.Endpoint, unwrapURL(err))
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, 4<<20))
	if err != nil {
		return Result{}, fmt.Errorf("OTLP endpoint %s: reading the answer: %w", c.Endpoint, err)
	}
	if isGRPC {
		return grpcResult(c.Endpoint, resp, data)
	}
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		return Result{}, &Error{Endpoint: c.Endpoint, HTTPStatus: resp.StatusCode, Message: httpMessage(resp, data)}
	}
	if !strings.HasPrefix(resp.Header.Get("Content-Type"), "application/x-protobuf") {
		return Result{}, nil
	}
	rejected, msg, err := ParseResponse(data)
	if err != nil {
		return Result{}, fmt.Errorf("OTLP endpoint %s: its answer: %w", c.Endpoint, err)
	}
	return Result{Rejected: rejected, Message: msg}, nil
}

func unwrapURL(err error) error {
	var ue *url.Error
	if errors.As(err, &ue) {
		return ue.Err
	}
	return err
}

// httpMessage is a refusal's reason: a google.rpc.Status's message in a
// protobuf body, else the body's text, shortened.
func httpMessage(resp *http.Response, data []byte) string {
	if strings.HasPrefix(resp.Header.Get("Content-Type"), "application/x-protobuf") {
		if msg, err := ParseStatus(data); err == nil && msg != "" {
			return msg
		}
	}
	s := strings.TrimSpace(string(data))
	if len(s) > 300 {
		s = s[:300] + "..."
	}
	return s
}

// grpcResult reads a gRPC answer: the status in the trailers (or the
// headers of a trailers-only answer), the response message in the body.
func grpcResult(endpoint string, resp *http.Response, data []byte) (Result, error) {
	if resp.StatusCode != http.StatusOK {
		return Result{}, &Error{Endpoint: endpoint, HTTPStatus: resp.StatusCode, Message: httpMessage(resp, data)}
	}
	st := resp.Trailer.Get("Grpc-Status")
	msg := resp.Trailer.Get("Grpc-Message")
	if st == "" {
		st, msg = resp.Header.Get("Grpc-Status"), resp.Header.Get("Grpc-Message")
	}
	code, err := strconv.Atoi(st)
	if err != nil {
		return Result{}, fmt.Errorf("OTLP endpoint %s: the answer has no gRPC status (HTTP %d, content type %q)", endpoint, resp.StatusCode, resp.Header.Get("Content-Type"))
	}
	if code != 0 {
		if m, err := url.PathUnescape(msg); err == nil {
			msg = m
		}
		return Result{}, &Error{Endpoint: endpoint, GRPCStatus: code, Message: msg}
	}
	if len(data) < 5 {
		return Result{}, nil
	}
	if data[0] != 0 {
		return Result{}, nil // a compressed response: nothing we need in it
	}
	n := binary.BigEndian.Uint32(data[1:5])
	if uint64(n) > uint64(len(data)-5) {
		return Result{}, fmt.Errorf("OTLP endpoint %s: gRPC message of %d bytes in %d", endpoint, n, len(data)-5)
	}
	rejected, m, err := ParseResponse(data[5 : 5+n])
	if err != nil {
		return Result{}, fmt.Errorf("OTLP endpoint %s: its answer: %w", endpoint, err)
	}
	return Result{Rejected: rejected, Message: m}, nil
}

// ParseResponse decodes an ExportProfilesServiceResponse: its
// partial_success (field 1) rejected_profiles (1) and error_message (2).
func ParseResponse(b []byte) (rejected int64, msg string, err error) {
	err = fields(b, 0, func(num int, v uint64, sub []byte, off int) error {
		if num != 1 || sub == nil {
			return nil
		}
		return fields(sub, off, func(num int, v uint64, s []byte, _ int) error {
			switch {
			case num == 1 && s == nil:
				rejected = int64(v)
			case num == 2 && s != nil:
				msg = string(s)
			}
			return nil
		})
	})
	return rejected, msg, err
}

// ParseStatus decodes a google.rpc.Status's message (field 2).
func ParseStatus(b []byte) (string, error) {
	var msg string
	err := fields(b, 0, func(num int, _ uint64, s []byte, _ int) error {
		if num == 2 && s != nil {
			msg = string(s)
		}
		return nil
	})
	return msg, err
}

// fields walks the protobuf fields of b, calling fn with each field's
// number and its varint value or its bytes (nil for varints and fixed
// values). base is b's offset in the message, for errors.
func fields(b []byte, base int, fn func(num int, v uint64, sub []byte, off int) error) error {
	for i := 0; i < len(b); {
		start := i
		key, n := binary.Uvarint(b[i:])
		if n <= 0 {
			return fmt.Errorf("protobuf: bad field key at offset %d", base+start)
		}
		i += n
		num, wire := int(key>>3), key&7
		if num == 0 || key>>3 > math.MaxInt32 {
			return fmt.Errorf("protobuf: field number %d at offset %d", key>>3, base+start)
		}
		switch wire {
		case 0:
			v, n := binary.Uvarint(b[i:])
			if n <= 0 {
				return fmt.Errorf("protobuf: bad varint of field %d at offset %d", num, base+i)
			}
			i += n
			if err := fn(num, v, nil, base+i); err != nil {
				return err
			}
		case 1, 5:
			size := 8
			if wire == 5 {
				size = 4
			}
			if len(b)-i < size {
				return fmt.Errorf("protobuf: field %d at offset %d runs past the end (%d bytes)", num, base+start, len(b))
			}
			i += size
		case 2:
			l, n := binary.Uvarint(b[i:])
			if n <= 0 {
				return fmt.Errorf("protobuf: bad length of field %d at offset %d", num, base+i)
			}
			i += n
			if l > uint64(len(b)-i) {
				return fmt.Errorf("protobuf: field %d at offset %d has %d bytes, %d left", num, base+start, l, len(b)-i)
			}
			sub := b[i : i+int(l) : i+int(l)]
			if sub == nil {
				sub = []byte{}
			}
			if err := fn(num, 0, sub, base+i); err != nil {
				return err
			}
			i += int(l)
		default:
			return fmt.Errorf("protobuf: field %d at offset %d has wire type %d", num, base+start, wire)
		}
	}
	return nil
}
