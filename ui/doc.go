// Package ui is ax's dashboard: a small web server that shows one node's
// view of the cluster, its handlers, tasks, flows and dead letters, and
// lets a person pause and resume handlers, cancel, retry and purge tasks
// and cancel flows.
//
// # What it owns
//
//   - Options and their check (Options.Validate): the dashboard binds to
//     loopback unless a token is given.
//   - The HTTP server (Server): pages rendered on the server with
//     html/template, the token login (bearer header or a cookie set by a
//     login form, compared in constant time), CSRF protection of every
//     POST (a SameSite=Strict cookie whose value each form carries back),
//     and a short ring buffer of the node's /metrics (sampler.go) for the
//     lateness chart and attempt rates.
//   - The assets (assets/: templates, one stylesheet, one script),
//     embedded with go:embed: no network fetch, no CDN.
//
// # What it may import
//
// Only the standard library and clients/go/axapi (the wire types of the
// socket API). Every read and every action goes through the node's Unix
// socket API, the same HTTP/JSON API and rules applications use: the UI
// server is a client of that socket (api.go), never of sidecar's packages,
// so it has no second write path. `ax sidecar --ui-addr` dials the node's
// own socket; `ax ui --socket` any running node's.
//
// # Live updates
//
// Pages are complete HTML without JavaScript. assets/app.js adds live
// updates by polling: every 2 s it asks for the same page with the header
// X-Ax-Partial and swaps in the fragment; at most one request is in flight,
// it stops while the tab is hidden and while the user is editing a form of
// the page, and it backs off (up to 30 s) after errors. Polling was chosen
// over server-sent events because it needs no long-lived connections and
// no per-client state in the server, and is bounded by construction.
//
// # Limits of what it shows
//
// The lateness chart and the attempt rates come from the /metrics of the
// node the UI talks to (its attempts and callbacks), sampled every 5 s
// and kept for 10 minutes in memory; counts, backlogs and circuits come
// from GET /v1/handlers (the leader's view). The task list reads one page
// of GET /v1/tasks per request, never the whole list; a filter that
// matches little (a rare state, a label, an id prefix: the last two are
// applied by the dashboard, the API has no such filter) reads further
// pages, bounded in number and time (taskListScanMax, taskListBudget),
// and offers to go on from where it stopped. A task page reads one page
// of its run history (runsShown runs of GET /v1/tasks/{id}/runs, newest
// first) and links to the older ones by the API's cursor; it shows at most
// resultShownMax bytes of a run's result. A node without the route (older
// than the run history) gets "no history". The flows list reads one page
// of GET /v1/flows (flowsShown) and links to the next by the API's
// cursor; a flow page reads GET /v1/flows/{id}. A node without the flows
// routes gets "no flows API".
package ui
