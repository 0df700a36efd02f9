"""A plain standard-library webhook receiver for e2e/alert_test.go: it
listens on 127.0.0.1 (a free port), prints "port N", then one JSON line per
POST it receives ({"path", "headers", "body"}) and answers 200.

    alert_receiver.py
"""

import http.server
import json
import sys


class Handler(http.server.BaseHTTPRequestHandler):
    def do_POST(self):
        n = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(n) if n else b""
        rec = {"path": self.path, "headers": {k: v for k, v in self.headers.items()}, "body": json.loads(body or b"null")}
        sys.stdout.write(json.dumps(rec) + "\n")
        sys.stdout.flush()
        self.send_response(200)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, *args):
        pass


srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
sys.stdout.write("port %d\n" % srv.server_address[1])
sys.stdout.flush()
srv.serve_forever()
