// Package metricstext reads the Prometheus text exposition format the way
// ax's tests need it: every sample line's value by its full name with
// labels, e.g. `ax_tasks{state="SUCCESS"}`. It is for tests only (the e2e
// harness and sidecartest); it imports only the standard library.
package metricstext

import (
	"bufio"
	"bytes"
	"fmt"
	"strconv"
	"strings"
)

// Parse returns each sample line of body (comment and blank lines
// skipped) by its name with labels; an error names the first line whose
// value is not a number.
func Parse(body []byte) (map[string]float64, error) {
	out := map[string]float64{}
	sc := bufio.NewScanner(bytes.NewReader(body))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if line == "" || line[0] == '#' {
			continue
		}
		i := strings.LastIndexByte(line, ' ')
		v, err := strconv.ParseFloat(line[i+1:], 64)
		if err != nil {
			return nil, fmt.Errorf("metric line %q: %v", line, err)
		}
		out[line[:i]] = v
	}
	return out, sc.Err()
}
