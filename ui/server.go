package ui

import (
	"bytes"
	"context"
	"embed"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"html/template"
	"io/fs"
	"net"
	"net/http"
	"strings"
	"time"
)

//go:embed assets
var assets embed.FS

// pageNames are the templates of assets/: each defines "content", rendered
// inside layout.html (or alone, for a live update).
var pageNames = []string{"cluster", "handlers", "tasks", "task", "dead", "flows", "flow", "login"}

// Server is the dashboard: an http.Handler over one node's socket API.
type Server struct {
	opts    Options
	api     *api
	sampler *sampler
	pages   map[string]*template.Template
	mux     *http.ServeMux
	// session is the value of the session cookie when Token is set:
	// derived from the token, so every login gets the same one and a
	// restart keeps them valid (see auth.go).
	session string
}

// New checks opts and returns a Server; it does not listen (see Serve).
func New(opts Options) (*Server, error) {
	opts = opts.WithDefaults()
	if err := opts.Validate(); err != nil {
		return nil, err
	}
	s := &Server{
		opts:    opts,
		api:     newAPI(opts.Socket, opts.APITimeout),
		sampler: newSampler(opts.SampleWindow),
		pages:   map[string]*template.Template{},
		mux:     http.NewServeMux(),
	}
	if opts.Token != "" {
		s.session = sessionValue(opts.Token)
	}
	for _, name := range pageNames {
		t, err := template.New(name).Funcs(funcs).ParseFS(assets, "assets/layout.html", "assets/"+name+".html")
		if err != nil {
			return nil, fmt.Errorf("ui: template %s: %w", name, err)
		}
		s.pages[name] = t
	}
	s.routes()
	return s, nil
}

func (s *Server) routes() {
	static, _ := fs.Sub(assets, "assets/static")
	s.mux.Handle("GET /static/", http.StripPrefix("/static/", http.FileServer(http.FS(static))))
	s.mux.HandleFunc("GET /{$}", func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, "/cluster", http.StatusSeeOther)
	})
	s.mux.HandleFunc("GET /login", s.loginPage)
	s.mux.HandleFunc("POST /login", s.login)
	s.mux.HandleFunc("POST /logout", s.logout)
	s.mux.HandleFunc("GET /cluster", s.clusterPage)
	s.mux.HandleFunc("GET /handlers", s.handlersPage)
	s.mux.HandleFunc("POST /handlers/{name}/{action}", s.handlerAction)
	s.mux.HandleFunc("GET /tasks", s.tasksPage)
	s.mux.HandleFunc("GET /tasks/{id}", s.taskPage)
	s.mux.HandleFunc("POST /tasks/{id}/{action}", s.taskAction)
	s.mux.HandleFunc("GET /flows", s.flowsPage)
	s.mux.HandleFunc("GET /flows/{id}", s.flowPage)
	s.mux.HandleFunc("POST /flows/{id}/{action}", s.flowAction)
	s.mux.HandleFunc("GET /dead", s.deadPage)
	s.mux.HandleFunc("POST /dead/{action}", s.deadAction)
}

// ServeHTTP applies the security headers, the Host check, the token and
// CSRF checks, then routes.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	h := w.Header()
	h.Set("Content-Security-Policy", "default-src 'self'; img-src 'self' data:; frame-ancestors 'none'; form-action 'self'; base-uri 'none'")
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Referrer-Policy", "same-origin")
	h.Set("X-Frame-Options", "DENY")
	h.Set("Cache-Control", "no-store")
	if s.opts.Token == "" && !loopbackHost(r.Host) {
		// Without a token the dashboard trusts whoever reaches loopback;
		// a Host that is not loopback is a DNS-rebinding page's.
		http.Error(w, "Host must be a loopback address (this dashboard has no --ui-token)", http.StatusMisdirectedRequest)
		return
	}
	if !s.authenticated(r) && !strings.HasPrefix(r.URL.Path, "/static/") && r.URL.Path != "/login" {
		s.unauthorized(w, r)
		return
	}
	if r.Method == http.MethodPost {
		r.Body = http.MaxBytesReader(w, r.Body, postBodyMax)
	}
	if r.Method == http.MethodPost && r.URL.Path != "/login" && !s.bearer(r) {
		if err := s.checkCSRF(r); err != nil {
			http.Error(w, "forbidden: "+err.Error(), http.StatusForbidden)
			return
		}
	}
	s.mux.ServeHTTP(w, r)
}

func loopbackHost(hostport string) bool {
	host, _, err := net.SplitHostPort(hostport)
	if err != nil {
		host = hostport
	}
	return IsLoopback(host)
}

