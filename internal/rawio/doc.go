// Package rawio owns the raw reads and writes of ax's stream
// connections: Conn, a net.Conn whose Read and Write are raw system calls
// (unix.RawSyscall: the Go runtime is not told) while its hold function
// reports true — in ax, while the adaptive GOMAXPROCS controller has the
// process on one P (procs.OnOneP, --socket-io auto) — and the wrapped
// connection's own otherwise.
//
// Why: a system call through the runtime (entersyscall) on a process
// whose Ps were all idle wakes the runtime's sysmon thread from its sleep
// and resets its poll to every 20 µs for the next millisecond
// (runtime/proc.go: entersyscallWakeSysmon, sysmon), and a call that
// runs 20 µs or more may see sysmon hand the P to another thread. A node
// that goes idle between requests (each of three nodes under load does,
// hundreds of times a second) paid both at nearly every request; with its
// reads and writes raw, three nodes' 16 callers made 4.4–4.8 thread
// switches a submit against 7.7–8.5, at 22–28 % less CPU
// (docs/perf/README.md, "Twenty-first session").
//
// Safety: the sockets are non-blocking, so a raw read or write never
// waits: on EAGAIN it returns, and the goroutine waits in the poller as
// before (syscall.RawConn's Read and Write, which also keep the
// connection's deadlines and its Close). A raw call keeps the P for as
// long as the kernel copies, so a read asks for MaxRaw bytes at most and
// a longer write goes through the runtime. Errors are the net package's
// shapes: *net.OpError around the errno, net.ErrClosed or
// os.ErrDeadlineExceeded; io.EOF at the end of the stream. A raw Read or
// Write allocates nothing: the function syscall.RawConn runs is made
// once per connection and direction, and the calls of a direction take
// turns on a mutex, as they would on the connection's own read or write
// lock.
//
// What a wrapped connection loses: its concrete type. fasthttp writes a
// response's header and a long body with one writev only to a
// *net.TCPConn or *net.UnixConn, so through a Conn, on any number of Ps,
// an answer longer than its write buffer (4 KiB) takes two writes; and
// CloseWrite, SetNoDelay and ReadFrom are hidden (ax uses none of them on
// these connections). The race detector does not see the bytes a raw
// read puts in its buffer (a raw system call is not instrumented); the
// tests run both paths.
//
// It may import only the standard library and golang.org/x/sys.
package rawio
