package main

import (
	"encoding/binary"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/ustack/ustack/internal/otlptest"
	"github.com/ustack/ustack/internal/testfiles"
	"go.opentelemetry.io/collector/pdata/pprofile"
)

// otlpStacks reads an OTLP profiles request back (otlptest.Folded: with
// pdata's pprofile alone, after the proto's structural checks): its stacks
// in folded form, its sample types and how many frames of each frame type.
func otlpStacks(t *testing.T, p pprofile.Profiles) (stacks map[string]uint64, types []string, frameTypes map[string]int) {
	t.Helper()
	r, err := otlptest.Folded(p)
	require.NoError(t, err)
	return r.Stacks, r.SampleTypes, r.FrameTypes
}

// foldedStacks parses ustack report --format folded.
func foldedStacks(t *testing.T, out string) map[string]uint64 {
	t.Helper()
	m, err := otlptest.ParseFolded(out)
	require.NoError(t, err)
	return m
}

func parseOTLP(t *testing.T, data []byte, json bool) pprofile.Profiles {
	t.Helper()
	var p pprofile.Profiles
	var err error
	if json {
		var u pprofile.JSONUnmarshaler
		p, err = u.UnmarshalProfiles(data)
	} else {
		var u pprofile.ProtoUnmarshaler
		p, err = u.UnmarshalProfiles(data)
	}
	require.NoError(t, err)
	return p
}

var labDir = filepath.Join("..", "..", "testdata", "recordings", "arm64-lab")

// otlpRecordings are committed recordings of several kinds: a uprobe
// whose stacks gdb checked (hello), a cpu-clock recording, kprobes with
// kernel frames from an arm64 guest, and perf's own dwarf recording.
var otlpRecordings = []struct {
	name  string
	args  []string
	types []string
	lab   bool // the arm64 lab's: its objects under --symfs, kallsyms from its archive
}{
	{"hello", []string{"--kallsyms", "-", helloData}, []string{"syscalls:sys_enter_write/count"}, false},
	{"dwarf", []string{"--kallsyms", "-", "--archive", "-", dwarfData}, nil, false},
	{"arm64 cpu-clock", []string{"--archive", filepath.Join(labDir, "lab.ustack"), filepath.Join(labDir, "cpuclock.data")}, []string{"cpu/nanoseconds"}, true},
	{"arm64 kprobe", []string{"--archive", filepath.Join(labDir, "lab.ustack"), filepath.Join(labDir, "kprobe.data")}, nil, true},
}

// labSymfs lays out the arm64 lab's objects as the guest's paths.
func labSymfs(t *testing.T) string {
	require.NoError(t, testfiles.Unpack(testfiles.Dir()))
	symfs := t.TempDir()
	obj := filepath.Join(testfiles.Dir(), "objects", "aarch64")
	for guest, o := range map[string]string{
		"lab/lab-static": "lab-static", "lab/lab-dyn": "lab-dyn", "lab/liblab.so": "liblab.so",
		"lib/aarch64-linux-gnu/libc.so.6": "libc.so.6", "lib/ld-linux-aarch64.so.1": "ld-linux-aarch64.so.1",
	} {
		b, err := os.ReadFile(filepath.Join(obj, o))
		require.NoError(t, err)
		require.NoError(t, os.MkdirAll(filepath.Join(symfs, filepath.Dir(guest)), 0o755))
		require.NoError(t, os.WriteFile(filepath.Join(symfs, guest), b, 0o644))
	}
	return symfs
}

