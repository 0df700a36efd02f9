package e2e

import (
	"os"
	"testing"

	"github.com/axsched/ax/e2e/harness"
)

// TestMain builds the ax binary once (or takes -ax-bin) for every test.
func TestMain(m *testing.M) { os.Exit(harness.Main(m)) }
