package raftfsm

import (
	"bytes"
	"encoding/hex"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"unsafe"

	"github.com/vmihailenco/msgpack/v5"
)

// filler sets random values in every exported field, reached by
// reflection: a field added to Task, Spec, Submit or Command later is
// filled too, so a codec.go that does not know it fails the tests below.
type filler struct {
	r *rand.Rand
	// oneLabel keeps maps to one entry: msgpack writes a map in Go's
	// random iteration order, so bytes compare only then.
	oneLabel bool
}

func (f *filler) fill(v reflect.Value, depth int) {
	switch v.Kind() {
	case reflect.Struct:
		for i := range v.NumField() {
			if v.Type().Field(i).IsExported() && f.r.IntN(3) > 0 {
				f.fill(v.Field(i), depth+1)
			}
		}
	case reflect.Pointer:
		if depth < 6 && f.r.IntN(2) == 0 {
			p := reflect.New(v.Type().Elem())
			f.fill(p.Elem(), depth+1)
			v.Set(p)
		}
	case reflect.String:
		v.SetString(f.str())
	case reflect.Bool:
		v.SetBool(f.r.IntN(2) == 0)
	case reflect.Int, reflect.Int64, reflect.Int32, reflect.Int16, reflect.Int8:
		v.SetInt(f.int() >> (64 - v.Type().Bits()))
	case reflect.Uint, reflect.Uint64, reflect.Uint32, reflect.Uint16, reflect.Uint8:
		v.SetUint(uint64(f.int()) >> (64 - v.Type().Bits()))
	case reflect.Float64, reflect.Float32:
		v.SetFloat(f.r.NormFloat64() * 1000)
	case reflect.Slice:
		if v.Type().Elem().Kind() == reflect.Uint8 {
			if f.r.IntN(3) > 0 {
				v.SetBytes([]byte(f.str()))
			}
			return
		}
		if depth < 6 {
			n := f.r.IntN(3)
			s := reflect.MakeSlice(v.Type(), n, n)
			for i := range n {
				f.fill(s.Index(i), depth+1)
			}
			v.Set(s)
		}
	case reflect.Map:
		n := 1 + f.r.IntN(3)
		if f.oneLabel {
			n = 1
		}
		m := reflect.MakeMap(v.Type())
		for range n {
			k, e := reflect.New(v.Type().Key()).Elem(), reflect.New(v.Type().Elem()).Elem()
			f.fill(k, depth+1)
			f.fill(e, depth+1)
			m.SetMapIndex(k, e)
		}
		v.Set(m)
	}
}

// int returns integers of every msgpack width, with their bounds.
func (f *filler) int() int64 {
	switch f.r.IntN(8) {
	case 0:
		return int64(f.r.IntN(256)) - 128
	case 1:
		return int64(f.r.IntN(1<<17)) - 1<<16
	case 2:
		return int64(f.r.Uint32()) - 1<<31
	case 3:
		return []int64{0, 127, 128, 255, 256, 65535, 65536, -32, -33, math.MaxInt64, math.MinInt64, 1<<32 - 1, 1 << 32}[f.r.IntN(13)]
	case 4:
		return 1_700_000_000_000 + f.r.Int64N(1e12)
	default:
		return f.r.Int64()
	}
}

// str returns strings of every msgpack length form.
func (f *filler) str() string {
	n := []int{0, 1, 5, 31, 32, 200, 255, 256, 300, 70000}[f.r.IntN(10)]
	if f.r.IntN(20) > 0 && n > 300 {
		n = 17
	}
	b := make([]byte, n)
	for i := range b {
		b[i] = byte('a' + f.r.IntN(26))
	}
	return string(b)
}

func randomTask(f *filler) *Task {
	var t Task
	f.fill(reflect.ValueOf(&t).Elem(), 0)
	return &t
}