// TestOTLPMatchesFolded reports committed recordings as otlp and
// otlp-json and reads both back with pprofile: sample for sample and frame
// for frame they are the stacks of ustack report --format folded of the
// same recording; clock events are cpu/nanoseconds, the others counts;
// kernel frames carry profile.frame.type kernel, the others native.
func TestOTLPMatchesFolded(t *testing.T) {
	isolate(t)
	symfs := labSymfs(t)
	for _, rec := range otlpRecordings {
		t.Run(rec.name, func(t *testing.T) {
			base := []string{"report", "--no-debuginfod"}
			if rec.lab {
				base = append(base, "--symfs", symfs)
			}
			rc, folded, errs := run3(append(append(base, "--format", "folded"), rec.args...))
			require.Equal(t, exitOK, rc, errs)
			want := foldedStacks(t, folded)
			kernel := strings.Contains(folded, "_[k]")
			for _, format := range []string{"otlp", "otlp-json"} {
				rc, out, errs := run3(append(append(base, "--format", format), rec.args...))
				require.Equal(t, exitOK, rc, errs)
				got, types, frameTypes := otlpStacks(t, parseOTLP(t, []byte(out), format == "otlp-json"))
				assert.Equal(t, want, got, format)
				if rec.types != nil {
					assert.Equal(t, rec.types, types, format)
				}
				assert.Positive(t, frameTypes["native"], format)
				if rec.lab {
					assert.NotContains(t, folded, "[lab-static]", "the lab's frames are named")
				}
				if kernel {
					assert.Positive(t, frameTypes["kernel"], format)
				}
			}
		})
	}
}

// TestOTLPCore reports a core dump as otlp: one sample per thread, each
// thread's stack as folded prints it, thread ids those gdb lists, and the
// mappings with the build-ids eu-unstrip read from the core.
func TestOTLPCore(t *testing.T) {
	tr, symfs, _ := coreFixture(t, "x86_64/threads")
	core := filepath.Join(coreTestdata, tr.Core)
	code, folded, errs := runCore(t, "--symfs", symfs, "--format", "folded", core)
	require.Equal(t, exitOK, code, errs)
	code, out, errs := runCore(t, "--symfs", symfs, "--format", "otlp", core)
	require.Equal(t, exitOK, code, errs)
	p := parseOTLP(t, []byte(out), false)
	got, types, _ := otlpStacks(t, p)
	assert.Equal(t, foldedStacks(t, folded), got)
	assert.Equal(t, []string{"core/count"}, types)

	var tids []string
	d := p.Dictionary()
	prof := p.ResourceProfiles().At(0).ScopeProfiles().At(0).Profiles().At(0)
	n := 0
	for _, s := range prof.Samples().All() {
		n += s.TimestampsUnixNano().Len()
		for _, i := range s.AttributeIndices().All() {
			kv := d.AttributeTable().At(int(i))
			if d.StringTable().At(int(kv.KeyStrindex())) == "thread.id" {
				tids = append(tids, kv.Value().AsString())
			}
		}
	}
	var want []string
	for _, g := range tr.GDB.Threads {
		want = append(want, fmt.Sprint(g.LWP))
	}
	sort.Strings(tids)
	sort.Strings(want)
	assert.Equal(t, want, tids)
	assert.Equal(t, len(tr.GDB.Threads), n, "one sample per thread")

	ids := map[string]bool{}
	for _, m := range d.MappingTable().All() {
		for _, i := range m.AttributeIndices().All() {
			kv := d.AttributeTable().At(int(i))
			if d.StringTable().At(int(kv.KeyStrindex())) == "process.executable.build_id.gnu" {
				ids[kv.Value().AsString()] = true
			}
		}
	}
	for _, u := range tr.EuUnstrip {
		if strings.HasPrefix(u.Name, "/") && !strings.Contains(u.Name, "vdso") {
			assert.True(t, ids[u.BuildID], "build-id %s of %s", u.BuildID, u.Name)
		}
	}
}

// otlpServer is a test OTLP/HTTP endpoint on 127.0.0.1 that keeps what it
// was sent and answers with status (200: an empty response).
type otlpServer struct {
	*httptest.Server
	mu      sync.Mutex
	bodies  [][]byte
	headers []http.Header
	paths   []string
	status  int
}

