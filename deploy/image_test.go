package deploy

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strings"
	"syscall"
	"testing"
	"time"
)

// imageMaxBytes bounds the image: its layers, uncompressed. It was 25 MB
// until compressed snapshots (S2's encoder, already linked by badger for
// its reader, added 0.2 MB of encoder code: 24.95 → 25.15 MB stripped);
// the bound is there to catch a dependency that drags in megabytes (gRPC
// would add 3.7 MB), not to forbid code ax uses.
const imageMaxBytes = 26_000_000

// buildah runs buildah and returns its trimmed stdout.
func buildah(t *testing.T, args ...string) string {
	t.Helper()
	var stderr strings.Builder
	cmd := exec.Command("buildah", args...)
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("buildah %s: %v\n%s", strings.Join(args, " "), err, stderr.String())
	}
	return strings.TrimSpace(string(out))
}

// image/build.sh builds the image offline; its root file system holds
// only /ax and /var/lib/ax, the entrypoint runs (in a chroot of the
// image's root file system, as the image's user: containers cannot run
// here) and the image is at most 26 MB.
func TestImageBuildsOfflineAndRuns(t *testing.T) {
	skip := t.Skip
	if os.Getenv("AX_DEPLOY_REQUIRE_BUILDAH") == "1" {
		skip = t.Fatal // CI (.ci/run) installs buildah and runs as root
	}
	if _, err := exec.LookPath("buildah"); err != nil {
		skip("buildah is not installed (Debian: apt-get install buildah): skipping the image test")
	}
	if os.Geteuid() != 0 {
		skip("the image test needs root (buildah storage, chroot): skipping it")
	}
	name := fmt.Sprintf("localhost/ax-imagetest:%d", time.Now().UnixNano())
	build := exec.Command("./image/build.sh", name)
	build.Env = append(withoutEnv(os.Environ(), "GOWORK"), "AX_VERSION=v0.0.0-imagetest", "AX_COMMIT=0123456789abcdef0123")
	var stderr strings.Builder
	build.Stderr = &stderr
	out, err := build.Output()
	if err != nil {
		t.Fatalf("image/build.sh: %v\n%s", err, stderr.String())
	}
	t.Cleanup(func() { exec.Command("buildah", "rmi", "-f", name).Run() })
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	id := lines[len(lines)-1]

	var info struct {
		OCIv1 struct {
			Config struct {
				User       string   `json:"User"`
				Entrypoint []string `json:"Entrypoint"`
				Cmd        []string `json:"Cmd"`
				WorkingDir string   `json:"WorkingDir"`
			} `json:"config"`
		} `json:"OCIv1"`
		Manifest string `json:"Manifest"`
	}
	if err := json.Unmarshal([]byte(buildah(t, "inspect", "--type", "image", id)), &info); err != nil {
		t.Fatal(err)
	}
	cfg := info.OCIv1.Config
	if cfg.User != "65532:65532" || !reflect.DeepEqual(cfg.Entrypoint, []string{"/ax"}) || !reflect.DeepEqual(cfg.Cmd, []string{"sidecar"}) || cfg.WorkingDir != "/var/lib/ax" {
		t.Errorf("image config %+v: want user 65532:65532, entrypoint /ax, cmd sidecar, workdir /var/lib/ax", cfg)
	}
	var manifest struct {
		Layers []struct {
			Size int64 `json:"size"`
		} `json:"layers"`
	}
	if err := json.Unmarshal([]byte(info.Manifest), &manifest); err != nil {
		t.Fatal(err)
	}
	var size int64
	for _, l := range manifest.Layers {
		size += l.Size
	}
	t.Logf("image %s: %d layer(s), %d bytes (%.1f MB)", name, len(manifest.Layers), size, float64(size)/1e6)
	if size == 0 || size > imageMaxBytes {
		t.Errorf("image size %d bytes, want at most %d", size, imageMaxBytes)
	}

	ctr := buildah(t, "from", "--pull-never", id)
	t.Cleanup(func() { exec.Command("buildah", "rm", ctr).Run() })
	root := buildah(t, "mount", ctr)
	t.Cleanup(func() { exec.Command("buildah", "umount", ctr).Run() })
	var files []string
	filepath.Walk(root, func(p string, fi os.FileInfo, err error) error {
		if err == nil && p != root {
			rel, _ := filepath.Rel(root, p)
			st := fi.Sys().(*syscall.Stat_t)
			files = append(files, fmt.Sprintf("%s %v %d:%d", rel, fi.Mode(), st.Uid, st.Gid))
		}
		return nil
	})
	want := []string{"ax -rwxr-xr-x 0:0", "var drwxr-xr-x 0:0", "var/lib drwxr-xr-x 0:0", "var/lib/ax drwxr-xr-x 65532:65532"}
	if !reflect.DeepEqual(files, want) {
		t.Errorf("image files:\n %q\nwant\n %q", files, want)
	}

	// The entrypoint, as the image's user, in a chroot of its root file
	// system: a static binary that needs nothing else.
	run := exec.Command(cfg.Entrypoint[0], "version")
	run.Dir = "/"
	run.Env = []string{}
	run.SysProcAttr = &syscall.SysProcAttr{Chroot: root, Credential: &syscall.Credential{Uid: 65532, Gid: 65532}}
	got, err := run.CombinedOutput()
	if want := "ax v0.0.0-imagetest (commit 0123456789ab)\n"; err != nil || string(got) != want {
		t.Errorf("chroot %s /ax version: %v, output %q, want %q", root, err, got, want)
	}
}

// The Dockerfile builds what image/build.sh builds: a static binary on
// an empty base, the same user, entrypoint, command and working dir.
func TestDockerfileMatchesBuildScript(t *testing.T) {
	b, err := os.ReadFile("../Dockerfile")
	if err != nil {
		t.Fatal(err)
	}
	df := string(b)
	stages := strings.Split(df, "\nFROM ")
	final := stages[len(stages)-1]
	if len(stages) < 3 || !strings.HasPrefix(final, "scratch") {
		t.Errorf("Dockerfile: want a multi-stage build whose last stage is FROM scratch")
	}
	for _, want := range []string{"USER 65532:65532\n", `ENTRYPOINT ["/ax"]` + "\n", `CMD ["sidecar"]` + "\n", "WORKDIR /var/lib/ax\n", "COPY --from=build /out/ax /ax\n"} {
		if !strings.Contains(final, want) {
			t.Errorf("Dockerfile's last stage lacks %q", strings.TrimSpace(want))
		}
	}
	for _, want := range []string{"CGO_ENABLED=0", "-X main.buildVersion=", "-X main.buildCommit=", "./cmd/ax"} {
		if !strings.Contains(df, want) {
			t.Errorf("Dockerfile's build lacks %s", want)
		}
	}
	sh, err := os.ReadFile("image/build.sh")
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"buildah from scratch", "CGO_ENABLED=0", `--entrypoint '["/ax"]' --cmd sidecar`, "--user 65532:65532 --workingdir /var/lib/ax", "-X main.buildVersion=", "-X main.buildCommit="} {
		if !strings.Contains(string(sh), want) {
			t.Errorf("image/build.sh lacks %s", want)
		}
	}
}
