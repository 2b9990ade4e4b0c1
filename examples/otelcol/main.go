// Command otelcol-ustack is an OpenTelemetry Collector built from the
// Collector's own modules with what ustack's tests and users need to take
// profiles in: the OTLP receiver (gRPC and HTTP), the file exporter, and
// ustack's symbolizer as the processor ustack_symbolizer.
// The profiles signal is behind the Collector's feature gate
// service.profilesSupport:
//
//	otelcol-ustack --config collector.yaml --feature-gates service.profilesSupport
//
// Its own metrics, ustack_symbolizer's counters among them, are served in
// Prometheus's text format at http://ADDRESS/metrics with
// service::telemetry::metrics_address: ADDRESS in the configuration.
//
// It is a module of its own so that ustack's importers do not inherit the
// Collector.
package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"time"

	"github.com/open-telemetry/opentelemetry-collector-contrib/exporter/fileexporter"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/prometheus/otlptranslator"
	"go.opentelemetry.io/collector/component"
	"go.opentelemetry.io/collector/confmap"
	"go.opentelemetry.io/collector/confmap/provider/envprovider"
	"go.opentelemetry.io/collector/confmap/provider/fileprovider"
	"go.opentelemetry.io/collector/exporter"
	"go.opentelemetry.io/collector/otelcol"
	"go.opentelemetry.io/collector/processor"
	"go.opentelemetry.io/collector/receiver"
	"go.opentelemetry.io/collector/receiver/otlpreceiver"
	"go.opentelemetry.io/collector/service/telemetry"
	otelprom "go.opentelemetry.io/otel/exporters/prometheus"
	noopmetric "go.opentelemetry.io/otel/metric/noop"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.uber.org/zap"

	"github.com/ustack/ustack/examples/otelcol/ustacksymbolizer"
)

func components() (otelcol.Factories, error) {
	f := otelcol.Factories{Telemetry: telemetryFactory()}
	var err error
	if f.Receivers, err = otelcol.MakeFactoryMap[receiver.Factory](otlpreceiver.NewFactory()); err != nil {
		return f, err
	}
	if f.Processors, err = otelcol.MakeFactoryMap[processor.Factory](ustacksymbolizer.NewFactory()); err != nil {
		return f, err
	}
	f.Exporters, err = otelcol.MakeFactoryMap[exporter.Factory](fileexporter.NewFactory())
	return f, err
}

// telemetryFactory is the Collector's own telemetry kept small: its log on
// standard error, its metrics (the components', ustack_symbolizer's
// counters among them) in Prometheus's text format when
// service::telemetry::metrics_address is set, no traces (the full
// otelconftelemetry brings every cloud's resource detectors).
func telemetryFactory() telemetry.Factory {
	return telemetry.NewFactory(func() component.Config { return &telemetryConfig{} },
		telemetry.WithCreateLogger(func(context.Context, telemetry.LoggerSettings, component.Config) (*zap.Logger, component.ShutdownFunc, error) {
			l, err := zap.NewDevelopment()
			return l, nil, err
		}),
		telemetry.WithCreateMeterProvider(createMeterProvider))
}

// telemetryConfig is service::telemetry of the configuration.
type telemetryConfig struct {
	// MetricsAddress (HOST:PORT) serves the Collector's own metrics at
	// http://HOST:PORT/metrics; "" keeps none.
	MetricsAddress string `mapstructure:"metrics_address"`
}

func createMeterProvider(_ context.Context, set telemetry.MeterSettings, cfg component.Config) (telemetry.MeterProvider, error) {
	addr := cfg.(*telemetryConfig).MetricsAddress
	if addr == "" {
		return nopMeterProvider{noopmetric.NewMeterProvider()}, nil
	}
	reg := prometheus.NewRegistry()
	exp, err := otelprom.New(otelprom.WithRegisterer(reg), otelprom.WithoutScopeInfo(),
		otelprom.WithTranslationStrategy(otlptranslator.UnderscoreEscapingWithSuffixes))
	if err != nil {
		return nil, err
	}
	l, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("service::telemetry::metrics_address: %w", err)
	}
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	go func() {
		if err := srv.Serve(l); !errors.Is(err, http.ErrServerClosed) {
			set.Logger.Error("serving the Collector's metrics", zap.String("address", addr), zap.Error(err))
		}
	}()
	set.Logger.Info("the Collector's metrics", zap.String("url", "http://"+l.Addr().String()+"/metrics"))
	return promMeterProvider{sdkmetric.NewMeterProvider(sdkmetric.WithReader(exp)), srv}, nil
}

type nopMeterProvider struct{ noopmetric.MeterProvider }

func (nopMeterProvider) Shutdown(context.Context) error { return nil }

// promMeterProvider is the metrics of metrics_address and their server.
type promMeterProvider struct {
	*sdkmetric.MeterProvider
	srv *http.Server
}

func (p promMeterProvider) Shutdown(ctx context.Context) error {
	return errors.Join(p.srv.Shutdown(ctx), p.MeterProvider.Shutdown(ctx))
}

func main() {
	set := otelcol.CollectorSettings{
		BuildInfo: component.BuildInfo{Command: "otelcol-ustack", Description: "OpenTelemetry Collector for ustack's profiles", Version: "0.1.0"},
		Factories: components,
		ConfigProviderSettings: otelcol.ConfigProviderSettings{
			ResolverSettings: confmap.ResolverSettings{
				ProviderFactories: []confmap.ProviderFactory{fileprovider.NewFactory(), envprovider.NewFactory()},
				DefaultScheme:     "env",
			},
		},
	}
	if err := otelcol.NewCommand(set).Execute(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}