func newOTLPServer(t *testing.T, status int) *otlpServer {
	s := &otlpServer{status: status}
	s.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		s.mu.Lock()
		s.bodies = append(s.bodies, b)
		s.headers = append(s.headers, r.Header.Clone())
		s.paths = append(s.paths, r.URL.Path)
		s.mu.Unlock()
		if s.status != http.StatusOK {
			// A google.rpc.Status with its message (field 2).
			msg := "profiles are not enabled"
			w.Header().Set("Content-Type", "application/x-protobuf")
			w.WriteHeader(s.status)
			w.Write(append([]byte{0x12, byte(len(msg))}, msg...))
			return
		}
		w.Header().Set("Content-Type", "application/x-protobuf")
	}))
	t.Cleanup(s.Close)
	return s
}

// TestOTLPEndpointHTTP sends the hello recording to a test endpoint: one
// POST to /v1development/profiles with the protobuf content type, the
// headers of --otlp-header and OTEL_EXPORTER_OTLP_HEADERS, a body whose
// stacks are the folded report's; nothing on standard output. A refusing
// endpoint fails the report with an error naming it and the HTTP status.
func TestOTLPEndpointHTTP(t *testing.T) {
	isolate(t)
	t.Setenv("OTEL_EXPORTER_OTLP_HEADERS", "x-scope-orgid=team%20a,authorization=Bearer%20env")
	base := []string{"report", "--kallsyms", "-", "--no-debuginfod"}
	rc, folded, errs := run3(append(base, "--format", "folded", helloData))
	require.Equal(t, exitOK, rc, errs)

	srv := newOTLPServer(t, http.StatusOK)
	rc, out, errs := run3(append(base, "--otlp-endpoint", srv.URL, "--otlp-header", "authorization=Bearer flag", helloData))
	require.Equal(t, exitOK, rc, errs)
	assert.Empty(t, out)
	assert.Contains(t, errs, "bytes of OTLP profiles to "+srv.URL)
	require.Len(t, srv.bodies, 1)
	assert.Equal(t, "/v1development/profiles", srv.paths[0])
	assert.Equal(t, "application/x-protobuf", srv.headers[0].Get("Content-Type"))
	assert.Equal(t, "team a", srv.headers[0].Get("X-Scope-Orgid"))
	assert.Equal(t, "Bearer flag", srv.headers[0].Get("Authorization"), "the flag's header wins")
	got, _, _ := otlpStacks(t, parseOTLP(t, srv.bodies[0], false))
	assert.Equal(t, foldedStacks(t, folded), got)

	// --format otlp-json with an endpoint is a usage error.
	rc, _, errs = run3(append(base, "--otlp-endpoint", srv.URL, "--format", "otlp-json", helloData))
	assert.Equal(t, exitUsage, rc)
	assert.Contains(t, errs, "--otlp-endpoint sends OTLP protobuf")

	bad := newOTLPServer(t, http.StatusNotFound)
	rc, _, errs = run3(append(base, "--otlp-endpoint", bad.URL+"/v1development/profiles", helloData))
	assert.Equal(t, exitError, rc)
	assert.Contains(t, errs, "OTLP endpoint "+bad.URL+"/v1development/profiles refused the profiles: HTTP 404 Not Found: profiles are not enabled")
}