// randomCommand returns a submit (with only Submit set) most of the
// time, else a command of another type with its field set.
func randomCommand(f *filler) Command {
	var c Command
	if f.r.IntN(4) > 0 {
		c.Type, c.Submit = CmdSubmit, new(Submit)
		f.fill(reflect.ValueOf(c.Submit).Elem(), 1)
		return c
	}
	v := reflect.ValueOf(&c).Elem()
	i := 1 + f.r.IntN(v.NumField()-1)
	f.fill(v.Field(i), 0)
	if v.Field(i).IsNil() {
		v.Field(i).Set(reflect.New(v.Field(i).Type().Elem()))
	}
	c.Type = CommandType(i)
	return c
}

// TestCodecWritesWhatReflectionWrites checks the fast encoders against
// msgpack.Marshal byte for byte, on random tasks and entries.
func TestCodecWritesWhatReflectionWrites(t *testing.T) {
	f := &filler{r: rand.New(rand.NewPCG(1, 2)), oneLabel: true}
	for i := range 3000 {
		task := randomTask(f)
		got, err := encodeRecord(task)
		if err != nil {
			t.Fatal(err)
		}
		want, err := msgpack.Marshal(task)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got[1:], want) || got[0] != recordVersion {
			t.Fatalf("task %d: %+v\nfast:       %x\nreflection: %x", i, task, got[1:], want)
		}
		cmds := make([]Command, f.r.IntN(20))
		for j := range cmds {
			cmds[j] = randomCommand(f)
		}
		if f.r.IntN(50) == 0 {
			cmds = nil
		}
		got, err = EncodeEntry(cmds)
		if err != nil {
			t.Fatal(err)
		}
		want, err = msgpack.Marshal(cmds)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got[1:], want) || got[0] != EntryVersion {
			t.Fatalf("entry %d: %+v\nfast:       %x\nreflection: %x", i, cmds, got[1:], want)
		}
	}
}

// TestCodecReadsWhatReflectionReads decodes random tasks and entries,
// written by msgpack.Marshal, with the fast decoders and with
// msgpack.Unmarshal: the values must be equal, and the fast path must
// have been taken for tasks and submits.
func TestCodecReadsWhatReflectionReads(t *testing.T) {
	f := &filler{r: rand.New(rand.NewPCG(3, 4))}
	for i := range 3000 {
		task := randomTask(f)
		b, err := msgpack.Marshal(task)
		if err != nil {
			t.Fatal(err)
		}
		var fast, slow Task
		if !decodeTaskFast(&reader{b: b}, &fast) {
			t.Fatalf("task %d: the fast path gave up on %x", i, b)
		}
		if err := msgpack.Unmarshal(b, &slow); err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(fast, slow) {
			t.Fatalf("task %d:\nfast:       %+v\nreflection: %+v", i, fast, slow)
		}
		// The fast path's round trip ends where msgpack's does (which
		// turns an empty omitempty slice or map into nil).
		rec, err := encodeRecord(task)
		if err != nil {
			t.Fatal(err)
		}
		var again Task
		if err := decodeRecord(rec, &again); err != nil || !reflect.DeepEqual(again, slow) {
			t.Fatalf("task %d round trip (%v):\nfast:       %+v\nreflection: %+v", i, err, again, slow)
		}

		cmds := make([]Command, 1+f.r.IntN(20))
		for j := range cmds {
			cmds[j] = randomCommand(f)
		}
		b, err = msgpack.Marshal(cmds)
		if err != nil {
			t.Fatal(err)
		}
		got, err := decodeCommands(b)
		if err != nil {
			t.Fatal(err)
		}
		want, err := decodeArray[Command](b)
		if err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("entry %d:\nfast:       %+v\nreflection: %+v", i, got, want)
		}
	}
}

