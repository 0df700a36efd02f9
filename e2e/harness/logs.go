package harness

import (
	"encoding/json"
	"fmt"
	"sort"
	"strings"
	"testing"
	"time"
)

// LogNodeProblems logs, per node, its warnings and errors grouped by
// message (raft's own by message only: their errors name changing
// addresses), and every circuit breaker change with its time since the
// load started: an open breaker holds every run of its handler back.
func LogNodeProblems(t testing.TB, c *Cluster, loadStart time.Time) {
	t.Helper()
	for _, n := range c.Nodes {
		counts := map[string]int{}
		total := 0
		for _, line := range strings.Split(n.Logs(), "\n") {
			var m map[string]any
			if strings.HasPrefix(line, "panic:") || strings.HasPrefix(line, "fatal error:") {
				counts[line]++
				total++
				continue
			}
			if !strings.HasPrefix(line, "{") || json.Unmarshal([]byte(line), &m) != nil {
				continue
			}
			var msg string
			switch {
			case m["level"] == "warn" || m["level"] == "error" || m["level"] == "fatal" || m["level"] == "panic":
				msg = fmt.Sprintf("%v %v", m["level"], m["message"])
				if e, ok := m["error"]; ok {
					msg += fmt.Sprintf(": %v", e)
				}
			case m["@level"] == "error":
				msg = fmt.Sprintf("raft error %v", m["@message"])
			default:
				continue
			}
			total++
			counts[msg]++
			if m["message"] == "circuit breaker state changed" {
				at, _ := time.Parse(time.RFC3339Nano, fmt.Sprint(m["time"]))
				t.Logf("%s: circuit breaker of %v: %v -> %v at +%s", n.ID, m["handler"], m["from"], m["to"], at.Sub(loadStart).Round(time.Millisecond))
			}
		}
		if total == 0 {
			continue
		}
		var msgs []string
		for m, k := range counts {
			msgs = append(msgs, fmt.Sprintf("%dx %s", k, m))
		}
		sort.Strings(msgs)
		t.Logf("%s: %d warning/error lines: %s", n.ID, total, strings.Join(msgs[:min(len(msgs), 10)], " | "))
	}
}
