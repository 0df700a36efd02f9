package raftfsm

import (
	"bytes"
	"encoding/binary"

	"github.com/vmihailenco/msgpack/v5"
)

// The hot path's msgpack without reflection: the task record (Task and its
// Spec), the run record (RunRecord, written by every completed run) and
// the submit command (Command with Submit), which a batch of
// submits writes and reads once per task, and the fire and complete
// commands (Command with Fire, with Complete), one each per task processed.
//
// Writing: appendTask and appendCommand (a submit, a fire or a complete
// with only its body set) write byte for byte what
// vmihailenco/msgpack v5's reflection (msgpack.Marshal) writes for the same
// value: a struct is a map of its non-omitted fields in declaration order,
// keyed by the tag's name; int as the shortest integer, int64 and uint64 as
// their 9-byte forms (0xd3, 0xcf), uint8 as 0xcc plus one byte, nil []byte
// as nil. So the stored records, Raft log entries and snapshots are the
// same as before, and a node of an older version reads them. The rare
// nested values (Backoff, Labels, Shards, ShardRun) and every other command
// type are still written by msgpack.Marshal, into the same buffer, with the
// keys of maps in increasing order (marshalSorted).
//
// Reading: decodeTaskFast and decodeCommandFast read what those write, and
// every other encoding of the same values msgpack would accept the same way
// (any integer width, nil for a string). Anything else (an unknown key, a
// key seen twice, a struct encoded as an array, a value of an unexpected
// type, bytes cut short) makes them give up, and the caller decodes the
// whole value with msgpack.Unmarshal instead: the fast path never decides
// differently from the reflection path, it only skips it
// (FuzzFastDecodeMatchesReflection).

// ---- writing

func appendStr(b []byte, s string) []byte {
	switch n := len(s); {
	case n < 32:
		b = append(b, 0xa0|byte(n))
	case n < 256:
		b = append(b, 0xd9, byte(n))
	case n <= 0xffff:
		b = append(b, 0xda, byte(n>>8), byte(n))
	default:
		b = append(b, 0xdb, byte(n>>24), byte(n>>16), byte(n>>8), byte(n))
	}
	return append(b, s...)
}

func appendBin(b, v []byte) []byte {
	switch n := len(v); {
	case v == nil:
		return append(b, 0xc0)
	case n < 256:
		b = append(b, 0xc4, byte(n))
	case n <= 0xffff:
		b = append(b, 0xc5, byte(n>>8), byte(n))
	default:
		b = append(b, 0xc6, byte(n>>24), byte(n>>16), byte(n>>8), byte(n))
	}
	return append(b, v...)
}

// appendInt writes n as msgpack's EncodeInt does (a Go int field): the
// shortest form.
func appendInt(b []byte, n int64) []byte {
	switch {
	case n >= 0:
		return appendUint(b, uint64(n))
	case n >= -32:
		return append(b, byte(n))
	case n >= -1<<7:
		return append(b, 0xd0, byte(n))
	case n >= -1<<15:
		return append(b, 0xd1, byte(n>>8), byte(n))
	case n >= -1<<31:
		return append(b, 0xd2, byte(n>>24), byte(n>>16), byte(n>>8), byte(n))
	}
	return binary.BigEndian.AppendUint64(append(b, 0xd3), uint64(n))
}

func appendUint(b []byte, n uint64) []byte {
	switch {
	case n <= 0x7f:
		return append(b, byte(n))
	case n <= 0xff:
		return append(b, 0xcc, byte(n))
	case n <= 0xffff:
		return append(b, 0xcd, byte(n>>8), byte(n))
	case n <= 0xffffffff:
		return append(b, 0xce, byte(n>>24), byte(n>>16), byte(n>>8), byte(n))
	}
	return binary.BigEndian.AppendUint64(append(b, 0xcf), n)
}

// appendInt64 and appendUint64 write an int64 or uint64 field: msgpack
// keeps their 9-byte forms (no UseCompactInts).
func appendInt64(b []byte, n int64) []byte {
	return binary.BigEndian.AppendUint64(append(b, 0xd3), uint64(n))
}

func appendUint64(b []byte, n uint64) []byte {
	return binary.BigEndian.AppendUint64(append(b, 0xcf), n)
}

func appendBool(b []byte, v bool) []byte {
	if v {
		return append(b, 0xc3)
	}
	return append(b, 0xc2)
}

func appendArrayLen(b []byte, n int) []byte {
	switch {
	case n < 16:
		return append(b, 0x90|byte(n))
	case n <= 0xffff:
		return append(b, 0xdc, byte(n>>8), byte(n))
	}
	return append(b, 0xdd, byte(n>>24), byte(n>>16), byte(n>>8), byte(n))
}

// mapWriter writes a struct's map: begin reserves a 3-byte header, end
// writes it once the fields are counted, moving them when a fixmap's
// 1-byte header is the one msgpack writes (fewer than 16 fields).
type mapWriter struct{ start, n int }

func beginMap(b []byte) ([]byte, mapWriter) {
	return append(b, 0, 0, 0), mapWriter{start: len(b)}
}

// key writes a field's name and counts the field.
func (m *mapWriter) key(b []byte, name string) []byte {
	m.n++
	return appendStr(b, name)
}

func (m *mapWriter) end(b []byte) []byte {
	if m.n < 16 {
		b[m.start] = 0x80 | byte(m.n)
		copy(b[m.start+1:], b[m.start+3:])
		return b[:len(b)-2]
	}
	b[m.start], b[m.start+1], b[m.start+2] = 0xde, byte(m.n>>8), byte(m.n)
	return b
}

