package main

import (
	"bytes"
	"context"
	"flag"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/ustack/ustack/otlpexport"
)

// otlpFlags are ustack report's flags that send the report to an OTLP
// endpoint instead of printing it.
type otlpFlags struct {
	endpoint string
	headers  map[string]string
	timeout  time.Duration
	getenv   func(string) string // os.Getenv; tests replace it
}

func (o *otlpFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&o.endpoint, "otlp-endpoint", "", "send the report as OpenTelemetry profiles to `url` instead of printing it: http(s)://HOST:PORT (OTLP/HTTP protobuf, path /v1development/profiles unless the URL has one) or grpc://HOST:PORT (OTLP/gRPC; grpcs:// over TLS); headers, timeout and gzip also from OTEL_EXPORTER_OTLP_PROFILES_* and OTEL_EXPORTER_OTLP_*")
	fs.Func("otlp-header", "with --otlp-endpoint: send the header `key=value` (repeatable; after OTEL_EXPORTER_OTLP_HEADERS)", func(s string) error {
		k, v, ok := strings.Cut(s, "=")
		if !ok || strings.TrimSpace(k) == "" {
			return fmt.Errorf("%q is not key=value", s)
		}
		if o.headers == nil {
			o.headers = map[string]string{}
		}
		o.headers[strings.TrimSpace(k)] = v
		return nil
	})
	fs.DurationVar(&o.timeout, "otlp-timeout", 0, "with --otlp-endpoint: give up sending after `duration`, retries included (default OTEL_EXPORTER_OTLP_TIMEOUT, else 10s)")
}

// check settles the format for an endpoint: the protobuf otlp format,
// which the user may name but not replace. It returns the usage error to
// print, if any.
func (o *otlpFlags) check(fs *flag.FlagSet, format *string) string {
	if o.endpoint == "" {
		if o.headers != nil || o.timeout != 0 {
			return "--otlp-header and --otlp-timeout are for --otlp-endpoint"
		}
		return ""
	}
	set := false
	fs.Visit(func(f *flag.Flag) { set = set || f.Name == "format" })
	if set && *format != "otlp" {
		return fmt.Sprintf("--otlp-endpoint sends OTLP protobuf (--format otlp, its default), not --format %s", *format)
	}
	*format = "otlp"
	return ""
}

// output returns where the report goes when it is sent: a buffer, and
// the file of -o too when given.
func (o *otlpFlags) output(out io.Writer, toFile bool) (io.Writer, *bytes.Buffer) {
	if o.endpoint == "" {
		return out, nil
	}
	buf := &bytes.Buffer{}
	if toFile {
		return io.MultiWriter(out, buf), buf
	}
	return buf, buf
}

// config is the exporter's configuration: the environment's, then the
// flags'.
func (o *otlpFlags) config() (otlpexport.Config, error) {
	cfg, err := otlpexport.FromEnv(o.endpoint, o.getenv)
	if err != nil {
		return cfg, err
	}
	for k, v := range o.headers {
		cfg.Headers[k] = v
	}
	if o.timeout > 0 {
		cfg.Timeout = o.timeout
	}
	return cfg, nil
}

// send sends the encoded request and says so on stderr; it returns the
// exit status.
func (o *otlpFlags) send(request []byte, stderr io.Writer) int {
	cfg, err := o.config()
	if err != nil {
		fmt.Fprintf(stderr, "ustack report: %v\n", err)
		return exitUsage
	}
	res, err := otlpexport.Send(context.Background(), cfg, request)
	if err != nil {
		fmt.Fprintf(stderr, "ustack report: %v\n", err)
		return exitError
	}
	if res.Rejected > 0 || res.Message != "" {
		fmt.Fprintf(stderr, "ustack report: warning: OTLP endpoint %s accepted the profiles in part: %d rejected: %s\n", o.endpoint, res.Rejected, res.Message)
	}
	fmt.Fprintf(stderr, "ustack: sent %d bytes of OTLP profiles to %s\n", len(request), o.endpoint)
	return exitOK
}
