package raftfsm

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"time"

	"github.com/dgraph-io/badger/v4"
)

// Finished flows are purged like finished tasks (docs/DESIGN.md sections
// 14 and 19): a flow that ended (SUCCESS, FAILED, CANCELLED; a recurring
// flow only once cancelled or its schedule ended) has an entry in the
// finished-flow index, by finish time in the class of its state, and the
// leader's retention loop proposes Purge.Flows for those past --retention
// (SUCCESS, CANCELLED) or --retention-dead (FAILED). A purge deletes the
// flow record, its stages' specs and the index entry, only when the flow
// is still terminal with the Epoch and FinishedMs the proposer read. Its
// stage tasks are tasks: the task retention purges them.

// flowFinishedKey is fl's key in the finished-flow index ("wf/<class>/
// <finished ms BE 8><id>", class 's' for SUCCESS and CANCELLED, 'd' for
// FAILED), nil while fl has not ended.
func flowFinishedKey(fl *Flow) []byte {
	if !fl.State.Terminal() {
		return nil
	}
	class := byte(finishedOK)
	if fl.State == StateFailed || fl.State == StateDead {
		class = finishedFailed
	}
	k := make([]byte, 0, 5+8+len(fl.ID))
	k = append(k, 'w', 'f', '/', class, '/')
	k = binary.BigEndian.AppendUint64(k, uint64(max(fl.FinishedMs, 0)))
	return append(k, fl.ID...)
}

// flowFinishedValue: epoch BE 8, FinishedMs BE 8.
func flowFinishedValue(fl *Flow) []byte {
	v := binary.BigEndian.AppendUint64(make([]byte, 0, 16), fl.Epoch)
	return binary.BigEndian.AppendUint64(v, uint64(fl.FinishedMs))
}

// putFlow stores fl and, once it has ended, its finished-flow index entry
// (a flow that ended never changes again, so the entry is written once).
func putFlow(w *writer, fl *Flow) error {
	if err := w.putRecord(flowKey(fl.ID), fl); err != nil {
		return err
	}
	if k := flowFinishedKey(fl); k != nil {
		return w.set(k, flowFinishedValue(fl))
	}
	return nil
}

// delFlow deletes fl (as stored) with its stages' specs and its index
// entry.
func delFlow(w *writer, fl *Flow) error {
	for i := range fl.Graph {
		if err := w.del(flowStageKey(fl.ID, i)); err != nil {
			return err
		}
	}
	if k := flowFinishedKey(fl); k != nil {
		if err := w.del(k); err != nil {
			return err
		}
	}
	return w.del(flowKey(fl.ID))
}

// stageOfRunningFlow reports whether taskID is a stage task of the
// current run of a flow that has not ended: such a task is not purged
// (by the retention or the API), since the stages that depend on it read
// its result from it when they are created. A stage task of an earlier
// run, of a finished flow or of a purged one is purged as any task. runs
// remembers the flows read for one Purge (deleting a task changes no
// flow), so a flow's record is decoded once, not once per stage.
func (runs *flowRuns) stageOfRunningFlow(w *writer, taskID string) (bool, error) {
	return runs.stageOfRunning(taskID, func(flowID string) (fl Flow, found bool, err error) {
		found, err = w.get(flowKey(flowID), &fl)
		return fl, found, err
	})
}

// stageOfRunning reports whether taskID is a stage of the current run of
// a flow that has not ended, reading a flow (read: found false when it is
// not stored) only the first time one of its stages is asked about.
func (runs *flowRuns) stageOfRunning(taskID string, read func(flowID string) (Flow, bool, error)) (bool, error) {
	flowID, run, _, ok := ParseFlowStageID(taskID)
	if !ok {
		return false, nil
	}
	fr, ok := (*runs)[flowID]
	if !ok {
		fl, found, err := read(flowID)
		if err != nil {
			return false, err
		}
		fr = flowRun{running: found && !fl.State.Terminal(), run: fl.Run}
		runs.put(flowID, fr)
	}
	return fr.running && fr.run == run, nil
}