// appendReflect writes v with msgpack's reflection (marshalSorted): the
// rare nested values.
func appendReflect(b []byte, v any) ([]byte, error) {
	m, err := marshalSorted(v)
	if err != nil {
		return b, err
	}
	return append(b, m...), nil
}

// marshalSorted is msgpack.Marshal with the keys of maps in increasing
// order. msgpack.Marshal writes a map in Go's random iteration order, so
// two replicas applying the same log stored a task's labels
// (Spec.Labels, a map of two keys or more) in different bytes, and so did
// one replica each time it wrote the record again. The order is one of
// those msgpack.Marshal writes, and every reader takes any order.
func marshalSorted(v any) ([]byte, error) {
	var buf bytes.Buffer
	enc := msgpack.GetEncoder()
	enc.Reset(&buf)
	enc.SetSortMapKeys(true)
	err := enc.Encode(v)
	enc.SetSortMapKeys(false)
	msgpack.PutEncoder(enc)
	if err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// appendSpec writes s as msgpack.Marshal writes a Spec.
func appendSpec(b []byte, s *Spec) ([]byte, error) {
	var err error
	b, m := beginMap(b)
	b = appendStr(m.key(b, "h"), s.Handler)
	b = appendBin(m.key(b, "p"), s.Payload)
	if s.PayloadBase64 {
		b = appendBool(m.key(b, "pb"), true)
	}
	if s.DelayNs != 0 {
		b = appendInt64(m.key(b, "d"), s.DelayNs)
	}
	if s.RunAtMs != 0 {
		b = appendInt64(m.key(b, "ra"), s.RunAtMs)
	}
	b = appendInt(m.key(b, "pr"), int64(s.Priority))
	b = appendInt64(m.key(b, "to"), s.TimeoutNs)
	b = appendInt(m.key(b, "ma"), int64(s.MaxAttempts))
	if s.Cron != "" {
		b = appendStr(m.key(b, "cr"), s.Cron)
	}
	if s.Timezone != "" {
		b = appendStr(m.key(b, "tz"), s.Timezone)
	}
	if s.EveryNs != 0 {
		b = appendInt64(m.key(b, "ev"), s.EveryNs)
	}
	if s.Repeats != 0 {
		b = appendInt(m.key(b, "rp"), int64(s.Repeats))
	}
	if s.UntilMs != 0 {
		b = appendInt64(m.key(b, "un"), s.UntilMs)
	}
	if s.Backoff != nil {
		if b, err = appendReflect(m.key(b, "bo"), s.Backoff); err != nil {
			return b, err
		}
	}
	if s.RouteKey != "" {
		b = appendStr(m.key(b, "rk"), s.RouteKey)
	}
	if len(s.Labels) > 0 {
		if b, err = appendReflect(m.key(b, "lb"), s.Labels); err != nil {
			return b, err
		}
	}
	if s.RetentionNs != 0 {
		b = appendInt64(m.key(b, "rt"), s.RetentionNs)
	}
	if s.TraceParent != "" {
		b = appendStr(m.key(b, "tp"), s.TraceParent)
	}
	if s.TraceState != "" {
		b = appendStr(m.key(b, "ts"), s.TraceState)
	}
	if s.Shards != nil {
		if b, err = appendReflect(m.key(b, "sh"), s.Shards); err != nil {
			return b, err
		}
	}
	if s.ShardIndex != 0 {
		b = appendInt(m.key(b, "si"), int64(s.ShardIndex))
	}
	if s.ShardTotal != 0 {
		b = appendInt(m.key(b, "sn"), int64(s.ShardTotal))
	}
	return m.end(b), nil
}

// specSize is about the bytes appendSpec writes, to size buffers.
func specSize(s *Spec) int {
	return 80 + len(s.Handler) + len(s.Payload) + len(s.Cron) + len(s.Timezone) + len(s.RouteKey) +
		len(s.TraceParent) + len(s.TraceState)
}

// appendTask writes t as msgpack.Marshal writes a Task.
func appendTask(b []byte, t *Task) ([]byte, error) {
	var err error
	b, m := beginMap(b)
	b = appendStr(m.key(b, "id"), t.ID)
	if b, err = appendSpec(m.key(b, "s"), &t.Spec); err != nil {
		return b, err
	}
	b = appendUint64(m.key(b, "e"), t.Epoch)
	b = append(m.key(b, "st"), 0xcc, byte(t.State))
	b = appendInt(m.key(b, "a"), int64(t.Attempts))
	if t.Run != 0 {
		b = appendInt(m.key(b, "rn"), int64(t.Run))
	}
	if t.SlotMs != 0 {
		b = appendInt64(m.key(b, "sl"), t.SlotMs)
	}
	if t.RunBase != 0 {
		b = appendInt(m.key(b, "rb"), int64(t.RunBase))
	}
	if t.FailedRuns != 0 {
		b = appendInt(m.key(b, "fr"), int64(t.FailedRuns))
	}
	b = appendInt(m.key(b, "sn"), int64(t.Snoozes))
	b = appendInt64(m.key(b, "du"), t.DueMs)
	if t.Node != "" {
		b = appendStr(m.key(b, "n"), t.Node)
	}
	if t.FiredMs != 0 {
		b = appendInt64(m.key(b, "fi"), t.FiredMs)
	}
	if t.LeaseMs != 0 {
		b = appendInt64(m.key(b, "le"), t.LeaseMs)
	}
	if t.LastError != "" {
		b = appendStr(m.key(b, "le2"), t.LastError)
	}
	b = appendInt64(m.key(b, "c"), t.CreatedMs)
	b = appendInt64(m.key(b, "u"), t.UpdatedMs)
	if t.FinishedMs != 0 {
		b = appendInt64(m.key(b, "f"), t.FinishedMs)
	}
	if t.Paused {
		b = appendBool(m.key(b, "pz"), true)
	}
	if t.HeldBy != 0 {
		b = append(m.key(b, "hb"), 0xcc, byte(t.HeldBy))
	}
	if t.HistFirst != 0 {
		b = appendInt(m.key(b, "hf"), int64(t.HistFirst))
	}
	if t.HistRun != 0 {
		b = appendInt(m.key(b, "hr"), int64(t.HistRun))
	}
	if t.RunDueMs != 0 {
		b = appendInt64(m.key(b, "rdu"), t.RunDueMs)
	}
	if t.RunFiredMs != 0 {
		b = appendInt64(m.key(b, "rfi"), t.RunFiredMs)
	}
	if t.RunParked != "" {
		b = appendStr(m.key(b, "rpk"), t.RunParked)
	}
	if t.Shards != nil {
		if b, err = appendReflect(m.key(b, "shr"), t.Shards); err != nil {
			return b, err
		}
	}
	return m.end(b), nil
}

// taskSize is about the bytes appendTask writes, to size buffers.
func taskSize(t *Task) int {
	return 128 + len(t.ID) + specSize(&t.Spec) + len(t.Node) + len(t.LastError) + len(t.RunParked)
}

// appendRunRecord writes r as msgpack.Marshal writes a RunRecord: every
// completed run writes one.
func appendRunRecord(b []byte, r *RunRecord) []byte {
	b, m := beginMap(b)
	b = appendInt(m.key(b, "r"), int64(r.Run))
	b = appendUint64(m.key(b, "e"), r.Epoch)
	b = append(m.key(b, "s"), 0xcc, byte(r.State))
	b = appendInt64(m.key(b, "du"), r.DueMs)
	b = appendInt64(m.key(b, "fi"), r.FiredMs)
	if r.StartedMs != 0 {
		b = appendInt64(m.key(b, "st"), r.StartedMs)
	}
	if r.FinishedMs != 0 {
		b = appendInt64(m.key(b, "f"), r.FinishedMs)
	}
	if r.ParkedReason != "" {
		b = appendStr(m.key(b, "pr"), r.ParkedReason)
	}
	if r.Late {
		b = appendBool(m.key(b, "lt"), true)
	}
	for _, f := range [...]struct {
		name string
		v    int64
	}{{"lp", r.ParkedNs}, {"lc", r.CommitNs}, {"lq", r.QueueNs}, {"ln", r.ConnectNs}} {
		if f.v != 0 {
			b = appendInt64(m.key(b, f.name), f.v)
		}
	}
	b = m.key(b, "a")
	if r.Attempts == nil {
		b = append(b, 0xc0)
	} else {
		b = appendArrayLen(b, len(r.Attempts))
		for i := range r.Attempts {
			b = appendAttemptRecord(b, &r.Attempts[i])
		}
	}
	if r.DroppedAttempts != 0 {
		b = appendInt(m.key(b, "da"), int64(r.DroppedAttempts))
	}
	if len(r.Result) > 0 {
		b = appendBin(m.key(b, "res"), r.Result)
	}
	if r.ResultBinary {
		b = appendBool(m.key(b, "rb"), true)
	}
	if r.ResultTruncated {
		b = appendBool(m.key(b, "rt"), true)
	}
	for _, f := range [...]struct {
		name string
		v    int
	}{{"sh", r.Shards}, {"shs", r.ShardsSucceeded}, {"shf", r.ShardsFailed}} {
		if f.v != 0 {
			b = appendInt(m.key(b, f.name), int64(f.v))
		}
	}
	return m.end(b)
}

// appendAttemptRecord writes a as msgpack.Marshal writes an AttemptRecord.
func appendAttemptRecord(b []byte, a *AttemptRecord) []byte {
	b, m := beginMap(b)
	b = appendInt(m.key(b, "a"), int64(a.Attempt))
	b = appendStr(m.key(b, "n"), a.Node)
	b = appendInt64(m.key(b, "fi"), a.FiredMs)
	if a.Executor != "" {
		b = appendStr(m.key(b, "x"), a.Executor)
	}
	for _, f := range [...]struct {
		name string
		v    int64
	}{{"st", a.StartedMs}, {"en", a.EndedMs}, {"d", a.DurationNs}} {
		if f.v != 0 {
			b = appendInt64(m.key(b, f.name), f.v)
		}
	}
	if a.Outcome != 0 {
		b = append(m.key(b, "o"), 0xcc, byte(a.Outcome))
	}
	if a.HTTPStatus != 0 {
		b = appendInt(m.key(b, "hs"), int64(a.HTTPStatus))
	}
	if a.Error != "" {
		b = appendStr(m.key(b, "er"), a.Error)
	}
	return m.end(b)
}

// runRecordSize is about the bytes appendRunRecord writes, to size buffers.
func runRecordSize(r *RunRecord) int {
	n := 160 + len(r.ParkedReason) + len(r.Result)
	for i := range r.Attempts {
		n += 96 + len(r.Attempts[i].Node) + len(r.Attempts[i].Executor) + len(r.Attempts[i].Error)
	}
	return n
}

// isSubmitOnly reports whether c is a submit command with only its
// Submit set: the one command appendCommand writes itself.
func isSubmitOnly(c *Command) bool {
	return c.Type == CmdSubmit && c.Submit != nil && c.Cancel == nil && c.Fire == nil && c.Complete == nil &&
		c.Node == nil && c.Executor == nil && c.Retry == nil && c.Lease == nil && c.Purge == nil &&
		c.Pause == nil && c.Flow == nil && c.AlertDone == nil
}

// isFireOnly and isCompleteOnly report whether c is a fire (a complete)
// command with only its Fire (Complete) set: those appendCommand writes
// itself too, as every processed task has one of each.
func isFireOnly(c *Command) bool {
	return c.Type == CmdFire && c.Fire != nil && c.Submit == nil && c.Cancel == nil && c.Complete == nil &&
		c.Node == nil && c.Executor == nil && c.Retry == nil && c.Lease == nil && c.Purge == nil &&
		c.Pause == nil && c.Flow == nil && c.AlertDone == nil
}

func isCompleteOnly(c *Command) bool {
	return c.Type == CmdComplete && c.Complete != nil && c.Submit == nil && c.Cancel == nil && c.Fire == nil &&
		c.Node == nil && c.Executor == nil && c.Retry == nil && c.Lease == nil && c.Purge == nil &&
		c.Pause == nil && c.Flow == nil && c.AlertDone == nil
}

// appendFire writes f as msgpack.Marshal writes a Fire.
func appendFire(b []byte, f *Fire) []byte {
	b, m := beginMap(b)
	b = appendStr(m.key(b, "id"), f.ID)
	b = appendUint64(m.key(b, "e"), f.Epoch)
	b = appendInt(m.key(b, "a"), int64(f.Attempt))
	b = appendStr(m.key(b, "n"), f.Node)
	b = appendInt64(m.key(b, "at"), f.AtMs)
	b = appendInt64(m.key(b, "le"), f.LeaseMs)
	if f.HistoryRuns != 0 {
		b = appendInt(m.key(b, "hr"), int64(f.HistoryRuns))
	}
	if f.ParkedReason != "" {
		b = appendStr(m.key(b, "pr"), f.ParkedReason)
	}
	return m.end(b)
}

// appendComplete writes c as msgpack.Marshal writes a Complete.
func appendComplete(b []byte, c *Complete) []byte {
	b, m := beginMap(b)
	b = appendStr(m.key(b, "id"), c.ID)
	b = appendUint64(m.key(b, "e"), c.Epoch)
	b = appendInt(m.key(b, "a"), int64(c.Attempt))
	b = append(m.key(b, "o"), 0xcc, byte(c.Outcome))
	if c.Error != "" {
		b = appendStr(m.key(b, "er"), c.Error)
	}
	for _, f := range [...]struct {
		name string
		v    int64
	}{{"r", c.RetryDueMs}, {"ra", c.RetryAfterMs}, {"ns", c.NextSlotMs}, {"nd", c.NextDueMs}} {
		if f.v != 0 {
			b = appendInt64(m.key(b, f.name), f.v)
		}
	}
	b = appendInt64(m.key(b, "at"), c.AtMs)
	if c.Alert {
		b = appendBool(m.key(b, "al"), true)
	}
	if c.FlowNextSlotMs != 0 {
		b = appendInt64(m.key(b, "fn"), c.FlowNextSlotMs)
	}
	if c.Executor != "" {
		b = appendStr(m.key(b, "xn"), c.Executor)
	}
	if c.HTTPStatus != 0 {
		b = appendInt(m.key(b, "hs"), int64(c.HTTPStatus))
	}
	for _, f := range [...]struct {
		name string
		v    int64
	}{{"ap", c.AppliedMs}, {"sa", c.StartedMs}, {"ea", c.EndedMs}, {"dn", c.DurationNs}, {"qn", c.QueueNs}, {"cn", c.ConnectNs}} {
		if f.v != 0 {
			b = appendInt64(m.key(b, f.name), f.v)
		}
	}
	if len(c.Result) > 0 {
		b = appendBin(m.key(b, "res"), c.Result)
	}
	if c.ResultBinary {
		b = appendBool(m.key(b, "rbi"), true)
	}
	if c.ResultTruncated {
		b = appendBool(m.key(b, "rtr"), true)
	}
	if c.ShardCount != 0 {
		b = appendInt(m.key(b, "shc"), int64(c.ShardCount))
	}
	return m.end(b)
}

// appendCommand writes c as msgpack.Marshal writes a Command.
func appendCommand(b []byte, c *Command) ([]byte, error) {
	switch {
	case isFireOnly(c):
		return appendFire(append(b, 0x82, 0xa1, 't', 0xcc, byte(c.Type), 0xa1, 'f'), c.Fire), nil
	case isCompleteOnly(c):
		return appendComplete(append(b, 0x82, 0xa1, 't', 0xcc, byte(c.Type), 0xa1, 'x'), c.Complete), nil
	case !isSubmitOnly(c):
		return appendReflect(b, c)
	}
	s := c.Submit
	b = append(b, 0x82, 0xa1, 't', 0xcc, byte(c.Type), 0xa1, 's')
	b, m := beginMap(b)
	b = appendStr(m.key(b, "id"), s.ID)
	var err error
	if b, err = appendSpec(m.key(b, "s"), &s.Spec); err != nil {
		return b, err
	}
	b = appendInt64(m.key(b, "du"), s.DueMs)
	if s.SlotMs != 0 {
		b = appendInt64(m.key(b, "sl"), s.SlotMs)
	}
	b = appendInt64(m.key(b, "at"), s.AtMs)
	if s.Overwrite {
		b = appendBool(m.key(b, "o"), true)
	}
	return m.end(b), nil
}

// commandSize is about the bytes appendCommand writes for c when it is
// a submit, a fire or a complete, to size buffers.
func commandSize(c *Command) int {
	if c.Fire != nil {
		return 96 + len(c.Fire.ID) + len(c.Fire.Node) + len(c.Fire.ParkedReason)
	}
	if c.Complete != nil {
		return 192 + len(c.Complete.ID) + len(c.Complete.Error) + len(c.Complete.Executor) + len(c.Complete.Result)
	}
	if c.Submit == nil {
		return 64
	}
	return 64 + len(c.Submit.ID) + specSize(&c.Submit.Spec)
}

// appendResult writes r as msgpack.Marshal writes a Result: itself when
// only the fields of a submit's, cancel's or other task command's result
// are set, else by reflection (a purge's or a flow's).
func appendResult(b []byte, r *Result) ([]byte, error) {
	if r.Purged != nil || r.PurgedFlows != nil || r.Flow != nil {
		return appendReflect(b, r)
	}
	var err error
	b, m := beginMap(b)
	if r.Code != "" {
		b = appendStr(m.key(b, "c"), r.Code)
	}
	if r.Created {
		b = appendBool(m.key(b, "cr"), true)
	}
	if r.Task != nil {
		if b, err = appendTask(m.key(b, "t"), r.Task); err != nil {
			return b, err
		}
	}
	b = appendUint64(m.key(b, "i"), r.Index)
	if r.Warning != "" {
		b = appendStr(m.key(b, "w"), r.Warning)
	}
	return m.end(b), nil
}

// resultSize is about the bytes appendResult writes, to size buffers.
func resultSize(r *Result) int {
	n := 32 + len(r.Code) + len(r.Warning)
	if r.Task != nil {
		n += taskSize(r.Task)
	}
	return n
}

// ---- reading

// reader reads msgpack from b at p. Any value it does not expect sets
// fail; the caller then decodes with msgpack.Unmarshal.
type reader struct {
	b    []byte
	p    int
	fail bool
	// handler is the last handler name read (strSame): the commands of
	// one entry, a batch's above all, mostly name the same handler, and
	// each copy was an allocation of every submit decoded.
	handler string
}

func (r *reader) code() byte {
	if r.p >= len(r.b) {
		r.fail = true
		return 0xc1 // never used by msgpack
	}
	c := r.b[r.p]
	r.p++
	return c
}

func (r *reader) next(n int) []byte {
	if n < 0 || len(r.b)-r.p < n {
		r.fail = true
		return nil
	}
	s := r.b[r.p : r.p+n]
	r.p += n
	return s
}

func (r *reader) be(n int) uint64 {
	var v uint64
	for _, x := range r.next(n) {
		v = v<<8 | uint64(x)
	}
	return v
}

// mapLen reads a map header; nil and anything else fail.
func (r *reader) mapLen() int {
	c := r.code()
	switch {
	case c >= 0x80 && c <= 0x8f:
		return int(c & 0x0f)
	case c == 0xde:
		return int(r.be(2))
	case c == 0xdf:
		return int(r.be(4))
	}
	r.fail = true
	return 0
}

// strLen reads the header of a str (or, with bin, a bin) and returns its
// length; -1 for nil.
func (r *reader) strLen(c byte, bin bool) int {
	switch {
	case c >= 0xa0 && c <= 0xbf:
		return int(c & 0x1f)
	case c == 0xd9:
		return int(r.be(1))
	case c == 0xda:
		return int(r.be(2))
	case c == 0xdb:
		return int(r.be(4))
	case c == 0xc0:
		return -1
	case bin && c == 0xc4:
		return int(r.be(1))
	case bin && c == 0xc5:
		return int(r.be(2))
	case bin && c == 0xc6:
		return int(r.be(4))
	}
	r.fail = true
	return 0
}

// key reads a field name: a str (msgpack would also take nil or bin; those
// fail here).
func (r *reader) key() []byte {
	c := r.code()
	if c == 0xc0 {
		r.fail = true
		return nil
	}
	return r.next(r.strLen(c, false))
}

// str reads a string field as msgpack does: str, or nil for "".
func (r *reader) str() string {
	n := r.strLen(r.code(), false)
	if n <= 0 {
		return ""
	}
	return string(r.next(n))
}

// strSame is str that returns *last, not a new copy, when the string read
// equals it, and keeps a new one in *last.
func (r *reader) strSame(last *string) string {
	n := r.strLen(r.code(), false)
	if n <= 0 {
		return ""
	}
	b := r.next(n)
	if string(b) != *last {
		*last = string(b)
	}
	return *last
}

// bin reads a []byte field as msgpack does: nil for nil, a new slice
// (empty, not nil, for length 0) for a str or bin.
func (r *reader) bin() []byte {
	v, ok := r.binRef()
	if !ok {
		return nil
	}
	return append(make([]byte, 0, len(v)), v...)
}

// binRef reads a bin (or str) value and returns its bytes in r's input,
// not a copy; ok is false for nil and on a malformed input.
func (r *reader) binRef() (v []byte, ok bool) {
	n := r.strLen(r.code(), true)
	if n < 0 {
		return nil, false
	}
	v = r.next(n)
	return v, !r.fail
}

// int reads an integer as msgpack's DecodeInt64 does (any width; nil is 0).
func (r *reader) int() int64 {
	c := r.code()
	switch {
	case c <= 0x7f || c >= 0xe0:
		return int64(int8(c))
	case c == 0xc0:
		return 0
	case c == 0xcc:
		return int64(r.be(1))
	case c == 0xd0:
		return int64(int8(r.be(1)))
	case c == 0xcd:
		return int64(r.be(2))
	case c == 0xd1:
		return int64(int16(r.be(2)))
	case c == 0xce:
		return int64(r.be(4))
	case c == 0xd2:
		return int64(int32(r.be(4)))
	case c == 0xcf || c == 0xd3:
		return int64(r.be(8))
	}
	r.fail = true
	return 0
}

// uint reads an unsigned integer as msgpack's DecodeUint64 does.
func (r *reader) uint() uint64 {
	c := r.code()
	switch {
	case c <= 0x7f || c >= 0xe0:
		return uint64(int8(c))
	case c == 0xc0:
		return 0
	case c == 0xcc:
		return r.be(1)
	case c == 0xd0:
		return uint64(int8(r.be(1)))
	case c == 0xcd:
		return r.be(2)
	case c == 0xd1:
		return uint64(int16(r.be(2)))
	case c == 0xce:
		return r.be(4)
	case c == 0xd2:
		return uint64(int32(r.be(4)))
	case c == 0xcf || c == 0xd3:
		return r.be(8)
	}
	r.fail = true
	return 0
}

func (r *reader) bool() bool {
	switch r.code() {
	case 0xc0, 0xc2:
		return false
	case 0xc3:
		return true
	}
	r.fail = true
	return false
}

// reflect decodes the next value into v (a pointer) with msgpack: the
// rare nested values.
func (r *reader) reflect(v any) {
	if r.fail || r.p >= len(r.b) {
		r.fail = true
		return
	}
	end, err := valueEnd(r.b[r.p:])
	if err == nil {
		err = msgpack.Unmarshal(r.b[r.p:r.p+end], v)
	}
	if err != nil {
		r.fail = true
		return
	}
	r.p += end
}

// seen marks field i as read and fails on a second time (msgpack would
// merge or overwrite: left to it).
func (r *reader) seen(mask *uint64, i uint) {
	if *mask&(1<<i) != 0 {
		r.fail = true
	}
	*mask |= 1 << i
}

// decodeSpecFast reads a Spec map into s; false when r failed.
func decodeSpecFast(r *reader, s *Spec) bool {
	var mask uint64
	for n := r.mapLen(); n > 0 && !r.fail; n-- {
		switch string(r.key()) {
		case "h":
			r.seen(&mask, 0)
			s.Handler = r.strSame(&r.handler)
		case "p":
			r.seen(&mask, 1)
			s.Payload = r.payload()
		case "pb":
			r.seen(&mask, 2)
			s.PayloadBase64 = r.bool()
		case "d":
			r.seen(&mask, 3)
			s.DelayNs = r.int()
		case "ra":
			r.seen(&mask, 4)
			s.RunAtMs = r.int()
		case "pr":
			r.seen(&mask, 5)
			s.Priority = int(r.int())
		case "to":
			r.seen(&mask, 6)
			s.TimeoutNs = r.int()
		case "ma":
			r.seen(&mask, 7)
			s.MaxAttempts = int(r.int())
		case "cr":
			r.seen(&mask, 8)
			s.Cron = r.str()
		case "tz":
			r.seen(&mask, 9)
			s.Timezone = r.str()
		case "ev":
			r.seen(&mask, 10)
			s.EveryNs = r.int()
		case "rp":
			r.seen(&mask, 11)
			s.Repeats = int(r.int())
		case "un":
			r.seen(&mask, 12)
			s.UntilMs = r.int()
		case "bo":
			r.seen(&mask, 13)
			r.reflect(&s.Backoff)
		case "rk":
			r.seen(&mask, 14)
			s.RouteKey = r.str()
		case "lb":
			r.seen(&mask, 15)
			r.reflect(&s.Labels)
		case "rt":
			r.seen(&mask, 16)
			s.RetentionNs = r.int()
		case "tp":
			r.seen(&mask, 17)
			s.TraceParent = r.str()
		case "ts":
			r.seen(&mask, 18)
			s.TraceState = r.str()
		case "sh":
			r.seen(&mask, 19)
			r.reflect(&s.Shards)
		case "si":
			r.seen(&mask, 20)
			s.ShardIndex = int(r.int())
		case "sn":
			r.seen(&mask, 21)
			s.ShardTotal = int(r.int())
		default:
			r.fail = true
		}
	}
	return !r.fail
}

// decodeTaskFast reads a Task map into t; false when r failed.
func decodeTaskFast(r *reader, t *Task) bool {
	var mask uint64
	for n := r.mapLen(); n > 0 && !r.fail; n-- {
		switch string(r.key()) {
		case "id":
			r.seen(&mask, 0)
			t.ID = r.str()
		case "s":
			r.seen(&mask, 1)
			decodeSpecFast(r, &t.Spec)
		case "e":
			r.seen(&mask, 2)
			t.Epoch = r.uint()
		case "st":
			r.seen(&mask, 3)
			t.State = State(r.uint())
		case "a":
			r.seen(&mask, 4)
			t.Attempts = int(r.int())
		case "rn":
			r.seen(&mask, 5)
			t.Run = int(r.int())
		case "sl":
			r.seen(&mask, 6)
			t.SlotMs = r.int()
		case "rb":
			r.seen(&mask, 7)
			t.RunBase = int(r.int())
		case "fr":
			r.seen(&mask, 8)
			t.FailedRuns = int(r.int())
		case "sn":
			r.seen(&mask, 9)
			t.Snoozes = int(r.int())
		case "du":
			r.seen(&mask, 10)
			t.DueMs = r.int()
		case "n":
			r.seen(&mask, 11)
			t.Node = r.str()
		case "fi":
			r.seen(&mask, 12)
			t.FiredMs = r.int()
		case "le":
			r.seen(&mask, 13)
			t.LeaseMs = r.int()
		case "le2":
			r.seen(&mask, 14)
			t.LastError = r.str()
		case "c":
			r.seen(&mask, 15)
			t.CreatedMs = r.int()
		case "u":
			r.seen(&mask, 16)
			t.UpdatedMs = r.int()
		case "f":
			r.seen(&mask, 17)
			t.FinishedMs = r.int()
		case "pz":
			r.seen(&mask, 18)
			t.Paused = r.bool()
		case "hb":
			r.seen(&mask, 19)
			t.HeldBy = Outcome(r.uint())
		case "hf":
			r.seen(&mask, 20)
			t.HistFirst = int(r.int())
		case "hr":
			r.seen(&mask, 21)
			t.HistRun = int(r.int())
		case "rdu":
			r.seen(&mask, 22)
			t.RunDueMs = r.int()
		case "rfi":
			r.seen(&mask, 23)
			t.RunFiredMs = r.int()
		case "rpk":
			r.seen(&mask, 24)
			t.RunParked = r.str()
		case "shr":
			r.seen(&mask, 25)
			r.reflect(&t.Shards)
		default:
			r.fail = true
		}
	}
	return !r.fail
}

// decodeSubmitFast reads a Submit map into s; false when r failed.
func decodeSubmitFast(r *reader, s *Submit) bool {
	var mask uint64
	for n := r.mapLen(); n > 0 && !r.fail; n-- {
		switch string(r.key()) {
		case "id":
			r.seen(&mask, 0)
			s.ID = r.str()
		case "s":
			r.seen(&mask, 1)
			decodeSpecFast(r, &s.Spec)
		case "du":
			r.seen(&mask, 2)
			s.DueMs = r.int()
		case "sl":
			r.seen(&mask, 3)
			s.SlotMs = r.int()
		case "at":
			r.seen(&mask, 4)
			s.AtMs = r.int()
		case "o":
			r.seen(&mask, 5)
			s.Overwrite = r.bool()
		default:
			r.fail = true
		}
	}
	return !r.fail
}

// decodeFireFast reads a Fire map into f; false when r failed.
func decodeFireFast(r *reader, f *Fire) bool {
	var mask uint64
	for n := r.mapLen(); n > 0 && !r.fail; n-- {
		switch string(r.key()) {
		case "id":
			r.seen(&mask, 0)
			f.ID = r.str()
		case "e":
			r.seen(&mask, 1)
			f.Epoch = r.uint()
		case "a":
			r.seen(&mask, 2)
			f.Attempt = int(r.int())
		case "n":
			r.seen(&mask, 3)
			f.Node = r.str()
		case "at":
			r.seen(&mask, 4)
			f.AtMs = r.int()
		case "le":
			r.seen(&mask, 5)
			f.LeaseMs = r.int()
		case "hr":
			r.seen(&mask, 6)
			f.HistoryRuns = int(r.int())
		case "pr":
			r.seen(&mask, 7)
			f.ParkedReason = r.str()
		default:
			r.fail = true
		}
	}
	return !r.fail
}

// decodeCompleteFast reads a Complete map into c; false when r failed.
func decodeCompleteFast(r *reader, c *Complete) bool {
	var mask uint64
	for n := r.mapLen(); n > 0 && !r.fail; n-- {
		switch string(r.key()) {
		case "id":
			r.seen(&mask, 0)
			c.ID = r.str()
		case "e":
			r.seen(&mask, 1)
			c.Epoch = r.uint()
		case "a":
			r.seen(&mask, 2)
			c.Attempt = int(r.int())
		case "o":
			r.seen(&mask, 3)
			c.Outcome = Outcome(r.uint())
		case "er":
			r.seen(&mask, 4)
			c.Error = r.str()
		case "r":
			r.seen(&mask, 5)
			c.RetryDueMs = r.int()
		case "ra":
			r.seen(&mask, 6)
			c.RetryAfterMs = r.int()
		case "ns":
			r.seen(&mask, 7)
			c.NextSlotMs = r.int()
		case "nd":
			r.seen(&mask, 8)
			c.NextDueMs = r.int()
		case "at":
			r.seen(&mask, 9)
			c.AtMs = r.int()
		case "al":
			r.seen(&mask, 10)
			c.Alert = r.bool()
		case "fn":
			r.seen(&mask, 11)
			c.FlowNextSlotMs = r.int()
		case "xn":
			r.seen(&mask, 12)
			c.Executor = r.str()
		case "hs":
			r.seen(&mask, 13)
			c.HTTPStatus = int(r.int())
		case "ap":
			r.seen(&mask, 14)
			c.AppliedMs = r.int()
		case "sa":
			r.seen(&mask, 15)
			c.StartedMs = r.int()
		case "ea":
			r.seen(&mask, 16)
			c.EndedMs = r.int()
		case "dn":
			r.seen(&mask, 17)
			c.DurationNs = r.int()
		case "qn":
			r.seen(&mask, 18)
			c.QueueNs = r.int()
		case "cn":
			r.seen(&mask, 19)
			c.ConnectNs = r.int()
		case "res":
			r.seen(&mask, 20)
			c.Result = r.bin()
		case "rbi":
			r.seen(&mask, 21)
			c.ResultBinary = r.bool()
		case "rtr":
			r.seen(&mask, 22)
			c.ResultTruncated = r.bool()
		case "shc":
			r.seen(&mask, 23)
			c.ShardCount = int(r.int())
		default:
			r.fail = true
		}
	}
	return !r.fail
}

// decodeCommandFast reads a Command map holding a type and a Submit, a
// Fire or a Complete into c (a zero Command); any other command fails r.
func decodeCommandFast(r *reader, c *Command) bool {
	var mask uint64
	for n := r.mapLen(); n > 0 && !r.fail; n-- {
		k := r.key()
		if len(k) == 1 && (k[0] == 's' || k[0] == 'f' || k[0] == 'x') && r.p < len(r.b) && r.b[r.p] == 0xc0 {
			r.fail = true // nil: left to msgpack
			break
		}
		switch string(k) {
		case "t":
			r.seen(&mask, 0)
			c.Type = CommandType(r.uint())
		case "s":
			r.seen(&mask, 1)
			c.Submit = new(Submit)
			decodeSubmitFast(r, c.Submit)
		case "f":
			r.seen(&mask, 2)
			c.Fire = new(Fire)
			decodeFireFast(r, c.Fire)
		case "x":
			r.seen(&mask, 3)
			c.Complete = new(Complete)
			decodeCompleteFast(r, c.Complete)
		default:
			r.fail = true
		}
	}
	return !r.fail
}

// decodeCommands decodes a msgpack array of commands (an entry without
// its version byte): each submit by decodeCommandFast, any other command
// (or a submit it gives up on) by msgpack, as decodeArray would.
func decodeCommands(b []byte) ([]Command, error) {
	if err := checkLengths(b); err != nil {
		return nil, err
	}
	r := reader{b: b}
	var n int
	switch c := r.code(); {
	case c >= 0x90 && c <= 0x9f:
		n = int(c & 0x0f)
	case c == 0xdc:
		n = int(r.be(2))
	case c == 0xdd:
		n = int(r.be(4))
	default:
		r.fail = true
	}
	if r.fail || n > len(b) {
		return decodeArray[Command](b) // nil, or its errors
	}
	out := make([]Command, n)
	for i := range out {
		start := r.p
		if decodeCommandFast(&r, &out[i]) {
			continue
		}
		end, err := valueEnd(b[start:])
		if err != nil {
			return nil, err
		}
		out[i] = Command{}
		if err := msgpack.Unmarshal(b[start:start+end], &out[i]); err != nil {
			return nil, err
		}
		r = reader{b: b, p: start + end}
	}
	return out, nil
}

// decodeResultFast reads a Result map into res (a zero Result); a nil
// task, or anything decodeTaskFast gives up on, fails r.
func decodeResultFast(r *reader, res *Result) bool {
	var mask uint64
	for n := r.mapLen(); n > 0 && !r.fail; n-- {
		switch string(r.key()) {
		case "c":
			r.seen(&mask, 0)
			res.Code = r.str()
		case "cr":
			r.seen(&mask, 1)
			res.Created = r.bool()
		case "t":
			r.seen(&mask, 2)
			if r.p < len(r.b) && r.b[r.p] == 0xc0 { // nil: left to msgpack
				r.fail = true
				break
			}
			res.Task = new(Task)
			decodeTaskFast(r, res.Task)
		case "i":
			r.seen(&mask, 3)
			res.Index = r.uint()
		case "pg":
			r.seen(&mask, 4)
			r.reflect(&res.Purged)
		case "pf":
			r.seen(&mask, 5)
			r.reflect(&res.PurgedFlows)
		case "w":
			r.seen(&mask, 6)
			res.Warning = r.str()
		case "fl":
			r.seen(&mask, 7)
			r.reflect(&res.Flow)
		default:
			r.fail = true
		}
	}
	return !r.fail
}

// decodeResultsFast reads a msgpack array of results (EncodeResults'
// bytes) with decodeResultFast; false when any of it is left to msgpack
// (the caller then decodes all of b with decodeArray).
func decodeResultsFast(b []byte) ([]Result, bool) {
	r := reader{b: b}
	var n int
	switch c := r.code(); {
	case c >= 0x90 && c <= 0x9f:
		n = int(c & 0x0f)
	case c == 0xdc:
		n = int(r.be(2))
	case c == 0xdd:
		n = int(r.be(4))
	default:
		return nil, false
	}
	if r.fail || n > len(b) {
		return nil, false
	}
	out := make([]Result, n)
	for i := range out {
		if !decodeResultFast(&r, &out[i]) {
			return nil, false
		}
	}
	return out, r.p == len(b)
}
