package axapi

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"strings"
	"testing"
)

func TestParseTraceParent(t *testing.T) {
	const good = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
	p, err := ParseTraceParent(good)
	if err != nil {
		t.Fatal(err)
	}
	if p.String() != good || p.Flags != 1 || p.Version != 0 {
		t.Fatalf("round trip: got %q (%+v)", p.String(), p)
	}
	for _, s := range []string{
		good,
		"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-00",
		"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-ff", // unknown flags are ignored, not refused
		"01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", // a later version
		"cc-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-what-the-future-will-be-like",
	} {
		if _, err := ParseTraceParent(s); err != nil {
			t.Errorf("%q: %v", s, err)
		}
	}
	for _, tc := range []struct{ in, want string }{
		{"", "0 bytes"},
		{"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-", "version 00 has 55"},
		{"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-1", "bytes"},
		{"ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", "version ff"},
		{"0g-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", "version"},
		{"0A-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", "version"},
		{"00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01", "trace id"},
		{"00-4bf92f3577b34da6a3ce929d0e0e4736-00F067AA0BA902B7-01", "parent id"},
		{"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-0F", "flags"},
		{"00-00000000000000000000000000000000-00f067aa0ba902b7-01", "all zeros"},
		{"00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01", "all zeros"},
		{"00_4bf92f3577b34da6a3ce929d0e0e4736_00f067aa0ba902b7_01", "separated"},
		{"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-0x", "flags"},
		{"00-4bf92f3577b34da6a3ce929d0e0e473g-00f067aa0ba902b7-01", "trace id"},
		{"01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01x", "later version"},
		{"01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-" + strings.Repeat("a", 300), "limit"},
		{" 00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", "version"},
	} {
		_, err := ParseTraceParent(tc.in)
		if err == nil || !errors.Is(err, ErrTraceContext) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%q: got %v, want an error saying %q", tc.in, err, tc.want)
		}
	}
}

func TestCheckTraceState(t *testing.T) {
	var members []string
	for i := range TraceStateMaxMembers {
		members = append(members, "k"+string(rune('a'+i%26))+strings.Repeat("x", i/26)+"=1")
	}
	for _, s := range []string{
		"",
		"rojo=00f067aa0ba902b7",
		"rojo=00f067aa0ba902b7,congo=t61rcWkgMzE",
		" rojo=1 ,\tcongo=2\t, ,",
		"tenant1@sys=x",
		"1tenant@s_y-s*/=x y",
		"a=" + strings.Repeat("v", 256),
		strings.Join(members, ","),
	} {
		if err := CheckTraceState(s); err != nil {
			t.Errorf("%q: %v", s, err)
		}
	}
	for _, tc := range []struct{ in, want string }{
		{"rojo", "not key=value"},
		{"Rojo=1", "key"},
		{"1rojo=1", "key"},
		{"rojo@=1", "key"},
		{"@sys=1", "key"},
		{"t@1sys=1", "key"},
		{"t@systemnametoolong=1", "key"},
		{"rojo=", "value"},
		{"rojo=a\x7fb", "value"},
		{"rojo=a=b", "value"},
		{"rojo=é", "value"},
		{"rojo=1,rojo=2", "twice"},
		{strings.Join(members, ",") + ",zz=1", "more than 32"},
		{"a=" + strings.Repeat("v", 257), "value"},
		{strings.Repeat("abcdefgh=1,", 50), "bytes"},
	} {
		err := CheckTraceState(tc.in)
		if err == nil || !errors.Is(err, ErrTraceContext) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%q: got %v, want an error saying %q", tc.in, err, tc.want)
		}
	}
}

func TestAppendTraceParent_NoAlloc(t *testing.T) {
	var buf [55]byte
	tid := [16]byte{1, 2, 3}
	pid := [8]byte{9}
	if n := testing.AllocsPerRun(100, func() { AppendTraceParent(buf[:0], tid, pid, 1) }); n != 0 {
		t.Fatalf("%v allocations", n)
	}
}

func TestCallbackTraceParent(t *testing.T) {
	const submitted = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-03"
	seen := map[[8]byte]bool{}
	for run := 1; run <= 3; run++ {
		for attempt := 1; attempt <= 3; attempt++ {
			tp := string(CallbackTraceParent(nil, submitted, "order|42", run, attempt))
			p, err := ParseTraceParent(tp)
			if err != nil {
				t.Fatal(err)
			}
			if tp[:36] != submitted[:36] || p.Flags != 3 {
				t.Errorf("%s: want the trace id and flags of %s", tp, submitted)
			}
			if seen[p.ParentID] || p.ParentID == [8]byte{0x00, 0xf0, 0x67, 0xaa, 0x0b, 0xa9, 0x02, 0xb7} {
				t.Errorf("run %d attempt %d: parent id %x not new", run, attempt, p.ParentID)
			}
			seen[p.ParentID] = true
			if again := string(CallbackTraceParent(nil, submitted, "order|42", run, attempt)); again != tp {
				t.Errorf("a redelivery got %s, the first %s", again, tp)
			}
		}
	}
	// Without a submitted trace context: the trace id is SHA-256(id)[:16].
	tp := string(CallbackTraceParent(nil, "", "order|42", 1, 1))
	if len(tp) != 55 || tp[53:] != "01" {
		t.Fatalf("untraced: %s", tp)
	}
	sum := sha256.Sum256([]byte("order|42"))
	if tp[3:35] != hex.EncodeToString(sum[:16]) {
		t.Errorf("untraced trace id %s, want %x", tp[3:35], sum[:16])
	}
	var buf [55]byte
	if n := testing.AllocsPerRun(100, func() { CallbackTraceParent(buf[:0], submitted, "order|42", 1, 2) }); n != 0 {
		t.Errorf("CallbackTraceParent: %v allocations", n)
	}
}

// A shard task's trace, when none was submitted, is its parent task's
// (ShardParent); ids that only look like shards keep their own.
func TestTraceOfShard(t *testing.T) {
	if p, run, ok := ShardParent(ShardID("a/b", 7, 3)); !ok || p != "a/b" || run != 7 {
		t.Fatalf("ShardParent = %q %d %v", p, run, ok)
	}
	for _, id := range []string{"plain", "shard/", "shard/x", "shard/x/1", "shard/x/0/1", "shard/x/y/1", "shard/x/1/z"} {
		if _, _, ok := ShardParent(id); ok {
			t.Errorf("ShardParent(%q) ok", id)
		}
	}
	got, flags := TraceOf("", ShardID("order|42", 2, 0))
	if got != TaskTraceID("order|42") || flags != TraceFlagsUntraced {
		t.Errorf("shard without a traceparent: %x %x, want its parent's %x", got, flags, TaskTraceID("order|42"))
	}
	submitted := "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
	if got, _ := TraceOf(submitted, ShardID("p", 1, 0)); hex.EncodeToString(got[:]) != "4bf92f3577b34da6a3ce929d0e0e4736" {
		t.Errorf("shard with a traceparent: %x", got)
	}
	if got, _ := TraceOf("", "shard/x"); got != TaskTraceID("shard/x") {
		t.Errorf("not a shard id: %x", got)
	}
}
