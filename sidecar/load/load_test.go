package load

import "testing"

func TestRuns(t *testing.T) {
	e := ExecutorLoad{Name: "x", Handlers: []string{"email.*", "sms"}}
	for h, want := range map[string]bool{"email.send": true, "sms": true, "smsx": false, "push": false} {
		if got := e.Runs(h); got != want {
			t.Errorf("Runs(%q) = %v, want %v", h, got, want)
		}
	}
	if (&ExecutorLoad{}).Runs("sms") {
		t.Error("an executor without handlers runs sms")
	}
}
