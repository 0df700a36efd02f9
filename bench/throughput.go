package bench

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"sync"
	"sync/atomic"
	"text/tabwriter"
	"time"

	ax "github.com/axsched/ax/clients/go"
)

// throughputDelay is the delay of the tasks the throughput workload
// submits: far enough that none fires while the bench runs.
const throughputDelay = 24 * time.Hour

// ThroughputConfig configures the throughput workload.
type ThroughputConfig struct {
	// Clients is the number of concurrent clients.
	Clients int
	// Duration is how long each phase submits.
	Duration time.Duration
	// Batch is the number of tasks per request in the batched phase.
	Batch int
}

// ThroughputPhase is one row of the throughput report.
type ThroughputPhase struct {
	Mode     string  `json:"mode"` // "single" or "batch N"
	Clients  int     `json:"clients"`
	Requests int     `json:"requests"`
	Tasks    int     `json:"tasks"`
	Elapsed  Millis  `json:"elapsed_ms"`
	TaskRate float64 `json:"tasks_per_s"`
	ReqRate  float64 `json:"requests_per_s"`
	// Latency is per request (one submit, or one batch).
	Latency Dist     `json:"request_latency"`
	Errors  int      `json:"errors"`
	Samples []string `json:"error_samples,omitempty"`
}

// ThroughputReport is the result of the throughput workload.
type ThroughputReport struct {
	Workload string            `json:"workload"`
	Target   string            `json:"target"`
	Phases   []ThroughputPhase `json:"phases"`
	Notes    []string          `json:"notes,omitempty"`
}

// RunThroughput measures the submit rate of Clients concurrent clients for
// Duration, first one task per request (POST /v1/tasks through the Go
// client), then Batch tasks per request (POST /v1/tasks/batch). Each task is
// due in 24 hours, so nothing fires meanwhile.
func RunThroughput(ctx context.Context, opts Options, cfg ThroughputConfig) (*ThroughputReport, error) {
	if err := opts.validate(); err != nil {
		return nil, err
	}
	if cfg.Clients < 1 || cfg.Duration <= 0 || cfg.Batch < 1 || cfg.Batch > 1000 {
		return nil, fmt.Errorf("throughput: want --clients >= 1, --duration > 0 and --batch 1..1000")
	}
	e, err := newEnv(ctx, &opts, envConfig{})
	if err != nil {
		return nil, err
	}
	defer e.close()
	rep := &ThroughputReport{Workload: "throughput", Target: opts.target()}
	if len(opts.Sockets) > 0 {
		rep.Notes = append(rep.Notes, fmt.Sprintf("the submitted tasks (handler %sthroughput) stay on the cluster, due in %s", HandlerPrefix, throughputDelay))
	}
	prefix := runID()
	for _, batch := range []int{1, cfg.Batch} {
		ph, err := runThroughputPhase(ctx, e, cfg, batch, prefix)
		if err != nil {
			return nil, err
		}
		rep.Phases = append(rep.Phases, *ph)
		if err := e.alive(); err != nil {
			return nil, err
		}
	}
	return rep, nil
}

