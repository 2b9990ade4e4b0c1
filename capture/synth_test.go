package capture

import "testing"

func TestParseProcMaps(t *testing.T) {
	in := "55d0c0a00000-55d0c0a01000 r-xp 00001000 fe:00 9978825                    /tmp/a b/prog\n" +
		"7ffd8e780000-7ffd8e7a1000 rw-p 00000000 00:00 0                          [stack]\n" +
		"7f0000000000-7f0000001000 rw-p 00000000 00:00 0 \n"
	m := ParseProcMaps([]byte(in))
	if len(m) != 3 || m[0].Path != "/tmp/a b/prog" || !m[0].Exec() || m[0].PgOff != 0x1000 || m[0].Ino != 9978825 ||
		m[0].Maj != 0xfe || m[1].Path != "[stack]" || m[2].Path != "" {
		t.Errorf("%+v", m)
	}
}