// TestCodecReadsStoredBytes decodes records and an entry written by the
// reflection encoder of the version before codec.go (testdata/codec,
// written by msgpack.Marshal at 50967e4): the bytes on disks and in Raft
// logs today.
func TestCodecReadsStoredBytes(t *testing.T) {
	read := func(name string) []byte {
		b, err := os.ReadFile(filepath.Join("testdata", "codec", name))
		if err != nil {
			t.Fatal(err)
		}
		h, err := hex.DecodeString(strings.TrimSpace(string(b)))
		if err != nil {
			t.Fatal(err)
		}
		return h
	}
	for _, tc := range storedTasks() {
		b := read(tc.name + ".hex")
		var got Task
		if err := decodeRecord(b, &got); err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		if !reflect.DeepEqual(&got, tc.task) {
			t.Errorf("%s:\ngot  %+v\nwant %+v", tc.name, got, *tc.task)
		}
		if !decodeTaskFast(&reader{b: b[1:]}, new(Task)) {
			t.Errorf("%s: the fast path gave up", tc.name)
		}
		again, err := encodeRecord(tc.task)
		if err != nil || !bytes.Equal(again, b) {
			t.Errorf("%s: written again as %x (%v), stored as %x", tc.name, again, err, b)
		}
	}
	b := read("entry.hex")
	cmds, err := DecodeEntry(b)
	if err != nil {
		t.Fatal(err)
	}
	if want := storedEntry(); !reflect.DeepEqual(cmds, want) {
		t.Errorf("entry:\ngot  %+v\nwant %+v", cmds, want)
	}
	if again, err := EncodeEntry(cmds); err != nil || !bytes.Equal(again, b) {
		t.Errorf("entry written again as %x (%v), stored as %x", again, err, b)
	}
}

// storedTasks are the records in testdata/codec: a new WAITING task as a
// batch submit stores it, and a recurring task with every kind of field.
func storedTasks() []struct {
	name string
	task *Task
} {
	full := &Task{ID: "order-42", Spec: Spec{Handler: "order.close", Payload: []byte(`{"n":1}`), PayloadBase64: true,
		DelayNs: 5e9, Priority: 1, TimeoutNs: 30e9, MaxAttempts: 5, Cron: "*/5 * * * *", Timezone: "Europe/Paris",
		Repeats: 10, UntilMs: 1_800_000_000_000, Backoff: &Backoff{InitialNs: 1e9, MaxNs: 60e9, Multiplier: 2, Jitter: 0.2},
		RouteKey: "eu", Labels: map[string]string{"team": "billing"}, RetentionNs: 3600e9,
		TraceParent: "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", TraceState: "k=v",
		Shards: &Shards{Ask: true, Max: 8}},
		Epoch: 77, State: StateRunning, Attempts: 2, Run: 3, SlotMs: 1_700_000_300_000, RunBase: 1, FailedRuns: 1,
		Snoozes: 4, DueMs: 1_700_000_300_000, Node: "node-2", FiredMs: 1_700_000_300_010, LeaseMs: 1_700_000_335_010,
		LastError: "503 from executor", CreatedMs: 1_700_000_000_000, UpdatedMs: 1_700_000_300_010, Paused: true,
		HeldBy: OutcomeBusy, HistFirst: 1, HistRun: 2, RunDueMs: 1_700_000_300_000, RunFiredMs: 1_700_000_300_005,
		RunParked: "paused", Shards: &ShardRun{Total: 4, Succeeded: 1, Ended: []byte{1, 0, 0, 0}}}
	return []struct {
		name string
		task *Task
	}{
		{"task-new", benchTask()},
		{"task-full", full},
	}
}

// storedEntry is the entry in testdata/codec: two submits around a fire.
func storedEntry() []Command {
	cmds := benchSubmits(2)
	cmds[1].Submit.Overwrite, cmds[1].Submit.SlotMs = true, 1_700_000_001_000
	cmds[1].Submit.Spec.Payload = bytes.Repeat([]byte("x"), 300)
	return append(cmds[:1], fireCmd("order-42", 77, 1, "node-2", 1_700_000_000_000, 1_700_000_035_000), cmds[1])
}

