// Command otelcol-ustack is an OpenTelemetry Collector built from the
// Collector's own modules with what ustack's tests and users need to take
// profiles in: the OTLP receiver (gRPC and HTTP), the file exporter, and
// ustack's symbolizer as the processor ustack_symbolizer.
// The profiles signal is behind the Collector's feature gate
// service.profilesSupport:
//
//	otelcol-ustack --config collector.yaml --feature-gates service.profilesSupport
//
// It is a module of its own so that ustack's importers do not inherit the
// Collector.
package main

import (
	"context"
	"fmt"
	"os"

	"github.com/open-telemetry/opentelemetry-collector-contrib/exporter/fileexporter"
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
// standard error, no metrics or traces of its own (the full
// otelconftelemetry brings every cloud's resource detectors).
func telemetryFactory() telemetry.Factory {
	return telemetry.NewFactory(func() component.Config { return &struct{}{} },
		telemetry.WithCreateLogger(func(context.Context, telemetry.LoggerSettings, component.Config) (*zap.Logger, component.ShutdownFunc, error) {
			l, err := zap.NewDevelopment()
			return l, nil, err
		}))
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
