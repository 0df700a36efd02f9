# submit-python.py SOCK SECONDS THREADS [PREFIX]: single submits to an ax node over its Unix
# socket with the standard library (http.client, one connection per thread), due in
# 24 h, ids PREFIX/thread/n (PREFIX "py": give each of several clients its own); prints the
# acknowledged submits (201) and their rate. A client that is not
# ours, for A/Bs of the node (docs/perf/README.md, "Twentieth session").
import http.client, socket, sys, threading, time, json
sock, dur, n = sys.argv[1], float(sys.argv[2]), int(sys.argv[3])
prefix = sys.argv[4] if len(sys.argv) > 4 else "py"
class UC(http.client.HTTPConnection):
    def __init__(self): super().__init__("ax")
    def connect(self):
        self.sock = socket.socket(socket.AF_UNIX); self.sock.connect(sock)
ok = [0]*n; bad = [0]*n
stop = time.time() + dur
def run(w):
    c = UC(); i = 0
    while time.time() < stop:
        c.request("POST", "/v1/tasks", json.dumps({"id": "%s/%d/%d" % (prefix, w, i), "handler": "py.h", "delay": "24h"}), {"Content-Type": "application/json"})
        r = c.getresponse(); r.read()
        if r.status == 201: ok[w] += 1
        else: bad[w] += 1
        i += 1
t0 = time.time()
ts = [threading.Thread(target=run, args=(w,)) for w in range(n)]
[t.start() for t in ts]; [t.join() for t in ts]
print("%d ok %d bad %.0f/s" % (sum(ok), sum(bad), sum(ok)/(time.time()-t0)))
