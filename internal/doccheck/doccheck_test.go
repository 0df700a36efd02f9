package doccheck

import (
	"bufio"
	"fmt"
	"go/scanner"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
)

// designPath is the design document, relative to the repository root.
const designPath = "docs/DESIGN.md"

var (
	// sectionHeading is a numbered section of docs/DESIGN.md: "## 4. Title".
	sectionHeading = regexp.MustCompile(`^## (\d+)\. \S`)
	// citation is a reference to a numbered section of a design document:
	// "docs/DESIGN.md section 4", "DESIGN.md sections 4 and 5",
	// "DESIGN §7". Group 1 is the path before DESIGN, group 2 the numbers.
	citation = regexp.MustCompile(`([\w./-]*?)DESIGN(?:\.md)?,?\s*(?:§\s*|sections?\s+)(\d+(?:\s*(?:,|and|&|or)\s*§?\s*\d+)*)`)
	number   = regexp.MustCompile(`\d+`)
	// outside are names of files that are not in the repository: the
	// design and style notes of a sibling "shared" folder and the
	// background articles (by number, by their folder, by file name).
	outside = []*regexp.Regexp{
		regexp.MustCompile(`\.\./shared\b`),
		regexp.MustCompile(`/work/`),
		regexp.MustCompile(`\bshared/(?:DESIGN|STYLE|README|seeds)`),
		regexp.MustCompile(`\bSTYLE\.md\b`),
		regexp.MustCompile(`(?i)\bseeds?/`),
		regexp.MustCompile(`(?i)\bseeds?[\s-]*#?\s*0\d\d\b`),
		regexp.MustCompile(`\b\d{3}_[0-9a-f]{16}\.txt\b`),
	}
)

// repoRoot is the root of the ax repository, two levels above this package.
func repoRoot(t *testing.T) string {
	t.Helper()
	root, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(filepath.Join(root, "go.mod"))
	if err != nil || !strings.HasPrefix(string(b), "module github.com/axsched/ax\n") {
		t.Fatalf("%s is not the ax repository root (go.mod: %v)", root, err)
	}
	return root
}

// designSections returns the numbers of the "## N." sections of the design
// document at path.
func designSections(path string) (map[int]bool, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	secs := map[int]bool{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if m := sectionHeading.FindStringSubmatch(sc.Text()); m != nil {
			n, _ := strconv.Atoi(m[1])
			secs[n] = true
		}
	}
	return secs, sc.Err()
}

// problems returns what is wrong with one piece of text (a comment, or a
// whole document): a citation of a section that docs/DESIGN.md does not
// have, a citation of another design file, a file outside the repository.
func problems(text string, secs map[int]bool) []string {
	var out []string
	for _, m := range citation.FindAllStringSubmatch(text, -1) {
		if prefix := m[1]; prefix != "" && prefix != "docs/" {
			out = append(out, fmt.Sprintf("%q cites %sDESIGN.md by section; the numbered design document is %s", m[0], prefix, designPath))
			continue
		}
		for _, s := range number.FindAllString(m[2], -1) {
			if n, _ := strconv.Atoi(s); !secs[n] {
				out = append(out, fmt.Sprintf("%q: %s has no section %d", m[0], designPath, n))
			}
		}
	}
	for _, re := range outside {
		if m := re.FindString(text); m != "" {
			out = append(out, fmt.Sprintf("%q names a file outside the repository", m))
		}
	}
	return out
}

// mdLink is a Markdown link or image target: "](path)" or "](path#anchor)".
var mdLink = regexp.MustCompile(`\]\(([^)\s#]+)(?:#[^)\s]*)?\)`)

// brokenLinks returns the relative link targets of a Markdown text, in
// folder dir, that name no file or folder.
func brokenLinks(dir, text string) []string {
	var out []string
	for _, m := range mdLink.FindAllStringSubmatch(text, -1) {
		target := m[1]
		if strings.Contains(target, "://") || strings.HasPrefix(target, "mailto:") {
			continue
		}
		if _, err := os.Stat(filepath.Join(dir, filepath.FromSlash(target))); err != nil {
			out = append(out, target)
		}
	}
	return out
}

// goComments returns the comments of a Go source file with the line each
// starts on. Consecutive line comments are joined into one text, without
// their markers, so that a citation wrapped over two lines
// ("docs/DESIGN.md" / "section 7") is seen whole.
func goComments(path string, src []byte) (lines []int, texts []string) {
	fset := token.NewFileSet()
	file := fset.AddFile(path, -1, len(src))
	var s scanner.Scanner
	s.Init(file, src, func(token.Position, string) {}, scanner.ScanComments)
	lastLine := -1 // the line of the previous line comment, when it is the last token
	for {
		pos, tok, lit := s.Scan()
		if tok == token.EOF {
			return lines, texts
		}
		if tok != token.COMMENT {
			lastLine = -1
			continue
		}
		line := fset.Position(pos).Line
		text := strings.TrimPrefix(lit, "//")
		if strings.HasPrefix(lit, "//") && line == lastLine+1 && len(texts) > 0 {
			texts[len(texts)-1] += " " + text
		} else {
			lines = append(lines, line)
			texts = append(texts, text)
		}
		lastLine = -1
		if strings.HasPrefix(lit, "//") {
			lastLine = line
		}
	}
}

