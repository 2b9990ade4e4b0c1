// Package ustacksymbolizer is a Collector processor of profiles that names
// native frames with ustack's symbolizer: every location whose mapping has
// a GNU build-id (process.executable.build_id.gnu) and that has no line
// yet, as the OpenTelemetry eBPF profiler sends native frames, gets the
// functions at its address (the inlined ones first, then the function they
// were inlined into, each with its source file and line), read from the
// object and its debug files found through ustack's resolver: the mapped
// path under symfs when its build-id matches, perf's build-id cache, the
// debug directories, and debuginfod (DEBUGINFOD_URLS) when enabled.
// Locations that already have lines are left alone. Objects stay open
// between requests; the address spaces made for mappings are kept in a
// cache bounded in entries. What it named and could not name, and why, is
// counted (Stats) in the Collector's own metrics (Instrument: the
// ustack_symbolizer_* counters, through the component's MeterProvider) and
// logged when the Collector stops.
//
// Its type in a Collector's configuration is ustack_symbolizer.
package ustacksymbolizer

import (
	"context"
	"encoding/hex"
	"strings"
	"sync"

	"go.opentelemetry.io/collector/component"
	"go.opentelemetry.io/collector/consumer/xconsumer"
	"go.opentelemetry.io/collector/pdata/pprofile"
	"go.opentelemetry.io/collector/processor"
	"go.opentelemetry.io/collector/processor/processorhelper/xprocessorhelper"
	"go.opentelemetry.io/collector/processor/xprocessor"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	"go.uber.org/zap"

	"github.com/ustack/ustack/debuginfod"
	"github.com/ustack/ustack/elfcache"
	"github.com/ustack/ustack/procmaps"
	"github.com/ustack/ustack/resolve"
	"github.com/ustack/ustack/unwinder"
)

// Type is the processor's type name.
var Type = component.MustNewType("ustack_symbolizer")

const buildIDKey = "process.executable.build_id.gnu"

// Config configures where objects and debug files are looked for.
type Config struct {
	// SymFS is the root the mappings' paths are looked up under ("" for
	// /), like perf's --symfs.
	SymFS string `mapstructure:"symfs"`
	// DebugDirs are searched for separate debug files (default
	// /usr/lib/debug).
	DebugDirs []string `mapstructure:"debug_dirs"`
	// BuildIDDir is perf's build-id cache (default ~/.debug).
	BuildIDDir string `mapstructure:"buildid_dir"`
	// Debuginfod fetches missing objects and debug files by build-id from
	// the servers of DEBUGINFOD_URLS.
	Debuginfod bool `mapstructure:"debuginfod"`
	// MaxMappings bounds the mappings whose address spaces are kept
	// between requests (default 4096).
	MaxMappings int `mapstructure:"max_mappings"`
}

// NewFactory returns the processor's factory.
func NewFactory() xprocessor.Factory {
	return xprocessor.NewFactory(Type, func() component.Config { return &Config{} },
		xprocessor.WithProfiles(createProfiles, component.StabilityLevelDevelopment))
}

func createProfiles(ctx context.Context, set processor.Settings, cfg component.Config, next xconsumer.Profiles) (xprocessor.Profiles, error) {
	s := New(cfg.(*Config))
	s.log = set.Logger
	if err := s.Instrument(set.MeterProvider); err != nil {
		s.Close()
		return nil, err
	}
	return xprocessorhelper.NewProfiles(ctx, set, cfg, next, s.Process,
		xprocessorhelper.WithShutdown(func(context.Context) error {
			st := s.Stats()
			s.log.Info("ustack symbolizer", zap.Uint64("named_locations", st.Named), zap.Uint64("unnamed_locations", st.Unnamed),
				zap.Uint64("unnamed_no_object", st.NoObject), zap.Uint64("unnamed_no_symbol", st.NoSymbol),
				zap.Uint64("unnamed_bad_mapping", st.BadMapping))
			return s.Close()
		}))
}

// The reasons a location stays unnamed: the reason attribute of
// ustack_symbolizer_locations_unnamed.
const (
	// ReasonNoObject: no object with the mapping's build-id was found
	// (not at its path under symfs, not in the build-id cache, not from
	// debuginfod).
	ReasonNoObject = "no_object"
	// ReasonNoSymbol: the object was found but no symbol, of its symbol
	// tables or of its debug files, holds the address.
	ReasonNoSymbol = "no_symbol"
	// ReasonBadMapping: the mapping's build-id is not hexadecimal, its
	// address range is empty, or the location's address is outside it.
	ReasonBadMapping = "bad_mapping"
)

// Stats counts what the processor did.
type Stats struct {
	// Named counts locations it gave lines; Unnamed those with a build-id
	// and no lines that it could not name, NoObject + NoSymbol +
	// BadMapping, by the reason (ReasonNoObject, ...).
	Named, Unnamed                 uint64
	NoObject, NoSymbol, BadMapping uint64
	// MappingHits counts the locations whose mapping's address space was
	// cached, MappingMisses those for which it was made.
	MappingHits, MappingMisses uint64
}

