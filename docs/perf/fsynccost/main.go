// Command fsynccost measures what one fsync costs a Go process beyond
// the disk: the wall time, the process's CPU time and its context
// switches per 128-byte write + fsync, done through os.File.Sync (the
// runtime's syscall path: the P may be retaken by sysmon and handed to
// another thread while the fsync blocks) or through syscall.RawSyscall
// (the P stays with the blocked thread: nothing else in the process runs
// meanwhile, so this is a measurement, not something to ship). A second
// goroutine wakes every millisecond, like a node's other work.
//
//	cd docs/perf/fsynccost   # its own module
//	GOMAXPROCS=1 GOWORK=off go run . -n 3000 sync
//	GOMAXPROCS=2 GOWORK=off go run . -n 3000 sync
//	GOMAXPROCS=1 GOWORK=off go run . -n 3000 raw
//
// Used in docs/perf/README.md ("What a context switch costs on a
// Firecracker guest").
package main

import (
	"flag"
	"fmt"
	"log"
	"os"
	"runtime"
	"syscall"
	"time"
)

func usage() (cpu time.Duration, switches int64) {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		log.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano()), ru.Nvcsw + ru.Nivcsw
}

func main() {
	n := flag.Int("n", 3000, "writes + fsyncs")
	dir := flag.String("dir", os.TempDir(), "directory of the probe file")
	prealloc := flag.Bool("prealloc", false, "allocate the file's 64 MiB first (fallocate, as raft-wal does a segment) and write into it, instead of appending")
	flag.Parse()
	mode := flag.Arg(0)
	if mode != "sync" && mode != "raw" && mode != "datasync" {
		log.Fatal("usage: fsynccost [-n N] [-dir D] [-prealloc] sync|datasync|raw")
	}
	f, err := os.CreateTemp(*dir, "fsynccost-*")
	if err != nil {
		log.Fatal(err)
	}
	defer os.Remove(f.Name())
	go func() {
		for {
			time.Sleep(time.Millisecond)
		}
	}()
	if *prealloc {
		if err := syscall.Fallocate(int(f.Fd()), 0, 0, 64<<20); err != nil {
			log.Fatal(err)
		}
		if err := f.Sync(); err != nil {
			log.Fatal(err)
		}
	}
	b := make([]byte, 128)
	c0, s0 := usage()
	t0 := time.Now()
	for i := range *n {
		if _, err := f.WriteAt(b, int64(i*len(b))); err != nil {
			log.Fatal(err)
		}
		if mode == "datasync" {
			if err := syscall.Fdatasync(int(f.Fd())); err != nil {
				log.Fatal(err)
			}
		} else if mode == "raw" {
			if _, _, e := syscall.RawSyscall(syscall.SYS_FSYNC, f.Fd(), 0, 0); e != 0 {
				log.Fatal(e)
			}
		} else if err := f.Sync(); err != nil {
			log.Fatal(err)
		}
	}
	el := time.Since(t0)
	c1, s1 := usage()
	per := time.Duration(*n)
	fmt.Printf("%s prealloc=%v GOMAXPROCS=%d: %v per fsync, CPU %v per fsync, %.1f context switches per fsync\n",
		mode, *prealloc, runtime.GOMAXPROCS(0), el/per, (c1-c0)/per, float64(s1-s0)/float64(*n))
}
