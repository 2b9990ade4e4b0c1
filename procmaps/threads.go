package procmaps

// threadsAlive keeps, for each process, the threads other than its leader
// that the recording shows (FORK, COMM and sample records), so that a
// process's mappings outlive its leader's EXIT while another of its
// threads still runs: in a group exit the threads exit in any order, and
// a leader may end with pthread_exit while the process runs on. perf, too,
// keeps a process's maps while a thread of it is known.
type threadsAlive struct {
	others     map[uint32]map[uint32]struct{} // pid -> its threads but the leader
	leaderGone map[uint32]bool
	// The last thread noted, not looked up again: samples come in runs
	// of one thread.
	lastPid, lastTid uint32
}

// note records that thread tid of process pid exists.
func (a *threadsAlive) note(pid, tid uint32) {
	if tid == pid || pid == 0 || pid == ^uint32(0) || (pid == a.lastPid && tid == a.lastTid) {
		return
	}
	if a.others == nil {
		a.others, a.leaderGone = map[uint32]map[uint32]struct{}{}, map[uint32]bool{}
	}
	m := a.others[pid]
	if m == nil {
		m = map[uint32]struct{}{}
		a.others[pid] = m
	}
	m[tid] = struct{}{}
	a.lastPid, a.lastTid = pid, tid
}

// reset forgets what was known of pid's threads: a new process has that
// pid (a FORK of a process), or its exec left only the leader.
func (a *threadsAlive) reset(pid uint32) {
	delete(a.others, pid)
	delete(a.leaderGone, pid)
	if a.lastPid == pid {
		a.lastPid, a.lastTid = 0, 0
	}
}

// exit records thread tid's EXIT and reports whether the process is gone
// with it: its leader has exited and no other thread of it is known.
func (a *threadsAlive) exit(pid, tid uint32) bool {
	if a.lastPid == pid && a.lastTid == tid {
		a.lastPid, a.lastTid = 0, 0
	}
	m := a.others[pid]
	if tid != pid {
		delete(m, tid)
		if !a.leaderGone[pid] || len(m) > 0 {
			return false
		}
	} else if len(m) > 0 {
		a.leaderGone[pid] = true
		return false
	}
	a.reset(pid)
	return true
}
