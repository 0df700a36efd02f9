// Command load is the etcd side of the comparison in the parent
// directory: n callers, each with its own client (one gRPC connection to
// one endpoint, caller c on endpoint c mod the endpoints, as ax bench
// throughput's callers go round robin over the nodes' sockets), each
// putting one new key (about 10 bytes) at a time for the duration, each
// put bounded by --timeout. It prints one line of JSON: puts a second,
// the p50 and p99 latency, errors, this process's CPU per put (the
// client's cost, which shares the machine with the servers) and, given
// the servers' process ids (--pids), their CPU per put over the same
// window (utime+stime from /proc; the connections and a first put per
// caller come before it).
package main

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"log"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
)

type result struct {
	Callers       int     `json:"callers"`
	Endpoints     int     `json:"endpoints"`
	Puts          int     `json:"puts"`
	PerSecond     float64 `json:"puts_per_s"`
	P50Ms         float64 `json:"p50_ms"`
	P99Ms         float64 `json:"p99_ms"`
	Errors        int     `json:"errors"`
	ClientCPUPerP float64 `json:"client_cpu_us_per_put"`
	ServerCPUPerP float64 `json:"servers_cpu_us_per_put,omitempty"`
}

// procTicks returns the user+system clock ticks of the processes pids
// (fields 14 and 15 of /proc/PID/stat).
func procTicks(pids []string) int64 {
	var t int64
	for _, p := range pids {
		b, err := os.ReadFile("/proc/" + p + "/stat")
		if err != nil {
			log.Fatalf("server %s: %v", p, err)
		}
		// The command name (field 2) is in parentheses and may hold spaces.
		f := strings.Fields(string(b[bytes.LastIndexByte(b, ')')+1:]))
		for _, i := range []int{11, 12} { // utime, stime: fields 14, 15
			v, err := strconv.ParseInt(f[i], 10, 64)
			if err != nil {
				log.Fatalf("server %s: stat: %v", p, err)
			}
			t += v
		}
	}
	return t
}

func cpu() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		log.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

func main() {
	eps := flag.String("endpoints", "127.0.0.1:2379", "the servers' client addresses, comma-separated")
	callers := flag.Int("callers", 16, "callers, each with its own client, one put at a time")
	dur := flag.Duration("duration", 5*time.Second, "how long the callers put")
	size := flag.Int("size", 100, "bytes of each value (keys are about 10)")
	timeout := flag.Duration("timeout", 10*time.Second, "bound of each put")
	pids := flag.String("pids", "", "the servers' process ids, comma-separated, for their CPU per put")
	clkTck := flag.Int("clk-tck", 100, "clock ticks a second of /proc's times (getconf CLK_TCK)")
	flag.Parse()
	var servers []string
	if *pids != "" {
		servers = strings.Split(*pids, ",")
	}
	list := strings.Split(*eps, ",")
	val := strings.Repeat("x", *size)
	clients := make([]*clientv3.Client, *callers)
	for c := range clients {
		cli, err := clientv3.New(clientv3.Config{Endpoints: []string{list[c%len(list)]}, DialTimeout: 5 * time.Second})
		if err != nil {
			log.Fatal(err)
		}
		defer cli.Close()
		// One put first, so that the connection is up before the clock starts.
		ctx, cancel := context.WithTimeout(context.Background(), *timeout)
		_, err = cli.Put(ctx, fmt.Sprintf("warm-%d", c), val)
		cancel()
		if err != nil {
			log.Fatal(err)
		}
		clients[c] = cli
	}
	var wg sync.WaitGroup
	lats := make([][]time.Duration, *callers)
	errs := make([]int, *callers)
	var ticks0 int64
	if servers != nil {
		ticks0 = procTicks(servers)
	}
	cpu0 := cpu()
	start := time.Now()
	end := start.Add(*dur)
	for c, cli := range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for seq := 0; time.Now().Before(end); seq++ {
				t := time.Now()
				ctx, cancel := context.WithTimeout(context.Background(), *timeout)
				_, err := cli.Put(ctx, fmt.Sprintf("k-%d-%d", c, seq), val)
				cancel()
				if err != nil {
					errs[c]++
					continue
				}
				lats[c] = append(lats[c], time.Since(t))
			}
		}()
	}
	wg.Wait()
	el := time.Since(start)
	used := cpu() - cpu0
	var ticks int64
	if servers != nil {
		ticks = procTicks(servers) - ticks0
	}
	r := result{Callers: *callers, Endpoints: len(list)}
	var all []time.Duration
	for c := range lats {
		all = append(all, lats[c]...)
		r.Errors += errs[c]
	}
	if len(all) == 0 {
		log.Fatalf("no put succeeded (%d errors)", r.Errors)
	}
	slices.Sort(all)
	at := func(q float64) float64 { return float64(all[int(q*float64(len(all)-1))]) / 1e6 }
	r.Puts, r.PerSecond, r.P50Ms, r.P99Ms = len(all), float64(len(all))/el.Seconds(), at(0.5), at(0.99)
	r.ClientCPUPerP = float64(used.Microseconds()) / float64(len(all))
	if servers != nil {
		r.ServerCPUPerP = float64(ticks) * 1e6 / float64(*clkTck) / float64(len(all))
	}
	json.NewEncoder(os.Stdout).Encode(r)
}
