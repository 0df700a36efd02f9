package ui

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"net/http"
	"net/url"
	"strings"
)

// Cookie names.
const (
	sessionCookie = "ax_ui_session"
	csrfCookie    = "ax_ui_csrf"
)

// sessionValue is the session cookie's value for a token: an HMAC of a
// fixed text under the token, so the cookie does not carry the token and
// a new token ends every session.
func sessionValue(token string) string {
	m := hmac.New(sha256.New, []byte(token))
	m.Write([]byte("ax ui session v1"))
	return hex.EncodeToString(m.Sum(nil))
}

// equal compares two secrets in constant time (of their hashes, so that
// the length does not show either).
func equal(a, b string) bool {
	ha, hb := sha256.Sum256([]byte(a)), sha256.Sum256([]byte(b))
	return subtle.ConstantTimeCompare(ha[:], hb[:]) == 1
}

// bearer reports whether r carries "Authorization: Bearer TOKEN" with the
// right token.
func (s *Server) bearer(r *http.Request) bool {
	if s.opts.Token == "" {
		return false
	}
	v, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
	return ok && equal(strings.TrimSpace(v), s.opts.Token)
}

// authenticated: no token is set, or r has the bearer token or the
// session cookie.
func (s *Server) authenticated(r *http.Request) bool {
	if s.opts.Token == "" || s.bearer(r) {
		return true
	}
	c, err := r.Cookie(sessionCookie)
	return err == nil && equal(c.Value, s.session)
}

// unauthorized answers 401: the login form for a page, a line otherwise.
func (s *Server) unauthorized(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("WWW-Authenticate", `Bearer realm="ax dashboard"`)
	if r.Method != http.MethodGet || r.Header.Get("X-Ax-Partial") != "" {
		http.Error(w, "unauthorized: log in, or send Authorization: Bearer TOKEN", http.StatusUnauthorized)
		return
	}
	s.render(w, r, "login", http.StatusUnauthorized, view{Title: "Log in", Data: loginData{Next: r.URL.RequestURI()}})
}

type loginData struct{ Next string }

func (s *Server) loginPage(w http.ResponseWriter, r *http.Request) {
	if s.opts.Token == "" || s.authenticated(r) {
		http.Redirect(w, r, "/cluster", http.StatusSeeOther)
		return
	}
	s.render(w, r, "login", http.StatusOK, view{Title: "Log in", Data: loginData{Next: r.URL.Query().Get("next")}})
}

// login checks the form's token and sets the session cookie.
func (s *Server) login(w http.ResponseWriter, r *http.Request) {
	if s.opts.Token == "" {
		http.Redirect(w, r, "/cluster", http.StatusSeeOther)
		return
	}
	if err := sameOrigin(r); err != nil {
		http.Error(w, "forbidden: "+err.Error(), http.StatusForbidden)
		return
	}
	r.Body = http.MaxBytesReader(w, r.Body, 8<<10)
	next := localPath(r.PostFormValue("next"))
	if !equal(r.PostFormValue("token"), s.opts.Token) {
		s.render(w, r, "login", http.StatusUnauthorized, view{Title: "Log in", Error: "wrong token", Data: loginData{Next: next}})
		return
	}
	http.SetCookie(w, &http.Cookie{Name: sessionCookie, Value: s.session, Path: "/", HttpOnly: true, SameSite: http.SameSiteStrictMode, Secure: r.TLS != nil})
	http.Redirect(w, r, next, http.StatusSeeOther)
}

func (s *Server) logout(w http.ResponseWriter, r *http.Request) {
	http.SetCookie(w, &http.Cookie{Name: sessionCookie, Value: "", Path: "/", MaxAge: -1, HttpOnly: true, SameSite: http.SameSiteStrictMode})
	http.Redirect(w, r, "/login", http.StatusSeeOther)
}

// localPath returns p when it is a path on this server, else "/cluster".
func localPath(p string) string {
	u, err := url.Parse(p)
	if p == "" || err != nil || u.IsAbs() || u.Host != "" || !strings.HasPrefix(u.Path, "/") || strings.HasPrefix(p, "//") || strings.HasPrefix(u.Path, "/login") {
		return "/cluster"
	}
	return u.RequestURI()
}

// csrfToken returns the CSRF token of r's browser, setting the cookie
// when it has none. Forms carry it back in the field "csrf".
func (s *Server) csrfToken(w http.ResponseWriter, r *http.Request) string {
	if c, err := r.Cookie(csrfCookie); err == nil && len(c.Value) == 43 {
		return c.Value
	}
	b := make([]byte, 32)
	_, _ = rand.Read(b)
	v := base64.RawURLEncoding.EncodeToString(b)
	http.SetCookie(w, &http.Cookie{Name: csrfCookie, Value: v, Path: "/", HttpOnly: true, SameSite: http.SameSiteStrictMode, Secure: r.TLS != nil})
	r.AddCookie(&http.Cookie{Name: csrfCookie, Value: v})
	return v
}

// checkCSRF accepts a POST only from this server's own pages: same origin
// (when the browser says), and the form's csrf field equal to the
// SameSite=Strict cookie another site's page can neither read nor send.
func (s *Server) checkCSRF(r *http.Request) error {
	if err := sameOrigin(r); err != nil {
		return err
	}
	c, err := r.Cookie(csrfCookie)
	if err != nil || c.Value == "" {
		return errors.New("no CSRF cookie: reload the page")
	}
	if !equal(r.PostFormValue("csrf"), c.Value) {
		return errors.New("CSRF token does not match: reload the page")
	}
	return nil
}

// sameOrigin refuses a request a browser marks as sent by another site.
func sameOrigin(r *http.Request) error {
	switch r.Header.Get("Sec-Fetch-Site") {
	case "", "same-origin", "none":
	default:
		return errors.New("cross-site request")
	}
	if o := r.Header.Get("Origin"); o != "" && o != "null" {
		u, err := url.Parse(o)
		if err != nil || u.Host != r.Host {
			return errors.New("cross-origin request")
		}
	}
	return nil
}