// Instrument registers the Symbolizer's counters with mp (a Collector
// component's TelemetrySettings.MeterProvider): what Stats counts, as
// ustack_symbolizer_locations_named, ustack_symbolizer_locations_unnamed
// (attribute reason), ustack_symbolizer_mapping_cache_hits and
// ustack_symbolizer_mapping_cache_misses, and the objects the resolver
// holds open now, ustack_symbolizer_objects_open. Call it once, before
// Process; Close unregisters the last.
func (s *Symbolizer) Instrument(mp metric.MeterProvider) error {
	m := mp.Meter("github.com/ustack/ustack/examples/otelcol/ustacksymbolizer")
	var t telemetry
	for _, c := range []struct {
		c          *metric.Int64Counter
		name, help string
	}{
		{&t.named, "ustack_symbolizer_locations_named", "Locations with a build-id and no lines that the symbolizer named."},
		{&t.unnamed, "ustack_symbolizer_locations_unnamed", "Locations with a build-id and no lines that the symbolizer could not name, by reason: no_object, no_symbol, bad_mapping."},
		{&t.hits, "ustack_symbolizer_mapping_cache_hits", "Locations whose mapping's address space was in the symbolizer's cache."},
		{&t.misses, "ustack_symbolizer_mapping_cache_misses", "Locations whose mapping's address space the symbolizer made (and opened its object)."},
	} {
		var err error
		if *c.c, err = m.Int64Counter(c.name, metric.WithUnit("{location}"), metric.WithDescription(c.help)); err != nil {
			return err
		}
	}
	open, err := m.Int64ObservableGauge("ustack_symbolizer_objects_open", metric.WithUnit("{object}"),
		metric.WithDescription("Objects the symbolizer holds open (with their debug files)."))
	if err != nil {
		return err
	}
	if t.reg, err = m.RegisterCallback(func(_ context.Context, o metric.Observer) error {
		o.ObserveInt64(open, int64(s.res.CacheStats().Objects))
		return nil
	}, open); err != nil {
		return err
	}
	for _, r := range []string{ReasonNoObject, ReasonNoSymbol, ReasonBadMapping} {
		t.reasons = append(t.reasons, metric.WithAttributeSet(attribute.NewSet(attribute.String("reason", r))))
	}
	s.mu.Lock()
	s.tel = &t
	s.mu.Unlock()
	return nil
}

// telemetry is what Instrument registered.
type telemetry struct {
	named, unnamed, hits, misses metric.Int64Counter
	reasons                      []metric.AddOption // by ReasonNoObject, ReasonNoSymbol, ReasonBadMapping
	reg                          metric.Registration
}

// add adds what one Process counted.
func (t *telemetry) add(ctx context.Context, d Stats) {
	for _, c := range []struct {
		c metric.Int64Counter
		n uint64
		o []metric.AddOption
	}{{t.named, d.Named, nil}, {t.unnamed, d.NoObject, t.reasons[:1]}, {t.unnamed, d.NoSymbol, t.reasons[1:2]},
		{t.unnamed, d.BadMapping, t.reasons[2:3]}, {t.hits, d.MappingHits, nil}, {t.misses, d.MappingMisses, nil}} {
		if c.n > 0 {
			c.c.Add(ctx, int64(c.n), c.o...)
		}
	}
}

// Symbolizer is the processor's work, usable on its own.
type Symbolizer struct {
	cfg   Config
	res   *resolve.Resolver
	fetch *debuginfod.Client
	log   *zap.Logger

	mu     sync.Mutex
	spaces map[mappingKey]*resolve.Space
	sym    *resolve.Symbolizer
	frames []resolve.Frame
	stats  Stats
	tel    *telemetry
}

type mappingKey struct {
	path                 string
	start, limit, offset uint64
	buildID              string
}

// New returns a Symbolizer configured by cfg.
func New(cfg *Config) *Symbolizer {
	s := &Symbolizer{cfg: *cfg, spaces: map[mappingKey]*resolve.Space{}, sym: resolve.NewSymbolizer()}
	if s.cfg.MaxMappings <= 0 {
		s.cfg.MaxMappings = 4096
	}
	opts := resolve.Options{SymFS: cfg.SymFS, DebugDirs: cfg.DebugDirs, BuildIDDir: cfg.BuildIDDir}
	if cfg.Debuginfod {
		s.fetch = debuginfod.New(debuginfod.Options{})
		opts.Fetcher = s.fetch
	}
	s.res = resolve.New(opts)
	return s
}

// Close closes the objects the Symbolizer opened.
func (s *Symbolizer) Close() error {
	if s.tel != nil && s.tel.reg != nil {
		s.tel.reg.Unregister()
	}
	if s.fetch != nil {
		s.fetch.Close()
	}
	return s.res.Close()
}

// Stats returns the counts so far.
func (s *Symbolizer) Stats() Stats {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.stats
}

