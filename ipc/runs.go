package ipc

import (
	"context"
	"iter"
	"strconv"
	"strings"

	"github.com/valyala/fasthttp"

	"github.com/axsched/ax/clients/go/axapi"
)

// The run history of a task (docs/DESIGN.md section 12): GET
// /v1/tasks/{id}/runs and GET /v1/tasks/{id}/runs/{run}. Both read the
// node's own state, like GET /v1/tasks/{id}.

// listRuns answers GET /v1/tasks/{id}/runs: {"runs": [...], "next_cursor"}.
func (s *Server) listRuns(rctx context.Context, ctx *fasthttp.RequestCtx, rawID string) error {
	id, err := pathID(rawID)
	if err != nil {
		return err
	}
	args, err := queryArgs(ctx)
	if err != nil {
		return err
	}
	q, err := parseRunsQuery(args)
	if err != nil {
		return err
	}
	page, err := s.backend.Runs(rctx, id, q)
	if err != nil {
		return err
	}
	if page.Runs == nil {
		page.Runs = []Run{}
	}
	s.writeJSON(ctx, fasthttp.StatusOK, page)
	return nil
}

// getRun answers GET /v1/tasks/{id}/runs/{run}, which takes no query
// parameters.
func (s *Server) getRun(rctx context.Context, ctx *fasthttp.RequestCtx, params string) error {
	if err := noQuery(ctx, "GET /v1/tasks/{id}/runs/{run}", ""); err != nil {
		return err
	}
	rawID, rawRun := splitParams(params)
	id, err := pathID(rawID)
	if err != nil {
		return err
	}
	run, err := strconv.Atoi(rawRun)
	if err != nil || run < 1 {
		return Errorf(ErrInvalid, "run: must be a run number from 1, got %q", rawRun)
	}
	r, err := s.backend.Run(rctx, id, run)
	if err != nil {
		return err
	}
	s.writeJSON(ctx, fasthttp.StatusOK, r)
	return nil
}

// RunsCursor returns the cursor of the runs page that follows one whose
// oldest run is run. Cursors are opaque to clients.
func RunsCursor(run int) string { return "r" + strconv.Itoa(run) }

// parseRunsQuery checks the query of GET /v1/tasks/{id}/runs: limit
// (1..axapi.RunsLimitMax, default axapi.RunsLimitDefault) and cursor (made
// by RunsCursor), each at most once; an empty value counts as absent; any
// other parameter is refused.
func parseRunsQuery(args iter.Seq2[[]byte, []byte]) (RunsQuery, error) {
	q := RunsQuery{}
	limit, err := parsePageQuery(args, axapi.RunsLimitDefault, axapi.RunsLimitMax, func(val string) error {
		digits, ok := strings.CutPrefix(val, "r")
		n, err := strconv.Atoi(digits)
		if !ok || err != nil || n < 1 || len(val) > 24 {
			return Errorf(ErrInvalid, "cursor: %.40q is not a cursor of this API (use next_cursor of the previous page)", val)
		}
		q.Before = n
		return nil
	})
	if err != nil {
		return RunsQuery{}, err
	}
	q.Limit = limit
	return q, nil
}

// parsePageQuery reads the query of a paged list that takes only limit
// (1 to limitMax, default limitDefault) and cursor (each at most once; an
// empty value is absent): unknown or repeated parameters and a bad limit
// are 400 bad_request; a cursor goes to cursor, whose error is returned.
func parsePageQuery(args iter.Seq2[[]byte, []byte], limitDefault, limitMax int, cursor func(string) error) (limit int, err error) {
	limit = limitDefault
	seen := map[string]bool{}
	for k, v := range args {
		key, val := string(k), string(v)
		switch key {
		case "limit", "cursor":
		default:
			return 0, Errorf(ErrInvalid, "unknown query parameter %q; known: limit, cursor", key)
		}
		if seen[key] {
			return 0, Errorf(ErrInvalid, "%s: give it at most once", key)
		}
		seen[key] = true
		if val == "" {
			continue
		}
		if key == "cursor" {
			if err := cursor(val); err != nil {
				return 0, err
			}
			continue
		}
		n, err := strconv.Atoi(val)
		if err != nil || n < 1 || n > limitMax {
			return 0, Errorf(ErrInvalid, "limit: must be an integer from 1 to %d, got %q", limitMax, val)
		}
		limit = n
	}
	return limit, nil
}