// TestOTLPEndpointGRPC sends the hello recording to a test gRPC endpoint
// (grpc://, cleartext HTTP/2 on 127.0.0.1): one call to the profiles
// service's Export with a length-prefixed protobuf message whose stacks
// are the folded report's; a PERMISSION_DENIED status fails the report
// with an error naming the endpoint and the gRPC status.
func TestOTLPEndpointGRPC(t *testing.T) {
	isolate(t)
	base := []string{"report", "--kallsyms", "-", "--no-debuginfod"}
	rc, folded, errs := run3(append(base, "--format", "folded", helloData))
	require.Equal(t, exitOK, rc, errs)
	var mu sync.Mutex
	var bodies [][]byte
	var paths []string
	status := "0"
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		mu.Lock()
		bodies, paths = append(bodies, b), append(paths, r.URL.Path)
		st := status
		mu.Unlock()
		w.Header().Set("Content-Type", "application/grpc")
		w.Header().Set("Trailer", "Grpc-Status, Grpc-Message")
		w.WriteHeader(http.StatusOK)
		w.Write([]byte{0, 0, 0, 0, 0}) // an empty ExportProfilesServiceResponse
		w.Header().Set("Grpc-Status", st)
		if st != "0" {
			w.Header().Set("Grpc-Message", "no%20profiles%20here")
		}
	})
	srv := httptest.NewUnstartedServer(h)
	srv.Config.Protocols = new(http.Protocols)
	srv.Config.Protocols.SetUnencryptedHTTP2(true)
	srv.Start()
	defer srv.Close()
	endpoint := "grpc://" + srv.Listener.Addr().String()

	rc, _, errs = run3(append(base, "--otlp-endpoint", endpoint, helloData))
	require.Equal(t, exitOK, rc, errs)
	require.Len(t, bodies, 1)
	assert.Equal(t, "/opentelemetry.proto.collector.profiles.v1development.ProfilesService/Export", paths[0])
	b := bodies[0]
	require.GreaterOrEqual(t, len(b), 5)
	assert.Equal(t, byte(0), b[0], "uncompressed")
	require.Equal(t, int(binary.BigEndian.Uint32(b[1:5])), len(b)-5)
	got, _, _ := otlpStacks(t, parseOTLP(t, b[5:], false))
	assert.Equal(t, foldedStacks(t, folded), got)

	mu.Lock()
	status = "7"
	mu.Unlock()
	rc, _, errs = run3(append(base, "--otlp-endpoint", endpoint, helloData))
	assert.Equal(t, exitError, rc)
	assert.Contains(t, errs, "OTLP endpoint "+endpoint+" refused the profiles: gRPC status 7 PERMISSION_DENIED: no profiles here")
}

// TestOTLPTimestamps checks the timestamps against the recording's own
// sample times (ustack report --format json): a copy of the hello
// recording whose modification time is set to a known instant has its
// last sample stamped at that instant, in Unix nanoseconds, and every other
// sample at the same distance before it as in the recording's clock.
func TestOTLPTimestamps(t *testing.T) {
	isolate(t)
	dir := t.TempDir()
	data := filepath.Join(dir, "perf.data")
	for _, ext := range []string{"", ".ustack"} {
		b, err := os.ReadFile(helloData + ext)
		require.NoError(t, err)
		require.NoError(t, os.WriteFile(data+ext, b, 0o644))
	}
	end := time.Date(2026, 3, 4, 5, 6, 7, 123456789, time.UTC)
	require.NoError(t, os.Chtimes(data, end, end))
	base := []string{"report", "--kallsyms", "-", "--no-debuginfod"}
	rc, js, errs := run3(append(base, "--format", "json", data))
	require.Equal(t, exitOK, rc, errs)
	var times []uint64
	for _, l := range strings.Split(strings.TrimSpace(js), "\n") {
		var s struct{ Time uint64 }
		require.NoError(t, json.Unmarshal([]byte(l), &s))
		times = append(times, s.Time)
	}
	last := slices.Max(times)
	var want []uint64
	for _, tm := range times {
		want = append(want, uint64(end.UnixNano())-(last-tm))
	}
	rc, out, errs := run3(append(base, "--format", "otlp", data))
	require.Equal(t, exitOK, rc, errs)
	p := parseOTLP(t, []byte(out), false)
	var got []uint64
	prof := p.ResourceProfiles().At(0).ScopeProfiles().At(0).Profiles().At(0)
	for _, s := range prof.Samples().All() {
		got = append(got, s.TimestampsUnixNano().AsRaw()...)
	}
	slices.Sort(got)
	slices.Sort(want)
	assert.Equal(t, want, got)
	assert.Equal(t, want[0], uint64(prof.Time()))
	assert.Equal(t, want[len(want)-1]-want[0], prof.DurationNano())
}
