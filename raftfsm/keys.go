package raftfsm

import "encoding/binary"

// Key layout (one badger keyspace, prefixed by kind):
//
//	m/applied                 last applied Raft index, uint64 big-endian
//	t/<id>                    task record
//	d/<due ms BE 8><id>       WAITING tasks by due time (value empty)
//	r/<id>                    RUNNING tasks (value empty)
//	n/<node id>               node record
//	m/count/<state byte>      number of tasks in that state, uint64 big-endian
//	m/saved-handler-counts    tasks per handler at a clean stop or in a
//	                          snapshot, until the next Open or Restore
//	                          (savedCounts; savedcounts.go)
//	m/split-entry             while a transaction split in parts has not
//	                          committed its last (entry index BE 8;
//	                          splitentry.go)
//	f/s/<finished ms BE 8><id>  SUCCESS, CANCELLED tasks without own retention
//	f/d/<finished ms BE 8><id>  DEAD, FAILED tasks without own retention
//	f/x/<expiry ms BE 8><id>    finished tasks with own retention, by
//	                            FinishedMs + Spec.RetentionNs
//	                            (f/ values: epoch BE 8, FinishedMs BE 8,
//	                            state byte, handler; see purge.go)
//	hp/<handler>              a paused handler (PausedHandler; pause.go)
//	h/<id len BE 2><id><run BE 8>  a run record (RunRecord; history.go)
//	w/<id>                    a flow record (Flow; flow.go)
//	ws/<id len BE 2><id><i BE 4>  stage i's spec of flow id (FlowStage; flow.go)
//	al/<seq BE 8>             a pending dead-run alert (Alert; alert.go)
//	m/alerts                  the alerts' bookkeeping (AlertMeta; alert.go)
//	wf/s/<finished ms BE 8><id>  SUCCESS, CANCELLED flows; wf/d/...: FAILED
//	                            (value: epoch BE 8, FinishedMs BE 8;
//	                            flow_purge.go)
var (
	keyApplied = []byte("m/applied")
	prefixTask = []byte("t/")
	prefixDue  = []byte("d/")
	prefixRun  = []byte("r/")
	prefixNode = []byte("n/")
)

func countKey(s State) []byte { return []byte{'m', '/', 'c', 'o', 'u', 'n', 't', '/', byte(s)} }

func taskKey(id string) []byte { return append(append([]byte{}, prefixTask...), id...) }
func runKey(id string) []byte  { return append(append([]byte{}, prefixRun...), id...) }
func nodeKey(id string) []byte { return append(append([]byte{}, prefixNode...), id...) }

func dueKey(dueMs int64, id string) []byte {
	k := make([]byte, 0, len(prefixDue)+8+len(id))
	k = append(k, prefixDue...)
	k = binary.BigEndian.AppendUint64(k, uint64(dueMs))
	return append(k, id...)
}

// parseDueKey returns the due time and id of a due-index key.
func parseDueKey(k []byte) (int64, string) {
	k = k[len(prefixDue):]
	return int64(binary.BigEndian.Uint64(k[:8])), string(k[8:])
}
