package harness

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"time"
)

// Process is one ax process. Its stdout and stderr go to one log file (kept
// across restarts) in the test's temporary directory. Methods are safe for
// concurrent use.
type Process struct {
	Name    string
	bin     string
	args    []string
	logPath string

	mu      sync.Mutex
	cmd     *exec.Cmd
	done    chan struct{} // closed when the current run has exited
	exitErr error
}

// NewProcess returns a Process that runs bin with args, logging to logPath.
// It is not started.
func NewProcess(name, bin, logPath string, args ...string) *Process {
	return &Process{Name: name, bin: bin, args: args, logPath: logPath}
}

// Start starts the process. Starting a running process is an error.
func (p *Process) Start() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cmd != nil && !IsClosed(p.done) {
		return fmt.Errorf("%s: already running (pid %d)", p.Name, p.cmd.Process.Pid)
	}
	f, err := os.OpenFile(p.logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	fmt.Fprintf(f, "=== e2e %s: start %s %s\n", time.Now().Format(time.RFC3339Nano), p.bin, strings.Join(p.args, " "))
	cmd := exec.Command(p.bin, p.args...)
	cmd.Stdout, cmd.Stderr = f, f
	cmd.SysProcAttr = ProcAttr()
	if err := cmd.Start(); err != nil {
		f.Close()
		return fmt.Errorf("%s: start: %w", p.Name, err)
	}
	done := make(chan struct{})
	p.cmd, p.done, p.exitErr = cmd, done, nil
	go func() {
		err := cmd.Wait()
		fmt.Fprintf(f, "=== e2e %s: exited: %v\n", time.Now().Format(time.RFC3339Nano), err)
		f.Close()
		p.mu.Lock()
		if p.cmd == cmd {
			p.exitErr = err
		}
		p.mu.Unlock()
		close(done)
	}()
	return nil
}

// IsClosed reports whether ch is closed, without blocking.
func IsClosed(ch chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}

// Running reports whether the process is running.
func (p *Process) Running() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.cmd != nil && !IsClosed(p.done)
}

// Exited returns a channel closed when the current run exits (nil if never
// started).
func (p *Process) Exited() <-chan struct{} {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.done
}

// ExitErr returns how the last run ended (nil for exit status 0).
func (p *Process) ExitErr() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.exitErr
}

func (p *Process) signal(sig os.Signal) (chan struct{}, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cmd == nil || IsClosed(p.done) {
		return nil, nil
	}
	if err := p.cmd.Process.Signal(sig); err != nil && !errors.Is(err, os.ErrProcessDone) {
		return p.done, err
	}
	return p.done, nil
}

// Stop sends SIGTERM and waits for the process to exit; after stopTimeout
// it kills it and reports an error. It returns the process's exit error
// (nil for a clean exit). Stopping a stopped process does nothing.
func (p *Process) Stop() error {
	done, err := p.signal(syscall.SIGTERM)
	if done == nil {
		return err
	}
	select {
	case <-done:
		return p.ExitErr()
	case <-time.After(stopTimeout):
		_ = p.Kill()
		return fmt.Errorf("%s: did not exit within %s of SIGTERM; killed", p.Name, stopTimeout)
	}
}

// Kill sends SIGKILL and waits for the process to exit.
func (p *Process) Kill() error {
	done, err := p.signal(syscall.SIGKILL)
	if done != nil {
		<-done
	}
	return err
}

// Pause stops the process with SIGSTOP (it keeps its sockets but answers
// nothing) until Resume.
func (p *Process) Pause() error {
	_, err := p.signal(syscall.SIGSTOP)
	return err
}

// Resume continues a paused process (SIGCONT).
func (p *Process) Resume() error {
	_, err := p.signal(syscall.SIGCONT)
	return err
}

// Restart stops the process (SIGTERM) and starts it again with the same
// arguments.
func (p *Process) Restart() error {
	if err := p.Stop(); err != nil {
		var ee *exec.ExitError
		if !errors.As(err, &ee) {
			return err
		}
	}
	return p.Start()
}

// Logs returns everything the process wrote so far, across restarts.
func (p *Process) Logs() string {
	b, err := os.ReadFile(p.logPath)
	if err != nil {
		return fmt.Sprintf("(reading %s: %v)", p.logPath, err)
	}
	return string(b)
}
