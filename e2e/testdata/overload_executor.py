"""A plain standard-library executor for e2e/overload_test.go: socketserver's
ThreadingMixIn with its default listen backlog of 5, HTTP/1.0 (a connection
per callback), each callback sleeping SLEEP seconds and answering 200.

    overload_executor.py unix /path/to.sock SLEEP
    overload_executor.py tcp PORT SLEEP
    overload_executor.py worker /path/to.sock SLEEP   (axsched.Worker, max_threads=100,
                                                       registers itself with $AX_SOCKET)
"""

import http.server
import os
import socketserver
import sys
import time

mode, addr, sleep = sys.argv[1], sys.argv[2], float(sys.argv[3])


class Handler(http.server.BaseHTTPRequestHandler):
    def do_POST(self):
        n = int(self.headers.get("Content-Length") or 0)
        if n:
            self.rfile.read(n)
        time.sleep(sleep)
        self.send_response(200)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, *args):
        pass


if mode == "worker":
    from axsched import Worker

    w = Worker(socket_path=os.environ["AX_SOCKET"], listen=addr, name="ov-worker", max_threads=100)

    @w.handler("ov.sleep")
    def handle(d):
        time.sleep(sleep)

    w.start()
    print("ready", flush=True)
    while True:
        time.sleep(3600)

if mode == "unix":
    class Server(socketserver.ThreadingMixIn, socketserver.UnixStreamServer):
        daemon_threads = True

    if os.path.exists(addr):
        os.unlink(addr)
    srv = Server(addr, Handler)
else:
    class Server(socketserver.ThreadingMixIn, socketserver.TCPServer):
        daemon_threads = True
        allow_reuse_address = True

    srv = Server(("127.0.0.1", int(addr)), Handler)
print("ready", flush=True)
srv.serve_forever()