// checkedDoc reports whether a non-Go file is documentation whose whole text
// is checked.
func checkedDoc(name string) bool {
	switch filepath.Ext(name) {
	case ".md", ".yaml", ".yml", ".py", ".sh", ".toml", ".txt":
		return true
	}
	return name == "Dockerfile" || name == "run"
}

// TestReferences walks the repository: every Go comment, and every document
// (Markdown, YAML, Python, shell), cites only sections docs/DESIGN.md has and
// names no file outside the repository; every relative link of a Markdown
// file names a file or folder that exists.
func TestReferences(t *testing.T) {
	root := repoRoot(t)
	secs, err := designSections(filepath.Join(root, designPath))
	if err != nil {
		t.Fatalf("read the design document: %v", err)
	}
	if len(secs) < 10 {
		t.Fatalf("%s has %d numbered sections (\"## N. Title\"), want at least 10", designPath, len(secs))
	}
	var files int
	err = filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, path)
		if d.IsDir() {
			if name := d.Name(); rel != "." && (strings.HasPrefix(name, ".") && name != ".ci" || name == "node_modules" || name == "__pycache__" || name == "bin") {
				return filepath.SkipDir
			}
			return nil
		}
		isGo := strings.HasSuffix(path, ".go")
		if !isGo && !checkedDoc(d.Name()) {
			return nil
		}
		src, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		files++
		if !isGo {
			for _, p := range problems(string(src), secs) {
				t.Errorf("%s: %s", rel, p)
			}
			if strings.HasSuffix(path, ".md") {
				for _, target := range brokenLinks(filepath.Dir(path), string(src)) {
					t.Errorf("%s: link to %s: no such file in the repository", rel, target)
				}
			}
			return nil
		}
		lines, texts := goComments(path, src)
		for i, c := range texts {
			for _, p := range problems(c, secs) {
				t.Errorf("%s:%d: %s", rel, lines[i], p)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if files < 100 {
		t.Fatalf("checked %d files under %s, want the whole repository", files, root)
	}
}

// TestBrokenLinks checks the link check on a folder it makes.
func TestBrokenLinks(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "there.md"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	text := "[a](there.md) [b](there.md#x) [c](https://example.com/x) [d](missing.md) [e](#top) ![f](gone.png)"
	got := brokenLinks(dir, text)
	if strings.Join(got, " ") != "missing.md gone.png" {
		t.Fatalf("brokenLinks = %q, want [missing.md gone.png]", got)
	}
}

// TestGoComments checks that a citation wrapped over two comment lines is
// seen whole.
func TestGoComments(t *testing.T) {
	src := []byte("package p\n\n// see docs/DESIGN.md\n// section 42.\nvar x = \"DESIGN.md section 43\"\n")
	_, texts := goComments("p.go", src)
	got := problems(strings.Join(texts, "\n"), map[int]bool{1: true})
	if len(got) != 1 || !strings.Contains(got[0], "no section 42") {
		t.Fatalf("problems = %q, want one: no section 42 (the string is not a comment)", got)
	}
}

// TestProblems checks the detector on comments it must refuse and accept.
func TestProblems(t *testing.T) {
	secs := map[int]bool{2: true, 4: true, 5: true}
	cases := []struct {
		text string
		bad  bool
	}{
		{"// Task states (docs/DESIGN.md section 2).", false},
		{"// does next (docs/DESIGN.md sections 4 and 5).", false},
		{"// as DESIGN §4 says", false},
		{"// See DESIGN.md in this folder for the key layout.", false},
		{"// bounds a payload (DESIGN.md section 9)", true},
		{"// (docs/DESIGN.md sections 4 and 7)", true},
		{"// the group commit of DESIGN §6.", true},
		{"// see raftfsm/DESIGN.md section 2", true},
		{"// see ../shared/DESIGN.md", true},
		{"// per " + "seed" + " 004's burst", true},
		{"// simulates the " + "seed" + "-004 workload", true},
		{"// from the " + "seeds" + "/ folder", true},
		{"// read 003_c3750b6d8b0e6770" + ".txt", true},
		{"// the seeding of the random source", false},
		{"// seed the generator with 42", false},
	}
	for _, tc := range cases {
		if got := problems(tc.text, secs); (len(got) > 0) != tc.bad {
			t.Errorf("problems(%q) = %q, want bad=%v", tc.text, got, tc.bad)
		}
	}
}