// Serve samples the node's metrics and serves ln until ctx ends, then
// shuts the server down (bounded by 5 s).
func (s *Server) Serve(ctx context.Context, ln net.Listener) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go s.sampler.run(ctx, s.api, s.opts.SampleInterval, s.opts.Logf)
	srv := &http.Server{
		Handler:           s,
		ReadHeaderTimeout: 10 * time.Second,
		ReadTimeout:       30 * time.Second,
		WriteTimeout:      60 * time.Second,
		IdleTimeout:       2 * time.Minute,
		MaxHeaderBytes:    64 << 10,
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		<-ctx.Done()
		sctx, scancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer scancel()
		_ = srv.Shutdown(sctx)
	}()
	err := srv.Serve(ln)
	cancel()
	<-done
	s.api.close()
	if errors.Is(err, http.ErrServerClosed) {
		return nil
	}
	return err
}

// Listen opens the dashboard's TCP listener at Options.Addr (after the
// checks of New), so that a caller can fail before starting anything else.
func Listen(opts Options) (*Server, net.Listener, error) {
	s, err := New(opts)
	if err != nil {
		return nil, nil, err
	}
	ln, err := net.Listen("tcp", s.opts.Addr)
	if err != nil {
		return nil, nil, fmt.Errorf("ui: listen on %s: %w", s.opts.Addr, err)
	}
	return s, ln, nil
}

// postBodyMax bounds a form's body (a bulk retry of bulkMax ids of
// IDMaxBytes each fits).
const postBodyMax = 256 << 10

// view is what every page template gets.
type view struct {
	Title string
	Nav   string // the nav entry to highlight
	Flash string
	Error string // an API error or a bad input, shown in a banner
	CSRF  string
	Login bool // a token is set: show "log out"
	Path  string
	Data  any
}

// render writes page name with data; a request with the X-Ax-Partial
// header (app.js's live update) gets only the page's content.
func (s *Server) render(w http.ResponseWriter, r *http.Request, name string, status int, v view) {
	v.CSRF = s.csrfToken(w, r)
	v.Login = s.opts.Token != ""
	v.Path = r.URL.RequestURI()
	tmpl := "layout"
	if r.Header.Get("X-Ax-Partial") != "" {
		tmpl = "content"
	} else if f, ok := takeFlash(w, r); ok {
		v.Flash = f.Flash
		if v.Error == "" {
			v.Error = f.Error
		}
	}
	var buf bytes.Buffer
	if err := s.pages[name].ExecuteTemplate(&buf, tmpl, v); err != nil {
		s.opts.Logf("ui: render %s: %v", name, err)
		http.Error(w, "render error", http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.WriteHeader(status)
	_, _ = w.Write(buf.Bytes())
}

// flashCookie carries the outcome of an action to the page it redirects
// to (a query parameter would let any link put words on the page).
const flashCookie = "ax_ui_flash"

// flashMaxBytes bounds a flash message.
const flashMaxBytes = 1000

type flash struct {
	Flash string `json:"f,omitempty"`
	Error string `json:"e,omitempty"`
}

// takeFlash returns the flash cookie's message and clears the cookie.
func takeFlash(w http.ResponseWriter, r *http.Request) (flash, bool) {
	c, err := r.Cookie(flashCookie)
	if err != nil {
		return flash{}, false
	}
	http.SetCookie(w, &http.Cookie{Name: flashCookie, Value: "", Path: "/", MaxAge: -1, HttpOnly: true, SameSite: http.SameSiteStrictMode})
	var f flash
	b, err := base64.RawURLEncoding.DecodeString(c.Value)
	if err != nil || json.Unmarshal(b, &f) != nil {
		return flash{}, false
	}
	return f, true
}

// done ends an action (POST, redirect, GET): it redirects to back, a path
// of this server, with the action's outcome in the flash cookie.
func done(w http.ResponseWriter, r *http.Request, back, msg string, err error) {
	f := flash{Flash: msg}
	if err != nil {
		f = flash{Error: err.Error()}
	}
	if len(f.Error) > flashMaxBytes {
		f.Error = f.Error[:flashMaxBytes] + "…"
	}
	b, _ := json.Marshal(f)
	http.SetCookie(w, &http.Cookie{Name: flashCookie, Value: base64.RawURLEncoding.EncodeToString(b), Path: "/", MaxAge: 60, HttpOnly: true, SameSite: http.SameSiteStrictMode, Secure: r.TLS != nil})
	http.Redirect(w, r, localPath(back), http.StatusSeeOther)
}
