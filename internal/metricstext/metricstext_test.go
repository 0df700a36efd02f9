package metricstext

import "testing"

func TestParse(t *testing.T) {
	got, err := Parse([]byte("# HELP x y\n# TYPE x counter\nx 3\nax_tasks{state=\"SUCCESS\"} 2.5\n\n"))
	if err != nil || len(got) != 2 || got["x"] != 3 || got[`ax_tasks{state="SUCCESS"}`] != 2.5 {
		t.Fatalf("%v %v", got, err)
	}
	if _, err := Parse([]byte("x y\n")); err == nil {
		t.Fatal("a value that is not a number parsed")
	}
}