func runThroughputPhase(ctx context.Context, e *env, cfg ThroughputConfig, batch int, prefix string) (*ThroughputPhase, error) {
	mode := "single"
	if batch > 1 {
		mode = fmt.Sprintf("batch %d", batch)
	}
	handler := HandlerPrefix + "throughput"
	var (
		tasks, reqs atomic.Int64
		errs        errorSamples
		lats        = make([][]time.Duration, cfg.Clients)
		wg          sync.WaitGroup
	)
	start := time.Now()
	end := start.Add(cfg.Duration)
	bar := startProgress(e.opts.Progress, "throughput "+mode, func() (float64, string) {
		el := time.Since(start)
		return float64(el) / float64(cfg.Duration), fmt.Sprintf("%d clients · %d tasks · %s · %s",
			cfg.Clients, tasks.Load(), fmtRate(rate(int(tasks.Load()), el)), el.Round(time.Second))
	})
	defer bar.Stop()
	pctx, cancel := context.WithDeadline(ctx, end.Add(submitTimeout))
	defer cancel()
	for c := 0; c < cfg.Clients; c++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			// Each client has its own connection, like one app; the clients
			// go round robin over the target's sockets.
			socket := e.clients[c%len(e.clients)].Socket()
			own := ax.New(ax.Config{SocketPath: socket, Timeout: submitTimeout})
			defer own.CloseIdleConnections()
			for seq := 0; time.Now().Before(end); seq++ {
				t0 := time.Now()
				var err error
				if batch == 1 {
					_, err = own.Submit(pctx, ax.SubmitRequest{
						ID: fmt.Sprintf("%s-%d-%d", prefix, c, seq), Handler: handler, Delay: throughputDelay,
					})
				} else {
					items := make([]json.RawMessage, batch)
					for k := range items {
						it := submitItem(fmt.Sprintf("%s-b%d-%d-%d", prefix, c, seq, k), handler)
						it.Delay = new(throughputDelay.String())
						items[k] = raw(it)
					}
					var res []batchResultLite
					res, err = submitBatchLite(pctx, own, items)
					for _, r := range res {
						if r.failed {
							errs.add(r.msg)
						}
					}
				}
				if err != nil {
					if errors.Is(err, context.Canceled) || pctx.Err() != nil {
						return
					}
					errs.add(err.Error())
					continue
				}
				lats[c] = append(lats[c], time.Since(t0))
				reqs.Add(1)
				tasks.Add(int64(batch))
			}
		}()
	}
	wg.Wait()
	elapsed := time.Since(start)
	bar.Stop()
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	var all []time.Duration
	for _, l := range lats {
		all = append(all, l...)
	}
	ph := &ThroughputPhase{Mode: mode, Clients: cfg.Clients, Requests: int(reqs.Load()), Tasks: int(tasks.Load()),
		Elapsed: Millis(elapsed), Latency: Summarize(all), Errors: errs.n, Samples: errs.samples}
	ph.TaskRate = rate(ph.Tasks, elapsed)
	ph.ReqRate = rate(ph.Requests, elapsed)
	return ph, nil
}

type batchResultLite struct {
	failed bool
	msg    string
}

// submitBatchLite sends one batch once (no retry: a busy answer is an
// error of the throughput run) and reports failed items.
func submitBatchLite(ctx context.Context, c *ax.Client, items []json.RawMessage) ([]batchResultLite, error) {
	res, err := postBatch(ctx, c, items)
	if err != nil {
		return nil, err
	}
	out := make([]batchResultLite, len(res))
	for i, r := range res {
		if r.Status != 200 && r.Status != 201 {
			out[i].failed = true
			if r.Error != nil {
				out[i].msg = r.Error.Message
			}
		}
	}
	return out, nil
}

// Print writes the report for people.
func (r *ThroughputReport) Print(w io.Writer) {
	fmt.Fprintf(w, "ax bench throughput: submit rate, %s\n", r.Target)
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "mode\tclients\trequests\ttasks\ttasks/s\trequests/s\tp50 latency\tp99 latency\tmax latency\terrors")
	for _, p := range r.Phases {
		fmt.Fprintf(tw, "%s\t%d\t%d\t%d\t%.0f\t%.0f\t%s\t%s\t%s\t%d\n", p.Mode, p.Clients, p.Requests, p.Tasks,
			p.TaskRate, p.ReqRate, fmtDur(p.Latency.P50), fmtDur(p.Latency.P99), fmtDur(p.Latency.Max), p.Errors)
	}
	tw.Flush()
	for _, p := range r.Phases {
		for _, s := range p.Samples {
			fmt.Fprintf(w, "  error (%s): %s\n", p.Mode, s)
		}
	}
	fmt.Fprintln(w, "  latency: per request (one task, or one batch), until durable on a quorum")
	for _, n := range r.Notes {
		fmt.Fprintf(w, "  %s\n", n)
	}
}