// TestCodecWriteStoredBytes rewrites testdata/codec with msgpack.Marshal
// when AX_WRITE_CODEC_TESTDATA is set (never needed unless the test values
// change; the files hold what the reflection encoder wrote).
func TestCodecWriteStoredBytes(t *testing.T) {
	if os.Getenv("AX_WRITE_CODEC_TESTDATA") == "" {
		t.Skip("set AX_WRITE_CODEC_TESTDATA=1 to rewrite testdata/codec")
	}
	write := func(name string, b []byte) {
		if err := os.MkdirAll(filepath.Join("testdata", "codec"), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join("testdata", "codec", name), []byte(hex.EncodeToString(b)+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	for _, tc := range storedTasks() {
		b, err := msgpack.Marshal(tc.task)
		if err != nil {
			t.Fatal(err)
		}
		write(tc.name+".hex", append([]byte{recordVersion}, b...))
	}
	b, err := msgpack.Marshal(storedEntry())
	if err != nil {
		t.Fatal(err)
	}
	write("entry.hex", append([]byte{EntryVersion}, b...))
}

// FuzzFastDecodeMatchesReflection feeds any bytes to the fast decoders:
// whenever they accept a value, msgpack.Unmarshal must accept it too and
// read the same value; and DecodeEntry's commands must be decodeArray's.
func FuzzFastDecodeMatchesReflection(f *testing.F) {
	fl := &filler{r: rand.New(rand.NewPCG(5, 6))}
	for range 20 {
		b, _ := msgpack.Marshal(randomTask(fl))
		f.Add(b)
		c := []Command{randomCommand(fl), randomCommand(fl)}
		b, _ = msgpack.Marshal(c)
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		if checkLengths(b) != nil {
			return // refused before any decoder runs
		}
		var fast, slow Task
		if decodeTaskFast(&reader{b: b}, &fast) {
			if err := msgpack.Unmarshal(b, &slow); err != nil {
				t.Fatalf("fast path took %x, msgpack refuses it: %v", b, err)
			}
			if !reflect.DeepEqual(fast, slow) {
				t.Fatalf("%x:\nfast:       %+v\nreflection: %+v", b, fast, slow)
			}
		}
		// decodeRecord as a whole, the fallback included, answers as
		// msgpack does (checkLengths passed: its own refusals aside).
		var rec, ref Task
		errRec := decodeRecord(append([]byte{recordVersion}, b...), &rec)
		errRef := msgpack.Unmarshal(b, &ref)
		if (errRec == nil) != (errRef == nil) || errRec == nil && !reflect.DeepEqual(rec, ref) {
			t.Fatalf("%x: decodeRecord %+v (%v), msgpack %+v (%v)", b, rec, errRec, ref, errRef)
		}
		got, err1 := decodeCommands(b)
		want, err2 := decodeArray[Command](b)
		if (err1 == nil) != (err2 == nil) {
			t.Fatalf("%x: fast error %v, reflection error %v", b, err1, err2)
		}
		if err1 == nil && !reflect.DeepEqual(got, want) {
			t.Fatalf("%x:\nfast:       %+v\nreflection: %+v", b, got, want)
		}
	})
}

// TestCodecWritesRunRecordsAsReflection checks appendRunRecord against
// msgpack.Marshal byte for byte on random run records (encodeRecord).
func TestCodecWritesRunRecordsAsReflection(t *testing.T) {
	f := &filler{r: rand.New(rand.NewPCG(11, 12))}
	for i := range 3000 {
		var r RunRecord
		f.fill(reflect.ValueOf(&r).Elem(), 0)
		got, err := encodeRecord(&r)
		if err != nil {
			t.Fatal(err)
		}
		want, err := msgpack.Marshal(&r)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got[1:], want) || got[0] != recordVersion {
			t.Fatalf("run record %d: %+v\nfast:       %x\nreflection: %x", i, r, got[1:], want)
		}
	}
}

// TestCodecReadsFireAndCompleteFast: fire and complete commands, random in
// every field and written by msgpack.Marshal, are read by the fast path
// (not handed to msgpack) into what msgpack.Unmarshal reads, and written
// back by appendCommand into the same bytes.
func TestCodecReadsFireAndCompleteFast(t *testing.T) {
	f := &filler{r: rand.New(rand.NewPCG(9, 10))}
	for i := range 3000 {
		var c Command
		if i%2 == 0 {
			c.Type, c.Fire = CmdFire, new(Fire)
			f.fill(reflect.ValueOf(c.Fire).Elem(), 1)
		} else {
			c.Type, c.Complete = CmdComplete, new(Complete)
			f.fill(reflect.ValueOf(c.Complete).Elem(), 1)
		}
		b, err := msgpack.Marshal(&c)
		if err != nil {
			t.Fatal(err)
		}
		var fast, slow Command
		if !decodeCommandFast(&reader{b: b}, &fast) {
			t.Fatalf("command %d: the fast path gave up on %x", i, b)
		}
		if err := msgpack.Unmarshal(b, &slow); err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(fast, slow) {
			t.Fatalf("command %d:\nfast:       %+v\nreflection: %+v", i, fast, slow)
		}
		again, err := appendCommand(nil, &c)
		if err != nil || !bytes.Equal(again, b) {
			t.Fatalf("command %d (%v):\nfast:       %x\nreflection: %x", i, err, again, b)
		}
	}
}

// TestCodecFallsBackToReflection gives the fast readers values they give
// up on (a field of a later version, before or after the known ones):
// decodeRecord and DecodeEntry must still answer as msgpack does.
func TestCodecFallsBackToReflection(t *testing.T) {
	type laterTask struct {
		Later string `msgpack:"zz"`
		Task
	}
	type laterTaskAfter struct {
		Task
		Later string `msgpack:"zz"`
	}
	type laterSubmit struct {
		Later int `msgpack:"zz"`
		Submit
	}
	type laterCommand struct {
		Type   CommandType  `msgpack:"t"`
		Submit *laterSubmit `msgpack:"s"`
	}
	f := &filler{r: rand.New(rand.NewPCG(7, 8))}
	for i := range 500 {
		task := randomTask(f)
		var v any = laterTask{Task: *task, Later: "v2"}
		if i%2 == 1 {
			v = laterTaskAfter{Task: *task, Later: "v2"}
		}
		b, err := msgpack.Marshal(v)
		if err != nil {
			t.Fatal(err)
		}
		if decodeTaskFast(&reader{b: b}, new(Task)) {
			t.Fatal("the fast path read an unknown field")
		}
		var got, want Task
		if err := decodeRecord(append([]byte{recordVersion}, b...), &got); err != nil {
			t.Fatal(err)
		}
		if err := msgpack.Unmarshal(b, &want); err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("task %d:\ngot  %+v\nwant %+v", i, got, want)
		}

		c := randomCommand(f)
		if c.Submit == nil {
			continue
		}
		entry := []any{benchSubmits(1)[0], laterCommand{Type: CmdSubmit, Submit: &laterSubmit{Submit: *c.Submit, Later: 2}}, benchSubmits(1)[0]}
		b, err = msgpack.Marshal(entry)
		if err != nil {
			t.Fatal(err)
		}
		cmds, err := DecodeEntry(append([]byte{EntryVersion}, b...))
		if err != nil {
			t.Fatal(err)
		}
		wantCmds, err := decodeArray[Command](b)
		if err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(cmds, wantCmds) || cmds[1].Submit == nil || cmds[1].Submit.ID != c.Submit.ID {
			t.Fatalf("entry %d:\ngot  %+v\nwant %+v", i, cmds, wantCmds)
		}
	}
}

