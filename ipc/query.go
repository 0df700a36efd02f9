package ipc

import (
	"bytes"
	"iter"

	"github.com/valyala/fasthttp"
)

// queryArgs returns the parameters of the request's query string, in
// order and decoded by fasthttp, once checkQuery has taken the raw string:
// every route that reads its query reads it through here (or onlyParam,
// noQuery), so that a malformed one is refused alike everywhere.
func queryArgs(ctx *fasthttp.RequestCtx) (iter.Seq2[[]byte, []byte], error) {
	if err := checkQuery(ctx.URI().QueryString()); err != nil {
		return nil, err
	}
	return ctx.QueryArgs().All(), nil
}

// checkQuery refuses, with ErrInvalid, a raw query string that fasthttp
// would have decoded leniently: a percent escape without two hex digits
// after the % (?handler=a%2 and %zz were taken as the bytes sent, so a
// client's broken escaping listed another handler's tasks, or none), and
// a parameter without a name (?= was dropped, ?=x refused only as the
// unknown parameter ""). Empty parameters (?&, a trailing &) carry
// nothing and pass, as they do in Go's url.ParseQuery. The message gives
// the place, not the request's bytes but the escape itself.
func checkQuery(raw []byte) error {
	for i := 0; i < len(raw); i++ {
		if raw[i] == '%' && (i+2 >= len(raw) || !isHexDigit(raw[i+1]) || !isHexDigit(raw[i+2])) {
			return Errorf(ErrInvalid, "query: bad percent escape %q at byte %d of the query string: want %% and two hex digits (%%25 for %% itself)",
				raw[i:min(i+3, len(raw))], i)
		}
	}
	n := 0
	for p := range bytes.SplitSeq(raw, []byte("&")) {
		if len(p) == 0 {
			continue
		}
		n++
		if p[0] == '=' {
			return Errorf(ErrInvalid, "query: parameter %d has no name (it starts with '='): want name=value", n)
		}
	}
	return nil
}

func isHexDigit(c byte) bool {
	return c >= '0' && c <= '9' || c >= 'a' && c <= 'f' || c >= 'A' && c <= 'F'
}

// noQuery refuses any query parameter on a route that takes none (what:
// the route, for the message, hint: a way out, or ""), after checkQuery.
func noQuery(ctx *fasthttp.RequestCtx, what, hint string) error {
	if err := checkQuery(ctx.URI().QueryString()); err != nil {
		return err
	}
	if ctx.QueryArgs().Len() == 0 {
		return nil
	}
	msg := what + " takes no query parameters, got %q"
	if hint != "" {
		msg += ": " + hint
	}
	return Errorf(ErrInvalid, msg, ctx.QueryArgs().String())
}
