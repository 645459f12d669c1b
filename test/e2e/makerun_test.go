//go:build e2e && linux

package e2e

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
	"unsafe"
)

// openPTY opens a pseudo-terminal pair: the controller, and the terminal a child gets as its
// controlling terminal.
func openPTY() (controller, terminal *os.File, err error) {
	controller, err = os.OpenFile("/dev/ptmx", os.O_RDWR|syscall.O_NOCTTY, 0)
	if err != nil {
		return nil, nil, err
	}
	var unlock int32
	if _, _, e := syscall.Syscall(syscall.SYS_IOCTL, controller.Fd(), syscall.TIOCSPTLCK, uintptr(unsafe.Pointer(&unlock))); e != 0 {
		controller.Close()
		return nil, nil, e
	}
	var n uint32
	if _, _, e := syscall.Syscall(syscall.SYS_IOCTL, controller.Fd(), syscall.TIOCGPTN, uintptr(unsafe.Pointer(&n))); e != 0 {
		controller.Close()
		return nil, nil, e
	}
	terminal, err = os.OpenFile(fmt.Sprintf("/dev/pts/%d", n), os.O_RDWR|syscall.O_NOCTTY, 0)
	if err != nil {
		controller.Close()
		return nil, nil, err
	}
	return controller, terminal, nil
}

// syncBuffer is a bytes.Buffer safe for one writer and concurrent readers.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// TestMakeRunCtrlC: `make run` at a terminal, then Ctrl-C: historyd shuts down and make exits 0,
// with no "make: *** ... Error" line (issue 19: "make run exits 0 on Ctrl-C"). The Ctrl-C is the
// terminal's: the test types ^C into a pseudo-terminal, so the kernel sends SIGINT to the
// terminal's foreground process group, as it does for a person.
func TestMakeRunCtrlC(t *testing.T) {
	root, err := repoRoot()
	if err != nil {
		t.Fatal(err)
	}
	controller, terminal, err := openPTY()
	if err != nil {
		t.Skipf("no pseudo-terminal: %v", err)
	}
	defer controller.Close()
	bin := filepath.Join(t.TempDir(), "historyd")
	// --store memory: the test must not share the clone's ./data (make run's default) with a
	// developer's make run or another test (issue 14).
	cmd := exec.Command("make", "run", "BIN="+bin, "ARGS=--listen 127.0.0.1:0 --store memory", "GO="+goCmd())
	cmd.Dir = root
	cmd.Stdin, cmd.Stdout, cmd.Stderr = terminal, terminal, terminal
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true, Setctty: true, Ctty: 0}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	terminal.Close() // the child has it
	var out syncBuffer
	copied := make(chan struct{})
	go func() { // owned here: ends when the terminal closes (the read fails with EIO)
		defer close(copied)
		buf := make([]byte, 4096)
		for {
			n, err := controller.Read(buf)
			out.Write(buf[:n])
			if err != nil {
				return
			}
		}
	}()
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }() // owned here: ends when make exits, which the deadline forces

	deadline := time.NewTimer(5 * startTimeout) // make run builds first
	defer deadline.Stop()
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	sent := false
	for {
		select {
		case err := <-exited:
			<-copied
			if !sent {
				t.Fatalf("make run exited before serving (%v):\n%s", err, out.String())
			}
			if err != nil || cmd.ProcessState.ExitCode() != 0 {
				t.Errorf("make run after Ctrl-C: %v (exit %d), want exit 0; output:\n%s", err, cmd.ProcessState.ExitCode(), out.String())
			}
			if s := out.String(); strings.Contains(s, "Error") || !strings.Contains(s, `"msg":"stopped"`) {
				t.Errorf("make run output:\n%s\nwant historyd's stopped line and no make error", s)
			}
			return
		case <-tick.C:
			if !sent && strings.Contains(out.String(), `"msg":"serving"`) {
				if _, err := controller.Write([]byte{3}); err != nil { // ^C
					t.Fatal(err)
				}
				sent = true
			}
		case <-deadline.C:
			_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
			<-exited
			controller.Close()
			<-copied
			t.Fatalf("make run did not end:\n%s", out.String())
		}
	}
}