// randomResult returns a task command's result (code, task, warning) most
// of the time, else one with a purge's or a flow's fields set.
func randomResult(f *filler) Result {
	var r Result
	if f.r.IntN(5) > 0 {
		r.Code = []string{"", CodeOK, CodeNotFound, CodeConflict}[f.r.IntN(4)]
		r.Created = f.r.IntN(2) == 0
		if f.r.IntN(4) > 0 {
			r.Task = randomTask(f)
		}
		r.Index = uint64(f.int())
		if f.r.IntN(4) == 0 {
			r.Warning = f.str()
		}
		return r
	}
	f.fill(reflect.ValueOf(&r).Elem(), 0)
	return r
}

// EncodeResults writes what msgpack.Marshal writes, and DecodeResults
// reads it as msgpack.Unmarshal does, taking the fast path for the
// results of task commands.
func TestResultsCodecMatchesReflection(t *testing.T) {
	f := &filler{r: rand.New(rand.NewPCG(9, 10)), oneLabel: true}
	for i := range 2000 {
		rs := make([]Result, f.r.IntN(20))
		fast := true
		for j := range rs {
			rs[j] = randomResult(f)
			if rs[j].Purged != nil || rs[j].PurgedFlows != nil || rs[j].Flow != nil {
				fast = false
			}
		}
		if f.r.IntN(50) == 0 {
			rs = nil
		}
		got, err := EncodeResults(rs)
		if err != nil {
			t.Fatal(err)
		}
		want, err := msgpack.Marshal(rs)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, want) {
			t.Fatalf("results %d: %+v\nfast:       %x\nreflection: %x", i, rs, got, want)
		}
		dec, err := DecodeResults(got)
		if err != nil {
			t.Fatal(err)
		}
		ref, err := decodeArray[Result](got)
		if err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(dec, ref) {
			t.Fatalf("results %d:\nfast:       %+v\nreflection: %+v", i, dec, ref)
		}
		if _, ok := decodeResultsFast(got); fast && rs != nil && !ok {
			t.Fatalf("results %d: the fast path gave up on %x", i, got)
		}
	}
}