// flowRuns remembers, within one read or one Purge, whether each flow
// read is stored and running, and its run.
type flowRuns map[string]flowRun

type flowRun struct {
	running bool
	run     int
}

// flowRunsMax bounds the flows a flowRuns remembers.
const flowRunsMax = 4096

func (runs *flowRuns) put(id string, fr flowRun) {
	if *runs == nil || len(*runs) >= flowRunsMax {
		*runs = make(flowRuns)
	}
	(*runs)[id] = fr
}

// purgeFlows applies the Flows of a Purge into res.PurgedFlows.
func purgeFlows(w *writer, p *Purge, res *Result) error {
	if len(p.Flows) == 0 {
		return nil
	}
	res.PurgedFlows = make([]bool, len(p.Flows))
	for i, pf := range p.Flows {
		var fl Flow
		found, err := w.get(flowKey(pf.ID), &fl)
		if err != nil {
			return err
		}
		if !found || !fl.State.Terminal() || fl.Epoch != pf.Epoch || fl.FinishedMs != pf.FinishedMs {
			continue
		}
		if err := delFlow(w, &fl); err != nil {
			return err
		}
		res.PurgedFlows[i] = true
	}
	return nil
}

// PurgedFlowCount counts the flows r (the result of a CmdPurge) deleted.
func (r Result) PurgedFlowCount() int { return countTrue(r.PurgedFlows) }

// FlowTarget returns the PurgeTask (in Purge.Flows) that deletes fl as it
// was read.
func (fl *Flow) FlowTarget() PurgeTask {
	return PurgeTask{ID: fl.ID, Epoch: fl.Epoch, FinishedMs: fl.FinishedMs}
}

// ExpiredFlows returns up to limit finished flows whose retention ended at
// or before nowMs (Unix ms), as Purge.Flows targets: SUCCESS and CANCELLED
// ones that finished at least retention before nowMs, FAILED ones at least
// retentionDead before it (the task flags; 0 or less keeps that class
// forever). It seeks the finished-flow index from after the entries
// earlier calls with cur returned (cur nil: from the start; PurgeCursor)
// and moves cur past those it returns.
func (f *FSM) ExpiredFlows(nowMs int64, retention, retentionDead time.Duration, limit int, cur *PurgeCursor) ([]PurgeTask, error) {
	var out []PurgeTask
	classes := []struct {
		class   byte
		untilMs int64
		on      bool
	}{
		{finishedFailed, nowMs - retentionDead.Milliseconds(), retentionDead > 0},
		{finishedOK, nowMs - retention.Milliseconds(), retention > 0},
	}
	err := f.db.View(func(txn *badger.Txn) error {
		for i, c := range classes {
			from, skip := cur.from(i)
			if skip || !c.on || len(out) >= limit {
				continue
			}
			prefix := []byte{'w', 'f', '/', c.class, '/'}
			opts := badger.DefaultIteratorOptions
			opts.Prefix = prefix
			it := txn.NewIterator(opts)
			start := prefix
			if from != nil {
				start = from
			}
			for it.Seek(start); it.Valid() && len(out) < limit; it.Next() {
				item := it.Item()
				k := item.Key()
				if from != nil && bytes.Equal(k, from) {
					continue
				}
				if int64(binary.BigEndian.Uint64(k[5:13])) > c.untilMs {
					break
				}
				v, err := item.ValueCopy(nil)
				if err != nil || len(v) < 16 {
					it.Close()
					if err == nil {
						err = fmt.Errorf("finished flow index entry %q of %d bytes: %w", k, len(v), ErrBadEntry)
					}
					return err
				}
				out = append(out, PurgeTask{ID: string(k[13:]), Epoch: binary.BigEndian.Uint64(v[:8]), FinishedMs: int64(binary.BigEndian.Uint64(v[8:16]))})
				cur.advance(i, k)
			}
			it.Close()
		}
		return nil
	})
	return out, err
}