// Process names the unnamed locations of pd in place.
func (s *Symbolizer) Process(ctx context.Context, pd pprofile.Profiles) (pprofile.Profiles, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	var delta Stats
	defer func() {
		s.stats.Named += delta.Named
		s.stats.Unnamed += delta.Unnamed
		s.stats.NoObject += delta.NoObject
		s.stats.NoSymbol += delta.NoSymbol
		s.stats.BadMapping += delta.BadMapping
		s.stats.MappingHits += delta.MappingHits
		s.stats.MappingMisses += delta.MappingMisses
		if s.tel != nil {
			s.tel.add(ctx, delta)
		}
	}()
	d := pd.Dictionary()
	strs := d.StringTable()
	index := make(map[string]int32, strs.Len())
	for i, v := range strs.All() {
		if _, ok := index[v]; !ok {
			index[v] = int32(i)
		}
	}
	str := func(v string) int32 {
		if i, ok := index[v]; ok {
			return i
		}
		strs.Append(v)
		index[v] = int32(strs.Len() - 1)
		return index[v]
	}
	type fnKey struct{ name, system, file string }
	funcs := map[fnKey]int32{}
	function := func(k fnKey) int32 {
		if i, ok := funcs[k]; ok {
			return i
		}
		t := d.FunctionTable()
		fn := t.AppendEmpty()
		fn.SetNameStrindex(str(k.name))
		fn.SetSystemNameStrindex(str(k.system))
		fn.SetFilenameStrindex(str(k.file))
		funcs[k] = int32(t.Len() - 1)
		return funcs[k]
	}
	for i, loc := range d.LocationTable().All() {
		if i == 0 || loc.Lines().Len() > 0 || loc.MappingIndex() <= 0 || int(loc.MappingIndex()) >= d.MappingTable().Len() {
			continue
		}
		m := d.MappingTable().At(int(loc.MappingIndex()))
		id := buildID(d, m)
		if id == "" {
			continue
		}
		frames, why := s.symbolize(d, m, id, loc.Address(), &delta)
		if why == "" && (len(frames) == 0 || frames[len(frames)-1].Symbol == "") {
			why = ReasonNoSymbol
		}
		if why != "" {
			delta.Unnamed++
			switch why {
			case ReasonNoObject:
				delta.NoObject++
			case ReasonNoSymbol:
				delta.NoSymbol++
			default:
				delta.BadMapping++
			}
			continue
		}
		delta.Named++
		for _, f := range frames {
			if f.Symbol == "" {
				continue
			}
			l := loc.Lines().AppendEmpty()
			l.SetFunctionIndex(function(fnKey{demangle(f.Symbol), f.Symbol, f.File}))
			l.SetLine(int64(f.Line))
		}
	}
	return pd, nil
}

// buildID returns the mapping's GNU build-id attribute, or "".
func buildID(d pprofile.ProfilesDictionary, m pprofile.Mapping) string {
	for _, i := range m.AttributeIndices().All() {
		if int(i) >= d.AttributeTable().Len() {
			continue
		}
		kv := d.AttributeTable().At(int(i))
		if k := kv.KeyStrindex(); int(k) < d.StringTable().Len() && d.StringTable().At(int(k)) == buildIDKey {
			return kv.Value().AsString()
		}
	}
	return ""
}

// symbolize returns the frames at addr in the mapping: the inlined
// functions innermost first, then the physical one; or, when it cannot
// look, why (ReasonBadMapping, ReasonNoObject). It counts the mapping
// cache's hits and misses in st.
func (s *Symbolizer) symbolize(d pprofile.ProfilesDictionary, m pprofile.Mapping, id string, addr uint64, st *Stats) ([]resolve.Frame, string) {
	path := ""
	if i := m.FilenameStrindex(); int(i) < d.StringTable().Len() {
		path = d.StringTable().At(int(i))
	}
	k := mappingKey{path, m.MemoryStart(), m.MemoryLimit(), m.FileOffset(), id}
	if addr < k.start || addr >= k.limit {
		return nil, ReasonBadMapping
	}
	sp := s.spaces[k]
	if sp != nil {
		st.MappingHits++
	} else {
		raw, err := hex.DecodeString(id)
		if err != nil {
			return nil, ReasonBadMapping
		}
		st.MappingMisses++
		if len(s.spaces) >= s.cfg.MaxMappings {
			clear(s.spaces) // the objects stay open in the resolver
		}
		sp = s.res.NewSpace(0, []resolve.Mapping{{Map: procmaps.Map{Start: k.start, End: k.limit, PgOff: k.offset,
			Path: path, BuildID: raw, Exec: true, Prot: procmaps.ProtRead | procmaps.ProtExec}}})
		s.spaces[k] = sp
	}
	mi := sp.AddressSpace().Find(addr)
	if mi < 0 || sp.Object(mi) == nil {
		return nil, ReasonNoObject
	}
	fr := unwinder.Frame{PC: addr, Mapping: int32(mi)}
	s.frames = s.sym.Append(s.frames[:0], sp, &fr, "")
	return s.frames, ""
}

// demangle returns the name ustack report gives a function: C++ and Rust
// names demangled short (no parameters), others as they are.
func demangle(name string) string {
	if strings.HasPrefix(name, "_Z") || strings.HasPrefix(name, "_R") {
		return elfcache.DemangleShort(name)
	}
	return name
}