// FuzzResultsDecodeMatchesReflection: DecodeResults answers as
// decodeArray (msgpack.Unmarshal) does, on any bytes.
func FuzzResultsDecodeMatchesReflection(f *testing.F) {
	fl := &filler{r: rand.New(rand.NewPCG(11, 12))}
	for range 20 {
		b, _ := msgpack.Marshal([]Result{randomResult(fl), randomResult(fl)})
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		got, err1 := DecodeResults(b)
		want, err2 := decodeArray[Result](b)
		if (err1 == nil) != (err2 == nil) {
			t.Fatalf("%x: fast error %v, reflection error %v", b, err1, err2)
		}
		if err1 == nil && !reflect.DeepEqual(got, want) {
			t.Fatalf("%x:\nfast:       %+v\nreflection: %+v", b, got, want)
		}
	})
}

// The submits of one entry that name the handler of the submit before
// share its string: one copy for a run of the same handler, not one per
// command (a batch's submits mostly name one handler). Each still
// decodes to its own value.
func TestDecodeEntrySharesARepeatedHandler(t *testing.T) {
	var cmds []Command
	for i, h := range []string{"a.h", "a.h", "b.h", "b.h", "a.h", ""} {
		cmds = append(cmds, submitCmd(fmt.Sprintf("t%d", i), Spec{Handler: h, DelayNs: 1e9}, 1_700_000_001_000, 1_700_000_000_000))
	}
	got, err := DecodeEntry(mustEncode(t, cmds...))
	if err != nil {
		t.Fatal(err)
	}
	for i := range cmds {
		if g, w := got[i].Submit.Spec.Handler, cmds[i].Submit.Spec.Handler; g != w {
			t.Fatalf("command %d: handler %q, want %q", i, g, w)
		}
	}
	same := func(i, j int) bool {
		return unsafe.StringData(got[i].Submit.Spec.Handler) == unsafe.StringData(got[j].Submit.Spec.Handler)
	}
	if !same(0, 1) || !same(2, 3) {
		t.Fatal("a handler repeated by the next submit was copied again")
	}
	if same(1, 2) || same(3, 4) {
		t.Fatal("different handlers share a string")
	}
}
