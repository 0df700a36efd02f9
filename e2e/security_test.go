package e2e

import (
	"bytes"
	"context"
	"crypto/sha256"
	"crypto/x509"
	"encoding/hex"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/raft"
	"github.com/rs/zerolog"

	"github.com/axsched/ax/e2e/harness"
	"github.com/axsched/ax/sidecar/peertls"
)

// The security suite (issue 15): a mutual-TLS cluster that forms, fires
// and survives a leader kill while a node of another CA, a rogue Raft
// client and a plaintext client get nothing; a token-mode cluster that a
// rogue speaking raw Raft (AppendEntries, RequestVote, InstallSnapshot at a
// higher term) cannot move; and certificate rotation under load.

// secReload is the nodes' --tls-reload-interval in this suite.
const secReload = "200ms"

// secIdentity is a set of TLS files of one CA: every node of a test uses
// the same files (all listen on 127.0.0.1), so rewriting them rotates
// every node's certificate.
type secIdentity struct {
	dir               string
	ca                *peertls.KeyPair
	cert, key, cafile string
}

func newSecCA(t *testing.T, name string) *peertls.KeyPair {
	t.Helper()
	ca, err := peertls.NewCA(name, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	return ca
}

// newSecIdentity writes a node certificate of ca for 127.0.0.1 and
// caBundle (the CA file) into a new directory.
func newSecIdentity(t *testing.T, ca *peertls.KeyPair, caBundle []byte) *secIdentity {
	t.Helper()
	dir := t.TempDir()
	id := &secIdentity{dir: dir, ca: ca, cert: filepath.Join(dir, "node.pem"), key: filepath.Join(dir, "node-key.pem"), cafile: filepath.Join(dir, "ca.pem")}
	id.writeCert(t, ca)
	secWrite(t, id.cafile, caBundle)
	return id
}

// writeCert writes a new key and certificate of ca, each file replaced
// atomically (rename), key first: a node polling in between sees a key
// that does not match the certificate, refuses the set and keeps its old
// one until the next poll.
func (id *secIdentity) writeCert(t *testing.T, ca *peertls.KeyPair) *x509.Certificate {
	t.Helper()
	kp, err := peertls.NewNodeCert(ca, "ax-node", []net.IP{net.ParseIP("127.0.0.1")}, []string{"localhost"}, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	secWrite(t, id.key, kp.KeyPEM)
	secWrite(t, id.cert, kp.CertPEM)
	return kp.Cert
}

func secWrite(t *testing.T, path string, b []byte) {
	t.Helper()
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, b, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
}

func (id *secIdentity) args() []string {
	return []string{"--tls-cert", id.cert, "--tls-key", id.key, "--tls-ca", id.cafile, "--tls-reload-interval", secReload}
}

func (id *secIdentity) reloader(t *testing.T) *peertls.Reloader {
	t.Helper()
	r, err := peertls.NewReloader(peertls.Files{Cert: id.cert, Key: id.key, CA: id.cafile}, zerolog.Nop())
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// peerCall GETs /peer/v1/info from addr over TLS with id's certificate
// (nil: plaintext HTTP); it returns the status and the server's
// certificate, or the error.
func peerCall(id *peertls.Reloader, addr string) (int, *x509.Certificate, error) {
	tr := &http.Transport{DisableKeepAlives: true}
	scheme := "http"
	if id != nil {
		scheme = "https"
		tr.TLSClientConfig = id.ClientConfig("127.0.0.1")
	}
	hc := &http.Client{Transport: tr, Timeout: 5 * time.Second}
	resp, err := hc.Get(scheme + "://" + addr + "/peer/v1/info")
	if err != nil {
		return 0, nil, err
	}
	defer resp.Body.Close()
	io.Copy(io.Discard, resp.Body)
	var cert *x509.Certificate
	if resp.TLS != nil && len(resp.TLS.PeerCertificates) > 0 {
		cert = resp.TLS.PeerCertificates[0]
	}
	return resp.StatusCode, cert, nil
}

// clusterView is what must not move under an attack: each node's term,
// leader and members, and a digest of the task store (ids, states, runs).
type clusterView struct {
	terms   map[string]uint64
	leaders map[string]string
	members string
	digest  string
}

func viewOf(t *testing.T, c *harness.Cluster) clusterView {
	t.Helper()
	v := clusterView{terms: map[string]uint64{}, leaders: map[string]string{}}
	for _, n := range c.Running() {
		info, err := n.Client.Cluster(harness.ReqCtx(t))
		if err != nil {
			t.Fatalf("cluster of %s: %v", n.ID, err)
		}
		v.terms[n.ID], v.leaders[n.ID] = info.Term, info.Leader
		var ms []string
		for _, m := range info.Members {
			ms = append(ms, m.ID+"/"+m.Suffrage+"/"+m.RaftAddr)
		}
		sort.Strings(ms)
		v.members = strings.Join(ms, ",")
	}
	tasks, err := harness.ListTasks(harness.ReqCtx(t), c.Leader().Client, "")
	if err != nil {
		t.Fatal(err)
	}
	h := sha256.New()
	sort.Slice(tasks, func(i, j int) bool { return tasks[i].ID < tasks[j].ID })
	for _, tk := range tasks {
		fmt.Fprintf(h, "%s|%s|%d|%d\n", tk.ID, tk.State, tk.Attempts, tk.Run)
	}
	v.digest = fmt.Sprintf("%d tasks %s", len(tasks), hex.EncodeToString(h.Sum(nil))[:16])
	return v
}

func (v clusterView) String() string {
	return fmt.Sprintf("terms %v leaders %v members [%s] store %s", v.terms, v.leaders, v.members, v.digest)
}

// rogueTerm is the term of every rogue Raft request: a node that took one
// would be at this term or past it.
const rogueTerm = 1_000_000

// movedBy says how after differs from before in what a rogue Raft client
// could have changed: a term at rogueTerm or past it, a leader or member
// that is not of the cluster, other members, and (withStore) another task
// store. A term and leader that changed by an election of the cluster's
// own (a loaded machine can miss a heartbeat) are logged, not refused.
func movedBy(before, after clusterView, withStore bool) error {
	for id, term := range after.terms {
		if term >= rogueTerm {
			return fmt.Errorf("%s is at term %d", id, term)
		}
		if l := after.leaders[id]; l != "" && !strings.Contains(before.members, l+"/") {
			return fmt.Errorf("%s follows leader %q", id, l)
		}
	}
	if after.members != before.members {
		return fmt.Errorf("members changed")
	}
	if withStore && after.digest != before.digest {
		return fmt.Errorf("task store changed")
	}
	return nil
}

// secSubmit submits n tasks due in 1–3 s through running nodes in turn
// (retrying on another node until accepted) and returns id → due time.
func secSubmit(t *testing.T, c *harness.Cluster, prefix string, n int) map[string]time.Time {
	t.Helper()
	due, err := secSubmitE(c, prefix, n)
	if err != nil {
		t.Fatal(err)
	}
	return due
}

// secSubmitE is secSubmit for any goroutine: the error of the first task
// no node accepted.
func secSubmitE(c *harness.Cluster, prefix string, n int) (map[string]time.Time, error) {
	due := map[string]time.Time{}
	for i := 0; i < n; i++ {
		id := fmt.Sprintf("%s-%04d", prefix, i)
		delay := time.Second + time.Duration(i%20)*100*time.Millisecond
		body := harness.SubmitRequest{ID: id, Handler: harness.HandlerOK, Delay: delay.String(), Timeout: "10s"}.Body()
		var err error
		for try := 0; try < 50; try++ {
			nodes := c.Running()
			node := nodes[(i+try)%len(nodes)]
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			var resp *harness.Response
			resp, err = node.Client.Submit(ctx, body)
			cancel()
			if err == nil && (resp.Status == 201 || resp.Status == 200) {
				tk, terr := resp.Task()
				if terr != nil {
					return due, fmt.Errorf("submit %s: reply %s", id, resp)
				}
				switch {
				case tk.NextRunAt != nil:
					due[id] = *tk.NextRunAt
				case resp.Status == 200 && !tk.CreatedAt.IsZero():
					// A resend of a submit that had been applied (its first
					// answer was lost to a leader change): the task may have
					// run already, so it has no next run; it was due its
					// delay after it was created.
					due[id] = tk.CreatedAt.Add(delay)
				default:
					return due, fmt.Errorf("submit %s: reply %s", id, resp)
				}
				break
			}
			if err == nil {
				err = fmt.Errorf("%s", resp)
			}
			time.Sleep(100 * time.Millisecond)
		}
		if _, ok := due[id]; !ok {
			return due, fmt.Errorf("submit %s: %v", id, err)
		}
	}
	return due, nil
}

// secTally waits up to a minute for every task of due to be called back,
// then counts the lost (no callback) and early (a callback before the due
// time) ones, once every called-back task is SUCCESS.
func secTally(t *testing.T, c *harness.Cluster, due map[string]time.Time) (lost, early int) {
	t.Helper()
	ids := make([]string, 0, len(due))
	for id := range due {
		ids = append(ids, id)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	missing := c.Recorder.WaitCalls(ctx, ids, 1)
	lost = len(missing)
	for _, id := range missing[:min(len(missing), 10)] {
		t.Errorf("task %s: no callback", id)
	}
	// Then the outcomes: every called-back task SUCCESS in the store.
	harness.WaitFor(t, 30*time.Second, 100*time.Millisecond, "every called-back task to be SUCCESS", func() error {
		tasks, err := harness.ListTasks(harness.ReqCtx(t), c.Leader().Client, "SUCCESS")
		if err != nil {
			return err
		}
		done := 0
		for _, tk := range tasks {
			if _, ok := due[tk.ID]; ok {
				done++
			}
		}
		if done < len(due)-lost {
			return fmt.Errorf("%d of %d", done, len(due)-lost)
		}
		return nil
	})
	for id, d := range due {
		for _, call := range c.Recorder.Calls(id) {
			if call.At.Before(d) {
				early++
				t.Errorf("task %s: callback at %s, %s before its due time", id, call.At.Format(time.RFC3339Nano), d.Sub(call.At))
			}
		}
	}
	return lost, early
}

// startRogueNode starts an ax node n4 with id's TLS files that tries to
// join the cluster through n1; the test's cleanup kills it.
func startRogueNode(t *testing.T, c *harness.Cluster, extra ...string) *harness.Process {
	t.Helper()
	ports := harness.FreePorts(t, 2)
	dir := t.TempDir()
	args := append([]string{"sidecar", "--node-id", "n4", "--data-dir", filepath.Join(dir, "data"),
		"--socket", filepath.Join(harness.ShortDir(t, dir), "n4.sock"),
		"--raft-addr", fmt.Sprintf("127.0.0.1:%d", ports[0]), "--peer-addr", fmt.Sprintf("127.0.0.1:%d", ports[1]),
		"--join", c.Nodes[0].PeerAddr, "--log-format", "json", "--log-level", "debug"}, extra...)
	p := harness.NewProcess("n4", harness.AxBin, filepath.Join(dir, "n4.log"), args...)
	if err := p.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = p.Kill()
		if t.Failed() {
			t.Logf("----- log of n4 -----\n%s", harness.Tail(p.Logs(), harness.LogDumpMaxBytes))
		}
	})
	return p
}

// waitLog waits until p's log holds want at least n times.
func waitLog(t *testing.T, p *harness.Process, want string, n int, timeout time.Duration) {
	t.Helper()
	harness.WaitFor(t, timeout, 100*time.Millisecond, fmt.Sprintf("%d × %q in the log of %s", n, want, p.Name), func() error {
		if got := strings.Count(p.Logs(), want); got < n {
			return fmt.Errorf("%d times", got)
		}
		return nil
	})
}

// rogueRaft sends AppendEntries (with an entry), RequestVote and
// InstallSnapshot at term 1 000 000, claiming to be node "rogue", to the
// Raft port addr through tr; it returns what was answered (nil errors are
// the attack succeeding).
func rogueRaft(tr *raft.NetworkTransport, id raft.ServerID, addr raft.ServerAddress) map[string]error {
	const term = rogueTerm
	hdr := raft.RPCHeader{ProtocolVersion: raft.ProtocolVersionMax, ID: []byte("rogue"), Addr: []byte(tr.LocalAddr())}
	out := map[string]error{}
	var ae raft.AppendEntriesResponse
	out["AppendEntries"] = tr.AppendEntries(id, addr, &raft.AppendEntriesRequest{RPCHeader: hdr, Term: term, PrevLogEntry: 0, LeaderCommitIndex: 1 << 40,
		Entries: []*raft.Log{{Index: 1 << 30, Term: term, Type: raft.LogCommand, Data: []byte("rogue")}}}, &ae)
	var rv raft.RequestVoteResponse
	out["RequestVote"] = tr.RequestVote(id, addr, &raft.RequestVoteRequest{RPCHeader: hdr, Term: term, LastLogIndex: 1 << 40, LastLogTerm: term}, &rv)
	var is raft.InstallSnapshotResponse
	snap := []byte("not a snapshot")
	out["InstallSnapshot"] = tr.InstallSnapshot(id, addr, &raft.InstallSnapshotRequest{RPCHeader: hdr, SnapshotVersion: raft.SnapshotVersionMax, Term: term,
		Leader: []byte("rogue"), LastLogIndex: 1 << 40, LastLogTerm: term, Size: int64(len(snap))}, &is, bytes.NewReader(snap))
	return out
}

// tlsCluster starts a ready three-node cluster whose nodes share one
// identity of a new CA named caName.
func tlsCluster(t *testing.T, caName string) (*peertls.KeyPair, *secIdentity, *harness.Cluster) {
	t.Helper()
	ca := newSecCA(t, caName)
	id := newSecIdentity(t, ca, ca.CertPEM)
	c := harness.NewCluster(t, harness.WithSize(3), harness.WithArgs(id.args()...))
	c.WaitReady()
	return ca, id, c
}

// authRaftTransport is a raft transport on 127.0.0.1 over a peertls
// stream layer with auth; the test's cleanup closes it.
func authRaftTransport(t *testing.T, auth peertls.Authenticator) *raft.NetworkTransport {
	t.Helper()
	sl, err := peertls.Listen(peertls.StreamConfig{Bind: "127.0.0.1:0", Auth: auth, Log: zerolog.Nop()})
	if err != nil {
		t.Fatal(err)
	}
	tr := raft.NewNetworkTransport(sl, 1, 5*time.Second, io.Discard)
	t.Cleanup(func() { tr.Close() })
	return tr
}

func plainRaftTransport(t *testing.T) *raft.NetworkTransport {
	t.Helper()
	tr, err := raft.NewTCPTransport("127.0.0.1:0", nil, 1, 5*time.Second, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { tr.Close() })
	return tr
}

// TestSecurity_MutualTLSCluster: a three-node cluster with mutual TLS
// forms, fires its tasks and survives a leader kill; a fourth node whose
// certificate is of another CA cannot join, cannot speak Raft and cannot
// call the peer API; plaintext clients (HTTP and raw Raft) get nothing.
func TestSecurity_MutualTLSCluster(t *testing.T) {
	harness.SkipShort(t)
	t.Parallel()
	ca, id, c := tlsCluster(t, "cluster CA")

	first := secSubmit(t, c, "tls1", 60)
	old := c.Leader()
	before := viewOf(t, c)

	// The outsiders.
	otherCA := newSecCA(t, "another CA")
	rogueID := newSecIdentity(t, otherCA, append(append([]byte{}, otherCA.CertPEM...), ca.CertPEM...))
	rogue := startRogueNode(t, c, rogueID.args()...)
	// Its join requests die in the TLS handshake: n1 refuses its
	// certificate and logs it.
	waitLog(t, c.Nodes[0].Process, "peer API: connection refused: it did not authenticate", 1, 30*time.Second)
	rogueTLS := rogueID.reloader(t)
	for _, n := range c.Nodes {
		if st, _, err := peerCall(rogueTLS, n.PeerAddr); err == nil {
			t.Errorf("%s peer API: a certificate of another CA got HTTP %d", n.ID, st)
		}
		if st, _, err := peerCall(nil, n.PeerAddr); err == nil {
			t.Errorf("%s peer API: a plaintext client got HTTP %d", n.ID, st)
		}
		if st, cert, err := peerCall(id.reloader(t), n.PeerAddr); err != nil || st != 200 || cert == nil {
			t.Errorf("%s peer API: a certificate of the cluster's CA: %d, %v", n.ID, st, err)
		}
		tlsRogue := authRaftTransport(t, peertls.TLSAuth{R: rogueTLS})
		for name, tr := range map[string]*raft.NetworkTransport{"another CA": tlsRogue, "plaintext": plainRaftTransport(t)} {
			for rpc, err := range rogueRaft(tr, raft.ServerID(n.ID), raft.ServerAddress(n.RaftAddr)) {
				if err == nil {
					t.Errorf("%s Raft port: %s client's %s was answered", n.ID, name, rpc)
				}
			}
		}
	}
	if strings.Contains(rogue.Logs(), "joined the cluster") {
		t.Error("n4, of another CA, joined the cluster")
	}
	after := viewOf(t, c)
	if err := movedBy(before, after, false); err != nil {
		t.Errorf("the outsiders moved the cluster: %v\n before %s\n after  %s", err, before, after)
	}
	if fmt.Sprint(after.terms, after.leaders) != fmt.Sprint(before.terms, before.leaders) {
		t.Logf("an election of the cluster's own happened meanwhile (terms below %d)", rogueTerm)
	}
	t.Logf("after the outsiders: %s", after)
	if lost, early := secTally(t, c, first); lost+early > 0 {
		t.Fatalf("before the kill: lost %d, early %d", lost, early)
	}

	// Leader kill: the two others elect a leader over TLS and fire.
	second := secSubmit(t, c, "tls2", 60)
	if err := old.Kill(); err != nil {
		t.Fatal(err)
	}
	nl := c.WaitForNewLeader(old)
	third := secSubmit(t, c, "tls3", 60)
	lost, early := secTally(t, c, second)
	l3, e3 := secTally(t, c, third)
	t.Logf("mTLS cluster: killed leader %s, new leader %s; before the kill %d tasks, across it %d, after it %d: lost %d, early %d",
		old.ID, nl.ID, len(first), len(second), len(third), lost+l3, early+e3)
}

// TestSecurity_TokenRaftPort: with --cluster-token and no TLS, a rogue
// process that speaks hashicorp/raft's wire protocol to every node's Raft
// port without the handshake (AppendEntries with an entry, RequestVote and
// InstallSnapshot, all at term 1 000 000) is refused: the terms, the
// leader, the members and the task store do not change, and the cluster
// still fires.
func TestSecurity_TokenRaftPort(t *testing.T) {
	harness.SkipShort(t)
	t.Parallel()
	c := harness.NewCluster(t, harness.WithSize(3), harness.WithArgs("--cluster-token", "e2e-s3cret"))
	c.WaitReady()
	due := secSubmit(t, c, "tok1", 30)
	if lost, early := secTally(t, c, due); lost+early > 0 {
		t.Fatalf("before the attack: lost %d, early %d", lost, early)
	}
	before := viewOf(t, c)
	rogue := plainRaftTransport(t)
	// And one that knows the protocol but not the token.
	guessTr := authRaftTransport(t, peertls.TokenAuth{Token: []byte("guess")})
	refused := 0
	for _, n := range c.Nodes {
		for name, tr := range map[string]*raft.NetworkTransport{"no handshake": rogue, "wrong token": guessTr} {
			for rpc, err := range rogueRaft(tr, raft.ServerID(n.ID), raft.ServerAddress(n.RaftAddr)) {
				if err == nil {
					t.Errorf("%s: the rogue's %s (%s) was answered", n.ID, rpc, name)
				} else {
					refused++
				}
			}
		}
	}
	for _, n := range c.Nodes {
		waitLog(t, n.Process, "raft port: connection refused", 1, 10*time.Second)
	}
	after := viewOf(t, c)
	if err := movedBy(before, after, true); err != nil {
		t.Errorf("the rogue moved the cluster: %v\n before %s\n after  %s", err, before, after)
	}
	if fmt.Sprint(after.terms, after.leaders) != fmt.Sprint(before.terms, before.leaders) {
		t.Logf("an election of the cluster's own happened meanwhile (terms below %d)", rogueTerm)
	}
	more := secSubmit(t, c, "tok2", 30)
	lost, early := secTally(t, c, more)
	for _, n := range c.Nodes {
		if !n.Running() {
			t.Errorf("%s exited", n.ID)
		}
	}
	t.Logf("token mode: %d rogue RPCs refused; cluster before and after: %s; tasks after the attack: lost %d, early %d", refused, after, lost, early)
}

// TestSecurity_CertificateRotationUnderLoad replaces the certificate
// files of every node while tasks are submitted and fire: first a new key
// under the same CA, then a CA bundle that adds a new CA, then
// certificates of the new CA. No node restarts; each serves its new
// certificate on the peer API; no task is lost or fires early.
func TestSecurity_CertificateRotationUnderLoad(t *testing.T) {
	harness.SkipShort(t)
	t.Parallel()
	ca1, id, c := tlsCluster(t, "CA 1")
	pids := map[string]string{}
	for _, n := range c.Nodes {
		pids[n.ID] = fmt.Sprint(n.Exited())
	}

	stop := make(chan struct{})
	type batch struct {
		due map[string]time.Time
		err error
	}
	batches := make(chan batch, 256)
	go func() {
		defer close(batches)
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			due, err := secSubmitE(c, fmt.Sprintf("rot%03d", i), 20)
			batches <- batch{due, err}
			if err != nil {
				return
			}
		}
	}()
	t.Cleanup(func() {
		select {
		case <-stop:
		default:
			close(stop)
		}
		for range batches {
		}
	})

	// wantServed waits until every node's peer API serves a certificate
	// whose serial is want's, to a client of client.
	wantServed := func(step string, want *x509.Certificate, client *peertls.Reloader) {
		for _, n := range c.Nodes {
			harness.WaitFor(t, 20*time.Second, 100*time.Millisecond, step+": "+n.ID+" serves the new certificate", func() error {
				_, cert, err := peerCall(client, n.PeerAddr)
				if err != nil {
					return err
				}
				if cert.SerialNumber.Cmp(want.SerialNumber) != 0 {
					return fmt.Errorf("serves serial %s", cert.SerialNumber.Text(16))
				}
				return nil
			})
		}
	}
	time.Sleep(time.Second)
	// 1. New key, same CA.
	newKey := id.writeCert(t, ca1)
	wantServed("new key", newKey, id.reloader(t))
	time.Sleep(time.Second)
	// 2. A bundle of the old and a new CA.
	ca2 := newSecCA(t, "CA 2")
	secWrite(t, id.cafile, append(append([]byte{}, ca1.CertPEM...), ca2.CertPEM...))
	for _, n := range c.Nodes {
		waitLog(t, n.Process, "tls: certificate files changed", 2, 20*time.Second)
	}
	time.Sleep(time.Second)
	// 3. Certificates of the new CA.
	newCA := id.writeCert(t, ca2)
	wantServed("new CA", newCA, id.reloader(t))
	// A client with a certificate of the new CA only is accepted too.
	only2 := newSecIdentity(t, ca2, ca2.CertPEM)
	for _, n := range c.Nodes {
		if st, _, err := peerCall(only2.reloader(t), n.PeerAddr); err != nil || st != 200 {
			t.Errorf("%s: a client of CA 2 only: %d, %v", n.ID, st, err)
		}
	}
	// And the Raft ports take its new connections: an AppendEntries from
	// node "probe" (harmless: not a member, and of a stale term) is read
	// past the TLS handshake and answered with the node's refusal.
	only2Raft := authRaftTransport(t, peertls.TLSAuth{R: only2.reloader(t)})
	for _, n := range c.Nodes {
		var resp raft.AppendEntriesResponse
		err := only2Raft.AppendEntries(raft.ServerID(n.ID), raft.ServerAddress(n.RaftAddr), &raft.AppendEntriesRequest{
			RPCHeader: raft.RPCHeader{ProtocolVersion: raft.ProtocolVersionMax, ID: []byte("probe"), Addr: []byte(only2Raft.LocalAddr())}, Term: 0}, &resp)
		if err == nil || !strings.Contains(err.Error(), "not a member of this node's cluster") || resp.Success {
			t.Errorf("%s Raft port, a CA 2 client: %v, %+v; want the node's refusal of a non-member", n.ID, err, resp)
		}
	}
	time.Sleep(2 * time.Second)
	close(stop)
	due := map[string]time.Time{}
	for b := range batches {
		for k, v := range b.due {
			due[k] = v
		}
		if b.err != nil {
			t.Errorf("submits during the rotation: %v", b.err)
		}
	}
	lost, early := secTally(t, c, due)
	for _, n := range c.Nodes {
		if !n.Running() || fmt.Sprint(n.Exited()) != pids[n.ID] {
			t.Errorf("%s restarted or exited during the rotation", n.ID)
		}
	}
	refused := 0
	for _, n := range c.Nodes {
		refused += strings.Count(n.Logs(), "new certificate files refused")
	}
	t.Logf("rotation under load: %d tasks submitted during three rotations; lost %d, early %d; half-written sets refused and retried: %d",
		len(due), lost, early, refused)
}
