// Package doccheck holds a test, and nothing else, that keeps the repository's
// references honest: every code comment that cites "docs/DESIGN.md section
// N" (or "DESIGN.md section N", "DESIGN §N") names a section that exists in
// docs/DESIGN.md, and no comment or document names a file outside the
// repository (a design file in a sibling folder, the background articles the
// project started from). Run it with go test ./internal/doccheck.
package doccheck
