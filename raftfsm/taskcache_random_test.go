package raftfsm

import (
	"math/rand/v2"
	"strconv"
	"strings"
	"testing"
)

// Random entries of submits (due soon / late / recurring /
// overwrite), fires, completes, cancels, purges, retries on a few ids,
// some with large payloads (split parts), half of the seeds with a cache
// of a few records: after every entry, every cached record is the stored
// one, and every record read through the cache is.
func TestTaskCacheRandomMatchesStore(t *testing.T) {
	for seed := uint64(1); seed <= 6; seed++ {
		t.Run(strconv.FormatUint(seed, 10), func(t *testing.T) {
			e := newEnv(t)
			if seed%2 == 0 {
				// Room for a few of the 12 ids: records are pushed out,
				// and writes not kept, all the time.
				e.f.tasks.maxN = int(seed)
			}
			r := rand.New(rand.NewPCG(seed, 7))
			ids := make([]string, 12)
			for i := range ids {
				ids[i] = "r" + strconv.Itoa(i)
			}
			at := int64(1_000_000)
			idx := uint64(0)
			big := strings.Repeat("x", 700_000)
			for step := 0; step < 400; step++ {
				at += int64(r.IntN(3000))
				n := 1 + r.IntN(6)
				var cmds []Command
				for k := 0; k < n; k++ {
					id := ids[r.IntN(len(ids))]
					cur, _ := e.f.Task(id)
					s := spec("h", `"p"`)
					if r.IntN(10) == 0 {
						s.Payload = []byte(`"` + big + `"`)
					}
					switch op := r.IntN(9); {
					case op == 0 || cur == nil:
						due := at + int64(r.IntN(2000))
						if r.IntN(2) == 0 {
							due = at + 86_400_000
						}
						if r.IntN(4) == 0 {
							s.EveryNs, s.Repeats = 1e9, 3
						}
						if r.IntN(2) == 0 {
							cmds = append(cmds, overwriteCmd(id, s, due, at))
						} else {
							cmds = append(cmds, submitCmd(id, s, due, at))
						}
					case op <= 2:
						cmds = append(cmds, fireCmd(id, cur.Epoch, cur.Attempts+1, "n1", at, at+30_000))
						if r.IntN(2) == 0 {
							o := []Outcome{OutcomeSuccess, OutcomeRetryable, OutcomePermanent}[r.IntN(3)]
							c := completeCmd(id, cur.Epoch, cur.Attempts+1, o, "e", at+500, at)
							if cur.Spec.EveryNs != 0 {
								c.Complete.NextSlotMs, c.Complete.NextDueMs = at+1000, at+1000
							}
							cmds = append(cmds, c)
						}
					case op <= 4:
						o := []Outcome{OutcomeSuccess, OutcomeRetryable, OutcomePermanent}[r.IntN(3)]
						c := completeCmd(id, cur.Epoch, cur.Attempts, o, "e", at+500, at)
						if cur.Spec.EveryNs != 0 {
							c.Complete.NextSlotMs, c.Complete.NextDueMs = at+1000, at+1000
						}
						cmds = append(cmds, c)
					case op == 5:
						cmds = append(cmds, cancelCmd(id, at))
					case op == 6:
						if cur.State.Terminal() {
							cmds = append(cmds, purgeCmd(targetOf(cur)))
							if r.IntN(2) == 0 {
								cmds = append(cmds, submitCmd(id, s, at+86_400_000, at))
							}
						}
					case op == 7:
						cmds = append(cmds, retrySubCmd(id, at))
					default:
						cmds = append(cmds, submitCmd(id, s, at+100, at), cancelCmd(id, at))
					}
				}
				if len(cmds) == 0 {
					continue
				}
				idx++
				out := e.applyEntry(idx, cmds...)
				if _, ok := out.([]Result); !ok {
					t.Fatalf("entry %d: %v", idx, out)
				}
				checkCacheMatchesStore(t, e)
				if t.Failed() {
					t.Fatalf("step %d: cmds %+v", step, cmds)
				}
			}
			st := map[State]int{}
			for _, id := range ids {
				if tk, _ := e.f.Task(id); tk != nil {
					st[tk.State]++
				}
			}
			t.Logf("hits %d states %v entries %d cached %d", e.f.tasks.hits, st, idx, len(e.f.tasks.m))
		})
	}
}
